"""Roofline cost model, memory fit, `llmsim predict` and `llmsim roofline`.

Reference numbers are worked out by hand from the model fields (see each test's comment),
never taken from the code under test.
"""

from __future__ import annotations

import dataclasses
import functools
import json

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.cli.commands import main
from simulator.cost.memory import memory_plan, weights_bytes_per_gpu
from simulator.cost.predict import predict_static
from simulator.cost.roofline import CostModel
from simulator.cost.stepbatch import StepBatch, decode_step, prefill_step
from simulator.resolve import make_cost_model
from simulator.specs.catalog import hardware_catalog, load_hardware, load_model
from simulator.specs.checks import SpecError
from simulator.specs.dtypes import DTypes
from simulator.specs.parallelism import Parallelism

A100 = "a100-sxm-80gb"
H100 = "h100-sxm"
PROPS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Non-trivial efficiencies so that every term of the model (GEMM ramp, launch and step
# overheads, link efficiency) is exercised by the consistency checks.
REAL_EFF = {"compute_efficiency": 0.7, "memory_efficiency": 0.8, "attention_efficiency": 0.5,
            "gemm_ramp_tokens": 64.0, "kernel_overhead_s": 3e-6, "step_overhead_s": 1e-3,
            "link_efficiency": 0.8}


@functools.cache
def cost(model: str, hw: str = A100, tp: int = 1, ideal: bool = True, kv: str | None = None,
         w: str | None = None, a: str = "bf16", real: bool = False) -> CostModel:
    return make_cost_model(model, hw, tp=tp, weight_dtype=w, activation_dtype=a, kv_dtype=kv,
                           ideal=ideal and not real, efficiency=REAL_EFF if real else None)


def close(x: float, ref: float, rel: float) -> bool:
    return abs(x - ref) <= rel * abs(ref)


# ------------------------------------------------------------------ hand-checked anchors
#
# Llama-2-7B: H=4096, L=32, n_h=n_kv=32, d=128, I=11008, V=32000; A100 312 TFLOP/s bf16,
# 2.039 TB/s. Parameters multiplied per token (no embedding): 32*(4*4096^2 + 3*4096*11008)
# + 4096*32000 = 6.607e9.
#   prefill 1024: 2*6.607e9*1024 + attention 32*4*4096*1024*512 = 13.81e12 FLOP -> 44.3 ms
#   decode b=1, 1024 cached: 2*6.607e9 B weights + 32*2*4096*2*1025 B KV = 13.75e9 B -> 6.74 ms
#   decode b=32: weights 13.21e9 + KV 32x0.537e9 = 30.4e9 B -> 14.9 ms


def test_llama2_7b_prefill_1024_tokens() -> None:
    c = cost("llama-2-7b")
    t = c.time(prefill_step(c.model, 1, 1024)) * 1e3
    assert close(t, 44.3, 0.015), t


@pytest.mark.parametrize("batch,ref,rel", [(1, 6.74, 0.01), (32, 14.9, 0.015)])
def test_llama2_7b_decode_step(batch: int, ref: float, rel: float) -> None:
    c = cost("llama-2-7b")
    t = c.time(StepBatch.from_sequences([(1, 1024)] * batch)) * 1e3
    assert close(t, ref, rel), t
    assert close(c.time(decode_step(c.model, batch, 1024)) * 1e3, t, 1e-12)


def test_batch1_decode_is_bytes_over_bandwidth() -> None:
    m, hw = load_model("llama-2-7b"), load_hardware(A100)
    H, L, nh, nkv, d, inter, V = (m.hidden_size, m.num_layers, m.num_heads, m.num_kv_heads,
                                  m.d_head, m.intermediate_size, m.vocab_size)
    per_layer = H * (nh + 2 * nkv) * d + nh * d * H + 3 * H * inter
    weights = (L * per_layer + H * V) * 2  # bf16; the embedding table is a gather: not read
    kv = L * 2 * nkv * d * 2 * (1024 + 1)  # read 1024 cached + the new token
    expected = (weights + kv) / hw.hbm_bandwidth_bytes_per_s
    got = cost("llama-2-7b").time(StepBatch.from_sequences([(1, 1024)]))
    assert close(got, expected, 0.01), (got, expected)
    assert got >= expected  # activations and norms only add


# ------------------------------------------------------------------ property tests

MODELS = ["llama-3.1-8b", "mixtral-8x7b", "deepseek-v3", "gpt-oss-120b", "mistral-7b"]
decodes = st.lists(st.integers(0, 20000), min_size=0, max_size=6)
prefills = st.lists(st.tuples(st.integers(2, 4096), st.integers(0, 8000)), min_size=0, max_size=3)


def _batch(model: str, dec: list[int], pre: list[tuple[int, int]]) -> StepBatch:
    m = load_model(model)
    window = m.sliding_window.window if m.sliding_window else None
    seqs = [(1, p) for p in dec] + list(pre)
    if not seqs:
        seqs = [(1, 0)]
    return StepBatch.from_sequences(seqs, window=window)


@PROPS
@given(model=st.sampled_from(MODELS), dec=decodes, pre=prefills, real=st.booleans(),
       f=st.floats(1.0, 10.0), which=st.sampled_from(["bw", "flops", "both"]))
def test_more_bandwidth_or_flops_never_slower(model: str, dec: list[int], pre: list[tuple[int, int]],
                                              real: bool, f: float, which: str) -> None:
    hw = load_hardware(H100)
    faster = hw
    if which in ("bw", "both"):
        faster = dataclasses.replace(faster, hbm_bandwidth_bytes_per_s=hw.hbm_bandwidth_bytes_per_s * f)
    if which in ("flops", "both"):
        faster = dataclasses.replace(faster, peak_flops_per_s={k: v * f for k, v in hw.peak_flops_per_s.items()})
    eff = REAL_EFF if real else None
    base = make_cost_model(model, hw, tp=8 if model == "deepseek-v3" else 1, efficiency=eff, ideal=not real)
    fast = make_cost_model(model, faster, tp=8 if model == "deepseek-v3" else 1, efficiency=eff, ideal=not real)
    b = _batch(model, dec, pre)
    assert fast.time(b) <= base.time(b) * (1 + 1e-12)


@PROPS
@given(model=st.sampled_from(MODELS), dec=decodes, pre=prefills, real=st.booleans(),
       grow=st.sampled_from(["add_decode", "add_prefill", "longer_context", "longer_chunk"]),
       extra=st.integers(1, 3000), data=st.data())
def test_more_tokens_never_faster(model: str, dec: list[int], pre: list[tuple[int, int]], real: bool,
                                  grow: str, extra: int, data: st.DataObject) -> None:
    c = cost(model, H100, real=real)
    b0 = _batch(model, dec, pre)
    dec2, pre2 = list(dec), list(pre)
    if grow == "add_decode":
        dec2.append(extra)
    elif grow == "add_prefill":
        pre2.append((1 + extra, data.draw(st.integers(0, 4000))))
    elif grow == "longer_context" and (dec2 or pre2):
        i = data.draw(st.integers(0, len(dec2) + len(pre2) - 1))
        if i < len(dec2):
            dec2[i] += extra
        else:
            q, p = pre2[i - len(dec2)]
            pre2[i - len(dec2)] = (q, p + extra)
    elif grow == "longer_chunk" and pre2:
        i = data.draw(st.integers(0, len(pre2) - 1))
        pre2[i] = (pre2[i][0] + extra, pre2[i][1])
    b1 = _batch(model, dec2, pre2)
    assert c.time(b1) >= c.time(b0) * (1 - 1e-12)


@PROPS
@given(model=st.sampled_from(MODELS), dec=decodes, pre=prefills, real=st.booleans())
def test_fp8_kv_never_slower_than_bf16(model: str, dec: list[int], pre: list[tuple[int, int]], real: bool) -> None:
    b = _batch(model, dec, pre)
    assert cost(model, H100, kv="fp8", real=real).time(b) <= cost(model, H100, kv="bf16", real=real).time(b) * (1 + 1e-12)


@pytest.mark.parametrize("model", ["llama-2-7b", "llama-3.1-8b", "llama-3.1-70b", "mixtral-8x7b",
                                   "deepseek-v3", "gpt-oss-120b", "qwen3-32b"])
@settings(max_examples=10, deadline=None)
@given(w=st.sampled_from(["bf16", "fp8", "int4", "fp32"]))
def test_tp2_halves_weight_bytes(model: str, w: str) -> None:
    m = load_model(model)
    assert m.num_kv_heads >= 2 or m.mla is not None
    one = weights_bytes_per_gpu(m, Parallelism(1), DTypes(w))
    two = weights_bytes_per_gpu(m, Parallelism(2), DTypes(w))
    assert close(two, one / 2, 1e-12)
    assert close(one, m.weight_bytes(w), 1e-12)
    if m.quantized_weights == "all" or w in ("bf16", "fp32"):
        assert close(one, m.param_count * {"bf16": 2, "fp8": 1, "int4": 0.5, "fp32": 4}[w], 1e-12)
    else:  # gpt-oss: a narrower format quantises the routed experts only (the rest stays bf16)
        e = m.routed_expert_param_count
        assert close(one, e * {"fp8": 1, "int4": 0.5}[w] + (m.param_count - e) * 2, 1e-12)


@PROPS
@given(model=st.sampled_from(MODELS), dec=decodes, pre=prefills, real=st.booleans(),
       tp=st.sampled_from([1, 2, 8]), emit=st.booleans())
def test_scalar_vector_breakdown_agree(model: str, dec: list[int], pre: list[tuple[int, int]],
                                       real: bool, tp: int, emit: bool) -> None:
    c = cost(model, A100, tp=tp, real=real)
    b = _batch(model, dec, pre)
    if not emit:  # a step of prefill chunks that finish no prompt: no LM head rows
        b = dataclasses.replace(b, S=0.0)
    scalar = c.step_time(b.T, b.S, b.Ad, b.Ap, b.R, b.Aw, b.Rw, b.Pc)
    vector = c.step_times(np.array([b.T, b.T]), np.array([b.S, b.S]), np.array([b.Ad] * 2),
                          np.array([b.Ap] * 2), np.array([b.R] * 2), np.array([b.Aw] * 2),
                          np.array([b.Rw] * 2), np.array([b.Pc] * 2))
    detail = c.breakdown(b)["time_ms"] / 1e3
    assert vector.shape == (2,)
    for v in (float(vector[0]), float(vector[1]), detail):
        assert abs(v - scalar) <= 1e-9 * scalar


# ------------------------------------------------------------------ dtypes


def test_fp8_falls_back_to_bf16_on_a100() -> None:
    c = cost("llama-3.1-8b", A100, w="fp8", a="fp8")
    assert c.dtypes.gemm == "fp8"
    assert c.gemm_dtype == "bf16"
    assert any("fp8" in n and "bf16" in n for n in c.notes)
    r = predict_static(c, 1, 256, 2)
    assert r["gemm_dtype"] == "bf16"
    assert r["notes"]


def test_fp8_uses_fp8_rate_on_h100() -> None:
    f8, b16 = cost("llama-3.1-8b", H100, w="fp8", a="fp8"), cost("llama-3.1-8b", H100)
    assert f8.gemm_dtype == "fp8" and not f8.notes
    pre = prefill_step(f8.model, 4, 2048)  # compute-bound: twice the tensor rate
    t8, t16 = f8.time(pre), b16.time(pre)
    assert t8 < 0.6 * t16
    gemm8 = next(o for o in f8.breakdown(pre)["ops"] if o["name"] == "mlp_gate_up")
    assert gemm8["bound"] == "compute"
    assert close(gemm8["time_ms"] / 1e3, gemm8["flops"] / 1979e12, 1e-9)


def test_w4a16_runs_bf16_tensor_cores() -> None:
    c = cost("llama-3.1-8b", H100, w="int4", a="bf16")
    assert c.gemm_dtype == "bf16"


# ------------------------------------------------------------------ MoE


def test_moe_expected_experts_touched() -> None:
    c = cost("mixtral-8x7b")
    E, k = 8, 2
    assert close(float(c._touched(1)), k, 1e-12)
    # by hand: E (1 - (1 - k/E)^T) at T=2: 8 (1 - 0.5625) = 3.5
    assert close(float(c._touched(2)), 3.5, 1e-12)
    grow = [float(c._touched(t)) for t in (1, 2, 4, 16, 64, 1024)]
    assert grow == sorted(grow) and grow[-1] <= E and close(grow[-1], E, 1e-6)


def test_mixtral_batch1_decode_reads_k_of_e_experts() -> None:
    c = cost("mixtral-8x7b")
    m = c.model
    b = decode_step(m, 1, 512)
    op = next(o for o in c.breakdown(b)["ops"] if o["name"] == "moe_experts")
    all_experts = m.num_layers * 8 * 3 * m.hidden_size * 14336 * 2  # every expert, bf16
    assert close(op["weight_bytes"], all_experts * 2 / 8, 1e-9)
    big = next(o for o in c.breakdown(decode_step(m, 256, 512))["ops"] if o["name"] == "moe_experts")
    assert close(big["weight_bytes"], all_experts, 1e-6)


# ------------------------------------------------------------------ KV sharding and memory


def test_mla_kv_per_token_does_not_shrink_with_tp() -> None:
    m = load_model("deepseek-v3")
    hw = load_hardware("h200-sxm")
    by_hand = 61 * (512 + 64) * 2  # one latent + rope key per layer, bf16
    for tp in (1, 8, 16):
        plan = memory_plan(m, hw, Parallelism(tp), DTypes("fp8", "bf16", "bf16"))
        assert plan.kv_bytes_per_token == by_hand
        assert plan.kv_bytes_per_token_per_gpu == by_hand


def test_gqa_kv_replicated_beyond_kv_heads() -> None:
    m = load_model("llama-3.1-70b")
    hw = load_hardware(H100)
    kv = 80 * 2 * 8 * 128 * 2  # L * (K,V) * n_kv * d * bf16
    assert m.kv_bytes_per_token("bf16") == kv
    for tp, shards in ((1, 1), (4, 4), (8, 8), (16, 8)):
        plan = memory_plan(m, hw, Parallelism(tp), DTypes())
        assert plan.kv_bytes_per_token_per_gpu == kv / shards


def _llama70b_params() -> int:
    H, L, nh, nkv, d, inter, V = 8192, 80, 64, 8, 128, 28672, 128256
    return L * (H * (nh + 2 * nkv) * d + nh * d * H + 3 * H * inter + 2 * H) + 2 * V * H + H


def test_llama70b_does_not_fit_one_a100() -> None:
    # by hand: 70.55e9 params x 2 B = 141.1 GB > 0.9 x 85.9 GB = 77.3 GB usable;
    # at tp=2 70.6 GB + ~2 GB activations/workspace < 77.3 GB: smallest TP is 2.
    P = _llama70b_params()
    m, hw = load_model("llama-3.1-70b"), load_hardware(A100)
    assert m.param_count == P
    usable = 0.9 * hw.hbm_capacity_bytes
    hand_tp = next(t for t in (1, 2, 4, 8) if P * 2 / t + 3e9 < usable)
    assert hand_tp == 2
    plan = memory_plan(m, hw, Parallelism(1), DTypes())
    assert not plan.fits
    assert plan.smallest_tp_that_fits == hand_tp
    assert f"smallest TP that fits: {hand_tp}" in plan.message
    assert "141.1 GB" in plan.message
    four = memory_plan(m, hw, Parallelism(4), DTypes())
    assert four.fits and four.kv_capacity_tokens > 100_000
    assert close(four.weights_bytes_per_gpu, P * 2 / 4, 1e-12)


# ------------------------------------------------------------------ CLI

REQUIRED = ["ttft_ms", "tpot_ms", "e2e_ms", "decode_tokens_per_s", "prefill_tokens_per_s",
            "output_tokens_per_s", "output_tokens_per_s_per_gpu", "prefill", "decode", "memory"]


def _predict_json(*args: str) -> dict:
    r = CliRunner().invoke(main, ["predict", *args, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_cli_predict_json_dense_tp2() -> None:
    d = _predict_json("--model", "llama-3.1-8b", "--hardware", A100, "--tp", "2",
                      "--batch-size", "4", "--input-len", "512", "--output-len", "16")
    for k in REQUIRED:
        assert k in d, k
    for phase in ("prefill", "decode"):
        assert d[phase]["bound"] in ("compute", "memory", "communication")
        assert d[phase]["flops"] > 0 and d[phase]["bytes"] > 0
        names = {o["name"] for o in d[phase]["ops"]}
        assert {"qkv_proj", "attention", "o_proj", "mlp_gate_up", "mlp_down", "lm_head",
                "allreduce"} <= names
        for o in d[phase]["ops"]:
            assert {"name", "flops", "bytes", "time_ms", "bound"} <= set(o)
    for k in ("weights_bytes_per_gpu", "kv_bytes_per_token", "kv_capacity_tokens", "fits"):
        assert k in d["memory"]
    assert d["memory"]["fits"] is True
    assert close(d["output_tokens_per_s_per_gpu"] * 2, d["output_tokens_per_s"], 1e-12)
    assert close(d["decode_tokens_per_s"], 1000.0 / d["tpot_ms"], 1e-12)


def test_cli_predict_json_moe_and_efficiency_override() -> None:
    d = _predict_json("--model", "mixtral-8x7b", "--hardware", H100, "--tp", "2",
                      "--efficiency", "step_overhead_s=0")
    assert "moe_experts" in {o["name"] for o in d["decode"]["ops"]}
    slow = _predict_json("--model", "mixtral-8x7b", "--hardware", H100, "--tp", "2",
                         "--efficiency", "step_overhead_s=0.01")
    assert close(slow["tpot_ms"] - d["tpot_ms"], 10.0, 1e-6)


def test_cli_predict_human_output() -> None:
    r = CliRunner().invoke(main, ["predict", "-m", "llama-3.1-8b", "-g", A100, "--weight-dtype", "fp8",
                                  "--activation-dtype", "fp8"])
    assert r.exit_code == 0, r.output
    for word in ("TTFT", "TPOT", "E2E", "throughput", "weights/GPU", "KV capacity", "fits",
                 "top ops, prefill", "top ops, decode", "notes:", "mlp_gate_up", "fp8"):
        assert word in r.output, word


def test_cli_predict_does_not_fit_exits_2() -> None:
    r = CliRunner().invoke(main, ["predict", "-m", "llama-3.1-70b", "-g", A100])
    assert r.exit_code == 2
    assert "does not fit" in r.output and "smallest TP that fits: 2" in r.output
    assert "Traceback" not in r.output
    ok = CliRunner().invoke(main, ["predict", "-m", "llama-3.1-70b", "-g", A100, "--tp", "4"])
    assert ok.exit_code == 0, ok.output


def test_cli_bad_efficiency_exits_2() -> None:
    r = CliRunner().invoke(main, ["predict", "-m", "llama-3.1-8b", "-g", A100, "--efficiency", "bogus=1"])
    assert r.exit_code == 2 and "bogus" in r.output
    r = CliRunner().invoke(main, ["predict", "-m", "llama-3.1-8b", "-g", A100, "--efficiency",
                                  "compute_efficiency=2"])
    assert r.exit_code == 2 and "compute_efficiency" in r.output


def test_cli_roofline_writes_png(tmp_path) -> None:
    out = tmp_path / "x.png"
    r = CliRunner().invoke(main, ["roofline", "--model", "mixtral-8x7b", "--hardware", H100, "--tp", "2",
                                  "--batch-size", "8", "--input-len", "512", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert str(out) in r.output
    data = out.read_bytes()
    assert len(data) > 10_000 and data[:8] == b"\x89PNG\r\n\x1a\n"


def test_predict_static_validates() -> None:
    with pytest.raises(SpecError):
        predict_static(cost("llama-3.1-8b"), 0, 10, 10)


def test_mla_prefill_on_cached_context_pays_decompression() -> None:
    """A DeepSeek-V3 prefill chunk on top of cached tokens decompresses their latents:
    2 r n_h (nope + v) FLOPs per cached token per layer, beyond the fresh-prompt cost."""
    c = cost("deepseek-v3", A100, tp=8)
    m = c.model
    fresh = StepBatch.from_sequences([(512, 0)])
    on_ctx = StepBatch.from_sequences([(512, 4096)])
    ops_f = {o["name"]: o for o in c.breakdown(fresh)["ops"]}
    ops_c = {o["name"]: o for o in c.breakdown(on_ctx)["ops"]}
    ml = m.mla
    expected = 2 * ml.kv_lora_rank * m.num_heads * (ml.qk_nope_head_dim + ml.v_head_dim) / 8 * 4096 * m.num_layers
    assert ops_f["kv_up_proj_context"]["flops"] == 0
    assert close(ops_c["kv_up_proj_context"]["flops"], expected, 1e-12)


@pytest.mark.parametrize("hw_id", sorted(hardware_catalog()))
def test_catalog_defaults_keep_small_gemms_bandwidth_bound(hw_id: str) -> None:
    """The fitted GEMM ramp must not make batch-1 decode compute-bound: its compute floor
    f T0 / (P eta_c) stays at most RAMP_CAP of a GEMM's weight-read time on every chip."""
    from simulator.analysis.calibrate import RAMP_CAP

    h = hardware_catalog()[hw_id]
    e = h.efficiency
    bound = RAMP_CAP * h.flops("bf16") * e.compute_efficiency / (h.hbm_bandwidth_bytes_per_s * e.memory_efficiency)
    assert e.gemm_ramp_tokens <= bound * (1 + 1e-3)
    c = make_cost_model("llama-3.1-8b", h)
    assert c.breakdown(StepBatch.from_sequences([(1, 1024)]))["bound"] == "memory"


def test_more_bandwidth_means_faster_decode_with_catalog_defaults() -> None:
    """H200 = H100 compute with 1.43x the HBM bandwidth: batch-1 decode must be faster."""
    tpot = {h: predict_static(make_cost_model("llama-3.1-70b", h, tp=4), 1, 1024, 64)["tpot_ms"]
            for h in ("h100-sxm", "h200-sxm")}
    assert tpot["h200-sxm"] < 0.9 * tpot["h100-sxm"]


def test_sliding_window_attention_flops_by_hand() -> None:
    """Mistral-7B (all 32 layers slide over 4096 tokens), one 8192-token prompt: each query
    attends to min(position, 4096) keys; the model's pair count q * min(q/2, W) = 8192 * 4096,
    times 4 n_h d FLOPs per pair per layer."""
    c = cost("mistral-7b", A100)
    m = c.model
    ops = {o["name"]: o for o in c.breakdown(prefill_step(m, 1, 8192))["ops"]}
    expected = 4 * m.num_heads * m.d_head * 8192 * 4096 * m.num_layers
    assert close(ops["attention_sliding"]["flops"], expected, 1e-12)


# ------------------------------------------------------------------ the physics layer's seams


def test_cost_model_takes_specs_not_names() -> None:
    with pytest.raises(TypeError, match="ModelSpec"):
        CostModel("llama-2-7b", load_hardware(A100))  # type: ignore[arg-type]
    from simulator import resolve
    from simulator.cost import memory, predict, roofline
    from simulator.specs import dtypes, parallelism

    # name resolution and static prediction live outside the physics layer
    assert not hasattr(roofline, "make_cost_model") and not hasattr(roofline, "predict_static")
    assert resolve.make_cost_model and predict.predict_static and predict.top_ops
    assert memory.memory_plan is memory.memory_plan
    assert parallelism.Parallelism is parallelism.Parallelism and dtypes.DTypes is dtypes.DTypes


@pytest.mark.parametrize("T", [1, 7, 300, 5000])
def test_gemm_ops_are_the_single_gemm_formula(T: int) -> None:
    """Each GEMM op of CostModel takes roofline.gemm_time_s per layer (the formula calibrate fits).

    Llama-2-7B (H = 4096, n_h d = 4096, I = 11008), all bf16, tp = 1, REAL_EFF on an A100."""
    from simulator.cost.roofline import Rates, gemm_time_s

    c = cost("llama-2-7b", real=True)
    hw = c.hardware
    r = Rates.of(hw, "bf16", "bf16", "bf16", hw.efficiency, hw.link_latency_s)
    ops = {o["name"]: o for o in c.breakdown(StepBatch(T=T, S=1, Ap=T * T / 2.0, R=T))["ops"]}
    H, inter, L = 4096, 11008, 32
    shapes = {"qkv_proj": (H, 3 * H), "o_proj": (H, H), "mlp_gate_up": (H, 2 * inter), "mlp_down": (inter, H)}
    for name, (n_in, n_out) in shapes.items():
        ref = gemm_time_s(T, n_in, n_out, peak_flops_per_s=r.gemm_flops_per_s, hbm_bytes_per_s=r.hbm_bytes_per_s,
                          bytes_per_element=2.0, ramp_tokens=r.ramp_tokens, kernel_overhead_s=r.kernel_overhead_s)
        assert close(ops[name]["time_ms"] / 1e3 / L, float(ref), 1e-12), name


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_allreduce_op_is_the_single_ring_formula(tp: int) -> None:
    """Two ring all-reduces of T H b_a bytes per layer (Llama-3.1-70B: H = 8192, L = 80)."""
    from simulator.cost.roofline import allreduce_time_s

    c = make_cost_model("llama-3.1-70b", H100, tp=tp, efficiency=REAL_EFF)
    hw = c.hardware
    T = 256
    ops = {o["name"]: o for o in c.breakdown(decode_step(c.model, T, 1000))["ops"]}
    ref = 2 * 80 * allreduce_time_s(tp, T * 8192 * 2.0, hw.link_bandwidth_bytes_per_s * 0.8, hw.link_latency_s)
    assert close(ops["allreduce"]["time_ms"] / 1e3, ref, 1e-12)


@pytest.mark.parametrize("model,tp,width_ramp", [("llama-2-7b", 1, 0.0), ("mixtral-8x7b", 2, 0.0),
                                                 ("deepseek-v3", 8, 0.0), ("gpt-oss-120b", 2, 0.0),
                                                 ("gpt-oss-120b", 8, 335.0), ("llama-3.1-70b", 4, 0.0)])
def test_linear_terms_rebuild_step_time(model: str, tp: int, width_ramp: float) -> None:
    """sum_ops max((C + T0 R)/eta_c + A/eta_att, M/eta_m) + k L + W/eta_link + l N + overhead
    equals step_time at the hardware's own (non-trivial) efficiencies: calibration's re-pricing
    is the cost model's (with an experts' width ramp too: the terms carry it)."""
    c = make_cost_model(model, H100, tp=tp, efficiency={**REAL_EFF, "expert_width_ramp": width_ramp})
    e, hw = c.hardware.efficiency, c.hardware
    lt = c.linear_terms()
    w = c.model.sliding_window.window if c.model.sliding_window else None
    for seqs in ([(1, 100)], [(1, 3000)] * 64, [(512, 0), (1, 20), (1, 900)], [(2048, 4096)], [(8192, 0)] * 4):
        b = StepBatch.from_sequences(seqs, window=w)
        x = c.features(b.T, b.S, b.Ad, b.Ap, b.R, b.Aw, b.Rw, b.Pc)
        comp = (lt.compute_s + e.gemm_ramp_tokens * lt.ramp_s_per_token) @ x / e.compute_efficiency
        comp = comp + lt.attention_s @ x / e.attention_efficiency
        t = np.maximum(comp, lt.memory_s @ x / e.memory_efficiency).sum()
        t += (e.kernel_overhead_s * lt.launches @ x + lt.link_s @ x / e.link_efficiency
              + hw.link_latency_s * lt.latencies @ x + e.step_overhead_s * x[0])
        assert close(float(t), c.time(b), 1e-12), seqs


# ------------------------------------------------------------------ per-format efficiencies


def _with_eff(hw_id: str, **by: dict) -> object:
    hw = load_hardware(hw_id)
    return dataclasses.replace(hw, efficiency=dataclasses.replace(hw.efficiency, **by))


def _op_forms(c: CostModel) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    return {op.name: (op.compute_s, op.memory_s, op.extra_s) for op in c.ops}


@pytest.mark.parametrize("hw_id", [H100, "mi300x", A100])
def test_per_dtype_efficiency_absent_or_equal_is_identical(hw_id: str) -> None:
    """No per-format values, or values equal to the chip's single ones, or values for formats
    a model does not use: bit-identical op forms and step times."""
    base_hw = load_hardware(hw_id)
    e = base_hw.efficiency
    same = _with_eff(hw_id, compute_efficiency_by_dtype={"bf16": e.compute_efficiency, "fp4": 0.1},
                     gemm_ramp_tokens_by_dtype={"bf16": e.gemm_ramp_tokens, "int8": 999.0},
                     attention_efficiency_by_kv_dtype={"bf16": e.attention_efficiency, "fp8": 0.1})
    for model, tp in (("llama-3.1-8b", 1), ("mixtral-8x7b", 2)):
        a = make_cost_model(model, base_hw, tp=tp)
        b = make_cost_model(model, same, tp=tp)
        for name, forms in _op_forms(a).items():
            for x, y in zip(forms, _op_forms(b)[name], strict=True):
                assert np.array_equal(x, y), name
        batch = StepBatch.from_sequences([(1, 2000)] * 32 + [(512, 100)])
        assert a.time(batch) == b.time(batch)


def test_fp8_gemm_efficiency_changes_only_fp8_gemms() -> None:
    """An fp8-specific eta_c on an H100: bf16 models are untouched; an fp8 model's GEMM compute
    forms scale by eta_c / eta_c[fp8] (the ramp too, with T0[fp8]); attention, element-wise,
    memory and launch terms stay as they were."""
    hw = load_hardware(H100)
    e = hw.efficiency
    fp8 = _with_eff(H100, compute_efficiency_by_dtype={"fp8": 0.3}, gemm_ramp_tokens_by_dtype={"fp8": 7.0})
    b16, b16x = make_cost_model("llama-3.1-8b", hw), make_cost_model("llama-3.1-8b", fp8)
    assert all(np.array_equal(x, y) for n, f in _op_forms(b16).items() for x, y in zip(f, _op_forms(b16x)[n], strict=True))
    a = make_cost_model("llama-3.1-8b", hw, weight_dtype="fp8", activation_dtype="fp8", kv_dtype="bf16")
    b = make_cost_model("llama-3.1-8b", fp8, weight_dtype="fp8", activation_dtype="fp8", kv_dtype="bf16")
    assert a.gemm_dtype == "fp8"
    peak = hw.flops("fp8")
    for oa, ob in zip(a.ops, b.ops, strict=True):
        assert np.array_equal(oa.memory_s, ob.memory_s) and np.array_equal(oa.extra_s, ob.extra_s), oa.name
        if oa.kind == "gemm" and oa.name != "kv_up_proj_context":
            base = oa.compute_s - oa.ramp_s  # f/(P eta_c) per row feature
            np.testing.assert_allclose(ob.compute_s - ob.ramp_s, base * e.compute_efficiency / 0.3, rtol=1e-12)
            # ramp: f T0 / (P eta_c) -> f 7 / (P 0.3)
            f = (oa.ramp_s * peak * e.compute_efficiency / e.gemm_ramp_tokens) if e.gemm_ramp_tokens else None
            if f is not None:
                np.testing.assert_allclose(ob.ramp_s, f * 7.0 / (peak * 0.3), rtol=1e-12)
        else:
            assert np.array_equal(oa.compute_s, ob.compute_s), oa.name


def test_attention_efficiency_per_kv_dtype() -> None:
    """attention_efficiency_by_kv_dtype[fp8] changes only the attention ops of an fp8-KV model."""
    hw = load_hardware(H100)
    e = hw.efficiency
    hw2 = _with_eff(H100, attention_efficiency_by_kv_dtype={"fp8": 0.2})
    for kv, changed in (("bf16", False), ("fp8", True)):
        a = make_cost_model("llama-3.1-8b", hw, kv_dtype=kv)
        b = make_cost_model("llama-3.1-8b", hw2, kv_dtype=kv)
        for oa, ob in zip(a.ops, b.ops, strict=True):
            if changed and oa.kind == "attention":
                np.testing.assert_allclose(ob.compute_s, oa.compute_s * e.attention_efficiency / 0.2, rtol=1e-12)
            else:
                assert np.array_equal(oa.compute_s, ob.compute_s), (kv, oa.name)


def test_per_dtype_efficiency_validation_and_yaml(tmp_path) -> None:
    from simulator.specs.hardware import Efficiency

    with pytest.raises(SpecError, match=r"^efficiency.compute_efficiency_by_dtype.fp9: unknown dtype"):
        Efficiency(compute_efficiency_by_dtype={"fp9": 0.5})
    with pytest.raises(SpecError, match=r"^efficiency.attention_efficiency_by_kv_dtype.fp8: 1.5 must be a number in \(0, 1\]$"):
        Efficiency(attention_efficiency_by_kv_dtype={"fp8": 1.5})
    with pytest.raises(SpecError, match=r"^efficiency.gemm_ramp_tokens_by_dtype.fp8: -1 must be a number >= 0$"):
        Efficiency(gemm_ramp_tokens_by_dtype={"fp8": -1})
    f = tmp_path / "h100-fp8.yaml"
    f.write_text("base: h100-sxm\nefficiency:\n  compute_efficiency_by_dtype: {fp8: 0.35}\n")
    hw = load_hardware(str(f))
    assert hw.efficiency.compute_for("fp8") == 0.35
    assert hw.efficiency.compute_for("bf16") == load_hardware(H100).efficiency.compute_efficiency
