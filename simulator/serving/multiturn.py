"""Multi-turn sessions served: a request sent only after an earlier one completes.

A workload whose `extra` carries `parent` (an earlier request's index, or -1) and
`think_time_s` releases request i at

    t_i = max(arrival_s[i], finish_{parent[i]} + think_time_s[i])

(a chat user reads the answer, thinks, then sends the next turn with the whole history). A
parent that is rejected releases its child at the rejection time + think time (the session
goes on). Requests without a parent arrive at `arrival_s` as usual. The event loop here is the
engine's open loop with one more event kind: the roots' arrivals are the pre-sorted stream,
children are pushed into the heap when their parent ends (`CHILD`, payload = request index).
The parent links themselves are workload data (`workloads.sessions.dependencies`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from simulator.serving.events import CHILD, engine_time
from simulator.serving.records import PENDING, REJECTED, Records, cut_reason
from simulator.workloads.sessions import Deps

if TYPE_CHECKING:
    from simulator.serving.client_view import TokenizerQueue
    from simulator.serving.events import EventQueue
    from simulator.serving.pool import Pool
    from simulator.serving.sched.registry import EngineConfig

def release_children(deps: Deps, r: int, t: float, arrivals: np.ndarray, events: EventQueue,
                     front: float = 0.0) -> None:
    """Request r ended at t (as its client saw it): push its children's release events (send
    times into `arrivals`; the events at the engine, `front` = API-server latency later)."""
    _, think, children = deps
    for c in children.get(r, ()):
        tc = max(float(arrivals[c]), t + float(think[c]))
        arrivals[c] = tc
        events.push(engine_time(tc, front), CHILD, c)


def run_dependent(pool: Pool, events: EventQueue, roots: np.ndarray, deps: Deps, arrivals: np.ndarray,
                  cfg: EngineConfig, out: Records,
                  progress: Callable[[int, int], None] | None, front: float = 0.0,
                  tok: TokenizerQueue | None = None) -> None:
    """Hand every request to the pool at its release time (roots from the stream, children
    from the heap), advancing the pool to each event; see the module docstring. No step starts
    at or after the time cap: a first turn scheduled after it is cut off (the engine's
    reason), a later turn due after it, or whose earlier turn was cut off, is `never sent`
    (no arrival time). Events carry engine times (send + `front`); a request then waits for the
    tokenizer `tok` (None: none)."""
    n = len(deps[0])
    cap = cfg.max_duration_s
    handled = 0
    report_every = max(1, n // 100)
    while handled < n:
        if not len(events):
            if pool.step_earliest():
                continue
            if not pool.busy():
                break  # unreachable: every parent ends, releasing its children
            # nothing ends before the cap (no step starts past it): what runs or waits is
            # cut off by the engine, the later turns of those sessions are never sent
            _never_sent(out, arrivals, f"never sent: an earlier turn of its session did not finish "
                                       f"within the simulated-time cap of {cap} s (max_duration_s)")
            if progress is not None:
                progress(n, n)
            return
        if not pool.advance_to_event(events.peek_time(), events):
            continue  # a completion released an earlier child
        t, kind, payload = events.pop()
        r = payload if kind == CHILD else int(roots[payload])
        handled += 1
        if cap is not None and t > cap:
            if kind == CHILD:  # a later turn due after the cap: never sent (no arrival time)
                out.reject(r, f"never sent: due at {t:.6g} s, after the simulated-time cap of {cap} s (max_duration_s)")
                arrivals[r] = np.nan
            else:  # a scheduled first turn: cut off, as in the open loop
                out.reject(r, cut_reason(cap))
        else:
            e = pool.through_api_server(r, t, tok)  # after the API server's loop and tokenizer
            if e != t:
                t = e
                pool.advance_until(t)
            pool.route(r, t)
        if out.status[r] == REJECTED:
            release_children(deps, r, t, arrivals, events, front)
        if progress is not None and (handled % report_every == 0 or handled == n):
            progress(handled, n)


def _never_sent(out: Records, arrivals: np.ndarray, reason: str) -> None:
    """Requests never handed to a replica (a later turn whose parent was cut off by the time
    cap) end rejected with `reason` and no arrival time."""
    unsent = np.flatnonzero((out.status == PENDING) & (out.replica < 0))
    for r in unsent.tolist():
        out.reject(r, reason)
    arrivals[unsent] = np.nan
