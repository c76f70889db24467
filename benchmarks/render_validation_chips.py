"""Write the issue-22 tables of docs/validation.md: median APE by chip x engine x dtype on the
new measurement files, with the leave-one-hardware-out and leave-one-source-out errors of the fits.

    python benchmarks/render_validation_chips.py [--points-dir DIR] [--rerun]

Inputs (all produced by scripts of this folder, kept in `benchmarks/results/chips/`):

* `points_<file>.csv`: every priced row of each development file (`analyze_new_data.py FILE
  --points`; `--rerun` runs it here first, about 10 minutes for the four files);
* `fit_static.json` (`fit_chips.py --loo --json`), `loo_gptoss.json` (`loo_gptoss.py --json`),
  `fit_mlperf_<group>.json` (`fit_mlperf.py --grid ... --json`, the commands in the profiles'
  and chips' `sources`): the fitted numbers and their leave-one-out errors.

The section between `<!-- chips-results:begin -->` and `<!-- chips-results:end -->` is
replaced; nothing in it is typed by hand.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "chips"
DATA = Path("/work/shared/reference/measurements")
FILES = ("dev_llm_inference_bench.csv", "dev_inferencemax_gptoss.csv", "dev_mlperf51_offline.csv",
         "dev.csv", "dev_throughput.csv", "dev_serving.csv")
BEGIN, END = "<!-- chips-results:begin -->", "<!-- chips-results:end -->"


def points_path(name: str) -> Path:
    return RESULTS / f"points_{Path(name).stem}.csv"


def rerun(files: tuple[str, ...]) -> None:
    for f in files:
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "analyze_new_data.py"), str(DATA / f),
                        "--points", str(points_path(f))], check=True, stdout=subprocess.DEVNULL)


def read_points(name: str) -> list[dict[str, Any]]:
    import pandas as pd

    p = points_path(name)
    if not p.is_file():
        return []
    return pd.read_csv(p).to_dict("records")


def med(x: list[float]) -> float:
    return float(np.median(np.abs(x))) if x else float("nan")


def fmt(x: Any) -> str:
    return "-" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.1f}"


def load_json(name: str) -> dict[str, Any]:
    p = RESULTS / name
    return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else {}


def mlperf_fits() -> dict[str, Any]:
    """The MLPerf grid fits (`fit_mlperf.py --grid ... --json fit_mlperf_<group>.json`), their
    leave-one-hardware-out entries merged: one group per chip or chip family."""
    loho: dict[str, list[dict[str, Any]]] = {}
    for p in sorted(RESULTS.glob("fit_mlperf_*.json")):
        doc = json.loads(p.read_text(encoding="utf-8"))
        fit = doc.get("grid_fit", {})
        for hw, v in fit.get("leave_one_hardware_out", {}).items():
            # a fit on some models' rows only (`fit_mlperf.py --models`) is held out on those rows;
            # a chip in several fits (its own group, and a model's) lists each
            loho.setdefault(hw, []).append({**v, "models": doc["models"]} if doc.get("models") else dict(v))
    return {"leave_one_hardware_out": loho} if loho else {}


def loho_map(fit: dict[str, Any]) -> dict[str, Any]:
    """{chip: held-out median APE, or "x.x (on <models> rows)" when the fit used some models only}."""
    out: dict[str, Any] = {}
    for r in fit.get("leave_one_hardware_out", []) if isinstance(fit.get("leave_one_hardware_out"), list) else []:
        out[r["held_out"]] = r["median_ape"]
    loho = fit.get("leave_one_hardware_out")
    if isinstance(loho, dict):
        def one(v: dict[str, Any]) -> Any:
            return (f"{fmt(v['median_ape'])} (on its {', '.join(v['models'])} rows)" if v.get("models")
                    else f"{fmt(v['median_ape'])} ({v['note']})" if v.get("note") else v["median_ape"])

        for k, vs in loho.items():
            vals = list(dict.fromkeys(v if isinstance(v, str) else fmt(v)
                                      for v in (one(v) for v in (vs if isinstance(vs, list) else [vs]))))
            out[k] = vals[0] if len(vals) == 1 else "; ".join(vals)
    return out


def by_chip_table(name: str, pts: list[dict[str, Any]], loho: dict[str, Any]) -> list[str]:
    g: dict[str, list[float]] = defaultdict(list)
    for p in pts:
        g[p["hardware"]].append(p["error_pct"])
    out = [f"| {name} | chip | rows | median APE % | leave-one-hardware-out % |", "|---|---|---|---|---|"]
    for hw in sorted(g):
        # a chip no number was fitted on (in this file) is held out already: its error is out of sample
        held = (loho[hw] if isinstance(loho[hw], str) else fmt(loho[hw])) if hw in loho else \
            "same (nothing fitted on its rows)"
        out.append(f"| | {hw} | {len(g[hw])} | {fmt(med(g[hw]))} | {held} |")
    return out


def cross_table(pts_by_file: dict[str, list[dict[str, Any]]]) -> list[str]:
    g: dict[tuple, list[float]] = defaultdict(list)
    lat: dict[tuple, list[float]] = defaultdict(list)
    for f, pts in pts_by_file.items():
        for p in pts:
            k = (Path(f).stem.replace("dev_", ""), p["hardware"], p.get("family", "-"), p.get("dtype", "-"))
            g[k].append(p["error_pct"])
            lat[k].append(p.get("lat_err", float("nan")))
    out = ["| file | chip | engine | weights/KV | rows | median APE % | median latency error % |",
           "|---|---|---|---|---|---|---|"]
    for k in sorted(g):
        out.append(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {len(g[k])} | {fmt(med(g[k]))} | "
                   f"{fmt(float(np.nanmedian(lat[k])) if lat[k] else None)} |")
    return out


def batch_table(pts: list[dict[str, Any]], hw: str) -> list[str]:
    g: dict[tuple, list[float]] = defaultdict(list)
    lat: dict[tuple, list[float]] = defaultdict(list)
    for p in pts:
        if p["hardware"] == hw and p.get("batch") == p.get("batch"):  # not NaN
            g[(p.get("family", "-"), int(p["batch"]))].append(p["error_pct"])
            lat[(p.get("family", "-"), int(p["batch"]))].append(p.get("lat_err", float("nan")))
    out = ["| engine | batch | rows | median APE % | median latency error % |", "|---|---|---|---|---|"]
    for k in sorted(g):
        out.append(f"| {k[0]} | {k[1]} | {len(g[k])} | {fmt(med(g[k]))} | {fmt(float(np.nanmedian(lat[k])))} |")
    return out


def loo_list(fit: dict[str, Any], key: str) -> list[str]:
    rows = fit.get(key) or []
    if isinstance(rows, dict):
        rows = [{"held_out": k, **v} for k, vs in rows.items() for v in (vs if isinstance(vs, list) else [vs])]
    return [f"| {r['held_out']} | {r.get('rows', '-') if not r.get('models') else 'its ' + ', '.join(r['models'])} "
            f"| {fmt(r.get('median_ape'))} |" for r in rows]


def render() -> str:
    date = datetime.date.today().isoformat()
    pts = {f: read_points(f) for f in FILES}
    static, gpt, mlp = load_json("fit_static.json"), load_json("loo_gptoss.json"), mlperf_fits()
    lines = [BEGIN, "", f"Generated {date} by `python benchmarks/render_validation_chips.py` from the points and fit "
             "files in `benchmarks/results/chips/` (commands in that script's docstring). error % = (predicted - "
             "measured) / measured x 100; *latency error* turns a throughput row's error e into 1/(1+e) - 1 so "
             "that negative means predicted too fast for every metric.", ""]
    new = ("dev_llm_inference_bench.csv", "dev_inferencemax_gptoss.csv", "dev_mlperf51_offline.csv")
    for f, fit in zip(new, (static, gpt, mlp), strict=True):
        if pts[f]:
            lines += ["", *by_chip_table(Path(f).stem, pts[f], loho_map(fit)), ""]
    lines += ["### By chip x engine x dtype", "", *cross_table({f: pts[f] for f in FILES if pts[f]}), ""]
    if pts["dev_llm_inference_bench.csv"]:
        lines += ["### MI300X static rows by batch (before the issue-22 physics: -46 % at batch 1, -54 % at 16, -72 % at 64, -84 % at 256)", "",
                  *batch_table(pts["dev_llm_inference_bench.csv"], "mi300x"), ""]
    for title, fit in (("static fit (fit_chips.py)", static), ("gpt-oss fit (fit_serving_chips.py)", gpt),
                       ("MLPerf fit (fit_mlperf.py)", mlp)):
        if not fit:
            continue
        lines += [f"### Leave-one-out, {title}", "", "| held out | rows | median APE % |", "|---|---|---|",
                  *loo_list(fit, "leave_one_hardware_out"), *loo_list(fit, "leave_one_source_out"), ""]
    for f in ("dev.csv", "dev_throughput.csv", "dev_serving.csv"):
        if pts[f]:
            lines.append(f"Unchanged files: `{f}` {len(pts[f])} rows, median APE {fmt(med([p['error_pct'] for p in pts[f]]))} %.")
    lines += ["", END]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rerun", action="store_true", help="price every file again first (analyze_new_data.py)")
    args = ap.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.rerun:
        rerun(FILES)
    md = ROOT / "docs" / "validation.md"
    text = md.read_text(encoding="utf-8")
    section = render()
    if BEGIN in text and END in text:
        text = text[: text.index(BEGIN)] + section + text[text.index(END) + len(END):]
    else:
        text = text.rstrip() + "\n\n## The chips and models people buy now (issue 22)\n\n" + section + "\n"
    md.write_text(text, encoding="utf-8")
    print(f"wrote {md.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
