"""Turn a simulation's per-request records into vLLM's benchmark metrics.

Definitions and JSON names are those of `vllm bench serve` (docs/serving_model.md), for
request i with arrival a_i, first token f_i, last token l_i and out_i output tokens:

    TTFT_i = f_i - a_i          E2EL_i = l_i - a_i
    TPOT_i = (E2EL_i - TTFT_i) / (out_i - 1)      for out_i > 1 (see `tpot`)
    ITL    = every gap between consecutive tokens, pooled over requests

One-token outputs have no TPOT: they are left out of the TPOT statistics, and for goodput
their TPOT counts as 0 (vLLM's rule). Percentiles interpolate linearly, as numpy.percentile
does. Goodput (DistServe): a request is good when it completed and meets every SLO given
(<=, inclusive); request_goodput = good / duration.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from simulator.metrics.slo import SLO_KEYS
from simulator.serving.records import COMPLETED, REJECTED, SimResult, tpot
from simulator.specs.checks import SpecError

PERCENTILES = (50, 90, 95, 99)


def weighted_percentile(values: np.ndarray, counts: np.ndarray, q: float) -> float:
    """numpy.percentile (linear) of the array where values[i] appears counts[i] times.
    `values` must be sorted ascending."""
    N = int(counts.sum())
    if N == 0:
        return float("nan")
    cum = np.cumsum(counts)
    h = (N - 1) * q / 100.0
    lo = int(np.floor(h))
    hi = min(lo + 1, N - 1)
    v_lo = values[np.searchsorted(cum, lo, side="right")]
    v_hi = values[np.searchsorted(cum, hi, side="right")]
    return float(v_lo + (h - lo) * (v_hi - v_lo))


def _stats(prefix: str, x: np.ndarray, out: dict[str, Any], pcts: tuple = PERCENTILES) -> None:
    """mean_/median_/std_/pNN_ of x (seconds) written in ms under vLLM's names."""
    x = x[np.isfinite(x)]
    if len(x) == 0:
        for k in ("mean", "median", "std"):
            out[f"{k}_{prefix}_ms"] = float("nan")
        for p in pcts:
            out[f"p{_pname(p)}_{prefix}_ms"] = float("nan")
        return
    out[f"mean_{prefix}_ms"] = float(np.mean(x)) * 1e3
    out[f"median_{prefix}_ms"] = float(np.median(x)) * 1e3
    out[f"std_{prefix}_ms"] = float(np.std(x)) * 1e3
    for p in pcts:
        out[f"p{_pname(p)}_{prefix}_ms"] = float(np.percentile(x, p)) * 1e3


def _pname(p: float) -> str:
    return f"{p:g}"


def good_mask(res: SimResult, slos: dict[str, float]) -> np.ndarray:
    """Completed requests meeting every SLO (inclusive); a one-token output meets any TPOT SLO."""
    ok = res.status == COMPLETED
    ttft = res.first_token_s - res.arrival_s
    e2el = res.finish_s - res.arrival_s
    # tolerance: times are sums of floats; an SLO equal to the exact value must pass
    eps = 1e-9
    with np.errstate(invalid="ignore"):  # NaN times of unfinished requests compare False
        if "ttft" in slos:
            ok &= ttft <= slos["ttft"] + eps
        if "tpot" in slos:
            # vLLM counts TPOT as 0 for <= 1 output token, i.e. it always meets the SLO
            ok &= (res.output_len <= 1) | (tpot(ttft, e2el, res.output_len) <= slos["tpot"] + eps)
        if "e2el" in slos:
            ok &= e2el <= slos["e2el"] + eps
    return ok


def _check_slos_s(goodput: Any) -> None:
    if goodput is None:
        return
    if not isinstance(goodput, dict):
        raise SpecError(f"goodput: {type(goodput).__name__} given; a dict of {{metric: seconds}} is needed")
    for k, v in goodput.items():
        if k not in SLO_KEYS:
            raise SpecError(f"goodput: unknown metric {str(k)[:40]!r}; allowed: {', '.join(SLO_KEYS)}")
        if isinstance(v, bool) or not isinstance(v, (int, float, np.number)) or not (math.isfinite(v) and v > 0):
            raise SpecError(f"goodput: {k} value {str(v)[:40]!r} must be a finite number of seconds > 0")


def summarize(res: SimResult, goodput: dict[str, float] | None = None,
              percentiles: tuple = PERCENTILES) -> dict[str, Any]:
    """vLLM's result keys plus llmsim's extras, from a SimResult. Times in ms, rates per s.

    `goodput`: {metric: seconds}, metric one of `slo.SLO_KEYS`, each a finite number > 0
    (SpecError otherwise: an unknown key would silently count every request good)."""
    _check_slos_s(goodput)
    done = res.status == COMPLETED
    rejected = res.status == REJECTED
    n_done = int(done.sum())
    arr = res.arrival_s
    # the client's clock starts before the first send (vLLM's benchmark_start_time: a vLLM
    # schedule's first request goes out at t_0 > 0); a trace's at its first arrival
    start = res.meta.get("clock_start_s")
    first_arrival = float(np.nanmin(arr)) if start is None and len(arr) else float(start or 0.0)
    last_finish = float(np.nanmax(res.finish_s[done])) if n_done else first_arrival
    # requests that failed after being sent (a client timeout) end the run too: the client
    # waits for them (vLLM gathers every task; inference-perf's stage ends after its last request)
    ended = res.failed_s[np.isfinite(res.failed_s)] if res.failed_s is not None else ()
    if len(ended):
        last_finish = max(last_finish, float(np.max(ended)))
    duration = max(last_finish - first_arrival, 0.0)
    out_tok = int(res.output_len[done].sum())
    in_tok = int(res.input_len[done].sum())
    # no completion: throughputs are 0, not NaN; a zero-length run with completions has no rate
    safe = duration if duration > 0 else (float("inf") if n_done == 0 else float("nan"))
    s: dict[str, Any] = {
        "duration": duration,
        "completed": n_done,
        "failed": int(rejected.sum()),
        "num_requests": int(len(arr)),
        "total_input_tokens": in_tok,
        "total_output_tokens": out_tok,
        "request_throughput": n_done / safe,
        "output_throughput": out_tok / safe,
        "total_token_throughput": (in_tok + out_tok) / safe,
    }
    ttft = (res.first_token_s - arr)[done]
    e2el = (res.finish_s - arr)[done]
    _stats("ttft", ttft, s, percentiles)
    _stats("tpot", tpot(ttft, e2el, res.output_len[done]), s, percentiles)  # NaNs dropped
    v, c = res.itl_values_s, res.itl_counts
    if c.sum():
        mean = float((v * c).sum() / c.sum())
        s["mean_itl_ms"] = mean * 1e3
        s["median_itl_ms"] = weighted_percentile(v, c, 50) * 1e3
        s["std_itl_ms"] = float(np.sqrt(((v - mean) ** 2 * c).sum() / c.sum())) * 1e3
        for p in percentiles:
            s[f"p{_pname(p)}_itl_ms"] = weighted_percentile(v, c, p) * 1e3
    else:
        _stats("itl", np.zeros(0), s, percentiles)
    _stats("e2el", e2el, s, percentiles)
    if res.client_queue_s is not None:  # a concurrency cap: vLLM's client-side queueing keys
        queue = res.client_queue_s[done]
        _stats("client_queue_time", queue, s, percentiles)
        _stats("e2el_including_client_queue", e2el + queue, s, percentiles)
    slos = goodput or {}
    if slos:
        good = good_mask(res, slos)
        s["request_goodput"] = int(good.sum()) / safe
        s["good_requests"] = int(good.sum())
        s["good_fraction"] = int(good.sum()) / len(arr) if len(arr) else float("nan")
        s["goodput_slos_ms"] = {k: v * 1e3 for k, v in slos.items()}
    else:
        s["request_goodput"] = None
    meta = res.meta
    s.update(meta.get("utilization") or {})  # MFU/MBU: time-weighted mean, p50, p99
    s["mean_batch_size"] = meta.get("mean_batch_size")
    s["peak_kv_utilization"] = meta.get("peak_kv_utilization")
    s["preemptions"] = int(res.preemptions.sum())
    s["preempted_requests"] = int((res.preemptions > 0).sum())
    s["steps"] = meta.get("steps")
    # prompt tokens served from the prefix cache / prompt tokens (0 with caching off)
    s["prefix_cache_hit_rate"] = meta.get("prefix_cache_hit_rate", 0.0)
    cpt = meta.get("chars_per_token")
    if cpt:
        s["output_chars_per_s"] = s["output_throughput"] * cpt
    gpus = meta.get("gpus_per_replica", 1) * meta.get("num_replicas", 1)
    s["num_gpus"] = gpus
    s["output_throughput_per_gpu"] = s["output_throughput"] / gpus
    if rejected.any():
        reasons: dict[str, int] = {}
        for r in np.flatnonzero(rejected)[:100000].tolist():
            key = res.reasons.get(r, "rejected")
            reasons[key] = reasons.get(key, 0) + 1
        s["failed_reasons"] = reasons
    s.update(stability(res))
    return s


def stability(res: SimResult) -> dict[str, Any]:
    """Did the run reach a steady state?

    Past saturation the queue grows without bound, so the queueing delay (TTFT) of request
    i grows linearly with its arrival time, at slope 1 - capacity/offered. A run is flagged
    unstable when the least-squares slope of TTFT vs arrival time exceeds 0.05 s/s (capacity
    below ~95 % of the offered rate) and the median TTFT of the last quarter of arrivals is
    more than twice (and 50 ms more than) that of the first quarter. `achieved_rate` is the
    completion rate over the run.
    """
    arr = res.arrival_s
    n = len(arr)
    offered = res.meta.get("offered_rate", float("nan"))
    done = res.status == COMPLETED
    out: dict[str, Any] = {"offered_rate": offered}
    if done.any():
        dur = float(np.max(res.finish_s[done]) - np.min(arr))
        out["achieved_rate"] = float(done.sum()) / dur if dur > 0 else float("nan")
    else:
        out["achieved_rate"] = 0.0
    if n < 20 or not np.isfinite(offered) or res.meta.get("concurrency") or done.sum() < 20:
        out["unstable"] = False
        out["ttft_slope"] = None
        return out
    if res.client_queue_s is not None:  # a capped stream: the backlog waits at the client
        arr = arr - res.client_queue_s  # scheduled arrivals; TTFT then counts the client wait
    a = arr[done]
    ttft = (res.first_token_s - arr)[done]
    order = np.argsort(a, kind="stable")
    a, ttft = a[order], ttft[order]
    da = a - a.mean()
    var = float(np.dot(da, da))
    slope = float(np.dot(da, ttft - ttft.mean()) / var) if var > 0 else 0.0
    q = max(len(a) // 4, 1)
    first, last = float(np.median(ttft[:q])), float(np.median(ttft[-q:]))
    out["ttft_slope"] = slope
    out["unstable"] = bool(slope > 0.05 and last > 2 * first and last - first > 0.05)
    return out
