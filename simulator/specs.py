"""Typed, self-validating descriptions of accelerators and models.

A `HardwareSpec` is one accelerator (one GPU/TPU chip); a `ModelSpec` is one decoder-only
transformer. Both are frozen dataclasses that check every field in `__post_init__` and
raise `SpecError` with one line naming the field, the value and what is allowed. Derived
facts (parameter counts, weight bytes, KV bytes per token, ridge point) are properties.

All quantities are SI: bytes, bytes/s, FLOP/s, seconds. 1 GB = 1e9 bytes.

Also here: the replica setup every cost model takes (`Parallelism`, `DTypes`). The value checks
(`SpecError`, `is_int`, `is_number`, `check_int`, `check_number`, `check_choice`, `show`) live in
`checks` and are re-exported here; every spec number is finite and inside its field's physically
meaningful range (metadata `min`/`max`/`unit`, else +-GENERIC_MAX), so no spec prices to inf.
Those generic field checks and the mapping builder `build` live in `specfields` (re-exported
here).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from .checks import (  # noqa: F401  (SpecError, is_int, check_int, ... re-exported: callers import them from here)
    SpecError,
    check_choice,
    check_int,
    check_number,
    is_int,
    is_number,
    show,
)
from .specfields import (  # noqa: F401  (build, _did_you_mean, GENERIC_MAX re-exported: callers import them from here)
    GENERIC_MAX,
    _check_fields,
    _check_range,
    _did_you_mean,
    _nonneg,
    _pos,
    build,
)

#: Bytes per element of each supported numeric format.
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
    "fp4": 0.5,
}
DTYPES = tuple(DTYPE_BYTES)

#: When an accelerator has no tensor rate for a format, the next wider format it runs on.
DTYPE_FALLBACK: dict[str, str] = {
    "fp4": "fp8",
    "int4": "int8",
    "fp8": "bf16",
    "int8": "fp16",
    "fp16": "bf16",
    "bf16": "fp16",
    "fp32": "",
}


#: physically meaningful ranges (issue 17): beyond them no step time is finite or meaningful
_EFF_RANGE = {"min": 1e-3, "max": 1.0}
_RAMP_RANGE = {"min": 0.0, "max": 1e6, "unit": "tokens"}
PEAK_FLOPS_RANGE = (1e9, 1e19)



# --------------------------------------------------------------------------- hardware


@dataclass(frozen=True)
class Efficiency:
    """How far real kernels fall short of the roofline, and fixed costs per step.

    `compute_efficiency` (eta_c) is the fraction of dense peak a large GEMM reaches;
    a GEMM over T tokens reaches eta_c * T / (T + gemm_ramp_tokens) (small GEMMs are less
    efficient). `memory_efficiency` (eta_m) is the fraction of HBM bandwidth streaming
    kernels reach. `attention_efficiency` scales peak for attention FLOPs.
    `kernel_overhead_s` is paid once per op per layer (launch and tail effects);
    `step_overhead_s` once per engine step (scheduler, sampling, host sync).
    `link_efficiency` is the fraction of link bandwidth an all-reduce achieves.

    Optional per-format values (absent: every format uses the single value above):
    `compute_efficiency_by_dtype` and `gemm_ramp_tokens_by_dtype` map a GEMM's tensor-core format
    (the rate it runs at, after fallback) to its eta_c and T0, e.g. fp8 GEMMs reaching less of
    their (twice as high) peak than bf16; `attention_efficiency_by_kv_dtype` maps the KV-cache
    format to the attention efficiency (an fp8 KV cache is dequantised inside the kernel).
    """

    compute_efficiency: float = _pos(1.0, **_EFF_RANGE)
    memory_efficiency: float = _pos(1.0, **_EFF_RANGE)
    attention_efficiency: float = _pos(1.0, **_EFF_RANGE)
    gemm_ramp_tokens: float = _nonneg(0.0, **_RAMP_RANGE)
    kernel_overhead_s: float = _nonneg(0.0, max=1.0, unit="s")
    step_overhead_s: float = _nonneg(0.0, max=10.0, unit="s")
    link_efficiency: float = _pos(1.0, **_EFF_RANGE)
    compute_efficiency_by_dtype: dict = field(default_factory=dict, metadata={"omit_when_empty": True})
    gemm_ramp_tokens_by_dtype: dict = field(default_factory=dict, metadata={"omit_when_empty": True})
    attention_efficiency_by_kv_dtype: dict = field(default_factory=dict, metadata={"omit_when_empty": True})
    sources: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_fields(self, "efficiency")
        for name, at_most_one in (("compute_efficiency_by_dtype", True), ("gemm_ramp_tokens_by_dtype", False),
                                  ("attention_efficiency_by_kv_dtype", True)):
            for k, v in getattr(self, name).items():
                where = f"efficiency.{name}.{k}"
                if k not in DTYPE_BYTES:
                    raise SpecError(f"{where}: unknown dtype{_did_you_mean(str(k), DTYPES)}; allowed: {', '.join(DTYPES)}")
                try:
                    ok = is_number(v) and math.isfinite(v) and ((0 < v <= 1) if at_most_one else v >= 0)
                except OverflowError:  # an integer beyond float range
                    ok = False
                if not ok:
                    raise SpecError(f"{where}: {show(v)} must be a number {'in (0, 1]' if at_most_one else '>= 0'}")
                _check_range(where, v, _EFF_RANGE if at_most_one else _RAMP_RANGE)

    def compute_for(self, gemm_dtype: str) -> float:
        """eta_c of GEMMs run at `gemm_dtype`'s tensor rate (the single value when not given)."""
        return float(self.compute_efficiency_by_dtype.get(gemm_dtype, self.compute_efficiency))

    def ramp_for(self, gemm_dtype: str) -> float:
        """T0 of GEMMs run at `gemm_dtype`'s tensor rate (the single value when not given)."""
        return float(self.gemm_ramp_tokens_by_dtype.get(gemm_dtype, self.gemm_ramp_tokens))

    def attention_for(self, kv_dtype: str) -> float:
        """Attention efficiency with a `kv_dtype` KV cache (the single value when not given)."""
        return float(self.attention_efficiency_by_kv_dtype.get(kv_dtype, self.attention_efficiency))

    @classmethod
    def ideal(cls) -> Efficiency:
        """Pure roofline: efficiencies 1, overheads 0."""
        return cls()


#: the Efficiency fields that are one number (settable with `--efficiency KEY=VALUE`)
SCALAR_EFFICIENCY_FIELDS = ("compute_efficiency", "memory_efficiency", "attention_efficiency", "gemm_ramp_tokens",
                            "kernel_overhead_s", "step_overhead_s", "link_efficiency")


def parse_efficiency_overrides(items: list[str] | tuple[str, ...]) -> dict[str, float]:
    """Turn ["compute_efficiency=0.7", ...] into {field: value}; unknown fields and
    non-numbers raise SpecError naming the item."""
    fields = set(SCALAR_EFFICIENCY_FIELDS)
    out: dict[str, float] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise SpecError(f"efficiency: {item!r} is not KEY=VALUE")
        if key not in fields:
            raise SpecError(f"efficiency: unknown field {key!r}{_did_you_mean(key, fields)}; "
                            f"allowed: {', '.join(sorted(fields))}")
        try:
            out[key] = float(value)
        except ValueError:
            raise SpecError(f"efficiency.{key}: {value!r} is not a number") from None
    return out



@dataclass(frozen=True)
class HardwareSpec:
    """One accelerator chip. Peak rates are DENSE (no 2:4 sparsity), in FLOP/s per dtype."""

    id: str
    name: str
    vendor: str
    peak_flops_per_s: dict
    hbm_capacity_bytes: float = _pos(min=1e6, max=1e15, unit="bytes")
    hbm_bandwidth_bytes_per_s: float = _pos(min=1e6, max=1e16, unit="bytes/s")
    link_bandwidth_bytes_per_s: float = _pos(min=1e6, max=1e16, unit="bytes/s")
    link_latency_s: float = _nonneg(5e-6, max=1.0, unit="s")
    # scale-out network between nodes (InfiniBand / RoCE NIC per GPU); None: the vendor
    # default of `network.py` (docs/deployments.md). A node holds `gpus_per_node` GPUs on NVLink.
    scaleout_bandwidth_bytes_per_s: float | None = _pos(None, min=1e6, max=1e16, unit="bytes/s")
    scaleout_latency_s: float | None = _nonneg(None, max=1.0, unit="s")
    gpus_per_node: int = _pos(8, min=1, max=4096, unit="GPUs")
    # GPU <-> host memory, one direction, per GPU: prices reloading offloaded KV blocks. Default
    # PCIe Gen5 x16's nominal 64 GB/s (H100/H200 SXM; set it for PCIe Gen4 parts or NVLink-C2C)
    host_link_bandwidth_bytes_per_s: float = _pos(64e9, min=1e6, max=1e16, unit="bytes/s")
    form_factor: str = ""
    tdp_w: float | None = _pos(None, max=1e5, unit="W")
    price_per_gpu_hour_usd: float | None = _pos(None, max=1e6, unit="USD")
    efficiency: Efficiency = field(default_factory=Efficiency)
    sources: tuple[str, ...] = ()
    notes: str = ""
    #: other names of this chip (other tools' ids, nvidia-smi names); resolved case-insensitively
    aliases: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_fields(self, "")
        if not self.id:
            raise SpecError("id: must be a non-empty string")
        if not self.peak_flops_per_s:
            raise SpecError(f"peak_flops_per_s: empty; give FLOP/s for at least one of {', '.join(DTYPES)}")
        for k, v in self.peak_flops_per_s.items():
            if k not in DTYPE_BYTES:
                raise SpecError(f"peak_flops_per_s.{str(k)[:80]}: unknown dtype{_did_you_mean(str(k), DTYPES)}; "
                                f"allowed: {', '.join(DTYPES)}")
            check_number(f"peak_flops_per_s.{k}", v, *PEAK_FLOPS_RANGE, unit="FLOP/s")

    def gemm_dtype(self, dtype: str) -> str:
        """The dtype whose tensor rate a GEMM in `dtype` runs at (falls back to wider ones)."""
        d = dtype
        seen = set()
        while d and d not in self.peak_flops_per_s and d not in seen:
            seen.add(d)
            d = DTYPE_FALLBACK[d]
        if d in self.peak_flops_per_s:
            return d
        # nothing narrower or equal: the widest rate the chip has
        return max(self.peak_flops_per_s, key=lambda k: DTYPE_BYTES[k])

    def flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for `dtype`, after fallback."""
        return float(self.peak_flops_per_s[self.gemm_dtype(dtype)])

    def ridge_point(self, dtype: str = "bf16") -> float:
        """Arithmetic intensity (FLOP/byte) where compute and memory time are equal."""
        return self.flops(dtype) / self.hbm_bandwidth_bytes_per_s

    def with_efficiency(self, **overrides: Any) -> HardwareSpec:
        """A copy with some efficiency fields replaced."""
        eff = dataclasses.replace(self.efficiency, **overrides)
        return dataclasses.replace(self, efficiency=eff)

    def ideal(self) -> HardwareSpec:
        """A copy with pure-roofline efficiencies (1) and no overheads."""
        return dataclasses.replace(self, efficiency=Efficiency.ideal())


# --------------------------------------------------------------------------- replica setup


@dataclass(frozen=True)
class Parallelism:
    """Tensor- and pipeline-parallel degrees of one replica (GPUs per replica = tp * pp).

    `ep`: expert-parallel degree of the MoE layers, a divisor of tp (experts sharded whole over
    ep ranks of the TP group; `parallel.py`); `expert_imbalance` (rho >= 1): tokens of the
    busiest EP rank over the mean (1: uniform routing); `pp_microbatches` (M): micro-batches a
    step is split into through the pipeline (1: stages one after another)."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    pp_microbatches: int = 1
    expert_imbalance: float = 1.0

    def __post_init__(self) -> None:
        check_int("tp", self.tp)
        check_int("pp", self.pp)
        check_int("ep", self.ep)
        check_int("pp_microbatches", self.pp_microbatches)
        if self.tp % self.ep:
            raise SpecError(f"ep: {self.ep} must divide tp ({self.tp}): experts are sharded over ranks of the TP group")
        check_number("expert_imbalance", self.expert_imbalance, 1.0, float(self.ep))

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp


@dataclass(frozen=True)
class DTypes:
    """Numeric formats of weights, activations and the KV cache."""

    weight: str = "bf16"
    activation: str = "bf16"
    kv: str = "bf16"

    def __post_init__(self) -> None:
        for name in ("weight", "activation", "kv"):
            check_choice(f"{name}_dtype", getattr(self, name), DTYPES)

    @property
    def gemm(self) -> str:
        """The GEMM format: the wider of weight and activation (W4A16 runs bf16 tensor cores)."""
        if DTYPE_BYTES[self.weight] >= DTYPE_BYTES[self.activation]:
            return self.weight
        return self.activation


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
    default_weight_dtype: str = field(default="bf16", metadata={"choices": DTYPES})
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

    def weight_bytes(self, dtype: str | None = None) -> float:
        """Bytes of all weights stored in `dtype` (default: the model's own)."""
        return self.param_count * DTYPE_BYTES[dtype or self.default_weight_dtype]

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
