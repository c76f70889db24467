"""Goodput SLOs: vLLM's `--goodput KEY:MS ...` syntax and the named SLO presets.

A request is *good* (DistServe; `vllm bench serve --goodput`) when every metric given is
at most its bound: TTFT <= ttft, TPOT <= tpot, E2EL <= e2el (milliseconds on the command
line, seconds inside the simulator). `parse_goodput` accepts every spelling a user brings:
a string ``"ttft:500 tpot:50"`` (spaces or commas), a list of ``KEY:MS`` items (vLLM's
space-separated nargs form or the repeated-flag form), or a mapping ``{ttft: 500}``.

Presets (`--slo NAME`) bundle SLOs for the seed's use cases with the metric a `sweep` finds
the knee of and the good fraction `sweep`/`plan` require (`slo_target`). An explicit
`--goodput` replaces the preset's SLOs; an explicit `--slo-target` its target. The numbers
are round, documented starting points (docs/concepts.md), not measured user tolerances.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from simulator.specs.checks import SpecError

SLO_KEYS = ("ttft", "tpot", "e2el")
_ITEM = re.compile(r"\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*[:=]\s*(\S+)\s*")


def _items(items: Any) -> list[str]:
    if isinstance(items, str):
        return items.replace(",", " ").split()
    if isinstance(items, dict):
        return [f"{k}:{v}" for k, v in items.items()]
    if isinstance(items, (list, tuple)):
        out: list[str] = []
        for it in items:  # a list may hold "ttft:500 tpot:50" strings (a quoted CLI value)
            out.extend(_items(it) if isinstance(it, str) else [str(it)])
        return out
    raise SpecError(f"goodput: {items!r} is not KEY:MS items (KEY one of {', '.join(SLO_KEYS)}), e.g. ttft:500")


def parse_goodput(items: Any) -> dict[str, float]:
    """vLLM's `--goodput ttft:500 tpot:50 e2el:2000` (ms) -> {metric: seconds}."""
    if items is None:
        return {}
    out: dict[str, float] = {}
    for it in _items(items):
        m = _ITEM.fullmatch(it)
        if not m:
            raise SpecError(f"goodput: {it!r} is not KEY:MS (KEY one of {', '.join(SLO_KEYS)}), e.g. ttft:500")
        key, val = m.group(1).lower(), m.group(2)
        if key not in SLO_KEYS:
            raise SpecError(f"goodput: unknown metric {key!r}; allowed: {', '.join(SLO_KEYS)}")
        try:
            v = float(val)
        except ValueError:
            raise SpecError(f"goodput: {key} value {val!r} is not a number of milliseconds") from None
        if not math.isfinite(v) or v <= 0:
            raise SpecError(f"goodput: {key} value {val!r} must be a positive number of milliseconds")
        out[key] = v / 1e3
    return out


def goodput_ms(items: Any) -> dict[str, float]:
    """Like `parse_goodput`, in milliseconds (the unit a `Scenario` keeps)."""
    return {k: v * 1e3 for k, v in parse_goodput(items).items()}


@dataclass(frozen=True)
class SloPreset:
    """A named SLO set: the goodput bounds (ms), the p99 metric whose knee a sweep reports,
    and the fraction of requests that must be good (`slo_target`)."""

    name: str
    goodput_ms: dict
    knee_metric: str
    slo_target: float
    use: str


SLO_PRESETS: dict[str, SloPreset] = {p.name: p for p in (
    SloPreset("chat", {"ttft": 1000.0, "tpot": 100.0}, "ttft", 0.99,
              "interactive chat: the first token within 1 s, then faster than reading speed"),
    SloPreset("code", {"ttft": 500.0, "tpot": 50.0, "e2el": 5000.0}, "ttft", 0.99,
              "code completion: short answers wanted almost at once, whole answer within 5 s"),
    SloPreset("batch", {"e2el": 600000.0}, "e2el", 0.9,
              "offline batch: throughput-led; only that a request finishes within 10 minutes"),
    SloPreset("agent", {"ttft": 2000.0, "tpot": 50.0, "e2el": 20000.0}, "e2el", 0.99,
              "agent loops: goodput-led; many dependent calls, so each whole call within 20 s"),
)}


def slo_preset(name: str) -> SloPreset:
    p = SLO_PRESETS.get(str(name).lower())
    if p is None:
        raise SpecError(f"slo: {name!r} is not a preset; allowed: {', '.join(SLO_PRESETS)}")
    return p


__all__ = ["SLO_KEYS", "SLO_PRESETS", "SloPreset", "parse_goodput", "goodput_ms", "slo_preset"]
