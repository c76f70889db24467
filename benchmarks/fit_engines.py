"""Fit the trtllm engine profile's few physical parameters on dev_throughput.csv by EVENT simulation.

Run by hand (not in CI):

    python benchmarks/fit_engines.py [--per-cell 2] [--loo] [--write] [--csv preds.csv]

Every row of `shared/reference/measurements/dev_throughput.csv` (TensorRT-LLM v0.14
trtllm-bench, offline max throughput) is priced as `llmsim validate` prices it: the `trtllm`
profile (`profiles.apply.row_settings`: trtllm-bench limits from ISL/OSL, KV by the
free-after-load rule on NVML memory, all requests at t = 0, exact lengths,
`BENCH_WAVES` x the concurrency the run can fill) and the discrete-event engine.

Parameters (start: the profile's values, from the analytic fit `analyze_throughput.py`):

    step_overhead_s        overheads.step_overhead_s          per-step C++ executor overhead
    runtime_reserve_gib    overheads.runtime_reserve_bytes    memory the KV budget loses per GPU
    fp8_rel_hopper         kernels.fp8_efficiency_relative.hopper   fp8 GEMM/attention eff. / bf16
    fp8_rel_ada            kernels.fp8_efficiency_relative.ada
    pcie_link_efficiency   kernels.pcie_link_efficiency       all-reduce over PCIe (L40S, A100 PCIe)
    allreduce_latency_s    kernels.allreduce_latency_s        per all-reduce call at TP > 1

Objective: mean squared log error ln(pred/measured)^2 over the fitting rows. Search:
coordinate descent on multiplicative steps (20 %, 10 %, 5 %, 2.5 %): coarse to fine. A row's
prediction depends only on the parameters that touch it (fp8 factors only fp8 rows of that
chip class, PCIe efficiency only PCIe rows at TP > 1, latency only TP > 1), so predictions are
cached on (row, the parameters it depends on): every fold of the leave-one-out fits reuses
them. `--per-cell N` fits on N rows per (shape, hardware) cell (stratified, deterministic)
and reports on all rows.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from simulator.analysis import measurements
from simulator.analysis import validate as V
from simulator.profiles.profile import EngineProfile, Tunable, chip_class, load_engine

DATA = Path("/work/shared/reference/measurements/dev_throughput.csv")
GIB = 2.0**30
PARAMS = ("step_overhead_s", "runtime_reserve_gib", "fp8_rel_hopper", "fp8_rel_ada", "pcie_link_efficiency",
          "allreduce_latency_s")
UPPER = {"fp8_rel_hopper": 1.0, "fp8_rel_ada": 1.0, "pcie_link_efficiency": 1.0}
STEPS = (0.2, 0.1, 0.05, 0.025)


def start_params(profile: EngineProfile) -> dict[str, float]:
    k = profile.kernels
    return {"step_overhead_s": profile.overheads.step_overhead_s.value,
            "runtime_reserve_gib": profile.runtime_reserve_bytes / GIB,
            "fp8_rel_hopper": k.fp8_efficiency_relative["hopper"].value,
            "fp8_rel_ada": k.fp8_efficiency_relative["ada"].value,
            "pcie_link_efficiency": k.pcie_link_efficiency.value,
            "allreduce_latency_s": k.allreduce_latency_s.value}


def with_params(profile: EngineProfile, p: Mapping[str, float]) -> EngineProfile:
    """`profile` with the parameters `p` (statuses kept; the caller writes the YAML)."""
    def t(old: Tunable, v: float) -> Tunable:
        return dataclasses.replace(old, value=float(v))

    o, k = profile.overheads, profile.kernels
    fp8 = dict(k.fp8_efficiency_relative)
    fp8["hopper"] = t(fp8["hopper"], p["fp8_rel_hopper"])
    fp8["ada"] = t(fp8["ada"], p["fp8_rel_ada"])
    o2 = dataclasses.replace(o, step_overhead_s=t(o.step_overhead_s, p["step_overhead_s"]),
                             runtime_reserve_bytes=t(o.runtime_reserve_bytes, p["runtime_reserve_gib"] * GIB))
    k2 = dataclasses.replace(k, fp8_efficiency_relative=fp8,
                             pcie_link_efficiency=t(k.pcie_link_efficiency, p["pcie_link_efficiency"]),
                             allreduce_latency_s=t(k.allreduce_latency_s, p["allreduce_latency_s"]))
    return dataclasses.replace(profile, overheads=o2, kernels=k2)


def shape(row: Mapping[str, Any]) -> str:
    return f"{row['input_len']}/{row['output_len']}"


def dtype(row: Mapping[str, Any]) -> str:
    return str(row["weight_dtype"])


def relevant(row: Mapping[str, Any]) -> tuple[str, ...]:
    """The parameters that can change this row's prediction."""
    out = ["step_overhead_s", "runtime_reserve_gib"]
    if row["weight_dtype"] == "fp8" or row["kv_dtype"] == "fp8":
        cls = chip_class(row["hardware"])
        if cls in ("hopper", "ada"):
            out.append(f"fp8_rel_{cls}")
    if row["tp"] > 1:
        out.append("allreduce_latency_s")
        if "pcie" in row["hardware"] or row["hardware"].startswith("l40"):
            out.append("pcie_link_efficiency")
    return tuple(out)


class Predictor:
    """Event-simulation predictions, cached on (row id, its relevant parameters)."""

    def __init__(self, base: EngineProfile) -> None:
        self.base = base
        self.cache: dict[tuple, float] = {}
        self.simulated = 0

    def __call__(self, rows: Sequence[Mapping[str, Any]], p: Mapping[str, float]) -> np.ndarray:
        out = np.empty(len(rows))
        todo: list[int] = []
        for i, r in enumerate(rows):
            key = self._key(r, p)
            if key in self.cache:
                out[i] = self.cache[key]
            else:
                todo.append(i)
        if todo:
            v = V.Validator(engine=with_params(self.base, p))
            for i in todo:
                r = rows[i]
                try:
                    val = v.predict_row(r)
                except measurements.SkipRow:
                    val = float("nan")
                self.cache[self._key(r, p)] = val
                out[i] = val
                self.simulated += 1
        return out

    @staticmethod
    def _key(r: Mapping[str, Any], p: Mapping[str, float]) -> tuple:
        return (r["id"],) + tuple(round(p[n], 10) for n in relevant(r))


def msle(pred: np.ndarray, meas: np.ndarray) -> float:
    ok = np.isfinite(pred) & (pred > 0)
    if not ok.any():
        return math.inf
    e = np.log(pred[ok] / meas[ok]) ** 2
    return float(e.mean() + 10.0 * (~ok).mean())


def fit(pred: Predictor, rows: Sequence[Mapping[str, Any]], p0: Mapping[str, float],
        names: Sequence[str] = PARAMS, log: Callable[[str], None] = print,
        steps: Sequence[float] = STEPS) -> dict[str, float]:
    """Coordinate descent on multiplicative steps (module docstring)."""
    meas = np.array([r["value"] for r in rows], dtype=float)
    p = dict(p0)
    best = msle(pred(rows, p), meas)
    for step in steps:
        improved = True
        while improved:
            improved = False
            for n in names:
                for f in (1 + step, 1 / (1 + step)):
                    q = dict(p)
                    q[n] = min(p[n] * f, UPPER.get(n, math.inf))
                    if q[n] == p[n]:
                        continue
                    loss = msle(pred(rows, q), meas)
                    if loss < best - 1e-9:
                        p, best, improved = q, loss, True
                        break
        log(f"  step {step:.3f}: msle {best:.5f}  " + ", ".join(f"{k}={p[k]:.4g}" for k in names))
    return p


def ape_table(rows: Sequence[Mapping[str, Any]], cols: Mapping[str, np.ndarray],
              key: Callable[[Mapping[str, Any]], str]) -> list[str]:
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault(key(r), []).append(i)
    groups["ALL"] = list(range(len(rows)))
    meas = np.array([r["value"] for r in rows], dtype=float)
    head = f"  {'group':<16}{'rows':>5}" + "".join(f"{c:>14} med%  bias%" for c in cols)
    lines = [head]
    for g, idx in groups.items():
        line = f"  {g:<16}{len(idx):>5}"
        for pred in cols.values():
            e = (pred[idx] - meas[idx]) / meas[idx] * 100
            e = e[np.isfinite(e)]
            line += f"{np.median(np.abs(e)):>19.1f}{np.median(e):>7.1f}" if e.size else f"{'-':>26}"
        lines.append(line)
    return lines


def stratified(rows: Sequence[Mapping[str, Any]], per_cell: int) -> list[Mapping[str, Any]]:
    """The first `per_cell` rows of every (shape, hardware) cell, in file order."""
    seen: dict[tuple, int] = {}
    out = []
    for r in rows:
        k = (shape(r), r["hardware"])
        if seen.get(k, 0) < per_cell:
            seen[k] = seen.get(k, 0) + 1
            out.append(r)
    return out


def leave_one_out(pred: Predictor, rows: Sequence[Mapping[str, Any]], fit_rows: Sequence[Mapping[str, Any]],
                  p0: Mapping[str, float], key: Callable[[Mapping[str, Any]], str],
                  steps: Sequence[float] = STEPS) -> np.ndarray:
    """Predictions of each group's rows with parameters refitted on the other groups' rows
    (starting from `p0`, the all-rows fit, with `steps`)."""
    out = np.full(len(rows), np.nan)
    for g in sorted({key(r) for r in rows}):
        train = [r for r in fit_rows if key(r) != g]
        names = [n for n in PARAMS if any(n in relevant(r) for r in train)]
        start = dict(p0)
        if "fp8_rel_ada" not in names:  # no Ada fp8 rows left: borrow Hopper's (no leak)
            start["fp8_rel_ada"] = start["fp8_rel_hopper"]
        p = fit(pred, train, start, names, log=lambda s: None, steps=steps)
        idx = [i for i, r in enumerate(rows) if key(r) == g]
        out[idx] = pred([rows[i] for i in idx], p)
        print(f"  held out {g:<16} " + ", ".join(f"{k}={p[k]:.4g}" for k in names), flush=True)
    return out


DOCS = Path(__file__).resolve().parents[1] / "docs"
DOC_CSV = DOCS / "serving_validation.csv"
BEGIN, END = "<!-- serving-results:begin -->", "<!-- serving-results:end -->"
GROUPS = (("engine", "engine"), ("scenario", "scenario"), ("input/output shape", "shape"),
          ("hardware", "hardware"), ("dtype", "dtype"))


def doc_tables(points: Sequence[Mapping[str, Any]]) -> str:
    """Markdown tables (by engine, scenario, shape, hardware, dtype, then all rows) of per-row
    points {engine, scenario, shape, hardware, dtype, measured, predicted}."""
    lines = ["| group | name | rows | median APE % | p90 APE % | median signed error % |", "|---|---|---|---|---|---|"]

    def row(group: str, name: str, pts: Sequence[Mapping[str, Any]]) -> str:
        e = np.array([(float(q["predicted"]) - float(q["measured"])) / float(q["measured"]) * 100 for q in pts])
        a = np.abs(e)
        return (f"| {group} | {name} | {len(pts)} | {np.median(a):.1f} | {np.percentile(a, 90):.1f} | "
                f"{np.median(e):.1f} |")

    for title, col in GROUPS:
        names = sorted({str(q[col]) for q in points}, key=lambda x: (len(x), x))
        for n in names:
            lines.append(row(title, n, [q for q in points if str(q[col]) == n]))
    lines.append(row("overall", "all", points))
    return "\n".join(lines)


LOO_CSV = DOCS / "serving_loo.csv"
LOO_BEGIN, LOO_END = "<!-- serving-loo:begin -->", "<!-- serving-loo:end -->"


def loo_doc_table(points: Sequence[Mapping[str, Any]]) -> str:
    """Markdown table of leave-one-group-out points (benchmarks/loo_engines.py) {kind, group,
    measured, predicted, the fold's six parameters}: a line per held-out group, then all held-out
    rows of each kind."""
    lines = ["| held out | group | rows | median APE % | p90 APE % | median signed error % | step overhead ms "
             "| runtime reserve GiB | fp8 rel. hopper | fp8 rel. ada | PCIe all-reduce eff. | all-reduce latency us |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def stats(pts: Sequence[Mapping[str, Any]]) -> str:
        e = np.array([(float(q["predicted"]) - float(q["measured"])) / float(q["measured"]) * 100 for q in pts])
        a = np.abs(e)
        return f"{len(pts)} | {np.median(a):.1f} | {np.percentile(a, 90):.1f} | {np.median(e):.1f}"

    for kind in sorted({str(q["kind"]) for q in points}):
        pts = [q for q in points if q["kind"] == kind]
        for g in sorted({str(q["group"]) for q in pts}, key=lambda x: (len(x), x)):
            grp = [q for q in pts if q["group"] == g]
            q = grp[0]
            lines.append(f"| {kind} | {g} | {stats(grp)} | {float(q['step_overhead_s']) * 1e3:.2f} "
                         f"| {float(q['runtime_reserve_gib']):.2f} | {float(q['fp8_rel_hopper']):.2f} "
                         f"| {float(q['fp8_rel_ada']):.2f} | {float(q['pcie_link_efficiency']):.2f} "
                         f"| {float(q['allreduce_latency_s']) * 1e6:.0f} |")
        lines.append(f"| {kind} | all held-out rows | {stats(pts)} | | | | | | |")
    return "\n".join(lines)


def read_doc_points(path: Path = DOC_CSV) -> list[dict[str, str]]:
    import csv

    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def write_docs(rows: Sequence[Mapping[str, Any]], pred: np.ndarray) -> None:
    """docs/serving_validation.csv (per row) and the tables between the markers of validation.md."""
    import csv

    pts = [{"id": r["id"], "engine": "trtllm", "scenario": r["scenario"], "shape": shape(r), "hardware": r["hardware"],
            "dtype": dtype(r), "measured": r["value"], "predicted": f"{pred[i]:.6g}"}
           for i, r in enumerate(rows) if np.isfinite(pred[i])]
    with open(DOC_CSV, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(pts[0]))
        w.writeheader()
        w.writerows(pts)
    md = DOCS / "validation.md"
    text = md.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    md.write_text(f"{head}{BEGIN}\n{doc_tables(read_doc_points())}\n{END}{tail}")


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--per-cell", type=int, default=0, help="fit on N rows per (shape, hardware) cell (0: all)")
    ap.add_argument("--no-fit", action="store_true", help="only report the profile's current values")
    ap.add_argument("--loo", action="store_true", help="leave-one-hardware-out and leave-one-shape-out")
    ap.add_argument("--csv", help="write per-row predictions here")
    ap.add_argument("--write-docs", action="store_true",
                    help="write docs/serving_validation.csv and validation.md's serving tables (the profile's values)")
    ap.add_argument("--params", default=",".join(PARAMS), help="parameters to fit (the others stay at the profile's)")
    ap.add_argument("--steps", default=",".join(str(x) for x in STEPS), help="relative step sizes, coarse to fine")
    ap.add_argument("--loo-steps", default="0.05", help="step sizes of the leave-one-out refits (from the fit)")
    a = ap.parse_args(argv)
    steps = [float(x) for x in a.steps.split(",")]
    loo_steps = [float(x) for x in a.loo_steps.split(",")]
    rows, skipped = measurements.load_rows(a.data)
    rows = [r for r in rows if r["scenario"] == "offline_max_throughput"]
    base = load_engine("trtllm")
    p0 = start_params(base)
    pred = Predictor(base)
    fit_rows = stratified(rows, a.per_cell) if a.per_cell else rows
    t0 = time.time()
    print(f"{len(rows)} rows ({len(skipped)} skipped reading); fitting on {len(fit_rows)}", flush=True)
    names = [n.strip() for n in a.params.split(",") if n.strip()]
    bad = [n for n in names if n not in PARAMS]
    if bad:
        raise SystemExit(f"--params: unknown parameter {bad[0]!r}; allowed: {', '.join(PARAMS)}")
    p = p0 if a.no_fit else fit(pred, fit_rows, p0, names, steps=steps)
    cols = {"start": pred(rows, p0), "fitted": pred(rows, p)}
    if a.loo:
        print("leave-one-hardware-out:")
        cols["loo_hw"] = leave_one_out(pred, rows, fit_rows, p, lambda r: r["hardware"], loo_steps)
        print("leave-one-shape-out:")
        cols["loo_shape"] = leave_one_out(pred, rows, fit_rows, p, shape, loo_steps)
    print("\nfitted parameters:")
    for k in PARAMS:
        print(f"  {k:<22}{p0[k]:>12.5g} -> {p[k]:.5g}")
    for title, key in (("input/output shape", shape), ("hardware", lambda r: r["hardware"]), ("dtype", dtype)):
        print(f"\nby {title} (median absolute % error, median signed %)")
        print("\n".join(ape_table(rows, cols, key)))
    print(f"\n{pred.simulated} simulations, {time.time() - t0:.0f} s")
    if a.write_docs:
        write_docs(rows, cols["start"])
        print(f"wrote {DOC_CSV} and the serving tables of docs/validation.md (profile values as loaded)")
    if a.csv:
        import csv

        with open(a.csv, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["id", "shape", "hardware", "dtype", "measured", *cols])
            for i, r in enumerate(rows):
                w.writerow([r["id"], shape(r), r["hardware"], dtype(r), r["value"], *(f"{c[i]:.4g}" for c in cols.values())])


if __name__ == "__main__":
    sys.exit(main())
