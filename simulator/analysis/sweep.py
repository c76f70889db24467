"""Rate sweeps: latency knee, saturation rate and SLO capacity of a serving scenario.

A sweep runs one `Scenario` at a series of offered request rates (and, with `--sweep`,
for every combination of other settings: one *curve* per combination) and reads these
numbers off each curve (docs/serving_model.md, "Load, saturation and the knee"; docs/sweep.md):

* **offline max throughput** X: `request_throughput` of the same workload with every request
  arriving at t = 0 (rate = inf). It seeds the automatic rate grid. The **analytic bound**
  (`capacity.analytic_bound`, from the cost model alone) is reported beside it.
* a point is **saturated** when the simulator flags it ``unstable`` (any of its signals:
  TTFT, TPOT, the decode batch or the requests in the system growing with time, or fewer
  than 0.95 x the arriving requests getting their first token inside the arrival window;
  `metrics.summary.stability`), when it is offered at or above the offline max throughput or
  the analytic bound (no rate there is sustainable: ``above_offline_max``), or when it is
  offered above the curve's saturation rate (``above_saturation``).
* **saturation rate**: the most the replica(s) complete per second once they cannot keep
  up: ``max(achieved_rate)`` over the curve, *provided* the curve has a saturated point;
  otherwise the curve never saturated and only ``saturation_lower_bound`` is given.
  ``max_stable_rate`` is the largest offered rate whose point is not saturated, so it never
  exceeds the saturation rate, the offline max throughput or the analytic bound. In runs
  that are short compared with the requests' E2EL the achieved rate stays below the
  capacity; a warning says so when it is < 0.9 x the offline max throughput.
* **knee**: the point of maximum curvature of a p99 latency (TTFT by default) vs offered
  rate, by the Kneedle method on the non-saturated points (see `knee_point`).
* **SLO capacity**: the highest offered rate at which ``good_fraction >= target`` for the
  `goodput` SLOs and the point is not saturated (`meets_slo`), found by bisection between
  the last good and the first bad sampled rate until ``(hi - lo) / lo <= tol``; each probe
  is a full simulation. The answer is the verified good rate ``lo`` (the true capacity lies
  in [lo, hi)). Bisection assumes good_fraction falls monotonically with rate; a sampled
  good point above the first bad one is reported in the curve's warnings. A bisection probe
  stops early once it has certainly failed (`capacity.SloWatch`); grid points always run whole.
* **binding SLO** (per point and at the capacity, `capacity.slo_breakdown`): the SLO that
  fails first (the most requests miss it at the first failing rate) and the margins of all
  SLOs at the capacity.

Everything here is pure (no printing, no files). Points run through an executor (serial, a
process pool, or a Dask cluster; `simulator.analysis.executors`; finished points may be kept in
a `PointCache`, on disk by the CLI); every point is a deterministic function of its scenario
and rate (the workload seed is the scenario's, independent of execution order), so the
result is identical whichever executor ran it.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from simulator.analysis.capacity import (
    Reuse,
    SloWatch,
    analytic_bound,
    binding_summary,
    is_saturated,
    meets_slo,
    slo_breakdown,
)
from simulator.analysis.executors import Executor, PointCache, point_key
from simulator.scenario import Scenario
from simulator.specs.checks import (
    SpecError,
    check_callable,
    check_choice,
    check_instance,
    is_number,
    show,
)
from simulator.specs.fields import _did_you_mean

#: Fractions of the offline max throughput at which `--rates auto` samples (denser near 1).
AUTO_FRACTIONS = (0.1, 0.25, 0.4, 0.55, 0.7, 0.8, 0.87, 0.92, 0.96, 1.0, 1.08, 1.2)
#: `--rates auto`: how many times the top rate is doubled when the grid never saturated.
AUTO_EXTENSIONS = 3
#: Knee: the p99 latency must rise by this fraction over the stable points ...
KNEE_MIN_RISE = 0.25
#: ... and the normalised curve must sag this far below its chord (Kneedle score).
KNEE_MIN_SCORE = 0.1
KNEE_METRICS = {"ttft": "p99_ttft_ms", "tpot": "p99_tpot_ms", "e2el": "p99_e2el_ms"}
#: Scenario fields that `--sweep` cannot vary (and what to use instead).
_NOT_SWEEPABLE = {
    "rate": "the rate is the sweep's x axis; use --rates",
    "concurrency": "a rate sweep needs an open loop (arrivals at a rate); closed-loop clients ignore the rate",
    "efficiency": "a mapping; run one sweep per efficiency override",
    "goodput": "a mapping; run one sweep per SLO set",
}
MAX_BISECTION_PROBES = 40


# --------------------------------------------------------------------------- parsing


def parse_rates(text: Any) -> list[float] | str:
    """`--rates`: "1,2,4,8" (explicit), "0.5:20:40" (start:stop:count, evenly spaced,
    both ends included) or "auto". Returns sorted distinct rates (req/s) or "auto"."""
    s = str(text).strip()
    where = f"--rates {text!r}"
    if s.lower() == "auto":
        return "auto"
    if not s:
        raise SpecError(f"{where}: give rates like 1,2,4 or START:STOP:COUNT or auto")

    def num(tok: str) -> float:
        try:
            v = float(tok)
        except ValueError:
            raise SpecError(f"{where}: {tok.strip()!r} is not a number of requests/s") from None
        if not (math.isfinite(v) and v > 0):
            raise SpecError(f"{where}: {tok.strip()!r} must be a finite rate > 0 requests/s")
        return v

    if ":" in s:
        parts = s.split(":")
        if len(parts) != 3:
            raise SpecError(f"{where}: a range is START:STOP:COUNT, e.g. 0.5:20:40")
        start, stop = num(parts[0]), num(parts[1])
        try:
            count = int(parts[2])
        except ValueError:
            raise SpecError(f"{where}: COUNT {parts[2].strip()!r} is not an integer") from None
        if not 1 <= count <= 1000:
            raise SpecError(f"{where}: COUNT {count} must be in 1..1000")
        if stop < start:
            raise SpecError(f"{where}: STOP {stop:g} is below START {start:g}")
        if count == 1 or stop == start:
            return [start]
        step = (stop - start) / (count - 1)
        return sorted({start + i * step for i in range(count - 1)} | {stop})
    out = sorted({num(tok) for tok in s.split(",") if tok.strip()})
    if not out:
        raise SpecError(f"{where}: no rates given")
    return out


def _convert(field: dataclasses.Field, raw: str, where: str) -> Any:
    """One `--sweep` value as the Scenario field's type (annotations are strings)."""
    typ = str(field.type).replace(" ", "")
    s = raw.strip()
    optional = typ.endswith("|None")
    base = typ.split("|")[0]
    if optional and s.lower() in ("none", "null", "default"):
        return None
    if base == "int":
        try:
            return int(s)
        except ValueError:
            raise SpecError(f"{where}: {s!r} is not an integer") from None
    if base == "float":
        try:
            v = float(s)
        except ValueError:
            raise SpecError(f"{where}: {s!r} is not a number") from None
        return v
    if base == "bool":
        if s.lower() in ("1", "true", "yes", "on"):
            return True
        if s.lower() in ("0", "false", "no", "off"):
            return False
        raise SpecError(f"{where}: {s!r} is not true/false")
    return s


def parse_sweep(items: Iterable[str] | None) -> list[tuple[str, list[Any]]]:
    """`--sweep FIELD=V1,V2,...` (repeatable) into [(field, [values])]. FIELD is any
    Scenario setting ('-' or '_'); values are converted to its type. Several sweeps give
    the cartesian product (one curve per combination)."""
    if items is not None and (isinstance(items, (str, bytes)) or not isinstance(items, Iterable)):
        raise SpecError(f"sweep: {show(items)} is not a list of FIELD=V1,V2,... strings")
    fields = {f.name: f for f in dataclasses.fields(Scenario) if f.init}
    out: list[tuple[str, list[Any]]] = []
    seen: set[str] = set()
    for item in items or ():
        text = str(item)
        where = f"--sweep {text!r}"
        key, sep, vals = text.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise SpecError(f"{where}: expected FIELD=V1,V2,... e.g. tp=1,2,4")
        if key not in fields:
            raise SpecError(f"{where}: unknown setting {key!r}{_did_you_mean(key, fields)}")
        if key in _NOT_SWEEPABLE:
            raise SpecError(f"{where}: {key} cannot be swept ({_NOT_SWEEPABLE[key]})")
        if key in seen:
            raise SpecError(f"{where}: {key} is swept twice; list all its values in one --sweep")
        seen.add(key)
        toks = [t for t in vals.split(",") if t.strip()]
        if not toks:
            raise SpecError(f"{where}: no values after '='")
        values: list[Any] = []
        for t in toks:
            v = _convert(fields[key], t, where)
            if v not in values:
                values.append(v)
        out.append((key, values))
    return out


# --------------------------------------------------------------------------- one point


def run_point(scenario_dict: dict[str, Any], rate: float, slo_target: float = 0.99,
              early_stop: bool = False) -> dict[str, Any]:
    """Simulate `Scenario(**scenario_dict)` at `rate` req/s; the vLLM summary plus `rate` and,
    with SLOs, their breakdown at `slo_target` (`capacity.slo_breakdown`). `early_stop`: the
    run stops once it has certainly failed the SLOs (`capacity.SloWatch`; bisection probes).

    Top-level and fed only plain data, so it pickles into a process pool or a Dask worker.
    """
    sc = Scenario(**{**scenario_dict, "rate": float(rate)})
    w = sc.make_workload() if early_stop else None
    watch = SloWatch(w, sc.slos_s, slo_target) if w is not None and math.isfinite(rate) else None
    res, summary = sc.run(workload=w, watch=watch)
    summary["rate"] = float(rate)
    summary.update(slo_breakdown(res, sc.slos_s, slo_target))
    return summary


# --------------------------------------------------------------------------- analysis


def knee_point(x: Sequence[float], y: Sequence[float | None], min_rise: float = KNEE_MIN_RISE,
               min_score: float = KNEE_MIN_SCORE) -> int | None:
    """Index of the knee of an increasing, convex curve y(x) (Kneedle), or None.

    x and y are normalised to [0, 1] (x̂ = (x - x_min)/(x_max - x_min), ŷ likewise) and the
    knee is argmax_i (x̂_i - ŷ_i): the point farthest below the chord from the first to the
    last point, where the curve turns from flat to steep. No knee (None) when there are
    fewer than 3 finite points, when y rises by less than `min_rise` x its minimum (a flat
    curve: normalising would only magnify noise), or when the best score is below
    `min_score` (a straight or concave curve).
    """
    pts = sorted((float(a), float(b)) for a, b in zip(x, y, strict=True)
                 if math.isfinite(float(a)) and b is not None and math.isfinite(float(b)))
    if len(pts) < 3:
        return None
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts]
    x0, x1 = xs[0], xs[-1]
    y0, y1 = min(ys), max(ys)
    if x1 <= x0 or y1 - y0 <= min_rise * max(abs(y0), 1e-12):
        return None
    score = [(a - x0) / (x1 - x0) - (b - y0) / (y1 - y0) for a, b in pts]
    best = max(range(len(pts)), key=lambda i: (score[i], -i))
    if score[best] < min_score:
        return None
    # map back to the caller's index
    target = pts[best]
    for i, (a, b) in enumerate(zip(x, y, strict=True)):
        if float(a) == target[0] and b is not None and float(b) == target[1]:
            return i
    return None  # pragma: no cover


def _curves(scenario: Scenario, sweeps: Sequence[tuple[str, Sequence[Any]]]) -> list[tuple[str, dict, Scenario]]:
    keys = [k for k, _ in sweeps]
    out = []
    for combo in itertools.product(*[vals for _, vals in sweeps]):
        values = dict(zip(keys, combo, strict=True))
        label = ", ".join(f"{k}={v}" for k, v in values.items()) or "base"
        try:
            sc = scenario.replace(**values, rate=None)
        except SpecError as e:
            raise SpecError(f"--sweep {label}: {e}") from None
        out.append((label, values, sc))
    return out


def _check_curve(label: str, sc: Scenario) -> None:
    """Fail before any simulation when a curve cannot run (bad model/hardware, no fit)."""
    from simulator.serving.pool import kv_blocks

    if sc.concurrency is not None:
        raise SpecError(f"concurrency: a rate sweep needs an open loop; drop --concurrency ({sc.concurrency})")
    try:
        kv_blocks(sc.cost_model(), sc.engine_config())
    except SpecError as e:
        raise SpecError(f"{label}: {e}" if label != "base" else str(e)) from None


class _Counter:
    """Simulations done and to do, reported as (done, total). The total is known before the
    first simulation runs (`planned`, from `planned_points`), so a progress bar's ETA is right
    from the start; it grows only if the run needs more than planned (the grid extended past
    an unsaturated top rate) and drops to the real count when a phase needs fewer (`settle`)."""

    def __init__(self, progress: Callable[[int, int], None] | None, planned: int = 0) -> None:
        self.progress = progress
        self.done = 0
        self.total = 0
        self.planned = planned

    def report(self) -> None:
        if self.progress:
            self.progress(self.done, max(self.total, self.planned))

    def add(self, n: int) -> None:
        self.total += n
        self.report()

    def __call__(self) -> None:
        self.done += 1
        self.report()

    def settle(self, still_planned: int) -> None:
        """A phase ended: what is left of the plan is `still_planned` more simulations."""
        self.planned = self.total + still_planned
        self.report()


def _probes_to_close(lo: float, hi: float, tol: float) -> int:
    """Bisection probes until (hi - lo) <= tol x lo, when every probe is bad (the most)."""
    n = 0
    while hi - lo > tol * lo and n < MAX_BISECTION_PROBES:
        hi, n = 0.5 * (lo + hi), n + 1
    return n


def planned_points(curves: int, rates: Sequence[float] | str, slos: bool, tol: float) -> int:
    """Simulations a sweep of `curves` curves is expected to run: per curve the offline run,
    the grid and, with SLOs, the bisection probes of its widest neighbouring grid gap (the
    capacity's bracket is two neighbouring grid rates). Auto grids are not planned to extend
    (1.2x the offline max throughput saturates)."""
    grid = [float(f) for f in AUTO_FRACTIONS] if isinstance(rates, str) else sorted(float(r) for r in rates)
    probes = max((_probes_to_close(a, b, tol) for a, b in zip(grid, grid[1:], strict=False)), default=0)
    return curves * (1 + len(grid) + (probes if slos else 0))


def _auto_grid(x_max: float) -> list[float]:
    return sorted({float(f"{f * x_max:.4g}") for f in AUTO_FRACTIONS})


def _check_options(scenario: Scenario, rates: Sequence[float] | str | None, slo_target: float,
                   tol: float, knee_metric: str) -> list[float] | str:
    """Validate the sweep's options; the rates as a sorted list of req/s, or "auto"."""
    check_instance("scenario", scenario, Scenario)
    if isinstance(rates, str) or rates is None:
        rates = parse_rates(rates or "auto")
    else:
        if not isinstance(rates, Iterable):
            raise SpecError(f"--rates: {show(rates)} is not a list of rates (or 'auto')")
        rates = list(rates)
        for r in rates:
            if not (is_number(r) and math.isfinite(r) and r > 0):
                raise SpecError(f"--rates: {show(r)} must be a finite rate > 0 requests/s")
        rates = sorted({float(r) for r in rates})
        if not rates:
            raise SpecError("--rates: no rates given")
    if not (isinstance(slo_target, (int, float)) and 0 < slo_target <= 1):
        raise SpecError(f"--slo-target {slo_target!r}: must be a fraction in (0, 1]")
    if not (isinstance(tol, (int, float)) and 0 < tol < 1):
        raise SpecError(f"--tol {tol!r}: must be a relative tolerance in (0, 1), e.g. 0.02")
    check_choice("--knee-metric", knee_metric, KNEE_METRICS)
    if scenario.concurrency is not None:
        raise SpecError(f"concurrency: a rate sweep needs an open loop; drop --concurrency ({scenario.concurrency})")
    return rates


class _Runner:
    """Runs (curve index, rate) tasks through the executor; with a `PointCache`, kept points
    are taken from it (counted as done) and every new point is kept as it finishes."""

    def __init__(self, dicts: list[dict[str, Any]], ex: Executor, count: _Counter,
                 store: PointCache | None, slo_target: float = 0.99) -> None:
        self.dicts = dicts
        self.ex = ex
        self.count = count
        self.store = store
        self.slo_target = slo_target

    def __call__(self, tasks: list[tuple[int, float]], early_stop: bool = False) -> list[dict[str, Any]]:
        dicts, count, store, target = self.dicts, self.count, self.store, self.slo_target
        args = [(dicts[c], r, target, early_stop) for c, r in tasks]
        if store is None:
            count.add(len(tasks))
            return self.ex.map(run_point, args, count)
        # a probe that may stop early is kept apart from a whole point at the same rate
        keys = [point_key(dicts[c], r) + (f"|target={target!r}|early-stop" if early_stop else f"|target={target!r}")
                for c, r in tasks]
        out = [store.get(k) for k in keys]
        todo = [i for i, s in enumerate(out) if s is None]
        count.done += len(tasks) - len(todo)  # kept points count as done
        count.add(len(todo))

        def keep(j: int, summary: dict[str, Any]) -> None:
            store.add(keys[todo[j]], summary)

        got = self.ex.map(run_point, [args[i] for i in todo], count, on_result=keep)
        for i, s in zip(todo, got, strict=True):
            out[i] = s
        return out


def _mark_bounds(p: dict[str, Any], offline: float, bound: float) -> dict[str, Any]:
    """A point offered at or above the offline max throughput or the analytic bound is saturated
    whatever its finite run showed (`above_offline_max`)."""
    p["above_offline_max"] = bool(p["rate"] >= offline or p["rate"] >= bound)
    return p


def _grid_points(curves: list[tuple[str, dict, Scenario]], rates: list[float] | str,
                 run: _Runner, bounds: list[float]) -> tuple[list[float], list[list[dict[str, Any]]]]:
    """Step 1: every curve's offline max throughput (rate = inf), then its rate grid (the
    explicit rates, or `_auto_grid` of the offline throughput, doubled at the top up to
    AUTO_EXTENSIONS times while the curve has not saturated)."""
    offline = [s["request_throughput"] for s in run([(c, math.inf) for c in range(len(curves))])]
    mark = [(lambda p, c=c: _mark_bounds(p, offline[c], bounds[c])) for c in range(len(curves))]
    grids: list[list[float]] = []
    for c in range(len(curves)):
        if isinstance(rates, str):  # "auto" (validated by the caller)
            x = offline[c]
            if not (x is not None and math.isfinite(x) and x > 0):
                raise SpecError(f"{curves[c][0]}: the offline run completed no requests; cannot place rates")
            grids.append(_auto_grid(x))
        else:
            grids.append(list(rates))
    results: list[list[dict[str, Any]]] = [[] for _ in curves]
    tasks = [(c, r) for c in range(len(curves)) for r in grids[c]]
    for (c, _), s in zip(tasks, run(tasks), strict=True):
        results[c].append(mark[c]({**s, "kind": "grid"}))
    if rates == "auto":
        for _ in range(AUTO_EXTENSIONS):
            todo = [c for c in range(len(curves)) if not any(is_saturated(p) for p in results[c])]
            if not todo:
                break
            tasks = [(c, float(f"{2 * max(p['rate'] for p in results[c]):.4g}")) for c in todo]
            for (c, _), s in zip(tasks, run(tasks), strict=True):
                results[c].append(mark[c]({**s, "kind": "grid"}))
    return offline, results


def _curve_info(label: str, values: dict[str, Any], results: list[dict[str, Any]], offline: float,
                bound: float, num_requests: int, metric: str, slo_target: float, tol: float) -> dict[str, Any]:
    """Step 2: one curve's saturation rate, max stable rate and knee from its grid points. A
    point offered above the saturation rate is saturated too (`above_saturation`), so the max
    stable rate never exceeds it."""
    pts = sorted(results, key=lambda p: p["rate"])
    achieved = [p["achieved_rate"] for p in pts if p.get("achieved_rate") is not None
                and math.isfinite(p["achieved_rate"]) and not p.get("stopped_early")]
    sat_rate = max(achieved) if achieved and any(is_saturated(p) for p in pts) else None
    above = [p["rate"] for p in pts if sat_rate is not None and p["rate"] > sat_rate and not is_saturated(p)]
    for p in pts:
        p["above_saturation"] = bool(sat_rate is not None and p["rate"] > sat_rate)
    stable = [p for p in pts if not is_saturated(p)]
    saturated = [p for p in pts if is_saturated(p)]
    info: dict[str, Any] = {
        "curve": label,
        "values": values,
        "offline_max_throughput": offline,
        "analytic_bound": bound,
        "saturated": bool(saturated),
        "saturation_rate": sat_rate,
        "saturation_lower_bound": None if saturated else (max(achieved) if achieved else None),
        "max_stable_rate": max((p["rate"] for p in stable), default=None),
        "unstable_rates": [p["rate"] for p in pts if p.get("unstable")],
        "saturated_rates": [p["rate"] for p in saturated],
        "knee": None,
        "knee_metric": metric,
        "slo_target": slo_target,
        "slo_tolerance": tol,
        "slo_capacity": None,
        "slo_capacity_upper": None,
        "slo_note": None,
        "bisection_probes": 0,
        "warnings": [],
    }
    if above:
        info["warnings"].append(
            f"no growing queue at {', '.join(f'{r:.4g}' for r in above)} req/s, but above the saturation "
            f"rate {sat_rate:.4g} req/s (the most any point completed): not counted as stable")
    if saturated and achieved and max(achieved) < 0.9 * offline:
        info["warnings"].append(
            f"the highest achieved rate ({max(achieved):.4g} req/s) is "
            f"{1 - max(achieved) / offline:.0%} below the offline max throughput "
            f"({offline:.4g} req/s): {num_requests} requests per point are "
            "too few to reach a steady state at these rates; raise --num-requests")
    k = knee_point([p["rate"] for p in stable], [p.get(metric) for p in stable])
    if k is not None:
        info["knee"] = {"rate": stable[k]["rate"], "metric": metric, "value": stable[k][metric]}
    first_sat = min(info["saturated_rates"], default=None)
    again = [p["rate"] for p in stable if first_sat is not None and p["rate"] > first_sat]
    if again:
        info["warnings"].append(
            f"stable again above the first saturated rate {first_sat:.4g} req/s "
            f"(at {', '.join(f'{r:.4g}' for r in again)})")
    return info


def _slo_bracket(info: dict[str, Any], results: list[dict[str, Any]], slo_target: float) -> list[float] | None:
    """Step 3: [last good rate, first bad rate] on one curve's sampled grid, or None (with
    `slo_note` set) when every sampled rate is good or the lowest is already bad."""
    pts = sorted(results, key=lambda p: p["rate"])
    good = [(p["rate"], meets_slo(p, slo_target)) for p in pts]
    bad = [r for r, ok in good if not ok]
    if not bad:
        info["slo_note"] = (f"good_fraction >= {slo_target:g} at every sampled rate; the "
                            f"capacity is above {pts[-1]['rate']:.4g} req/s")
        return None
    first_bad = bad[0]
    below = [r for r, ok in good if ok and r < first_bad]
    if not below:
        info["slo_note"] = (f"good_fraction < {slo_target:g} already at the lowest sampled "
                            f"rate {first_bad:.4g} req/s; the capacity is below it")
        return None
    regood = [r for r, ok in good if ok and r > first_bad]
    if regood:
        info["warnings"].append(
            f"good_fraction is not monotone in rate: >= {slo_target:g} again at "
            f"{', '.join(f'{r:.4g}' for r in regood)} req/s above the first bad rate "
            f"{first_bad:.4g}; bisection used the first bad rate")
    return [max(below), first_bad]


def _bisect(brackets: dict[int, list[float]], results: list[list[dict[str, Any]]],
            infos: list[dict[str, Any]], run: _Runner, slo_target: float, tol: float) -> None:
    """Step 4: bisect every bracketed curve in lockstep until (hi - lo) / lo <= tol; the SLO
    capacity is the verified good rate lo. A probe stops early once it has certainly failed
    (`capacity.SloWatch`); a probe above the saturation rate counts as failed."""
    probes = 0
    while probes < MAX_BISECTION_PROBES:
        todo = [c for c, (lo, hi) in brackets.items() if (hi - lo) > tol * lo]
        if not todo:
            break
        tasks = [(c, 0.5 * (brackets[c][0] + brackets[c][1])) for c in todo]
        for (c, r), s in zip(tasks, run(tasks, early_stop=True), strict=True):
            info = infos[c]
            p = _mark_bounds({**s, "kind": "bisection"}, info["offline_max_throughput"], info["analytic_bound"])
            sat = info["saturation_rate"]
            p["above_saturation"] = bool(sat is not None and r > sat)
            results[c].append(p)
            info["bisection_probes"] += 1
            info["probes_stopped_early"] = info.get("probes_stopped_early", 0) + bool(p.get("stopped_early"))
            if meets_slo(p, slo_target):
                brackets[c][0] = r
            else:
                brackets[c][1] = r
        probes += 1
    for c, (lo, hi) in brackets.items():
        infos[c]["slo_capacity"] = lo
        infos[c]["slo_capacity_upper"] = hi
        infos[c]["slo_note"] = (f"good_fraction >= {slo_target:g} verified at {lo:.4g} req/s and "
                                f"below it at {hi:.4g} req/s (relative tolerance {tol:g})")


def _bound(sc: Scenario) -> float:
    """The curve's analytic bound (`capacity.analytic_bound`) x its replicas; inf for a
    disaggregated deployment (the bound prices one aggregated replica)."""
    if sc.disagg is not None:
        return math.inf
    reuse = Reuse()
    cost = reuse.cost(sc)
    return analytic_bound(cost, sc.engine_config(cost), sc.replace(rate=None).make_workload()) * sc.replicas


def _binding(info: dict[str, Any], results: list[dict[str, Any]], slos_ms: dict[str, float]) -> None:
    """The curve's binding SLO at its capacity (`capacity.binding_summary`): the SLO the first
    failing probe above the capacity misses most, and every SLO's margin at the capacity."""
    cap, upper = info.get("slo_capacity"), info.get("slo_capacity_upper")
    at = next((p for p in results if cap is not None and p["rate"] == cap), None)
    bad = next((p for p in results if upper is not None and p["rate"] == upper), None)
    info["binding"] = binding_summary(at, bad, slos_ms)
    info["binding_slo"] = (info["binding"] or {}).get("slo")


def _warn_capacity_above_saturation(info: dict[str, Any], num_requests: int) -> None:
    """An SLO capacity above the saturation rate is impossible in steady state: the run was
    too short for the queue to build at that rate (issue 16, README `whatif kv-dtype -n 100`)."""
    cap, sat = info.get("slo_capacity"), info.get("saturation_rate")
    if cap is not None and sat is not None and cap > sat:
        info["warnings"].append(
            f"SLO capacity {cap:.4g} req/s is above the saturation rate {sat:.4g} req/s: with "
            f"{num_requests} requests per point the queue has no time to build, so the SLO capacity "
            "is optimistic; raise --num-requests until it falls below the saturation rate")


def sweep(scenario: Scenario, rates: Sequence[float] | str | None = "auto",
          sweeps: Sequence[tuple[str, Sequence[Any]]] = (), executor: Executor | None = None,
          progress: Callable[[int, int], None] | None = None, *, slo_target: float = 0.99,
          tol: float = 0.02, knee_metric: str = "ttft", store: PointCache | None = None) -> dict[str, Any]:
    """Sweep `scenario` over offered rates, once per combination of `sweeps`.

    `rates`: a list of req/s or "auto" (offline run, then 12 points from 0.1x to 1.2x the
    offline max throughput, denser near it; the top rate is doubled up to 3 times if the
    curve has not saturated). `executor`: where points run (default serial). `progress`:
    called as (done, total) simulations. `store`: a `PointCache` (the CLI's `PointStore`) that keeps every finished
    point (and supplies the ones a previous, interrupted run kept: those are not run again;
    the result is identical to an uninterrupted run's). Returns {"points": [...], "curves": [...], ...};
    see the module docstring and docs/sweep.md for the definitions.

    Steps: grid points (`_grid_points`), per-curve analysis (`_curve_info`), SLO brackets on
    the grid (`_slo_bracket`), lockstep bisection (`_bisect`).
    """
    rates = _check_options(scenario, rates, slo_target, tol, knee_metric)
    check_callable("progress", progress)
    if executor is not None and not callable(getattr(executor, "map", None)):
        raise SpecError(f"executor: {show(executor)} is not an executor (make_executor gives one)")
    if isinstance(sweeps, (str, bytes)) or not isinstance(sweeps, Iterable):
        raise SpecError(f"sweeps: {show(sweeps)} is not a list of (field, values) pairs (parse_sweep gives them)")
    sweeps = list(sweeps)
    for i, pair in enumerate(sweeps):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and isinstance(pair[0], str)
                and isinstance(pair[1], (tuple, list))):
            raise SpecError(f"sweeps[{i}]: {show(pair)} is not a (field, values) pair (parse_sweep gives them)")
    curves = _curves(scenario, sweeps)
    for label, _, sc in curves:
        _check_curve(label, sc)
    slos = scenario.goodput
    count = _Counter(progress, planned_points(len(curves), rates, bool(slos), tol))
    run = _Runner([sc.as_dict() for _, _, sc in curves], executor or Executor(), count, store, slo_target)
    count.report()  # the planned total, before the first simulation
    bounds = [_bound(sc) for _, _, sc in curves]
    offline, results = _grid_points(curves, rates, run, bounds)
    metric = KNEE_METRICS[knee_metric]
    infos = [_curve_info(label, values, results[c], offline[c], bounds[c], sc.num_requests, metric, slo_target, tol)
             for c, (label, values, sc) in enumerate(curves)]
    brackets: dict[int, list[float]] = {}
    for c, info in enumerate(infos):
        if not slos:
            info["slo_note"] = "no --goodput SLOs given"
            continue
        bracket = _slo_bracket(info, results[c], slo_target)
        if bracket is not None:
            brackets[c] = bracket
    count.settle(sum(_probes_to_close(lo, hi, tol) for lo, hi in brackets.values()))
    _bisect(brackets, results, infos, run, slo_target, tol)
    count.settle(0)
    for c, info in enumerate(infos):  # bisection probes count too
        info["max_stable_rate"] = max((p["rate"] for p in results[c] if not is_saturated(p)), default=None)
    for c, (info, (_, _, sc)) in enumerate(zip(infos, curves, strict=True)):
        _warn_capacity_above_saturation(info, sc.num_requests)
        _binding(info, results[c], dict(slos))
        at = [p for p in results[c] if info["slo_capacity"] is not None and p["rate"] == info["slo_capacity"]]
        for k in ("joules_per_output_token", "energy_usd_per_million_output_tokens"):  # simulator.metrics.energy
            info[f"{k}_at_slo_capacity"] = at[0].get(k) if at else None

    points = []
    for c, (label, values, _sc) in enumerate(curves):
        for p in sorted(results[c], key=lambda p: p["rate"]):
            points.append({"curve": label, **values, "rate": p["rate"], "kind": p["kind"],
                           **p, "saturated": is_saturated(p)})
    first = points[0] if points else {}
    return {
        "model": first.get("model", scenario.model),
        "hardware": first.get("hardware", scenario.hardware),
        "workload": str(scenario.workload),
        "scenario": scenario.as_dict(),
        "sweep": {k: list(v) for k, v in sweeps},
        "rates": rates if rates == "auto" else list(rates),
        "goodput_slos_ms": dict(slos),
        "slo_target": slo_target,
        "tolerance": tol,
        "knee_metric": metric,
        "curves": infos,
        "points": points,
    }


__all__ = [
    "planned_points",
    "parse_rates",
    "parse_sweep",
    "run_point",
    "sweep",
    "knee_point",
]
