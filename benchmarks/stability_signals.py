"""Which stability signals fire at which load (docs/sweep.md, "Saturated point").

Each scenario's offline maximum X (every request at t = 0), then one run at each fraction
of X; prints the signals `metrics.summary.stability` reports. The thresholds of the signals
were read off this table: nothing should fire well below X, something should fire past it.

Run: python benchmarks/stability_signals.py [NAME ...]
"""

from __future__ import annotations

import math
import sys

from simulator.scenario import Scenario

CASES = {
    "70b-sharegpt-8000": dict(model="llama-3.1-70b", hardware="h100-sxm", tp=4, workload="sharegpt", num_requests=8000),
    "8b-azure-2000": dict(model="llama-3.1-8b", hardware="h100-sxm", workload="azure-conv", num_requests=2000),
    "70b-azure-b200-2000": dict(model="llama-3.1-70b", hardware="b200", tp=2, workload="azure-conv", num_requests=2000),
    "8b-random-a100-500": dict(model="llama-3.1-8b", hardware="a100-sxm-80gb", workload="random", input_len=2048,
                               output_len=256, num_requests=500),
    "70b-sharegpt-500": dict(model="llama-3.1-70b", hardware="h100-sxm", tp=4, workload="sharegpt", num_requests=500),
    "70b-azure-tp8-2000": dict(model="llama-3.1-70b", hardware="h100-sxm", tp=8, workload="azure-conv", num_requests=2000),
    # benchmarks/distserve_goodput.py's short-prompt case: one decode replica behind three prefill ones
    "8b-disagg-3to1-400": dict(model="llama-3.1-8b", hardware="h100-sxm", workload="random", input_len=200,
                               output_len=200, num_requests=400, disagg="3:1"),
    "8b-disagg-3to1-4000": dict(model="llama-3.1-8b", hardware="h100-sxm", workload="random", input_len=200,
                                output_len=200, num_requests=4000, disagg="3:1"),
}
FRACTIONS = (0.5, 0.7, 0.85, 0.92, 0.96, 1.05, 1.2)


def main() -> None:
    for name in sys.argv[1:] or list(CASES):
        sc = Scenario(**CASES[name])
        x = sc.replace(rate=math.inf).run()[1]["request_throughput"]
        print(f"{name}: offline maximum {x:.3f} req/s")
        for f in FRACTIONS:
            s = sc.replace(rate=f * x).run()[1]
            print(f"  {f:4.2f} x  {', '.join(s['unstable_signals']) or '-'}")


if __name__ == "__main__":
    main()
