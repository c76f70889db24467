"""The scheduler policies: vLLM's (V1 chunked prefill, V0 prefill priority, multi-step,
static batching), TensorRT-LLM's and SGLang's. Each is a `sched.interface.SchedulerPolicy`; the
registry and the vLLM policies' behaviour are described in `serving/sched/registry.py`.

* `trtllm` — TensorRT-LLM in-flight batching (docs/engines.md §2; `capacityScheduler.cpp`,
  `microBatchScheduler.cpp`). `max_batch_size` is `max_num_seqs`, `max_num_tokens` is
  `max_num_batched_tokens`. Capacity policy `guaranteed_no_evict` (default): every running
  request keeps a reservation for its whole sequence, so with b = block_size

      reserved = sum_running ceil((input + outlen) / b) - blocks held,

  generations always continue (their blocks are reserved), and the queue is admitted in
  arrival order while ceil((input + output) / b) <= free - reserved; the first misfit stops
  admission (head-of-line). It never preempts: on equal lengths I/O the running concurrency is
  min(max_batch_size, floor(blocks / ceil((I + O) / b))). Micro-batch: decodes first (1 token
  each), then contexts in arrival order fill the leftover token budget; with
  `chunked_context` a truncated chunk is rounded down to whole blocks, without it a context
  runs whole or not at all (a prompt above max_num_tokens is rejected at arrival).
  Capacity policy `max_utilization`: admission checks only the blocks of the whole prompt;
  when a running request needs a block and none is free, the last started request is paused
  (recompute, back to the queue head) and nothing is admitted that step. Here it runs vLLM
  V1's running loop (admission order) rather than decodes-first; block-rounded chunks too.
* `sglang` — SGLang 0.5 (docs/engines.md §3; `managers/scheduler.py`, `schedule_policy.py`
  `PrefillAdder`, `NewTokenRatioTracker`): a step is a prefill batch or a decode batch,
  prefill first. Prefill admission (FCFS, seats `max_running_requests` = max_num_seqs,
  prefill tokens <= max_num_batched_tokens, one request mid-chunk at a time) needs, in tokens,

      extend + min(max_new - generated, 4096) < free - sum_running rho min(max_new - gen, 4096)

  with rho the new-token ratio (1.0 with `ignore_eos`); an admitted request's cached prefix
  blocks that were free leave the pool too (SGLang's prefix lock). rho starts at
  `init_new_token_ratio` (0.7), decays linearly to 0.14 x init over
  `new_token_ratio_decay_steps` (600) decode steps, returns to init when the replica is idle
  and after a retraction becomes min(1, (sum gen + 20 n) / (sum max_new + 1)) over the n
  survivors. Before a decode step that lacks blocks, decodes are retracted, fewest outputs
  first (then longest prompt), to the TAIL of the queue (recompute), keeping at least one. A
  chunked request whose next chunk lacks blocks waits outside the decode batch (retracted
  first if the decodes lack blocks too).
"""

from __future__ import annotations

from typing import Any, ClassVar

from simulator.serving.sched.interface import (
    DECODE_SEGMENT,
    Limits,
    ReplicaView,
    SchedulerLimits,
    SchedulerPolicy,
    StepPlan,
)

#: SGLang `CLIP_MAX_NEW_TOKENS`: output reserved per request is clipped at this many tokens
CLIP_MAX_NEW_TOKENS = 4096
#: SGLang `SGLANG_RETRACT_DECODE_STEPS`
RETRACT_DECODE_STEPS = 20


# ------------------------------------------------------------------ vLLM


class ChunkedPrefill(SchedulerPolicy):
    """vLLM V1: running first (decodes and prompt chunks share the budget), then admissions
    unless the step preempted."""

    name = "vllm"
    segment_when_queue_empty = True  # next_step's first branch
    PARAMS: ClassVar[dict[str, tuple[Any, Any]]] = {
        "admission_gate": ("whole_prompt", ("whole_prompt", "first_chunk")),
        "watermark": (0.0, (0.0, 1.0)),
    }

    def __init__(self, cfg: SchedulerLimits) -> None:
        super().__init__(cfg)
        self.gate_whole = self.params["admission_gate"] == "whole_prompt"

    def next_step(self, view: ReplicaView, allow_segment: bool = True) -> StepPlan:
        budget = self.cfg.max_num_batched_tokens
        batch = len(view.active)
        if batch and not view.n_prefilling:
            # every running sequence decodes
            if allow_segment and (not view.waiting or batch >= self.cfg.max_num_seqs or budget <= batch):
                return DECODE_SEGMENT
            needy = self._decode_new_blocks(view)
            if allow_segment and self._segment_ok(view, len(needy)):
                return DECODE_SEGMENT
            if budget >= batch and len(needy) <= view.kv.free_blocks:
                # if their new blocks are free, all of them run (order does not matter then)
                # and waiting requests are admitted after them
                plan = StepPlan(decode_all=True)
                plan.decode_new_blocks = needy
                self._plan_admission(view, plan, budget - batch, view.kv.free_blocks - len(needy))
                return plan
        plan = StepPlan()
        if not batch:  # an empty replica (often, at low load): nothing running to plan
            self._plan_admission(view, plan, budget, view.kv.free_blocks)
            return plan
        budget, free = self._plan_running(view, plan, budget)
        if not plan.preempt:
            self._plan_admission(view, plan, budget, free)
        return plan


class PrefillPriority(SchedulerPolicy):
    """vLLM V0 without chunked prefill: a prefill-only step whenever the head fits, else the
    running sequences; prompts never split."""

    name = "prefill-priority"
    whole_prompts = True
    checks_arrivals = True
    gate_whole = True  # blocks of the whole prompt, plus the watermark (V092 `BlockSpaceManager.can_allocate`)
    PARAMS: ClassVar[dict[str, tuple[Any, Any]]] = {"watermark": (0.0, (0.0, 1.0))}

    def admission_error(self, input_len: int) -> str | None:
        if input_len > self.cfg.max_num_batched_tokens:
            return (f"prompt of {input_len} tokens exceeds max_num_batched_tokens "
                    f"{self.cfg.max_num_batched_tokens} with chunked prefill off")
        return None

    def next_step(self, view: ReplicaView, allow_segment: bool = True) -> StepPlan:
        # the prefill-only step admits the head against the blocks free now (its decodes do
        # not run in that step), so the decodes' next blocks do not count here
        if allow_segment and view.active and not view.n_prefilling and self._segment_ok(view, 0):
            return DECODE_SEGMENT
        budget = self.cfg.max_num_batched_tokens
        plan = StepPlan()
        if view.waiting and self._head_fits(view, budget):
            self._plan_admission(view, plan, budget, view.kv.free_blocks)
        else:
            self._plan_running(view, plan, budget)
        return plan

    def _head_fits(self, view: ReplicaView, budget: int) -> bool:
        prompt = view.prompt_of(view.waiting[0])
        # prompt > budget: a preempted request's resumed prompt, admitted alone (`_plan_admission`)
        return (len(view.active) < self.cfg.max_num_seqs and (prompt <= budget or not view.active)
                and view.kv.blocks_for(prompt) + self._watermark_blocks(view) <= view.kv.free_blocks)


class StaticBatching(SchedulerPolicy):
    """Pre-Orca static batching: FCFS batch with KV for prompt + output reserved per member,
    served to the end of its longest member."""

    name = "static"

    def next_step(self, view: ReplicaView, allow_segment: bool = True) -> StepPlan:
        plan = StepPlan(run_to_completion=True)
        blocks = 0
        kv = view.kv
        for r in view.waiting:
            if len(plan.admit) >= self.cfg.max_num_seqs:
                break
            nb = kv.blocks_for(view.total_len(r))
            if blocks + nb > kv.free_blocks:
                break
            blocks += nb
            plan.admit.append((r, view.prompt_of(r)))
        if not plan.admit:
            plan.reject_head = "does not fit in KV memory even alone"
        return plan


class VllmV0(PrefillPriority):
    """vLLM V0 (v0.9.2) default scheduler: prefill-priority, watermark 1 % of all blocks."""

    name = "vllm-v0"
    PARAMS: ClassVar[dict[str, tuple[Any, Any]]] = {"watermark": (0.01, (0.0, 1.0))}


class VllmMultiStep(VllmV0):
    """vLLM 0.6 multi-step scheduling (`--num-scheduler-steps N`, V0 engine, docs/engines.md §1.11 and
    §1.14): a prefill step whenever the queue head fits (single step, as V0);
    otherwise a round of n = min(N, most outputs left in the batch) decode steps of the whole
    running batch, with the KV blocks of each sequence's next min(N, outputs left) tokens
    (the lookahead slots) checked at the round's start, preempting the newest while short.
    Nothing is admitted inside a round (arrivals wait for its end: TTFT += up to N steps);
    a sequence that finishes early keeps its seat and is priced to the round's end; the
    round's tokens reach the client in one burst at its end (ITL: one gap of a round, then
    N - 1 zeros). The per-round CPU saving is an overhead of the engine profile, not here."""

    name = "vllm-multistep"
    PARAMS: ClassVar[dict[str, tuple[Any, Any]]] = {**VllmV0.PARAMS, "num_scheduler_steps": (8, (1, 1024))}

    def next_step(self, view: ReplicaView, allow_segment: bool = True) -> StepPlan:
        plan = StepPlan()
        budget = self.cfg.max_num_batched_tokens
        if view.waiting and self._head_fits(view, budget):
            self._plan_admission(view, plan, budget, view.kv.free_blocks)
            return plan
        if not view.active:
            return plan
        kv, computed, generated, outlen = view.kv, view.computed, view.generated, view.outlen
        n = min(self.params["num_scheduler_steps"], max(outlen[s] - generated[s] for s in view.active))
        grow = {s: kv.blocks_to_grow(s, computed[s] + min(n, outlen[s] - generated[s])) for s in view.active}
        need, free = sum(grow.values()), kv.free_blocks
        batch = list(view.active)
        while need > free and len(batch) > 1:
            victim = batch.pop()  # the newest (V0 `Scheduler._preempt`)
            plan.preempt.append(victim)
            free += kv.reclaimable(victim)
            need -= grow[victim]
        while need > free and n > 1:  # one sequence left and short of lookahead: a shorter round
            n -= 1
            s = batch[0]
            need = kv.blocks_to_grow(s, computed[s] + min(n, outlen[s] - generated[s]))
        plan.decode_round = n
        return plan


# ------------------------------------------------------------------ TensorRT-LLM


class TrtllmCapacity(SchedulerPolicy):
    """TensorRT-LLM capacity + micro-batch scheduling (module docstring)."""

    name: ClassVar[str] = "trtllm"
    PARAMS: ClassVar[dict[str, tuple[Any, Any]]] = {
        "capacity_policy": ("guaranteed_no_evict", ("guaranteed_no_evict", "max_utilization")),
        "chunked_context": (True, (True, False)),
    }
    checks_arrivals = True

    def __init__(self, cfg: SchedulerLimits) -> None:
        super().__init__(cfg)
        self.whole_prompts = not self.params["chunked_context"]
        self.no_evict = self.params["capacity_policy"] == "guaranteed_no_evict"
        self.gate_whole = not self.no_evict  # MAX_UTILIZATION: whole-prompt blocks at context start
        if not self.no_evict:
            # vLLM V1's running loop (pause the newest), with its own default parameters
            self._util = ChunkedPrefill(Limits(cfg.max_num_batched_tokens, cfg.max_num_seqs, {}))
            self._util.whole_prompts = self.whole_prompts
            self._util.gate_whole = True

    def admission_error(self, input_len: int) -> str | None:
        if self.whole_prompts and input_len > self.cfg.max_num_batched_tokens:
            return (f"prompt of {input_len} tokens exceeds max_num_tokens "
                    f"{self.cfg.max_num_batched_tokens} with chunked context off")
        return None

    def next_step(self, view: ReplicaView, allow_segment: bool = True) -> StepPlan:
        if not self.no_evict:
            # the micro-batch scheduler chunks in block units under either capacity policy
            self._util.chunk_unit = view.kv.block_size
            return self._util.next_step(view, allow_segment)
        active, kv = view.active, view.kv
        batch = len(active)
        budget = self.cfg.max_num_batched_tokens
        avail = kv.free_blocks - self._reserved_blocks(view)
        if (batch and not view.n_prefilling and allow_segment
                and (not view.waiting or batch >= self.cfg.max_num_seqs
                     or not self._can_start(view, view.waiting[0], budget - batch, avail))):
            # nothing can start before a completion: `avail` is constant while decodes only
            # consume their reservations, and the leftover budget is too
            return DECODE_SEGMENT
        plan = StepPlan()
        computed, prompt, bs = view.computed, view.prompt, kv.block_size
        # generations first (their blocks are reserved), then contexts in arrival order
        for s in active:
            if computed[s] >= prompt[s]:
                plan.running.append((s, 1))
        budget -= len(plan.running)
        for s in active:
            remaining = prompt[s] - computed[s]
            if remaining > 0 and budget > 0:
                tokens = self._chunk(remaining, budget, bs)
                if tokens > 0:
                    plan.running.append((s, tokens))
                    budget -= tokens
        seats = self.cfg.max_num_seqs - batch
        for r in view.waiting:
            if seats <= 0 or not self._can_start(view, r, budget, avail):
                break
            tokens = self._chunk(view.prompt_of(r), budget, bs)
            plan.admit.append((r, tokens))
            avail -= kv.blocks_for(view.total_len(r))
            budget -= tokens
            seats -= 1
        return plan

    def handoff_fits(self, view: ReplicaView, r: int, prompt_len: int) -> bool:
        """GUARANTEED_NO_EVICT: a transferred request starts only when its whole reservation
        (prompt + output) fits beside the running requests' reservations, as a queued one does
        (`_can_start`); else the decodes, which never preempt, could run out of blocks."""
        if not self.no_evict:
            return super().handoff_fits(view, r, prompt_len)
        kv = view.kv
        return kv.blocks_for(view.total_len(r)) <= kv.free_blocks - self._reserved_blocks(view)

    def _chunk(self, remaining: int, budget: int, bs: int) -> int:
        """Tokens of a context this step: all if they fit, else (chunking on) the leftover
        budget rounded down to whole blocks, else 0."""
        if remaining <= budget:
            return remaining
        return 0 if self.whole_prompts else budget - budget % bs

    def _can_start(self, view: ReplicaView, r: int, budget: int, avail: int) -> bool:
        """Queued request r can start now: its whole reservation fits in the unreserved
        blocks and some of its prompt in the token budget."""
        if view.kv.blocks_for(view.total_len(r)) > avail:
            return False
        return self._chunk(view.prompt_of(r), budget, view.kv.block_size) > 0

    @staticmethod
    def _reserved_blocks(view: ReplicaView) -> int:
        """Blocks the running requests will still take: sum of ceil(final / b) - held, with
        final = max(computed + 1, prompt) + outlen - generated: input + output for the whole
        life of a request (at admission prompt + outlen, as `_can_start` counts it; after
        each token computed + 1 and generated grow together)."""
        kv = view.kv
        covered = kv.blocks_per_slot()
        computed, prompt, outlen, generated = view.computed, view.prompt, view.outlen, view.generated
        return sum(max(kv.blocks_for(max(computed[s] + 1, prompt[s]) + outlen[s] - generated[s]) - covered[s], 0)
                   for s in view.active)


class SGLang(SchedulerPolicy):
    """SGLang: prefill batch or decode batch, new-token-ratio admission, retraction (module
    docstring)."""

    name: ClassVar[str] = "sglang"
    PARAMS: ClassVar[dict[str, tuple[Any, Any]]] = {
        "ignore_eos": (False, (False, True)),
        "init_new_token_ratio": (0.7, (0.0, 1.0)),
        "min_new_token_ratio_factor": (0.14, (0.0, 1.0)),
        "new_token_ratio_decay_steps": (600.0, (1.0, 1e9)),
    }

    def __init__(self, cfg: SchedulerLimits) -> None:
        super().__init__(cfg)
        p = self.params
        self.init_ratio = p["init_new_token_ratio"]
        self.min_ratio = self.init_ratio * p["min_new_token_ratio_factor"]
        self.decay = (self.init_ratio - self.min_ratio) / p["new_token_ratio_decay_steps"]
        self.ratio = self.init_ratio
        self.segment_steps_seen = 0  # view.segment_steps at the last call (closed-form decode steps)

    def next_step(self, view: ReplicaView, allow_segment: bool = True) -> StepPlan:
        seg = view.segment_steps - self.segment_steps_seen
        if seg:
            self.segment_steps_seen = view.segment_steps
            self._decay(seg)
        if not view.active:
            self.ratio = self.init_ratio  # idle: `on_idle` resets the ratio
        plan = self._prefill_batch(view)
        if plan.running or plan.admit or not view.active:
            return plan
        kv = view.kv
        needy = self._decode_new_blocks(view)
        if view.n_prefilling:
            # the chunked prompt's next chunk lacks blocks (`_prefill_batch` planned nothing):
            # it waits, holding its blocks, and the decode batch runs without it, a step at a
            # time (decode_all and decode segments would advance it as a decode)
            computed, prompt = view.computed, view.prompt
            needy = [s for s in needy if computed[s] >= prompt[s]]
            if len(needy) > kv.free_blocks:
                # not even a block for the decodes: the chunked prompt gives its blocks back
                # first (retracted to the tail), then the decodes as usual
                return self._retract(view, needy, [s for s in view.active if computed[s] < prompt[s]])
            self._decay(1)
            plan = StepPlan()
            plan.running = [(s, 1) for s in view.active if computed[s] >= prompt[s]]
            return plan
        if len(needy) > kv.free_blocks:
            return self._retract(view, needy)
        if allow_segment and self._no_prefill_until_completion(view):
            return DECODE_SEGMENT
        self._decay(1)
        plan = StepPlan(decode_all=True)
        plan.decode_new_blocks = needy
        return plan

    def _decay(self, steps: int) -> None:
        self.ratio = max(self.ratio - self.decay * steps, self.min_ratio)

    def _output_reserve(self, view: ReplicaView, s: int) -> int:
        return min(view.outlen[s] - view.generated[s], CLIP_MAX_NEW_TOKENS)

    def _prefill_batch(self, view: ReplicaView) -> StepPlan:
        """The request mid-chunk continues first, then the queue FCFS (`PrefillAdder`)."""
        kv = view.kv
        bs = kv.block_size
        computed, prompt = view.computed, view.prompt
        budget = self.cfg.max_num_batched_tokens
        free = kv.free_blocks
        plan = StepPlan()
        covered = kv.blocks_per_slot()
        for s in view.active:
            remaining = prompt[s] - computed[s]
            if remaining > 0:
                tokens = remaining if remaining <= budget else budget - budget % bs
                need = kv.blocks_for(computed[s] + tokens) - covered[s]
                if tokens <= 0 or need > free:
                    return plan  # the chunked request alone; retry after decodes free memory
                plan.running.append((s, tokens))
                budget -= tokens
                free -= need
        rho = 1.0 if self.params["ignore_eos"] else self.ratio
        remaining_total = free * bs - sum(rho * self._output_reserve(view, s) for s in view.active
                                          if computed[s] >= prompt[s])
        seats = self.cfg.max_num_seqs - len(view.active)
        for r in view.waiting:
            if seats <= 0 or budget <= 0:
                break
            prompt_len = view.prompt_of(r)
            hit, hit_free = view.prefix_hit(r)
            extend = prompt_len - hit
            out = min(view.total_len(r) - prompt_len, CLIP_MAX_NEW_TOKENS)
            if extend + out >= remaining_total:
                break
            if extend > budget:
                if view.n_prefilling:
                    break  # one request mid-chunk at a time
                tokens = budget - budget % bs
                if tokens <= 0:
                    break
                plan.admit.append((r, tokens))  # the new chunked request closes the batch
                break
            plan.admit.append((r, extend))  # its cached prefix is referenced, not recomputed
            # locking the cached prefix takes its free blocks out of the pool (SGLang
            # `PrefillAdder._lock_node`: inc_lock_ref's delta joins rem_total_token_offset)
            remaining_total -= extend + out + bs + hit_free * bs
            budget -= extend
            seats -= 1
        return plan

    def _no_prefill_until_completion(self, view: ReplicaView) -> bool:
        """No prefill batch can form before a running request completes: no queue, no seat,
        or the head's extend + clipped output exceeds the free tokens (which only shrink
        during decode steps)."""
        if not view.waiting or len(view.active) >= self.cfg.max_num_seqs:
            return True
        r = view.waiting[0]
        prompt = view.prompt_of(r)
        need = prompt - view.prefix_hit(r)[0] + min(view.total_len(r) - prompt, CLIP_MAX_NEW_TOKENS)
        return need >= view.kv.free_blocks * view.kv.block_size

    def _retract(self, view: ReplicaView, needy: list[int], chunked: list[int] | None = None) -> StepPlan:
        """Retract (to the tail of the queue) until the decodes' new blocks fit: the `chunked`
        prompts waiting beside the decode batch first, then decodes, fewest outputs first
        (then longest prompt); one request always stays."""
        kv = view.kv
        first = chunked or []
        decoding = [s for s in view.active if s not in first] if first else view.active
        order = first + sorted(decoding, key=lambda s: (view.generated[s], -view.prompt[s]))
        needing = set(needy)
        free, need = kv.free_blocks, len(needy)
        plan = StepPlan()
        plan.preempt_to_tail = True
        for s in order[:-1]:
            if need <= free:
                break
            plan.preempt.append(s)
            free += kv.reclaimable(s)
            need -= s in needing
        gone = set(plan.preempt)
        survivors = [s for s in decoding if s not in gone]
        if all(s in gone for s in first):  # only decodes left: they run as one group
            plan.decode_all = True
            plan.decode_new_blocks = [s for s in needy if s not in gone]
        else:  # a chunked prompt still waits beside them: the decodes one by one
            plan.running = [(s, 1) for s in survivors]
        gen = sum(view.generated[s] for s in survivors)
        max_new = sum(view.outlen[s] for s in survivors)
        self.ratio = min(1.0, (gen + RETRACT_DECODE_STEPS * len(survivors)) / (max_new + 1))
        return plan
