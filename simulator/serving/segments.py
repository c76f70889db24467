"""Closed-form decode segments: a run of identical decode steps priced and applied at once.

Decode fast path. When the policy says the next step is decode-only and nothing can be
admitted (the policy returns `DECODE_SEGMENT`), the following steps differ only by context growth: step j
of a segment of B sequences with context sum C has T = S = B, Ad = C + B/2 + B j,
R = C + B + B j. Without a window only the attention terms grow, linearly in j, so step j
lasts d_0 + slope j exactly (checked on the last step) and the segment ends at
clock + n d_0 + slope n (n-1)/2; with a window the capped sums are computed for all j at once
(`capped_sums`). A segment stops at the first completion (known by step index), at the first
step that would need a KV block that is not free (after q·bs + r steps the batch needs
B q + #{slots with fewer than r free places in their last block} new blocks), at
`max_segment_steps`, or at the last step that starts before `t_limit` (the next event).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.serving.kvcache import CeilKVCache, KVCache
from simulator.serving.steplog import StepLog
from simulator.serving.steptime import bad_step, check_step_times, checked, step_ok


def capped_sums(sorted_c: np.ndarray, offsets: np.ndarray, W: float) -> np.ndarray:
    """sum_j min(c_j + o, W) for each offset o, with c sorted ascending (O((B + k) log B))."""
    prefix = np.concatenate([[0.0], np.cumsum(sorted_c)])
    n_below = np.searchsorted(sorted_c, W - offsets, side="left")  # c_j + o < W
    B = len(sorted_c)
    return prefix[n_below] + n_below * offsets + (B - n_below) * W


class DecodeSegments:
    """The decode fast path of `replica.Replica` (a mixin: it reads and updates the replica's
    per-slot lists, KV blocks, clock and log)."""

    active: list[int]
    computed: list[int]
    prompt: list[int]
    generated: list[int]
    outlen: list[int]
    last_tok: list[float]
    kv: KVCache
    log: StepLog
    bs: int
    cfg: Any
    max_tokens: int
    max_segment_steps: int
    debug: bool
    cost: Any
    policy: Any
    clock: float
    context_sum: int
    window: int | None
    in_step: bool
    last_lazy_s: float | None
    segment_steps: int
    step_time: Any
    index: int
    waiting: Any
    stream_s: float
    api_free: float
    api_start: float
    api_prev: float
    api_members: dict[int, float] | None
    rid: Any

    if not TYPE_CHECKING:
        # no __dict__: the replica keeps its state in its own __slots__ (hidden from mypy,
        # which would check the mixin's assignments against this empty tuple)
        __slots__ = ()

    if TYPE_CHECKING:  # defined by the replica
        def run_plan(self, plan: Any) -> None: ...
        def check(self) -> None: ...
        def _finish(self, s: int, t_client: float | None = None) -> None: ...
        def _burst_start(self, t_end: float) -> float: ...

    def _decode_segment(self, t_limit: float) -> None:
        """Run n identical decode steps at once (n up to the next completion, KV shortage,
        or the last step that starts before t_limit); see the module docstring."""
        active = self.active
        batch = len(active)
        # one general step instead when the budget is short of the batch, or when the API
        # server's loop is behind and waits to begin a burst that lacks a running request
        # (`_joins_waiting_burst`: that step appends it, after which every step's outputs merge
        # alike, as the closed form takes them)
        if self.max_tokens < batch or (self.api_members is not None and self._joins_waiting_burst()):
            self.run_plan(self.policy.next_step(self, allow_segment=False))
            return
        generated, outlen = self.generated, self.outlen
        left = [outlen[s] - generated[s] for s in active]  # outputs each slot has left
        steps_to_first_finish = min(left)
        max_steps = min(steps_to_first_finish, self.max_segment_steps)
        kv = self.kv
        if kv.free_blocks < batch * (max_steps // self.bs + 1):  # else no shortage possible
            max_steps = self._steps_before_block_shortage(max_steps)
        if max_steps <= 0:
            self.run_plan(self.policy.next_step(self, allow_segment=False))  # a block is needed now: the policy preempts
            return
        context_sum = self.context_sum
        clock = self.clock
        step_time = self.step_time
        Ad0 = context_sum + 0.5 * batch
        R0 = float(context_sum + batch)
        # the common case (no window) inline: one call less per segment (`steptime.py`)
        d0 = (checked(step_time(batch, batch, Ad0, 0.0, R0), batch, batch, R0) if self.window is None
              else self._first_decode_step_s(batch, context_sum))
        if t_limit != math.inf:
            # steps only lengthen as context grows: at most (t_limit - clock)/d0 + 1 start in time
            fit = (t_limit - clock) / d0  # may overflow to inf for far-off limits (int() never sees it)
            max_steps = max(1, int(fit) + 1) if fit < max_steps else max_steps
        # `_decode_line`, inline (a segment per arrival at low load: the call and its argument
        # checks measured 2 % of the 10k-request benchmark); keep the two in step
        line: tuple[float, float] | None
        seg_ends: np.ndarray | None = None  # a priced segment's step ends
        if self.window is not None:
            line = None
        elif max_steps == 1:
            line = (d0, 0.0)
        else:
            d1 = checked(step_time(batch, batch, Ad0 + batch, 0.0, R0 + batch), batch, batch, R0 + batch)
            last_j = max_steps - 1
            d_last = d1 if max_steps == 2 else checked(step_time(batch, batch, Ad0 + batch * last_j, 0.0,
                                                                 R0 + batch * last_j), batch, batch, R0 + batch * last_j)
            line = (d0, d1 - d0) if abs(d0 + (d1 - d0) * last_j - d_last) <= 1e-12 * d_last else None
        step_s: np.ndarray | None = None  # a priced segment's step times
        if line is not None:
            slope = line[1]
            n_steps = max_steps if t_limit == math.inf or max_steps <= 1 else self._line_steps_before(line, max_steps, t_limit)
            t_end = clock + n_steps * d0 + slope * n_steps * (n_steps - 1) / 2
        else:
            n_steps, seg_ends, step_s = self._priced_segment(batch, context_sum, max_steps, t_limit)
            t_end = float(seg_ends[-1])
        stream = restore = None
        if self.stream_s:  # the stream and the gaps its chunks give (`_stream_and_gaps`)
            stream, restore = self._stream_and_gaps(clock, d0, line, t_end, n_steps, batch, seg_ends, step_s)
        elif line is not None and self.in_step:  # the common case, inline
            self.log.segment_line(d0, line[1], n_steps, batch)
        else:
            self._log_segment_gaps(d0, n_steps, line, step_s, batch)
        if self.window is None:  # inline (the common case): _segment_stats without a call
            bn = float(batch * n_steps)
            grow = bn * (n_steps - 1) / 2.0
            Ad = n_steps * (context_sum + 0.5 * batch) + grow
            R = n_steps * (context_sum + batch) + grow
            stats = (bn, bn, Ad, 0.0, R, Ad, R, 0.0)
        else:
            stats = self._segment_stats(batch, context_sum, n_steps)  # before the steps apply
        self.context_sum = context_sum + n_steps * batch
        # the cache's own way to grow every slot by n_steps (a derived count, or per-slot blocks)
        apply = self._apply_decode_steps_derived if type(kv) is CeilKVCache else self._apply_decode_steps
        apply(n_steps)
        # every slot's last token is now at t_end: marked once, not slot by slot (`last_lazy_s`)
        self.last_lazy_s = t_end
        done = finished_slots(active, left, n_steps) if n_steps == steps_to_first_finish else []
        lg = self.log
        lg.steps += n_steps
        self.segment_steps += n_steps
        lg.batch_token_sum += batch * n_steps
        busy = t_end - clock
        lg.busy_s += busy
        self.clock = t_end
        lg.record(t_end, self.index, batch, 1.0 - kv.free_blocks / kv.total_blocks, len(self.waiting),
                  busy, n_steps, batch * n_steps, stats)
        if self.debug:
            self.check()
        if stream is None:  # no stream: the client sees each output at the step's end
            for s in done:
                self._finish(s)
        else:
            self._segment_finish(stream, done, restore)

    def _joins_waiting_burst(self) -> bool:
        """True when the loop has not begun its latest burst (a step ending before it begins
        merges into it) and a running request has no output in it: SGLang's prefill-only step,
        say, opened it for the new requests alone while the loop was behind."""
        members, rid = self.api_members, self.rid
        assert members is not None
        return self.clock < self.api_start and any(rid[s] not in members for s in self.active)

    def sync_last_tok(self) -> None:
        """Write `last_tok` of every running slot if a decode segment left it marked rather
        than written (`last_lazy_s`: each is that time). A decode segment or an all-decode step
        emits a token for every running slot, and one most often follows another, so they mark
        the time once; any other reader or writer of `last_tok` calls this first. A slot still
        in its prompt (one resumed after a preemption: it has a last token, from before) is
        left as it is."""
        t = self.last_lazy_s
        if t is not None:
            last, computed, prompt = self.last_tok, self.computed, self.prompt
            for s in self.active:
                if computed[s] >= prompt[s]:
                    last[s] = t
            self.last_lazy_s = None

    def _stream_and_gaps(self, clock: float, d0: float, line: tuple[float, float] | None, t_end: float, n: int,
                         batch: int, ends: np.ndarray | None, step_s: np.ndarray | None) -> tuple:
        """A streamed segment (`_segment_stream`) and its inter-token gaps: the stream first,
        since the tokens of a step that merges into a chunk the loop has not begun have no gap
        of their own (`_log_chunk_gaps`); returns (stream, the last-chunk times to restore)."""
        stream = self._segment_stream(clock, d0, line, t_end, n, batch, ends)
        opened_at = stream[4]
        if opened_at is not None:
            return stream, self._log_chunk_gaps(clock, opened_at, n, batch)
        self._log_segment_gaps(d0, n, line, step_s, batch)
        return stream, None

    def _log_segment_gaps(self, d0: float, n_steps: int, line: tuple[float, float] | None, step_s: np.ndarray | None,
                          batch: int) -> None:
        """A segment's inter-token gaps, each step's duration seen by the batch, the first
        from each slot's own last token (`_log_lagging_segment`) where it was not at clock."""
        if line is not None:
            if self.in_step:
                self.log.segment_line(d0, line[1], n_steps, batch)
            else:
                self._log_lagging_segment(d0, n_steps, line, None)
            return
        assert step_s is not None
        if self.in_step:
            self.log.segment(step_s, batch)
        else:
            self._log_lagging_segment(float(step_s[0]), n_steps, None, step_s)

    def _keep_chunk_tokens(self, opened_at: np.ndarray, restore: list[float] | None, t_end: float) -> None:
        """After a segment logged by `_log_chunk_gaps`: each slot's last chunk started at the
        last burst the segment opened (its next chunk's gap runs from there)."""
        last, active = self.last_tok, self.active
        if restore is not None:  # no step opened one: the slots keep their earlier tokens
            for s, t in zip(active, restore, strict=True):
                last[s] = t
            self.in_step, self.last_lazy_s = False, None
        elif float(opened_at[-1]) != t_end:
            t = float(opened_at[-1])
            for s in active:
                last[s] = t
            self.in_step, self.last_lazy_s = False, None
        else:
            self.in_step = True  # and last_lazy_s is t_end: every last chunk is there

    def _segment_stream(self, clock: float, d0: float, line: tuple[float, float] | None, t_end: float, n: int,
                        batch: int, ends: np.ndarray | None) -> tuple[float, float, float, bool, np.ndarray | None]:
        """The API server streams the segment's n steps of `batch` outputs by
        `Replica._stream_step`'s rule, in closed form: (start, end, end of the burst before,
        whether a step of the segment opened the last burst, the starts of the bursts the
        segment opened, or None when each step opened one at its own end). Step i ends at
        T_i (T_0 = clock; on the segment's `line`, T_i = clock + i d0 + slope i (i - 1) / 2,
        else the priced `ends`); a step that ends before the latest burst has begun merges
        into it (no cost), any other opens a burst of B c at max(T_i, the loop's free time). Steps only lengthen, so the
        steps split in two: the first p last less than B c, and once one of them has opened a
        burst the bursts run back to back through step p (every window of B c holds a step's
        end; the first step in each window opens the next), the last one at the first point
        of that chain after T_p; the later steps last at least B c, and once one of them opens
        a burst that the next does not merge into, each opens its own: free after step n =
        max(T_n + B c, free after step j + (n - j) B c)."""
        bc = batch * self.stream_s
        S, E, Ep = self.api_start, self.api_free, self.api_prev
        if S <= clock and (n == 1 or (d0 >= bc and E <= clock + 2 * d0)):
            # the common case (the loop keeps up): step 1 opens a burst that ends before step 2
            # does (T_2 >= clock + 2 d0), and every later step lasts at least B c, so no step
            # merges and each opens its own burst
            T1 = t_end if n == 1 else clock + d0 if ends is None else float(ends[0])
            if E <= T1:  # and every burst starts at its step's end
                if n >= 2:
                    E = T1 + bc  # free after step 1
                    if n >= 3:
                        d_last = t_end - float(ends[n - 2]) if ends is not None else d0 + line[1] * (n - 1) if line else d0
                        E = max(t_end - d_last + bc, E + (n - 2) * bc)  # free after step n - 1
                return t_end, t_end + bc, E, True, None
        T = self._step_ends(clock, d0, line, t_end, n, ends)
        S, E, Ep, starts = _segment_bursts(S, E, Ep, T, _short_steps(d0, line, n, bc, ends, clock), bc)
        return S, E, Ep, len(starts) > 0, np.asarray(starts, dtype=float)

    @staticmethod
    def _step_ends(clock: float, d0: float, line: tuple[float, float] | None, t_end: float, n: int,
                   ends: np.ndarray | None) -> np.ndarray:
        """A segment's n step end times: the priced `ends`, or on its line clock + i d0 +
        slope i (i - 1) / 2 (the last exactly t_end)."""
        if ends is not None:
            T = ends[:n].astype(float)
        else:
            i = np.arange(1, n + 1, dtype=float)
            T = clock + i * d0 + (line[1] if line is not None else 0.0) * i * (i - 1) / 2
        T[-1] = t_end
        return T

    def _segment_finish(self, stream: tuple[float, float, float, bool, np.ndarray | None], done: list[int],
                        restore: list[float] | None = None) -> None:
        """Take up the segment's stream (`_segment_stream`): each slot's last chunk where the
        segment's gaps were logged by `_log_chunk_gaps` (`_keep_chunk_tokens`, with its
        `restore`), the loop's state after it, and the `done` slots finish when their clients
        see them: a slot at place i of the batch at its burst's start + i c, or when its output
        in the burst that all n steps merged into leaves."""
        S, E, Ep, created, opened_at = stream
        if opened_at is not None:
            self._keep_chunk_tokens(opened_at, restore, self.clock)
        c = self.stream_s
        members = self.api_members
        if created:
            active = self.active
            if S > self.clock:  # the loop begins the last burst after step n: keep its members
                rid = self.rid
                members = {rid[s]: S + j * c for j, s in enumerate(active, 1)}
            else:
                members = None
            # a few slots: the list's own search beats a dict of the batch (places first: a
            # finish takes its slot out of the batch)
            for s, t in [(s, S + (active.index(s) + 1) * c) for s in done]:
                self._finish(s, t)
        else:  # every step merged into the burst that was waiting before the segment
            assert members is not None
            rid = self.rid
            for s in done:
                self._finish(s, members[rid[s]])
        self.api_prev, self.api_start, self.api_free, self.api_members = Ep, S, E, members

    def _log_chunk_gaps(self, clock: float, opened_at: np.ndarray, n: int, batch: int) -> list[float] | None:
        """The inter-token gaps of a segment whose bursts did not all start at their steps'
        ends (`_segment_stream`): each burst the segment opened (starting at `opened_at`)
        carries one chunk per slot, its gap running from the start of the slot's last chunk
        (`last_tok`); the tokens of steps that merged into a waiting burst count as merged.
        Returns the slots' last-chunk times to restore when no step opened a burst (the
        segment sets them to its end), else None."""
        lg = self.log
        k = len(opened_at)
        lg.loop_merged(batch * (n - k))
        self.sync_last_tok()
        last = self.last_tok
        if k == 0:
            return [last[s] for s in self.active]
        lagging = [s for s in self.active if last[s] != clock]
        t1 = float(opened_at[0])
        for s in lagging:
            lg.gap(t1 - last[s], 1)
        lg.gap(t1 - clock, batch - len(lagging))
        if k > 1:
            lg.segment(np.diff(opened_at), batch)
        return None

    def _priced_segment(self, batch: int, context_sum: int, max_steps: int,
                        t_limit: float) -> tuple[int, np.ndarray, np.ndarray]:
        """A segment whose steps are not on a line (a sliding window): each step priced (one
        vectorised call), the steps that start before t_limit kept; returns (steps, their
        end times, their durations)."""
        step_s = self._decode_step_times(batch, context_sum, max_steps)
        ends = self.clock + np.cumsum(step_s)
        n_steps = int(np.searchsorted(ends[:-1], t_limit, side="left")) + 1 if max_steps > 1 else 1
        n_steps = min(n_steps, max_steps)
        return n_steps, ends[:n_steps], step_s[:n_steps]

    def _segment_stats(self, batch: int, context_sum: int, n: int) -> tuple:
        """Sums over n decode steps of (T, S, Ad, Ap, R, Aw, Rw, Pc): step j adds B tokens of
        context, so sum_j Ad_j = n (C + B/2) + B n(n-1)/2 and sum_j R_j = n (C + B) + B n(n-1)/2
        (C = context_sum); windowed sums cap each sequence's context at W (capped_sums)."""
        grow = batch * n * (n - 1) / 2.0
        Ad = n * (context_sum + 0.5 * batch) + grow
        R = n * (context_sum + batch) + grow
        W = self.window
        if W is None:
            Aw, Rw = Ad, R
        else:
            c = np.sort(np.array([self.computed[s] for s in self.active], dtype=float))
            j = np.arange(n, dtype=float)
            Aw = float(capped_sums(c, j + 0.5, W).sum())
            Rw = float(capped_sums(c, j + 1.0, W).sum())
        return (float(batch * n), float(batch * n), Ad, 0.0, R, Aw, Rw, 0.0)

    def _log_lagging_segment(self, first_step_s: float, n_steps: int, line: tuple[float, float] | None,
                             step_s: np.ndarray | None) -> None:
        """Inter-token gaps of a segment whose batch did not all emit at `clock` (a running
        decode was left out of the previous step, e.g. by a prefill-only step): the first
        step's gap for such a slot runs from its own last token."""
        self.sync_last_tok()
        last, clock = self.last_tok, self.clock
        lagging = [s for s in self.active if last[s] != clock]
        lg = self.log
        first_end = clock + first_step_s
        for s in lagging:
            lg.gap(first_end - last[s], 1)
        lg.gap(first_step_s, len(self.active) - len(lagging))
        if n_steps > 1:
            if line is not None:
                d0, slope = line
                lg.segment_line(d0 + slope, slope, n_steps - 1, len(self.active))
            else:
                assert step_s is not None
                lg.segment(step_s[1:], len(self.active))
        self.in_step = True

    def _steps_before_block_shortage(self, max_steps: int) -> int:
        """Decode steps the free blocks allow: after i = q·bs + r steps (r < bs) the batch
        needs B q + #{slots with fewer than r free places in their last block} new blocks."""
        batch = len(self.active)
        computed = self.computed
        free = self.kv.free_blocks
        bs = self.bs
        covered = self.kv.blocks_per_slot()
        # room_count[k]: slots with k free token places in their last block (0..bs-1)
        room_count = [0] * (bs + 1)
        for s in self.active:
            room_count[covered[s] * bs - computed[s]] += 1
        full_rounds = free // batch  # every slot can take this many more blocks
        spare = free - batch * full_rounds
        needing = 0  # slots that need a block within r extra steps
        extra_steps = 0
        for r in range(1, bs):
            needing += room_count[r - 1]
            if needing > spare:
                break
            extra_steps = r
        return min(max_steps, full_rounds * bs + extra_steps)

    def _first_decode_step_s(self, batch: int, context_sum: int) -> float:
        W = self.window
        computed = self.computed
        if W is None:
            d0 = self.step_time(batch, batch, context_sum + 0.5 * batch, 0.0, float(context_sum + batch))
        else:
            d0 = self.step_time(batch, batch, context_sum + 0.5 * batch, 0.0, float(context_sum + batch),
                                sum(min(computed[s] + 0.5, W) for s in self.active),
                                sum(min(computed[s] + 1, W) for s in self.active))
        if not step_ok(d0):
            raise bad_step(d0, batch, batch, context_sum + batch)
        return d0

    def _decode_line(self, batch: int, context_sum: int, d0: float,
                     max_steps: int) -> tuple[float, float] | None:
        """(d0, slope) when step j of the segment lasts exactly d0 + slope j (no window: only
        the attention terms grow, linearly in j); checked by pricing the last step too.
        Multi-step rounds call it; `_decode_segment` has the same lines inline (keep in step)."""
        if self.window is not None:
            return None
        if max_steps == 1:
            return d0, 0.0
        Ad0 = context_sum + 0.5 * batch
        R0 = float(context_sum + batch)
        d1 = self.step_time(batch, batch, Ad0 + batch, 0.0, R0 + batch)
        last = max_steps - 1
        d_last = d1 if max_steps == 2 else self.step_time(batch, batch, Ad0 + batch * last, 0.0, R0 + batch * last)
        for d in (d1, d_last):  # d0: `_first_decode_step_s`
            if not step_ok(d):
                raise bad_step(d, batch, batch, R0 + batch * last)
        slope = d1 - d0
        if abs(d0 + slope * last - d_last) <= 1e-12 * d_last:
            return d0, slope
        return None

    def _line_steps_before(self, line: tuple[float, float], max_steps: int, t_limit: float) -> int:
        """Steps of a linear segment that start before t_limit: step j starts at
        clock + j d0 + slope j (j-1)/2, so n is the positive root of that quadratic, then an
        exact check of its neighbours (start times increase with j)."""
        if t_limit == math.inf or max_steps <= 1:
            return max_steps
        d0, slope = line
        clock = self.clock
        k = max_steps - 1
        if clock + k * d0 + slope * k * (k - 1) / 2 < t_limit:
            return max_steps  # the last starts in time, so all do (the usual case: no root)
        delta = t_limit - clock
        h = slope / 2.0
        b = d0 - h
        if h > 1e-15 * d0:
            root = (-b + math.sqrt(b * b + 4.0 * h * delta)) / (2.0 * h)
        else:
            root = delta / d0
        n = max(1, min(max_steps, int(root) + 1))
        while n > 1 and clock + (n - 1) * d0 + slope * (n - 1) * (n - 2) / 2 >= t_limit:
            n -= 1
        while n < max_steps and clock + n * d0 + slope * n * (n - 1) / 2 < t_limit:
            n += 1
        return n

    def _decode_step_times(self, batch: int, context_sum: int, max_steps: int) -> np.ndarray:
        """Durations of max_steps decode steps priced in one vectorised call."""
        j = np.arange(max_steps, dtype=float)
        Ad = (context_sum + 0.5 * batch) + batch * j
        R = float(context_sum + batch) + batch * j
        W = self.window
        if W is not None:
            sorted_contexts = np.sort(np.array([self.computed[s] for s in self.active], dtype=float))
            Aw = capped_sums(sorted_contexts, j + 0.5, W)
            Rw = capped_sums(sorted_contexts, j + 1.0, W)
        else:
            Aw, Rw = Ad, R
        return check_step_times(self.cost.step_times(float(batch), float(batch), Ad, 0.0, R, Aw, Rw), batch, batch, R)

    def _apply_decode_steps(self, n_steps: int) -> None:
        """Every running slot emits n_steps tokens and takes the blocks its longer context
        needs (explicit per-slot counts: prefix caching; CeilKVCache takes
        `_apply_decode_steps_derived`). The caller has added the steps' tokens to
        `context_sum`, finds the slots that are done (`finished_slots`) and marks their last
        tokens at the segment's end (`last_lazy_s`)."""
        kv = self.kv
        active = self.active
        computed, generated = self.computed, self.generated
        if kv.shared_of and not kv.ceil_blocks:
            # shared blocks: no ceil(c / bs) shortcut, each slot's cover is recomputed
            for s in active:
                computed[s] += n_steps
                kv.allocate(s, kv.blocks_to_grow(s, computed[s]))
                generated[s] += n_steps
            return
        held, bs = kv.held, self.bs
        # private blocks only: a slot holds ceil(c / bs) blocks, so n more tokens take
        # n // bs blocks, plus one if its last block has fewer than n % bs free places,
        # i.e. (c - 1) % bs >= bs - n % bs (threshold bs when n % bs == 0: never)
        full, rem = divmod(n_steps, bs)
        crossing = 0
        if rem:
            threshold = bs - rem
            for s in active:
                c = computed[s]
                if (c - 1) % bs >= threshold:
                    crossing += 1
                    held[s] += full + 1
                elif full:
                    held[s] += full
                computed[s] = c + n_steps
                generated[s] += n_steps
        else:
            for s in active:
                held[s] += full
                computed[s] += n_steps
                generated[s] += n_steps
        kv.free_blocks -= full * len(active) + crossing

    def _apply_decode_steps_derived(self, n_steps: int) -> None:
        """`_apply_decode_steps` with block counts derived from `computed` (CeilKVCache): only
        the pool's free count moves, by B (n // bs) + #{slots crossing one more boundary}
        (threshold bs when n % bs == 0: never). One pass."""
        computed, generated, bs = self.computed, self.generated, self.bs
        active = self.active
        full, rem = divmod(n_steps, bs)
        threshold = bs - rem if rem else bs
        crossing = 0
        for s in active:
            c = computed[s]
            if (c - 1) % bs >= threshold:
                crossing += 1
            computed[s] = c + n_steps
            generated[s] += n_steps
        self.kv.free_blocks -= full * len(active) + crossing


def finished_slots(active: list[int], left: list[int], n_steps: int) -> list[int]:
    """The slots of `active` (in order) that finish after n_steps more tokens, given the
    outputs each had `left` (n_steps never exceeds min(left), so they are the ones with
    exactly n_steps left). The scans run in C (list.count / list.index): a segment ends at
    its first completion most of the time, and a Python loop over the batch costs more."""
    found = left.count(n_steps)
    if not found:
        return []
    i = left.index(n_steps)
    done = [active[i]]
    for _ in range(found - 1):
        i = left.index(n_steps, i + 1)
        done.append(active[i])
    return done


def _short_steps(d0: float, line: tuple[float, float] | None, n: int, bc: float, ends: np.ndarray | None,
                 clock: float) -> int:
    """How many of a segment's n steps (which only lengthen) last less than `bc`: the first
    d0 + slope (i - 1) < bc on a line, else read off the priced step `ends`."""
    if ends is not None:
        short = np.diff(ends[:n], prepend=clock) < bc
        return n if short.all() else int(np.argmin(short))
    slope = line[1] if line is not None else 0.0
    if d0 >= bc:
        return 0
    if slope <= 0.0:
        return n
    return min(n, math.ceil((bc - d0) / slope))


def _segment_bursts(S: float, E: float, Ep: float, T: np.ndarray, p: int, bc: float) -> tuple[float, float, float, list[float]]:
    """`DecodeSegments._segment_stream` in general: steps 1..n end at T (increasing), the first
    p last less than `bc`; from the latest burst's (start S, end E, end of the one before Ep),
    returns them after step n and the starts of the bursts the steps opened, in order."""
    n = len(T)

    def first(x: float, i: int) -> int:  # the first step j >= i that ends at or after x (n + 1: none)
        return max(int(np.searchsorted(T, x, side="left")) + 1, i)

    starts: list[float] = []
    i = 1
    while True:
        j = first(S, i)  # steps i..j-1 merge into the latest burst
        if j > n:
            break
        Tj = float(T[j - 1])
        start = Tj if Tj >= E else E
        Ep, S, E = E, start, start + bc
        starts.append(S)
        if j == n:
            break
        if j < p:  # steps j+1..p end less than B c apart: bursts back to back through step p
            Tp = float(T[p - 1])
            if Tp >= S:
                # the first step to end in each window [S + m B c, S + (m + 1) B c) opens the
                # burst at S + (m + 1) B c
                k = math.floor((Tp - S) / bc) + 1
                starts.extend((S + bc * np.arange(1, k + 1)).tolist())
                S += k * bc
                Ep, E = S, S + bc
            i = p + 1
            if i > n:
                break
            continue
        if float(T[j]) >= S:  # no later step merges: each opens its own burst, at
            # S_i = max(T_i, S_(i-1) + B c), i.e. S_i - i B c = the running max of T_l - l B c
            # and S_j - j B c
            idx = np.arange(j + 1, n + 1, dtype=float)
            own = T[j:] - idx * bc
            run = np.maximum.accumulate(np.maximum(own, S - j * bc))
            opened = np.where(own >= run, T[j:], run + idx * bc)  # T_i itself where it is the max
            starts.extend(opened.tolist())
            Ep = (float(opened[-2]) if len(opened) >= 2 else S) + bc
            S = float(opened[-1])
            E = S + bc
            break
        i = j + 1
    return S, E, Ep, starts
