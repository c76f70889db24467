"""Issue 16 observability: `--metrics-out` (Prometheus text, vLLM V1 names and buckets) and
MFU/MBU per step (prefill and decode), checked by hand on small schedules. The time series
(issue 25) is tested in test_prometheus_series.py, a real Prometheus in test_prometheus_real.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from simulator.resolve import make_cost_model
from simulator.scenario import Scenario
from simulator.serving.sched.registry import EngineConfig
from simulator.serving.simulate import simulate
from simulator.workloads.workload import Workload


@pytest.fixture(scope="module")
def cost():
    return make_cost_model("llama-2-7b", "a100-sxm-80gb", ideal=True)


def wl(arrivals, ins, outs):
    return Workload(np.asarray(arrivals, dtype=float), np.asarray(ins, dtype=np.int64),
                    np.asarray(outs, dtype=np.int64))


def cfg(**kw):
    kw.setdefault("kv_capacity_tokens", 100_000)
    return EngineConfig(**kw)


def parse(text: str) -> dict:
    """family name -> list of (sample name, labels, value, timestamp)."""
    return {f.name: [(s.name, s.labels, s.value, s.timestamp) for s in f.samples]
            for f in text_string_to_metric_families(text)}


def hist(fams: dict, name: str, **labels: str) -> dict:
    """{le: cumulative count}, sum, count of one histogram series."""
    out: dict = {"buckets": {}}
    for sname, lab, v, _ in fams[name]:
        if any(lab.get(k) != val for k, val in labels.items()):
            continue
        if sname.endswith("_bucket"):
            out["buckets"][float(lab["le"])] = v
        else:
            out[sname.rsplit("_", 1)[1]] = out.get(sname.rsplit("_", 1)[1], 0) + v
    return out


# --------------------------------------------------------------------------- Prometheus


def test_two_requests_by_hand(cost):
    """The schedule of test_engine.test_two_requests_by_hand: A (t=0, 100 in, 3 out) and
    B (t=1 ms, 50 in, 2 out); steps d1 (prefill A), d2 (decode A + prefill B), d3 (decode both).
    TTFT A = t1, B = t2 - 0.001; queue A = 0, B = t1 - 0.001; ITL gaps d2, d3, d3."""
    from simulator.cli.prometheus import prometheus_text

    st = cost.step_time
    d1 = st(100, 1, 0.0, 100 * 50.0, 100)
    d2 = st(51, 2, 100.5, 50 * 25.0, 101 + 50)
    d3 = st(2, 2, 101.5 + 50.5, 0.0, 102 + 51)
    t1, t2, t3 = d1, d1 + d2, d1 + d2 + d3
    res = simulate(cost, wl([0.0, 0.001], [100, 50], [3, 2]), cfg(), itl_times=True)
    fams = parse(prometheus_text(res, "m"))
    ttft = hist(fams, "vllm:time_to_first_token_seconds")
    assert ttft["count"] == 2
    assert ttft["sum"] == pytest.approx(t1 + t2 - 0.001, rel=1e-12)
    q = hist(fams, "vllm:request_queue_time_seconds")
    assert q["sum"] == pytest.approx(t1 - 0.001, rel=1e-12)
    assert q["buckets"][0.3] == 2  # both waited well under 0.3 s
    e2e = hist(fams, "vllm:e2e_request_latency_seconds")
    assert e2e["sum"] == pytest.approx(t3 + t3 - 0.001, rel=1e-12)
    itl = hist(fams, "vllm:inter_token_latency_seconds")
    assert itl["count"] == 3 and itl["sum"] == pytest.approx(d2 + 2 * d3, rel=1e-12)
    prompt = hist(fams, "vllm:request_prompt_tokens")
    assert prompt["buckets"][50.0] == 1 and prompt["buckets"][100.0] == 2 and prompt["sum"] == 150
    gen_max = hist(fams, "vllm:request_max_num_generation_tokens")
    assert gen_max["buckets"][2.0] == 1 and gen_max["buckets"][5.0] == 2 and gen_max["sum"] == 5
    counters = {n: v for n, _, v, _ in fams["vllm:prompt_tokens"] + fams["vllm:generation_tokens"]
                + fams["vllm:request_success"] + fams["vllm:prefix_cache_queries"]}
    assert counters == {"vllm:prompt_tokens_total": 150, "vllm:generation_tokens_total": 5,
                        "vllm:request_success_total": 2, "vllm:prefix_cache_queries_total": 150}
    # the snapshot is the end of the run: every engine idle, no timestamps
    assert [(v, ts) for *_, v, ts in fams["vllm:num_requests_running"]] == [(0, None)]


def test_vllm_bucket_boundaries():
    from simulator.cli import prometheus as P

    assert P.buckets_1_2_5(100) == [1, 2, 5, 10, 20, 50, 100]
    assert P.buckets_1_2_5(4096)[-1] == 2000
    assert P.TTFT_BUCKETS_S[0] == 0.001 and P.TTFT_BUCKETS_S[-1] == 2560.0 and len(P.TTFT_BUCKETS_S) == 22
    assert len(P.ITL_BUCKETS_S) == 19 and len(P.REQUEST_LATENCY_BUCKETS_S) == 21


def test_histogram_counts_equal_completed_requests_two_replicas():
    from simulator.cli.prometheus import REQUEST_LATENCY_BUCKETS_S, TTFT_BUCKETS_S, prometheus_text

    sc = Scenario(workload="random", model="llama-3.1-8b", hardware="h100-sxm", num_requests=300, rate=20.0, replicas=2,
                  input_len=512, output_len=64, range_ratio=0.5, seed=3)
    res, summary = sc.run(itl_times=True)
    fams = parse(prometheus_text(res, "meta-llama/Llama-3.1-8B"))
    for name in ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds",
                 "vllm:request_queue_time_seconds", "vllm:request_prompt_tokens",
                 "vllm:request_generation_tokens", "vllm:request_decode_time_seconds"):
        per = [hist(fams, name, engine=str(r)) for r in (0, 1)]
        assert sum(h["count"] for h in per) == summary["completed"] == 300, name
        for h in per:
            counts = list(h["buckets"].values())
            assert counts == sorted(counts) and counts[-1] == h["count"]  # cumulative, ends at +Inf
    ttft = hist(fams, "vllm:time_to_first_token_seconds", engine="0")
    assert list(ttft["buckets"])[:-1] == list(TTFT_BUCKETS_S)
    assert list(hist(fams, "vllm:e2e_request_latency_seconds", engine="1")["buckets"])[:-1] == list(REQUEST_LATENCY_BUCKETS_S)
    # the mean TTFT the histogram gives is the summary's
    both = [hist(fams, "vllm:time_to_first_token_seconds", engine=str(r)) for r in (0, 1)]
    assert sum(h["sum"] for h in both) / 300 * 1e3 == pytest.approx(summary["mean_ttft_ms"], rel=1e-9)
    # every token after the first, each on the engine that emitted it
    itl = [hist(fams, "vllm:inter_token_latency_seconds", engine=str(r)) for r in (0, 1)]
    assert sum(h["count"] for h in itl) == summary["total_output_tokens"] - 300
    gen = {lab["engine"]: v for _, lab, v, _ in fams["vllm:generation_tokens"]}
    for r in (0, 1):  # generated tokens = first tokens + gaps, per engine
        assert gen[str(r)] == itl[r]["count"] + per[r]["count"]
    gauges = {lab["engine"] for _, lab, _, _ in fams["vllm:kv_cache_usage_perc"]}
    assert gauges == {"0", "1"}


def test_cli_metrics_out(tmp_path):
    from simulator.cli.commands import main

    path = tmp_path / "run.prom"
    r = CliRunner().invoke(main, ["simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-n", "50", "-r", "5",
                                  "--input-len", "256", "--output-len", "32", "--metrics-out", str(path),
                                  "--metrics-format", "text", "--json", "-q"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output)
    fams = parse(path.read_text())
    assert hist(fams, "vllm:e2e_request_latency_seconds")["count"] == summary["completed"] == 50
    assert fams["vllm:time_to_first_token_seconds"][0][1]["model_name"] == "meta-llama/Llama-3.1-8B"


# --------------------------------------------------------------------------- MFU / MBU


def _rows(res):
    tl = res.timeline
    return tl[tl["busy_s"] > 0]


def test_mfu_mbu_one_step_by_hand(cost):
    """One request, 100 prompt tokens, 1 output token: one prefill step of d1 seconds.
    MFU = FLOPs / (d1 x 312e12) (A100 bf16 dense peak), MBU = bytes / (d1 x 2.039e12).
    FLOPs by hand: 32 layers x (4 H^2 + 3 H I) = 6.476e9 weights, 2 FLOPs each per token, x 100
    tokens; the LM head for the one emitting row, 2 H V; attention QK^T and PV, 4 H Ap per
    layer with Ap = 100 x 50 causal pairs."""
    from simulator.cost.stepbatch import StepBatch

    H, FF, V, L = 4096, 11008, 32000, 32
    by_hand = 2 * L * (4 * H * H + 3 * H * FF) * 100 + 2 * H * V + 4 * H * 5000 * L
    d1 = cost.step_time(100, 1, 0.0, 100 * 50.0, 100)
    work = cost.breakdown(StepBatch(100, 1, 0.0, 5000.0, 100))  # the per-op path
    assert work["flops"] == pytest.approx(by_hand, rel=1e-3)
    res = simulate(cost, wl([0.0], [100], [1]), cfg())
    row = _rows(res).iloc[0]
    assert len(_rows(res)) == 1 and row["busy_s"] == pytest.approx(d1, rel=1e-12)
    assert row["mfu"] == pytest.approx(work["flops"] / (d1 * 312e12), rel=1e-9)
    assert row["mbu"] == pytest.approx(work["bytes"] / (d1 * 2.039e12), rel=1e-9)
    # all prefill: the decode share is 0
    assert (row["mfu_prefill"], row["mfu_decode"], row["mbu_decode"]) == (pytest.approx(row["mfu"]), 0.0, 0.0)
    s = res.meta["utilization"]
    assert s["mfu_mean"] == s["mfu_p50"] == s["mfu_p99"] == pytest.approx(row["mfu"])
    # ideal model (efficiency 1): a compute-bound prefill runs near the peak, never above
    assert 0.5 < row["mfu"] <= 1.0 + 1e-9


@pytest.mark.parametrize("model", ["llama-2-7b", "mistral-7b"])  # mistral: sliding window
def test_decode_runs_sum_to_the_steps(model):
    """A prompt step then 49 decode steps, logged as runs (decode segments): the rows' work,
    from their summed statistics, equals the sum of the 50 steps priced one at a time."""
    from simulator.cost.stepbatch import StepBatch

    c = make_cost_model(model, "a100-sxm-80gb", ideal=True)
    W = c.model.sliding_window.window if c.model.sliding_window else None
    p0 = 5000 if W else 100  # past the window (4096) for mistral
    res = simulate(c, wl([0.0], [p0], [50]), cfg())
    rows = _rows(res)
    assert len(rows) < 50 and rows["steps"].sum() == 50  # runs, not one row per step
    steps = [StepBatch.from_sequences([(p0, 0)], W)] + [StepBatch.from_sequences([(1, p0 + j)], W) for j in range(49)]
    flops = sum(c.breakdown(b)["flops"] for b in steps)
    nbytes = sum(c.breakdown(b)["bytes"] for b in steps)
    busy = sum(c.time(b) for b in steps)
    assert rows["busy_s"].sum() == pytest.approx(busy, rel=1e-9)
    peak, bw = 312e12, 2.039e12
    assert (rows["mfu"] * rows["busy_s"]).sum() * peak == pytest.approx(flops, rel=1e-9)
    assert (rows["mbu"] * rows["busy_s"]).sum() * bw == pytest.approx(nbytes, rel=1e-9)
    assert rows["decode_tokens"].sum() == 49


def test_mixed_step_split_by_tokens(cost):
    """Step 2 of the two-request schedule: A decodes 1 token, B prefills 50: decode share 1/51."""
    res = simulate(cost, wl([0.0, 0.001], [100, 50], [3, 2]), cfg())
    row = _rows(res).iloc[1]
    assert (row["T"], row["decode_tokens"]) == (51, 1)
    assert row["mfu_decode"] == pytest.approx(row["mfu"] / 51)
    assert row["mbu_prefill"] == pytest.approx(row["mbu"] * 50 / 51)


def test_add_utilization_on_a_frame_equals_the_engine_columns(cost):
    """The engine computes MFU/MBU on its column arrays; `add_utilization` on a DataFrame
    (the public path) gives the same columns, in the same order, bit for bit."""
    from simulator.cost.utilization import UTIL_COLUMNS, add_utilization

    res = simulate(cost, wl([0.0, 0.001], [100, 50], [3, 2]), cfg())
    again = add_utilization(cost, res.timeline.drop(columns=list(UTIL_COLUMNS)))
    assert list(again.columns) == list(res.timeline.columns)
    assert again.equals(res.timeline)


def test_summary_and_energy_use_busy_utilization():
    from simulator.cost.utilization import weighted_quantile
    from simulator.metrics.energy import run_energy

    res, s = Scenario(workload="random", model="llama-3.1-8b", hardware="h100-sxm", num_requests=200, rate=8.0,
                      input_len=1024, output_len=128, seed=1).run()
    rows = _rows(res)
    t = rows["busy_s"].to_numpy()
    u = np.minimum(np.maximum(rows["mfu"], rows["mbu"]).to_numpy(), 1.0)
    assert res.meta["busy_utilization"] == pytest.approx((u * t).sum() / t.sum())
    assert 0 < s["mfu_p50"] <= s["mfu_p99"] <= 1 and 0 < s["mbu_p50"] <= s["mbu_p99"] <= 1
    assert s["mfu_prefill_mean"] + s["mfu_decode_mean"] == pytest.approx(s["mfu_mean"])
    # decode-heavy serving is memory-bound: MBU well above MFU in decode
    assert s["mbu_decode_mean"] > s["mfu_decode_mean"]
    # energy scales idle-to-TDP power by the measured utilisation, not by 1
    full = run_energy(Scenario().cost_model().hardware, {**res.meta, "busy_utilization": 1.0},
                      s["duration"], s["total_output_tokens"])
    assert s["energy_j"] < full["energy_j"]
    assert weighted_quantile(np.array([3.0, 1.0, 2.0]), np.array([1.0, 1.0, 2.0]), 0.5) == 2.0


def test_timeline_plot_has_utilization_panel(monkeypatch):
    from simulator.cli import plots

    seen = {}
    monkeypatch.setattr(plots, "_png_bytes", lambda fig: seen.setdefault("fig", fig) and b"")
    res, _ = Scenario(workload="random", model="llama-3.1-8b", hardware="h100-sxm", num_requests=50, rate=5.0,
                      input_len=256, output_len=32).run()
    plots.timeline_png(res.timeline)
    ax = seen["fig"].axes[-1]
    assert ax.get_ylabel() == "% of peak (busy time)"
    assert {ln.get_label() for ln in ax.get_lines()} == {"MFU PREFILL", "MFU DECODE", "MBU PREFILL", "MBU DECODE"}
