"""Tails against the dev measurements: p50/p90/p99 of TTFT and ITL (and TPOT, E2EL), simulated
side by side with what the real runs measured (issue 23).

    python benchmarks/tails_vs_dev.py [--only serving|gptoss] [--max-requests N] [--json FILE]

* dev_serving.csv (vLLM v0.15.1, inference-perf shared-prefix presets, H100): every run simulated
  as `llmsim validate` prices it (`analysis.serving_rows`: inference-perf's rescaled-exponential
  arrivals, the 10 x 10 prompts the runs ran, the 300 s client timeout, warm later stages).
  The file has mean/median/p99 TTFT and E2EL, mean TPOT: no p90 and no ITL (shown as -).
* dev_inferencemax_gptoss.csv (gpt-oss-120b, vLLM 0.11.2/0.13, closed loops of 4..64 clients):
  each point simulated with the lengths its notes give (InferenceMAX's benchmark_serving.py:
  each length uniform on the integers of [int(r L), L], r = random-range-ratio, L = the
  nominal ISL/OSL; ignore_eos), max_num_seqs = concurrency, 8192 batched tokens, prefix caching
  off, the vllm profile's client view. The file has mean/median/p99 TTFT, TPOT and ITL.
  "Below the knee": concurrencies below the knee (Kneedle, `analysis.sweep.knee_point`) of the
  measured median TTFT against concurrency of that curve (all of them when it has none).

Every number printed is simulated or read from the measurement files; nothing is fitted here.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.analysis import serving_rows as sr  # noqa: E402
from simulator.analysis.measurements import load_rows  # noqa: E402
from simulator.analysis.sweep import knee_point  # noqa: E402
from simulator.analysis.validate import Validator  # noqa: E402
from simulator.metrics.summary import summarize  # noqa: E402
from simulator.profiles.apply import client_view_for, row_settings  # noqa: E402
from simulator.scenario import Scenario  # noqa: E402
from simulator.serving.simulate import simulate  # noqa: E402
from simulator.workloads.workload import Workload  # noqa: E402

MEAS = Path("/work/shared/reference/measurements")
PCTS = (50, 90, 99)


def _ape(pred: float, meas: float) -> float:
    return 100.0 * (pred - meas) / meas


def _cell(sim: float, meas: float | None) -> str:
    if meas is None or not math.isfinite(meas):
        return f"{sim:9.1f} /       -"
    return f"{sim:9.1f} / {meas:7.1f}"


# --------------------------------------------------------------------------- dev_serving


def serving(max_requests: int | None) -> dict[str, Any]:
    rows, _ = load_rows(MEAS / "dev_serving.csv")
    runs: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if sr.is_serving_run_row(r):
            runs[sr.run_key(r)].append(r)
    v = Validator(max_requests=max_requests)
    out = []
    print("dev_serving.csv: simulated / measured (ms); measured p90 and ITL not in the file")
    print(f"{'run':44s} {'TTFT p50':>19s} {'TTFT p90':>19s} {'TTFT p99':>19s} {'ITL p50 sim':>11s} "
          f"{'ITL p90':>8s} {'ITL p99':>8s} {'E2EL p99':>19s} {'fail sim/meas':>14s}")
    for rs in runs.values():
        r0 = rs[0]
        meas = {r["metric"]: r["value"] for r in rs}
        prof = v.profile_of(r0)
        cost = v.cost_model(r0)
        n = sr.num_requests_for(float(r0["request_rate"]), max_requests, sr.stage_duration_s(r0, sr.preset_of(r0["dataset"])))
        settings = row_settings(prof, cost, dict(r0), n, offline=False)
        res = sr.simulate_row(r0, cost, sr.client_for(prof), max_requests, settings)
        s = summarize(res, {}, PCTS)
        m = re.search(r"(\d+) of (\d+) requests failed", str(r0.get("notes") or ""))
        name = f"{r0['model']} {r0['dataset'].rsplit('-', 1)[-1]} {r0['request_rate']:g}/s"
        print(f"{name:44s} {_cell(s['p50_ttft_ms'], meas.get('median_ttft_ms'))} {_cell(s['p90_ttft_ms'], None)} "
              f"{_cell(s['p99_ttft_ms'], meas.get('p99_ttft_ms'))} {s['p50_itl_ms']:11.1f} {s['p90_itl_ms']:8.1f} "
              f"{s['p99_itl_ms']:8.1f} {_cell(s['p99_e2el_ms'], meas.get('p99_e2el_ms'))} "
              f"{s['failed']:6d}/{m.group(1) if m else 0:>6}")
        out.append({"run": name, "measured": meas, "simulated": {k: s[k] for k in s if k.endswith("_ms")},
                    "failed": s["failed"], "measured_failed": int(m.group(1)) if m else 0})
    summary = {}
    for metric in ("p99_ttft_ms", "p99_e2el_ms", "mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms", "mean_e2el_ms",
                   "median_e2el_ms"):
        errs = [_ape(o["simulated"][metric.replace("median_", "p50_") if metric.startswith("median") else metric],
                     o["measured"][metric]) for o in out if metric in o["measured"]]
        summary[metric] = {"rows": len(errs), "median_ape": statistics.median(abs(e) for e in errs),
                           "median_signed": statistics.median(errs)}
    print("\nmedian |error| % (median signed %) over the runs:")
    for k, v_ in summary.items():
        print(f"  {k:16s} {v_['median_ape']:6.1f}  ({v_['median_signed']:+.1f})  rows {v_['rows']}")
    return {"runs": out, "summary": summary}


# --------------------------------------------------------------------------- gpt-oss closed loops

_NOM = re.compile(r"nominal ISL/OSL (\d+)/(\d+)")
_RR = re.compile(r"random-range-ratio ([\d.]+)")


def gptoss_workload(row: dict, n: int) -> Workload:
    """The point's requests (module docstring), from the seed-0 stream of llmsim."""
    notes = str(row.get("notes") or "")
    li, lo = (int(x) for x in _NOM.search(notes).groups())  # type: ignore[union-attr]
    r = float(_RR.search(notes).group(1))  # type: ignore[union-attr]
    g_in, g_out = (np.random.default_rng(s) for s in np.random.SeedSequence(0).spawn(2))
    inp = g_in.integers(max(1, int(li * r)), li + 1, size=n)
    out = g_out.integers(max(1, int(lo * r)), lo + 1, size=n)
    return Workload(np.zeros(n), inp, out, name=f"bench_serving random r={r:g} {li}/{lo}",
                    concurrency=int(row["concurrency"]))


def gptoss(max_requests: int | None) -> dict[str, Any]:
    rows, _ = load_rows(MEAS / "dev_inferencemax_gptoss.csv")
    points: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        eng = re.search(r"0\.1\d", r["engine"]).group(0)  # type: ignore[union-attr]
        points[(r["hardware"], r["tp"], r["input_len"], r["output_len"], eng, r["concurrency"])].append(r)
    v = Validator()
    res_by: dict[tuple, dict] = {}
    for key, rs in sorted(points.items()):
        r0 = rs[0]
        meas = {r["metric"]: r["value"] for r in rs}
        cost = v.cost_model(r0)
        prof = v.profile_of(r0)
        n = int(r0["num_requests"]) if max_requests is None else min(int(r0["num_requests"]), max_requests)
        limits = row_settings(prof, cost, dict(r0), n, offline=False)
        limits = {**limits, "enable_prefix_caching": False, "gpu_memory_utilization": 0.9}
        sc = Scenario(model=cost.model, hardware=cost.hardware, tp=r0["tp"], pp=r0["pp"],
                      weight_dtype=r0["weight_dtype"], activation_dtype=r0["activation_dtype"],
                      kv_dtype=r0["kv_dtype"], workload="random", rate=math.inf, concurrency=int(r0["concurrency"]),
                      **{k: x for k, x in limits.items() if k != "num_requests"})
        sim = simulate(cost, gptoss_workload(r0, n), sc.engine_config(cost), client=client_view_for(prof))
        s = summarize(sim, {}, PCTS)
        res_by[key] = {"measured": meas, "simulated": {k: s[k] for k in s if k.endswith("_ms")}}
    # knees of the measured median TTFT per curve
    curves: dict[tuple, list[tuple]] = defaultdict(list)
    for key in res_by:
        curves[key[:5]].append(key)
    below: set[tuple] = set()
    print("\ndev_inferencemax_gptoss.csv: simulated / measured (ms)")
    print(f"{'point':40s} {'TTFT p50':>19s} {'TTFT p90':>19s} {'TTFT p99':>19s} {'ITL p50':>19s} {'ITL p90':>19s} "
          f"{'ITL p99':>19s} {'TPOT p50':>19s}")
    for keys in curves.values():
        keys.sort(key=lambda k: k[5])
        conc = [k[5] for k in keys]
        knee = knee_point(conc, [res_by[k]["measured"]["median_ttft_ms"] for k in keys])
        limit = conc[knee] if knee is not None else math.inf
        for k in keys:
            if k[5] < limit:
                below.add(k)
            m, s = res_by[k]["measured"], res_by[k]["simulated"]
            name = f"{k[0]} tp{k[1]} {k[2]}/{k[3]} v{k[4]} c{k[5]}" + ("" if k in below else " (knee+)")
            print(f"{name:40s} {_cell(s['p50_ttft_ms'], m['median_ttft_ms'])} {_cell(s['p90_ttft_ms'], None)} "
                  f"{_cell(s['p99_ttft_ms'], m['p99_ttft_ms'])} {_cell(s['p50_itl_ms'], m['median_itl_ms'])} "
                  f"{_cell(s['p90_itl_ms'], None)} {_cell(s['p99_itl_ms'], m['p99_itl_ms'])} "
                  f"{_cell(s['p50_tpot_ms'], m['median_tpot_ms'])}")
    summary: dict[str, Any] = {}
    for metric, sim_key in (("median_ttft_ms", "p50_ttft_ms"), ("median_tpot_ms", "p50_tpot_ms"),
                            ("p99_ttft_ms", "p99_ttft_ms"), ("median_itl_ms", "p50_itl_ms"),
                            ("p99_itl_ms", "p99_itl_ms"), ("p99_tpot_ms", "p99_tpot_ms")):
        errs = {k: _ape(res_by[k]["simulated"][sim_key], res_by[k]["measured"][metric]) for k in res_by}
        sub = [errs[k] for k in below]
        summary[metric] = {"points": len(errs), "median_ape": statistics.median(abs(e) for e in errs.values()),
                           "median_signed": statistics.median(errs.values()),
                           "below_knee": len(sub), "below_knee_within_15pct": sum(abs(e) <= 15 for e in sub),
                           "below_knee_median_ape": statistics.median(abs(e) for e in sub) if sub else None}
    print("\nmedian |error| % (median signed %); below the knee: points within 15 %")
    for k, v_ in summary.items():
        print(f"  {k:16s} {v_['median_ape']:6.1f}  ({v_['median_signed']:+.1f})  below knee "
              f"{v_['below_knee_within_15pct']}/{v_['below_knee']} within 15 %, median |error| "
              f"{v_['below_knee_median_ape']:.1f}")
    return {"points": {" ".join(map(str, k)): x for k, x in res_by.items()}, "summary": summary,
            "below_knee": sorted(" ".join(map(str, k)) for k in below)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", choices=("serving", "gptoss"))
    ap.add_argument("--max-requests", type=int, default=None, help="cap each run (quick look)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    out: dict[str, Any] = {}
    if args.only in (None, "serving"):
        out["dev_serving"] = serving(args.max_requests)
    if args.only in (None, "gptoss"):
        out["dev_inferencemax_gptoss"] = gptoss(args.max_requests)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=float))


if __name__ == "__main__":
    main()
