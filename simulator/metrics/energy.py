"""Energy and electricity cost per token: a rough power model from the hardware spec.

Each GPU draws idle power when no step runs and, during a step, power rising linearly with
the step's utilisation u (the larger of its MFU and MBU) up to the board power (TDP):

    P(u) = P_idle + (P_TDP - P_idle) * u,            P_idle = IDLE_FRACTION * P_TDP

Over a run of duration D on R replicas of g GPUs each, with busy_s replica-seconds of steps
(`SimResult.meta["busy_s"]`) and u_busy their time-weighted mean utilisation:

    E = g * (P_idle * R * D + (P_TDP - P_idle) * u_busy * busy_s)         [J]
    joules_per_output_token = E / output tokens
    energy_usd_per_million_output_tokens = E / 3.6e6 [kWh] * USD_PER_KWH / output tokens * 1e6
    gpu_usd_per_million_output_tokens = price_per_gpu_hour * g * R * D / 3600 / output tokens * 1e6

u_busy is `meta["busy_utilization"]` when the engine reports it; otherwise 1 (a busy GPU
at TDP), an upper bound: decode steps are memory-bound and in practice draw well under TDP.
How rough this is (docs/concepts.md): board power only (no CPU, network, cooling: multiply
by the site's PUE), a linear power curve, and an idle fraction that is an assumption, not a
measurement (`IDLE_FRACTION`, when the hardware YAML has no `idle_w`).
"""

from __future__ import annotations

import math
from typing import Any

#: Idle draw as a fraction of TDP when the spec gives none: a GPU holding a loaded model and
#: its KV cache between steps (H100 SXM: ~100-150 W of 700 W); an assumption, not fitted.
IDLE_FRACTION = 0.2
#: Electricity price for the $ figures (US industrial average order of magnitude).
USD_PER_KWH = 0.10
J_PER_KWH = 3.6e6


def power_w(tdp_w: float, utilization: float, idle_w: float | None = None) -> float:
    """P(u) = P_idle + (P_TDP - P_idle) * u, u clipped to [0, 1]."""
    idle = IDLE_FRACTION * tdp_w if idle_w is None else idle_w
    u = min(max(utilization, 0.0), 1.0)
    return idle + (tdp_w - idle) * u


def run_energy(hardware: Any, meta: dict[str, Any], duration_s: float, output_tokens: int,
               usd_per_kwh: float = USD_PER_KWH) -> dict[str, Any]:
    """The energy keys of a run's summary (None when the hardware has no `tdp_w`)."""
    tdp = getattr(hardware, "tdp_w", None)
    keys = ("energy_j", "mean_power_w_per_gpu", "joules_per_output_token",
            "energy_usd_per_million_output_tokens", "gpu_usd_per_million_output_tokens")
    if not tdp or not (duration_s > 0) or not math.isfinite(duration_s):
        return {k: None for k in keys}
    idle = getattr(hardware, "idle_w", None) or IDLE_FRACTION * tdp
    gpus = int(meta.get("gpus_per_replica", 1))
    replicas = int(meta.get("num_replicas", 1))
    busy_s = float(meta.get("busy_s", 0.0))
    u = float(meta.get("busy_utilization", 1.0))
    energy = gpus * (idle * replicas * duration_s + (tdp - idle) * min(max(u, 0.0), 1.0) * busy_s)
    per_tok = energy / output_tokens if output_tokens else None
    price = getattr(hardware, "price_per_gpu_hour_usd", None)
    gpu_hours = gpus * replicas * duration_s / 3600.0
    return {
        "energy_j": energy,
        "mean_power_w_per_gpu": energy / (gpus * replicas * duration_s),
        "joules_per_output_token": per_tok,
        "energy_usd_per_million_output_tokens": (per_tok * 1e6 / J_PER_KWH * usd_per_kwh
                                                 if per_tok is not None else None),
        "gpu_usd_per_million_output_tokens": (price * gpu_hours / output_tokens * 1e6
                                              if price and output_tokens else None),
    }


__all__ = ["power_w", "run_energy", "IDLE_FRACTION", "USD_PER_KWH"]
