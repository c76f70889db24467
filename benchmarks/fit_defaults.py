"""Regenerate the fitted efficiency defaults of the hardware catalog and docs/validation.md.

    python benchmarks/fit_defaults.py            # fit, write hardware_specs/*.yaml, docs
    python benchmarks/fit_defaults.py --dry-run  # fit and print, write nothing

1. `llmsim calibrate` (simulator.analysis.calibrate.calibrate) for every hardware id that has rows in
   the measurement file (dev.csv: a100-sxm-80gb, h100-sxm, l40s), with Vidur's GEMM and
   all-reduce timings where Vidur profiled that chip. Objective: mean squared log error, each
   source weighted equally. link_latency_s is a hardware field outside the `efficiency:` block
   and is kept as the catalog states it (the Vidur all-reduce fit of it is reported in
   `sources`); pass --with-link-latency to write it too.
2. The fitted values go into the `efficiency:` block of each hardware_specs/<id>.yaml with a
   `sources:` entry per value (file, rows, objective, date).
3. Chips without measurements get the values of the closest measured generation (DERIVED),
   said so in `sources`.
4. `llmsim validate` on the measurement file with the new catalog: the results table in
   docs/validation.md (between the results markers) and docs/validation_scatter.png.

The reference data are read from ../shared/reference/measurements (beside the repository)
or --reference DIR.
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulator.analysis import calibrate as C  # noqa: E402
from simulator.analysis import measurements as measurements_mod  # noqa: E402
from simulator.analysis import validate as V  # noqa: E402
from simulator.cli import plots  # noqa: E402
from simulator.specs.catalog import hardware_catalog  # noqa: E402

#: chip without measurements -> (measured chip whose values it takes, why)
DERIVED = {
    "a100-sxm-40gb": ("a100-sxm-80gb", "same GA100 chip and kernels; HBM2 1.56 TB/s instead of HBM2e"),
    "a100-pcie-80gb": ("a100-sxm-80gb", "same GA100 chip; PCIe board (300 W) may clock lower under load"),
    "a10g": ("a100-sxm-80gb", "closest measured generation (Ampere); GA102 is a smaller chip with GDDR6"),
    "h100-pcie": ("h100-sxm", "same GH100 chip; PCIe board (350 W) clocks lower"),
    "h200-sxm": ("h100-sxm", "same GH100 compute die with HBM3e; kernels identical"),
    "b200": ("h100-sxm", "closest measured generation (Hopper); Blackwell kernels not measured"),
    "gb200": ("h100-sxm", "closest measured generation (Hopper); Blackwell kernels not measured"),
    "l4": ("l40s", "same Ada generation (AD104 vs AD102), GDDR6"),
    "mi300x": ("h100-sxm", "NO measurements of AMD chips here: H100 values used as a placeholder"),
    "mi325x": ("h100-sxm", "NO measurements of AMD chips here: H100 values used as a placeholder"),
    "mi355x": ("h100-sxm", "NO measurements of AMD chips here: H100 values used as a placeholder"),
    "tpu-v5e": ("h100-sxm", "NO measurements of TPUs here: H100 values used as a placeholder"),
    "tpu-v5p": ("h100-sxm", "NO measurements of TPUs here: H100 values used as a placeholder"),
    "tpu-v6e": ("h100-sxm", "NO measurements of TPUs here: H100 values used as a placeholder"),
    "gaudi3": ("h100-sxm", "NO measurements of Gaudi here: H100 values used as a placeholder"),
}
BEGIN, END = "<!-- results:begin (benchmarks/fit_defaults.py) -->", "<!-- results:end -->"


def reference_dir(arg: str | None) -> Path:
    for cand in ([Path(arg)] if arg else [ROOT / "shared" / "reference", ROOT.parent / "shared" / "reference"]):
        if (cand / "measurements" / "dev.csv").is_file():
            return cand
    raise SystemExit("error: reference data not found; pass --reference DIR (holding measurements/dev.csv)")


def replace_efficiency_block(text: str, block: dict, path: Path) -> str:
    """Swap the top-level `efficiency:` mapping of a hardware YAML for `block`."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if re.match(r"^efficiency:\s*(#.*)?$", ln)), None)
    if start is None:
        raise SystemExit(f"error: {path}: no top-level 'efficiency:' block")
    end = start + 1
    while end < len(lines) and (lines[end].startswith((" ", "\t")) or not lines[end].strip()):
        end += 1
    dumped = yaml.safe_dump({"efficiency": block}, sort_keys=False, width=100, allow_unicode=True)
    return "".join(lines[:start]) + dumped + "".join(lines[end:])


def set_link_latency(text: str, value: float) -> str:
    return re.sub(r"^link_latency_s:\s*[^#\n]*", f"link_latency_s: {value:.4g}  ", text, count=1, flags=re.M)


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def results_markdown(result: dict, fits: dict, date: str, measurements: str) -> str:
    out = [BEGIN, "", f"Generated {date} by `python benchmarks/fit_defaults.py` from `{measurements}` "
           f"with the catalog defaults it wrote. error % = (predicted - measured) / measured x 100.", ""]
    out += ["| group | name | rows | median APE % | p90 APE % | mean signed error % |", "|---|---|---|---|---|---|"]
    for r in V.summary_table(result):
        out.append(f"| {r['group']} | {r['name']} | {r['rows']} | {fmt(r['median_ape_%'])} | "
                   f"{fmt(r['p90_ape_%'])} | {fmt(r['mean_signed_error_%'])} |")
    out += ["", "By metric:", "", "| metric | rows | median APE % | mean signed error % |", "|---|---|---|---|"]
    for k, st in result["by_metric"].items():
        out.append(f"| {k} | {st['rows']} | {fmt(st['median_ape'])} | {fmt(st['mean_signed_error'])} |")
    if result["skipped"]:
        out += ["", "Skipped rows:", ""]
        out += [f"- `{s['id']}`: {s['reason']}" for s in result["skipped"]]
    out += ["", "Fitted values and leave-one-source-out error (fit on all sources of the chip but one, "
            "median APE on the held-out one):", ""]
    out += ["| hardware | compute_eff | memory_eff | step_overhead ms | gemm_ramp_tokens | kernel_overhead us "
            "| link_eff | rows | median APE pure roofline -> fitted % | LOSO median % |", "|---|---|---|---|---|---|---|---|---|---|"]
    for hw, r in fits.items():
        p = r["params"]
        out.append(f"| {hw} | {p['compute_efficiency']:.3f} | {p['memory_efficiency']:.3f} | "
                   f"{p['step_overhead_s'] * 1e3:.3f} | {p['gemm_ramp_tokens']:.0f} | {p['kernel_overhead_s'] * 1e6:.2f} | "
                   f"{p['link_efficiency']:.3f} | {r['rows_used']} | {fmt(r['before']['median_ape'])} -> "
                   f"{fmt(r['after']['median_ape'])} | {fmt(r['leave_one_source_out_median_ape'])} |")
    out += ["", "| hardware | held-out source | rows | median APE % | mean signed error % |", "|---|---|---|---|---|"]
    for hw, r in fits.items():
        for x in r["leave_one_source_out"]:
            out.append(f"| {hw} | {x['source']} | {x['rows']} | {fmt(x['median_ape'])} | {fmt(x['mean_signed_error'])} |")
    for hw, r in fits.items():
        ar = r["stages"].get("allreduce")
        if ar:
            out.append("")
            out.append(f"{hw}: Vidur NCCL all-reduce fit: link_efficiency {ar['params']['link_efficiency']:.3f}, "
                       f"latency {ar['params']['link_latency_s'] * 1e6:.1f} us per all-reduce "
                       f"(catalog link_latency_s kept at {r['params']['link_latency_s'] * 1e6:.1f} us).")
    out += ["", "![predicted vs measured](validation_scatter.png)", "", END]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference", help="folder holding measurements/ (default: ../shared/reference)")
    ap.add_argument("--dry-run", action="store_true", help="fit and print; write nothing")
    ap.add_argument("--with-link-latency", action="store_true",
                    help="also write the Vidur-fitted link_latency_s into the catalog")
    args = ap.parse_args(argv)
    ref = reference_dir(args.reference)
    meas = ref / "measurements" / "dev.csv"
    ops = ref / "measurements" / "vidur_op_times_ms.csv"
    ar = ref / "measurements" / "vidur_allreduce_ms.csv"
    rows, _ = measurements_mod.read_measurements(meas)
    date = datetime.date.today().isoformat()
    hw_dir = ROOT / "hardware_specs"
    measured = sorted({r["hardware"] for r in rows if r["hardware"] in hardware_catalog()})
    fits: dict[str, dict] = {}
    for hw in measured:
        # start from the pure roofline, so a rerun does not depend on the values it wrote before
        r = C.calibrate(rows, hardware_catalog()[hw].ideal(), ops=ops, allreduce=ar, fit_link_latency=args.with_link_latency,
                        measurements_name=f"shared/reference/measurements/{meas.name}")
        fits[hw] = r
        p = {k: f"{v:.4g}" for k, v in r["params"].items()}
        print(f"{hw}: {p}\n  median APE {fmt(r['before']['median_ape'])} -> {fmt(r['after']['median_ape'])} % "
              f"on {r['rows_used']} rows; leave-one-source-out median {fmt(r['leave_one_source_out_median_ape'])} %")
    blocks: dict[str, dict] = {}
    for hw, r in fits.items():
        blocks[hw] = C.efficiency_block(r)
        if "link_efficiency" not in r["sources"]:
            blocks[hw]["sources"]["link_efficiency"] = "not fitted (no all-reduce measurements of this chip): 1.0"
        for k in ("gemm_ramp_tokens", "kernel_overhead_s"):
            if k not in r["sources"]:
                blocks[hw]["sources"][k] = "not fitted (no per-op measurements of this chip): 0"
    for hw, (base, why) in DERIVED.items():
        if hw in fits or base not in blocks or hw not in hardware_catalog():
            continue
        b = {k: v for k, v in blocks[base].items() if k != "sources"}
        b["sources"] = {k: f"copied from {base} (no measurements of {hw}): {why}" for k in b}
        # the ramp bound depends on this chip's own FLOP/s-to-bandwidth ratio (see calibrate.RAMP_CAP)
        spec = hardware_catalog()[hw]
        bound = C.RAMP_CAP * spec.flops("bf16") * b["compute_efficiency"] / (
            spec.hbm_bandwidth_bytes_per_s * b["memory_efficiency"])
        if b.get("gemm_ramp_tokens", 0) > bound:
            b["gemm_ramp_tokens"] = float(f"{bound:.4g}")
            b["sources"]["gemm_ramp_tokens"] += (f"; capped to {b['gemm_ramp_tokens']} for this chip so small "
                                                 f"GEMMs stay bandwidth-bound (calibrate.RAMP_CAP)")
        blocks[hw] = b
    if args.dry_run:
        print(yaml.safe_dump(blocks, sort_keys=False, width=100))
        return 0
    for hw, b in blocks.items():
        path = hw_dir / f"{hw}.yaml"
        text = replace_efficiency_block(path.read_text(encoding="utf-8"), b, path)
        if args.with_link_latency and hw in fits and "link_latency_s" in fits[hw]["sources"]:
            text = set_link_latency(text, fits[hw]["params"]["link_latency_s"])
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
    hardware_catalog.cache_clear()
    result = V.validate(rows)
    docs = ROOT / "docs"
    docs.mkdir(exist_ok=True)
    (docs / "validation_scatter.png").write_bytes(plots.validation_scatter_png(
        result["points"], f"llmsim (fitted catalog defaults) vs {meas.name}: median APE "
                          f"{result['median_ape']:.1f} %, p90 {result['p90_ape']:.1f} % ({result['predicted']} rows)"))
    md = docs / "validation.md"
    section = results_markdown(result, fits, date, f"shared/reference/measurements/{meas.name}")
    text = md.read_text(encoding="utf-8") if md.is_file() else f"# Validation\n\n{BEGIN}\n{END}\n"
    if BEGIN in text and END in text:
        text = text[: text.index(BEGIN)] + section + text[text.index(END) + len(END):]
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    md.write_text(text, encoding="utf-8")
    print(f"wrote docs/validation.md, docs/validation_scatter.png: median APE {result['median_ape']:.1f} %, "
          f"p90 {result['p90_ape']:.1f} % over {result['predicted']} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
