"""Scan the vLLM profile's API-server time per streamed output (`overheads.per_stream_output_s`)
on dev_inferencemax_gptoss.csv (run by hand; ~2 min on 2 cores).

    python benchmarks/scan_gptoss_stream.py [--us 0,45,75,90,100]

Every value prices all rows of the file as `llmsim validate` does (`fit_serving_chips.errors`:
the event simulation of every closed-loop run) and prints the median absolute log error (the
fit's objective) overall and on each chip's rows, with the median APE. A scan, not a search: the
objective falls to 90 us and is flat from there to 160 us, and the data bound the value (at the
fastest point, H200 TP8 with 64 clients, one token a chunk: the loop kept up, so at most its
measured median ITL / 64); engine_specs/vllm.yaml's sources give the choice. Writes
benchmarks/results/chips/scan_gptoss_stream.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fit_serving_chips import DATA, errors, objective, profile_with, summary  # noqa: E402

from simulator.analysis.measurements import read_measurements  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--us", default="0,45,75,90,100,112,125,140,160", help="comma-separated values, microseconds per output")
    args = ap.parse_args()
    rows, _ = read_measurements(DATA / "dev_inferencemax_gptoss.csv", skip_bad_rows=True)
    chips = sorted({r["hardware"] for r in rows})
    out = {}
    for us in (float(x) for x in args.us.split(",")):
        pts = errors(rows, profile_with("vllm", "hopper", {"overheads.per_stream_output_s": us * 1e-6}))
        by = {hw: objective([p for p in pts if p["hardware"] == hw]) for hw in chips}
        s = summary(pts)
        out[us] = {"objective": objective(pts), "objective_by_hw": by, **s}
        print(f"{us:7.1f} us: objective {objective(pts):.4f} ("
              + ", ".join(f"{k} {v:.4f}" for k, v in by.items()) + f"), median APE {s['median_ape']:.2f} % ("
              + ", ".join(f"{k} {v:.2f}" for k, v in s["by_hardware"].items()) + ")", flush=True)
    (ROOT / "benchmarks/results/chips/scan_gptoss_stream.json").write_text(json.dumps(out, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
