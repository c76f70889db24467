"""Scan an engine's fp8 kernel factor on a chip family (`kernels.fp8_efficiency_relative`) on the
MLPerf rows of that engine and family.

    python benchmarks/scan_fp8_relative.py [--engine vllm] [--family ada] [--values 1.0,0.65,0.6,0.55,0.5]

The factor scales the chip's fp8 GEMM and fp8-KV attention efficiencies for that engine only
(`profiles.profile.apply_profile`). Each value's rows are priced as `llmsim validate` prices them
(every LoadGen run simulated, `fit_mlperf.price`'s engine replacement); the value kept is the
grid point of least median APE. Written next to the other MLPerf fits as
`benchmarks/results/chips/fit_mlperf_<engine>_<family>.json` (the `fit_mlperf.py --grid` format,
which `render_validation_chips.py` reads): its leave-one-hardware-out entry for a chip is the
error without the factor (1.0) when the family's only rows are that chip's, since then nothing
else could have fitted it.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fit_mlperf import median_ape, price_with_engines, read_rows, summary  # noqa: E402

from simulator.analysis.validate import Validator  # noqa: E402
from simulator.profiles.profile import CHIP_CLASSES, engine_from_dict  # noqa: E402
from simulator.specs.catalog import read_yaml  # noqa: E402


def profile_at(engine: str, family: str, value: float) -> Any:
    """The built-in profile with `kernels.fp8_efficiency_relative.<family>` = value (1.0: the
    chip's own fp8 efficiencies, as without the factor)."""
    data = copy.deepcopy(read_yaml(ROOT / "engine_specs" / f"{engine}.yaml"))
    data.setdefault("kernels", {}).setdefault("fp8_efficiency_relative", {})[family] = {
        "value": float(value), "status": "provisional (scan)"}
    data["sources"][f"kernels.fp8_efficiency_relative.{family}"] = "benchmarks/scan_fp8_relative.py (trial value)"
    return engine_from_dict(data, f"{engine} (trial)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default="vllm")
    ap.add_argument("--family", default="ada", choices=sorted(CHIP_CLASSES))
    ap.add_argument("--values", default="1.0,0.65,0.6,0.55,0.5")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    chips = CHIP_CLASSES[args.family]
    rows = [r for r in read_rows() if r["hardware"] in chips]
    rows = [r for r in rows if Validator().profile_of(r).id == args.engine]
    if not rows:
        sys.exit(f"no {args.engine} rows on {args.family} chips in the MLPerf file")
    values = sorted({1.0, *(float(x) for x in args.values.split(","))}, reverse=True)  # 1.0: no factor
    pts = {v: price_with_engines(rows, {args.engine: profile_at(args.engine, args.family, v)}) for v in values}
    name = f"eng:{args.engine}:{args.family}:fp8_efficiency_relative"
    grid = []
    for v in values:
        grid.append({"values": {name: v}, "median_ape": median_ape(pts[v]),
                     "errors": [round(p["error_pct"], 1) for p in pts[v]]})
        print(f"{args.engine} {args.family} fp8_efficiency_relative {v:g}: "
              + " ".join(f"{p['hardware']} {p['metric']} {p['error_pct']:+.1f}" for p in pts[v]), flush=True)
    best = min(grid, key=lambda g: g["median_ape"])
    best_v, base = best["values"][name], pts[1.0]
    held = sorted({r["hardware"] for r in rows})
    loho = {hw: {"values": {}, "median_ape": median_ape([p for p in base if p["hardware"] == hw]),
                 "note": f"without the {args.engine}/{args.family} fp8 factor, which only its rows fit"}
            for hw in held} if len(held) == 1 else {}
    doc = {"file": "dev_mlperf51_offline.csv", "values": best["values"], "groups": [f"{args.engine}/{args.family}"],
           "models": [], "grid_fit": {"values": best["values"], **summary(pts[best_v]),
                                      "leave_one_hardware_out": loho, "grid": grid,
                                      "without_factor_median_ape": median_ape(base)}}
    out = args.json or ROOT / "benchmarks" / "results" / "chips" / f"fit_mlperf_{args.engine}_{args.family}.json"
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"best {best['values']} median APE {best['median_ape']:.1f} % (without the factor "
          f"{median_ape(base):.1f} %); wrote {out}")


if __name__ == "__main__":
    main()
