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

from fit_mlperf import median_ape, read_rows, summary  # noqa: E402

from simulator.analysis.validate import Validator, validate  # noqa: E402
from simulator.profiles import profile as profile_mod  # noqa: E402
from simulator.profiles.profile import CHIP_CLASSES, engine_from_dict  # noqa: E402
from simulator.specs.catalog import read_yaml  # noqa: E402


def profile_at(engine: str, family: str, value: float | None) -> Any:
    """The built-in profile with `kernels.fp8_efficiency_relative.<family>` = value (None: none)."""
    data = copy.deepcopy(read_yaml(ROOT / "engine_specs" / f"{engine}.yaml"))
    rel = data.setdefault("kernels", {}).setdefault("fp8_efficiency_relative", {})
    rel.pop(family, None)
    data["sources"].pop(f"kernels.fp8_efficiency_relative.{family}", None)
    if value is not None:
        rel[family] = {"value": float(value), "status": "provisional (scan)"}
        data["sources"][f"kernels.fp8_efficiency_relative.{family}"] = "benchmarks/scan_fp8_relative.py (trial value)"
    if not rel:
        data["kernels"].pop("fp8_efficiency_relative")
    return engine_from_dict(data, f"{engine} (trial)")


def price(rows: list[dict[str, Any]], engine: str, prof: Any) -> list[dict[str, Any]]:
    original = profile_mod._builtin_engine
    profile_mod._builtin_engine = lambda eid: prof if eid == engine else original(eid)  # type: ignore[assignment]
    try:
        return validate(rows, validator=Validator())["points"]
    finally:
        profile_mod._builtin_engine = original  # type: ignore[assignment]


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
    grid = []
    base = price(rows, args.engine, profile_at(args.engine, args.family, None))
    for v in [float(x) for x in args.values.split(",")]:
        pts = price(rows, args.engine, profile_at(args.engine, args.family, v))
        grid.append({"values": {f"eng:{args.engine}:{args.family}:fp8_efficiency_relative": v},
                     "median_ape": median_ape(pts), "errors": [round(p["error_pct"], 1) for p in pts]})
        print(f"{args.engine} {args.family} fp8_efficiency_relative {v:g}: "
              + " ".join(f"{p['hardware']} {p['metric']} {p['error_pct']:+.1f}" for p in pts), flush=True)
    best = min(grid, key=lambda g: g["median_ape"])
    best_pts = price(rows, args.engine, profile_at(args.engine, args.family, next(iter(best["values"].values()))))
    held = sorted({r["hardware"] for r in rows})
    loho = {hw: {"values": {}, "median_ape": median_ape([p for p in base if p["hardware"] == hw]),
                 "note": f"without the {args.engine}/{args.family} fp8 factor, which only its rows fit"}
            for hw in held} if len(held) == 1 else {}
    doc = {"file": "dev_mlperf51_offline.csv", "values": best["values"], "groups": [f"{args.engine}/{args.family}"],
           "models": [], "grid_fit": {"values": best["values"], **summary(best_pts),
                                      "leave_one_hardware_out": loho, "grid": grid,
                                      "without_factor_median_ape": median_ape(base)}}
    out = args.json or ROOT / "benchmarks" / "results" / "chips" / f"fit_mlperf_{args.engine}_{args.family}.json"
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"best {best['values']} median APE {best['median_ape']:.1f} % (without the factor "
          f"{median_ape(base):.1f} %); wrote {out}")


if __name__ == "__main__":
    main()
