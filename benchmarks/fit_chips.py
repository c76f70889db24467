"""Fit chip efficiencies and engine kernel numbers to the static rows of the new data (issue 22).

    python benchmarks/fit_chips.py [--dry-run] [--loo] [--json OUT.json] [--write]

What is fitted (a handful of physical numbers, never a per-row table), on the static-batch
rows of `dev_llm_inference_bench.csv` (every chip of the catalog; `sn40l` is not one):

* per engine profile (`engine_specs/<id>.yaml`, `overheads`): `step_overhead_s` (host and launch
  work per forward pass) and `sequence_overhead_s` (host work per sequence per step: a Python
  engine loop's scheduling, sampling and detokenisation);
* per engine and chip family (`kernels.by_chip_class.<family>`, `profiles.profile.CLASS_FACTORS`):
  what that engine's kernels reach on that architecture relative to the chip's own efficiencies
  (`compute_relative`, `memory_relative`), whether its decode attention shares a GQA group's KV
  (`gqa_kv_sharing`), and the conversion rate of an fp8 KV cache it has no native path for
  (`kv_dequant_rate_fp8`) with one thread block's rate of it (`kv_dequant_block_rate_fp8`: the
  floor of a batch too small to fill the chip);
* per chip without earlier fits (`hardware_specs/<id>.yaml`, `efficiency`): `compute_efficiency`
  (attention tied to it) and `memory_efficiency`, for the chips listed in `CHIP_PARAMS`.

H100 and A100 keep the efficiencies fitted on dev.csv (`benchmarks/fit_defaults.py`): the new
numbers are the engines' deviations from them, so dev.csv cannot move. The fit is
Levenberg-Marquardt on the log error of every row (`analysis.fitting.levenberg_marquardt`),
each (chip, engine) group weighted equally, parameters in bounded transforms.

`--loo`: leave-one-hardware-out (refit without the chip; a number only that chip informs takes
the value the copy rule gives: `COPY_CHIP` for its efficiencies, `COPY_CLASS` for its family's
engine factors) and leave-one-source-out (the same per source file), each scored on the rows
held out. `--write` puts the fitted numbers into the YAMLs with `sources` entries.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import sys
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulator.analysis.calibrate import StaticFitSet  # noqa: E402
from simulator.analysis.fitting import levenberg_marquardt  # noqa: E402
from simulator.analysis.measurements import read_measurements  # noqa: E402
from simulator.analysis.validate import Validator  # noqa: E402
from simulator.profiles.profile import chip_class, load_engine  # noqa: E402
from simulator.specs.catalog import hardware_catalog  # noqa: E402

DATA = Path("/work/shared/reference/measurements")
STATIC_FILE = "dev_llm_inference_bench.csv"

#: chips whose own efficiencies are fitted here (the others keep their YAML values)
CHIP_PARAMS: dict[str, tuple[str, ...]] = {
    "gh200": ("compute_efficiency", "memory_efficiency"),
    "mi250": ("compute_efficiency", "memory_efficiency"),
    "gaudi2": ("compute_efficiency", "memory_efficiency"),
}
#: chips left out of the fit: Max 1550's rows (vLLM XPU, llama.cpp SYCL) sit 25x under its HBM
#: roofline, which no efficiency in (0, 1] of this model explains (docs/limits.md)
EXCLUDED_CHIPS = ("max1550",)
#: engine profiles whose per-step and per-sequence overheads are fitted
ENGINE_PARAMS: dict[str, tuple[str, ...]] = {
    "vllm-v0": ("step_overhead_s", "sequence_overhead_s"),
    "vllm-v0-rocm": ("step_overhead_s", "sequence_overhead_s"),
    "trtllm-static": ("step_overhead_s", "sequence_overhead_s"),
    "llama.cpp": ("step_overhead_s",),
    "deepspeed": ("step_overhead_s", "sequence_overhead_s"),
}
#: (engine, chip family) -> factors fitted (profiles.profile.CLASS_FACTORS)
CLASS_PARAMS: dict[tuple[str, str], tuple[str, ...]] = {
    ("vllm-v0-rocm", "cdna3"): ("compute_relative", "gqa_kv_sharing", "kernel_overhead_s", "allreduce_latency_s"),
    ("vllm-v0-rocm", "cdna2"): ("gqa_kv_sharing", "kernel_overhead_s", "allreduce_latency_s"),
    ("vllm-v0", "ampere"): ("kv_dequant_rate_fp8", "kv_dequant_block_rate_fp8"),
    # Hopper converts fp8 in hardware (cvt e4m3x2): its batch-1 pairs differ by +-0.2 ms a step,
    # the noise, so no block floor is fitted there
    ("vllm-v0", "hopper"): ("kv_dequant_rate_fp8",),
    ("llama.cpp", "cdna3"): ("memory_relative", "gqa_kv_sharing", "kernel_overhead_s"),
    ("llama.cpp", "cdna2"): ("memory_relative", "gqa_kv_sharing", "kernel_overhead_s"),
    ("llama.cpp", "hopper"): ("memory_relative", "gqa_kv_sharing", "kernel_overhead_s"),
    ("llama.cpp", "ampere"): ("memory_relative", "gqa_kv_sharing", "kernel_overhead_s"),
    ("deepspeed", "gaudi"): ("step_overhead_s",),
}
#: a chip held out takes these chips' efficiencies (the catalog's copy rule)
COPY_CHIP = {"gh200": "h100-sxm", "mi250": "mi300x", "gaudi2": "h100-sxm", "max1550": "h100-sxm",
             "mi300x": "h100-sxm", "a100-sxm-40gb": "a100-sxm-80gb", "h100-sxm": "h200-sxm"}
#: a family without data takes the nearest family's engine factors
COPY_CLASS = {"cdna3": "cdna2", "cdna2": "cdna3", "hopper": "ampere", "ampere": "hopper",
              "gaudi": None, "xe-hpc": None}

START = {"compute_efficiency": 0.45, "memory_efficiency": 0.75, "step_overhead_s": 2e-3,
         "kernel_overhead_s": 1e-5, "allreduce_latency_s": 2e-5,
         "sequence_overhead_s": 5e-5, "compute_relative": 0.5, "memory_relative": 0.7,
         "gqa_kv_sharing": 0.5, "kv_dequant_rate_fp8": 1e11, "kv_dequant_block_rate_fp8": 1e9,
         "attention_relative": 0.5}
FRACTIONS = ("compute_efficiency", "memory_efficiency", "compute_relative", "memory_relative",
             "gqa_kv_sharing", "attention_relative")


def to_x(name: str, v: float) -> float:
    kind = name.rsplit(":", 1)[-1]
    if kind in FRACTIONS:
        q = min(max(v, 1e-4), 1 - 1e-4)
        return math.log(q / (1 - q))
    return math.log(max(v, 1e-12) / START[kind])


def to_v(name: str, x: float) -> float:
    kind = name.rsplit(":", 1)[-1]
    x = max(min(x, 40.0), -40.0)
    if kind in FRACTIONS:
        return 1.0 / (1.0 + math.exp(-x))
    return START[kind] * math.exp(x)


class Group:
    """The static rows of one (hardware, engine profile) pair, decomposed (`StaticFitSet`)."""

    def __init__(self, hw: str, engine: str, rows: list[dict], validator: Validator) -> None:
        self.hw, self.engine, self.cls = hw, engine, chip_class(hw) or ""
        # 17 decode nodes: the trapezoid sum of the piecewise-linear step time is within ~0.3 %
        # of the exact one (the shipped calibrate uses 65); the fit is 4x faster
        self.fs = StaticFitSet(rows, validator, decode_nodes=17)
        prof = load_engine(engine)
        # the chip's own YAML: the fit's numbers replace the engine's overheads and factors
        self.base = hardware_catalog()[hw] if self.fs.rows else None
        self.profile = prof
        self.sources = np.array(self.fs.sources)

    def params(self, v: Mapping[str, float], chips: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
        """Per-group efficiency parameters from fitted values `v` (names `chip:..`, `eng:..`,
        `cls:..`) and chip values `chips` (the YAML's or a copy)."""
        assert self.base is not None
        e = self.base.efficiency
        chip = chips.get(self.hw, {})
        ce = chip.get("compute_efficiency", hardware_catalog()[self.hw].efficiency.compute_efficiency)
        me = chip.get("memory_efficiency", hardware_catalog()[self.hw].efficiency.memory_efficiency)
        ae = chip.get("attention_efficiency", ce if "compute_efficiency" in chip else
                      hardware_catalog()[self.hw].efficiency.attention_efficiency)
        for k in ("compute_efficiency", "memory_efficiency"):
            if f"chip:{self.hw}:{k}" in v:
                if k == "compute_efficiency":
                    ce = ae = v[f"chip:{self.hw}:{k}"]
                else:
                    me = v[f"chip:{self.hw}:{k}"]
        cls = f"cls:{self.engine}:{self.cls}:"
        p = {"compute_efficiency": ce * v.get(cls + "compute_relative", 1.0),
             "memory_efficiency": me * v.get(cls + "memory_relative", 1.0),
             "attention_efficiency": ae * v.get(cls + "attention_relative", 1.0),
             "gemm_ramp_tokens": e.gemm_ramp_tokens * v.get(cls + "compute_relative", 1.0),
             "kernel_overhead_s": v.get(cls + "kernel_overhead_s", e.kernel_overhead_s),
             "link_efficiency": e.link_efficiency,
             "link_latency_s": v.get(cls + "allreduce_latency_s", self.base.link_latency_s),
             "step_overhead_s": v.get(cls + "step_overhead_s", v.get(f"eng:{self.engine}:step_overhead_s",
                                                                    e.step_overhead_s)),
             "sequence_overhead_s": v.get(f"eng:{self.engine}:sequence_overhead_s", e.sequence_overhead_s),
             "gqa_kv_sharing": v.get(cls + "gqa_kv_sharing", e.gqa_kv_sharing),
             "kv_dequant_rate": v.get(cls + "kv_dequant_rate_fp8", e.kv_dequant_rate_by_kv_dtype.get("fp8", 0.0)),
             "kv_dequant_block_rate": v.get(cls + "kv_dequant_block_rate_fp8",
                                            e.kv_dequant_block_rate_by_kv_dtype.get("fp8", 0.0))}
        p["compute_efficiency"] = min(p["compute_efficiency"], 1.0)
        p["memory_efficiency"] = min(p["memory_efficiency"], 1.0)
        p["attention_efficiency"] = min(p["attention_efficiency"], 1.0)
        return p

    def predict(self, v: Mapping[str, float], chips: Mapping[str, Mapping[str, float]]) -> np.ndarray:
        return self.fs.predict(self.params(v, chips))


def load_groups(path: Path, hardware: Sequence[str] | None = None) -> tuple[list[Group], list[dict]]:
    rows, skipped = read_measurements(path, skip_bad_rows=True)
    cat = hardware_catalog()
    rows = [r for r in rows if r["scenario"] == "static_batch" and r["hardware"] in cat
            and r["hardware"] not in EXCLUDED_CHIPS and (hardware is None or r["hardware"] in hardware)]
    v = Validator()
    # a prompt plus output beyond the model's context is not what the row says it ran (the
    # engine refuses or truncates; gpt-j and llama-1 at 2048 + 2048 report 3 % of the time a
    # full run takes): such rows would pull every shared number, so they are left out
    rows = [r for r in rows if _within_context(v, r)]
    by: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        by[(r["hardware"], v.engine_of(r))].append(r)
    groups = [Group(hw, eng, rs, v) for (hw, eng), rs in sorted(by.items())]
    return [g for g in groups if g.fs.rows], skipped


def _within_context(v: Validator, row: Mapping[str, Any]) -> bool:
    try:
        m = v.model(row["model"])
    except Exception:  # noqa: BLE001 (an unknown model is skipped later with its reason)
        return True
    return (row["input_len"] or 0) + (row["output_len"] or 0) <= m.max_context


def param_names(groups: Sequence[Group]) -> list[str]:
    """The fitted parameters the groups' data can inform."""
    names: list[str] = []
    hws = {g.hw for g in groups}
    for hw, ks in CHIP_PARAMS.items():
        if hw in hws:
            names += [f"chip:{hw}:{k}" for k in ks]
    engines = {g.engine for g in groups}
    for eng, ks in ENGINE_PARAMS.items():
        if eng in engines:
            names += [f"eng:{eng}:{k}" for k in ks]
    pairs = {(g.engine, g.cls) for g in groups}
    narrow = {(g.engine, g.cls) for g in groups if g.fs.narrow_kv.any()}
    for (eng, cls), ks in CLASS_PARAMS.items():
        if (eng, cls) in pairs:
            names += [f"cls:{eng}:{cls}:{k}" for k in ks if not k.startswith("kv_dequant") or (eng, cls) in narrow]
    return names


def touches(name: str, g: Group) -> bool:
    kind, *rest = name.split(":")
    if kind == "chip":
        return g.hw == rest[0]
    if kind == "eng":
        return g.engine == rest[0]
    return g.engine == rest[0] and g.cls == rest[1]


class Fit:
    """Levenberg-Marquardt over `names` on `groups` (each group's rows weigh 1 in total)."""

    def __init__(self, groups: Sequence[Group], names: Sequence[str], chips: Mapping[str, Mapping[str, float]],
                 fixed: Mapping[str, float] | None = None) -> None:
        self.groups, self.names, self.chips = list(groups), list(names), chips
        self.fixed = dict(fixed or {})
        self.w = [np.full(len(g.fs.rows), 1.0 / math.sqrt(len(g.fs.rows))) for g in self.groups]
        self.touch = {n: [i for i, g in enumerate(self.groups) if touches(n, g)] for n in self.names}

    def values(self, x: np.ndarray) -> dict[str, float]:
        return {**self.fixed, **{n: to_v(n, float(xi)) for n, xi in zip(self.names, x, strict=True)}}

    def group_res(self, i: int, v: Mapping[str, float]) -> np.ndarray:
        g = self.groups[i]
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.log(g.predict(v, self.chips) / g.fs.measured)
        return np.where(np.isfinite(r), r, 10.0) * self.w[i]

    def run(self, start: Mapping[str, float] | None = None) -> dict[str, float]:
        start = start or {}
        x0 = np.array([to_x(n, start.get(n, START[n.rsplit(':', 1)[-1]])) for n in self.names])
        cache: dict[bytes, list[np.ndarray]] = {}

        def residuals(x: np.ndarray) -> np.ndarray:
            # recompute only the groups whose parameters moved since the cached base point
            v = self.values(x)
            base = cache.get(b"base")
            if base is not None:
                bx = cache[b"x"][0]
                moved = {i for j, n in enumerate(self.names) if x[j] != bx[j] for i in self.touch[n]}
                parts = [self.group_res(i, v) if i in moved else base[i] for i in range(len(self.groups))]
            else:
                parts = [self.group_res(i, v) for i in range(len(self.groups))]
            return np.concatenate(parts)

        def set_base(x: np.ndarray) -> None:
            v = self.values(x)
            cache[b"base"] = [self.group_res(i, v) for i in range(len(self.groups))]
            cache[b"x"] = [x.copy()]

        x = x0
        for _ in range(6):  # LM with the cached base refreshed at each accepted point
            set_base(x)
            x_new, _ = levenberg_marquardt(residuals, x, max_iter=8)
            if np.allclose(x_new, x, atol=1e-6):
                break
            x = x_new
        return self.values(x)


def chip_values() -> dict[str, dict[str, float]]:
    """The catalog's efficiencies per chip (what a chip not fitted here keeps)."""
    out = {}
    for hw, spec in hardware_catalog().items():
        e = spec.efficiency
        out[hw] = {"compute_efficiency": e.compute_efficiency, "memory_efficiency": e.memory_efficiency,
                   "attention_efficiency": e.attention_efficiency}
    return out


def errors(groups: Sequence[Group], v: Mapping[str, float], chips: Mapping[str, Mapping[str, float]]) -> list[dict]:
    """Per row: id, hardware, engine, batch, metric, measured, predicted, error %."""
    out = []
    for g in groups:
        pred = g.predict(v, chips)
        for r, p in zip(g.fs.rows, pred, strict=True):
            out.append({"id": r["id"], "hardware": g.hw, "engine": g.engine, "source": r["source"],
                        "batch": r["batch_size"], "metric": r["metric"], "measured": r["value"],
                        "predicted": float(p), "error_pct": (float(p) - r["value"]) / r["value"] * 100})
    return out


def table(points: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> list[dict]:
    by: dict[tuple, list[float]] = defaultdict(list)
    for p in points:
        by[tuple(p[k] for k in keys)].append(p["error_pct"])
    return [{**dict(zip(keys, k, strict=True)), "rows": len(e), "median_ape": float(np.median(np.abs(e))),
             "median_signed": float(np.median(e))} for k, e in sorted(by.items(), key=lambda kv: str(kv[0]))]


def fallback(v: Mapping[str, float], held_hw: str | None, names_all: Sequence[str],
             chips: dict[str, dict[str, float]]) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Values for parameters the training rows did not inform: the copy rules."""
    out = dict(v)
    ch = {k: dict(x) for k, x in chips.items()}
    if held_hw is not None and held_hw in COPY_CHIP:
        src = COPY_CHIP[held_hw]
        srcv = dict(ch.get(src, {}))
        for k in ("compute_efficiency", "memory_efficiency"):
            if f"chip:{src}:{k}" in v:
                srcv[k] = v[f"chip:{src}:{k}"]
                if k == "compute_efficiency":
                    srcv["attention_efficiency"] = srcv[k]
        ch[held_hw] = srcv
    for n in names_all:
        if n in out:
            continue
        kind, *rest = n.split(":")
        if kind == "cls":
            eng, cls, k = rest
            near = COPY_CLASS.get(cls)
            alt = f"cls:{eng}:{near}:{k}" if near else None
            if alt and alt in v:
                out[n] = v[alt]
    return out, ch


def leave_out(groups: Sequence[Group], key: Callable[[Group], str] | None, by_source: bool,
              chips: dict[str, dict[str, float]], v_all: Mapping[str, float],
              free: Sequence[str] | None = None) -> list[dict]:
    """Leave-one-hardware-out (key = chip) or leave-one-source-out (by_source); `free`: only
    these parameters are refitted, the others stay at `v_all`."""
    def names_of(gs: Sequence[Group]) -> list[str]:
        return [n for n in param_names(gs) if free is None or n in free]

    fixed = {k: x for k, x in v_all.items() if free is not None and k not in free}
    names_all = names_of(groups)
    out: list[dict] = []
    if by_source:
        sources = sorted({s for g in groups for s in g.fs.sources})
        for src in sources:
            train = [g for g in groups if (g.sources != src).any()]
            held_pts = []
            tr_groups = [_subset(g, g.sources != src) for g in train]
            tr_groups = [g for g in tr_groups if g.fs.rows]
            names = names_of(tr_groups)
            v = Fit(tr_groups, names, chips, fixed).run(v_all)
            v, ch = fallback(v, None, names_all, chips)
            for g in groups:
                mask = g.sources == src
                if mask.any():
                    held_pts += errors([_subset(g, mask)], v, ch)
            out.append({"held_out": src, "rows": len(held_pts),
                        "median_ape": float(np.median(np.abs([p["error_pct"] for p in held_pts])))})
        return out
    assert key is not None
    for hw in sorted({key(g) for g in groups}):
        train = [g for g in groups if key(g) != hw]
        names = names_of(train)
        v = Fit(train, names, chips, fixed).run(v_all)
        v, ch = fallback(v, hw, names_all, chips)
        held = errors([g for g in groups if key(g) == hw], v, ch)
        out.append({"held_out": hw, "rows": len(held),
                    "median_ape": float(np.median(np.abs([p["error_pct"] for p in held]))),
                    "median_signed": float(np.median([p["error_pct"] for p in held]))})
    return out


def _subset(g: Group, mask: np.ndarray) -> Group:
    """A group restricted to the rows `mask` keeps (re-decomposed: cheap at this size)."""
    sub = Group.__new__(Group)
    sub.hw, sub.engine, sub.cls, sub.base, sub.profile = g.hw, g.engine, g.cls, g.base, g.profile
    sub.fs = g.fs if mask.all() else _restrict(g.fs, mask)
    sub.sources = np.array(sub.fs.sources)
    return sub


def _restrict(fs: StaticFitSet, mask: np.ndarray) -> StaticFitSet:
    """`fs` predicting only the rows `mask` keeps (the columns stay; predict indexes rows)."""
    out = StaticFitSet.__new__(StaticFitSet)
    out.__dict__.update(fs.__dict__)
    keep = np.flatnonzero(mask)
    out.rows = [fs.rows[i] for i in keep]
    out.idx = fs.idx[keep]
    out.metric = [fs.metric[i] for i in keep]
    out.measured = fs.measured[keep]
    out.replicas = fs.replicas[keep]
    out.num_gpus = fs.num_gpus[keep]
    out.sources = [fs.sources[i] for i in keep]
    return out


# --------------------------------------------------------------------------- writing


def fmt_num(x: float) -> float:
    """4 significant digits; a value the fit drove to its bound 0 (below 1e-9) is written as 0."""
    return 0.0 if abs(x) < 1e-9 else float(f"{x:.4g}")


def write_engine(eng: str, v: Mapping[str, float], note: str) -> None:
    """Put the fitted overheads and family factors of `eng` into engine_specs/<eng>.yaml."""
    path = ROOT / "engine_specs" / f"{eng}.yaml"
    text = path.read_text(encoding="utf-8")
    for k in ENGINE_PARAMS.get(eng, ()):
        name = f"eng:{eng}:{k}"
        if name not in v:
            continue
        line = (f"  {k}: {{value: {fmt_num(v[name])}, status: \"fitted (benchmarks/fit_chips.py)\", "
                f"note: \"{note}\"}}")
        # the entry may be a flow mapping over several lines: everything up to its closing brace
        text, n = re.subn(rf"^  {k}: \{{[^}}]*\}}[ \t]*$", line, text, count=1, flags=re.M)
        if not n:
            text = re.sub(r"^overheads:\s*$", "overheads:\n" + line, text, count=1, flags=re.M)
        text = _set_source(text, f"overheads.{k}", note)
    classes: dict[str, dict[str, float]] = defaultdict(dict)
    for name, val in v.items():
        if name.startswith(f"cls:{eng}:"):
            _, _, cls, k = name.split(":")
            classes[cls][k] = val
    if classes:
        block = ["  by_chip_class:"]
        for cls in sorted(classes):
            block.append(f"    {cls}:")
            for k, val in sorted(classes[cls].items()):
                block.append(f"      {k}: {{value: {fmt_num(val)}, status: \"fitted (benchmarks/fit_chips.py)\"}}")
        text = re.sub(r"^  by_chip_class:\n(?:    [^\n]*\n)*", "", text, flags=re.M)
        if re.search(r"^kernels: \{\}\s*$", text, flags=re.M):
            text = re.sub(r"^kernels: \{\}\s*$", "kernels:\n" + "\n".join(block), text, count=1, flags=re.M)
        elif re.search(r"^kernels:\s*$", text, flags=re.M):
            text = re.sub(r"^kernels:\s*$", "kernels:\n" + "\n".join(block), text, count=1, flags=re.M)
        else:
            text = text.replace("\nsources:\n", "\nkernels:\n" + "\n".join(block) + "\n\nsources:\n", 1)
        text = _set_source(text, "kernels.by_chip_class", note)
    path.write_text(text, encoding="utf-8")


def _set_source(text: str, key: str, note: str) -> str:
    line = f"  {key}: {json.dumps(note)}"
    text, n = re.subn(rf"^  {re.escape(key)}: [^\n]*$", line, text, count=1, flags=re.M)
    if not n:
        text = text.rstrip("\n") + "\n" + line + "\n"
    return text


def write_chip(hw: str, v: Mapping[str, float], note: str) -> None:
    """The fitted efficiencies of `hw` into its YAML's efficiency block (sources updated)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from fit_defaults import replace_efficiency_block  # noqa: PLC0415

    path = ROOT / "hardware_specs" / f"{hw}.yaml"
    text = path.read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    eff = dict(data.get("efficiency") or {})
    src = dict(eff.pop("sources", {}) or {})
    for k in ("compute_efficiency", "memory_efficiency"):
        if f"chip:{hw}:{k}" in v:
            eff[k] = fmt_num(v[f"chip:{hw}:{k}"])
            src[k] = note
    if f"chip:{hw}:compute_efficiency" in v:
        eff["attention_efficiency"] = eff["compute_efficiency"]
        src["attention_efficiency"] = "tied to compute_efficiency (" + note + ")"
    eff["sources"] = src
    path.write_text(replace_efficiency_block(text, eff, path), encoding="utf-8")


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--loo", action="store_true", help="leave-one-hardware-out and leave-one-source-out")
    ap.add_argument("--write", action="store_true", help="write the fitted numbers into the YAMLs")
    ap.add_argument("--json", type=Path, help="write the result (values, tables, leave-one-out) here")
    ap.add_argument("--hardware", help="comma-separated hardware ids to fit on (default: all)")
    ap.add_argument("--from-json", type=Path, help="take the values of an earlier --json instead of fitting")
    ap.add_argument("--free", help="comma-separated parameter names (as printed) to fit, every other one "
                                   "fixed at --from-json's values (a new parameter, fitted alone)")
    args = ap.parse_args(argv)
    groups, _ = load_groups(args.data / STATIC_FILE, args.hardware.split(",") if args.hardware else None)
    chips = chip_values()
    names = param_names(groups)
    free = args.free.split(",") if args.free else None
    if free is not None:
        unknown = [n for n in free if n not in names]
        if not args.from_json or unknown:
            ap.error(f"--free needs --from-json and parameters of this data; unknown: {', '.join(unknown) or '-'}")
    if args.from_json:
        v = {k: float(x) for k, x in json.loads(args.from_json.read_text(encoding="utf-8"))["values"].items()}
        if free is not None:
            fixed = {k: x for k, x in v.items() if k not in free}
            v = Fit(groups, free, chips, fixed).run({**{n: START[n.rsplit(':', 1)[-1]] for n in free}, **v})
    else:
        v = Fit(groups, names, chips).run()
    pts = errors(groups, v, chips)
    print("fitted:")
    for n in names:
        if n in v:
            print(f"  {n:50s} {v[n]:.4g}" + ("  (fitted here)" if free and n in free else ""))
    ape = np.median(np.abs([p["error_pct"] for p in pts]))
    print(f"\nall static rows: {len(pts)}, median APE {ape:.1f} %")
    for t in (table(pts, ["hardware"]), table(pts, ["hardware", "engine"]), table(pts, ["hardware", "engine", "batch"])):
        for r in t:
            print("  " + "  ".join(f"{r[k]:.1f}" if isinstance(r[k], float) else str(r[k]) for k in r))
        print()
    result: dict[str, Any] = {"values": {n: v[n] for n in names if n in v}, "free": free, "by_hardware": table(pts, ["hardware"]),
                              "by_hardware_engine": table(pts, ["hardware", "engine"]),
                              "by_hardware_engine_batch": table(pts, ["hardware", "engine", "batch"]),
                              "rows": len(pts), "median_ape": float(ape)}
    if args.write:
        date = datetime.date.today().isoformat()
        note = (f"benchmarks/fit_chips.py: Levenberg-Marquardt on log error, static rows of "
                f"shared/reference/measurements/{STATIC_FILE} ({len(pts)} rows, every (chip, engine) group "
                f"weighted equally), {date}")
        for eng in sorted({n.split(':')[1] for n in names if n.startswith(('eng:', 'cls:'))}):
            write_engine(eng, v, note)
        for hw in sorted({n.split(':')[1] for n in names if n.startswith('chip:')}):
            write_chip(hw, v, note)
    if args.loo:
        loho = leave_out(groups, lambda g: g.hw, False, chips, v, free)
        loso = leave_out(groups, None, True, chips, v, free)
        result["leave_one_hardware_out"] = loho
        result["leave_one_source_out"] = loso
        for r in loho + loso:
            print(f"  held out {r['held_out']}: {r['rows']} rows, median APE {r['median_ape']:.1f} %")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
