"""Analytic steady-state model of TensorRT-LLM v0.14 offline max throughput (research, issue 13).

Not part of the package and not a test: a de-risking study for the engine-profile work. It
prices every row of `dev_throughput.csv` (trtllm-bench throughput, TensorRT engine, C++
runtime) without the event engine, using only the public cost model
(`simulator.resolve.make_cost_model`, `weights_bytes_per_gpu`, `activation_reserve_bytes`),
and fits a handful of physically meaningful parameters by least squares on log error.

How trtllm-bench v0.14 sets the engine up (sources in engine_specs/trtllm.yaml):

1. `trtllm-bench build --dataset` (tensorrt_llm/bench/build/build.py, tuning.py
   `calc_engine_setting` / `finetune_setting`): from the dataset's average ISL I and OSL O,
       kv_req  = (G_nvml * tp - params/1e9 * w_bytes) * 0.95 / (2 L max(tp, n_kv) d kv_bytes / 2^30) / (I + O)
       bs_raw  = min(kv_req, 4096) / pp;  tok_raw = min(bs_raw (1 + I/O), 32768)
       max_batch_size = 64 min; round up to 32 (<256), 128 (<1024), 256
       max_num_tokens = 2048 min; round up to 256 (<4096), 512 (<8192), 1024
2. `trtllm-bench throughput` (ExecutorSettingsConfig): GUARANTEED_NO_EVICT, chunked context
   on (FCFS), KV = 0.90 of the GPU memory free after the engine loads, block reuse off,
   every request at t = 0, EOS ignored (exactly O tokens each).

Steady state under GUARANTEED_NO_EVICT (no eviction, so a closed population):
    B        = min(max_batch_size, floor(KV blocks / ceil((I + O) / 64)))
    KV bytes = 0.90 * (G_nvml - weights/GPU - activations(max_num_tokens) - reserve)
    c        = max_num_tokens - B_dec           (context tokens a step can take)
    lambda   = min(B / (O - 1 + ceil(I / c)), max_num_tokens / (I + O - 1))   completions/step
If lambda * ceil(I / c) >= 1 every step mixes decodes and context (lambda I context tokens a
step); otherwise a fraction f = lambda ceil(I/c) of steps carries one chunk of I/ceil(I/c)
tokens and the rest are pure decode steps. Step time = cost model (step overhead zeroed)
+ the fitted per-step overhead; throughput = lambda O / mean step time.

Two pricing corrections the TensorRT engine needs (both inferred from the data, see the
sources of engine_specs/trtllm.yaml): the TP all-reduce runs in 16 bits even for fp8 rows
(the cost model sends the activation dtype), and Mistral's 4096-token window is not used
(0.14 engines attend over the whole context unless max_attention_window_size is passed).

Fitted parameters (msle on log error; everything else inherited from the hardware YAMLs):
    step_overhead_s        per-step runtime overhead of the C++ executor        3.22 ms
    fp8_eff_rel_hopper     fp8 GEMM/attention efficiency / bf16's (H100, H200) 1.00 (at its bound)
    fp8_eff_rel_ada        the same on L40S                                   0.80
    mem_reserve_gib        non-KV, non-weight memory per GPU beyond the
                           activation estimate                                3.97 GiB
    link_eff_pcie          TP all-reduce efficiency over PCIe (L40S, A100 PCIe) 0.41
    allreduce_latency_s    per all-reduce call when tp > 1 (catalog: 5 us)     50 us
Optional (not fitted by default): compute_scale, memory_scale, kernel_overhead_scale.

Result on the 622 rows (2026-12-01): median APE 9.9 % (today's llmsim 19.4 %), every shape
<= 14.5 % (20000/2000: 6.7 %, was 56 %); leave-one-hardware-out 10.7 %, leave-one-shape-out
10.6 %. With the start values and nothing fitted: 13.2 %.

Run:  python benchmarks/analyze_throughput.py [--baseline POINTS.json] [--loo] [--csv OUT.csv]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from simulator.analysis.fitting import nelder_mead
from simulator.analysis.measurements import read_measurements
from simulator.cost.memory import activation_reserve_bytes, weights_bytes_per_gpu
from simulator.resolve import make_cost_model
from simulator.specs.catalog import load_hardware, load_model
from simulator.specs.dtypes import DTypes
from simulator.specs.parallelism import Parallelism

DATA = Path("/work/shared/reference/measurements/dev_throughput.csv")
GIB = 2.0**30

#: GPU memory as NVML reports it (what trtllm-bench's get_device_memory reads), GiB:
#: A100 80 GB 81920 MiB, H100 SXM 81559 MiB, H200 143771 MiB, L40S 46068 MiB
#: (hardware_specs/*.yaml comments; docs/engines.md §3.2).
NVML_GIB = {"a100-sxm-80gb": 80.0, "a100-pcie-80gb": 80.0, "h100-sxm": 81559 / 1024,
            "h200-sxm": 143771 / 1024, "l40s": 46068 / 1024}
#: chip class for the fp8 efficiency parameter
FP8_CLASS = {"h100-sxm": "hopper", "h200-sxm": "hopper", "l40s": "ada"}
#: num_requests per ISL/OSL of the v0.13-v0.14 perf-overview.md (dataset preparation table)
NUM_REQUESTS = {(128, 128): 30000, (128, 2048): 3000, (128, 4096): 1500, (2048, 128): 3000,
                (2048, 2048): 1500, (5000, 500): 1500, (1000, 1000): 3000, (500, 2000): 3000,
                (20000, 2000): 1000}

BUILD_KV_FRACTION = 0.95  # calc_engine_setting default; `build` passes none
RUNTIME_KV_FRACTION = 0.90  # trtllm-bench throughput --kv_cache_free_gpu_mem_fraction default
TOKENS_PER_BLOCK = 64  # TensorRT engine default (trtllm-build --tokens_per_block 64 in 0.x)

PARAMS = ("step_overhead_s", "fp8_eff_rel_hopper", "fp8_eff_rel_ada", "mem_reserve_gib", "compute_scale",
          "memory_scale", "link_eff_pcie", "kernel_overhead_scale", "allreduce_latency_s")
START = {"step_overhead_s": 1e-3, "fp8_eff_rel_hopper": 0.8, "fp8_eff_rel_ada": 0.5,
         "mem_reserve_gib": 1.0, "compute_scale": 1.0, "memory_scale": 1.0, "link_eff_pcie": 0.5,
         "kernel_overhead_scale": 1.0, "allreduce_latency_s": 5e-6}
#: the parameters fitted by default (the others stay at START)
DEFAULT_FIT = ("step_overhead_s", "fp8_eff_rel_hopper", "fp8_eff_rel_ada", "mem_reserve_gib", "link_eff_pcie",
               "allreduce_latency_s")
#: chips whose tensor-parallel all-reduce runs over PCIe (no NVLink): their link efficiency
#: is a fitted parameter (the catalog value is a datasheet 1.0, never calibrated)
PCIE_TP = {"l40s", "a100-pcie-80gb"}


# ---------------------------------------------------------------------- trtllm-bench build heuristic
def finetune_setting(kv_max_requests: float, isl: float, osl: float, pp: int = 1) -> tuple[int, int]:
    """tensorrt_llm/bench/build/tuning.py `finetune_setting` (v0.14-era), verbatim arithmetic."""
    raw_bs = min(kv_max_requests, 4096) / pp
    raw_tok = min(raw_bs * (1 + isl / osl), 32768)
    if raw_bs < 256:
        bs = max(64, 32 * math.ceil(raw_bs / 32))
    elif raw_bs < 1024:
        bs = 128 * math.ceil(raw_bs / 128)
    else:
        bs = 256 * math.ceil(raw_bs / 256)
    if raw_tok < 4096:
        tok = max(2048, 256 * math.ceil(raw_tok / 256))
    elif raw_tok < 8192:
        tok = 512 * math.ceil(raw_tok / 512)
    else:
        tok = 1024 * math.ceil(raw_tok / 1024)
    return bs, tok


def bench_engine_limits(row: Mapping[str, Any]) -> tuple[int, int, float]:
    """(max_batch_size, max_num_tokens, kv_max_requests) `trtllm-bench build --dataset` picks.

    calc_engine_setting: bytes per element 1 for FP8 weights/KV else 2; parameter count in
    1e9 (GB) subtracted from NVML GiB (the source mixes the units); KV heads at least tp.
    """
    m = load_model(row["model"])
    tp, pp = row["tp"], row["pp"]
    wb = 1.0 if row["weight_dtype"] == "fp8" else 2.0
    kvb = 1.0 if row["kv_dtype"] == "fp8" else 2.0
    byte_per_token_gib = 2 * m.num_layers * max(tp, m.num_kv_heads) * m.d_head * kvb / GIB
    engine_gb = m.param_count / 1e9 * wb
    total_gib = NVML_GIB[row["hardware"]] * tp * pp
    kv_req = (total_gib - engine_gb) * BUILD_KV_FRACTION / byte_per_token_gib / (row["input_len"] + row["output_len"])
    bs, tok = finetune_setting(kv_req, row["input_len"], row["output_len"], pp)
    return bs, tok, kv_req


# ---------------------------------------------------------------------- steady state
class RowModel:
    """Everything about one row that does not depend on the fitted parameters."""

    def __init__(self, row: Mapping[str, Any]) -> None:
        self.row = row
        self.id = row["id"]
        self.I, self.O = int(row["input_len"]), int(row["output_len"])
        self.measured = float(row["value"])
        self.hw = row["hardware"]
        # TRT-LLM v0.14 engines attend over the whole context unless max_attention_window_size
        # is passed at run time, which trtllm-bench does not: price Mistral without its window
        self.model = dataclasses.replace(load_model(row["model"]), sliding_window=None)
        self.max_bs, self.max_tok, self.kv_req_build = bench_engine_limits(row)
        par = Parallelism(row["tp"], row["pp"])
        dt = DTypes(row["weight_dtype"], row["activation_dtype"], row["kv_dtype"])
        self.weights_gib = weights_bytes_per_gpu(self.model, par, dt) / GIB
        self.act_gib = activation_reserve_bytes(self.model, par, dt, self.max_tok, self.max_bs) / GIB
        self.kv_bytes_per_token_gpu = self.model.kv_bytes_per_token(row["kv_dtype"]) / (
            self.model.kv_shards(row["tp"]) * row["pp"])
        self.fp8 = row["weight_dtype"] == "fp8"
        self.cfg_key = (row["model"], row["hardware"], row["tp"], row["pp"], row["weight_dtype"],
                        row["activation_dtype"], row["kv_dtype"])
        self.replicas = row["replicas"]
        self.window = self.model.sliding_window.window if self.model.sliding_window else None
        # TensorRT-LLM keeps the residual stream (and so the TP all-reduce) in 16 bits under
        # FP8 quantisation; the cost model sends the activation dtype (1 byte for fp8). Per
        # token, the missing half of the ring all-reduce (roofline.py's formula) is:
        hw = load_hardware(self.hw)
        t = row["tp"]
        ba = 2.0 if row["activation_dtype"] in ("fp8", "int8") else None
        self.allreduce_link_bytes_per_token = 0.0
        if t > 1 and ba is not None:
            per_layer = 1 if self.model.parallel_attention else 2
            self.allreduce_link_bytes_per_token = (
                self.model.num_layers * per_layer * 2.0 * (t - 1) / t * self.model.hidden_size * (ba - 1.0))
        self.allreduce_calls = self.model.num_layers * (1 if self.model.parallel_attention else 2) if t > 1 else 0
        self.link_latency_catalog_s = hw.link_latency_s
        self.link_bw = hw.link_bandwidth_bytes_per_s
        self.link_eff_catalog = hw.efficiency.link_efficiency
        self.shape = f"{self.I}/{self.O}"

    def concurrency(self, mem_reserve_gib: float) -> int:
        free_gib = NVML_GIB[self.hw] - self.weights_gib - self.act_gib - mem_reserve_gib
        kv_tokens = max(free_gib, 0.0) * RUNTIME_KV_FRACTION * GIB / self.kv_bytes_per_token_gpu
        blocks = int(kv_tokens // TOKENS_PER_BLOCK)
        per_req = math.ceil((self.I + self.O) / TOKENS_PER_BLOCK)
        return min(self.max_bs, blocks // per_req)

    def _capped(self, pairs_uncapped: float, n: float, ctx_lo: float, ctx_hi: float) -> float:
        """sum of min(context, W) over n queries whose context runs evenly from ctx_lo to ctx_hi."""
        if self.window is None or ctx_hi <= self.window:
            return pairs_uncapped
        W = self.window
        if ctx_lo >= W:
            return n * W
        frac_below = (W - ctx_lo) / (ctx_hi - ctx_lo)
        below = n * frac_below * (ctx_lo + W) / 2.0
        return below + n * (1 - frac_below) * W

    def predict(self, step_time: Callable[..., float], overhead_s: float, mem_reserve_gib: float,
                link_eff: float | None = None, allreduce_16bit: bool = True,
                allreduce_latency_s: float | None = None) -> float:
        """Output tokens/s of the whole row (all replicas)."""
        I, O = self.I, self.O  # noqa: E741 (the paper symbols)
        B = self.concurrency(mem_reserve_gib)
        if B < 1:
            return float("nan")
        T_max = self.max_tok
        # fixed point: decodes per step depend on lambda, the chunk on the decodes
        lam = B / (O - 1 + 1)
        for _ in range(30):
            n_dec = lam * (O - 1)
            c = max(T_max - n_dec, TOKENS_PER_BLOCK)
            n_chunks = math.ceil(I / c)
            lam_new = min(B / (O - 1 + n_chunks), T_max / (I + O - 1))
            if abs(lam_new - lam) < 1e-9 * lam:
                lam = lam_new
                break
            lam = 0.5 * (lam + lam_new)
        n_dec = lam * (O - 1)
        c = max(T_max - n_dec, TOKENS_PER_BLOCK)
        n_chunks = math.ceil(I / c)
        q = I / n_chunks  # tokens per chunk
        ctx_mid = I + O / 2.0
        # decode part of a step
        Ad = n_dec * (ctx_mid + 0.5)
        Rd = n_dec * (ctx_mid + 1.0)
        Awd = self._capped(Ad, n_dec, I + 0.5, I + O - 0.5)
        Rwd = self._capped(Rd, n_dec, I + 1.0, I + O)
        # context work of one prompt: pairs I^2/2 whatever the chunking; KV read sum(p + q)
        ap1 = I * I / 2.0
        r1 = q * n_chunks * (n_chunks + 1) / 2.0
        pc1 = r1 - I
        aw1 = self._capped(ap1, I, 0.0, I) if self.window else ap1
        rw1 = self._capped(r1, n_chunks, q, I) if self.window else r1

        comm_s_per_token = 0.0
        if allreduce_16bit:
            comm_s_per_token = self.allreduce_link_bytes_per_token / (
                self.link_bw * (self.link_eff_catalog if link_eff is None else link_eff))

        if allreduce_latency_s is not None:  # replaces the catalog's per-call latency
            overhead_s = overhead_s + self.allreduce_calls * (allreduce_latency_s - self.link_latency_catalog_s)

        def tstep(ctx_prompts: float, emits: float) -> float:
            T = n_dec + ctx_prompts * I
            S = n_dec + emits
            Ap, R, Pc = ctx_prompts * ap1, Rd + ctx_prompts * r1, ctx_prompts * pc1
            Aw, Rw = Awd + ctx_prompts * aw1, Rwd + ctx_prompts * rw1
            if self.window is None:
                Aw, Rw = Ad + Ap, R
            return step_time(T, S, Ad, Ap, R, Aw, Rw, Pc) + overhead_s + comm_s_per_token * T

        f = lam * n_chunks
        if f >= 1.0:  # every step carries context: lambda prompts' worth a step
            t_mean = tstep(lam, lam)
        else:  # a fraction f of steps carries one chunk (1/n_chunks of a prompt)
            t_mix = tstep(1.0 / n_chunks, 1.0 / n_chunks)
            t_dec = tstep(0.0, 0.0)
            t_mean = f * t_mix + (1 - f) * t_dec
        return lam * O / t_mean * self.replicas


class Fitter:
    """Caches cost models per (setting, efficiency) and prices all rows for a parameter set."""

    def __init__(self, rows: Sequence[RowModel], allreduce_16bit: bool = True) -> None:
        self.rows = list(rows)
        self.allreduce_16bit = allreduce_16bit
        self.fit_latency = False
        self._cost: dict[tuple, Any] = {}

    def step_fn(self, r: RowModel, p: Mapping[str, float]) -> Callable[..., float]:
        rel = 1.0
        if r.fp8:
            rel = p["fp8_eff_rel_hopper"] if FP8_CLASS.get(r.hw) == "hopper" else p["fp8_eff_rel_ada"]
        scale, mscale, kscale = p["compute_scale"], p["memory_scale"], p["kernel_overhead_scale"]
        link = p["link_eff_pcie"] if r.hw in PCIE_TP else None
        key = (r.cfg_key, round(rel, 4), round(scale, 4), round(mscale, 4), round(kscale, 4),
               None if link is None else round(link, 4))
        if key not in self._cost:
            base = load_hardware(r.hw).efficiency
            eff = {"compute_efficiency": min(base.compute_efficiency * rel * scale, 1.0),
                   "attention_efficiency": min(base.attention_efficiency * rel * scale, 1.0),
                   "memory_efficiency": min(base.memory_efficiency * mscale, 1.0),
                   "kernel_overhead_s": base.kernel_overhead_s * kscale,
                   "step_overhead_s": 0.0}
            if link is not None:
                eff["link_efficiency"] = link
            c = make_cost_model(r.model, r.hw, tp=r.row["tp"], pp=r.row["pp"],
                                weight_dtype=r.row["weight_dtype"], activation_dtype=r.row["activation_dtype"],
                                kv_dtype=r.row["kv_dtype"], efficiency=eff)
            self._cost[key] = c.step_time
        return self._cost[key]

    def predict(self, p: Mapping[str, float], rows: Sequence[RowModel] | None = None) -> np.ndarray:
        rows = self.rows if rows is None else rows
        return np.array([r.predict(self.step_fn(r, p), p["step_overhead_s"], p["mem_reserve_gib"],
                                   p["link_eff_pcie"] if r.hw in PCIE_TP else None, self.allreduce_16bit,
                                   p["allreduce_latency_s"] if self.fit_latency else None)
                         for r in rows])


# ---------------------------------------------------------------------- fitting
def _to_x(name: str, v: float) -> float:
    if name.startswith("fp8_eff_rel") or name == "link_eff_pcie":
        q = min(max((v - 0.05) / 0.95, 1e-6), 1 - 1e-6)
        return math.log(q / (1 - q))
    if name == "mem_reserve_gib":
        return v
    if name in ("compute_scale", "memory_scale", "kernel_overhead_scale"):
        return math.log(v)
    if name == "allreduce_latency_s":
        return math.log(v / 1e-5)
    return math.log(v / 1e-3)


def _to_v(name: str, x: float) -> float:
    x = max(min(x, 40.0), -40.0)
    if name.startswith("fp8_eff_rel") or name == "link_eff_pcie":
        return 0.05 + 0.95 / (1 + math.exp(-x))
    if name == "mem_reserve_gib":
        return x
    if name in ("compute_scale", "memory_scale"):
        return math.exp(max(min(x, 1.0), -2.0))
    if name == "kernel_overhead_scale":
        return math.exp(max(min(x, 3.0), -6.0))
    if name == "allreduce_latency_s":
        return 1e-5 * math.exp(x)
    return 1e-3 * math.exp(x)


def loss(pred: np.ndarray, meas: np.ndarray) -> float:
    e = np.log(pred / meas)
    e = np.where(np.isfinite(e), e, 5.0)  # an infeasible row (no KV) costs a large error
    return float(np.mean(e**2))


def fit(fitter: Fitter, rows: Sequence[RowModel], names: Sequence[str],
        start: Mapping[str, float] = START) -> dict[str, float]:
    meas = np.array([r.measured for r in rows])

    def params(x: np.ndarray) -> dict[str, float]:
        p = dict(start)
        for n, xi in zip(names, x, strict=True):
            p[n] = _to_v(n, float(xi))
        return p

    def f(x: np.ndarray) -> float:
        return loss(fitter.predict(params(x), rows), meas)

    x0 = np.array([_to_x(n, start[n]) for n in names])
    x, _ = nelder_mead(f, x0, step=0.5, max_iter=400)
    x, _ = nelder_mead(f, x, step=0.15, max_iter=300)
    return params(x)


# ---------------------------------------------------------------------- reporting
def ape(pred: float, meas: float) -> float:
    return abs(pred - meas) / meas * 100.0 if math.isfinite(pred) else float("inf")


def table(rows: Sequence[RowModel], preds: Mapping[str, np.ndarray], key: Callable[[RowModel], str],
          title: str) -> None:
    groups: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        groups[key(r)].append(i)
    names = list(preds)
    print(f"\n{title}")
    print(f"  {'group':<16}{'rows':>5}" + "".join(f"{n + ' med%':>18}{'bias%':>8}" for n in names))
    for g in sorted(groups, key=lambda s: (len(s), s)):
        idx = groups[g]
        line = f"  {g:<16}{len(idx):>5}"
        for n in names:
            e = [ape(preds[n][i], rows[i].measured) for i in idx]
            s = [(preds[n][i] / rows[i].measured - 1) * 100 for i in idx if math.isfinite(preds[n][i])]
            line += f"{np.median(e):>18.1f}{np.median(s) if s else float('nan'):>8.1f}"
        print(line)
    line = f"  {'ALL':<16}{len(rows):>5}"
    for n in names:
        e = [ape(preds[n][i], rows[i].measured) for i in range(len(rows))]
        s = [(preds[n][i] / rows[i].measured - 1) * 100 for i in range(len(rows)) if math.isfinite(preds[n][i])]
        line += f"{np.median(e):>18.1f}{np.median(s):>8.1f}"
    print(line)


def leave_one_out(fitter: Fitter, rows: Sequence[RowModel], names: Sequence[str],
                  key: Callable[[RowModel], str], full: Mapping[str, float]) -> np.ndarray:
    """Fit without each group, predict the group. A group-specific parameter that the other
    groups cannot inform (L40S's fp8 factor when L40S is held out) keeps the full fit's
    Hopper value (the nearest physically meaningful guess), and says so."""
    out = np.full(len(rows), np.nan)
    for g in sorted({key(r) for r in rows}):
        train = [r for r in rows if key(r) != g]
        test_idx = [i for i, r in enumerate(rows) if key(r) == g]
        use = [n for n in names if not (n == "fp8_eff_rel_ada" and not any(
            r.fp8 and FP8_CLASS.get(r.hw) == "ada" for r in train))]
        p = fit(fitter, train, use, start=full)
        if "fp8_eff_rel_ada" not in use:
            p["fp8_eff_rel_ada"] = p["fp8_eff_rel_hopper"]
            print(f"  held out {g}: no Ada fp8 rows left; fp8_eff_rel_ada := fp8_eff_rel_hopper")
        pr = fitter.predict(p, [rows[i] for i in test_idx])
        out[test_idx] = pr
        e = np.median([ape(pr[j], rows[i].measured) for j, i in enumerate(test_idx)])
        print(f"  held out {g:<14} rows {len(test_idx):>3}  median APE {e:5.1f} %  params "
              + ", ".join(f"{n}={p[n]:.4g}" for n in names))
    return out


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--baseline", help="JSON {row id: today's llmsim prediction} to compare with")
    ap.add_argument("--params", default=",".join(DEFAULT_FIT),
                    help=f"parameters to fit (comma list of {', '.join(PARAMS)})")
    ap.add_argument("--loo", action="store_true", help="leave-one-hardware-out and leave-one-shape-out")
    ap.add_argument("--csv", help="write per-row predictions here")
    ap.add_argument("--allreduce-act-dtype", action="store_true",
                    help="price the TP all-reduce in the activation dtype (the cost model's default) "
                         "instead of 16 bits for fp8 rows")
    a = ap.parse_args(argv)
    names = [n.strip() for n in a.params.split(",") if n.strip()]
    for n in names:
        if n not in PARAMS:
            raise SystemExit(f"--params: unknown parameter {n!r}; allowed: {', '.join(PARAMS)}")

    rows_raw, _ = read_measurements(a.data)
    rows = [RowModel(r) for r in rows_raw if r["scenario"] == "offline_max_throughput"]
    fitter = Fitter(rows, allreduce_16bit=not a.allreduce_act_dtype)
    fitter.fit_latency = "allreduce_latency_s" in names

    p0 = dict(START)
    p = fit(fitter, rows, names)
    print("fitted parameters (msle on all rows):")
    for n in PARAMS:
        print(f"  {n:<22}{p[n]:.5g}{'' if n in names else '  (fixed)'}")
    preds: dict[str, np.ndarray] = {"analytic": fitter.predict(p)}
    preds["analytic_start"] = fitter.predict(p0)
    if a.baseline:
        base = json.loads(Path(a.baseline).read_text())
        preds["llmsim_today"] = np.array([base.get(r.id, float("nan")) for r in rows])
    if a.loo:
        print("\nleave-one-hardware-out:")
        preds["loo_hw"] = leave_one_out(fitter, rows, names, lambda r: r.hw, p)
        print("\nleave-one-shape-out:")
        preds["loo_shape"] = leave_one_out(fitter, rows, names, lambda r: r.shape, p)

    table(rows, preds, lambda r: r.shape, "by input/output shape (median absolute % error, median signed %)")
    table(rows, preds, lambda r: r.hw, "by hardware")
    table(rows, preds, lambda r: "fp8" if r.fp8 else "fp16", "by dtype")
    table(rows, preds, lambda r: f"{r.hw}:{'fp8' if r.fp8 else 'fp16'}", "by hardware x dtype")
    table(rows, preds, lambda r: r.row["model"], "by model")

    # diagnostics: the limits the heuristic picks and the concurrency that results
    print("\nengine limits picked by the v0.14 build heuristic (examples) and steady-state concurrency:")
    seen = set()
    for r in rows:
        k = (r.row["model"], r.hw, r.row["tp"], r.row["weight_dtype"])
        if k in seen or r.shape not in ("128/128", "20000/2000", "1000/1000"):
            continue
        if r.row["model"] not in ("llama-3.1-70b", "llama-3.1-8b"):
            continue
        seen.add(k)
        print(f"  {r.row['model']:<14}{r.hw:<15}tp{r.row['tp']} {r.row['weight_dtype']:<5}{r.shape:>11}: "
              f"max_batch_size {r.max_bs:>5}, max_num_tokens {r.max_tok:>6}, "
              f"B {r.concurrency(p['mem_reserve_gib']):>5}")
    if a.csv:
        with open(a.csv, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["id", "model", "hardware", "tp", "dtype", "shape", "max_batch_size", "max_num_tokens",
                        "concurrency", "measured", *preds])
            for i, r in enumerate(rows):
                w.writerow([r.id, r.row["model"], r.hw, r.row["tp"], r.row["weight_dtype"], r.shape,
                            r.max_bs, r.max_tok, r.concurrency(p["mem_reserve_gib"]), r.measured,
                            *[f"{preds[n][i]:.1f}" for n in preds]])


if __name__ == "__main__":
    main()
