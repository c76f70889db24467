"""Start-up: what a user's command costs beyond the simulation itself (issue 24).

Two measurements, each a fresh process per run, as a user runs them:

1. `llmsim --help`: wall and CPU seconds of the whole process (target: <= 0.25 s).
2. A 10,000-request `llmsim simulate` (the azure-conv trace time-scaled to 2 req/s on
   codellama-34b, TP 2, A100-SXM-80GB, default engine profile): the CPU seconds of the whole
   process and, in the same run, the CPU seconds of the engine call inside it
   (`simulator.serving.simulate.simulate`, timed by a wrapper installed before the CLI is
   imported); target: whole process <= 1.5 x engine. `--engine none` with bench_engine's
   limits (128 seats, 4096 tokens) is a second row.

Also `python -X importtime` of `llmsim --help`'s import: which heavy libraries it loads
(numpy, pandas, matplotlib, yaml) and the cumulative import time of the CLI module.

Run: python benchmarks/bench_startup.py                      (this tree)
     python benchmarks/bench_startup.py --compare REF [--runs N]
       side by side with git revision REF (a temporary worktree), N runs of each (default 5),
       alternating, each in a fresh process; medians and minima.
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

HELP = ["--help"]
SIMULATE = ["simulate", "-m", "codellama-34b", "-H", "a100-sxm-80gb", "--tp", "2", "-w", "azure-conv",
            "-n", "10000", "-r", "2", "-q"]
SIMULATE_NONE = [*SIMULATE, "--engine", "none", "--max-num-seqs", "128", "--max-num-batched-tokens", "4096"]

#: the CLI under a wrapper that times the engine call (CPU seconds, written to $ENGINE_OUT)
_WRAPPER = """
import os, sys, time
if os.environ.get("ENGINE_OUT"):
    import simulator.serving.simulate as S
    _orig = S.simulate
    def _timed(*a, **k):
        c0 = time.process_time()
        try:
            return _orig(*a, **k)
        finally:
            with open(os.environ["ENGINE_OUT"], "a") as f:
                f.write(f"{time.process_time() - c0}\\n")
    S.simulate = _timed
from simulator.cli.commands import main
sys.argv = ["llmsim", *sys.argv[1:]]
main()
"""


def _run(root: Path, args: list[str], engine: bool) -> dict[str, float]:
    """One fresh process of the CLI of `root`: wall, whole-process CPU (user + sys) and, with
    `engine`, the engine call's CPU seconds measured inside it."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "engine"
        if engine:
            env["ENGINE_OUT"] = str(out)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", _WRAPPER, *args], cwd=root, env=env, check=True,
                       stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        row = {"wall": wall, "cpu": cpu}
        if engine:
            row["engine"] = sum(float(x) for x in out.read_text().split())
            row["ratio"] = cpu / row["engine"]
    return row


def importtime(root: Path) -> dict[str, object]:
    """`python -X importtime` of the CLI module: heavy libraries loaded, cumulative ms."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", "import simulator.cli.commands"],
                         cwd=root, env=env, check=True, capture_output=True, text=True).stderr
    loaded = {}
    total = None
    for line in err.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cum, name = (p.strip() for p in line.split("|"))
        if name in ("numpy", "pandas", "matplotlib", "yaml"):
            loaded[name] = int(cum) / 1e3
        if name == "simulator.cli.commands":
            total = int(cum) / 1e3
    return {"cli_import_ms": total, "heavy_imports_ms": loaded}


def compile_tree(root: Path) -> None:
    """Bytecode, as `pip install` compiles it: an editable install under PYTHONDONTWRITEBYTECODE
    would otherwise compile every module from source on every run."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(root / "simulator")], check=True,
                   stdout=subprocess.DEVNULL)


def measure(roots: dict[str, Path], runs: int) -> dict[str, dict[str, list[dict[str, float]]]]:
    cases = {"--help": (HELP, False), "simulate 10k": (SIMULATE, True),
             "simulate 10k --engine none": (SIMULATE_NONE, True)}
    out: dict[str, dict[str, list[dict[str, float]]]] = {name: {c: [] for c in cases} for name in roots}
    for root in roots.values():  # warm-up: file cache
        for args, engine in cases.values():
            _run(root, args, engine)
    for _ in range(runs):
        for name, root in roots.items():  # alternating: shared machines drift
            for case, (args, engine) in cases.items():
                out[name][case].append(_run(root, args, engine))
    return out


def report(results: dict[str, dict[str, list[dict[str, float]]]], imports: dict[str, dict[str, object]],
           runs: int) -> None:
    load = os.getloadavg()
    print(f"{runs} runs each, alternating, fresh process per run; load average {load[0]:.2f} "
          f"{load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs (seconds; medians, minima in brackets)")
    for name, cases in results.items():
        print(f"\n{name}")
        imp = imports[name]
        heavy = ", ".join(f"{k} {v:.0f} ms" for k, v in imp["heavy_imports_ms"].items()) or "none"  # type: ignore[union-attr]
        print(f"  importtime of simulator.cli.commands: {imp['cli_import_ms']:.0f} ms; heavy libraries: {heavy}")
        for case, rows in cases.items():
            med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
            lo = {k: min(r[k] for r in rows) for k in rows[0]}
            text = f"  {case:28s} wall {med['wall']:.3f} [{lo['wall']:.3f}]  cpu {med['cpu']:.3f} [{lo['cpu']:.3f}]"
            if "engine" in med:
                text += (f"  engine cpu {med['engine']:.3f} [{lo['engine']:.3f}]  whole/engine "
                         f"{med['ratio']:.2f} [{lo['ratio']:.2f}]")
                text += "  (target <= 1.5)" if case == "simulate 10k" else ""
            elif case == "--help":
                text += "  (target <= 0.25)"
            print(text)
    print("\njson:", json.dumps(results))


def main() -> None:
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 5
    here = Path(__file__).resolve().parents[1]
    if "--compare" not in sys.argv:
        roots = {"this tree": here}
        compile_tree(here)
        report(measure(roots, runs), {"this tree": importtime(here)}, runs)
        return
    ref = sys.argv[sys.argv.index("--compare") + 1]
    with tempfile.TemporaryDirectory() as tmp:
        other = Path(tmp) / "ref"
        subprocess.run(["git", "-C", str(here), "worktree", "add", "--detach", "-q", str(other), ref], check=True)
        try:
            roots = {ref: other, "this tree": here}
            for root in roots.values():
                compile_tree(root)
            imports = {name: importtime(root) for name, root in roots.items()}
            results = measure(roots, runs)
        finally:
            subprocess.run(["git", "-C", str(here), "worktree", "remove", "--force", str(other)], check=False)
    report(results, imports, runs)


if __name__ == "__main__":
    main()
