"""Discrete-event simulation of LLM serving: continuous batching on one or more replicas.

`simulate(cost, workload, config)` is a pure function: a step-cost model and a request stream
in, a `SimResult` out (per-request records as numpy arrays / a tidy DataFrame, pooled
inter-token latencies, a timeline). Behaviour follows `docs/serving_model.md` (vLLM's scheduler).

Layers, one concept each:

* `kvcache.py`   paged KV blocks of one replica (allocate, free, reference counts);
* `schedulers.py` `EngineConfig` and the scheduler policies (`SCHEDULERS`): each turns a
  read-only view of a replica into the plan of its next step;
* `replica.py`   executes step plans and prices steps (roofline `CostModel.step_time`);
* `segments.py`  the closed-form decode fast path (runs of identical decode steps at once);
* `steplog.py`   pooled inter-token gaps and the timeline;
* this module    the event loop, the routers (`ROUTERS`) and the result.

Event loop. Timed events sit in a heap (`EventQueue`): request arrivals (open loop: the
workload's arrival times) and closed-loop releases (a client sends its next request when its
previous one completes or is rejected, Little's-law style: `concurrency` clients), or the
open-loop arrivals gated by a cap of `max_concurrency` in flight (`client_cap.py`). Popping an
event at time t first advances every replica of the pool, in index order, through the steps
that start before t (a request arriving at t joins the step starting at or after t; a step
ends at start + step_time, and a replica's completions there push release events); then the
event is handled: the router picks a replica and the request joins its queue. A request
arriving while every replica is idle starts at its arrival time. Replicas are independent
between arrivals, so advancing them one after another gives the same result as interleaving
their steps by time, and keeps the timeline's row order stable.

Replicas form a `Pool` (replicas + router); `simulate` builds one pool. A disaggregated
deployment (a prefill pool handing requests to a decode pool) is a second pool whose arrivals
are the first pool's prefill completions, pushed as timed events.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from .checks import check_cost_model
from .client_cap import run_capped
from .prefix import request_block_hashes
from .replica import COMPLETED, PENDING, REJECTED, Replica, capped_sums
from .roofline import CostModel
from .schedulers import SCHEDULERS, EngineConfig
from .sessions import dependencies, release_children, run_dependent
from .specs import SpecError
from .steplog import StepLog
from .workload import Workload

_Log = StepLog  # the name tests and older code use
_capped_sums = capped_sums

__all__ = ["COMPLETED", "PENDING", "REJECTED", "ROUTERS", "SCHEDULERS", "EngineConfig", "EventQueue",
           "Pool", "SimResult", "kv_blocks", "simulate"]


@dataclass
class SimResult:
    """What a simulation produced: one record per request plus pooled step statistics."""

    arrival_s: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    preemptions: np.ndarray
    replica: np.ndarray
    status: np.ndarray
    reasons: dict[int, str]
    itl_values_s: np.ndarray  # distinct inter-token gaps
    itl_counts: np.ndarray  # how many tokens saw each gap
    timeline: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)
    #: when each request was first scheduled (NaN: never); queue time = scheduled_s - arrival_s
    scheduled_s: np.ndarray | None = None
    cached_tokens: np.ndarray | None = None  # prefix caching on: prompt tokens found in cache
    #: client-side wait for a free concurrency slot (vLLM's client_queue_time): send time
    #: (`arrival_s`) minus scheduled time; None for an uncapped open loop
    client_queue_s: np.ndarray | None = None

    def records(self) -> pd.DataFrame:
        """Tidy per-request table (one row per request), times in seconds."""
        ttft = self.first_token_s - self.arrival_s
        e2el = self.finish_s - self.arrival_s
        from .metrics import tpot  # metrics imports this module: import on use

        tpot_s = tpot(ttft, e2el, self.output_len)
        status = np.array(["pending", "completed", "rejected"])[self.status]
        reason = [self.reasons.get(i, "") for i in range(len(self.status))] if self.reasons else [""] * len(self.status)
        return pd.DataFrame({
            "request_id": np.arange(len(self.arrival_s)),
            "arrival_s": self.arrival_s,
            "first_token_s": self.first_token_s,
            "finish_s": self.finish_s,
            "input_len": self.input_len,
            "output_len": self.output_len,
            "ttft_s": ttft,
            "tpot_s": tpot_s,
            "e2el_s": e2el,
            "preemptions": self.preemptions,
            "replica": self.replica,
            "status": status,
            "reason": reason,
            **({} if self.cached_tokens is None else {"cached_tokens": self.cached_tokens}),
            **({} if self.client_queue_s is None else {"client_queue_time_s": self.client_queue_s}),
        })



# ---------------------------------------------------------------------------- routers


class Router:
    """Chooses the replica of a pool that receives the next request."""

    name: ClassVar[str]

    def __init__(self, cfg: EngineConfig) -> None:
        self.cfg = cfg

    def choose(self, replicas: list[Replica]) -> Replica:
        raise NotImplementedError


class RoundRobin(Router):
    """Request i goes to replica i mod N."""

    name = "round-robin"

    def __init__(self, cfg: EngineConfig) -> None:
        super().__init__(cfg)
        self.next = 0

    def choose(self, replicas: list[Replica]) -> Replica:
        target = replicas[self.next % len(replicas)]
        self.next += 1
        return target


class LeastOutstanding(Router):
    """Fewest requests queued or running (lowest index on ties)."""

    name = "least-outstanding"

    def choose(self, replicas: list[Replica]) -> Replica:
        return min(replicas, key=lambda p: (p.outstanding, p.index))


class LeastKV(Router):
    """Lowest KV utilization plus queue length in units of max_num_seqs (lowest index on ties)."""

    name = "least-kv"

    def choose(self, replicas: list[Replica]) -> Replica:
        seats = max(self.cfg.max_num_seqs, 1)
        return min(replicas, key=lambda p: (p.kv_load + len(p.waiting) / seats, p.index))


#: router name -> class (one instance per pool)
ROUTERS: dict[str, type[Router]] = {cls.name: cls for cls in (RoundRobin, LeastOutstanding, LeastKV)}


# ---------------------------------------------------------------------------- events and pools

ARRIVAL, RELEASE = 0, 1  # event kinds (sessions.CHILD = 2: a later turn of a session released)


class EventQueue:
    """Timed events in time order: a pre-sorted stream of arrivals merged with a heap of the
    events the run creates (closed-loop releases; later, hand-offs between pools). On equal
    times the stream comes first, then heap events in push order."""

    def __init__(self, arrival_s: np.ndarray | None = None) -> None:
        self._heap: list[tuple[float, int, int, int]] = []
        self._seq = 0
        self._arrivals = arrival_s if arrival_s is not None else np.zeros(0)
        self._next = 0  # index of the next arrival in the stream

    def push(self, time_s: float, kind: int, payload: int = -1) -> None:
        heapq.heappush(self._heap, (time_s, self._seq, kind, payload))
        self._seq += 1

    def peek_time(self) -> float:
        heap, i = self._heap, self._next
        if i < len(self._arrivals):
            t = float(self._arrivals[i])
            return t if not heap or t <= heap[0][0] else heap[0][0]
        return heap[0][0]

    def pop(self) -> tuple[float, int, int]:
        """(time_s, kind, payload) of the earliest event (payload: the request of an arrival)."""
        heap, i = self._heap, self._next
        if i < len(self._arrivals):
            t = float(self._arrivals[i])
            if not heap or t <= heap[0][0]:
                self._next = i + 1
                return t, ARRIVAL, i
        time_s, _, kind, payload = heapq.heappop(heap)
        return time_s, kind, payload

    def __len__(self) -> int:
        return len(self._heap) + len(self._arrivals) - self._next


class Pool:
    """Replicas of one kind behind one router; with a simulated-time cap (`max_duration_s`)
    none of them starts a step at or after it (as in the open loop: a step begun before the
    cap is the last)."""

    def __init__(self, replicas: list[Replica], router: Router, cap: float | None = None) -> None:
        self.replicas = replicas
        self.router = router
        self.limit = math.inf if cap is None else cap

    def advance_until(self, t: float) -> None:
        """Run every replica's steps that start before t (and before the cap)."""
        t = min(t, self.limit)
        for p in self.replicas:
            p.advance_until(t)

    def step_earliest(self) -> bool:
        """One scheduling decision (a step or a decode segment) on the busy replica with the
        earliest clock; False when no replica is busy or the earliest has reached the cap."""
        busy = self.busy()
        if not busy:
            return False
        first = min(busy, key=lambda p: p.clock)
        if first.clock >= self.limit:
            return False
        first.advance_until(self.limit, max_actions=1)
        return True

    def route(self, r: int, t: float) -> None:
        """Request r arrives at t (the pool has been advanced to t)."""
        self.router.choose(self.replicas).enqueue(r, t)

    def busy(self) -> list[Replica]:
        return [p for p in self.replicas if p.has_work()]


def _next_release(pool: Pool, events: EventQueue) -> float:
    """Closed loop: the time the next client is free (the earliest release so far); a release
    after the pool's time cap is returned as is, and inf when nothing running ends before the
    cap (the caller cuts the run off there)."""
    while True:
        if len(events):
            t = events.peek_time()
            pool.advance_until(t)
            if events.peek_time() < t:
                continue  # an earlier completion appeared
            return events.pop()[0]
        if not pool.step_earliest():
            return math.inf if pool.busy() else max(p.clock for p in pool.replicas)


def kv_blocks(cost: CostModel, cfg: EngineConfig) -> tuple[int, int]:
    """(KV blocks per replica, max_model_len) from the memory model or the override."""
    if cfg.kv_capacity_tokens is not None:
        tokens = int(cfg.kv_capacity_tokens)
    else:
        plan = cost.memory(cfg.gpu_memory_utilization, cfg.max_num_batched_tokens, cfg.max_num_seqs)
        if not plan.fits:
            raise SpecError(plan.message)
        tokens = plan.kv_capacity_tokens
    blocks = tokens // cfg.block_size
    mml = cfg.max_model_len or cost.model.max_context
    return blocks, int(mml)


def simulate(cost: CostModel, workload: Workload, config: EngineConfig | None = None,
             replicas: int = 1, router: str = "round-robin",
             progress: Callable[[int, int], None] | None = None) -> SimResult:
    """Serve `workload` on `replicas` copies of the replica priced by `cost`.

    Deterministic: the same inputs give the same result bit for bit (no randomness here;
    all draws happen when the workload is made).
    """
    cfg = config or EngineConfig()
    if isinstance(replicas, bool) or not isinstance(replicas, (int, np.integer)) or replicas < 1:
        raise SpecError(f"replicas: {replicas!r} must be an integer >= 1")
    if router not in ROUTERS:
        raise SpecError(f"router: {router!r} is not one of {', '.join(ROUTERS)}")
    check_cost_model(cost)
    n = workload.num_requests
    blocks, mml = kv_blocks(cost, cfg)
    out: dict[str, Any] = {
        "first_token_s": np.full(n, np.nan),
        "finish_s": np.full(n, np.nan),
        "scheduled_s": np.full(n, np.nan),  # first admission (vLLM's end of queue time)
        "preemptions": np.zeros(n, dtype=np.int64),
        "replica": np.full(n, -1, dtype=np.int64),
        "status": np.zeros(n, dtype=np.int8),
        "reasons": {},
        "cached_tokens": np.zeros(n, dtype=np.int64),
    }
    log = StepLog()
    closed, capped = workload.concurrency, workload.max_concurrency
    arrivals = np.array(workload.arrival_s, dtype=float) if closed is None else np.full(n, np.nan)
    deps = dependencies(workload, closed if capped is None else capped)
    if deps is not None:
        arrivals = arrivals.copy()
        roots = np.flatnonzero(deps[0] < 0)
        events = EventQueue(arrivals[roots])
    else:
        events = EventQueue(arrivals if closed is None else None)

    def on_finish(r: int, t: float) -> None:
        if closed is not None or capped is not None:
            events.push(t, RELEASE)
        elif deps is not None:
            release_children(deps, r, t, arrivals, events)

    # every router sends request r to one of the first r + 1 replicas (an idle replica with
    # the lowest index wins ties), so replicas beyond n would stay idle: do not build them
    # an uncapped open loop reacts to no completion: no callback (one call less per request)
    reacts = closed is not None or capped is not None or deps is not None
    pool = Pool([Replica(i, cost, cfg, blocks, mml, workload, out, log, on_finish if reacts else None)
                 for i in range(min(replicas, n))], ROUTERS[router](cfg), cfg.max_duration_s)
    reps = pool.replicas
    _attach_prefix_caches(reps, workload, cfg)
    if closed is not None:
        for _ in range(min(closed, n)):
            events.push(0.0, RELEASE)
    if deps is not None:
        run_dependent(pool, events, roots, deps, arrivals, cfg, out, progress)
        client_queue_s = None
    else:
        arrivals, client_queue_s = _run_stream(pool, events, workload, arrivals, cfg, out, progress)
    cap = cfg.max_duration_s
    cut_reason = _cut_reason(cap)
    for p in reps:
        p.advance_until(math.inf if cap is None else cap)
        if cap is not None:
            p.cut_off(cut_reason)
    done = out["status"] == COMPLETED
    if not all(math.isfinite(p.clock) for p in reps) or not (
            np.isfinite(out["finish_s"][done]).all() and np.isfinite(out["first_token_s"][done]).all()):
        raise SpecError("simulated time overflowed (step times or arrival gaps beyond float range); "
                        "check the efficiency overheads and the rate")
    if cfg.debug:
        _check_run(reps, out, log, arrivals, workload.output_len)
    itl_v, itl_c = log.itl()
    from .utilization import utilization_columns, utilization_summary

    columns = log.timeline_columns()
    columns.update(utilization_columns(cost, columns))  # MFU/MBU per row, from its work sums
    util = utilization_summary(columns)
    timeline = pd.DataFrame(columns, copy=False)  # built once, with every column
    meta = {
        "num_replicas": replicas,
        "router": router,
        "scheduler": cfg.scheduler,
        "kv_capacity_tokens_per_replica": blocks * cfg.block_size,
        "kv_blocks_per_replica": blocks,
        "max_model_len": mml,
        "steps": log.steps,
        "mean_batch_size": log.batch_token_sum / log.steps if log.steps else 0.0,
        "peak_kv_utilization": log.peak_kv,
        "busy_s": log.busy_s,
        "offered_rate": workload.offered_rate if closed is None else float("nan"),
        "concurrency": closed,
        "max_concurrency": capped,
        "chars_per_token": cost.model.chars_per_token,
        "gpus_per_replica": cost.par.num_gpus,
        "utilization": util,
        "prefix_caching": cfg.enable_prefix_caching,
        "prefix_cache_hit_rate": _hit_rate(out, workload, done),
    }
    if util["busy_utilization"] is not None:
        meta["busy_utilization"] = util["busy_utilization"]  # energy.run_energy's u_busy
    return SimResult(workload.arrival_s.copy() if closed is None and deps is None and capped is None else arrivals,
                     workload.input_len, workload.output_len, out["first_token_s"], out["finish_s"],
                     out["preemptions"], out["replica"], out["status"], out["reasons"], itl_v, itl_c,
                     timeline, meta, scheduled_s=out["scheduled_s"],
                     cached_tokens=out["cached_tokens"] if cfg.enable_prefix_caching else None,
                     client_queue_s=client_queue_s)


def _attach_prefix_caches(reps: list[Replica], workload: Workload, cfg: EngineConfig) -> None:
    """Prefix caching on: every replica gets a cache over the requests' block hashes."""
    if cfg.enable_prefix_caching:
        hashes = request_block_hashes(workload, cfg.block_size)
        cost = reps[0].cost
        # a block's KV on one GPU, reloaded over that GPU's own host link
        block_bytes = cfg.block_size * cost.model.kv_bytes_per_token(cost.dtypes.kv) / (
            cost.model.kv_shards(cost.par.tp) * cost.par.pp)
        cpu_blocks = int(cfg.cpu_offload_bytes // (block_bytes * cost.par.num_gpus))
        reload_s = block_bytes / cost.hardware.host_link_bandwidth_bytes_per_s
        for p in reps:
            p.attach_prefix_cache(hashes, cfg.warm_cache, cpu_blocks, reload_s)


def _hit_rate(out: dict[str, Any], workload: Workload, done: np.ndarray) -> float:
    """Prompt tokens served from the prefix cache / prompt tokens, over completed requests
    (vLLM's prefix-cache hit rate, in tokens); 0 with caching off."""
    total = int(workload.input_len[done].sum())
    return int(out["cached_tokens"][done].sum()) / total if total else 0.0


def _check_run(reps: list[Replica], out: dict[str, Any], log: StepLog, arrivals: np.ndarray,
               output_len: np.ndarray) -> None:
    """Debug mode: conservation of requests, blocks, tokens and time order at the end."""
    done = out["status"] == COMPLETED
    for p in reps:
        p.check()
        if p.free_blocks != p.total_blocks or p.active or p.waiting or p.outstanding:
            raise AssertionError(f"replica {p.index}: work or KV left at the end")
        if p.gen_so_far or p.last_tok_of:
            raise AssertionError(f"replica {p.index}: state of preempted requests left at the end")
    if not ((out["status"] == COMPLETED) | (out["status"] == REJECTED)).all():
        raise AssertionError("a request ended neither completed nor rejected")
    rejected = np.flatnonzero(out["status"] == REJECTED)
    if len(rejected) != len(out["reasons"]) or not all(out["reasons"].get(int(r)) for r in rejected):
        raise AssertionError("a rejected request has no reason (or a served one has one)")
    # every later token is one inter-token gap: completed requests emitted all their tokens,
    # requests cut off by the time cap the ones counted when they were cut off
    gaps = int(log.itl()[1].sum())
    want = int(output_len[done].sum()) - int(done.sum()) + log.cut_gaps
    if gaps != want:
        raise AssertionError(f"inter-token gaps {gaps} != {want} (tokens requested by completed "
                             "requests minus first tokens, plus the gaps of requests cut off)")
    arr_d, first_d, fin_d = arrivals[done], out["first_token_s"][done], out["finish_s"][done]
    if not ((arr_d < first_d) & (first_d <= fin_d)).all():
        raise AssertionError("a completed request has first token not after arrival or finish before first token")


def _cut_reason(cap: float | None) -> str:
    return f"not finished within the simulated-time cap of {cap} s (max_duration_s)"


def _run_stream(pool: Pool, events: EventQueue, workload: Workload, arrivals: np.ndarray, cfg: EngineConfig,
                out: dict[str, Any], progress: Callable[[int, int], None] | None
                ) -> tuple[np.ndarray, np.ndarray | None]:
    """Serve a stream without dependencies: open loop, closed loop, or open loop under a cap.
    Returns (arrival = send time per request, client-side wait per request or None)."""
    closed, capped = workload.concurrency, workload.max_concurrency
    if capped is not None:
        send_s = np.full(len(arrivals), np.nan)  # the scheduled times stay in the workload
        queue_s = np.full(len(arrivals), np.nan)
        run_capped(pool, events, workload.arrival_s, capped, send_s, queue_s, cfg, out, progress)
        return send_s, queue_s
    _run_events(pool, events, arrivals, closed, cfg, out, progress)
    # a closed-loop client's requests are all scheduled at t = 0: each waited until sent
    return arrivals, (None if closed is None else arrivals.copy())


def _run_events(pool: Pool, events: EventQueue, arrivals: np.ndarray, closed: int | None,
                cfg: EngineConfig, out: dict[str, Any],
                progress: Callable[[int, int], None] | None) -> None:
    """Hand requests 0..n-1 to the pool in arrival order, advancing it to each event."""
    n = len(arrivals)
    cap = cfg.max_duration_s
    report_every = max(1, n // 100)
    # open loop: the events are the sorted arrivals alone (nothing pushes to the heap), so
    # read them as Python floats in order; one replica: every router picks it
    times = arrivals.tolist() if closed is None else None
    only = pool.replicas[0] if len(pool.replicas) == 1 else None
    if times is not None and only is not None and cap is None and progress is None:
        # the plainest run (open loop, one replica, no cap, no progress): nothing else to check
        advance_until, enqueue = only.advance_until, only.enqueue
        for r, t in enumerate(times):
            advance_until(t)
            enqueue(r, t)
        return
    for r in range(n):
        if times is None:
            t = _next_release(pool, events)
            arrivals[r] = t
        else:
            t = times[r]
        if cap is not None and t > cap:
            # past the cap nothing more is served: the rest are cut off, with a reason
            # a closed loop never sent these: no arrival time (not one after the cap)
            reason = (_cut_reason(cap) if closed is None
                      else f"never sent: the simulated-time cap of {cap} s came first (max_duration_s)")
            for q in range(r, n):
                out["status"][q] = REJECTED
                out["reasons"][q] = reason
            if closed is not None:
                arrivals[r:] = np.nan
            break
        if only is not None:
            only.advance_until(t)
            only.enqueue(r, t)
        else:
            pool.advance_until(t)
            pool.route(r, t)
        if closed is not None and out["status"][r] == REJECTED:
            events.push(t, RELEASE)
        if progress is not None and (r % report_every == 0 or r == n - 1):
            progress(r + 1, n)
