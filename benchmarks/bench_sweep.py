"""Wall time of the README example sweep (not a test):

    llmsim sweep -m llama-3.1-8b -H h100-sxm -w azure-conv --rates auto -n 2000 \\
        --goodput ttft:2000 --goodput tpot:100

    python benchmarks/bench_sweep.py [--serial | --workers N] [-n 2000]

Runs it through the Python API (`simulator.analysis.sweep.sweep`) with the same executor choice as
the command (default: a process pool of os.cpu_count() workers, pool start-up included) and
prints the seconds, the number of simulations and the per-curve results.
"""

from __future__ import annotations

import argparse
import os
import time

from simulator.analysis.executors import make_executor
from simulator.analysis.sweep import sweep
from simulator.scenario import Scenario


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--serial", action="store_true", help="run every point in this process")
    ap.add_argument("--workers", type=int, default=None, help="process-pool size [os.cpu_count()]")
    ap.add_argument("-n", "--num-requests", type=int, default=2000)
    args = ap.parse_args()

    sc = Scenario(model="llama-3.1-8b", hardware="h100-sxm", workload="azure-conv",
                  num_requests=args.num_requests, goodput={"ttft": 2000.0, "tpot": 100.0})
    sims = [0, 0]

    def progress(done: int, total: int) -> None:
        sims[:] = [done, total]

    t0 = time.perf_counter()
    with make_executor(serial=args.serial, workers=args.workers) as ex:
        result = sweep(sc, "auto", executor=ex, progress=progress)
        name = ex.name
    wall = time.perf_counter() - t0
    n_points = len(result["points"])
    print(f"sweep {sc.model} on {sc.hardware}, {sc.workload}, -n {sc.num_requests}, --rates auto "
          f"({name}, {os.cpu_count()} CPUs)")
    print(f"wall time: {wall:.2f} s for {n_points} points ({sims[1]} simulations incl. the offline run"
          f" and bisection probes)")
    for c in result["curves"]:
        knee = c["knee"]["rate"] if c["knee"] else None
        print(f"  offline max {c['offline_max_throughput']:.3g} req/s, saturation "
              f"{c['saturation_rate'] if c['saturation_rate'] is None else round(c['saturation_rate'], 3)} req/s, "
              f"knee {knee}, SLO capacity {c['slo_capacity'] and round(c['slo_capacity'], 3)} req/s "
              f"({c['bisection_probes']} probes)")
        for w in c["warnings"]:
            print(f"  warning: {w}")


if __name__ == "__main__":
    main()
