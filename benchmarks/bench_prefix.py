"""Prefix caching's cost to the simulator: the same run with the cache on and off (CPU time).

1. ShareGPT as vLLM samples it, 10,000 requests at 20 req/s (Poisson, seed 0), llama-3.1-8b on
   h100-sxm: single-turn prompts share nothing, so this prices the cache's bookkeeping
   (free queue, hashing) alone. Target: with the cache <= 2x the time without it.
2. ShareGPT multi-turn, 2,000 conversations (every turn re-sends the history, 2 s think
   time): the cache hits, and the run with it also serves faster.

Run: python benchmarks/bench_prefix.py
"""

from __future__ import annotations

import math
import time

import numpy as np

from simulator.metrics.summary import summarize
from simulator.resolve import make_cost_model
from simulator.serving.sched.registry import EngineConfig
from simulator.serving.simulate import simulate
from simulator.workloads.named import sharegpt_workload
from simulator.workloads.sharegpt import sharegpt_multi_turn


def timed(cost, wl, on: bool) -> tuple[float, dict]:
    cfg = EngineConfig(enable_prefix_caching=on)
    c0 = time.process_time()
    res = simulate(cost, wl, cfg)
    return time.process_time() - c0, summarize(res)


def compare(label: str, cost, wl) -> float:
    t_off, s_off = timed(cost, wl, False)
    t_on, s_on = timed(cost, wl, True)
    print(f"{label}: {wl.num_requests:,} requests")
    for name, t, s in (("off", t_off, s_off), ("on ", t_on, s_on)):
        print(f"  prefix caching {name}: cpu {t:.2f} s, hit rate {s['prefix_cache_hit_rate']:.3f}, "
              f"mean TTFT {s['mean_ttft_ms']:.1f} ms, {s['steps']:,} steps")
    ratio = t_on / t_off
    print(f"  on / off = {ratio:.2f}x (target <= 2x)")
    return ratio


def main() -> None:
    cost = make_cost_model("llama-3.1-8b", "h100-sxm")
    model = cost.model
    wl = sharegpt_workload(10_000, 20.0, 1.0, 0, model)
    r1 = compare("ShareGPT single-turn", cost, wl)
    mt = sharegpt_multi_turn(2_000, seed=0, rate=5.0, think_time_s=2.0, max_context_tokens=8192)
    r2 = compare("ShareGPT multi-turn", cost, mt.to_workload(name="sharegpt-multi-turn"))
    assert math.isfinite(r1) and math.isfinite(r2)
    print(f"mean turns per conversation {mt.num_requests / 2000:.2f}, "
          f"mean prompt {np.mean(mt.input_len):.0f} tokens")


if __name__ == "__main__":
    main()
