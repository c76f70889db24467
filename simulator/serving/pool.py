"""A pool of replicas behind one router, and the routers (`ROUTERS`); `kv_blocks` sizes each
replica's KV memory."""

from __future__ import annotations

import math
from typing import ClassVar

from simulator.cost.roofline import CostModel
from simulator.serving.client_view import TokenizerQueue
from simulator.serving.events import EventQueue
from simulator.serving.records import cut_reason
from simulator.serving.replica import Replica
from simulator.serving.sched.registry import EngineConfig
from simulator.specs.checks import SpecError


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


class Pool:
    """Replicas of one kind behind one router; with a simulated-time cap (`max_duration_s`)
    none of them starts a step at or after it (as in the open loop: a step begun before the
    cap is the last)."""

    def __init__(self, replicas: list[Replica], router: Router, cap: float | None = None) -> None:
        self.replicas = replicas
        self.router = router
        self.limit = math.inf if cap is None else cap

    def run_to_end(self, cap: float | None) -> None:
        """Run every replica through its work; with a time cap, to the cap, where whatever
        still runs or waits is cut off (`records.cut_reason`)."""
        for p in self.replicas:
            p.advance_until(math.inf if cap is None else cap)
            if cap is not None:
                p.cut_off(cut_reason(cap))

    def advance_until(self, t: float) -> None:
        """Run every replica's steps that start before t (and before the cap)."""
        t = min(t, self.limit)
        for p in self.replicas:
            p.advance_until(t)

    def advance_to_event(self, t: float, events: EventQueue) -> bool:
        """Run the pool's steps that start before t, the earliest event's time, in clock order
        (`step_earliest`), stopping as soon as one of them ends a request whose own event
        (a closed-loop client's next request, a session's next turn) comes before t: the
        caller takes that one first (False), and no replica has run past it; True when the
        event at t is still the earliest. Replica by replica, one would run to t past
        another's earlier completion and meet that request late."""
        while events.peek_time() >= t and self.step_earliest(t):
            pass
        return events.peek_time() >= t

    def step_earliest(self, before: float = math.inf) -> bool:
        """One scheduling decision (a step or a decode segment) on the busy replica with the
        earliest clock; False when no replica is busy or the earliest has reached the cap or
        `before` (a step then starts at or after it; with `before`, the pool's steps that
        start before it run in clock order, so one whose request ends first is seen first).
        A decode segment stops at the last step that starts before any other busy replica
        can end a request (`Replica.done_lower_bound_s`): a closed loop's next request exists
        only once one ends, and it may be routed here, where it must find the step in
        progress then, not a segment run past it (at least one step: tied times)."""
        busy = self.busy()
        if not busy:
            return False
        # a replica ahead of the others may hold a request past its client's deadline (it
        # joined inside a step that ends later): abort it now, and let the caller take the
        # client's next request before any replica runs on
        if sum(p.expire_due() for p in busy):
            return True
        first = min(busy, key=lambda p: p.clock)
        stop = min(before, self.limit)
        if first.clock >= stop:
            return False
        until = min([p.done_lower_bound_s() for p in busy if p is not first], default=stop)
        first.advance_until(max(min(until, stop), math.nextafter(first.clock, math.inf)), max_actions=1)
        return True

    def route(self, r: int, t: float) -> None:
        """Request r arrives at t (the pool has been advanced to t)."""
        self.router.choose(self.replicas).enqueue(r, t)

    def through_api_server(self, r: int, t: float, tok: TokenizerQueue | None) -> float:
        """When request r, reaching the API server at t, reaches the engine: its event loop
        takes r up once the step's output it is streaming then has gone out
        (`Replica.api_ready`, after the steps that start before t ran; one replica: with
        several, r's server is known only after routing, and it is taken up at t), then the
        tokenizer `tok` (None: none)."""
        ready = t
        if len(self.replicas) == 1 and self.replicas[0].stream_s:
            self.advance_until(t)
            ready = self.replicas[0].api_ready(t)
        return ready if tok is None else tok.admit(r, ready, t)

    def busy(self) -> list[Replica]:
        return [p for p in self.replicas if p.has_work()]


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
