"""Fit an engine profile's per-family kernel numbers to simulated serving rows (issue 22).

    python benchmarks/fit_serving_chips.py --file dev_inferencemax_gptoss.csv --engine vllm \\
        --family hopper --params memory_relative,dequant_gemm_efficiency,allreduce_latency_s \\
        [--check dev_serving.csv] [--write] [--loo]

Every evaluation prices the file's rows as `llmsim validate` does (the event simulation of each
distinct setting, `analysis.validate.Validator`) with the profile's
`kernels.by_chip_class.<family>` numbers set to trial values; the objective is the median
absolute log error over all rows (robust: a closed-loop sweep has 14 metrics per run, some of
them tails). Minimised by a pattern search (Hooke & Jeeves, J. ACM 1961) in log space: each
evaluation is a full set of simulations, so a few dozen evaluations is the budget.

`--check FILE`: the median APE of another file's rows with the fitted numbers (a file the same
profile prices that must not get worse). `--loo`: leave-one-hardware-out (refit without the
chip's rows, price them). `--write`: the numbers into `engine_specs/<engine>.yaml` with a
`sources` entry naming this fit.
"""

from __future__ import annotations

import argparse
import copy
import datetime
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

from simulator.analysis.measurements import read_measurements  # noqa: E402
from simulator.analysis.validate import Validator, validate  # noqa: E402
from simulator.profiles.profile import engine_from_dict  # noqa: E402
from simulator.specs.catalog import read_yaml  # noqa: E402

DATA = Path("/work/shared/reference/measurements")
START = {"memory_relative": 1.0, "compute_relative": 1.0, "attention_relative": 1.0,
         "dequant_gemm_efficiency": 0.7, "dequant_ramp_relative": 0.25, "allreduce_latency_s": 1e-5, "kernel_overhead_s": 5e-6,
         "step_overhead_s": 5e-4, "moe_layer_overhead_s": 2e-5, "expert_width_ramp": 500.0,
         "overheads.per_prompt_token_s": 3.5e-6, "overheads.per_request_s": 0.006,
         "overheads.per_stream_output_s": 9e-5}
BOUNDS = {"memory_relative": (0.2, 2.0), "compute_relative": (0.1, 2.0), "attention_relative": (0.1, 2.0),
          "dequant_gemm_efficiency": (0.05, 1.0), "dequant_ramp_relative": (0.05, 1.0),
          "allreduce_latency_s": (0.0, 2e-4),
          "kernel_overhead_s": (0.0, 1e-4), "step_overhead_s": (0.0, 0.02), "moe_layer_overhead_s": (0.0, 5e-4),
          "expert_width_ramp": (0.0, 1e4),
          "overheads.per_prompt_token_s": (0.0, 5e-5), "overheads.per_request_s": (0.0, 0.05),
          "overheads.per_stream_output_s": (0.0, 1e-3)}


def profile_with(engine: str, family: str, values: Mapping[str, float]) -> Any:
    """The built-in profile `engine` with `kernels.by_chip_class.<family>` set to `values`
    (a name `overheads.X` sets the profile's overhead X instead: every chip's)."""
    data = copy.deepcopy(read_yaml(ROOT / "engine_specs" / f"{engine}.yaml"))
    fam = data.setdefault("kernels", {}).setdefault("by_chip_class", {}).setdefault(family, {})
    for k, v in values.items():
        if k.startswith("overheads."):
            data.setdefault("overheads", {})[k.split(".", 1)[1]] = {"value": float(v), "status": "provisional"}
            data["sources"][k] = "benchmarks/fit_serving_chips.py (trial value)"
            continue
        fam[k] = {"value": float(v), "status": "provisional (fit in progress)"}
    data["sources"]["kernels.by_chip_class"] = "benchmarks/fit_serving_chips.py (trial values)"
    return engine_from_dict(data, f"{engine} (trial)")


def errors(rows: Sequence[Mapping[str, Any]], profile: Any) -> list[dict]:
    res = validate(rows, validator=Validator(engine=profile))
    return res["points"]


def objective(points: Sequence[Mapping[str, Any]]) -> float:
    e = np.array([math.log(max(p["predicted"], 1e-12) / p["measured"]) for p in points])
    return float(np.median(np.abs(e))) if e.size else math.inf


def pattern_search(f: Callable[[dict[str, float]], float], start: dict[str, float], names: Sequence[str],
                   step: float = 0.4, min_step: float = 0.05, max_evals: int = 40) -> tuple[dict[str, float], float]:
    """Hooke-Jeeves exploratory moves on log(value) (additive for time parameters that may be 0)."""
    def move(p: dict[str, float], n: str, sign: int, s: float) -> dict[str, float]:
        q = dict(p)
        lo, hi = BOUNDS[n]
        if n.endswith("_s"):
            q[n] = min(max(p[n] + sign * s * START[n] * 2.0, lo), hi)
        else:
            q[n] = min(max(p[n] * math.exp(sign * s), lo), hi)
        return q

    best, fb = dict(start), f(start)
    evals = 1
    while step >= min_step and evals < max_evals:
        improved = False
        for n in names:
            for sign in (1, -1):
                q = move(best, n, sign, step)
                if q == best:
                    continue
                fq = f(q)
                evals += 1
                print(f"  eval {evals}: {({k: float(f'{v:.4g}') for k, v in q.items()})} -> {fq:.4f}", flush=True)
                if fq < fb:
                    best, fb, improved = q, fq, True
                    break
        if not improved:
            step /= 2.0
    return best, fb


def summary(points: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    by: dict[str, list[float]] = {}
    for p in points:
        by.setdefault(p["hardware"], []).append(abs(p["error_pct"]))
    return {"rows": len(points), "median_ape": float(np.median([abs(p["error_pct"]) for p in points])),
            "by_hardware": {k: float(np.median(v)) for k, v in sorted(by.items())}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", required=True)
    ap.add_argument("--engine", default="vllm")
    ap.add_argument("--family", default="hopper")
    ap.add_argument("--params", required=True,
                    help="comma-separated CLASS_FACTORS names, or overheads.per_prompt_token_s / overheads.per_request_s")
    ap.add_argument("--start", default="", help="NAME=VALUE,... start values")
    ap.add_argument("--check", action="append", default=[], help="another file the profile prices")
    ap.add_argument("--max-evals", type=int, default=40)
    ap.add_argument("--step", type=float, default=0.4, help="first pattern-search step (log space)")
    ap.add_argument("--loo", action="store_true")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    rows, _ = read_measurements(DATA / args.file, skip_bad_rows=True)
    names = [n for n in args.params.split(",") if n]
    start = {n: START[n] for n in names}
    for item in filter(None, args.start.split(",")):
        k, v = item.split("=")
        start[k] = float(v)

    def f_of(rs: Sequence[Mapping[str, Any]]) -> Callable[[dict[str, float]], float]:
        return lambda p: objective(errors(rs, profile_with(args.engine, args.family, p)))

    best, fb = pattern_search(f_of(rows), start, names, step=args.step, max_evals=args.max_evals)
    pts = errors(rows, profile_with(args.engine, args.family, best))
    out: dict[str, Any] = {"file": args.file, "engine": args.engine, "family": args.family, "values": best,
                           "objective": fb, "fit": summary(pts)}
    print(json.dumps(out, indent=1))
    for c in args.check:
        crow, _ = read_measurements(DATA / c, skip_bad_rows=True)
        cres = validate(crow, validator=Validator())  # each row's own profile, as validate runs it
        out.setdefault("check_before", {})[c] = summary(cres["points"])
    if args.loo:
        out["leave_one_hardware_out"] = {}
        for hw in sorted({r["hardware"] for r in rows}):
            train = [r for r in rows if r["hardware"] != hw]
            held = [r for r in rows if r["hardware"] == hw]
            b, _ = pattern_search(f_of(train), best, names, step=0.2, max_evals=max(8, args.max_evals // 3))
            out["leave_one_hardware_out"][hw] = {"values": b, **summary(errors(held, profile_with(args.engine, args.family, b)))}
        print(json.dumps(out["leave_one_hardware_out"], indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1), encoding="utf-8")
    if args.write:
        from fit_chips import _set_source, fmt_num  # noqa: PLC0415

        path = ROOT / "engine_specs" / f"{args.engine}.yaml"
        text = path.read_text(encoding="utf-8")
        note = (f"benchmarks/fit_serving_chips.py: pattern search on the median absolute log error of "
                f"{len(pts)} rows of shared/reference/measurements/{args.file} (event simulation of every run), "
                f"{datetime.date.today().isoformat()}; median APE {out['fit']['median_ape']:.1f} %")
        block = [f"    {args.family}:"] + [
            f"      {k}: {{value: {fmt_num(v)}, status: \"fitted (benchmarks/fit_serving_chips.py)\"}}"
            for k, v in sorted(best.items())]
        if "  by_chip_class:" not in text:
            text = text.replace("\nkernels:\n", "\nkernels:\n  by_chip_class:\n", 1)
        lines = text.splitlines()
        i = lines.index("  by_chip_class:")
        j = i + 1
        # drop an earlier block of this family
        while j < len(lines) and lines[j].startswith("    "):
            if lines[j] == f"    {args.family}:":
                k = j + 1
                while k < len(lines) and lines[k].startswith("      "):
                    k += 1
                del lines[j:k]
                continue
            j += 1
        lines[i + 1:i + 1] = block
        text = "\n".join(lines) + "\n"
        text = _set_source(text, f"kernels.by_chip_class.{args.family}", note)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
