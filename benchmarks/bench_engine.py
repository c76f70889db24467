"""Engine speed: requests simulated per second (CPU time of this process, one core).

1. 10,000 requests of `azure-conv` time-scaled to 2 req/s on codellama-34b, tp 2,
   a100-sxm-80gb, max 128 sequences, 4096-token budget (target: < 1 s).
2. `--big`: 1,000,000 requests of a steady synthetic workload (target: < 60 s).

Run: python benchmarks/bench_engine.py [--big]
     python benchmarks/bench_engine.py --compare REF [--runs N] [--rate R]
       side by side with git revision REF (a temporary worktree): N runs of each (default 3),
       alternating, each in a fresh process running the same timing code; prints min and
       median wall and CPU seconds. --rate rescales the 10k run (default 2 req/s: 0.05 gives
       a batch of about 1, 8 a batch of about 120). --stream-us C: the same run with the API
       server's streaming on (C us an output, the `vllm` profile's 90; the revisions must have
       `ClientView.stream_output_s`); at --rate 8 and C 200 the loop falls behind (merging).
       --replicas R --clients N: the same 10k requests from N closed-loop clients on R
       replicas (least-kv), where every request's end on any replica makes the next one.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from simulator.metrics.summary import summarize
from simulator.resolve import make_cost_model
from simulator.serving.sched.registry import EngineConfig
from simulator.serving.simulate import simulate
from simulator.workloads import workload as W
from simulator.workloads.traces import builtin


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


#: the timed 10k run, the same code for both trees (only the `simulator` package differs):
#: a fresh process, one `simulate` call, times at ns resolution (the script prints 2 decimals)
_TIMED = """
import time
import simulator as llmsim
try:  # the layered package (issue 21)
    from simulator.workloads.workload import scale_to_rate, take
except ImportError:  # earlier revisions: one flat package
    from simulator.workload import scale_to_rate, take
cost = llmsim.make_cost_model("codellama-34b", "a100-sxm-80gb", tp=2)
cfg = llmsim.EngineConfig(max_num_seqs=128, max_num_batched_tokens=4096)
wl = scale_to_rate(take(llmsim.builtin("azure-conv"), 10_000), RATE)
if CLIENTS:
    import dataclasses
    wl = dataclasses.replace(wl, concurrency=CLIENTS)
t0, c0 = time.perf_counter(), time.process_time()
if STREAM_US:
    from simulator.serving.client_view import ClientView
    llmsim.simulate(cost, wl, cfg, REPLICAS, "least-kv", client=ClientView(stream_output_s=STREAM_US * 1e-6))
else:
    llmsim.simulate(cost, wl, cfg, REPLICAS, "least-kv")
print(time.perf_counter() - t0, time.process_time() - c0)
"""


def _timed_run(root: Path, rate: float, stream_us: float = 0.0, replicas: int = 1,
               clients: int = 0) -> tuple[float, float]:
    """(wall s, cpu s) of one 10k run of root's simulator at `rate` req/s (streaming at
    `stream_us` us an output; 0: off) on `replicas` (`clients` > 0: a closed loop of that many
    instead of the rate), in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    head = f"RATE = {rate!r}\nSTREAM_US = {stream_us!r}\nREPLICAS = {replicas!r}\nCLIENTS = {clients!r}\n"
    text = subprocess.run([sys.executable, "-c", head + _TIMED], cwd=root, env=env,
                          check=True, capture_output=True, text=True).stdout
    wall, cpu = text.split()
    return float(wall), float(cpu)


def compare(ref: str, runs: int, rate: float = 2.0, stream_us: float = 0.0, replicas: int = 1,
            clients: int = 0) -> None:
    """This tree against git revision `ref`, runs alternating (shared machines drift)."""
    here = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        other = Path(tmp) / "ref"
        subprocess.run(["git", "-C", str(here), "worktree", "add", "--detach", "-q", str(other), ref], check=True)
        try:
            times: dict[str, list[tuple[float, float]]] = {ref: [], "this tree": []}
            for _ in range(runs):
                times[ref].append(_timed_run(other, rate, stream_us, replicas, clients))
                times["this tree"].append(_timed_run(here, rate, stream_us, replicas, clients))
        finally:
            subprocess.run(["git", "-C", str(here), "worktree", "remove", "--force", str(other)], check=False)
    stream = f", streaming {stream_us:g} us an output" if stream_us else ""
    load = f"{clients} closed-loop clients" if clients else f"{rate:g} req/s"
    print(f"azure-conv 10k at {load} on {replicas} replica(s){stream}, {runs} runs each, alternating, "
          "one fresh process a run (seconds)")
    print(f"{'':>12} {'wall min':>9} {'wall med':>9} {'cpu min':>8} {'cpu med':>8}")
    for name, t in times.items():
        wall, cpu = [w for w, _ in t], [c for _, c in t]
        print(f"{name[:12]:>12} {min(wall):9.4f} {statistics.median(wall):9.4f} "
              f"{min(cpu):8.4f} {statistics.median(cpu):8.4f}")


def main() -> None:
    if "--compare" in sys.argv:
        i = sys.argv.index("--compare")
        runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 3
        rate = float(sys.argv[sys.argv.index("--rate") + 1]) if "--rate" in sys.argv else 2.0
        stream_us = float(sys.argv[sys.argv.index("--stream-us") + 1]) if "--stream-us" in sys.argv else 0.0
        replicas = int(sys.argv[sys.argv.index("--replicas") + 1]) if "--replicas" in sys.argv else 1
        clients = int(sys.argv[sys.argv.index("--clients") + 1]) if "--clients" in sys.argv else 0
        compare(sys.argv[i + 1], runs, rate, stream_us, replicas, clients)
        return
    cost = make_cost_model("codellama-34b", "a100-sxm-80gb", tp=2)
    cfg = EngineConfig(max_num_seqs=128, max_num_batched_tokens=4096)
    wl = W.scale_to_rate(W.take(builtin("azure-conv"), 10_000), 2.0)
    run("azure-conv 10k @ 2 req/s (target < 1 s)", cost, wl, cfg)
    if "--big" in sys.argv:
        big = W.synthetic(1_000_000, 2.0, 1024, 128, range_ratio=0.5, seed=0)
        run("steady synthetic 1M @ 2 req/s (target < 60 s)", cost, big, cfg)


if __name__ == "__main__":
    main()
