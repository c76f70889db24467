"""Per-request records of a run: what each request's life was (`Records`, written by the
replicas while they run) and what a simulation returns (`SimResult`).

Status codes: PENDING (not ended yet), COMPLETED, REJECTED (with a one-line reason: refused at
arrival, cut off by the time cap, never sent). Times are seconds of simulated time.
`tpot` is the one TPOT formula of llmsim (metrics, goodput and the per-request table call it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.specs.checks import SpecError

if TYPE_CHECKING:
    import pandas as pd

#: request status codes
PENDING, COMPLETED, REJECTED = 0, 1, 2

#: the simulated clock's range (s, 317 years): up to here a float64 second resolves 2 us
#: (2**-52 relative), well under the shortest step; far beyond, steps round to zero. Arrival
#: times (`scenario.Scenario`) and KV transfers (`disagg.py`) beyond it are refused.
MAX_CLOCK_S = 1e10


def check_arrivals_in_clock(workload: Any) -> None:
    """Refuse an open-loop workload whose arrivals lie beyond `MAX_CLOCK_S`: there a step's
    time rounds away (an arrival at 1e300 s got a TTFT and an E2EL of 0). `Scenario` checks its
    own workloads with a rate hint; this is the engine's entry check for any `Workload`."""
    a = workload.arrival_s
    if workload.concurrency is None and len(a) and not float(a[-1]) <= MAX_CLOCK_S:
        raise SpecError(f"workload.arrival_s[{len(a) - 1}]: {float(a[-1]):.4g} s is beyond the simulated clock's "
                        f"range of {MAX_CLOCK_S:g} s (float seconds stop resolving short steps beyond it)")


def cut_reason(cap: float | None) -> str:
    """Why a request sent (or scheduled) before the simulated-time cap did not finish."""
    return f"not finished within the simulated-time cap of {cap} s (max_duration_s)"


class Records:
    """The per-request record arrays one pool (or a whole deployment) writes while it runs.

    Arrays of length n: `first_token_s`, `finish_s`, `scheduled_s` (first admission: the end
    of vLLM's queue time; NaN while unset), `preemptions`, `replica` (-1: none yet),
    `status` (PENDING/COMPLETED/REJECTED), `cached_tokens` (prompt tokens found in the prefix
    cache), `failed_s` (when the client saw a request fail after sending it, e.g. its own
    timeout; NaN otherwise); `reasons` maps each rejected request to its one-line reason. Replicas write the
    arrays item by item (through memoryviews of them, `replica.item_view`); every rejection
    goes through `reject`."""

    __slots__ = ("cached_tokens", "failed_s", "finish_s", "first_token_s", "preemptions", "reasons", "replica",
                 "scheduled_s", "status")

    def __init__(self, n: int) -> None:
        self.first_token_s = np.full(n, np.nan)
        self.finish_s = np.full(n, np.nan)
        self.scheduled_s = np.full(n, np.nan)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.replica = np.full(n, -1, dtype=np.int64)
        self.status = np.zeros(n, dtype=np.int8)
        self.cached_tokens = np.zeros(n, dtype=np.int64)
        self.failed_s = np.full(n, np.nan)
        self.reasons: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self.status)

    def reject(self, r: int, reason: str, t: float | None = None) -> None:
        """Request r ends rejected, with a one-line reason (`t`: when the client saw it fail)."""
        self.status[r] = REJECTED
        self.reasons[r] = reason
        if t is not None:
            self.failed_s[r] = t

    def reject_pending(self, requests: Any, reason: str) -> None:
        """Each of `requests` still pending ends rejected with `reason`."""
        for r in requests:
            if self.status[r] == PENDING:
                self.reject(int(r), reason)

    def completed(self) -> np.ndarray:
        return self.status == COMPLETED

    def check_conservation(self, replicas: list[Any], arrivals: np.ndarray | None = None) -> None:
        """End of a run (debug mode): every request ended completed or rejected with a reason;
        no replica holds work, KV blocks or requests; completed requests' times are in order
        (arrival < first token <= finish, when `arrivals` is given)."""
        for p in replicas:
            p.check()
            if p.has_work() or p.free_blocks != p.total_blocks or p.outstanding:
                raise AssertionError(f"replica {p.index}: work or KV left at the end")
            if p.gen_so_far or p.last_tok_of:
                raise AssertionError(f"replica {p.index}: state of preempted requests left at the end")
        if not ((self.status == COMPLETED) | (self.status == REJECTED)).all():
            raise AssertionError("a request ended neither completed nor rejected")
        rejected = np.flatnonzero(self.status == REJECTED)
        if len(rejected) != len(self.reasons) or not all(self.reasons.get(int(r)) for r in rejected):
            raise AssertionError("a rejected request has no reason (or a served one has one)")
        done = self.status == COMPLETED
        first, fin = self.first_token_s[done], self.finish_s[done]
        if arrivals is None:
            if not (first <= fin).all():
                raise AssertionError("a completed request finished before its first token")
        elif not ((arrivals[done] < first) & (first <= fin)).all():
            raise AssertionError("a completed request has first token not after arrival or finish before first token")


def tpot(ttft_s: np.ndarray, e2el_s: np.ndarray, output_len: np.ndarray) -> np.ndarray:
    """Time per output token after the first, per request (s); NaN where out_i <= 1.

    TPOT_i = (E2EL_i - TTFT_i) / (out_i - 1), vLLM `bench serve`'s definition
    (`calculate_metrics`): a one-token output has no inter-token time, so it gets NaN here,
    is left out of the TPOT statistics, and meets any TPOT SLO (`good_mask`). The only TPOT
    formula in llmsim: the per-request table, the statistics and goodput all call it.
    """
    ttft_s = np.asarray(ttft_s, dtype=np.float64)
    e2el_s = np.asarray(e2el_s, dtype=np.float64)
    output_len = np.asarray(output_len)
    out = np.full(output_len.shape, np.nan)
    multi = output_len > 1
    out[multi] = (e2el_s[multi] - ttft_s[multi]) / (output_len[multi] - 1)
    return out



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
    #: the step timeline: a DataFrame; given as a dict of column arrays (as `simulate` gives
    #: it) it becomes one when first read (`_Timeline`), so a run that never reads it never
    #: imports pandas (0.3-0.6 s of a command's start-up)
    timeline: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)
    #: when each request was first scheduled (NaN: never); queue time = scheduled_s - arrival_s
    scheduled_s: np.ndarray | None = None
    cached_tokens: np.ndarray | None = None  # prefix caching on: prompt tokens found in cache
    #: client-side wait for a free concurrency slot (vLLM's client_queue_time): send time
    #: (`arrival_s`) minus scheduled time; None for an uncapped open loop
    client_queue_s: np.ndarray | None = None
    #: when the client saw a sent request fail (its timeout; NaN: it did not); None: none did
    failed_s: np.ndarray | None = None
    #: every inter-token gap with when and on which replica it was observed: (time_s,
    #: replica, value_s, count), unsorted; only when asked for (`simulate(..., itl_times=True)`,
    #: for a time series of the run); the (value, count) pairs are those of itl_values_s/itl_counts
    itl_timed: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
    #: with itl_timed: tokens emitted without a gap of their own (speculative decoding's
    #: chunks beyond their first token), (time_s, replica, tokens) per step that emitted them
    merged_timed: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def timeline_column(self, name: str) -> np.ndarray:
        """One column of the timeline, without building its DataFrame when it is not built yet
        (empty when the result has no timeline or no such column)."""
        table = self.__dict__.get("_timeline")
        if table is None or name not in table:
            return np.zeros(0)
        return np.asarray(table[name])

    def records(self) -> pd.DataFrame:
        """Tidy per-request table (one row per request), times in seconds."""
        import pandas as pd

        ttft = self.first_token_s - self.arrival_s
        e2el = self.finish_s - self.arrival_s
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


class _Timeline:
    """`SimResult.timeline`: stores what is assigned; a dict of column arrays is made a DataFrame
    (without copying the arrays) the first time it is read, and kept."""

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            return self
        value = obj.__dict__["_timeline"]
        if isinstance(value, dict):
            import pandas as pd

            value = obj.__dict__["_timeline"] = pd.DataFrame(value, copy=False)
        return value

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__["_timeline"] = value


SimResult.timeline = _Timeline()  # type: ignore[assignment]
