"""Discrete-event simulation of LLM serving: continuous batching on one or more replicas.

`simulate(cost, workload, config)` is a pure function: a step-cost model and a request stream
in, a `SimResult` out (per-request records as numpy arrays / a tidy DataFrame, pooled
inter-token latencies, a timeline). Behaviour follows `docs/serving_model.md` (vLLM's scheduler).

The serving layer, one concept a module:

* `kvcache`, `prefix_cache`  paged KV blocks of one replica, and automatic prefix caching;
* `sched/`       scheduler limits (`EngineConfig`), the policies and their registry: each turns
  a read-only view of a replica into the plan of its next step;
* `replica`      executes step plans and prices steps (roofline `CostModel.step_time`);
* `segments`     the closed-form decode fast path (runs of identical decode steps at once);
* `steplog`      pooled inter-token gaps and the timeline;
* `records`      the per-request records (`Records`) and the result (`SimResult`);
* `events`, `pool`  the event queue, a pool of replicas behind a router (`ROUTERS`);
* `client_cap`, `multiturn`  the capped client and multi-turn sessions;
* `disagg`       a prefill pool handing KV to a decode pool;
* this module    the event loop of one pool and the result it returns.

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

The client view (`client_view.py`) is applied where it happens: the API-server latency F
separates a client's send from the request's arrival at the engine (events carry engine times:
a send at s is an engine arrival at s + F, and a client that sees a request end at t sends its
next one, or the next turn, at t, reaching the engine at t + F); async scheduling's one-step lag,
the client's timeout and the API server's streaming of each step's outputs act inside the
replicas (`Replica.set_client`). The result's times are the client's: `arrival_s` = send time,
first token and finish as the engine emits them, or, with streaming, as the API server's burst
delivers them.

Replicas form a `Pool` (replicas + router); `simulate` builds one pool. A disaggregated
deployment (a prefill pool handing requests to a decode pool) is a second pool whose arrivals
are the first pool's prefill completions, pushed as timed events.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from simulator.cost.memory import kv_bytes_per_gpu_token
from simulator.cost.roofline import CostModel
from simulator.cost.speculative import SpeculativeDecoding
from simulator.serving.client_cap import run_capped
from simulator.serving.client_view import ClientView, TokenizerQueue, tokenizer_for
from simulator.serving.events import RELEASE, EventQueue, engine_time
from simulator.serving.multiturn import release_children, run_dependent
from simulator.serving.pool import ROUTERS, Pool, kv_blocks
from simulator.serving.records import (
    REJECTED,
    Records,
    SimResult,
    check_arrivals_in_clock,
    cut_reason,
)
from simulator.serving.replica import Replica
from simulator.serving.sched.registry import EngineConfig
from simulator.serving.speculative import SPECULATIVE_SCHEDULERS, SpecReplica, merged_spec_counters
from simulator.serving.steplog import StepLog, TimedStepLog
from simulator.specs.checks import (
    SpecError,
    check_callable,
    check_choice,
    check_cost_model,
    check_instance,
    check_int,
)
from simulator.workloads.sessions import dependencies
from simulator.workloads.shared_prefix import request_block_hashes
from simulator.workloads.workload import Workload

__all__ = ["simulate", "Watch", "WATCH_CHECKS"]

#: a run's watch (`simulate(..., watch=)`): called as watch(r, t, records) before request r is
#: handed to the pool at its arrival time t; a non-empty reason stops the run there
Watch = Callable[[int, float, Records], "str | None"]
#: how many times a watch is consulted over a run (every n // WATCH_CHECKS arrivals)
WATCH_CHECKS = 64


def _next_release(pool: Pool, events: EventQueue) -> float:
    """Closed loop: the time the next client is free (the earliest release so far); a release
    after the pool's time cap is returned as is, and inf when nothing running ends before the
    cap (the caller cuts the run off there)."""
    while True:
        if len(events):
            if not pool.advance_to_event(events.peek_time(), events):
                continue  # an earlier completion appeared
            return events.pop()[0]
        if not pool.step_earliest():
            return math.inf if pool.busy() else max(p.clock for p in pool.replicas)


def simulate(cost: CostModel, workload: Workload, config: EngineConfig | None = None,
             replicas: int = 1, router: str = "round-robin",
             progress: Callable[[int, int], None] | None = None, client: ClientView | None = None,
             speculative: SpeculativeDecoding | None = None, itl_times: bool = False,
             watch: Watch | None = None) -> SimResult:
    """Serve `workload` on `replicas` copies of the replica priced by `cost`; `client`: what
    lies between the client and the engine core (`client_view.py`; None: nothing); `speculative`:
    speculative decoding (`serving/speculative.py`; its draft's weights and KV shrink the KV
    capacity unless `config.kv_capacity_tokens` fixes it); `itl_times`: also keep when and
    where each inter-token gap was observed (`SimResult.itl_timed`, for a time series of the
    run; a `TimedStepLog`, off by default so plain runs pay nothing).

    `watch` (an open loop without dependent turns or a cap on concurrency): consulted every
    n // WATCH_CHECKS arrivals with the records so far; when it returns a reason the run stops
    at that arrival: what runs or waits, and every later request, ends rejected ("not
    simulated: stopped early: <reason>") and `meta["stopped_early"]` says where. Until it
    stops the run is the run without a watch, step for step (a capacity search stops probes
    whose outcome is already certain, `analysis/capacity.py`).

    Deterministic: the same inputs give the same result bit for bit (no randomness here;
    all draws happen when the workload is made).
    """
    check_instance("workload", workload, Workload)
    check_instance("config", config, EngineConfig, optional=True)
    check_instance("client", client, ClientView, optional=True)
    check_instance("speculative", speculative, SpeculativeDecoding, optional=True)
    check_callable("progress", progress)
    check_callable("watch", watch)
    cfg = config or EngineConfig()
    check_int("replicas", replicas)
    check_choice("router", router, ROUTERS)
    if not callable(getattr(cost, "step_time", None)):
        raise SpecError(f"cost: {type(cost).__name__} is not a cost model (a CostModel, or an object with step_time)")
    check_cost_model(cost)
    view = client or ClientView()
    check_arrivals_in_clock(workload)
    front = float(view.frontend_s)  # F: send -> engine arrival (module docstring)
    # the API servers' tokenizers after F, one per replica (client_view.TokenizerQueue); None: none
    tok = tokenizer_for(view, workload.input_len, min(replicas * view.api_servers, workload.num_requests))
    if speculative is not None:
        cfg = _speculative_config(cfg, speculative, cost)
    n = workload.num_requests
    blocks, mml = kv_blocks(cost, cfg)
    out = Records(n)
    log = TimedStepLog() if itl_times else StepLog()
    closed, capped = workload.concurrency, workload.max_concurrency
    # client send times; the event queue holds engine times (send + F)
    arrivals = np.array(workload.arrival_s, dtype=float) if closed is None else np.full(n, np.nan)
    deps = dependencies(workload, closed if capped is None else capped)
    if deps is not None:
        arrivals = arrivals.copy()
        roots = np.flatnonzero(deps[0] < 0)
        events = EventQueue(arrivals[roots] + front)
    else:
        stream = _stream(arrivals, front, tok, closed, capped, view.stream_output_s > 0)
        events = EventQueue(stream)

    def on_finish(r: int, t: float) -> None:
        """Request r ended (completed, or failed) where its client saw it at t."""
        if closed is not None or capped is not None:
            events.push(engine_time(t, front), RELEASE)  # the client's next request reaches the engine F later
        elif deps is not None:
            release_children(deps, r, t, arrivals, events, front)

    # every router sends request r to one of the first r + 1 replicas (an idle replica with
    # the lowest index wins ties), so replicas beyond n would stay idle: do not build them
    # an uncapped open loop reacts to no completion: no callback (one call less per request)
    reacts = closed is not None or capped is not None or deps is not None
    cb = on_finish if reacts else None
    reps_: list[Replica] = ([Replica(i, cost, cfg, blocks, mml, workload, out, log, cb) for i in range(min(replicas, n))]
                            if speculative is None else
                            [SpecReplica(i, cost, cfg, blocks, mml, workload, out, log, cb, speculative)
                             for i in range(min(replicas, n))])
    pool = Pool(reps_, ROUTERS[router](cfg), cfg.max_duration_s)
    reps = pool.replicas
    _attach_prefix_caches(reps, workload, cfg)
    _attach_client(reps, view, n, tok)
    if closed is not None:
        for _ in range(min(closed, n)):
            events.push(front, RELEASE)  # every client sends at 0
    if deps is not None:
        run_dependent(pool, events, roots, deps, arrivals, cfg, out, progress, front, tok)
        client_queue_s = None
        stopped = None
    else:
        arrivals, client_queue_s, stopped = _run_stream(pool, events, workload, arrivals, cfg, out, progress,
                                                        watch, front, tok, stream)
    _end(pool, cfg, stopped)
    done = out.completed()
    if not all(math.isfinite(p.clock) for p in reps) or not (
            np.isfinite(out.finish_s[done]).all() and np.isfinite(out.first_token_s[done]).all()):
        raise SpecError("simulated time overflowed (step times or arrival gaps beyond float range); "
                        "check the efficiency overheads and the rate")
    if cfg.debug:
        _check_run(reps, out, log, arrivals, workload.output_len)
    itl_v, itl_c = log.itl()
    from simulator.cost.utilization import utilization_columns, utilization_summary

    columns = log.timeline_columns()
    columns.update(utilization_columns(cost, columns))  # MFU/MBU per row, from its work sums
    util = utilization_summary(columns)
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
        **({"stopped_early": stopped} if stopped is not None else {}),
        **_api_server_meta(front, tok, done, view.stream_output_s,
                           log.loop_merged_tokens / max(int(workload.output_len[done].sum()), 1), view.api_servers),
    }
    if util["busy_utilization"] is not None:
        meta["busy_utilization"] = util["busy_utilization"]  # energy.run_energy's u_busy
    if workload.clock_start_s is not None:
        meta["clock_start_s"] = workload.clock_start_s  # the client's clock (summary's duration)
    if speculative is not None:
        meta["speculative"] = {"method": speculative.config.method, "num_speculative_tokens": speculative.config.k,
                               "acceptance": list(speculative.config.acceptance),
                               **(merged_spec_counters(reps) or {})}
    res = SimResult(workload.arrival_s.copy() if closed is None and deps is None and capped is None else arrivals,
                     workload.input_len, workload.output_len, out.first_token_s, out.finish_s,
                     out.preemptions, out.replica, out.status, out.reasons, itl_v, itl_c,
                     columns, meta, scheduled_s=out.scheduled_s,
                     cached_tokens=out.cached_tokens if cfg.enable_prefix_caching else None,
                     client_queue_s=client_queue_s,
                     failed_s=out.failed_s if np.isfinite(out.failed_s).any() else None,
                     itl_timed=log.timed_itl() if isinstance(log, TimedStepLog) else None,
                     merged_timed=log.timed_merged() if isinstance(log, TimedStepLog) else None)
    return res


def _replica_of(cost: Any) -> tuple[Any, ...]:
    """What a cost model prices: model, hardware, parallelism and formats (None where a custom
    cost model does not say)."""
    return (getattr(getattr(cost, "model", None), "id", None), getattr(getattr(cost, "hardware", None), "id", None),
            getattr(cost, "par", None), getattr(cost, "dtypes", None))


def _check_speculative_target(cost: Any, spec: SpeculativeDecoding) -> None:
    """The speculative setting must be made for the replica the run prices: its memory plan,
    draft and the pp > 1 refusal are the target's (a pp = 1 setting given a pp = 2 cost model
    ran, though speculative decoding with pp > 1 is refused as not modelled)."""
    mine, target = _replica_of(cost), _replica_of(spec.target)
    if spec.target is not cost and None not in mine and mine != target:
        def show_(r: tuple[Any, ...]) -> str:
            return f"{r[0]} on {r[1]} (tp={r[2].tp}, pp={r[2].pp}, ep={r[2].ep})"
        raise SpecError(f"speculative: made for {show_(target)}, but the run prices {show_(mine)}; make it from "
                        "the run's cost model (Scenario.speculative(cost), resolve.make_speculative)")


def _speculative_config(cfg: EngineConfig, spec: SpeculativeDecoding, cost: Any) -> EngineConfig:
    """The limits a speculative run needs: vLLM V1's scheduler, and the KV capacity net of the
    draft's weights and KV (unless fixed by `kv_capacity_tokens`)."""
    if cfg.scheduler not in SPECULATIVE_SCHEDULERS:
        raise SpecError(f"scheduler: speculative decoding is modelled under vLLM V1's scheduler "
                        f"({', '.join(SPECULATIVE_SCHEDULERS)}), not {cfg.scheduler!r}")
    _check_speculative_target(cost, spec)
    if cfg.kv_capacity_tokens is not None:
        return cfg
    plan = spec.memory(cfg.gpu_memory_utilization, cfg.max_num_batched_tokens, cfg.max_num_seqs)
    if not plan.fits:
        raise SpecError(plan.message)
    return dataclasses.replace(cfg, kv_capacity_tokens=max(plan.kv_capacity_tokens, cfg.block_size))


def _end(pool: Pool, cfg: EngineConfig, stopped: dict | None) -> None:
    """Run the pool through its work (to the time cap), or, when a watch stopped the run, cut
    off what still runs or waits there."""
    if stopped is None:
        pool.run_to_end(cfg.max_duration_s)
        return
    for p in pool.replicas:
        p.cut_off(f"not simulated: stopped early: {stopped['reason']}")


def _api_server_meta(front: float, tok: TokenizerQueue | None, done: np.ndarray, stream_s: float = 0.0,
                     merged_fraction: float = 0.0, servers: int = 1) -> dict[str, Any]:
    """What the API server added to every completed request's TTFT and E2E (the report's
    breakdown): its latency F, the mean wait for, and time in, the tokenizer, its time per
    streamed output, the fraction of the completed requests' tokens its loop, behind the
    engine, merged into chunks already waiting, and its processes per replica; {} when it
    adds nothing."""
    if not front and tok is None and not stream_s:
        return {}
    waits = tok.wait_s[done] if tok is not None else np.zeros(0)
    waits = waits[np.isfinite(waits)]
    return {"api_server": {"latency_s": front, "tokenizer_mean_s": float(waits.mean()) if waits.size else 0.0,
                           "stream_output_s": stream_s, "merged_fraction": merged_fraction, "servers": servers}}


def _attach_client(reps: list[Replica], view: ClientView, n: int, tok: TokenizerQueue | None = None) -> None:
    """The client view's parts that act inside the replicas: the async lag, the timeout (a
    deadline counts from the send: F and the tokenizer's wait lie before the engine)."""
    deadline = np.full(n, np.inf) if view.timeout_s is not None else None
    for p in reps:
        p.set_client(view.lag_steps > 0, view.timeout_s, float(view.frontend_s), deadline,
                     None if tok is None else tok.reached_s, view.loop_output_s)


def _attach_prefix_caches(reps: list[Replica], workload: Workload, cfg: EngineConfig) -> None:
    """Prefix caching on: every replica gets a cache over the requests' block hashes."""
    if cfg.enable_prefix_caching:
        hashes = request_block_hashes(workload, cfg.block_size)
        cost = reps[0].cost
        # a block's KV on one GPU, reloaded over that GPU's own host link
        block_bytes = cfg.block_size * kv_bytes_per_gpu_token(cost.model, cost.par, cost.dtypes.kv)
        cpu_blocks = int(cfg.cpu_offload_bytes // (block_bytes * cost.par.num_gpus))
        reload_s = block_bytes / cost.hardware.host_link_bandwidth_bytes_per_s
        for p in reps:
            p.attach_prefix_cache(hashes, cfg.warm_cache, cpu_blocks, reload_s)


def _hit_rate(out: Records, workload: Workload, done: np.ndarray) -> float:
    """Prompt tokens served from the prefix cache / prompt tokens, over completed requests
    (vLLM's prefix-cache hit rate, in tokens); 0 with caching off."""
    total = int(workload.input_len[done].sum())
    return int(out.cached_tokens[done].sum()) / total if total else 0.0


def _check_run(reps: list[Replica], out: Records, log: StepLog, arrivals: np.ndarray,
               output_len: np.ndarray) -> None:
    """Debug mode: conservation of requests, blocks, tokens and time order at the end."""
    out.check_conservation(reps, arrivals)
    # every later token is one inter-token gap: completed requests emitted all their tokens,
    # requests cut off by the time cap the ones counted when they were cut off
    done = out.completed()
    gaps = int(log.itl()[1].sum())
    want = int(output_len[done].sum()) - int(done.sum()) + log.cut_gaps
    if gaps + log.merged_tokens != want:
        raise AssertionError(f"inter-token gaps {gaps} + tokens merged into chunks {log.merged_tokens} != {want} "
                             "(tokens requested by completed requests minus first tokens, plus the gaps of "
                             "requests cut off)")


def _stream(arrivals: np.ndarray, front: float, tok: TokenizerQueue | None, closed: int | None,
            capped: int | None, streams: bool = False) -> np.ndarray | None:
    """The stream of arrival events in engine times: an open loop's (send + F, then the
    tokenizer: all known up front), a capped client's scheduled times + F (the tokenizer acts
    when a slot sends the request), none for a closed loop."""
    if closed is not None:
        return None
    s = arrivals + front if front else arrivals
    # streaming (the loop's bursts depend on the run) or a cap: the tokenizer acts per arrival
    return tok.stream(s) if tok is not None and capped is None and not streams else s


def _run_stream(pool: Pool, events: EventQueue, workload: Workload, arrivals: np.ndarray, cfg: EngineConfig,
                out: Records, progress: Callable[[int, int], None] | None, watch: Watch | None = None,
                front: float = 0.0, tok: TokenizerQueue | None = None,
                stream: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None, dict | None]:
    """Serve a stream without dependencies: open loop, closed loop, or open loop under a cap
    (`stream`: an open loop's engine arrivals; `tok`: the tokenizer queue, None for none).
    Returns (arrival = send time per request, client-side wait per request or None, where a
    watch stopped the run or None)."""
    closed, capped = workload.concurrency, workload.max_concurrency
    if capped is not None:
        send_s = np.full(len(arrivals), np.nan)  # the scheduled times stay in the workload
        queue_s = np.full(len(arrivals), np.nan)
        run_capped(pool, events, workload.arrival_s, capped, send_s, queue_s, cfg, out, progress, front, tok)
        return send_s, queue_s, None
    stopped = _run_events(pool, events, arrivals, closed, cfg, out, progress,
                          watch if closed is None else None, front, tok, stream)
    # a closed-loop client's requests are all scheduled at t = 0: each waited until sent
    return arrivals, (None if closed is None else arrivals.copy()), stopped


def _run_events(pool: Pool, events: EventQueue, arrivals: np.ndarray, closed: int | None,
                cfg: EngineConfig, out: Records,
                progress: Callable[[int, int], None] | None, watch: Watch | None = None,
                front: float = 0.0, tok: TokenizerQueue | None = None,
                stream: np.ndarray | None = None) -> dict | None:
    """Hand requests 0..n-1 to the pool in arrival order, advancing it to each event (engine
    times: send + `front`, then the tokenizer `tok`; an open loop's are `stream`, a closed
    loop's send times are written into `arrivals`); with a `watch` (open loop), stop where it
    gives a reason: returns {"at_request", "time_s", "reason"} then, else None."""
    n = len(arrivals)
    cap = cfg.max_duration_s
    report_every = max(1, n // 100)
    watch_every = max(1, n // WATCH_CHECKS)
    # open loop: the events are the sorted arrivals alone (nothing pushes to the heap), so
    # read them as Python floats in order; one replica: every router picks it
    times = stream.tolist() if stream is not None else None
    only = pool.replicas[0] if len(pool.replicas) == 1 else None
    # an open loop whose API server streams: each arrival meets the loop as it is then
    # (`_stream` left these times before the loop and the tokenizer)
    per_arrival = times is not None and pool.replicas[0].stream_s > 0
    if times is not None and only is not None and cap is None and progress is None and watch is None and not per_arrival:
        # the plainest run (open loop, one replica, no cap, no progress): nothing else to check
        advance_until, enqueue = only.advance_until, only.enqueue
        for r, t in enumerate(times):
            advance_until(t)
            enqueue(r, t)
        return None
    for r in range(n):
        if times is None:
            t = _next_release(pool, events)
            arrivals[r] = t - front
        else:
            t = times[r]
        if watch is not None and r % watch_every == 0 and r and (cap is None or t <= cap):
            pool.advance_until(t)
            reason = watch(r, t, out)
            if reason:
                for q in range(r, n):
                    out.reject(q, f"not simulated: stopped early: {reason}")
                return {"at_request": r, "time_s": t, "reason": reason}
        if cap is not None and t > cap:
            # past the cap nothing more is served: the rest are cut off, with a reason
            # a closed loop never sent these: no arrival time (not one after the cap)
            reason = (cut_reason(cap) if closed is None
                      else f"never sent: the simulated-time cap of {cap} s came first (max_duration_s)")
            for q in range(r, n):
                out.reject(q, reason)
            if closed is not None:
                arrivals[r:] = np.nan
            break
        if closed is not None or per_arrival:
            t = pool.through_api_server(r, t, tok)  # sent before the cap; it may reach the engine after it
        if only is not None:
            only.advance_until(t if cap is None else min(t, cap))  # no step starts past the cap (Pool's rule)
            only.enqueue(r, t)
        else:
            pool.advance_until(t)
            pool.route(r, t)
        if closed is not None and out.status[r] == REJECTED:
            events.push(engine_time(t, front), RELEASE)  # refused at once: the client sends its next
        if progress is not None and (r % report_every == 0 or r == n - 1):
            progress(r + 1, n)
    return None
