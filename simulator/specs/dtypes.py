"""Numeric formats: bytes per element, the fallback when a chip lacks a format's tensor rate,
and the formats of one run (`DTypes`: weights, activations, KV cache)."""

from __future__ import annotations

from dataclasses import dataclass

from simulator.specs.checks import check_choice

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


def attention_format(activation: str, kv: str) -> str:
    """The format attention's two matmuls (QK^T, PV) run in: the wider of the activations and
    the KV cache, each taken as a format attention kernels compute in. Why: the GEMM recipe
    does not reach attention. A W8A8 fp8 run with a 16-bit KV cache computes attention in 16 bits
    (vLLM's FlashAttention reads the cache's format; only `--kv-cache-dtype fp8` gives it an fp8
    path), and a W4A4 NVFP4 run (TensorRT-LLM on Blackwell) quantises only the GEMM inputs: its
    attention runs at the fp8 KV cache's format. No serving engine has a 4-bit or an integer
    attention kernel: fp4 counts as fp8, int8 and int4 (SmoothQuant-style W8A8, an int8 KV cache)
    as fp16, so an integer KV cache is converted where the kernel has no native path."""
    def kernel_format(d: str) -> str:
        if d in ("int8", "int4"):
            return "fp16"
        return "fp8" if d == "fp4" else d

    a, k = kernel_format(activation), kernel_format(kv)
    return k if DTYPE_BYTES[k] > DTYPE_BYTES[a] else a


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

    def gemm_at(self, int8_compute: bool) -> str:
        """The GEMM format on a kernel that may run weight-only integer GEMMs at the int8 rate
        (`Efficiency.dequant_int8_compute`): int4/int8 weights with 16-bit activations then
        compute in int8, the activations quantised per token; otherwise `gemm`."""
        if int8_compute and self.weight in ("int4", "int8") and DTYPE_BYTES[self.activation] > 1:
            return "int8"
        return self.gemm
