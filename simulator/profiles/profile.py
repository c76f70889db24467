"""Engine profiles: what vLLM, TensorRT-LLM and SGLang do that the hardware does not decide.

A profile (`engine_specs/<id>.yaml`, shipped as `simulator.engine_specs`) holds the scheduler
policy and its parameters, the engine's own default limits, how its benchmark tool picks
limits, per-step / per-request overheads and kernel deviations from the hardware YAML. Every
number carries a `sources` entry (its dotted path or a parent's). Design and citations:
`docs/engines.md`; schema in `engine_specs/README.md`.

This module is the data layer: loading and validating profiles (`load_engine`,
`engine_catalog`), mapping a measurement row's free-text `engine` column to a profile id
(`engine_for_row`) and carrying a profile's overheads into the cost model (`apply_profile`).
The engines' own limit rules (trtllm-bench's build heuristic, vLLM's and SGLang's defaults,
each engine's KV budget) are pure functions in `engine_limits`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulator.serving.client_view import check_prompt_token_s, check_stream_output_s
from simulator.serving.sched.registry import SCHEDULERS
from simulator.specs.catalog import _catalog_dir, read_catalog_yaml, read_yaml
from simulator.specs.checks import SpecError, is_number
from simulator.specs.fields import Param, _check_fields, _did_you_mean, build
from simulator.specs.hardware import HardwareSpec, check_tile_rows

#: what `status` may start with (free text may follow, e.g. "provisional (analytic fit, ...)")
STATUSES = ("fitted", "provisional", "to_fit", "inherited", "assumed", "documented")
KV_RULES = ("total_fraction", "free_after_load_fraction", "free_at_start_fraction")
LIMIT_RULES = ("vllm_v1_batch_defaults", "vllm_v0_defaults", "sglang_kv_derived", "sglang_chunk_by_gpu")
BENCH_RULES = ("none", "trtllm_bench_v014", "trtllm_bench_pytorch")
ALLREDUCE_DTYPES = ("activation", "bf16", "fp16")

# ---------------------------------------------------------------------- parameter domains
# Every scheduler parameter, limits table and benchmark setting a profile may hold, with its type
# and domain declared once (`specs.fields.Param`): the engine's own allowed values in `choices`,
# the subset llmsim simulates in `modelled`. Loading checks every value against it, so a value
# the engine does not know is refused with the allowed list, and one it knows but llmsim does not
# simulate is refused as "not modelled" instead of silently running the default policy.

_NOT_MODELLED = "the event engine runs only this behaviour"
#: how a preempted request is handled (vLLM V1 and V0 spell it in one mapping)
_PREEMPTION = Param("mapping", fields={
    "victim": Param("choice", "newest_running", choices=("newest_running",)),
    "mode": Param("choice", "recompute", choices=("recompute", "swap"), modelled=("recompute",),
                  note="KV swapping to CPU is not simulated"),
    "mode_single_seq": Param("choice", "recompute", choices=("recompute", "swap"), modelled=("recompute",),
                             note="KV swapping to CPU is not simulated"),
    # V0 swaps multi-sequence groups (beam search, n > 1); llmsim's requests are one sequence
    # each, so this mode never applies and either value is accepted
    "mode_multi_seq": Param("choice", "swap", choices=("recompute", "swap")),
    "swap_space_bytes_per_gpu": Param("number", 4.295e9, low=0, high=1e15),
    "requeue": Param("choice", "head", choices=("head", "tail"), modelled=("head",), note=_NOT_MODELLED),
})

#: scheduler parameters a profile may give each policy, as the engine spells them (the policy
#: names are the event engine's registry names, `serving.sched.registry.SCHEDULERS`); how they
#: reach the policy: `profiles.apply.policy_params_for`
POLICY_PARAM_DOMAINS: dict[str, dict[str, Param]] = {
    "vllm": {
        "order": Param("choice", "fcfs", choices=("fcfs", "priority"), modelled=("fcfs",),
                       note="requests carry no priority"),
        "running_first": Param("bool", True, modelled=(True,), note=_NOT_MODELLED),
        "long_prefill_token_threshold": Param("int", 0, low=0, high=10_000_000, modelled=(0,),
                                              note="chunks are capped by the token budget only"),
        "admit_when_preempted": Param("bool", False, modelled=(False,), note=_NOT_MODELLED),
        "preemption": _PREEMPTION,
        "admission_kv_check": Param("choice", "full_prompt", choices=("full_prompt", "first_chunk")),
        "watermark_fraction": Param("number", 0.0, low=0.0, high=1.0),
        "async_scheduling": Param("bool", True),
        "cudagraph_max_batch": Param("int", 512, low=1, high=1_000_000),
    },
    "vllm-v0": {
        # informational: the run's chunking is `limits.chunked_prefill` (the two must agree)
        "chunked_prefill": Param("bool", False),
        "prefill_priority": Param("bool", True, modelled=(True,), note=_NOT_MODELLED),
        "watermark_fraction": Param("number", 0.01, low=0.0, high=1.0),
        "preemption": _PREEMPTION,
        "num_scheduler_steps": Param("int", 1, low=1, high=1024),
        "multi_step": Param("mapping", fields={
            "lookahead_slots": Param("choice", "N - 1", choices=("N - 1",)),
            "prefill_steps_per_round": Param("int", 1, low=1, high=1024, modelled=(1,), note=_NOT_MODELLED),
        }),
    },
    "trtllm": {
        "capacity_scheduler_policy": Param(
            "choice", "GUARANTEED_NO_EVICT", choices=("GUARANTEED_NO_EVICT", "MAX_UTILIZATION", "STATIC_BATCH"),
            modelled=("GUARANTEED_NO_EVICT", "MAX_UTILIZATION"), note="STATIC_BATCH is not simulated"),
        "context_chunking_policy": Param("choice", "FIRST_COME_FIRST_SERVED",
                                         choices=("FIRST_COME_FIRST_SERVED", "EQUAL_PROGRESS"),
                                         modelled=("FIRST_COME_FIRST_SERVED",), note="EQUAL_PROGRESS is not simulated"),
        "overlap_scheduler": Param("bool", False),
        "cuda_graphs": Param("choice", False, choices=(True, False, "generation_only")),
        "max_tokens_reserved_at_admission": Param("choice", "prompt_plus_max_new", choices=("prompt_plus_max_new",)),
    },
    "sglang": {
        "schedule_policy": Param("choice", "fcfs", choices=("fcfs", "lpm", "dfs-weight", "lof", "random"),
                                 modelled=("fcfs",), note="only first-come-first-served is simulated"),
        "step_mix": Param("choice", "prefill_or_decode", choices=("prefill_or_decode",)),
        "enable_mixed_chunk": Param("bool", False, modelled=(False,), note=_NOT_MODELLED),
        "max_prefill_tokens": Param("int", 16384, low=1, high=10_000_000),
        "one_chunked_request": Param("bool", True, modelled=(True,), note=_NOT_MODELLED),
        "clip_max_new_tokens": Param("int", 4096, low=1, high=10_000_000, modelled=(4096,),
                                     note="SGLang's CLIP_MAX_NEW_TOKENS is built in"),
        "new_token_ratio": Param("mapping", fields={
            "init": Param("number", 0.7, low=0.0, high=1.0),
            "min_factor": Param("number", 0.14, low=0.0, high=1.0),
            "decay_steps": Param("number", 600, low=1.0, high=1e9),
            "after_retract": Param("choice", choices=("min(1, (sum generated + 20 n) / (sum max_new + 1))",)),
            "reset_on_idle": Param("bool", True, modelled=(True,), note=_NOT_MODELLED),
        }),
        # SGLang: init_new_token_ratio = min(init x schedule_conservativeness, 1)
        "schedule_conservativeness": Param("number", 1.0, low=0.0, high=1000.0),
        "retraction": Param("mapping", fields={
            "trigger": Param("choice", choices=("decode step finds fewer free tokens than requests",)),
            "order": Param("choice", choices=("fewest outputs first, then longest prompt",)),
            "keep_at_least": Param("int", 1, low=1, high=1_000_000, modelled=(1,), note=_NOT_MODELLED),
            "headroom_tokens_per_request": Param("int", 20, low=0, high=10_000_000, modelled=(20,),
                                                 note="SGLang's SGLANG_RETRACT_DECODE_STEPS is built in"),
            "requeue": Param("choice", "tail", choices=("tail",)),
            "mode": Param("choice", "recompute", choices=("recompute",)),
        }),
        "overlap_scheduler": Param("bool", True),
    },
}
#: the parameter names per policy (the keys of `POLICY_PARAM_DOMAINS`)
POLICY_PARAMS: dict[str, tuple[str, ...]] = {k: tuple(v) for k, v in POLICY_PARAM_DOMAINS.items()}

#: `limits.tables`: the tables the limit rules read (`profiles.limits`)
TABLE_DOMAINS: dict[str, Param] = {
    # vLLM V1 EngineArgs.get_batch_defaults tiers: [max_num_batched_tokens, max_num_seqs] per entry point
    "batch_defaults": Param("list", high=64, item=Param("mapping", fields={
        "min_gib": Param("number", low=0.0, high=1e6),
        "not_name": Param("text"),
        "llm_class": Param("row", fields={"max_num_batched_tokens": Param("int", low=1, high=10_000_000),
                                          "max_num_seqs": Param("int", low=1, high=1_000_000)}),
        "openai_server": Param("row", fields={"max_num_batched_tokens": Param("int", low=1, high=10_000_000),
                                              "max_num_seqs": Param("int", low=1, high=1_000_000)}),
    })),
    # SGLang: [GPU memory below GiB (null: any), chunked_prefill_size, graph max batch TP<4, TP>=4]
    "gpu_tiers": Param("list", high=64, item=Param("row", fields={
        "below_gib": Param("number", low=0.0, high=1e6, optional=True),
        "chunked_prefill_size": Param("int", low=1, high=10_000_000),
        "graph_max_batch": Param("int", low=1, high=1_000_000),
        "graph_max_batch_tp4": Param("int", low=1, high=1_000_000),
    })),
}
#: `benchmark_tool.settings`: how the engine's benchmark tool ran (read by `profiles.apply` and
#: `profiles.limits`; the rest documents the tool's run)
BENCH_SETTINGS = Param("mapping", fields={
    "request_rate": Param("choice", "inf", choices=("inf",)),
    "burstiness": Param("number", 1.0, low=0.0, high=1e6),
    "ignore_eos_random_dataset": Param("bool", True),
    "build_kv_fraction": Param("number", 0.95, low=0.0, high=1.0),
    "capacity_scheduler_policy": POLICY_PARAM_DOMAINS["trtllm"]["capacity_scheduler_policy"],
    "chunked_prefill": Param("bool", True),
    "kv_memory_fraction": Param("number", 0.9, low=0.01, high=1.0),
    "prefix_caching": Param("bool", False),
    "dynamic_batch_size_tuning_window": Param("int", 128, low=1, high=1_000_000),
    "arrivals": Param("choice", "all_at_t0", choices=("all_at_t0",)),
    "ignore_eos": Param("bool", True),
    "uses_average_lengths": Param("bool", True),
    # chip id -> the GiB trtllm-bench reads from NVML
    "nvml_memory_gib": Param("mapping", item=Param("number", low=0.01, high=1e6)),
})

#: chip families for per-family kernel factors (a user's own hardware id matches none: no factor).
#: An engine's kernels are built per architecture (CUDA sm_80/sm_90/sm_100, ROCm gfx90a/gfx942/
#: gfx950, ...), so its deviations from a chip's best kernels are kept per family.
CHIP_CLASSES: dict[str, tuple[str, ...]] = {
    "hopper": ("h100-sxm", "h100-pcie", "h200-sxm", "h200-nvl", "gh200"),
    "ada": ("l40s", "l4"),
    "ampere": ("a100-sxm-80gb", "a100-sxm-40gb", "a100-pcie-80gb", "a10g"),
    "blackwell": ("b200", "b300", "gb200", "gb300"),
    "blackwell-rtx": ("rtx-pro-6000",),
    "cdna2": ("mi250",),
    "cdna3": ("mi300x", "mi325x"),
    "cdna4": ("mi355x",),
    "gaudi": ("gaudi2", "gaudi3"),
    "xe-hpc": ("max1550",),
    "xe2": ("arc-pro-b60", "arc-pro-b60-dual"),
}

#: the per-family kernel numbers a profile may give (`kernels.by_chip_class.<family>.<name>`)
#: and what each does to the chip's efficiencies (`apply_profile`)
CLASS_FACTORS = {
    "compute_relative": "x the chip's GEMM efficiency (every format; the GEMM ramp T0 scales with it)",
    "memory_relative": "x the chip's HBM efficiency",
    "attention_relative": "x the chip's attention efficiency (every KV format)",
    "gqa_kv_sharing": "replaces the chip's gqa_kv_sharing (decode attention's KV re-reads)",
    "kv_dequant_rate_fp8": "an fp8 KV cache has no native attention path: KV elements/s converted",
    "kv_dequant_block_rate_fp8": "that path's KV elements/s one thread block converts (the floor of a batch too small to fill the chip)",
    "dequant_gemm_efficiency": "replaces the chip's weight-only (dequantising) GEMM efficiency",
    "dequant_ramp_relative": "replaces the ramp factor of weight-only GEMMs (their small-M floor)",
    "step_overhead_s": "replaces the step overhead on this family",
    "dp_attention_step_overhead_s": "per step of a replica whose attention runs data-parallel (ranks in lockstep)",
    "dp_attention_full_seqs": "sequences a rank from which that step cost is paid in full (fewer: in proportion; 0: always)",
    "kernel_overhead_s": "replaces the chip's per-kernel launch overhead (graph launch, tail effects)",
    "moe_layer_overhead_s": "per MoE layer per step with weight-only (dequantising) experts: that path's fixed kernels",
    "allreduce_latency_s": "replaces the per all-reduce latency on this family (the collective library's)",
    "expert_width_ramp": "the experts' GEMM width ramp W0: per-row compute x (1 + W0 / W), W = each GPU's expert slice",
    "moe_gemm_relative": "replaces the rate of native-format experts' grouped GEMMs relative to the dense GEMMs",
    "expert_tile_rows": "the largest row tile a weight-only MoE kernel pads each expert's rows to (0: none)",
    "dequant_int8_compute": "1: weight-only integer GEMMs quantise activations to int8 per token and run at the int8 rate",
}
#: factors with a range of their own: (low, high, unit); the fractions take the hardware field's
#: own range (Efficiency, _EFF_RANGE), refused here where the profile file and family can be
#: named, not at the run
_FACTOR_RANGES = {"dp_attention_full_seqs": (0.0, 1e6, "sequences a rank"),
                  "kv_dequant_rate_fp8": (1e6, 1e16, "elements/s"),
                  "kv_dequant_block_rate_fp8": (1e6, 1e16, "elements/s"),
                  "expert_width_ramp": (0.0, 1e5, "elements (the experts' width ramp W0)"),
                  "gqa_kv_sharing": (0.0, 1.0, "(the share of a GQA group's KV read once)"),
                  "dequant_gemm_efficiency": (1e-3, 1.0, "of the chip's GEMM rate"),
                  "dequant_ramp_relative": (1e-3, 1.0, "of the GEMM ramp T0"),
                  "moe_gemm_relative": (1e-3, 1.0, "of the dense GEMM rate"),
                  "expert_tile_rows": (0.0, 64.0, "rows (the experts' largest padding tile: 0, or 8 to 64)"),
                  "dequant_int8_compute": (0.0, 1.0, "(0: the activation format, 1: the int8 rate)")}
#: relative factors: an engine may reach more than the chip's reference engines (the chip's
#: efficiencies were fitted on dev.csv's 2023 static engines); the product stays <= 1
_RELATIVE_FACTORS = ("compute_relative", "memory_relative", "attention_relative")


def chip_class(hardware_id: str) -> str | None:
    """The chip family of a catalog hardware id (None for ids outside `CHIP_CLASSES`)."""
    for name, ids in CHIP_CLASSES.items():
        if hardware_id in ids:
            return name
    return None


def _status_kind(status: str) -> str:
    return status.split(" ", 1)[0].split("(", 1)[0]


@dataclass(frozen=True)
class Tunable:
    """One engine number that may be fitted: `value` (None: use the hardware YAML's value),
    `status` (fitted | provisional | to_fit | inherited | assumed | documented, free text may
    follow) and a `note`."""

    value: float | None = None
    status: str = "inherited"
    note: str = ""

    def __post_init__(self) -> None:
        _check_fields(self, "")
        kind = _status_kind(self.status)
        if kind not in STATUSES:
            raise SpecError(f"status: {self.status!r} must start with one of {', '.join(STATUSES)}")
        if self.value is None and kind in ("fitted", "provisional", "assumed", "documented"):
            raise SpecError(f"value: None with status {kind!r}; give a number or status to_fit/inherited")
        if self.value is not None and self.value < 0:
            raise SpecError(f"value: {self.value!r} must be >= 0")

    @property
    def kind(self) -> str:
        """The status word alone ("provisional" of "provisional (analytic fit, ...)")."""
        return _status_kind(self.status)


@dataclass(frozen=True)
class SchedulerSection:
    """The policy the event engine runs and its parameters (checked against `POLICY_PARAMS`)."""

    policy: str = field(metadata={"choices": tuple(SCHEDULERS)})
    params: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_fields(self, "")
        domains = POLICY_PARAM_DOMAINS.get(self.policy, {})
        for key, value in self.params.items():
            if key not in domains:
                allowed = ", ".join(domains) or "none"
                raise SpecError(f"params.{key}: unknown parameter for policy {self.policy!r}"
                                f"{_did_you_mean(str(key), domains)}; allowed: {allowed}")
            domains[key].check(f"params.{key}", value)


@dataclass(frozen=True)
class LimitsSection:
    """The engine's own defaults when the user gives none. An int, or the name of a rule
    (`LIMIT_RULES`, implemented in `engine_limits`) whose table sits in `tables`."""

    max_num_seqs: int | str
    max_num_batched_tokens: int | str | None
    chunked_prefill: bool
    block_size_tokens: int = field(metadata={"positive": True})
    prefix_caching: bool
    kv_memory_rule: str = field(metadata={"choices": KV_RULES})
    kv_memory_fraction: float | str
    max_tokens_if_unset: int | str
    chunk_unit_tokens: int = field(default=1, metadata={"positive": True})
    prefix_cache_granularity: str = field(default="full_block", metadata={"choices": ("full_block", "token", "partial_block")})
    tables: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_fields(self, "")
        for name in ("max_num_seqs", "max_num_batched_tokens"):
            v = getattr(self, name)
            if isinstance(v, str) and v not in LIMIT_RULES:
                raise SpecError(f"{name}: {v!r} is not an integer or a rule ({', '.join(LIMIT_RULES)})")
            if isinstance(v, int) and v < 1:
                raise SpecError(f"{name}: {v!r} must be an integer >= 1")
        f = self.kv_memory_fraction
        if isinstance(f, str) and f != "sglang_mem_fraction_static":
            raise SpecError(f"kv_memory_fraction: {f!r} is not a number in (0, 1] or 'sglang_mem_fraction_static'")
        if not isinstance(f, str) and not 0 < f <= 1:
            raise SpecError(f"kv_memory_fraction: {f!r} must be in (0, 1]")
        m = self.max_tokens_if_unset
        if isinstance(m, str) and m != "max_seq_len - prompt":
            raise SpecError(f"max_tokens_if_unset: {m!r} is not an integer or 'max_seq_len - prompt'")
        if isinstance(m, int) and not 1 <= m <= 10_000_000:
            raise SpecError(f"max_tokens_if_unset: {m!r} must be an integer >= 1 and <= 10000000")
        for key, value in self.tables.items():
            if key not in TABLE_DOMAINS:
                raise SpecError(f"tables.{key}: unknown table{_did_you_mean(str(key), TABLE_DOMAINS)}; "
                                f"allowed: {', '.join(TABLE_DOMAINS)}")
            TABLE_DOMAINS[key].check(f"tables.{key}", value)
        # a rule that reads a table needs it (else a KeyError at run time)
        needs = {"vllm_v1_batch_defaults": "batch_defaults", "sglang_chunk_by_gpu": "gpu_tiers"}
        for rule in (self.max_num_seqs, self.max_num_batched_tokens):
            if isinstance(rule, str) and rule in needs and needs[rule] not in self.tables:
                raise SpecError(f"tables.{needs[rule]}: required by the rule {rule!r}")
        if self.kv_memory_fraction == "sglang_mem_fraction_static" and "gpu_tiers" not in self.tables:
            raise SpecError("tables.gpu_tiers: required by kv_memory_fraction 'sglang_mem_fraction_static'")


@dataclass(frozen=True)
class BenchmarkSection:
    """How the engine's own benchmark tool sets limits when the user does not."""

    name: str
    rule: str = field(default="none", metadata={"choices": BENCH_RULES})
    settings: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_fields(self, "")
        BENCH_SETTINGS.check("settings", self.settings)


@dataclass(frozen=True)
class OverheadsSection:
    """Runtime costs the hardware YAML does not hold (None values: the hardware's own)."""

    step_overhead_s: Tunable = field(default_factory=Tunable)
    sequence_overhead_s: Tunable = field(default_factory=Tunable)
    per_request_s: Tunable = field(default_factory=Tunable)
    # the API server's tokenizer, seconds per prompt token (serving/client_view.py)
    per_prompt_token_s: Tunable = field(default_factory=Tunable)
    # the API server's event loop, seconds per streamed output (client_view.py)
    per_stream_output_s: Tunable = field(default_factory=Tunable)
    runtime_reserve_bytes: Tunable = field(default_factory=Tunable)
    cpu_overlap_fraction: Tunable = field(default_factory=Tunable)

    def __post_init__(self) -> None:
        _check_fields(self, "")
        if self.per_prompt_token_s.value is not None:  # the client view's own check, where the file is named
            check_prompt_token_s("per_prompt_token_s.value", self.per_prompt_token_s.value)
        if self.per_stream_output_s.value is not None:
            check_stream_output_s("per_stream_output_s.value", self.per_stream_output_s.value)


def _class_factor(where: str, name: str, v: Any) -> Tunable:
    """One `by_chip_class` number, checked against its factor's range (one-line errors)."""
    if name not in CLASS_FACTORS:
        raise SpecError(f"{where}: unknown factor{_did_you_mean(str(name), CLASS_FACTORS)}; "
                        f"allowed: {', '.join(CLASS_FACTORS)}")
    t = v if isinstance(v, Tunable) else build(Tunable, v, where)
    if t.value is None:
        return t
    if name in _RELATIVE_FACTORS and not 0 < t.value <= 2:
        raise SpecError(f"{where}.value: {t.value!r} must be in (0, 2]")
    if name.endswith("_s") and not t.value <= 1.0:
        raise SpecError(f"{where}.value: {t.value!r} must be <= 1 s")
    lo, hi, unit = _FACTOR_RANGES.get(name, (-math.inf, math.inf, ""))
    if not lo <= t.value <= hi:
        raise SpecError(f"{where}.value: {t.value!r} must be in [{lo:g}, {hi:g}] {unit}")
    if name == "expert_tile_rows":
        check_tile_rows(f"{where}.value", t.value)
    if name == "dequant_int8_compute" and t.value not in (0, 1):
        raise SpecError(f"{where}.value: {t.value!r} must be 0 or 1")
    return t


def _copied_factors(where: str, src: Any, why: Any, names: Any,
                    own: dict[str, dict[str, Tunable]]) -> dict[str, Tunable]:
    """A `by_chip_class` entry's `copied_from: <class>` (this profile's) or `<profile>/<class>`
    (a built-in profile's, read from its YAML): that family's numbers (only those listed in
    `factors` when given), each marked "assumed (copied from <source>, unvalidated: <why>)".
    Why a copy and not a default: an engine runs the same kernel library on a family without
    measurements (vLLM's MXFP4 experts run triton_kernels on Hopper and ROCm), and its fitted
    numbers are the best evidence there is;
    the status keeps the copy visible (`llmsim show`, every report's notes). A copy of a copy
    is refused, so a profile never chains guesses."""
    if not isinstance(src, str) or not src.strip():
        raise SpecError(f"{where}.copied_from: {src!r} must name a chip class or <profile>/<class>")
    if why is not None and not isinstance(why, str):
        raise SpecError(f"{where}.why: {why!r} must be text")
    profile_id, _, cls = src.strip().rpartition("/")
    if cls not in CHIP_CLASSES:
        raise SpecError(f"{where}.copied_from: unknown chip class {cls!r}{_did_you_mean(cls, CHIP_CLASSES)}; "
                        f"allowed: {', '.join(CHIP_CLASSES)}")
    if profile_id:
        files = _engine_files()
        if profile_id not in files:
            raise SpecError(f"{where}.copied_from: {profile_id!r} is not a built-in profile"
                            f"{_did_you_mean(profile_id, files)}; known ids: {', '.join(files)}")
        raw = ((read_catalog_yaml(files[profile_id]).get("kernels") or {}).get("by_chip_class") or {}).get(cls)
        if not isinstance(raw, dict) or "copied_from" in raw:
            raise SpecError(f"{where}.copied_from: {src} gives no numbers of its own to copy")
        got = {name: _class_factor(f"{where}.copied_from {src}.{name}", name, v) for name, v in raw.items()}
    else:
        if cls not in own:
            raise SpecError(f"{where}.copied_from: {cls!r} gives no numbers of its own to copy "
                            f"(this profile's own families: {', '.join(own) or 'none'})")
        got = own[cls]
    if names is not None:
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise SpecError(f"{where}.factors: {names!r} must be a list of factor names")
        missing = [n for n in names if n not in got]
        if missing:
            raise SpecError(f"{where}.factors: {', '.join(missing)} not given by {src}; it gives {', '.join(got)}")
        got = {n: got[n] for n in names}
    tail = f": {why}" if why else ""
    return {name: dataclasses.replace(t, status=f"assumed (copied from {src}, unvalidated{tail})")
            for name, t in got.items() if t.value is not None}


@dataclass(frozen=True)
class KernelsSection:
    """Kernel and communication deviations from the hardware YAML."""

    fp8_efficiency_relative: dict = field(default_factory=dict)  # chip class -> Tunable
    by_chip_class: dict = field(default_factory=dict)  # chip class -> {CLASS_FACTORS name: Tunable}
    allreduce_dtype: str = field(default="activation", metadata={"choices": ALLREDUCE_DTYPES})
    # recorded, not priced: a call's latency is allreduce_latency_s when the profile gives it,
    # else the hardware's NCCL-fitted link_latency_s (sglang and trtllm-pytorch declare custom
    # all-reduce but have no serving rows to fit its latency: docs/limits.md)
    allreduce_impl: str = field(default="nccl_ring", metadata={"choices": ("nccl_ring", "custom_allreduce")})
    allreduce_latency_s: Tunable = field(default_factory=Tunable)
    pcie_link_efficiency: Tunable = field(default_factory=Tunable)
    attention_window: str = field(default="model", metadata={"choices": ("model", "full")})
    # pipeline parallelism: "drain" = one batch passes the stages in turn each step; "interleaved"
    # = pp micro-batches in flight, no fill/drain (TensorRT-LLM in-flight batching, vLLM's
    # virtual engines): a step of x tokens costs the model's time on x / pp (parallel.pipelined)
    pipeline: str = field(default="drain", metadata={"choices": ("drain", "interleaved")})

    def __post_init__(self) -> None:
        _check_fields(self, "")
        fixed = {}
        for k, v in self.fp8_efficiency_relative.items():
            if k not in CHIP_CLASSES:
                raise SpecError(f"fp8_efficiency_relative.{k}: unknown chip class{_did_you_mean(str(k), CHIP_CLASSES)}; "
                                f"allowed: {', '.join(CHIP_CLASSES)}")
            t = v if isinstance(v, Tunable) else build(Tunable, v, f"fp8_efficiency_relative.{k}")
            if t.value is not None and not 0 < t.value <= 1:
                raise SpecError(f"fp8_efficiency_relative.{k}.value: {t.value!r} must be in (0, 1]")
            fixed[k] = t
        object.__setattr__(self, "fp8_efficiency_relative", fixed)
        classes = {}
        copies = {}
        for k, factors in self.by_chip_class.items():
            if k not in CHIP_CLASSES:
                raise SpecError(f"by_chip_class.{k}: unknown chip class{_did_you_mean(str(k), CHIP_CLASSES)}; "
                                f"allowed: {', '.join(CHIP_CLASSES)}")
            if not isinstance(factors, dict):
                raise SpecError(f"by_chip_class.{k}: {factors!r} is not a mapping of factor names")
            factors = dict(factors)
            if "copied_from" in factors:
                copies[k] = (factors.pop("copied_from"), factors.pop("why", None), factors.pop("factors", None))
            classes[k] = {name: _class_factor(f"by_chip_class.{k}.{name}", name, v) for name, v in factors.items()}
        direct = {k: v for k, v in classes.items() if k not in copies}  # a copy of a copy is refused
        for k, (src, why, names) in copies.items():
            classes[k] = {**_copied_factors(f"by_chip_class.{k}", src, why, names, direct), **classes[k]}
        object.__setattr__(self, "by_chip_class", classes)
        le = self.pcie_link_efficiency.value
        if le is not None and not 0 < le <= 1:
            raise SpecError(f"pcie_link_efficiency.value: {le!r} must be in (0, 1]")


@dataclass(frozen=True)
class EngineProfile:
    """One engine and version family (see the module docstring and engine_specs/README.md)."""

    id: str
    name: str
    versions: str
    scheduler: SchedulerSection
    limits: LimitsSection
    sources: dict
    benchmark_tool: BenchmarkSection = field(default_factory=lambda: BenchmarkSection(name="none"))
    overheads: OverheadsSection = field(default_factory=OverheadsSection)
    kernels: KernelsSection = field(default_factory=KernelsSection)
    notes: str = ""

    def __post_init__(self) -> None:
        _check_fields(self, "")
        if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", self.id):
            raise SpecError(f"id: {self.id!r} must be lower-case letters, digits, '.', '_' or '-'")
        for key, text in self.sources.items():
            if not isinstance(text, str) or not text.strip():
                raise SpecError(f"sources.{key}: {text!r} must be a non-empty string")
        stated = self.scheduler.params.get("chunked_prefill")
        if stated is not None and stated != self.limits.chunked_prefill:
            # the run chunks by limits.chunked_prefill; a params value that disagrees would be ignored
            raise SpecError(f"scheduler.params.chunked_prefill: {stated!r} disagrees with limits.chunked_prefill: "
                            f"{self.limits.chunked_prefill!r} (the one the run uses); give one value")

    # ------------------------------------------------------------------ derived facts
    @property
    def policy(self) -> str:
        return self.scheduler.policy

    @property
    def step_overhead_s(self) -> float | None:
        """Per-step runtime overhead (None: the hardware YAML's)."""
        return self.overheads.step_overhead_s.value

    @property
    def runtime_reserve_bytes(self) -> float:
        """Per-GPU memory beyond weights + activation estimate that the KV budget loses."""
        return self.overheads.runtime_reserve_bytes.value or 0.0

    @property
    def allreduce_16bit(self) -> bool:
        """The TP all-reduce message stays 16-bit whatever the activation dtype."""
        return self.kernels.allreduce_dtype != "activation"

    @property
    def link_dtype(self) -> str | None:
        """What to pass as `CostModel(link_dtype=...)`: None keeps the activation dtype."""
        return None if self.kernels.allreduce_dtype == "activation" else self.kernels.allreduce_dtype

    def fp8_relative(self, hardware_id: str) -> float | None:
        """fp8 GEMM/attention efficiency relative to the chip's bf16 one (None: no factor)."""
        t = self.kernels.fp8_efficiency_relative.get(chip_class(hardware_id) or "")
        return None if t is None else t.value

    def class_factors(self, hardware_id: str) -> dict[str, float]:
        """The kernel numbers this profile gives the chip's family (`CLASS_FACTORS`), values only."""
        got = self.kernels.by_chip_class.get(chip_class(hardware_id) or "", {})
        return {k: t.value for k, t in got.items() if t.value is not None}

    def tunables(self) -> dict[str, Tunable]:
        """Every fittable number by dotted path (for fitting and reports)."""
        out = {f"overheads.{f.name}": getattr(self.overheads, f.name) for f in dataclasses.fields(self.overheads)}
        out["kernels.allreduce_latency_s"] = self.kernels.allreduce_latency_s
        out["kernels.pcie_link_efficiency"] = self.kernels.pcie_link_efficiency
        for k, t in self.kernels.fp8_efficiency_relative.items():
            out[f"kernels.fp8_efficiency_relative.{k}"] = t
        for k, factors in self.kernels.by_chip_class.items():
            for name, t in factors.items():
                out[f"kernels.by_chip_class.{k}.{name}"] = t
        return out


# ---------------------------------------------------------------------- sources check


def _numbers(data: Any, path: str = "") -> list[tuple[str, Any]]:
    """(dotted path, value) of every number in plain YAML data (list items under their list)."""
    if isinstance(data, dict):
        return [p for k, v in data.items() for p in _numbers(v, f"{path}.{k}" if path else str(k))]
    if isinstance(data, list):
        return [p for v in data for p in _numbers(v, path)]
    return [(path, data)] if is_number(data) else []


def _paths(data: Any, path: str = "") -> set[str]:
    out = {path} if path else set()
    if isinstance(data, dict):
        for k, v in data.items():
            out |= _paths(v, f"{path}.{k}" if path else str(k))
    return out


def check_sources(data: dict) -> None:
    """Every number needs a `sources` entry at its path or a parent's; every `sources` key must
    name a path of the profile (a stale entry is an error too)."""
    sources = data.get("sources") or {}
    if not isinstance(sources, dict):
        raise SpecError(f"sources: {sources!r} is not a mapping of dotted paths to text")
    body = {k: v for k, v in data.items() if k != "sources"}
    known = _paths(body)
    for key in sources:
        if key not in known:
            raise SpecError(f"sources.{key}: no such path in the profile{_did_you_mean(str(key), known)}")
    for path, value in _numbers(body):
        parts = path.split(".")
        if not any(".".join(parts[:i]) in sources for i in range(1, len(parts) + 1)):
            raise SpecError(f"sources: no entry for {path} (= {value!r}); every number needs one at its path or a parent's")


# ---------------------------------------------------------------------- loading


def engine_from_dict(data: Any, source: str = "") -> EngineProfile:
    """Build and validate a profile from plain data; errors are one line naming file and field."""
    try:
        if not isinstance(data, dict):
            raise SpecError(f"expected a mapping of fields, got {type(data).__name__}")
        check_sources(data)
        return build(EngineProfile, data)
    except SpecError as e:
        raise SpecError(f"{source}: {e}" if source and not str(e).startswith(source) else str(e)) from None


def _engine_dir() -> Path:
    return _catalog_dir("engine_specs")


@functools.cache
def _engine_files() -> dict[str, Path]:
    """Built-in profile id (the file name, which a profile's id must equal) -> its file."""
    return {path.stem: path for path in sorted(_engine_dir().glob("*.yaml"))}


@functools.cache
def _builtin_engine(engine_id: str) -> EngineProfile:
    """One built-in profile, parsed on first use (a run loads the one it uses, not all six)."""
    path = _engine_files()[engine_id]
    prof = engine_from_dict(read_catalog_yaml(path), str(path))
    if prof.id != path.stem:
        raise SpecError(f"{path}: id: {prof.id!r} must equal the file name {path.stem!r}")
    return prof


@functools.cache
def engine_catalog() -> dict[str, EngineProfile]:
    """All built-in engine profiles by id."""
    return {engine_id: _builtin_engine(engine_id) for engine_id in _engine_files()}


DEFAULT_ENGINE = "vllm"


def _merge(base: dict, over: dict) -> dict:
    """`over` on top of `base`, mappings merged key by key (lists and values replaced)."""
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _overlay(data: dict, path: Path) -> EngineProfile:
    """A user profile `base: <id>` plus the fields (and sources) it changes."""
    base_id = data.pop("base")
    cat = _engine_files()
    if not isinstance(base_id, str) or base_id.lower() not in cat:
        raise SpecError(f"{path}: base: {base_id!r} is not a profile id{_did_you_mean(str(base_id), cat)}; "
                        f"known ids: {', '.join(cat)}")
    base = read_catalog_yaml(cat[base_id.lower()])
    return engine_from_dict(_merge(base, data), str(path))


def load_engine(ref: str | EngineProfile | None = None) -> EngineProfile:
    """A catalog id (case-insensitive), a profile YAML path, or the default (`vllm`) for None.
    A file may start from a built-in profile: `base: trtllm` plus the fields to change (a
    changed number needs its own `sources` entry, or it keeps the base's)."""
    if isinstance(ref, EngineProfile):
        return ref
    ref = DEFAULT_ENGINE if ref is None else ref
    cat = _engine_files()
    if ref.lower() in cat:
        return _builtin_engine(ref.lower())
    path = Path(ref)
    if path.is_file():
        data = read_yaml(path)
        if isinstance(data, dict) and "base" in data:
            return _overlay(dict(data), path)
        return engine_from_dict(data, str(path))
    raise SpecError(f"engine: {ref!r} is not a profile id or a file{_did_you_mean(ref.lower(), cat)}; "
                    f"known ids: {', '.join(cat)}")


# ---------------------------------------------------------------------- measurement rows

_VERSION = re.compile(r"\bv?(\d+)\.(\d+)")
#: "MLPerf v5.1 submission" names the benchmark round, not an engine version
_ROUND = re.compile(r"mlperf\s+v\d+\.\d+", re.IGNORECASE)


def _version(text: str) -> tuple[int, int] | None:
    m = _VERSION.search(_ROUND.sub("", text))
    return (int(m.group(1)), int(m.group(2))) if m else None


def _trtllm_row(text: str, model: str = "") -> str:
    low = text.lower()
    if "examples/run.py" in low or "modelrunner" in low:
        return "trtllm-static"  # examples/run.py's static batch (Argonne's harness)
    if "static batch" in low or "gptsession" in low:
        return "generic"  # the pre-executor static-batch runtime: no in-flight batching
    if _ROUND.search(text):
        # MLPerf rows name TensorRT's version ("TensorRT 10.11"), not TensorRT-LLM's. NVIDIA's
        # v5.1 harness serves TensorRT engines through the C++ executor, except DeepSeek-R1,
        # which runs the PyTorch backend (moe_backend WIDEEP, enable_attention_dp: options of
        # the PyTorch LLM API; closed/NVIDIA/configs/B200-SXM-180GBx8/Offline/deepseek-r1.py)
        # (trtllm-mlperf: the harness's own overheads and kernel factors, fitted on these rows)
        return "trtllm-pytorch" if model.lower().startswith("deepseek") else "trtllm-mlperf"
    v = _version(text)
    if "pytorch" in low or (v is not None and v >= (1, 0)):
        return "trtllm-pytorch"
    return "trtllm"


def _vllm_row(text: str) -> str:
    low = text.lower()
    v = _version(text)
    # V1 became the default in 0.8.0; earlier releases only had V0
    v0 = bool(re.search(r"\bv0 engine\b|vllm_use_v1=0", low)) or (v is not None and v < (0, 8))
    if v0 and "rocm" in low and "mlperf" not in low:
        # the stock ROCm builds (Dockerfile.rocm) of V0: their own kernels (paged attention v1/v2,
        # untuned hipBLASLt GEMMs); an MLPerf submitter's tuned fork is not that engine
        return "vllm-v0-rocm"
    return "vllm-v0" if v0 else "vllm"


def _family(low: str) -> str | None:
    if "tensorrt-llm" in low or "trtllm" in low or "trt-llm" in low:
        return "trtllm"
    if "sglang" in low:
        return "sglang"
    if "vllm" in low:
        return "vllm"
    if "llama.cpp" in low or "llama-bench" in low:
        return "llama.cpp"
    if "deepspeed" in low:
        return "deepspeed"
    return None


def engine_for_row(engine_text: str, model: str = "") -> str:
    """The profile id that prices a measurement row, from its free-text `engine` column (and,
    for MLPerf rows, its `model`).

    The engine named before any parenthesis wins ("SGLang (... system framework: vLLM 0.6.5)"
    is SGLang); without one, the whole text is searched. TensorRT-LLM: examples/run.py
    (ModelRunner) static batches -> trtllm-static; static-batch gptSession runs -> generic;
    MLPerf submissions -> trtllm-mlperf (NVIDIA's harness; DeepSeek: trtllm-pytorch); 1.x or
    "PyTorch" -> trtllm-pytorch; other 0.x (TensorRT engine, in-flight batching) -> trtllm.
    vLLM: before 0.8 or marked V0 -> vllm-v0 (stock ROCm builds: vllm-v0-rocm), else vllm.
    SGLang -> sglang; llama.cpp -> llama.cpp; DeepSpeed(-MII) -> deepspeed. Anything else
    (lmdeploy, gpt-fast, an "unknown engine", unstated) -> generic: the hardware YAMLs' own
    efficiencies, which were fitted on exactly those static rows.
    """
    text = engine_text or ""
    if text.strip() in _engine_files():
        # a built-in id names itself: llmsim's own results and points carry it, and the text
        # rules below read "vllm-v0" as vllm and "trtllm-static" as trtllm (`validate` re-priced
        # a run saved under --engine vllm-v0 with V1's scheduler)
        return text.strip()
    low = text.lower()
    family = _family(low.split("(", 1)[0]) or _family(low)
    if family == "trtllm":
        return _trtllm_row(text, model)
    if family == "vllm":
        return _vllm_row(text)
    if family in ("sglang", "llama.cpp", "deepspeed"):
        return family
    return "generic"


# ---------------------------------------------------------------------- cost-model hook


def _is_pcie(hw: HardwareSpec) -> bool:
    return hw.form_factor.lower().startswith("pcie")


def engine_family_numbers(hardware_id: str) -> dict[str, dict[str, str]]:
    """{profile id: {factor: "value (status)"}}: what each built-in engine profile changes on
    this chip's family (`kernels.by_chip_class`, and `kernels.fp8_efficiency_relative`), fitted
    or copied, for `llmsim show`."""
    cls = chip_class(hardware_id)
    out = {}
    for pid, prof in engine_catalog().items():
        got = dict(prof.kernels.by_chip_class.get(cls or "", {}))
        fp8 = prof.kernels.fp8_efficiency_relative.get(cls or "")
        if fp8 is not None:
            got["fp8_efficiency_relative"] = fp8
        numbers = {name: f"{t.value:g} ({t.status})" for name, t in got.items() if t.value is not None}
        if numbers:
            out[pid] = numbers
    return out


def _class_changes(eff: Any, f: dict[str, float]) -> dict[str, Any]:
    """Efficiency fields changed by a profile's family factors (`CLASS_FACTORS`)."""
    out: dict[str, Any] = {}
    if "compute_relative" in f:
        # the engine's GEMMs reach r of the chip's large-GEMM rate; the ramp T0 scales with it so
        # the small-GEMM floor f T0 / (P eta_c) stays where the chip's is (bandwidth-bound decode)
        r = f["compute_relative"]
        out["compute_efficiency"] = min(eff.compute_efficiency * r, 1.0)
        out["compute_efficiency_by_dtype"] = {k: min(v * r, 1.0) for k, v in eff.compute_efficiency_by_dtype.items()}
        out["gemm_ramp_tokens"] = eff.gemm_ramp_tokens * r
        out["gemm_ramp_tokens_by_dtype"] = {k: v * r for k, v in eff.gemm_ramp_tokens_by_dtype.items()}
    if "memory_relative" in f:
        out["memory_efficiency"] = min(eff.memory_efficiency * f["memory_relative"], 1.0)
    if "attention_relative" in f:
        r = f["attention_relative"]
        out["attention_efficiency"] = min(eff.attention_efficiency * r, 1.0)
        out["attention_efficiency_by_kv_dtype"] = {k: min(v * r, 1.0)
                                                   for k, v in eff.attention_efficiency_by_kv_dtype.items()}
    for name in ("gqa_kv_sharing", "dequant_gemm_efficiency", "dequant_ramp_relative", "step_overhead_s",
                 "kernel_overhead_s", "moe_layer_overhead_s", "expert_width_ramp", "moe_gemm_relative",
                 "expert_tile_rows", "dequant_int8_compute", "dp_attention_step_overhead_s",
                 "dp_attention_full_seqs"):
        if name in f:
            out[name] = f[name]
    if "kv_dequant_rate_fp8" in f:
        out["kv_dequant_rate_by_kv_dtype"] = {**eff.kv_dequant_rate_by_kv_dtype, "fp8": f["kv_dequant_rate_fp8"]}
    if "kv_dequant_block_rate_fp8" in f:
        out["kv_dequant_block_rate_by_kv_dtype"] = {**eff.kv_dequant_block_rate_by_kv_dtype,
                                                    "fp8": f["kv_dequant_block_rate_fp8"]}
    return out


def apply_profile(hw: HardwareSpec, profile: EngineProfile) -> HardwareSpec:
    """`hw` with the profile's overheads and kernel deviations applied (`dataclasses.replace`):

        step_overhead_s       <- overheads.step_overhead_s            (when given)
        sequence_overhead_s   <- overheads.sequence_overhead_s        (when given)
        family factors        <- kernels.by_chip_class[family]        (CLASS_FACTORS; after the above)
        link_latency_s        <- kernels.allreduce_latency_s          (per all-reduce call)
        link_efficiency       <- kernels.pcie_link_efficiency         (PCIe form factors only)
        eta_c[fp8], eta_att[fp8 KV] <- r * the chip's own values, r = kernels.fp8_efficiency_relative[class]

    Values left None keep the hardware's. The all-reduce message width is not a hardware fact:
    pass `profile.link_dtype` to `CostModel(link_dtype=...)` / `make_cost_model(link_dtype=...)`.
    """
    eff = hw.efficiency
    changes: dict[str, Any] = {}
    if profile.step_overhead_s is not None:
        changes["step_overhead_s"] = profile.step_overhead_s
    seq = profile.overheads.sequence_overhead_s.value
    if seq is not None:
        changes["sequence_overhead_s"] = seq
    link_eff = profile.kernels.pcie_link_efficiency.value
    if link_eff is not None and _is_pcie(hw):
        changes["link_efficiency"] = link_eff
    rel = profile.fp8_relative(hw.id)
    if rel is not None:
        changes["compute_efficiency_by_dtype"] = {**eff.compute_efficiency_by_dtype,
                                                  "fp8": min(eff.compute_for("fp8") * rel, 1.0)}
        changes["attention_efficiency_by_kv_dtype"] = {**eff.attention_efficiency_by_kv_dtype,
                                                       "fp8": min(eff.attention_for("fp8") * rel, 1.0)}
    changes.update(_class_changes(dataclasses.replace(eff, **changes), profile.class_factors(hw.id)))
    cls = chip_class(hw.id)
    copied = {name: f"{profile.id}/{cls}: {t.status}" for name, t in profile.kernels.by_chip_class.get(cls or "", {}).items()
              if name in changes and t.kind == "assumed" and "copied from" in t.status}
    if copied:  # the copy's provenance travels with the numbers (CostModel.notes says it)
        changes["sources"] = {**eff.sources, **copied}
    out = dataclasses.replace(hw, efficiency=dataclasses.replace(eff, **changes)) if changes else hw
    latency = profile.class_factors(hw.id).get("allreduce_latency_s", profile.kernels.allreduce_latency_s.value)
    if latency is not None:
        out = dataclasses.replace(out, link_latency_s=latency)
    return out


__all__ = ["DEFAULT_ENGINE", "EngineProfile", "Tunable", "apply_profile", "check_sources", "chip_class",
           "engine_catalog", "engine_family_numbers", "engine_for_row", "engine_from_dict", "load_engine"]
