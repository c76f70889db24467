"""Issue 25: `validate` reads GuideLLM, inference-perf and AIPerf results in their real
formats (synthetic fixtures in tests/data, see SOURCES.md), rebuilds the run each describes
and prices every row with the tool's own metric definitions."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from simulator.analysis import result_files as rf
from simulator.cli.commands import main
from simulator.serving.records import COMPLETED, SimResult
from simulator.specs.checks import SpecError

DATA = Path(__file__).parent / "data"
GUIDELLM = DATA / "guidellm_benchmarks_synthetic.json"
IPERF = DATA / "inference_perf_synthetic"
AIPERF = DATA / "aiperf_synthetic"
HW = {"hardware": "h100-sxm"}


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.stdout, r.stderr


def test_detect_format():
    assert rf.detect_format(GUIDELLM) == "guidellm"
    assert rf.detect_format(IPERF) == "inference-perf"
    assert rf.detect_format(IPERF / "stage_1_lifecycle_metrics.json") == "inference-perf"
    assert rf.detect_format(AIPERF) == "aiperf"
    assert rf.detect_format(AIPERF / "concurrency8" / "profile_export_aiperf.json") == "aiperf"
    assert rf.detect_format(DATA / "vllm_bench_serve_result.json") == "vllm"
    with pytest.raises(SpecError, match="an AIPerf CSV export; give its profile_export_aiperf.json"):
        rf.detect_format(AIPERF / "concurrency8" / "profile_export_aiperf.csv")


# ---- Must show: validate prices the rows of a GuideLLM file and of an inference-perf run ------------

@pytest.mark.parametrize("target", [GUIDELLM, IPERF, IPERF / "summary_lifecycle_metrics.json", AIPERF])
def test_must_show_validate_prices_the_rows(target):
    code, out, err = run("validate", str(target), "-H", "h100-sxm", "--json", "-q")
    assert code == 0, err
    r = json.loads(out)
    rows, skipped = rf.load_rows(target, **HW)
    assert r["predicted"] == len(rows) > 0  # every row priced
    assert [s["id"] for s in r["skipped"]] == [s["id"] for s in skipped]  # only the not-comparable ones
    assert all(p["predicted"] > 0 and math.isfinite(p["predicted"]) for p in r["points"])


def test_guidellm_rows_and_run():
    rows, skipped = rf.load_rows(GUIDELLM, **HW)
    by_bench: dict[str, list[dict]] = {}
    for row in rows:
        by_bench.setdefault(row["id"].split("-")[1], []).append(row)
    assert sorted(by_bench) == ["b0", "b1", "b2"]
    data = json.loads(GUIDELLM.read_text())
    for b, (_, bench_rows) in zip(data["benchmarks"], sorted(by_bench.items()), strict=True):
        spec = bench_rows[0]["run"]
        rate = b["config"]["strategy"]["rate"]
        assert spec.stages[0] == rf.Stage("constant", b["scheduler_metrics"]["requests_made"]["total"], rate=rate)
        assert (spec.input_len, spec.output_len, spec.tool) == (512, 128, "guidellm")
        vals = {r["metric"]: r["value"] for r in bench_rows}
        m = b["metrics"]
        assert vals["p99_ttft_ms"] == m["time_to_first_token_ms"]["successful"]["percentiles"]["p99"]
        assert vals["mean_e2el_ms"] == pytest.approx(1e3 * m["request_latency"]["successful"]["mean"])
        assert vals["request_throughput"] == m["requests_per_second"]["successful"]["mean"]
        assert bench_rows[0]["model"] == "Qwen/Qwen3-8B" and bench_rows[0]["request_rate"] == rate
        assert {r["scenario"] for r in bench_rows} == {"online_poisson"}
    assert {s["id"].split("-", 2)[2] for s in skipped} == {"time_per_output_token_ms"}


def test_inference_perf_rows_and_run():
    rows, skipped = rf.load_rows(IPERF / "stage_0_lifecycle_metrics.json", **HW)
    spec = rows[0]["run"]
    assert spec.prefix == (9, 5, 100, 447) and spec.output_len == 248 and spec.warm_later_stages
    # stages from config.yaml: n = int(rate x duration), 16 workers x 100 in flight at most
    assert [(s.process, s.num_requests, s.rate, s.duration_s, s.max_concurrency) for s in spec.stages] == [
        ("rescaled", 120, 1.0, 120.0, 1600), ("rescaled", 300, 2.5, 120.0, 1600), ("rescaled", 720, 6.0, 120.0, 1600)]
    stage1 = {r["metric"]: r["value"] for r in rows if r["run_stage"] == 1}
    d = json.loads((IPERF / "stage_1_lifecycle_metrics.json").read_text())
    assert stage1["median_ttft_ms"] == pytest.approx(1e3 * d["successes"]["latency"]["time_to_first_token"]["median"])
    assert stage1["output_tokens_per_s"] == d["successes"]["throughput"]["output_tokens_per_sec"]
    assert "median_itl_ms" not in stage1 and len(skipped) == 3
    assert rows[0]["model"] == "Qwen/Qwen3-8B" and rows[0]["engine"] == "vllm"  # config.yaml's server


def test_inference_perf_needs_its_config(tmp_path):
    d = tmp_path / "run"
    shutil.copytree(IPERF, d)
    (d / "config.yaml").unlink()
    with pytest.raises(SpecError, match="no config.yaml next to the inference-perf reports"):
        rf.load_rows(d, **HW)
    shutil.copy(IPERF / "config.yaml", d / "config.yaml")
    text = (d / "config.yaml").read_text().replace("question_len: 447", "question_len: {type: normal, mean: 447, "
                                                   "std_dev: 30, min: 10, max: 900}")
    (d / "config.yaml").write_text(text)
    with pytest.raises(SpecError, match="question_len: a normal length distribution is not generated"):
        rf.load_rows(d, **HW)


def test_aiperf_rows_and_run():
    rows, _ = rf.load_rows(AIPERF, **HW)
    specs = {r["id"].split("-")[1]: r["run"] for r in rows}
    assert {k: (s.stages[0].process, s.stages[0].concurrency, s.stages[0].num_requests) for k, s in specs.items()} \
        == {"concurrency1": ("closed", 1, 64), "concurrency8": ("closed", 8, 256), "concurrency32": ("closed", 32, 512)}
    c8 = {r["metric"]: r["value"] for r in rows if "concurrency8" in r["id"]}
    d = json.loads((AIPERF / "concurrency8" / "profile_export_aiperf.json").read_text())
    assert c8["median_tpot_ms"] == d["inter_token_latency"]["p50"]  # per request (E2E - TTFT)/(OSL - 1)
    assert c8["p99_itl_ms"] == d["inter_chunk_latency"]["p99"]  # pooled chunk gaps
    assert {r["scenario"] for r in rows} == {"closed_loop"}


def test_lengths_options_apply_to_vllm_files_only():
    with pytest.raises(SpecError, match="input_len: applies to vLLM result files; a guidellm result states"):
        rf.load_rows(GUIDELLM, input_len=100, **HW)
    with pytest.raises(SpecError, match="pass --hardware"):
        rf.load_rows(GUIDELLM)


def test_guidellm_refusals_are_reasons(tmp_path):
    data = json.loads(GUIDELLM.read_text())
    data["args"]["data"] = ["prompt_tokens=512,prompt_tokens_stdev=64,output_tokens=128"]
    f = tmp_path / "g.json"
    f.write_text(json.dumps(data))
    rows, skipped = rf.load_rows(f, **HW)
    assert rows == [] and len(skipped) == 3
    assert "normal-distributed lengths are not generated" in skipped[0]["reason"]


# ---- the rebuilt arrivals, by hand ----------------------------------------------------------

def test_arrivals_by_process():
    spec = rf.RunSpec("guidellm", 100, 10, (rf.Stage("constant", 5, rate=2.0),))
    assert list(rf.build_workload(spec, 0).arrival_s) == [0.0, 0.5, 1.0, 1.5, 2.0]
    # inference-perf constant: n gaps rescaled so that the last request goes out at `duration`
    spec = rf.RunSpec("inference-perf", 100, 10, (rf.Stage("rescaled", 50, rate=5.0, duration_s=10.0),), seed=3)
    t = rf.build_workload(spec, 0).arrival_s
    assert len(t) == 50 and t[-1] == pytest.approx(10.0) and t[0] > 0 and np.all(np.diff(t) > 0)
    spec = rf.RunSpec("inference-perf", 100, 10, (rf.Stage("per-second", 200, rate=4.0, duration_s=60.0),), seed=1)
    t = rf.build_workload(spec, 0).arrival_s
    assert len(t) == 200 and np.all(np.diff(t) >= 0) and 40 < t[-1] < 60  # ~4 per second
    closed = rf.build_workload(rf.RunSpec("aiperf", 10, 5, (rf.Stage("closed", 7, concurrency=2),)), 0)
    assert closed.concurrency == 2 and closed.num_requests == 7


def test_shared_prefix_stage_restarts_at_prompt_zero():
    spec = rf.RunSpec("inference-perf", 547, 248, (rf.Stage("rescaled", 50, rate=1.0, duration_s=50.0),
                                                   rf.Stage("rescaled", 100, rate=2.0, duration_s=50.0)),
                      seed=0, prefix=(9, 5, 100, 447))
    a, b = rf.build_workload(spec, 0), rf.build_workload(spec, 1)
    assert list(a.input_len) == [547] * 50
    pa, pb = a.extra["prompt_segments"], b.extra["prompt_segments"]
    assert [pa[i] for i in range(50)] == [pb[i] for i in range(50)]  # the same prompt list, from prompt 0
    assert pb[45] == pb[0]  # 9 x 5 prompts, cycled
    assert len({p[0].segment_id for p in pa[:45]}) == 9  # 9 system prompts


# ---- the tools' statistics, by hand ------------------------------------------------------------

def _result(arrival, first, finish, out) -> SimResult:
    n = len(arrival)
    return SimResult(np.array(arrival, float), np.full(n, 10), np.array(out), np.array(first, float),
                     np.array(finish, float), np.zeros(n, int), np.zeros(n, int), np.full(n, COMPLETED, np.int8), {},
                     np.array([0.01]), np.array([1]), pd.DataFrame())


def test_tool_metrics_by_hand():
    # three requests: TTFT 0.1, 0.2, 0.6 s; E2E 1.1, 2.2, 1.6 s; outputs 11, 21, 2 tokens
    res = _result([0.0, 1.0, 2.0], [0.1, 1.2, 2.6], [1.1, 3.2, 3.6], [11, 21, 2])
    ip = rf.tool_metrics(res, "inference-perf")
    assert ip["request_throughput"] == pytest.approx(3 / 3.6)  # completed / (last finish - first send)
    assert ip["output_tokens_per_s"] == pytest.approx(34 / 3.6)
    assert ip["median_ttft_ms"] == pytest.approx(200.0)
    assert ip["p99_ttft_ms"] == pytest.approx(1e3 * np.percentile([0.1, 0.2, 0.6], 99))  # interpolated: 592
    # TPOT per request: 1.0/10, 2.0/20, 1.0/1 s; the pooled mean gap: 4.0 s / 31 gaps
    assert ip["mean_tpot_ms"] == pytest.approx(1e3 * (0.1 + 0.1 + 1.0) / 3)
    assert ip["mean_itl_ms"] == pytest.approx(1e3 * 4.0 / 31)
    gl = rf.tool_metrics(res, "guidellm")
    assert gl["p99_ttft_ms"] == pytest.approx(600.0)  # no interpolation: the first value at CDF >= 0.99
    assert gl["median_ttft_ms"] == pytest.approx(200.0)
    # GuideLLM weights each TPOT by its gaps (10, 20, 1): the weighted median is 0.1 s, the mean the pooled gap
    assert gl["median_tpot_ms"] == pytest.approx(100.0)
    assert gl["mean_tpot_ms"] == pytest.approx(1e3 * 4.0 / 31)
