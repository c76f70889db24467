"""The engines' own limit rules: how each picks batch limits and its KV budget by default.

Pure functions of plain numbers (sources in `docs/engines.md` and the profiles'
`sources`); `default_limits` and `kv_budget_bytes` apply them to a profile and a chip.

trtllm-bench build heuristic (TensorRT-LLM 0.14 `bench/build/tuning.py calc_engine_setting`,
`finetune_setting`), from the dataset's AVERAGE input length I and output length O:

    bytes/token (GiB) = 2 L max(t, n_kv) d b_kv / 2^30        b_kv = 1 (fp8), 0.5 (fp4), else 2
    engine (GB)       = N_params / 1e9 * b_w                    (GB subtracted from GiB, as the source does)
    requests          = (G t pp - engine) f / bytes_per_token / (I + O)      f = 0.95 (0.90 PyTorch flow)
    raw batch         = min(requests, 4096) / pp;   raw tokens = min(raw batch (1 + I/O), 32768)
    max_batch_size    = max(64, 32 ceil(raw/32)) below 256; 128 ceil(raw/128) below 1024; else 256 ceil(raw/256)
    max_num_tokens    = max(2048, 256 ceil(raw/256)) below 4096; 512 ceil(raw/512) below 8192; else 1024 ceil(raw/1024)
    without chunked context (PyTorch flow): max_num_tokens = max(that, max ISL + max_batch_size)

KV budgets per GPU (C total memory, W weights, A activation peak):

    vLLM     KV = C u - (W + A + graphs)                 u = 0.92 (0.9 in <= 0.11)
    TRT-LLM  KV = (C - (W + A + reserve)) f              f = 0.9, of memory left after load/profiling
    SGLang   KV = C_free u_s - W                          u_s = mem_fraction_static (activations are in 1 - u_s)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from simulator.cost.memory import activation_reserve_bytes, weights_bytes_per_gpu
from simulator.profiles.profile import EngineProfile
from simulator.specs.checks import SpecError, check_choice
from simulator.specs.dtypes import DTypes
from simulator.specs.hardware import HardwareSpec
from simulator.specs.model import ModelSpec
from simulator.specs.parallelism import Parallelism

GIB = 2.0**30
MIB = 2.0**20
ENTRY_POINTS = ("openai_server", "llm_class")


# ---------------------------------------------------------------------- TensorRT-LLM


@dataclass(frozen=True)
class TrtBenchLimits:
    """What `trtllm-bench build --dataset` picks, and the KV request estimate behind it."""

    max_batch_size: int
    max_num_tokens: int
    kv_max_requests: float


def _round_up(x: float, multiple: int) -> int:
    return multiple * math.ceil(x / multiple)


def trtllm_finetune_setting(kv_max_requests: float, isl: float, osl: float, pp: int = 1) -> tuple[int, int]:
    """`finetune_setting`: (max_batch_size, max_num_tokens) from the KV request estimate."""
    raw_bs = min(kv_max_requests, 4096) / pp
    raw_tok = min(raw_bs * (1 + isl / osl), 32768)
    if raw_bs < 256:
        bs = max(64, _round_up(raw_bs, 32))
    elif raw_bs < 1024:
        bs = _round_up(raw_bs, 128)
    else:
        bs = _round_up(raw_bs, 256)
    if raw_tok < 4096:
        tok = max(2048, _round_up(raw_tok, 256))
    elif raw_tok < 8192:
        tok = _round_up(raw_tok, 512)
    else:
        tok = _round_up(raw_tok, 1024)
    return bs, tok


def trtllm_bytes_per_element(dtype: str) -> float:
    """calc_engine_setting's bytes per element: FP8 1, NVFP4 0.5, anything else 2."""
    return {"fp8": 1.0, "fp4": 0.5}.get(dtype, 2.0)


def trtllm_bench_limits(gpu_memory_gib: float, param_count: float, num_layers: int, num_kv_heads: int,
                        head_dim: int, isl: float, osl: float, *, tp: int = 1, pp: int = 1,
                        weight_dtype: str = "bf16", kv_dtype: str = "bf16", kv_fraction: float = 0.95,
                        chunked_context: bool = True, max_isl: int | None = None) -> TrtBenchLimits:
    """trtllm-bench's build heuristic (module docstring). `gpu_memory_gib` is what NVML reports
    (H100 79.65, H200 140.40); `isl`, `osl` the dataset averages; `max_isl` the dataset's longest
    prompt, used only without chunked context. 0.14 TensorRT engines: kv_fraction 0.95, chunked
    (trtllm-bench throughput turns chunking on); PyTorch flow: 0.90 and `chunked_context` False."""
    if isl <= 0 or osl <= 0:
        raise SpecError(f"isl/osl: {isl!r}/{osl!r} must be > 0 (dataset average lengths)")
    bytes_per_token_gib = 2 * num_layers * max(tp, num_kv_heads) * head_dim * trtllm_bytes_per_element(kv_dtype) / GIB
    engine_gb = param_count / 1e9 * trtllm_bytes_per_element(weight_dtype)
    kv_req = (gpu_memory_gib * tp * pp - engine_gb) * kv_fraction / bytes_per_token_gib / (isl + osl)
    bs, tok = trtllm_finetune_setting(kv_req, isl, osl, pp)
    if not chunked_context:
        tok = max(tok, (int(max_isl) if max_isl is not None else int(math.ceil(isl))) + bs)
    return TrtBenchLimits(bs, tok, kv_req)


def trtllm_bench_limits_for(model: ModelSpec, gpu_memory_gib: float, isl: float, osl: float, *, tp: int = 1,
                            pp: int = 1, weight_dtype: str = "bf16", kv_dtype: str = "bf16",
                            profile: EngineProfile | None = None, max_isl: int | None = None) -> TrtBenchLimits:
    """`trtllm_bench_limits` for a model spec, with the profile's benchmark rule (0.14 TensorRT
    engine when `profile` is None or `trtllm`; the PyTorch flow for `trtllm_bench_pytorch`)."""
    rule = "trtllm_bench_v014" if profile is None else profile.benchmark_tool.rule
    if rule not in ("trtllm_bench_v014", "trtllm_bench_pytorch"):
        raise SpecError(f"engine: {profile.id if profile else ''!r} has benchmark rule {rule!r}, not a trtllm-bench one")
    pytorch = rule == "trtllm_bench_pytorch"
    return trtllm_bench_limits(gpu_memory_gib, model.param_count, model.num_layers, model.num_kv_heads,
                               model.d_head, isl, osl, tp=tp, pp=pp, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                               kv_fraction=0.90 if pytorch else 0.95, chunked_context=not pytorch, max_isl=max_isl)


# ---------------------------------------------------------------------- vLLM


def vllm_v1_batch_defaults(gpu_memory_gib: float, gpu_name: str, tiers: Sequence[dict[str, Any]],
                           entry_point: str = "openai_server", *, max_model_len: int | None = None,
                           chunked_prefill: bool = True) -> tuple[int, int]:
    """`EngineArgs.get_batch_defaults`: (max_num_batched_tokens, max_num_seqs) of the first tier
    whose `min_gib` the GPU reaches and whose `not_name` is not in its name (the vllm profile's
    `limits.tables.batch_defaults`). Without chunked prefill the token default is raised to
    max_model_len; it is always clamped to max_num_seqs x max_model_len."""
    check_choice("entry_point", entry_point, ENTRY_POINTS)
    for tier in tiers:
        if gpu_memory_gib >= tier["min_gib"] and tier.get("not_name", "\0") not in gpu_name.lower():
            tokens, seqs = (int(v) for v in tier[entry_point])
            break
    else:
        raise SpecError(f"tables.batch_defaults: no tier for {gpu_memory_gib:.1f} GiB; add a tier with min_gib: 0")
    if max_model_len is not None:
        if not chunked_prefill:
            tokens = max(tokens, max_model_len)
        tokens = min(tokens, seqs * max_model_len)
    return tokens, seqs


def vllm_v0_batch_defaults(max_model_len: int, chunked_prefill: bool = False) -> tuple[int, int]:
    """V0 `SchedulerConfig`: (max(max_model_len, 2048) or 2048 with chunking, 256 seqs)."""
    return (2048 if chunked_prefill else max(max_model_len, 2048)), 256


def vllm_kv_budget_bytes(hbm_capacity_bytes: float, weights_bytes: float, activation_reserve_bytes: float,
                         gpu_memory_utilization: float = 0.92, cudagraph_bytes: float = 0.0) -> float:
    """KV = C u - (W + A + graphs) (`Worker.determine_available_memory`); negative: does not fit."""
    return hbm_capacity_bytes * gpu_memory_utilization - (weights_bytes + activation_reserve_bytes + cudagraph_bytes)


# ---------------------------------------------------------------------- TensorRT-LLM / SGLang budgets


def trtllm_kv_budget_bytes(hbm_capacity_bytes: float, weights_bytes: float, activation_reserve_bytes: float,
                           free_gpu_memory_fraction: float = 0.90, runtime_reserve_bytes: float = 0.0) -> float:
    """KV = (C - (W + A + reserve)) f (`KvCacheCreator._cal_max_memory`); negative: does not fit."""
    return (hbm_capacity_bytes - (weights_bytes + activation_reserve_bytes + runtime_reserve_bytes)) * free_gpu_memory_fraction


def sglang_kv_budget_bytes(free_at_start_bytes: float, weights_bytes: float, mem_fraction_static: float) -> float:
    """KV = free-at-start u_s - W (`KVCacheConfigurator._profile_available_bytes`): activations
    and graphs live in the 1 - u_s left out, so no activation term."""
    return free_at_start_bytes * mem_fraction_static - weights_bytes


def sglang_gpu_defaults(gpu_memory_gib: float, tiers: Sequence[Sequence[Any]], tp: int = 1) -> tuple[int, int]:
    """(chunked_prefill_size, decode CUDA-graph max batch) of the first tier the GPU is below
    (`handle_gpu_memory_settings`; rows [below GiB or None, chunk, graph TP<4, graph TP>=4])."""
    for below, chunk, graph, graph_tp4 in tiers:
        if below is None or gpu_memory_gib < below:
            return int(chunk), int(graph_tp4 if tp >= 4 else graph)
    raise SpecError(f"tables.gpu_tiers: no tier for {gpu_memory_gib:.1f} GiB; end with a row whose first value is null")


def sglang_mem_fraction_static(gpu_memory_mib: float, chunked_prefill_size: int, graph_max_batch: int,
                               num_prefill_graph_sizes: int, tp: int = 1, pp: int = 1) -> float:
    """mem_fraction_static when unset: reserved MiB = 512 + 1.5 max(chunk, 2048) + t pp/8 1024
    + 2 graph_max_batch + 8 per prefill graph size, at least 10 GiB on GPUs over 60 GiB;
    fraction = (GPU MiB - reserved) / GPU MiB rounded to 3 decimals."""
    reserved = (512 + 1.5 * max(chunked_prefill_size, 2048) + tp * pp / 8 * 1024
                + 2 * graph_max_batch + 8 * num_prefill_graph_sizes)
    if gpu_memory_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((gpu_memory_mib - reserved) / gpu_memory_mib, 3)


def sglang_max_running_requests(kv_tokens: int, context_len: int) -> int:
    """`resolve_max_num_reqs`: min(clamp(KV tokens / context_len x 512, 2048, 4096), KV tokens / 2)."""
    return int(min(min(max(kv_tokens / context_len * 512, 2048), 4096), kv_tokens / 2))


# ---------------------------------------------------------------------- per profile


@dataclass(frozen=True)
class EngineLimits:
    """A profile's default limits on one chip (None: derived later, from the KV size)."""

    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    block_size_tokens: int
    chunked_prefill: bool
    prefix_caching: bool


def default_limits(profile: EngineProfile, hw: HardwareSpec, *, entry_point: str = "openai_server",
                   max_model_len: int | None = None, tp: int = 1) -> EngineLimits:
    """The profile's limits on `hw` when the user sets none (rules resolved; SGLang's seat cap
    depends on the KV size: None here, see `sglang_max_running_requests`)."""
    lim = profile.limits
    gib = hw.hbm_capacity_bytes / GIB
    seqs: Any = lim.max_num_seqs
    tokens: Any = lim.max_num_batched_tokens
    if "vllm_v1_batch_defaults" in (seqs, tokens):
        t, s = vllm_v1_batch_defaults(gib, f"{hw.id} {hw.name}", lim.tables["batch_defaults"], entry_point,
                                      max_model_len=max_model_len, chunked_prefill=lim.chunked_prefill)
        seqs = s if seqs == "vllm_v1_batch_defaults" else seqs
        tokens = t if tokens == "vllm_v1_batch_defaults" else tokens
    if tokens == "vllm_v0_defaults":
        tokens = vllm_v0_batch_defaults(max_model_len or 2048, lim.chunked_prefill)[0]
    if tokens == "sglang_chunk_by_gpu":
        tokens = sglang_gpu_defaults(gib, lim.tables["gpu_tiers"], tp)[0]
    if seqs == "sglang_kv_derived":
        seqs = None
    return EngineLimits(seqs, tokens, lim.block_size_tokens, lim.chunked_prefill, lim.prefix_caching)


def kv_budget_bytes(profile: EngineProfile, hbm_capacity_bytes: float, weights_bytes: float,
                    activation_reserve_bytes: float, *, mem_fraction_static: float | None = None) -> float:
    """The profile's KV budget per GPU (`limits.kv_memory_rule`), the profile's runtime reserve
    included for TRT-LLM. SGLang takes the whole capacity as free at start and needs
    `mem_fraction_static` when the profile does not fix it."""
    lim = profile.limits
    rule = lim.kv_memory_rule
    if rule == "total_fraction":
        return vllm_kv_budget_bytes(hbm_capacity_bytes, weights_bytes, activation_reserve_bytes, float(lim.kv_memory_fraction))
    if rule == "free_after_load_fraction":
        return trtllm_kv_budget_bytes(hbm_capacity_bytes, weights_bytes, activation_reserve_bytes,
                                      float(lim.kv_memory_fraction), profile.runtime_reserve_bytes)
    frac = lim.kv_memory_fraction if not isinstance(lim.kv_memory_fraction, str) else mem_fraction_static
    if frac is None:
        raise SpecError("mem_fraction_static: needed for the sglang KV rule (see sglang_mem_fraction_static)")
    return sglang_kv_budget_bytes(hbm_capacity_bytes, weights_bytes, float(frac))


__all__ = ["EngineLimits", "TrtBenchLimits", "bench_gpu_memory_gib", "default_limits", "profile_kv_budget_bytes", "kv_budget_bytes", "sglang_gpu_defaults",
           "sglang_kv_budget_bytes", "sglang_max_running_requests", "sglang_mem_fraction_static",
           "trtllm_bench_limits", "trtllm_bench_limits_for", "trtllm_finetune_setting", "trtllm_kv_budget_bytes",
           "vllm_kv_budget_bytes", "vllm_v0_batch_defaults", "vllm_v1_batch_defaults"]


def bench_gpu_memory_gib(profile: EngineProfile, hw: HardwareSpec) -> float:
    """GPU memory as the benchmark tool reads it: the profile's `benchmark_tool.settings.
    nvml_memory_gib` entry for the chip, else the catalog capacity in GiB."""
    table = profile.benchmark_tool.settings.get("nvml_memory_gib") or {}
    return float(table.get(hw.id, hw.hbm_capacity_bytes / GIB))


def profile_kv_budget_bytes(profile: EngineProfile, model: ModelSpec, hw: HardwareSpec, par: Parallelism,
                            dtypes: DTypes, max_num_batched_tokens: int, max_num_seqs: int, *,
                            hbm_capacity_bytes: float | None = None,
                            mem_fraction_static: float | None = None) -> float:
    """`kv_budget_bytes` with weights and activation peak from `memory` (weights_bytes_per_gpu,
    activation_reserve_bytes at the step limits); capacity = the chip's unless given (NVML's
    for trtllm-bench rows: `bench_gpu_memory_gib(...) * GIB`)."""
    cap = hw.hbm_capacity_bytes if hbm_capacity_bytes is None else hbm_capacity_bytes
    w = weights_bytes_per_gpu(model, par, dtypes)
    a = activation_reserve_bytes(model, par, dtypes, max_num_batched_tokens, max_num_seqs)
    return kv_budget_bytes(profile, cap, w, a, mem_fraction_static=mem_fraction_static)
