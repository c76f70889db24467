#!/usr/bin/env python3
"""One-shot GPU measurements for llmsim's cost model (HBM, GEMM, decode attention, Llama-3.1-8B).

    python3 benchmarks/gpu/measure_gpu.py --out $OUT                 # on the GPU machine
    python3 benchmarks/gpu/measure_gpu.py --device cpu --quick --out /tmp/gpu_out   # CPU test

Needs only torch (plus the standard library). See benchmarks/gpu/README.md for what each
section measures, the output files and the expected time. Sections:

  1 hbm    device-to-device copy and read-only reductions -> hbm_bandwidth.csv
  2 gemm   bf16 / fp8 GEMMs of Llama-3.1-8B and Llama-3.1-70B (TP4 shards) vs token count
           -> gemm.csv
  3 attn   decode attention, bf16 KV vs fp8 KV dequantised to bf16 before SDPA
           -> decode_attention.csv
  4 model  a full Llama-3.1-8B forward (random bf16 weights): prefill step and one decode step
           -> llama8b_forward.csv (the project's measurement-CSV format, SCHEMA.md) and
              llama8b_forward_detail.csv

They run in the order hbm, model, gemm, attn (the model rows matter most to the project).
Every section is wrapped: an exception is written into env.json and the next section runs.
A time guard (--budget-s, default 180 s, plus a cap per section) skips whatever would start
past it; a watchdog ends the process at --hard-limit-s (default budget + 45 s). Output files
are rewritten every few seconds and at each section's end, so a run killed from outside still
leaves what it had measured.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
import traceback

import torch
import torch.nn.functional as F

VERSION = "1.0"
SCRIPT = "benchmarks/gpu/measure_gpu.py"
T0 = time.perf_counter()

# ---------------------------------------------------------------------------------------------
# Datasheet peaks (dense tensor-core FLOP/s without 2:4 sparsity; HBM bytes/s).
# Matched against torch.cuda.get_device_name(); first match wins; no match (or CPU) -> NaN.
# Sources: NVIDIA H100 / H200 datasheets (dense = half the "with sparsity" headline figures),
# as collected in /work/shared/reference/gpu_specs.csv and hardware_specs/{h200-sxm,h100-sxm,
# h100-pcie}.yaml of this repository.
# ---------------------------------------------------------------------------------------------
NAN = float("nan")
PEAKS = [
    # (substrings that must all appear, substrings that must not appear, hardware id, peaks)
    (("H200",), ("NVL",), "h200-sxm",
     {"bf16": 989.4e12, "fp8": 1978.9e12, "hbm": 4.8e12}),
    (("H100", "PCIe"), (), "h100-pcie",
     {"bf16": 756.5e12, "fp8": 1513e12, "hbm": 2.0e12}),
    (("H100",), ("NVL", "PCIe"), "h100-sxm",
     {"bf16": 989.4e12, "fp8": 1978.9e12, "hbm": 3.35e12}),
]
PEAK_SOURCE = ("NVIDIA H100/H200 SXM datasheets, dense tensor-core peaks (sparse headline / 2); "
               "shared/reference/gpu_specs.csv; hardware_specs/h200-sxm.yaml, h100-sxm.yaml, "
               "h100-pcie.yaml")

# Llama-3.1-8B geometry: shared/reference/hf_configs/Llama-3.1-8B.json
LLAMA8B = dict(hidden=4096, heads=32, kv_heads=8, head_dim=128, inter=14336, layers=32,
               vocab=128256, rope_theta=500000.0, eps=1e-5)
TINY = dict(hidden=256, heads=8, kv_heads=2, head_dim=32, inter=512, layers=2,
            vocab=1024, rope_theta=500000.0, eps=1e-5)

# GEMM shapes (model, layer, K=in, N=out). 70B at TP4: 64/4 = 16 query heads, 8/4 = 2 KV heads.
GEMM_SHAPES = [
    ("llama-3.1-8b", "qkv", 4096, 6144),
    ("llama-3.1-8b", "o", 4096, 4096),
    ("llama-3.1-8b", "gate_up", 4096, 28672),
    ("llama-3.1-8b", "down", 14336, 4096),
    ("llama-3.1-70b-tp4", "qkv", 8192, 2560),
    ("llama-3.1-70b-tp4", "o", 2048, 8192),
    ("llama-3.1-70b-tp4", "gate_up", 8192, 14336),
    ("llama-3.1-70b-tp4", "down", 7168, 8192),
]
GEMM_M = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
GEMM_DTYPES = ["bf16", "fp8", "fp8_fastacc", "fp8_dynq"]

ATTN_B = [1, 8, 32, 128]
ATTN_L = [512, 2048, 8192]

PREFILL_BL = [(1, 128), (1, 1024), (1, 2048), (8, 1024), (32, 1024)]
DECODE_B = [1, 8, 32, 64, 128, 256]
DECODE_L = [1024, 2048]

# share of --budget-s each section may use at most (~0.08 is left for start-up); expected
# use is well below each cap. The global guard (--budget-s from script start) still holds.
SECTION_CAP_FRAC = {"hbm": 0.06, "model": 0.42, "gemm": 0.28, "attn": 0.16}
# execution order: the model forward (the rows in the project's measurement format) runs
# right after the quick bandwidth test, so a later failure cannot cost it
SECTION_ORDER = ["hbm", "model", "gemm", "attn"]
SECTION_ALIASES = {"1": "hbm", "2": "gemm", "3": "attn", "4": "model", "attention": "attn"}

SCHEMA_COLUMNS = [
    "id", "source", "model", "hardware", "num_gpus", "tp", "pp", "engine", "weight_dtype",
    "activation_dtype", "kv_dtype", "scenario", "batch_size", "request_rate", "concurrency",
    "num_requests", "input_len", "output_len", "dataset", "max_batch_size", "max_num_tokens",
    "metric", "value", "unit", "quality", "notes",
]

TIME_COLS = ["n_reps", "time_s", "time_s_min", "time_s_p90"]
HBM_COLUMNS = ["test", "dtype", "size_bytes", "bytes_moved", "mode"] + TIME_COLS + [
    "bytes_per_s", "frac_peak_hbm", "status"]
GEMM_COLUMNS = ["model", "layer", "M", "M_exec", "K", "N", "dtype", "mode", "n_weight_copies"] \
    + TIME_COLS + ["flop", "bytes", "flop_per_s", "bytes_per_s", "peak_flop_per_s",
                   "frac_peak_flops", "frac_peak_hbm", "status"]
ATTN_COLUMNS = ["variant", "kv_storage_dtype", "gqa_mode", "sdpa_backend", "B", "L", "q_heads",
                "kv_heads", "head_dim", "mode", "n_copies"] + TIME_COLS + [
    "kv_bytes_stored", "kv_bytes_read_by_attention", "traffic_bytes_est", "kv_bytes_per_s",
    "traffic_bytes_per_s", "frac_peak_hbm", "ratio_vs_bf16_default", "status"]
MODEL_COLUMNS = ["phase", "B", "L", "mode", "tokens"] + TIME_COLS + [
    "flop", "weight_bytes", "kv_bytes", "min_bytes", "flop_per_s", "bytes_per_s",
    "frac_peak_flops", "frac_peak_hbm", "status", "notes"]


# ---------------------------------------------------------------------------------------------
# small utilities
# ---------------------------------------------------------------------------------------------
class Log:
    def __init__(self, path):
        self.f = open(path, "a", buffering=1)

    def __call__(self, msg, quiet=False):
        line = f"[{time.perf_counter() - T0:7.1f}s] {msg}"
        if not quiet:
            print(line, flush=True)
        self.f.write(line + "\n")


class CsvOut:
    """Rows kept in memory; the whole file is rewritten (atomically) at most every
    FLUSH_EVERY_S seconds on add, at each section's end, and by the watchdog."""

    FLUSH_EVERY_S = 2.0
    ALL: list[CsvOut] = []

    def __init__(self, path, columns):
        self.path, self.columns, self.rows = path, columns, []
        self.last = 0.0
        CsvOut.ALL.append(self)
        self.flush()

    def add(self, row):
        missing = set(row) - set(self.columns)
        if missing:
            raise KeyError(f"{self.path}: unknown columns {sorted(missing)}")
        self.rows.append(row)
        if time.perf_counter() - self.last > self.FLUSH_EVERY_S:
            self.flush()

    def flush(self, tag=".tmp"):
        tmp = self.path + tag
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=self.columns, lineterminator="\n")
            w.writeheader()
            for r in list(self.rows):
                w.writerow({k: fmt(r.get(k, "")) for k in self.columns})
        os.replace(tmp, self.path)
        self.last = time.perf_counter()

    @classmethod
    def flush_all(cls, tag=".tmp"):
        for o in cls.ALL:
            try:
                o.flush(tag)
            except Exception:
                pass


def fmt(v):
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        return f"{v:.6g}"
    return v


def stats(times):
    ts = sorted(times)
    n = len(ts)
    return {"n_reps": n, "time_s": statistics.median(ts), "time_s_min": ts[0],
            "time_s_p90": ts[min(n - 1, int(math.ceil(0.9 * n)) - 1)]}


def nan_stats():
    return {"n_reps": 0, "time_s": NAN, "time_s_min": NAN, "time_s_p90": NAN}


def div(a, b):
    try:
        if b is None or b == 0 or (isinstance(b, float) and math.isnan(b)):
            return NAN
        return a / b
    except Exception:
        return NAN


def short_err(e):
    s = f"{type(e).__name__}: {e}".replace("\n", " ").replace(",", ";")
    return s[:300]


def run_cmd(cmd, timeout=10):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return {"cmd": " ".join(cmd), "rc": p.returncode, "stdout": p.stdout.strip()[:8000],
                "stderr": p.stderr.strip()[:2000]}
    except Exception as e:  # nvidia-smi missing, timeout, ...
        return {"cmd": " ".join(cmd), "error": short_err(e)}


class SmiSampler(threading.Thread):
    """Samples clocks/power with nvidia-smi every few seconds (no CUDA calls in this thread)."""

    QUERY = "timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu"

    def __init__(self, period=3.0):
        super().__init__(daemon=True)
        self.period, self.samples, self.stop_ev = period, [], threading.Event()

    def run(self):
        while not self.stop_ev.is_set():
            r = run_cmd(["nvidia-smi", f"--query-gpu={self.QUERY}",
                         "--format=csv,noheader"], timeout=5)
            if "error" in r or r.get("rc") != 0:
                self.samples.append({"t_s": round(time.perf_counter() - T0, 1), **r})
                return
            self.samples.append({"t_s": round(time.perf_counter() - T0, 1),
                                 "line": r["stdout"]})
            self.stop_ev.wait(self.period)


class Guard:
    """Global wall-clock budget from script start plus a cap for the current section."""

    def __init__(self, budget_s):
        self.budget_s = budget_s
        self.sec_name, self.sec_t0, self.sec_cap = None, T0, budget_s
        self.skipped = {}

    def start(self, name, cap_s):
        self.sec_name, self.sec_t0, self.sec_cap = name, time.perf_counter(), cap_s

    def ok(self, what=""):
        now = time.perf_counter()
        if now - T0 < self.budget_s and now - self.sec_t0 < self.sec_cap:
            return True
        self.skipped.setdefault(self.sec_name, []).append(what)
        return False

    def left(self):
        now = time.perf_counter()
        return min(self.budget_s - (now - T0), self.sec_cap - (now - self.sec_t0))


def fill_random_(t, gen, std=1.0):
    """In-place N(0, std) fill in chunks (no int32-indexing or big temporaries)."""
    flat = t.view(-1)
    n, chunk = flat.numel(), 1 << 27
    if t.dtype in (torch.float32, torch.bfloat16, torch.float16):
        for i in range(0, n, chunk):
            flat[i:i + chunk].normal_(0.0, std, generator=gen)
    else:  # e.g. float8: draw bf16, then cast chunk by chunk
        for i in range(0, n, chunk):
            j = min(n, i + chunk)
            tmp = torch.empty(j - i, dtype=torch.bfloat16, device=t.device)
            tmp.normal_(0.0, std, generator=gen)
            flat[i:j].copy_(tmp)
    return t


def randn(shape, dtype, dev, gen, std=1.0):
    return fill_random_(torch.empty(shape, dtype=dtype, device=dev), gen, std)


# ---------------------------------------------------------------------------------------------
# timing
# ---------------------------------------------------------------------------------------------
class Bench:
    SLEEP_CYCLES = 4_000_000  # ~2 ms at ~2 GHz: lets the CPU queue graph replays ahead

    def __init__(self, dev, quick, log):
        self.dev, self.quick, self.log = dev, quick, log
        self.cuda = dev.type == "cuda"
        self.flush_buf = None
        self.l2_bytes = 50 * 2**20
        if self.cuda:
            props = torch.cuda.get_device_properties(dev)
            self.l2_bytes = int(getattr(props, "L2_cache_size", 0) or self.l2_bytes)
            n = max(256 * 2**20, 4 * self.l2_bytes) // 4
            self.flush_buf = torch.ones(n, dtype=torch.float32, device=dev)

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def flush_l2(self):
        """Evict L2 by reading 256 MiB (a read leaves clean lines: a write-based flush would
        leave dirty lines whose write-back the next timed kernel would pay)."""
        if self.flush_buf is not None:
            self.flush_buf.amax()

    def estimate(self, fn):
        """Wall time of one call after one warm-up call (to choose repetition counts)."""
        fn()
        self.sync()
        t = time.perf_counter()
        fn()
        self.sync()
        return time.perf_counter() - t

    def reps_for(self, t_est, lo=10):
        if self.quick:
            return 3
        if t_est < 1e-3:
            return max(lo, 30)
        if t_est < 2e-2:
            return max(lo, 20)
        return lo

    def eager(self, fn, reps, warmup=2, flush=False):
        """Per-call time. flush=True reads a 256 MiB buffer before each call (cold L2; the
        flush also keeps the GPU busy while the CPU queues the call, hiding launch latency
        of single-kernel calls). flush=False measures back-to-back steady state."""
        for _ in range(warmup):
            fn()
        self.sync()
        if not self.cuda:
            out = []
            for _ in range(reps):
                t = time.perf_counter()
                fn()
                out.append(time.perf_counter() - t)
            return out
        st = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        en = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            if flush:
                self.flush_l2()
            st[i].record()
            fn()
            en[i].record()
        torch.cuda.synchronize()
        return [st[i].elapsed_time(en[i]) / 1e3 for i in range(reps)]

    def graph(self, fn, reps, warmup=2, inner=1):
        """Capture fn (which makes `inner` calls) in one CUDA graph; time replays back to back
        after a GPU sleep so the CPU is ahead; returns seconds per call (replay / inner)."""
        if not self.cuda:
            raise RuntimeError("CUDA graphs need a CUDA device")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(g, capture_error_mode="thread_local"):
                fn()
            for _ in range(warmup):
                g.replay()
            torch.cuda.synchronize()
            st = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
            en = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
            if hasattr(torch.cuda, "_sleep"):
                torch.cuda._sleep(self.SLEEP_CYCLES)
            for i in range(reps):
                st[i].record()
                g.replay()
                en[i].record()
            torch.cuda.synchronize()
            return [st[i].elapsed_time(en[i]) / 1e3 / inner for i in range(reps)]
        finally:
            del g

    def free(self):
        import gc
        gc.collect()
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()

    def mem_free(self):
        if self.cuda:
            return torch.cuda.mem_get_info(self.dev)[0]
        return 8 * 2**30 if self.quick else 64 * 2**30

    def alive(self):
        if not self.cuda:
            return True
        try:
            torch.cuda.synchronize()
            return True
        except Exception:
            return False


def measure(bench, modes, fn_eager, fn_graph=None, inner=1, reps=None, flush=True,
            warmup=2):
    """Run the requested modes; yields (mode, stats, status). Exceptions become statuses."""
    out = []
    for mode in modes:
        try:
            if mode == "eager":
                r = reps if reps is not None else bench.reps_for(bench.estimate(fn_eager))
                ts = bench.eager(fn_eager, r, warmup=warmup, flush=flush)
            elif mode == "cuda_graph":
                if not bench.cuda:
                    continue
                f = fn_graph or fn_eager
                if reps is not None:
                    r = reps
                else:
                    r = bench.reps_for(bench.estimate(f) / max(1, inner))
                ts = bench.graph(f, min(r, 30), warmup=warmup, inner=inner)
            else:
                raise ValueError(mode)
            out.append((mode, stats(ts), "ok"))
        except Exception as e:
            if bench.cuda and "out of memory" in str(e).lower():
                bench.free()
            out.append((mode, nan_stats(), "error: " + short_err(e)))
            bench.log(f"    {mode} failed: {short_err(e)}", quiet=True)
    return out


# ---------------------------------------------------------------------------------------------
# environment
# ---------------------------------------------------------------------------------------------
def match_peaks(name):
    for must, mustnot, hw, peaks in PEAKS:
        if all(m in name for m in must) and not any(m in name for m in mustnot):
            return hw, dict(peaks)
    return None, {"bf16": NAN, "fp8": NAN, "hbm": NAN}


def environment(dev, args):
    env = {
        "script": SCRIPT, "script_version": VERSION, "commit": args.commit,
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "argv": sys.argv, "python": sys.version, "platform": platform.platform(),
        "torch": torch.__version__, "torch_cuda": torch.version.cuda,
        "cudnn": None, "triton": None, "device": str(dev), "quick": args.quick,
        "seed": args.seed, "budget_s": args.budget_s,
        "matmul_allow_bf16_reduced_precision_reduction":
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        "cpu_threads": torch.get_num_threads(),
    }
    for flag in ("flash_sdp_enabled", "mem_efficient_sdp_enabled", "cudnn_sdp_enabled",
                 "math_sdp_enabled"):
        try:
            env["sdp_" + flag] = getattr(torch.backends.cuda, flag)()
        except Exception:
            pass
    try:
        env["cudnn"] = torch.backends.cudnn.version()
    except Exception:
        pass
    try:
        import triton  # noqa: F401
        env["triton"] = triton.__version__
    except Exception:
        pass
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(dev)
        env.update({
            "gpu_name": p.name, "sm_count": p.multi_processor_count,
            "gpu_mem_total_bytes": p.total_memory,
            "l2_cache_bytes": getattr(p, "L2_cache_size", None),
            "compute_capability": f"{p.major}.{p.minor}",
            "gpu_mem_free_bytes_at_start": torch.cuda.mem_get_info(dev)[0],
        })
        env["nvidia_smi_start"] = [
            run_cmd(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,clocks.max.sm",
                     "--format=csv"]),
            run_cmd(["nvidia-smi", "--query-gpu=name,driver_version,power.limit,"
                     "clocks.max.mem,memory.total,persistence_mode", "--format=csv"]),
        ]
    else:
        env["gpu_name"] = "cpu: " + (platform.processor() or platform.machine())
    hw, peaks = match_peaks(env["gpu_name"]) if dev.type == "cuda" else (None, None)
    if peaks is None:
        peaks = {"bf16": NAN, "fp8": NAN, "hbm": NAN}
    env["hardware_id"] = hw or ("cpu" if dev.type == "cpu" else
                                env["gpu_name"].lower().replace(" ", "-"))
    env["peaks"] = {k: (None if math.isnan(v) else v) for k, v in peaks.items()}
    env["peaks_source"] = PEAK_SOURCE if hw else "no datasheet entry for this device: NaN"
    return env, peaks


# ---------------------------------------------------------------------------------------------
# section 1: HBM bandwidth
# ---------------------------------------------------------------------------------------------
def sec_hbm(ctx):
    b, dev, gen, peaks, out = ctx["bench"], ctx["dev"], ctx["gen"], ctx["peaks"], ctx["hbm"]
    sizes = [16 * 2**20] if ctx["quick"] else [1 * 2**30, 4 * 2**30]
    red_size = 16 * 2**20 if ctx["quick"] else 4 * 2**30
    modes = ["eager"]
    for size in sizes:
        if not ctx["guard"].ok(f"copy {size}"):
            break
        if b.mem_free() < 2 * size + 2 * 2**30:
            out.add({"test": "copy", "dtype": "bf16", "size_bytes": size, "status":
                     "skipped: not enough free memory", **nan_stats()})
            continue
        src = randn(size // 2, torch.bfloat16, dev, gen)
        dst = torch.empty_like(src)
        for mode, st, status in measure(b, modes, lambda d=dst, s=src: d.copy_(s),
                                        flush=False):
            bw = div(2 * size, st["time_s"])
            out.add({"test": "copy", "dtype": "bf16", "size_bytes": size,
                     "bytes_moved": 2 * size, "mode": mode, **st, "bytes_per_s": bw,
                     "frac_peak_hbm": div(bw, peaks["hbm"]), "status": status})
            ctx["log"](f"  copy {size / 2**30:.2f} GiB: {bw / 1e12:.3f} TB/s ({status})")
        del src, dst
        b.free()
    for dtype, elt in (("bf16", 2), ("fp32", 4)):
        if not ctx["guard"].ok(f"sum {dtype}"):
            break
        if b.mem_free() < red_size + 2 * 2**30:
            out.add({"test": "sum", "dtype": dtype, "size_bytes": red_size, "status":
                     "skipped: not enough free memory", **nan_stats()})
            continue
        tdt = torch.bfloat16 if dtype == "bf16" else torch.float32
        x = randn(red_size // elt, tdt, dev, gen)
        for mode, st, status in measure(b, modes, lambda x=x: x.sum(), flush=False):
            bw = div(red_size, st["time_s"])
            out.add({"test": "sum", "dtype": dtype, "size_bytes": red_size,
                     "bytes_moved": red_size, "mode": mode, **st, "bytes_per_s": bw,
                     "frac_peak_hbm": div(bw, peaks["hbm"]), "status": status})
            ctx["log"](f"  sum {dtype} {red_size / 2**30:.2f} GiB: {bw / 1e12:.3f} TB/s "
                       f"({status})")
        del x
        b.free()


# ---------------------------------------------------------------------------------------------
# section 2: GEMMs
# ---------------------------------------------------------------------------------------------
FP8 = getattr(torch, "float8_e4m3fn", None)
FP8_MAX = 448.0


def quant_fp8(x):
    """Per-tensor dynamic quantisation: amax -> scale -> cast (what an engine does per call)."""
    scale = (x.abs().amax().float() / FP8_MAX).clamp(min=1e-12)
    return (x / scale).to(FP8), scale


def sec_gemm(ctx):
    b, dev, gen, peaks, out, log = (ctx["bench"], ctx["dev"], ctx["gen"], ctx["peaks"],
                                    ctx["gemm"], ctx["log"])
    quick = ctx["quick"]
    shapes = [(m, lay, k // 16, n // 16) for m, lay, k, n in GEMM_SHAPES] if quick \
        else GEMM_SHAPES
    m_list = [1, 16, 64] if quick else GEMM_M
    dtypes = [d for d in ctx["args"].gemm_dtypes.split(",") if d]
    modes = ["eager", "cuda_graph"] if b.cuda else ["eager"]
    target_set = 3 * b.l2_bytes  # rotate weight copies until they exceed 3x L2
    for model, layer, K, N in shapes:
        if not ctx["guard"].ok(f"{model} {layer}"):
            break
        wsets = {}
        try:
            n_bf = max(1, min(64, math.ceil(target_set / (K * N * 2))))
            wsets["bf16"] = [randn((N, K), torch.bfloat16, dev, gen, std=K ** -0.5)
                             for _ in range(n_bf)]
            if any(d.startswith("fp8") for d in dtypes) and FP8 is not None:
                n8 = max(1, min(64, math.ceil(target_set / (K * N))))
                w8 = []
                for i in range(n8):
                    wq, ws = quant_fp8(wsets["bf16"][i % n_bf])
                    w8.append((wq, ws))
                wsets["fp8"] = w8
        except Exception as e:
            log(f"  {model} {layer}: weight setup failed: {short_err(e)}")
            b.free()
            continue
        summary = []
        for M in m_list:
            if not ctx["guard"].ok(f"{model} {layer} M={M}"):
                break
            x = randn((M, K), torch.bfloat16, dev, gen)
            for dtype in dtypes:
                if not ctx["guard"].ok(f"{model} {layer} M={M} {dtype}"):
                    break
                rows = gemm_one(ctx, b, modes, dtype, x, wsets, M, K, N)
                for r in rows:
                    r.update({"model": model, "layer": layer})
                    if not math.isnan(r["time_s"]):
                        r["flop_per_s"] = div(r["flop"], r["time_s"])
                        r["bytes_per_s"] = div(r["bytes"], r["time_s"])
                        r["frac_peak_flops"] = div(r["flop_per_s"], r["peak_flop_per_s"])
                        r["frac_peak_hbm"] = div(r["bytes_per_s"], peaks["hbm"])
                    out.add(r)
                    if r["mode"] == modes[-1] and dtype in ("bf16", "fp8") and M in (
                            1, 64, 1024, 8192, m_list[-1]):
                        summary.append(f"{dtype}@M{M}:{r['time_s'] * 1e6:.1f}us")
            del x
        log(f"  {model:18s} {layer:8s} K={K:5d} N={N:5d} " + " ".join(summary))
        del wsets
        b.free()


def gemm_one(ctx, b, modes, dtype, x, wsets, M, K, N):
    peak = ctx["peaks"]["bf16"] if dtype == "bf16" else ctx["peaks"]["fp8"]
    base = {"M": M, "K": K, "N": N, "dtype": dtype}

    def mkrow(mode, st, status, m_exec, ncopy, wbytes, abytes):
        flop = 2.0 * m_exec * K * N
        byts = float(K * N * wbytes + m_exec * K * abytes + m_exec * N * 2)
        return {**base, "M_exec": m_exec, "mode": mode, "n_weight_copies": ncopy, **st,
                "flop": flop, "bytes": byts, "peak_flop_per_s": peak,
                "flop_per_s": NAN, "bytes_per_s": NAN, "frac_peak_flops": NAN,
                "frac_peak_hbm": NAN, "status": status}

    if dtype == "bf16":
        ws = wsets["bf16"]

        def f_e(w0=ws[0]):
            torch.matmul(x, w0.t())

        def f_g():
            for w in ws:
                torch.matmul(x, w.t())

        return [mkrow(mode, st, status, M, len(ws) if mode == "cuda_graph" else 1, 2, 2)
                for mode, st, status in measure(b, modes, f_e, f_g, inner=len(ws))]

    if dtype not in ("fp8", "fp8_fastacc", "fp8_dynq"):
        raise ValueError(f"unknown GEMM dtype {dtype}")
    if FP8 is None or "fp8" not in wsets:
        return [mkrow(mode, nan_stats(), "unsupported: no float8_e4m3fn", M, 0, 1, 1)
                for mode in modes]
    w8 = wsets["fp8"]
    status_extra, m_exec = "", M
    try:
        f_e, f_g = fp8_gemm_fns(dtype, x, w8, M, M, K)
    except Exception as e:
        err = short_err(e)
        if M >= 16:
            return [mkrow(mode, nan_stats(), "unsupported: " + err, M, 0, 1, 1)
                    for mode in modes]
        try:
            f_e, f_g = fp8_gemm_fns(dtype, x, w8, M, 16, K)
            m_exec, status_extra = 16, f" (M padded to 16: {err[:120]})"
        except Exception as e2:
            return [mkrow(mode, nan_stats(), "unsupported: " + short_err(e2), M, 0, 1, 1)
                    for mode in modes]
    # bytes = the GEMM's own operands (fp8 x, fp8 W, bf16 out) for every fp8 variant; the
    # quantisation kernels inside fp8_dynq's time are not counted in `bytes`
    return [mkrow(mode, st, status + status_extra, m_exec,
                  len(w8) if mode == "cuda_graph" else 1, 1, 1)
            for mode, st, status in measure(b, modes, f_e, f_g, inner=len(w8))]


def fp8_gemm_fns(dtype, x, w8, M, m_exec, K):
    """(single-call fn, rotating fn) for torch._scaled_mm with per-tensor scales, bf16 out.
    fp8 / fp8_fastacc: activations quantised once outside the timing (static scale);
    fp8_dynq: per-tensor dynamic quantisation of x (amax, scale, cast) inside every call."""
    xx = x if m_exec == M else torch.cat(
        [x, torch.zeros((m_exec - M, K), dtype=x.dtype, device=x.device)])
    xq, xs = quant_fp8(xx)
    fast = dtype == "fp8_fastacc"
    if dtype == "fp8_dynq":
        def call(wq, wscale):
            q, s = quant_fp8(xx)
            return torch._scaled_mm(q, wq.t(), scale_a=s, scale_b=wscale,
                                    out_dtype=torch.bfloat16)
    else:
        def call(wq, wscale):
            return torch._scaled_mm(xq, wq.t(), scale_a=xs, scale_b=wscale,
                                    out_dtype=torch.bfloat16, use_fast_accum=fast)
    call(*w8[0])  # raises here if this shape/dtype is unsupported

    def f_e():
        call(*w8[0])

    def f_g():
        for wq, wscale in w8:
            call(wq, wscale)
    return f_e, f_g


# ---------------------------------------------------------------------------------------------
# section 3: decode attention, bf16 KV vs fp8 KV dequantised before SDPA
# ---------------------------------------------------------------------------------------------
def sdpa_backends():
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except Exception:
        return None, {}
    names = {}
    for n in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH"):
        if hasattr(SDPBackend, n):
            names[n.lower()] = getattr(SDPBackend, n)
    return sdpa_kernel, names


def gqa_supported(dev):
    try:
        q = torch.zeros(1, 4, 1, 16, device=dev, dtype=torch.bfloat16)
        k = torch.zeros(1, 2, 8, 16, device=dev, dtype=torch.bfloat16)
        F.scaled_dot_product_attention(q, k, k, enable_gqa=True)
        return True
    except TypeError:
        return False
    except Exception:
        return False


def sec_attn(ctx):
    b, dev, gen, peaks, out, log = (ctx["bench"], ctx["dev"], ctx["gen"], ctx["peaks"],
                                    ctx["attn"], ctx["log"])
    quick, args = ctx["quick"], ctx["args"]
    if quick:
        b_list, l_list, HQ, HKV, D = [1, 2], [64, 128], 8, 2, 64
    else:
        b_list, l_list, HQ, HKV, D = ATTN_B, ATTN_L, 32, 8, 128
    rep = HQ // HKV
    modes = ["eager", "cuda_graph"] if b.cuda else ["eager"]
    native_gqa = gqa_supported(dev)
    ctx["env"]["attn_enable_gqa_supported"] = native_gqa
    kernel_ctx, backends = sdpa_backends()
    forced = [n for n in ("flash_attention", "efficient_attention", "cudnn_attention")
              if n in backends] if b.cuda else []
    if not b.cuda and "math" in backends:
        forced = ["math"]
    max_kv = args.attn_max_kv_gib * 2**30
    graph_broken = set()
    scale_k, scale_v = 0.05, 0.05  # per-tensor dequant scales (values are random anyway)

    def sdpa(q, k, v, backend=None):
        kw = {"enable_gqa": True} if native_gqa and k.shape[1] != q.shape[1] else {}
        if backend is None or kernel_ctx is None:
            return F.scaled_dot_product_attention(q, k, v, **kw)
        with kernel_ctx([backends[backend]]):
            return F.scaled_dot_product_attention(q, k, v, **kw)

    for L in l_list:
        for B in b_list:
            kv_elems = 2 * B * HKV * L * D
            kv_bf16 = kv_elems * 2
            tag = f"B={B} L={L}"
            if not ctx["guard"].ok(tag):
                break
            if kv_bf16 > max_kv or b.mem_free() < 3 * kv_bf16 + 4 * 2**30:
                out.add({"variant": "all", "B": B, "L": L, "status":
                         f"skipped: memory guard (bf16 KV {kv_bf16 / 2**30:.2f} GiB)",
                         **nan_stats()})
                continue
            try:
                attn_combo(ctx, b, modes, out, B, L, HQ, HKV, D, rep, native_gqa, forced,
                           sdpa, graph_broken, scale_k, scale_v, peaks, gen, dev)
            except Exception as e:
                out.add({"variant": "all", "B": B, "L": L, "status":
                         "error: " + short_err(e), **nan_stats()})
                log(f"  {tag}: error {short_err(e)}")
            b.free()
            if not b.alive():
                raise RuntimeError("CUDA context lost in attention section")


def attn_combo(ctx, b, modes, out, B, L, HQ, HKV, D, rep, native_gqa, forced, sdpa,
               graph_broken, scale_k, scale_v, peaks, gen, dev):
    log = ctx["log"]
    kv_bf16 = 2 * B * HKV * L * D * 2
    kv_fp8 = kv_bf16 // 2
    n_bf = max(1, min(32, math.ceil(3 * b.l2_bytes / kv_bf16)))
    n_8 = max(1, min(32, math.ceil(3 * b.l2_bytes / kv_fp8)))
    q = randn((B, HQ, 1, D), torch.bfloat16, dev, gen)
    kvs = [(randn((B, HKV, L, D), torch.bfloat16, dev, gen),
            randn((B, HKV, L, D), torch.bfloat16, dev, gen)) for _ in range(n_bf)]
    kv8 = []
    if FP8 is not None:
        for i in range(n_8):
            k, v = kvs[i % n_bf]
            kv8.append(((k / scale_k).to(FP8), (v / scale_v).to(FP8)))
    gqa_mode = "enable_gqa" if native_gqa else "repeat_interleave_outside_timing"
    if not native_gqa:  # expand KV heads outside the timed region: the kernel reads rep x
        kvs = [(k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)) for k, v in kvs]
        kv8 = [(k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)) for k, v in kv8]
    read_mult = 1 if native_gqa else rep
    results = {}

    def add(variant, kvdt, backend, mode, st, status, ncopy, stored, read_attn, traffic):
        row = {"variant": variant, "kv_storage_dtype": kvdt, "gqa_mode": gqa_mode,
               "sdpa_backend": backend, "B": B, "L": L, "q_heads": HQ, "kv_heads": HKV,
               "head_dim": D, "mode": mode, "n_copies": ncopy, **st,
               "kv_bytes_stored": stored, "kv_bytes_read_by_attention": read_attn,
               "traffic_bytes_est": traffic,
               "kv_bytes_per_s": div(stored, st["time_s"]),
               "traffic_bytes_per_s": div(traffic, st["time_s"]),
               "frac_peak_hbm": div(div(traffic, st["time_s"]), peaks["hbm"]),
               "ratio_vs_bf16_default": NAN, "status": status}
        results[(variant, mode)] = row
        return row

    def run(variant, kvdt, backend, f_e, f_g, inner, stored, read_attn, traffic):
        gm = [m for m in modes if not (m == "cuda_graph" and variant in graph_broken)]
        rows = []
        for mode, st, status in measure(b, gm, f_e, f_g, inner=inner):
            if mode == "cuda_graph" and status.startswith("error"):
                graph_broken.add(variant)
            ncopy = inner if mode == "cuda_graph" else 1
            rows.append(add(variant, kvdt, backend, mode, st, status, ncopy, stored,
                            read_attn, traffic))
        return rows

    all_rows = []
    # (a) bf16 KV, default SDPA backend choice
    stored_a = kv_bf16 * read_mult
    k0, v0 = kvs[0]
    all_rows += run("bf16_sdpa_default", "bf16", "default",
                    lambda: sdpa(q, k0, v0),
                    lambda: [sdpa(q, k, v) for k, v in kvs], len(kvs),
                    stored_a, stored_a, stored_a)
    # (b) fp8 KV dequantised to bf16 (cast + scale) inside the timed region, then SDPA
    if kv8:
        s8 = kv_fp8 * read_mult
        bf = kv_bf16 * read_mult
        # traffic: read fp8 (1) + write bf16 (2) [cast] + read/write bf16 (2+2) [scale]
        #          + SDPA reads bf16 (2)  -> 9 bytes per stored fp8 byte-element
        traffic_b = s8 + bf + 2 * bf + bf

        def deq_attn(k8, v8):
            k = k8.to(torch.bfloat16) * scale_k
            v = v8.to(torch.bfloat16) * scale_v
            return sdpa(q, k, v)

        def deq_only(k8, v8):
            return k8.to(torch.bfloat16) * scale_k, v8.to(torch.bfloat16) * scale_v

        k80, v80 = kv8[0]
        all_rows += run("fp8_dequant_then_sdpa", "fp8_e4m3fn", "default",
                        lambda: deq_attn(k80, v80),
                        lambda: [deq_attn(k, v) for k, v in kv8], len(kv8), s8, bf, traffic_b)
        all_rows += run("fp8_dequant_only", "fp8_e4m3fn", "none",
                        lambda: deq_only(k80, v80),
                        lambda: [deq_only(k, v) for k, v in kv8], len(kv8), s8, 0,
                        s8 + 3 * bf)
    else:
        all_rows.append(add("fp8_dequant_then_sdpa", "fp8_e4m3fn", "default", "eager",
                            nan_stats(), "unsupported: no float8_e4m3fn", 0, NAN, NAN, NAN))
    # bf16 KV with each backend forced (enable_gqa where supported)
    for be in forced:
        all_rows += run(f"bf16_sdpa_{be}", "bf16", be,
                        lambda be=be: sdpa(q, k0, v0, be),
                        lambda be=be: [sdpa(q, k, v, be) for k, v in kvs], len(kvs),
                        stored_a, stored_a, stored_a)
    # bf16 KV pre-expanded to all query heads outside the timing (kernel reads rep x bytes)
    if native_gqa and b.mem_free() > rep * kv_bf16 + 4 * 2**30 and \
            rep * kv_bf16 <= ctx["args"].attn_max_kv_gib * 2**30 * 2:
        all_rows += attn_expanded(b, modes, q, kvs, rep, kv_bf16, add)
    for r in all_rows:
        base = results.get(("bf16_sdpa_default", r["mode"]))
        if base is not None and r["variant"] != "bf16_sdpa_default":
            r["ratio_vs_bf16_default"] = div(r["time_s"], base["time_s"])
        out.add(r)

    m = modes[-1]
    r_a = results.get(("bf16_sdpa_default", m), {}).get("time_s", NAN)
    r_b = results.get(("fp8_dequant_then_sdpa", m), {}).get("time_s", NAN)
    log(f"  B={B:4d} L={L:5d} [{m}] bf16 {r_a * 1e6:.1f} us, fp8-deq {r_b * 1e6:.1f} us, "
        f"ratio {div(r_b, r_a):.2f}")


def attn_expanded(b, modes, q, kvs, rep, kv_bf16, add):
    n_ex = max(1, min(8, math.ceil(3 * b.l2_bytes / (rep * kv_bf16))))
    kex = [(kvs[i % len(kvs)][0].repeat_interleave(rep, 1),
            kvs[i % len(kvs)][1].repeat_interleave(rep, 1)) for i in range(n_ex)]
    sx = rep * kv_bf16
    rows = []

    def f_e(k=kex[0][0], v=kex[0][1]):
        return F.scaled_dot_product_attention(q, k, v)

    def f_g():
        return [F.scaled_dot_product_attention(q, k, v) for k, v in kex]

    for mode, st, status in measure(b, modes, f_e, f_g, inner=n_ex):
        r = add("bf16_expanded_sdpa_default", "bf16", "default", mode, st, status,
                n_ex if mode == "cuda_graph" else 1, sx, sx, sx)
        r["gqa_mode"] = "repeat_interleave_outside_timing"
        rows.append(r)
    return rows


# ---------------------------------------------------------------------------------------------
# section 4: Llama-3.1-8B forward
# ---------------------------------------------------------------------------------------------
def llama3_inv_freq(cfg):
    d, theta = cfg["head_dim"], cfg["rope_theta"]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    factor, low, high, old = 8.0, 1.0, 4.0, 8192.0  # rope_scaling of Llama-3.1 (hf config)
    wavelen = 2 * math.pi / inv
    inv_l = torch.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
    medium = (wavelen >= old / high) & (wavelen <= old / low)
    return torch.where(medium, smoothed, inv_l)


class Llama:
    """Plain-PyTorch Llama forward (RMSNorm, RoPE, GQA SDPA, SwiGLU) with random weights."""

    def __init__(self, cfg, dev, gen, max_pos):
        c = self.cfg = cfg
        H, hq, hkv, D, inter = c["hidden"], c["heads"], c["kv_heads"], c["head_dim"], c["inter"]
        bf = torch.bfloat16
        self.embed = randn((c["vocab"], H), bf, dev, gen, std=1.0)
        self.layers = []
        for _ in range(c["layers"]):
            self.layers.append({
                "ln1": torch.ones(H, dtype=bf, device=dev),
                "wqkv": randn(((hq + 2 * hkv) * D, H), bf, dev, gen, std=H ** -0.5),
                "wo": randn((H, hq * D), bf, dev, gen, std=(hq * D) ** -0.5),
                "ln2": torch.ones(H, dtype=bf, device=dev),
                "wgu": randn((2 * inter, H), bf, dev, gen, std=H ** -0.5),
                "wd": randn((H, inter), bf, dev, gen, std=inter ** -0.5),
            })
        self.norm = torch.ones(H, dtype=bf, device=dev)
        self.lm_head = randn((c["vocab"], H), bf, dev, gen, std=H ** -0.5)
        pos = torch.arange(max_pos, dtype=torch.float64)
        fr = torch.outer(pos, llama3_inv_freq(c))
        emb = torch.cat([fr, fr], dim=-1)
        self.cos = emb.cos().to(bf).to(dev)
        self.sin = emb.sin().to(bf).to(dev)
        self.fused_rms = hasattr(F, "rms_norm")
        self.linear_params = c["layers"] * (H * (hq + 2 * hkv) * D + hq * D * H
                                            + H * 2 * inter + inter * H)
        self.weight_bytes_read = 2 * (self.linear_params + c["vocab"] * H)  # + lm_head

    def rms(self, x, w):
        if self.fused_rms:
            return F.rms_norm(x, (x.shape[-1],), w, self.cfg["eps"])
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.cfg["eps"])
        return xf.to(x.dtype) * w

    @staticmethod
    def rot(x):
        h = x.shape[-1] // 2
        return torch.cat([-x[..., h:], x[..., :h]], dim=-1)

    def forward(self, tokens, pos0, kcache, vcache):
        """tokens (B, T); kcache/vcache (layers, Bcap, hkv, Lcap, D); writes positions
        pos0..pos0+T-1, attends over 0..pos0+T-1. Returns the argmax next token (B,)."""
        c = self.cfg
        hq, hkv, D = c["heads"], c["kv_heads"], c["head_dim"]
        B, T = tokens.shape
        S = pos0 + T
        h = F.embedding(tokens, self.embed)
        cos = self.cos[pos0:S].view(1, T, 1, D)
        sin = self.sin[pos0:S].view(1, T, 1, D)
        for li, W in enumerate(self.layers):
            x = self.rms(h, W["ln1"])
            qkv = torch.matmul(x, W["wqkv"].t())
            q, k, v = qkv.split([hq * D, hkv * D, hkv * D], dim=-1)
            q = q.view(B, T, hq, D)
            k = k.view(B, T, hkv, D)
            v = v.view(B, T, hkv, D)
            q = q * cos + self.rot(q) * sin
            k = k * cos + self.rot(k) * sin
            kc, vc = kcache[li, :B], vcache[li, :B]
            kc[:, :, pos0:S].copy_(k.transpose(1, 2))
            vc[:, :, pos0:S].copy_(v.transpose(1, 2))
            o = F.scaled_dot_product_attention(q.transpose(1, 2), kc[:, :, :S], vc[:, :, :S],
                                               is_causal=T > 1, enable_gqa=True)
            o = o.transpose(1, 2).reshape(B, T, hq * D)
            h = h + torch.matmul(o, W["wo"].t())
            x = self.rms(h, W["ln2"])
            g, u = torch.matmul(x, W["wgu"].t()).chunk(2, dim=-1)
            h = h + torch.matmul(F.silu(g) * u, W["wd"].t())
        last = self.rms(h[:, -1], self.norm)
        return torch.matmul(last, self.lm_head.t()).argmax(-1)

    def flops(self, B, T, pos0):
        """Matmul FLOPs of one step: linear layers, LM head on the last position, and
        attention (QK^T and PV, causal: query t sees pos0 + t + 1 keys)."""
        c = self.cfg
        keys = T * pos0 + T * (T + 1) / 2.0
        attn_flop = 4.0 * B * c["heads"] * c["head_dim"] * c["layers"] * keys
        return 2.0 * self.linear_params * B * T + 2.0 * c["vocab"] * c["hidden"] * B + attn_flop

    def kv_bytes(self, B, S):
        c = self.cfg
        return 2 * c["layers"] * B * S * c["kv_heads"] * c["head_dim"] * 2


def sec_model(ctx):
    b, dev, gen, log = ctx["bench"], ctx["dev"], ctx["gen"], ctx["log"]
    quick = ctx["quick"]
    cfg = TINY if quick else LLAMA8B
    prefill = [(1, 16), (2, 32)] if quick else PREFILL_BL
    dec_b = [1, 2, 4] if quick else DECODE_B
    dec_l = [32, 64] if quick else DECODE_L
    max_pos = max([L for _, L in prefill] + [L + 1 for L in dec_l])
    H, D = cfg["hidden"], cfg["head_dim"]
    need = 2 * cfg["layers"] * (H * (cfg["heads"] + 2 * cfg["kv_heads"]) * D
                                + cfg["heads"] * D * H + 3 * H * cfg["inter"]) \
        + 4 * cfg["vocab"] * H
    if b.cuda and b.mem_free() < need + 4 * 2**30:
        raise RuntimeError(f"not enough GPU memory for the weights ({need / 1e9:.1f} GB)")
    log(f"  building model ({need / 1e9:.1f} GB of random bf16 weights)")
    model = Llama(cfg, dev, gen, max_pos)
    b.sync()
    ctx["env"]["model_rms_norm"] = "F.rms_norm" if model.fused_rms else "manual"
    ctx["env"]["model_kv_bytes_per_token"] = model.kv_bytes(1, 1)
    log(f"  model ready; free memory {b.mem_free() / 2**30:.1f} GiB")
    model_prefill(ctx, model, prefill)
    write_schema(ctx)
    model_decode(ctx, model, dec_b, dec_l)
    write_schema(ctx)


def model_row(ctx, model, phase, B, L, mode, tokens, st, status, flop, kvb, notes=""):
    peaks = ctx["peaks"]
    wb = model.weight_bytes_read
    mb = wb + kvb
    return {"phase": phase, "B": B, "L": L, "mode": mode, "tokens": tokens, **st,
            "flop": flop, "weight_bytes": wb, "kv_bytes": kvb, "min_bytes": mb,
            "flop_per_s": div(flop, st["time_s"]), "bytes_per_s": div(mb, st["time_s"]),
            "frac_peak_flops": div(div(flop, st["time_s"]), peaks["bf16"]),
            "frac_peak_hbm": div(div(mb, st["time_s"]), peaks["hbm"]),
            "status": status, "notes": notes}


def model_prefill(ctx, model, prefill):
    """B sequences of L prompt tokens in one step -> ttft_ms."""
    b, dev, gen, log, cfg = ctx["bench"], ctx["dev"], ctx["gen"], ctx["log"], model.cfg
    modes = ["eager", "cuda_graph"] if b.cuda else ["eager"]
    for B, L in prefill:
        if not ctx["guard"].ok(f"prefill {B}x{L}"):
            break
        try:
            shape = (cfg["layers"], B, cfg["kv_heads"], L, cfg["head_dim"])
            kc = torch.empty(shape, dtype=torch.bfloat16, device=dev)
            vc = torch.empty(shape, dtype=torch.bfloat16, device=dev)
            tok = torch.randint(0, cfg["vocab"], (B, L), device=dev, generator=gen)

            def step(tok=tok, kc=kc, vc=vc):
                return model.forward(tok, 0, kc, vc)
            ms = modes if B * L <= ctx["args"].prefill_graph_max_tokens else ["eager"]
            res = measure(b, ms, step, reps=3 if ctx["quick"] else 10, flush=False, warmup=1)
            flop = model.flops(B, L, 0)
            for mode, st, status in res:
                ctx["detail"].add(model_row(ctx, model, "prefill", B, L, mode, B * L, st,
                                            status, flop, model.kv_bytes(B, L)))
                ctx["schema_rows"].append(("ttft_ms", B, L, mode, st, status))
                log(f"  prefill B={B:3d} L={L:5d} {mode:10s} {st['time_s'] * 1e3:9.3f} ms "
                    f"({status})")
            del step, kc, vc, tok
        except Exception as e:
            log(f"  prefill B={B} L={L}: {short_err(e)}")
            ctx["detail"].add(model_row(ctx, model, "prefill", B, L, "-", B * L, nan_stats(),
                                        "error: " + short_err(e), NAN, NAN))
        b.free()
        if not b.alive():
            raise RuntimeError("CUDA context lost in prefill")


def model_decode(ctx, model, dec_b, dec_l):
    """One decode step (query length 1) with L tokens already in the KV cache -> tpot_ms."""
    b, dev, gen, log, cfg = ctx["bench"], ctx["dev"], ctx["gen"], ctx["log"], model.cfg
    for L in dec_l:
        if not ctx["guard"].ok(f"decode L={L}"):
            break
        S = L + 1
        room = b.mem_free() - (6 * 2**30 if b.cuda else 0)
        fit = [B for B in dec_b if model.kv_bytes(B, S) <= room]
        for B in dec_b:
            if B not in fit:
                ctx["detail"].add(model_row(ctx, model, "decode", B, L, "-", B, nan_stats(),
                                            "skipped: KV cache does not fit", NAN,
                                            model.kv_bytes(B, S)))
        if not fit:
            continue
        try:
            shape = (cfg["layers"], max(fit), cfg["kv_heads"], S, cfg["head_dim"])
            kc = randn(shape, torch.bfloat16, dev, gen)
            vc = randn(shape, torch.bfloat16, dev, gen)
            log(f"  decode KV cache B<={max(fit)} S={S}: {2 * kc.numel() * 2 / 1e9:.1f} GB")
            decode_batches(ctx, model, fit, L, kc, vc)
            del kc, vc
        except Exception as e:
            log(f"  decode L={L}: {short_err(e)}")
            ctx["detail"].add(model_row(ctx, model, "decode", max(fit), L, "-", max(fit),
                                        nan_stats(), "error: " + short_err(e), NAN, NAN))
        b.free()
        if not b.alive():
            raise RuntimeError("CUDA context lost in decode")


def decode_batches(ctx, model, fit, L, kc, vc):
    b, dev, gen, log, cfg = ctx["bench"], ctx["dev"], ctx["gen"], ctx["log"], model.cfg
    modes = ["eager", "cuda_graph"] if b.cuda else ["eager"]
    for B in fit:
        if not ctx["guard"].ok(f"decode B={B} L={L}"):
            break
        tok = torch.randint(0, cfg["vocab"], (B, 1), device=dev, generator=gen)

        def step(tok=tok, kc=kc, vc=vc, L=L):
            return model.forward(tok, L, kc, vc)
        res = measure(b, modes, step, reps=3 if ctx["quick"] else 15, flush=False, warmup=2)
        flop = model.flops(B, 1, L)
        for mode, st, status in res:
            ctx["detail"].add(model_row(ctx, model, "decode", B, L, mode, B, st, status, flop,
                                        model.kv_bytes(B, L + 1)))
            ctx["schema_rows"].append(("tpot_ms", B, L, mode, st, status))
            log(f"  decode  B={B:3d} L={L:5d} {mode:10s} {st['time_s'] * 1e3:9.3f} ms "
                f"({status})")
        write_schema(ctx)
        del step, tok
        b.free()
        if not b.alive():
            raise RuntimeError("CUDA context lost in decode")


def write_schema(ctx):
    """Write llama8b_forward.csv in the project's measurement format (SCHEMA.md)."""
    env, args = ctx["env"], ctx["args"]
    quick = ctx["quick"]
    out = ctx["schema"]
    out.rows = []
    hw = env["hardware_id"]
    date = env["date_utc"][:10]
    source = (f"llmsim {SCRIPT} v{VERSION} @{args.commit} (measured {date} on "
              f"{env.get('gpu_name', '?')}; raw: llama8b_forward_detail.csv)")
    n = 0
    for metric, B, L, mode, st, status in ctx["schema_rows"]:
        if status != "ok" or math.isnan(st["time_s"]):
            continue
        n += 1
        mode_txt = "CUDA graph" if mode == "cuda_graph" else "eager"
        engine = (f"PyTorch {torch.__version__} {mode_txt}, SDPA "
                  f"(llmsim {SCRIPT})")
        common = (f"median of {st['n_reps']} reps (min {st['time_s_min'] * 1e3:.4f} ms; "
                  f"p90 {st['time_s_p90'] * 1e3:.4f} ms); random bf16 weights and inputs "
                  f"(seed {args.seed}); plain PyTorch forward: RMSNorm "
                  f"({env.get('model_rms_norm', '?')}); RoPE (llama3 scaling); "
                  f"SDPA enable_gqa with a contiguous per-sequence KV cache; SwiGLU; LM head "
                  f"on the last position + argmax; {mode_txt}; no tokenizer/scheduler/"
                  f"sampling overhead")
        if metric == "ttft_ms":
            notes = (f"prefill of {B}x{L} tokens in one step (is_causal SDPA); "
                     f"ttft_ms = that one step's time (CUDA events); " + common)
            out_len = 1
        else:
            notes = (f"tpot_ms here = one decode step at context L, not a mean over a "
                     f"generation: query length 1 per sequence attending to {L} random KV "
                     f"entries + its own; " + common)
            out_len = 2
        out.rows.append({
            "id": f"llmsim-torch-{hw}-{n:04d}", "source": source,
            "model": "tiny-quick-test" if quick else "llama-3.1-8b", "hardware": hw,
            "num_gpus": 1, "tp": 1, "pp": 1, "engine": engine, "weight_dtype": "bf16",
            "activation_dtype": "bf16", "kv_dtype": "bf16", "scenario": "static_batch",
            "batch_size": B, "request_rate": "", "concurrency": "", "num_requests": "",
            "input_len": L, "output_len": out_len, "dataset": "", "max_batch_size": "",
            "max_num_tokens": "", "metric": metric, "value": f"{st['time_s'] * 1e3:.4f}",
            "unit": "ms", "quality": "high", "notes": notes})
    out.flush()


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="gpu_out", help="output folder (created)")
    p.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    p.add_argument("--quick", action="store_true", help="tiny sizes (CPU test)")
    p.add_argument("--sections", default="hbm,gemm,attn,model",
                   help="comma list of hbm,gemm,attn,model (or 1,2,3,4)")
    p.add_argument("--budget-s", type=float, default=180.0,
                   help="wall-clock guard from script start (after `import torch`): work "
                        "that would start later is skipped")
    p.add_argument("--hard-limit-s", type=float, default=None,
                   help="watchdog: exit(3) at this wall time even inside a long kernel "
                        "(default budget + 45 s); outputs are already on disk")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--commit", default="COMMIT", help="commit of this script (for 'source')")
    p.add_argument("--gemm-dtypes", default=",".join(GEMM_DTYPES))
    p.add_argument("--attn-max-kv-gib", type=float, default=8.0,
                   help="skip attention combos whose bf16 KV exceeds this")
    p.add_argument("--prefill-graph-max-tokens", type=int, default=8192,
                   help="also CUDA-graph prefill steps up to this many tokens")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    log = Log(os.path.join(args.out, "log.txt"))
    dev_name = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(dev_name)
    if dev.type == "cuda":
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(dev)
    sections = []
    for s in args.sections.split(","):
        s = SECTION_ALIASES.get(s.strip().lower(), s.strip().lower())
        if s not in SECTION_ORDER:
            raise SystemExit(f"unknown section {s!r}")
        sections.append(s)
    env, peaks = environment(dev, args)
    env["sections_requested"] = sections
    env["sections"] = {}
    env_path = os.path.join(args.out, "env.json")

    def write_env():
        with open(env_path + ".tmp", "w") as f:
            json.dump(env, f, indent=1, default=str)
        os.replace(env_path + ".tmp", env_path)
    write_env()
    start_watchdog(args, env, env_path, log)
    log(f"measure_gpu v{VERSION} torch {torch.__version__} device {dev} "
        f"({env.get('gpu_name')}) hw={env['hardware_id']} quick={args.quick}")
    sampler = None
    if dev.type == "cuda":
        sampler = SmiSampler()
        sampler.start()
    gen = torch.Generator(device=dev)
    gen.manual_seed(args.seed)
    bench = Bench(dev, args.quick, log)
    guard = Guard(args.budget_s)
    out = args.out
    ctx = {
        "args": args, "dev": dev, "gen": gen, "bench": bench, "peaks": peaks, "log": log,
        "quick": args.quick, "guard": guard, "env": env, "schema_rows": [],
        "hbm": CsvOut(os.path.join(out, "hbm_bandwidth.csv"), HBM_COLUMNS),
        "gemm": CsvOut(os.path.join(out, "gemm.csv"), GEMM_COLUMNS),
        "attn": CsvOut(os.path.join(out, "decode_attention.csv"), ATTN_COLUMNS),
        "detail": CsvOut(os.path.join(out, "llama8b_forward_detail.csv"), MODEL_COLUMNS),
        "schema": CsvOut(os.path.join(out, "llama8b_forward.csv"), SCHEMA_COLUMNS),
    }
    funcs = {"hbm": sec_hbm, "gemm": sec_gemm, "attn": sec_attn, "model": sec_model}
    with torch.inference_mode():
        for name in SECTION_ORDER:
            if name not in sections:
                continue
            info = env["sections"].setdefault(name, {})
            if time.perf_counter() - T0 >= args.budget_s:
                info["status"] = "skipped: global time budget spent"
                log(f"== {name}: skipped (budget)")
                write_env()
                continue
            if not bench.alive():
                info["status"] = "skipped: CUDA context unusable after an earlier error"
                write_env()
                continue
            cap = SECTION_CAP_FRAC[name] * args.budget_s
            guard.start(name, cap)
            t = time.perf_counter()
            log(f"== section {name} (cap {cap:.0f}s, {guard.left():.0f}s left)")
            try:
                funcs[name](ctx)
                info["status"] = "ok"
            except Exception as e:
                info["status"] = "error"
                info["error"] = short_err(e)
                info["traceback"] = traceback.format_exc()[-4000:]
                log(f"   section {name} failed: {short_err(e)}")
            bench.free()
            CsvOut.flush_all()
            info["elapsed_s"] = round(time.perf_counter() - t, 2)
            sk = guard.skipped.get(name)
            if sk:
                info["skipped_by_time_guard"] = sk[:50]
                info["status"] += f" (time guard skipped {len(sk)} item(s))"
            log(f"== section {name}: {info['status']} in {info['elapsed_s']:.1f}s")
            write_env()
    if sampler is not None:
        sampler.stop_ev.set()
        sampler.join(timeout=6)
        env["nvidia_smi_samples"] = sampler.samples
        env["nvidia_smi_end"] = [
            run_cmd(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,clocks.max.sm",
                     "--format=csv"]),
            run_cmd(["nvidia-smi", "-q", "-d", "CLOCK,PERFORMANCE"]),
        ]
    env["total_elapsed_s"] = round(time.perf_counter() - T0, 2)
    env["rows_written"] = {k: len(ctx[k].rows) for k in ("hbm", "gemm", "attn", "detail",
                                                          "schema")}
    write_env()
    CsvOut.flush_all()
    summary(ctx)
    log(f"done in {env['total_elapsed_s']:.1f}s; files in {out}")
    return 0


def start_watchdog(args, env, env_path, log):
    limit = args.hard_limit_s if args.hard_limit_s is not None else args.budget_s + 45.0

    def dog():
        time.sleep(max(0.0, limit - (time.perf_counter() - T0)))
        try:
            log(f"WATCHDOG: {limit:.0f}s reached; exiting with what is on disk")
            CsvOut.flush_all(".dog")
            out_dir = os.path.dirname(env_path)
            for fn in os.listdir(out_dir):  # at most 8 files come back: no stray temp files
                if fn.endswith((".tmp", ".dog")):
                    os.remove(os.path.join(out_dir, fn))
            env["watchdog"] = f"process ended by the watchdog at {limit:.0f}s"
            with open(env_path + ".dog", "w") as f:
                json.dump(env, f, indent=1, default=str)
            os.replace(env_path + ".dog", env_path)
        except Exception:
            pass
        os._exit(3)
    threading.Thread(target=dog, daemon=True).start()


def summary(ctx):
    log = ctx["log"]
    log("---- summary ----")
    for r in ctx["hbm"].rows:
        log(f"hbm {r['test']:4s} {r.get('dtype', ''):5s} {fmt(r.get('bytes_per_s', NAN))} B/s "
            f"frac {fmt(r.get('frac_peak_hbm', NAN))}")
    for r in ctx["gemm"].rows:
        if r["M"] in (1, 16, 256, 4096) and r["dtype"] in ("bf16", "fp8") and \
                r["mode"] == ("cuda_graph" if ctx["bench"].cuda else "eager") and \
                r["model"] == "llama-3.1-8b":
            log(f"gemm {r['layer']:7s} {r['dtype']:4s} M={r['M']:5d} "
                f"{r['time_s'] * 1e6:9.1f} us flops {fmt(r['frac_peak_flops'])} "
                f"hbm {fmt(r['frac_peak_hbm'])} {r['status'][:40]}")
    for r in ctx["attn"].rows:
        if r.get("variant") == "fp8_dequant_then_sdpa":
            log(f"attn B={r['B']} L={r['L']} {r['mode']}: fp8-deq/bf16 = "
                f"{fmt(r['ratio_vs_bf16_default'])}")
    for r in ctx["schema"].rows:
        log(f"llama8b {r['metric']} B={r['batch_size']} L={r['input_len']} "
            f"{'graph' if 'graph' in r['engine'] else 'eager'}: {r['value']} ms")


if __name__ == "__main__":
    sys.exit(main())
