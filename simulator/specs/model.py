"""Typed, self-validating description of one decoder-only transformer: `ModelSpec` (dense, GQA,
MoE with shared experts, MLA latent KV, sliding-window layers).

A frozen dataclass that checks every field in `__post_init__` and raises `SpecError` with one
line naming the field, the value and what is allowed. Derived facts (parameter counts, weight
bytes, KV bytes per token) are properties. All quantities are SI.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simulator.specs.checks import SpecError
from simulator.specs.dtypes import DTYPE_BYTES, DTYPES
from simulator.specs.fields import _check_fields, _nonneg, _pos

# --------------------------------------------------------------------------- models


@dataclass(frozen=True)
class MoESpec:
    """Mixture of experts: routed experts, top-k, shared experts, leading dense layers."""

    num_experts: int = _pos()
    experts_per_token: int = _pos()
    expert_intermediate_size: int = _pos()
    num_shared_experts: int = _nonneg(0)
    shared_expert_intermediate_size: int | None = _pos(None)
    first_dense_layers: int = _nonneg(0)

    def __post_init__(self) -> None:
        _check_fields(self, "moe")
        if self.experts_per_token > self.num_experts:
            raise SpecError(
                f"moe.experts_per_token: {self.experts_per_token} must be <= moe.num_experts ({self.num_experts})"
            )

    @property
    def shared_intermediate(self) -> int:
        """Total intermediate width of the shared experts (0 if none)."""
        if self.num_shared_experts == 0:
            return 0
        if self.shared_expert_intermediate_size is not None:
            return self.shared_expert_intermediate_size
        return self.num_shared_experts * self.expert_intermediate_size


@dataclass(frozen=True)
class MLASpec:
    """DeepSeek multi-head latent attention (arXiv:2405.04434)."""

    kv_lora_rank: int = _pos()
    qk_nope_head_dim: int = _pos()
    qk_rope_head_dim: int = _pos()
    v_head_dim: int = _pos()
    q_lora_rank: int | None = _pos(None)

    def __post_init__(self) -> None:
        _check_fields(self, "mla")


@dataclass(frozen=True)
class SlidingWindowSpec:
    """`num_layers` of the model's layers attend only to the last `window` tokens."""

    window: int = _pos()
    num_layers: int = _pos()

    def __post_init__(self) -> None:
        _check_fields(self, "sliding_window")


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer, in the terms of its Hugging Face config.json."""

    id: str
    hidden_size: int = _pos()
    num_layers: int = _pos()
    num_heads: int = _pos()
    num_kv_heads: int = _pos()
    intermediate_size: int = _pos()
    vocab_size: int = _pos()
    head_dim: int | None = _pos(None)
    name: str = ""
    aliases: tuple[str, ...] = ()
    hf_id: str = ""
    max_context: int = _pos(4096)
    mlp: str = field(default="gated", metadata={"choices": ("gated", "plain")})
    parallel_attention: bool = False
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    sliding_window: SlidingWindowSpec | None = None
    chars_per_token: float | None = _pos(None)
    # tokenizer family (llama3, qwen, cl100k, o200k: the ShareGPT table's; "" = unknown):
    # token counts of text workloads (ShareGPT) come from it
    tokenizer: str = ""
    # the weight format of the published checkpoint: a run's weight dtype when none is given
    # (what `vllm serve` loads: gpt-oss-120b's MXFP4 experts, DeepSeek-V3's FP8)
    default_weight_dtype: str = field(default="bf16", metadata={"choices": DTYPES})
    # which weights a narrower run weight dtype quantises: "all", or "experts" (the routed
    # experts only, the rest stays in unquantized_weight_dtype: gpt-oss's MXFP4 checkpoint,
    # FP8 MoE checkpoints that leave attention in 16 bits)
    quantized_weights: str = field(default="all", metadata={"choices": ("all", "experts")})
    # the format of the weights a quantised checkpoint leaves unquantised (gpt-oss: attention,
    # router, embeddings and LM head in bf16); None: default_weight_dtype
    unquantized_weight_dtype: str | None = field(default=None, metadata={"choices": DTYPES})
    # the activation format the checkpoint's quantisation runs at its default weight format: an
    # FP8 checkpoint with dynamic activation scales (DeepSeek-V3, Kimi-K2) is W8A8, fp8; None:
    # bf16 (16-bit and weight-only checkpoints: gpt-oss's MXFP4 runs W4A16)
    default_activation_dtype: str | None = field(default=None, metadata={"choices": DTYPES})
    sources: tuple[str, ...] = ()
    notes: str = ""

    def __post_init__(self) -> None:
        _check_fields(self, "")
        if not self.id:
            raise SpecError("id: must be a non-empty string")
        if self.head_dim is None and self.mla is None and self.hidden_size % self.num_heads:
            raise SpecError(
                f"num_heads: {self.num_heads} does not divide hidden_size {self.hidden_size}; "
                "give head_dim explicitly"
            )
        if self.num_kv_heads > self.num_heads:
            raise SpecError(f"num_kv_heads: {self.num_kv_heads} must be <= num_heads ({self.num_heads})")
        if self.num_heads % self.num_kv_heads:
            raise SpecError(
                f"num_kv_heads: {self.num_kv_heads} must divide num_heads ({self.num_heads})"
            )
        if self.sliding_window is not None and self.sliding_window.num_layers > self.num_layers:
            raise SpecError(
                f"sliding_window.num_layers: {self.sliding_window.num_layers} must be <= num_layers ({self.num_layers})"
            )
        if self.moe is not None and self.moe.first_dense_layers > self.num_layers:
            raise SpecError(
                f"moe.first_dense_layers: {self.moe.first_dense_layers} must be <= num_layers ({self.num_layers})"
            )
        u = self.unquantized_weight_dtype
        if u is not None and (self.quantized_weights != "experts" or self.moe is None):
            raise SpecError(f"unquantized_weight_dtype: {u} applies to an MoE checkpoint that quantises its routed "
                            "experts only (quantized_weights: experts)")
        if u is not None and DTYPE_BYTES[u] < DTYPE_BYTES[self.default_weight_dtype]:
            raise SpecError(f"unquantized_weight_dtype: {u} is narrower than default_weight_dtype "
                            f"{self.default_weight_dtype} (it is the format of the weights left unquantised)")

    # ---- derived geometry
    @property
    def d_head(self) -> int:
        """Head dimension d (explicit head_dim, else hidden_size / num_heads)."""
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_heads

    @property
    def num_moe_layers(self) -> int:
        return 0 if self.moe is None else self.num_layers - self.moe.first_dense_layers

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def num_sliding_layers(self) -> int:
        return 0 if self.sliding_window is None else self.sliding_window.num_layers

    @property
    def attention_kind(self) -> str:
        """'MLA', 'MHA', 'MQA' or 'GQA'."""
        if self.mla is not None:
            return "MLA"
        if self.num_kv_heads == self.num_heads:
            return "MHA"
        if self.num_kv_heads == 1:
            return "MQA"
        return "GQA"

    # ---- parameter counts, per component (weights only; biases and norms included)
    @property
    def attention_params_per_layer(self) -> int:
        H, nh, nkv, d = self.hidden_size, self.num_heads, self.num_kv_heads, self.d_head
        if self.mla is not None:
            m = self.mla
            qk = m.qk_nope_head_dim + m.qk_rope_head_dim
            if m.q_lora_rank:
                q = H * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * nh * qk
            else:
                q = H * nh * qk
            kv = H * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
            kv += m.kv_lora_rank * nh * (m.qk_nope_head_dim + m.v_head_dim)
            o = nh * m.v_head_dim * H
            return q + kv + o
        p = H * (nh + 2 * nkv) * d + nh * d * H
        if self.attention_bias:
            p += (nh + 2 * nkv) * d + H
        return p

    def _mlp_params(self, inter: int) -> int:
        H = self.hidden_size
        n = 3 if self.mlp == "gated" else 2
        p = n * H * inter
        if self.mlp_bias:
            p += (n - 1) * inter + H
        return p

    @property
    def dense_mlp_params(self) -> int:
        return self._mlp_params(self.intermediate_size)

    @property
    def expert_params(self) -> int:
        """Parameters of one routed expert."""
        return 0 if self.moe is None else self._mlp_params(self.moe.expert_intermediate_size)

    @property
    def shared_expert_params(self) -> int:
        return 0 if self.moe is None or not self.moe.num_shared_experts else self._mlp_params(self.moe.shared_intermediate)

    @property
    def router_params(self) -> int:
        return 0 if self.moe is None else self.hidden_size * self.moe.num_experts

    @property
    def norm_params_per_layer(self) -> int:
        return 2 * self.hidden_size

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        """LM head parameters not shared with the embedding (0 when tied)."""
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    @property
    def param_count(self) -> int:
        """Total parameters (embeddings and LM head included, once if tied)."""
        per_layer = self.attention_params_per_layer + self.norm_params_per_layer
        total = self.num_layers * per_layer
        total += self.num_dense_layers * self.dense_mlp_params
        if self.moe is not None:
            total += self.num_moe_layers * (
                self.moe.num_experts * self.expert_params + self.shared_expert_params + self.router_params
            )
        return total + self.embedding_params + self.lm_head_params + self.hidden_size

    @property
    def active_param_count(self) -> int:
        """Parameters multiplied per token: routed experts counted k of E, the input
        embedding (a gather, not a GEMM) excluded, the LM head included."""
        per_layer = self.attention_params_per_layer + self.norm_params_per_layer
        total = self.num_layers * per_layer + self.num_dense_layers * self.dense_mlp_params
        if self.moe is not None:
            total += self.num_moe_layers * (
                self.moe.experts_per_token * self.expert_params + self.shared_expert_params + self.router_params
            )
        head = self.vocab_size * self.hidden_size
        return total + head + self.hidden_size

    @property
    def routed_expert_param_count(self) -> int:
        """Parameters of all routed experts (0 for a dense model)."""
        return 0 if self.moe is None else self.num_moe_layers * self.moe.num_experts * self.expert_params

    def unquantized_dtype(self, dtype: str) -> str:
        """The dtype of the weights a run in weight dtype `dtype` leaves unquantised: `dtype`
        itself when every weight takes it, else (quantized_weights: experts, and `dtype`
        narrower than the unquantised format) `unquantized_weight_dtype` (default: the model's
        `default_weight_dtype`)."""
        base = self.unquantized_weight_dtype or self.default_weight_dtype
        if self.quantized_weights == "experts" and self.moe is not None and DTYPE_BYTES[dtype] < DTYPE_BYTES[base]:
            return base
        return dtype

    def run_formats(self, weight_dtype: str | None = None, activation_dtype: str | None = None) -> tuple[str, str]:
        """(weight, activation) formats of a run that gives these (None: not given): the
        checkpoint's weight format, and `activation_for` it."""
        return weight_dtype or self.default_weight_dtype, activation_dtype or self.activation_for(weight_dtype)

    def activation_for(self, weight_dtype: str | None) -> str:
        """The activation format a run takes when none is given: the checkpoint's own
        (`default_activation_dtype`) at the checkpoint's weight format, else bf16 (a run that
        re-quantises the weights says its activations too)."""
        if weight_dtype in (None, self.default_weight_dtype) and self.default_activation_dtype:
            return self.default_activation_dtype
        return "bf16"

    def weight_bytes(self, dtype: str | None = None) -> float:
        """Bytes of all weights stored in `dtype` (default: the model's own); with
        quantized_weights: experts only the routed experts take a narrower `dtype`."""
        d = dtype or self.default_weight_dtype
        experts = self.routed_expert_param_count
        return experts * DTYPE_BYTES[d] + (self.param_count - experts) * DTYPE_BYTES[self.unquantized_dtype(d)]

    # ---- KV cache
    @property
    def kv_elements_per_token_per_layer(self) -> int:
        """KV-cache elements one token adds in one layer (all KV heads; MLA: the latent)."""
        if self.mla is not None:
            return self.mla.kv_lora_rank + self.mla.qk_rope_head_dim
        return 2 * self.num_kv_heads * self.d_head

    def kv_bytes_per_token(self, dtype: str = "bf16") -> float:
        """KV-cache bytes per token over all layers, whole model (before TP sharding)."""
        return self.num_layers * self.kv_elements_per_token_per_layer * DTYPE_BYTES[dtype]

    def kv_shards(self, tp: int) -> int:
        """How many ways TP splits the KV cache: min(tp, n_kv); 1 for MLA (one shared latent)."""
        if self.mla is not None:
            return 1
        return min(tp, self.num_kv_heads)

    def describe(self) -> dict:
        """Key derived facts, for `llmsim show`."""
        return {
            "attention": self.attention_kind,
            "head_dim": self.d_head,
            "param_count": self.param_count,
            "active_param_count": self.active_param_count,
            "weight_bytes_bf16": self.weight_bytes("bf16"),
            "kv_bytes_per_token_bf16": self.kv_bytes_per_token("bf16"),
            "kv_bytes_per_token_fp8": self.kv_bytes_per_token("fp8"),
        }
