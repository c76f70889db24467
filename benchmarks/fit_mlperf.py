"""Fit chip efficiencies and the MLPerf harness's kernel numbers to dev_mlperf51_offline.csv (issue 22).

    python benchmarks/fit_mlperf.py [--groups b200,hopper,...] [--quick N] [--loo] [--json OUT]
    python benchmarks/fit_mlperf.py --grid NAME=V1,V2,... [--grid ...] --chips A,B [--json OUT]

Each group is a handful of physical numbers fitted on the rows that inform them, every row
priced as `llmsim validate` prices it (`analysis/mlperf_rows.py`: the LoadGen run simulated,
the harness's row settings applied):

* `b200`, `gb200`, `gb300`, `rtx-pro-6000`: the chip's fp4 GEMM efficiency
  (`compute_efficiency_by_dtype.fp4`; the rows run W4A4 NVFP4) and memory efficiency, with the
  `trtllm-mlperf` profile's step overhead fitted on B200 (the most rows) and shared;
* `hopper`: the `trtllm-mlperf` profile's GEMM and HBM factors on the Hopper family
  (`kernels.by_chip_class.hopper.compute_relative / memory_relative`; H100 and H200 keep the
  efficiencies fitted on dev.csv, the factors are what NVIDIA's tuned fp8 kernels reach beyond
  them);
* `mi300x`, `mi325x`: the chip's fp8 GEMM efficiency and memory efficiency (AMD's vLLM and
  SGLang submissions define the chip: no engine factors).

Objective: the median absolute log error of the group's rows (Offline Tokens/s and Samples/s),
minimised by the pattern search of `fit_serving_chips.py`. `--quick N`: N samples per engine
instance instead of the LoadGen query (the saturated rate is the same to a few %; the fit's
final numbers are then priced in full). `--loo`: leave-one-hardware-out, each chip of a group
priced with the values fitted without it (its own efficiencies copied from `COPY` as the catalog
would). `--grid`: what the shipped numbers come from (each YAML's `sources` gives the command): every
point of a small grid priced in full (no `--quick`: 200 samples per instance misjudged the
saturated rate by tens of per cent), the fit is the point of least median APE, and
leave-one-hardware-out picks it again without each chip (one chip: its numbers as the copy
rule `COPY` gives them), leave-one-submitter-out without each submitter's rows. The numbers are written into the YAMLs by hand, with those entries.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fit_serving_chips import pattern_search, profile_with  # noqa: E402

from simulator.analysis.measurements import read_measurements  # noqa: E402
from simulator.analysis.validate import Validator, validate  # noqa: E402
from simulator.profiles.profile import engine_catalog  # noqa: E402
from simulator.specs.catalog import hardware_catalog, resolve_hardware_id  # noqa: E402
from simulator.specs.checks import SpecError  # noqa: E402

DATA = Path("/work/shared/reference/measurements")
FILE = "dev_mlperf51_offline.csv"

#: group -> (chips whose rows it fits on, parameters: "chip:<field>[:dtype]" on every chip of the
#: group, "cls:<engine>:<family>:<factor>", "eng:<engine>:<field>")
GROUPS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "b200": (("b200",), ("chip:b200:compute_efficiency:fp4", "chip:b200:memory_efficiency",
                         "eng:trtllm-mlperf:step_overhead_s")),
    "gb200": (("gb200",), ("chip:gb200:compute_efficiency:fp4", "chip:gb200:memory_efficiency")),
    "gb300": (("gb300",), ("chip:gb300:compute_efficiency:fp4", "chip:gb300:memory_efficiency")),
    "rtx-pro-6000": (("rtx-pro-6000",), ("chip:rtx-pro-6000:compute_efficiency:fp4", "chip:rtx-pro-6000:memory_efficiency")),
    "hopper": (("h100-sxm", "h200-sxm", "h200-nvl"),
               ("cls:trtllm-mlperf:hopper:compute_relative", "cls:trtllm-mlperf:hopper:memory_relative")),
    "mi300x": (("mi300x",), ("chip:mi300x:compute_efficiency:fp8", "chip:mi300x:memory_efficiency")),
    "mi325x": (("mi325x",), ("chip:mi325x:compute_efficiency:fp8", "chip:mi325x:memory_efficiency")),
}
#: a chip held out takes these chips' fitted values
COPY = {"gb200": "b200", "gb300": "b200", "b200": "h100-sxm", "mi325x": "mi300x", "mi300x": "mi325x",
        "rtx-pro-6000": "l40s", "h200-sxm": "h100-sxm", "h100-sxm": "h200-sxm", "h200-nvl": "h200-sxm",
        "arc-pro-b60-dual": "l40s"}
START = {"compute_efficiency": 0.5, "memory_efficiency": 0.8, "step_overhead_s": 1e-3, "compute_relative": 1.3,
         "memory_relative": 1.05}
BOUNDS = {"compute_efficiency": (0.05, 1.0), "memory_efficiency": (0.2, 1.0), "step_overhead_s": (0.0, 0.02),
          "compute_relative": (0.2, 2.0), "memory_relative": (0.3, 1.25)}


def read_rows() -> list[dict[str, Any]]:
    """The file's rows with each chip named by its catalog id: rows name some by an alias
    (`nvidia-h200-nvl`), and the groups and the hardware overrides are keyed by id."""
    rows, _ = read_measurements(DATA / FILE, skip_bad_rows=True)
    for r in rows:
        try:
            r["hardware"] = resolve_hardware_id(str(r["hardware"])) or r["hardware"]
        except SpecError:  # ambiguous: left as written, `validate` names the reason it skips it
            pass
    return rows


def grid_fit(rows: Sequence[Mapping[str, Any]], chips: Sequence[str], axes: Mapping[str, Sequence[float]],
             fixed: Mapping[str, float]) -> dict[str, Any]:
    """Every point of the grid `axes` priced in full on the chips' rows; the fit is the point of
    least median APE, and leave-one-hardware-out picks it again without each chip's rows and
    prices that chip with the pick (the grid is small: each point is a full pricing);
    leave-one-submitter-out does the same per MLPerf submitter, from the same grid points."""
    import itertools

    names = list(axes)
    rows = [r for r in rows if r["hardware"] in chips]
    trials = []
    for combo in itertools.product(*(axes[n] for n in names)):
        vals = {**fixed, **dict(zip(names, combo, strict=True))}
        pts = price(rows, vals, None)
        trials.append((dict(zip(names, combo, strict=True)), pts))
        print("  grid", trials[-1][0], f"{median_ape(pts):.1f} %", flush=True)

    def held_out(key: Callable[[Mapping[str, Any]], str], k: str) -> dict[str, Any]:
        """The grid point of least median APE without the rows whose key is k, and k's rows there."""
        pick, ppts = min(trials, key=lambda tr: median_ape([p for p in tr[1] if key(p) != k]))
        held = [p for p in ppts if key(p) == k]
        return {"values": pick, "rows": len(held), "median_ape": median_ape(held)}

    best, pts = min(trials, key=lambda tr: median_ape(tr[1]))
    loho = {}
    if len(chips) == 1:  # nothing left to fit on: each number as the copy rule gives it (`COPY`)
        copied = {n: copy_value(n) for n in names}
        loho[chips[0]] = {"values": copied, "median_ape": median_ape(price(rows, {**fixed, **copied}, None))}
    for hw in chips if len(chips) > 1 else ():
        loho[hw] = held_out(lambda p: p["hardware"], hw)
    subs = sorted({submitter(p) for p in pts})
    loso = {s: held_out(submitter, s) for s in subs} if len(subs) > 1 else {}
    return {"values": best, **summary(pts), "leave_one_hardware_out": loho, "leave_one_submitter_out": loso,
            "grid": [{"values": v, "median_ape": median_ape(p)} for v, p in trials]}


def submitter(point: Mapping[str, Any]) -> str:
    """The MLPerf submitter of a row: `closed/<submitter>/` in its source path."""
    parts = str(point["source"]).split(":", 1)[-1].split("/")
    return parts[parts.index("closed") + 1] if "closed" in parts else str(point["source"])


def copy_value(name: str) -> float:
    """`chip:<hw>:<field>[:dtype]`'s value on the chip `COPY` names for <hw> (a by-dtype GEMM
    efficiency the source lacks falls back to its compute_efficiency, as the cost model does)."""
    parts = name.split(":")
    src = hardware_catalog()[COPY[parts[1]]].efficiency
    if len(parts) == 4:
        return float(src.compute_efficiency_by_dtype.get(parts[3], src.compute_efficiency))
    return float(getattr(src, parts[2]))


def median_ape(points: Sequence[Mapping[str, Any]]) -> float:
    return float(np.median([abs(p["error_pct"]) for p in points])) if points else math.nan


def key_of(name: str) -> str:
    parts = name.split(":")
    return parts[2] if parts[0] == "chip" else parts[-1]


def hardware_with(hw_id: str, values: Mapping[str, float]) -> Any:
    """The catalog chip with `chip:` values applied (by-dtype GEMM efficiency and memory)."""
    hw = hardware_catalog()[hw_id]
    e = hw.efficiency
    by = dict(e.compute_efficiency_by_dtype)
    changes: dict[str, Any] = {}
    for name, v in values.items():
        parts = name.split(":")
        if parts[0] != "chip" or parts[1] != hw_id:
            continue
        if len(parts) == 4:
            by[parts[3]] = float(v)
        else:
            changes[parts[2]] = float(v)
    if by:
        changes["compute_efficiency_by_dtype"] = by
    return dataclasses.replace(hw, efficiency=dataclasses.replace(e, **changes))


def price(rows: Sequence[Mapping[str, Any]], values: Mapping[str, float], quick: int | None) -> list[dict]:
    """The rows' points with `values` applied: chip values as hardware overrides, engine values
    as the built-in profile replaced for the run (`profiles.profile._builtin_engine`, which
    `load_engine` reads: the catalog dict `engine_catalog()` returns is a fresh copy, so
    replacing an entry there changed nothing)."""
    by_engine: dict[str, dict[str, float]] = {}
    for name, v in values.items():
        parts = name.split(":")
        if parts[0] == "cls":
            by_engine.setdefault(parts[1], {})[f"{parts[2]}:{parts[3]}"] = v
        elif parts[0] == "eng":
            by_engine.setdefault(parts[1], {})[f"overheads:{parts[2]}"] = v
    trial: dict[str, Any] = {}
    for eng, vals in by_engine.items():
        fam = {k.split(":")[1]: x for k, x in vals.items() if not k.startswith("overheads:")}
        families = {k.split(":")[0] for k in vals if not k.startswith("overheads:")}
        prof = profile_with(eng, next(iter(families)) if families else "hopper", fam) if fam else engine_catalog()[eng]
        over = {k.split(":")[1]: x for k, x in vals.items() if k.startswith("overheads:")}
        if over:
            ov = dataclasses.replace(prof.overheads, **{k: dataclasses.replace(getattr(prof.overheads, k), value=float(x),
                                                                               status="provisional (fit)")
                                                        for k, x in over.items()})
            prof = dataclasses.replace(prof, overheads=ov)
        trial[eng] = prof
    chips = {r["hardware"] for r in rows}  # catalog ids (`read_rows`)
    specs = {h: hardware_with(h, values) for h in chips if h in hardware_catalog()}
    return price_with_engines(rows, trial, Validator(hardware_specs=specs, max_requests=quick))


def price_with_engines(rows: Sequence[Mapping[str, Any]], trial: Mapping[str, Any],
                       validator: Validator | None = None) -> list[dict]:
    """The rows' points with the built-in profiles of `trial` ({engine id: EngineProfile})
    replaced for the run (`profiles.profile._builtin_engine`, which `load_engine` reads)."""
    from simulator.profiles import profile as profile_mod

    original = profile_mod._builtin_engine
    profile_mod._builtin_engine = lambda eid: trial[eid] if eid in trial else original(eid)  # type: ignore[assignment]
    try:
        return validate(rows, validator=validator or Validator())["points"]
    finally:
        profile_mod._builtin_engine = original  # type: ignore[assignment]


def objective(points: Sequence[Mapping[str, Any]]) -> float:
    e = [abs(math.log(max(p["predicted"], 1e-12) / p["measured"])) for p in points]
    return float(np.median(e)) if e else math.inf


def summary(points: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    by: dict[str, list[float]] = {}
    for p in points:
        by.setdefault(p["hardware"], []).append(abs(p["error_pct"]))
    return {"rows": len(points), "median_ape": float(np.median([abs(p["error_pct"]) for p in points])) if points else None,
            "by_hardware": {k: float(np.median(v)) for k, v in sorted(by.items())}}


def fit_group_lm(rows: Sequence[Mapping[str, Any]], names: Sequence[str], fixed: Mapping[str, float],
                 max_iter: int = 3) -> dict[str, float]:
    """Levenberg-Marquardt on every row's log error (a forward-difference Jacobian: one pricing of
    the group per parameter per iteration): predictions are smooth in these numbers, so two or
    three iterations converge, a few pricings of the group in all."""
    from simulator.analysis.fitting import levenberg_marquardt

    meas = np.array([r["value"] for r in rows], dtype=float)
    start = np.array([math.log(fixed.get(n, START[key_of(n)])) for n in names])

    def vals(x: np.ndarray) -> dict[str, float]:
        out = {}
        for n, xi in zip(names, x, strict=True):
            lo, hi = BOUNDS[key_of(n)]
            out[n] = min(max(math.exp(float(xi)), max(lo, 1e-12)), hi)
        return out

    ids = [r["id"] for r in rows]

    def residuals(x: np.ndarray) -> np.ndarray:
        pts = {p["id"]: p["predicted"] for p in price(rows, {**fixed, **vals(x)}, None)}
        pred = np.array([pts.get(i, np.nan) for i in ids])
        r = np.log(pred / meas)
        return np.where(np.isfinite(r), r, 3.0)

    x, _ = levenberg_marquardt(residuals, start, max_iter=max_iter, step=0.05)
    return vals(x)


def fit_group(rows: Sequence[Mapping[str, Any]], names: Sequence[str], fixed: Mapping[str, float],
              quick: int | None, max_evals: int) -> dict[str, float]:
    if quick is None:
        return fit_group_lm(rows, names, fixed)
    import fit_serving_chips as FS

    FS.START.update({n: START[key_of(n)] for n in names})
    FS.BOUNDS.update({n: BOUNDS[key_of(n)] for n in names})

    def f(p: dict[str, float]) -> float:
        return objective(price(rows, {**fixed, **p}, quick))

    start = {n: fixed.get(n, START[key_of(n)]) for n in names}
    best, _ = pattern_search(f, start, names, max_evals=max_evals)
    return best


def only_models(rows: list[dict[str, Any]], models: Sequence[str], ap: argparse.ArgumentParser) -> list[dict[str, Any]]:
    """The rows of these catalog model ids; an id the file lacks is refused (no empty fit)."""
    keep, known = set(models), {str(r.get("model")) for r in rows}
    if not keep <= known:
        ap.error(f"--models: {', '.join(sorted(keep - known))} not in {FILE}; its models: {', '.join(sorted(known))}")
    return [r for r in rows if str(r.get("model")) in keep]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", default=",".join(GROUPS))
    ap.add_argument("--quick", type=int, default=None,
                    help="N samples per engine instance in a pattern search (default: the full run, Levenberg-Marquardt)")
    ap.add_argument("--max-evals", type=int, default=20)
    ap.add_argument("--loo", action="store_true")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--grid", action="append", default=[], metavar="NAME=V1,V2,...",
                    help="instead of the groups' search: price every point of this grid (repeat for more axes) "
                         "on --chips, with leave-one-hardware-out by selection")
    ap.add_argument("--chips", default="h100-sxm,h200-sxm,h200-nvl", help="with --grid: the chips whose rows it fits")
    ap.add_argument("--start", type=Path, help="values of an earlier --json to start from (and fix across groups)")
    ap.add_argument("--models", default=None,
                    help="only these models' rows (catalog ids, comma-separated): a fit a model's rows would "
                         "bias for a reason of their own (GB300: DeepSeek-R1, ~2x too fast on every Blackwell)")
    args = ap.parse_args(argv)
    rows = read_rows()
    if args.models:
        rows = only_models(rows, args.models.split(","), ap)
    values: dict[str, float] = {}
    if args.start:
        values.update(json.loads(args.start.read_text(encoding="utf-8"))["values"])
    out: dict[str, Any] = {"file": FILE, "values": values, "groups": {}}
    if args.models:
        out["models"] = sorted(set(args.models.split(",")))
    if args.grid:
        axes = {g.split("=")[0]: [float(x) for x in g.split("=")[1].split(",")] for g in args.grid}
        out["grid_fit"] = grid_fit(rows, args.chips.split(","), axes, values)
        print(json.dumps({k: v for k, v in out["grid_fit"].items() if k != "grid"}, indent=1))
        if args.json:
            args.json.write_text(json.dumps(out, indent=1), encoding="utf-8")
        return 0
    for g in args.groups.split(","):
        chips, params = GROUPS[g]
        grows = [r for r in rows if r["hardware"] in chips]
        got = fit_group(grows, params, values, args.quick, args.max_evals)
        values.update(got)
        pts = price(grows, values, None)
        out["groups"][g] = {"values": got, **summary(pts)}
        print(g, json.dumps(out["groups"][g]), flush=True)
        if args.json:
            args.json.write_text(json.dumps(out, indent=1), encoding="utf-8")
    allpts = price(rows, values, None)
    out["all"] = summary(allpts)
    if args.loo:
        loho: dict[str, Any] = {}
        for g in args.groups.split(","):
            chips, params = GROUPS[g]
            for hw in chips:
                if len(chips) > 1:  # refit the group's numbers without this chip
                    train = [r for r in rows if r["hardware"] in chips and r["hardware"] != hw]
                    v = {**values, **fit_group(train, params, values, args.quick, max(6, args.max_evals // 2))}
                else:  # the chip's own numbers: what the copy rule gives it (the source's fit,
                    # else the catalog's copied values)
                    src = COPY.get(hw, "")
                    v = {k: x for k, x in values.items() if not k.startswith(f"chip:{hw}:")}
                    for k, x in values.items():
                        if k.startswith(f"chip:{src}:"):
                            v[k.replace(f"chip:{src}:", f"chip:{hw}:", 1)] = x
                held = [r for r in rows if r["hardware"] == hw]
                loho[hw] = summary(price(held, v, None))
        out["leave_one_hardware_out"] = loho
    print(json.dumps(out["all"], indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
