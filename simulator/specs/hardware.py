"""Typed, self-validating description of one accelerator (one GPU/TPU chip): `HardwareSpec`,
with its fitted kernel efficiencies (`Efficiency`).

A frozen dataclass that checks every field in `__post_init__` and raises `SpecError` with one
line naming the field, the value and what is allowed; every number is finite and inside its
field's physically meaningful range (metadata `min`/`max`/`unit`), so no spec prices to inf.
All quantities are SI: bytes, bytes/s, FLOP/s, seconds. 1 GB = 1e9 bytes.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any

from simulator.specs.checks import SpecError, check_number, is_number, show
from simulator.specs.dtypes import DTYPE_BYTES, DTYPE_FALLBACK, DTYPES
from simulator.specs.fields import _check_fields, _check_range, _did_you_mean, _nonneg, _pos

#: physically meaningful ranges (issue 17): beyond them no step time is finite or meaningful
_EFF_RANGE = {"min": 1e-3, "max": 1.0}
_RAMP_RANGE = {"min": 0.0, "max": 1e6, "unit": "tokens"}
#: KV elements dequantised per second by an attention kernel (1 M/s .. 10 P/s)
_DEQUANT_RANGE = {"min": 1e6, "max": 1e16, "unit": "elements/s"}
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

    `dp_attention_step_overhead_s` is paid once per engine step when attention runs data-parallel
    (`Parallelism.dp_attention` > 1, every rank in lockstep): the per-iteration time of such a step
    beyond its priced kernels and `step_overhead_s`, fitted where measured (engine profiles'
    `kernels.by_chip_class`); 0 elsewhere. `dp_attention_full_seqs` (sequences a rank, 0: none)
    is the batch from which that cost is paid in full: a step with fewer sequences a rank pays
    it in proportion, min(c, c S / (d x full)) for S sequences over d ranks (0: always c).
    `sequence_overhead_s` is paid once per sequence in a step (host work that grows with the
    batch: per-sequence scheduling, sampling and detokenisation in a Python engine loop).
    `gqa_kv_sharing` (s in [0, 1]) says how much of a GQA group's KV the decode attention kernel
    reads once: 1 = each KV head once per step (FlashAttention/FlashInfer-style kernels), 0 = once
    per query head (a kernel with one thread block per query head, vLLM's paged_attention
    v1/v2 grid(num_heads, num_seqs), whose re-reads miss the cache); the KV read is multiplied by
    1 + (g - 1)(1 - s), g = query heads per KV head. `dequant_gemm_efficiency` scales the GEMM
    efficiency of weight-only quantised GEMMs (weights narrower than activations: Marlin-style
    kernels dequantise in the main loop); `dequant_ramp_relative` scales their GEMM ramp T0 (1:
    the small-GEMM floor of the activation format; ~ the bytes ratio, 0.25 for W4A16: a kernel
    that reaches the narrower weights' read at small M, as Marlin does). `moe_layer_overhead_s` is
    paid once per MoE layer per step when the experts run a dequantising (weight-only) kernel:
    that path's routing, token sort/align, bias and activation kernels, whose time does not
    shrink with the batch or the tensor-parallel degree (0 for 16-bit or W8A8/W4A4 experts).
    `expert_width_ramp` (W0, elements) is the routed experts' GEMM width ramp: a grouped MoE
    GEMM tiles each expert on its own, and under tensor parallelism each GPU holds a slice
    W = I_e ep / tp of every expert's intermediate width, so the gate/up GEMM's output and the
    down GEMM's reduction shrink with tp; the main loop then reaches W / (W + W0) of its rate
    (per-tile prologue, epilogue and pipeline fill no longer amortised). It scales the experts'
    per-row compute by 1 + W0 / W, not their small-batch floor (a weight read). 0: no ramp.
    `moe_gemm_relative` (r in (0, 1]) is the rate the routed experts' grouped GEMMs reach
    relative to the dense GEMMs of the same format, for experts in a native tensor-core format
    (16-bit, W8A8, W4A4; weight-only experts have `dequant_gemm_efficiency`): per-expert token
    permutation, routing and tiles a grouped kernel fills unevenly. Their small-batch floor (a
    weight read) does not move. 1: as fast as a dense GEMM.
    `expert_tile_rows` (rows) is the largest row tile a weight-only MoE kernel pads each expert's
    rows to: vLLM's Marlin MoE takes the first of 8, 16, 32, 48, 64 rows (up to this cap) whose
    mean fill is below 0.9 of a tile and computes every padded row (`roofline.expert_tokens`).
    0: no padding (the experts compute exactly their rows); else 8 to 64.
    `dequant_int8_compute` (0 or 1) says how weight-only *integer* GEMMs (int4/int8 weights,
    16-bit activations) compute: 0 in the activation format (Marlin-style: dequantise the
    weights to 16 bits in the main loop), 1 at the int8 tensor rate, the activations quantised to
    int8 per token on the fly (IPEX's weight-only linear with `WoqLowpMode.INT8`, which vLLM's
    GPTQ/AWQ path on Intel XPU runs). Floating-point weight formats (fp8, fp4) are unaffected.

    Optional per-format values (absent: every format uses the single value above):
    `compute_efficiency_by_dtype` and `gemm_ramp_tokens_by_dtype` map a GEMM's tensor-core format
    (the rate it runs at, after fallback) to its eta_c and T0, e.g. fp8 GEMMs reaching less of
    their (twice as high) peak than bf16; `attention_efficiency_by_kv_dtype` maps the KV-cache
    format to the attention efficiency (an fp8 KV cache is dequantised inside the kernel);
    `kv_dequant_rate_by_kv_dtype` maps a KV format the attention kernel has NO native path for to
    the rate (KV elements per second) at which it converts that cache to 16 bits: the conversion
    is compute the kernel overlaps with its loads (inside the roofline max), paid per element it
    reads. Absent: a native path (the smaller read, no conversion cost).
    `kv_dequant_block_rate_by_kv_dtype`: the rate (elements per second) at which ONE thread block
    of that kernel converts its KV head's elements; a batch with too few blocks to fill the chip
    (vLLM V0's paged attention: one block per sequence and query head, or per 512-token
    partition) waits for its longest block (`CostModel.block_tokens`). Absent: not priced.
    """

    compute_efficiency: float = _pos(1.0, **_EFF_RANGE)
    memory_efficiency: float = _pos(1.0, **_EFF_RANGE)
    attention_efficiency: float = _pos(1.0, **_EFF_RANGE)
    gemm_ramp_tokens: float = _nonneg(0.0, **_RAMP_RANGE)
    kernel_overhead_s: float = _nonneg(0.0, max=1.0, unit="s")
    step_overhead_s: float = _nonneg(0.0, max=10.0, unit="s")
    dp_attention_step_overhead_s: float = _nonneg(0.0, max=10.0, unit="s")
    dp_attention_full_seqs: float = _nonneg(0.0, max=1e6)
    link_efficiency: float = _pos(1.0, **_EFF_RANGE)
    sequence_overhead_s: float = _nonneg(0.0, max=0.1, unit="s")
    gqa_kv_sharing: float = _nonneg(1.0, max=1.0)
    dequant_gemm_efficiency: float = _pos(1.0, **_EFF_RANGE)
    dequant_ramp_relative: float = _pos(1.0, **_EFF_RANGE)
    moe_layer_overhead_s: float = _nonneg(0.0, max=0.01, unit="s")
    expert_width_ramp: float = _nonneg(0.0, max=1e5)
    moe_gemm_relative: float = _pos(1.0, **_EFF_RANGE)
    expert_tile_rows: float = _nonneg(0.0, max=64.0)
    dequant_int8_compute: float = _nonneg(0.0, max=1.0)
    compute_efficiency_by_dtype: dict = field(default_factory=dict, metadata={"omit_when_empty": True})
    gemm_ramp_tokens_by_dtype: dict = field(default_factory=dict, metadata={"omit_when_empty": True})
    attention_efficiency_by_kv_dtype: dict = field(default_factory=dict, metadata={"omit_when_empty": True})
    kv_dequant_rate_by_kv_dtype: dict = field(default_factory=dict, metadata={"omit_when_empty": True})
    kv_dequant_block_rate_by_kv_dtype: dict = field(default_factory=dict, metadata={"omit_when_empty": True})
    sources: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_fields(self, "efficiency")
        check_tile_rows("efficiency.expert_tile_rows", self.expert_tile_rows)
        if self.dequant_int8_compute not in (0, 1):
            raise SpecError(f"efficiency.dequant_int8_compute: {show(self.dequant_int8_compute)} must be 0 "
                            "(weight-only GEMMs in the activation format) or 1 (at the int8 rate)")
        for name, rng in (("compute_efficiency_by_dtype", _EFF_RANGE), ("gemm_ramp_tokens_by_dtype", _RAMP_RANGE),
                          ("attention_efficiency_by_kv_dtype", _EFF_RANGE),
                          ("kv_dequant_rate_by_kv_dtype", _DEQUANT_RANGE),
                          ("kv_dequant_block_rate_by_kv_dtype", _DEQUANT_RANGE)):
            for k, v in getattr(self, name).items():
                where = f"efficiency.{name}.{k}"
                if k not in DTYPE_BYTES:
                    raise SpecError(f"{where}: unknown dtype{_did_you_mean(str(k), DTYPES)}; allowed: {', '.join(DTYPES)}")
                at_most_one = rng is _EFF_RANGE
                try:
                    ok = is_number(v) and math.isfinite(v) and ((0 < v <= 1) if at_most_one else v >= rng["min"])
                except OverflowError:  # an integer beyond float range
                    ok = False
                if not ok:
                    allowed = "in (0, 1]" if at_most_one else f">= {rng['min']:g}"
                    raise SpecError(f"{where}: {show(v)} must be a number {allowed}")
                _check_range(where, v, rng)

    def compute_for(self, gemm_dtype: str) -> float:
        """eta_c of GEMMs run at `gemm_dtype`'s tensor rate (the single value when not given)."""
        return float(self.compute_efficiency_by_dtype.get(gemm_dtype, self.compute_efficiency))

    def ramp_for(self, gemm_dtype: str) -> float:
        """T0 of GEMMs run at `gemm_dtype`'s tensor rate (the single value when not given)."""
        return float(self.gemm_ramp_tokens_by_dtype.get(gemm_dtype, self.gemm_ramp_tokens))

    def attention_for(self, kv_dtype: str) -> float:
        """Attention efficiency with a `kv_dtype` KV cache (the single value when not given)."""
        return float(self.attention_efficiency_by_kv_dtype.get(kv_dtype, self.attention_efficiency))

    def dequant_rate_for(self, kv_dtype: str) -> float | None:
        """KV elements per second the attention kernel dequantises when it has no native path
        for a `kv_dtype` cache (None: a native path, no dequantisation cost)."""
        v = self.kv_dequant_rate_by_kv_dtype.get(kv_dtype)
        return None if v is None else float(v)

    def dequant_block_rate_for(self, kv_dtype: str) -> float | None:
        """KV elements per second one thread block of that kernel converts (None: not priced)."""
        v = self.kv_dequant_block_rate_by_kv_dtype.get(kv_dtype)
        return None if v is None else float(v)

    @classmethod
    def ideal(cls) -> Efficiency:
        """Pure roofline: efficiencies 1, overheads 0."""
        return cls()


def check_tile_rows(where: str, value: float) -> None:
    """`expert_tile_rows` caps the ladder 8, 16, 32, 48, 64: 0 (no padding) or at least the
    smallest tile; a cap in (0, 8) would silently mean no padding."""
    if 0 < value < 8:
        raise SpecError(f"{where}: {value:g} must be 0 (no padding) or at least 8 rows (the smallest tile)")


#: the efficiency fields whose provenance `HardwareSpec.efficiency_status` reports
CORE_EFFICIENCY_FIELDS = ("compute_efficiency", "memory_efficiency")
_COPIED = re.compile(r"^copied from ([\w.+-]+)", re.IGNORECASE)
#: a copy checked against measurements of this chip (the same die; its errors are reported)
_VALIDATED = re.compile(r"\bvalidated on\b", re.IGNORECASE)

#: the Efficiency fields that are one number (settable with `--efficiency KEY=VALUE`)
SCALAR_EFFICIENCY_FIELDS = ("compute_efficiency", "memory_efficiency", "attention_efficiency", "gemm_ramp_tokens",
                            "kernel_overhead_s", "step_overhead_s", "link_efficiency", "sequence_overhead_s",
                            "gqa_kv_sharing", "dequant_gemm_efficiency", "dequant_ramp_relative",
                            "moe_layer_overhead_s", "expert_width_ramp", "moe_gemm_relative", "expert_tile_rows",
                            "dequant_int8_compute", "dp_attention_step_overhead_s", "dp_attention_full_seqs")


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

    def efficiency_status(self) -> dict[str, str]:
        """What is fitted and what is copied, from the efficiency `sources`: {field: "fitted" |
        "copied from X" | "copied from X, validated" (a copy whose source says "validated on"
        this chip's own measurements) | "set"} for the fields that decide a prediction
        (compute, memory)."""
        out = {}
        for name in CORE_EFFICIENCY_FIELDS:
            text = str(self.efficiency.sources.get(name, "")).strip()
            m = _COPIED.match(text)
            if m and _VALIDATED.search(text):
                out[name] = f"copied from {m.group(1)}, validated"
            elif m:
                out[name] = f"copied from {m.group(1)}"
            elif text and not text.lower().startswith(("assum", "none", "not fitted")):
                out[name] = "fitted"
            else:
                out[name] = "set"
        return out

    def validation_line(self) -> str:
        """`llmsim show`'s one line on where the efficiencies come from: the notice of a copy
        no measurement of this chip checked, else a copy validated on this chip's own rows
        (naming the GEMM formats with a number of their own), else fitted."""
        notice = self.efficiency_notice()
        if notice:
            return notice
        validated = sorted({v for v in self.efficiency_status().values() if v.endswith(", validated")})
        if not validated:
            return "efficiencies fitted to measurements (see efficiency.sources)"
        own = ", ".join(sorted(self.efficiency.compute_efficiency_by_dtype))
        return (f"efficiencies {' and '.join(validated)} on measurements of this chip"
                + (f" ({own} GEMMs: own number)" if own else "") + " (see efficiency.sources)")

    def efficiency_notice(self) -> str | None:
        """"<id>: efficiencies copied from X, unvalidated" when the chip's compute and memory
        efficiencies were copied from another chip (no measurement of this one), else None;
        every report that prices the chip prints it."""
        copied = {v[len("copied from "):] for v in self.efficiency_status().values()
                  if v.startswith("copied from ") and not v.endswith(", validated")}
        if not copied:
            return None
        notice = f"{self.id}: efficiencies copied from {', '.join(sorted(copied))}, unvalidated"
        # a GEMM format with its own number (MI325X fp8 fitted on MLPerf rows, GB200 fp4 copied
        # from B200 and checked on its own rows) is said, not hidden in "copied"
        by = self.efficiency.compute_efficiency_by_dtype
        text = str(self.efficiency.sources.get("compute_efficiency_by_dtype", ""))
        formats = ", ".join(sorted(by))
        m = _COPIED.match(text)
        if by and m:
            status = "validated" if _VALIDATED.search(text) else "unvalidated"
            notice += f" ({formats} GEMMs copied from {m.group(1)}, {status})"
        elif by and re.search(r"\bfitted on\b", text, re.IGNORECASE):
            notice += f" (fitted: {formats} GEMMs)"
        return notice
