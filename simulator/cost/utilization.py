"""What a GPU does over time: model FLOPs utilisation (MFU) and memory bandwidth utilisation
(MBU) of every timeline row, split into prefill and decode.

Each timeline row (`steplog`) stands for one step or a run of decode steps and carries their
busy time t, their count n and the sums of their statistics (T, S, Ad, Ap, R, Aw, Rw, Pc). The
cost model's FLOPs and bytes per GPU are linear forms over the features x = [1, T, S, [S>0], Ad,
Ap, R, Aw, Rw, U, Pc, Tx] (`CostModel.work_forms`; Tx, the experts' padded tokens, prices time only), so a row's work is exact from the sums
(the constant and [S>0] features count steps: n and n [S>0]; U, nonlinear in T, is taken at
the row's mean T/n: exact for one step and for decode runs, whose T is constant):

    MFU = F . x / (t  P_peak)          P_peak: dense peak FLOP/s of the GEMM dtype, per GPU
    MBU = B . x / (t  BW_hbm)          BW_hbm: HBM bandwidth, per GPU

F and B are per GPU (every GPU of a TP group does 1/tp of the work), so the "x GPUs" of
FLOPs / (time x peak x GPUs) cancels. Both use the datasheet peaks, not the efficiency-scaled
rates the step time is priced at: MFU of a compute-bound step is about the compute efficiency.

Prefill and decode: a mixed step's work is split in proportion to its tokens of each kind
(decode tokens d, prefill tokens T - d): MFU_decode = MFU d / T, MFU_prefill = MFU - MFU_decode
(a split by token count, not by op: attention over long contexts makes decode tokens dearer).

Summaries weight rows by busy time: mean = sum(F x) / (sum(t) P_peak); p50/p99 are time-weighted
percentiles of the row values. `busy_utilization` = time-weighted mean of max(MFU, MBU), the
utilisation `energy.run_energy` scales power by.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

STAT_COLUMNS = ("T", "S", "Ad", "Ap", "R", "Aw", "Rw", "Pc")
UTIL_COLUMNS = ("mfu", "mbu", "mfu_prefill", "mfu_decode", "mbu_prefill", "mbu_decode")


def row_work(cost: Any, timeline: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(FLOPs, bytes) per GPU of each timeline row (summed over the row's steps); `timeline`
    is a DataFrame or a dict of column arrays (`StepLog.timeline_columns`)."""
    n = np.asarray(timeline["steps"], dtype=float)
    T, S, Ad, Ap, R, Aw, Rw, Pc = (np.asarray(timeline[c], dtype=float) for c in STAT_COLUMNS)
    X = cost.features(T, S, Ad, Ap, R, Aw, Rw, Pc, padded=False, blocks=False)  # work forms never read Tx, Rb
    X[0] = n
    X[3] = n * (S > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        X[9] = n * cost._touched(np.where(n > 0, T / np.maximum(n, 1), 0.0))
    flops_form, bytes_form = cost.work_forms()
    return flops_form @ X, bytes_form @ X


def utilization_columns(cost: Any, timeline: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The UTIL_COLUMNS of a timeline (a DataFrame or a dict of column arrays); NaN on rows
    without busy time. Computed, they come in the order mfu, mbu, mfu_decode, mbu_decode,
    mfu_prefill, mbu_prefill (as `add_utilization` always added them); without work forms
    (NaN) or without rows (0) in UTIL_COLUMNS order."""
    if isinstance(timeline, dict):
        rows = len(next(iter(timeline.values()))) if timeline else 0
    else:  # a DataFrame (pandas is not imported here: a run needs none)
        rows = len(timeline)
    if not hasattr(cost, "work_forms"):
        # a custom StepCost (tests, what-ifs) need not expose its work as linear forms:
        # MFU/MBU unknown (NaN), and the summary reports None rather than a made-up 0
        return {c: np.full(rows, np.nan) for c in UTIL_COLUMNS}
    if rows == 0 or "steps" not in timeline:
        return {c: np.zeros(rows) for c in UTIL_COLUMNS}
    flops, nbytes = row_work(cost, timeline)
    t = np.asarray(timeline["busy_s"], dtype=float)
    peak = cost.hardware.flops(cost.gemm_dtype)
    bw = cost.hardware.hbm_bandwidth_bytes_per_s
    T = np.asarray(timeline["T"], dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        busy = t > 0
        mfu = np.where(busy, flops / (t * peak), np.nan)
        mbu = np.where(busy, nbytes / (t * bw), np.nan)
        dec = np.where(T > 0, np.asarray(timeline["decode_tokens"], dtype=float) / T, 0.0)
    mfu_decode, mbu_decode = mfu * dec, mbu * dec
    return {"mfu": mfu, "mbu": mbu, "mfu_decode": mfu_decode, "mbu_decode": mbu_decode,
            "mfu_prefill": mfu - mfu_decode, "mbu_prefill": mbu - mbu_decode}


def add_utilization(cost: Any, timeline: pd.DataFrame) -> pd.DataFrame:
    """The timeline with UTIL_COLUMNS (NaN on rows without busy time)."""
    out = timeline.copy()
    for c, v in utilization_columns(cost, timeline).items():
        out[c] = v
    return out


def weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float | tuple[float, ...]) -> Any:
    """The q-quantile (0..1) of `values` where each counts with its weight (the smallest v
    with cumulative weight >= q of the total); a tuple of q gives a tuple (one sort)."""
    # stable: the cumulative weights then do not depend on how a platform's sort orders ties
    order = np.argsort(values, kind="stable")
    v, cum = values[order], np.cumsum(weights[order])
    qs = q if isinstance(q, tuple) else (q,)
    idx = np.minimum(np.searchsorted(cum, np.asarray(qs) * cum[-1], side="left"), len(v) - 1)
    out = tuple(float(x) for x in v[idx])
    return out if isinstance(q, tuple) else out[0]


def utilization_summary(timeline: Mapping[str, Any]) -> dict[str, Any]:
    """Time-weighted mean, p50 and p99 of MFU and MBU, the prefill/decode means (they add up
    to the overall mean) and busy_utilization; None when no row has busy time. `timeline` is
    a DataFrame or a dict of column arrays with the UTIL_COLUMNS."""
    keys = [f"{m}_{s}" for m in ("mfu", "mbu") for s in ("mean", "p50", "p99")]
    keys += [f"{m}_{k}_mean" for m in ("mfu", "mbu") for k in ("prefill", "decode")]
    t = np.asarray(timeline["busy_s"], dtype=float) if "mfu" in timeline else np.zeros(0)
    ok = t > 0
    if "mfu" in timeline:
        ok &= np.isfinite(np.asarray(timeline["mfu"], dtype=float))
    if not ok.any():
        return {**{k: None for k in keys}, "busy_utilization": None}
    t = t[ok]
    total = t.sum()
    out: dict[str, Any] = {}
    vals = {}
    for m in ("mfu", "mbu"):
        v = vals[m] = np.asarray(timeline[m], dtype=float)[ok]
        out[f"{m}_mean"] = float((v * t).sum() / total)
        out[f"{m}_p50"], out[f"{m}_p99"] = weighted_quantile(v, t, (0.50, 0.99))
        dec = float((np.asarray(timeline[f"{m}_decode"], dtype=float)[ok] * t).sum() / total)
        out[f"{m}_prefill_mean"], out[f"{m}_decode_mean"] = out[f"{m}_mean"] - dec, dec
    top = np.minimum(np.maximum(vals["mfu"], vals["mbu"]), 1.0)
    out["busy_utilization"] = float((top * t).sum() / total)
    return out


__all__ = ["STAT_COLUMNS", "UTIL_COLUMNS", "add_utilization", "row_work", "utilization_columns",
           "utilization_summary", "weighted_quantile"]
