"""`llmsim plan` as a user runs it: CPU seconds of the whole process and the answer (issue 24).

1. README's plan example: Llama-3.1-70B, 20 req/s of azure-conv, p99 TTFT 2 s, TPOT 100 ms,
   H100/H200/B200 x TP 2/4/8, 2000 requests per simulation (target: <= 10 s of CPU).
2. The 70B ShareGPT plan of issue 24: 30 req/s, p99 TTFT 1 s, TPOT 50 ms, H100 TP 4, 8000
   requests per simulation (target: <= 20 s of CPU, the same or a better answer).

Each plan runs in a fresh process (`--serial`: one core; CPU = user + sys of the process);
the answer is read from its `--json` output: the cheapest shape, its replicas, one replica's
SLO capacity, the binding SLO, and the simulations run.

Run: python benchmarks/bench_plan.py                     (this tree)
     python benchmarks/bench_plan.py --compare REF [--runs N] [--only readme|70b]
       side by side with git revision REF (a temporary worktree), N runs each (default 1),
       alternating.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PLANS = {
    "readme": ["plan", "-m", "llama-3.1-70b", "-r", "20", "-w", "azure-conv", "--goodput", "ttft:2000",
               "--goodput", "tpot:100", "--hardware", "h100-sxm,h200-sxm,b200", "--tp", "2,4,8", "-n", "2000"],
    "70b": ["plan", "-m", "llama-3.1-70b", "-r", "30", "-w", "sharegpt", "--goodput", "ttft:1000",
            "--goodput", "tpot:50", "--hardware", "h100-sxm", "--tp", "4", "-n", "8000"],
}
TARGET_S = {"readme": 10.0, "70b": 20.0}

_CLI = "import sys; sys.argv = ['llmsim', *sys.argv[1:]]\nfrom simulator.cli.commands import main\nmain()\n"


def run_plan(root: Path, args: list[str]) -> dict:
    """One plan in a fresh process of `root`'s simulator: CPU, wall and the answer."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _CLI, *args, "--serial", "-q", "--json"], cwd=root, env=env,
                         check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    r = json.loads(out)
    b = r.get("best") or {}
    rows = (*r["candidates"], *r["infeasible"])
    # counted from the probes a capacity search keeps (this tree); a revision without them: "?"
    sims = (sum(1 + (c.get("bisection_probes") or 0) + len(c.get("pool_checks") or []) for c in rows)
            + (1 if b.get("without_headroom") else 0)) if any("probes" in c for c in rows) else "?"
    return {"cpu": cpu, "wall": wall, "best": f"{b.get('replicas')} x {b.get('hardware')} tp={b.get('tp')}",
            "cost_per_hour": b.get("cost_per_hour_usd"), "capacity": b.get("slo_capacity"),
            "binding": b.get("binding_slo"), "verified": b.get("replicas_verified"),
            "without_headroom": (b.get("without_headroom") or {}).get("meets_slo"), "simulations": sims}


def main() -> None:
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 1
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    plans = {k: v for k, v in PLANS.items() if only in (None, k)}
    here = Path(__file__).resolve().parents[1]
    roots = {"this tree": here}
    tmp = None
    if "--compare" in sys.argv:
        ref = sys.argv[sys.argv.index("--compare") + 1]
        tmp = tempfile.TemporaryDirectory()
        other = Path(tmp.name) / "ref"
        subprocess.run(["git", "-C", str(here), "worktree", "add", "--detach", "-q", str(other), ref], check=True)
        roots = {ref: other, "this tree": here}
    try:
        for root in roots.values():  # bytecode, as pip install compiles it
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(root / "simulator")], check=True,
                           stdout=subprocess.DEVNULL)
        results: dict[str, dict[str, list[dict]]] = {p: {n: [] for n in roots} for p in plans}
        for _ in range(runs):
            for p, args in plans.items():
                for name, root in roots.items():  # alternating: shared machines drift
                    results[p][name].append(run_plan(root, args))
    finally:
        if tmp is not None:
            subprocess.run(["git", "-C", str(here), "worktree", "remove", "--force", str(Path(tmp.name) / "ref")],
                           check=False)
            tmp.cleanup()
    load = os.getloadavg()
    print(f"{runs} run(s) each, one core (--serial), fresh process; load average {load[0]:.2f} {load[1]:.2f} "
          f"{load[2]:.2f} on {os.cpu_count()} CPUs")
    for p, by_tree in results.items():
        print(f"\n{p}: llmsim {' '.join(PLANS[p])}   (target <= {TARGET_S[p]:g} s of CPU)")
        for name, rows in by_tree.items():
            cpu = statistics.median(r["cpu"] for r in rows)
            r = rows[-1]
            print(f"  {name:>10}: cpu {cpu:6.2f} s (min {min(x['cpu'] for x in rows):.2f}), wall "
                  f"{statistics.median(x['wall'] for x in rows):6.1f} s, {r['simulations']} simulations; best "
                  f"{r['best']} (${r['cost_per_hour']}/h, {r['capacity']:.4g} req/s per replica, binds "
                  f"{r['binding']}, pooled {r['verified']}, without headroom one fewer passes: "
                  f"{r['without_headroom']})")


if __name__ == "__main__":
    main()
