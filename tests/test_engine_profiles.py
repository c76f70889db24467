"""Engine profiles (issue 13): the shipped catalog, one-line errors for bad profiles, the row
`engine` mapping, the engines' own limit rules worked out by hand, and the cost-model hook.

Every expected number is computed in the comment beside it from the engine's published rule
(docs/engines.md, engine_specs/*.yaml sources), never taken from the code under test.
"""

from __future__ import annotations

import copy
import csv
import dataclasses
from pathlib import Path

import pytest

from simulator.profiles.limits import (
    default_limits,
    kv_budget_bytes,
    sglang_gpu_defaults,
    sglang_kv_budget_bytes,
    sglang_max_running_requests,
    sglang_mem_fraction_static,
    trtllm_bench_limits,
    trtllm_bench_limits_for,
    trtllm_finetune_setting,
    trtllm_kv_budget_bytes,
    vllm_kv_budget_bytes,
    vllm_v0_batch_defaults,
    vllm_v1_batch_defaults,
)
from simulator.profiles.profile import (
    POLICY_PARAMS,
    EngineProfile,
    apply_profile,
    chip_class,
    engine_catalog,
    engine_for_row,
    engine_from_dict,
    load_engine,
)
from simulator.resolve import make_cost_model
from simulator.serving.sched.registry import SCHEDULERS
from simulator.specs.catalog import _catalog_dir, load_hardware, load_model, read_yaml
from simulator.specs.checks import SpecError

MEASUREMENTS = Path("/work/shared/reference/measurements")
ENGINE_DIR = _catalog_dir("engine_specs")


def raw(engine_id: str) -> dict:
    return copy.deepcopy(read_yaml(ENGINE_DIR / f"{engine_id}.yaml"))


# ---------------------------------------------------------------------- catalog


def test_every_shipped_profile_loads_with_its_file_name_as_id() -> None:
    cat = engine_catalog()
    assert {"vllm", "vllm-v0", "trtllm", "trtllm-pytorch", "sglang", "generic"} <= set(cat)
    # every profile names its policy as the event engine's registry does
    assert {p.policy for p in cat.values()} == set(POLICY_PARAMS) and set(POLICY_PARAMS) <= set(SCHEDULERS)
    for pid, prof in cat.items():
        assert isinstance(prof, EngineProfile) and prof.id == pid
        assert (ENGINE_DIR / f"{pid}.yaml").is_file()


def test_default_engine_is_vllm_v1_and_lookup_is_case_insensitive() -> None:
    assert load_engine().id == "vllm" and load_engine().policy == "vllm"
    assert load_engine("TRTLLM").id == "trtllm"


def test_unknown_engine_name_gets_did_you_mean() -> None:
    with pytest.raises(SpecError, match=r"^engine: 'trtlm' is not a profile id or a file \(did you mean 'trtllm'\?\)"):
        load_engine("trtlm")


def test_user_profile_file_loads(tmp_path: Path) -> None:
    import yaml

    data = raw("trtllm")
    data["id"] = "my-trt"
    data["overheads"]["step_overhead_s"] = {"value": 0.002, "status": "assumed"}
    path = tmp_path / "my-trt.yaml"
    path.write_text(yaml.safe_dump(data))
    prof = load_engine(str(path))
    assert prof.id == "my-trt" and prof.step_overhead_s == 0.002


def test_trtllm_profile_carries_the_provisional_analytic_fit() -> None:
    p = load_engine("trtllm")
    # benchmarks/analyze_throughput.py (the profile's sources): 3.22 ms, 3.97 GiB, 0.80 Ada, 1.0 Hopper, 0.41, 50 us
    assert p.step_overhead_s == pytest.approx(0.00322)
    assert p.runtime_reserve_bytes == pytest.approx(3.97 * 2**30, rel=1e-3)
    assert p.fp8_relative("l40s") == pytest.approx(0.80) and p.fp8_relative("h200-sxm") == 1.0
    assert p.fp8_relative("a100-sxm-80gb") is None
    assert p.kernels.allreduce_latency_s.value == pytest.approx(5e-5)
    for path, t in p.tunables().items():
        if t.value is not None and path != "overheads.per_request_s":
            assert t.kind == "provisional" and "analyze_throughput.py" in t.status, path
    assert p.allreduce_16bit and p.kernels.attention_window == "full"


def test_vllm_fp8_on_ada_is_its_own_kernels_rate() -> None:
    # vLLM's FP8 W8A8 GEMMs on sm89 (CUTLASS 2.x) at 0.55 of the chip's fp8 efficiency (which is
    # TensorRT-LLM's): 0.55 x 0.5266 = 0.2896 of L40S's 733 TFLOP/s fp8 peak, 212 TFLOP/s; bf16
    # GEMMs, other families and other engines keep theirs; `llmsim show l40s` lists it
    from simulator.profiles.profile import apply_profile, engine_family_numbers
    from simulator.specs.catalog import load_hardware

    l40s = load_hardware("l40s")
    eff = apply_profile(l40s, load_engine("vllm")).efficiency
    assert eff.compute_for("fp8") == pytest.approx(0.55 * 0.5266)
    assert eff.attention_for("fp8") == pytest.approx(0.55 * 0.5266)
    assert eff.compute_for("bf16") == pytest.approx(0.5266)
    assert 733e12 * eff.compute_for("fp8") / 1e12 == pytest.approx(212.3, abs=0.1)
    assert load_engine("vllm").fp8_relative("h100-sxm") is None
    assert engine_family_numbers("l40s")["vllm"]["fp8_efficiency_relative"].startswith("0.55 (fitted")
    assert engine_family_numbers("l40s")["trtllm"]["fp8_efficiency_relative"].startswith("0.8 (provisional")


# ---------------------------------------------------------------------- bad profiles: one line each


def _error(data: dict) -> str:
    with pytest.raises(SpecError) as e:
        engine_from_dict(data, "x.yaml")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("x.yaml: ")
    return msg


def test_unknown_key_is_named_with_suggestion() -> None:
    data = raw("vllm")
    data["limits"]["block_size"] = 16
    data["sources"]["limits.block_size"] = "x"
    assert "limits.block_size: unknown field (did you mean 'block_size_tokens'?)" in _error(data)


def test_unknown_top_level_key() -> None:
    data = raw("vllm")
    data["schedular"] = {}
    assert "schedular: unknown field (did you mean 'scheduler'?)" in _error(data)


def test_wrong_type_is_named() -> None:
    data = raw("vllm")
    data["limits"]["chunked_prefill"] = "yes"
    assert "limits.chunked_prefill: 'yes' is not true or false" in _error(data)


def test_unknown_policy_and_policy_parameter() -> None:
    data = raw("vllm")
    data["scheduler"]["policy"] = "vllm_v2"
    assert "scheduler.policy: 'vllm_v2' is not one of vllm, prefill-priority, vllm-v0, vllm-multistep, static, trtllm, sglang, vllm-v1" in _error(data)
    data = raw("vllm")
    data["scheduler"]["params"]["runing_first"] = True
    assert "params.runing_first: unknown parameter for policy 'vllm' (did you mean 'running_first'?)" in _error(data)


def test_number_without_source_is_rejected() -> None:
    data = raw("sglang")
    data["limits"]["chunk_unit_tokens"] = 8
    assert "sources: no entry for limits.chunk_unit_tokens (= 8)" in _error(data)


def test_stale_source_key_is_rejected() -> None:
    data = raw("trtllm")
    data["sources"]["limits.blok_size_tokens"] = "x"
    assert "sources.limits.blok_size_tokens: no such path in the profile (did you mean 'limits.block_size_tokens'?)" in _error(data)


def test_bad_status_and_missing_value() -> None:
    data = raw("trtllm")
    data["overheads"]["step_overhead_s"]["status"] = "guessed"
    assert "status: 'guessed' must start with one of fitted, provisional" in _error(data)
    data = raw("trtllm")
    data["overheads"]["step_overhead_s"] = {"status": "fitted"}
    assert "value: None with status 'fitted'" in _error(data)


def test_bad_fractions_and_rules() -> None:
    data = raw("vllm")
    data["limits"]["kv_memory_fraction"] = 1.5
    assert "limits.kv_memory_fraction: 1.5 must be in (0, 1]" in _error(data)
    data = raw("vllm")
    data["limits"]["max_num_seqs"] = "by_magic"
    assert "limits.max_num_seqs: 'by_magic' is not an integer or a rule" in _error(data)
    data = raw("trtllm")
    data["kernels"]["fp8_efficiency_relative"]["hoper"] = {"value": 0.9, "status": "assumed"}
    assert "fp8_efficiency_relative.hoper: unknown chip class (did you mean 'hopper'?)" in _error(data)


def test_not_a_mapping() -> None:
    with pytest.raises(SpecError, match=r"^x.yaml: expected a mapping of fields, got list$"):
        engine_from_dict([1], "x.yaml")


def test_missing_required_section() -> None:
    data = raw("vllm")
    del data["limits"]
    data["sources"] = {k: v for k, v in data["sources"].items() if not k.startswith("limits")}
    assert "limits: required field is missing" in _error(data)


# ---------------------------------------------------------------------- engine column of the measurements


def _engines(name: str) -> set[str]:
    with open(MEASUREMENTS / name, newline="") as f:
        return {row["engine"] for row in csv.DictReader(f)}


@pytest.mark.skipif(not MEASUREMENTS.is_dir(), reason="shared measurements not available")
def test_engine_for_row_on_every_measured_engine_string() -> None:
    expected = {
        "TensorRT-LLM v0.14.0 trtllm-bench throughput (engine, in-flight batching)": "trtllm",
        "vLLM v0.15.1 (OpenAI server, streaming /v1/completions; client kubernetes-sigs/inference-perf)": "vllm",
        "TensorRT-LLM v0.6.1 gptSessionBenchmark (static batch)": "generic",
        "TensorRT-LLM v0.5 gptSessionBenchmark (static batch)": "generic",
        "TensorRT-LLM v0.5 gptSessionBenchmark (output_len=1)": "generic",
        "TensorRT-LLM v0.5.0 (static batch)": "generic",
        "TensorRT-LLM v0.5.0 gptSessionBenchmark (static batch)": "generic",
        "lmdeploy v0.1.0a1 (TurboMind), CUDA 11.8": "generic",
        "gpt-fast (PyTorch nightly, torch.compile, batch 1)": "generic",
        "gpt-fast (PyTorch nightly, torch.compile, batch 1) ENABLE_INTRA_NODE_COMM=1": "generic",
        "not stated in CSV (Splitwise characterization setup; see paper Sec. III)": "generic",
    }
    seen = _engines("dev.csv") | _engines("dev_throughput.csv") | _engines("dev_serving.csv")
    assert seen == set(expected), "a new engine string: add it here with its profile"
    for text, pid in expected.items():
        assert engine_for_row(text) == pid, text
        load_engine(pid)


def test_engine_for_row_versions_and_other_engines() -> None:
    assert engine_for_row("vLLM v0.6.3 (benchmark_serving)") == "vllm-v0"
    assert engine_for_row("vLLM 0.8.5") == "vllm"
    assert engine_for_row("vLLM 0.9.2 V0 engine") == "vllm-v0"
    assert engine_for_row("TensorRT-LLM 1.0.0rc4 trtllm-bench") == "trtllm-pytorch"
    assert engine_for_row("TensorRT-LLM v0.17 PyTorch backend") == "trtllm-pytorch"
    assert engine_for_row("SGLang v0.4.3") == "sglang"
    assert engine_for_row("") == "generic"


# ---------------------------------------------------------------------- trtllm-bench build heuristic


def test_finetune_setting_rounding_rules() -> None:
    # batch: <256 -> multiple of 32, at least 64; <1024 -> of 128; else of 256 (/pp first)
    # tokens: raw = min(bs_raw (1 + I/O), 32768); <4096 -> of 256, at least 2048; <8192 -> of 512; else 1024
    assert trtllm_finetune_setting(10, 128, 128) == (64, 2048)          # 10 -> 64; 20 tokens -> 2048
    assert trtllm_finetune_setting(233, 1024, 1024) == (256, 2048)      # ceil(233/32)=8 -> 256; 466 -> 2048
    assert trtllm_finetune_setting(300, 128, 128) == (384, 2048)        # ceil(300/128)=3 -> 384; 600 -> 2048
    assert trtllm_finetune_setting(1030, 1000, 1000) == (1280, 2304)    # ceil(1030/256)=5; 2060 -> 9*256
    assert trtllm_finetune_setting(3000, 1000, 1000) == (3072, 6144)    # 12*256; 6000 -> 12*512
    assert trtllm_finetune_setting(9000, 1000, 1000) == (4096, 8192)    # min(9000,4096); 8192 -> 8*1024
    assert trtllm_finetune_setting(5000, 20000, 2000) == (4096, 32768)  # tokens capped at 32768
    assert trtllm_finetune_setting(600, 128, 128, pp=2) == (384, 2048)  # 300 per stage


def test_trtllm_bench_worked_example_llama8b_bf16_h100() -> None:
    # docs/engines.md §2.7 example 1: Llama-3.1-8B BF16, H100 (NVML 79.65 GiB), ISL = OSL = 1024, 0.14 (f 0.95).
    # bytes/token = 2*32*8*128*2 / 2^30 = 1.220703125e-4 GiB; engine = 8.030261248 * 2 = 16.060522496
    # requests = (79.65 - 16.060522496) * 0.95 / 1.220703125e-4 / 2048 = 241.64 -> batch 256, tokens 2048
    m = load_model("llama-3.1-8b")
    assert m.param_count == 8030261248  # the hand calculation's input
    lim = trtllm_bench_limits_for(m, 79.65, 1024, 1024)
    assert lim.kv_max_requests == pytest.approx(241.640, abs=1e-3)
    assert (lim.max_batch_size, lim.max_num_tokens) == (256, 2048)


def test_trtllm_bench_worked_example_llama70b_fp8_h200_no_chunking() -> None:
    # docs/engines.md §2.7 example 2 (PyTorch flow: f 0.90, no chunked context): Llama-3.1-70B FP8 + FP8 KV,
    # H200 (140.40 GiB), ISL 20000 / OSL 2000. bytes/token = 2*80*8*128*1/2^30 = 1.52587890625e-4;
    # engine 70.553706496 GB; requests = (140.40 - 70.5537) * 0.9 / 1.52588e-4 / 22000 = 18.726
    # -> batch 64, tokens 2048 raised to 20000 + 64 = 20064
    m = load_model("llama-3.1-70b")
    lim = trtllm_bench_limits_for(m, 140.40, 20000, 2000, weight_dtype="fp8", kv_dtype="fp8",
                                  profile=load_engine("trtllm-pytorch"))
    assert lim.kv_max_requests == pytest.approx(18.726, abs=1e-3)
    assert (lim.max_batch_size, lim.max_num_tokens) == (64, 20064)
    # the 0.14 TensorRT-engine flow (f 0.95, chunked): 19.77 requests, tokens stay 2048
    lim14 = trtllm_bench_limits_for(m, 140.40, 20000, 2000, weight_dtype="fp8", kv_dtype="fp8")
    assert lim14.kv_max_requests == pytest.approx(18.726 * 0.95 / 0.90, abs=1e-3)
    assert (lim14.max_batch_size, lim14.max_num_tokens) == (64, 2048)


def test_trtllm_bench_kv_heads_at_least_tp() -> None:
    # tp 8 > 8 KV heads? equal: max(8, 8) = 8; tp 16 would use 16. With tp 8 fp8 70B on H200:
    # bytes/token = 1.52587890625e-4; (140.40*8 - 70.5537) * 0.95 / 1.52588e-4 / 2000 = 3276.85
    # -> batch 256 ceil(3276.85/256) = 3328; tokens 3276.85*2 = 6553.7 -> 512*13 = 6656
    lim = trtllm_bench_limits(140.40, 70553706496, 80, 8, 128, 1000, 1000, tp=8, weight_dtype="fp8", kv_dtype="fp8")
    assert lim.kv_max_requests == pytest.approx(3276.846, abs=1e-3)
    assert (lim.max_batch_size, lim.max_num_tokens) == (3328, 6656)
    wide = trtllm_bench_limits(140.40, 70553706496, 80, 8, 128, 1000, 1000, tp=16, weight_dtype="fp8", kv_dtype="fp8")
    # twice the memory (minus the same engine) over twice the bytes per token
    assert wide.kv_max_requests == pytest.approx((140.40 * 16 - 70.553706496) * 0.95 / (2 * 1.52587890625e-4) / 2000)


# ---------------------------------------------------------------------- vLLM and SGLang defaults


def test_vllm_v1_defaults_by_gpu_and_entry_point() -> None:
    # docs/engines.md §1.2 (V33): >=160 GiB 16384/1024 both; >=70 GiB non-A100 server 8192/1024, LLM 16384/1024;
    # else server 2048/256, LLM 8192/256
    tiers = load_engine("vllm").limits.tables["batch_defaults"]
    assert vllm_v1_batch_defaults(80, "h100-sxm", tiers) == (8192, 1024)
    assert vllm_v1_batch_defaults(141, "h200-sxm", tiers, "llm_class") == (16384, 1024)
    assert vllm_v1_batch_defaults(80, "a100-sxm-80gb", tiers) == (2048, 256)
    assert vllm_v1_batch_defaults(80, "NVIDIA A100-SXM4-80GB", tiers, "llm_class") == (8192, 256)
    assert vllm_v1_batch_defaults(45, "l40s", tiers) == (2048, 256)
    assert vllm_v1_batch_defaults(180, "b200", tiers) == (16384, 1024)
    # chunking off: tokens raised to max_model_len; always clamped to seqs * max_model_len
    assert vllm_v1_batch_defaults(45, "l40s", tiers, max_model_len=4096, chunked_prefill=False) == (4096, 256)
    assert vllm_v1_batch_defaults(80, "h100-sxm", tiers, max_model_len=4) == (4096, 1024)
    with pytest.raises(SpecError, match="entry_point: 'cli' is not one of openai_server, llm_class"):
        vllm_v1_batch_defaults(80, "h100-sxm", tiers, "cli")


def test_vllm_v0_defaults() -> None:
    assert vllm_v0_batch_defaults(4096) == (4096, 256)
    assert vllm_v0_batch_defaults(1024) == (2048, 256)
    assert vllm_v0_batch_defaults(65536, chunked_prefill=True) == (2048, 256)


def test_default_limits_resolve_each_profile() -> None:
    h100, a100, l40s = load_hardware("h100-sxm"), load_hardware("a100-sxm-80gb"), load_hardware("l40s")
    v = default_limits(load_engine("vllm"), h100)
    assert (v.max_num_batched_tokens, v.max_num_seqs, v.block_size_tokens) == (8192, 1024, 16)
    assert default_limits(load_engine("vllm"), a100).max_num_seqs == 256
    t = default_limits(load_engine("trtllm"), h100)
    assert (t.max_num_seqs, t.max_num_batched_tokens, t.block_size_tokens) == (2048, 8192, 64)
    s = default_limits(load_engine("sglang"), l40s)  # 48 GiB: below 60 -> chunk 4096
    assert (s.max_num_seqs, s.max_num_batched_tokens, s.block_size_tokens) == (None, 4096, 1)
    g = default_limits(load_engine("generic"), h100)  # llmsim's historical defaults
    assert (g.max_num_seqs, g.max_num_batched_tokens) == (256, 8192)


def test_sglang_gpu_tiers_and_mem_fraction() -> None:
    tiers = load_engine("sglang").limits.tables["gpu_tiers"]
    assert sglang_gpu_defaults(79.65, tiers) == (8192, 256)
    assert sglang_gpu_defaults(79.65, tiers, tp=4) == (8192, 512)
    assert sglang_gpu_defaults(140.4, tiers) == (8192, 256)
    assert sglang_gpu_defaults(44.99, tiers) == (4096, 32)
    assert sglang_gpu_defaults(180, tiers) == (16384, 512)
    # docs/engines.md §3.2: reserved = 512 + 1.5*8192 + 1*1/8*1024 + 2*256 + 8*58 = 13904 MiB (>= 10240)
    # H100 81559 MiB: (81559 - 13904)/81559 = 0.8295 -> 0.830; H200 143771: 0.90329 -> 0.903
    assert sglang_mem_fraction_static(81559, 8192, 256, 58) == 0.830
    assert sglang_mem_fraction_static(143771, 8192, 256, 58) == 0.903
    # a 64 GiB GPU with a small chunk: 512 + 3072 + 128 + 16 + 0 = 3728 < 10240 -> floor of 10 GiB
    assert sglang_mem_fraction_static(65536, 2048, 8, 0) == round((65536 - 10240) / 65536, 3)


def test_sglang_max_running_requests() -> None:
    # min(clamp(kv/ctx*512, 2048, 4096), kv/2)
    assert sglang_max_running_requests(1_000_000, 4096) == 4096     # 125000 clamped to 4096; kv/2 = 500000
    assert sglang_max_running_requests(10_000, 4096) == 2048        # 1250 -> 2048, kv/2 = 5000
    assert sglang_max_running_requests(2_000, 4096) == 1000         # kv/2 binds
    assert sglang_max_running_requests(30_000, 4096) == 3750        # 3750 within the clamp


# ---------------------------------------------------------------------- KV budgets


def test_kv_budget_rules_by_hand() -> None:
    C, W, A = 80e9, 20e9, 4e9
    assert vllm_kv_budget_bytes(C, W, A) == pytest.approx(80e9 * 0.92 - 24e9)            # 49.6e9
    assert vllm_kv_budget_bytes(C, W, A, 0.9) == pytest.approx(48e9)
    assert trtllm_kv_budget_bytes(C, W, A) == pytest.approx((80e9 - 24e9) * 0.9)          # 50.4e9
    assert trtllm_kv_budget_bytes(C, W, A, runtime_reserve_bytes=6e9) == pytest.approx(45e9)
    assert sglang_kv_budget_bytes(C, W, 0.83) == pytest.approx(80e9 * 0.83 - 20e9)        # 46.4e9
    assert vllm_kv_budget_bytes(C, 80e9, A) < 0  # does not fit: negative, the caller reports it


def test_kv_budget_by_profile() -> None:
    C, W, A = 80e9, 20e9, 4e9
    assert kv_budget_bytes(load_engine("vllm"), C, W, A) == pytest.approx(49.6e9)
    assert kv_budget_bytes(load_engine("vllm-v0"), C, W, A) == pytest.approx(48e9)
    trt = load_engine("trtllm")
    assert kv_budget_bytes(trt, C, W, A) == pytest.approx((56e9 - trt.runtime_reserve_bytes) * 0.9)
    assert kv_budget_bytes(load_engine("sglang"), C, W, A, mem_fraction_static=0.83) == pytest.approx(46.4e9)
    with pytest.raises(SpecError, match="mem_fraction_static"):
        kv_budget_bytes(load_engine("sglang"), C, W, A)


# ---------------------------------------------------------------------- cost-model hook


def _one_step(hw, model: str = "llama-3.1-8b", tp: int = 1, w: str = "bf16", a: str = "bf16") -> float:
    return make_cost_model(model, hw, tp=tp, weight_dtype=w, activation_dtype=a).step_time(64, 64, 64 * 1000.5, 0, 64 * 1001)


def test_profile_step_overhead_shows_up_exactly_in_a_step_price() -> None:
    hw = load_hardware("h200-sxm")
    prof = load_engine("trtllm")
    base = dataclasses.replace(hw, efficiency=dataclasses.replace(hw.efficiency, step_overhead_s=0.0))
    with_prof = apply_profile(hw, prof)
    assert with_prof.efficiency.step_overhead_s == 0.00322
    assert _one_step(with_prof) - _one_step(base) == pytest.approx(0.00322, abs=1e-12)
    # a profile without overheads changes nothing
    assert apply_profile(hw, load_engine("generic")) is hw


def test_profile_allreduce_latency_per_call() -> None:
    # llama-3.1-8b TP2: 32 layers x 2 all-reduces; each call's latency goes from the
    # catalog's link_latency_s to the profile's 50 us
    hw = load_hardware("h100-sxm")
    prof = load_engine("trtllm")
    new = apply_profile(hw, prof)
    assert new.link_latency_s == pytest.approx(5e-5)
    base = dataclasses.replace(hw, efficiency=dataclasses.replace(hw.efficiency, step_overhead_s=new.efficiency.step_overhead_s))
    diff = _one_step(new, tp=2) - _one_step(base, tp=2)
    assert diff == pytest.approx(64 * (5e-5 - hw.link_latency_s), rel=1e-9)


def test_profile_fp8_factor_and_pcie_link() -> None:
    l40s, h100 = load_hardware("l40s"), load_hardware("h100-sxm")
    prof = load_engine("trtllm")
    new = apply_profile(l40s, prof)
    assert chip_class("l40s") == "ada"
    assert new.efficiency.compute_for("fp8") == pytest.approx(l40s.efficiency.compute_efficiency * 0.80)
    assert new.efficiency.attention_for("fp8") == pytest.approx(l40s.efficiency.attention_efficiency * 0.80)
    assert new.efficiency.compute_for("bf16") == l40s.efficiency.compute_efficiency  # bf16 untouched
    assert new.efficiency.link_efficiency == pytest.approx(0.41)                      # PCIe card
    assert apply_profile(h100, prof).efficiency.link_efficiency == h100.efficiency.link_efficiency  # NVLink
    # A100 has no fp8 class factor: nothing per-dtype added
    a100 = apply_profile(load_hardware("a100-sxm-80gb"), prof)
    assert a100.efficiency.compute_efficiency_by_dtype == {}


def test_link_dtype_prices_the_allreduce_in_16_bits_for_fp8_activations() -> None:
    # llama-3.1-8b (H 4096, 32 layers, 2 all-reduces a layer), TP2 on H100, fp8 activations, T = 64:
    # ring bytes per GPU = 2 (t-1)/t * T * H * b = 1 * 64 * 4096 * b per all-reduce, x 64 calls;
    # 16-bit instead of 8-bit adds 64 * 64 * 4096 * (2 - 1) bytes over link_bw * eta_link
    hw = load_hardware("h100-sxm")
    prof = load_engine("trtllm")
    # vLLM and SGLang too (their W8A8 GEMMs return 16 bits); trtllm-static keeps the activations'
    assert prof.link_dtype == load_engine("vllm").link_dtype == load_engine("sglang").link_dtype == "bf16"
    assert load_engine("trtllm-static").link_dtype is None

    def step(link_dtype: str | None) -> float:
        c = make_cost_model("llama-3.1-8b", hw, tp=2, weight_dtype="fp8", activation_dtype="fp8",
                            kv_dtype="fp8", link_dtype=link_dtype)
        return c.step_time(64, 64, 64 * 1000.5, 0, 64 * 1001)

    extra = 64 * 64 * 4096 * 1.0 / (hw.link_bandwidth_bytes_per_s * hw.efficiency.link_efficiency)
    assert step(prof.link_dtype) - step(None) == pytest.approx(extra, rel=1e-9)
    assert step("fp8") == step(None)  # the default is the activation dtype: no existing result moves
    with pytest.raises(SpecError, match="link_dtype: 'fp9' is not one of"):
        step("fp9")


def test_user_overlay_on_a_builtin_profile(tmp_path: Path) -> None:
    path = tmp_path / "fast-trt.yaml"
    path.write_text("base: trtllm\nid: fast-trt\noverheads:\n  step_overhead_s: {value: 0.001, status: assumed}\n"
                    "sources:\n  overheads.step_overhead_s: my own measurement\n")
    prof = load_engine(str(path))
    assert prof.id == "fast-trt" and prof.step_overhead_s == 0.001
    assert prof.limits == load_engine("trtllm").limits  # everything else from the base
    assert prof.sources["overheads.step_overhead_s"] == "my own measurement"
    bad = tmp_path / "bad.yaml"
    bad.write_text("base: trtlm\nid: bad\n")
    with pytest.raises(SpecError, match=r"bad.yaml: base: 'trtlm' is not a profile id \(did you mean 'trtllm'\?\)"):
        load_engine(str(bad))


def test_trtllm_kv_budget_on_a_dev_throughput_setting() -> None:
    # Llama-3.1-70B fp8 TP1 on H200 as trtllm-bench 0.14 ran it: NVML 140.40 GiB, limits 224 / 2048
    # (heuristic); KV = (G - W - A(2048 tokens, 224 seqs) - 3.97 GiB) * 0.9 with W = 70.5537e9 bytes
    # (1 byte a parameter). Concurrency = min(224, floor(KV tokens / 64) // ceil(2000 / 64)); the
    # analytic study (benchmarks/analyze_throughput.py, an independent implementation) printed 201.
    from simulator.cost.memory import activation_reserve_bytes
    from simulator.profiles.limits import bench_gpu_memory_gib, profile_kv_budget_bytes
    from simulator.specs.dtypes import DTypes
    from simulator.specs.parallelism import Parallelism

    prof, m, hw = load_engine("trtllm"), load_model("llama-3.1-70b"), load_hardware("h200-sxm")
    g = bench_gpu_memory_gib(prof, hw)
    assert g == 140.40
    lim = trtllm_bench_limits_for(m, g, 1000, 1000, weight_dtype="fp8", kv_dtype="fp8")
    assert (lim.max_batch_size, lim.max_num_tokens) == (224, 2048)
    par, dt = Parallelism(1, 1), DTypes("fp8", "fp8", "fp8")
    kv = profile_kv_budget_bytes(prof, m, hw, par, dt, 2048, 224, hbm_capacity_bytes=g * 2**30)
    a = activation_reserve_bytes(m, par, dt, 2048, 224)
    assert kv == pytest.approx((140.40 * 2**30 - 70553706496 - a - prof.runtime_reserve_bytes) * 0.9)
    kv_tokens = kv / (2 * 80 * 8 * 128)  # fp8 KV: 163840 bytes a token
    assert min(224, (int(kv_tokens) // 64) // 32) == 201
    # without the profile's table the catalog capacity is used
    assert bench_gpu_memory_gib(prof, load_hardware("b200")) == load_hardware("b200").hbm_capacity_bytes / 2**30
