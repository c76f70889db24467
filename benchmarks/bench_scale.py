"""Scale: peak memory and time of very long runs (not a test; figures in docs/reliability.md).

(a) trace replay: the built-in azure-conv trace tiled to 1,000,000 requests (`take`, which
    keeps its own timing, ~5.5 req/s), written to a temporary simple-form CSV, read back with
    `read_trace` and simulated on llama-3.1-8b / h100-sxm (stable: ~5.5 req/s offered).
(b) synthetic: 10,000,000 requests, prompt 256 uniform +-50 %, output 16..32 tokens, Poisson at
    40 req/s on llama-3.1-8b / h100-sxm (stable), summarised with `summarize`.
(c) (a) under the DEFAULT engine (`Scenario(...).run()`: the vllm profile, prefix caching on,
    the client view), the run `llmsim simulate -w FILE` does (issue 26).
(d) multi-turn: `shared-prefix --multi-turn` with one session per 10 requests (num_groups 10,
    prompts_per_group n / 100: 10 rounds per session, so prompt lengths do not grow with n),
    rate 20 req/s, default engine; time and memory should be linear in n (issue 26).

Each case runs in a fresh subprocess, so its peak RSS (`resource.getrusage`, ru_maxrss) is
its own; the process's RSS after imports is printed as the baseline. Also printed: the
memory bound of docs/reliability.md (per-request numpy records + bounded ITL store +
bounded timeline) for the case's request count.

    python benchmarks/bench_scale.py            # both cases
    python benchmarks/bench_scale.py a          # only (a); `b` only (b)
    python benchmarks/bench_scale.py b --n 2000000   # a smaller (b)
    python benchmarks/bench_scale.py c                # 1M azure-conv, default engine
    python benchmarks/bench_scale.py d --n 100000     # multi-turn (default n 100,000)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time


def _rss_mb() -> float:
    """Current RSS (MB), from /proc (Linux) or psutil."""
    try:
        import psutil

        return psutil.Process().memory_info().rss / 1e6
    except ImportError:  # pragma: no cover
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3  # kB on Linux


#: bytes per request kept for the whole run (itemised with tracemalloc, issue 26; docs/reliability.md)
BYTES_PER_REQUEST = {
    "workload arrival_s, input_len, output_len (float64, int64, int64)": 24,
    "engine arrival copy + event-queue send times + SimResult arrival copy (float64 x 3)": 24,
    "records: first_token_s, finish_s, scheduled_s, failed_s (float64 x 4)": 32,
    "records: preemptions, replica, cached_tokens (int64 x 3)": 24,
    "records: status (int8)": 1,
}
#: transient bytes per request of `metrics.summarize` (ttft/e2el/tpot, masks, the sorts of
#: the percentiles and the stability fit; measured with tracemalloc: 76 B/request)
SUMMARY_BYTES_PER_REQUEST = 76
#: the ITL store: <= ITL_EXACT_LIMIT (4 M) exact gaps (64 MB) plus the transient of folding them
#: into the histogram (measured: 260 MB); independent of the number of requests
ITL_BOUND_MB = 64 + 260
#: the timeline: <= 200k rows x 16 float64 columns (steplog.TL_COLUMNS), x2 while decimating
TIMELINE_BOUND_MB = 200_000 * 16 * 8 * 2 / 1e6
#: what else does not grow with the requests, MEASURED (not itemised): the engine's state sized by
#: KV blocks and seats, the timeline's int and MFU/MBU columns at the end, allocator slack; the
#: residual of case (c) at 250k / 500k / 1M requests above the per-request part and the stores
OTHER_FIXED_MB = 75
#: the fixed part of the bound
FIXED_MB = ITL_BOUND_MB + TIMELINE_BOUND_MB + OTHER_FIXED_MB


def bound_mb(n: int) -> float:
    """Peak RSS above the after-imports baseline: the per-request records, plus the larger of
    the summary's per-request transient (at the end) and the fixed stores (during the run)."""
    kept = n * sum(BYTES_PER_REQUEST.values()) / 1e6
    return kept + max(n * SUMMARY_BYTES_PER_REQUEST / 1e6, FIXED_MB)


def _figures(case: str, n: int, t0: float, c0: float, t_sim: float, c_sim: float, base_rss: float,
             s: dict, **extra: float) -> dict:
    """One case's time, memory and result figures (every case reports the same ones)."""
    return {"case": case, "n": n, **extra, "simulate_wall_s": t_sim, "simulate_cpu_s": c_sim,
            "total_wall_s": time.perf_counter() - t0, "total_cpu_s": time.process_time() - c0,
            "rss_after_imports_mb": base_rss, "peak_rss_mb": _peak_mb(),
            "steps": s["steps"], "completed": s["completed"], "failed": s["failed"],
            "simulated_hours": s["duration"] / 3600, "unstable": s["unstable"],
            "mean_ttft_ms": s["mean_ttft_ms"], "bound_mb": bound_mb(n)}


def _tiled_trace(n: int, d: str) -> str:
    """The Azure conversation trace tiled to n requests, written as a trace file in folder d."""
    from simulator.cli.outputs import write_trace
    from simulator.workloads import traces as T
    from simulator.workloads import workload as W

    path = os.path.join(d, "trace.csv")
    write_trace(W.take(T.builtin("azure-conv"), n), path)
    return path


def _measure(case: str, n: int, w, t0: float, c0: float, base_rss: float, rss_loaded: float,
             **extra: float) -> dict:
    """Simulate workload `w` on llama-3.1-8b / h100-sxm and collect time, memory and results."""
    from simulator.metrics.summary import summarize
    from simulator.resolve import make_cost_model
    from simulator.serving.sched.registry import EngineConfig
    from simulator.serving.simulate import simulate

    cost = make_cost_model("llama-3.1-8b", "h100-sxm")
    t2, c2 = time.perf_counter(), time.process_time()
    res = simulate(cost, w, EngineConfig())
    t_sim, c_sim = time.perf_counter() - t2, time.process_time() - c2
    return _figures(case, n, t0, c0, t_sim, c_sim, base_rss, summarize(res), rss_after_load_mb=rss_loaded,
                    **extra, itl_distinct_values=int(len(res.itl_values_s)), timeline_rows=int(len(res.timeline)))


def case_a(n: int) -> dict:
    from simulator.workloads import traces as T

    base_rss = _rss_mb()
    t0, c0 = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory() as d:
        path = _tiled_trace(n, d)
        size = os.path.getsize(path)
        t1 = time.perf_counter()
        w = T.read_trace(path)
        t_read = time.perf_counter() - t1
    return _measure(f"(a) azure-conv tiled to {n:,} requests, trace file replay", n, w, t0, c0, base_rss,
                    _rss_mb(), trace_file_mb=size / 1e6, read_trace_s=t_read)


def case_b(n: int) -> dict:
    from simulator.workloads import workload as W

    base_rss = _rss_mb()
    t0, c0 = time.perf_counter(), time.process_time()
    w = W.synthetic(n, 40.0, 256, 24, range_ratio=0.33, seed=0)
    t_gen = time.perf_counter() - t0
    return _measure(f"(b) synthetic {n:,} requests, 256 in / 16-32 out, Poisson 40 req/s", n, w, t0, c0,
                    base_rss, _rss_mb(), generate_s=t_gen)


def _scenario_run(case: str, n: int, sc, base_rss: float, t0: float, c0: float, **extra: float) -> dict:
    """Run a `Scenario` as `llmsim simulate` does (its default engine) and collect the figures."""
    t2, c2 = time.perf_counter(), time.process_time()
    res, s = sc.run()
    t_sim, c_sim = time.perf_counter() - t2, time.process_time() - c2
    return _figures(case, n, t0, c0, t_sim, c_sim, base_rss, s, **extra,
                    prefix_cache_hit_rate=s.get("prefix_cache_hit_rate", 0.0))


def case_c(n: int) -> dict:
    from simulator.scenario import Scenario

    base_rss = _rss_mb()
    t0, c0 = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory() as d:
        sc = Scenario(model="llama-3.1-8b", hardware="h100-sxm", workload=_tiled_trace(n, d))
        return _scenario_run(f"(c) azure-conv tiled to {n:,} requests, default engine ({sc.engine})", n, sc,
                             base_rss, t0, c0)


def case_d(n: int) -> dict:
    from simulator.scenario import Scenario

    base_rss = _rss_mb()
    t0, c0 = time.perf_counter(), time.process_time()
    sessions = max(1, n // 10)
    sc = Scenario(model="llama-3.1-8b", hardware="h100-sxm", workload="shared-prefix", num_requests=n, rate=20.0,
                  workload_params={"num_groups": 10, "prompts_per_group": max(1, sessions // 10),
                                   "multi_turn": True})
    return _scenario_run(f"(d) shared-prefix multi-turn, {n:,} requests, 10 rounds per session, default engine", n,
                         sc, base_rss, t0, c0)


CASES = {"a": (case_a, 1_000_000), "b": (case_b, 10_000_000), "c": (case_c, 1_000_000), "d": (case_d, 100_000)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="*", help="which cases, of a, b, c, d (default: a and b)")
    ap.add_argument("--n", type=int, default=None, help="requests (default 1M for a, 10M for b)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.cases = args.cases or ["a", "b"]
    if set(args.cases) - set(CASES):
        ap.error(f"cases: {args.cases} (choose from {', '.join(CASES)})")
    if args.child:
        fn, default_n = CASES[args.cases[0]]
        print(json.dumps(fn(args.n or default_n)))
        return
    for c in args.cases:
        cmd = [sys.executable, __file__, c, "--child"] + (["--n", str(args.n)] if args.n else [])
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            print(out.stderr, file=sys.stderr)
            sys.exit(out.returncode)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(r.pop("case"))
        for k, v in r.items():
            print(f"  {k:<24} {v:,.3f}" if isinstance(v, float) else f"  {k:<24} {v}")
        print(f"  peak RSS - baseline     {r['peak_rss_mb'] - r['rss_after_imports_mb']:,.0f} MB "
              f"({(r['peak_rss_mb'] - r['rss_after_imports_mb']) * 1e6 / r['n']:.0f} B/request); "
              f"stated bound {r['bound_mb']:,.0f} MB")


if __name__ == "__main__":
    main()
