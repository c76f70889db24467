"""The price of one engine step: a roofline cost model per operator.

Physics from `docs/performance_model.md` (roofline: Williams, Waterman & Patterson, CACM 2009;
per-op FLOP/byte accounting as in LLM-Viewer, Yuan et al., arXiv:2402.16363):

    time(op)   = max( F / (peak[dtype] * eta_c(T)),  B / (hbm_bw * eta_m) )
    time(step) = sum_layers sum_ops time(op) + all-reduce + per-step overhead

A step is described by sufficient statistics that do not grow with the batch:

    T   new tokens in the step              S   sequences that emit a token (LM head rows)
    Ad  decode query-key pairs  sum_j (p_j + 1/2) over decode sequences (p_j cached tokens)
    Ap  prefill query-key pairs sum_i q_i (p_i + q_i/2) over prefill chunks (causal)
    R   KV tokens read          sum_j (p_j + q_j) over all sequences
    Aw, Rw  the same two sums with each sequence's context capped at the sliding window
    Pc  cached tokens under prefill chunks  sum_i p_i (MLA decompresses their latent K/V)

With those, every op's FLOPs and bytes are linear in the feature vector
x = [1, T, S, [S>0], Ad, Ap, R, Aw, Rw, U, Pc, Tx], where U = E (1 - (1 - k/E)^T) is the expected
number of distinct experts a step touches (uniform routing) and Tx the tokens the routed experts'
GEMMs compute: T, or, for a kernel that pads each expert's rows to a tile of b rows (vLLM's
Marlin MoE), Tx = E b E[ceil(X / b)] / k with X ~ Binomial(T, k/E) an expert's rows
(`expert_tokens`). The GEMM efficiency ramp
eta_c(T) = eta_c T / (T + T0) keeps compute time linear too: F/(P eta_c(T)) = f (T + T0)/(P eta_c).
So the model compiles to two small matrices and the step time is
sum_ops max(C_op . x, M_op . x) + P . x, costing the same for 1 or 1000 sequences.

The single GEMM and ring all-reduce formulas are `gemm_time_s` and `allreduce_time_s`;
`CostModel.linear_terms()` splits the step time by efficiency parameter for calibration;
`StepCost` is what the engine needs of a cost model. This module takes specs only: names and
files are resolved by `resolve.make_cost_model` (catalog), memory by `memory`, static-batch
prediction by `predict`; the step statistics (`StepBatch`, `prefill_step`, `decode_step`) live in
`stepbatch` and `parse_efficiency_overrides` in `specs` (both re-exported here). About 630 lines
because the op list and its evaluation paths (scalar, vectorised, per-op breakdown, linear
terms) are one concept: a change to one op must be seen next to every path that prices it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from simulator.cost.memory import MemoryPlan, memory_plan
from simulator.cost.network import group_link, scaleout_link, scaleup_link
from simulator.cost.parallel import alltoall_time_s, pipelined, pp_sends
from simulator.cost.stepbatch import StepBatch
from simulator.specs.checks import SpecError, SpecTypeError, check_choice
from simulator.specs.dtypes import DTYPE_BYTES, DTypes, attention_format
from simulator.specs.fields import _did_you_mean
from simulator.specs.hardware import SCALAR_EFFICIENCY_FIELDS, Efficiency, HardwareSpec
from simulator.specs.model import ModelSpec
from simulator.specs.parallelism import Parallelism

FEATURES = ("one", "T", "S", "emit", "Ad", "Ap", "R", "Aw", "Rw", "U", "Pc", "Tx", "Rb")
_NF = len(FEATURES)
_I = {name: i for i, name in enumerate(FEATURES)}
#: the row tiles vLLM's Marlin MoE kernel chooses from, and the fill below which it takes a tile:
#: `for block_size_m in [8, 16, 32, 48, 64]: if M * topk / E / block_size_m < 0.9: break`
#: (vllm/model_executor/layers/fused_moe/fused_marlin_moe.py); each expert's rows are padded
#: to a multiple of the tile (moe_align_block_size) and the padding is computed
MARLIN_MOE_TILES = (8, 16, 32, 48, 64)
MARLIN_MOE_FILL = 0.9
#: vLLM V0's paged-attention decode kernel (the path of a KV cache the engine has no native
#: kernel for): one thread block per (sequence, query head) walks the whole context (v1), or, when
#: `max_seq_len <= 8192 and (max_num_partitions == 1 or num_seqs * num_heads > 512)` is false,
#: one per 512-token partition plus a reduction (v2) (vllm/attention/ops/paged_attn.py
#: `_PARTITION_SIZE`, `forward_decode`); the longest block sets the kernel's floor (`block_tokens`)
PAGED_PARTITION_TOKENS = 512
PAGED_V1_MAX_BLOCKS = 512
PAGED_V1_MAX_CONTEXT = 8192


def paged_block_tokens(S: float, Ad: float, query_heads: float) -> float:
    """Rb: the KV tokens the longest thread block of the paged-attention decode kernel walks
    (the `PAGED_*` rule): a decoding sequence's context, taken as Ad / S (decode pairs per
    emitting sequence: p + 1/2 in a decode-only step, less in a mixed one, 0 in a prefill), or
    one 512-token partition where vLLM splits the context (v2). `query_heads`: per GPU."""
    if S <= 0:
        return 0.0
    ctx = Ad / S
    v1 = ctx <= PAGED_V1_MAX_CONTEXT and (ctx <= PAGED_PARTITION_TOKENS or S * query_heads > PAGED_V1_MAX_BLOCKS)
    return ctx if v1 else min(ctx, PAGED_PARTITION_TOKENS)


#: efficiency fields of weight-only (dequantising) GEMMs, whose provenance CostModel.notes reports
_DEQUANT_FIELDS = ("dequant_gemm_efficiency", "dequant_ramp_relative", "moe_layer_overhead_s")


@dataclass(frozen=True)
class Op:
    """One operator's cost as linear forms over FEATURES (already x layer count, per GPU).

    compute_s includes ramp_s (the T0 part of eta_c(T)); extra_s = launch_s + link_s + latency_s.
    The parts are kept so that `CostModel.linear_terms` can split the time by parameter.
    """

    name: str
    kind: str  # "gemm", "attention", "vector", "gather", "comm"
    flops: np.ndarray
    weight_bytes: np.ndarray
    act_bytes: np.ndarray
    kv_read_bytes: np.ndarray
    kv_write_bytes: np.ndarray
    compute_s: np.ndarray  # linear form of compute time
    memory_s: np.ndarray  # linear form of memory time
    extra_s: np.ndarray  # added outside the max (launch overhead, communication)
    ramp_s: np.ndarray  # the part of compute_s from the GEMM ramp T0
    launch_s: np.ndarray  # kernel launches x kernel_overhead_s
    link_s: np.ndarray  # bytes over the link / (link_bw eta_link)
    latency_s: np.ndarray  # link latencies x link_latency_s


@dataclass(frozen=True)
class Rates:
    """The hardware rates and fixed costs the op forms divide by or add, efficiencies applied."""

    gemm_flops_per_s: float  # P_gemm = peak[gemm dtype] eta_c[gemm dtype] (x dequant factor if weight-only)
    attention_flops_per_s: float  # P_attn = peak[activation dtype] eta_att[kv dtype]
    vector_flops_per_s: float  # P_vec = peak[activation dtype] eta_c
    hbm_bytes_per_s: float  # bw eta_m
    ramp_tokens: float  # T0[gemm dtype]
    kernel_overhead_s: float
    link_bytes_per_s: float  # link_bw eta_link
    link_latency_s: float
    expert_gemm_flops_per_s: float = 0.0  # the routed experts' GEMMs (0: the same as gemm_flops_per_s)
    expert_ramp_tokens: float = -1.0  # their T0 (< 0: the same as ramp_tokens)
    sequence_overhead_s: float = 0.0  # per sequence per step
    gqa_kv_sharing: float = 1.0  # 1: each KV head read once; 0: once per query head
    kv_dequant_elements_per_s: float = 0.0  # 0: a native path for the KV format (no conversion)
    kv_dequant_block_elements_per_s: float = 0.0  # one thread block's conversion rate (0: not priced)
    expert_width_ramp: float = 0.0  # W0: the experts' per-row compute x (1 + W0 / W), W = I_e ep / tp

    @classmethod
    def of(cls, hw: HardwareSpec, gemm_dtype: str, attention_dtype: str, kv_dtype: str, eff: Efficiency,
           link_latency_s: float, *, weight_only: float = 1.0, expert_gemm_dtype: str | None = None,
           expert_weight_only: float = 1.0, dequant_kv: bool = False, vector_dtype: str | None = None) -> Rates:
        """The rates of `hw` at efficiencies `eff`; GEMM efficiency and ramp per GEMM format and
        attention efficiency per KV format where `eff` gives them, else its single values.
        `weight_only` < 1: the (dense) GEMMs dequantise weights of that many bytes per activation
        byte (0.25 for W4A16): rate x dequant_gemm_efficiency, ramp T0 x that x
        dequant_ramp_relative;
        `expert_gemm_dtype` / `expert_weight_only`: the same for the routed experts' GEMMs when
        they differ; `vector_dtype`: the element-wise ops' format (the activations'; default the
        attention format); `dequant_kv`: the KV cache is narrower than the activations, so a kernel
        without a native path for it converts it at eff's rate for `kv_dtype` (and, where `eff`
        gives one, at most at one thread block's rate along the longest block: `block_tokens`)."""
        def gemm_rate(dtype: str, dequant: float) -> float:
            return hw.flops(dtype) * eff.compute_for(dtype) * (eff.dequant_gemm_efficiency if dequant < 1 else 1.0)

        def ramp(dtype: str, dequant: float) -> float:
            # a dequantising GEMM's small-M compute floor f T0 / P: T0 x dequant_ramp_relative
            # (Marlin-style kernels reach the narrower weights' read at small M: ~ the bytes
            # ratio; 1 = the activation format's floor) x dequant_gemm_efficiency (the floor does
            # not move when the large-M rate drops)
            if dequant >= 1:
                return eff.ramp_for(dtype)
            return eff.ramp_for(dtype) * eff.dequant_ramp_relative * eff.dequant_gemm_efficiency

        edt = gemm_dtype if expert_gemm_dtype is None else expert_gemm_dtype
        rate = eff.dequant_rate_for(kv_dtype) if dequant_kv else None
        block_rate = eff.dequant_block_rate_for(kv_dtype) if dequant_kv else None
        # native-format experts: a grouped GEMM reaches r of the dense rate; T0 x r keeps the
        # small-batch floor f T0 / P (a weight read) where the dense GEMM's is
        r_moe = eff.moe_gemm_relative if expert_weight_only >= 1 else 1.0
        return cls(
            gemm_flops_per_s=gemm_rate(gemm_dtype, weight_only),
            attention_flops_per_s=hw.flops(attention_dtype) * eff.attention_for(kv_dtype),
            vector_flops_per_s=hw.flops(vector_dtype or attention_dtype) * eff.compute_efficiency,
            hbm_bytes_per_s=hw.hbm_bandwidth_bytes_per_s * eff.memory_efficiency,
            ramp_tokens=ramp(gemm_dtype, weight_only),
            kernel_overhead_s=eff.kernel_overhead_s,
            link_bytes_per_s=hw.link_bandwidth_bytes_per_s * eff.link_efficiency,
            link_latency_s=link_latency_s,
            expert_gemm_flops_per_s=gemm_rate(edt, expert_weight_only) * r_moe,
            expert_ramp_tokens=ramp(edt, expert_weight_only) * r_moe,
            sequence_overhead_s=eff.sequence_overhead_s,
            gqa_kv_sharing=eff.gqa_kv_sharing,
            kv_dequant_elements_per_s=rate or 0.0,
            kv_dequant_block_elements_per_s=block_rate or 0.0,
            expert_width_ramp=eff.expert_width_ramp,
        )


@dataclass(frozen=True)
class LinearTerms:
    """A cost model's step time split by the parameter that scales each term (calibration).

    At unit efficiencies, T0 = 1 token, kernel overhead 1 s and link latency 1 s, for step
    features x (n_ops x len(FEATURES) matrices, then vectors over FEATURES):

        time(x) = sum_ops max( (C + T0 R) x / eta_c + A x / eta_att,  M x / eta_m )
                  + k_launch L x + W x / eta_link + l_link N x + step_overhead_s x_one

    Exact: every term of `CostModel` is linear in one parameter or in its inverse.
    """

    compute_s: np.ndarray  # C: GEMM and vector compute at eta_c = 1, T0 = 0
    ramp_s_per_token: np.ndarray  # R: GEMM compute per ramp token T0, at eta_c = 1
    attention_s: np.ndarray  # A: attention compute at eta_att = 1
    memory_s: np.ndarray  # M: HBM time at eta_m = 1
    launches: np.ndarray  # L: kernel launches
    link_s: np.ndarray  # W: link transfer time at eta_link = 1
    latencies: np.ndarray  # N: link latencies paid
    # the parts of M and of the attention compute that the GQA sharing s and a KV conversion
    # rate r scale (both absent from the step time above: s = 1, native KV path):
    #   M_op += (g - 1)(1 - s) K;  compute_op += (1 + (g - 1)(1 - s)) D / r
    kv_read_s: np.ndarray | None = None  # K: the attention ops' KV read at eta_m = 1, s = 1
    kv_elements: np.ndarray | None = None  # D: KV elements those ops read, s = 1
    gqa_group: float = 1.0  # g: query heads per KV head (1 for MLA)
    sequences: np.ndarray | None = None  # the per-sequence overhead's feature (S)
    # compute_op += Db / r_block: the elements one thread block converts along the longest
    # block (feature Rb) when the KV format has no native path and a block rate r_block is given
    kv_block_elements: np.ndarray | None = None


class StepCost(Protocol):
    """What the engine needs from a cost model: the model, the replica's parallelism, step
    times (scalar and vectorised, seconds) and the memory plan. `CostModel` is one;
    `whatif.SpeculativeCostModel` another."""

    model: ModelSpec
    par: Parallelism

    def step_time(self, T: float, S: float, Ad: float = 0.0, Ap: float = 0.0, R: float = 0.0,
                  Aw: float | None = None, Rw: float | None = None, Pc: float = 0.0) -> float: ...

    def step_times(self, T: Any, S: Any, Ad: Any = 0.0, Ap: Any = 0.0, R: Any = 0.0,
                   Aw: Any = None, Rw: Any = None, Pc: Any = 0.0) -> np.ndarray: ...

    def memory(self, gpu_memory_utilization: float = 0.9, max_num_batched_tokens: int = 8192,
               max_num_seqs: int = 256, seq_len: int | None = None) -> MemoryPlan: ...


def _vec(**coeffs: float) -> np.ndarray:
    v = np.zeros(_NF)
    for k, c in coeffs.items():
        v[_I[k]] = c
    return v


def _add_communication(add: Callable[..., None], m: ModelSpec, par: Parallelism, rates: Rates,
                       ba: float, hw: HardwareSpec) -> None:
    """The link ops of a step. Tensor parallel: a ring all-reduce of H b_a bytes per token after
    attention and after the MLP (once with parallel attention), 2 (t-1)/t msg / link + latency
    (`allreduce_time_s`); with ep > 1 the MoE layers' second one is an all-to-all dispatch +
    combine (`parallel.alltoall_time_s`). Data-parallel attention (d groups of ta = tp / d GPUs):
    the attention-side all-reduces run inside a group (ta GPUs) on its 1/d of the tokens; every
    MoE layer moves the step's tokens to the experts and back: an all-to-all over ep = tp
    ranks, else (experts sharded as under TP) an all-gather and a reduce-scatter over the tp
    GPUs (the bytes of one ring all-reduce). Pipeline parallel: pp - 1 sends of H b_a bytes per
    token. Groups and sends that cross nodes run on the scale-out link (`parallel.py`)."""
    H, L, t = m.hidden_size, m.num_layers, par.tp
    # a link's rate keeps the efficiency in `rates` (linear_terms prices at unit efficiency)
    up, out = scaleup_link(hw), scaleout_link(hw)
    link, lat = rates.link_bytes_per_s, rates.link_latency_s
    out_rate = link * out.bandwidth_bytes_per_s / up.bandwidth_bytes_per_s

    def rate_of(group: int) -> tuple[float, float]:
        return (link, lat) if group_link(hw, group).kind == "nvlink" else (out_rate, out.latency_s)

    tp_rate, tp_lat = rate_of(t)
    per_layer = 1 if m.parallel_attention else 2
    if par.dp_attention > 1:
        ta, d = par.attention_tp, par.dp_attention
        if ta > 1:  # attention (and dense MLP) all-reduces inside one group, on its tokens
            g_rate, g_lat = rate_of(ta)
            n_ar = L + (m.num_dense_layers if per_layer == 2 else 0)
            ring = allreduce_time_s(ta, H * ba, g_rate) / d
            add("allreduce", "comm", n_ar, np.zeros(_NF), a=np.zeros(_NF), link=_vec(T=ring),
                latency=_vec(one=g_lat), launches=_vec())
        if m.moe is not None:
            assert m.moe is not None
            if par.ep == t:
                per_tok = alltoall_time_s(1.0, m.moe.experts_per_token, H, ba, t, tp_rate, 0.0, par.expert_imbalance)
            else:
                per_tok = allreduce_time_s(t, H * ba, tp_rate)
            add("moe_alltoall", "comm", m.num_moe_layers, np.zeros(_NF), a=np.zeros(_NF), link=_vec(T=per_tok),
                latency=_vec(one=2.0 * tp_lat), launches=_vec())
    elif t > 1:
        a2a_layers = m.num_moe_layers if (par.ep > 1 and m.moe is not None and per_layer == 2) else 0
        ring = allreduce_time_s(t, H * ba, tp_rate)  # per token; the latency is its own term
        add("allreduce", "comm", L * per_layer - a2a_layers, np.zeros(_NF), a=np.zeros(_NF), link=_vec(T=ring),
            latency=_vec(one=tp_lat), launches=_vec())
        if a2a_layers:
            assert m.moe is not None
            per_tok = alltoall_time_s(1.0, m.moe.experts_per_token, H, ba, par.ep, tp_rate, 0.0, par.expert_imbalance)
            add("moe_alltoall", "comm", a2a_layers, np.zeros(_NF), a=np.zeros(_NF), link=_vec(T=per_tok),
                latency=_vec(one=2.0 * tp_lat), launches=_vec())
    near, far = pp_sends(hw, par)
    if near:
        add("pp_send", "comm", near, np.zeros(_NF), link=_vec(T=H * ba / link),
            latency=_vec(one=lat), launches=_vec())
    if far:
        add("pp_send_scaleout", "comm", far, np.zeros(_NF), link=_vec(T=H * ba / out_rate),
            latency=_vec(one=out.latency_s), launches=_vec())


def _zeros_for_none(*forms: np.ndarray | None) -> list[np.ndarray]:
    """The forms with None replaced by the zero form (an op without that term)."""
    return [np.zeros(_NF) if v is None else v for v in forms]


def _mla_projections(gemm: Callable[..., None], add: Callable[..., None], m: ModelSpec, ta: int,
                     P_gemm: float, side: np.ndarray | None) -> float:
    """MLA's low-rank projections (per GPU of an attention group of ta GPUs); returns the
    o_proj input width per GPU."""
    assert m.mla is not None
    ml, L, H, nh = m.mla, m.num_layers, m.hidden_size, m.num_heads
    qk = ml.qk_nope_head_dim + ml.qk_rope_head_dim
    if ml.q_lora_rank:
        gemm("q_proj", L, H, ml.q_lora_rank + 0.0, scale=side)
        gemm("q_up_proj", L, ml.q_lora_rank, nh * qk / ta, scale=side)
    else:
        gemm("q_proj", L, H, nh * qk / ta, scale=side)
    gemm("kv_down_proj", L, H, ml.kv_lora_rank + ml.qk_rope_head_dim, scale=side)
    gemm("kv_up_proj", L, ml.kv_lora_rank, nh * (ml.qk_nope_head_dim + ml.v_head_dim) / ta, scale=side)
    # prefill chunks on cached context decompress the cached latents to K/V (vLLM's MLA
    # prefill path): a GEMM over the Pc cached tokens; the latents' bytes are already counted
    # as the attention's KV read
    f_ctx = 2.0 * ml.kv_lora_rank * nh * (ml.qk_nope_head_dim + ml.v_head_dim) / ta
    add("kv_up_proj_context", "gemm", L, _vec(Pc=f_ctx), comp=_vec(Pc=f_ctx / P_gemm), launches=_vec(), scale=side)
    return nh * ml.v_head_dim / ta


def _moe_ops(gemm: Callable[..., None], add: Callable[..., None], m: ModelSpec, par: Parallelism, n_mat: int,
             bw_exp: float, ba: float, P_exp: float, T0_exp: float, side: np.ndarray | None,
             width_ramp: float = 0.0) -> None:
    """The MoE layers: router, routed experts (over all tp GPUs), shared experts. `width_ramp`
    (W0): each GPU's slice of an expert is W = I_e ep / tp wide, and its per-row compute runs at
    W / (W + W0) of the rate (`Efficiency.expert_width_ramp`)."""
    assert m.moe is not None
    moe, nl, H, t = m.moe, m.num_moe_layers, m.hidden_size, par.tp
    gemm("moe_router", nl, H, moe.num_experts, scale=side)
    Ie = moe.expert_intermediate_size / t
    f_tok = 2.0 * n_mat * H * Ie * moe.experts_per_token
    # per-expert GEMMs see T k / U rows: time f (T k + T0 U) / (P eta_c)
    f_exp = 2.0 * n_mat * H * Ie
    rho = par.expert_imbalance  # the busiest EP rank's tokens over the mean (parallel.py)
    # the main loop over a W-wide slice of each expert: per-row compute x (1 + W0 / W); the
    # small-batch floor T0 (the weight read) does not move
    phi = 1.0 + width_ramp * t / (moe.expert_intermediate_size * par.ep)
    # compute on Tx, the rows the kernel runs, padding included (Tx = T without padding);
    # the FLOPs stay the useful ones
    add("moe_experts", "gemm", nl, _vec(T=f_tok * rho),
        w=_vec(U=n_mat * H * Ie * bw_exp),
        a=_vec(T=rho * moe.experts_per_token * (2 * H + n_mat * Ie) * ba),
        comp=_vec(Tx=rho * f_tok * phi / P_exp), ramp=_vec(U=f_exp * T0_exp / P_exp),
        launches=_vec(one=1.0))
    if moe.num_shared_experts:
        Is = moe.shared_intermediate / par.attention_tp
        gemm("moe_shared_gate_up", nl, H, (n_mat - 1) * Is, scale=side)
        gemm("moe_shared_down", nl, Is, H, scale=side)


# ---------------------------------------------------------------------- single-op closed forms


def gemm_time_s(T: Any, n_in: Any, n_out: Any, *, peak_flops_per_s: float, hbm_bytes_per_s: float,
                bytes_per_element: float, ramp_tokens: float = 0.0, kernel_overhead_s: float = 0.0) -> Any:
    """One GEMM [T, n_in] x [n_in, n_out] in the roofline model, seconds:

        max( 2 n_in n_out (T + T0) / (P eta_c),  (n_in n_out + T (n_in + n_out)) b / (bw eta_m) ) + k_launch

    `peak_flops_per_s` = P eta_c and `hbm_bytes_per_s` = bw eta_m (efficiencies applied), b the
    bytes per element of weights and activations alike. This is the time of each GEMM op of
    `CostModel` (its linear forms expand the same expression: tests tie the two), and the
    formula `calibrate` fits to measured GEMM times. numpy arrays broadcast.
    """
    f = 2.0 * n_in * n_out
    comp = f * (T + ramp_tokens) / peak_flops_per_s
    mem = (n_in * n_out * bytes_per_element + T * (n_in + n_out) * bytes_per_element) / hbm_bytes_per_s
    return np.maximum(comp, mem) + kernel_overhead_s


def allreduce_time_s(workers: Any, message_bytes: Any, link_bytes_per_s: float,
                     link_latency_s: float = 0.0) -> Any:
    """Ring all-reduce of `message_bytes` over `workers` GPUs, seconds (Patarasuk & Yuan, JPDC 2009;
    NCCL's ring): 2 (t - 1) / t * msg / (link_bw eta_link) + latency, with `link_bytes_per_s` =
    link_bw eta_link. `CostModel` prices each tensor-parallel all-reduce with it (msg = H b_a per
    token) and `calibrate` fits it to measured NCCL times."""
    return 2.0 * (workers - 1) / workers * message_bytes / link_bytes_per_s + link_latency_s


def _efficient_hardware(hw: HardwareSpec, ideal: Any, efficiency: Any) -> HardwareSpec:
    """`hw` with `ideal` applied first (efficiencies 1, overheads 0), then the `efficiency`
    overrides on top: `--ideal --efficiency step_overhead_s=0.002` is the pure roofline plus that
    overhead (predict and simulate alike; before, simulate dropped the overrides silently)."""
    if not isinstance(ideal, (bool, np.bool_)):
        raise SpecError(f"ideal: {ideal!r} must be true or false")
    if efficiency is not None and not isinstance(efficiency, dict):
        raise SpecError(f"efficiency: {type(efficiency).__name__} is not a mapping of efficiency fields")
    if ideal:
        hw = hw.ideal()
    if efficiency:
        allowed = list(SCALAR_EFFICIENCY_FIELDS)
        for key in efficiency:
            if key not in allowed:
                raise SpecError(f"efficiency: unknown field {str(key)[:80]!r}{_did_you_mean(str(key), allowed)}; "
                                f"allowed: {', '.join(allowed)}")
        hw = hw.with_efficiency(**efficiency)
    return hw


@functools.lru_cache(maxsize=1 << 16)
def padded_expert_tokens(n: int, num_experts: int, k: int, tiles: tuple[int, ...], local_experts: int) -> float:
    """E b E[ceil(X / b)] / k for X ~ Binomial(n, k / E) (an expert's rows under uniform top-k
    routing: each token picks a given expert with probability k/E), b the first of `tiles` whose
    mean fill n k / E_local / b is below MARLIN_MOE_FILL (else the largest; vLLM's loop and
    operation order, E_local = the experts on one rank, `local_experts`): the tokens
    a step of n tokens costs a kernel that pads each expert's rows to a multiple of b
    (`CostModel.expert_tokens`). The pmf over mean +- 12 sd by the ratio recurrence
    pmf(x + 1) / pmf(x) = (n - x) p / ((x + 1) q) from one log-gamma start (a few hundred
    terms: ~20 us; shared by every cost model)."""
    E, p = num_experts, k / num_experts
    b = next((t for t in tiles if n * k / local_experts / t < MARLIN_MOE_FILL), tiles[-1])
    if p >= 1.0:
        return E * b * math.ceil(n / b) / k
    mean, q = n * p, 1.0 - p
    sd = math.sqrt(mean * q)
    lo, hi = max(0, int(mean - 12 * sd) - 1), min(n, int(mean + 12 * sd) + b)
    x = np.arange(lo, hi + 1, dtype=float)
    log0 = (math.lgamma(n + 1) - math.lgamma(lo + 1) - math.lgamma(n - lo + 1)
            + lo * math.log(p) + (n - lo) * math.log1p(-p))
    steps = np.log((n - x[:-1]) / (x[:-1] + 1.0)) + math.log(p / q)
    pmf = np.exp(log0 + np.concatenate(([0.0], np.cumsum(steps))))
    return E * b * float(pmf @ np.ceil(x / b)) / k


class CostModel:
    """Step-time model of one replica: model x hardware x parallelism x dtypes x efficiency.

    `step_time(T, S, Ad, Ap, R, Aw, Rw)` is the fast scalar path (seconds);
    `step_times(...)` the same over numpy arrays; `breakdown(batch)` the per-op detail.
    """

    step_time: Callable[..., float]

    def __init__(
        self,
        model: ModelSpec,
        hardware: HardwareSpec,
        parallelism: Parallelism | None = None,
        dtypes: DTypes | None = None,
        *,
        ideal: bool = False,
        efficiency: dict[str, float] | None = None,
        link_dtype: str | None = None,
    ) -> None:
        # specs only: names and files are resolved by `resolve.make_cost_model` / `catalog`
        if not isinstance(model, ModelSpec) or not isinstance(hardware, HardwareSpec):
            raise SpecTypeError("CostModel takes a ModelSpec and a HardwareSpec; resolve names with "
                            "simulator.resolve.make_cost_model or simulator.specs.catalog.load_model/load_hardware")
        self.model = model
        # width of the activations crossing the link (TP all-reduce, PP send); None: the
        # activation dtype. TensorRT-LLM's FP8 recipe keeps the residual stream in 16 bits.
        if link_dtype is not None:
            check_choice("link_dtype", link_dtype, DTYPE_BYTES)
        self.link_dtype = link_dtype
        self.hardware = hw = _efficient_hardware(hardware, ideal, efficiency)
        self.par = parallelism or Parallelism()
        self.dtypes = dtypes or DTypes(*self.model.run_formats())
        if not isinstance(self.par, Parallelism) or not isinstance(self.dtypes, DTypes):
            raise SpecTypeError("CostModel: parallelism must be a Parallelism and dtypes a DTypes (or None)")
        m, par = self.model, self.par
        if m.num_layers % par.pp:
            raise SpecError(f"pp: {par.pp} does not divide num_layers ({m.num_layers})")
        if m.num_heads % par.tp:
            raise SpecError(f"tp: {par.tp} does not divide num_heads ({m.num_heads}) of {m.id}")
        # the routed experts' GEMMs run at the run's GEMM format; a model that quantises its
        # experts only keeps every other GEMM at its unquantised weights (gpt-oss: MXFP4 experts)
        dense = DTypes(m.unquantized_dtype(self.dtypes.weight), self.dtypes.activation, self.dtypes.kv)
        # the formats the GEMMs compute in, before the chip's fallback (a kernel may run
        # weight-only integer GEMMs at the int8 rate: Efficiency.dequant_int8_compute)
        int8_compute = bool(hw.efficiency.dequant_int8_compute)
        self.gemm_formats = (dense.gemm_at(int8_compute), self.dtypes.gemm_at(int8_compute))
        self.gemm_dtype, self.expert_gemm_dtype = (hw.gemm_dtype(f) for f in self.gemm_formats)
        attn = attention_format(self.dtypes.activation, self.dtypes.kv)
        self.attention_dtype = hw.gemm_dtype(attn)
        self.notes = self._provenance_notes(hardware, attn)
        # weight-only experts through a kernel that pads each expert's rows to a tile (Tx)
        cap = hw.efficiency.expert_tile_rows
        self._tiles = tuple(b for b in MARLIN_MOE_TILES if b <= cap) \
            if m.moe is not None and cap > 0 and self._weight_only() else None  # cap >= 8: non-empty
        self._tiled: dict[float, float] = {}
        self.ops = self._build_ops(self._rates(hw.efficiency, hw.link_latency_s))
        self._C = np.array([op.compute_s for op in self.ops])
        self._prices_blocks = bool(np.any(self._C[:, _I["Rb"]]))  # the paged kernel's floor (Rb)
        self._M = np.array([op.memory_s for op in self.ops])
        self._P = np.sum([op.extra_s for op in self.ops], axis=0)
        # the attention-DP step cost: c a step, or min(c, k S) where it scales below a full batch
        c_dp = self._dp_step_overhead_s()
        full = hw.efficiency.dp_attention_full_seqs
        self._dp_c = c_dp
        self._dp_k = c_dp / (full * self.par.dp_attention) if full > 0 else 0.0  # 0: the constant c
        self._P[_I["one"]] += hw.efficiency.step_overhead_s + (0.0 if self._dp_k else c_dp)
        self._P[_I["S"]] += hw.efficiency.sequence_overhead_s
        self._P[_I["one"]] += self._moe_layers_dequant() * hw.efficiency.moe_layer_overhead_s
        if not (np.isfinite(self._C).all() and np.isfinite(self._M).all() and np.isfinite(self._P).all()):
            # spec ranges keep every coefficient finite; a guard, so no inf reaches the compiled code
            raise SpecError(f"{m.id} on {hw.id}: step-time coefficients overflow float range; "
                            "check the hardware rates and efficiencies")
        self.step_time = self._compile_scalar()
        if par.ep > 1 and m.moe is None:
            raise SpecError(f"ep: {par.ep} applies to MoE models only; {m.id} is dense")
        if par.pp > 1 and par.pp_interleaved:
            # micro-batches in flight from step to step: M = pp, no fill or drain
            self.step_time, self.step_times = pipelined(  # type: ignore[method-assign]
                self.step_time, self.step_times, par.pp, max(par.pp_microbatches, par.pp), drain=False)
        elif par.pp_microbatches > 1:
            # the pipelined forms replace both paths (the engine calls either)
            self.step_time, self.step_times = pipelined(  # type: ignore[method-assign]
                self.step_time, self.step_times, par.pp, par.pp_microbatches)

    # ------------------------------------------------------------------ building the ops
    def _provenance_notes(self, hardware: HardwareSpec, attn: str) -> list[str]:
        """What a report must say about where this model's rates come from: a format the chip
        has no rate for, efficiencies copied from another chip (`hardware`: the catalog entry,
        before --ideal/--efficiency), an engine's weight-only numbers copied from another family."""
        hw = self.hardware
        notes: list[str] = []
        if self.gemm_formats[1] != self.dtypes.gemm:
            notes.append(f"weight-only {self.dtypes.weight} GEMMs run at the {self.gemm_formats[1]} rate: "
                         f"{self.dtypes.activation} activations quantised per token (the engine's kernel on {hw.id})")
        for want, got in zip(self.gemm_formats, (self.gemm_dtype, self.expert_gemm_dtype), strict=True):
            note = f"{hw.id} has no {want} tensor rate: GEMMs priced at its {got} rate"
            if got != want and note not in notes:
                notes.append(note)
        if self.attention_dtype != attn:
            notes.append(f"{hw.id} has no {attn} rate: attention priced at {self.attention_dtype}")
        notice = hardware.efficiency_notice()
        if notice:
            notes.append(notice)
        if self._dp_step_overhead_s() > 0:
            # fitted at 512-1280 sequences a rank (DeepSeek-R1 MLPerf rows): a report at small
            # batches must say that it carries a number measured far from it
            full = self.hardware.efficiency.dp_attention_full_seqs
            scaled = f", in proportion below {full:g} sequences a rank (ASSUMED)" if full > 0 else ""
            notes.append(f"attention-DP steps carry {self._dp_step_overhead_s() * 1e3:g} ms each beyond their kernels"
                         f"{scaled} (dp_attention_step_overhead_s; fitted at 512-1280 sequences a rank, unmeasured below)")
        # an engine's kernel numbers copied from another chip family: the weight-only kernels'
        # numbers, or the grouped-GEMM factor of native-format experts
        fields, what = ((_DEQUANT_FIELDS, "weight-only GEMM numbers") if self._weight_only() else
                        (("moe_gemm_relative",), "MoE grouped-GEMM factor") if self.model.moe is not None else ((), ""))
        for who, src in dict.fromkeys(c for f in fields if (c := self._copied(hardware, f))):
            notes.append(f"{hw.id}: {who} {what} copied from {src}, unvalidated")
        return notes

    def _copied(self, hardware: HardwareSpec, name: str) -> tuple[str, str] | None:
        """(profile/family, source family) when efficiency field `name` is an engine number
        copied from another family (`profiles.apply_profile` writes its provenance into the
        sources) and is the number priced: --efficiency or --ideal replacing it ends the copy."""
        who, _, status = str(hardware.efficiency.sources.get(name, "")).partition(": assumed (copied from ")
        if not status or getattr(self.hardware.efficiency, name) != getattr(hardware.efficiency, name):
            return None
        return who, status.split(",", 1)[0]

    def _dp_step_overhead_s(self) -> float:
        """The data-parallel-attention step cost (Efficiency.dp_attention_step_overhead_s), paid
        once per step by a replica whose attention runs on dp_attention > 1 ranks in lockstep."""
        return self.hardware.efficiency.dp_attention_step_overhead_s if self.par.dp_attention > 1 else 0.0

    def _weight_only(self) -> bool:
        """Whether any GEMM dequantises its weights (weights narrower than the activations)."""
        return DTYPE_BYTES[self.dtypes.weight] < DTYPE_BYTES[self.dtypes.activation]

    def _moe_layers_dequant(self) -> int:
        """MoE layers whose experts run a dequantising (weight-only) kernel: they pay
        `moe_layer_overhead_s` each step (0 for unquantised or W8A8/W4A4 experts)."""
        return self.model.num_moe_layers if self._weight_only() else 0

    def _rates(self, eff: Efficiency, link_latency_s: float) -> Rates:
        """This model's rates at efficiencies `eff`: weight-only GEMMs (weights narrower than
        activations) at the dequantising efficiency, attention at `dtypes.attention_format` (the
        wider of activations and KV cache, at least 8 bits), a KV cache narrower than that
        converted at eff's rate where the kernel has no native path for it."""
        m, dt = self.model, self.dtypes
        w_dense = DTYPE_BYTES[m.unquantized_dtype(dt.weight)]
        # weights narrower than the format the GEMM computes in are dequantised in its main loop
        b_dense, b_exp = (DTYPE_BYTES[f] for f in self.gemm_formats)
        return Rates.of(self.hardware, self.gemm_dtype, self.attention_dtype, dt.kv, eff, link_latency_s,
                        weight_only=min(w_dense / b_dense, 1.0),
                        expert_gemm_dtype=self.expert_gemm_dtype,
                        expert_weight_only=min(DTYPE_BYTES[dt.weight] / b_exp, 1.0),
                        dequant_kv=DTYPE_BYTES[dt.kv] < DTYPE_BYTES[self.attention_dtype],
                        vector_dtype=self.hardware.gemm_dtype(dt.activation))

    def _build_ops(self, rates: Rates) -> list[Op]:
        m, par, dt = self.model, self.par, self.dtypes
        # data-parallel attention: d groups of ta GPUs, each on 1/d of the step's sequences
        d, ta = par.dp_attention, par.attention_tp
        bw_exp, ba, bkv = DTYPE_BYTES[dt.weight], DTYPE_BYTES[dt.activation], DTYPE_BYTES[dt.kv]
        bw = DTYPE_BYTES[m.unquantized_dtype(dt.weight)]  # weights outside the routed experts
        P_gemm, P_attn, P_vec = rates.gemm_flops_per_s, rates.attention_flops_per_s, rates.vector_flops_per_s
        P_exp = rates.expert_gemm_flops_per_s or P_gemm
        mem = rates.hbm_bytes_per_s
        T0 = rates.ramp_tokens
        T0_exp = T0 if rates.expert_ramp_tokens < 0 else rates.expert_ramp_tokens
        H, nh, nkv, dh = m.hidden_size, m.num_heads, m.num_kv_heads, m.d_head
        t_kv = m.kv_shards(ta)
        kv_elem = m.kv_elements_per_token_per_layer
        n_full = m.num_layers - m.num_sliding_layers
        n_slide = m.num_sliding_layers
        ops: list[Op] = []
        # attention-side forms see one group's share of every per-token statistic
        # (Rb, one thread block's context, is a length, not a count: a group's is the same)
        per_group = (_vec(one=1.0) + (1.0 / d) * (np.ones(_NF) - _vec(one=1.0) - _vec(emit=1.0) - _vec(Rb=1.0))
                     + _vec(emit=1.0) + _vec(Rb=1.0))

        def add(name: str, kind: str, count: float, flops: np.ndarray, *, w: np.ndarray | None = None,
                a: np.ndarray | None = None, kr: np.ndarray | None = None, kw: np.ndarray | None = None,
                comp: np.ndarray | None = None, ramp: np.ndarray | None = None, link: np.ndarray | None = None,
                latency: np.ndarray | None = None, launches: np.ndarray | None = None,
                scale: np.ndarray | None = None) -> None:
            if count <= 0:
                return
            w, a, kr, kw, ramp, link, latency = _zeros_for_none(w, a, kr, kw, ramp, link, latency)
            if comp is None:
                rate = {"gemm": P_gemm, "attention": P_attn, "vector": P_vec}.get(kind)
                comp = flops / rate if rate else np.zeros(_NF)
            if scale is not None:  # a dp-attention group's share of the step
                flops, w, a, kr, kw, comp, ramp = (v * scale for v in (flops, w, a, kr, kw, comp, ramp))
            memory = (w + a + kr + kw) / mem
            launch = (_vec(one=1.0) if launches is None else launches) * rates.kernel_overhead_s
            # comp and ramp, link and latency have disjoint features: their sums are exact
            ops.append(Op(name, kind, count * flops, count * w, count * a, count * kr, count * kw,
                          count * (comp + ramp), count * memory, count * (link + latency + launch),
                          count * ramp, count * launch, count * link, count * latency))

        def gemm(name: str, count: float, n_in: float, n_out: float, tokens: str = "T",
                 scale: np.ndarray | None = None) -> None:
            """A GEMM over `tokens` rows: [rows, n_in] x [n_in, n_out] (per-GPU dims)."""
            f = 2.0 * n_in * n_out
            flops = _vec(**{tokens: f})
            # eta_c(T) = eta_c T/(T+T0): compute time f (T + T0) / (P eta_c)
            if tokens == "S":  # LM head: rows = S; it only runs when some sequence emits
                comp, ramp = _vec(S=f / P_gemm), _vec(emit=f * T0 / P_gemm)
                w = _vec(emit=n_in * n_out * bw)
                launches = _vec(emit=1.0)
            else:
                comp, ramp = _vec(T=f / P_gemm), _vec(one=f * T0 / P_gemm)
                w = _vec(one=n_in * n_out * bw)
                launches = None
            add(name, "gemm", count, flops, w=w, a=_vec(**{tokens: (n_in + n_out) * ba}), comp=comp,
                ramp=ramp, launches=launches, scale=scale)

        side = per_group if d > 1 else None
        # --- attention projections
        L = m.num_layers

        if m.mla is not None:
            o_in = _mla_projections(gemm, add, m, ta, P_gemm, side)
            group = 1.0  # one latent serves every head (FlashMLA-style kernels read it once)
        else:
            gemm("qkv_proj", L, H, (nh / ta + 2 * nkv / t_kv) * dh, scale=side)
            o_in = nh * dh / ta
            group = nh / nkv
        # a kernel that reads the KV once per query head reads 1 + (g - 1)(1 - s) times the cache
        reread = 1.0 + (group - 1.0) * (1.0 - rates.gqa_kv_sharing)
        dq = rates.kv_dequant_elements_per_s
        dq_block = rates.kv_dequant_block_elements_per_s

        # --- attention (flash: scores stay on chip; bytes are the KV cache)
        def attention(name: str, count: int, A_d: str, A_p: str, Rk: str) -> None:
            if m.mla is not None:
                ml = m.mla
                # decode: absorbed up-projections, per pair per head 2(r+rope) + 2r FLOPs;
                # prefill: materialised K/V, per pair per head 2(nope+rope) + 2 v_head FLOPs
                fd = nh / ta * (4 * ml.kv_lora_rank + 2 * ml.qk_rope_head_dim)
                fp = nh / ta * 2 * (ml.qk_nope_head_dim + ml.qk_rope_head_dim + ml.v_head_dim)
                flops = _vec(**{A_d: fd}) + _vec(**{A_p: fp})
            else:
                f = 4.0 * nh * dh / ta  # per query-key pair, QK^T and PV
                # sliding layers carry decode and prefill pairs in one feature (Aw): count it once
                flops = _vec(**{A_d: f}) if A_d == A_p else _vec(**{A_d: f}) + _vec(**{A_p: f})
            kv_tok = kv_elem * bkv / t_kv
            comp = flops / P_attn
            if dq > 0:  # no native path: every KV element read is converted to 16 bits first
                comp = comp + _vec(**{Rk: kv_elem / t_kv * reread / dq})
            if dq_block > 0 and m.mla is None:
                # ... and one thread block converts its KV head's elements serially: a batch too
                # small to fill the chip waits for its longest block (Rb tokens, `block_tokens`)
                comp = comp + _vec(Rb=kv_elem / nkv / dq_block)
            add(name, "attention", count, flops, kr=_vec(**{Rk: kv_tok * reread}), kw=_vec(T=kv_tok),
                a=_vec(T=2 * nh * dh / ta * ba), comp=comp, scale=side)

        if m.sliding_window is not None and n_slide:
            attention("attention", n_full, "Ad", "Ap", "R")
            attention("attention_sliding", n_slide, "Aw", "Aw", "Rw")
        else:
            attention("attention", L, "Ad", "Ap", "R")
        gemm("o_proj", L, o_in, H, scale=side)

        # --- MLP / MoE
        n_mat = 3 if m.mlp == "gated" else 2
        if m.num_dense_layers:
            I_ = m.intermediate_size / ta
            gemm("mlp_gate_up", m.num_dense_layers, H, (n_mat - 1) * I_, scale=side)
            gemm("mlp_down", m.num_dense_layers, I_, H, scale=side)
        if m.moe is not None:
            _moe_ops(gemm, add, m, par, n_mat, bw_exp, ba, P_exp, T0_exp, side, rates.expert_width_ramp)

        # --- norms, residuals, activation function: memory-bound element-wise work
        add("norm_act", "vector", L, _vec(T=10.0 * H), a=_vec(T=4.0 * H * ba), scale=side)

        _add_communication(add, m, par, rates, ba if self.link_dtype is None else DTYPE_BYTES[self.link_dtype],
                           self.hardware)

        # --- once per step: embedding gather and LM head (only for emitting sequences)
        add("embedding", "gather", 1, np.zeros(_NF), w=_vec(T=H * bw), a=_vec(T=H * ba), scale=side)
        gemm("lm_head", 1, H, m.vocab_size / ta, tokens="S", scale=side)
        return ops

    # ------------------------------------------------------------------ evaluation
    def features(self, T: Any, S: Any, Ad: Any, Ap: Any, R: Any, Aw: Any, Rw: Any, Pc: Any = 0.0,
                 padded: bool = True, blocks: bool = True) -> np.ndarray:
        """The feature matrix x (len(FEATURES) x broadcast shape) of batch statistics;
        `padded` False: Tx = T (the FLOP and byte forms never read Tx); `blocks` False: Rb = 0
        (for forms that never read it: `step_times` of a model that does not price it)."""
        T = np.asarray(T, dtype=float)
        S = np.asarray(S, dtype=float)
        shape = np.broadcast(T, S, Ad, Ap, R, Aw, Rw, Pc).shape
        X = np.empty((_NF, *shape))
        X[0] = 1.0
        X[1] = T
        X[2] = S
        X[3] = S > 0
        X[4] = Ad
        X[5] = Ap
        X[6] = R
        X[7] = Aw
        X[8] = Rw
        X[9] = self._touched(T)
        X[10] = Pc
        if self._tiles is None or not padded:
            X[11] = T
        elif T.ndim == 0:  # a decode segment prices one batch size: no per-element machinery
            X[11] = self.expert_tokens(float(T))
        else:
            X[11] = np.array([self.expert_tokens(t) for t in T.ravel().tolist()]).reshape(T.shape)
        X[12] = self.block_tokens(S, Ad) if blocks else 0.0
        return X

    def block_tokens(self, S: Any, Ad: Any) -> Any:
        """Rb of `paged_block_tokens` at this model's query heads per GPU, over arrays too. Only
        a KV format without a native kernel prices it (`Efficiency.kv_dequant_block_rate_by_kv_dtype`)."""
        nq = self.model.num_heads / self.par.attention_tp
        S, Ad = np.broadcast_arrays(np.asarray(S, dtype=float), np.asarray(Ad, dtype=float))
        if S.ndim == 0:
            return paged_block_tokens(float(S), float(Ad), nq)
        # calibration's decode nodes (tens a setting): the scalar rule per element
        return np.array([paged_block_tokens(s, a, nq) for s, a in zip(S.ravel().tolist(), Ad.ravel().tolist(),
                                                                        strict=True)]).reshape(S.shape)

    def expert_tokens(self, T: float) -> float:
        """Tx: the tokens the routed experts' GEMMs compute in a step of T tokens, padding
        included (T when the kernel does not pad). Each of E experts gets X ~ Binomial(T, k/E)
        rows (uniform routing); the kernel takes the first tile b of its ladder whose mean fill
        T k / (E_local b) is below 0.9 (else the largest; E_local = E / ep, the experts of one
        rank) and computes b ceil(X / b) rows, so Tx = E b E[ceil(X / b)] / k (in tokens: k rows
        a token). Exact over X's support (+-12 sd, `padded_expert_tokens`) at integer T, linear
        between the neighbouring integers at a fractional T (a pipelined micro-batch's T / M),
        Tx(0) = 0; cached per batch size, so a run computes each T once."""
        T = float(T)
        got = self._tiled.get(T)
        if got is not None:
            return got
        moe, tiles = self.model.moe, self._tiles
        if moe is None or tiles is None or T <= 0.0:
            return T
        E, k, e_loc = moe.num_experts, moe.experts_per_token, max(1, moe.num_experts // self.par.ep)

        def at(n: int) -> float:
            return padded_expert_tokens(n, E, k, tiles, e_loc) if n > 0 else 0.0

        lo = math.floor(T)
        tx = at(lo) if T == lo else at(lo) + (T - lo) * (at(lo + 1) - at(lo))
        self._tiled[T] = tx
        return tx

    def _touched(self, T: Any) -> Any:
        moe = self.model.moe
        if moe is None:
            return np.zeros_like(np.asarray(T, dtype=float))
        E, k = moe.num_experts, moe.experts_per_token
        return E * (1.0 - (1.0 - k / E) ** np.asarray(T, dtype=float))

    def step_times(self, T: Any, S: Any, Ad: Any = 0.0, Ap: Any = 0.0, R: Any = 0.0,
                   Aw: Any = None, Rw: Any = None, Pc: Any = 0.0) -> np.ndarray:
        """Vectorised step time (s) over arrays of batch statistics."""
        if Aw is None:
            Aw = np.asarray(Ad) + np.asarray(Ap)
        if Rw is None:
            Rw = R
        # a decode segment's steps at once: Rb only where a term reads it (the engine's hot path)
        X = self.features(T, S, Ad, Ap, R, Aw, Rw, Pc, blocks=self._prices_blocks)
        flat = X.reshape(_NF, -1)
        t = np.maximum(self._C @ flat, self._M @ flat).sum(axis=0) + self._P @ flat
        if self._dp_k:
            t += np.minimum(self._dp_c, self._dp_k * flat[_I["S"]])
        return t.reshape(X.shape[1:])

    def time_of(self, x: np.ndarray) -> float:
        """The step-time formula at one feature vector `x` (FEATURES): sum over ops of
        max(compute, memory) plus the extras. At the sum of several steps' features it is at
        most their total time (a max of sums never exceeds the sum of maxes), which
        `analysis.capacity.analytic_bound` uses for a throughput bound. An attention-DP cost that
        scales with the batch (`dp_attention_full_seqs`) is left out here: a min of sums is not
        at most the sum of the steps' mins, and leaving it out keeps the bound a bound."""
        x = np.asarray(x, dtype=float)
        return float(np.maximum(self._C @ x, self._M @ x).sum() + self._P @ x)

    def work_forms(self) -> tuple[np.ndarray, np.ndarray]:
        """(FLOPs, HBM bytes) of a step per GPU as linear forms over FEATURES: the same op
        forms the step time is built from, summed (bytes: weights + activations + KV read and
        written). MFU = F.x / (time peak), MBU = B.x / (time hbm_bw) (`utilization`)."""
        flops = np.sum([op.flops for op in self.ops], axis=0)
        nbytes = np.sum([op.weight_bytes + op.act_bytes + op.kv_read_bytes + op.kv_write_bytes
                         for op in self.ops], axis=0)
        return flops, nbytes

    def linear_terms(self) -> LinearTerms:
        """This model's step time split by the parameter that scales each term (see
        `LinearTerms`): the ops priced once at unit efficiencies, T0 = 1, k_launch = 1 s,
        link latency 1 s, and their parts read off. Calibration re-prices with these."""
        # the experts' width ramp and grouped-GEMM factor are shape factors of this model on this
        # chip (like gqa_group), not parameters calibration scales: the terms keep them, exact
        # a thread block's KV conversion at 1e6 elements/s (its range's floor), scaled back: the
        # Rb column is that term's alone (Db)
        unit_block = 1e6
        unit = Efficiency(gemm_ramp_tokens=1.0, kernel_overhead_s=1.0,
                          expert_width_ramp=self.hardware.efficiency.expert_width_ramp,
                          moe_gemm_relative=self.hardware.efficiency.moe_gemm_relative,
                          expert_tile_rows=self.hardware.efficiency.expert_tile_rows,
                          kv_dequant_block_rate_by_kv_dtype={self.dtypes.kv: unit_block})
        ops = self._build_ops(self._rates(unit, 1.0))
        n = len(ops)
        C, R, A, M, K, D, Db = (np.zeros((n, _NF)) for _ in range(7))
        launches, link, lat = np.zeros(_NF), np.zeros(_NF), np.zeros(_NF)
        m = self.model
        kv_elem = m.kv_elements_per_token_per_layer / m.kv_shards(self.par.attention_tp)
        bkv = DTYPE_BYTES[self.dtypes.kv]
        for j, op in enumerate(ops):
            M[j] = op.memory_s
            if op.kind == "attention":
                A[j] = op.compute_s
                Db[j, _I["Rb"]] = A[j, _I["Rb"]] * unit_block
                A[j, _I["Rb"]] = 0.0
                K[j] = op.kv_read_bytes / self.hardware.hbm_bandwidth_bytes_per_s  # at eta_m = 1
                D[j] = op.kv_read_bytes / bkv if kv_elem else 0.0
            else:
                C[j] = op.compute_s - op.ramp_s  # disjoint features: exact
                R[j] = op.ramp_s
            launches += op.launch_s
            link += op.link_s
            lat += op.latency_s
        group = 1.0 if m.mla is not None else m.num_heads / m.num_kv_heads
        return LinearTerms(C, R, A, M, launches, link, lat, K, D, group, _vec(S=1.0), Db)

    def _compile_scalar(self) -> Any:
        """Generate an unrolled pure-Python step_time: constants inlined, one max per op.

        Why: the engine prices every step one call at a time (the discrete-event loop cannot
        batch them), so this call is the simulator's inner loop. On one core,
        `python benchmarks/bench_step_cost.py --compare` (mixed decode/prefill batches, best of 3;
        measured 2026-12-01 on a shared 2-core host, load ~4, so absolute rates are conservative):

            llama-3.1-8b / a100 (8 ops):   compiled 1.78-1.88 M steps/s (~0.55 us a call);
                                           plain Python loops over the same forms 45-52 k/s
                                           (34-41x slower); numpy, one feature vector and
                                           two mat-vecs a step, 189-192 k/s (9.4-9.8x slower)
            deepseek-v3 / h200 tp=8 (17):  compiled 1.01 M/s; plain Python 26 k/s (39x);
                                           numpy 189 k/s (5.3x)

        numpy loses at this size because a call's fixed overhead (array creation, dispatch)
        exceeds the 2 x 12 x n_ops multiply-adds; for many steps at once use `step_times`.
        The three paths agree (the benchmark checks it; tests compare scalar and vectorised).
        """
        names = ["1.0", "T", "S", "h", "Ad", "Ap", "R", "Aw", "Rw", "U", "Pc", "Tx", "Rb"]

        def form(vec: np.ndarray) -> str:
            terms = []
            for i, c in enumerate(vec):
                if c == 0.0:
                    continue
                terms.append(repr(float(c)) if i == 0 else f"{float(c)!r}*{names[i]}")
            return " + ".join(terms) if terms else "0.0"

        lines = ["def step_time(T, S, Ad=0.0, Ap=0.0, R=0.0, Aw=None, Rw=None, Pc=0.0):"]
        lines.append("    if Aw is None: Aw = Ad + Ap")
        lines.append("    if Rw is None: Rw = R")
        lines.append("    h = 1.0 if S > 0 else 0.0")
        if self.model.moe is not None:
            E, k = self.model.moe.num_experts, self.model.moe.experts_per_token
            lines.append(f"    U = {float(E)!r} * (1.0 - {1.0 - k / E!r} ** T)")
        else:
            lines.append("    U = 0.0")
        if self._tiles is None:
            lines.append("    Tx = T")
        else:  # one dict lookup a step: the padded expert rows of each batch size, computed once
            lines.append("    Tx = _tiled_get(float(T))")
            lines.append("    if Tx is None: Tx = _expert_tokens(T)")
        if self._prices_blocks:  # the paged kernel's longest block
            lines.append(f"    Rb = _block_tokens(S, Ad, {self.model.num_heads / self.par.attention_tp!r})")
        lines.append(f"    t = {form(self._P)}")
        if self._dp_k:
            lines.append(f"    t += min({self._dp_c!r}, {self._dp_k!r} * S)")
        for c, mvec in zip(self._C, self._M, strict=True):
            lines.append(f"    a = {form(c)}")
            lines.append(f"    b = {form(mvec)}")
            lines.append("    t += a if a > b else b")
        lines.append("    return t")
        ns: dict[str, Any] = {"_tiled_get": self._tiled.get, "_expert_tokens": self.expert_tokens,
                              "_block_tokens": paged_block_tokens}
        exec(compile("\n".join(lines), f"<step_time {self.model.id}>", "exec"), ns)  # noqa: S102
        fn = ns["step_time"]
        fn.__doc__ = "Step time in seconds for batch statistics (T, S, Ad, Ap, R, Aw, Rw, Pc)."
        return fn

    def time(self, batch: StepBatch) -> float:
        """Step time (s) of a StepBatch."""
        return self.step_time(batch.T, batch.S, batch.Ad, batch.Ap, batch.R, batch.Aw, batch.Rw, batch.Pc)

    def breakdown(self, batch: StepBatch) -> dict[str, Any]:
        """Per-op FLOPs, bytes by kind, time and bound for one step (the slow, explanatory path)."""
        Aw = batch.Ad + batch.Ap if batch.Aw is None else batch.Aw
        Rw = batch.R if batch.Rw is None else batch.Rw
        x = self.features(batch.T, batch.S, batch.Ad, batch.Ap, batch.R, Aw, Rw, batch.Pc)
        ops = []
        tot = {"compute": 0.0, "memory": 0.0, "communication": 0.0, "overhead": 0.0}
        for op in self.ops:
            c, mm, ex = float(op.compute_s @ x), float(op.memory_s @ x), float(op.extra_s @ x)
            if op.kind == "comm":
                bound = "communication"
                tot["communication"] += ex
            else:
                bound = "compute" if c >= mm and c > 0 else "memory"
                tot[bound] += max(c, mm)
                tot["overhead"] += ex
            ops.append({
                "name": op.name,
                "flops": float(op.flops @ x),
                "bytes": float((op.weight_bytes + op.act_bytes + op.kv_read_bytes + op.kv_write_bytes) @ x),
                "weight_bytes": float(op.weight_bytes @ x),
                "activation_bytes": float(op.act_bytes @ x),
                "kv_read_bytes": float(op.kv_read_bytes @ x),
                "kv_write_bytes": float(op.kv_write_bytes @ x),
                "time_ms": (max(c, mm) + ex) * 1e3,
                "bound": bound,
            })
        eff = self.hardware.efficiency
        dp = min(self._dp_c, self._dp_k * float(batch.S)) if self._dp_k else self._dp_c
        tot["overhead"] += (eff.step_overhead_s + dp + eff.sequence_overhead_s * float(batch.S)
                            + self._moe_layers_dequant() * eff.moe_layer_overhead_s)
        total = sum(tot.values())
        bound = max(("compute", "memory", "communication"), key=lambda k: tot[k])
        return {
            "time_ms": total * 1e3,
            "bound": bound,
            "flops": sum(o["flops"] for o in ops),
            "bytes": sum(o["bytes"] for o in ops),
            "time_by_bound_ms": {k: v * 1e3 for k, v in tot.items()},
            "ops": ops,
        }

    # ------------------------------------------------------------------ memory
    def memory(self, gpu_memory_utilization: float = 0.9, max_num_batched_tokens: int = 8192,
               max_num_seqs: int = 256, seq_len: int | None = None) -> MemoryPlan:
        return memory_plan(self.model, self.hardware, self.par, self.dtypes,
                           gpu_memory_utilization, max_num_batched_tokens, max_num_seqs, seq_len)


__all__ = [
    "CostModel",
    "FEATURES",
    "LinearTerms",
    "Op",
    "Rates",
    "StepCost",
    "allreduce_time_s",
    "gemm_time_s",
    "paged_block_tokens",
]
