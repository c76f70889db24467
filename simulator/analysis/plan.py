"""Capacity planning: the cheapest deployment that serves a request rate within SLOs.

`plan(base, rate, hardware=[...], tps=[...], kv_dtypes=[...], weight_dtypes=[...])` takes one
`Scenario` (model, workload, engine limits, goodput SLOs) and, for every candidate
replica shape (hardware x TP x weight dtype x KV dtype, and for MoE models x EP):

1. **memory**: does the model fit (`CostModel.memory`)? If not, the candidate is listed as
   infeasible with the memory model's message and the smallest TP that fits. A workload
   request longer than the replica's KV capacity also makes it infeasible.
2. **SLO capacity of one replica**: the highest offered rate at which the good fraction
   stays >= `slo_target` and the point is not saturated, found by `simulator.analysis.sweep.sweep`
   (auto rate grid, then bisection to `tol`; docs/sweep.md). When the SLOs already fail at
   the lowest grid rate (0.1 x the offline max throughput) the candidate is swept again at
   0.1 %, 1 %, 3 % and 10 % of that throughput; failing at 0.1 % too means the SLO cannot
   be met even with the replica almost idle (e.g. a TTFT SLO below one prefill): capacity
   0, listed as infeasible with that reason.
3. **replicas** = ceil(R / (capacity x (1 - headroom))), **GPUs** = replicas x tp x pp,
   **$/hour** = GPUs x $/GPU-hour (the catalog's `price_per_gpu_hour_usd`, or `prices`),
   **$ per million output tokens** = $/hour / (R x mean output tokens per request x 3600) x 1e6.

**Expert parallelism.** For a MoE model each TP > 1 shape is also tried with its experts
sharded over the TP group (ep = tp; `simulator.cost.parallel`: the MoE layer's all-reduce becomes
an all-to-all dispatch + combine, and each rank runs whole experts). Its rows carry `ep`
(1 for the plain TP shape), it is ranked with the others, and `expert_parallel` says, per
shape, how its capacity compares with the plain TP one and whether EP wins. Dense models get
no EP variant and no `ep` field.

Feasible candidates are ranked cheapest first ($/hour, then fewer GPUs, then more capacity).
Candidates run through the sweep executor: all candidates whose shapes form a cartesian
product go into one `sweep` call, so their grid points and their bisection probes run in
parallel (in lockstep) on a process pool or a Dask cluster.

Pure: no printing, no files (the CLI does that).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any, TypeGuard

from simulator.analysis.capacity import Reuse, meets_slo, probe, refine, search
from simulator.analysis.executors import Executor
from simulator.scenario import Scenario
from simulator.specs.catalog import load_hardware, load_model
from simulator.specs.checks import SpecError, check_choice, check_instance, check_int, check_list
from simulator.specs.dtypes import DTYPES
from simulator.workloads.named import named_workload
from simulator.workloads.workload import scale_to_rate, take, with_arrivals

#: pooled check: at most this many replicas above the linear estimate before a candidate is
#: called infeasible as a deployment
MAX_POOL_RAISE = 4


def _num(v: Any) -> TypeGuard[float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def replicas_needed(rate: float, capacity: float, headroom: float) -> int:
    """ceil(rate / (capacity x (1 - headroom))), at least 1 (a 1e-9 slack absorbs float error)."""
    return max(1, math.ceil(rate / (capacity * (1.0 - headroom)) - 1e-9))


def cost_per_million_tokens(cost_per_hour: float, rate: float, mean_output_tokens: float) -> float:
    """$/hour over the output tokens served per hour at `rate` req/s, per million tokens."""
    return cost_per_hour / (rate * mean_output_tokens * 3600.0) * 1e6


def normalise_prices(prices: dict[str, float] | None) -> dict[str, float]:
    """{hardware ref or id: $/GPU-hour} -> {catalog id: price}; unknown hardware or a price
    that is not a positive number raises SpecError."""
    check_instance("prices", prices, dict, optional=True, what="mapping of hardware to $ per GPU-hour")
    out: dict[str, float] = {}
    for ref, price in (prices or {}).items():
        if not _num(price) or price <= 0:
            raise SpecError(f"price {ref}: {price!r} must be a positive number of $ per GPU-hour")
        out[load_hardware(str(ref)).id] = float(price)
    return out


def _as_list(name: str, values: Any, default: Any, what: str) -> list[Any]:
    """A candidate axis: None (the scenario's own value), one value, or a list of them; anything
    else is a SpecTypeError (a number used to raise TypeError from iterating it)."""
    if values is None:
        return [default]
    if isinstance(values, (str, int)) and not isinstance(values, bool):
        values = [values]
    out: list[Any] = []
    for v in check_list(name, values, what) or []:
        if v not in out:
            out.append(v)
    if not out:
        return [default]
    return out


_Key = tuple[str, int, str, str, int]  # (hardware ref, tp, weight dtype, kv dtype, ep)


def _blocks(keys: Sequence[_Key]) -> list[tuple[list[str], list[int], list[str], list[str]]]:
    """Partition candidate keys (hw, tp, weight, kv, ep) of one EP rule into cartesian blocks
    over (hw, tp, weight, kv) (one sweep each)."""
    # (weight, kv) -> hw -> tps
    by_dtype: dict[tuple[str, str], dict[str, list[int]]] = {}
    for hw, tp, wd, kv, *_ in keys:
        by_dtype.setdefault((wd, kv), {}).setdefault(hw, []).append(tp)
    # hardware sharing a TP set -> one block per (weight, kv)
    stage1: dict[tuple[tuple[str, ...], tuple[int, ...], str], list[str]] = {}
    for (wd, kv), per_hw in by_dtype.items():
        groups: dict[tuple[int, ...], list[str]] = {}
        for hw, tp_list in per_hw.items():
            groups.setdefault(tuple(tp_list), []).append(hw)
        for tp_set, hw_list in groups.items():
            stage1.setdefault((tuple(hw_list), tp_set, wd), []).append(kv)
    # merge weight dtypes that share (hardware, tps, kv set)
    stage2: dict[tuple[tuple[str, ...], tuple[int, ...], tuple[str, ...]], list[str]] = {}
    for (hw_set, tp_set, wd), kvs in stage1.items():
        stage2.setdefault((hw_set, tp_set, tuple(kvs)), []).append(wd)
    return [(list(h), list(t), list(w), list(k)) for (h, t, k), w in stage2.items()]


class _Offset:
    """Progress over a plan's steps, (done, total): one per candidate searched, one per
    candidate simulated as a pool, one for narrowing the cheapest and one for its check without
    headroom. The total is planned before the first simulation (every step that may run) and
    settles on the steps that ran at the end (`finish`)."""

    def __init__(self, progress: Callable[[int, int], None] | None) -> None:
        self.progress = progress
        self.done = 0
        self.total = 0

    def add(self, n: int) -> None:
        self.total += n
        self.show()

    def tick(self) -> None:
        self.done += 1
        self.total = max(self.total, self.done)
        self.show()

    def show(self) -> None:
        if self.progress:
            self.progress(self.done, self.total)

    def finish(self) -> None:
        self.total = self.done
        self.show()


#: the largest target rate (req/s) plan sizes a fleet for: 10 million requests/s
MAX_PLAN_RATE = 1e7


def _check_inputs(base: Scenario, rate: float, headroom: float) -> None:
    check_instance("base", base, Scenario)
    if not (_num(rate) and 0 < rate <= MAX_PLAN_RATE):
        raise SpecError(f"rate: {rate!r} must be a number of requests/s in (0, {MAX_PLAN_RATE:g}] "
                        "(beyond it replica counts and costs lose meaning)")
    if not base.goodput:
        raise SpecError("plan needs goodput SLOs (e.g. --goodput ttft:2000 --goodput tpot:100): "
                        "a replica's capacity is the highest rate that meets them")
    if not (_num(headroom) and 0 <= headroom < 1):
        raise SpecError(f"headroom: {headroom!r} must be a fraction in [0, 1)")
    if base.concurrency is not None:
        raise SpecError("concurrency: plan needs an open loop (arrivals at a rate); drop --concurrency")


def _screen_one(base: Scenario, base1: Scenario, ref: str, hw: Any, tp: int, wd: Any, kv: Any, ep: int | None,
                seq_len: int, longest: int) -> tuple[dict[str, Any], str | None]:
    """Step 1 for one shape: its row (memory fit, KV capacity) and why it is infeasible
    (None when it can be swept). A shape without a cost model comes back without `_key`,
    its row complete. `ep`: the shape's expert parallelism (MoE models; the row gets an `ep`
    field), None for a dense model (the scenario's own)."""
    row: dict[str, Any] = {
        "hardware": hw.id, "hardware_ref": ref, "tp": tp, **({"ep": ep} if ep is not None else {}), "pp": base.pp,
        "weight_dtype": wd, "kv_dtype": kv, "gpus_per_replica": tp * base.pp,
    }
    ep_r = base1.ep if ep is None else ep
    try:
        sc = base1.replace(hardware=ref, tp=tp, weight_dtype=wd, kv_dtype=kv, ep=ep_r)
        cost = sc.cost_model()
    except SpecError as e:  # no cost model: infeasible as named (no `_key`)
        return {**row, "fits": False, "reason": str(e), "smallest_tp_that_fits": None}, str(e)
    wd_r, kv_r = cost.dtypes.weight, cost.dtypes.kv
    row.update(weight_dtype=wd_r, kv_dtype=kv_r, _key=(ref, tp, wd_r, kv_r, ep_r))
    mem = cost.memory(sc.gpu_memory_utilization, sc.max_num_batched_tokens, sc.max_num_seqs,
                      seq_len=seq_len)
    row.update(fits=mem.fits, kv_capacity_tokens=mem.kv_capacity_tokens,
               max_concurrent_sequences=mem.max_concurrent_sequences,
               weights_gb_per_gpu=mem.weights_bytes_per_gpu / 1e9,
               smallest_tp_that_fits=mem.smallest_tp_that_fits,
               notes=list(cost.notes))
    kv_cap = sc.kv_capacity_tokens or mem.kv_capacity_tokens
    if not mem.fits:
        return row, mem.message
    if longest > kv_cap:
        return row, f"the longest request needs {longest} KV tokens; one replica holds {kv_cap}"
    return row, None


def _ep_variants(base1: Scenario, tp: int, moe: bool) -> list[int | None]:
    """The EP degrees tried at `tp`: None (the scenario's own) for a dense model; for a MoE
    model the scenario's ep and, when tp > 1 differs from it, ep = tp (experts over the TP group)."""
    eps: list[int | None] = [None] if not moe else [base1.ep, *([tp] if tp > 1 and tp != base1.ep else [])]
    return eps


def _screen(base: Scenario, base1: Scenario, hw_specs: dict[str, Any], tp_list: list[Any],
            wd_list: list[Any], kv_list: list[Any], seq_len: int, longest: int,
            moe: bool = False) -> tuple[list[_Key], dict[_Key, dict[str, Any]], list[dict[str, Any]]]:
    """Step 1: every shape's memory fit; (feasible keys, their rows, infeasible rows).
    `moe`: also the EP variants of each TP (`_ep_variants`)."""
    feasible_keys: list[_Key] = []
    rows: dict[_Key, dict[str, Any]] = {}
    infeasible: list[dict[str, Any]] = []
    shapes = [(ref, tp, ep, wd, kv) for ref, tp, wd, kv in itertools.product(hw_specs, tp_list, wd_list, kv_list)
              for ep in _ep_variants(base1, tp, moe)]
    for ref, tp, ep, wd, kv in shapes:
        row, reason = _screen_one(base, base1, ref, hw_specs[ref], tp, wd, kv, ep, seq_len, longest)
        key = row.get("_key")
        if key is None:
            infeasible.append(row)
            continue
        if key in rows or any(r.get("_key") == key for r in infeasible):
            continue  # the same shape named twice (e.g. default dtype and its name)
        if reason is not None:
            infeasible.append({**row, "reason": reason})
        else:
            rows[key] = row
            feasible_keys.append(key)
    return feasible_keys, rows, infeasible


#: the workloads and cost models this process has made for the plan it runs (`capacity.Reuse`):
#: a plan's candidates share the offline and pooled runs' workloads, a candidate's probes its
#: cost model. Emptied when a plan starts; a pool worker keeps its own.
_REUSE = Reuse()


def _capacity_task(scenario_dict: dict[str, Any], slo_target: float, tol: float, rate: float,
                   headroom: float) -> dict[str, Any]:
    """One candidate's `capacity.search` (top-level and fed plain data, so it pickles into a
    process pool or a Dask worker), ended as soon as the bracket fixes the replica count
    (`refined` False then; `_refine_task` narrows it); probes kept as `_probe_row`s."""
    def enough(lo: float, hi: float) -> bool:
        return replicas_needed(rate, lo, headroom) == replicas_needed(rate, hi * (1 - 1e-9), headroom)

    return _lean(search(Scenario(**scenario_dict), slo_target, tol, _REUSE, enough=enough))


def _refine_task(scenario_dict: dict[str, Any], info: dict[str, Any], slo_target: float,
                 tol: float) -> dict[str, Any]:
    """`capacity.refine` of a candidate's search to the tolerance."""
    return _lean(refine(Scenario(**scenario_dict), info, slo_target, tol, _REUSE))


def _lean(info: dict[str, Any]) -> dict[str, Any]:
    info["probes"] = [_probe_row(p) for p in info["probes"]]
    if info.get("at_capacity") is not None:
        info["at_capacity"] = _probe_row(info["at_capacity"])
    return info


def _probe_row(p: dict[str, Any]) -> dict[str, Any]:
    """What a plan keeps of one probe (enough to continue its search, `capacity.refine`)."""
    keys = ("rate", "meets_slo", "good_fraction", "saturated", "unstable_signals", "stopped_early",
            "achieved_rate", "p99_ttft_ms", "p99_tpot_ms", "slo_miss", "slo_at_target_ms", "slo_ratio",
            "slo_ratio_at_stop", "binding_slo", "joules_per_output_token")
    return {k: p.get(k) for k in keys}


def _candidate_dict(base1: Scenario, key: tuple) -> dict[str, Any]:
    return base1.replace(hardware=key[0], tp=key[1], weight_dtype=key[2], kv_dtype=key[3], ep=key[4]).as_dict()


def _slo_capacities(base: Scenario, base1: Scenario, feasible_keys: list[_Key],
                    rows: dict[_Key, dict[str, Any]], ex: Executor, prog: _Offset,
                    slo_target: float, tol: float, rate: float, headroom: float) -> None:
    """Step 2: SLO capacity of one replica per candidate (`capacity.search`: bounded by the
    analytic bound and the offline maximum, a bracketed search, failing probes stopped early),
    each search ended once its bracket fixes the candidate's replica count."""
    dicts = [_candidate_dict(base1, k) for k in feasible_keys]
    infos = ex.map(_capacity_task, [(d, slo_target, tol, rate, headroom) for d in dicts], prog.tick)
    for key, info in zip(feasible_keys, infos, strict=True):
        _take_capacity(base, rows[key], info)


def _refine_best(base: Scenario, base1: Scenario, best: dict[str, Any], ex: Executor, prog: _Offset,
                 slo_target: float, tol: float) -> None:
    """The cheapest candidate's capacity narrowed to the tolerance (the others' brackets already
    fix their replica counts; the table shows them as ranges)."""
    if best.get("search", {}).get("refined", True):
        return
    (info,) = ex.map(_refine_task, [(_candidate_dict(base1, best["_key"]), best["search"], slo_target, tol)],
                     prog.tick)
    _take_capacity(base, best, info)


def _take_capacity(base: Scenario, row: dict[str, Any], info: dict[str, Any]) -> None:
    """A candidate row's fields from its search (`search`: the state a refinement continues)."""
    at = info.get("at_capacity") or {}
    row["search"] = {k: v for k, v in info.items() if k != "at_capacity"}
    row.update(offline_max_throughput=info["offline_max_throughput"], analytic_bound=info["analytic_bound"],
               upper_bound=info["upper_bound"], saturation_rate=info["saturation_rate"],
               slo_capacity=info["slo_capacity"], slo_capacity_upper=info["slo_capacity_upper"],
               capacity_refined=info["refined"], slo_note=info["slo_note"],
               bisection_probes=info["bisection_probes"], probes_stopped_early=info["stopped_early"],
               probes=info["probes"], binding=info["binding"], binding_slo=(info["binding"] or {}).get("slo"),
               joules_per_output_token=at.get("joules_per_output_token"))
    warnings = row.setdefault("warnings", [])
    warnings.extend(w for w in info["warnings"] if w not in warnings)
    if "usable_capacity" in row:
        row["usable_capacity"] = info["slo_capacity"] * (1.0 - row.get("headroom", 0.0))
    if not info["slo_capacity"]:
        row["reason"] = info["slo_note"]
    x, bound = info["offline_max_throughput"], info["analytic_bound"]
    short = (f"{base.num_requests} requests per run are too few for a steady result: the offline maximum "
             f"{x:.4g} req/s is under half the analytic bound {bound:.4g} req/s, and the capacity is capped "
             "by so short a run; raise --num-requests") if _num(x) and _num(bound) else ""
    if short and x < 0.5 * bound and short not in warnings:
        warnings.append(short)


def _price(row: dict[str, Any], n: int, rate: float, mean_out: float) -> None:
    """Replicas, GPUs and $ of a candidate row at `n` replicas."""
    gpus = n * row["gpus_per_replica"]
    price = row["price_per_gpu_hour_usd"]
    per_hour = gpus * price if price else None
    row.update(replicas=n, gpus=gpus, cost_per_hour_usd=per_hour,
               cost_per_million_output_tokens_usd=(cost_per_million_tokens(per_hour, rate, mean_out)
                                                   if per_hour else None))


def _rank_key(r: dict[str, Any]) -> tuple:
    return (r["cost_per_hour_usd"] is None, r["cost_per_hour_usd"] or 0.0, r["gpus"], -r["slo_capacity"],
            r["hardware"], r["tp"], r.get("ep", 1))


def _price_candidates(feasible_keys: list[_Key], rows: dict[_Key, dict[str, Any]],
                      infeasible: list[dict[str, Any]], hw_specs: dict[str, Any],
                      price_map: dict[str, float], rate: float, headroom: float,
                      mean_out: float) -> list[dict[str, Any]]:
    """Step 3: replicas by one replica's capacity (ceil(R / (capacity x (1 - headroom))), kept as
    `replicas_linear`), GPUs and cost of each candidate with a capacity, cheapest first (the
    others join `infeasible`)."""
    candidates: list[dict[str, Any]] = []
    for key in feasible_keys:
        row = rows[key]
        cap = row["slo_capacity"]
        if not (_num(cap) and cap > 0):
            row.setdefault("reason", f"no SLO capacity ({row.get('slo_note')})")
            infeasible.append(row)
            continue
        n = replicas_needed(rate, cap, headroom)
        hw = hw_specs[key[0]]
        price, source = (price_map[hw.id], "override") if hw.id in price_map else (
            hw.price_per_gpu_hour_usd, "catalog" if hw.price_per_gpu_hour_usd else None)
        row.update(status="feasible", usable_capacity=cap * (1.0 - headroom), headroom=headroom, replicas_linear=n,
                   price_per_gpu_hour_usd=price, price_source=source, replicas_verified=False)
        _price(row, n, rate, mean_out)
        if price is None:
            row["warnings"].append(f"{hw.id} has no catalog price; give one with --price {hw.id}=USD")
        candidates.append(row)
    candidates.sort(key=_rank_key)
    return candidates


def pool_check(base1: Scenario, key: tuple, replicas: int, rate: float, slo_target: float,
               reuse: Reuse | None = None) -> dict[str, Any]:
    """`replicas` replicas of candidate `key` behind the scenario's router at `rate` req/s, each
    serving as many requests as the one-replica runs (replicas x num_requests in all), the
    early-stop watch on. A named workload draws them afresh; a trace serves the same requests
    the one-replica runs served (its first num_requests), tiled, so the pool is not judged on
    another stretch of the trace. Returns the probe's summary row with `meets_slo`."""
    one = base1.replace(hardware=key[0], tp=key[1], weight_dtype=key[2], kv_dtype=key[3], ep=key[4])
    sc = one.replace(replicas=replicas, num_requests=base1.num_requests * replicas)
    workload = None
    if named_workload(str(base1.workload)) is None:  # a trace
        tiled = take(one.replace(rate=None).make_workload(), sc.num_requests)
        workload = (scale_to_rate(tiled, rate) if base1.burstiness == 1.0
                    else with_arrivals(tiled, rate, base1.burstiness, base1.seed))
    p = probe(sc, rate, slo_target, reuse, workload=workload)
    p["meets_slo"] = meets_slo(p, slo_target)
    row = _probe_row(p)
    row["replicas"] = replicas
    return row


def _pool_task(scenario_dict: dict[str, Any], key: tuple, replicas: int, rate: float,
               slo_target: float) -> dict[str, Any]:
    return pool_check(Scenario(**scenario_dict), key, replicas, rate, slo_target, _REUSE)


def _verify_one(base1: Scenario, row: dict[str, Any], rate_v: float, slo_target: float, ex: Executor,
                prog: _Offset) -> None:
    """Step 4 for one candidate: the smallest N whose pool meets the SLOs at `rate_v`: from one
    below the linear estimate down while it passes (never below the fewest the capacity bound
    allows), else the linear estimate, else up while it fails (at most MAX_POOL_RAISE more)."""
    key = row["_key"]
    d = base1.as_dict()

    def check(n: int) -> dict[str, Any]:
        (out,) = ex.map(_pool_task, [(d, key, n, rate_v, slo_target)])
        row["pool_checks"].append(out)
        return out

    n0 = row["replicas_linear"]
    floor_n = max(1, math.ceil(rate_v / row["upper_bound"] - 1e-9)) if _num(row.get("upper_bound")) else 1
    row["pool_checks"] = []
    if n0 - 1 >= floor_n and check(n0 - 1)["meets_slo"]:  # pooling saves a replica: try for more
        n = n0 - 1
        while n - 1 >= floor_n and check(n - 1)["meets_slo"]:
            n -= 1
    elif check(n0)["meets_slo"]:
        n = n0
    else:
        n = n0 + 1
        while n <= n0 + MAX_POOL_RAISE and not check(n)["meets_slo"]:
            n += 1
        if n > n0 + MAX_POOL_RAISE:
            row["pool_failed"] = n0 + MAX_POOL_RAISE
            return
    row["replicas"] = n
    row["replicas_verified"] = True


def _verify_pools(base1: Scenario, candidates: list[dict[str, Any]], infeasible: list[dict[str, Any]],
                  rate: float, headroom: float, slo_target: float, mean_out: float, ex: Executor,
                  prog: _Offset) -> None:
    """Step 4: the whole deployment simulated. Candidates in order of their linear cost; the
    cheapest, and each other that would beat the cheapest verified so far if pooling saved it
    one replica (at max(linear - 1, the fewest its capacity bound allows) replicas), is checked
    by `_verify_one` at rate / (1 - headroom); the others keep their linear count
    (`replicas_verified` False: pooling would have to save them more than one replica). Re-ranked
    after."""
    rate_v = rate / (1.0 - headroom)
    best_cost: tuple | None = None
    for row in sorted(candidates, key=_rank_key):
        floor_n = max(1, math.ceil(rate_v / row["upper_bound"] - 1e-9)) if _num(row.get("upper_bound")) else 1
        probe_row = dict(row)
        _price(probe_row, max(floor_n, row["replicas_linear"] - 1), rate, mean_out)
        if best_cost is not None and _rank_key(probe_row)[:3] >= best_cost:
            continue
        _verify_one(base1, row, rate_v, slo_target, ex, prog)
        prog.tick()
        if row.get("pool_failed"):
            continue
        _price(row, row["replicas"], rate, mean_out)
        key = _rank_key(row)[:3]
        best_cost = key if best_cost is None or key < best_cost else best_cost
    for row in [r for r in candidates if r.get("pool_failed")]:
        candidates.remove(row)
        row.update(status="infeasible", reason=(
            f"{row['pool_failed']} replicas behind the router still miss the SLOs at {rate_v:.4g} req/s "
            f"(rate / (1 - headroom)); one replica's capacity {row['slo_capacity']:.4g} req/s does not pool"))
        infeasible.append(row)
    candidates.sort(key=_rank_key)
    for i, r in enumerate(candidates, 1):
        r["rank"] = i
        checks = r.get("pool_checks") or []
        r["pool_note"] = r.get("pool_note") or _pool_note(r, checks, rate_v)


def _pool_note(r: dict[str, Any], checks: list[dict[str, Any]], rate_v: float) -> str:
    """One line on the pooled check of a candidate."""
    if not checks:
        return ""
    ok = sorted(c["replicas"] for c in checks if c["meets_slo"])
    bad = sorted(c["replicas"] for c in checks if not c["meets_slo"])
    parts = [f"{r['replicas']} replicas meet the SLOs at {rate_v:.4g} req/s"]
    if bad:
        fail = next(c for c in checks if c["replicas"] == max(bad))
        why = (f"stopped early: {fail['stopped_early']['reason']}" if fail.get("stopped_early")
               else f"good fraction {fail['good_fraction'] or 0:.3f}"
               + (f", unstable: {', '.join(fail['unstable_signals'])}" if fail.get("unstable_signals") else ""))
        parts.append(f"{max(bad)} do not ({why})")
    if r["replicas"] != r["replicas_linear"]:
        parts.append(f"the linear estimate was {r['replicas_linear']}")
    return "; ".join(parts) if ok else ""


def _without_headroom(base1: Scenario, best: dict[str, Any], rate: float, headroom: float, slo_target: float,
                      ex: Executor, prog: _Offset) -> None:
    """With headroom, whether the best deployment less one replica still meets the SLOs at the
    target rate itself (`without_headroom`): what the headroom costs in replicas."""
    n = best["replicas"] - 1
    if headroom <= 0 or n < 1 or not best.get("replicas_verified"):
        return
    (out,) = ex.map(_pool_task, [(base1.as_dict(), best["_key"], n, rate, slo_target)], prog.tick)
    best["without_headroom"] = out


def plan(base: Scenario, rate: float, hardware: Sequence[str] | None = None, tps: Sequence[int] | None = None,
         kv_dtypes: Sequence[str | None] | None = None, weight_dtypes: Sequence[str | None] | None = None,
         headroom: float = 0.2, prices: dict[str, float] | None = None, slo_target: float = 0.99,
         tol: float = 0.02, executor: Executor | None = None,
         progress: Callable[[int, int], None] | None = None, disagg: bool = False) -> dict[str, Any]:
    """Rank deployments of `base` that serve `rate` req/s within its goodput SLOs.

    `hardware`, `tps`, `kv_dtypes`, `weight_dtypes`: the candidate values (default: the
    scenario's own). `headroom`: the fraction of each replica's SLO capacity kept free.
    `prices`: $/GPU-hour overrides by hardware id. Returns a JSON-able dict with
    `candidates` (feasible, cheapest first), `infeasible` (with `reason`) and `best`.

    Steps (module docstring): memory screen (`_screen`), SLO capacity per replica
    (`_slo_capacities`), replicas and cost by one replica (`_price_candidates`), the deployment
    simulated as a pool (`_verify_pools`). `disagg`: also search disaggregated deployments
    (`plan_disagg.py`), listed in `disaggregated`, compared in `why`.
    """
    _check_inputs(base, rate, headroom)
    price_map = normalise_prices(prices)
    hw_refs = [str(h) for h in _as_list("hardware", hardware, base.hardware, "hardware ids")]
    hw_specs = {ref: load_hardware(ref) for ref in hw_refs}  # a bad name fails the whole plan
    tp_list = _as_list("tps", tps, base.tp, "integers >= 1")
    for tp in tp_list:
        check_int("tp", tp)
    kv_list = _as_list("kv_dtypes", kv_dtypes, base.kv_dtype, "KV formats")
    wd_list = _as_list("weight_dtypes", weight_dtypes, base.weight_dtype, "weight formats")
    # a bad format fails the whole plan, as a bad hardware name does (it was an infeasible row)
    for name, values in (("kv_dtypes", kv_list), ("weight_dtypes", wd_list)):
        for i, v in enumerate(values):
            if v is not None:
                check_choice(f"{name}[{i}]", v, DTYPES)
    base1 = base.replace(replicas=1, rate=None)
    wl = base1.make_workload()
    mean_in = float(wl.input_len.mean())
    mean_out = float(wl.output_len.mean())
    longest = int((wl.input_len + wl.output_len).max())
    seq_len = max(1, round(mean_in + mean_out))

    moe = load_model(base.model).moe is not None
    feasible_keys, rows, infeasible = _screen(base, base1, hw_specs, tp_list, wd_list, kv_list, seq_len, longest,
                                              moe)
    ex = executor or Executor()
    prog = _Offset(progress)
    prog.add(2 * len(feasible_keys) + 2)  # every step that may run (`_Offset`)
    _REUSE.clear()
    try:
        _slo_capacities(base, base1, feasible_keys, rows, ex, prog, slo_target, tol, rate, headroom)
        candidates = _price_candidates(feasible_keys, rows, infeasible, hw_specs, price_map, rate, headroom,
                                       mean_out)
        _verify_pools(base1, candidates, infeasible, rate, headroom, slo_target, mean_out, ex, prog)
        if candidates:
            _refine_best(base, base1, candidates[0], ex, prog, slo_target, tol)
            _without_headroom(base1, candidates[0], rate, headroom, slo_target, ex, prog)
    finally:
        _REUSE.clear()
    prog.finish()
    for r in infeasible:
        r["status"] = "infeasible"
    ep_extra = {"expert_parallel": expert_parallel_summary(base1, candidates, infeasible)} if moe else {}
    for r in (*candidates, *infeasible):
        r.pop("_key", None)
        r.pop("search", None)
        r.pop("headroom", None)
    extra = _disaggregated(base, rate, hw_specs, price_map, tp_list, headroom, slo_target, tol, executor,
                           candidates) if disagg else {}
    return {
        "model": base.model,
        "workload": str(base.workload),
        "rate": float(rate),
        "headroom": headroom,
        "slo_target": slo_target,
        "tolerance": tol,
        "goodput_slos_ms": dict(base.goodput),
        "num_requests_per_point": base.num_requests,
        "mean_input_tokens": mean_in,
        "mean_output_tokens": mean_out,
        "prices_overridden": price_map,
        "scenario": base1.as_dict(),
        "candidates": candidates,
        "infeasible": infeasible,
        "best": candidates[0] if candidates else None,
        **ep_extra,
        **extra,
    }


def _disaggregated(base: Scenario, rate: float, hw_specs: dict[str, Any], price_map: dict[str, float],
                   tp_list: list[int], headroom: float, slo_target: float, tol: float,
                   executor: Executor | None, candidates: list[dict[str, Any]]) -> dict[str, Any]:
    """The disaggregated search and its comparison with the best aggregated candidate."""
    from simulator.analysis import plan_disagg

    prices = {ref: price_map.get(hw.id, hw.price_per_gpu_hour_usd) for ref, hw in hw_specs.items()}
    rows = plan_disagg.search(base, rate, list(hw_specs), prices, tp_list, headroom, slo_target, tol,
                              executor or Executor())
    best_dis = next((r for r in rows if r["status"] == "feasible"), None)
    best_agg = candidates[0] if candidates else None
    for c in candidates:
        c["shape"] = "aggregated"
    why = plan_disagg.why(best_agg, best_dis)
    return {"disaggregated": rows, "best_disaggregated": best_dis, "winner": why.split(" ", 1)[0], "why": why}


def _shape(r: dict[str, Any]) -> str:
    """'3 x h100-sxm tp=4 ep=4 (12 GPUs, $30.00/h)' for a feasible candidate row."""
    ep = f" ep={r['ep']}" if r.get("ep", 1) != 1 else ""
    cost = f", ${r['cost_per_hour_usd']:.2f}/h" if _num(r.get("cost_per_hour_usd")) else ""
    return f"{r['replicas']} x {r['hardware']} tp={r['tp']}{ep} ({r['gpus']} GPUs{cost})"


def _ep_pairs(base1: Scenario, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each EP shape beside the same shape without EP: SLO capacities per replica, ranks and
    which one the ranking prefers ("ep", "tp", or None when neither meets the SLOs)."""
    by_key = {r["_key"]: r for r in rows if "_key" in r}
    pairs = []
    for key, r_ep in by_key.items():
        if key[4] == base1.ep:
            continue
        r_tp = by_key.get((*key[:4], base1.ep), {})
        rank_ep, rank_tp = r_ep.get("rank"), r_tp.get("rank")
        winner = None if rank_ep is None and rank_tp is None else (
            "ep" if rank_tp is None or (rank_ep is not None and rank_ep < rank_tp) else "tp")
        pairs.append({"hardware": r_ep["hardware"], "tp": key[1], "ep": key[4], "weight_dtype": key[2],
                      "kv_dtype": key[3], "slo_capacity_without_ep": r_tp.get("slo_capacity"),
                      "slo_capacity_with_ep": r_ep.get("slo_capacity"), "rank_without_ep": rank_tp,
                      "rank_with_ep": rank_ep, "winner": winner})
    return pairs


def expert_parallel_summary(base1: Scenario, candidates: list[dict[str, Any]],
                            infeasible: list[dict[str, Any]]) -> dict[str, Any]:
    """For a MoE model: `pairs` (`_ep_pairs`) and `note`, one sentence on whether expert
    parallelism (ep = tp) wins the plan and by what per-replica capacity. The all-to-all that
    replaces the MoE layer's all-reduce moves rho k / ep of its bytes (simulator.cost.parallel:
    2 rho k (ep-1)/ep^2 vs 2 (ep-1)/ep hidden states per token), so EP pays on the link when
    rho k < ep; the step also runs whole experts per rank."""
    pairs = _ep_pairs(base1, (*candidates, *infeasible))
    best = candidates[0] if candidates else None
    best_ep = next((c for c in candidates if c.get("ep", base1.ep) != base1.ep), None)
    if best is None:
        return {"pairs": pairs, "note": "expert parallelism: no candidate meets the SLOs"}
    if not pairs:
        return {"pairs": pairs, "note": "expert parallelism: not tried (no candidate TP > 1 to shard experts over)"}
    if best_ep is None:
        return {"pairs": pairs, "note": "expert parallelism loses: no candidate with EP (ep = tp) meets the SLOs"}
    k = load_model(base1.model).moe.experts_per_token  # type: ignore[union-attr]
    twin = next(p for p in pairs if (p["hardware"], p["tp"], p["weight_dtype"], p["kv_dtype"]) ==
                (best_ep["hardware"], best_ep["tp"], best_ep["weight_dtype"], best_ep["kv_dtype"]))
    without = twin["slo_capacity_without_ep"]
    cap = (f"at {best_ep['hardware']} tp={best_ep['tp']} EP takes one replica's SLO capacity from "
           f"{without:.3g} to {best_ep['slo_capacity']:.3g} req/s" if _num(without) else
           f"without EP {best_ep['hardware']} tp={best_ep['tp']} meets no SLO capacity; with EP one replica "
           f"serves {best_ep['slo_capacity']:.3g} req/s")
    link = (f"(its all-to-all moves rho k / ep = {base1.expert_imbalance * k / best_ep['ep']:.3g} x the bytes of "
            "the MoE all-reduce it replaces)")
    if best is best_ep:
        note = f"expert parallelism wins: the cheapest is {_shape(best)}; {cap} {link}"
    elif (best_ep["cost_per_hour_usd"], best_ep["gpus"]) == (best["cost_per_hour_usd"], best["gpus"]):
        note = (f"expert parallelism ties: {_shape(best_ep)} costs the same as the cheapest, {_shape(best)}, "
                f"and ranks below it on capacity; {cap} {link}")
    else:
        note = (f"expert parallelism loses: the cheapest is {_shape(best)}, the cheapest with EP "
                f"{_shape(best_ep)} (rank {best_ep['rank']}); {cap} {link}")
    return {"pairs": pairs, "note": note}


def table_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Flat rows (feasible then infeasible) for a CSV or a table."""
    rows = (*result["candidates"], *result["infeasible"])
    ep = ("ep",) if any("ep" in r for r in rows) else ()  # MoE models only
    cols = ("rank", "status", "hardware", "tp", *ep, "pp", "weight_dtype", "kv_dtype", "slo_capacity", "binding_slo",
            "replicas", "replicas_verified", "replicas_linear", "gpus", "price_per_gpu_hour_usd", "cost_per_hour_usd",
            "cost_per_million_output_tokens_usd", "kv_capacity_tokens", "max_concurrent_sequences",
            "offline_max_throughput", "analytic_bound", "saturation_rate", "joules_per_output_token",
            "smallest_tp_that_fits", "reason")
    out = []
    for r in rows:
        row = {c: r.get(c) for c in cols}
        for k, m in ((r.get("binding") or {}).get("margins") or {}).items():
            row[f"{k}_margin_at_capacity"] = m.get("margin")
        out.append(row)
    return out


__all__ = ["plan", "replicas_needed", "expert_parallel_summary", "cost_per_million_tokens", "normalise_prices", "table_rows",
           "pool_check", "MAX_POOL_RAISE"]
