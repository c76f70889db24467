"""What fits on one GPU of a replica: weights, the activation reserve and the KV budget.

Per GPU of a replica with tensor-parallel degree t and pipeline degree pp (vLLM's memory
profiling, `docs/performance_model.md` "Memory"):

    weights/GPU  = (N_params / t + replicated K/V projections) * b_w / pp
    reserve      = T_max (4 H + 2 I / t) b_a + min(S_max, T_max) V / t * 4 + 0.5 GB
    KV budget    = C_hbm * u - weights/GPU - reserve
    KV tokens    = KV budget / (KV bytes per token / (t' * d * pp)),   t' = min(t / d, n_kv) (1 for MLA)

with d the data-parallel attention groups (`Parallelism.dp_attention`, 1 without); a
sliding-window layer's share of the KV bytes per token scaled by min(1, window / seq_len)
(`kv_bytes_per_gpu_token`); routed experts in the run's weight dtype, other weights in the
model's unquantised dtype when it quantises experts only (`weights_bytes_per_gpu`)

with b_w, b_a the weight and activation bytes per element, T_max the step token budget
(max_num_batched_tokens), S_max the sequence cap (max_num_seqs), V the vocabulary, C_hbm the HBM
capacity and u the gpu_memory_utilization. All sizes in bytes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from simulator.specs.checks import SpecError, check_instance, check_int, is_number, show
from simulator.specs.dtypes import DTYPE_BYTES, DTypes
from simulator.specs.hardware import HardwareSpec
from simulator.specs.model import ModelSpec
from simulator.specs.parallelism import Parallelism


@dataclass(frozen=True)
class MemoryPlan:
    """What fits on one GPU of a replica (bytes) and the KV capacity that leaves."""

    weights_bytes_per_gpu: float
    activation_reserve_bytes: float
    usable_bytes_per_gpu: float
    kv_budget_bytes_per_gpu: float
    kv_bytes_per_token: float  # whole model, before sharding
    kv_bytes_per_token_per_gpu: float
    kv_capacity_tokens: int
    seq_len: int
    max_concurrent_sequences: int
    fits: bool
    smallest_tp_that_fits: int | None
    message: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def kv_bytes_per_gpu_token(model: ModelSpec, par: Parallelism, kv_dtype: str, seq_len: int | None = None) -> float:
    """KV-cache bytes one token leaves on one GPU: the model's KV bytes per token over the
    GPUs its KV is sharded on (KV heads over the attention group's tp / dp_attention GPUs,
    `ModelSpec.kv_shards`; the dp_attention groups each keep their own sequences) and the
    pipeline stages that split its layers (pp). The one formula every KV budget and transfer uses.

    With `seq_len` and sliding-window layers, those layers keep only the last `window` tokens
    of a sequence (vLLM's hybrid KV-cache manager frees the blocks that slide out; engines that
    attend over the whole context drop the window from the model first, `profile_model`): their
    share of a token's bytes is scaled by min(1, window / seq_len), the average over a sequence
    of seq_len tokens."""
    per_token = model.kv_bytes_per_token(kv_dtype)
    sw = model.sliding_window
    if seq_len and sw is not None and sw.window < seq_len:
        sliding = per_token * sw.num_layers / model.num_layers
        per_token -= sliding * (1.0 - sw.window / seq_len)
    return per_token / (model.kv_shards(par.attention_tp) * par.dp_attention * par.pp)


def weights_bytes_per_gpu(model: ModelSpec, par: Parallelism, dtypes: DTypes) -> float:
    """Weight bytes one GPU holds. Routed experts: all of them over the tp GPUs (whole experts
    under expert parallelism, slices under TP: the same bytes). Everything else over the
    attention group's tp / dp_attention GPUs (= tp without data-parallel attention), with
    K/V projections replicated when that exceeds the KV heads. Routed experts take the run's
    weight dtype; the rest its unquantised dtype (`ModelSpec.unquantized_dtype`). All / pp."""
    bw = DTYPE_BYTES[dtypes.weight]
    bu = DTYPE_BYTES[model.unquantized_dtype(dtypes.weight)]
    t, ta = par.tp, par.attention_tp
    experts = model.routed_expert_param_count
    rest = model.param_count - experts
    replicated = 0.0
    if model.mla is None and ta > model.num_kv_heads:
        kv_proj = 2 * model.hidden_size * model.num_kv_heads * model.d_head * model.num_layers
        # each GPU holds one full KV head's projection instead of n_kv/t of them
        replicated = kv_proj * (1.0 / model.kv_shards(ta) - 1.0 / ta)
    return (experts / t * bw + (rest / ta + replicated) * bu) / par.pp


def activation_reserve_bytes(model: ModelSpec, par: Parallelism, dtypes: DTypes,
                             max_num_batched_tokens: int, max_num_seqs: int) -> float:
    """Peak activation memory of one step at the token budget, plus logits and a fixed
    workspace (CUDA graphs, NCCL buffers) of 0.5 GB: an estimate of what vLLM's profiling run reserves."""
    ba = DTYPE_BYTES[dtypes.activation]
    t = par.tp
    inter = model.intermediate_size if model.moe is None else max(
        model.intermediate_size if model.num_dense_layers else 0,
        model.moe.expert_intermediate_size * model.moe.experts_per_token)
    per_token = (4 * model.hidden_size + 2 * inter / t) * ba
    logits = min(max_num_seqs, max_num_batched_tokens) * model.vocab_size / t * 4.0
    return max_num_batched_tokens * per_token + logits + 0.5e9


def memory_plan(model: ModelSpec, hardware: HardwareSpec, par: Parallelism, dtypes: DTypes,
                gpu_memory_utilization: float = 0.9, max_num_batched_tokens: int = 8192,
                max_num_seqs: int = 256, seq_len: int | None = None) -> MemoryPlan:
    """Weights per GPU, KV bytes per token, KV capacity in tokens and in sequences of `seq_len`.

    KV budget/GPU = capacity * utilisation - weights/GPU - activation reserve;
    KV tokens = budget / (KV bytes per token / (t' * pp)), t' = min(tp, n_kv) (1 for MLA).
    """
    for name, value, cls in (("model", model, ModelSpec), ("hardware", hardware, HardwareSpec),
                             ("par", par, Parallelism), ("dtypes", dtypes, DTypes)):
        check_instance(name, value, cls)
    if not (is_number(gpu_memory_utilization) and 0 < gpu_memory_utilization <= 1):
        raise SpecError(f"gpu_memory_utilization: {show(gpu_memory_utilization)} must be in (0, 1]")
    check_int("max_num_batched_tokens", max_num_batched_tokens)
    check_int("max_num_seqs", max_num_seqs)
    check_int("seq_len", seq_len, optional=True)
    w = weights_bytes_per_gpu(model, par, dtypes)
    reserve = activation_reserve_bytes(model, par, dtypes, max_num_batched_tokens, max_num_seqs)
    usable = hardware.hbm_capacity_bytes * gpu_memory_utilization
    budget = usable - w - reserve
    kv_tok = model.kv_bytes_per_token(dtypes.kv)
    L = seq_len or min(model.max_context, 4096)
    kv_tok_gpu = kv_bytes_per_gpu_token(model, par, dtypes.kv, L)
    tokens = int(max(budget, 0.0) // kv_tok_gpu)
    seqs = tokens // L
    fits = budget > 0 and tokens >= 16
    smallest = None
    msg = ""
    if not fits:
        for tp in (1, 2, 4, 8, 16, 32, 64, 128):
            if tp < par.tp or (model.mla is None and model.num_heads % tp):
                continue
            p2 = Parallelism(tp, par.pp)
            b2 = usable - weights_bytes_per_gpu(model, p2, dtypes) - activation_reserve_bytes(
                model, p2, dtypes, max_num_batched_tokens, max_num_seqs)
            if b2 > 0 and b2 / kv_bytes_per_gpu_token(model, p2, dtypes.kv, L) >= 16:
                smallest = tp
                break
        hint = f"; smallest TP that fits: {smallest}" if smallest else "; no TP up to 128 fits (try pp or a narrower weight dtype)"
        msg = (f"{model.id} does not fit on {hardware.id} with tp={par.tp} pp={par.pp}: weights "
               f"{w / 1e9:.1f} GB + activations {reserve / 1e9:.1f} GB per GPU > "
               f"{usable / 1e9:.1f} GB usable ({gpu_memory_utilization:.0%} of "
               f"{hardware.hbm_capacity_bytes / 1e9:.1f} GB){hint}")
    return MemoryPlan(w, reserve, usable, budget, kv_tok, kv_tok_gpu, tokens, L, seqs, fits, smallest, msg)


__all__ = ["MemoryPlan", "activation_reserve_bytes", "memory_plan", "weights_bytes_per_gpu"]
