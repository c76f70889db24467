"""Fit the vLLM V1 profile's runtime overheads on dev_serving.csv (run by hand).

    python benchmarks/fit_serving.py [--quick]

Parameters (engine_specs/vllm.yaml): `overheads.step_overhead_s` (per engine step: CPU
scheduling, input preparation and launch not hidden by async scheduling; replaces the hardware
YAML's value, which was fitted on older static-batch engines) and `overheads.per_request_s`
(API-server latency outside the engine core; `serving_rows.with_frontend`). Method: a grid
over step_overhead_s (one simulation of every run per value) x per_request_s (a shift of the
simulated times, no re-simulation), minimising the median absolute percentage error over the
issue's target rows (mean/median TTFT, mean TPOT, mean/median E2E). Leave-one-model-out: the
same grid fitted on the other three models, error on the held-out one.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.metrics import summarize  # noqa: E402
from simulator.roofline import CostModel  # noqa: E402
from simulator.serving_rows import is_serving_run_row, run_key, simulate_row, with_frontend  # noqa: E402
from simulator.specs import DTypes, Parallelism  # noqa: E402
from simulator.validate import SERVING_METRICS, Validator, load_rows  # noqa: E402

DATA = Path("/work/shared/reference/measurements/dev_serving.csv")
TARGET = ("mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms", "mean_e2el_ms", "median_e2el_ms")
STEP_GRID_S = [0.0, 5e-4]
ALLREDUCE_GRID_S = [4e-6, 8e-6, 12e-6, 16e-6]
FRONTEND_GRID_S = [x * 1e-3 for x in range(0, 31)]


def runs(path: Path) -> dict[tuple, list[dict]]:
    rows, _ = load_rows(path)
    out: dict[tuple, list[dict]] = {}
    for r in rows:
        if is_serving_run_row(r):
            out.setdefault(run_key(r), []).append(r)
    return out


def cost_for(v: Validator, row: dict, step_s: float, allreduce_s: float) -> CostModel:
    hw = v.hardware(row["hardware"])
    hw = dataclasses.replace(hw, efficiency=dataclasses.replace(hw.efficiency, step_overhead_s=step_s),
                             link_latency_s=allreduce_s)
    return CostModel(v.model(row["model"]), hw, Parallelism(row["tp"], row["pp"]),
                     DTypes(row["weight_dtype"], row["activation_dtype"], row["kv_dtype"]))


def simulate_all(groups: dict[tuple, list[dict]], step_s: float, allreduce_s: float,
                 max_requests: int | None) -> dict[tuple, object]:
    v = Validator()
    return {k: simulate_row(rs[0], cost_for(v, rs[0], step_s, allreduce_s), 0.0, max_requests)
            for k, rs in groups.items()}


def errors(groups: dict, sims: dict, frontend_s: float, metrics: tuple = TARGET) -> list[tuple[dict, float]]:
    out = []
    for k, rs in groups.items():
        s = summarize(with_frontend(sims[k], frontend_s), {})
        for r in rs:
            if r["metric"] in metrics:
                pred = float(s[SERVING_METRICS[r["metric"]]])
                out.append((r, 100.0 * (pred - r["value"]) / r["value"]))
    return out


def best(groups: dict, table: dict, keys: set) -> tuple[float, tuple, float]:
    sub = {k: v for k, v in groups.items() if k in keys}
    scored = []
    for params, sims in table.items():
        for d in FRONTEND_GRID_S:
            e = errors(sub, sims, d)
            scored.append((statistics.median(abs(x) for _, x in e), params, d))
    return min(scored)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="cap runs at 1,500 requests")
    args = ap.parse_args()
    groups = runs(DATA)
    table = {(s, a): simulate_all(groups, s, a, 1500 if args.quick else None)
             for s in STEP_GRID_S for a in ALLREDUCE_GRID_S}
    mape, params, d = best(groups, table, set(groups))
    print(f"all runs: (step_overhead_s, allreduce_latency_s)={params} per_request_s={d:.4g} "
          f"median APE={mape:.1f} %")
    for m in sorted({rs[0]["model"] for rs in groups.values()}):
        train = {k for k, rs in groups.items() if rs[0]["model"] != m}
        _, s_m, d_m = best(groups, table, train)
        held = {k: v for k, v in groups.items() if k not in train}
        e = errors(held, table[s_m], d_m)
        print(f"leave out {m}: fit (step, allreduce)={s_m} d={d_m:.4g}; held-out median APE "
              f"{statistics.median(abs(x) for _, x in e):.1f} %")


if __name__ == "__main__":
    main()
