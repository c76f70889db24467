"""Scan the routed experts' grouped-GEMM factor (`moe_gemm_relative`) on the MLPerf Mixtral rows.

    python benchmarks/scan_moe_gemm.py [--values 1.0,0.8,0.7,0.6,0.5] [--out FILE]

The Mixtral-8x7B rows of dev_mlperf51_offline.csv are the only large-batch, compute-bound MoE
measurements with native-format (FP8) experts: each engine x chip family's rows are priced as
`llmsim validate` prices them (every LoadGen run simulated, `fit_mlperf.price`) at each value of
that family's `kernels.by_chip_class.<family>.moe_gemm_relative`, the dense GEMM efficiencies
held at the shipped ones. The profile YAMLs cite the output (benchmarks/results/chips/
scan_moe_gemm.txt); the value kept is the grid point nearest zero median error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fit_mlperf import price, read_rows  # noqa: E402

#: (profile, chip family, chips, engine-column test): the rows each family's factor is fitted on
GROUPS = (
    ("trtllm-mlperf", "hopper", ("h200-sxm", "h100-sxm", "h200-nvl"), lambda e: e.startswith("TensorRT-LLM")),
    ("vllm", "cdna3", ("mi300x", "mi325x"), lambda e: e.startswith("vLLM") and "0.6.5" not in e),
    ("sglang", "cdna3", ("mi300x", "mi325x"), lambda e: e.startswith("SGLang")),
    ("trtllm-mlperf", "blackwell-rtx", ("rtx-pro-6000",), lambda e: e.startswith("TensorRT-LLM")),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--values", default="1.0,0.8,0.75,0.7,0.65,0.6,0.5")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "chips" / "scan_moe_gemm.txt")
    args = ap.parse_args()
    values = [float(v) for v in args.values.split(",")]
    rows = [r for r in read_rows() if "mixtral" in str(r.get("dataset"))]
    lines = ["profile family value: error % per row (Offline Tokens/s; + = predicted too fast)"]
    for prof, fam, chips, engine_ok in GROUPS:
        sub = [r for r in rows if r["hardware"] in chips and engine_ok(str(r["engine"]))]
        for v in values:
            pts = [p for p in price(sub, {f"cls:{prof}:{fam}:moe_gemm_relative": v}, None)
                   if p["metric"] == "output_tokens_per_s"]
            line = f"{prof} {fam} {v:g}: " + " ".join(f"{p['hardware']} {p['error_pct']:+.1f}" for p in pts)
            print(line, flush=True)
            lines.append(line)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
