"""Leave-one-group-out check of the trtllm profile: analytic refit, event-simulation pricing.

Run by hand (not in CI):

    python benchmarks/loo_engines.py [--write-docs] [--kinds hardware,shape]

For every hardware (then every input/output shape) of `dev_throughput.csv` held out:

1. refit the trtllm profile's six parameters (step overhead, runtime reserve, fp8 efficiency
   relative to bf16 on Hopper and on Ada, PCIe all-reduce efficiency, all-reduce latency) on the
   OTHER rows with the fast analytic steady-state model of `analyze_throughput.py` (its `fit`:
   Nelder-Mead on mean squared log error, started from the all-rows analytic fit);
2. price the held-out rows with the EVENT simulation exactly as `llmsim validate` does
   (`fit_engines.Predictor`: the trtllm profile with those six values, trtllm-bench limits,
   `profiles.apply.BENCH_WAVES` waves), so the number reported is the shipped simulator's error on
   data the parameters never saw.

A parameter the training rows cannot inform keeps a stand-in: with L40S held out no Ada fp8 row
is left, so Ada's fp8 factor takes the refitted Hopper value (the nearest physical guess, no
leak). Output: `docs/serving_loo.csv` (per held-out row, with the fold's parameters) and the
table between the `serving-loo` markers of docs/validation.md (`fit_engines.loo_doc_table`,
which tests/test_engine_wiring.py recomputes from the CSV).
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import analyze_throughput as AT  # noqa: E402
import fit_engines as FE  # noqa: E402

from simulator.analysis import measurements
from simulator.profiles.profile import load_engine  # noqa: E402

#: analytic parameter name -> fit_engines / profile parameter name
TO_PROFILE = {"step_overhead_s": "step_overhead_s", "mem_reserve_gib": "runtime_reserve_gib",
              "fp8_eff_rel_hopper": "fp8_rel_hopper", "fp8_eff_rel_ada": "fp8_rel_ada",
              "link_eff_pcie": "pcie_link_efficiency", "allreduce_latency_s": "allreduce_latency_s"}
KINDS: dict[str, Callable[[Mapping[str, Any]], str]] = {"hardware": lambda r: str(r["hardware"]),
                                                        "shape": FE.shape}


def analytic_fitter(raw: Sequence[Mapping[str, Any]]) -> tuple[AT.Fitter, list[AT.RowModel]]:
    rows = [AT.RowModel(r) for r in raw]
    fitter = AT.Fitter(rows)
    fitter.fit_latency = True
    return fitter, rows


def refit(fitter: AT.Fitter, train: Sequence[AT.RowModel], start: Mapping[str, float]) -> dict[str, float]:
    """The six parameters fitted analytically on `train` (Ada's fp8 factor := Hopper's when no
    Ada fp8 row is in `train`)."""
    has_ada = any(r.fp8 and AT.FP8_CLASS.get(r.hw) == "ada" for r in train)
    names = [n for n in AT.DEFAULT_FIT if has_ada or n != "fp8_eff_rel_ada"]
    p = AT.fit(fitter, train, names, start=start)
    if not has_ada:
        p["fp8_eff_rel_ada"] = p["fp8_eff_rel_hopper"]
    return {TO_PROFILE[n]: float(p[n]) for n in AT.DEFAULT_FIT}


def run_kind(kind: str, raw: Sequence[Mapping[str, Any]], fitter: AT.Fitter, models: Sequence[AT.RowModel],
             full: Mapping[str, float], pred: FE.Predictor) -> list[dict[str, Any]]:
    """Per held-out row points {kind, group, id, shape, hardware, dtype, measured, predicted, params}."""
    key = KINDS[kind]
    out: list[dict[str, Any]] = []
    for g in sorted({key(r) for r in raw}, key=lambda s: (len(s), s)):
        t0 = time.time()
        train = [m for m, r in zip(models, raw, strict=True) if key(r) != g]
        p = refit(fitter, train, full)
        t1 = time.time()
        test = [r for r in raw if key(r) == g]
        yhat = pred(test, p)
        errs = [abs(y / float(r["value"]) - 1) * 100 for y, r in zip(yhat, test, strict=True) if np.isfinite(y)]
        print(f"  held out {kind} {g:<16} rows {len(test):>3}  median APE {np.median(errs):5.1f} %  "
              f"(fit {t1 - t0:.0f} s, sim {time.time() - t1:.0f} s)  "
              + ", ".join(f"{k}={v:.4g}" for k, v in p.items()), flush=True)
        for y, r in zip(yhat, test, strict=True):
            if np.isfinite(y):
                out.append({"kind": kind, "group": g, "id": r["id"], "shape": FE.shape(r), "hardware": r["hardware"],
                            "dtype": FE.dtype(r), "measured": r["value"], "predicted": f"{y:.6g}",
                            **{k: f"{v:.6g}" for k, v in p.items()}})
    return out


def write_docs(points: Sequence[Mapping[str, Any]]) -> None:
    """docs/serving_loo.csv and the table between the serving-loo markers of validation.md."""
    with open(FE.LOO_CSV, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(points[0]))
        w.writeheader()
        w.writerows(points)
    md = FE.DOCS / "validation.md"
    text = md.read_text()
    if FE.LOO_BEGIN not in text:
        raise SystemExit(f"{md}: no {FE.LOO_BEGIN} marker; add the marker pair where the table belongs")
    head, _, rest = text.partition(FE.LOO_BEGIN)
    _, _, tail = rest.partition(FE.LOO_END)
    md.write_text(f"{head}{FE.LOO_BEGIN}\n{FE.loo_doc_table(FE.read_doc_points(FE.LOO_CSV))}\n{FE.LOO_END}{tail}")


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(FE.DATA))
    ap.add_argument("--kinds", default="hardware,shape", help="what to hold out: hardware, shape or both")
    ap.add_argument("--write-docs", action="store_true", help="write docs/serving_loo.csv and the validation.md table")
    a = ap.parse_args(argv)
    kinds = [k.strip() for k in a.kinds.split(",") if k.strip()]
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise SystemExit(f"--kinds: unknown kind {bad[0]!r}; allowed: {', '.join(KINDS)}")
    raw, _ = measurements.load_rows(a.data)
    raw = [r for r in raw if r["scenario"] == "offline_max_throughput"]
    fitter, models = analytic_fitter(raw)
    t0 = time.time()
    full_at = AT.fit(fitter, models, AT.DEFAULT_FIT)
    print(f"{len(raw)} rows; all-rows analytic fit ({time.time() - t0:.0f} s): "
          + ", ".join(f"{n}={full_at[n]:.4g}" for n in AT.DEFAULT_FIT), flush=True)
    pred = FE.Predictor(load_engine("trtllm"))
    points: list[dict[str, Any]] = []
    for kind in kinds:
        points += run_kind(kind, raw, fitter, models, full_at, pred)
    print()
    print(FE.loo_doc_table(points))
    if a.write_docs:
        write_docs(points)
        print(f"wrote {FE.LOO_CSV} and the serving-loo table of docs/validation.md")


if __name__ == "__main__":
    sys.exit(main())
