"""A scenario's deployment shape: `disagg: "P:D"` and the per-pool `deployment:` section.

    disagg: "1:3"            # or --disagg 1:3
    deployment:
      prefill: {tp: 4, max_num_batched_tokens: 16384}
      decode: {tp: 8, hardware: h200-sxm, max_num_seqs: 512, router: least-outstanding}
      link: {kind: auto, efficiency: 0.8, latency_s: 1e-5, overhead_s: 0.001}

Each pool is the scenario with that pool's settings replaced (any of POOL_KEYS;
`Scenario.pool`), and `Scenario.run` serves the deployment; the link
defaults to NVLink when both pools fit in one node of the same hardware
(P tp_p pp_p + D tp_d pp_d <= gpus_per_node) and to the scale-out network otherwise
(`network.py`), with the hardware's fitted `link_efficiency` and no per-transfer overhead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simulator.cost.network import scaleout_link, scaleup_link
from simulator.cost.roofline import CostModel
from simulator.specs.checks import SpecError, is_number, show
from simulator.specs.fields import _did_you_mean

if TYPE_CHECKING:  # imported where a link is made: an aggregated run never loads the disagg engine
    from simulator.serving.disagg import KVLink

#: scenario settings a pool may override
POOL_KEYS = ("hardware", "tp", "pp", "ep", "pp_microbatches", "expert_imbalance", "dp_attention", "weight_dtype", "activation_dtype", "kv_dtype", "ideal", "efficiency",
             "router", "max_num_seqs", "max_num_batched_tokens", "scheduler", "block_size",
             "gpu_memory_utilization", "max_model_len", "kv_capacity_tokens")
LINK_KEYS = ("kind", "bandwidth_bytes_per_s", "efficiency", "latency_s", "overhead_s")
LINK_KINDS = ("auto", "nvlink", "scale-out")


def parse_disagg(text: Any) -> tuple[int, int]:
    """'P:D' -> (P, D), both integers >= 1."""
    parts = str(text).split(":")
    try:
        if len(parts) != 2:
            raise ValueError
        p, d = int(parts[0]), int(parts[1])
    except ValueError:
        raise SpecError(f"disagg: {text!r} must be P:D (prefill:decode replicas), e.g. 1:3") from None
    if p < 1 or d < 1:
        raise SpecError(f"disagg: {text!r} needs at least one prefill and one decode replica")
    return p, d


def check_deployment(dep: Any) -> None:
    """One-line errors for a malformed `deployment:` section."""
    if not isinstance(dep, dict):
        raise SpecError("deployment: must be a mapping with prefill:, decode: and link: sections")
    for k, v in dep.items():
        if k not in ("prefill", "decode", "link"):
            raise SpecError(f"deployment.{k}: unknown section{_did_you_mean(str(k), ['prefill', 'decode', 'link'])}; "
                            "allowed: prefill, decode, link")
        if not isinstance(v, dict):
            raise SpecError(f"deployment.{k}: must be a mapping of settings")
        allowed = LINK_KEYS if k == "link" else POOL_KEYS
        for key in v:
            if str(key).replace("-", "_") not in allowed:
                raise SpecError(f"deployment.{k}.{key}: unknown setting{_did_you_mean(str(key), allowed)}; "
                                f"allowed: {', '.join(allowed)}")
    kind = dep.get("link", {}).get("kind", "auto")
    if kind not in LINK_KINDS:
        raise SpecError(f"deployment.link.kind: {kind!r} is not one of {', '.join(LINK_KINDS)}")


def kv_link(prefill: CostModel, decode: CostModel, P: int, D: int, over: dict[str, Any] | None = None) -> KVLink:
    """The link KV crosses between the pools (module docstring)."""
    from simulator.serving.disagg import KVLink

    over = {str(k).replace("-", "_"): v for k, v in (over or {}).items()}
    hp, hd = prefill.hardware, decode.hardware
    gp, gd = prefill.par.num_gpus, decode.par.num_gpus
    kind = over.get("kind", "auto")
    if kind == "auto":
        one_node = hp.id == hd.id and P * gp + D * gd <= min(hp.gpus_per_node, hd.gpus_per_node)
        kind = "nvlink" if one_node else "scale-out"
    if kind == "nvlink":
        a, b = scaleup_link(hp), scaleup_link(hd)
    else:
        a, b = scaleout_link(hp), scaleout_link(hd)
    eff = min(hp.efficiency.link_efficiency, hd.efficiency.link_efficiency)
    for key in ("bandwidth_bytes_per_s", "efficiency", "latency_s", "overhead_s"):
        # a number, not its text or a bool: float() turned `overhead_s: true` into 1 s per transfer
        if key in over and not is_number(over[key]):
            raise SpecError(f"deployment.link.{key}: {show(over[key])} must be a number")
    try:
        values = (float(over.get("bandwidth_bytes_per_s", min(a.bandwidth_bytes_per_s, b.bandwidth_bytes_per_s))),
                  float(over.get("efficiency", eff)),
                  float(over.get("latency_s", max(a.latency_s, b.latency_s))), float(over.get("overhead_s", 0.0)))
    except (TypeError, ValueError):
        raise SpecError(f"deployment.link: {over!r}: every value but kind must be a number") from None
    bw, eta, lat, ovh = values
    try:  # the link's own domain check (`KVLink`), its message named as the scenario spells it
        return KVLink(kind, bw, min(gp, gd), eta, lat, ovh)
    except SpecError as e:
        raise SpecError(f"deployment.{e}") from None


def price_per_hour(pc: CostModel, dc: CostModel, P: int, D: int) -> float | None:
    a, b = pc.hardware.price_per_gpu_hour_usd, dc.hardware.price_per_gpu_hour_usd
    if a is None or b is None:
        return None
    return P * pc.par.num_gpus * a + D * dc.par.num_gpus * b
