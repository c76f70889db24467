"""Disaggregated candidates for `plan`: prefill TP x P replicas, decode TP x D replicas.

Placement as DistServe (Zhong et al., OSDI'24, sec. 4) does it: each phase is sized on its
own SLO, then the pair is checked together.

1. **prefill capacity** c_p of one prefill replica: the highest offered rate at which the
   fraction of requests with TTFT <= SLO stays >= slo_target (and the run is stable), on a
   1:1 deployment (TTFT depends on the prefill pool only: the first token is emitted there).
2. **decode capacity** c_d of one decode replica: the same with the TPOT and E2EL SLOs, on a
   P:1 deployment whose P = ceil(r / c_p) prefill replicas keep TTFT in its SLO at rate r,
   with at least 4 x max_num_seqs requests (up to 4000) so that the decode seats fill and a
   queue (which shows in TPOT: the first decode token waits) builds past capacity.
3. P = ceil(R / (c_p (1 - headroom))), D = ceil(R / (c_d (1 - headroom))); GPUs = P tp_p +
   D tp_d; then the P:D deployment is simulated at R with every SLO (`verified_good_fraction`);
   while it misses slo_target the pool whose SLO fails more often gets one more replica (at
   most 4 times, else the candidate is infeasible).

For MoE models each (prefill TP, decode TP) pair is also tried with expert parallelism over
each pool's TP group (ep = tp). Capacities are found by doubling then bisection on the rate (relative tolerance `tol`).
Candidates are independent tasks on the plan's executor (process pool or Dask).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from simulator.metrics.summary import good_mask, stability
from simulator.scenario import Scenario
from simulator.specs.checks import SpecError

MAX_FIXES = 4


def _replicas(rate: float, cap: float, headroom: float) -> int:
    return max(1, math.ceil(rate / (cap * (1.0 - headroom)) - 1e-9))


def _good_fraction(sc: Scenario, rate: float, slos: dict[str, float]) -> tuple[float, bool, Any]:
    res, summary = sc.replace(rate=rate).run()
    frac = float(good_mask(res, slos).mean()) if slos else float((res.status == 1).mean())
    return frac, bool(stability(res)["unstable"]), summary


def _capacity(ok: Callable[[float], bool], tol: float, start: float = 1.0) -> float:
    """Highest rate with ok(rate) (0 when even start/1024 fails): doubling, then bisection."""
    lo, hi = 0.0, start
    if ok(hi):
        while ok(hi * 2) and hi < 1e6:
            hi *= 2
        lo, hi = hi, hi * 2
    else:
        while hi > start / 1024:
            hi /= 2
            if ok(hi):
                lo, hi = hi, hi * 2
                break
        if lo == 0.0:
            return 0.0
    while (hi - lo) / hi > tol:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def _split_slos(slos: dict[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    return ({k: v for k, v in slos.items() if k == "ttft"}, {k: v for k, v in slos.items() if k != "ttft"})


def disagg_candidate(base: dict[str, Any], hw: str, tp_p: int, tp_d: int, rate: float, headroom: float,
                     slo_target: float, tol: float, price: float | None, ep: bool = False) -> dict[str, Any]:
    """One (hardware, prefill TP, decode TP) candidate: its row (module docstring). `ep`: MoE
    layers expert-parallel over each pool's TP group (ep = tp)."""
    row: dict[str, Any] = {"shape": "disaggregated", "hardware": hw, "prefill_tp": tp_p, "decode_tp": tp_d,
                           "prefill_ep": tp_p if ep else 1, "decode_ep": tp_d if ep else 1}
    pools = {"prefill": {"tp": tp_p, "ep": row["prefill_ep"]}, "decode": {"tp": tp_d, "ep": row["decode_ep"]}}
    sc = Scenario.from_dict(base).replace(hardware=hw, disagg="1:1", ep=1, deployment=pools)
    for pool in ("prefill", "decode"):
        ps = sc.pool(pool)
        try:
            mem = ps.cost_model().memory(ps.gpu_memory_utilization, ps.max_num_batched_tokens, ps.max_num_seqs)
        except SpecError as e:
            return {**row, "status": "infeasible", "reason": f"{pool}: {e}"}
        if not mem.fits:
            return {**row, "status": "infeasible", "reason": f"{pool}: {mem.message}"}
    slos = sc.slos_s
    s_pre, s_dec = _split_slos(slos)

    def pre_ok(r: float) -> bool:
        frac, unstable, _ = _good_fraction(sc, r, s_pre)
        return frac >= slo_target and not unstable

    c_p = _capacity(pre_ok, tol)
    if c_p <= 0:
        return {**row, "status": "infeasible", "reason": "prefill pool misses the TTFT SLO even at low load"}

    # enough requests that the decode replica's seats fill and a queue can build at overload
    # (with fewer, every request is admitted at once and any rate looks fine)
    dsc = sc.replace(num_requests=max(sc.num_requests, min(4 * sc.pool("decode").max_num_seqs, 4000)))

    def dec_ok(r: float) -> bool:
        p = _replicas(r, c_p, 0.0)
        frac, unstable, _ = _good_fraction(dsc.replace(disagg=f"{p}:1"), r, s_dec)
        return frac >= slo_target and not unstable

    c_d = _capacity(dec_ok, tol, start=c_p)
    if c_d <= 0:
        return {**row, "status": "infeasible", "reason": "decode pool misses the TPOT/E2EL SLOs even at low load"}
    P, D = _replicas(rate, c_p, headroom), _replicas(rate, c_d, headroom)
    for _ in range(MAX_FIXES + 1):
        res, summary = sc.replace(disagg=f"{P}:{D}", rate=rate).run()
        frac = float(good_mask(res, slos).mean())
        if frac >= slo_target:
            break
        miss_p = float((~good_mask(res, s_pre)).mean()) if s_pre else 0.0
        miss_d = float((~good_mask(res, s_dec)).mean()) if s_dec else 0.0
        P, D = (P + 1, D) if miss_p >= miss_d else (P, D + 1)
    else:
        return {**row, "status": "infeasible", "prefill_capacity": c_p, "decode_capacity": c_d,
                "reason": f"the {P}:{D} deployment misses the SLOs at {rate:g} req/s (good fraction {frac:.3f})"}
    gpus = P * tp_p + D * tp_d
    per_hour = gpus * price if price else None
    return {**row, "status": "feasible", "prefill_replicas": P, "decode_replicas": D, "disagg": f"{P}:{D}",
            "gpus": gpus, "prefill_capacity": c_p, "decode_capacity": c_d,
            "verified_good_fraction": frac, "price_per_gpu_hour_usd": price, "cost_per_hour_usd": per_hour,
            "mean_kv_transfer_ms": summary.get("mean_kv_transfer_ms"),
            "p99_ttft_ms": summary.get("p99_ttft_ms"), "p99_tpot_ms": summary.get("p99_tpot_ms")}


def search(base: Scenario, rate: float, hardware: list[Any], hw_prices: dict[str, float | None], tps: list[int],
           headroom: float, slo_target: float, tol: float, executor: Any) -> list[dict[str, Any]]:
    """Every (hardware, prefill TP, decode TP) candidate, feasible ones cheapest first."""
    b = base.replace(replicas=1, rate=None, disagg=None, deployment={}).as_dict()
    # MoE models: each pair also with expert parallelism over both pools' TP groups
    moe = base.cost_model().model.moe is not None
    eps = (False, True) if moe else (False,)
    tasks = [(b, hw, tp_p, tp_d, rate, headroom, slo_target, tol, hw_prices.get(hw), ep)
             for hw in hardware for tp_p in tps for tp_d in tps for ep in eps
             if not (ep and tp_p == 1 and tp_d == 1)]
    rows = list(executor.map(disagg_candidate, tasks))
    rows.sort(key=lambda r: (r["status"] != "feasible", r.get("cost_per_hour_usd") is None,
                             r.get("cost_per_hour_usd") or 0.0, r.get("gpus") or 0))
    return rows


def why(best_agg: dict[str, Any] | None, best_dis: dict[str, Any] | None) -> str:
    """One paragraph: which shape wins and why, with the per-GPU capacities behind it."""
    if best_dis is None and best_agg is None:
        return "none: no deployment meets the SLOs"
    if best_dis is None:
        return "aggregated wins: no disaggregated candidate meets the SLOs"
    ep = f", EP {best_dis['prefill_ep']}/{best_dis['decode_ep']}" if best_dis.get("prefill_ep", 1) > 1 else ""
    dis = (f"disaggregated {best_dis['disagg']} (prefill TP{best_dis['prefill_tp']}, decode TP{best_dis['decode_tp']}"
           f"{ep}) needs {best_dis['gpus']} GPUs (${best_dis['cost_per_hour_usd'] or 0:.2f}/h): one prefill replica "
           f"serves {best_dis['prefill_capacity']:.3g} req/s within the TTFT SLO, one decode replica "
           f"{best_dis['decode_capacity']:.3g} req/s within TPOT, KV transfer "
           f"{best_dis['mean_kv_transfer_ms'] or 0:.3g} ms per request")
    if best_agg is None:
        return f"disaggregated wins: no aggregated candidate meets the SLOs; {dis}"
    per_gpu = best_agg["slo_capacity"] / best_agg["gpus_per_replica"]
    agg = (f"aggregated {best_agg['replicas']} x TP{best_agg['tp']} needs {best_agg['gpus']} GPUs "
           f"(${best_agg.get('cost_per_hour_usd') or 0:.2f}/h): one replica serves {best_agg['slo_capacity']:.3g} "
           f"req/s ({per_gpu:.3g} per GPU) with prefills and decodes sharing its steps")
    key = (best_agg.get("cost_per_hour_usd") or np.inf, best_agg["gpus"])
    key_d = (best_dis.get("cost_per_hour_usd") or np.inf, best_dis["gpus"])
    if key_d < key:
        return (f"disaggregated wins: each pool is sized for its own SLO (prefill for TTFT, decode for TPOT) "
                f"and decodes no longer wait behind prefills; {dis}; {agg}")
    if key_d == key:
        return f"aggregated wins: a tie in $/h and GPUs, and it needs no KV transfer; {agg}; {dis}"
    return (f"aggregated wins: here prefill interference costs less than sizing two pools apart "
            f"(each rounded up to whole replicas, one of them under-used); {agg}; {dis}")


def goodput_per_gpu(sc: Scenario, slo_target: float = 0.9, tol: float = 0.02) -> dict[str, float]:
    """DistServe's metric: the highest rate at which >= slo_target of requests meet every SLO
    (stable run, below the deployment's offline maximum), per GPU of the deployment
    (aggregated replicas or a P:D pair)."""
    _, s0 = sc.replace(num_requests=2).run()
    gpus = int(s0["num_gpus"])
    # no rate at or above the offline maximum is sustainable, whatever a finite run shows
    offline = sc.replace(rate=math.inf).run()[1]["request_throughput"]

    def ok(r: float) -> bool:
        if r >= offline:
            return False
        frac, unstable, _ = _good_fraction(sc, r, sc.slos_s)
        return frac >= slo_target and not unstable

    rate = _capacity(ok, tol)
    return {"goodput": rate, "gpus": gpus, "goodput_per_gpu": rate / gpus, "offline_max_throughput": offline}
