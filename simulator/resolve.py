"""From names and plain option values to a `CostModel`: the one place the physics meets the catalog.

`roofline.CostModel` takes specs only; this module resolves a catalog id, alias or file path
(`catalog.load_model`, `catalog.load_hardware`) and fills the defaults the CLI, scenarios and
notebooks share: the weight dtype is the model's own, and the KV cache is bf16 unless the
activations are narrower (then it follows them). `load_any_spec` (`llmsim show`) takes a
reference that may name either a model or an accelerator. `make_speculative` adds a
`--speculative-config`'s draft to a cost model (a draft model is looked up here).
"""

from __future__ import annotations

import os
from typing import Any

from simulator.cost.roofline import CostModel
from simulator.cost.speculative import SpeculativeDecoding
from simulator.specs.catalog import load_hardware, load_model
from simulator.specs.checks import SpecError, check_choice
from simulator.specs.dtypes import DTYPES, DTypes
from simulator.specs.hardware import HardwareSpec
from simulator.specs.model import ModelSpec
from simulator.specs.parallelism import Parallelism


def make_cost_model(model: str | os.PathLike | ModelSpec, hardware: str | os.PathLike | HardwareSpec, tp: int = 1, pp: int = 1,
                    weight_dtype: str | None = None, activation_dtype: str | None = None,
                    kv_dtype: str | None = None, ideal: bool = False,
                    efficiency: dict[str, float] | None = None, link_dtype: str | None = None, *,
                    ep: int = 1, pp_microbatches: int = 1, expert_imbalance: float = 1.0,
                    dp_attention: int = 1, pp_interleaved: bool = False) -> CostModel:
    """Convenience constructor from plain values (the CLI and notebooks use this).

    `model` / `hardware`: a spec, catalog id, alias or file path (str or pathlib.Path); every
    argument is checked before use (one-line SpecError naming it)."""
    m = load_model(model)
    hw = load_hardware(hardware)
    for name, value in (("weight_dtype", weight_dtype), ("activation_dtype", activation_dtype), ("kv_dtype", kv_dtype)):
        if value is not None:
            check_choice(name, value, DTYPES)
    # the checkpoint's formats where none is given (W8A8 FP8 checkpoints: fp8 activations)
    w, a = m.run_formats(weight_dtype, activation_dtype)
    # vLLM keeps --kv-cache-dtype separate from the compute dtype: KV stays 16-bit unless asked
    kv = kv_dtype or "bf16"
    par = Parallelism(tp, pp, ep=ep, pp_microbatches=pp_microbatches, expert_imbalance=expert_imbalance,
                      dp_attention=dp_attention, pp_interleaved=pp_interleaved)
    return CostModel(m, hw, par, DTypes(w, a, kv),
                     ideal=ideal, efficiency=efficiency, link_dtype=link_dtype)


def make_speculative(target: CostModel, config: Any) -> SpeculativeDecoding | None:
    """Speculative decoding on the replica priced by `target` (`cost/speculative.py`) from a
    `--speculative-config` (JSON text, a mapping or a checked `SpeculativeConfig`); None when
    off. A draft model (method draft_model) is looked up here, by catalog id or file."""
    from simulator.specs.speculative import SpeculativeConfig, parse_speculative_config

    cfg = config if isinstance(config, SpeculativeConfig) else parse_speculative_config(config)
    if cfg is None:
        return None
    draft = None
    if cfg.method == "draft_model":
        try:
            draft = load_model(str(cfg.model))
        except SpecError as e:
            raise SpecError(f"speculative_config.model: {e}") from None
    return SpeculativeDecoding(target, cfg, draft)


__all__ = ["load_any_spec", "make_cost_model", "make_speculative"]


#: keys only a hardware YAML has (a YAML with any of them is read as hardware by `load_any_spec`)
HARDWARE_KEYS = {"peak_flops_per_s", "hbm_capacity_bytes", "hbm_bandwidth_bytes_per_s", "base",
                 "link_bandwidth_bytes_per_s", "link_latency_s", "vendor", "tdp_w", "efficiency",
                 "price_per_gpu_hour_usd", "form_factor"}


def load_any_spec(ref: str) -> ModelSpec | HardwareSpec:
    """A model or hardware spec from an id, alias or file (a YAML's keys tell which)."""
    from pathlib import Path

    from simulator.specs.catalog import (
        hardware_catalog,
        model_catalog,
        read_yaml,
        resolve_hardware_id,
    )
    from simulator.specs.checks import show
    from simulator.specs.fields import _did_you_mean

    if resolve_hardware_id(ref) is not None:
        return load_hardware(ref)
    path = Path(ref)
    try:
        is_file, exists = path.is_file(), path.exists()
    except (OSError, ValueError):  # a name the OS refuses (too long, NUL byte): not a file
        is_file = exists = False
    if is_file and path.suffix.lower() in (".yaml", ".yml"):
        data = read_yaml(path)
        if isinstance(data, dict) and HARDWARE_KEYS & set(map(str, data)):
            return load_hardware(ref)
        return load_model(ref)
    try:
        return load_model(ref)
    except SpecError:
        if exists:
            raise
    ids = [*model_catalog(), *hardware_catalog()]
    raise SpecError(f"show: {show(ref)} is not a model or hardware id, alias or file"
                    f"{_did_you_mean(ref, ids)}; see `llmsim models` and `llmsim hardware`")
