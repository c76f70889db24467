"""A client-side concurrency cap on an open-loop stream: vLLM `bench serve --max-concurrency N`
at a finite `--request-rate`.

vLLM (`vllm/benchmarks/serve.py`, `benchmark()`): `get_request` yields request i at its
scheduled time a_i (Poisson/gamma at the rate); each is wrapped in `limited_request_func`,
which does ``async with semaphore:`` (``asyncio.Semaphore(max_concurrency)``, FIFO waiters)
around ``request_func(...)``. The request function sets ``st = time.perf_counter();
output.start_time = st`` only once it runs, i.e. after the semaphore is acquired, and measures
``output.ttft = timestamp - st`` and ``output.latency = most_recent_timestamp - st``
(`vllm/benchmarks/lib/endpoint_request_func.py`). So TTFT and E2EL count from the SEND time;
the wait for a slot is reported apart, ``output.client_queue_time = output.start_time -
request_arrival_time`` (result key `queue_times`, metrics `client_queue_time` and, at a finite
rate, `e2el_including_client_queue` = latency + client queue time).

Here, with N slots, request i (in arrival order) is sent at

    s_i = max(a_i, s_{i-1}, R_{i-N+1})

where R_k is the k-th slot release (a completion or a rejection) of the run: first come first
served, so requests are sent in index order. The engine sees s_i as the request's arrival
(`SimResult.arrival_s`, so TTFT = f_i - s_i as in vLLM) and `client_queue_s[i] = s_i - a_i`.
At rate inf (every a_i = 0) this is exactly the closed loop of N clients (`serving/simulate.py`).

Event loop: the scheduled arrivals are the engine's pre-sorted stream; completions push
`RELEASE` events into its heap (as the closed loop does). Each event counts an arrival or a
release, then every request that both arrived and finds a free slot is sent at that time.
Past the simulated-time cap (`max_duration_s`) nothing more is sent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from simulator.serving.events import ARRIVAL, RELEASE, EventQueue, engine_time
from simulator.serving.records import REJECTED, Records, cut_reason

if TYPE_CHECKING:
    from simulator.serving.client_view import TokenizerQueue
    from simulator.serving.events import EventQueue
    from simulator.serving.pool import Pool
    from simulator.serving.sched.registry import EngineConfig


def run_capped(pool: Pool, events: EventQueue, scheduled_s: np.ndarray, slots: int, send_s: np.ndarray,
               client_queue_s: np.ndarray, cfg: EngineConfig, out: Records,
               progress: Callable[[int, int], None] | None, front: float = 0.0,
               tok: TokenizerQueue | None = None) -> None:
    """Send requests 0..n-1 (scheduled at `scheduled_s`, sorted) with at most `slots` in flight;
    writes each send time into `send_s` and its wait into `client_queue_s` (see the module
    docstring). Unsent requests past the time cap are rejected with a reason; theirs stay NaN.
    `events` carry engine times: a send at s reaches the engine at s + `front` (the API-server
    latency), then the tokenizer `tok` (None: none), and a slot is free again when the client
    sees its request end."""
    n = len(scheduled_s)
    cap = cfg.max_duration_s
    report_every = max(1, n // 100)
    sent = arrived = released = 0
    while sent < n:
        if not len(events):
            # every arrival is in and no release is pending: the earliest busy replica runs a step
            if pool.step_earliest():
                continue
            if not pool.busy():  # unreachable: a request in flight ends, releasing its slot
                raise AssertionError("capped stream: requests wait but nothing is in flight")
            assert cap is not None  # only the cap stops a busy replica
            _cut_unsent(out, sent, arrived, n, cap)  # no slot frees within the cap
            return
        t = events.peek_time()
        if cap is not None and t > cap:
            # to the cap, in clock order, stopping at a slot freed before it (then used in time)
            pool.advance_to_event(cap, events)
            if events.peek_time() <= cap:
                continue
            _cut_unsent(out, sent, arrived, n, cap)
            return
        if not pool.advance_to_event(t, events):
            continue  # a completion released a slot earlier
        t, kind, _ = events.pop()
        if kind == ARRIVAL:
            arrived += 1
        else:
            released += 1
        while sent < arrived and sent - released < slots:
            sched = float(scheduled_s[sent])
            send = max(t - front, sched)  # (a + F) - F may round below a
            send_s[sent] = send
            client_queue_s[sent] = send - sched
            e = pool.through_api_server(sent, t, tok)  # after the API server's loop and tokenizer
            if e != t:
                pool.advance_until(e)
            pool.route(sent, e)
            if out.status[sent] == REJECTED:
                # refused at once (e.g. too long): the client sees it at e and its slot is free
                events.push(engine_time(e, front), RELEASE)
            sent += 1
            if progress is not None and (sent % report_every == 0 or sent == n):
                progress(sent, n)


def _cut_unsent(out: Records, sent: int, arrived: int, n: int, cap: float) -> None:
    """The next event lies past the time cap: requests not yet sent never are."""
    for q in range(sent, n):
        out.reject(q, (f"never sent: waited for a free --max-concurrency slot past the simulated-time "
                       f"cap of {cap} s (max_duration_s)") if q < arrived else cut_reason(cap))
