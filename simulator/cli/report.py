"""Terminal tables and atomic file writes: everything the CLI prints or writes.

`simulator.cli.commands` parses options and calls the pure modules; it hands their results here.
Printing goes through ``click.echo`` (so Click's test runner captures it); every file is
written atomically (`write_atomic`), so an interrupted run never leaves a truncated one.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from simulator.cli.outputs import write_atomic


def llmsim_version() -> str:
    """The installed llmsim's version (the package's own when it is not installed)."""
    from importlib import metadata

    try:
        return metadata.version("llmsim")
    except metadata.PackageNotFoundError:  # run from a source tree without `pip install`
        from simulator import __version__

        return __version__


def versioned(obj: Any) -> Any:
    """A result dict with `llmsim_version` added (other JSON values unchanged)."""
    if isinstance(obj, dict) and "llmsim_version" not in obj:
        return {**obj, "llmsim_version": llmsim_version()}
    return obj


def echo_json(obj: Any) -> None:
    """Print one JSON object (NaN/inf written as null); a dict records llmsim's version."""
    click.echo(json.dumps(clean(versioned(obj)), indent=2))


def clean(obj: Any) -> Any:
    import math

    import numpy as np

    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def table(rows: list[dict]) -> str:
    import pandas as pd

    return pd.DataFrame(rows).to_string(index=False, na_rep="-")


def model_row(m: Any) -> dict:
    return {"id": m.id, "attention": m.attention_kind, "layers": m.num_layers,
            "hidden": m.hidden_size, "params_b": round(m.param_count / 1e9, 2),
            "active_b": round(m.active_param_count / 1e9, 2),
            "kv_bytes_per_token_bf16": int(m.kv_bytes_per_token("bf16")),
            "max_context": m.max_context}


def hw_row(h: Any) -> dict:
    def tf(d: str) -> float | None:
        v = h.peak_flops_per_s.get(d)
        return None if v is None else round(v / 1e12, 1)

    return {"id": h.id, "bf16_tflops": tf("bf16"), "fp8_tflops": tf("fp8"),
            "hbm_gb": round(h.hbm_capacity_bytes / 1e9, 1),
            "hbm_tb_s": round(h.hbm_bandwidth_bytes_per_s / 1e12, 2),
            "link_gb_s": round(h.link_bandwidth_bytes_per_s / 1e9, 1),
            "tdp_w": h.tdp_w, "usd_per_hour": h.price_per_gpu_hour_usd,
            "aliases": ", ".join(h.aliases)}


def fmt_num(x: float, unit: str = "") -> str:
    """Engineering notation: 1.23 T, 456 G ..."""
    import math

    if x == 0 or not math.isfinite(x):
        return f"{x:g} {unit}".rstrip()
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}".rstrip()


def echo_hardware_notices(hardware: Any, notes: Any = ()) -> None:
    """One line per chip whose efficiencies were copied from another (no measurement of it):
    "<id>: efficiencies copied from X, unvalidated". Every report that prices a chip prints it.
    `notes`: the runs' own cost-model notes (an engine's numbers copied from another chip
    family, a format priced at another's rate), each printed once after the chips' notices."""
    from simulator.specs.catalog import load_hardware
    from simulator.specs.checks import SpecError

    ids = [hardware] if isinstance(hardware, str) else list(hardware)
    said = set()
    for hw in dict.fromkeys(str(h) for h in ids if h):
        try:
            notice = load_hardware(hw).efficiency_notice()
        except SpecError:
            continue
        if notice:
            said.add(notice)
            click.echo(f"note: {notice}")
    for note in dict.fromkeys(str(n) for n in notes):
        if note not in said:
            click.echo(f"note: {note}")


def print_prediction(r: dict[str, Any]) -> None:
    import math

    from simulator.cost.predict import top_ops

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
            click.echo(f"  {o['name']:<20s}{o['time_ms']:10.3f}{share:8.1%}{fmt_num(o['flops']):>12s}"
                       f"{fmt_num(o['bytes'], 'B'):>12s}  {o['bound']}")
    if r["notes"]:
        click.echo("\nnotes:")
        for n in r["notes"]:
            click.echo(f"  - {n}")


def write_json(path: Any, obj: Any) -> None:
    write_atomic(path, json.dumps(clean(versioned(obj)), indent=2) + "\n")


def write_csv(path: Any, df: Any) -> None:
    write_atomic(path, df.to_csv(index=False))


class Progress:
    """Progress of a run on stderr, as a `(done, total)` callback; nothing when quiet.

    On a terminal: a tqdm bar with rate and ETA (the total may grow, e.g. a sweep's bisection
    probes; the bar follows it). Elsewhere (a log file, CI): one plain line at most every
    `LOG_INTERVAL_S` seconds with done/total, elapsed and ETA, and no line at all for a run
    shorter than that, so a log never fills with "1/1 done ... 15/15 done" lines.
    """

    LOG_INTERVAL_S = 10.0

    def __init__(self, label: str, quiet: bool, stream: Any = None, clock: Any = None) -> None:
        import time

        self.label = label
        self.quiet = quiet
        self.stream = stream
        self.clock = clock or time.monotonic
        self.bar: Any = None
        self.start: float | None = None
        self.last_line = 0.0

    def __call__(self, done: int, total: int) -> None:
        if self.quiet or total <= 0:
            return
        stream = self.stream or sys.stderr
        if self.start is None:
            self.start = self.last_line = self.clock()
        if stream.isatty():
            self._bar(stream, done, total)
        else:
            self._log(stream, done, total)

    def _bar(self, stream: Any, done: int, total: int) -> None:
        from tqdm import tqdm

        if self.bar is None:
            self.bar = tqdm(total=total, initial=0, desc=self.label, file=stream, unit="sim",
                            dynamic_ncols=True, leave=True)
        if self.bar.total != total:
            self.bar.total = total
        self.bar.update(done - self.bar.n)
        if done >= total:  # a later call (a grown total) opens a new bar
            self.bar.close()
            self.bar = None

    def _log(self, stream: Any, done: int, total: int) -> None:
        from tqdm import tqdm

        now = self.clock()
        if now - self.last_line < self.LOG_INTERVAL_S:
            return
        self.last_line = now
        line = tqdm.format_meter(done, total, now - (self.start or now), prefix=self.label, unit="sim",
                                 bar_format="{desc}: {n_fmt}/{total_fmt} [{elapsed} elapsed, ETA {remaining}]")
        stream.write(line + "\n")
        stream.flush()


def _print_api_server(s: dict[str, Any], line: Any) -> None:
    """The API server's part of the report: its latency and tokenizer (in every TTFT and E2E),
    with its event loop's time per streamed output where it has one, and how much the loop
    merged when it could not keep up with the engine."""
    stream = f", streaming {s['stream_output_us']:g} us/output" if s["stream_output_us"] else ""
    if (s.get("api_servers") or 1) > 1:
        stream += f", {s['api_servers']} API servers"
    line("API server + tokenizer (ms, mean):",
         f"{s['api_server_latency_ms']:.2f} + {s['tokenizer_mean_ms']:.2f}{stream}", "{:<40} {:<10}")
    if s.get("stream_merged_fraction"):
        line("API server loop behind the engine:",
             f"{100 * s['stream_merged_fraction']:.1f} % of tokens merged into waiting chunks", "{:<40} {:<10}")


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
    if s.get("weights_format"):
        click.echo(f"{'Weights / activations / KV cache:':<40} {s['weights_format']} / {s.get('activations_format')} / "
                   f"{s.get('kv_cache_format')}")
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
    if s.get("api_server_latency_ms") is not None:  # in every TTFT and E2E above (client_view.py)
        _print_api_server(s, line)
    line("Mean batch size (seqs/step):", s["mean_batch_size"])
    line("Peak KV-cache utilisation:", s["peak_kv_utilization"])
    line("Preemptions:", s["preemptions"])
    line("KV capacity per replica (tokens):", s.get("kv_capacity_tokens_per_replica"))
    if s.get("mfu_mean") is not None:  # simulator.cost.utilization: time-weighted over busy steps
        line("MFU mean / p50 / p99 (busy steps):", f"{s['mfu_mean']:.3f} / {s['mfu_p50']:.3f} / {s['mfu_p99']:.3f}", "{:<40} {:<10}")
        line("MBU mean / p50 / p99 (busy steps):", f"{s['mbu_mean']:.3f} / {s['mbu_p50']:.3f} / {s['mbu_p99']:.3f}", "{:<40} {:<10}")
        line("MFU prefill + decode (mean):", f"{s['mfu_prefill_mean']:.3f} + {s['mfu_decode_mean']:.3f}", "{:<40} {:<10}")
        line("MBU prefill + decode (mean):", f"{s['mbu_prefill_mean']:.3f} + {s['mbu_decode_mean']:.3f}", "{:<40} {:<10}")
    if s.get("joules_per_output_token") is not None:  # rough: simulator.metrics.energy, docs/concepts.md
        line("Energy (J/output token, rough):", s["joules_per_output_token"])
        line("Electricity ($/M output tokens):", s["energy_usd_per_million_output_tokens"], "{:<40} {:<10.4f}")
    line("GPU-hours ($/M output tokens):", s.get("gpu_usd_per_million_output_tokens"))
    if s.get("spec_decode_num_drafts") is not None:  # serving/speculative.py: vLLM's spec-decode counters
        click.echo("{s:{c}^{n}}".format(s="Speculative Decoding", n=50, c="-"))
        line("Acceptance rate (%):", s["spec_decode_acceptance_rate"])
        line("Acceptance length (tokens/step):", s["spec_decode_acceptance_length"])
        line("Drafts:", s["spec_decode_num_drafts"])
        line("Draft tokens:", s["spec_decode_draft_tokens"])
        line("Accepted tokens:", s["spec_decode_accepted_tokens"])
        line("Per-position acceptance:", " ".join(f"{r:.3f}" for r in s["spec_decode_per_position_acceptance_rates"]),
             "{:<40} {:<10}")
    if s.get("unstable"):
        why = f" ({', '.join(s['unstable_signals'])})" if s.get("unstable_signals") else ""
        click.echo(f"UNSTABLE{why}: offered {s['offered_rate']:.3g} req/s exceeds capacity "
                   f"(achieved {s['achieved_rate']:.3g} req/s); latencies grow with run length")
    for reason, count in (s.get("failed_reasons") or {}).items():
        click.echo(f"rejected x{count}: {reason}")
    for note in s.get("notes") or []:
        click.echo(f"note: {note}")
    click.echo("=" * 50)


def print_sweep(result: dict[str, Any]) -> None:
    """Per curve: a table of the sampled points, then the knee/saturation/capacity lines."""
    import math

    def num(v: Any, fmt: str) -> str:
        return format(v, fmt) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else "-"

    sc = result["scenario"]
    echo_hardware_notices(result["hardware"], (n for p in result.get("points", []) for n in p.get("notes") or []))
    click.echo(f"{result['model']} on {result['hardware']}  workload {result['workload']}  "
               f"{sc['num_requests']} requests per point"
               + (f"  SLOs {' '.join(f'{k}:{v:g}ms' for k, v in result['goodput_slos_ms'].items())}"
                  if result["goodput_slos_ms"] else ""))
    for info in result["curves"]:
        click.echo("")
        click.echo("{s:{c}^{n}}".format(s=f" {info['curve']} ", n=78, c="="))
        slos = bool(result["goodput_slos_ms"])
        click.echo(f"{'rate/s':>9} {'achieved/s':>10} {'p99 TTFT ms':>12} {'p99 TPOT ms':>12} "
                   f"{'good frac':>9}  {'unstable':<8} " + (f"{'binds':<5} " if slos else "") + "point")
        for p in result["points"]:
            if p["curve"] != info["curve"]:
                continue
            flag = ("stopped" if p.get("stopped_early") else "UNSTABLE" if p.get("unstable")
                    else ("sat" if p.get("saturated") else ""))
            binds = f"{(p.get('binding_slo') or '-').upper():<5} " if slos else ""
            click.echo(f"{p['rate']:9.4g} {num(p.get('achieved_rate'), '10.4g'):>10} "
                       f"{num(p.get('p99_ttft_ms'), '12.1f'):>12} {num(p.get('p99_tpot_ms'), '12.2f'):>12} "
                       f"{num(p.get('good_fraction'), '9.3f'):>9}  {flag:<8} {binds}{p.get('kind', '')}")
        click.echo(f"  offline max throughput: {num(info['offline_max_throughput'], '.4g')} req/s "
                   f"(every request at t = 0; analytic bound {num(info.get('analytic_bound'), '.4g')} req/s)")
        if info["saturation_rate"] is not None:
            first = min(info["saturated_rates"])
            click.echo(f"  saturation rate:        {info['saturation_rate']:.4g} req/s (max achieved; "
                       f"saturated from offered {first:.4g} req/s)")
        else:
            click.echo(f"  saturation rate:        not reached; achieved up to "
                       f"{num(info['saturation_lower_bound'], '.4g')} req/s")
        click.echo(f"  max stable rate:        {num(info['max_stable_rate'], '.4g')} req/s "
                   "(no growing queue, batch, TTFT or TPOT; at most the saturation rate)")
        if info["knee"]:
            click.echo(f"  knee:                   {info['knee']['rate']:.4g} req/s "
                       f"({info['knee_metric']} {info['knee']['value']:.1f}; max curvature, Kneedle)")
        else:
            click.echo(f"  knee:                   none in {info['knee_metric']} (flat or straight curve, "
                       "or fewer than 3 stable points)")
        if info["slo_capacity"] is not None:
            from simulator.analysis.capacity import binding_text

            stopped = info.get("probes_stopped_early") or 0
            click.echo(f"  SLO capacity:           {info['slo_capacity']:.4g} req/s "
                       f"(good fraction >= {info['slo_target']:g}; fails at {info['slo_capacity_upper']:.4g}; "
                       f"tolerance {info['slo_tolerance']:.0%}, {info['bisection_probes']} bisection probes"
                       + (f", {stopped} stopped early" if stopped else "") + ")")
            click.echo(f"  binding SLO:            {binding_text(info.get('binding'), info['slo_target'])}")
        else:
            click.echo(f"  SLO capacity:           - ({info['slo_note']})")
        for w in info["warnings"]:
            click.echo(f"  warning: {w}")


def sweep_frame(points: list[dict[str, Any]]) -> Any:
    """One row per point; nested values (SLOs, rejection reasons, notes) as JSON text."""
    import pandas as pd

    rows = [{k: (json.dumps(clean(v)) if isinstance(v, (dict, list)) else v) for k, v in p.items()}
            for p in points]
    return pd.DataFrame(rows)


def short(text: str, n: int = 70) -> str:
    """`text` cut to `n` characters (ending in "...")."""
    return text if len(text) <= n else text[: n - 3] + "..."


def error_table(result: dict[str, Any]) -> str:
    """`llmsim validate`'s error table (median / p90 APE, mean signed error by group)."""
    from simulator.analysis.validate import summary_table

    rows = summary_table(result)
    for r in rows:
        r["name"] = short(str(r["name"]))
    return table(rows)


def skip_summary(skipped: list[dict[str, Any]]) -> list[str]:
    """One line per skip reason, most rows first, with an example row id: what each missing
    feature costs ("412 rows skipped: hardware sn40l not in the catalog")."""
    from simulator.analysis.validate import skip_counts

    return [f"{c['rows']} rows skipped: {c['reason']} (e.g. {c['example']})" for c in skip_counts(skipped)]


def pct(x: Any) -> str:
    """A percentage with one decimal, or "n/a"."""
    return "n/a" if x is None else f"{x:.1f} %"


def fmt(v: Any, spec: str, dash: str = "-") -> str:
    """`v` formatted by `spec`, or `dash` when it is not a finite number."""
    import math

    return format(v, spec) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else dash


def _capacity_cell(c: dict[str, Any]) -> str:
    """A plan row's capacity per replica: '14.1', or '9.75-12.3' while its bracket is wider than
    the tolerance (the bracket already fixes the replica count; analysis/plan.py)."""
    if c.get("capacity_refined") is False:
        return f"{fmt(c['slo_capacity'], '.3g')}-{fmt(c.get('slo_capacity_upper'), '.3g')}"
    return fmt(c["slo_capacity"], ".3g")


def _ep(c: dict[str, Any]) -> str:
    """' ep=4' for a plan row with expert parallelism, else ''."""
    return f" ep={c['ep']}" if c.get("ep", 1) != 1 else ""


def print_plan(r: dict[str, Any]) -> None:
    slos = " ".join(f"{k}:{v:g}ms" for k, v in r["goodput_slos_ms"].items())
    cands = [c for c in r.get("candidates", []) if isinstance(c, dict)]
    echo_hardware_notices((c["hardware"] for c in cands), (n for c in cands for n in c.get("notes") or []))
    click.echo(f"plan: {r['model']} at {r['rate']:g} req/s of {r['workload']} "
               f"(mean {r['mean_input_tokens']:.0f} in / {r['mean_output_tokens']:.0f} out tokens), "
               f"SLOs {slos} for >= {r['slo_target']:g} of requests, headroom {r['headroom']:.0%}, "
               f"{r['num_requests_per_point']} requests per simulation")
    rows = [{"rank": c["rank"], "hardware": c["hardware"], "tp": c["tp"],
             **({"ep": c["ep"]} if "ep" in c else {}),  # MoE models: the EP variants (plan.py)
             **({"pp": c["pp"]} if c["pp"] != 1 else {}),
             "weights": c["weight_dtype"], "kv": c["kv_dtype"],
             "req/s/replica": _capacity_cell(c), "binds": (c.get("binding_slo") or "-").upper(),
             "replicas": c["replicas"], "sized by": "pool" if c.get("replicas_verified") else "1 replica",
             "GPUs": c["gpus"], "$/h": fmt(c["cost_per_hour_usd"], ".2f"),
             "$/M out tok": fmt(c["cost_per_million_output_tokens_usd"], ".3f")} for c in r["candidates"]]
    click.echo("")
    click.echo(table(rows) if rows else "no feasible candidate")
    if any(not c.get("replicas_verified") for c in r["candidates"]):
        click.echo("sized by 1 replica: ceil(rate / (capacity x (1 - headroom))), not simulated as a pool "
                   "(with one replica fewer it would still not beat the cheapest pooled one)")
    if r["infeasible"]:
        click.echo("")
        click.echo("infeasible:")
        for c in r["infeasible"]:
            click.echo(f"  {c['hardware']} tp={c['tp']}{_ep(c)} weights {c['weight_dtype']} kv {c['kv_dtype']}: "
                       f"{c['reason']}")
    for c in r["candidates"]:
        for w in c.get("warnings") or []:
            click.echo(f"warning: {c['hardware']} tp={c['tp']}{_ep(c)}: {w}")
    if r["best"]:
        from simulator.analysis.capacity import binding_text

        b = r["best"]
        click.echo(f"\ncheapest: {b['replicas']} x {b['hardware']} tp={b['tp']}{_ep(b)} ({b['gpus']} GPUs), "
                   f"${fmt(b['cost_per_hour_usd'], '.2f')}/h, "
                   f"${fmt(b['cost_per_million_output_tokens_usd'], '.3f')} per million output tokens")
        click.echo(f"binding SLO: {binding_text(b.get('binding'), r['slo_target'])}")
        if b.get("pool_note"):
            click.echo(f"pooled: {b['pool_note']} (rate / (1 - {r['headroom']:.0%} headroom), "
                       f"{b['replicas']} replicas behind the router)")
        wh = b.get("without_headroom")
        if wh is not None:
            verdict = "meet" if wh["meets_slo"] else "do not meet"
            why = (f"stopped early: {wh['stopped_early']['reason']}" if wh.get("stopped_early")
                   else f"good fraction {fmt(wh.get('good_fraction'), '.3f')}")
            click.echo(f"without the headroom: {wh['replicas']} replicas {verdict} the SLOs at {r['rate']:g} req/s "
                       f"({why})")
    if r.get("expert_parallel"):  # MoE models: does EP (ep = tp) win?
        click.echo(r["expert_parallel"]["note"])


def write_whatif_files(out_dir: str | None, stem: str, result: dict[str, Any], rows: list[dict[str, Any]], png: bytes) -> None:
    from pathlib import Path

    import pandas as pd

    from simulator.cli.outputs import OutputSet

    with OutputSet(Path(str(out_dir))) as d:
        write_json(d / f"{stem}.json", result)
        flat = [{k: (json.dumps(clean(v)) if isinstance(v, (dict, list)) else v) for k, v in r.items()} for r in rows]
        write_csv(d / f"{stem}.csv", pd.DataFrame(flat))
        write_atomic(d / f"{stem}.png", png)


def print_validation(result: dict[str, Any], file: str, out_dir: str | None) -> None:
    """`llmsim validate`: rows predicted, the error table by group, skipped rows."""
    click.echo(f"{file}: {result['predicted']} of {result['rows']} rows predicted, {len(result['skipped'])} skipped")
    if result["predicted"]:
        from simulator.analysis.validate import metric_table

        click.echo(error_table(result))
        if result["predicted"] <= 60:  # measured vs predicted, metric by metric
            click.echo("\n" + table(metric_table(result)))
    for line in skip_summary(result["skipped"]):
        click.echo(line)
    echo_hardware_notices(result.get("by_hardware", {}))
    if out_dir:
        click.echo(f"wrote {out_dir}/validation.csv, scatter.png")


def _fitted_from(k: str, res: dict[str, Any], ops: str | None) -> str:
    """Where calibration took parameter `k` from (the table's "fitted from" column)."""
    if k not in res["fitted"]:
        tied = k == "attention_efficiency" and "attention_efficiency" in res["sources"]
        return "tied to compute_efficiency" if tied else "fixed"
    if k in ("compute_efficiency", "memory_efficiency", "step_overhead_s", "attention_efficiency"):
        return "measurements"
    if "capped" in res["sources"].get(k, "") and not ops:
        return "capped: stays bandwidth-bound"
    return "vidur"


def print_calibration(res: dict[str, Any], file: str, out: str, ops: str | None) -> None:
    """`llmsim calibrate`: parameters before/after, error before/after, leave-one-source-out."""
    from simulator.analysis.calibrate import ALL_PARAMS

    click.echo(f"calibrated {res['hardware']} on {res['rows_used']} rows of {file} "
               f"({res['objective']}{', sources weighted equally' if res['balance_sources'] else ''})")
    prows = [{"parameter": k, "before": f"{res['previous'][k]:.4g}", "after": f"{res['params'][k]:.4g}",
              "fitted from": _fitted_from(k, res, ops)} for k in ALL_PARAMS]
    click.echo(table(prows))
    for name, st in res["stages"].items():
        if st:
            click.echo(f"{name} stage: {st['points']} points, median APE {pct(st['before']['median_ape'])} -> "
                       f"{pct(st['after']['median_ape'])}")
    b, a = res["before"], res["after"]
    click.echo(f"error on {a['predicted']} rows: median APE {pct(b['median_ape'])} -> {pct(a['median_ape'])}, "
               f"p90 {pct(b['p90_ape'])} -> {pct(a['p90_ape'])}, mean signed "
               f"{pct(b['mean_signed_error'])} -> {pct(a['mean_signed_error'])}")
    if res["leave_one_source_out"]:
        click.echo("leave-one-source-out (fit on the others, error on the held-out source):")
        click.echo(table([{"held-out source": short(x["source"]), "rows": x["rows"],
                            "median_ape_%": round(x["median_ape"], 1),
                            "mean_signed_error_%": round(x["mean_signed_error"], 1)}
                           for x in res["leave_one_source_out"]]))
        click.echo(f"leave-one-source-out median APE (median over sources): "
                   f"{pct(res['leave_one_source_out_median_ape'])}")
    click.echo(f"wrote {out}")


def _kv_gain_words(g: dict[str, Any]) -> str:
    """Where a KV format's throughput change comes from, in words."""
    step, total = g["from_step_time_same_batch"], g.get("total")
    if step <= 1.0:
        slower = f"the same batch steps {(1.0 / step - 1.0) * 100:.1f} % slower: no bandwidth gain"
        if total is not None and total < 1.0:
            return (f"a net loss here: the admitted batch grows x{g['from_admitted_batch']:.2f} but {slower}; "
                    "any gain would come from the admitted batch (more sequences), not from bandwidth")
        return f"the gain comes from the admitted batch, not from bandwidth ({slower})"
    return (f"the gain comes from the admitted batch and from the smaller KV read (the same batch steps "
            f"{(1.0 - 1.0 / step) * 100:.1f} % faster)")


def print_kv_whatif(r: dict[str, Any], static_only: bool, out_dir: str | None) -> None:
    """`llmsim whatif kv-dtype`: one row per KV-cache format, ratios to the first."""
    echo_hardware_notices(r["hardware"])
    click.echo(f"KV-cache format what-if: {r['model']} on {r['hardware']} tp={r['tp']}, {r['workload']} "
               f"(mean {r['mean_input_tokens']} in / {r['mean_output_tokens']} out; sequences of {r['seq_len']} tokens)")
    rows = []
    for v in r["values"]:
        q = v["ratios"]
        rows.append({"kv": v["kv_dtype"], "KV tokens": v["kv_capacity_tokens"],
                     "x": fmt(q["kv_capacity_tokens"], ".2f"), "seqs": v["max_concurrent_sequences"],
                     "TPOT b=1 ms": fmt(v.get("tpot_ms_batch1"), ".2f"),
                     "batch": v.get("capacity_batch", "-"), "TPOT@batch ms": fmt(v.get("tpot_ms_capacity_batch"), ".2f"),
                     "decode tok/s": fmt(v.get("decode_tokens_per_s_capacity_batch"), ".0f"),
                     "x ": fmt(q["decode_tokens_per_s_capacity_batch"], ".2f"),
                     "sat req/s": fmt(v.get("saturation_rate"), ".3g"), "x  ": fmt(q["saturation_rate"], ".2f"),
                     "SLO cap req/s": fmt(v.get("slo_capacity_rate"), ".3g"),
                     "x   ": fmt(q["slo_capacity_rate"], ".2f")})
    click.echo(table(rows))
    click.echo("(x = ratio to the first format; batch = min(max_num_seqs, concurrent sequences))")
    ref = r["values"][0]
    for v in r["values"][1:]:
        g, q = v.get("gain") or {}, v["ratios"]
        if g.get("from_admitted_batch") is None or g.get("from_step_time_same_batch") is None:
            continue
        click.echo(f"{v['kv_dtype']} vs {ref['kv_dtype']}: capacity x{fmt(q['kv_capacity_tokens'], '.2f')}; "
                   f"latency (TPOT) x{fmt(q['tpot_ms_batch1'], '.3f')} at batch 1 and "
                   f"x{fmt(q['tpot_ms_reference_batch'], '.3f')} at batch {v['reference_batch']}; decode throughput "
                   f"x{fmt(g['total'], '.2f')} = admitted batch x{fmt(g['from_admitted_batch'], '.2f')} "
                   f"({ref.get('capacity_batch')} -> {v.get('capacity_batch')}) and step time at the same batch "
                   f"x{fmt(g['from_step_time_same_batch'], '.2f')}: {_kv_gain_words(g)}. "
                   f"Attention: {v.get('attention_path')}")
    for v in r["values"]:
        if v.get("reason"):
            click.echo(f"{v['kv_dtype']}: {v['reason']}")
        if v.get("slo_note") and v.get("slo_capacity_rate") is None and not static_only:
            click.echo(f"{v['kv_dtype']}: SLO capacity: {v['slo_note']}")
        for w in v.get("warnings") or []:
            click.echo(f"warning: {v['kv_dtype']}: {w}")
    if out_dir:
        click.echo(f"wrote {out_dir}/kv_dtype.json, kv_dtype.csv, kv_dtype.png")


def print_speculative_whatif(r: dict[str, Any], out_dir: str | None) -> None:
    """`llmsim whatif speculative`: per-user speed and total throughput against concurrency,
    plain and speculative, the crossover marked."""
    echo_hardware_notices(r["hardware"])
    rates = ", ".join(f"{a:.3g}" for a in r["acceptance"])
    click.echo(f"speculative decoding what-if: {r['model']} on {r['hardware']} tp={r['tp']}, {r['method']} "
               f"k={r['num_speculative_tokens']} (draft tp={r['draft_tp']}), conditional acceptance [{rates}] -> "
               f"{r['mean_acceptance_length']:.3g} tokens per verify step; workload {r['workload']} "
               f"(mean {r['mean_input_tokens']} in / {r['mean_output_tokens']} out), closed loop")
    cross = r["crossover_concurrency"]
    click.echo(table([{"conc": str(x["concurrency"]) + (" <" if x["concurrency"] == cross else ""),
                        "user tok/s plain": fmt(x["plain_per_user_tokens_per_s"], ".1f"),
                        "user tok/s spec": fmt(x["speculative_per_user_tokens_per_s"], ".1f"),
                        "x user": fmt(x["per_user_speedup"], ".2f"),
                        "total tok/s plain": fmt(x["plain_output_throughput"], ".0f"),
                        "total tok/s spec": fmt(x["speculative_output_throughput"], ".0f"),
                        "x total": fmt(x["throughput_speedup"], ".2f"),
                        "accept len": fmt(x["measured_acceptance_length"], ".2f"),
                        "verify tokens": fmt(x["verify_tokens"], ".0f"),
                        "verify bound": x["verify_bound"]} for x in r["rows"]]))
    if cross is None:
        click.echo(f"speculative decoding raises total throughput at every concurrency up to {r['rows'][-1]['concurrency']}")
    else:
        click.echo(f"crossover: total throughput with speculative decoding falls below plain at concurrency {cross} (<)")
    user = r["per_user_crossover_concurrency"]
    click.echo("per-user speed: " + (f"speculative is slower from concurrency {user}" if user is not None
                                     else "speculative is faster at every concurrency tried"))
    for w in r["warnings"]:
        click.echo(f"warning: {w}")
    click.echo(f"KV capacity: plain {r['kv_capacity_tokens']['plain']} tokens, with the draft "
               f"{r['kv_capacity_tokens']['speculative']} tokens")
    for n in r["notes"]:
        click.echo(f"note: {n}")
    if out_dir:
        click.echo(f"wrote {out_dir}/speculative.json, speculative.csv, speculative.png")


def print_hardware_whatif(r: dict[str, Any], out_dir: str | None) -> None:
    """`llmsim whatif hardware`: one row per accelerator (fit, latency, capacity, cost)."""
    rate = r.get("rate")
    echo_hardware_notices(h["hardware"] for h in r["hardware"] if isinstance(h, dict))
    click.echo(f"hardware what-if: {r['model']} tp={r['tp']}, {r['workload']}"
               + (f" at {rate:g} req/s" if rate else " (trace timing)"))
    click.echo(table([{"hardware": h["hardware"], "fits": "yes" if h.get("fits") else "no",
                        "KV tokens": h.get("kv_capacity_tokens", "-"),
                        "p50 TTFT": fmt(h.get("p50_ttft_ms"), ".1f"), "p99 TTFT": fmt(h.get("p99_ttft_ms"), ".1f"),
                        "p50 TPOT": fmt(h.get("p50_tpot_ms"), ".2f"), "p99 TPOT": fmt(h.get("p99_tpot_ms"), ".2f"),
                        "sat req/s": fmt(h.get("saturation_rate"), ".3g"),
                        "SLO cap req/s": fmt(h.get("slo_capacity_rate"), ".3g"),
                        "$/h": fmt(h.get("cost_per_hour_usd"), ".2f"),
                        "$/M tok": fmt(h.get("cost_per_million_output_tokens_usd"), ".3f"),
                        "$/M tok @cap": fmt(h.get("cost_per_million_output_tokens_at_slo_capacity_usd"), ".3f")}
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


def print_yaml(obj: Any) -> None:
    """`llmsim show`: the object as block YAML (NaN/inf as null)."""
    import yaml

    click.echo(yaml.safe_dump(clean(obj), sort_keys=False, width=100).rstrip())


def check_vllm_result(sc: Any, opts: dict[str, Any]) -> None:
    """Before the run: the result-file options vLLM parses (--percentile-metrics,
    --metric-percentiles, --metadata) and the full default file name (vLLM's, with --label at
    its start and the date last: at most 255 bytes), so a bad one cannot lose the run."""
    from datetime import datetime
    from pathlib import Path

    from simulator.cli import outputs
    from simulator.cli import vllm_result as vr
    from simulator.specs.catalog import load_model
    from simulator.specs.checks import SpecError

    vr.check_result_options(sc, opts.get("percentile_metrics"),
                            _metric_percentiles(opts), opts.get("metadata") or ())
    if opts.get("result_filename") is None:
        header = vr.result_header(sc, load_model(sc.model), label=opts.get("label"), when=datetime.now())
        outputs.check_file_name("--label", vr.result_filename(header))
    elif opts.get("append_result"):  # the file appended to is read after the run: read it now
        path = Path(opts.get("result_dir") or ".") / opts["result_filename"]
        if path.is_file():
            try:
                path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as e:
                raise SpecError(f"--append-result: cannot read {path} ({e})") from None


def _metric_percentiles(opts: dict[str, Any]) -> str:
    """--metric-percentiles as given; its default only when absent (an empty value was run as
    the default, 99, without a word: it is refused by the parser as vLLM's float('') fails)."""
    from simulator.cli import vllm_result as vr

    given = opts.get("metric_percentiles")
    return vr.DEFAULT_METRIC_PERCENTILES if given is None else given


def save_vllm_result(sc: Any, res: Any, opts: dict[str, Any]) -> Any:
    """Write the run as `vllm bench serve --save-result` would (simulator.cli.vllm_result):
    one JSON line, as vLLM's `json.dump`; `append_result` adds a newline and the object to an
    existing file, as vLLM's --append-result does. `opts`: result_dir, result_filename,
    percentile_metrics, metric_percentiles, label, save_detailed, metadata, append_result.
    Returns the path."""
    from pathlib import Path

    from simulator.cli import vllm_result as vr

    result = vr.result_json(sc, res, sc.cost_model().model, version=llmsim_version(),
                            percentile_metrics=opts.get("percentile_metrics"),
                            metric_percentiles=_metric_percentiles(opts),
                            label=opts.get("label"), save_detailed=bool(opts.get("save_detailed")),
                            metadata=opts.get("metadata") or ())
    path = Path(opts.get("result_dir") or ".") / (opts.get("result_filename") or vr.result_filename(result))
    text = json.dumps(clean(result))
    if opts.get("append_result") and path.is_file():
        try:
            old = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise click.ClickException(f"--append-result: cannot read {path} ({e})") from None
        text = old + ("\n" if old else "") + text
    write_atomic(path, text)
    return path


def write_validation_points(path: str, result: dict[str, Any]) -> None:
    """`llmsim validate --points FILE`: one CSV row per predicted point with every setting
    (chip, engine and its family, dtypes, tp/pp, batch, concurrency, lengths, limits, note)."""
    from pathlib import Path

    from simulator.analysis.validate import points_frame

    write_csv(Path(path), points_frame(result, full=True))


def write_validation_files(out_dir: str, result: dict[str, Any], file: str,
                           names: tuple[str, ...] = ("validation.csv", "scatter.png")) -> None:
    """`llmsim validate --out DIR`: validation.csv (one row per predicted point) and scatter.png
    (`names`: the command's, checked before the run)."""
    from pathlib import Path

    from simulator.analysis.validate import points_frame
    from simulator.cli import plots
    from simulator.cli.outputs import OutputSet

    with OutputSet(Path(out_dir)) as d:
        validation_csv, scatter_png = names
        write_csv(d / validation_csv, points_frame(result))
        write_atomic(d / scatter_png, plots.validation_scatter_png(
            result["points"], f"llmsim vs {Path(file).name}: median APE {pct(result['median_ape'])}, "
                              f"p90 {pct(result['p90_ape'])} ({result['predicted']} rows)"))


def print_sharegpt_table(table: Any, out: str) -> None:
    """`llmsim sharegpt-table`: one line saying what was written."""
    click.echo(f"wrote {out}: {len(table.prompt_chars)} conversations"
               + (" (source file truncated: read up to its last complete entry)" if table.truncated else ""))


def print_disaggregated(result: dict[str, Any]) -> None:
    """The plan's disaggregated candidates as a table, then which shape wins and why."""
    rows = [{"hardware": r["hardware"], "prefill": f"{r['prefill_replicas']} x TP{r['prefill_tp']}",
             "decode": f"{r['decode_replicas']} x TP{r['decode_tp']}", "GPUs": r["gpus"],
             "$/h": fmt(r["cost_per_hour_usd"], ".2f"), "req/s/prefill": fmt(r["prefill_capacity"], ".3g"),
             "req/s/decode": fmt(r["decode_capacity"], ".3g"), "KV ms": fmt(r["mean_kv_transfer_ms"], ".3g")}
            for r in result["disaggregated"] if r["status"] == "feasible"]
    click.echo("\ndisaggregated:")
    click.echo(table(rows) if rows else "no feasible candidate")
    for r in result["disaggregated"]:
        if r["status"] != "feasible":
            click.echo(f"  {r['hardware']} prefill TP{r['prefill_tp']} decode TP{r['decode_tp']}: {r['reason']}")
    click.echo(f"\n{result['why']}")
