"""Disaggregated serving: a prefill pool hands each request's KV cache to a decode pool.

Shape (DistServe, Zhong et al. OSDI'24; Splitwise, Patel et al. ISCA'24; Mooncake, Qin et
al. FAST'25; NVIDIA Dynamo / vLLM's disaggregated connector):

1. Request r arrives at a_r and is routed to one of P prefill replicas. That replica's own
   scheduler prefills its L_r prompt tokens (chunked as the pool's policy does) and emits the
   first token at f_r (the first token comes from the prefill pool: TTFT = f_r - a_r).
2. Its KV cache, bytes_r = L_r x kv_bytes_per_token(decode KV dtype), crosses the link out of
   that prefill replica. Transfers from one prefill replica queue FIFO on its link (in order of
   prefill completion): start_r = max(f_r, link_free), and

       t_xfer = bytes_r / (n_lanes x B_link x eta) + lambda + o

   with B_link the per-GPU bandwidth of the link (NVLink when both pools fit in one node of
   the same hardware, else the scale-out network), n_lanes = min(GPUs per prefill replica,
   GPUs per decode replica) (each rank sends its own shard of heads/layers in parallel), eta
   the link efficiency, lambda its latency and o a per-transfer overhead. The request reaches
   the decode pool at h_r = start_r + t_xfer.
3. A decode router picks one of D decode replicas; the request waits there (FIFO, after
   requests the replica preempted) until a seat and ceil((L_r + 1) / block) free KV blocks
   are available, then decodes token 2.. with context L_r (the decode replica's own
   continuous batching; preemption there is recompute, as vLLM does).

TTFT, TPOT, ITL and E2E keep vLLM's definitions: the first inter-token gap is h_r + (first
decode step) - f_r, so transfer time and decode-side queueing show in ITL and TPOT.
Requests with one output token finish at the prefill pool (no transfer). Left out:
contention of transfers at the receiving decode replica (only the sender's link queues),
layer-wise streaming of KV during prefill (Mooncake / DistServe overlap), prefix caching
across pools and in the decode pool (with `enable_prefix_caching` each prefill replica caches
prefixes as an aggregated replica does; the whole prompt's KV still crosses the link).

A closed loop of N clients (`Workload.concurrency`, a concurrency sweep's point) sends request
r + 1 when the client of one request sees it end: its last token from the decode pool, its only
token from the prefill pool (one output), or its refusal. Both pools then run in clock order
(`Pool.advance_to_event` over all their replicas): a decode replica's request end makes the
prefill pool's next arrival, and a prefill replica's completion the decode pool's next hand-off,
so neither may run past what the other has not yet simulated.

The client view (`serving.client_view.ClientView`, the engine profile's) acts where the
request enters: the API-server latency F delays every arrival at the prefill pool (TTFT and
E2E grow by F, as in `simulate`), and under async scheduling (`lag_steps` 1) a request that
reaches a busy prefill replica waits out one more step. The decode pool receives requests from
the link, not from a client, and gets neither. A client timeout is refused (`scenario.py`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from simulator.cost.roofline import CostModel
from simulator.serving.client_view import ClientView, tokenizer_for
from simulator.serving.events import (
    ARRIVAL,
    HANDOFF,
    PREFILL_DONE,
    RELEASE,
    EventQueue,
    engine_time,
)
from simulator.serving.pool import ROUTERS, Pool, kv_blocks
from simulator.serving.records import (
    COMPLETED,
    MAX_CLOCK_S,
    PENDING,
    REJECTED,
    Records,
    SimResult,
    check_arrivals_in_clock,
    cut_reason,
)
from simulator.serving.replica import Replica
from simulator.serving.sched.registry import EngineConfig
from simulator.serving.simulate import _api_server_meta, _attach_prefix_caches, _hit_rate, _stream
from simulator.serving.steplog import StepLog, TimedStepLog
from simulator.specs.checks import SpecError, check_cost_model, check_instance, check_int
from simulator.workloads.workload import Workload


@dataclass(frozen=True)
class KVLink:
    """The link a prefill replica sends KV over: t = bytes / (lanes B eta) + lambda + o."""

    kind: str  # "nvlink" | "scale-out"
    bandwidth_bytes_per_s: float  # per GPU (one lane)
    lanes: int = 1
    efficiency: float = 1.0
    latency_s: float = 0.0
    overhead_s: float = 0.0

    def __post_init__(self) -> None:
        if not (self.bandwidth_bytes_per_s > 0 and math.isfinite(self.bandwidth_bytes_per_s)):
            raise SpecError(f"link.bandwidth_bytes_per_s: {self.bandwidth_bytes_per_s!r} must be a number > 0")
        if not (0 < self.efficiency <= 1):
            raise SpecError(f"link.efficiency: {self.efficiency!r} must be in (0, 1]")
        for name in ("latency_s", "overhead_s"):
            v = getattr(self, name)
            # beyond the simulated clock's range one transfer would overflow it (later transfers
            # that add up past it are refused when they happen, `_start_transfer`)
            if not (0 <= v <= MAX_CLOCK_S):
                raise SpecError(f"link.{name}: {v!r} must be a number of seconds in [0, {MAX_CLOCK_S:g}]")
        if not (isinstance(self.lanes, int) and self.lanes >= 1):
            raise SpecError(f"link.lanes: {self.lanes!r} must be an integer >= 1")

    def transfer_time_s(self, nbytes: float) -> float:
        return nbytes / (self.lanes * self.bandwidth_bytes_per_s * self.efficiency) + self.latency_s + self.overhead_s


class DecodeReplica(Replica):
    """A replica of the decode pool: requests arrive with their prompt's KV computed.

    Arrivals wait in `arrived` (not the policy's `waiting` queue, which would prefill them);
    before each scheduling decision (`before_decision`, called by the replica's step loop) the
    head is admitted while a seat and the blocks of its L + 1 tokens are free and no preempted
    request waits (those go first, FCFS)."""

    def enqueue(self, r: int, t: float) -> None:
        idle = not (self.active or self.waiting or self.arrived)
        super().enqueue(r, t)
        if self.waiting and self.waiting[-1] == r:
            self.waiting.pop()
            self.arrived.append(r)
        if idle and self.clock < t:
            self.clock = t

    def before_decision(self) -> bool:
        """Admit the arrived requests that fit; False when nothing can run (the head cannot be
        admitted on an empty replica: impossible after the arrival check, which made sure it
        fits the whole KV, but never spin forever: it is rejected)."""
        self._admit_arrived()
        if not (self.active or self.waiting):
            r = self.arrived.popleft()
            self.waiting.append(r)
            self._reject_head("could not be admitted on an empty decode replica")
            return False
        return True

    def _admit_arrived(self) -> None:
        kv = self.kv
        fits = self.policy.handoff_fits
        while self.arrived and not self.waiting and self.free_slots and len(self.active) < self.cfg.max_num_seqs:
            r = self.arrived[0]
            L = int(self.wl_in[r])
            if not fits(self, r, L):  # the policy's own admission rule (its reservations)
                return
            self.arrived.popleft()
            self.sync_last_tok()  # before a slot joins that did not emit at the clock
            s = self.free_slots.pop()
            self.rid[s] = r
            self.computed[s] = L
            self.prompt[s] = L
            self.generated[s] = 1
            self.last_tok[s] = float(self.records.first_token_s[r])
            self.outlen[s] = int(self.wl_out[r])
            kv.allocate(s, kv.blocks_for(L))
            self.active.append(s)
            self.context_sum += L
            self.in_step = False  # its last token came from the prefill pool

    def cut_off(self, reason: str) -> None:
        for r in self.arrived:
            self.records.reject(r, reason)
        self.arrived.clear()
        super().cut_off(reason)


@dataclass
class _ClientLoop:
    """A closed loop's clients in front of the prefill pool: who sends next, when each request
    was sent, the API-server latency, the tokenizer and the release of a client."""

    sends: np.ndarray
    front: float
    tok: Any
    release: Callable[[int, float], None]
    next_r: int = 0

    def send(self, t: float, events: EventQueue) -> None:
        """A client freed at engine time t sends the next request (if any): it reaches the
        prefill pool after the tokenizer."""
        r = self.next_r
        if r >= len(self.sends):
            return
        self.next_r = r + 1
        self.sends[r] = t - self.front
        events.push(self.tok.admit(r, t, t) if self.tok is not None else t, ARRIVAL, r)


@dataclass
class _Pools:
    prefill: Pool
    decode: Pool
    links_free_s: list[float]  # per prefill replica: when its link is next free
    link: KVLink
    kv_bytes_per_token: float


def simulate_disagg(prefill_cost: CostModel, decode_cost: CostModel, workload: Workload, link: KVLink,
                    prefill_cfg: EngineConfig | None = None, decode_cfg: EngineConfig | None = None,
                    prefill_replicas: int = 1, decode_replicas: int = 1,
                    prefill_router: str = "round-robin", decode_router: str = "round-robin",
                    progress: Callable[[int, int], None] | None = None, itl_times: bool = False,
                    client: ClientView | None = None) -> SimResult:
    """Serve `workload` on P prefill replicas handing KV to D decode replicas (module docstring).
    `itl_times`: keep when and on which decode replica each inter-token gap was observed
    (`SimResult.itl_timed`, as `simulate` does). `client`: the API-server latency and async lag
    in front of the prefill pool (module docstring; None: neither).

    The result's `meta` adds the transfer record: `kv_transfer_s` (prefill completion to
    arrival at the decode pool, queueing included), `kv_transfer_queue_s`, `kv_transfer_bytes`.
    """
    pcfg, dcfg = prefill_cfg or EngineConfig(), decode_cfg or EngineConfig()
    check_instance("client", client, ClientView, optional=True)
    view = client or ClientView()
    if view.timeout_s is not None:
        raise SpecError(f"request_timeout_s: {view.timeout_s!r} (a client timeout) is not modelled for a "
                        "disaggregated deployment; drop --request-timeout")
    check_cost_model(prefill_cost)
    check_cost_model(decode_cost)
    check_arrivals_in_clock(workload)
    for name, v in (("prefill replicas", prefill_replicas), ("decode replicas", decode_replicas)):
        check_int(name, v)
    for name, rt in (("prefill router", prefill_router), ("decode router", decode_router)):
        if rt not in ROUTERS:
            raise SpecError(f"{name}: {rt!r} is not one of {', '.join(ROUTERS)}")
    if dcfg.scheduler == "static":
        raise SpecError("scheduler: 'static' (pre-Orca static batching prefills and decodes a batch together) is not "
                        "modelled in the decode pool of a disaggregated deployment, whose requests arrive prefilled; "
                        "give the decode pool another scheduler (deployment.decode.scheduler)")
    if workload.max_concurrency is not None:
        raise SpecError(f"max_concurrency: {workload.max_concurrency} (a cap on requests in flight at a finite "
                        "rate) is not modelled for a disaggregated deployment; drop --max-concurrency")
    closed = workload.concurrency
    n = workload.num_requests
    p_blocks, p_mml = kv_blocks(prefill_cost, pcfg)
    d_blocks, d_mml = kv_blocks(decode_cost, dcfg)
    mml = min(p_mml, d_mml)
    out, out_p = Records(n), Records(n)
    plog, dlog = StepLog(), (TimedStepLog() if itl_times else StepLog())
    # engine times: a request reaches the prefill pool F after its send (the records keep sends)
    front = float(view.frontend_s)
    # the API servers' tokenizers (client.api_servers per prefill replica), then the prefill pool
    tok = tokenizer_for(view, workload.input_len, min(prefill_replicas * view.api_servers, n))
    events = EventQueue(_stream(np.array(workload.arrival_s, dtype=float), front, tok, closed, None))
    # a closed loop: every client's end releases it (its next request reaches the engine F later)
    release = (lambda r, t: events.push(engine_time(t, front), RELEASE)) if closed is not None else None
    # the prefill pool emits one token per request: its copy of the workload has outputs of 1
    wl_p = replace(workload, output_len=np.ones(n, dtype=workload.output_len.dtype))
    prefill = Pool([Replica(i, prefill_cost, pcfg, p_blocks, p_mml, wl_p, out_p, plog,
                            lambda r, t: events.push(t, PREFILL_DONE, r))
                    for i in range(min(prefill_replicas, n))], ROUTERS[prefill_router](pcfg))
    if pcfg.enable_prefix_caching:
        _attach_prefix_caches(prefill.replicas, wl_p, pcfg)
    if view.lag_steps:
        for p in prefill.replicas:
            p.set_client(True)
    decode = Pool([DecodeReplica(i, decode_cost, dcfg, d_blocks, d_mml, workload, out, dlog,
                                 release)
                   for i in range(min(decode_replicas, n))], ROUTERS[decode_router](dcfg))
    kv_tok = decode_cost.model.kv_bytes_per_token(decode_cost.dtypes.kv)
    pools = _Pools(prefill, decode, [0.0] * len(prefill.replicas), link, kv_tok)
    xfer = {"start": np.full(n, np.nan), "end": np.full(n, np.nan), "ready": np.full(n, np.nan),
            "bytes": np.zeros(n)}
    if closed is None:
        _run(pools, events, workload, out, out_p, xfer, mml, pcfg.max_duration_s, progress)
        sends = None
    else:
        assert release is not None
        sends = np.full(n, np.nan)  # a closed loop's send times (NaN: never sent)
        for _ in range(min(closed, n)):
            events.push(front, RELEASE)  # every client sends at 0
        _run(pools, events, workload, out, out_p, xfer, mml, pcfg.max_duration_s, progress,
             _ClientLoop(sends, front, tok, release))
    _finish_pools(pools, out, out_p, pcfg.max_duration_s)
    done = out.completed()
    if not all(math.isfinite(p.clock) for p in pools.prefill.replicas + pools.decode.replicas) or not (
            np.isfinite(out.finish_s[done]).all() and np.isfinite(out.first_token_s[done]).all()):
        raise SpecError("simulated time overflowed (step times or arrival gaps beyond float range); "
                        "check the efficiency overheads and the rate")
    if pcfg.debug or dcfg.debug:
        # a closed loop's requests arrive when sent, not at the workload's times
        _check_run(pools, out, plog, dlog, workload, sends)
    res = _result(workload, out, out_p, xfer, pools, plog, dlog, (p_blocks * pcfg.block_size, d_blocks * dcfg.block_size),
                  (int(prefill_replicas), int(decode_replicas)), f"{prefill_router}/{decode_router}", mml)
    if sends is not None:  # a closed loop: the records keep each request's send time
        res.arrival_s = sends
        res.meta["offered_rate"] = float("nan")
        res.meta["concurrency"] = closed
    res.meta.update(_api_server_meta(front, tok, done))  # what the API server adds to TTFT and E2E
    return res


def _run(pools: _Pools, events: EventQueue, wl: Workload, out: Records, out_p: Records,
         xfer: dict[str, np.ndarray], mml: int, cap: float | None,
         progress: Callable[[int, int], None] | None, clients: _ClientLoop | None = None) -> None:
    """The event loop: arrivals -> prefill pool; prefill completions -> the link (FIFO per
    prefill replica, in completion-time order); transfer ends -> decode pool. With `clients`
    (a closed loop, module docstring) releases send the next requests, every end or refusal
    frees its client, and both pools advance together in clock order, every replica of either
    stopping where another could make an event (a hand-off, a client's next request) before
    the one it runs to; an open loop's events before t come from the prefill pool alone."""
    prefill, decode = pools.prefill, pools.decode
    both = Pool(prefill.replicas + decode.replicas, prefill.router, cap) if clients is not None else None
    free = clients.release if clients is not None else _no_client
    n = wl.num_requests
    seen = 0
    report_every = max(1, n // 100)
    while True:
        if not len(events):
            if _step_idle(prefill, both, cap):
                continue
            break
        t = events.peek_time()
        if not _advance(prefill, both, t, events):
            continue  # a step ended a request (or a prefill) whose event comes first
        t, kind, r = events.pop()
        if kind == RELEASE:
            if cap is None or t <= cap:
                assert clients is not None  # only a closed loop's clients are released
                clients.send(t, events)
        elif cap is not None and t > cap:
            _cut(r, out, cap)
        elif kind == PREFILL_DONE:
            _start_transfer(pools, r, t, wl, out, out_p, xfer, events)
            if int(wl.output_len[r]) <= 1:
                free(r, t)  # its only token came from the prefill pool
        elif kind == HANDOFF:
            decode.advance_until(t)  # (a closed loop's pools are there already)
            decode.route(r, t)
            if out.status[r] == REJECTED:
                free(r, t)
        else:  # an arrival
            _arrive(prefill, r, t, wl, out, out_p, mml, free)
            seen += 1
            if progress is not None and (seen % report_every == 0 or seen == n):
                progress(seen, n)
    for r in range(clients.next_r if clients is not None else n, n):  # only a time cap leaves requests unsent
        out.reject(r, f"never sent: the simulated-time cap of {cap} s came first (max_duration_s)")


def _no_client(r: int, t: float) -> None:
    """An open loop's request ends: no client waits to send another."""


def _step_idle(prefill: Pool, both: Pool | None, cap: float | None) -> bool:
    """No event is pending: one decision of the pool(s) that can make one; False when none can
    (the run is over). An open loop's earliest busy prefill replica, a closed loop's earliest
    busy replica of either pool (`Pool.step_earliest`)."""
    if both is not None:
        return both.step_earliest()
    busy = prefill.busy()
    limit = math.inf if cap is None else cap
    first = min(busy, key=lambda p: p.clock) if busy else None
    if first is None or first.clock >= limit:
        return False
    first.advance_until(limit, max_actions=1)
    return True


def _advance(prefill: Pool, both: Pool | None, t: float, events: EventQueue) -> bool:
    """Run what can make an event before t, the earliest one's time: an open loop's prefill
    pool (its completions), a closed loop's both pools in clock order; True when the event at
    t is still the earliest."""
    if both is not None:
        return both.advance_to_event(t, events)
    prefill.advance_until(t)
    return events.peek_time() >= t


def _arrive(prefill: Pool, r: int, t: float, wl: Workload, out: Records, out_p: Records, mml: int,
            free: Callable[[int, float], None]) -> None:
    """Request r reaches the prefill pool at t; a refusal frees its client at once (`free`)."""
    need = int(wl.input_len[r]) + int(wl.output_len[r])
    if need > mml:
        out.reject(r, f"prompt+output = {need} tokens exceeds max_model_len {mml}")
    else:
        prefill.route(r, t)
    if need > mml or out_p.status[r] == REJECTED:
        free(r, t)


def _check_run(pools: _Pools, out: Records, plog: StepLog, dlog: StepLog, wl: Workload,
               sends: np.ndarray | None = None) -> None:
    """Debug mode (`sends`: a closed loop's send times, else the workload's arrivals), the ledger of both pools at the end (as `simulate._check_run` for one):
    no replica of either pool holds work, blocks or preempted state; every request ended
    completed or rejected with a reason, arrival < first token <= finish; the prefill pool
    emitted first tokens only (no inter-token gap) and the decode pool one gap per later
    token of each completed request, plus the gaps of requests cut off by the time cap."""
    out.check_conservation(pools.prefill.replicas + pools.decode.replicas,
                           np.asarray(wl.arrival_s if sends is None else sends, dtype=float))
    p_gaps = int(plog.itl()[1].sum())
    if p_gaps or plog.cut_gaps or plog.merged_tokens:
        raise AssertionError(f"prefill pool: {p_gaps} inter-token gaps (+ {plog.cut_gaps} cut off); "
                             "it emits first tokens only")
    done = out.completed()
    gaps = int(dlog.itl()[1].sum())
    want = int(wl.output_len[done].sum()) - int(done.sum()) + dlog.cut_gaps
    if gaps + dlog.merged_tokens != want:
        raise AssertionError(f"decode pool: inter-token gaps {gaps} + merged {dlog.merged_tokens} != {want} "
                             "(tokens requested by completed requests minus first tokens, plus the gaps of "
                             "requests cut off)")


def _cut(r: int, out: Records, cap: float) -> None:
    out.reject_pending((r,), cut_reason(cap))


def _start_transfer(pools: _Pools, r: int, t: float, wl: Workload, out: Records,
                    out_p: Records, xfer: dict[str, np.ndarray], events: EventQueue) -> None:
    """Prefill of r done at t: record its first token; queue its KV on its replica's link."""
    out.first_token_s[r] = t
    out.preemptions[r] += out_p.preemptions[r]
    if int(wl.output_len[r]) <= 1:
        out.finish_s[r] = t
        out.status[r] = COMPLETED
        out.replica[r] = -1
        return
    i = int(out_p.replica[r])
    nbytes = int(wl.input_len[r]) * pools.kv_bytes_per_token
    start = max(t, pools.links_free_s[i])
    end = start + pools.link.transfer_time_s(nbytes)
    if not end <= MAX_CLOCK_S:  # NaN and inf too: such a request would never arrive
        raise SpecError(f"simulated time overflowed: the KV transfer of request {r} ({nbytes:.4g} bytes) ends at "
                        f"{end:.4g} s, beyond the simulated clock's range of {MAX_CLOCK_S:g} s; check the "
                        "link's bandwidth_bytes_per_s, latency_s and overhead_s (deployment.link)")
    pools.links_free_s[i] = end
    xfer["ready"][r], xfer["start"][r], xfer["end"][r], xfer["bytes"][r] = t, start, end, nbytes
    events.push(end, HANDOFF, r)


def _finish_pools(pools: _Pools, out: Records, out_p: Records, cap: float | None) -> None:
    """Run the decode pool to the end (or the cap); carry prefill-pool rejections over."""
    pools.prefill.run_to_end(cap)
    pools.decode.run_to_end(cap)
    for r in np.flatnonzero(out_p.status == REJECTED).tolist():
        out.reject_pending((r,), "prefill pool: " + out_p.reasons.get(r, "rejected"))
    if cap is not None:
        out.reject_pending(np.flatnonzero(out.status == PENDING).tolist(), cut_reason(cap))


def _result(wl: Workload, out: Records, out_p: Records, xfer: dict[str, np.ndarray],
            pools: _Pools, plog: StepLog, dlog: StepLog, kv_tokens: tuple[int, int], shape: tuple[int, int],
            router: str, mml: int) -> SimResult:
    import pandas as pd

    itl_v, itl_c = dlog.itl()
    tl_p, tl_d = plog.timeline(), dlog.timeline()
    tl_p.insert(1, "pool", "prefill")
    tl_d.insert(1, "pool", "decode")
    timeline = pd.concat([tl_p, tl_d], ignore_index=True).sort_values("time_s", kind="stable", ignore_index=True)
    P, D = shape  # as configured (replicas beyond the request count are not built: they stay idle)
    p_gpus = pools.prefill.replicas[0].cost.par.num_gpus
    d_gpus = pools.decode.replicas[0].cost.par.num_gpus
    steps = plog.steps + dlog.steps
    meta = {
        "disagg": f"{P}:{D}",
        "num_replicas": 1,  # metrics count GPUs as gpus_per_replica x num_replicas
        "gpus_per_replica": P * p_gpus + D * d_gpus,
        "prefill_replicas": P, "decode_replicas": D,
        "prefill_gpus_per_replica": p_gpus, "decode_gpus_per_replica": d_gpus,
        "router": router,
        "scheduler": pools.prefill.replicas[0].cfg.scheduler,
        "kv_capacity_tokens_per_replica": kv_tokens[1],
        "prefill_kv_capacity_tokens_per_replica": kv_tokens[0],
        "max_model_len": mml,
        "steps": steps,
        "prefill_steps": plog.steps, "decode_steps": dlog.steps,
        "mean_batch_size": (plog.batch_token_sum + dlog.batch_token_sum) / steps if steps else 0.0,
        "mean_decode_batch_size": dlog.batch_token_sum / dlog.steps if dlog.steps else 0.0,
        "peak_kv_utilization": dlog.peak_kv,
        "prefill_peak_kv_utilization": plog.peak_kv,
        "prefix_caching": pools.prefill.replicas[0].prefix is not None,
        "prefix_cache_hit_rate": _hit_rate(out_p, wl, out.completed()),
        "busy_s": plog.busy_s + dlog.busy_s,
        "prefill_busy_s": plog.busy_s, "decode_busy_s": dlog.busy_s,
        "offered_rate": wl.offered_rate,
        "concurrency": None,
        "chars_per_token": pools.decode.replicas[0].cost.model.chars_per_token,
        "kv_link": pools.link.kind,
        "kv_transfer_s": xfer["end"] - xfer["ready"],
        "kv_transfer_queue_s": xfer["start"] - xfer["ready"],
        "kv_transfer_bytes": xfer["bytes"],
    }
    return SimResult(wl.arrival_s.copy(), wl.input_len, wl.output_len, out.first_token_s, out.finish_s,
                     out.preemptions, out.replica, out.status, out.reasons, itl_v, itl_c,
                     timeline, meta, out_p.scheduled_s,
                     cached_tokens=out_p.cached_tokens if meta["prefix_caching"] else None,
                     itl_timed=dlog.timed_itl() if isinstance(dlog, TimedStepLog) else None,
                     merged_timed=dlog.timed_merged() if isinstance(dlog, TimedStepLog) else None)


def transfer_summary(res: SimResult) -> dict[str, Any]:
    """mean / p50 / p99 KV-transfer time (ms, queueing included) over the transferred requests."""
    t = res.meta["kv_transfer_s"]
    q = res.meta["kv_transfer_queue_s"]
    ok = np.isfinite(t)
    s: dict[str, Any] = {"kv_transfers": int(ok.sum()), "kv_link": res.meta["kv_link"],
                         "kv_transfer_gb": float(res.meta["kv_transfer_bytes"].sum()) / 1e9}
    if ok.any():
        s["mean_kv_transfer_ms"] = float(t[ok].mean()) * 1e3
        s["p50_kv_transfer_ms"] = float(np.percentile(t[ok], 50)) * 1e3
        s["p99_kv_transfer_ms"] = float(np.percentile(t[ok], 99)) * 1e3
        s["mean_kv_transfer_queue_ms"] = float(q[ok].mean()) * 1e3
    else:
        s.update(mean_kv_transfer_ms=None, p50_kv_transfer_ms=None, p99_kv_transfer_ms=None,
                 mean_kv_transfer_queue_ms=None)
    return s
