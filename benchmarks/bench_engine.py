"""Engine speed: requests simulated per second (CPU time of this process, one core).

1. 10,000 requests of `azure-conv` time-scaled to 2 req/s on codellama-34b, tp 2,
   a100-sxm-80gb, max 128 sequences, 4096-token budget (target: < 1 s).
2. `--big`: 1,000,000 requests of a steady synthetic workload (target: < 60 s).

Run: python benchmarks/bench_engine.py [--big]
"""

from __future__ import annotations

import sys
import time

from simulator import workload as W
from simulator.engine import EngineConfig, simulate
from simulator.metrics import summarize
from simulator.resolve import make_cost_model


def run(label: str, cost, wl, cfg) -> None:
    t0, c0 = time.perf_counter(), time.process_time()
    res = simulate(cost, wl, cfg)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    s = summarize(res)
    print(f"{label}: {wl.num_requests:,} requests, {s['steps']:,} engine steps, "
          f"simulated {s['duration']:.0f} s of serving")
    print(f"  wall {wall:.2f} s, cpu {cpu:.2f} s -> {wl.num_requests / cpu:,.0f} requests/s, "
          f"{s['steps'] / cpu:,.0f} steps/s (cpu)")
    print(f"  mean batch {s['mean_batch_size']:.1f}, mean TTFT {s['mean_ttft_ms']:.1f} ms, "
          f"mean TPOT {s['mean_tpot_ms']:.2f} ms, unstable={s['unstable']}")


def main() -> None:
    cost = make_cost_model("codellama-34b", "a100-sxm-80gb", tp=2)
    cfg = EngineConfig(max_num_seqs=128, max_num_batched_tokens=4096)
    wl = W.scale_to_rate(W.take(W.builtin("azure-conv"), 10_000), 2.0)
    run("azure-conv 10k @ 2 req/s (target < 1 s)", cost, wl, cfg)
    if "--big" in sys.argv:
        big = W.synthetic(1_000_000, 2.0, 1024, 128, range_ratio=0.5, seed=0)
        run("steady synthetic 1M @ 2 req/s (target < 60 s)", cost, big, cfg)


if __name__ == "__main__":
    main()
