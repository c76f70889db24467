"""From names and plain option values to a `CostModel`: the one place the physics meets the catalog.

`roofline.CostModel` takes specs only; this module resolves a catalog id, alias or file path
(`catalog.load_model`, `catalog.load_hardware`) and fills the defaults the CLI, scenarios and
notebooks share: the weight dtype is the model's own, and the KV cache is bf16 unless the
activations are narrower (then it follows them).
"""

from __future__ import annotations

import os

from .catalog import load_hardware, load_model
from .roofline import CostModel
from .specs import DTYPES, DTypes, HardwareSpec, ModelSpec, Parallelism, check_choice


def make_cost_model(model: str | os.PathLike | ModelSpec, hardware: str | os.PathLike | HardwareSpec, tp: int = 1, pp: int = 1,
                    weight_dtype: str | None = None, activation_dtype: str = "bf16",
                    kv_dtype: str | None = None, ideal: bool = False,
                    efficiency: dict[str, float] | None = None, link_dtype: str | None = None, *,
                    ep: int = 1, pp_microbatches: int = 1, expert_imbalance: float = 1.0) -> CostModel:
    """Convenience constructor from plain values (the CLI and notebooks use this).

    `model` / `hardware`: a spec, catalog id, alias or file path (str or pathlib.Path); every
    argument is checked before use (one-line SpecError naming it)."""
    m = load_model(model)
    hw = load_hardware(hardware)
    check_choice("activation_dtype", activation_dtype, DTYPES)
    for name, value in (("weight_dtype", weight_dtype), ("kv_dtype", kv_dtype)):
        if value is not None:
            check_choice(name, value, DTYPES)
    w = weight_dtype or m.default_weight_dtype
    # vLLM keeps --kv-cache-dtype separate from the compute dtype: KV stays 16-bit unless asked
    kv = kv_dtype or "bf16"
    par = Parallelism(tp, pp, ep=ep, pp_microbatches=pp_microbatches, expert_imbalance=expert_imbalance)
    return CostModel(m, hw, par, DTypes(w, activation_dtype, kv),
                     ideal=ideal, efficiency=efficiency, link_dtype=link_dtype)


__all__ = ["make_cost_model"]
