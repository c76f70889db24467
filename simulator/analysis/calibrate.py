"""Fit a hardware profile's efficiency parameters to measurements.

Only a handful of physically meaningful numbers are fitted, never a per-row table:

* from a measurement file (docs/measurement_schema.md rows of one hardware id; `static_batch` rows by default,
  simulated serving rows with `include_simulated`): `compute_efficiency` (fraction of dense
  peak a large GEMM reaches; attention is tied to it unless told otherwise),
  `memory_efficiency` (fraction of HBM bandwidth), `step_overhead_s` (fixed cost per step);
* from Vidur's per-operator GEMM times (`vidur_op_times_ms.csv`): `gemm_ramp_tokens` (T0 in
  eta_c(T) = eta_c T / (T + T0)) and `kernel_overhead_s` (fixed cost per kernel);
* from Vidur's NCCL all-reduce times (`vidur_allreduce_ms.csv`): `link_efficiency` and the
  hardware's `link_latency_s` (ring: 2 (t-1)/t msg / (link_bw eta_link) + latency).

Objective: mean squared log error, mean of ln(predicted / measured)^2 (`msle`; a ratio error
counts the same for a latency and a throughput and for large and small numbers), or the median
of the same squared log errors (`median`, robust to a few bad rows). With `balance_sources`
each source's rows together weigh as much as any other source's, so one large table does not
decide the fit. Minimised by Nelder-Mead (numpy; no scipy needed) over bounded transforms.

The static-batch rows are priced by an exact decomposition of the roofline step time
(`StaticFitSet`): every op's compute, memory, launch and communication terms are evaluated once
per row at unit efficiencies, so re-pricing at new efficiencies is a few vector operations and a
fit takes seconds. Decode steps beyond 64 are integrated by the trapezoid rule over the
(piecewise-linear) step time, which is within 0.1 % of summing them.

Per-format efficiencies (`Efficiency.compute_efficiency_by_dtype` and friends) are not fitted:
the fit varies the chip's single values, and the static rows are priced with those.

No printing and no files written here; the CLI and `benchmarks/fit_defaults.py` do that.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from simulator.analysis.fitting import _source_weights, fit
from simulator.analysis.measurements import STATIC_METRICS, SkipRow, check_rows
from simulator.analysis.validate import Validator, error_stats, validate
from simulator.cost.roofline import CostModel, allreduce_time_s, gemm_time_s
from simulator.cost.stepbatch import prefill_steps
from simulator.specs.catalog import load_hardware
from simulator.specs.checks import SpecError, check_choice, check_path, show
from simulator.specs.dtypes import DTYPE_BYTES
from simulator.specs.hardware import Efficiency, HardwareSpec
from simulator.specs.readers import read_csv_file

#: parameters the static fit may vary (the others stay fixed at the profile's values)
STATIC_PARAMS = ("compute_efficiency", "memory_efficiency", "step_overhead_s")
#: the GEMM ramp's compute floor may reach at most this fraction of a GEMM's weight-read time
RAMP_CAP = 0.5

ALL_PARAMS = ("compute_efficiency", "memory_efficiency", "attention_efficiency", "gemm_ramp_tokens",
              "kernel_overhead_s", "step_overhead_s", "link_efficiency", "link_latency_s")
_EFF_FIELDS = {f.name for f in dataclasses.fields(Efficiency)} - {"sources"}
#: Vidur's profiled GPUs and nodes -> catalog ids (Vidur profiled DGX A100-80GB and DGX H100)
VIDUR_GPUS = {"a100": "a100-sxm-80gb", "h100": "h100-sxm"}
VIDUR_NODES = {"a100_dgx": "a100-sxm-80gb", "h100_dgx": "h100-sxm"}
VIDUR_GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
DECODE_EXACT_STEPS = 64
DECODE_NODES = 65


# --------------------------------------------------------------------------- parameters


def params_of(hw: HardwareSpec) -> dict[str, float]:
    """The fitted-parameter values a hardware profile currently has."""
    e = hw.efficiency
    return {**{k: float(getattr(e, k)) for k in ALL_PARAMS if k != "link_latency_s"},
            "link_latency_s": float(hw.link_latency_s)}


def apply_params(hw: HardwareSpec, params: Mapping[str, float]) -> HardwareSpec:
    """A copy of `hw` with the given parameters (efficiency fields and link_latency_s)."""
    eff = {k: float(v) for k, v in params.items() if k in _EFF_FIELDS}
    out = hw.with_efficiency(**eff) if eff else hw
    if "link_latency_s" in params:
        out = dataclasses.replace(out, link_latency_s=float(params["link_latency_s"]))
    return out


# --------------------------------------------------------------------------- static rows, fast


class StaticFitSet:
    """Static-batch rows (of any hardware and engine), decomposed for fast re-pricing.

    step time = sum_ops max((C + T0 R) / eta_c + A / eta_att + f D / r + Db / r_b,  (M + (f - 1) K) / eta_m)
                + k_launch L + ring / eta_link + latency N_ar + step_overhead + seq_overhead S
    with f = 1 + (g - 1)(1 - s) the KV re-read factor of a kernel that shares a GQA group's
    KV to the fraction s (`Efficiency.gqa_kv_sharing`) and r the KV conversion rate of a kernel
    without a native path for a KV cache narrower than the activations (no r: D unused), r_b one
    thread block's rate of it (Db: the elements along the longest block; no r_b: unused). C, R,
    A, M, K, D, Db, L, ring, N_ar are the op terms at unit efficiencies, read from
    `CostModel.linear_terms()` (exact: every term of `CostModel` is linear in one of these
    parameters or in its inverse). A row's `max_num_tokens` (when stated) splits its prefill
    (`stepbatch.prefill_steps`), as `predict_static` does.

    `predict(p)` takes every parameter as a number or as an array over `n_settings` (one value
    per priced setting: `setting_rows` maps them back to rows), so parameters that belong to
    a chip or an engine can be fitted jointly over many chips and engines.
    """

    def __init__(self, rows: Sequence[Mapping[str, Any]], validator: Validator,
                 decode_nodes: int = DECODE_NODES) -> None:
        self.rows: list[Mapping[str, Any]] = []
        self.skipped: list[dict] = []
        cols: list[dict[str, np.ndarray]] = []
        meta: list[tuple] = []
        cache: dict[tuple, int] = {}
        decomp: dict[tuple, dict[str, Any]] = {}
        self.row_setting: list[int] = []
        self.setting_rows: list[Mapping[str, Any]] = []  # the first row of each setting
        for row in rows:
            if row["scenario"] != "static_batch" or row["metric"] not in STATIC_METRICS:
                continue
            try:
                cost, B, I, O, _ = validator.static_setting(row)  # noqa: E741
            except SkipRow as e:
                self.skipped.append({"id": row["id"], "reason": str(e)})
                continue
            chunk = row.get("max_num_tokens")
            # the width ramp is in the linear terms (a shape factor): part of what they depend on
            ck = (cost.model.id, cost.hardware.id, cost.par, cost.dtypes, cost.link_dtype,
                  cost.hardware.efficiency.expert_width_ramp, cost.hardware.efficiency.moe_gemm_relative,
                  cost.hardware.efficiency.expert_tile_rows)
            key = (ck, validator.engine_of(row), B, I, O, chunk)
            if key not in cache:
                if ck not in decomp:
                    decomp[ck] = _decompose(cost)
                cache[key] = len(meta)
                cols.append(_static_columns(cost, decomp[ck], B, I, O, len(meta), chunk, decode_nodes))
                narrow = DTYPE_BYTES[cost.dtypes.kv] < DTYPE_BYTES[cost.attention_dtype]  # as the cost model
                meta.append((B, I, O, decomp[ck]["group"], narrow))
                self.setting_rows.append(row)
            self.row_setting.append(cache[key])
            self.rows.append(row)
        self.n_settings = len(meta)
        self.arrays: dict[str, np.ndarray] = {}
        if not self.rows:
            return
        nops = max(c["C"].shape[0] for c in cols)
        for name in ("C", "R", "A", "M", "K", "D", "Db"):
            self.arrays[name] = np.concatenate([_pad(c[name], nops) for c in cols], axis=1)
        for name in ("L", "ring", "lat", "one", "S", "w", "seg", "pre"):
            self.arrays[name] = np.concatenate([c[name] for c in cols])
        self.B = np.array([m[0] for m in meta], dtype=float)
        self.I = np.array([m[1] for m in meta], dtype=float)
        self.O = np.array([m[2] for m in meta], dtype=float)
        self.group = np.array([m[3] for m in meta], dtype=float)
        self.narrow_kv = np.array([m[4] for m in meta], dtype=bool)
        self.idx = np.array(self.row_setting, dtype=int)
        self.metric = [r["metric"] for r in self.rows]
        self.measured = np.array([r["value"] for r in self.rows], dtype=float)
        self.replicas = np.array([r["replicas"] for r in self.rows], dtype=float)
        self.num_gpus = np.array([r["num_gpus"] for r in self.rows], dtype=float)
        self.sources = [r["source"] for r in self.rows]

    def step_times(self, p: Mapping[str, Any]) -> np.ndarray:
        """Every column's step time at parameters `p` (numbers or arrays over settings)."""
        a = self.arrays
        seg = a["seg"]

        def col(name: str, default: float) -> Any:
            v = p.get(name, default)
            return np.asarray(v, dtype=float)[seg] if np.ndim(v) else float(v)

        ec, em, ea = col("compute_efficiency", 1.0), col("memory_efficiency", 1.0), col("attention_efficiency", 1.0)
        comp = (a["C"] + col("gemm_ramp_tokens", 0.0) * a["R"]) / ec + a["A"] / ea
        f = 1.0 + (self.group[seg] - 1.0) * (1.0 - col("gqa_kv_sharing", 1.0))
        def per_narrow(r: Any) -> Any:
            """1 / r on a narrow KV format's columns, 0 elsewhere and where r = 0 (not priced)."""
            return np.where(self.narrow_kv[seg] & (r > 0), 1.0 / np.where(r > 0, r, 1.0), 0.0)

        # KV conversion without a native path: every element read at r, and one thread block's
        # elements along the longest block (Rb) at r_b
        rate, block = col("kv_dequant_rate", 0.0), col("kv_dequant_block_rate", 0.0)
        if np.any(rate):
            comp = comp + a["D"] * f * per_narrow(rate)
        if np.any(block):
            comp = comp + a["Db"] * per_narrow(block)
        mem = (a["M"] + (f - 1.0) * a["K"]) / em
        t = np.maximum(comp, mem).sum(axis=0)
        t += (col("kernel_overhead_s", 0.0) * a["L"] + a["ring"] / col("link_efficiency", 1.0)
              + col("link_latency_s", 0.0) * a["lat"] + col("step_overhead_s", 0.0) * a["one"]
              + col("sequence_overhead_s", 0.0) * a["S"])
        return t

    def predict(self, p: Mapping[str, Any]) -> np.ndarray:
        """Predicted metric value of every row at parameters `p` (ALL_PARAMS; optional
        gqa_kv_sharing, kv_dequant_rate, kv_dequant_block_rate, sequence_overhead_s), numbers or
        arrays over settings."""
        a = self.arrays
        tw = self.step_times(p) * a["w"]
        pre = a["pre"]
        ttft = np.bincount(a["seg"][pre], weights=tw[pre], minlength=self.n_settings)
        dec = np.bincount(a["seg"][~pre], weights=tw[~pre], minlength=self.n_settings)
        B, I, O = self.B, self.I, self.O  # noqa: E741
        with np.errstate(divide="ignore", invalid="ignore"):
            per = {
                "ttft_ms": ttft * 1e3,
                "tpot_ms": dec / (O - 1) * 1e3,
                "e2e_ms": (ttft + dec) * 1e3,
                "decode_tokens_per_s": (O - 1) / dec,
                "prefill_tokens_per_s": B * I / ttft,
                "output_tokens_per_s": B * O / (ttft + dec),
            }
        out = np.empty(len(self.rows))
        for i, m in enumerate(self.metric):
            s = self.idx[i]
            if m == "output_tokens_per_s":
                out[i] = per[m][s] * self.replicas[i]
            elif m == "output_tokens_per_s_per_gpu":
                out[i] = per["output_tokens_per_s"][s] * self.replicas[i] / self.num_gpus[i]
            else:
                out[i] = per[m][s]
        return out


def _pad(x: np.ndarray, n: int) -> np.ndarray:
    if x.shape[0] == n:
        return x
    return np.vstack([x, np.zeros((n - x.shape[0], x.shape[1]))])


def _decompose(cost: CostModel) -> dict[str, Any]:
    """Per-op linear forms at unit efficiencies, split by the parameter that scales them."""
    t = cost.linear_terms()
    return {"C": t.compute_s, "R": t.ramp_s_per_token, "A": t.attention_s, "M": t.memory_s,
            "K": t.kv_read_s, "D": t.kv_elements, "Db": t.kv_block_elements, "group": t.gqa_group,
            "L": t.launches, "ring": t.link_s, "lat": t.latencies, "cost": cost}


def _static_columns(cost: CostModel, d: dict, B: int, I: int, O: int, seg: int,  # noqa: E741
                    chunk: int | None = None, nodes: int = DECODE_NODES) -> dict[str, np.ndarray]:
    """Feature columns of one static batch: the prefill steps and the (weighted) decode steps."""
    m = cost.model
    unit = d["cost"]
    window = m.sliding_window.window if m.sliding_window else None
    xs, w = [], []
    for pre, mult in prefill_steps(m, B, I, chunk):
        xs.append(unit.features(pre.T, pre.S, pre.Ad, pre.Ap, pre.R,
                                pre.Ad + pre.Ap if pre.Aw is None else pre.Aw, pre.R if pre.Rw is None else pre.Rw,
                                pre.Pc)[:, None])
        w.append(np.full(1, float(mult)))
    n_pre = len(xs)
    K = O - 1
    k: np.ndarray
    wk: np.ndarray
    if K >= 1:
        if K <= min(DECODE_EXACT_STEPS, nodes - 1):
            k = np.arange(1, K + 1, dtype=float)
            wk = np.ones(K)
        else:  # sum_k f(k) = integral of f over [0.5, K + 0.5] for piecewise-linear f
            k = np.linspace(0.5, K + 0.5, nodes)
            h = (k[-1] - k[0]) / (nodes - 1)
            wk = np.full(nodes, h)
            wk[[0, -1]] = h / 2
        p = I + k - 1
        Bf = float(B)
        Ad, R = Bf * (p + 0.5), Bf * (p + 1)
        Aw = Bf * np.minimum(p + 0.5, window) if window else Ad
        Rw = Bf * np.minimum(p + 1, window) if window else R
        T = np.full_like(k, Bf)
        xs.append(unit.features(T, T, Ad, np.zeros_like(k), R, Aw, Rw))
        w.append(wk)
    X = np.concatenate(xs, axis=1)
    wv = np.concatenate(w)
    n = X.shape[1]
    preflag = np.zeros(n, dtype=bool)
    preflag[:n_pre] = True
    return {"C": d["C"] @ X, "R": d["R"] @ X, "A": d["A"] @ X, "M": d["M"] @ X, "K": d["K"] @ X,
            "D": d["D"] @ X, "Db": d["Db"] @ X, "L": d["L"] @ X, "ring": d["ring"] @ X, "lat": d["lat"] @ X,
            "one": X[0].copy(), "S": X[2].copy(),
            "w": wv, "seg": np.full(n, seg, dtype=int), "pre": preflag}


# --------------------------------------------------------------------------- Vidur files


#: a Vidur profile CSV larger than this is refused (the published ones are under 10 MB)
MAX_VIDUR_BYTES = 256_000_000


def _read_csv(path: str | Path, need: Iterable[str], numeric: Iterable[str] = ()) -> Any:
    """A CSV with columns `need`; `numeric` columns must hold numbers (else FILE:LINE: column)."""
    import pandas as pd

    p = check_path("path", path)
    try:  # through the reader layer: the size refused before reading
        df = read_csv_file(p, MAX_VIDUR_BYTES, "Vidur profile CSV")
    except (OSError, UnicodeDecodeError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        if isinstance(e, SpecError):
            raise
        raise SpecError(f"{p}: cannot read ({e.__class__.__name__}: {str(e).strip()})") from None
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise SpecError(f"{p}: missing column(s) {', '.join(missing)}")
    for c in numeric:
        values = pd.to_numeric(df[c], errors="coerce")
        bad = values.isna() & df[c].notna()
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise SpecError(f"{p}:{i + 2}: {c}: {show(df[c].iloc[i])} is not a number")
        df[c] = values
    return df


def vidur_gemm_points(path: str | Path, hardware_id: str, dtype: str = "fp16") -> Any:
    """Vidur's per-layer GEMM times for one catalog hardware id, with each GEMM's shape.

    Returns a DataFrame: op, model, tp, T (num_tokens), n_in, n_out, time_s. QKV: H ->
    (n_h + 2 n_kv) d / t; O: n_h d / t -> H; gate+up: H -> 2 I / t (I / t ungated); down:
    I / t -> H. Vidur profiles fp16.
    """
    import pandas as pd

    need = ["gpu", "model", "n_head", "n_kv_head", "n_embd", "n_expanded_embd", "use_gated_mlp",
            "num_tokens", "num_tensor_parallel_workers", *(f"{o}_ms" for o in VIDUR_GEMMS)]
    df = _read_csv(path, need, numeric=[n for n in need if n not in ("gpu", "model", "use_gated_mlp")])
    gpus = [g for g, h in VIDUR_GPUS.items() if h == hardware_id]
    df = df[df["gpu"].isin(gpus)]
    if df.empty:
        return pd.DataFrame(columns=["op", "model", "tp", "T", "n_in", "n_out", "time_s"])
    t = df["num_tensor_parallel_workers"].astype(float)
    H = df["n_embd"].astype(float)
    nh, nkv = df["n_head"].astype(float), df["n_kv_head"].astype(float)
    d = H / nh
    inter = df["n_expanded_embd"].astype(float)
    gated = df["use_gated_mlp"].astype(str).str.lower().isin(("true", "1"))
    shapes = {
        "attn_pre_proj": (H, (nh / t + 2 * nkv / np.minimum(t, nkv)) * d),
        "attn_post_proj": (nh * d / t, H),
        "mlp_up_proj": (H, np.where(gated, 2.0, 1.0) * inter / t),
        "mlp_down_proj": (inter / t, H),
    }
    parts = []
    for op, (n_in, n_out) in shapes.items():
        parts.append(pd.DataFrame({"op": op, "model": df["model"], "tp": t, "T": df["num_tokens"].astype(float),
                                   "n_in": n_in, "n_out": n_out, "time_s": df[f"{op}_ms"].astype(float) / 1e3}))
    out = pd.concat(parts, ignore_index=True)
    return out[np.isfinite(out["time_s"]) & (out["time_s"] > 0)].reset_index(drop=True)


def gemm_time(hw: HardwareSpec, p: Mapping[str, float], T: Any, n_in: Any, n_out: Any,
              dtype: str = "fp16") -> Any:
    """`roofline.gemm_time_s` (the GEMM time of `CostModel`'s GEMM ops) at the parameters `p`."""
    return gemm_time_s(T, n_in, n_out, peak_flops_per_s=hw.flops(dtype) * p["compute_efficiency"],
                       hbm_bytes_per_s=hw.hbm_bandwidth_bytes_per_s * p["memory_efficiency"],
                       bytes_per_element=DTYPE_BYTES[dtype], ramp_tokens=p["gemm_ramp_tokens"],
                       kernel_overhead_s=p["kernel_overhead_s"])


def _fit_gemm_points(pts: Any, hw: HardwareSpec, dtype: str, objective: str, overhead_s: tuple[float, float]
                     ) -> dict[str, Any]:
    """Fit eta_c, eta_m, gemm_ramp_tokens, kernel_overhead_s of `dtype` GEMMs to timed points
    (T, n_in, n_out, time_s); `overhead_s`: the kernel overhead of the two starts. Returns the
    parameters, the loss and the errors before (the hardware's own numbers) and after."""
    T, n_in, n_out, y = (pts[c].to_numpy(float) for c in ("T", "n_in", "n_out", "time_s"))
    names = ("compute_efficiency", "memory_efficiency", "gemm_ramp_tokens", "kernel_overhead_s")
    start = {**params_of(hw), "compute_efficiency": 0.7, "memory_efficiency": 0.8,
             "gemm_ramp_tokens": 64.0, "kernel_overhead_s": overhead_s[0]}

    def pred(p: dict[str, float]) -> np.ndarray:
        return gemm_time(hw, p, T, n_in, n_out, dtype)

    before = pred({**start, **params_of(hw)})
    p, loss = fit(pred, y, start, names, objective=objective, tie_attention=False,
                  starts=[{"gemm_ramp_tokens": 300.0, "kernel_overhead_s": overhead_s[1]}])
    after = pred(p)
    return {"params": {k: p[k] for k in names}, "loss": loss, "points": len(y),
            "before": error_stats((before - y) / y * 100), "after": error_stats((after - y) / y * 100)}


def fit_ops(path: str | Path, hw: HardwareSpec, objective: str = "msle") -> dict[str, Any] | None:
    """Fit eta_c, eta_m, gemm_ramp_tokens, kernel_overhead_s to Vidur's GEMM times of `hw`.
    None when the file has no rows for this hardware."""
    pts = vidur_gemm_points(path, hw.id)
    if pts.empty:
        return None
    return {**_fit_gemm_points(pts, hw, "fp16", objective, (5e-6, 2e-6)),
            "models": sorted(pts["model"].unique().tolist())}


def gpu_run_gemm_points(path: str | Path, dtype: str = "bf16", mode: str = "cuda_graph") -> Any:
    """GEMM times of one `benchmarks/gpu/measure_gpu.py` run (`gemm.csv`): T (= M), n_in (= K),
    n_out (= N), time_s of one dtype and timing mode (CUDA graphs: weights rotated past the L2,
    no launch gaps; what an engine's decode graph sees)."""
    df = _read_csv(path, ["M", "K", "N", "dtype", "mode", "time_s", "status"], numeric=["M", "K", "N", "time_s"])
    df = df[(df["dtype"] == dtype) & (df["mode"] == mode) & (df["status"] == "ok")]
    out = df[["M", "K", "N", "time_s"]].astype(float).rename(columns={"M": "T", "K": "n_in", "N": "n_out"})
    return out[np.isfinite(out["time_s"]) & (out["time_s"] > 0)].reset_index(drop=True)


def fit_gemm_run(path: str | Path, hw: HardwareSpec, dtype: str = "bf16", objective: str = "msle") -> dict[str, Any] | None:
    """Fit eta_c, eta_m, gemm_ramp_tokens, kernel_overhead_s of `dtype` GEMMs to a GPU run's
    `gemm.csv` (the roofline GEMM time `gemm_time_s`, weights and activations of `dtype`).
    None when the file has no rows of that dtype."""
    pts = gpu_run_gemm_points(path, dtype)
    if pts.empty:
        return None
    return {**_fit_gemm_points(pts, hw, dtype, objective, (3e-6, 1e-6)), "dtype": dtype}


def allreduce_points(path: str | Path, hardware_id: str) -> Any:
    """Vidur's single-node all-reduce times for one catalog hardware id: workers, bytes, time_s."""
    df = _read_csv(path, ["node", "all_reduce_ms", "num_workers", "size_bytes", "devices_per_node"],
                   numeric=["all_reduce_ms", "num_workers", "size_bytes", "devices_per_node"])
    nodes = [n for n, h in VIDUR_NODES.items() if h == hardware_id]
    df = df[df["node"].isin(nodes) & (df["devices_per_node"] == df["num_workers"]) & (df["num_workers"] > 1)]
    out = df[["num_workers", "size_bytes"]].astype(float).copy()
    out["time_s"] = df["all_reduce_ms"].astype(float) / 1e3
    return out[np.isfinite(out["time_s"]) & (out["time_s"] > 0)].reset_index(drop=True)


def allreduce_time(hw: HardwareSpec, p: Mapping[str, float], workers: Any, size: Any) -> Any:
    """`roofline.allreduce_time_s` (the ring all-reduce of `CostModel`) at the parameters `p`."""
    return allreduce_time_s(workers, size, hw.link_bandwidth_bytes_per_s * p["link_efficiency"],
                            p["link_latency_s"])


def fit_allreduce(path: str | Path, hw: HardwareSpec, objective: str = "msle") -> dict[str, Any] | None:
    """Fit link_efficiency and link_latency_s to Vidur's NCCL all-reduce times of `hw`."""
    pts = allreduce_points(path, hw.id)
    if pts.empty:
        return None
    t, s, y = (pts[c].to_numpy(float) for c in ("num_workers", "size_bytes", "time_s"))
    names = ("link_efficiency", "link_latency_s")
    start = {**params_of(hw), "link_efficiency": 0.7, "link_latency_s": 2e-5}

    def pred(p: dict[str, float]) -> np.ndarray:
        return allreduce_time(hw, p, t, s)

    before = pred(params_of(hw))
    p, loss = fit(pred, y, start, names, objective=objective, tie_attention=False)
    after = pred(p)
    return {"params": {k: p[k] for k in names}, "loss": loss, "points": len(y),
            "workers": sorted({int(x) for x in t}),
            "before": error_stats((before - y) / y * 100), "after": error_stats((after - y) / y * 100)}


# --------------------------------------------------------------------------- calibrate


def calibrate(rows: Sequence[Mapping[str, Any]], hardware: str | HardwareSpec, *,
              ops: str | Path | None = None, allreduce: str | Path | None = None,
              objective: str = "msle", balance_sources: bool = True,
              include_simulated: bool = False, fit_link_latency: bool = True,
              params: Sequence[str] = STATIC_PARAMS, tie_attention: bool = True,
              measurements_name: str = "", leave_one_out: bool = True,
              workloads: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Fit `params` of one hardware profile to its rows in `rows`; see the module docstring.

    Stage 1 (optional files): GEMM ramp and kernel overhead from Vidur op times, link
    efficiency and latency from Vidur all-reduce times. Stage 2: `params` (default
    compute_efficiency, memory_efficiency, step_overhead_s) from the measurement rows of this
    hardware, stage-1 values held fixed. Returns the fitted values, before/after errors of the
    measurement rows, leave-one-source-out errors, per-parameter `sources` text and the stage-1
    reports. `fit_link_latency=False` keeps the profile's link_latency_s (the fit is reported).
    """
    rows = check_rows(rows)
    hw0 = load_hardware(hardware)
    hw_id = hw0.id
    check_choice("objective", objective, ("msle", "median"))
    for n in params:
        if n not in ALL_PARAMS:
            raise SpecError(f"calibrate: unknown parameter {n!r}; allowed: {', '.join(ALL_PARAMS)}")
    date = _dt.date.today().isoformat()
    mine = [r for r in rows if r["hardware"] == hw_id]
    if not mine:
        raise SpecError(f"calibrate: no rows for hardware {hw_id!r} in {measurements_name or 'the measurements'}")
    current = params_of(hw0)
    fixed, sources, stages = _stage_one(hw0, ops, allreduce, objective, fit_link_latency, date)
    ramp_fit = fixed["gemm_ramp_tokens"]

    def cap_ramp(p: dict[str, float]) -> None:
        """Keep the GEMM ramp's compute floor f T0 / (P eta_c) at most half a GEMM's
        weight-read time: T0 <= RAMP_CAP * P_bf16 eta_c / (hbm_bw eta_m). Otherwise a fitted
        ramp makes batch-1 decode compute-bound, which it is not (it is bandwidth-bound,
        and faster HBM must make it faster: docs/performance_model.md)."""
        bound = RAMP_CAP * hw0.flops("bf16") * p["compute_efficiency"] / (
            hw0.hbm_bandwidth_bytes_per_s * p["memory_efficiency"])
        p["gemm_ramp_tokens"] = min(ramp_fit, bound)

    hw_fixed = apply_params(hw0, fixed)
    validator = Validator(hardware_specs={hw_id: hw_fixed}, workloads=workloads)
    fs = StaticFitSet(mine, validator)
    sim_rows = [r for r in mine if r["scenario"] != "static_batch"] if include_simulated else []
    if not fs.rows and not sim_rows:
        raise SpecError(f"calibrate: none of the {len(mine)} rows of {hw_id} can be priced "
                        f"(e.g. {fs.skipped[0]['reason'] if fs.skipped else 'no static_batch rows'})")
    names = tuple(params)
    fit_start = {**fixed, "compute_efficiency": 0.6, "memory_efficiency": 0.75, "step_overhead_s": 1e-3}
    fit_start = {k: (fit_start[k] if k in names else fixed[k]) for k in ALL_PARAMS}
    starts = [{"compute_efficiency": 0.4, "memory_efficiency": 0.9, "step_overhead_s": 3e-3},
              {"compute_efficiency": 0.8, "memory_efficiency": 0.5, "step_overhead_s": 2e-4}]
    starts = [{k: v for k, v in s.items() if k in names} for s in starts]

    def do_fit(mask: np.ndarray) -> dict[str, float]:
        sub = np.flatnonzero(mask)
        w = _source_weights([fs.sources[i] for i in sub], balance_sources)
        if sim_rows:
            return _fit_with_sim(fs, sub, w, sim_rows, hw_fixed, fit_start, names, objective,
                                 tie_attention, starts, workloads, cap_ramp)

        def pred(p: dict[str, float]) -> np.ndarray:
            return fs.predict(p)[sub]

        p, _ = fit(pred, fs.measured[sub], fit_start, names, weights=w, objective=objective,
                   tie_attention=tie_attention, starts=starts, adjust=cap_ramp)
        return p

    all_mask = np.ones(len(fs.rows), dtype=bool)
    fitted = do_fit(all_mask)
    if fitted["gemm_ramp_tokens"] < ramp_fit:
        sources["gemm_ramp_tokens"] = (sources.get("gemm_ramp_tokens", "the profile's value") +
                                       f"; capped from {ramp_fit:.4g} to {fitted['gemm_ramp_tokens']:.4g} "
                                       f"so small GEMMs stay bandwidth-bound (T0 <= {RAMP_CAP} P eta_c/(bw eta_m))")
    hw_after = apply_params(hw0, fitted)
    used = sorted({r["source"] for r in fs.rows})
    n_used = len(fs.rows) + len(sim_rows)
    for k in names:
        sources[k] = (f"{measurements_name or 'measurements'}: {n_used} {hw_id} rows "
                      f"({'static_batch' if not sim_rows else 'static_batch + simulated'}) from "
                      f"{len(used)} sources; {objective}{' (sources weighted equally)' if balance_sources else ''} "
                      f"with {', '.join(n for n in names if n != k)} fitted jointly; {date}")
    if tie_attention and "compute_efficiency" in names:
        sources["attention_efficiency"] = "tied to compute_efficiency (flash attention reaches a GEMM-like fraction of peak)"
    scope = None if include_simulated else "static_batch"
    before = validate(mine, scenario=scope, hardware_specs={hw_id: hw0}, workloads=workloads)
    after = validate(mine, scenario=scope, hardware_specs={hw_id: hw_after}, workloads=workloads)

    loso = _leave_one_source_out(fs, used, names, do_fit) if leave_one_out and len(used) > 1 else []
    loso_median = float(np.median([x["median_ape"] for x in loso])) if loso else None
    values = {k: fitted[k] for k in ALL_PARAMS}
    if not fit_link_latency:
        values["link_latency_s"] = current["link_latency_s"]
    return {
        "hardware": hw_id,
        "objective": objective,
        "balance_sources": balance_sources,
        "fitted": list(names) + [k for k in ("gemm_ramp_tokens", "kernel_overhead_s", "link_efficiency",
                                             "link_latency_s") if k in sources],
        "params": values,
        "previous": current,
        "rows_used": n_used,
        "rows_skipped": fs.skipped,
        "sources_used": used,
        "before": _brief(before),
        "after": _brief(after),
        "leave_one_source_out": loso,
        "leave_one_source_out_median_ape": loso_median,
        "stages": stages,
        "sources": sources,
        "date": date,
    }


def _stage_one(hw0: HardwareSpec, ops: str | Path | None, allreduce: str | Path | None, objective: str,
               fit_link_latency: bool, date: str) -> tuple[dict[str, float], dict[str, str], dict[str, Any]]:
    """Stage 1 of `calibrate`: the GEMM ramp and kernel overhead from Vidur op times, link
    efficiency (and latency) from Vidur all-reduce times. Returns (parameters with the fitted
    values in place, their `sources` text, the stage reports)."""
    fixed = params_of(hw0)
    sources: dict[str, str] = {}
    stages: dict[str, Any] = {}
    if ops:
        r = fit_ops(ops, hw0, objective)
        stages["ops"] = r
        if r:
            for k in ("gemm_ramp_tokens", "kernel_overhead_s"):
                fixed[k] = r["params"][k]
                sources[k] = (f"{Path(ops).name}: {r['points']} GEMM timings (QKV, O, gate/up, down) of "
                              f"{len(r['models'])} models, {objective} fit of the roofline GEMM time "
                              f"with eta_c, eta_m, T0, kernel overhead free; {date}")
    if allreduce:
        r = fit_allreduce(allreduce, hw0, objective)
        stages["allreduce"] = r
        if r:
            fixed["link_efficiency"] = r["params"]["link_efficiency"]
            sources["link_efficiency"] = (f"{Path(allreduce).name}: {r['points']} single-node NCCL all-reduce "
                                          f"timings ({', '.join(map(str, r['workers']))} GPUs), {objective} fit "
                                          f"of 2(t-1)/t msg/(link eta) + latency; {date}")
            if fit_link_latency:
                fixed["link_latency_s"] = r["params"]["link_latency_s"]
                sources["link_latency_s"] = sources["link_efficiency"]
    return fixed, sources, stages


def _leave_one_source_out(fs: StaticFitSet, used: Sequence[str], names: Sequence[str],
                          do_fit: Callable[[np.ndarray], dict[str, float]]) -> list[dict[str, Any]]:
    """Refit without each source in turn and score the held-out source's rows."""
    loso: list[dict[str, Any]] = []
    for src in used:
        held = np.array([s == src for s in fs.sources])
        if (~held).sum() < len(names) + 1:
            continue
        p = do_fit(~held)
        pred = fs.predict(p)[held]
        err = (pred - fs.measured[held]) / fs.measured[held] * 100
        loso.append({"source": src, **error_stats(err), "params": {k: p[k] for k in names}})
    return loso


def _brief(v: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v[k] for k in ("predicted", "median_ape", "p90_ape", "mean_signed_error", "by_source",
                              "by_scenario", "by_metric")}


def _fit_with_sim(fs: StaticFitSet, sub: np.ndarray, w: np.ndarray, sim_rows: list, hw: HardwareSpec,
                  start: dict, names: Sequence[str], objective: str, tie: bool, starts: list,
                  workloads: Mapping[str, str] | None,
                  adjust: Callable[[dict[str, float]], None] | None = None) -> dict[str, float]:
    """The slow path: simulated rows re-run the engine at every trial parameter set."""
    meas_sim = np.array([r["value"] for r in sim_rows], dtype=float)
    w_all = np.concatenate([w, _source_weights([r["source"] for r in sim_rows], True) * (w.sum() / max(len(sim_rows), 1))])

    def pred(p: dict[str, float]) -> np.ndarray:
        v = Validator(hardware_specs={hw.id: apply_params(hw, p)}, workloads=workloads, max_requests=200)
        out = []
        for r in sim_rows:
            try:
                out.append(v.predict_row(r))
            except SkipRow:
                out.append(math.nan)
        return np.concatenate([fs.predict(p)[sub], np.array(out)])

    p, _ = fit(pred, np.concatenate([fs.measured[sub], meas_sim]), start, names, weights=w_all,
               objective=objective, tie_attention=tie, starts=starts[:0], adjust=adjust)
    return p


# --------------------------------------------------------------------------- overlay


def _num(v: float) -> float:
    """4 significant digits; an overhead that fitted to below 10 ns is written as 0."""
    return 0.0 if abs(v) < 1e-8 else float(f"{v:.4g}")


def efficiency_block(result: Mapping[str, Any], all_fields: bool = True) -> dict[str, Any]:
    """The `efficiency:` mapping (values rounded to 4 significant digits, with `sources`)."""
    p = result["params"]
    keys = [k for k in ALL_PARAMS if k != "link_latency_s"]
    if not all_fields:
        keys = [k for k in keys if k in result["fitted"] or k in result["sources"]]
    block: dict[str, Any] = {k: _num(p[k]) for k in keys}
    block["sources"] = {k: v for k, v in result["sources"].items() if k != "link_latency_s"}
    return block


def overlay_yaml(result: Mapping[str, Any]) -> str:
    """An overlay YAML for `--hardware`: `base: <id>`, `efficiency: {...}` (and link_latency_s
    when it was fitted), each fitted value's origin under `efficiency.sources`."""
    import yaml

    data: dict[str, Any] = {"base": result["hardware"]}
    if "link_latency_s" in result["sources"]:
        data["link_latency_s"] = _num(result["params"]["link_latency_s"])
    data["efficiency"] = efficiency_block(result)
    if "link_latency_s" in result["sources"]:
        data["efficiency"]["sources"]["link_latency_s"] = result["sources"]["link_latency_s"]
    head = (f"# llmsim calibrate {result['hardware']} ({result['date']}): {result['objective']} fit on "
            f"{result['rows_used']} rows; median APE {_pct(result['before']['median_ape'])} -> "
            f"{_pct(result['after']['median_ape'])}; leave-one-source-out median "
            f"{_pct(result['leave_one_source_out_median_ape'])}\n")
    return head + yaml.safe_dump(data, sort_keys=False, width=100, allow_unicode=True)


def _pct(x: Any) -> str:
    return "n/a" if x is None else f"{x:.1f} %"


__all__ = [
    "ALL_PARAMS",
    "STATIC_PARAMS",
    "StaticFitSet",
    "allreduce_points",
    "allreduce_time",
    "apply_params",
    "calibrate",
    "efficiency_block",
    "fit_allreduce",
    "fit_gemm_run",
    "fit_ops",
    "gpu_run_gemm_points",
    "gemm_time",
    "overlay_yaml",
    "params_of",
    "vidur_gemm_points",
]
