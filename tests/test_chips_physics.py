"""The physics issue 22 added: per-sequence step overhead, GQA KV re-reads, KV conversion
without a native path, weight-only (dequantising) GEMMs, experts-only quantisation, prefill in
token-budget pieces, data-parallel attention with wide expert parallelism, sliding-window KV,
engine factors per chip family.

Every reference number is worked out by hand from the model fields (see each test's comment).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from simulator.analysis.calibrate import StaticFitSet
from simulator.analysis.validate import Validator
from simulator.cost.memory import kv_bytes_per_gpu_token, weights_bytes_per_gpu
from simulator.cost.predict import predict_static
from simulator.cost.roofline import CostModel
from simulator.cost.stepbatch import StepBatch, decode_step, prefill_step, prefill_steps
from simulator.profiles.profile import apply_profile, engine_from_dict, load_engine
from simulator.specs.catalog import load_hardware, load_model
from simulator.specs.checks import SpecError
from simulator.specs.dtypes import DTypes
from simulator.specs.hardware import Efficiency
from simulator.specs.parallelism import Parallelism

# Llama-3-8B: H 4096, L 32, 32 query heads, 8 KV heads, d 128 -> KV 2*8*128 = 2048 elements per
# token per layer, 4096 bytes in fp16, 2048 in fp8; g = 32 / 8 = 4 query heads per KV head.
L3 = "llama-3-8b"
H100 = "h100-sxm"


def ideal_hw(**eff: object) -> object:
    hw = load_hardware(H100)
    return dataclasses.replace(hw, efficiency=dataclasses.replace(Efficiency(), **eff))


def op(cost: CostModel, batch: StepBatch, name: str) -> dict:
    return next(o for o in cost.breakdown(batch)["ops"] if o["name"] == name)


def test_sequence_overhead_is_paid_per_sequence() -> None:
    """s per sequence per step: a decode step of 64 sequences costs 64 s more."""
    m = load_model(L3)
    base = CostModel(m, ideal_hw(), dtypes=DTypes("fp16", "fp16", "fp16"))
    seq = CostModel(m, ideal_hw(sequence_overhead_s=1e-4), dtypes=DTypes("fp16", "fp16", "fp16"))
    b = decode_step(m, 64, 1000)
    assert seq.time(b) - base.time(b) == pytest.approx(64 * 1e-4, rel=1e-9)


@pytest.mark.parametrize("sharing,factor", [(1.0, 1.0), (0.0, 4.0), (0.5, 2.5)])
def test_gqa_kv_reads(sharing: float, factor: float) -> None:
    """Decode attention reads the KV 1 + (g - 1)(1 - s) times: g = 4 for Llama-3-8B.
    One sequence at 1000 cached tokens: R = 1001 tokens x 32 layers x 4096 B = 131.2 MB."""
    m = load_model(L3)
    c = CostModel(m, ideal_hw(gqa_kv_sharing=sharing), dtypes=DTypes("fp16", "fp16", "fp16"))
    o = op(c, decode_step(m, 1, 1000), "attention")
    assert o["kv_read_bytes"] == pytest.approx(1001 * 32 * 4096 * factor, rel=1e-12)


def test_kv_conversion_without_native_path() -> None:
    """fp8 KV with a conversion rate r: the attention compute gains elements / r. One sequence,
    1000 cached: 1001 x 32 x 2048 = 65.6 M elements; at r = 1e10/s that is 6.56 ms, far above
    the 65.6 MB fp8 read (19.6 us at 3.35 TB/s): the op is conversion-bound. Without a rate
    (native path) the op is the smaller read; an fp16 cache ignores the rate."""
    m = load_model(L3)
    b = decode_step(m, 1, 1000)
    native = CostModel(m, ideal_hw(), dtypes=DTypes("fp16", "fp16", "fp8"))
    conv = CostModel(m, ideal_hw(kv_dequant_rate_by_kv_dtype={"fp8": 1e10}), dtypes=DTypes("fp16", "fp16", "fp8"))
    fp16 = CostModel(m, ideal_hw(kv_dequant_rate_by_kv_dtype={"fp8": 1e10}), dtypes=DTypes("fp16", "fp16", "fp16"))
    elems = 1001 * 32 * 2048
    # bytes: the read, one token's write and the q / output activations (2 x 4096 x 2 B) per layer
    def nbytes(b_kv: int) -> int:
        return 32 * (1002 * 2048 * b_kv + 2 * 4096 * 2)

    assert op(conv, b, "attention")["time_ms"] == pytest.approx(elems / 1e10 * 1e3, rel=1e-3)
    assert op(native, b, "attention")["time_ms"] == pytest.approx(nbytes(1) / 3.35e12 * 1e3, rel=1e-9)
    assert op(fp16, b, "attention")["time_ms"] == pytest.approx(nbytes(2) / 3.35e12 * 1e3, rel=1e-9)


@pytest.mark.parametrize(("seqs", "cached", "rb"), [
    (1, 300, 300.5),     # v1: one block per (sequence, query head) walks the whole context
    (1, 2000, 512.0),    # 4 partitions and 1 x 32 blocks <= 512: v2, the longest block is 512 tokens
    (32, 2000, 2000.5),  # 32 x 32 = 1024 blocks > 512: v1 again, the whole context
    (1, 9000, 512.0),    # beyond 8192 tokens always v2
])
def test_kv_conversion_block_floor(seqs: int, cached: int, rb: float) -> None:
    """A thread block converts its KV head's K and V (2 x 128 elements a token) at r_b: a decode
    step waits for its longest block, Rb tokens (vLLM V0's paged-attention v1/v2 rule), per
    layer. Llama-3-8B (32 layers, 32 query heads), r_b = 1e8/s: the attention op gains
    32 x Rb x 256 / 1e8 s (24.6 ms at Rb = 300.5), on top of the per-element rate's term,
    at every batch; the scalar and vectorised paths agree; a prefill (no decode) pays none."""
    m = load_model(L3)
    fp8 = DTypes("fp16", "fp16", "fp8")
    rate = ideal_hw(kv_dequant_rate_by_kv_dtype={"fp8": 1e10})
    both = ideal_hw(kv_dequant_rate_by_kv_dtype={"fp8": 1e10}, kv_dequant_block_rate_by_kv_dtype={"fp8": 1e8})
    c0, c1 = CostModel(m, rate, dtypes=fp8), CostModel(m, both, dtypes=fp8)
    b = decode_step(m, seqs, cached)
    extra_ms = op(c1, b, "attention")["time_ms"] - op(c0, b, "attention")["time_ms"]
    assert extra_ms == pytest.approx(32 * rb * 256 / 1e8 * 1e3, rel=1e-9)
    assert c1.time(b) - c0.time(b) == pytest.approx(extra_ms / 1e3, rel=1e-9)
    vec = c1.step_times(b.T, b.S, b.Ad, b.Ap, b.R)
    assert float(vec) == pytest.approx(c1.time(b), rel=1e-12)
    pre = prefill_step(m, 1, 1000)
    assert c1.time(pre) == pytest.approx(c0.time(pre), rel=1e-12)
    fp16 = DTypes("fp16", "fp16", "fp16")
    assert CostModel(m, both, dtypes=fp16).time(b) == pytest.approx(CostModel(m, rate, dtypes=fp16).time(b), rel=1e-12)


def test_weight_only_gemm_rate_and_ramp() -> None:
    """W4A16 (int4 weights, bf16 activations) on an ideal H100 with dequant efficiency 0.5, ramp
    factor 0.25 and T0 = 64: the GEMM runs at 989e12 x 0.5 FLOP/s and its ramp T0 is 64 x 0.25 x
    0.5 = 8, so at T = 4096 the q/k/v projection (4096 x 6144 per layer) takes
    2 x 4096 x 6144 x (4096 + 8) / (0.5 x 989e12) per layer."""
    m = load_model(L3)
    c = CostModel(m, ideal_hw(dequant_gemm_efficiency=0.5, dequant_ramp_relative=0.25, gemm_ramp_tokens=64.0),
                  dtypes=DTypes("int4", "bf16", "bf16"))
    o = op(c, StepBatch(T=4096, S=1, Ap=4096 * 2048.0, R=4096), "qkv_proj")
    ref = 32 * 2 * 4096 * 6144 * (4096 + 8) / (0.5 * 989e12)
    assert o["time_ms"] / 1e3 == pytest.approx(ref, rel=1e-9)


def test_weight_only_integer_gemms_at_the_int8_rate() -> None:
    """A kernel that quantises the activations of weight-only integer GEMMs to int8 per token
    (IPEX's WoqLowpMode.INT8, vLLM's GPTQ/AWQ path on Intel XPU: `dequant_int8_compute` 1) runs
    W4A16 at the int8 rate. Ideal H100 (int8 1979e12, bf16 989e12 FLOP/s): the q/k/v projection at
    T = 4096 takes 32 x 2 x 4096 x 6144 x 4096 / 1979e12 s, about half the bf16 time; fp4 (a
    float format) and W8A8 fp8 are unchanged; the run's notes say what happened."""
    m = load_model(L3)
    b = StepBatch(T=4096, S=1, Ap=4096 * 2048.0, R=4096)
    on = CostModel(m, ideal_hw(dequant_int8_compute=1.0), dtypes=DTypes("int4", "bf16", "bf16"))
    off = CostModel(m, ideal_hw(), dtypes=DTypes("int4", "bf16", "bf16"))
    assert (on.gemm_dtype, on.gemm_formats, off.gemm_dtype) == ("int8", ("int8", "int8"), "bf16")
    assert op(on, b, "qkv_proj")["time_ms"] / 1e3 == pytest.approx(32 * 2 * 4096 * 6144 * 4096 / 1979e12, rel=1e-9)
    assert op(off, b, "qkv_proj")["time_ms"] / 1e3 == pytest.approx(32 * 2 * 4096 * 6144 * 4096 / 989e12, rel=1e-9)
    assert any("weight-only int4 GEMMs run at the int8 rate" in n for n in on.notes)
    for d in (DTypes("fp4", "bf16", "bf16"), DTypes("fp8", "fp8", "bf16"), DTypes("bf16", "bf16", "bf16")):
        assert CostModel(m, ideal_hw(dequant_int8_compute=1.0), dtypes=d).gemm_dtype == d.gemm
    assert DTypes("int8", "fp16", "bf16").gemm_at(True) == "int8"
    assert DTypes("int4", "int8", "bf16").gemm_at(True) == "int8"  # already W4A8
    # the vllm profile sets it on the Intel XPU families only
    vllm = load_engine("vllm")
    assert apply_profile(load_hardware("arc-pro-b60-dual"), vllm).efficiency.dequant_int8_compute == 1
    assert apply_profile(load_hardware("max1550"), vllm).efficiency.dequant_int8_compute == 1
    assert apply_profile(load_hardware(H100), vllm).efficiency.dequant_int8_compute == 0
    with pytest.raises(SpecError, match=r"efficiency\.dequant_int8_compute: 0\.5 must be 0"):
        Efficiency(dequant_int8_compute=0.5)
    with pytest.raises(SpecError, match=r"by_chip_class\.xe2\.dequant_int8_compute\.value: 0\.5 must be 0 or 1"):
        engine_from_dict({"id": "t", "name": "t", "versions": "t", "scheduler": {"policy": "vllm"},
                          "limits": {"max_num_seqs": 8, "max_num_batched_tokens": 64, "chunked_prefill": True,
                                     "block_size_tokens": 16, "prefix_caching": False,
                                     "kv_memory_rule": "total_fraction", "kv_memory_fraction": 0.9,
                                     "max_tokens_if_unset": 16},
                          "sources": {"limits": "test", "kernels": "test"},
                          "kernels": {"by_chip_class": {"xe2": {"dequant_int8_compute": {"value": 0.5,
                                                                                          "status": "assumed"}}}}})


def test_experts_only_quantisation_bytes() -> None:
    """gpt-oss-120b in fp4: the 36 x 128 routed experts (3 x 2880 x 2880 each, plus biases
    2 x 2880 + 2880... as the model counts them) take 0.5 B, everything else bf16."""
    m = load_model("gpt-oss-120b")
    experts = m.routed_expert_param_count
    assert experts == 36 * 128 * m.expert_params
    w = weights_bytes_per_gpu(m, Parallelism(2), DTypes("fp4", "bf16", "bf16"))
    assert w == pytest.approx((experts * 0.5 + (m.param_count - experts) * 2.0) / 2, rel=1e-12)
    assert m.weight_bytes("fp4") == pytest.approx(experts * 0.5 + (m.param_count - experts) * 2.0)
    c = CostModel(m, ideal_hw(), dtypes=DTypes("fp4", "bf16", "bf16"))
    assert c.gemm_dtype == "bf16" and c.expert_gemm_dtype == "bf16"
    # a dense model quantises every weight
    llama = load_model(L3)
    assert llama.weight_bytes("fp4") == pytest.approx(llama.param_count * 0.5)


def test_prefill_steps_layout() -> None:
    """A 1000-token prompt under a 64-token budget: 15 pieces of 64 and one of 40; piece j
    attends to the 64 j tokens before it; only the last one emits. Under a 4096 budget, 10
    prompts of 1000 take 2 steps of 4 prompts and one of 2."""
    m = load_model(L3)
    steps = prefill_steps(m, 1, 1000, 64)
    assert [b.T for b, _ in steps] == [64.0] * 15 + [40.0]
    assert [b.S for b, _ in steps] == [0.0] * 15 + [1.0]
    assert steps[3][0].Ap == pytest.approx(64 * (192 + 32))
    whole = prefill_steps(m, 10, 1000, 4096)
    assert [(b.T, k) for b, k in whole] == [(4000.0, 2), (2000.0, 1)]
    assert prefill_steps(m, 2, 100, None)[0][0] == prefill_step(m, 2, 100)


def test_predict_static_prefill_chunks_add_up() -> None:
    """predict_static with a budget: TTFT = the sum of the pieces' step times."""
    m = load_model(L3)
    c = CostModel(m, load_hardware(H100), dtypes=DTypes("fp16", "fp16", "fp16"))
    r = predict_static(c, 1, 256, 8, prefill_chunk_tokens=64)
    ref = sum(c.time(b) * k for b, k in prefill_steps(m, 1, 256, 64))
    assert r["ttft_ms"] == pytest.approx(ref * 1e3, rel=1e-12)
    assert r["ttft_ms"] > predict_static(c, 1, 256, 8)["ttft_ms"]


def test_dp_attention_kv_and_weights() -> None:
    """DeepSeek-V3 on 8 GPUs. TP attention: every GPU keeps every token's 576-element latent
    (61 layers, fp8: 35,136 B per token per GPU). DP attention over 8 groups: each token lives on
    one GPU (4,392 B per GPU token on average). Weights: routed experts / 8 either way; the rest
    / 8 under TP, whole on every GPU under DP attention."""
    m = load_model("deepseek-v3")
    tp = Parallelism(8, ep=8)
    dp = Parallelism(8, ep=8, dp_attention=8)
    assert kv_bytes_per_gpu_token(m, tp, "fp8") == pytest.approx(61 * 576)
    assert kv_bytes_per_gpu_token(m, dp, "fp8") == pytest.approx(61 * 576 / 8)
    dt = DTypes("fp8", "fp8", "fp8")
    e = m.routed_expert_param_count
    assert weights_bytes_per_gpu(m, tp, dt) == pytest.approx(m.param_count / 8)
    assert weights_bytes_per_gpu(m, dp, dt) == pytest.approx(e / 8 + (m.param_count - e))


def test_dp_attention_step_prices_a_group_share() -> None:
    """Under DP attention the attention op of 8 groups sees 1/8 of the decode batch's KV; with
    ep = tp the MoE layers are an all-to-all (no attention all-reduce at attention tp 1)."""
    m = load_model("deepseek-v3")
    hw = ideal_hw()
    dt = DTypes("fp8", "fp8", "fp8")
    b = decode_step(m, 64, 2000)
    one = CostModel(m, hw, Parallelism(1), dt)
    dp = CostModel(m, hw, Parallelism(8, ep=8, dp_attention=8), dt)
    assert op(dp, b, "attention")["kv_read_bytes"] == pytest.approx(op(one, b, "attention")["kv_read_bytes"] / 8)
    names = {o["name"] for o in dp.breakdown(b)["ops"]}
    assert "moe_alltoall" in names and "allreduce" not in names
    with pytest.raises(SpecError, match="dp_attention"):
        Parallelism(8, dp_attention=3)


def test_dp_attention_step_overhead_only_under_dp_attention() -> None:
    """`dp_attention_step_overhead_s` d is paid once per step by a replica whose attention runs
    data-parallel: the same decode step costs exactly d more at dp_attention 8, nothing more at
    dp_attention 1, and the breakdown counts it as overhead. The trtllm-pytorch profile sets it
    on Blackwell only (fitted on the DeepSeek-R1 MLPerf rows), every other family keeps 0."""
    m = load_model("deepseek-v3")
    dt = DTypes("fp8", "fp8", "fp8")
    b = decode_step(m, 64, 2000)
    par = Parallelism(8, ep=8, dp_attention=8)
    base = CostModel(m, ideal_hw(), par, dt)
    d = CostModel(m, ideal_hw(dp_attention_step_overhead_s=0.04), par, dt)
    assert d.time(b) - base.time(b) == pytest.approx(0.04, abs=1e-12)
    assert (d.breakdown(b)["time_by_bound_ms"]["overhead"] - base.breakdown(b)["time_by_bound_ms"]["overhead"]
            == pytest.approx(40.0, abs=1e-9))
    tp = Parallelism(8, ep=8)
    assert CostModel(m, ideal_hw(dp_attention_step_overhead_s=0.04), tp, dt).time(b) == pytest.approx(
        CostModel(m, ideal_hw(), tp, dt).time(b), rel=1e-12)
    trt = load_engine("trtllm-pytorch")
    assert apply_profile(load_hardware("b200"), trt).efficiency.dp_attention_step_overhead_s == pytest.approx(0.065)
    assert apply_profile(load_hardware("b200"), trt).efficiency.dp_attention_full_seqs == 512
    assert apply_profile(load_hardware("h200-sxm"), trt).efficiency.dp_attention_step_overhead_s == 0.0
    assert apply_profile(load_hardware("b200"), load_engine("vllm")).efficiency.dp_attention_step_overhead_s == 0.0
    with pytest.raises(SpecError, match=r"dp_attention_step_overhead_s"):
        Efficiency(dp_attention_step_overhead_s=-1.0)


def test_dp_attention_step_cost_in_proportion_below_a_full_batch() -> None:
    """With `dp_attention_full_seqs` F the cost is min(c, c S / (d F)) for S sequences over d
    ranks: c = 0.065 s, F = 512, d = 8. A decode step of 64 sequences (8 a rank) pays
    0.065 x 64 / 4096 = 1.015625 ms; one of 8,192 (1,024 a rank) pays the full 65 ms; the
    compiled, vectorised and breakdown paths agree; F = 0 keeps the constant."""
    m = load_model("deepseek-v3")
    dt = DTypes("fp8", "fp8", "fp8")
    par = Parallelism(8, ep=8, dp_attention=8)
    base = CostModel(m, ideal_hw(), par, dt)
    scaled = CostModel(m, ideal_hw(dp_attention_step_overhead_s=0.065, dp_attention_full_seqs=512.0), par, dt)
    const = CostModel(m, ideal_hw(dp_attention_step_overhead_s=0.065), par, dt)
    for S, extra in ((64, 0.065 * 64 / 4096), (8192, 0.065)):
        b = decode_step(m, S, 2000)
        assert scaled.time(b) - base.time(b) == pytest.approx(extra, abs=1e-12)
        assert const.time(b) - base.time(b) == pytest.approx(0.065, abs=1e-12)
        vec = scaled.step_times(np.array([b.T]), np.array([b.S]), np.array([b.Ad]), np.array([b.Ap]), np.array([b.R]))
        assert float(vec[0]) == pytest.approx(scaled.time(b), rel=1e-12)
        assert (scaled.breakdown(b)["time_by_bound_ms"]["overhead"] - base.breakdown(b)["time_by_bound_ms"]["overhead"]
                == pytest.approx(extra * 1e3, abs=1e-9))
    assert any("in proportion below 512 sequences a rank" in n for n in scaled.notes)


def test_sliding_window_kv_shrinks() -> None:
    """gpt-oss-120b: 18 of 36 layers keep only 128 tokens. At 8192-token sequences a token
    costs the full layers' bytes plus the sliding layers' x 128/8192."""
    m = load_model("gpt-oss-120b")
    per = m.kv_bytes_per_token("bf16")
    full = kv_bytes_per_gpu_token(m, Parallelism(1), "bf16")
    short = kv_bytes_per_gpu_token(m, Parallelism(1), "bf16", 8192)
    assert full == pytest.approx(per)
    assert short == pytest.approx(per / 2 + per / 2 * 128 / 8192)


def test_profile_family_factors() -> None:
    """kernels.by_chip_class: compute x 0.5 (ramp x 0.5 too), sharing and fp8 conversion rate
    set, only on chips of that family."""
    data = {"id": "t", "name": "t", "versions": "t", "scheduler": {"policy": "vllm"},
            "limits": {"max_num_seqs": 8, "max_num_batched_tokens": 64, "chunked_prefill": True,
                       "block_size_tokens": 16, "prefix_caching": False, "kv_memory_rule": "total_fraction",
                       "kv_memory_fraction": 0.9, "max_tokens_if_unset": 16},
            "kernels": {"by_chip_class": {"hopper": {
                "compute_relative": {"value": 0.5, "status": "assumed"},
                "gqa_kv_sharing": {"value": 0.0, "status": "assumed"},
                "kv_dequant_rate_fp8": {"value": 1e11, "status": "assumed"}}}},
            "sources": {"limits": "test", "kernels": "test"}}
    prof = engine_from_dict(data)
    hw = load_hardware(H100)
    out = apply_profile(hw, prof).efficiency
    assert out.compute_efficiency == pytest.approx(hw.efficiency.compute_efficiency * 0.5)
    assert out.gemm_ramp_tokens == pytest.approx(hw.efficiency.gemm_ramp_tokens * 0.5)
    assert out.gqa_kv_sharing == 0.0 and out.kv_dequant_rate_by_kv_dtype == {"fp8": 1e11}
    a100 = load_hardware("a100-sxm-80gb")
    assert apply_profile(a100, prof).efficiency == a100.efficiency
    bad = dict(data, kernels={"by_chip_class": {"hopper": {"compute_relative": {"value": 3.0, "status": "assumed"}}}})
    with pytest.raises(SpecError, match="compute_relative"):
        engine_from_dict(bad)


def test_a_family_may_copy_another_familys_numbers_and_says_so() -> None:
    """`copied_from: <class>` (or `<profile>/<class>`) gives a family another's numbers, only the
    listed `factors`, each marked "assumed (copied from ..., unvalidated: why)"; own numbers
    win; a copy of a copy, a family without numbers and an unknown factor are one-line errors."""
    base = {"id": "t", "name": "t", "versions": "t", "scheduler": {"policy": "vllm"},
            "limits": {"max_num_seqs": 8, "max_num_batched_tokens": 64, "chunked_prefill": True,
                       "block_size_tokens": 16, "prefix_caching": False, "kv_memory_rule": "total_fraction",
                       "kv_memory_fraction": 0.9, "max_tokens_if_unset": 16},
            "sources": {"limits": "test", "kernels": "test"}}
    hopper = {"dequant_gemm_efficiency": {"value": 0.5, "status": "fitted"},
              "dequant_ramp_relative": {"value": 0.25, "status": "documented"},
              "expert_width_ramp": {"value": 335, "status": "fitted"}}

    def prof(**classes: object) -> object:
        return engine_from_dict({**base, "kernels": {"by_chip_class": {"hopper": hopper, **classes}}})

    p = prof(cdna3={"copied_from": "hopper", "factors": ["dequant_gemm_efficiency", "dequant_ramp_relative"],
                    "why": "same kernel", "dequant_ramp_relative": {"value": 0.3, "status": "assumed"}})
    got = p.kernels.by_chip_class["cdna3"]
    assert {k: t.value for k, t in got.items()} == {"dequant_gemm_efficiency": 0.5, "dequant_ramp_relative": 0.3}
    assert got["dequant_gemm_efficiency"].status == "assumed (copied from hopper, unvalidated: same kernel)"
    assert got["dequant_ramp_relative"].status == "assumed"  # its own number wins
    mi = load_hardware("mi300x")
    eff = apply_profile(mi, p).efficiency
    assert (eff.dequant_gemm_efficiency, eff.dequant_ramp_relative, eff.expert_width_ramp) == (0.5, 0.3, 0.0)
    assert eff.sources["dequant_gemm_efficiency"] == "t/cdna3: assumed (copied from hopper, unvalidated: same kernel)"
    # the built-in vllm profile copies its Hopper MXFP4 numbers to ROCm (the same Triton kernel),
    # to Blackwell only the small-batch floor and fixed MoE kernels (TRT-LLM-gen), never the width ramp
    vllm = load_engine("vllm")
    weight_only = {"dequant_gemm_efficiency": 0.6, "dequant_ramp_relative": 0.25, "moe_layer_overhead_s": 5e-5}
    for cls in ("cdna3", "cdna4"):  # plus the FP8 experts' grouped-GEMM factor (Mixtral rows)
        assert {k: t.value for k, t in vllm.kernels.by_chip_class[cls].items()} == {**weight_only,
                                                                                    "moe_gemm_relative": 0.7}
    assert vllm.kernels.by_chip_class["cdna3"]["moe_gemm_relative"].kind == "fitted"
    assert vllm.kernels.by_chip_class["cdna4"]["moe_gemm_relative"].kind == "assumed"
    assert {k: t.value for k, t in vllm.kernels.by_chip_class["blackwell"].items()} == {
        "dequant_ramp_relative": 0.25, "moe_layer_overhead_s": 5e-5}
    assert load_engine("sglang").kernels.by_chip_class["hopper"]["dequant_ramp_relative"].status.startswith(
        "assumed (copied from vllm/hopper, unvalidated")
    for classes, msg in (
            ({"cdna3": {"copied_from": "volta"}}, r"by_chip_class\.cdna3\.copied_from: unknown chip class 'volta'"),
            ({"cdna3": {"copied_from": "ampere"}}, r"cdna3\.copied_from: 'ampere' gives no numbers of its own"),
            ({"cdna3": {"copied_from": "hopper"}, "cdna4": {"copied_from": "cdna3"}},
             r"cdna4\.copied_from: 'cdna3' gives no numbers of its own"),
            ({"cdna3": {"copied_from": "hopper", "factors": ["moe_layer_overhead_s"]}},
             r"cdna3\.factors: moe_layer_overhead_s not given by hopper"),
            ({"cdna3": {"copied_from": "nope/hopper"}}, r"cdna3\.copied_from: 'nope' is not a built-in profile"),
            ({"cdna3": {"copied_from": "sglang/hopper"}}, r"sglang/hopper gives no numbers of its own")):
        with pytest.raises(SpecError, match=msg):
            prof(**classes)


def test_gpt_oss_experts_on_b200_read_their_four_bit_weights_at_decode() -> None:
    """gpt-oss-120b (MXFP4 experts, bf16 activations) under vLLM on B200, batch 64 decode:
    with the copied W4A16 floor (ramp x 0.25 of T0) each expert's floor is ~20 rows,
    so the experts' step is their 4-bit read at the HBM rate, bytes / (B x eta_m), not a
    16-bit-rate compute floor (16.9 ms before; B200 was priced no faster than H200). The
    report says the numbers are copied."""
    prof = load_engine("vllm")
    model = load_model("gpt-oss-120b")
    hw = apply_profile(load_hardware("b200"), prof)
    cost = CostModel(model, hw, Parallelism(1, 1), DTypes("fp4", "bf16", "bf16"), link_dtype=prof.link_dtype)
    e = op(cost, StepBatch.from_sequences([(1, 1500)] * 64), "moe_experts")
    rate = hw.hbm_bandwidth_bytes_per_s * hw.efficiency.memory_efficiency
    assert e["bound"] == "memory"
    # + one kernel launch per MoE layer (kernel_overhead_s, 6.5 us)
    launches_s = model.num_moe_layers * hw.efficiency.kernel_overhead_s
    assert e["time_ms"] == pytest.approx((e["bytes"] / rate + launches_s) * 1e3, rel=1e-6)
    assert "b200: vllm/blackwell weight-only GEMM numbers copied from hopper, unvalidated" in cost.notes
    bf16 = CostModel(model, hw, Parallelism(1, 1), DTypes("bf16", "bf16", "bf16"), link_dtype=prof.link_dtype)
    assert not any("weight-only" in n for n in bf16.notes)


def test_static_fit_set_matches_predict_static() -> None:
    """The calibration decomposition re-prices rows exactly as predict_static does, with the
    new terms (sequence overhead, GQA re-reads, fp8 conversion and its block floor) and a
    chunked prefill."""
    hw = load_hardware(H100)
    eff = dict(sequence_overhead_s=5e-5, gqa_kv_sharing=0.3, kv_dequant_rate_by_kv_dtype={"fp8": 3e11},
               kv_dequant_block_rate_by_kv_dtype={"fp8": 2e9})
    hw2 = dataclasses.replace(hw, efficiency=dataclasses.replace(hw.efficiency, **eff))
    rows = []
    for i, (kv, chunk) in enumerate([("fp16", None), ("fp8", None), ("fp16", 64)]):
        rows.append({"id": f"r{i}", "source": "s", "model": L3, "hardware": H100, "num_gpus": 1, "tp": 1, "pp": 1,
                     "replicas": 1, "engine": "", "weight_dtype": "fp16", "activation_dtype": "fp16",
                     "kv_dtype": kv, "scenario": "static_batch", "batch_size": 16, "input_len": 300,
                     "output_len": 50, "max_num_tokens": chunk, "metric": "e2e_ms", "value": 1.0})
    v = Validator(hardware_specs={H100: hw2})
    fs = StaticFitSet(rows, v)
    e = hw2.efficiency
    p = {"compute_efficiency": e.compute_efficiency, "memory_efficiency": e.memory_efficiency,
         "attention_efficiency": e.attention_efficiency, "gemm_ramp_tokens": e.gemm_ramp_tokens,
         "kernel_overhead_s": e.kernel_overhead_s, "link_efficiency": e.link_efficiency,
         "link_latency_s": hw2.link_latency_s, "step_overhead_s": e.step_overhead_s,
         "sequence_overhead_s": 5e-5, "gqa_kv_sharing": 0.3, "kv_dequant_rate": 3e11,
         "kv_dequant_block_rate": 2e9}
    got = fs.predict(p)
    want = np.array([v.predict_row(r) for r in rows])
    assert np.allclose(got, want, rtol=1e-9)
    assert load_engine("llama.cpp").id == "llama.cpp"


def test_pipeline_interleaved_has_no_drain() -> None:
    """pp = 2 with micro-batches in flight: a step of 512 sequences costs the one-stage-after-
    another model's time on 256 of them (each stage busy with one micro-batch at a time)."""
    m = load_model("llama-3.1-405b")
    hw = load_hardware("b200")
    dt = DTypes("fp4", "fp4", "fp8")
    drained = CostModel(m, hw, Parallelism(2, 2), dt)
    inter = CostModel(m, hw, Parallelism(2, 2, pp_interleaved=True), dt)
    full, half = decode_step(m, 512, 1000), decode_step(m, 256, 1000)
    assert inter.time(full) == pytest.approx(drained.time(half), rel=1e-12)
    assert inter.time(full) < drained.time(full)


@pytest.mark.parametrize("activation,kv,expected", [
    ("bf16", "bf16", "bf16"), ("bf16", "fp8", "bf16"), ("fp8", "fp8", "fp8"),
    # a W8A8 fp8 run with a 16-bit cache: attention reads the cache's format
    ("fp8", "bf16", "bf16"), ("fp8", "fp16", "fp16"),
    # W4A4 (NVFP4): attention at the fp8 cache's format, never 4-bit
    ("fp4", "fp8", "fp8"), ("fp4", "fp4", "fp8"), ("fp4", "bf16", "bf16"),
    # no integer attention kernels: SmoothQuant W8A8 and int8/int4 caches compute in fp16
    ("int8", "int8", "fp16"), ("int8", "fp8", "fp16"), ("int4", "int4", "fp16"), ("bf16", "int8", "bf16"),
])
def test_attention_format(activation: str, kv: str, expected: str) -> None:
    from simulator.specs.dtypes import attention_format

    assert attention_format(activation, kv) == expected


def test_integer_activations_convert_an_fp8_cache() -> None:
    """W8A8 int8 with an fp8 cache on an A100 with a conversion rate: attention in fp16 (no int8
    attention kernel) converts the narrower cache, as the review's repro expected; calibration
    and the kv-dtype what-if read the same attention format."""
    from simulator.analysis.whatif import _attention_path

    m = load_model(L3)
    hw = load_hardware("a100-sxm-80gb")
    hw = dataclasses.replace(hw, efficiency=dataclasses.replace(Efficiency(), kv_dequant_rate_by_kv_dtype={"fp8": 1e10}))
    c = CostModel(m, hw, dtypes=DTypes("int8", "int8", "fp8"))
    assert c.attention_dtype in ("fp16", "bf16")
    b = decode_step(m, 1, 1000)
    # 1001 x 32 x 2048 elements converted at 1e10/s
    assert op(c, b, "attention")["time_ms"] == pytest.approx(1001 * 32 * 2048 / 1e10 * 1e3, rel=1e-3)
    assert _attention_path(c, "fp8").startswith("no native fp8 attention")


def test_elementwise_ops_stay_at_the_activation_format() -> None:
    """norm_act's compute runs at the activations' rate: a W4A4 run's at fp4, not at the fp8
    attention format (10 H FLOPs per token per layer)."""
    m = load_model(L3)
    hw = dataclasses.replace(load_hardware("b200"), efficiency=Efficiency())
    c = CostModel(m, hw, dtypes=DTypes("fp4", "fp4", "fp8"))
    o = next(o for o in c.ops if o.name == "norm_act")
    x = c.features(4096, 1, 0.0, 4096 * 2048.0, 4096, 0.0, 0.0)
    assert float(o.compute_s @ x) == pytest.approx(32 * 10 * 4096 * 4096 / 9000e12, rel=1e-12)


def test_w4a4_attention_runs_at_fp8() -> None:
    """Llama-3-8B, W4A4 with an fp8 KV cache on an ideal B200 (fp4 9000, fp8 4500 TFLOP/s):
    a 4096-token prefill's attention, 4 x 32 heads x 128 = 16384 FLOPs per query-key pair per
    layer over Ap = 4096^2 / 2 pairs, runs at the fp8 rate, not the fp4 one (before: twice as fast)."""
    m = load_model(L3)
    hw = load_hardware("b200")
    hw = dataclasses.replace(hw, efficiency=Efficiency())
    c = CostModel(m, hw, dtypes=DTypes("fp4", "fp4", "fp8"))
    assert c.attention_dtype == "fp8" and c.gemm_dtype == "fp4"
    o = op(c, StepBatch(T=4096, S=1, Ap=4096 * 4096 / 2, R=4096), "attention")
    flops = 32 * 16384 * 4096 * 4096 / 2
    assert o["flops"] == pytest.approx(flops, rel=1e-12)
    assert o["time_ms"] / 1e3 == pytest.approx(flops / 4500e12, rel=1e-9)


def test_expert_width_ramp() -> None:
    """gpt-oss-120b (128 experts, top-4, H = I_e = 2880), bf16 on an ideal H100 at tp = 8:
    each GPU holds a W = 2880 / 8 = 360-wide slice of every expert. With W0 = 360 the experts'
    per-row compute doubles (1 + 360 / 360); the small-batch floor (T0 U) does not move. With
    ep = 8 the experts are whole on their ranks: W = 2880, factor 1 + 360 / 2880 = 1.125.
    The experts' compute over T = 8192 rows: 2 x 3 x 2880 x 360 x 4 FLOPs per row per layer,
    36 layers, at 989 TFLOP/s (the op's compute side; at this T its memory side is larger)."""
    m = load_model("gpt-oss-120b")
    per_row = 36 * 2 * 3 * 2880 * 360 * 4 / 989e12

    def compute_s(c: CostModel) -> float:
        o = next(o for o in c.ops if o.name == "moe_experts")
        return float(o.compute_s @ c.features(8192, 1, 0.0, 8192 * 4096.0, 8192, 0.0, 0.0))

    for ep, factor in ((1, 2.0), (8, 1.125)):
        par = Parallelism(8, ep=ep)
        base = CostModel(m, ideal_hw(), par, DTypes("bf16", "bf16", "bf16"))
        ramp = CostModel(m, ideal_hw(expert_width_ramp=360.0), par, DTypes("bf16", "bf16", "bf16"))
        assert compute_s(base) == pytest.approx(8192 * per_row, rel=1e-9)
        assert compute_s(ramp) == pytest.approx(8192 * per_row * factor, rel=1e-9)
    # the floor: T0 = 64 on one decode token: the ramp term f_exp T0 U is the same with W0
    kw = {"gemm_ramp_tokens": 64.0}
    par = Parallelism(8)
    lin0 = CostModel(m, ideal_hw(**kw), par, DTypes("bf16", "bf16", "bf16")).linear_terms()
    lin1 = CostModel(m, ideal_hw(expert_width_ramp=360.0, **kw), par, DTypes("bf16", "bf16", "bf16")).linear_terms()
    assert np.array_equal(lin0.ramp_s_per_token, lin1.ramp_s_per_token)


def test_moe_gemm_relative_slows_native_experts_only() -> None:
    """Mixtral-8x7B (8 experts, top-2, H = 4096, I_e = 14336, 32 layers), bf16 on an ideal H100 at
    tp = 1: the experts' compute over T = 8192 rows is 32 x 2 x 3 x 4096 x 14336 x 2 FLOPs per row
    at 989 TFLOP/s; with moe_gemm_relative r = 0.6 it is that / 0.6. The dense attention
    projections do not move, and the small-batch floor f T0 U / P stays (T0 x r). gpt-oss's MXFP4
    experts (weight-only) keep their rate: r prices native-format grouped GEMMs only."""
    m = load_model("mixtral-8x7b")
    per_row = 32 * 2 * 3 * 4096 * 14336 * 2 / 989e12

    def part(c: CostModel, name: str, field: str = "compute_s") -> float:
        o = next(o for o in c.ops if o.name == name)
        return float(getattr(o, field) @ c.features(8192, 1, 0.0, 8192 * 4096.0, 8192, 0.0, 0.0))

    base = CostModel(m, ideal_hw(gemm_ramp_tokens=64.0), dtypes=DTypes("bf16", "bf16", "bf16"))
    slow = CostModel(m, ideal_hw(gemm_ramp_tokens=64.0, moe_gemm_relative=0.6), dtypes=DTypes("bf16", "bf16", "bf16"))
    ramp = part(base, "moe_experts", "ramp_s")
    assert part(base, "moe_experts") - ramp == pytest.approx(8192 * per_row, rel=1e-9)
    assert part(slow, "moe_experts") - part(slow, "moe_experts", "ramp_s") == pytest.approx(8192 * per_row / 0.6,
                                                                                              rel=1e-9)
    assert part(slow, "moe_experts", "ramp_s") == pytest.approx(ramp, rel=1e-12)  # the floor stays
    assert part(slow, "qkv_proj") == pytest.approx(part(base, "qkv_proj"), rel=1e-12)
    g = load_model("gpt-oss-120b")
    w4 = DTypes("fp4", "bf16", "bf16")
    a = CostModel(g, ideal_hw(), dtypes=w4)
    b = CostModel(g, ideal_hw(moe_gemm_relative=0.6), dtypes=w4)
    assert part(a, "moe_experts") == pytest.approx(part(b, "moe_experts"), rel=1e-12)


def test_moe_gemm_relative_is_a_profile_factor_with_a_range() -> None:
    from simulator.profiles.profile import KernelsSection
    k = KernelsSection(by_chip_class={"cdna3": {"moe_gemm_relative": {"value": 0.65, "status": "fitted"}}})
    assert k.by_chip_class["cdna3"]["moe_gemm_relative"].value == 0.65
    with pytest.raises(SpecError, match=r"moe_gemm_relative"):
        KernelsSection(by_chip_class={"cdna3": {"moe_gemm_relative": {"value": 1.5, "status": "fitted"}}})


def test_expert_tile_padding_by_hand() -> None:
    """gpt-oss-120b (E = 128 experts, top-4) with MXFP4 experts and expert_tile_rows 64 (vLLM's
    Marlin MoE ladder 8/16/32/48/64, first tile whose mean fill T k / (E b) is below 0.9):
    - T = 1: the token's 4 experts get one row each, each padded to an 8-row tile: 32 rows,
      Tx = 32 / 4 = 8 tokens;
    - T = 922: mean 922 x 4 / 128 = 28.8 rows an expert; 28.8/32 = 0.9 is not below 0.9, 28.8/48
      = 0.6 is: b = 48. Every expert gets rows (P(X = 0) = (1 - 1/32)^922 ~ 2e-13) and almost
      never more than 48 (sd 5.3), so Tx ~ 128 x 48 / 4 = 1536 tokens (1.67 x T);
    - 16-bit experts, or expert_tile_rows 0: Tx = T (no padding)."""
    g = load_model("gpt-oss-120b")
    w4 = DTypes("fp4", "bf16", "bf16")
    tiled = CostModel(g, ideal_hw(expert_tile_rows=64.0), dtypes=w4)
    assert tiled.expert_tokens(1) == pytest.approx(8.0, rel=1e-12)
    assert tiled.expert_tokens(922) == pytest.approx(1536.0, rel=1e-3)
    assert tiled.expert_tokens(922) >= 1536.0
    for c in (CostModel(g, ideal_hw(), dtypes=w4),
              CostModel(g, ideal_hw(expert_tile_rows=64.0), dtypes=DTypes("bf16", "bf16", "bf16"))):
        assert c.expert_tokens(922) == 922.0
    # a cap of 32 leaves the ladder 8/16/32: 28.8 rows take b = 32 (the largest), one tile
    # an expert while X <= 32 (P(X > 32) ~ 0.25): Tx = 128 x 32 x E[ceil(X/32)] / 4 in (1024, 1536)
    c32 = CostModel(g, ideal_hw(expert_tile_rows=32.0), dtypes=w4)
    assert 1024.0 < c32.expert_tokens(922) < 1536.0
    # the compute side of the experts scales with Tx, the FLOPs stay the useful ones
    plain = CostModel(g, ideal_hw(), dtypes=w4)
    b = StepBatch(922, 1, 0.0, 922 * 461.0, 922)
    assert op(tiled, b, "moe_experts")["flops"] == pytest.approx(op(plain, b, "moe_experts")["flops"], rel=1e-12)
    lin = [next(o for o in c.ops if o.name == "moe_experts") for c in (plain, tiled)]
    xp, xt = plain.features(922, 1, 0.0, 0.0, 922, 0.0, 922), tiled.features(922, 1, 0.0, 0.0, 922, 0.0, 922)
    assert float((lin[1].compute_s - lin[1].ramp_s) @ xt) == pytest.approx(
        float((lin[0].compute_s - lin[0].ramp_s) @ xp) * tiled.expert_tokens(922) / 922, rel=1e-9)


def test_expert_tile_padding_matches_a_routing_loop() -> None:
    """The closed form against the obvious loop: route each of T tokens to 4 distinct experts of
    128 (seeded), count each expert's rows, pad them to the tile the ladder picks, sum; the mean
    over 400 draws is within 1 % of expert_tokens x k, at a decode size, a 922-token prefill and a
    budget-size chunk; scalar and vectorised step prices agree with padding on."""
    g = load_model("gpt-oss-120b")
    c = CostModel(g, ideal_hw(expert_tile_rows=64.0), dtypes=DTypes("fp4", "bf16", "bf16"))
    rng = np.random.default_rng(7)
    for T in (16, 922, 4096):
        mean = T * 4 / 128
        b = next((t for t in (8, 16, 32, 48, 64) if mean / t < 0.9), 64)
        rows = []
        for _ in range(400):
            picks = np.argsort(rng.random((T, 128)), axis=1)[:, :4]
            counts = np.bincount(picks.ravel(), minlength=128)
            rows.append(float((b * np.ceil(counts / b)).sum()))
        assert float(np.mean(rows)) == pytest.approx(c.expert_tokens(T) * 4, rel=0.01)
    Ts = np.array([1.0, 16.0, 922.0, 925.0, 4096.0])
    vec = c.step_times(Ts, np.ones(5), 0.0, Ts * Ts / 2, Ts)
    for t, v in zip(Ts, vec, strict=True):
        assert c.step_time(t, 1.0, 0.0, t * t / 2, t) == pytest.approx(float(v), rel=1e-12)


def test_expert_tile_rows_is_a_profile_factor_with_a_range() -> None:
    from simulator.profiles.profile import KernelsSection
    vllm = load_engine("vllm")
    assert vllm.kernels.by_chip_class["hopper"]["expert_tile_rows"].value == 64
    assert apply_profile(load_hardware(H100), vllm).efficiency.expert_tile_rows == 64
    with pytest.raises(SpecError, match=r"expert_tile_rows"):
        KernelsSection(by_chip_class={"hopper": {"expert_tile_rows": {"value": 4096, "status": "documented"}}})


def test_padded_expert_tokens_against_the_binomial_sum() -> None:
    """The recurrence in padded_expert_tokens against the textbook sum over every x of
    C(n, x) p^x q^(n-x) ceil(x / b) (exact rationals' float, math.comb), E = 128, k = 4."""
    import math

    from simulator.cost.roofline import MARLIN_MOE_TILES, padded_expert_tokens
    for n in (1, 3, 16, 64, 200, 922):
        p = 4 / 128
        b = next((t for t in MARLIN_MOE_TILES if n * p / t < 0.9), 64)
        ref = sum(math.comb(n, x) * p ** x * (1 - p) ** (n - x) * math.ceil(x / b) for x in range(n + 1))
        assert padded_expert_tokens(n, 128, 4, MARLIN_MOE_TILES, 128) == pytest.approx(128 * b * ref / 4,
                                                                                       rel=1e-12)


def test_expert_tile_rows_below_the_smallest_tile_is_refused() -> None:
    """A cap in (0, 8) leaves no tile of the ladder: refused with one line, not run unpadded."""
    from simulator.profiles.profile import KernelsSection
    with pytest.raises(SpecError, match=r"expert_tile_rows: 5 must be 0 \(no padding\) or at least 8"):
        Efficiency(expert_tile_rows=5.0)
    with pytest.raises(SpecError, match=r"hopper.expert_tile_rows.value: 4 must be 0"):
        KernelsSection(by_chip_class={"hopper": {"expert_tile_rows": {"value": 4, "status": "documented"}}})
    assert Efficiency(expert_tile_rows=0.0).expert_tile_rows == 0.0


def test_expert_tiles_follow_the_local_experts_and_fractional_batches() -> None:
    """vLLM's tile rule divides by the experts on one rank (w1.shape[0]): at ep = 8 gpt-oss has
    16 local experts, so T = 64 (mean fill 64 x 4 / 16 = 16 rows) takes b = 32 (16/16 = 1.0 is
    not below 0.9, 16/32 = 0.5 is), not the b = 8 of 128 experts; each expert's X ~ Bin(64,
    1/32) rows pad to 32: Tx = 128 x 32 x P(X > 0) / 4 (+ the rare X > 32), P(X > 0) =
    1 - (31/32)^64 = 0.8693. A fractional T (a pipelined micro-batch) lies on the line between
    its integer neighbours; T = 0 costs nothing; a 0-d array prices like the float."""
    g = load_model("gpt-oss-120b")
    w4 = DTypes("fp4", "bf16", "bf16")
    ep8 = CostModel(g, ideal_hw(expert_tile_rows=64.0), Parallelism(8, ep=8), w4)
    assert ep8.expert_tokens(64) == pytest.approx(128 * 32 * (1 - (31 / 32) ** 64) / 4, rel=1e-6)
    tp1 = CostModel(g, ideal_hw(expert_tile_rows=64.0), dtypes=w4)
    assert tp1.expert_tokens(0) == 0.0
    assert tp1.expert_tokens(2.25) == pytest.approx(
        0.75 * tp1.expert_tokens(2) + 0.25 * tp1.expert_tokens(3), rel=1e-12)
    assert tp1.step_time(np.float64(922.0), 1.0, 0.0, 922 * 461.0, 922.0) == tp1.step_time(922.0, 1.0, 0.0, 922 * 461.0,
                                                                                            922.0)
    assert tp1.step_time(np.array(922.0), 1.0, 0.0, 922 * 461.0, 922.0) == pytest.approx(
        tp1.step_time(922.0, 1.0, 0.0, 922 * 461.0, 922.0), rel=1e-15)
