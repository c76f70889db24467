"""An engine profile applied to one run: scheduler, limits, KV budget and cost model.

`engines` loads profiles and `engine_limits` holds the engines' own limit rules; this module
turns a profile into what a simulation needs, for `Scenario` (`--engine` on simulate, sweep,
plan, whatif) and for `validate` (a row's `engine` column):

* `profile_settings(profile, hw, ...)`: the Scenario fields the profile sets when the user
  does not (max_num_seqs, max_num_batched_tokens, block_size, scheduler,
  gpu_memory_utilization, enable_prefix_caching). Explicit user values always win (the caller only fills gaps).
* `scheduler_for(profile)`, `policy_params_for(profile, scheduler)`: the event engine's policy
  for the profile's `scheduler.policy` and its parameters in the policy's names (TRT-LLM
  GUARANTEED_NO_EVICT -> `trtllm` {capacity_policy: guaranteed_no_evict, chunked_context},
  vLLM V1 full-prompt KV check -> `vllm` {admission_gate: whole_prompt}, ...).
* `profile_kv_tokens(...)`: KV capacity per replica under the profile's memory rule when it is
  not vLLM's `C u - W - A` (that one is `memory.memory_plan` with u = gpu_memory_utilization):

      TRT-LLM  KV = (C - W - A - reserve) f          f = gpu_memory_utilization (free_gpu_memory_fraction)
      SGLang   KV = C u_s - W                        u_s = gpu_memory_utilization (mem_fraction_static)

  tokens = KV / (KV bytes per token / (t' pp)), as `memory_plan`.
* `profile_model(model, profile)`: the model as the engine runs it (attention window).
* `profile_hardware(hw, profile)`: `profiles.profile.apply_profile` (step overhead, all-reduce latency,
  PCIe link efficiency, fp8 efficiency per chip class); `profile.link_dtype` goes to the
  CostModel.
* `bench_settings(...)`: what the engine's benchmark tool runs for a measurement row
  (trtllm-bench: limits from the row's ISL/OSL when the row does not state them).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from simulator.cost.memory import (
    activation_reserve_bytes,
    kv_bytes_per_gpu_token,
    weights_bytes_per_gpu,
)
from simulator.profiles.limits import (
    GIB,
    bench_gpu_memory_gib,
    default_limits,
    sglang_gpu_defaults,
    sglang_max_running_requests,
    sglang_mem_fraction_static,
    trtllm_bench_limits_for,
)
from simulator.profiles.profile import EngineProfile, apply_profile, load_engine
from simulator.serving.client_view import ClientView
from simulator.specs.checks import SpecError
from simulator.specs.hardware import HardwareSpec
from simulator.specs.model import ModelSpec

if TYPE_CHECKING:
    pass

#: Scenario fields a profile fills when the user leaves them unset
PROFILE_FIELDS = ("max_num_seqs", "max_num_batched_tokens", "block_size", "scheduler", "gpu_memory_utilization",
                  "enable_prefix_caching", "policy_params")


def scheduler_for(profile: EngineProfile) -> str:
    """The event engine's scheduler for the profile: its policy (a registry name, checked when
    the profile loads), except that vLLM V0 with `num_scheduler_steps` > 1 runs
    `vllm-multistep` and V0 with chunked prefill splits the budget as V1 does (`vllm`)."""
    if profile.policy == "vllm-v0":
        if int(profile.scheduler.params.get("num_scheduler_steps", 1) or 1) > 1:
            return "vllm-multistep"
        if profile.limits.chunked_prefill:
            return "vllm"
    return profile.policy


def policy_params_for(profile: EngineProfile, scheduler: str, chunked: bool | None = None) -> dict[str, Any]:
    """The profile's scheduler parameters in the event policy's names (`SchedulerPolicy.PARAMS`
    of `scheduler`; parameters that policy does not take are left out). `chunked`: TRT-LLM's
    chunked context (default: the profile's `limits.chunked_prefill`)."""
    from simulator.serving.sched.registry import SCHEDULERS

    prm = profile.scheduler.params
    out: dict[str, Any] = {}
    if "admission_kv_check" in prm:
        out["admission_gate"] = "whole_prompt" if prm["admission_kv_check"] == "full_prompt" else "first_chunk"
    if "watermark_fraction" in prm:
        out["watermark"] = float(prm["watermark_fraction"])
    if int(prm.get("num_scheduler_steps", 1) or 1) > 1:
        out["num_scheduler_steps"] = int(prm["num_scheduler_steps"])
    cap = str(prm.get("capacity_scheduler_policy", "")).lower()
    if cap in ("guaranteed_no_evict", "max_utilization"):
        out["capacity_policy"] = cap
    if profile.policy == "trtllm":
        out["chunked_context"] = profile.limits.chunked_prefill if chunked is None else bool(chunked)
    ratio = prm.get("new_token_ratio")
    if isinstance(ratio, dict):
        for ours, theirs in (("init_new_token_ratio", "init"), ("min_new_token_ratio_factor", "min_factor"),
                             ("new_token_ratio_decay_steps", "decay_steps")):
            if theirs in ratio:
                out[ours] = float(ratio[theirs])
    if "schedule_conservativeness" in prm:  # SGLang: init ratio = min(init x conservativeness, 1)
        out["init_new_token_ratio"] = min(out.get("init_new_token_ratio", 0.7) * float(prm["schedule_conservativeness"]), 1.0)
    # a scheduler that is not a name (a scenario YAML can hold a list) is reported by the
    # Scenario's own check, one line; here it just has no parameters
    allowed = SCHEDULERS[scheduler].PARAMS if isinstance(scheduler, str) and scheduler in SCHEDULERS else {}
    return {k: v for k, v in out.items() if k in allowed}


def _sglang_fraction(profile: EngineProfile, hw: HardwareSpec, tp: int, pp: int) -> float:
    chunk, graph = sglang_gpu_defaults(hw.hbm_capacity_bytes / GIB, profile.limits.tables["gpu_tiers"], tp)
    return sglang_mem_fraction_static(hw.hbm_capacity_bytes / 2**20, chunk, graph, 0, tp, pp)


def profile_settings(profile: EngineProfile, hw: HardwareSpec, *, tp: int = 1, pp: int = 1,
                     max_model_len: int | None = None) -> dict[str, Any]:
    """Scenario settings from the profile's defaults on `hw` (seats left to the KV size for
    SGLang are resolved by `profile_kv_tokens`' caller: here 256 stands in until then)."""
    lim = default_limits(profile, hw, max_model_len=max_model_len, tp=tp)
    frac = profile.limits.kv_memory_fraction
    if isinstance(frac, str):
        frac = _sglang_fraction(profile, hw, tp, pp)
    return {
        "max_num_seqs": lim.max_num_seqs or 256,
        "max_num_batched_tokens": lim.max_num_batched_tokens or 8192,
        "block_size": lim.block_size_tokens,
        "scheduler": scheduler_for(profile),
        "gpu_memory_utilization": float(frac),
        "enable_prefix_caching": bool(lim.prefix_caching),
    }  # policy_params: `policy_params_for(profile, scheduler)` once the scheduler is settled


def profile_hardware(hw: HardwareSpec, profile: EngineProfile) -> HardwareSpec:
    """`hw` with the profile's overheads and kernel factors (`profiles.profile.apply_profile`)."""
    return apply_profile(hw, profile)


def profile_model(model: ModelSpec, profile: EngineProfile) -> ModelSpec:
    """`model` as the engine runs it: `kernels.attention_window: full` drops a sliding window
    (TRT-LLM 0.14 engines attend over the whole context unless told the window at run time)."""
    if profile.kernels.attention_window == "full" and model.sliding_window is not None:
        return dataclasses.replace(model, sliding_window=None)
    return model


def profile_kv_tokens(profile: EngineProfile, cost: Any, fraction: float, max_num_batched_tokens: int,
                      max_num_seqs: int, *, hbm_capacity_bytes: float | None = None) -> int | None:
    """KV tokens per replica under the profile's memory rule (module docstring); None for
    vLLM's rule (`memory_plan` prices it). Raises SpecError when nothing is left for KV."""
    rule = profile.limits.kv_memory_rule
    if rule == "total_fraction":
        return None
    cap = cost.hardware.hbm_capacity_bytes if hbm_capacity_bytes is None else hbm_capacity_bytes
    w = weights_bytes_per_gpu(cost.model, cost.par, cost.dtypes)
    if rule == "free_after_load_fraction":
        a = activation_reserve_bytes(cost.model, cost.par, cost.dtypes, max_num_batched_tokens, max_num_seqs)
        budget = (cap - w - a - profile.runtime_reserve_bytes) * fraction
    else:
        budget = cap * fraction - w
    per_token = kv_bytes_per_gpu_token(cost.model, cost.par, cost.dtypes.kv)
    tokens = int(max(budget, 0.0) // per_token)
    if tokens < 16:
        raise SpecError(f"engine: {profile.id} leaves no KV memory for {cost.model.id} on {cost.hardware.id} "
                        f"with tp={cost.par.tp} pp={cost.par.pp} ({budget / 1e9:.1f} GB)")
    return tokens


def sglang_seats(kv_tokens: int, context_len: int) -> int:
    """SGLang's max_running_requests from its KV size (`profiles.limits.sglang_max_running_requests`)."""
    return max(1, sglang_max_running_requests(kv_tokens, context_len))


@dataclass(frozen=True)
class BenchSettings:
    """How a measurement row was run by the engine's benchmark tool (None: not stated)."""

    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    hbm_capacity_bytes: float | None  # the capacity the tool and the runtime read (NVML)
    concurrency_bound: int | None  # seats the run can fill: min(max_batch_size, KV requests)


def bench_settings(profile: EngineProfile, cost: Any, row: dict[str, Any]) -> BenchSettings:
    """trtllm-bench rows: max_batch_size / max_num_tokens from the row's ISL/OSL (the build
    heuristic, `profiles.limits.trtllm_bench_limits_for`) where the row leaves them empty, on
    NVML's memory size. Other engines: the row's own limits (None when empty)."""
    mbs, mnt = row.get("max_batch_size"), row.get("max_num_tokens")
    if profile.benchmark_tool.rule == "none" or row.get("input_len") is None or row.get("output_len") is None:
        return BenchSettings(mbs, mnt, None, None)
    gib = bench_gpu_memory_gib(profile, cost.hardware)
    lim = trtllm_bench_limits_for(cost.model, gib, row["input_len"], row["output_len"], tp=cost.par.tp,
                                  pp=cost.par.pp, weight_dtype=cost.dtypes.weight, kv_dtype=cost.dtypes.kv,
                                  profile=profile)
    mbs = mbs or lim.max_batch_size
    mnt = mnt or lim.max_num_tokens
    frac = float(profile.benchmark_tool.settings.get("kv_memory_fraction", 0.9))
    kv = profile_kv_tokens(profile, cost, frac, mnt, mbs, hbm_capacity_bytes=gib * GIB)
    per_req = row["input_len"] + row["output_len"]
    bound = mbs if kv is None else max(1, min(mbs, kv // per_req))
    return BenchSettings(mbs, mnt, gib * GIB, bound)


#: offline trtllm-bench rows: simulate this many "waves" of the concurrency the run can fill.
#: All requests arrive at t = 0 with the same lengths; chunked context staggers the first wave
#: and every later wave repeats that pattern, so the second wave already runs at the steady
#: rate (the source's 1,000-30,000 requests per shape are not stated per row). 2 rather than
#: more keeps a TP8 Mixtral 2048/2048 row (about 2,000 concurrent) to a few seconds.
BENCH_WAVES = 2


def bench_num_requests(num_requests: int | None, bound: int | None, default: int) -> int:
    """Requests to simulate for an offline benchmark row: min(stated, BENCH_WAVES x bound)."""
    n = num_requests or default
    if bound is None:
        return n
    return int(min(n if num_requests else math.inf, BENCH_WAVES * bound))


def row_settings(profile: EngineProfile, cost: Any, row: dict[str, Any], num_requests: int,
                 offline: bool) -> dict[str, Any]:
    """Scenario settings that price a serving measurement row under `profile`: the row's limits,
    else its benchmark tool's (trtllm-bench: from ISL/OSL), else the profile's defaults; the
    KV capacity by the profile's rule (on NVML's memory size for trtllm-bench rows); offline
    benchmark rows simulate `bench_num_requests` requests. Lengths are exact (ignore-eos)."""
    bench = bench_settings(profile, cost, row)
    base = profile_settings(profile, cost.hardware, tp=cost.par.tp, pp=cost.par.pp)
    seqs = bench.max_num_seqs or base["max_num_seqs"]
    tokens = bench.max_num_batched_tokens or base["max_num_batched_tokens"]
    frac = base["gpu_memory_utilization"]
    if bench.hbm_capacity_bytes is not None:
        frac = float(profile.benchmark_tool.settings.get("kv_memory_fraction", frac))
    kv = profile_kv_tokens(profile, cost, frac, tokens, seqs, hbm_capacity_bytes=bench.hbm_capacity_bytes)
    n = bench_num_requests(row.get("num_requests"), bench.concurrency_bound, num_requests) if offline else num_requests
    chunked = profile.benchmark_tool.settings.get("chunked_prefill") if bench.hbm_capacity_bytes else None
    return {"engine": profile.id, "max_num_seqs": seqs, "max_num_batched_tokens": tokens,
            "block_size": base["block_size"], "scheduler": base["scheduler"], "gpu_memory_utilization": frac,
            "kv_capacity_tokens": kv, "num_requests": n,
            "enable_prefix_caching": bool(profile.benchmark_tool.settings.get("prefix_caching", base["enable_prefix_caching"])),
            "policy_params": policy_params_for(profile, base["scheduler"], chunked)}


# ------------------------------------------------------------------ MLPerf submissions

#: the share of HBM the weights of an unstated layout may take (module `assumed_layout`)
LAYOUT_WEIGHT_SHARE = 0.5


def assumed_layout(model: ModelSpec, hw: HardwareSpec, dtypes: Any, num_gpus: int) -> tuple[int, int]:
    """(tp, pp) of a row whose source does not state its layout: the smallest TP in 1, 2, 4, 8
    (then TP 8 with PP 2, 4, ...) dividing `num_gpus` whose weights take at most
    LAYOUT_WEIGHT_SHARE of one GPU's memory, leaving the rest to the KV cache an Offline run
    fills. ASSUMED: it reproduces every layout the MLPerf rows do state for the same model
    and chip class (llama2-70b fp8: TP2 on 80 GB, TP1 on 141+ GB; 8B and Mixtral: TP1) but
    is a rule, not a fact of the unstated runs."""
    from simulator.specs.parallelism import Parallelism

    shapes = [(t, 1) for t in (1, 2, 4, 8)] + [(8, p) for p in (2, 4, 8, 16)]
    for tp, pp in shapes:
        if num_gpus % (tp * pp):
            continue
        w = weights_bytes_per_gpu(model, Parallelism(tp, pp), dtypes)
        if w <= LAYOUT_WEIGHT_SHARE * hw.hbm_capacity_bytes:
            return tp, pp
    raise SpecError(f"layout: tp/pp not stated and no TP <= 8 x PP dividing {num_gpus} GPUs fits "
                    f"{model.id}'s weights in {LAYOUT_WEIGHT_SHARE:.0%} of {hw.id}'s memory")


#: NVIDIA's MLPerf v5.1 TensorRT-LLM harness (closed/NVIDIA/code/llmlib/config.py @952ca601,
#: TrtllmHarnessConfig.DEFAULT_RUNTIME_FLAGS):
#: batch_scheduler_policy max_util, kvcache_free_gpu_mem_frac 0.80, chunked context off unless
#: a benchmark's config enables it
MLPERF_TRTLLM_KV_FRACTION = 0.80
#: benchmarks whose NVIDIA/HPE v5.1 configs set enable_chunked_context True (llama2-70b,
#: llama3_1-8b, llama3_1-405b Offline configs); Mixtral's B200 config leaves the default
#: (off) and DeepSeek-R1's turns it off; other submitters' configs copy NVIDIA's (ASSUMED)
MLPERF_CHUNKED_CONTEXT = ("llama2-70b", "llama3.1-8b", "llama3.1-405b")
#: the CSV's max_num_tokens of these rows is the engine *build* flag; the scheduler runs with
#: the runtime value (trtllm_runtime_flags): (benchmark, hardware, build) -> runtime.
#: 405B: NV-CFG B200 Offline llama3_1-405b.py (build 5120, runtime 1536; every B200 405B row
#: carries 5120, configs copied from NVIDIA's). Mixtral H200: HPE-CFG mixtral-8x7b.py (build
#: 16384, runtime 9216; the ASUSTeK H200 row has the same 16384, ASSUMED the same template)
MLPERF_RUNTIME_TOKENS: dict[tuple[str, str, int], int] = {
    ("llama3.1-405b", "b200", 5120): 1536,
    ("mixtral-8x7b", "h200-sxm", 16384): 9216,
    # DeepSeek-R1 GB300: NV-CFG GB300-NVL72 and CoreWeave GB300-NVL8 Offline deepseek-r1.py
    # (build 4608, runtime 6656)
    ("deepseek-r1", "gb300", 4608): 6656,
}
#: kvcache_free_gpu_mem_frac where a benchmark's config sets it (the harness default is
#: MLPERF_TRTLLM_KV_FRACTION): DeepSeek-R1 0.9 on B200 and GB200 (NV-CFG B200-SXM-180GBx8 and
#: GB200-NVL72 Offline deepseek-r1.py), 0.95 on GB300 (NV-CFG GB300-NVL72, CoreWeave GB300-NVL8)
MLPERF_KV_FRACTIONS: dict[tuple[str, str], float] = {
    ("deepseek-r1", "b200"): 0.90, ("deepseek-r1", "gb200"): 0.90, ("deepseek-r1", "gb300"): 0.95,
}
#: the harness's max_concurrency, the requests in flight per engine instance ("applies to each
#: LLMCore", llmlib config.py TrtllmEndpointConfig), where a config sets it: DeepSeek-R1 5120
#: on B200/GB200 (above the 8 x 512 seats), 10240 on GB300 (below its 8 x 1536 seats: 1280 a
#: rank); same configs as MLPERF_KV_FRACTIONS
MLPERF_MAX_CONCURRENCY: dict[tuple[str, str], int] = {
    ("deepseek-r1", "b200"): 5120, ("deepseek-r1", "gb200"): 5120, ("deepseek-r1", "gb300"): 10240,
}
#: DeepSeek-R1 on TensorRT-LLM runs attention data-parallel: "max-bs applies per
#: attention-rank, when enabled, each TP rank has a DP rank of attention block" (llmlib
#: config.py TrtllmEndpointConfig), so an instance holds tp x max_batch_size sequences, each
#: rank scheduling its own batch (the token budget per rank too: ASSUMED)
MLPERF_ATTENTION_DP = ("deepseek-r1",)


def mlperf_limits(profile: EngineProfile, benchmark: str, hardware_id: str, tp: int,
                  max_batch_size: int | None, max_num_tokens: int | None) -> dict[str, Any]:
    """An MLPerf v5.1 row's engine settings beyond its columns: {max_batch_size,
    max_num_tokens (runtime; per scheduler), dp_ranks (attention-DP ranks per instance, each
    with its own scheduler and these limits; 1 without), chunked (None: the profile's),
    capacity_policy, kv_fraction (None: the profile's), notes}. vLLM and SGLang rows run as
    their columns say (AMD's harness: max_num_seqs / max_num_batched_tokens, budgets far above
    every prompt)."""
    notes: list[str] = []
    out: dict[str, Any] = {"max_batch_size": max_batch_size, "max_num_tokens": max_num_tokens, "dp_ranks": 1,
                           "chunked": None, "capacity_policy": None, "kv_fraction": None}
    if profile.policy != "trtllm":
        out["notes"] = notes
        return out
    out["capacity_policy"] = "max_utilization"
    out["kv_fraction"] = MLPERF_KV_FRACTIONS.get((benchmark, hardware_id), MLPERF_TRTLLM_KV_FRACTION)
    if out["kv_fraction"] != MLPERF_TRTLLM_KV_FRACTION:
        notes.append(f"KV cache fraction {out['kv_fraction']:g} (the benchmark's config)")
    out["chunked"] = benchmark in MLPERF_CHUNKED_CONTEXT
    runtime = MLPERF_RUNTIME_TOKENS.get((benchmark, hardware_id, max_num_tokens or 0))
    if runtime is not None:
        out["max_num_tokens"] = runtime
        notes.append(f"max_num_tokens {max_num_tokens} is the build flag; runtime {runtime}")
    if benchmark in MLPERF_ATTENTION_DP and tp > 1:
        out["dp_ranks"] = tp
    # the harness keeps at most `cap` requests in an instance, spread over its schedulers
    cap = MLPERF_MAX_CONCURRENCY.get((benchmark, hardware_id))
    if cap is not None and max_batch_size and cap // out["dp_ranks"] < max_batch_size:
        out["max_batch_size"] = cap // out["dp_ranks"]
        notes.append(f"max_concurrency {cap} an instance: {out['max_batch_size']} of the {max_batch_size} seats "
                     "a scheduler used")
    if out["dp_ranks"] > 1:
        notes.append(f"attention DP: {tp} ranks of {out['max_batch_size']} seats / {out['max_num_tokens']} tokens")
    out["notes"] = notes
    return out


def resolve(ref: str | EngineProfile | None) -> EngineProfile:
    """`profiles.profile.load_engine`, for callers that only import this module."""
    return load_engine(ref)


__all__ = ["BENCH_WAVES", "LAYOUT_WEIGHT_SHARE", "MLPERF_ATTENTION_DP", "MLPERF_CHUNKED_CONTEXT",
           "MLPERF_KV_FRACTIONS", "MLPERF_MAX_CONCURRENCY", "MLPERF_RUNTIME_TOKENS",
           "MLPERF_TRTLLM_KV_FRACTION", "assumed_layout", "mlperf_limits", "client_view_for", "frontend_s_for", "lag_steps_for", "BenchSettings", "PROFILE_FIELDS", "bench_num_requests",
           "bench_settings", "policy_params_for", "profile_hardware", "profile_model", "row_settings", "profile_kv_tokens", "profile_settings", "resolve",
           "scheduler_for", "sglang_seats"]


# ------------------------------------------------------------------ the client's view


def client_view_for(profile: Any) -> ClientView:
    """What the profile's client sees beyond the engine core (`serving.client_view`): its
    API-server latency, its tokenizer's time per prompt token, its event loop's time per
    streamed output and, under async scheduling, one step of admission lag."""
    ov = profile.overheads
    return ClientView(frontend_s_for(profile), lag_steps_for(profile),
                      prompt_token_s=float(ov.per_prompt_token_s.value or 0.0),
                      stream_output_s=float(ov.per_stream_output_s.value or 0.0))


def lag_steps_for(profile: Any) -> int:
    """1 under async scheduling (`scheduler.params.async_scheduling`), else 0."""
    return 1 if profile.scheduler.params.get("async_scheduling") else 0


def frontend_s_for(profile: Any) -> float:
    """The engine profile's API-server latency (`overheads.per_request_s`; None -> 0)."""
    return float(profile.overheads.per_request_s.value or 0.0)
