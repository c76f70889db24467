"""What the engine logs while it runs: pooled inter-token gaps and a decimated timeline.

Inter-token latency (ITL) is pooled over all tokens, as vLLM's benchmark reports it: every
token after a request's first contributes one gap, the time since that request's previous
token. A decode segment of n identical-batch steps contributes each step's duration d_j,
seen by all B sequences, so it is stored as (d_j, weight B) rather than B n numbers; when the
durations lie on a line (d_j = d_0 + slope j, the no-window case) as four numbers. Past
ITL_EXACT_LIMIT stored values the gaps fold into a log-spaced histogram of relative bin width
1e-4 (memory bounded on runs of any length; percentiles then good to 0.01 %).

The timeline keeps one row per step (time, replica, batch size, KV utilization, queue length)
and halves its sampling rate whenever it reaches `timeline_max_points` rows. A row may stand
for several steps (a decode segment, a static batch): it also carries their busy time, their
count and the sums of their statistics (T, S, Ad, Ap, R, Aw, Rw, Pc; see roofline) and of
their decode tokens, so that work done (FLOPs, bytes: linear in those sums) can be priced
after the run (`utilization`) at no cost per step beyond storing the numbers.
"""

from __future__ import annotations

import struct
import sys
from array import array
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

# module-level (a global load, specialised by CPython 3.11; a class attribute read through an
# instance is not): packs 8 numbers of a timeline row as doubles
_pack8 = struct.Struct("8d").pack
# a decode segment on a line: d0 and slope (doubles), steps n and weight w (int64)
_LINE = np.dtype([("d0", "<f8"), ("slope", "<f8"), ("n", "<i8"), ("w", "<i8")])
_pack_line = struct.Struct("<ddqq").pack


class StepLog:
    """Compact logs: pooled inter-token gaps and a (decimated) timeline, in typed arrays."""

    #: ITL values are kept exactly (value, count) until this many are stored; then they
    #: are folded into a log-spaced histogram of relative bin width ITL_BIN (1e-4), so
    #: memory stays bounded on runs of any length (percentiles then to 0.01 %).
    ITL_EXACT_LIMIT = 4_000_000
    ITL_BIN = 1e-4
    ITL_MIN_S = 1e-7

    def __init__(self, timeline_max_points: int = 200_000) -> None:
        self.gap_v = array("d")  # gap value (s)
        self.gap_n = array("q")  # how many tokens saw it
        self.itl_chunks: list[np.ndarray] = []  # step durations of decode segments
        self.itl_weights: list[int] = []  # tokens emitted per step in that segment
        self.itl_stored = 0
        self.itl_hist: dict[int, int] | None = None  # bin index -> count, once folded
        # decode segments whose step durations lie on a line: d0 + slope * j, j < n, seen by w
        # (records of _LINE, packed: one call per segment)
        self.lines = bytearray()
        # rows of TL_COLUMNS as packed doubles: struct.pack of a row costs a third of
        # array.extend of its numbers (which converts them one at a time)
        self.tl = bytearray()
        self.tl_full = timeline_max_points * self._ROW_BYTES  # decimate at this many bytes
        self.tl_stride = 1  # one row stored per tl_stride records
        self.tl_skip = 0  # records to skip before the next stored row
        self.steps = 0
        self.batch_token_sum = 0.0  # sum over steps of sequences in the step
        self.busy_s = 0.0
        self.peak_kv = 0.0
        self.cut_gaps = 0  # inter-token gaps of requests cut off by max_duration_s (debug ledger)
        # tokens that reached the client in one chunk with an earlier token of the same step
        # (speculative decoding): no inter-token gap of their own (debug ledger)
        self.merged_tokens = 0
        # of those, the tokens merged into a chunk the API server's loop had not begun (its loop
        # behind the engine: `Replica._stream_step`)
        self.loop_merged_tokens = 0
        # an instance copy of the class limit: hot methods read it, and CPython 3.11 does not
        # specialise class attributes read through an instance (tests lower it per instance)
        self.ITL_EXACT_LIMIT = type(self).ITL_EXACT_LIMIT

    def loop_merged(self, n: int) -> None:
        """n tokens merged into a chunk the API server's loop had not begun: no gap of their own."""
        self.merged_tokens += n
        self.loop_merged_tokens += n

    def gap(self, value: float, count: int) -> None:
        if count:
            self.gap_v.append(value)
            self.gap_n.append(count)
            self.itl_stored += 1

    TL_COLUMNS = ("time_s", "replica", "batch_size", "kv_utilization", "queue_length",
                  "busy_s", "steps", "decode_tokens", "T", "S", "Ad", "Ap", "R", "Aw", "Rw", "Pc")
    _NO_STATS = (0.0,) * 8
    _INT_COLUMNS = frozenset(("replica", "batch_size", "queue_length", "steps"))
    _ROW_BYTES = 8 * len(TL_COLUMNS)

    def record(self, t: float, replica: int, batch: int, kv: float, queue: int, busy_s: float = 0.0,
               steps: int = 0, decode_tokens: float = 0, stats: tuple = _NO_STATS) -> None:
        """One row: the state after the step(s) ending at t, their busy time and count, and
        the sums over them of decode tokens and of the statistics `stats` (T .. Pc)."""
        if kv > self.peak_kv:
            self.peak_kv = kv
        if self.tl_skip:
            self.tl_skip -= 1
            return
        tl = self.tl
        if len(tl) >= self.tl_full:
            # decimate: keep every other row, sample half as often from now on
            n = len(self.TL_COLUMNS)
            self.tl = tl = bytearray(np.frombuffer(tl, dtype=float).reshape(-1, n)[::2].tobytes())
            self.tl_stride *= 2
        self.tl_skip = self.tl_stride - 1
        tl += _pack8(t, replica, batch, kv, queue, busy_s, steps, decode_tokens)
        tl += _pack8(*stats)

    def timeline_columns(self) -> dict[str, np.ndarray]:
        """The timeline as one array per column (TL_COLUMNS; the integer ones as int64)."""
        n = len(self.TL_COLUMNS)
        # one transposed copy: every column is then a contiguous row of it
        by_column = np.frombuffer(self.tl, dtype=float).reshape(-1, n).T.copy()  # the view ends here
        return {c: by_column[i].astype(np.int64) if c in self._INT_COLUMNS else by_column[i]
                for i, c in enumerate(self.TL_COLUMNS)}

    def timeline(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(self.timeline_columns(), copy=False)

    def segment(self, dts: np.ndarray, weight: int) -> None:
        """A run of decode steps: every one of `weight` sequences saw each step's duration."""
        self.itl_chunks.append(dts)
        self.itl_weights.append(weight)
        self.itl_stored += len(dts)
        if self.itl_stored > self.ITL_EXACT_LIMIT:
            self._fold()

    def segment_line(self, d0: float, slope: float, n: int, weight: int) -> None:
        """n decode steps lasting d0 + slope * j, each seen by `weight` sequences (4 numbers,
        not n: the common case costs no array)."""
        self.lines += _pack_line(d0, slope, n, weight)
        self.itl_stored += n
        if self.itl_stored > self.ITL_EXACT_LIMIT:
            self._fold()

    def _exact(self) -> tuple[np.ndarray, np.ndarray]:
        vals = [np.frombuffer(self.gap_v, dtype=float) if len(self.gap_v) else np.zeros(0)]
        cnts = [np.frombuffer(self.gap_n, dtype=np.int64) if len(self.gap_n) else np.zeros(0, dtype=np.int64)]
        if self.lines:
            lines = np.frombuffer(bytes(self.lines), dtype=_LINE)
            n = lines["n"]
            starts = np.cumsum(n) - n
            j = np.arange(int(n.sum()), dtype=float) - np.repeat(starts, n)
            vals.append(np.repeat(lines["d0"], n) + np.repeat(lines["slope"], n) * j)
            cnts.append(np.repeat(lines["w"], n))
        for ch, w in zip(self.itl_chunks, self.itl_weights, strict=True):
            vals.append(ch)
            cnts.append(np.full(len(ch), w, dtype=np.int64))
        return np.concatenate(vals), np.concatenate(cnts)

    def _line_runs(self) -> tuple[int, int]:
        """(decode segments stored on a line, the gaps they hold): `segment_line`."""
        n = np.frombuffer(bytes(self.lines), dtype=_LINE)["n"]
        return len(n), int(n.sum())

    def _fold(self) -> None:
        """Move the exact store into the histogram (bounded memory from here on)."""
        v, c = self._exact()
        idx = np.floor(np.log(np.maximum(v, self.ITL_MIN_S) / self.ITL_MIN_S) / np.log1p(self.ITL_BIN)).astype(np.int64)
        u, inv = np.unique(idx, return_inverse=True)
        sums = np.bincount(inv, weights=c, minlength=len(u))
        hist = self.itl_hist if self.itl_hist is not None else {}
        for k, n in zip(u.tolist(), sums.tolist(), strict=True):
            hist[k] = hist.get(k, 0) + int(n)
        self.itl_hist = hist
        self.gap_v, self.gap_n = array("d"), array("q")
        self.itl_chunks, self.itl_weights = [], []
        self.lines = bytearray()
        self.itl_stored = 0

    def itl(self) -> tuple[np.ndarray, np.ndarray]:
        """All inter-token gaps as (sorted distinct values, counts); exact unless the run was
        long enough to fold them into the histogram (values are then bin centres)."""
        if self.itl_hist is not None:
            self._fold()
            keys = np.array(sorted(self.itl_hist), dtype=np.int64)
            counts = np.array([self.itl_hist[k] for k in keys.tolist()], dtype=np.int64)
            g = np.log1p(self.ITL_BIN)
            return self.ITL_MIN_S * np.exp((keys + 0.5) * g), counts
        v, c = self._exact()
        if len(v) == 0:
            return v, c
        # sort once and sum the counts of equal values (np.unique's inverse pass and its
        # stable sort cost 3x more; integer sums do not depend on the order of equal values).
        # A decode segment's gaps come as an ascending run (its steps only lengthen), and
        # numpy's stable float sort (timsort) merges runs: where long runs hold most of the
        # gaps (a lightly loaded server: 1.8M gaps, 147 -> 65 ms) it beats quicksort 2x; on
        # runs of a few gaps (segments cut short by arrivals) it is 10 % slower
        n_runs, in_runs = self._line_runs()
        order = np.argsort(v, kind="stable" if 2 * in_runs > len(v) and in_runs >= 16 * n_runs else "quicksort")
        v, c = v[order], c[order]
        starts = np.flatnonzero(np.concatenate(([True], v[1:] != v[:-1])))
        return v[starts], np.add.reduceat(c, starts)




class TimedStepLog(StepLog):
    """A `StepLog` that also knows when each inter-token gap was observed, and on which
    replica: for a time series of the run (Prometheus's ITL histogram and generation-token
    counter sampled every scrape interval). Chosen only when such a series is asked for, so
    the plain log's hot path pays nothing.

    Each `record` (once per step, or per decode run, after the gaps of that step were logged)
    appends a mark: (time, replica, end positions of the three gap stores). The gaps between
    two marks belong to the step of the later mark. A decode run logged as a line
    (`segment_line`: step j lasts d0 + slope j) ends at its mark's time, so each of its steps
    gets its own end time; a run logged as an array (`segment`: sliding-window models, static
    batches) is given its mark's time. The exact store is never folded into the histogram
    (the times must stay with the values), so memory grows with the run: about 32 bytes per
    step more than the plain log's exact store."""

    ITL_EXACT_LIMIT = sys.maxsize  # never fold: per-gap times need the exact values

    def __init__(self, timeline_max_points: int = 200_000) -> None:
        super().__init__(timeline_max_points)
        self.mark_t = array("d")
        self.mark_replica = array("q")
        self.mark_gap = array("q")  # end positions in gap_v, lines (records) and itl_chunks
        self.mark_line = array("q")
        self.mark_chunk = array("q")
        self.mark_merged = array("q")  # merged_tokens so far (speculative chunks)

    def record(self, t: float, replica: int, batch: int, kv: float, queue: int, busy_s: float = 0.0,
               steps: int = 0, decode_tokens: float = 0, stats: tuple = StepLog._NO_STATS) -> None:
        super().record(t, replica, batch, kv, queue, busy_s, steps, decode_tokens, stats)
        self.mark_t.append(t)
        self.mark_replica.append(replica)
        self.mark_gap.append(len(self.gap_v))
        self.mark_line.append(len(self.lines) // _LINE.itemsize)
        self.mark_chunk.append(len(self.itl_chunks))
        self.mark_merged.append(self.merged_tokens)

    def timed_itl(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every inter-token gap with when and where it was observed: (time_s, replica,
        value_s, count) arrays, unsorted; their (value, count) pairs are `itl()`'s, ungrouped.
        Gaps logged after the last mark (none in a finished run) take the last mark's time."""
        mt = np.frombuffer(self.mark_t, dtype=float) if len(self.mark_t) else np.zeros(1)
        mr = np.frombuffer(self.mark_replica, dtype=np.int64) if len(self.mark_replica) else np.zeros(1, np.int64)
        parts = [self._timed_gaps(mt, mr), self._timed_lines(mt, mr), self._timed_chunks(mt, mr)]
        return tuple(np.concatenate([p[i] for p in parts]) for i in range(4))  # type: ignore[return-value]

    def timed_merged(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Tokens emitted without a gap of their own (a speculative verify step's chunk beyond
        its first token, `merged_tokens`), per step that emitted them: (time_s, replica,
        tokens), steps with none left out."""
        merged = np.frombuffer(self.mark_merged, dtype=np.int64) if len(self.mark_merged) else np.zeros(0, np.int64)
        added = np.diff(merged, prepend=0)
        keep = added > 0
        mt = np.frombuffer(self.mark_t, dtype=float) if len(self.mark_t) else np.zeros(0)
        mr = np.frombuffer(self.mark_replica, dtype=np.int64) if len(self.mark_replica) else np.zeros(0, np.int64)
        return mt[keep].copy(), mr[keep].copy(), added[keep]

    @staticmethod
    def _owner(marks: array, n: int) -> np.ndarray:
        """For items 0..n-1 of a store, the index of the mark that closed them (the first mark
        whose end position is past the item; the last mark for items logged after it)."""
        ends = np.frombuffer(marks, dtype=np.int64) if len(marks) else np.zeros(0, np.int64)
        idx = np.searchsorted(ends, np.arange(n), side="right")
        return np.minimum(idx, max(len(ends) - 1, 0))

    def _timed_gaps(self, mt: np.ndarray, mr: np.ndarray) -> tuple[np.ndarray, ...]:
        n = len(self.gap_v)
        own = self._owner(self.mark_gap, n)
        v = np.frombuffer(self.gap_v, dtype=float) if n else np.zeros(0)
        c = np.frombuffer(self.gap_n, dtype=np.int64) if n else np.zeros(0, np.int64)
        return mt[own], mr[own], v.copy(), c.copy()

    def _timed_lines(self, mt: np.ndarray, mr: np.ndarray) -> tuple[np.ndarray, ...]:
        if not self.lines:
            return np.zeros(0), np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64)
        lines = np.frombuffer(bytes(self.lines), dtype=_LINE)
        own = self._owner(self.mark_line, len(lines))
        n = lines["n"]
        starts = np.cumsum(n) - n
        j = np.arange(int(n.sum()), dtype=float) - np.repeat(starts, n)
        d0, slope = np.repeat(lines["d0"], n), np.repeat(lines["slope"], n)
        nn = np.repeat(n, n).astype(float)
        # the run ends at its mark: step j ends (total - elapsed after j) before it, where
        # elapsed through step j is (j + 1) d0 + slope j (j + 1) / 2
        total = nn * d0 + slope * nn * (nn - 1) / 2
        through = (j + 1) * d0 + slope * j * (j + 1) / 2
        t = np.repeat(mt[own], n) - (total - through)
        return t, np.repeat(mr[own], n), d0 + slope * j, np.repeat(lines["w"], n)

    def _timed_chunks(self, mt: np.ndarray, mr: np.ndarray) -> tuple[np.ndarray, ...]:
        if not self.itl_chunks:
            return np.zeros(0), np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64)
        own = self._owner(self.mark_chunk, len(self.itl_chunks))
        lens = np.array([len(ch) for ch in self.itl_chunks], dtype=np.int64)
        v = np.concatenate(self.itl_chunks)
        c = np.repeat(np.array(self.itl_weights, dtype=np.int64), lens)
        return np.repeat(mt[own], lens), np.repeat(mr[own], lens), v, c
