"""The scheduler-policy interface: what a policy returns and what it may read.

`StepPlan` is the plan of one engine step (`DECODE_SEGMENT` the shared closed-form decode
plan), `ReplicaView` the read-only view of a replica a policy decides from, and
`SchedulerPolicy` the base class holding the running and admission loops the
continuous-batching policies share; `SchedulerLimits` what it reads of its settings. The
policies themselves are in `policies.py`; the
registry and `EngineConfig` in `registry.py` (its docstring explains the interface).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from simulator.serving.kvcache import KVCache
from simulator.specs.checks import SpecError, check_int


class SchedulerLimits(Protocol):
    """What a policy reads of its replica's scheduler settings (`registry.EngineConfig`
    provides them): the step budget, the seat cap and the policy's own parameters."""

    @property
    def max_num_batched_tokens(self) -> int: ...

    @property
    def max_num_seqs(self) -> int: ...

    @property
    def policy_params(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class Limits:
    """Plain `SchedulerLimits` (a policy that runs another policy's loop inside it gives it
    these, with that policy's own parameters)."""

    max_num_batched_tokens: int
    max_num_seqs: int
    policy_params: Mapping[str, Any]



class StepPlan:
    """The next step of one replica, in batch order (see the module docstring).

    A plain slotted class rather than a dataclass: one is built per engine step, and the
    dataclass default factories cost more than the rest of a short step's scheduling.
    """

    __slots__ = ("running", "running_blocks", "admit", "preempt", "decode_all", "decode_new_blocks",
                 "run_to_completion", "reject_head", "decode_segment", "preempt_to_tail", "decode_round")

    def __init__(self, decode_all: bool = False, run_to_completion: bool = False,
                 decode_segment: bool = False) -> None:
        self.running: list[tuple[int, int]] = []  # (slot, new tokens) of admitted sequences
        self.running_blocks = -1  # new KV blocks `running` takes in all, when counted (else -1)
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

    cfg: SchedulerLimits
    kv: KVCache
    active: list[int]  # running slots in admission order
    computed: list[int]  # per slot: tokens whose KV is in cache
    prompt: list[int]  # per slot: tokens to prefill before emitting
    generated: list[int]
    outlen: list[int]
    waiting: deque[int]  # request ids, FCFS (preempted ones at the head)
    n_prefilling: int  # running slots that have not finished their prompt
    segment_steps: int  # decode steps run in closed-form segments so far
    prefix: Any  # prefix-cache state (`prefix_cache.PrefixState`), None when caching is off

    def prompt_of(self, r: int) -> int: ...
    def total_len(self, r: int) -> int: ...
    def prefix_hit_tokens(self, r: int) -> int: ...
    def prefix_hit(self, r: int) -> tuple[int, int]: ...


class SchedulerPolicy:
    """Base of the continuous-batching policies: the shared running and admission loops."""

    name: ClassVar[str]
    #: True: a prompt never splits across steps (chunked prefill off)
    whole_prompts: bool = False
    #: True: `admission_error` may reject a request at arrival (skipped otherwise: hot path)
    checks_arrivals: ClassVar[bool] = False
    #: next_step returns DECODE_SEGMENT whenever nothing waits and every running sequence
    #: decodes (the replica then skips the call)
    segment_when_queue_empty: ClassVar[bool] = False
    #: True: admission needs blocks for the whole remaining prompt (net of prefix-cache hits)
    #: plus the watermark, not only for the tokens scheduled now (set from the parameters)
    gate_whole: bool = False
    #: a prompt chunk cut short by the budget is rounded down to a multiple of this many
    #: tokens (TensorRT-LLM's micro-batch scheduler: tokens_per_block); 1 for vLLM
    chunk_unit: int = 1

    #: parameter name -> (default, allowed): a tuple of choices, or a (low, high) float range
    PARAMS: ClassVar[dict[str, tuple[Any, Any]]] = {}

    def __init__(self, cfg: SchedulerLimits) -> None:
        self.cfg = cfg
        self.params = self.resolve_params(cfg.policy_params)
        self.watermark = float(self.params.get("watermark", 0.0))  # fraction of all blocks kept free
        # instance copies of the class flags (a value a subclass set before calling this is
        # read back and kept): the admission loops read them per step, and CPython 3.11
        # specialises instance attribute loads but not class attributes read through an
        # instance. Not vars(self): materialising the instance dict slows every later load.
        self.whole_prompts = self.whole_prompts
        self.gate_whole = self.gate_whole
        self._watermark_of = (-1, 0)  # (total blocks, watermark blocks) cache of _watermark_blocks

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
                v = int(check_int(f"policy_params.{k}", v, lo, maximum=hi))
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

    def handoff_fits(self, view: ReplicaView, r: int, prompt_len: int) -> bool:
        """Request r, whose `prompt_len` prompt tokens were computed elsewhere (the decode pool
        of a disaggregated deployment, `disagg.DecodeReplica`), may take a seat now: the blocks
        of its prompt and first decoded token are free. A policy that promises running
        requests blocks beyond the ones they hold (TensorRT-LLM's GUARANTEED_NO_EVICT) must
        keep that promise here too."""
        return view.kv.blocks_for(prompt_len + 1) <= view.kv.free_blocks

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
        bs = kv.block_size
        if self.gate_whole:
            hit = view.prefix_hit_tokens(head) if view.prefix is not None else 0
            need = -(-(prompt - hit) // bs) + (self._watermark_blocks(view) if self.watermark else 0)
        else:
            left = cfg.max_num_batched_tokens - batch
            first = prompt if self.whole_prompts or prompt <= left else left - left % self.chunk_unit
            if not first:
                return True  # the leftover budget is below one chunk unit: nothing can start
            need = -(-first // bs)
        if decode_blocks is None:
            decode_blocks = len(self._decode_new_blocks(view))
        return need + decode_blocks > kv.free_blocks

    def _watermark_blocks(self, view: ReplicaView) -> int:
        """Blocks that must stay free after an admission: int(watermark x all blocks)."""
        total = view.kv.total_blocks
        if total != self._watermark_of[0]:  # one policy per replica: computed once
            self._watermark_of = (total, int(self.watermark * total))
        return self._watermark_of[1]

    def _decode_new_blocks(self, view: ReplicaView) -> list[int]:
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
        bs = kv.block_size
        # derived counts (CeilKVCache): a slot covers ceil(computed / bs), read per slot (no
        # snapshot of every seat: at low load most are empty)
        covered = None if kv.derived_counts else kv.blocks_per_slot()
        whole = self.whole_prompts
        unit = self.chunk_unit
        tail = len(active)  # active[tail:] are preempted in this step (always the newest)
        i = 0
        taken = 0  # new blocks of the sequences in plan.running
        while i < tail:
            s = active[i]
            i += 1
            if budget <= 0:
                break
            remaining = prompt[s] - computed[s]
            if remaining <= 0:
                tokens = 1  # a decode
            else:
                tokens = remaining if whole or remaining <= budget else budget - budget % unit
                if tokens > budget or not tokens:
                    continue
            have = covered[s] if covered is not None else -(-computed[s] // bs)
            new_blocks = -(-(computed[s] + tokens) // bs) - have
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

    def _plan_admission(self, view: ReplicaView, plan: StepPlan, budget: int, free: int) -> None:
        """Queue head first (FCFS) while budget, seats and KV blocks for the first chunk (the
        whole prompt if it may not split) remain; stop at the first that does not fit. With
        `gate_whole` the blocks of the whole remaining prompt net of prefix-cache hits, plus
        the watermark, must be free (vLLM V33 `KVCacheManager.allocate_slots`, docs/engines.md §1.4)."""
        seats = self.cfg.max_num_seqs - len(view.active)
        whole = self.whole_prompts
        gate = self.gate_whole
        wm = self._watermark_blocks(view) if gate and self.watermark else 0
        cached = view.prefix is not None
        bs = view.kv.block_size
        admit = plan.admit
        unit = self.chunk_unit
        for r in view.waiting:
            if budget <= 0 or seats <= 0:
                break
            prompt = view.prompt_of(r)
            tokens = prompt if whole or prompt <= budget else budget - budget % unit
            if not tokens:
                break
            # a whole prompt over the full budget can only be a preempted request's resumed
            # one (input + generated; longer inputs are refused at arrival): it runs alone
            # rather than being rejected after it produced tokens
            if tokens > budget and not (whole and not admit and budget == self.cfg.max_num_batched_tokens):
                break
            blocks = -(-tokens // bs)
            if blocks > free or (gate and -(-(prompt - (view.prefix_hit_tokens(r) if cached else 0)) // bs) + wm > free):
                break
            admit.append((r, tokens))
            budget -= tokens
            free -= blocks
            seats -= 1
