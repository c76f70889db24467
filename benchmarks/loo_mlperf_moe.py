"""Leave-one-hardware-out for the CDNA3 numbers fitted on the MLPerf rows: the MoE grouped-GEMM
factors (`moe_gemm_relative` of the vllm and sglang profiles, `scan_moe_gemm.py`) and MI325X's
fp8 GEMM efficiency (`fit_mlperf.py --grid chip:mi325x:...`).

    python benchmarks/loo_mlperf_moe.py [--json benchmarks/results/chips/fit_mlperf_moe_cdna3.json]

Each chip's rows of dev_mlperf51_offline.csv are priced with the numbers the other chip's rows
pick (the MoE factors read off `benchmarks/results/chips/scan_moe_gemm.txt`, nearest zero median
error on the other chip's rows alone) and its fp8 GEMM efficiency copied as the catalog would
(`fit_mlperf.COPY`: the other CDNA3 chip's):

* MI300X held out: vllm 0.7 and sglang 0.75 (MI325X's rows alone), fp8 0.5 (MI325X's);
* MI325X held out: vllm 0.7 and sglang 0.8 (MI300X's rows alone), fp8 0.38 (MI300X's).

`render_validation_chips.py` reads the JSON (its name sorts after fit_mlperf_mi325x.json, so
MI325X's entry here, which holds out both fits at once, is the one shown).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fit_mlperf import copy_value, median_ape, price, read_rows  # noqa: E402

HELD_OUT = {
    "mi300x": {"cls:vllm:cdna3:moe_gemm_relative": 0.7, "cls:sglang:cdna3:moe_gemm_relative": 0.75,
               "chip:mi300x:compute_efficiency:fp8": copy_value("chip:mi300x:compute_efficiency:fp8")},
    "mi325x": {"cls:vllm:cdna3:moe_gemm_relative": 0.7, "cls:sglang:cdna3:moe_gemm_relative": 0.8,
               "chip:mi325x:compute_efficiency:fp8": copy_value("chip:mi325x:compute_efficiency:fp8")},
}

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "chips" / "fit_mlperf_moe_cdna3.json")
    args = ap.parse_args()
    rows = read_rows()
    loho = {}
    for hw, values in HELD_OUT.items():
        pts = price([r for r in rows if r["hardware"] == hw], values, None)
        loho[hw] = {"values": values, "median_ape": median_ape(pts)}
        print(f"{hw} held out: {values} -> median APE {loho[hw]['median_ape']:.1f} % ({len(pts)} rows)", flush=True)
    args.json.write_text(json.dumps({"file": "dev_mlperf51_offline.csv",
                                     "grid_fit": {"leave_one_hardware_out": loho}}, indent=1) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
