"""The SLO capacity of one replica (or one deployment) with few simulations (issue 24).

`sweep` draws a whole latency curve; `plan` only needs the highest rate that meets the SLOs,
so it asks `search`, which spends its simulations where the answer is:

1. **Analytic bound** X_a (`analytic_bound`): the throughput at the engine's batch limits from
   the cost model alone. Summed over every step a run takes, the step-time formula evaluated at
   the summed batch statistics is at most the run's time (a max of sums never exceeds the sum
   of maxes); a request needs at least O / max_num_seqs and (I + O - 1) / max_num_batched_tokens
   steps of per-step cost, and the prompt tokens a prefix cache could serve are not priced. So
   X_a = 1 / (that time per mean request) is an upper bound of any rate a replica sustains.
2. **Offline maximum** X_off: the simulated throughput with every request at t = 0 (as `sweep`).
   No rate at or above it is sustainable, and with few requests it is the honest ceiling of
   what those runs can show, so the capacity is searched below hi0 = min(X_a, X_off) and can
   never be reported above either.
3. **Bracketed search** (`search`): probes keep a bracket [lo, hi]: lo the highest rate verified
   to meet the SLOs (good fraction >= target and not saturated, `meets_slo`), hi the lowest
   that failed (hi0 before any). The next probe interpolates the binding SLO's ratio (the
   target quantile of its metric over its bound, `slo_breakdown`) in log scale between the two
   ends (from lo towards hi0 by the shape 1 / (1 - r / hi0) while only lo is known; a probe
   stopped early gives the ratio of what was known at the stop, a lower bound; the midpoint
   when there is no ratio), kept inside the middle 80 % of the bracket; when the estimate lies within the tolerance of lo, the probe is lo x (1 + tol),
   which closes the bracket if it fails. When the same end moved twice in a row the estimates
   keep landing on one side, so the next probe tests the other end's closure (hi / (1 + tol)
   or lo x (1 + tol); the midpoint while the bracket is wider than 4 tol). The search ends when
   (hi - lo) / lo <= tol, or earlier when the caller says the bracket answers its question
   (`enough`: a plan stops once every capacity in the bracket needs the same replica count,
   and `refine` narrows the cheapest candidate's later). When even the first probe fails it steps down through 45 %, 20 %, 5 %,
   1 % and 0.1 % of hi0 (failing there: capacity 0, "unmeetable even at low load").
4. **Early stop** (`SloWatch`): a probe is stopped as soon as its failure is certain: more
   requests already miss an SLO than the target allows. A request whose first token has not
   come after the TTFT bound, or whose decode has lasted longer than the TPOT bound allows,
   misses it whatever happens next, so a growing queue (TTFT) or a growing decode batch (TPOT)
   stops a probe soon after it starts to grow. Until then the probe is the full simulation,
   step for step, so a probe that meets the SLOs is never cut short and every verdict is the
   full run's. (A stop on the growth of the queue or of the requests in the system alone would
   not be exact: a burst of a replayed trace grows them for a while, then drains; azure-conv
   on 70B TP8 at 8.5 req/s tripled its requests in flight within the first 40 % and met the
   SLOs in full.)
5. **Binding SLO** (`slo_breakdown`): per SLO, the fraction of requests that miss it and its
   metric at the target quantile; the binding SLO fails first (the most misses at the first
   failing rate), the others' margins are read at the capacity.

Workloads and cost models are made once per scenario and rate (`Reuse`) and shared by every
probe and candidate of a plan. Pure: no printing, no files.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from simulator.cost.roofline import CostModel
from simulator.metrics.summary import STARTED_RATIO
from simulator.scenario import Scenario
from simulator.serving.records import COMPLETED, REJECTED, Records, SimResult, tpot
from simulator.serving.sched.registry import EngineConfig
from simulator.workloads.workload import Workload

#: A point is saturated when achieved < SATURATION_RATIO x offered (or flagged unstable).
SATURATION_RATIO = STARTED_RATIO
#: the first probe of a search, as a fraction of hi0 = min(analytic bound, offline maximum): one
#: replica's SLO capacity was 0.43-0.74 of hi0 on the README plan's nine candidates (median 0.70);
#: a first probe a little below it usually meets the SLOs and the next extrapolates from it
FIRST_PROBE = 0.65
#: while no probe met the SLOs, the probes step down through these fractions of hi0; failing at
#: the last (LOWEST_PROBE) the capacity is 0: the SLOs are unmeetable even at low load
DESCENT = (FIRST_PROBE, 0.45, 0.2, 0.05, 0.01, 0.001)
LOWEST_PROBE = DESCENT[-1]
#: a probe whose tail is this share of the bracket from either end is moved inside it
BRACKET_GUARD = 0.1
MAX_PROBES = 40


# --------------------------------------------------------------------------- stability verdicts


def is_saturated(p: dict[str, Any]) -> bool:
    """A point past saturation: flagged `unstable` by the simulator (any of its signals,
    `metrics.summary.stability`), or offered at or above the offline maximum or the analytic
    bound (`above_offline_max`) or above a curve's saturation rate (`above_saturation`; both set
    by `sweep` and `search`), or, for a point kept from an older run without the window
    check in `unstable`, ``window_started_rate < 0.95 x window_offered_rate``. Without window
    rates (< 20 requests) the summary's ``achieved_rate < 0.95 x offered_rate`` is used."""
    if p.get("unstable") or p.get("above_offline_max") or p.get("above_saturation"):
        return True
    if "unstable_signals" in p:  # the simulator judged every signal, the window's included
        return False
    pairs = ((p.get("window_offered_rate"), p.get("window_started_rate")),
             (p.get("offered_rate"), p.get("achieved_rate")))
    for off, got in pairs:
        if off is not None and got is not None and math.isfinite(off) and math.isfinite(got):
            return got < SATURATION_RATIO * off
    return False


def meets_slo(p: dict[str, Any], target: float) -> bool:
    """A point counts toward SLO capacity when good_fraction >= target *and* it is not
    saturated: past saturation the queue grows without bound, so a finite run's good
    fraction there describes the run's length, not a sustainable rate."""
    return (p.get("good_fraction") or 0.0) >= target and not is_saturated(p)


# --------------------------------------------------------------------------- the binding SLO


def slo_breakdown(res: SimResult, slos_s: dict[str, float], target: float) -> dict[str, Any]:
    """Per SLO: the fraction of requests that miss it (`slo_miss`; a request that did not
    complete misses every SLO) and its metric at the target quantile in ms (`slo_at_target_ms`,
    the p99 for a target of 0.99; over every request, unfinished ones counted as infinite),
    its ratio to the bound (`slo_ratio`); `binding_slo`: the SLO with the most misses (ties:
    the highest ratio), i.e. the one that fails first as the rate rises."""
    if not slos_s:
        return {}
    done = res.status == COMPLETED
    arr = res.arrival_s
    ttft = np.where(done, res.first_token_s - arr, np.inf)
    e2el = np.where(done, res.finish_s - arr, np.inf)
    per_token = np.full(len(arr), np.inf)
    # one-token outputs have no TPOT: 0, as goodput counts them (metrics.summary.good_mask)
    per_token[done] = np.nan_to_num(tpot(ttft[done], e2el[done], res.output_len[done]), nan=0.0)
    metric = {"ttft": ttft, "tpot": per_token, "e2el": e2el}
    miss, at, ratio = {}, {}, {}
    for k, bound in slos_s.items():
        x = metric[k]
        miss[k] = float(np.mean(x > bound + 1e-9)) if len(x) else 0.0
        # the ceil(target n)-th smallest value: <= the bound exactly when >= target of the
        # requests meet this SLO (the goodput rule, one SLO at a time)
        q = float(np.quantile(x, target, method="inverted_cdf")) if len(x) else math.nan
        at[k] = q * 1e3
        ratio[k] = q / bound
    binding = max(slos_s, key=lambda k: (miss[k], ratio[k]))
    return {"slo_miss": miss, "slo_at_target_ms": at, "slo_ratio": ratio, "binding_slo": binding}


def binding_summary(at_capacity: dict[str, Any] | None, first_bad: dict[str, Any] | None,
                    slos_ms: dict[str, float]) -> dict[str, Any] | None:
    """Which SLO binds at a capacity, and the margins of all of them there: `slo` (the binding
    SLO at the first failing rate, else the closest to its bound at the capacity), `margins`:
    per SLO its metric at the target quantile, the bound and 1 - metric / bound at the
    capacity."""
    if not slos_ms or (at_capacity is None and first_bad is None):
        return None
    ref = first_bad if first_bad is not None and first_bad.get("binding_slo") else at_capacity
    slo = (ref or {}).get("binding_slo")
    if first_bad is None and at_capacity is not None and at_capacity.get("slo_ratio"):
        slo = max(slos_ms, key=lambda k: at_capacity["slo_ratio"].get(k, -math.inf))
    margins = {}
    for k, bound in slos_ms.items():
        got = (at_capacity or {}).get("slo_at_target_ms", {}).get(k)
        margins[k] = {"value_ms": got, "slo_ms": bound,
                      "margin": (1.0 - got / bound) if got is not None and math.isfinite(got) else None}
    return {"slo": slo, "margins": margins}


def binding_text(b: dict[str, Any] | None, target: float) -> str:
    """'TPOT (p99 TTFT 640 ms of 1000, 36 % to spare)' for a table or a line; '-' without one."""
    if not b or not b.get("slo"):
        return "-"
    q = f"p{target * 100:g}"
    others = []
    for k, m in b["margins"].items():
        if k == b["slo"] or m["margin"] is None:
            continue
        others.append(f"{q} {k.upper()} {m['value_ms']:.4g} of {m['slo_ms']:g} ms, {m['margin']:.0%} to spare")
    own = b["margins"].get(b["slo"], {})
    head = b["slo"].upper()
    if own.get("margin") is not None:
        head += f" ({q} {own['value_ms']:.4g} of {own['slo_ms']:g} ms at capacity)"
    return head + (f"; {'; '.join(others)}" if others else "")


# --------------------------------------------------------------------------- analytic bound


def _cacheable_tokens(workload: Workload, cfg: EngineConfig) -> np.ndarray:
    """Per request, the prompt tokens an unbounded prefix cache could serve: its leading full
    blocks that an earlier request (or, with a warm cache, any request) also had."""
    from simulator.workloads.shared_prefix import request_block_hashes

    hashes = request_block_hashes(workload, cfg.block_size)
    out = np.zeros(workload.num_requests)
    seen: set[int] = set()
    if cfg.warm_cache:
        for hs in hashes:
            seen.update(hs)
    for i, hs in enumerate(hashes):
        out[i] = sum(1 for h in hs if h in seen) * cfg.block_size
        seen.update(hs)
    return out


def analytic_bound(cost: CostModel, cfg: EngineConfig, workload: Workload) -> float:
    """An upper bound of the request rate one replica sustains (module docstring, step 1), from
    the cost model alone: 1 / (the step-time formula at the mean request's summed batch
    statistics, with its share of the fewest steps the batch limits allow). Prefix-cache
    hits are counted at their most (every earlier block hit), MLA's cached-token term, the
    sliding window's prefill sums and a paged kernel's longest-block floor (Rb) at zero: each
    makes the bound higher, never lower."""
    inp = workload.input_len.astype(float)
    out = workload.output_len.astype(float)
    cached = np.minimum(_cacheable_tokens(workload, cfg), inp - 1) if cfg.enable_prefix_caching else 0.0
    computed = inp - cached
    dec = np.maximum(out - 1.0, 0.0)
    T = float(np.mean(computed + dec))
    S = float(np.mean(out))
    Ad = float(np.mean(dec * (inp + dec / 2.0)))
    Ap = float(np.mean(computed * (cached + computed / 2.0)))
    R = float(np.mean(inp + dec * (inp + (dec + 1.0) / 2.0)))
    window = cost.model.sliding_window
    if window is None:
        Aw, Rw = Ad + Ap, R
    else:
        w = window.window
        p = inp[:, None] + np.arange(int(dec.max()) if len(dec) and dec.max() > 0 else 0)[None, :]
        live = np.arange(p.shape[1])[None, :] < dec[:, None]
        Aw = float(np.mean(np.where(live, np.minimum(p + 0.5, w), 0.0).sum(axis=1))) if p.size else 0.0
        Rw = float(np.mean(np.minimum(inp, w) + np.where(live, np.minimum(p + 1.0, w), 0.0).sum(axis=1))) \
            if p.size else float(np.mean(np.minimum(inp, w)))
    steps = max(S / cfg.max_num_seqs, T / cfg.max_num_batched_tokens)
    # a paged kernel's longest block (a floor per step, not a per-request sum): dropped (Rb = 0)
    x = cost.features(T, S, Ad, Ap, R, Aw, Rw, 0.0, blocks=False)
    budget = float(cfg.max_num_batched_tokens)
    at_budget = cost.features(budget, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, padded=False)
    x[0] = x[3] = steps  # per-step costs: at least this many steps per request
    x[9] = T * at_budget[9] / budget  # experts touched: concave in a step's tokens, at most this per token
    x[11] = T  # padded expert rows: Tx >= T at every step size, and its ratio is not monotone
    per_request = cost.time_of(x)
    return 1.0 / per_request if per_request > 0 else math.inf


# --------------------------------------------------------------------------- early stop


class SloWatch:
    """A probe's watch (`serving.simulate.simulate(watch=)`): stops the run once its failure is
    certain (module docstring, step 4). Times it reads may lie after `t` (a step in progress
    when request r arrives has written its end); unknown ones are bounded by t."""

    def __init__(self, workload: Workload, slos_s: dict[str, float], target: float) -> None:
        self.arrival = np.asarray(workload.arrival_s, dtype=float)
        self.out_len = np.asarray(workload.output_len)
        self.slos = dict(slos_s)
        self.target = target
        n = len(self.arrival)
        self.allowed = n * (1.0 - target) + 1e-9  # more misses than this: good fraction < target
        self.n = n

    def misses(self, r: int, t: float, rec: Records) -> int:
        """Requests among the first r that already miss an SLO, whatever happens next; keeps
        each SLO's metric at the target quantile of what is known of them (`ratio_at_stop`:
        lower bounds of the final values, over the requests arrived so far)."""
        a = self.arrival[:r]
        first, fin = rec.first_token_s[:r], rec.finish_s[:r]
        rejected = rec.status[:r] == REJECTED
        bad = rejected.copy()
        known: dict[str, np.ndarray] = {}
        with np.errstate(invalid="ignore"):
            if "ttft" in self.slos:
                known["ttft"] = np.where(np.isnan(first), t, first) - a
            if "e2el" in self.slos:
                known["e2el"] = np.where(np.isnan(fin), t, fin) - a
            if "tpot" in self.slos:
                out = self.out_len[:r]
                decode_s = np.where(np.isnan(fin), t, fin) - first  # NaN before the first token
                known["tpot"] = np.where(out > 1, np.nan_to_num(decode_s, nan=0.0) / np.maximum(out - 1, 1), 0.0)
            for k, x in known.items():
                bad |= x > self.slos[k] + 1e-9
        self.known = {k: np.where(rejected, np.inf, x) for k, x in known.items()}
        return int(np.count_nonzero(bad))

    def ratio_at_stop(self) -> dict[str, float]:
        """Per SLO, the target quantile of its known lower bounds over its bound (at the stop)."""
        return {k: float(np.quantile(x, self.target, method="inverted_cdf")) / self.slos[k]
                for k, x in getattr(self, "known", {}).items() if len(x)}

    def __call__(self, r: int, t: float, rec: Records) -> str | None:
        if not self.slos:
            return None
        k = self.misses(r, t, rec)
        if k > self.allowed:
            return (f"{k} of the first {r} requests already miss the SLOs (at most "
                    f"{math.floor(self.allowed)} of {self.n} may)")
        return None


# --------------------------------------------------------------------------- reuse


class Reuse:
    """Workloads and cost models made once and shared by the probes and candidates of one plan
    (a workload depends on the workload settings and the rate, not on the hardware; a cost
    model on the replica's shape). Keys are the settings that make each one."""

    _WORKLOAD_KEYS = ("model", "workload", "rate", "burstiness", "concurrency", "num_requests", "input_len",
                      "output_len", "range_ratio", "seed", "skip_bad_rows", "dataset_path", "workload_params")
    _COST_KEYS = ("model", "hardware", "tp", "pp", "ep", "pp_microbatches", "expert_imbalance", "weight_dtype",
                  "activation_dtype", "kv_dtype", "ideal", "efficiency", "engine")

    def __init__(self) -> None:
        self.workloads: dict[str, Workload] = {}
        self.costs: dict[str, CostModel] = {}

    @staticmethod
    def _key(sc: Scenario, keys: tuple[str, ...]) -> str:
        from simulator.analysis.executors import canonical_json

        d = sc.as_dict()
        return canonical_json([d.get(k) for k in keys])

    def clear(self) -> None:
        self.workloads.clear()
        self.costs.clear()

    def workload(self, sc: Scenario) -> Workload:
        key = self._key(sc, self._WORKLOAD_KEYS)
        if key not in self.workloads:
            self.workloads[key] = sc.make_workload()
        return self.workloads[key]

    def cost(self, sc: Scenario) -> CostModel:
        key = self._key(sc, self._COST_KEYS)
        if key not in self.costs:
            self.costs[key] = sc.cost_model()
        return self.costs[key]


def probe(sc: Scenario, rate: float, slo_target: float, reuse: Reuse | None = None,
          early_stop: bool = True, workload: Workload | None = None) -> dict[str, Any]:
    """One simulation of `sc` at `rate` (inf: the offline run), its summary plus `rate` and
    the per-SLO breakdown (`slo_breakdown`); with `early_stop` (finite rates), an `SloWatch`.
    `workload`: served instead of the scenario's own at `rate`."""
    reuse = reuse or Reuse()
    s = sc.replace(rate=float(rate))
    w = workload if workload is not None else reuse.workload(s)
    watch = SloWatch(w, s.slos_s, slo_target) if early_stop and math.isfinite(rate) else None
    res, summary = s.run(workload=w, cost=reuse.cost(s), watch=watch)
    summary["rate"] = float(rate)
    summary.update(slo_breakdown(res, s.slos_s, slo_target))
    if watch is not None and summary.get("stopped_early"):
        summary["slo_ratio_at_stop"] = watch.ratio_at_stop()
    return summary


# --------------------------------------------------------------------------- the search


def _next_rate(lo: dict[str, Any] | None, hi: dict[str, Any] | None, hi0: float, tol: float,
               moves: list[bool]) -> float:
    """The next probe (module docstring, step 3); `lo`/`hi`: the bracket's probed ends; `moves`:
    whether each probe so far met the SLOs."""
    top = hi["rate"] if hi is not None else hi0
    if lo is None:  # nothing good yet: step down from the lowest failure (DESCENT x hi0)
        below = [f * hi0 for f in DESCENT if f * hi0 < top * (1 - 1e-9)]
        return below[0] if below else 0.0
    r_lo = lo["rate"]
    if len(moves) >= 2 and moves[-1] == moves[-2] and hi is not None:
        # the same end moved twice: the estimates keep landing on one side of the capacity,
        # so test whether the bracket closes at the other end (or halve a wide bracket)
        if top > r_lo * (1.0 + 4 * tol):
            return 0.5 * (r_lo + top)
        return top / (1.0 + tol) if moves[-1] else r_lo * (1.0 + tol)
    m_lo = _binding_ratio(lo)
    m_hi = _binding_ratio(hi) if hi is not None else math.nan
    if hi is None and math.isfinite(m_lo) and m_lo > 0:
        # only lo probed: the ratio grows as 1 / (1 - r / hi0) towards the upper bound
        est = hi0 * (1.0 - min(m_lo, 1.0) * (1.0 - r_lo / hi0))
    elif math.isfinite(m_lo) and m_lo > 0 and math.isfinite(m_hi) and m_hi > max(m_lo, 1.0):
        # log-linear between the ends: log m = 0 at the estimate
        est = r_lo + (top - r_lo) * (-math.log(m_lo)) / (math.log(m_hi) - math.log(m_lo))
    else:
        est = 0.5 * (r_lo + top)  # no ratio to interpolate: bisection
    if est <= r_lo * (1.0 + tol):
        return min(r_lo * (1.0 + tol), 0.5 * (r_lo + top))  # closes the bracket if it fails
    guard = BRACKET_GUARD * (top - r_lo)
    return min(max(est, r_lo + guard), top - guard)


def _binding_ratio(p: dict[str, Any] | None) -> float:
    """The largest metric-at-target / bound ratio of a probe (NaN without SLOs); for a probe
    stopped early, of what it knew at the stop (lower bounds: its ratio is at least that)."""
    if p is None:
        return math.nan
    ratios = p.get("slo_ratio_at_stop") if p.get("stopped_early") else p.get("slo_ratio")
    vals = [v for v in (ratios or {}).values() if v is not None and math.isfinite(v)]
    return max(vals) if vals else math.nan


def search(sc: Scenario, slo_target: float = 0.99, tol: float = 0.02, reuse: Reuse | None = None,
           early_stop: bool = True, done: Callable[[], None] | None = None,
           enough: Callable[[float, float], bool] | None = None) -> dict[str, Any]:
    """The SLO capacity of `sc` (module docstring): `slo_capacity` (the verified good rate, 0 when
    the SLOs fail even at LOWEST_PROBE x hi0), `slo_capacity_upper` (the lowest failing rate, or
    hi0), `offline_max_throughput`, `analytic_bound`, `probes` (every probe's summary, in order),
    `binding` (`binding_summary`), `saturation_rate` (the most achieved by a saturated probe, or
    None), `slo_note`, `warnings`, `refined` (whether the bracket is within `tol`). `done` is
    called after each simulation. `enough(lo, hi)`: the search may end before the tolerance
    when it says the bracket already answers the caller's question (a plan: the replica count is
    the same anywhere in it); `refine` narrows it later."""
    reuse = reuse or Reuse()
    tick = done or (lambda: None)
    cost = reuse.cost(sc)
    offline = probe(sc, math.inf, slo_target, reuse, early_stop=False)
    tick()
    x_off = offline["request_throughput"]
    bound = analytic_bound(cost, sc.engine_config(cost), reuse.workload(sc.replace(rate=math.inf))) * sc.replicas
    hi0 = min(x_off, bound) if math.isfinite(x_off) and x_off > 0 else bound
    info: dict[str, Any] = {"offline_max_throughput": x_off, "analytic_bound": bound, "upper_bound": hi0,
                            "upper_bound_source": "offline maximum" if hi0 == x_off else "analytic bound",
                            "probes": [], "warnings": [], "slo_target": slo_target, "slo_tolerance": tol}
    return _narrow(sc, info, slo_target, tol, reuse, early_stop, tick, enough)


def refine(sc: Scenario, info: dict[str, Any], slo_target: float = 0.99, tol: float = 0.02,
           reuse: Reuse | None = None, early_stop: bool = True,
           done: Callable[[], None] | None = None) -> dict[str, Any]:
    """Continue a `search` that ended early (`enough`) until its bracket is within `tol`."""
    return _narrow(sc, info, slo_target, tol, reuse or Reuse(), early_stop, done or (lambda: None), None)


def _bracket(probes: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(the highest probe that met the SLOs below every failed one, the lowest failed one)."""
    bad = min((p for p in probes if not p["meets_slo"]), key=lambda p: p["rate"], default=None)
    good = [p for p in probes if p["meets_slo"] and (bad is None or p["rate"] < bad["rate"])]
    return max(good, key=lambda p: p["rate"], default=None), bad


def _narrow(sc: Scenario, info: dict[str, Any], slo_target: float, tol: float, reuse: Reuse, early_stop: bool,
            tick: Callable[[], None], enough: Callable[[float, float], bool] | None) -> dict[str, Any]:
    """Probe until the bracket is within `tol` (or `enough`); the result fields (`_result`)."""
    hi0, x_off = info["upper_bound"], info["offline_max_throughput"]
    for _ in range(MAX_PROBES):
        lo, hi = _bracket(info["probes"])
        top = hi["rate"] if hi is not None else hi0
        if lo is not None and top <= lo["rate"] * (1.0 + tol) * (1.0 + 1e-9):
            break
        if lo is not None and enough is not None and enough(lo["rate"], top):
            break
        first_good = next((i for i, p in enumerate(info["probes"]) if p["meets_slo"]), len(info["probes"]))
        r = _next_rate(lo, hi, hi0, tol, [p["meets_slo"] for p in info["probes"][first_good:]])
        if not 0 < r < top:
            break
        p = probe(sc, r, slo_target, reuse, early_stop)
        tick()
        p["above_offline_max"] = r >= x_off
        p["saturated"] = is_saturated(p)
        p["meets_slo"] = meets_slo(p, slo_target)
        info["probes"].append(p)
    lo, hi = _bracket(info["probes"])
    info.update(_result(lo, hi, hi0, info, sc.goodput, slo_target, tol))
    return info


def _result(lo: dict[str, Any] | None, hi: dict[str, Any] | None, hi0: float, info: dict[str, Any],
            slos: dict[str, float], target: float, tol: float) -> dict[str, Any]:
    sat = [p["achieved_rate"] for p in info["probes"] if p["saturated"] and not p.get("stopped_early")
           and p.get("achieved_rate") is not None and math.isfinite(p["achieved_rate"])]
    upper = hi["rate"] if hi is not None else hi0
    out: dict[str, Any] = {
        "slo_capacity": lo["rate"] if lo is not None else 0.0,
        "slo_capacity_upper": upper,
        "refined": lo is None or upper <= lo["rate"] * (1.0 + tol) * (1.0 + 1e-9),
        "saturation_rate": max(sat) if sat else None,
        "bisection_probes": len(info["probes"]),
        "stopped_early": sum(1 for p in info["probes"] if p.get("stopped_early")),
        "binding": binding_summary(lo, hi, slos),
        "at_capacity": lo,
    }
    if lo is None:
        low = min((p["rate"] for p in info["probes"]), default=hi0)
        worst = binding_text(binding_summary(None, hi, slos), target) if hi is not None else "-"
        out["slo_note"] = (f"SLOs unmeetable even at low load: good fraction "
                           f"{(hi or {}).get('good_fraction') or 0.0:.3f} < {target:g} at {low:.4g} req/s "
                           f"({low / hi0:.1%} of the bound {hi0:.4g} req/s); binding: {worst}")
    else:
        upper = "the bound" if hi is None else "below it"
        out["slo_note"] = (f"good_fraction >= {target:g} verified at {lo['rate']:.4g} req/s and {upper} at "
                           f"{out['slo_capacity_upper']:.4g} req/s (relative tolerance {tol:g}, "
                           f"{len(info['probes'])} probes, {out['stopped_early']} stopped early)")
    return out


__all__ = ["analytic_bound", "search", "refine", "probe", "SloWatch", "Reuse", "slo_breakdown", "binding_summary",
           "binding_text", "is_saturated", "meets_slo", "SATURATION_RATIO"]
