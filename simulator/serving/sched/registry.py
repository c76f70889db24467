"""The registry of scheduler policies (`SCHEDULERS`) and the scheduler limits (`EngineConfig`).

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
* `trtllm`, `sglang` — TensorRT-LLM capacity scheduling and SGLang (all policies: `policies.py`; the interface: `serving/sched/interface.py`).
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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from simulator.serving.sched.interface import (
    DECODE_SEGMENT,
    ReplicaView,
    SchedulerPolicy,
    StepPlan,
)
from simulator.serving.sched.policies import (
    ChunkedPrefill,
    PrefillPriority,
    SGLang,
    StaticBatching,
    TrtllmCapacity,
    VllmMultiStep,
    VllmV0,
)
from simulator.specs.checks import SpecError, check_choice
from simulator.specs.fields import check_domains, domain


@dataclass(frozen=True)
class EngineConfig:
    """Limits of one replica's scheduler (vLLM's names)."""

    # each field's type and domain, declared next to its default (`specs.fields.domain`)
    max_num_seqs: int = domain(256, "int", low=1)
    max_num_batched_tokens: int = domain(8192, "int", low=1)
    block_size: int = domain(16, "int", low=1)
    scheduler: str = "vllm"
    gpu_memory_utilization: float = domain(0.9, low=0.0, high=1.0, low_open=True)
    max_model_len: int | None = domain(None, "int", low=1, optional=True)
    kv_capacity_tokens: int | None = domain(None, "int", low=1, optional=True)  # override the memory model (tests, what-ifs)
    max_segment_steps: int = domain(4096, "int", low=1)
    # simulated-time cap: what is unfinished then is cut off
    max_duration_s: float | None = domain(None, low=0.0, low_open=True, optional=True, unit="seconds")
    debug: bool = domain(False, "bool")  # check conservation invariants while running
    #: the policy's own parameters (`SchedulerPolicy.PARAMS` of `scheduler`), e.g. {"watermark": 0.01}
    policy_params: Mapping[str, Any] = domain(kind="mapping", default_factory=dict)
    # automatic prefix caching (`serving/prefix_cache.py`): off here so results stay as they were;
    # engine profiles turn it on (vLLM V1, SGLang). `warm_cache`: the cache starts holding the
    # prompts of an earlier run of the same workload (bounded by capacity)
    enable_prefix_caching: bool = domain(False, "bool")
    warm_cache: bool = domain(False, "bool")
    # host-memory tier for evicted prefix blocks (per replica)
    cpu_offload_bytes: float = domain(0.0, low=0.0, unit="bytes")

    def __post_init__(self) -> None:
        check_domains(self)
        check_choice("scheduler", self.scheduler, SCHEDULERS)
        if self.kv_capacity_tokens is not None and self.kv_capacity_tokens < self.block_size:
            raise SpecError(f"kv_capacity_tokens: {self.kv_capacity_tokens!r} must be >= block_size")
        # both act only on the prefix cache: with caching off they were silently ignored
        for name in ("warm_cache", "cpu_offload_bytes"):
            if getattr(self, name) and not self.enable_prefix_caching:
                raise SpecError(f"{name}: {getattr(self, name)!r} applies only with enable_prefix_caching=True")
        SCHEDULERS[self.scheduler].resolve_params(self.policy_params)

#: scheduler name -> policy class (one instance per replica)
SCHEDULERS: dict[str, type[SchedulerPolicy]] = {
    cls.name: cls for cls in (ChunkedPrefill, PrefillPriority, VllmV0, VllmMultiStep, StaticBatching, TrtllmCapacity,
                              SGLang)}
SCHEDULERS["vllm-v1"] = ChunkedPrefill  # alias: `vllm` is V1


def make_policy(cfg: EngineConfig) -> SchedulerPolicy:
    return SCHEDULERS[cfg.scheduler](cfg)


__all__: Sequence[str] = ("DECODE_SEGMENT", "SCHEDULERS", "SGLang", "ChunkedPrefill", "EngineConfig", "PrefillPriority", "ReplicaView",
                          "SchedulerPolicy", "StaticBatching", "StepPlan", "TrtllmCapacity", "VllmMultiStep", "VllmV0",
                          "make_policy")
