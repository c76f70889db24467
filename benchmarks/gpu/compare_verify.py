"""llmsim's verify-step price beside `measure_verify.py`'s measurement (CPU; the repository
installed): for each (B, L, q) row of verify.csv, the roofline's step time of B sequences
verifying q tokens on L cached ones (T = S = B q, Ad = B q (L + q/2), R = B (L + q)), without
the engine's per-step overhead (the measured forward has no scheduler), and both as ratios to
the q = 1 step of the same batch: the growth with q is what decides the crossover.

    python benchmarks/gpu/compare_verify.py benchmarks/gpu/results/<run>/verify.csv --hardware h200-sxm
"""

from __future__ import annotations

import argparse
import csv

from simulator.resolve import make_cost_model


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--hardware", default="h200-sxm")
    ap.add_argument("--mode", default="cuda_graph")
    args = ap.parse_args()
    cost = make_cost_model("llama-3.1-8b", args.hardware)
    overhead = cost.hardware.efficiency.step_overhead_s
    rows = [r for r in csv.DictReader(open(args.csv)) if r["mode"] == args.mode and r["status"] == "ok"]
    base = {(r["B"], r["L"]): float(r["time_ms"]) for r in rows if r["q"] == "1"}
    print(f"{'B':>5} {'L':>6} {'q':>3} {'measured ms':>12} {'llmsim ms':>10} {'err':>7} {'meas/q=1':>9} {'llmsim/q=1':>10}")
    for r in rows:
        B, L, q = int(r["B"]), int(r["L"]), int(r["q"])
        pred = (cost.step_time(B * q, B * q, B * q * (L + q / 2), 0.0, B * (L + q)) - overhead) * 1e3
        pred1 = (cost.step_time(B, B, B * (L + 0.5), 0.0, B * (L + 1)) - overhead) * 1e3
        meas = float(r["time_ms"])
        m1 = base.get((r["B"], r["L"]), float("nan"))
        print(f"{B:5d} {L:6d} {q:3d} {meas:12.3f} {pred:10.3f} {pred / meas - 1:+7.1%} {meas / m1:9.2f} {pred / pred1:10.2f}")


if __name__ == "__main__":
    main()
