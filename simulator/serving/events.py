"""Timed events of the event loop: a pre-sorted stream of arrivals merged with a heap of the
events a run creates (closed-loop releases, multi-turn children, hand-offs between pools)."""

from __future__ import annotations

import heapq

import numpy as np

#: event kinds: an arrival of the stream, a client's slot released (closed loop or capped
#: client), a later turn of a session released, a prefill done and a KV hand-off done
#: (disaggregated pools)
ARRIVAL, RELEASE, CHILD, PREFILL_DONE, HANDOFF = 0, 1, 2, 10, 11


def engine_time(t: float, front: float) -> float:
    """The engine time of a client send at t, with the API-server latency `front` between them:
    t + front, raised by an ulp where needed so that (engine time) - front >= t (the send time
    recovered from it never precedes the client event that caused it)."""
    e = t + front
    while e - front < t:
        e = float(np.nextafter(e, np.inf))
    return e


class EventQueue:
    """Timed events in time order: a pre-sorted stream of arrivals merged with a heap of the
    events the run creates (closed-loop releases; later, hand-offs between pools). On equal
    times the stream comes first, then heap events by kind and payload (the request), then in
    push order: two requests that end at the same time on different replicas release their
    next requests in the same order whichever replica the pool happened to advance first."""

    def __init__(self, arrival_s: np.ndarray | None = None) -> None:
        self._heap: list[tuple[float, int, int, int]] = []  # (time, kind, payload, push order)
        self._seq = 0
        self._arrivals = arrival_s if arrival_s is not None else np.zeros(0)
        self._next = 0  # index of the next arrival in the stream

    def push(self, time_s: float, kind: int, payload: int = -1) -> None:
        heapq.heappush(self._heap, (time_s, kind, payload, self._seq))
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
        time_s, kind, payload, _ = heapq.heappop(heap)
        return time_s, kind, payload

    def __len__(self) -> int:
        return len(self._heap) + len(self._arrivals) - self._next
