"""Leave-one-hardware-out of the gpt-oss fit (issue 22): the `vllm` profile's Hopper numbers
fitted on dev_inferencemax_gptoss.csv (`fit_serving_chips.py`) refitted without each chip's rows,
starting from the shipped values, and that chip priced with the refit.

    python benchmarks/loo_gptoss.py [--max-evals N] [--json OUT.json]

The file has two chips (H100, H200); the family numbers are Hopper's, so each held-out chip is
priced with numbers fitted on the other chip alone.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fit_serving_chips import DATA, errors, objective, pattern_search, profile_with, summary  # noqa: E402

from simulator.analysis.measurements import read_measurements  # noqa: E402
from simulator.profiles.profile import load_engine  # noqa: E402

FILE = "dev_inferencemax_gptoss.csv"
PARAMS = ("expert_width_ramp", "dequant_gemm_efficiency", "moe_layer_overhead_s", "overheads.per_prompt_token_s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-evals", type=int, default=10)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    rows, _ = read_measurements(DATA / FILE, skip_bad_rows=True)
    profile = load_engine("vllm")
    shipped = profile.kernels.by_chip_class["hopper"]
    start = {n: float(getattr(profile.overheads, n.split(".", 1)[1]).value if n.startswith("overheads.")
                      else shipped[n].value) for n in PARAMS}
    out: dict = {"file": FILE, "shipped": start, "fit": summary(errors(rows, profile_with("vllm", "hopper", start))),
                 "leave_one_hardware_out": {}}
    for hw in sorted({r["hardware"] for r in rows}):
        train = [r for r in rows if r["hardware"] != hw]
        held = [r for r in rows if r["hardware"] == hw]
        best, _ = pattern_search(lambda p, t=train: objective(errors(t, profile_with("vllm", "hopper", p))),
                                 start, list(PARAMS), step=0.2, max_evals=args.max_evals)
        out["leave_one_hardware_out"][hw] = {"values": best, **summary(errors(held, profile_with("vllm", "hopper", best)))}
        print(hw, json.dumps(out["leave_one_hardware_out"][hw]), flush=True)
        if args.json:
            args.json.write_text(json.dumps(out, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
