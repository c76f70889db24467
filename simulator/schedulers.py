"""Scheduler policies: given a read-only view of a replica, the plan of its next step.

A policy decides; the replica (`replica.py`) executes. Each iteration the replica asks

    next_step(view, allow_segment=True) -> StepPlan

A `StepPlan` lists, in batch order: `preempt` (running slots to preempt by recompute before
anything else, each going back to the head of the queue), `running` ((slot, new tokens) of
already admitted sequences: 1 for a decode, a chunk for a partial prompt), `admit` ((request,
new tokens) taken from the head of the queue, in order), and three special forms:
`decode_all` (every running sequence decodes one token; priced as a group, with
`decode_new_blocks` the slots whose token opens a block), `run_to_completion` (static
batching) and the shared `DECODE_SEGMENT` plan: the next steps are decode-only and nothing
can be admitted, so the replica may price a run of them in closed form (the policy says when
this fast path is valid; `allow_segment=False` asks for one ordinary step). A policy only
reads the view: KV blocks (`view.kv`), the running slots in admission order (`view.active`,
with `computed`, `prompt`, `generated`, `outlen` per slot), the queue (`view.waiting`,
`view.prompt_of(r)`); it may keep its own state (one instance per replica).

Policies (`SCHEDULERS`; parameters in `EngineConfig.policy_params`, checked against each
policy's `PARAMS`, one-line errors):

* `vllm` (alias `vllm-v1`) — vLLM V1 chunked prefill (V33 `vllm/v1/core/sched/scheduler.py` —
  `Scheduler.schedule`): running sequences first in admission order, a decode taking 1 token
  of the `max_num_batched_tokens` budget and a partial prompt min(remaining, budget); when a
  running sequence needs a KV block and none is free, the newest running sequence is
  preempted (`Scheduler._preempt_request`), and no new request is admitted in a step that
  preempted; then the queue FCFS while budget, seats (`max_num_seqs`) and blocks remain,
  stopping at the first that does not fit. `admission_gate`: "whole_prompt" (default, V33
  `scheduler_reserve_full_isl`: blocks for the whole remaining prompt net of prefix-cache
  hits, `view.prefix_hit_tokens(r)`, plus `watermark` x all blocks, must be free) or
  "first_chunk" (<= V0.11: blocks for the tokens scheduled now; thrashes on long prompts at
  saturation, issue 13). `watermark` default 0.
* `prefill-priority` — vLLM V0 without chunked prefill (V092 `vllm/core/scheduler.py` —
  `Scheduler._schedule_default`): if the head of the queue fits (whole prompt within the
  budget, a seat, its blocks + `watermark` x all blocks), the step prefills whole prompts
  only; otherwise it runs the running sequences (whole remaining prompts, never split). A
  prompt longer than the budget is rejected at arrival. `watermark` default 0.
* `vllm-v0` — the same with V0's default watermark 0.01 (`BlockSpaceManager.can_allocate`).
* `vllm-multistep` — vLLM 0.6 `--num-scheduler-steps N` on V0 (`num_scheduler_steps`, 8):
  decode rounds of N steps as one `decode_round` plan (see `VllmMultiStep`).
* `trtllm`, `sglang` — TensorRT-LLM capacity scheduling and SGLang (`policies.py`).
* `static` — pre-Orca static batching (Yu et al., OSDI 2022, contrast case): a batch is formed
  from the queue (KV for prompt + output reserved per member), prefilled in one step and
  decoded until its longest member ends; nobody joins meanwhile.

How a policy fits this interface: admission checks live inside `next_step` (reserved blocks
= sum over `view.active` of blocks_for(prompt + outlen) − `view.kv.blocks_of(slot)` for
TensorRT-LLM's GUARANTEED_NO_EVICT); pausing or retraction goes through `preempt` (any slots;
`preempt_to_tail` sends them to the queue's tail, SGLang); policy state that counts decode
steps reads `view.segment_steps` (steps the replica ran in closed-form segments). A policy
may return `DECODE_SEGMENT` only when nothing it would decide differs until the next
completion or block shortage (e.g. SGLang's decaying ratio: only when no prefill can form at
any ratio).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np

from .kvcache import KVCache
from .specs import SpecError


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
    #: the policy's own parameters (`SchedulerPolicy.PARAMS` of `scheduler`), e.g. {"watermark": 0.01}
    policy_params: Mapping[str, Any] = field(default_factory=dict)
    # automatic prefix caching (`prefixcache.py`): off here so results stay as they were;
    # engine profiles turn it on (vLLM V1, SGLang). `warm_cache`: the cache starts holding the
    # prompts of an earlier run of the same workload (bounded by capacity)
    enable_prefix_caching: bool = False
    warm_cache: bool = False
    cpu_offload_bytes: float = 0.0  # host-memory tier for evicted prefix blocks (per replica)

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
        c = self.cpu_offload_bytes
        if isinstance(c, bool) or not isinstance(c, (int, float, np.number)) or not 0 <= c < float("inf"):
            raise SpecError(f"cpu_offload_bytes: {c!r} must be a finite number of bytes >= 0")
        if self.kv_capacity_tokens is not None and self.kv_capacity_tokens < self.block_size:
            raise SpecError(f"kv_capacity_tokens: {self.kv_capacity_tokens!r} must be >= block_size")
        SCHEDULERS[self.scheduler].resolve_params(self.policy_params)


class StepPlan:
    """The next step of one replica, in batch order (see the module docstring).

    A plain slotted class rather than a dataclass: one is built per engine step, and the
    dataclass default factories cost more than the rest of a short step's scheduling.
    """

    __slots__ = ("running", "admit", "preempt", "decode_all", "decode_new_blocks", "run_to_completion",
                 "reject_head", "decode_segment", "preempt_to_tail", "decode_round")

    def __init__(self, decode_all: bool = False, run_to_completion: bool = False,
                 decode_segment: bool = False) -> None:
        self.running: list[tuple[int, int]] = []  # (slot, new tokens) of admitted sequences
        self.admit: list[tuple[int, int]] = []  # (request id, new tokens) from the queue head
        self.preempt: list[int] = []  # slots, preempted in this order before anything else
        self.decode_all = decode_all  # every running sequence decodes one token (before `running`)
        self.decode_new_blocks: list[int] = []  # with decode_all: slots whose token needs a block
        self.run_to_completion = run_to_completion  # static batching: `admit` is served to its end
        self.reject_head: str | None = None  # reject the head of the queue with this reason
        # the next steps are decode-only with nothing to admit: the replica may run a run of
        # them in closed form (the decode fast path) and ask again at its end
        self.decode_segment = decode_segment
        self.preempt_to_tail = False  # preempted requests rejoin the queue at its tail (SGLang)
        # > 0: after `preempt`, the running batch runs this many decode steps as one multi-step
        # round (nothing joins; tokens are delivered in one burst at the round's end)
        self.decode_round = 0

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__)
        return f"StepPlan({fields})"


#: the plan "run the closed-form decode segment" (shared; never mutate it)
DECODE_SEGMENT = StepPlan(decode_segment=True)


class ReplicaView(Protocol):
    """What a policy may read of a replica (it must not change any of it)."""

    cfg: EngineConfig
    kv: KVCache
    active: list[int]  # running slots in admission order
    computed: list[int]  # per slot: tokens whose KV is in cache
    prompt: list[int]  # per slot: tokens to prefill before emitting
    generated: list[int]
    outlen: list[int]
    waiting: deque[int]  # request ids, FCFS (preempted ones at the head)
    n_prefilling: int  # running slots that have not finished their prompt
    segment_steps: int  # decode steps run in closed-form segments so far

    def prompt_of(self, r: int) -> int: ...
    def total_len(self, r: int) -> int: ...
    def prefix_hit_tokens(self, r: int) -> int: ...


class SchedulerPolicy:
    """Base of the continuous-batching policies: the shared running and admission loops."""

    name: ClassVar[str]
    #: True: a prompt never splits across steps (chunked prefill off)
    whole_prompts: bool = False
    #: True: `admission_error` may reject a request at arrival (skipped otherwise: hot path)
    checks_arrivals: ClassVar[bool] = False
    #: True: admission needs blocks for the whole remaining prompt (net of prefix-cache hits)
    #: plus the watermark, not only for the tokens scheduled now (set from the parameters)
    gate_whole: bool = False

    #: parameter name -> (default, allowed): a tuple of choices, or a (low, high) float range
    PARAMS: ClassVar[dict[str, tuple[Any, Any]]] = {}

    def __init__(self, cfg: EngineConfig) -> None:
        self.cfg = cfg
        self.params = self.resolve_params(cfg.policy_params)

    @classmethod
    def resolve_params(cls, given: Mapping[str, Any]) -> dict[str, Any]:
        """The policy's parameters: defaults overridden by `given`, each checked."""
        if not isinstance(given, Mapping):
            raise SpecError(f"policy_params: {given!r} must be a mapping of parameter -> value")
        out = {k: d for k, (d, _) in cls.PARAMS.items()}
        for k, v in given.items():
            if k not in cls.PARAMS:
                allowed = ", ".join(cls.PARAMS) or "none"
                raise SpecError(f"policy_params.{k}: not a parameter of scheduler {cls.name!r} (allowed: {allowed})")
            allowed_v = cls.PARAMS[k][1]
            if isinstance(allowed_v, tuple) and len(allowed_v) == 2 and all(
                    type(x) is int for x in allowed_v):
                lo, hi = allowed_v
                if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not (lo <= v <= hi):
                    raise SpecError(f"policy_params.{k}: {v!r} must be an integer in [{lo}, {hi}]")
                v = int(v)
            elif isinstance(allowed_v, tuple) and len(allowed_v) == 2 and all(
                    isinstance(x, float) for x in allowed_v):
                lo, hi = allowed_v
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not (lo <= v <= hi):
                    raise SpecError(f"policy_params.{k}: {v!r} must be a number in [{lo}, {hi}]")
                v = float(v)
            elif v not in allowed_v or type(v) is not type(allowed_v[0]):
                raise SpecError(f"policy_params.{k}: {v!r} is not one of {', '.join(map(repr, allowed_v))}")
            out[k] = v
        return out

    def admission_error(self, input_len: int) -> str | None:
        """A reason to reject a prompt of `input_len` tokens at arrival, or None."""
        return None

    def next_step(self, view: ReplicaView, allow_segment: bool = True) -> StepPlan:
        """The plan of the next step, or DECODE_SEGMENT (only if `allow_segment`) when the
        closed-form decode fast path is valid from here."""
        raise NotImplementedError

    # ---------------------------------------------------------------- shared pieces
    def _segment_ok(self, view: ReplicaView, decode_blocks: int | None = None) -> bool:
        """True when the next step is decode-only and nothing can be admitted (no free seat,
        no budget left after the decodes, or no KV blocks for the head's first chunk after
        the `decode_blocks` the decodes need), so the following identical decode steps may
        be priced in closed form. Call only when every running sequence decodes."""
        if not view.waiting:
            return True
        batch = len(view.active)
        cfg = self.cfg
        if batch >= cfg.max_num_seqs or cfg.max_num_batched_tokens <= batch:
            return True
        kv = view.kv
        head = view.waiting[0]
        prompt = view.prompt_of(head)
        if self.gate_whole:
            need = kv.blocks_for(prompt - view.prefix_hit_tokens(head)) + self._watermark_blocks(view)
        else:
            first = prompt if self.whole_prompts else min(prompt, cfg.max_num_batched_tokens - batch)
            need = -(-first // kv.block_size)
        if decode_blocks is None:
            decode_blocks = len(self._decode_new_blocks(view))
        return need + decode_blocks > kv.free_blocks

    def _watermark_blocks(self, view: ReplicaView) -> int:
        """Blocks that must stay free after an admission: int(watermark x all blocks)."""
        return int(self.params.get("watermark", 0.0) * view.kv.total_blocks)

    @staticmethod
    def _decode_new_blocks(view: ReplicaView) -> list[int]:
        """Running slots whose next token needs a new block (their blocks are full)."""
        computed, kv = view.computed, view.kv
        bs = kv.block_size
        if not kv.shared_of:
            # private blocks only: a slot holds ceil(c / bs) blocks, full exactly when bs | c
            return [s for s in view.active if computed[s] % bs == 0]
        covered = kv.blocks_per_slot()
        return [s for s in view.active if computed[s] >= covered[s] * bs]

    def _plan_running(self, view: ReplicaView, plan: StepPlan, budget: int) -> tuple[int, int]:
        """Running sequences in admission order within the token budget; when one needs a
        block and none is free, preempt the newest running sequence (possibly itself).
        Fills plan.running / plan.preempt; returns (budget left, free blocks left)."""
        active, computed, prompt, kv = view.active, view.computed, view.prompt, view.kv
        free = kv.free_blocks
        covered, bs = kv.blocks_per_slot(), kv.block_size
        whole = self.whole_prompts
        tail = len(active)  # active[tail:] are preempted in this step (always the newest)
        i = 0
        while i < tail:
            s = active[i]
            i += 1
            if budget <= 0:
                break
            remaining = prompt[s] - computed[s]
            if remaining <= 0:
                tokens = 1  # a decode
            else:
                tokens = remaining if whole else min(remaining, budget)
                if tokens > budget:
                    continue
            new_blocks = -(-(computed[s] + tokens) // bs) - covered[s]
            while new_blocks > free:
                tail -= 1
                victim = active[tail]
                plan.preempt.append(victim)
                free += kv.reclaimable(victim)
                if victim == s:
                    break
            else:
                free -= new_blocks
                plan.running.append((s, tokens))
                budget -= tokens
        return budget, free

    def _plan_admission(self, view: ReplicaView, plan: StepPlan, budget: int, free: int) -> None:
        """Queue head first (FCFS) while budget, seats and KV blocks for the first chunk (the
        whole prompt if it may not split) remain; stop at the first that does not fit. With
        `gate_whole` the blocks of the whole remaining prompt net of prefix-cache hits, plus
        the watermark, must be free (vLLM V33 `KVCacheManager.allocate_slots`, ENGINES.md §1.4)."""
        seats = self.cfg.max_num_seqs - len(view.active)
        whole = self.whole_prompts
        gate = self.gate_whole
        wm = self._watermark_blocks(view) if gate else 0
        kv = view.kv
        admit = plan.admit
        for r in view.waiting:
            if budget <= 0 or seats <= 0:
                break
            prompt = view.prompt_of(r)
            tokens = prompt if whole else min(prompt, budget)
            # a whole prompt over the full budget can only be a preempted request's resumed
            # one (input + generated; longer inputs are refused at arrival): it runs alone
            # rather than being rejected after it produced tokens
            if tokens > budget and not (whole and not admit and budget == self.cfg.max_num_batched_tokens):
                break
            blocks = kv.blocks_for(tokens)
            if blocks > free or (gate and kv.blocks_for(prompt - view.prefix_hit_tokens(r)) + wm > free):
                break
            admit.append((r, tokens))
            budget -= tokens
            free -= blocks
            seats -= 1


class ChunkedPrefill(SchedulerPolicy):
    """vLLM V1: running first (decodes and prompt chunks share the budget), then admissions
    unless the step preempted."""

    name = "vllm"
    PARAMS: ClassVar[dict[str, tuple[Any, Any]]] = {
        "admission_gate": ("whole_prompt", ("whole_prompt", "first_chunk")),
        "watermark": (0.0, (0.0, 1.0)),
    }

    def __init__(self, cfg: EngineConfig) -> None:
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
    """vLLM 0.6 multi-step scheduling (`--num-scheduler-steps N`, V0 engine, ENGINES.md §1 and
    engine notes §2): a prefill step whenever the queue head fits (single step, as V0);
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


from .policies import SGLang, TrtllmCapacity  # noqa: E402  (they build on the classes above)

#: scheduler name -> policy class (one instance per replica)
SCHEDULERS: dict[str, type[SchedulerPolicy]] = {
    cls.name: cls for cls in (ChunkedPrefill, PrefillPriority, VllmV0, VllmMultiStep, StaticBatching, TrtllmCapacity,
                              SGLang)}
SCHEDULERS["vllm-v1"] = ChunkedPrefill  # alias: `vllm` is V1


def make_policy(cfg: EngineConfig) -> SchedulerPolicy:
    return SCHEDULERS[cfg.scheduler](cfg)


__all__: Sequence[str] = ("SCHEDULERS", "SGLang", "ChunkedPrefill", "EngineConfig", "PrefillPriority", "ReplicaView",
                          "SchedulerPolicy", "StaticBatching", "StepPlan", "TrtllmCapacity", "VllmMultiStep", "VllmV0",
                          "make_policy")
