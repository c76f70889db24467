"""Where llmsim stands on the new measurement files (issue 22): one way to measure every step.

    python benchmarks/analyze_new_data.py FILE [FILE ...] [--by chip,engine,dtype] [--batch]
        [--pairs] [--hardware ID] [--csv OUT.csv] [--points POINTS.csv]

Prices every row of each file with `llmsim validate`'s `Validator` (the shipped catalog and
engine profiles) and prints, per file:

* median APE (all metrics) and the median signed *latency* error by chip x engine family x
  dtype (weights/KV), with row counts. Latency error: a throughput row's error e is turned
  into the latency error 1/(1+e) - 1, so that "too fast" is negative for every metric and the
  e2e and throughput rows of one setting say the same thing;
* with `--batch`, the same by chip x engine family x batch size (static rows): an error that
  grows with batch shows here;
* with `--pairs`, the fp8-KV / fp16-KV PAIR rows (`PAIR <key>` in notes): measured and
  predicted latency ratio fp8/fp16 per pair, and the median of each by chip;
* skipped rows grouped by reason.

Engine family is read from the row's free-text engine column (ROCm builds of vLLM are their
own family: `vllm-rocm`), not from the profile that priced it, so a new profile does not move
rows between groups. Nothing here is fitted; the numbers are the catalog's.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulator.analysis.measurements import read_measurements  # noqa: E402
from simulator.analysis.validate import Validator, validate  # noqa: E402

LATENCY_METRICS = ("ttft_ms", "tpot_ms", "e2e_ms")


def engine_family(text: str) -> str:
    """A short engine family from the free-text engine column."""
    low = (text or "").lower()
    if "llama.cpp" in low:
        return "llama.cpp"
    if "deepspeed" in low:
        return "deepspeed"
    if "sambaflow" in low:
        return "sambaflow"
    if "sglang" in low:
        return "sglang-rocm" if "rocm" in low else "sglang"
    if "tensorrt-llm" in low or "trtllm" in low:
        return "trtllm"
    if "vllm" in low:
        if "rocm" in low:
            return "vllm-rocm"
        if "xpu" in low:
            return "vllm-xpu"
        return "vllm"
    return "other"


def latency_error(metric: str, err_pct: float) -> float:
    """Signed error as a latency error (%): negative = predicted faster than measured."""
    if metric.endswith("_ms"):
        return err_pct
    e = err_pct / 100.0
    return (1.0 / (1.0 + e) - 1.0) * 100.0 if e > -1 else math.inf


def pair_key(notes: str) -> str | None:
    m = re.search(r"\bPAIR (\S+)", notes or "")
    return m.group(1) if m else None


def price(path: Path, hardware: str | None = None, validator: Validator | None = None) -> tuple[list[dict], list[dict]]:
    """(points joined with their rows' settings, skipped rows) of one measurement file."""
    rows, skipped = read_measurements(path, skip_bad_rows=True)
    by_id = {r["id"]: r for r in rows}
    res = validate(rows, hardware_filter=hardware, skipped=skipped, validator=validator)
    out = []
    for p in res["points"]:
        r = by_id[p["id"]]
        out.append({
            **p,
            "family": engine_family(str(r.get("engine") or "")),
            "dtype": f"w{r['weight_dtype']}/kv{r['kv_dtype']}",
            "batch": r.get("batch_size"),
            "concurrency": r.get("concurrency"),
            "tp": r["tp"],
            "input_len": r.get("input_len"),
            "output_len": r.get("output_len"),
            "kv_dtype": r["kv_dtype"],
            "pair": pair_key(str(r.get("notes") or "")),
            "lat_err": latency_error(p["metric"], p["error_pct"]),
        })
    return out, res["skipped"]


def table(points: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> list[dict[str, Any]]:
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for p in points:
        groups.setdefault(tuple(p[k] for k in keys), []).append(p)
    out = []
    for k, ps in sorted(groups.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        ape = np.abs([p["error_pct"] for p in ps])
        lat = np.array([p["lat_err"] for p in ps])
        out.append({**dict(zip(keys, k, strict=True)), "rows": len(ps),
                    "median_ape_%": round(float(np.median(ape)), 1),
                    "median_latency_err_%": round(float(np.median(lat)), 1)})
    return out


def pair_table(points: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per PAIR key with both kv dtypes priced (e2e_ms rows): measured and predicted fp8/fp16."""
    by: dict[str, dict[str, Mapping[str, Any]]] = {}
    for p in points:
        if p["pair"] and p["metric"] == "e2e_ms":
            by.setdefault(p["pair"], {})["fp8" if p["kv_dtype"] == "fp8" else "16"] = p
    out = []
    for key, d in sorted(by.items()):
        if "fp8" in d and "16" in d:
            a, b = d["fp8"], d["16"]
            out.append({"pair": key, "hardware": a["hardware"], "batch": a["batch"],
                        "measured_ratio": round(a["measured"] / b["measured"], 3),
                        "predicted_ratio": round(a["predicted"] / b["predicted"], 3)})
    return out


def show(rows: Sequence[Mapping[str, Any]], title: str) -> None:
    print(f"\n== {title}")
    if not rows:
        print("(none)")
        return
    cols = list(rows[0])
    w = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    print("  ".join(c.rjust(w[c]) for c in cols))
    for r in rows:
        print("  ".join(str(r[c]).rjust(w[c]) for c in cols))


def report(path: Path, args: argparse.Namespace) -> list[dict]:
    points, skipped = price(path, args.hardware)
    print(f"\n######## {path.name}: {len(points)} rows priced, {len(skipped)} skipped")
    overall = np.median(np.abs([p["error_pct"] for p in points])) if points else float("nan")
    print(f"median APE over all priced rows: {overall:.1f} %")
    show(table(points, ["hardware"]), "by chip")
    show(table(points, args.by.split(",")), f"by {args.by}")
    if args.batch:
        static = [p for p in points if p["batch"] is not None]
        if static:
            show(table(static, ["hardware", "family", "batch"]), "by chip x engine x batch (static rows)")
        conc = [p for p in points if p["concurrency"] is not None]
        if conc:
            show(table(conc, ["hardware", "tp", "concurrency"]), "by chip x tp x concurrency")
    if args.pairs:
        pairs = pair_table(points)
        show(pairs, "fp8-KV / fp16-KV pairs (e2e_ms): latency ratio fp8/fp16")
        for hw in sorted({p["hardware"] for p in pairs}):
            ps = [p for p in pairs if p["hardware"] == hw]
            m = np.median([p["measured_ratio"] for p in ps])
            q = np.median([p["predicted_ratio"] for p in ps])
            same = sum((p["measured_ratio"] - 1) * (p["predicted_ratio"] - 1) > 0 for p in ps)
            print(f"{hw}: {len(ps)} pairs, median measured {m:.3f}, predicted {q:.3f}; "
                  f"predicted sign = measured sign on {same} of {len(ps)}")
    reasons: dict[str, int] = {}
    for s in skipped:
        reason = re.sub(r"'[^']*'|\"[^\"]*\"", "X", s["reason"])[:110]
        reasons[reason] = reasons.get(reason, 0) + 1
    show([{"rows": n, "reason": r} for r, n in sorted(reasons.items(), key=lambda kv: -kv[1])], "skipped by reason")
    return points


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--by", default="hardware,family,dtype", help="grouping keys (comma-separated)")
    ap.add_argument("--batch", action="store_true", help="also by batch size / concurrency")
    ap.add_argument("--pairs", action="store_true", help="fp8/fp16-KV pair ratios")
    ap.add_argument("--hardware", help="only rows of this hardware id")
    ap.add_argument("--points", type=Path, help="write every priced point (CSV)")
    args = ap.parse_args(argv)
    allp: list[dict] = []
    for f in args.files:
        allp += [{**p, "file": f.name} for p in report(f, args)]
    if args.points:
        import pandas as pd

        pd.DataFrame(allp).to_csv(args.points, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
