"""vLLM V1's scheduler with speculative decoding: the step plans of verification.

With k draft tokens per sequence (vllm-project/vllm@00024d314514900f361ad072af6931e403b7f589:
vllm/v1/core/sched/scheduler.py, `Scheduler.schedule`):

* a decoding sequence asks for num_tokens_with_spec - num_computed = 1 + k tokens (its last
  sampled token and the k drafts to verify), cut to the token budget left and to
  max_model_len - 1 - num_computed; a partial prompt asks for its remainder, as without drafts;
* `allocate_slots(request, num_new_tokens, num_lookahead_tokens=L)`: blocks must cover
  computed + new tokens + L (capped at max_model_len), L = k for EAGLE/MTP heads and draft
  models (their proposals' KV), 0 for n-gram; running requests reserve L, a fresh admission
  none (`effective_lookahead_tokens = 0` when num_computed_tokens == 0); when blocks are short,
  the newest running request is preempted, as without drafts;
* the budget is `max_num_scheduled_tokens` = max_num_batched_tokens - slots x max_num_seqs,
  slots = `max_num_new_slots_for_drafting` (1 for a draft model, 0 for sequential EAGLE/MTP/
  n-gram; vllm-project/vllm@002e77c1f0ef9b19cff8b9e21cfbd6feb3d6b443:vllm/config/speculative.py
  and `VllmConfig._set_max_num_scheduled_tokens`).

There is no closed-form decode segment here: a verify step emits a random number of tokens per
sequence, so every step is planned and run (`serving/speculative.py`). Not modelled: the
lookahead a resumed (preempted) request reserves at re-admission, and async scheduling's
placeholders.
"""

from __future__ import annotations

from simulator.serving.sched.interface import ReplicaView, SchedulerLimits, StepPlan
from simulator.serving.sched.policies import ChunkedPrefill
from simulator.specs.checks import SpecError


class SpeculativeChunkedPrefill(ChunkedPrefill):
    """vLLM V1 chunked prefill with k drafts verified per decoding sequence (module docstring)."""

    name = "vllm-speculative"
    segment_when_queue_empty = False

    def __init__(self, cfg: SchedulerLimits, k: int, lookahead: int, draft_slots: int, max_model_len: int) -> None:
        super().__init__(cfg)
        self.k = k
        self.lookahead = lookahead
        self.max_model_len = max_model_len
        self.budget = cfg.max_num_batched_tokens - draft_slots * cfg.max_num_seqs
        if self.budget < 1:
            raise SpecError(f"max_num_batched_tokens: {cfg.max_num_batched_tokens} leaves no step budget once vLLM "
                            f"keeps {draft_slots} draft slot(s) for each of max_num_seqs {cfg.max_num_seqs} "
                            "sequences (raise it or lower max_num_seqs)")

    def cover(self, computed: int, tokens: int, running: bool = True) -> int:
        """Tokens a scheduled sequence's blocks must cover during the step: computed + tokens +
        the lookahead (a running sequence), at most max_model_len (`allocate_slots`)."""
        want = computed + tokens + (self.lookahead if running else 0)
        return want if want < self.max_model_len else self.max_model_len

    def next_step(self, view: ReplicaView, allow_segment: bool = True) -> StepPlan:
        plan = StepPlan()
        budget, free = self.budget, view.kv.free_blocks
        if view.active:
            budget, free = self._plan_running_spec(view, plan, budget)
        if not plan.preempt:
            self._plan_admission(view, plan, budget, free)
        return plan

    def _plan_running_spec(self, view: ReplicaView, plan: StepPlan, budget: int) -> tuple[int, int]:
        """Running sequences in admission order within the budget: a decode takes 1 + k tokens
        (fewer when the budget or max_model_len cuts it), a prompt chunk its remainder; when a
        sequence's blocks (with the lookahead) are short, preempt the newest (possibly itself).
        Fills plan.running / plan.preempt; returns (budget left, free blocks left)."""
        active, computed, prompt, kv = view.active, view.computed, view.prompt, view.kv
        free = kv.free_blocks
        bs = kv.block_size
        covered = None if kv.derived_counts else kv.blocks_per_slot()
        spec = 1 + self.k
        tail = len(active)  # active[tail:] are preempted in this step (always the newest)
        i = 0
        taken = 0
        while i < tail and budget > 0:
            s = active[i]
            i += 1
            c = computed[s]
            remaining = prompt[s] - c
            if remaining > 0:
                tokens = remaining if remaining < budget else budget
            else:
                tokens = spec if spec < budget else budget
                room = self.max_model_len - 1 - c
                if room < tokens:
                    tokens = room if room > 1 else 1
            have = covered[s] if covered is not None else -(-c // bs)
            new_blocks = -(-self.cover(c, tokens) // bs) - have
            if new_blocks < 0:
                new_blocks = 0
            while new_blocks > free:
                tail -= 1
                victim = active[tail]
                plan.preempt.append(victim)
                free += kv.reclaimable(victim)
                if victim == s:
                    break
            else:
                free -= new_blocks
                taken += new_blocks
                plan.running.append((s, tokens))
                budget -= tokens
        plan.running_blocks = taken
        return budget, free


__all__ = ["SpeculativeChunkedPrefill"]
