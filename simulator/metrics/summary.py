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
from simulator.specs.checks import SpecError, check_instance, check_number, show

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
    check_instance("res", res, SimResult)
    _check_slos_s(goodput)
    if isinstance(percentiles, (str, bytes)) or not hasattr(percentiles, "__iter__"):
        raise SpecError(f"percentiles: {show(percentiles)} is not a list of numbers in [0, 100]")
    percentiles = tuple(percentiles)
    for q in percentiles:
        check_number("percentiles", q, 0.0, 100.0)
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
    api = meta.get("api_server")  # client_view: what the API server adds to TTFT and E2E
    s["api_server_latency_ms"] = None if api is None else api["latency_s"] * 1e3
    s["tokenizer_mean_ms"] = None if api is None else api["tokenizer_mean_s"] * 1e3
    s["stream_output_us"] = None if api is None else api["stream_output_s"] * 1e6
    # tokens the API server's loop, behind the engine, merged into chunks already waiting
    s["stream_merged_fraction"] = None if api is None else api.get("merged_fraction", 0.0)
    s["api_servers"] = None if api is None else api.get("servers", 1)
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


#: Stability (docs/sweep.md, "Unstable point"): the arrival window skips this fraction of the
#: arrival span (start-up from an empty system) ...
WINDOW_WARMUP = 0.1
#: ... and growth compares the mid window [25 %, 50 %] of the arrival span with the late one
#: [75 %, 100 %] (and the one between them, [50 %, 75 %])
MID_WINDOW, LATE_WINDOW = (0.25, 0.5), (0.75, 1.0)
#: growth that keeps up: the late half of it at least this share of the early half (a system
#: filling towards its steady state grows ever more slowly; an overloaded one steadily)
KEEPS_GROWING = 0.5
#: requests in the system (waiting + running) grow at more than this share of the arrival rate
GROWTH_SHARE = 0.05
#: TPOT or the decode batch growing by this factor between the windows counts while requests
#: accumulate at more than ACCUMULATING x the arrival rate
GROWTH_RATIO = 1.5
ACCUMULATING = 0.02
#: fewer than this share of the arriving requests get their first token inside the window
STARTED_RATIO = 0.95


def stability(res: SimResult) -> dict[str, Any]:
    """Did the run reach a steady state? `unstable` when any signal fires (`unstable_signals`
    lists them; docs/sweep.md gives the thresholds):

    * ``ttft_growth``: past saturation the queue grows, so the queueing delay (TTFT) of request
      i grows with its arrival time, at slope 1 - capacity/offered: the least-squares slope of
      TTFT vs arrival time exceeds 0.05 s/s and the median TTFT of the last quarter of arrivals
      is more than twice (and 50 ms more than) that of the first quarter;
    * ``in_flight_growth``: the requests in the system (waiting and running) keep growing: their
      mean over the late window [75 %, 100 %] of the arrival span exceeds the mid window's
      [25 %, 50 %] by more than GROWTH_SHARE of the requests that arrived in between, by more
      than twice the counting noise (2 sqrt(N_mid + N_late)), and steadily: the growth from
      [50 %, 75 %] to the late window is at least KEEPS_GROWING of that from the mid window to
      [50 %, 75 %] (a system filling towards its steady state, as a short run does, grows ever
      more slowly). With many seats (vLLM: 1024) overload admits everyone and
      shows as a growing decode batch, not as TTFT;
    * ``tpot_growth`` / ``decode_batch_growth``: the median TPOT of the requests arriving in the
      late window, or the mean decode batch of its steps, is GROWTH_RATIO x the mid window's
      while requests accumulate (in-flight growth > ACCUMULATING of arrivals, beyond the
      counting noise);
    * ``throughput_deficit``: inside the arrival window fewer than STARTED_RATIO of the
      arriving requests get their first token (`window_started_rate` <
      0.95 x `window_offered_rate`), by more than sqrt(arrivals): the waiting queue grows;
    * ``stopped_early``: the run was stopped before its end because it had already failed
      (`meta["stopped_early"]`, set by a capacity search's watch).

    `achieved_rate` is the completion rate over the run: requests completed per second from
    the first request sent to the last completion, ``completed / (max finish - min arrival)``.
    Requests never sent (a closed loop or chat turns stopped by `max_duration_s`: NaN arrival)
    count in neither term, so it is a number whenever a request was sent (0.0 when none
    completed). The window rates count requests arriving, getting their first token and
    completing per second inside the arrival window (t0, t_last], t0 = t_first +
    WINDOW_WARMUP x the arrival span.
    """
    arr = res.arrival_s
    n = len(arr)
    offered = res.meta.get("offered_rate", float("nan"))
    done = res.status == COMPLETED
    out: dict[str, Any] = {"offered_rate": offered}
    out["achieved_rate"] = achieved_rate(res)
    out.update(zip(("window_offered_rate", "window_started_rate", "window_completed_rate"),
                   window_rates(res), strict=True))
    out["window_span_s"] = _window_span(res)
    signals: list[str] = []
    stopped = res.meta.get("stopped_early")
    if stopped:
        signals.append("stopped_early")
        out["stopped_early"] = stopped
    if n < 20 or not np.isfinite(offered) or res.meta.get("concurrency") or done.sum() < 20:
        out["unstable"] = bool(signals)
        out["unstable_signals"] = signals
        out["ttft_slope"] = None
        return out
    if res.client_queue_s is not None:  # a capped stream: the backlog waits at the client
        arr = arr - res.client_queue_s  # scheduled arrivals; TTFT then counts the client wait
    slope, ttft_grows = _ttft_growth(arr, res.first_token_s, done)
    out["ttft_slope"] = slope
    growth = _growth(res, arr, done)
    out.update(growth)
    # growth beyond counting noise: twice the spread of two Poisson counts of these means
    n_mid, n_between, n_late = growth["in_flight_mid"], growth["in_flight_between"], growth["in_flight_late"]
    beyond_noise = bool(n_late - n_mid > 2 * math.sqrt(n_mid + n_late)
                        and n_late - n_between >= KEEPS_GROWING * (n_between - n_mid))
    accumulating = beyond_noise and growth["in_flight_growth"] > ACCUMULATING
    for name, fired in (
            ("ttft_growth", ttft_grows),
            ("in_flight_growth", beyond_noise and growth["in_flight_growth"] > GROWTH_SHARE),
            ("tpot_growth", growth["tpot_growth"] > GROWTH_RATIO and accumulating),
            ("decode_batch_growth", growth["decode_batch_growth"] > GROWTH_RATIO and accumulating),
            ("throughput_deficit", _deficit(out))):
        if fired:
            signals.append(name)
    out["unstable"] = bool(signals)
    out["unstable_signals"] = signals
    return out


def achieved_rate(res: SimResult) -> float:
    """Requests completed per second from the first request sent to the last completion.
    Never-sent requests have a NaN arrival: only the finite arrivals set the start (one NaN
    used to make the whole rate NaN, printed as null). 0.0 when none completed; NaN only
    when the span is not positive, which a served request (at least one step) never gives."""
    done = res.status == COMPLETED
    if not done.any():
        return 0.0
    arr = np.asarray(res.arrival_s, dtype=float)
    sent = arr[np.isfinite(arr)]  # a completed request was sent, so this is never empty
    dur = float(np.max(res.finish_s[done]) - np.min(sent))
    return float(done.sum()) / dur if dur > 0 else float("nan")


def _deficit(out: dict[str, Any]) -> bool:
    """Fewer than STARTED_RATIO of the window's arrivals got their first token inside it, by more
    than one standard deviation of the arrival count (sqrt of it): in a short run the last few
    arrivals' first tokens fall after the window's end whatever the load (20 requests: one in
    18, a 'deficit' of 6 %)."""
    w_off, w_started, span = out["window_offered_rate"], out["window_started_rate"], out.get("window_span_s")
    if not (math.isfinite(w_off) and math.isfinite(w_started)) or not span:
        return False
    arrived, started = w_off * span, w_started * span
    return started < STARTED_RATIO * arrived and arrived - started > math.sqrt(arrived)


def _ttft_growth(arr: np.ndarray, first: np.ndarray, done: np.ndarray) -> tuple[float, bool]:
    """(least-squares slope of TTFT vs arrival, whether TTFT grows: slope > 0.05 s/s and the last
    quarter's median TTFT > 2x and > 50 ms above the first quarter's)."""
    a = arr[done]
    ttft = (first - arr)[done]
    order = np.argsort(a, kind="stable")
    a, ttft = a[order], ttft[order]
    da = a - a.mean()
    var = float(np.dot(da, da))
    slope = float(np.dot(da, ttft - ttft.mean()) / var) if var > 0 else 0.0
    q = max(len(a) // 4, 1)
    head, tail = float(np.median(ttft[:q])), float(np.median(ttft[-q:]))
    return slope, bool(slope > 0.05 and tail > 2 * head and tail - head > 0.05)


def _growth(res: SimResult, arr: np.ndarray, done: np.ndarray) -> dict[str, float]:
    """Mid window vs late window of the arrival span (MID_WINDOW, LATE_WINDOW): the mean number of
    requests in the system (arrived, not yet finished or rejected) at 64 instants of each,
    its growth as a share of the requests arriving in between, and the late/mid ratios of the
    median TPOT (by arrival) and of the mean decode batch (the timeline's steps)."""
    a0, a1 = float(np.nanmin(arr)), float(np.nanmax(arr))
    span = a1 - a0
    mid = (a0 + MID_WINDOW[0] * span, a0 + MID_WINDOW[1] * span)
    late = (a0 + LATE_WINDOW[0] * span, a0 + LATE_WINDOW[1] * span)
    between = (mid[1], late[0])
    sent = np.sort(arr[np.isfinite(arr)])
    gone = np.sort(np.concatenate([res.finish_s[done], arr[res.status == REJECTED]]))

    def in_system(w: tuple[float, float]) -> tuple[float, float]:
        t = np.linspace(w[0], w[1], 64)
        count = np.searchsorted(sent, t, side="right") - np.searchsorted(gone, t, side="right")
        return float(count.mean()), float(t.mean())

    n_mid, t_mid = in_system(mid)
    n_between, _ = in_system(between)
    n_late, t_late = in_system(late)
    rate = len(sent) / span if span > 0 else math.inf
    share = (n_late - n_mid) / ((t_late - t_mid) * rate) if t_late > t_mid and math.isfinite(rate) else 0.0
    ttft = res.first_token_s - arr
    per_token = tpot(ttft, res.finish_s - arr, res.output_len)

    def median_by_arrival(w: tuple[float, float]) -> float:
        m = done & (arr >= w[0]) & (arr <= w[1]) & np.isfinite(per_token)
        return float(np.median(per_token[m])) if m.any() else math.nan

    t_steps, batch = res.timeline_column("time_s"), res.timeline_column("batch_size")

    def mean_batch(w: tuple[float, float]) -> float:
        m = (t_steps >= w[0]) & (t_steps <= w[1])
        return float(batch[m].mean()) if m.any() else math.nan

    return {"in_flight_mid": n_mid, "in_flight_between": n_between, "in_flight_late": n_late,
            "in_flight_growth": share, "tpot_growth": _ratio(median_by_arrival(late), median_by_arrival(mid)),
            "decode_batch_growth": _ratio(mean_batch(late), mean_batch(mid))}


def _ratio(a: float, b: float) -> float:
    return a / b if math.isfinite(a) and math.isfinite(b) and b > 0 else math.nan


def _window_span(res: SimResult) -> float:
    """The length of `window_rates`' arrival window (NaN where it has none)."""
    arr = np.asarray(res.arrival_s, dtype=float)
    if len(arr) < 20 or not np.all(np.isfinite(arr)):
        return math.nan
    a0, a1 = float(arr.min()), float(arr.max())
    return (a1 - a0) * (1.0 - WINDOW_WARMUP)


def window_rates(res: SimResult) -> tuple[float, float, float]:
    """Requests (arriving, getting their first token, completing) per second inside the
    arrival window (t0, t_last], t0 = first arrival + WINDOW_WARMUP x arrival span.

    In a steady state the first-token rate equals the arrival rate up to the change in the
    waiting queue; past saturation the queue grows and it falls behind, so it tells a
    growing queue from a long drain. (The summary's ``achieved_rate``, completions / (last
    finish - first arrival), and the windowed completion rate both read low whenever the
    run is short compared with the requests' E2EL: e.g. azure-conv at 12 req/s, 500
    requests, completes 0.89x the offered rate with no queue at all.) NaN for < 20
    requests or when every request arrives at once.
    """
    arr = np.asarray(res.arrival_s, dtype=float)
    if len(arr) < 20 or not np.all(np.isfinite(arr)):
        return math.nan, math.nan, math.nan
    a0, a1 = float(arr.min()), float(arr.max())
    t0 = a0 + WINDOW_WARMUP * (a1 - a0)
    span = a1 - t0
    if not span > 0:
        return math.nan, math.nan, math.nan
    done = res.status == COMPLETED
    fin = res.finish_s
    first = res.first_token_s
    arrivals = int(np.count_nonzero((arr > t0) & (arr <= a1)))
    started = int(np.count_nonzero(done & (first > t0) & (first <= a1)))
    departures = int(np.count_nonzero(done & (fin > t0) & (fin <= a1)))
    return arrivals / span, started / span, departures / span
