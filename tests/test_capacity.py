"""The bracketed capacity search (issue 24): the analytic bound, the early stop, the binding SLO,
stability from every signal, and the bounds every reported capacity keeps.

* the analytic bound by hand for one fixed request shape, and as a bound: a replica's busy time
  for n requests is never below n x the per-request time it assumes, for dense, MoE, MLA and
  sliding-window models;
* a probe watched for certain SLO failure ends with the full run's verdict; unstopped, it is
  the full run bit for bit; an overloaded probe stops within its first half;
* the binding SLO and the margins on a result built by hand;
* stability: hand-built runs whose requests in the system grow (or not), and the 70B TP4
  ShareGPT sweep of issue 23, where the old test put the max stable rate at 36.8 req/s against
  an offline maximum of 15.3: now max stable <= saturation <= offline maximum;
* small -n: no capacity, in plan or sweep, above the offline maximum or the analytic bound.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from simulator.analysis import capacity as C
from simulator.analysis.plan import plan
from simulator.analysis.sweep import sweep
from simulator.metrics.summary import stability
from simulator.scenario import Scenario
from simulator.serving.records import COMPLETED, SimResult
from simulator.workloads.workload import Workload


def _fixed(model: str = "llama-3.1-8b", hardware: str = "h100-sxm", **kw) -> Scenario:
    base = dict(model=model, hardware=hardware, workload="random", input_len=512, output_len=64,
                range_ratio=0.0, num_requests=300, seed=3, goodput={"ttft": 2000, "tpot": 100})
    return Scenario(**{**base, **kw})


# --------------------------------------------------------------------------- analytic bound


def test_analytic_bound_by_hand_for_one_request_shape():
    sc = _fixed(engine=None)  # no prefix caching: every prompt token is computed
    cost = sc.cost_model()
    cfg = sc.engine_config(cost)
    inp, out = 512.0, 64.0
    d = out - 1  # decode steps: the prefill emits the first token
    T, S = inp + d, out
    Ad = d * (inp + d / 2)  # decode k = 1..O-1 reads I + k - 1 cached tokens, + 1/2 each
    Ap = inp * inp / 2
    R = inp + d * (inp + (d + 1) / 2)
    x = cost.features(T, S, Ad, Ap, R, Ad + Ap, R, 0.0)
    x[0] = x[3] = max(S / cfg.max_num_seqs, T / cfg.max_num_batched_tokens)
    x[9] = 0.0  # dense: no experts touched
    w = sc.replace(rate=math.inf).make_workload()
    assert C.analytic_bound(cost, cfg, w) == pytest.approx(1.0 / cost.time_of(x), rel=1e-12)


@pytest.mark.parametrize("model, hw, tp", [("llama-3.1-8b", "h100-sxm", 1), ("qwen3-30b-a3b", "h100-sxm", 1),
                                           ("deepseek-v2-lite", "a100-sxm-80gb", 1), ("gpt-oss-20b", "h100-sxm", 1),
                                           ("llama-3.1-70b", "h100-sxm", 4)])
def test_analytic_bound_never_below_what_the_engine_does(model, hw, tp):
    """busy time of an offline run >= n x the bound's time per request, whatever the batching;
    so the simulated offline throughput (and any sustained rate) is below the bound."""
    sc = Scenario(model=model, hardware=hw, tp=tp, workload="sharegpt", num_requests=400, seed=1)
    cost = sc.cost_model()
    w = sc.replace(rate=math.inf).make_workload()
    bound = C.analytic_bound(cost, sc.engine_config(cost), w)
    res, s = sc.replace(rate=math.inf).run()
    assert res.meta["busy_s"] >= len(w.input_len) / bound * (1 - 1e-9)
    assert s["request_throughput"] < bound


# --------------------------------------------------------------------------- early stop


@pytest.mark.parametrize("rate", [20.0, 22.5, 23.2, 30.0, 90.0])  # capacity ~22.9 req/s
def test_a_watched_probe_has_the_full_runs_verdict(rate):
    sc = _fixed(goodput={"ttft": 300, "tpot": 15}, num_requests=400)
    full = C.probe(sc, rate, 0.99, early_stop=False)
    watched = C.probe(sc, rate, 0.99, early_stop=True)
    assert C.meets_slo(watched, 0.99) == C.meets_slo(full, 0.99)
    if not watched.get("stopped_early"):  # never cut: the very same run
        for k in ("good_fraction", "p99_ttft_ms", "p99_tpot_ms", "duration", "steps"):
            assert watched[k] == full[k], k


def test_an_overloaded_probe_stops_in_its_first_half():
    sc = _fixed(goodput={"ttft": 300, "tpot": 15}, num_requests=800)
    x = sc.replace(rate=math.inf).run()[1]["request_throughput"]
    p = C.probe(sc, 1.5 * x, 0.99)
    stop = p["stopped_early"]
    assert stop["at_request"] < 400 and "already miss the SLOs" in stop["reason"]
    assert p["unstable"] and "stopped_early" in p["unstable_signals"] and not C.meets_slo(p, 0.99)


def test_watch_counts_only_certain_misses():
    """Three requests at 0, 1, 2 s; SLO TTFT 1 s, TPOT 0.1 s; checked at t = 3 s."""
    w = Workload(np.array([0.0, 1.0, 2.0]), np.array([10, 10, 10]), np.array([5, 5, 5]))
    watch = C.SloWatch(w, {"ttft": 1.0, "tpot": 0.1}, target=0.5)

    class Rec:  # request 0: first token at 0.5, finished at 0.9 (TPOT 0.1: meets)
        first_token_s = np.array([0.5, 2.5, np.nan])  # 1: TTFT 1.5 > 1: certain miss
        finish_s = np.array([0.9, np.nan, np.nan])  # 2: no first token yet, 1 s waited: not yet
        status = np.array([COMPLETED, 0, 0])

    assert watch.misses(3, 3.0, Rec) == 1
    Rec.first_token_s = np.array([0.5, 1.2, np.nan])  # 1: TTFT 0.2; decoding since 1.2: 1.8 s > 4 x 0.1
    assert watch.misses(3, 3.0, Rec) == 1
    assert watch.misses(3, 3.01, Rec) == 2  # request 2 has now waited more than 1 s
    assert watch(3, 3.01, Rec) is not None  # 2 misses > 3 x (1 - 0.5)


# --------------------------------------------------------------------------- binding SLO


def _hand_result(ttft, e2el, out) -> SimResult:
    n = len(ttft)
    arr = np.arange(n, dtype=float)
    return SimResult(arr, np.full(n, 100), np.asarray(out), arr + np.asarray(ttft, dtype=float),
                     arr + np.asarray(e2el, dtype=float), np.zeros(n, int), np.zeros(n, int),
                     np.full(n, COMPLETED), {}, np.zeros(0), np.zeros(0), pd.DataFrame(), {})


def test_binding_slo_and_margins_by_hand():
    # TTFT 0.1..1.0 s; TPOT (e2el - ttft) / 9: 0.05 s for all but the last two (0.2 s)
    ttft = [0.1 * (i + 1) for i in range(10)]
    e2el = [t + 9 * (0.2 if i >= 8 else 0.05) for i, t in enumerate(ttft)]
    res = _hand_result(ttft, e2el, [10] * 10)
    b = C.slo_breakdown(res, {"ttft": 0.95, "tpot": 0.1}, 0.8)
    assert b["slo_miss"] == pytest.approx({"ttft": 0.1, "tpot": 0.2})
    assert b["binding_slo"] == "tpot"  # more requests miss it
    # the 8th of 10 values (ceil(0.8 x 10)): TTFT 0.8 s, TPOT 0.05 s
    assert b["slo_at_target_ms"] == pytest.approx({"ttft": 800.0, "tpot": 50.0})
    s = C.binding_summary(b, None, {"ttft": 950.0, "tpot": 100.0})
    assert s["margins"]["ttft"]["margin"] == pytest.approx(1 - 800 / 950)
    assert s["margins"]["tpot"]["margin"] == pytest.approx(0.5)
    assert C.binding_text(s, 0.8).startswith("TTFT")  # no failing point: the closest to its bound


# --------------------------------------------------------------------------- stability


def _flow(n: int, rate: float, service_s, first_s: float = 0.1) -> SimResult:
    """n requests at `rate`; request i finishes service_s(i) after arriving."""
    arr = np.arange(n) / rate
    fin = arr + np.array([service_s(i) for i in range(n)])
    return SimResult(arr, np.full(n, 100), np.full(n, 50), arr + first_s, fin, np.zeros(n, int),
                     np.zeros(n, int), np.full(n, COMPLETED), {}, np.zeros(0), np.zeros(0), None,
                     {"offered_rate": rate})


def test_requests_in_the_system_growing_is_unstable():
    steady = stability(_flow(2000, 10.0, lambda i: 5.0))  # Little: 50 in the system, flat
    assert steady["unstable"] is False and abs(steady["in_flight_growth"]) < 0.01
    # each request takes 0.2 s longer than the one before: the count grows at 2/3 of arrivals
    growing = stability(_flow(2000, 10.0, lambda i: 5.0 + 0.2 * i))
    assert growing["unstable"] and "in_flight_growth" in growing["unstable_signals"]
    assert growing["in_flight_growth"] == pytest.approx(2 / 3, rel=0.05)
    assert "ttft_growth" not in growing["unstable_signals"]  # first tokens keep up


def test_70b_tp4_sharegpt_sweep_max_stable_within_saturation_and_offline_max():
    sc = Scenario(model="llama-3.1-70b", hardware="h100-sxm", tp=4, workload="sharegpt", num_requests=1000,
                  goodput={"ttft": 1000, "tpot": 50})
    c = sweep(sc, "auto")["curves"][0]
    assert c["saturation_rate"] is not None
    assert c["max_stable_rate"] <= c["saturation_rate"] <= c["offline_max_throughput"] * 1.0001
    assert c["offline_max_throughput"] < c["analytic_bound"]
    assert c["slo_capacity"] <= c["max_stable_rate"]
    assert c["binding_slo"] == "tpot"


# --------------------------------------------------------------------------- small -n


def test_small_n_plan_and_sweep_never_report_above_the_bounds():
    """50 requests per run: no queue ever builds, so every rate below the offline run's 'meets'
    the SLOs; the capacity stops at the offline maximum of so short a run."""
    sc = _fixed(num_requests=50, goodput={"ttft": 5000, "tpot": 200})
    r = plan(sc, 50.0, hardware=["h100-sxm"], tps=[1])
    (c,) = r["candidates"]
    assert 0 < c["slo_capacity"] < c["offline_max_throughput"] <= c["analytic_bound"]
    assert any("too few for a steady result" in w for w in c["warnings"]) or (
        c["offline_max_throughput"] >= 0.5 * c["analytic_bound"])
    curve = sweep(sc, "auto")["curves"][0]
    assert curve["slo_capacity"] is None or curve["slo_capacity"] < curve["offline_max_throughput"]
    assert curve["max_stable_rate"] < curve["offline_max_throughput"]


def test_search_brackets_within_tolerance_below_the_bound():
    sc = _fixed(num_requests=300, goodput={"ttft": 300, "tpot": 15})
    r = C.search(sc, 0.99, 0.05)
    lo, hi = r["slo_capacity"], r["slo_capacity_upper"]
    assert 0 < lo < hi <= r["upper_bound"] == min(r["offline_max_throughput"], r["analytic_bound"])
    assert hi <= lo * 1.05 * (1 + 1e-9)
    good = [p for p in r["probes"] if p["rate"] == lo][0]
    bad = [p for p in r["probes"] if p["rate"] == hi]
    assert C.meets_slo(good, 0.99) and (not bad or not C.meets_slo(bad[0], 0.99))
    assert r["binding"]["slo"] in ("ttft", "tpot")


# --------------------------------------------------------------------------- pooled replicas


def test_pooled_count_is_verified_behind_the_router():
    """N replicas at rate / (1 - headroom) meet the SLOs; N - 1 do not (or N is the fewest the
    capacity bound allows)."""
    sc = _fixed(num_requests=200, goodput={"ttft": 500, "tpot": 20})
    r = plan(sc, 60.0, hardware=["h100-sxm"], tps=[1], headroom=0.1)
    (c,) = r["candidates"]
    assert c["replicas_verified"]
    checks = {p["replicas"]: p["meets_slo"] for p in c["pool_checks"]}
    assert checks[c["replicas"]] is True
    n_min = math.ceil(60.0 / 0.9 / c["upper_bound"])
    assert checks.get(c["replicas"] - 1) is False or c["replicas"] == max(1, n_min)
    assert c["gpus"] == c["replicas"] and c["cost_per_hour_usd"] == pytest.approx(c["replicas"] * 2.5)
