"""The `llmsim` command line. The only module that prints or writes files.

Every user mistake (bad spec, bad option, bad file) is caught here and printed as one
`error: ...` line on stderr with exit status 2; never a traceback.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from .specs import SpecError


class _Group(click.Group):
    """Click group that turns SpecError (and bad files) into one line and exit 2."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SpecError as e:
            click.echo(f"error: {e}", err=True)
            ctx.exit(2)
        except click.exceptions.Exit:
            raise
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)
        except MemoryError:
            click.echo("error: out of memory: reduce --num-requests, --replicas or the sweep size", err=True)
            ctx.exit(2)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="llmsim")
def main() -> None:
    """llmsim: predict LLM serving latency, throughput and capacity before buying GPUs."""


def echo_json(obj: Any) -> None:
    """Print one JSON object (NaN/inf written as null)."""
    click.echo(json.dumps(_clean(obj), indent=2))


def _clean(obj: Any) -> Any:
    import math

    import numpy as np

    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


# ---- commands are registered below, one section per command -----------------------------

# [catalog commands: models, hardware, show]

_HW_KEYS = {"peak_flops_per_s", "hbm_capacity_bytes", "hbm_bandwidth_bytes_per_s", "base",
            "link_bandwidth_bytes_per_s", "link_latency_s", "vendor", "tdp_w", "efficiency",
            "price_per_gpu_hour_usd", "form_factor"}


def _table(rows: list[dict]) -> str:
    import pandas as pd

    return pd.DataFrame(rows).to_string(index=False, na_rep="-")


def _model_row(m: Any) -> dict:
    return {"id": m.id, "attention": m.attention_kind, "layers": m.num_layers,
            "hidden": m.hidden_size, "params_b": round(m.param_count / 1e9, 2),
            "active_b": round(m.active_param_count / 1e9, 2),
            "kv_bytes_per_token_bf16": int(m.kv_bytes_per_token("bf16")),
            "max_context": m.max_context}


def _hw_row(h: Any) -> dict:
    def tf(d: str) -> float | None:
        v = h.peak_flops_per_s.get(d)
        return None if v is None else round(v / 1e12, 1)

    return {"id": h.id, "bf16_tflops": tf("bf16"), "fp8_tflops": tf("fp8"),
            "hbm_gb": round(h.hbm_capacity_bytes / 1e9, 1),
            "hbm_tb_s": round(h.hbm_bandwidth_bytes_per_s / 1e12, 2),
            "link_gb_s": round(h.link_bandwidth_bytes_per_s / 1e9, 1),
            "tdp_w": h.tdp_w, "usd_per_hour": h.price_per_gpu_hour_usd}


@main.command("models")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
def models_cmd(as_json: bool) -> None:
    """List the built-in models (params in billions; KV cache bytes per token in bf16)."""
    from .catalog import model_catalog

    rows = [_model_row(m) for m in model_catalog().values()]
    echo_json(rows) if as_json else click.echo(_table(rows))


@main.command("hardware")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
def hardware_cmd(as_json: bool) -> None:
    """List the built-in accelerators (dense peaks; link bandwidth per direction)."""
    from .catalog import hardware_catalog

    rows = [_hw_row(h) for h in hardware_catalog().values()]
    echo_json(rows) if as_json else click.echo(_table(rows))


def _load_any(ref: str) -> Any:
    """A model or hardware spec from an id, alias or file (a YAML's keys tell which)."""
    from pathlib import Path

    from .catalog import hardware_catalog, load_hardware, load_model, model_catalog, read_yaml
    from .specs import _did_you_mean

    if ref.lower() in {k.lower() for k in hardware_catalog()}:
        return load_hardware(ref)
    path = Path(ref)
    if path.is_file() and path.suffix.lower() in (".yaml", ".yml"):
        data = read_yaml(path)
        if isinstance(data, dict) and _HW_KEYS & set(map(str, data)):
            return load_hardware(ref)
        return load_model(ref)
    try:
        return load_model(ref)
    except SpecError:
        if path.exists():
            raise
    ids = [*model_catalog(), *hardware_catalog()]
    raise SpecError(f"show: {ref!r} is not a model or hardware id, alias or file"
                    f"{_did_you_mean(ref, ids)}; see `llmsim models` and `llmsim hardware`")


@main.command("show")
@click.argument("ref")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: kind, spec, derived.")
def show_cmd(ref: str, as_json: bool) -> None:
    """Show one model or accelerator in full (REF: id, alias, YAML or config.json path)."""
    import yaml

    from .catalog import spec_to_dict
    from .specs import HardwareSpec

    spec = _load_any(ref)
    if isinstance(spec, HardwareSpec):
        kind = "hardware"
        derived = {f"ridge_point_{d}_flop_per_byte": round(spec.ridge_point(d), 2)
                   for d in ("bf16", "fp8")}
        derived["fp8_gemms_run_at"] = spec.gemm_dtype("fp8")
    else:
        kind, derived = "model", spec.describe()
    out = {"kind": kind, "spec": spec_to_dict(spec), "derived": derived}
    if as_json:
        echo_json(out)
    else:
        click.echo(yaml.safe_dump(_clean(out), sort_keys=False, width=100).rstrip())

# [predict, roofline]


def _cost_options(fn: Any) -> Any:
    """Options shared by `predict` and `roofline`: model, hardware, parallelism, dtypes, efficiency."""
    from .specs import DTYPES

    dt = click.Choice(list(DTYPES))
    opts = [
        click.option("--model", "-m", required=True, help="Model id, alias, YAML or config.json path."),
        click.option("--hardware", "-H", "-g", required=True, help="Hardware id or YAML path (-g is an alias)."),
        click.option("--tp", type=int, default=1, show_default=True, help="Tensor-parallel degree."),
        click.option("--pp", type=int, default=1, show_default=True, help="Pipeline-parallel degree."),
        click.option("--weight-dtype", type=dt, default=None, help="Weight format [default: the model's]."),
        click.option("--activation-dtype", type=dt, default="bf16", show_default=True),
        click.option("--kv-dtype", type=dt, default=None, help="KV-cache format [default: bf16]."),
        click.option("--ideal", is_flag=True, help="Pure roofline: efficiencies 1, no overheads."),
        click.option("--efficiency", "efficiency", multiple=True, metavar="KEY=VALUE",
                     help="Override one hardware efficiency field for this run (repeatable), "
                          "e.g. compute_efficiency=0.7 or step_overhead_s=0.002."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def _build_cost(model: str, hardware: str, tp: int, pp: int, weight_dtype: str | None,
                activation_dtype: str, kv_dtype: str | None, ideal: bool,
                efficiency: tuple[str, ...]) -> Any:
    from .catalog import load_hardware
    from .roofline import make_cost_model, parse_efficiency_overrides

    overrides = parse_efficiency_overrides(efficiency)
    hw = load_hardware(hardware)
    if ideal:  # ideal first, so --efficiency can still add e.g. an overhead on top of it
        hw = hw.ideal()
    return make_cost_model(model, hw, tp=tp, pp=pp, weight_dtype=weight_dtype,
                           activation_dtype=activation_dtype, kv_dtype=kv_dtype,
                           efficiency=overrides or None)


def _fmt_num(x: float, unit: str = "") -> str:
    """Engineering notation: 1.23 T, 456 G ..."""
    import math

    if x == 0 or not math.isfinite(x):
        return f"{x:g} {unit}".rstrip()
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}".rstrip()


def _print_prediction(r: dict[str, Any]) -> None:
    import math

    from .roofline import top_ops

    def ms(v: float) -> str:
        return f"{v:10.2f} ms" if math.isfinite(v) else "         - "

    mem = r["memory"]
    gpus = r["tp"] * r["pp"]
    click.echo(f"{r['model']} on {r['hardware']}  tp={r['tp']} pp={r['pp']} ({gpus} GPU{'s' if gpus > 1 else ''})  "
               f"batch {r['batch_size']} x {r['input_len']} in / {r['output_len']} out  "
               f"w/a/kv {r['weight_dtype']}/{r['activation_dtype']}/{r['kv_dtype']} "
               f"(GEMMs at {r['gemm_dtype']}){'  [ideal roofline]' if r['ideal'] else ''}")
    dec = r["decode"]
    rows = [
        ("TTFT", ms(r["ttft_ms"]), f"prefill {r['prefill']['bound']}-bound, "
                                   f"{r['prefill_tokens_per_s']:,.0f} prompt tok/s"),
        ("TPOT", ms(r["tpot_ms"]), f"decode {dec['bound']}-bound (mid-generation step)" if dec else "no decode steps"),
        ("E2E", ms(r["e2e_ms"]), ""),
        ("throughput", f"{r['output_tokens_per_s']:10,.0f} tok/s",
         f"output tokens, all GPUs; {r['output_tokens_per_s_per_gpu']:,.0f} tok/s per GPU"),
        ("weights/GPU", f"{mem['weights_bytes_per_gpu'] / 1e9:10.2f} GB", ""),
        ("KV/token", f"{mem['kv_bytes_per_token'] / 1e3:10.1f} kB",
         f"whole model; {mem['kv_bytes_per_token_per_gpu'] / 1e3:.1f} kB per GPU"),
        ("KV capacity", f"{mem['kv_capacity_tokens']:10,d} tok",
         f"{mem['max_concurrent_sequences']:,d} sequences of {mem['seq_len']} tokens; "
         f"this batch needs {mem['kv_tokens_needed']:,d}"),
        ("fits", f"{'yes' if mem['fits'] and mem['kv_fits'] else 'no':>10s}",
         "" if mem["kv_fits"] else "weights fit, but the batch's KV cache does not"),
    ]
    for name, val, note in rows:
        click.echo(f"  {name:<12s}{val}   {note}".rstrip())
    for phase, b in (("prefill", r["prefill"]), ("decode step", dec)):
        if not b:
            continue
        click.echo(f"\ntop ops, {phase} ({b['time_ms']:.3f} ms, {b['bound']}-bound):")
        click.echo(f"  {'op':<20s}{'time ms':>10s}{'share':>8s}{'FLOPs':>12s}{'bytes':>12s}  bound")
        for o in top_ops(b, 5):
            share = o["time_ms"] / b["time_ms"] if b["time_ms"] > 0 else 0.0
            click.echo(f"  {o['name']:<20s}{o['time_ms']:10.3f}{share:8.1%}{_fmt_num(o['flops']):>12s}"
                       f"{_fmt_num(o['bytes'], 'B'):>12s}  {o['bound']}")
    if r["notes"]:
        click.echo("\nnotes:")
        for n in r["notes"]:
            click.echo(f"  - {n}")


@main.command()
@_cost_options
@click.option("--batch-size", "-b", type=int, default=1, show_default=True, help="Sequences in the static batch.")
@click.option("--input-len", "-i", type=int, default=1024, show_default=True, help="Prompt tokens per sequence.")
@click.option("--output-len", "-o", type=int, default=128, show_default=True, help="Generated tokens per sequence.")
@click.option("--gpu-memory-utilization", type=float, default=0.9, show_default=True,
              help="Fraction of HBM the engine may use (vLLM's setting).")
@click.option("--json", "as_json", is_flag=True, help="Print the full prediction as JSON.")
def predict(model: str, hardware: str, tp: int, pp: int, weight_dtype: str | None, activation_dtype: str,
            kv_dtype: str | None, ideal: bool, efficiency: tuple[str, ...], batch_size: int,
            input_len: int, output_len: int, gpu_memory_utilization: float, as_json: bool) -> None:
    """Roofline prediction for a static batch: TTFT, TPOT, throughput, memory fit, top ops.

    B prompts of --input-len tokens are prefilled in one step, then --output-len - 1 decode
    steps run at growing context. Exits 2 when the weights do not fit.
    """
    from .roofline import predict_static

    cost = _build_cost(model, hardware, tp, pp, weight_dtype, activation_dtype, kv_dtype, ideal, efficiency)
    r = predict_static(cost, batch_size, input_len, output_len, gpu_memory_utilization)
    if not r["memory"]["fits"]:
        raise SpecError(r["memory"]["message"])
    if as_json:
        echo_json(r)
    else:
        _print_prediction(r)


@main.command()
@_cost_options
@click.option("--batch-size", "-b", type=int, default=1, show_default=True, help="Sequences per step.")
@click.option("--input-len", "-i", type=int, default=1024, show_default=True,
              help="Prompt tokens (prefill step) and cached context (decode step).")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False), help="Image file to write (.png, .svg, .pdf).")
def roofline(model: str, hardware: str, tp: int, pp: int, weight_dtype: str | None, activation_dtype: str,
             kv_dtype: str | None, ideal: bool, efficiency: tuple[str, ...], batch_size: int,
             input_len: int, out: str) -> None:
    """Write a log-log roofline chart with the prefill and decode ops placed on it."""
    from pathlib import Path

    from .plots import roofline_bytes

    for name, v in (("batch_size", batch_size), ("input_len", input_len)):
        if v < 1:
            raise SpecError(f"{name}: {v!r} must be an integer >= 1")
    cost = _build_cost(model, hardware, tp, pp, weight_dtype, activation_dtype, kv_dtype, ideal, efficiency)
    fmt = Path(out).suffix.lstrip(".").lower() or "png"
    try:
        data = roofline_bytes(cost, batch_size, input_len, fmt)
        write_atomic(out, data)
    except (OSError, ValueError) as e:
        raise SpecError(f"--out {out}: cannot write ({e})") from None
    click.echo(f"wrote {out}")

# [simulate]


def write_atomic(path: Any, data: bytes | str) -> None:
    """Write a file so that an interrupted run never leaves a truncated one: write a
    temporary sibling, flush it to disk, then rename over the target."""
    import os
    from pathlib import Path

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(tmp, mode, **({} if mode == "wb" else {"encoding": "utf-8"})) as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_json(path: Any, obj: Any) -> None:
    write_atomic(path, json.dumps(_clean(obj), indent=2) + "\n")


def write_csv(path: Any, df: Any) -> None:
    write_atomic(path, df.to_csv(index=False))


class Progress:
    """A one-line progress bar on stderr (nothing when quiet or not a terminal-like run)."""

    def __init__(self, label: str, quiet: bool) -> None:
        self.label = label
        self.quiet = quiet
        self.last = -1

    def __call__(self, done: int, total: int) -> None:
        if self.quiet or total <= 0:
            return
        if not sys.stderr.isatty():
            if done >= total:
                click.echo(f"{self.label}: {done}/{total} done", err=True)
            return
        pct = int(100 * done / total)
        if pct == self.last:
            return
        self.last = pct
        bar = "#" * (pct // 4) + "." * (25 - pct // 4)
        click.echo(f"\r{self.label} [{bar}] {pct:3d}% ({done}/{total})", err=True, nl=False)
        if done >= total:
            click.echo("", err=True)


def _rate_type(value: Any) -> float:
    from .scenario import parse_rate

    return parse_rate(value)


SCENARIO_OPTIONS: list[tuple[tuple, dict]] = [
    (("--model", "-m"), {"help": "Catalog id/alias, model YAML, or HF config.json (file or folder). [default: llama-3.1-8b]"}),
    (("--hardware", "-H"), {"help": "Catalog id, hardware YAML, or calibration overlay. [default: h100-sxm]"}),
    (("--tp",), {"type": int, "help": "Tensor-parallel degree per replica. [default: 1]"}),
    (("--pp",), {"type": int, "help": "Pipeline-parallel degree per replica. [default: 1]"}),
    (("--weight-dtype",), {"help": "Weight format (default: the model's own)."}),
    (("--activation-dtype",), {"help": "Activation format. [default: bf16]"}),
    (("--kv-dtype",), {"help": "KV-cache format. [default: bf16]"}),
    (("--ideal",), {"is_flag": True, "default": None, "help": "Pure roofline: efficiencies 1, overheads 0."}),
    (("--efficiency",), {"multiple": True, "help": "Override an efficiency field, KEY=VALUE (repeatable)."}),
    (("--replicas",), {"type": int, "help": "Replicas behind the router. [default: 1]"}),
    (("--router",), {"help": "round-robin | least-outstanding | least-kv. [default: round-robin]"}),
    (("--workload", "-w"), {"help": "azure-conv | azure-code | random | a trace file. [default: azure-conv]"}),
    (("--rate", "-r"), {"help": "Requests/s (number or inf). A trace is time-scaled to it; default: the trace's own timing (random: inf)."}),
    (("--burstiness",), {"type": float, "help": "Gamma arrival shape (vLLM): 1 = Poisson, < 1 burstier. [default: 1]"}),
    (("--concurrency",), {"type": int, "help": "Closed loop: N clients, each sends when its last request returns."}),
    (("--num-requests", "-n"), {"type": int, "help": "Requests to simulate. [default: 1000]"}),
    (("--input-len",), {"type": int, "help": "random workload: prompt tokens. [default: 1024]"}),
    (("--output-len",), {"type": int, "help": "random workload: output tokens. [default: 128]"}),
    (("--range-ratio",), {"type": float, "help": "random workload: lengths uniform in L(1±r). [default: 0]"}),
    (("--max-num-seqs",), {"type": int, "help": "Scheduler seat cap. [default: 256]"}),
    (("--max-num-batched-tokens",), {"type": int, "help": "Token budget per step. [default: 8192]"}),
    (("--scheduler",), {"help": "vllm (chunked prefill) | prefill-priority | static. [default: vllm]"}),
    (("--gpu-memory-utilization",), {"type": float, "help": "Fraction of HBM the engine may use. [default: 0.9]"}),
    (("--max-model-len",), {"type": int, "help": "Longest prompt+output accepted (default: the model's context)."}),
    (("--goodput",), {"multiple": True, "help": "SLOs in ms, vLLM syntax: --goodput ttft:500 --goodput tpot:50 (or 'ttft:500 tpot:50')."}),
    (("--seed",), {"type": int, "help": "Seed of every random draw. [default: 0]"}),
    (("--max-duration-s",), {"type": float, "help": "Simulated-time cap (s): requests unfinished then are cut off, with that reason."}),
    (("--skip-bad-rows",), {"is_flag": True, "default": None, "help": "Skip malformed trace rows (counted in the summary)."}),
    (("--debug",), {"is_flag": True, "default": None, "help": "Check conservation invariants while simulating."}),
    (("-c", "--config"), {"type": click.Path(dir_okay=False), "help": "Scenario YAML with the same settings (flags override it)."}),
]


def scenario_options(fn: Any) -> Any:
    """Attach the shared scenario options (simulate, sweep, plan, whatif)."""
    for decls, kw in reversed(SCENARIO_OPTIONS):
        fn = click.option(*decls, **kw)(fn)
    return fn


def scenario_from_options(opts: dict[str, Any], **overrides: Any) -> Any:
    """Build a Scenario from the scenario YAML (if any) and the options given (which win)."""
    from .metrics import parse_goodput
    from .scenario import Scenario

    base: dict[str, Any] = {}
    if opts.get("config"):
        from .catalog import read_yaml

        data = read_yaml(opts["config"])
        Scenario.from_dict(data, str(opts["config"]))  # validate the file on its own
        base = {str(k).replace("-", "_"): v for k, v in data.items()}
    for k, v in opts.items():
        if k == "config" or v is None or v == ():
            continue
        base[k] = v
    base.update(overrides)
    if "efficiency" in base and isinstance(base["efficiency"], (tuple, list)):
        from .roofline import parse_efficiency_overrides

        base["efficiency"] = parse_efficiency_overrides(base["efficiency"])
    if "goodput" in base and isinstance(base["goodput"], (tuple, list)):
        base["goodput"] = " ".join(base["goodput"])
    if isinstance(base.get("goodput"), str):
        base["goodput"] = {k: v * 1e3 for k, v in parse_goodput(base["goodput"]).items()}
    if "rate" in base and isinstance(base["rate"], str):
        base["rate"] = _rate_type(base["rate"])
    lengths = [k for k in ("input_len", "output_len", "range_ratio") if base.get(k) is not None]
    if lengths:
        base.setdefault("workload", "random")
        if str(base["workload"]).lower() not in ("random", "synthetic"):
            raise SpecError(f"{lengths[0]}: applies to --workload random only; trace "
                            f"{base['workload']!r} sets its own prompt and output lengths")
    return Scenario.from_dict(base, "options")


def _pop_scenario_opts(kw: dict[str, Any]) -> dict[str, Any]:
    names = {d[0].lstrip("-").replace("-", "_") if not d[0].startswith("-c") else "config" for d, _ in SCENARIO_OPTIONS}
    names = {n if n != "c" else "config" for n in names}
    return {k: kw.pop(k) for k in list(kw) if k in names}


def print_serving_summary(s: dict[str, Any]) -> None:
    """The summary table `vllm bench serve` prints, plus llmsim's extras."""
    def line(label: str, value: Any, fmt: str = "{:<40} {:<10.2f}") -> None:
        if value is None:
            return
        if isinstance(value, int) and not isinstance(value, bool):
            click.echo(f"{label:<40} {value:<10}")
        else:
            click.echo(fmt.format(label, value))

    click.echo("{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="))
    click.echo(f"{'Model / hardware:':<40} {s.get('model')} on {s.get('num_gpus')} x {s.get('hardware')}")
    click.echo(f"{'Workload:':<40} {s.get('workload')}")
    line("Successful requests:", s["completed"])
    line("Failed (rejected) requests:", s["failed"])
    line("Benchmark duration (s):", s["duration"])
    line("Total input tokens:", s["total_input_tokens"])
    line("Total generated tokens:", s["total_output_tokens"])
    line("Request throughput (req/s):", s["request_throughput"])
    if s.get("request_goodput") is not None:
        line("Request goodput (req/s):", s["request_goodput"])
        line("Good requests (fraction):", s["good_fraction"])
    line("Output token throughput (tok/s):", s["output_throughput"])
    line("Total Token throughput (tok/s):", s["total_token_throughput"])
    if s.get("output_chars_per_s"):
        line("Output throughput (chars/s):", s["output_chars_per_s"])
    for key, title in (("ttft", "Time to First Token"), ("tpot", "Time per Output Token (excl. 1st token)"),
                       ("itl", "Inter-token Latency"), ("e2el", "End-to-end Latency")):
        click.echo("{s:{c}^{n}}".format(s=title, n=50, c="-"))
        name = key.upper()
        line(f"Mean {name} (ms):", s[f"mean_{key}_ms"])
        line(f"Median {name} (ms):", s[f"median_{key}_ms"])
        line(f"P99 {name} (ms):", s[f"p99_{key}_ms"])
    click.echo("{s:{c}^{n}}".format(s="Engine", n=50, c="-"))
    line("Mean batch size (seqs/step):", s["mean_batch_size"])
    line("Peak KV-cache utilisation:", s["peak_kv_utilization"])
    line("Preemptions:", s["preemptions"])
    line("KV capacity per replica (tokens):", s.get("kv_capacity_tokens_per_replica"))
    if s.get("unstable"):
        click.echo(f"UNSTABLE: offered {s['offered_rate']:.3g} req/s exceeds capacity "
                   f"(achieved {s['achieved_rate']:.3g} req/s); latencies grow with run length")
    for reason, count in (s.get("failed_reasons") or {}).items():
        click.echo(f"rejected x{count}: {reason}")
    for note in s.get("notes") or []:
        click.echo(f"note: {note}")
    click.echo("=" * 50)


@main.command()
@scenario_options
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Write summary.json, requests.csv, timeline.csv and timeline.png here.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def simulate(out_dir: str | None, as_json: bool, quiet: bool, **kw: Any) -> None:
    """Serve a request stream through continuous batching and report vLLM's metrics."""
    sc = scenario_from_options(_pop_scenario_opts(kw))
    res, summary = sc.run(progress=Progress("simulating", quiet or as_json))
    if out_dir:
        from pathlib import Path

        from . import plots

        d = Path(out_dir)
        write_csv(d / "requests.csv", res.records())
        write_csv(d / "timeline.csv", res.timeline)
        write_atomic(d / "timeline.png", plots.timeline_png(res.timeline, f"{summary['model']} on {summary['hardware']}"))
        write_json(d / "summary.json", {**summary, "scenario": sc.as_dict()})
    if as_json:
        echo_json(summary)
    else:
        print_serving_summary(summary)
        if out_dir:
            click.echo(f"wrote {out_dir}/summary.json, requests.csv, timeline.csv, timeline.png")

# [sweep]


def _print_sweep(result: dict[str, Any]) -> None:
    """Per curve: a table of the sampled points, then the knee/saturation/capacity lines."""
    import math

    def num(v: Any, fmt: str) -> str:
        return format(v, fmt) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else "-"

    sc = result["scenario"]
    click.echo(f"{result['model']} on {result['hardware']}  workload {result['workload']}  "
               f"{sc['num_requests']} requests per point"
               + (f"  SLOs {' '.join(f'{k}:{v:g}ms' for k, v in result['goodput_slos_ms'].items())}"
                  if result["goodput_slos_ms"] else ""))
    for info in result["curves"]:
        click.echo("")
        click.echo("{s:{c}^{n}}".format(s=f" {info['curve']} ", n=78, c="="))
        click.echo(f"{'rate/s':>9} {'achieved/s':>10} {'p99 TTFT ms':>12} {'p99 TPOT ms':>12} "
                   f"{'good frac':>9}  {'unstable':<8} point")
        for p in result["points"]:
            if p["curve"] != info["curve"]:
                continue
            flag = "UNSTABLE" if p.get("unstable") else ("sat" if p.get("saturated") else "")
            click.echo(f"{p['rate']:9.4g} {num(p.get('achieved_rate'), '10.4g'):>10} "
                       f"{num(p.get('p99_ttft_ms'), '12.1f'):>12} {num(p.get('p99_tpot_ms'), '12.2f'):>12} "
                       f"{num(p.get('good_fraction'), '9.3f'):>9}  {flag:<8} {p.get('kind', '')}")
        click.echo(f"  offline max throughput: {num(info['offline_max_throughput'], '.4g')} req/s "
                   "(every request at t = 0)")
        if info["saturation_rate"] is not None:
            first = min(info["saturated_rates"])
            click.echo(f"  saturation rate:        {info['saturation_rate']:.4g} req/s (max achieved; "
                       f"saturated from offered {first:.4g} req/s)")
        else:
            click.echo(f"  saturation rate:        not reached; achieved up to "
                       f"{num(info['saturation_lower_bound'], '.4g')} req/s")
        click.echo(f"  max stable rate:        {num(info['max_stable_rate'], '.4g')} req/s "
                   "(not unstable; first tokens keep within 5 % of arrivals)")
        if info["knee"]:
            click.echo(f"  knee:                   {info['knee']['rate']:.4g} req/s "
                       f"({info['knee_metric']} {info['knee']['value']:.1f}; max curvature, Kneedle)")
        else:
            click.echo(f"  knee:                   none in {info['knee_metric']} (flat or straight curve, "
                       "or fewer than 3 stable points)")
        if info["slo_capacity"] is not None:
            click.echo(f"  SLO capacity:           {info['slo_capacity']:.4g} req/s "
                       f"(good fraction >= {info['slo_target']:g}; fails at {info['slo_capacity_upper']:.4g}; "
                       f"tolerance {info['slo_tolerance']:.0%}, {info['bisection_probes']} bisection probes)")
        else:
            click.echo(f"  SLO capacity:           - ({info['slo_note']})")
        for w in info["warnings"]:
            click.echo(f"  warning: {w}")


def _sweep_csv(points: list[dict[str, Any]]) -> Any:
    """One row per point; nested values (SLOs, rejection reasons, notes) as JSON text."""
    import pandas as pd

    rows = [{k: (json.dumps(_clean(v)) if isinstance(v, (dict, list)) else v) for k, v in p.items()}
            for p in points]
    return pd.DataFrame(rows)


@main.command("sweep")
@scenario_options
@click.option("--rates", default="auto", show_default=True,
              help="Offered rates: 1,2,4,8 | START:STOP:COUNT | auto (0.1x-1.2x the offline max throughput).")
@click.option("--sweep", "sweep_items", multiple=True, metavar="FIELD=V1,V2",
              help="Vary a scenario setting, one curve per value (repeatable: cartesian product), e.g. tp=1,2,4.")
@click.option("--slo-target", type=float, default=0.99, show_default=True,
              help="SLO capacity: the good fraction (--goodput) that must be met.")
@click.option("--tol", type=float, default=0.02, show_default=True,
              help="SLO capacity: relative tolerance of the bisection.")
@click.option("--knee-metric", type=click.Choice(["ttft", "tpot", "e2el"]), default="ttft", show_default=True,
              help="p99 latency whose curve the knee is read from.")
@click.option("--workers", type=int, default=None, help="Process-pool size. [default: CPU count]")
@click.option("--serial", is_flag=True, help="Run every point in this process.")
@click.option("--dask", "dask_address", metavar="ADDRESS", help="Run points on a Dask scheduler (pip install llmsim[dask]).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Write sweep.csv, sweep.json, latency.png and throughput.png here.")
@click.option("--resume", "resume_dir", type=click.Path(file_okay=False),
              help="Continue the sweep whose finished points are kept in DIR (an interrupted run "
                   "names it); only the missing points run.")
@click.option("--json", "as_json", is_flag=True, help="Print the result (points and per-curve results) as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def sweep_cmd(rates: str, sweep_items: tuple[str, ...], slo_target: float, tol: float, knee_metric: str,
              workers: int | None, serial: bool, dask_address: str | None, out_dir: str | None,
              resume_dir: str | None, as_json: bool, quiet: bool, **kw: Any) -> None:
    """Sweep the offered rate: latency knee, saturation rate and SLO capacity (docs/sweep.md).

    Every finished point is kept as it completes (in --resume DIR, else --out DIR, else a
    temporary folder); after Ctrl-C, rerun with --resume DIR to run only the missing points.
    """
    import shutil
    import tempfile

    from . import sweep as sw

    opts = _pop_scenario_opts(kw)
    if opts.get("rate") is not None:
        raise SpecError("--rate: a sweep sets the rate itself; use --rates (e.g. --rates 1,2,4 or auto)")
    rate_list = sw.parse_rates(rates)
    sweeps = sw.parse_sweep(sweep_items)
    sc = scenario_from_options(opts)
    header = sw.PointStore.make_header(sc, sweeps)
    if resume_dir:
        store = sw.PointStore.resume(resume_dir, header)
        if store.loaded and not (quiet or as_json):
            click.echo(f"resuming: {store.loaded} points kept in {resume_dir}", err=True)
    else:
        store = sw.PointStore.open(out_dir or tempfile.mkdtemp(prefix="llmsim-sweep-"), header)
    keep_dir = str(store.dir)
    try:
        with sw.make_executor(serial=serial, workers=workers, dask=dask_address) as ex:
            result = sw.sweep(sc, rate_list, sweeps, ex, Progress("sweeping", quiet or as_json),
                              slo_target=slo_target, tol=tol, knee_metric=knee_metric, store=store)
    except KeyboardInterrupt:
        store.close()
        click.echo(f"\ninterrupted: {len(store)} points kept in {keep_dir}; "
                   f"rerun with --resume {keep_dir}", err=True)
        raise click.exceptions.Exit(130) from None
    store.close()
    if not (resume_dir or out_dir):
        shutil.rmtree(keep_dir, ignore_errors=True)  # finished: the temporary keep is not needed
    if out_dir:
        from pathlib import Path

        from . import plots

        d = Path(out_dir)
        write_csv(d / "sweep.csv", _sweep_csv(result["points"]))
        write_json(d / "sweep.json", result)
        write_atomic(d / "latency.png", plots.sweep_latency_png(result))
        write_atomic(d / "throughput.png", plots.sweep_throughput_png(result))
    if as_json:
        echo_json(result)
    else:
        _print_sweep(result)
        if out_dir:
            click.echo(f"\nwrote {out_dir}/sweep.csv, sweep.json, latency.png, throughput.png")

# [validate, calibrate]


def _name_file_pairs(items: tuple[str, ...], option: str) -> dict[str, str]:
    """--workload NAME=FILE items -> {name: file}; a bad item is a one-line error."""
    from pathlib import Path

    out: dict[str, str] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise SpecError(f"{option}: {item!r} is not NAME=FILE (e.g. sharegpt=ShareGPT_V3.json)")
        if not Path(path.strip()).is_file():
            raise SpecError(f"{option}: {path.strip()!r} is not a file")
        out[name.strip()] = path.strip()
    return out


def _hardware_spec_map(items: tuple[str, ...]) -> dict[str, Any]:
    """--hardware-spec FILE items -> {hardware id: spec} (an overlay replaces its base id)."""
    from .catalog import load_hardware

    out = {}
    for ref in items:
        hw = load_hardware(ref)
        out[hw.id] = hw
    return out


def _short(text: str, n: int = 70) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def _error_table(result: dict[str, Any]) -> str:
    from .validate import summary_table

    rows = summary_table(result)
    for r in rows:
        r["name"] = _short(str(r["name"]))
    return _table(rows)


def _skip_summary(skipped: list[dict[str, Any]]) -> list[str]:
    counts: dict[str, list[str]] = {}
    for s in skipped:
        counts.setdefault(s["reason"], []).append(str(s["id"]))
    return [f"skipped x{len(ids)}: {reason} (e.g. {ids[0]})"
            for reason, ids in sorted(counts.items(), key=lambda kv: -len(kv[1]))]


@main.command("validate")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--model", "-m", help="vLLM result JSON: the model served (the JSON does not record it).")
@click.option("--hardware", "-H", help="vLLM result JSON: hardware id or overlay YAML.")
@click.option("--tp", type=int, default=1, show_default=True, help="vLLM result JSON: tensor-parallel degree.")
@click.option("--pp", type=int, default=1, show_default=True, help="vLLM result JSON: pipeline-parallel degree.")
@click.option("--num-gpus", type=int, help="vLLM result JSON: GPUs in total [default: tp*pp].")
@click.option("--weight-dtype", default="bf16", show_default=True, help="vLLM result JSON: weight format.")
@click.option("--activation-dtype", default="bf16", show_default=True, help="vLLM result JSON: activation format.")
@click.option("--kv-dtype", default="bf16", show_default=True, help="vLLM result JSON: KV-cache format.")
@click.option("--input-len", type=int, help="vLLM result JSON: prompt tokens (random dataset).")
@click.option("--output-len", type=int, help="vLLM result JSON: output tokens (random dataset).")
@click.option("--max-num-seqs", type=int, help="vLLM result JSON: the server's --max-num-seqs.")
@click.option("--max-num-batched-tokens", type=int, help="vLLM result JSON: the server's --max-num-batched-tokens.")
@click.option("--workload", "-w", "workloads", multiple=True, metavar="NAME=FILE",
              help="Map a dataset named in the rows (sharegpt, openorca) to a trace file (repeatable).")
@click.option("--scenario", type=click.Choice(["static_batch", "offline_max_throughput", "online_poisson", "closed_loop"]),
              help="Only rows of this scenario.")
@click.option("--hardware-filter", help="Only rows of this hardware id.")
@click.option("--hardware-spec", "hardware_specs", multiple=True, metavar="FILE",
              help="Price rows of this YAML's (or calibration overlay's) hardware id with it (repeatable).")
@click.option("--num-requests", type=int, help="Simulated rows: requests to simulate [default: the row's, else 1000].")
@click.option("--skip-bad-rows", is_flag=True, help="Skip malformed CSV rows (listed with the reason) instead of stopping.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Write validation.csv and scatter.png here.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def validate_cmd(file: str, model: str | None, hardware: str | None, tp: int, pp: int, num_gpus: int | None,
                 weight_dtype: str, activation_dtype: str, kv_dtype: str, input_len: int | None,
                 output_len: int | None, max_num_seqs: int | None, max_num_batched_tokens: int | None,
                 workloads: tuple[str, ...], scenario: str | None, hardware_filter: str | None,
                 hardware_specs: tuple[str, ...], num_requests: int | None, skip_bad_rows: bool,
                 out_dir: str | None, as_json: bool, quiet: bool) -> None:
    """Compare predictions with measured numbers: a SCHEMA.md measurement CSV or a
    `vllm bench serve` result JSON. Prints median / p90 absolute % error and mean signed % error
    by source, scenario and hardware (error % = (predicted - measured) / measured * 100)."""
    from pathlib import Path

    from . import validate as V

    specs = _hardware_spec_map(hardware_specs)
    hw_id = hardware
    if hardware and Path(hardware).is_file():
        hw = _hardware_spec_map((hardware,))
        specs.update(hw)
        hw_id = next(iter(hw))
    rows, skipped = V.load_rows(file, skip_bad_rows, model=model, hardware=hw_id, tp=tp, pp=pp,
                                num_gpus=num_gpus, weight_dtype=weight_dtype,
                                activation_dtype=activation_dtype, kv_dtype=kv_dtype,
                                input_len=input_len, output_len=output_len, max_num_seqs=max_num_seqs,
                                max_num_batched_tokens=max_num_batched_tokens)
    result = V.validate(rows, scenario=scenario, hardware_filter=hardware_filter, skipped=skipped,
                        hardware_specs=specs, workloads=_name_file_pairs(workloads, "--workload"),
                        num_requests=num_requests, progress=Progress("validating", quiet or as_json))
    result["file"] = str(file)
    if out_dir:
        from . import plots

        d = Path(out_dir)
        write_csv(d / "validation.csv", V.points_frame(result))
        write_atomic(d / "scatter.png", plots.validation_scatter_png(
            result["points"], f"llmsim vs {Path(file).name}: median APE {_pct(result['median_ape'])}, "
                              f"p90 {_pct(result['p90_ape'])} ({result['predicted']} rows)"))
    if as_json:
        echo_json(result)
        return
    click.echo(f"{file}: {result['predicted']} of {result['rows']} rows predicted, {len(result['skipped'])} skipped")
    if result["predicted"]:
        click.echo(_error_table(result))
    for line in _skip_summary(result["skipped"]):
        click.echo(line)
    if out_dir:
        click.echo(f"wrote {out_dir}/validation.csv, scatter.png")


def _pct(x: Any) -> str:
    return "n/a" if x is None else f"{x:.1f} %"


@main.command("calibrate")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--hardware", "-H", required=True, help="Hardware id (or YAML) whose rows in FILE to fit.")
@click.option("--ops", type=click.Path(dir_okay=False), help="Vidur op times CSV: fit gemm_ramp_tokens and kernel_overhead_s.")
@click.option("--allreduce", type=click.Path(dir_okay=False), help="Vidur all-reduce CSV: fit link_efficiency and link_latency_s.")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False), help="Overlay YAML to write (use it as --hardware).")
@click.option("--objective", type=click.Choice(["msle", "median"]), default="msle", show_default=True,
              help="Mean (msle) or median of squared log errors ln(predicted/measured)^2.")
@click.option("--no-balance", is_flag=True, help="Weight rows equally (default: each source weighs the same).")
@click.option("--keep-link-latency", is_flag=True, help="Keep the profile's link_latency_s (still report the all-reduce fit).")
@click.option("--include-simulated", is_flag=True, help="Also fit to offline/online/closed-loop rows (re-simulates them: slow).")
@click.option("--workload", "-w", "workloads", multiple=True, metavar="NAME=FILE", help="Map a dataset name to a trace file.")
@click.option("--skip-bad-rows", is_flag=True, help="Skip malformed CSV rows instead of stopping.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
def calibrate_cmd(file: str, hardware: str, ops: str | None, allreduce: str | None, out: str, objective: str,
                  no_balance: bool, keep_link_latency: bool, include_simulated: bool,
                  workloads: tuple[str, ...], skip_bad_rows: bool, as_json: bool) -> None:
    """Fit compute_efficiency, memory_efficiency and step_overhead_s (and, from Vidur files,
    gemm_ramp_tokens, kernel_overhead_s, link_efficiency, link_latency_s) of one hardware
    profile to measurements; write an overlay YAML that --hardware accepts."""
    from pathlib import Path

    from . import calibrate as C
    from . import validate as V

    rows, _ = V.read_measurements(file, skip_bad_rows)
    res = C.calibrate(rows, hardware, ops=ops, allreduce=allreduce, objective=objective,
                      balance_sources=not no_balance, include_simulated=include_simulated,
                      fit_link_latency=not keep_link_latency, measurements_name=Path(file).name,
                      workloads=_name_file_pairs(workloads, "--workload"))
    write_atomic(out, C.overlay_yaml(res))
    if as_json:
        echo_json({**res, "overlay": str(out)})
        return
    click.echo(f"calibrated {res['hardware']} on {res['rows_used']} rows of {file} "
               f"({res['objective']}{', sources weighted equally' if res['balance_sources'] else ''})")
    prows = []
    for k in C.ALL_PARAMS:
        prows.append({"parameter": k, "before": f"{res['previous'][k]:.4g}", "after": f"{res['params'][k]:.4g}",
                      "fitted from": ("tied to compute_efficiency" if k == "attention_efficiency"
                                      and "attention_efficiency" in res["sources"] else "fixed")
                      if k not in res["fitted"] else
                      ("measurements" if k in ("compute_efficiency", "memory_efficiency", "step_overhead_s",
                                               "attention_efficiency")
                       else "capped: stays bandwidth-bound" if "capped" in res["sources"].get(k, "")
                       and not ops else "vidur")})
    click.echo(_table(prows))
    for name, st in res["stages"].items():
        if st:
            click.echo(f"{name} stage: {st['points']} points, median APE {_pct(st['before']['median_ape'])} -> "
                       f"{_pct(st['after']['median_ape'])}")
    b, a = res["before"], res["after"]
    click.echo(f"error on {a['predicted']} rows: median APE {_pct(b['median_ape'])} -> {_pct(a['median_ape'])}, "
               f"p90 {_pct(b['p90_ape'])} -> {_pct(a['p90_ape'])}, mean signed "
               f"{_pct(b['mean_signed_error'])} -> {_pct(a['mean_signed_error'])}")
    if res["leave_one_source_out"]:
        click.echo("leave-one-source-out (fit on the others, error on the held-out source):")
        click.echo(_table([{"held-out source": _short(x["source"]), "rows": x["rows"],
                            "median_ape_%": round(x["median_ape"], 1),
                            "mean_signed_error_%": round(x["mean_signed_error"], 1)}
                           for x in res["leave_one_source_out"]]))
        click.echo(f"leave-one-source-out median APE (median over sources): "
                   f"{_pct(res['leave_one_source_out_median_ape'])}")
    click.echo(f"wrote {out}")

# [plan, whatif]


_LIST_OPTS = ("--hardware", "--tp", "--kv-dtype", "--weight-dtype")


def _scenario_options_except(*drop: str) -> Any:
    """The shared scenario options minus `drop` (plan/whatif redefine some as lists)."""
    def deco(fn: Any) -> Any:
        for decls, kw in reversed(SCENARIO_OPTIONS):
            if decls[0] not in drop:
                fn = click.option(*decls, **kw)(fn)
        return fn
    return deco


def _csv_list(text: str | None, option: str, conv: Any = str) -> list[Any] | None:
    """'a,b,c' -> [conv(a), conv(b), conv(c)] (None when not given)."""
    if text is None:
        return None
    out = []
    for tok in str(text).split(","):
        tok = tok.strip()
        if not tok:
            continue
        try:
            v = conv(tok)
        except ValueError:
            raise SpecError(f"{option}: {tok!r} is not a valid value") from None
        if v not in out:
            out.append(v)
    if not out:
        raise SpecError(f"{option}: no values given")
    return out


def _prices(items: tuple[str, ...]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items:
        hw, sep, val = item.partition("=")
        if not sep or not hw.strip():
            raise SpecError(f"--price {item!r}: expected HARDWARE=USD_PER_GPU_HOUR, e.g. h100-sxm=3.5")
        try:
            out[hw.strip()] = float(val)
        except ValueError:
            raise SpecError(f"--price {item!r}: {val.strip()!r} is not a number of $ per GPU-hour") from None
    return out


def _executor_options(fn: Any) -> Any:
    for decls, kw in reversed([
        (("--slo-target",), {"type": float, "default": 0.99, "show_default": True,
                             "help": "SLO capacity: the good fraction (--goodput) that must be met."}),
        (("--tol",), {"type": float, "default": 0.02, "show_default": True,
                      "help": "SLO capacity: relative tolerance of the bisection."}),
        (("--workers",), {"type": int, "default": None, "help": "Process-pool size. [default: CPU count]"}),
        (("--serial",), {"is_flag": True, "help": "Run every simulation in this process."}),
        (("--dask", "dask_address"), {"metavar": "ADDRESS", "help": "Run simulations on a Dask scheduler."}),
    ]):
        fn = click.option(*decls, **kw)(fn)
    return fn


def _fmt(v: Any, fmt: str, dash: str = "-") -> str:
    import math

    return format(v, fmt) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else dash


def _print_plan(r: dict[str, Any]) -> None:
    slos = " ".join(f"{k}:{v:g}ms" for k, v in r["goodput_slos_ms"].items())
    click.echo(f"plan: {r['model']} at {r['rate']:g} req/s of {r['workload']} "
               f"(mean {r['mean_input_tokens']:.0f} in / {r['mean_output_tokens']:.0f} out tokens), "
               f"SLOs {slos} for >= {r['slo_target']:g} of requests, headroom {r['headroom']:.0%}, "
               f"{r['num_requests_per_point']} requests per simulation")
    rows = [{"rank": c["rank"], "hardware": c["hardware"], "tp": c["tp"],
             **({"pp": c["pp"]} if c["pp"] != 1 else {}),
             "weights": c["weight_dtype"], "kv": c["kv_dtype"],
             "req/s/replica": _fmt(c["slo_capacity"], ".3g"), "replicas": c["replicas"], "GPUs": c["gpus"],
             "$/h": _fmt(c["cost_per_hour_usd"], ".2f"),
             "$/M out tok": _fmt(c["cost_per_million_output_tokens_usd"], ".3f")} for c in r["candidates"]]
    click.echo("")
    click.echo(_table(rows) if rows else "no feasible candidate")
    if r["infeasible"]:
        click.echo("")
        click.echo("infeasible:")
        for c in r["infeasible"]:
            click.echo(f"  {c['hardware']} tp={c['tp']} weights {c['weight_dtype']} kv {c['kv_dtype']}: {c['reason']}")
    for c in r["candidates"]:
        for w in c.get("warnings") or []:
            click.echo(f"warning: {c['hardware']} tp={c['tp']}: {w}")
    if r["best"]:
        b = r["best"]
        click.echo(f"\ncheapest: {b['replicas']} x {b['hardware']} tp={b['tp']} ({b['gpus']} GPUs), "
                   f"${_fmt(b['cost_per_hour_usd'], '.2f')}/h, "
                   f"${_fmt(b['cost_per_million_output_tokens_usd'], '.3f')} per million output tokens")


@main.command("plan")
@_scenario_options_except(*_LIST_OPTS, "--rate", "--replicas", "--router", "--concurrency")
@click.option("--rate", "-r", "target_rate", required=True, type=float, help="Request rate to serve (req/s, all replicas).")
@click.option("--hardware", "-H", "hw_list", help="Candidate accelerators, comma-separated. [default: h100-sxm]")
@click.option("--tp", "tp_list", help="Candidate TP degrees, comma-separated, e.g. 1,2,4,8. [default: 1]")
@click.option("--kv-dtype", "kv_list", help="Candidate KV-cache formats, comma-separated. [default: bf16]")
@click.option("--weight-dtype", "wd_list", help="Candidate weight formats, comma-separated. [default: the model's]")
@click.option("--headroom", type=float, default=0.2, show_default=True,
              help="Fraction of each replica's SLO capacity kept free.")
@click.option("--price", "price_items", multiple=True, metavar="HW=USD",
              help="$/GPU-hour override, e.g. h100-sxm=3.5 (repeatable).")
@_executor_options
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Write plan.json, plan.csv and plan.png here.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def plan_cmd(target_rate: float, hw_list: str | None, tp_list: str | None, kv_list: str | None, wd_list: str | None,
             headroom: float, price_items: tuple[str, ...], slo_target: float, tol: float, workers: int | None,
             serial: bool, dask_address: str | None, out_dir: str | None, as_json: bool, quiet: bool,
             **kw: Any) -> None:
    """Cheapest deployment (hardware x TP x dtypes x replicas) that serves --rate within the SLOs (docs/plan.md)."""
    import pandas as pd

    from . import plan as pl
    from . import sweep as sw

    sc = scenario_from_options(_pop_scenario_opts(kw))
    with sw.make_executor(serial=serial, workers=workers, dask=dask_address) as ex:
        result = pl.plan(sc, target_rate, hardware=_csv_list(hw_list, "--hardware"),
                         tps=_csv_list(tp_list, "--tp", int), kv_dtypes=_csv_list(kv_list, "--kv-dtype"),
                         weight_dtypes=_csv_list(wd_list, "--weight-dtype"), headroom=headroom,
                         prices=_prices(price_items), slo_target=slo_target, tol=tol, executor=ex,
                         progress=Progress("planning", quiet or as_json))
    if out_dir:
        from pathlib import Path

        from . import plots

        d = Path(out_dir)
        write_json(d / "plan.json", result)
        write_csv(d / "plan.csv", pd.DataFrame(pl.table_rows(result)))
        write_atomic(d / "plan.png", plots.plan_png(result))
    if as_json:
        echo_json(result)
    else:
        _print_plan(result)
        if out_dir:
            click.echo(f"wrote {out_dir}/plan.json, plan.csv, plan.png")


@main.group("whatif")
def whatif_group() -> None:
    """What-if analyses: KV-cache format, speculative decoding, hardware (docs/plan.md)."""


def _whatif_out(out_dir: str | None, stem: str, result: dict[str, Any], rows: list[dict[str, Any]], png: bytes) -> None:
    from pathlib import Path

    import pandas as pd

    d = Path(out_dir)
    write_json(d / f"{stem}.json", result)
    flat = [{k: (json.dumps(_clean(v)) if isinstance(v, (dict, list)) else v) for k, v in r.items()} for r in rows]
    write_csv(d / f"{stem}.csv", pd.DataFrame(flat))
    write_atomic(d / f"{stem}.png", png)


@whatif_group.command("kv-dtype")
@_scenario_options_except("--kv-dtype")
@click.option("--values", default="bf16,fp8,int4", show_default=True, help="KV-cache formats to compare (ratios to the first).")
@click.option("--seq-len", type=int, default=None, help="Sequence length concurrency is counted at. [default: mean prompt+output]")
@click.option("--static-only", is_flag=True, help="Skip the simulations (no saturation rate / SLO capacity).")
@_executor_options
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Write kv_dtype.json, kv_dtype.csv, kv_dtype.png here.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def whatif_kv_cmd(values: str, seq_len: int | None, static_only: bool, slo_target: float, tol: float,
                  workers: int | None, serial: bool, dask_address: str | None, out_dir: str | None,
                  as_json: bool, quiet: bool, **kw: Any) -> None:
    """KV-cache quantization: capacity, concurrency, TPOT, saturation and SLO capacity per format."""
    from . import sweep as sw
    from . import whatif as wi

    sc = scenario_from_options(_pop_scenario_opts(kw))
    vals = _csv_list(values, "--values")
    with sw.make_executor(serial=serial, workers=workers, dask=dask_address) as ex:
        r = wi.kv_dtype_whatif(sc, vals, seq_len=seq_len, load=not static_only, executor=ex,
                               progress=Progress("what-if", quiet or as_json), slo_target=slo_target, tol=tol)
    if out_dir:
        from . import plots

        _whatif_out(out_dir, "kv_dtype", r, r["values"], plots.kv_dtype_png(r))
    if as_json:
        echo_json(r)
        return
    click.echo(f"KV-cache format what-if: {r['model']} on {r['hardware']} tp={r['tp']}, {r['workload']} "
               f"(mean {r['mean_input_tokens']} in / {r['mean_output_tokens']} out; sequences of {r['seq_len']} tokens)")
    rows = []
    for v in r["values"]:
        q = v["ratios"]
        rows.append({"kv": v["kv_dtype"], "KV tokens": v["kv_capacity_tokens"],
                     "x": _fmt(q["kv_capacity_tokens"], ".2f"), "seqs": v["max_concurrent_sequences"],
                     "TPOT b=1 ms": _fmt(v.get("tpot_ms_batch1"), ".2f"),
                     "batch": v.get("capacity_batch", "-"), "TPOT@batch ms": _fmt(v.get("tpot_ms_capacity_batch"), ".2f"),
                     "decode tok/s": _fmt(v.get("decode_tokens_per_s_capacity_batch"), ".0f"),
                     "x ": _fmt(q["decode_tokens_per_s_capacity_batch"], ".2f"),
                     "sat req/s": _fmt(v.get("saturation_rate"), ".3g"), "x  ": _fmt(q["saturation_rate"], ".2f"),
                     "SLO cap req/s": _fmt(v.get("slo_capacity_rate"), ".3g"),
                     "x   ": _fmt(q["slo_capacity_rate"], ".2f")})
    click.echo(_table(rows))
    click.echo("(x = ratio to the first format; batch = min(max_num_seqs, concurrent sequences))")
    for v in r["values"]:
        if v.get("reason"):
            click.echo(f"{v['kv_dtype']}: {v['reason']}")
        if v.get("slo_note") and v.get("slo_capacity_rate") is None and not static_only:
            click.echo(f"{v['kv_dtype']}: SLO capacity: {v['slo_note']}")
        for w in v.get("warnings") or []:
            click.echo(f"warning: {v['kv_dtype']}: {w}")
    if out_dir:
        click.echo(f"wrote {out_dir}/kv_dtype.json, kv_dtype.csv, kv_dtype.png")


@whatif_group.command("speculative")
@scenario_options
@click.option("--draft-model", required=True, help="Draft model (catalog id, YAML or HF config.json).")
@click.option("--gamma", type=int, default=4, show_default=True, help="Draft tokens proposed per step.")
@click.option("--acceptance", type=float, default=0.7, show_default=True, help="Per-token acceptance rate in [0, 1].")
@click.option("--draft-tp", type=int, default=None, help="Draft TP degree. [default: the target's when it divides the draft's heads, else 1]")
@click.option("--max-batch", type=int, default=256, show_default=True, help="Static comparison over batch sizes 1..N.")
@click.option("--static-only", is_flag=True, help="Skip the simulations under load.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Write speculative.json, speculative.csv, speculative.png here.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
def whatif_spec_cmd(draft_model: str, gamma: int, acceptance: float, draft_tp: int | None, max_batch: int,
                    static_only: bool, out_dir: str | None, as_json: bool, quiet: bool, **kw: Any) -> None:
    """Speculative decoding: TPOT vs batch size (where it stops paying) and plain vs speculative under load."""
    from . import whatif as wi

    if max_batch < 1:
        raise SpecError(f"--max-batch {max_batch}: must be >= 1")
    sc = scenario_from_options(_pop_scenario_opts(kw))
    r = wi.speculative_whatif(sc, draft_model, gamma, acceptance, batch_sizes=range(1, max_batch + 1),
                              draft_tp=draft_tp, load=not static_only)
    if out_dir:
        from . import plots

        _whatif_out(out_dir, "speculative", r, r["static"], plots.speculative_png(r))
    if as_json:
        echo_json(r)
        return
    click.echo(f"speculative decoding what-if: {r['model']} on {r['hardware']} tp={r['tp']}, draft {r['draft_model']} "
               f"tp={r['draft_tp']}, gamma={r['gamma']}, acceptance={r['acceptance']:g} "
               f"-> {r['expected_tokens_per_step']:.3f} tokens per verify step; context {r['context_tokens']:.0f}")
    shown = [x for x in r["static"] if x["batch_size"] in (1, 2, 4, 8, 16, 32, 64, 128, 256, r["crossover_batch"])]
    click.echo(_table([{"batch": x["batch_size"], "plain TPOT ms": _fmt(x["plain_tpot_ms"], ".2f"),
                        "spec TPOT ms": _fmt(x["speculative_tpot_ms"], ".2f"),
                        "draft ms": _fmt(x["draft_ms"], ".2f"), "verify ms": _fmt(x["verify_ms"], ".2f"),
                        "speedup": _fmt(x["speedup"], ".2f")} for x in shown]))
    if r["crossover_batch"] is None:
        click.echo(f"speculative decoding pays at every batch size up to {r['static'][-1]['batch_size']}")
    else:
        click.echo(f"speculative decoding stops paying at batch {r['crossover_batch']} "
                   f"(speculative TPOT >= plain TPOT)")
    for w in r["warnings"]:
        click.echo(f"warning: {w}")
    click.echo(f"KV capacity: plain {r['kv_capacity_tokens']['plain']} tokens, with the draft "
               f"{r['kv_capacity_tokens']['speculative']} tokens")
    if "under_load" in r:
        u = r["under_load"]
        rate = r.get("rate")
        click.echo(f"\nunder load ({'at ' + format(rate, 'g') + ' req/s' if rate else 'trace timing'}; "
                   "offline = every request at t = 0):")
        click.echo(_table([{"": name, "p50 TTFT ms": _fmt(u[name]["at_rate"]["p50_ttft_ms"], ".1f"),
                            "p99 TTFT ms": _fmt(u[name]["at_rate"]["p99_ttft_ms"], ".1f"),
                            "mean TPOT ms": _fmt(u[name]["at_rate"]["mean_tpot_ms"], ".2f"),
                            "p99 TPOT ms": _fmt(u[name]["at_rate"]["p99_tpot_ms"], ".2f"),
                            "good frac": _fmt(u[name]["at_rate"]["good_fraction"], ".3f"),
                            "offline req/s": _fmt(u[name]["offline_max_throughput"], ".3g"),
                            "offline tok/s": _fmt(u[name]["offline_output_throughput"], ".0f")}
                           for name in ("plain", "speculative")]))
        click.echo(f"note: {r['approximation']}")
    if out_dir:
        click.echo(f"wrote {out_dir}/speculative.json, speculative.csv, speculative.png")


@whatif_group.command("hardware")
@_scenario_options_except("--hardware")
@click.option("--hardware", "-H", "hw_list", required=True, help="Accelerators to compare, comma-separated.")
@click.option("--price", "price_items", multiple=True, metavar="HW=USD",
              help="$/GPU-hour override, e.g. h100-sxm=3.5 (repeatable).")
@click.option("--static-only", is_flag=True, help="Skip the simulations (fit and price only).")
@_executor_options
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Write hardware.json, hardware.csv, hardware.png here.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def whatif_hw_cmd(hw_list: str, price_items: tuple[str, ...], static_only: bool, slo_target: float, tol: float,
                  workers: int | None, serial: bool, dask_address: str | None, out_dir: str | None,
                  as_json: bool, quiet: bool, **kw: Any) -> None:
    """The same workload on each accelerator: fit, latency, saturation, SLO capacity, cost."""
    from . import sweep as sw
    from . import whatif as wi

    sc = scenario_from_options(_pop_scenario_opts(kw))
    with sw.make_executor(serial=serial, workers=workers, dask=dask_address) as ex:
        r = wi.hardware_whatif(sc, _csv_list(hw_list, "--hardware"), prices=_prices(price_items),
                               load=not static_only, executor=ex, progress=Progress("what-if", quiet or as_json),
                               slo_target=slo_target, tol=tol)
    if out_dir:
        from . import plots

        _whatif_out(out_dir, "hardware", r, r["hardware"], plots.hardware_png(r))
    if as_json:
        echo_json(r)
        return
    rate = r.get("rate")
    click.echo(f"hardware what-if: {r['model']} tp={r['tp']}, {r['workload']}"
               + (f" at {rate:g} req/s" if rate else " (trace timing)"))
    click.echo(_table([{"hardware": h["hardware"], "fits": "yes" if h.get("fits") else "no",
                        "KV tokens": h.get("kv_capacity_tokens", "-"),
                        "p50 TTFT": _fmt(h.get("p50_ttft_ms"), ".1f"), "p99 TTFT": _fmt(h.get("p99_ttft_ms"), ".1f"),
                        "p50 TPOT": _fmt(h.get("p50_tpot_ms"), ".2f"), "p99 TPOT": _fmt(h.get("p99_tpot_ms"), ".2f"),
                        "sat req/s": _fmt(h.get("saturation_rate"), ".3g"),
                        "SLO cap req/s": _fmt(h.get("slo_capacity_rate"), ".3g"),
                        "$/h": _fmt(h.get("cost_per_hour_usd"), ".2f"),
                        "$/M tok": _fmt(h.get("cost_per_million_output_tokens_usd"), ".3f"),
                        "$/M tok @cap": _fmt(h.get("cost_per_million_output_tokens_at_slo_capacity_usd"), ".3f")}
                       for h in r["hardware"]]))
    click.echo("(latencies in ms at the base rate; $/M tok = $/h over the output tokens served at the base rate; "
               "@cap: at the SLO capacity)")
    for h in r["hardware"]:
        if h.get("reason"):
            click.echo(f"{h['hardware']}: {h['reason']}")
        for w in h.get("warnings") or []:
            click.echo(f"warning: {h['hardware']}: {w}")
    if out_dir:
        click.echo(f"wrote {out_dir}/hardware.json, hardware.csv, hardware.png")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
