"""Issue 16 observability: `--metrics-out` (Prometheus text, vLLM V1 names and buckets) and
MFU/MBU per step (prefill and decode), checked by hand on small schedules."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from simulator.engine import EngineConfig, simulate
from simulator.roofline import make_cost_model
from simulator.scenario import Scenario
from simulator.workload import Workload


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
    from simulator.prometheus import prometheus_text

    st = cost.step_time
    d1 = st(100, 1, 0.0, 100 * 50.0, 100)
    d2 = st(51, 2, 100.5, 50 * 25.0, 101 + 50)
    d3 = st(2, 2, 101.5 + 50.5, 0.0, 102 + 51)
    t1, t2, t3 = d1, d1 + d2, d1 + d2 + d3
    res = simulate(cost, wl([0.0, 0.001], [100, 50], [3, 2]), cfg())
    fams = parse(prometheus_text(res, "m", start_unix_s=1000.0))
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
    counters = {n: v for n, _, v, _ in fams["vllm:prompt_tokens"] + fams["vllm:generation_tokens"]
                + fams["vllm:request_success"] + fams["vllm:prefix_cache_queries"]}
    assert counters == {"vllm:prompt_tokens_total": 150, "vllm:generation_tokens_total": 5,
                        "vllm:request_success_total": 2, "vllm:prefix_cache_queries_total": 150}
    # gauges: one timestamped sample per step, running = batch size (1, 2, 2)
    running = fams["vllm:num_requests_running"]
    assert [v for *_, v, _ in running] == [1, 2, 2]
    assert [ts for *_, ts in running] == pytest.approx([1000 + t1, 1000 + t2, 1000 + t3], abs=1e-3)


def test_vllm_bucket_boundaries():
    from simulator import prometheus as P

    assert P.buckets_1_2_5(100) == [1, 2, 5, 10, 20, 50, 100]
    assert P.buckets_1_2_5(4096)[-1] == 2000
    assert P.TTFT_BUCKETS_S[0] == 0.001 and P.TTFT_BUCKETS_S[-1] == 2560.0 and len(P.TTFT_BUCKETS_S) == 22
    assert len(P.ITL_BUCKETS_S) == 19 and len(P.REQUEST_LATENCY_BUCKETS_S) == 21


def test_histogram_counts_equal_completed_requests_two_replicas():
    from simulator.prometheus import REQUEST_LATENCY_BUCKETS_S, TTFT_BUCKETS_S, prometheus_text

    sc = Scenario(model="llama-3.1-8b", hardware="h100-sxm", num_requests=300, rate=20.0, replicas=2,
                  input_len=512, output_len=64, range_ratio=0.5, seed=3)
    res, summary = sc.run()
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
    itl = hist(fams, "vllm:inter_token_latency_seconds", engine="all")
    assert itl["count"] == summary["total_output_tokens"] - 300  # every token after the first
    gauges = {lab["engine"] for _, lab, _, _ in fams["vllm:kv_cache_usage_perc"]}
    assert gauges == {"0", "1"}


def test_cli_metrics_out(tmp_path):
    from simulator.cli import main

    path = tmp_path / "run.prom"
    r = CliRunner().invoke(main, ["simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-n", "50", "-r", "5",
                                  "--input-len", "256", "--output-len", "32", "--metrics-out", str(path),
                                  "--json", "-q"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output)
    fams = parse(path.read_text())
    assert hist(fams, "vllm:e2e_request_latency_seconds")["count"] == summary["completed"] == 50
    assert fams["vllm:time_to_first_token_seconds"][0][1]["model_name"] == "meta-llama/Llama-3.1-8B"
