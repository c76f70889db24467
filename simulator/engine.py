"""Discrete-event simulation of LLM serving: continuous batching on one or more replicas.

`simulate(cost, workload, config)` is a pure function: a step-cost model and a request stream
in, a `SimResult` out (per-request records as numpy arrays / a tidy DataFrame, pooled
inter-token latencies, a timeline). Behaviour follows `SERVING_MODEL.md` (vLLM's scheduler):

* each step: running sequences first (a decode takes 1 token of budget, a partial prompt its
  next chunk), then waiting requests first-come-first-served while token budget, seats and
  KV blocks remain; a long prompt is split into chunks across steps;
* KV memory is paged; when a running sequence needs a block and none is free, the most
  recently admitted sequence is preempted (blocks freed, recomputed later from the head of
  the queue);
* a request that can never fit is rejected at arrival with a reason.

Speed: state lives in fixed-size numpy slot arrays. When a step is pure decode (no prompt
to prefill, nothing to admit), the following steps differ only by context growth, so the
engine prices a whole run of them in one vectorised call and jumps to the next event
(a completion, a KV block shortage, or the next arrival). Completions are known by step
index (remaining output tokens), so the per-step Python work is O(1).
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .roofline import CostModel
from .specs import SpecError
from .workload import Workload

SCHEDULERS = ("vllm", "prefill-priority", "static")
ROUTERS = ("round-robin", "least-outstanding", "least-kv")

# request status codes
PENDING, COMPLETED, REJECTED = 0, 1, 2


@dataclass(frozen=True)
class EngineConfig:
    """Limits of one replica's scheduler (vLLM's names)."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_size: int = 16
    scheduler: str = "vllm"
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    kv_capacity_tokens: int | None = None  # override the memory model (tests, what-ifs)
    max_segment_steps: int = 4096
    max_duration_s: float | None = None  # simulated-time cap: what is unfinished then is cut off
    debug: bool = False  # check conservation invariants while running

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size", "max_segment_steps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise SpecError(f"{name}: {v!r} must be an integer >= 1")
        if self.scheduler not in SCHEDULERS:
            raise SpecError(f"scheduler: {self.scheduler!r} is not one of {', '.join(SCHEDULERS)}")
        if not (0 < self.gpu_memory_utilization <= 1):
            raise SpecError(f"gpu_memory_utilization: {self.gpu_memory_utilization!r} must be in (0, 1]")
        if self.max_duration_s is not None and not (self.max_duration_s > 0):
            raise SpecError(f"max_duration_s: {self.max_duration_s!r} must be > 0 seconds")
        for name in ("max_model_len", "kv_capacity_tokens"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1):
                raise SpecError(f"{name}: {v!r} must be an integer >= 1 (or omitted)")
        if self.kv_capacity_tokens is not None and self.kv_capacity_tokens < self.block_size:
            raise SpecError(f"kv_capacity_tokens: {self.kv_capacity_tokens!r} must be >= block_size")


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

    def records(self) -> pd.DataFrame:
        """Tidy per-request table (one row per request), times in seconds."""
        ttft = self.first_token_s - self.arrival_s
        e2el = self.finish_s - self.arrival_s
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(self.output_len > 1, (e2el - ttft) / (self.output_len - 1), np.nan)
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
            "tpot_s": tpot,
            "e2el_s": e2el,
            "preemptions": self.preemptions,
            "replica": self.replica,
            "status": status,
            "reason": reason,
        })


class _Log:
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
        self.line_d0, self.line_slope = array("d"), array("d")
        self.line_n, self.line_w = array("q"), array("q")
        self.tl = array("d")  # flat rows of TL_COLUMNS
        self.tl_max = timeline_max_points
        self.tl_stride = 1
        self.tl_skip = 0
        self.steps = 0
        self.batch_token_sum = 0.0  # sum over steps of sequences in the step
        self.busy_s = 0.0
        self.peak_kv = 0.0
        self.cut_gaps = 0  # inter-token gaps of requests cut off by max_duration_s (debug ledger)

    def gap(self, value: float, count: int) -> None:
        if count:
            self.gap_v.append(value)
            self.gap_n.append(count)
            self.itl_stored += 1

    TL_COLUMNS = ("time_s", "replica", "batch_size", "kv_utilization", "queue_length")

    def record(self, t: float, replica: int, batch: int, kv: float, queue: int) -> None:
        if kv > self.peak_kv:
            self.peak_kv = kv
        self.tl_skip += 1
        if self.tl_skip < self.tl_stride:
            return
        self.tl_skip = 0
        if len(self.tl) >= 5 * self.tl_max:
            # decimate: keep every other row, sample half as often from now on
            rows = np.frombuffer(self.tl, dtype=float).reshape(-1, 5)[::2]
            self.tl = array("d", rows.ravel().tobytes())
            self.tl_stride *= 2
        self.tl.extend((t, replica, batch, kv, queue))

    def timeline(self) -> pd.DataFrame:
        rows = np.frombuffer(self.tl, dtype=float).reshape(-1, 5) if len(self.tl) else np.zeros((0, 5))
        df = pd.DataFrame(rows, columns=list(self.TL_COLUMNS))
        return df.astype({"replica": np.int64, "batch_size": np.int64, "queue_length": np.int64})

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
        self.line_d0.append(d0)
        self.line_slope.append(slope)
        self.line_n.append(n)
        self.line_w.append(weight)
        self.itl_stored += n
        if self.itl_stored > self.ITL_EXACT_LIMIT:
            self._fold()

    def _exact(self) -> tuple[np.ndarray, np.ndarray]:
        vals = [np.frombuffer(self.gap_v, dtype=float) if len(self.gap_v) else np.zeros(0)]
        cnts = [np.frombuffer(self.gap_n, dtype=np.int64) if len(self.gap_n) else np.zeros(0, dtype=np.int64)]
        if len(self.line_n):
            n = np.frombuffer(self.line_n, dtype=np.int64)
            starts = np.cumsum(n) - n
            j = np.arange(int(n.sum()), dtype=float) - np.repeat(starts, n)
            vals.append(np.repeat(np.frombuffer(self.line_d0, dtype=float), n)
                        + np.repeat(np.frombuffer(self.line_slope, dtype=float), n) * j)
            cnts.append(np.repeat(np.frombuffer(self.line_w, dtype=np.int64), n))
        for ch, w in zip(self.itl_chunks, self.itl_weights, strict=True):
            vals.append(ch)
            cnts.append(np.full(len(ch), w, dtype=np.int64))
        return np.concatenate(vals), np.concatenate(cnts)

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
        self.line_d0, self.line_slope = array("d"), array("d")
        self.line_n, self.line_w = array("q"), array("q")
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
        u, inv = np.unique(v, return_inverse=True)
        return u, np.bincount(inv, weights=c, minlength=len(u)).astype(np.int64)


class Replica:
    """One model replica: a continuous-batching scheduler over paged KV memory.

    Per-slot state is kept in plain Python lists (scalar access is what the scheduler does
    most); a run of identical decode steps is priced in one vectorised call.
    """

    def __init__(self, index: int, cost: CostModel, cfg: EngineConfig, total_blocks: int,
                 max_model_len: int, wl: Workload, out: dict[str, Any], log: _Log,
                 on_finish: Callable[[int, float], None]) -> None:
        self.index = index
        self.cost = cost
        self.step_time = cost.step_time
        self.cfg = cfg
        self.bs = cfg.block_size
        self.total_blocks = total_blocks
        self.free_blocks = total_blocks
        self.max_model_len = max_model_len
        self.window = cost.model.sliding_window.window if cost.model.sliding_window else None
        # seats: never more than max_num_seqs, KV blocks (each sequence holds >= 1) or requests,
        # so a huge --max-num-seqs costs no memory
        n = max(1, min(cfg.max_num_seqs, total_blocks, wl.num_requests))
        self.rid = [-1] * n
        self.computed = [0] * n  # tokens whose KV is in cache
        self.prompt = [0] * n  # tokens to prefill before emitting (input + generated, after preemption)
        self.generated = [0] * n
        self.outlen = [0] * n
        self.order = [0] * n
        self.last_tok = [0.0] * n
        self.free_slots = list(range(n - 1, -1, -1))
        self.active: list[int] = []  # slots in admission order
        self.waiting: deque[int] = deque()
        self.gen_so_far: dict[int, int] = {}  # preempted requests: tokens already generated
        self.last_tok_of: dict[int, float] = {}  # preempted requests: time of their last token
        self.clock = 0.0
        self.admit_counter = 0
        # numpy, not lists: 10 M requests must not cost 10 M Python ints (read with int())
        self.wl_in = wl.input_len
        self.wl_out = wl.output_len
        self.out = out
        self.log = log
        self.on_finish = on_finish
        self.outstanding = 0
        self.n_prefilling = 0  # active slots that have not finished their prompt

    # ---------------------------------------------------------------- state queries
    @property
    def kv_load(self) -> float:
        return 1.0 - self.free_blocks / self.total_blocks

    def has_work(self) -> bool:
        return bool(self.active) or bool(self.waiting)

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.bs)

    # ---------------------------------------------------------------- arrivals
    def enqueue(self, r: int, t: float) -> None:
        """Request r arrives at time t (the replica has been advanced to >= t or is idle)."""
        need = int(self.wl_in[r]) + int(self.wl_out[r])
        reason = None
        if need > self.max_model_len:
            reason = f"prompt+output = {need} tokens exceeds max_model_len {self.max_model_len}"
        elif self.blocks_for(need) > self.total_blocks:
            reason = f"needs {need} KV tokens; the replica holds {self.total_blocks * self.bs}"
        elif self.cfg.scheduler == "prefill-priority" and int(self.wl_in[r]) > self.cfg.max_num_batched_tokens:
            reason = (f"prompt of {int(self.wl_in[r])} tokens exceeds max_num_batched_tokens "
                      f"{self.cfg.max_num_batched_tokens} with chunked prefill off")
        self.out["replica"][r] = self.index
        if reason is not None:
            self.out["status"][r] = REJECTED
            self.out["reasons"][r] = reason
            return
        if not self.has_work() and self.clock < t:
            self.clock = t
        self.waiting.append(r)
        self.outstanding += 1

    # ---------------------------------------------------------------- main loop
    def advance_until(self, t_limit: float, max_actions: int | None = None) -> None:
        """Run steps that start before t_limit (an arrival at t_limit joins the next step).

        `max_actions` bounds the scheduling decisions taken (a step or a decode segment).
        """
        static = self.cfg.scheduler == "static"
        done = 0
        while (self.active or self.waiting) and self.clock < t_limit:
            if max_actions is not None and done >= max_actions:
                return
            done += 1
            if static:
                self._static_batch()
            elif self._pure_decode_ready():
                self._decode_segment(t_limit)
            else:
                self._step()

    def _pure_decode_ready(self) -> bool:
        """True when the next step is decode-only and nothing can be admitted."""
        a = self.active
        if not a or self.n_prefilling:
            return False
        if not self.waiting:
            return True
        B = len(a)
        cfg = self.cfg
        if B >= cfg.max_num_seqs or cfg.max_num_batched_tokens <= B:
            return True
        # could the head be admitted right now? (KV for its first chunk after the decodes)
        r = self.waiting[0]
        p = self._prompt_of(r)
        first = p if cfg.scheduler == "prefill-priority" else min(p, cfg.max_num_batched_tokens - B)
        comp, bs = self.computed, self.bs
        need_next = sum(1 for s in a if comp[s] % bs == 0)  # last block full: the next token needs one
        return self.blocks_for(first) + need_next > self.free_blocks

    def _prompt_of(self, r: int) -> int:
        return int(self.wl_in[r]) + self.gen_so_far.get(r, 0)

    # ---------------------------------------------------------------- decode segments
    def _decode_segment(self, t_limit: float) -> None:
        """Run k identical decode steps at once (k up to the next completion, KV shortage,
        or the last step that starts before t_limit)."""
        a = self.active
        B = len(a)
        if self.cfg.max_num_batched_tokens < B:
            self._step()
            return
        bs = self.bs
        comp, gen, outl = self.computed, self.generated, self.outlen
        cs_ = [comp[s] for s in a]
        c_sum = sum(cs_)
        k_fin = min([outl[s] - gen[s] for s in a])
        # KV: after i = q*bs + r steps the batch needs B*q + #{fill >= bs - r + 1} new blocks,
        # fill = (c - 1) % bs + 1 the tokens in a slot's last block
        free = self.free_blocks
        k_max = min(k_fin, self.cfg.max_segment_steps)
        if free < B * (k_max // bs + 1):  # otherwise k_max steps cannot run out of blocks
            hist = [0] * (bs + 2)  # hist[f]: slots whose last block holds f tokens (1..bs)
            for c in cs_:
                hist[(c - 1) % bs + 1] += 1
            q0 = free // B
            rem_free = free - B * q0
            ge = 0
            r_max = 0
            for r in range(1, bs):
                ge += hist[bs - r + 1]
                if ge > rem_free:
                    break
                r_max = r
            k_max = min(k_max, q0 * bs + r_max)
        if k_max <= 0:
            self._step()  # a block is needed now: the full scheduler preempts
            return
        Ad0 = c_sum + 0.5 * B
        R0 = float(c_sum + B)
        W = self.window
        dt = None
        line = None  # (d0, slope): step j of the segment lasts d0 + slope * j
        clock = self.clock
        st = self.step_time
        if W is None:
            d0 = st(B, B, Ad0, 0.0, R0)
        else:
            d0 = st(B, B, Ad0, 0.0, R0, sum(min(c + 0.5, W) for c in cs_), sum(min(c + 1, W) for c in cs_))
        if t_limit != math.inf:
            # steps only lengthen as context grows: at most (t_limit - clock)/d0 + 1 start in time
            fit = (t_limit - clock) / d0  # may overflow to inf for far-off limits
            if fit < k_max:
                k_max = max(1, int(fit) + 1)
        if W is None:
            if k_max == 1:
                line = (d0, 0.0)
            else:
                # with T = B fixed only the attention terms grow, linearly in the step index:
                # price the second and the last step and use the line when it fits exactly
                d1 = st(B, B, Ad0 + B, 0.0, R0 + B)
                slope = d1 - d0
                dl = d1 if k_max == 2 else st(B, B, Ad0 + B * (k_max - 1), 0.0, R0 + B * (k_max - 1))
                if abs(d0 + slope * (k_max - 1) - dl) <= 1e-12 * dl:
                    line = (d0, slope)
        if line is not None:
            d0, slope = line
            # steps that start before t_limit: start_j = clock + j d0 + slope j (j-1)/2
            n = k_max
            if t_limit != math.inf and k_max > 1:
                # n = #{j < k_max: j d0 + slope j (j-1)/2 < delta}: the quadratic's root, then
                # an exact check of the neighbours (the start times are increasing in j)
                delta = t_limit - clock
                h = slope / 2.0
                b = d0 - h
                if h > 1e-15 * d0:
                    root = (-b + math.sqrt(b * b + 4.0 * h * delta)) / (2.0 * h)
                else:
                    root = delta / d0
                n = max(1, min(k_max, int(root) + 1))
                while n > 1 and clock + (n - 1) * d0 + slope * (n - 1) * (n - 2) / 2 >= t_limit:
                    n -= 1
                while n < k_max and clock + n * d0 + slope * n * (n - 1) / 2 < t_limit:
                    n += 1
            t_end = clock + n * d0 + slope * n * (n - 1) / 2
        else:
            i = np.arange(k_max, dtype=float)
            Ad = Ad0 + B * i
            R = R0 + B * i
            if W is not None:
                cs = np.sort(np.array([comp[s] for s in a], dtype=float))
                Aw = _capped_sums(cs, i + 0.5, W)
                Rw = _capped_sums(cs, i + 1.0, W)
            else:
                Aw, Rw = Ad, R
            dt = self.cost.step_times(float(B), float(B), Ad, 0.0, R, Aw, Rw)
            ends = clock + np.cumsum(dt)
            n = int(np.searchsorted(ends[:-1], t_limit, side="left")) + 1 if k_max > 1 else 1
            n = min(n, k_max)
            dt = dt[:n]
            t_end = float(ends[n - 1])
        # apply n decode steps to every active slot; a slot holds ceil(computed / bs) blocks,
        # so the blocks taken are B * (n // bs) + #{fill >= bs - n % bs + 1}
        last = self.last_tok
        done = []
        r = n % bs
        thr = bs - r if r else bs  # (c - 1) % bs >= thr: the slot crosses one more block boundary
        cross = 0
        for s in a:
            c = comp[s]
            if (c - 1) % bs >= thr:
                cross += 1
            comp[s] = c + n
            g = gen[s] + n
            gen[s] = g
            last[s] = t_end
            if g >= outl[s]:
                done.append(s)
        self.free_blocks -= B * (n // bs) + cross
        lg = self.log
        if line is not None:
            lg.segment_line(line[0], line[1], n, B)
        else:
            lg.segment(dt, B)
        lg.steps += n
        lg.batch_token_sum += B * n
        lg.busy_s += t_end - self.clock
        self.clock = t_end
        self._record(B)
        for s in done:
            self._finish(s)

    # ---------------------------------------------------------------- one general step
    def _step(self) -> None:
        cfg = self.cfg
        budget = cfg.max_num_batched_tokens
        sched: list[tuple[int, int]] = []  # (slot, new tokens)
        preempted = False
        prefill_priority = cfg.scheduler == "prefill-priority"
        comp, prompt, bs = self.computed, self.prompt, self.bs
        a = self.active
        B = len(a)
        if not prefill_priority and B and not self.n_prefilling and budget >= B:
            # every running sequence decodes: if their new blocks are free, all of them run
            # (order does not matter then) and waiting requests are admitted after them
            nb = sum(1 for s in a if comp[s] % bs == 0)
            if nb <= self.free_blocks:
                self.free_blocks -= nb
                dec = list(a)
                self._execute(self._admit(budget - B, whole_prompts=False), dec)
                return
        # prefill-priority: if anything waits and can be admitted, run a prefill-only step
        if prefill_priority and self.waiting and self._can_admit_head(budget):
            sched = self._admit(budget, whole_prompts=True)
        else:
            rid = self.rid
            for s in list(self.active):
                if preempted and rid[s] < 0:
                    continue  # preempted earlier in this loop
                if budget <= 0:
                    break
                c = comp[s]
                rem = prompt[s] - c
                if rem <= 0:  # a decode: one token, a new block when the last one is full
                    need = 1
                    nb = 1 if c % bs == 0 else 0
                else:
                    need = rem if prefill_priority else min(rem, budget)
                    if need > budget:
                        continue
                    nb = -(-(c + need) // bs) + (-c // bs)  # ceil(new) - ceil(old)
                ok = True
                while nb > self.free_blocks:
                    order = self.order
                    victim = max(self.active, key=lambda x: order[x])
                    self._preempt(victim)
                    preempted = True
                    if victim == s:
                        ok = False
                        break
                if not ok:
                    continue
                self.free_blocks -= nb
                sched.append((s, need))
                budget -= need
            if not preempted and not prefill_priority:
                sched += self._admit(budget, whole_prompts=False)
        if not sched:
            if self.waiting and not self.active:
                # nothing runs and the head cannot be admitted: impossible after the
                # arrival check, but never spin forever
                r = self.waiting.popleft()
                self.outstanding -= 1
                self.out["status"][r] = REJECTED
                self.out["reasons"][r] = "could not be scheduled on an empty replica"
            return
        self._execute(sched)

    def _can_admit_head(self, budget: int) -> bool:
        p = self._prompt_of(self.waiting[0])
        return (len(self.active) < self.cfg.max_num_seqs and p <= budget
                and self.blocks_for(p) <= self.free_blocks)

    def _admit(self, budget: int, whole_prompts: bool) -> list[tuple[int, int]]:
        out = []
        max_seqs = self.cfg.max_num_seqs
        while self.waiting and budget > 0 and len(self.active) < max_seqs:
            r = self.waiting[0]
            p = self._prompt_of(r)
            need = p if whole_prompts else min(p, budget)
            if need > budget:
                break
            nb = -(-need // self.bs)
            if nb > self.free_blocks:
                break
            self.waiting.popleft()
            s = self.free_slots.pop()
            self.rid[s] = r
            self.computed[s] = 0
            self.prompt[s] = p
            self.generated[s] = self.gen_so_far.pop(r, 0)
            self.last_tok[s] = self.last_tok_of.pop(r, 0.0)
            self.outlen[s] = int(self.wl_out[r])
            self.free_blocks -= nb
            self.order[s] = self.admit_counter
            self.admit_counter += 1
            self.active.append(s)
            self.n_prefilling += 1
            out.append((s, need))
            budget -= need
        return out

    def _preempt(self, s: int) -> None:
        r = self.rid[s]
        self.free_blocks += -(-self.computed[s] // self.bs)  # a slot holds ceil(computed / bs)
        self.gen_so_far[r] = self.generated[s]
        self.last_tok_of[r] = self.last_tok[s]
        self.out["preemptions"][r] += 1
        self._release(s)
        self.waiting.appendleft(r)

    def _release(self, s: int) -> None:
        if self.computed[s] < self.prompt[s]:
            self.n_prefilling -= 1
        self.rid[s] = -1
        self.active.remove(s)
        self.free_slots.append(s)

    def _execute(self, sched: list[tuple[int, int]], dec: list[int] | None = None) -> None:
        """Price one step from each scheduled sequence's (new tokens q, cached tokens p);
        `dec` are decoding slots scheduled as a group (one token each)."""
        T = S = 0
        Ad = Ap = R = Aw = Rw = Pc = 0.0
        W = self.window
        comp, prompt = self.computed, self.prompt
        if dec:
            B = len(dec)
            cs_ = [comp[s] for s in dec]
            c_sum = sum(cs_)
            T = S = B
            Ad = c_sum + 0.5 * B
            R = float(c_sum + B)
            if W is not None:
                Aw = sum(min(c + 0.5, W) for c in cs_)
                Rw = sum(min(c + 1, W) for c in cs_)
        for s, q in sched:
            p = comp[s]
            T += q
            R += p + q
            if q == 1 and p >= prompt[s]:
                Ad += p + 0.5
                if W is not None:
                    Aw += min(p + 0.5, W)
            else:
                Ap += q * (p + q / 2.0)
                Pc += p
                if W is not None:
                    Aw += q * min(p + q / 2.0, W)
            if W is not None:
                Rw += min(p + q, W)
            if p + q >= prompt[s]:
                S += 1
        if W is None:
            Aw, Rw = Ad + Ap, R
        dt = self.step_time(T, S, Ad, Ap, R, Aw, Rw, Pc)
        prev = self.clock
        t_end = prev + dt
        lg = self.log
        lg.steps += 1
        lg.batch_token_sum += len(sched) + (len(dec) if dec else 0)
        lg.busy_s += dt
        out_first = self.out["first_token_s"]
        gen, last, outl = self.generated, self.last_tok, self.outlen
        regular = 0
        done = []
        for s, q in sched:
            c0 = comp[s]
            c1 = c0 + q
            comp[s] = c1
            p_ = prompt[s]
            if c1 < p_:
                continue  # a prompt chunk that does not finish the prompt: no token
            if c0 < p_:
                self.n_prefilling -= 1
            g = gen[s]
            if g == 0:
                out_first[self.rid[s]] = t_end
            elif last[s] == prev:
                regular += 1  # emitted in the previous step too: the gap is this step
            else:
                lg.gap(t_end - last[s], 1)
            gen[s] = g + 1
            last[s] = t_end
            if g + 1 >= outl[s]:
                done.append(s)
        if dec:
            for s in dec:
                comp[s] += 1
                g = gen[s] + 1
                gen[s] = g
                if last[s] == prev:
                    regular += 1
                else:
                    lg.gap(t_end - last[s], 1)
                last[s] = t_end
                if g >= outl[s]:
                    done.append(s)
        self.clock = t_end
        lg.gap(t_end - prev, regular)
        self._record(len(sched) + (len(dec) if dec else 0))
        for s in done:
            self._finish(s)

    def _finish(self, s: int) -> None:
        r = self.rid[s]
        self.out["finish_s"][r] = self.clock
        self.out["status"][r] = COMPLETED
        self.free_blocks += -(-self.computed[s] // self.bs)  # a slot holds ceil(computed / bs)
        self._release(s)
        self.outstanding -= 1
        self.on_finish(r, self.clock)

    def _record(self, batch: int) -> None:
        self.log.record(self.clock, self.index, batch, 1.0 - self.free_blocks / self.total_blocks,
                        len(self.waiting))
        if self.cfg.debug:
            self.check()

    def cut_off(self, reason: str) -> None:
        """Time cap reached: whatever is still running or waiting is rejected with `reason`."""
        for s in list(self.active):
            r = self.rid[s]
            self.log.cut_gaps += max(self.generated[s] - 1, 0)
            self.free_blocks += -(-self.computed[s] // self.bs)  # a slot holds ceil(computed / bs)
            self._release(s)
            self.out["status"][r] = REJECTED
            self.out["reasons"][r] = reason
        while self.waiting:
            r = self.waiting.popleft()
            self.log.cut_gaps += max(self.gen_so_far.pop(r, 0) - 1, 0)
            self.last_tok_of.pop(r, None)
            self.out["status"][r] = REJECTED
            self.out["reasons"][r] = reason
        self.outstanding = 0

    def check(self) -> None:
        """Conservation invariants (debug mode): blocks and seats are all accounted for."""
        held = sum(-(-self.computed[s] // self.bs) for s in self.active)
        if held + self.free_blocks != self.total_blocks:
            raise AssertionError(f"replica {self.index}: blocks held {held} + free {self.free_blocks} != {self.total_blocks}")
        if len(self.active) + len(self.free_slots) != len(self.rid):
            raise AssertionError(f"replica {self.index}: seat accounting broken")
        if self.n_prefilling != sum(1 for s in self.active if self.computed[s] < self.prompt[s]):
            raise AssertionError(f"replica {self.index}: prefilling count broken")

    # ---------------------------------------------------------------- static batching
    def _static_batch(self) -> None:
        """Pre-Orca baseline: form a batch from the queue, prefill it in one step, decode
        until its longest member ends; nobody joins until the whole batch is done."""
        batch: list[int] = []
        blocks = 0
        while self.waiting and len(batch) < self.cfg.max_num_seqs:
            r = self.waiting[0]
            nb = self.blocks_for(int(self.wl_in[r]) + int(self.wl_out[r]))
            if blocks + nb > self.free_blocks:
                break
            blocks += nb
            batch.append(self.waiting.popleft())
        if not batch:
            r = self.waiting.popleft()
            self.outstanding -= 1
            self.out["status"][r] = REJECTED
            self.out["reasons"][r] = "does not fit in KV memory even alone"
            return
        ins = self.wl_in[batch].astype(float)
        outs = self.wl_out[batch]
        B = len(batch)
        W = self.window
        Ap = float(np.sum(ins * ins / 2.0))
        R = float(ins.sum())
        Aw = float(np.sum(ins * np.minimum(ins / 2.0, W))) if W else Ap
        Rw = float(np.minimum(ins, W).sum()) if W else R
        t0 = self.clock
        dt0 = self.step_time(float(ins.sum()), float(B), 0.0, Ap, R, Aw, Rw)
        t_first = t0 + dt0
        longest = int(outs.max())
        k = np.arange(1, longest, dtype=float)
        # padded batch: every member keeps a slot (and is priced) until the longest ends
        p = ins[None, :] + k[:, None] - 1
        Ad = (p + 0.5).sum(axis=1)
        Rr = (p + 1).sum(axis=1)
        if W:
            Awd = np.minimum(p + 0.5, W).sum(axis=1)
            Rwd = np.minimum(p + 1, W).sum(axis=1)
        else:
            Awd, Rwd = Ad, Rr
        dts = self.cost.step_times(float(B), float(B), Ad, 0.0, Rr, Awd, Rwd) if longest > 1 else np.zeros(0)
        ends = t_first + np.concatenate([[0.0], np.cumsum(dts)])
        self.free_blocks -= blocks
        for j, r in enumerate(batch):
            self.out["first_token_s"][r] = t_first
            self.out["finish_s"][r] = ends[outs[j] - 1]
            self.out["status"][r] = COMPLETED
            if outs[j] > 1:
                self.log.segment(dts[: outs[j] - 1], 1)
        self.log.steps += 1 + len(dts)
        self.log.batch_token_sum += B * (1 + len(dts))
        self.log.busy_s += float(ends[-1] - t0)
        self.clock = float(ends[-1])
        self.log.peak_kv = max(self.log.peak_kv, blocks / self.total_blocks)
        self.free_blocks += blocks
        self._record(B)
        self.outstanding -= B
        for j, r in sorted(enumerate(batch), key=lambda x: ends[outs[x[0]] - 1]):
            self.on_finish(r, float(ends[outs[j] - 1]))


def _capped_sums(sorted_c: np.ndarray, offsets: np.ndarray, W: float) -> np.ndarray:
    """sum_j min(c_j + o, W) for each offset o, with c sorted ascending (O((B + k) log B))."""
    prefix = np.concatenate([[0.0], np.cumsum(sorted_c)])
    n_below = np.searchsorted(sorted_c, W - offsets, side="left")  # c_j + o < W
    B = len(sorted_c)
    return prefix[n_below] + n_below * offsets + (B - n_below) * W


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
    n = workload.num_requests
    blocks, mml = kv_blocks(cost, cfg)
    out: dict[str, Any] = {
        "first_token_s": np.full(n, np.nan),
        "finish_s": np.full(n, np.nan),
        "preemptions": np.zeros(n, dtype=np.int64),
        "replica": np.full(n, -1, dtype=np.int64),
        "status": np.zeros(n, dtype=np.int8),
        "reasons": {},
    }
    log = _Log()
    closed = workload.concurrency
    arrivals = np.array(workload.arrival_s, dtype=float) if closed is None else np.full(n, np.nan)
    release: list[float] = []  # closed loop: times at which clients send their next request

    def on_finish(r: int, t: float) -> None:
        if closed is not None:
            heapq.heappush(release, t)

    # every router sends request r to one of the first r + 1 replicas (an idle replica with
    # the lowest index wins ties), so replicas beyond n would stay idle: do not build them
    reps = [Replica(i, cost, cfg, blocks, mml, workload, out, log, on_finish)
            for i in range(min(replicas, n))]
    rr = 0
    if closed is not None:
        for _ in range(min(closed, n)):
            heapq.heappush(release, 0.0)
    report_every = max(1, n // 100)
    def next_release() -> float:
        """Closed loop: the time the next client is free (the earliest completion so far)."""
        while True:
            if release:
                t = release[0]
                for p in reps:
                    p.advance_until(t)
                if release[0] < t:
                    continue  # an earlier completion appeared
                return heapq.heappop(release)
            busy = [p for p in reps if p.has_work()]
            if not busy:
                return max(p.clock for p in reps)
            min(busy, key=lambda p: p.clock).advance_until(math.inf, max_actions=1)

    cap = cfg.max_duration_s
    cut_reason = f"not finished within the simulated-time cap of {cap} s (max_duration_s)"
    for r in range(n):
        if closed is not None:
            t = next_release()
            arrivals[r] = t
        else:
            t = float(arrivals[r])
        if cap is not None and t > cap:
            # past the cap nothing more is served: the rest are cut off, with a reason
            for q in range(r, n):
                out["status"][q] = REJECTED
                out["reasons"][q] = cut_reason
            if closed is not None:
                arrivals[r:] = t
            break
        for p in reps:
            p.advance_until(t)
        if router == "round-robin":
            target = reps[rr % len(reps)]
            rr += 1
        elif router == "least-outstanding":
            target = min(reps, key=lambda p: (p.outstanding, p.index))
        else:
            target = min(reps, key=lambda p: (p.kv_load + len(p.waiting) / max(cfg.max_num_seqs, 1), p.index))
        target.enqueue(r, t)
        if out["status"][r] == REJECTED and closed is not None:
            heapq.heappush(release, t)
        if progress is not None and (r % report_every == 0 or r == n - 1):
            progress(r + 1, n)
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
        want = int(workload.output_len[done].sum()) - int(done.sum()) + log.cut_gaps
        if gaps != want:
            raise AssertionError(f"inter-token gaps {gaps} != {want} (tokens requested by completed "
                                 "requests minus first tokens, plus the gaps of requests cut off)")
        arr_d, first_d, fin_d = arrivals[done], out["first_token_s"][done], out["finish_s"][done]
        if not ((arr_d < first_d) & (first_d <= fin_d)).all():
            raise AssertionError("a completed request has first token not after arrival or finish before first token")
    itl_v, itl_c = log.itl()
    timeline = log.timeline()
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
        "chars_per_token": cost.model.chars_per_token,
        "gpus_per_replica": cost.par.num_gpus,
    }
    return SimResult(workload.arrival_s.copy() if closed is None else arrivals, workload.input_len,
                     workload.output_len, out["first_token_s"], out["finish_s"], out["preemptions"],
                     out["replica"], out["status"], out["reasons"], itl_v, itl_c,
                     timeline, meta)
