"""One model replica: executes the step plans of its scheduler policy over paged KV memory.

State lives in per-slot Python lists (scalar access is what scheduling does most): request id,
tokens computed (KV in cache), prompt to prefill (input, plus generated tokens after a
preemption), tokens generated, output length, time of the last token. KV blocks are counted
by `kvcache.KVCache`; the policy (`serving/sched/registry.py`) decides each step and this module applies
it: preemptions (blocks freed, the request back at the head of the queue with its generated
tokens to recompute), block allocation, admissions, then one priced step.

A step is priced by `CostModel.step_time(T, S, Ad, Ap, R, Aw, Rw, Pc)` from each scheduled
sequence's new tokens q and cached tokens p (symbols of `roofline.py`):

    T  = sum q                          S  = sequences that emit a token (p + q >= prompt)
    Ad = sum_decodes (p + 1/2)          Ap = sum_prefill q (p + q/2)
    R  = sum (p + q)                    Pc = sum_prefill p
    Aw, Rw: Ad + Ap and R with each context capped at the sliding window W.

Decode fast path (`segments.py`): when the policy returns `DECODE_SEGMENT`, a run of identical
decode steps is priced and applied in closed form.

The client view inside the engine (`client_view.py`, set by `set_client`): under async
scheduling a request that arrives while a step is in flight is `held` out of the next
scheduling decision (that step was planned before it arrived); with a client timeout every
request carries a deadline (its send time + the timeout), and a request still unfinished when a
step ends past its deadline is aborted there: out of the queue or the batch, its KV freed, ended
as failed at the deadline.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from simulator.cost.roofline import CostModel
from simulator.serving.kvcache import CeilKVCache, KVCache
from simulator.serving.prefix_cache import PrefixState, reservations_after
from simulator.serving.records import COMPLETED, PENDING, Records
from simulator.serving.sched.interface import StepPlan
from simulator.serving.sched.registry import EngineConfig, make_policy
from simulator.serving.segments import DecodeSegments
from simulator.serving.steplog import StepLog
from simulator.serving.steptime import INF, bad_step, check_step_times, step_ok
from simulator.workloads.workload import Workload

__all__ = ["Replica", "item_view"]


def item_view(a: np.ndarray) -> Any:
    """The memory of a contiguous 1-d array as a memoryview: item reads give Python ints and
    floats and item writes land in the array, at about 15 ns each against numpy's 60-100 ns
    (scalar indexing builds numpy scalars); the hot loops read and write one item at a time."""
    if a.ndim != 1 or not a.flags.c_contiguous:
        raise ValueError("item_view needs a contiguous 1-d array")
    return a.data


class Replica(DecodeSegments):
    """One model replica: a continuous-batching scheduler over paged KV memory."""

    #: a step may emit several tokens of a sequence (speculative decoding): `done_lower_bound_s`
    #: then cannot count a sequence's outputs left as steps
    emits_several: ClassVar[bool] = False

    # slots, not a __dict__: the hot loops read these attributes millions of times, and past
    # 30 attributes CPython 3.11 stops sharing instance-dict keys (slower attribute loads)
    __slots__ = ("active", "arrived", "async_lag", "bs", "cfg", "checks_arrivals", "client_on", "clock", "computed",
                 "context_sum",
                 "cost", "deadline", "deadline_after", "deadlines", "tokenizer_at", "debug", "free_slots", "held", "timeout_s", "gen_so_far", "generated", "idle_segments", "in_step", "index", "kv", "last_tok", "last_tok_of",
                 "log", "max_model_len", "max_segment_steps", "max_tokens", "n_prefilling", "on_finish", "records", "outlen",
                 "outstanding", "policy", "prefix", "prompt", "rid", "scheduled_s", "segment_steps",
                 "step_time", "waiting", "window", "wl_in", "wl_out", "in_len", "out_len",
                 "rec_first_token_s", "rec_finish_s", "rec_status", "rec_replica",
                 "stream_s", "api_free", "api_start", "api_prev", "api_members", "last_lazy_s", "min_step_s", "lb_key", "lb_s")

    def __init__(self, index: int, cost: CostModel, cfg: EngineConfig, total_blocks: int,
                 max_model_len: int, wl: Workload, records: Records, log: StepLog,
                 on_finish: Callable[[int, float], None] | None) -> None:
        self.index = index
        self.cost = cost
        self.step_time = cost.step_time
        # no step lasts less than one of a single token with no attention work (a step's time
        # grows with every statistic): what `done_lower_bound_s` counts steps in (0: unknown)
        one = cost.step_time(1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        self.min_step_s = float(one) if isinstance(one, (int, float)) and 0.0 < one < INF else 0.0
        self.lb_key: tuple[float, int] | None = None  # (clock, outstanding) of the cached lb_s
        self.lb_s = 0.0
        self.cfg = cfg
        # hot-path copies of cfg fields (one attribute load, not two, per step)
        self.max_tokens = cfg.max_num_batched_tokens
        self.max_segment_steps = cfg.max_segment_steps
        self.debug = cfg.debug
        self.policy = make_policy(cfg)
        # the policy's class flags, read per arrival / per call (a slot load is specialised by
        # CPython 3.11, a class attribute read through an instance is not)
        self.checks_arrivals = self.policy.checks_arrivals
        self.idle_segments = self.policy.segment_when_queue_empty
        self.bs = cfg.block_size
        self.max_model_len = max_model_len
        self.window = cost.model.sliding_window.window if cost.model.sliding_window else None
        # seats: never more than max_num_seqs, KV blocks (each sequence holds >= 1) or requests,
        # so a huge --max-num-seqs costs no memory
        n = max(1, min(cfg.max_num_seqs, total_blocks, wl.num_requests))
        self.rid = [-1] * n
        self.computed = [0] * n  # tokens whose KV is in cache
        self.kv: KVCache = CeilKVCache(total_blocks, cfg.block_size, self.computed)  # prefix caching swaps it
        self.prompt = [0] * n  # tokens to prefill before emitting (input + generated, after preemption)
        self.generated = [0] * n
        self.outlen = [0] * n
        self.last_tok = [0.0] * n
        self.free_slots = list(range(n - 1, -1, -1))
        self.active: list[int] = []  # slots in admission order
        self.waiting: deque[int] = deque()
        # requests that arrive with their prompt's KV already computed (the decode pool of a
        # disaggregated deployment, `disagg.py`), admitted by `before_decision`; empty here
        self.arrived: deque[int] = deque()
        self.gen_so_far: dict[int, int] = {}  # preempted requests: tokens already generated
        self.last_tok_of: dict[int, float] = {}  # preempted requests: time of their last token
        self.clock = 0.0
        # numpy, not lists: 10 M requests must not cost 10 M Python ints; scalar reads go
        # through `item_view`s of the same memory
        self.wl_in = wl.input_len
        self.wl_out = wl.output_len
        self.in_len = item_view(np.ascontiguousarray(wl.input_len, dtype=np.int64))
        self.out_len = item_view(np.ascontiguousarray(wl.output_len, dtype=np.int64))
        self.records = records
        # the per-request records, written item by item through views of their arrays
        self.scheduled_s = item_view(records.scheduled_s)  # first admission of each request
        self.rec_first_token_s = item_view(records.first_token_s)
        self.rec_finish_s = item_view(records.finish_s)
        self.rec_status = item_view(records.status)
        self.rec_replica = item_view(records.replica)
        self.log = log
        self.on_finish = on_finish
        self.outstanding = 0
        self.n_prefilling = 0  # active slots that have not finished their prompt
        self.context_sum = 0  # sum of computed over active slots (kept exact: no O(B) sum per step)
        # every active slot emitted its last token at `clock` (false after a step that left a
        # running decode out, e.g. a prefill-only step): only then is each gap of a decode
        # segment's first step that step's duration
        self.in_step = True
        # a decode step or segment that emits for every running slot marks their last tokens
        # at one time, last_lazy_s, without writing `last_tok` slot by slot (`sync_last_tok`
        # writes them when another step needs them; None: every entry is written)
        self.last_lazy_s: float | None = None
        self.segment_steps = 0  # decode steps run in closed-form segments (policies that count steps)
        self.prefix: PrefixState | None = None  # prefix caching on (`attach_prefix_cache`)
        # the client view (`set_client`): async-scheduling lag, client timeouts
        self.client_on = False  # async lag or client timeouts: `enqueue` takes the slow path
        self.async_lag = False
        self.held: deque[int] = deque()  # arrived during the step in flight: out of the next decision
        self.timeout_s: float | None = None
        self.deadline_after: float | None = None  # engine arrival -> client deadline (timeout - frontend)
        self.deadline: Any = None  # per request, its deadline (s; an item view) with timeouts on
        self.tokenizer_at: Any = None  # per request, when it reached the API server's tokenizer (s)
        self.deadlines: deque[tuple[float, int]] = deque()  # (deadline, request) in enqueue order
        # the API server's event loop streaming each step's outputs (`set_client`): stream_s
        # per output, free at api_free; the last burst started at api_start, the loop was free
        # at api_prev before it (stream_s 0: off, every time is the engine's); api_members: while
        # that burst has not begun (api_start after the step that opened it), request -> when
        # its output in it leaves, so later outputs merge into it (else None)
        self.stream_s = 0.0
        self.api_free = self.api_start = self.api_prev = -INF
        self.api_members: dict[int, float] | None = None

    def set_client(self, async_lag: bool, timeout_s: float | None = None, frontend_s: float = 0.0,
                   deadline: np.ndarray | None = None, tokenizer_reached_s: np.ndarray | None = None,
                   stream_output_s: float = 0.0) -> None:
        """The client view inside the engine (module docstring): `async_lag` holds a request that
        arrives during a step out of the next decision; `timeout_s` (with the API-server
        latency `frontend_s` between the send and the API server's tokenizer, which request r
        reached at `tokenizer_reached_s[r]`) gives each request the deadline send + timeout;
        `deadline`: an array with a slot per request to keep them in; `stream_output_s`: the API
        server's event-loop time per streamed output (`_stream_step`)."""
        self.async_lag = async_lag
        self.client_on = async_lag or timeout_s is not None
        self.stream_s = float(stream_output_s)
        if timeout_s is not None:
            if deadline is None:
                raise ValueError("set_client: a timeout needs the per-request deadline array")
            self.timeout_s = timeout_s
            self.deadline_after = timeout_s - frontend_s
            self.deadline = item_view(deadline)
            self.tokenizer_at = None if tokenizer_reached_s is None else item_view(tokenizer_reached_s)

    def attach_prefix_cache(self, hashes: Sequence[Sequence[int]], warm: bool = False, cpu_blocks: int = 0,
                            reload_s_per_block: float = 0.0) -> None:
        """Turn on prefix caching (`serving/prefix_cache.py`) with each request's block hashes."""
        self.prefix = PrefixState(self.kv, hashes, warm, cpu_blocks, reload_s_per_block)
        self.kv = self.prefix.kv

    def prefix_hit(self, r: int) -> tuple[int, int]:
        """(prompt tokens of request r in the prefix cache now, free blocks they would take);
        (0, 0) without caching."""
        return (0, 0) if self.prefix is None else self.prefix.hit(r, self.prompt_of(r))

    def prefix_hit_tokens(self, r: int) -> int:
        """Prompt tokens of request r found in the prefix cache now (0 without caching)."""
        return 0 if self.prefix is None else self.prefix.hit_tokens(r, self.prompt_of(r))

    # ---------------------------------------------------------------- state queries
    @property
    def total_blocks(self) -> int:
        return self.kv.total_blocks

    @property
    def free_blocks(self) -> int:
        return self.kv.free_blocks

    @property
    def kv_load(self) -> float:
        return self.kv.utilization

    def done_lower_bound_s(self) -> float:
        """No request of this replica ends (nor is aborted by its client) before this time: its
        running sequences need at least their outputs left in steps, each at least
        `min_step_s` (one step when anything waits: it may finish in its first; speculative
        steps emit several tokens). A closed loop's next request appears only when one ends,
        so another replica may run a decode segment up to here (`Pool.step_earliest`). Kept
        until the replica acts (its clock moves) or takes a request: meanwhile it can only
        grow (a request admitted from the queue), so the kept value stays a bound."""
        key = (self.clock, self.outstanding)
        if key == self.lb_key:
            return self.lb_s
        self.lb_key = key
        if self.waiting or self.arrived or self.held or self.emits_several or not self.active:
            steps = 1
        else:
            outlen, generated = self.outlen, self.generated
            steps = min([outlen[s] - generated[s] for s in self.active])
        t = self.clock + max(steps, 1) * self.min_step_s
        self.lb_s = min(t, self.deadlines[0][0]) if self.deadlines else t
        return self.lb_s

    def has_work(self) -> bool:
        return bool(self.active) or bool(self.waiting) or bool(self.arrived) or bool(self.held)

    def before_decision(self) -> bool:
        """Called before each scheduling decision while `arrived` holds requests; False when
        no decision can be taken now (a subclass that fills `arrived` admits them here)."""
        return True

    def prompt_of(self, r: int) -> int:
        return self.in_len[r] + self.gen_so_far.get(r, 0)

    def total_len(self, r: int) -> int:
        return self.in_len[r] + self.out_len[r]

    # ---------------------------------------------------------------- arrivals
    def enqueue(self, r: int, t: float) -> None:
        """Request r arrives at time t (the replica has been advanced to >= t or is idle)."""
        input_len = self.in_len[r]
        need = input_len + self.out_len[r]
        reason: str | None
        if need > self.max_model_len:
            reason = f"prompt+output = {need} tokens exceeds max_model_len {self.max_model_len}"
        elif -(-need // self.bs) > self.kv.total_blocks:
            reason = f"needs {need} KV tokens; the replica holds {self.kv.total_blocks * self.bs}"
        else:
            reason = self.policy.admission_error(input_len) if self.checks_arrivals else None
        self.rec_replica[r] = self.index
        if reason is not None:
            self.records.reject(r, reason, t)  # the client sees the error at once
            return
        if not (self.active or self.waiting) and self.clock < t:
            self.clock = t
            self.last_lazy_s = None  # nothing runs: no last token to mark
        if self.client_on:
            self._enqueue_client(r, t)
        else:
            self.waiting.append(r)
        self.outstanding += 1

    def _enqueue_client(self, r: int, t: float) -> None:
        """`enqueue` under the client view (`set_client`): held out of the next decision when a
        step is in flight (async lag); a deadline with a client timeout."""
        if self.async_lag and self.active:
            self.held.append(r)  # a step is in flight: the next one was planned without r
        else:
            self.waiting.append(r)
        if self.deadline_after is not None:
            # counted from when r reached the tokenizer (send + F), else from its arrival here
            d = (t if self.tokenizer_at is None else self.tokenizer_at[r]) + self.deadline_after
            self.deadline[r] = d
            self.deadlines.append((d, r))  # enqueue (and tokenizer) times never decrease: the deque stays sorted

    # ---------------------------------------------------------------- main loop
    def advance_until(self, t_limit: float, max_actions: int | None = None) -> None:
        """Run steps that start before t_limit (an arrival at t_limit joins the next step).

        `max_actions` bounds the scheduling decisions taken (a step or a decode segment).
        """
        next_step = self.policy.next_step
        # the policy answers DECODE_SEGMENT itself when nothing waits and every running
        # sequence decodes: skip the call (the common case at low load)
        idle_segments = self.idle_segments
        arrived, held, deadlines = self.arrived, self.held, self.deadlines
        done = 0
        while (self.active or self.waiting or arrived or held) and self.clock < t_limit:
            if max_actions is not None:
                if done >= max_actions:
                    break
                done += 1
            if held or deadlines:  # the client view at work (`set_client`)
                self._client_decision(t_limit)
                continue
            if arrived and not self.before_decision():
                continue
            if idle_segments and not self.waiting and not self.n_prefilling:
                self._decode_segment(t_limit)  # active is non-empty here (loop condition)
                continue
            plan = next_step(self)
            if plan.decode_segment:
                self._decode_segment(t_limit)
            else:
                self.run_plan(plan)
        if deadlines and deadlines[0][0] <= self.clock:
            # the last step ran past a deadline: the client gave up then, which the event loop
            # must hear before it handles events after that time
            self._expire()

    def _client_decision(self, t_limit: float) -> None:
        """One action of `advance_until` with held requests or client deadlines pending:
        expire what is past its deadline, else the lagged decision, else an ordinary decision
        whose decode segment stops at the next deadline."""
        deadlines = self.deadlines
        if deadlines and deadlines[0][0] <= self.clock:
            self._expire()
            return
        if self.held:
            self._lagged_decision()
            return
        if not (self.active or self.waiting or self.arrived):
            return
        if self.arrived and not self.before_decision():
            return
        limit = min(t_limit, deadlines[0][0])  # deadlines is non-empty here
        if self.idle_segments and not self.waiting and not self.n_prefilling:
            self._decode_segment(limit)
            return
        plan = self.policy.next_step(self)
        if plan.decode_segment:
            self._decode_segment(limit)
        else:
            self.run_plan(plan)

    def _lagged_decision(self) -> None:
        """Async scheduling: the step that starts now was planned when the step in flight
        began, before the `held` requests arrived. Take that decision without them (a decode
        segment of one step), then they wait with the others."""
        if (self.active or self.waiting) and not (self.arrived and not self.before_decision()):
            if self.idle_segments and not self.waiting and not self.n_prefilling:
                self._decode_segment(self.clock)  # a limit of now: one step
            else:
                plan = self.policy.next_step(self)
                if plan.decode_segment:
                    self._decode_segment(self.clock)
                else:
                    self.run_plan(plan)
        self.waiting.extend(self.held)
        self.held.clear()

    # ---------------------------------------------------------------- client timeouts
    def expire_due(self) -> bool:
        """Abort the requests whose client deadline this replica's clock has passed (a request
        that joined while the replica was ahead, inside a step that ends after its deadline,
        is due at once); True when one was due. The pool calls it on every busy replica before
        its next decision (`Pool.step_earliest`), so the abort frees its client then."""
        if self.deadlines and self.deadlines[0][0] <= self.clock:
            self._expire()
            return True
        return False

    def _expire(self) -> None:
        """Abort every request whose client deadline has passed by now (a step boundary)."""
        deadlines, status, clock = self.deadlines, self.rec_status, self.clock
        while deadlines and deadlines[0][0] <= clock:
            d, r = deadlines.popleft()
            if status[r] == PENDING:
                self._abort(r, d)

    def _abort(self, r: int, t: float) -> None:
        """The client gave up on request r at t: the server aborts it (vLLM frees a request's
        KV when its client disconnects); it ends failed at t and its client goes on."""
        slot = next((s for s in self.active if self.rid[s] == r), -1)
        if slot >= 0:
            self.log.cut_gaps += max(self.generated[slot] - 1, 0)
            self._release(slot)
        else:
            if r in self.held:
                self.held.remove(r)
            else:
                self.waiting.remove(r)
            self.log.cut_gaps += max(self.gen_so_far.pop(r, 0) - 1, 0)
            self.last_tok_of.pop(r, None)
        self.outstanding -= 1
        self.records.reject(r, f"client timeout: not finished {self.timeout_s:g} s after it was sent", t)
        if self.on_finish is not None:
            self.on_finish(r, t)

    def run_plan(self, plan: StepPlan) -> None:
        """Apply the policy's plan: preempt, allocate, admit, then price and run the step."""
        if self.last_lazy_s is not None:
            if plan.decode_all and not plan.preempt and self.in_step:
                # every running slot decodes in this step, which marks their last tokens anew
                # (`_emit_decodes`; with `in_step` each was at the clock, so none is read)
                self.last_lazy_s = None
            else:
                self.sync_last_tok()
        if plan.run_to_completion and plan.admit:
            self._static_batch([r for r, _ in plan.admit])
            return
        if plan.reject_head is not None:
            self._reject_head(plan.reject_head)
            return
        for s in plan.preempt:
            self._preempt(s, plan.preempt_to_tail)
        if plan.decode_round:
            self._decode_round(plan.decode_round)
            return
        kv = self.kv
        if plan.running:
            if self.debug:
                self._check_plan_blocks(plan)
            kv.grow_to_cover(plan.running, self.computed, plan.running_blocks)
        decodes = None
        if plan.decode_all:
            if plan.decode_new_blocks:
                kv.allocate_one_each(plan.decode_new_blocks)
            decodes = list(self.active)  # before admissions join `active`
        sched = plan.running
        if plan.admit:
            if self.prefix is None:
                admit = self._admit
                sched = sched + [admit(r, tokens) for r, tokens in plan.admit]
            else:
                after = reservations_after(plan.admit, self.bs)
                sched = sched + [self._admit(r, tokens, after[i]) for i, (r, tokens) in enumerate(plan.admit)]
        if sched or decodes:
            self._execute(sched, decodes)
        elif self.waiting and not self.active:
            # nothing runs and the head cannot be admitted: impossible after the arrival
            # check, but never spin forever
            self._reject_head("could not be scheduled on an empty replica")

    def _check_plan_blocks(self, plan: StepPlan) -> None:
        """Debug: the new blocks a plan counts for its running sequences are the ones they need
        (the count CeilKVCache uses; -1: the plan did not count them)."""
        kv = self.kv
        if plan.running_blocks >= 0 and kv.derived_counts:
            bs, computed = self.bs, self.computed
            want = sum(max(-(-(computed[s] + q) // bs) - kv.blocks_of(s), 0) for s, q in plan.running)
            if want != plan.running_blocks:
                raise AssertionError(f"replica {self.index}: plan counts {plan.running_blocks} new blocks, "
                                     f"its running sequences need {want}")

    def _reject_head(self, reason: str) -> None:
        r = self.waiting.popleft()
        # a preempted request may end here (its resumed prompt no longer fits): its tokens so
        # far stay counted in the debug ledger, as for requests cut off by the time cap
        self.log.cut_gaps += max(self.gen_so_far.pop(r, 0) - 1, 0)
        self.last_tok_of.pop(r, None)
        self.outstanding -= 1
        self.records.reject(r, reason)

    def _admit(self, r: int, tokens: int, reserved_after: int = 0) -> tuple[int, int]:
        """Request r (the head of the queue) takes a seat and the blocks of its first chunk
        (with prefix caching: its cached prefix is in cache already and not recomputed)."""
        self.waiting.popleft()
        s = self.free_slots.pop()
        self.rid[s] = r
        self.computed[s] = 0
        generated = self.gen_so_far.pop(r, -1)  # -1: never preempted, so a first admission
        if generated < 0:
            generated = 0
            self.scheduled_s[r] = self.clock
        self.prompt[s] = self.in_len[r] + generated
        self.generated[s] = generated
        self.last_tok[s] = self.last_tok_of.pop(r, 0.0)
        self.outlen[s] = self.out_len[r]
        if self.prefix is None:
            self.kv.allocate(s, -(-tokens // self.bs))
        else:
            hit, tokens = self.prefix.admit(s, r, self.prompt[s], tokens, reserved_after)
            self.computed[s] = hit
            self.context_sum += hit
            self.records.cached_tokens[r] = hit
        self.active.append(s)
        self.n_prefilling += 1
        return s, tokens

    def _preempt(self, s: int, to_tail: bool = False) -> None:
        """Recompute preemption: free the slot's blocks; it resumes from the queue head (the
        tail with `to_tail`: SGLang's retraction)."""
        r = self.rid[s]
        self.gen_so_far[r] = self.generated[s]
        self.last_tok_of[r] = self.last_tok[s]
        self.records.preemptions[r] += 1
        self._release(s)
        if to_tail:
            self.waiting.append(r)
        else:
            self.waiting.appendleft(r)

    def _release(self, s: int) -> None:
        self.kv.free(s)
        self.context_sum -= self.computed[s]
        if self.computed[s] < self.prompt[s]:
            self.n_prefilling -= 1
        self.rid[s] = -1
        self.active.remove(s)
        self.free_slots.append(s)

    # ---------------------------------------------------------------- one general step
    def _execute(self, sched: list[tuple[int, int]], dec: list[int] | None = None) -> None:
        """Price one step from each scheduled sequence's (new tokens q, cached tokens p) and
        run it; `dec` are decoding slots scheduled as a group (one token each)."""
        stats = self._step_stats(sched, dec)
        T, S, Ad, Ap, R, Aw, Rw, Pc = stats  # positional, not *stats: CPython inlines only those calls
        dt = self.step_time(T, S, Ad, Ap, R, Aw, Rw, Pc)
        try:  # the cost model's answer for this shape (`steptime.py`): a few ns per step
            ok = 0.0 < dt < INF
        except TypeError:
            ok = False
        if not ok:
            raise bad_step(dt, T, S, R)
        if self.prefix is not None and self.prefix.pending_s:
            dt += self.prefix.pending_s  # offloaded blocks reloaded before the step runs
            self.prefix.pending_s = 0.0
        prev = self.clock
        t_end = prev + dt
        lg = self.log
        batch = len(sched) + (len(dec) if dec else 0)
        lg.steps += 1
        lg.batch_token_sum += batch
        lg.busy_s += dt
        first_token_s = self.rec_first_token_s
        comp, prompt, gen, last, outl = self.computed, self.prompt, self.generated, self.last_tok, self.outlen
        regular = 0  # tokens whose gap is exactly this step (they emitted in the previous step)
        done = []
        added = n_dec = len(dec) if dec else 0
        # with the API server's stream, an inter-token gap runs between the starts of the bursts
        # that carry a request's chunks (`_stream_step`): t_chunk, this step's end unless the
        # loop is busy then. If the loop has not begun its latest burst, a request already in
        # it gets this token in the same chunk, with no gap of its own: exactly the requests
        # whose last chunk starts at t_chunk (that burst's start; no chunk starts later)
        t_chunk, merge = self._chunk_start(t_end) if self.stream_s else (t_end, None)
        rid = self.rid
        register = self.prefix.register if self.prefix is not None else None
        for s, q in sched:
            before = comp[s]
            after = before + q
            comp[s] = after
            added += q
            if register is not None and before < prompt[s]:
                register(s, after)
            if after < prompt[s]:
                continue  # a prompt chunk that does not finish the prompt: no token
            if before < prompt[s]:
                self.n_prefilling -= 1
            else:
                n_dec += 1
            g = gen[s]
            if g == 0:
                first_token_s[rid[s]] = t_end
            elif last[s] == prev:
                regular += 1
            elif last[s] == t_chunk:  # merged into its chunk in the loop's waiting burst
                lg.loop_merged(1)
            else:
                lg.gap(t_chunk - last[s], 1)
            gen[s] = g + 1
            last[s] = t_chunk
            if g + 1 >= outl[s]:
                done.append(s)
        regular += self._emit_decodes(dec, prev, t_chunk, done) if dec else 0
        self.context_sum += added
        # every running slot was in this step (a slot in mid-prompt did not emit, but then no
        # decode segment follows until its prompt is done), and every chunk started at t_end
        # (then none merged: a merge starts at the waiting burst, after t_end)
        self.in_step = batch == len(self.active) and t_chunk == t_end
        self.clock = t_end
        lg.gap(t_chunk - prev, regular)
        kv = self.kv  # _record inline: once per step
        lg.record(t_end, self.index, batch, 1.0 - kv.free_blocks / kv.total_blocks, len(self.waiting),
                  dt, 1, n_dec, stats)
        if self.debug:
            self.check()
        if self.stream_s:
            self._stream_step(t_end, sched, dec, done, merge)
        else:
            for s in done:
                self._finish(s)

    def _chunk_start(self, t_end: float) -> tuple[float, dict[int, float] | None]:
        """Where the chunks of a step ending at t_end start (`_stream_step`): with the loop
        free, at t_end; busy with a burst it has begun, when it is free; not yet at its latest
        burst, that burst's start, which the requests already in it (returned) merge into."""
        if t_end < self.api_start and self.api_members is not None:
            return self.api_start, self.api_members
        return (t_end if t_end >= self.api_free else self.api_free), None

    def _stream_step(self, t_end: float, sched: list[tuple[int, int]], dec: list[int] | None,
                     done: list[int], merge: dict[int, float] | None = None) -> None:
        """The API server streams this step's outputs (`set_client`): decodes first, in batch
        order, then the scheduled sequences that emitted, in schedule order (new requests
        last, as vLLM V1's scheduler output lists them); the output at place j (1-based)
        reaches its client at start + j c, start = max(t_end, when the loop is free). If the
        loop has not yet begun the latest burst (`merge`: its members, from `_chunk_start`),
        the outputs join that burst instead: vLLM keeps one pending output per request and
        merges a newer one into it (`RequestOutputCollector`), so a request already in the
        burst gets this token with its earlier one, at no cost, and a new one is appended.
        Each first token emitted here moves to its client time, and the `done` slots finish
        at theirs."""
        if merge is not None:  # the loop is behind: merge
            comp, prompt = self.computed, self.prompt
            at = self._join_burst(merge, (dec or []) + [s for s, _q in sched if comp[s] >= prompt[s]])
        else:
            at = self._open_burst(t_end, sched, dec, done)
        for s in done:
            self._finish(s, at[s])

    def _join_burst(self, members: dict[int, float], slots: list[int]) -> dict[int, float]:
        """`_stream_step` while the latest burst has not begun: each of `slots` (in order)
        gets its request's time in it, or is appended; returns slot -> client time."""
        c, rid, gen, first = self.stream_s, self.rid, self.generated, self.rec_first_token_s
        free = self.api_free
        at: dict[int, float] = {}
        for s in slots:
            r = rid[s]
            t = members.get(r)
            if t is None:
                free += c
                t = members[r] = free
                if gen[s] == 1:
                    first[r] = t
            at[s] = t
        self.api_free = free
        return at

    def _open_burst(self, t_end: float, sched: list[tuple[int, int]], dec: list[int] | None,
                    done: list[int]) -> dict[int, float]:
        """`_stream_step`'s burst of this step's outputs, from max(t_end, when the loop is
        free). When the loop begins it after t_end, its members are kept (`api_members`) for
        the steps that end before then. Returns the client times of the emitting slots (of
        the decodes only those in `done`, unless the members are kept)."""
        c = self.stream_s
        comp, prompt, gen, rid, first = self.computed, self.prompt, self.generated, self.rid, self.rec_first_token_s
        start = self._burst_start(t_end)
        members: dict[int, float] | None = {} if start > t_end else None
        at: dict[int, float] = {}
        pos = len(dec) if dec else 0
        if members is not None:
            for j, s in enumerate(dec or (), 1):
                at[s] = members[rid[s]] = start + j * c
        elif done and dec:  # only the finishing decodes need their place
            where = {s: j for j, s in enumerate(dec, 1)}
            for s in done:
                place = where.get(s)
                if place is not None:
                    at[s] = start + place * c
        for s, _q in sched:
            if comp[s] < prompt[s]:
                continue  # a prompt chunk that emitted nothing
            pos += 1
            t = at[s] = start + pos * c
            if gen[s] == 1:
                first[rid[s]] = t
            if members is not None:
                members[rid[s]] = t
        self.api_free = start + pos * c
        self.api_members = members
        return at

    def _burst_start(self, t_end: float) -> float:
        start = t_end if t_end >= self.api_free else self.api_free
        self.api_prev, self.api_start = self.api_free, start
        return start

    def api_ready(self, t: float) -> float:
        """When the API server's event loop takes up a request that reaches it at t: after the
        burst it is streaming then. A burst that has not begun at t comes after (the loop
        takes the request up between bursts). If the latest has not, the loop is at the burst
        before, which ends at api_prev; when the latest follows it back to back (a loop behind
        the engine), the bursts before run back to back too, each taken as long as the latest
        (exact in a decode segment's chain, whose bursts are all B c), and the one in flight
        at t ends at the first of their boundaries after t. A burst is in flight from its
        start to its end, [start, end): a request that reaches the loop at a boundary (a
        closed-loop client sends its next request when the last output of a burst reaches
        it) waits for the burst that begins there. Boundaries are computed (a chain walked
        back, or a segment's closed form), so t within 1e-9 of a burst of one counts as on it."""
        S, E, P = self.api_start, self.api_free, self.api_prev
        if t >= S:
            return t if t >= E else E
        if t >= P:
            return t
        L = E - S
        if L <= 0 or S - P > 1e-9 * L:  # not back to back: the burst before ends at P
            return P
        # the bursts [P - n L, P - (n - 1) L) back from P: the one holding t has n = ceil((P - t) / L)
        return P - (math.ceil((P - t) / L - 1e-9) - 1) * L

    def _emit_decodes(self, dec: list[int], prev: float, t_end: float, done: list[int]) -> int:
        """Each slot of `dec` decodes one token, its chunk starting at t_end (the step's end, or
        where the API server's loop takes it up: `_chunk_start`; appended to `done` when
        finished); returns how many of them emitted their previous token at `prev` (gap =
        t_end - prev). A slot whose last chunk already starts at t_end is in the loop's
        waiting burst: its token joins that chunk, with no gap."""
        comp, gen, last, outl = self.computed, self.generated, self.last_tok, self.outlen
        if self.in_step:
            # every decoding slot emitted its last token at `prev` (`in_step`, checked in
            # debug mode): each gap is this step, so no per-slot comparison; and `dec` holds
            # every running slot, so their new last token is marked once (`last_lazy_s`)
            for s in dec:
                comp[s] += 1
                g = gen[s] = gen[s] + 1
                if g >= outl[s]:
                    done.append(s)
            self.last_lazy_s = t_end
            return len(dec)
        lg = self.log
        regular = 0
        for s in dec:
            comp[s] += 1
            g = gen[s] = gen[s] + 1
            if last[s] == prev:
                regular += 1
            elif last[s] == t_end:
                lg.loop_merged(1)
            else:
                lg.gap(t_end - last[s], 1)
            last[s] = t_end
            if g >= outl[s]:
                done.append(s)
        return regular

    def _step_stats(self, sched: list[tuple[int, int]], dec: list[int] | None) -> tuple[
            float, float, float, float, float, float, float, float]:
        """The step's sufficient statistics (T, S, Ad, Ap, R, Aw, Rw, Pc), module docstring."""
        T = S = 0
        Ad = Ap = R = Aw = Rw = Pc = 0.0
        W = self.window
        comp, prompt = self.computed, self.prompt
        if dec:
            B = len(dec)
            context_sum = self.context_sum  # dec holds every active slot, and only those
            T = S = B
            Ad = context_sum + 0.5 * B
            R = float(context_sum + B)
            if W is not None:
                Aw = sum(min(comp[s] + 0.5, W) for s in dec)
                Rw = sum(min(comp[s] + 1, W) for s in dec)
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
        return T, S, Ad, Ap, R, Aw, Rw, Pc

    def _finish(self, s: int, t_client: float | None = None) -> None:
        """Slot s emitted its last token at the clock; its client sees it at `t_client` (None:
        then too)."""
        r = self.rid[s]
        if self.prefix is not None:
            self.prefix.register(s, self.computed[s])  # blocks of generated tokens a later turn re-sends
        if self.deadline_after is not None and self.clock > self.deadline[r]:
            # the step of its last token ended after the client had given up
            self.log.cut_gaps += max(self.generated[s] - 1, 0)
            self._release(s)
            self.outstanding -= 1
            t = self.deadline[r]
            self.records.reject(r, f"client timeout: not finished {self.timeout_s:g} s after it was sent", t)
            if self.on_finish is not None:
                self.on_finish(r, t)
            return
        t = self.clock if t_client is None else t_client
        self.rec_finish_s[r] = t
        self.rec_status[r] = COMPLETED
        self._release(s)
        self.outstanding -= 1
        if self.on_finish is not None:
            self.on_finish(r, t)

    def _record(self, batch: int, busy_s: float = 0.0, steps: int = 0, decode_tokens: float = 0,
                stats: tuple = StepLog._NO_STATS) -> None:
        kv = self.kv
        self.log.record(self.clock, self.index, batch, 1.0 - kv.free_blocks / kv.total_blocks, len(self.waiting),
                        busy_s, steps, decode_tokens, stats)
        if self.cfg.debug:
            self.check()

    def cut_off(self, reason: str) -> None:
        """Time cap reached: whatever is still running or waiting is rejected with `reason`."""
        self.waiting.extend(self.held)
        self.held.clear()
        self.deadlines.clear()
        for s in list(self.active):
            r = self.rid[s]
            self.log.cut_gaps += max(self.generated[s] - 1, 0)
            self._release(s)
            self.records.reject(r, reason)
        while self.waiting:
            r = self.waiting.popleft()
            self.log.cut_gaps += max(self.gen_so_far.pop(r, 0) - 1, 0)
            self.last_tok_of.pop(r, None)
            self.records.reject(r, reason)
        self.outstanding = 0

    def check(self) -> None:
        """Conservation invariants (debug mode): blocks and seats are all accounted for."""
        kv = self.kv
        for s in self.active:
            if kv.blocks_of(s) != kv.blocks_for(self.computed[s]):
                raise AssertionError(f"replica {self.index}: slot {s} holds {kv.blocks_of(s)} blocks "
                                     f"for {self.computed[s]} tokens")
        try:
            kv.check(self.active)
        except AssertionError as e:
            raise AssertionError(f"replica {self.index}: {e}") from None
        if self.context_sum != sum(self.computed[s] for s in self.active):
            raise AssertionError(f"replica {self.index}: context sum broken")
        if len(self.active) + len(self.free_slots) != len(self.rid):
            raise AssertionError(f"replica {self.index}: seat accounting broken")
        if self.n_prefilling != sum(1 for s in self.active if self.computed[s] < self.prompt[s]):
            raise AssertionError(f"replica {self.index}: prefilling count broken")
        # (with nothing running a mark is void: the next admission syncs, writing nothing)
        if self.in_step and self.active and self.last_lazy_s not in (None, self.clock):
            raise AssertionError(f"replica {self.index}: last tokens marked at {self.last_lazy_s}, not at the clock")
        if self.in_step and self.last_lazy_s is None and any(self.last_tok[s] != self.clock for s in self.active
                                                       if self.computed[s] >= self.prompt[s]):
            raise AssertionError(f"replica {self.index}: a decoding slot did not emit in the last step")

    # ---------------------------------------------------------------- multi-step rounds
    def _decode_round(self, n_steps: int) -> None:
        """A multi-step round (`StepPlan.decode_round`): the running batch of B runs n_steps
        decode steps priced as a segment of B (sequences done early stay in the batch); each
        slot gains k = min(n_steps, outputs left) tokens, all delivered at the round's end
        (ITL: one gap since the slot's last delivery, then k - 1 zeros)."""
        batch = len(self.active)
        context_sum = self.context_sum
        d0 = self._first_decode_step_s(batch, context_sum)
        line = self._decode_line(batch, context_sum, d0, n_steps)
        if line is not None:
            t_end = self.clock + n_steps * line[0] + line[1] * n_steps * (n_steps - 1) / 2
        else:
            t_end = self.clock + float(np.sum(self._decode_step_times(batch, context_sum, n_steps)))  # checked there
        computed, generated, outlen, last, kv, lg = self.computed, self.generated, self.outlen, self.last_tok, self.kv, self.log
        # the gaps run from where the round's chunks start (`_chunk_start`); a request in the
        # API server's waiting burst (its last chunk starts there) merges the round's tokens
        t_chunk, merge = self._chunk_start(t_end) if self.stream_s else (t_end, None)
        done = []
        for s in self.active:
            k = min(n_steps, outlen[s] - generated[s])
            kv.allocate(s, kv.blocks_to_grow(s, computed[s] + k))  # before computed grows (CeilKVCache)
            computed[s] += k
            self.context_sum += k
            generated[s] += k
            if last[s] == t_chunk:
                lg.loop_merged(k)
            else:
                lg.gap(t_chunk - last[s], 1)
                lg.gap(0.0, k - 1)
                last[s] = t_chunk
            if generated[s] >= outlen[s]:
                done.append(s)
        lg.steps += n_steps
        lg.batch_token_sum += batch * n_steps
        lg.busy_s += t_end - self.clock
        self.clock = t_end
        self.in_step = t_chunk == t_end
        self._record(batch)
        if self.stream_s:  # one burst at the round's end, as a step's: each slot's k tokens one output
            self._stream_step(t_end, [], list(self.active), done, merge)
        else:
            for s in done:
                self._finish(s)

    # ---------------------------------------------------------------- static batching
    def _static_batch(self, batch: list[int]) -> None:
        """Pre-Orca baseline: prefill the batch in one step, decode until its longest member
        ends; nobody joins until the whole batch is done (blocks for prompt + output of each
        member are reserved meanwhile)."""
        for _ in batch:
            self.waiting.popleft()
        blocks = sum(self.kv.blocks_for(self.total_len(r)) for r in batch)
        ins = self.wl_in[batch].astype(float)
        outs = self.wl_out[batch]
        B = len(batch)
        W = self.window
        Ap = float(np.sum(ins * ins / 2.0))
        R = float(ins.sum())
        Aw = float(np.sum(ins * np.minimum(ins / 2.0, W))) if W else Ap
        Rw = float(np.minimum(ins, W).sum()) if W else R
        t0 = self.clock
        d_first = self.step_time(float(ins.sum()), float(B), 0.0, Ap, R, Aw, Rw)
        if not step_ok(d_first):
            raise bad_step(d_first, ins.sum(), B, R)
        t_first = t0 + d_first
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
        dts = (check_step_times(self.cost.step_times(float(B), float(B), Ad, 0.0, Rr, Awd, Rwd), B, B, Rr)
               if longest > 1 else np.zeros(0))
        ends = t_first + np.concatenate([[0.0], np.cumsum(dts)])
        for j, r in enumerate(batch):
            self.records.scheduled_s[r] = t0
            self.records.first_token_s[r] = t_first
            self.records.finish_s[r] = ends[outs[j] - 1]
            self.records.status[r] = COMPLETED
            if outs[j] > 1:
                self.log.segment(dts[: outs[j] - 1], 1)
        self.log.steps += 1 + len(dts)
        self.log.batch_token_sum += B * (1 + len(dts))
        self.log.busy_s += float(ends[-1] - t0)
        self.clock = float(ends[-1])
        self.log.peak_kv = max(self.log.peak_kv, blocks / self.kv.total_blocks)
        n_dec = len(dts)
        stats = (float(ins.sum()) + B * n_dec, float(B * (1 + n_dec)), float(Ad.sum()) if n_dec else 0.0, Ap,
                 R + (float(Rr.sum()) if n_dec else 0.0), Aw + (float(Awd.sum()) if n_dec else 0.0),
                 Rw + (float(Rwd.sum()) if n_dec else 0.0), 0.0)
        self._record(B, float(ends[-1] - t0), 1 + n_dec, B * n_dec, stats)
        self.outstanding -= B
        if self.on_finish is not None:
            for j, r in sorted(enumerate(batch), key=lambda x: ends[outs[x[0]] - 1]):
                self.on_finish(r, float(ends[outs[j] - 1]))
