"""MLPerf Server (and Interactive) rows: LoadGen's single-sample queries at the row's scheduled
rate, priced by `mlperf_rows.predict_server` (a row with scenario `online_poisson` and an MLPerf
dataset). The steady-state reading is checked by hand on a made-up run; the whole path on a
hand-made row of the v5.1 Llama-3.1-8B benchmark."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from simulator.analysis import mlperf_rows
from simulator.analysis import validate as V


def test_steady_state_numbers_by_hand() -> None:
    """10 samples arriving at t = 0, 1, ..., 9 s, 11 tokens each, each with its first token 0.1 s
    and its last 1.0 s after it arrives, except sample 0 (5.0 and 6.0 s: an empty system's
    start). The first 10 % (sample 0) is warm-up and left out: samples 1-9 give TTFT 100 ms,
    TPOT (1.0 - 0.1) / 10 = 90 ms and latency 1,000 ms at every statistic, mean output 11."""
    arr = np.arange(10.0)
    first, fin = arr + 0.1, arr + 1.0
    first[0], fin[0] = 5.0, 6.0
    res = SimpleNamespace(arrival_s=arr, first_token_s=first, finish_s=fin, output_len=np.full(10, 11))
    vals = mlperf_rows.server_numbers(res)
    assert vals["mean_output_tokens"] == 11.0
    for stat in ("mean", "median", "p99"):
        assert vals[f"{stat}_ttft_ms"] == pytest.approx(100.0)
        assert vals[f"{stat}_tpot_ms"] == pytest.approx(90.0)
        assert vals[f"{stat}_e2el_ms"] == pytest.approx(1000.0)
    assert "request_throughput" not in vals  # throughput is `predict_server`'s, not the run's


def test_one_token_samples_have_no_tpot() -> None:
    arr = np.arange(5.0)
    res = SimpleNamespace(arrival_s=arr, first_token_s=arr + 0.2, finish_s=arr + 0.2, output_len=np.ones(5, int))
    vals = mlperf_rows.server_numbers(res)
    assert "p99_tpot_ms" not in vals and vals["p99_ttft_ms"] == pytest.approx(200.0)


def test_sample_counts() -> None:
    """Two minutes of arrivals, between 3,000 and 40,000 samples; max_requests caps both."""
    assert mlperf_rows.server_sample_count(1.0, None) == 3000
    assert mlperf_rows.server_sample_count(100.0, None) == 12000
    assert mlperf_rows.server_sample_count(1000.0, None) == 40000
    assert mlperf_rows.server_sample_count(100.0, 500) == 500


_ROW = dict(source="hand-made", model="llama-3.1-8b", hardware="h100-sxm", num_gpus=2, tp=1, pp=1,
            engine="TensorRT-LLM (MLPerf v5.1 submission)", weight_dtype="fp8", activation_dtype="fp8",
            kv_dtype="fp8", batch_size=None, concurrency=None, num_requests=None, input_len=None, output_len=None,
            dataset="mlperf-cnndm-llama3.1-8b", max_batch_size=256, max_num_tokens=2048, value=1.0,
            quality="high", notes="hand-made Server row", layout_stated=True, replicas=2)


def _row(scenario: str, rate: float | None, metric: str) -> dict:
    unit = {"request_throughput": "req/s", "output_tokens_per_s": "tokens/s"}.get(metric, "ms")
    return {**_ROW, "id": f"{scenario}-{rate}-{metric}", "scenario": scenario, "request_rate": rate,
            "metric": metric, "unit": unit}


def test_server_rows_through_validate() -> None:
    """2 x H100 (two TP1 instances), Llama-3.1-8B FP8 on the CNN/DailyMail benchmark:
    - at 4 samples/s (2 a GPU, far under capacity) the system keeps up, so it completes what it
      is offered: request_throughput 4, tokens/s = 4 x the samples' mean output (the dataset's
      reference 128 within 5 %: the row states no run mean);
    - latencies: p99 >= median > 0 for TTFT, TPOT at least one step of a batch of one;
    - at 100x the Offline capacity it cannot keep up: throughput is the Offline row's, and at
      any rate under it the scheduled rate (never more than it is offered);
    - a metric LoadGen's Server summary lacks, or a row without its rate, is skipped with why."""
    rows = [_row("offline_max_throughput", None, "request_throughput")]
    for metric in ("request_throughput", "output_tokens_per_s", "median_ttft_ms", "p99_ttft_ms", "p99_tpot_ms"):
        rows.append(_row("online_poisson", 4.0, metric))
    rows += [_row("online_poisson", 4.0, "p99_itl_ms"), _row("online_poisson", None, "p99_ttft_ms")]
    res = V.validate(rows, validator=V.Validator(max_requests=800))
    got = {p["id"]: p for p in res["points"]}
    offline = got["offline_max_throughput-None-request_throughput"]["predicted"]
    light = {m: got[f"online_poisson-4.0-{m}"]["predicted"] for m in
             ("request_throughput", "output_tokens_per_s", "median_ttft_ms", "p99_ttft_ms", "p99_tpot_ms")}
    assert light["request_throughput"] == pytest.approx(4.0, rel=1e-12)
    assert light["output_tokens_per_s"] == pytest.approx(4.0 * 128, rel=0.05)
    assert light["p99_ttft_ms"] >= light["median_ttft_ms"] > 0
    one_step_s = V.Validator().cost_model(rows[1]).step_time(1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    assert light["p99_tpot_ms"] >= one_step_s * 1e3
    assert "Server: 800 samples a scheduler at 2 samples/s (Poisson) x 2" in got["online_poisson-4.0-p99_ttft_ms"]["note"]
    assert offline > 10 * light["request_throughput"]
    skipped = {s["id"]: s["reason"] for s in res["skipped"]}
    assert skipped["online_poisson-4.0-p99_itl_ms"].startswith("metric p99_itl_ms is not reported by an MLPerf Server run")
    assert "needs LoadGen's scheduled samples per second" in skipped["online_poisson-None-p99_ttft_ms"]
    heavy = V.validate([_row("online_poisson", 100 * offline, "request_throughput")],
                       validator=V.Validator(max_requests=800))
    (p,) = heavy["points"]
    assert p["predicted"] == pytest.approx(offline, rel=1e-9)
    assert "exceed the simulated Offline capacity" in p["note"]
