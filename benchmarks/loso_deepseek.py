"""Leave-one-source-out of the attention-DP step cost fitted on the DeepSeek-R1 MLPerf rows (issue 22).

    python benchmarks/loso_deepseek.py [--values 0.034,0.037,0.04,0.043,0.046]

Prices the 16 DeepSeek-R1 rows of dev_mlperf51_offline.csv at each value of the trtllm-pytorch
profile's `kernels.by_chip_class.blackwell.dp_attention_step_overhead_s` (as `fit_mlperf.py
--grid` does), then for each submitter (the `closed/<submitter>/` of a row's source) picks the
value of least median APE on the other submitters' rows and reports its rows' median APE there.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fit_mlperf import DATA, FILE, price_with_engines  # noqa: E402
from fit_serving_chips import profile_with  # noqa: E402

from simulator.analysis.measurements import read_measurements  # noqa: E402


def submitter(row: dict) -> str:
    parts = str(row["source"]).split(":", 1)[-1].split("/")
    return parts[parts.index("closed") + 1] if "closed" in parts else "?"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--values", default="0.034,0.037,0.04,0.043,0.046")
    a = ap.parse_args(argv)
    values = [float(v) for v in a.values.split(",")]
    rows, _ = read_measurements(DATA / FILE)
    rows = [r for r in rows if str(r.get("dataset")) == "mlperf-deepseek-r1-mix"]
    ape: dict[float, dict[str, float]] = {}
    for v in values:
        prof = profile_with("trtllm-pytorch", "blackwell", {"dp_attention_step_overhead_s": v})
        ape[v] = {p["id"]: abs(p["error_pct"]) for p in price_with_engines(rows, {"trtllm-pytorch": prof})}
    by: dict[str, list[str]] = defaultdict(list)
    for r in rows:
        by[submitter(r)].append(r["id"])
    print(f"{'held out':16s} {'rows':>4s} {'value':>7s} {'held-out median APE %':>22s}")
    for sub, ids in sorted(by.items()):
        rest = [r["id"] for r in rows if r["id"] not in ids]
        best = min(values, key=lambda v: float(np.median([ape[v][i] for i in rest])))
        print(f"{sub:16s} {len(ids):4d} {best:7.3f} {float(np.median([ape[best][i] for i in ids])):22.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
