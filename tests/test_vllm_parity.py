"""Issue 16: vLLM's spellings (flags, --goodput, result JSON), SLO presets, KV dtype default."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from simulator.cli.commands import main
from simulator.scenario import Scenario
from simulator.specs.checks import SpecError

DATA = Path(__file__).parent / "data"
SMALL = ["-m", "llama-3.1-8b", "-H", "h100-sxm", "-w", "random", "--input-len", "256", "--output-len", "16"]


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.stdout, r.stderr


# ---- finding 1: e2el (a key with a digit) is accepted everywhere ---------------------------

def test_goodput_e2el_parses():
    from simulator.metrics.slo import parse_goodput

    assert parse_goodput("ttft:500 e2el:2000") == {"ttft": 0.5, "e2el": 2.0}
    assert parse_goodput({"e2el": 1500}) == {"e2el": 1.5}


def test_goodput_e2el_in_python_api_and_yaml(tmp_path):
    assert Scenario(goodput={"e2el": 2000}).goodput == {"e2el": 2000.0}
    assert Scenario(goodput="ttft:500 e2el:2000").goodput == {"ttft": 500.0, "e2el": 2000.0}
    assert Scenario.from_dict({"goodput": {"e2el": 2000}}).slos_s == {"e2el": 2.0}
    y = tmp_path / "s.yaml"
    y.write_text("goodput: {e2el: 2000, ttft: 500}\nnum_requests: 10\nworkload: random\n")
    code, out, err = run("simulate", "-c", str(y), "--json", "-q")
    assert code == 0, err
    assert json.loads(out)["goodput_slos_ms"] == {"e2el": 2000.0, "ttft": 500.0}


def test_goodput_unknown_key_still_one_line():
    from simulator.metrics.slo import parse_goodput

    with pytest.raises(SpecError, match="unknown metric 'e2e'"):
        parse_goodput("e2e:10")


# ---- finding 2: vLLM's space-separated --goodput ------------------------------------------

def test_expand_nargs():
    from simulator.cli.options import expand_nargs

    assert expand_nargs(["--goodput", "ttft:1", "tpot:2", "-q"]) == [
        "--goodput", "ttft:1", "--goodput", "tpot:2", "-q"]
    # a positional argument that is not KEY:VALUE is left alone
    assert expand_nargs(["validate", "f.json", "--goodput", "ttft:1", "x.csv"]) == [
        "validate", "f.json", "--goodput", "ttft:1", "x.csv"]


@pytest.mark.parametrize("form", [
    ["--goodput", "ttft:2000", "tpot:100", "e2el:20000"],
    ["--goodput", "ttft:2000", "--goodput", "tpot:100", "--goodput", "e2el:20000"],
    ["--goodput", "ttft:2000 tpot:100 e2el:20000"],
])
def test_goodput_spellings_agree(form):
    code, out, err = run("simulate", *SMALL, "-n", "20", *form, "--json", "-q")
    assert code == 0, err
    assert json.loads(out)["goodput_slos_ms"] == {"ttft": 2000.0, "tpot": 100.0, "e2el": 20000.0}


# ---- finding 3: KV cache format independent of the activation format ----------------------

def test_fp8_activations_keep_bf16_kv():
    cost = Scenario(weight_dtype="fp8", activation_dtype="fp8").cost_model()
    assert cost.dtypes.kv == "bf16"
    assert Scenario(activation_dtype="fp8", kv_dtype="fp8").cost_model().dtypes.kv == "fp8"


def test_kv_cache_dtype_alias_and_capacity():
    def cap(*extra: str) -> int:
        code, out, err = run("simulate", *SMALL, "-n", "5", "--weight-dtype", "fp8", *extra, "--json", "-q")
        assert code == 0, err
        return json.loads(out)["kv_capacity_tokens_per_replica"]

    bf16 = cap("--kv-dtype", "bf16")
    act8 = cap("--activation-dtype", "fp8")  # a smaller activation reserve only: ~0.5 % more room
    assert act8 == pytest.approx(bf16, rel=0.01)
    fp8 = cap("--activation-dtype", "fp8", "--kv-cache-dtype", "fp8")
    assert fp8 == pytest.approx(2 * act8, rel=0.001)  # 1 byte per element instead of 2


def test_predict_kv_default_bf16():
    code, out, err = run("predict", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--weight-dtype", "fp8",
                         "--activation-dtype", "fp8", "--json")
    assert code == 0, err
    assert json.loads(out)["kv_dtype"] == "bf16"


# ---- vLLM flag aliases and the result JSON ------------------------------------------------

def test_vllm_aliases_equal_llmsim_flags():
    a = run("simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--dataset-name", "random",
            "--random-input-len", "300", "--random-output-len", "20", "--random-range-ratio", "0.1",
            "--num-prompts", "40", "--request-rate", "5", "--json", "-q")
    b = run("simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-w", "random", "--input-len", "300",
            "--output-len", "20", "--range-ratio", "0.1", "-n", "40", "--rate", "5", "--json", "-q")
    assert a[0] == b[0] == 0, a[2] + b[2]
    assert json.loads(a[1]) == json.loads(b[1])


def test_dataset_name_sharegpt_is_the_sharegpt_workload():
    """Issue 14: vLLM's --dataset-name sharegpt runs (no network) and is -w sharegpt."""
    a = run("simulate", "--dataset-name", "sharegpt", "-n", "5", "--json", "-q")
    b = run("simulate", "-w", "sharegpt", "-n", "5", "--json", "-q")
    assert a[0] == 0, a[2]
    assert json.loads(a[1]) == json.loads(b[1]) and json.loads(a[1])["completed"] == 5
    code, _, err = run("simulate", "--dataset-name", "sharegpt", "-w", "random", "-n", "5")
    assert code == 2 and "contradicts --workload" in err


def test_max_concurrency_is_closed_loop_at_rate_inf():
    a = run("simulate", *SMALL, "-n", "30", "--max-concurrency", "4", "--json", "-q")
    b = run("simulate", *SMALL, "-n", "30", "--concurrency", "4", "--json", "-q")
    assert a[0] == 0, a[2]
    assert json.loads(a[1]) == json.loads(b[1])
    # at a finite rate it is a cap on the open loop (tests/test_max_concurrency.py)
    code, out, err = run("simulate", *SMALL, "-n", "30", "--max-concurrency", "4", "--request-rate", "5", "--json")
    assert code == 0, err
    assert json.loads(out)["completed"] == 30 and "mean_client_queue_time_ms" in json.loads(out)


def test_must_show_vllm_command_writes_vllm_keys(tmp_path):
    d = tmp_path / "D"
    code, out, err = run("simulate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--dataset-name",
                         "random", "--random-input-len", "1024", "--random-output-len", "128", "--num-prompts",
                         "500", "--request-rate", "10", "--goodput", "ttft:2000", "tpot:100", "e2el:20000",
                         "--save-result", "--result-dir", str(d))
    assert code == 0, err
    files = list(d.glob("*.json"))
    assert len(files) == 1
    assert files[0].name.startswith("llmsim-10.0qps-Llama-3.1-8B-")
    ours = json.loads(files[0].read_text())
    run_keys = json.loads((DATA / "vllm_bench_serve_run_keys.json").read_text())["keys"]
    # llmsim's own keys are --metadata items (after num_prompts, before the traffic keys)
    assert [k for k in ours if not k.startswith("llmsim_")][:len(run_keys)] == run_keys
    # the hand-written example's keys (tests/data/SOURCES.md): only the --save-detailed lists
    # and the e2el percentiles are missing, which vLLM writes only on request
    real = json.loads((DATA / "vllm_bench_serve_result.json").read_text())
    assert set(real) - set(ours) == {"input_lens", "output_lens", "mean_e2el_ms", "median_e2el_ms", "std_e2el_ms",
                                     "p99_e2el_ms"}
    for k in set(real) & set(ours):  # the same types, so one plotting script reads both
        if real[k] is not None:
            assert isinstance(ours[k], type(real[k])) or {type(ours[k]), type(real[k])} <= {int, float}, k
    assert ours["num_prompts"] == 500 and ours["request_rate"] == 10.0 and ours["max_concurrency"] is None
    assert ours["completed"] == len(ours["latencies"]) == 500
    assert ours["llmsim_version"] and json.loads(ours["llmsim_scenario"])["goodput"]["e2el"] == 20000.0
    code, out, err = run("simulate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--dataset-name",
                         "random", "--random-input-len", "1024", "--random-output-len", "128", "--num-prompts",
                         "500", "--request-rate", "10", "--goodput", "ttft:2000", "tpot:100", "e2el:20000",
                         "--json", "-q")
    assert ours["request_goodput"] == pytest.approx(json.loads(out)["request_goodput"])


def test_percentile_options_and_result_filename(tmp_path):
    code, _, err = run("simulate", *SMALL, "-n", "20", "--percentile-metrics", "ttft,e2el",
                       "--metric-percentiles", "25,50,99.9", "--result-dir", str(tmp_path),
                       "--result-filename", "r.json", "-q")
    assert code == 0, err
    r = json.loads((tmp_path / "r.json").read_text())
    assert {"p25_ttft_ms", "p50_ttft_ms", "p99.9_ttft_ms", "p25_e2el_ms"} <= set(r)
    assert "mean_tpot_ms" not in r and "p99_ttft_ms" not in r
    assert r["request_rate"] == "inf"
    assert r["p25_ttft_ms"] <= r["p50_ttft_ms"] <= r["p99.9_ttft_ms"]
    code, _, err = run("simulate", *SMALL, "-n", "5", "--save-result", "--percentile-metrics", "foo",
                       "--result-dir", str(tmp_path))
    assert code == 2 and "percentile-metrics: 'foo' is not one of" in err


# ---- SLO presets -------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["agent", "batch", "chat", "code"])
def test_slo_preset_sets_goodput(name):
    from simulator.metrics.slo import SLO_PRESETS

    code, out, err = run("simulate", *SMALL, "-n", "10", "--slo", name, "--json", "-q")
    assert code == 0, err
    assert json.loads(out)["goodput_slos_ms"] == SLO_PRESETS[name].goodput_ms


def test_explicit_goodput_overrides_preset():
    code, out, err = run("simulate", *SMALL, "-n", "10", "--slo", "chat", "--goodput", "e2el:9000", "--json", "-q")
    assert code == 0, err
    assert json.loads(out)["goodput_slos_ms"] == {"e2el": 9000.0}
    code, _, err = run("simulate", "--slo", "nope", "-n", "5")
    assert code == 2 and "slo: 'nope' is not a preset; allowed: chat, code, batch, agent" in err


# ---- finding 9 (part): every output JSON records llmsim's version -------------------------

def test_output_json_records_version(tmp_path):
    from importlib.metadata import version

    code, out, err = run("simulate", *SMALL, "-n", "10", "--json", "-q", "--out", str(tmp_path))
    assert code == 0, err
    assert json.loads(out)["llmsim_version"] == version("llmsim")
    assert json.loads((tmp_path / "summary.json").read_text())["llmsim_version"] == version("llmsim")


# ---- finding 9: a real progress bar; quiet logs ----------------------------------------

class _Clock:
    def __init__(self, step: float) -> None:
        self.t, self.step = 0.0, step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


def test_progress_log_has_no_growing_done_lines():
    import io

    from simulator.cli.report import Progress

    buf = io.StringIO()
    p = Progress("sweeping", False, stream=buf, clock=_Clock(0.01))
    for n in range(1, 16):  # a sweep whose total grows with every probe, run in 0.15 s
        p(n, n)
    assert buf.getvalue() == ""
    buf = io.StringIO()
    p = Progress("sweeping", False, stream=buf, clock=_Clock(6.0))  # a slow run: a line per 10 s
    for n in range(1, 6):
        p(n, 10)
    lines = buf.getvalue().splitlines()
    assert lines == ["sweeping: 2/10 [00:12 elapsed, ETA 00:48]", "sweeping: 4/10 [00:24 elapsed, ETA 00:36]"]


def test_progress_tty_is_tqdm_bar_with_eta():
    import io

    from simulator.cli.report import Progress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    buf = Tty()
    p = Progress("simulating", False, stream=buf)
    for n in range(0, 101, 10):
        p(n, 100)
    out = buf.getvalue()
    assert "simulating: 100%" in out and "100/100" in out and "<" in out  # tqdm's elapsed<remaining
    q = Tty()
    Progress("x", True, stream=q)(5, 10)
    assert q.getvalue() == ""


# ---- finding 10: the default executor is not the slower path --------------------------

def _square(x: int) -> int:
    return x * x


def test_default_executor_is_auto_and_serial_on_two_cpus():
    from simulator.analysis.executors import AutoExecutor, make_executor

    ex = make_executor()
    assert isinstance(ex, AutoExecutor)
    two = AutoExecutor(cpus=2, clock=_Clock(100.0))  # every task "takes" 100 s: still no pool on 2 CPUs
    seen = []
    assert two.map(_square, [(i,) for i in range(6)], on_result=lambda i, r: seen.append(i)) == [0, 1, 4, 9, 16, 25]
    assert two._pool is None and seen == list(range(6))


def test_auto_executor_switches_to_pool_when_it_pays():
    from simulator.analysis.executors import AutoExecutor

    fast = AutoExecutor(cpus=4, clock=_Clock(0.001))  # 1 ms tasks: a pool never pays
    assert fast.map(_square, [(i,) for i in range(20)]) == [i * i for i in range(20)]
    assert fast._pool is None
    slow = AutoExecutor(cpus=4, clock=_Clock(2.0))  # 2 s x 5 tasks left > 5 s: pool after one task
    seen: list[int] = []
    try:
        assert slow.map(_square, [(i,) for i in range(6)], on_result=lambda i, r: seen.append(i)) == [
            i * i for i in range(6)]
        assert slow._pool is not None and len(slow.task_s) == 1 and sorted(seen) == list(range(6))
    finally:
        slow.close()


def test_sweep_uses_preset_target_and_knee_metric():
    code, out, err = run("sweep", *SMALL, "-n", "20", "--rates", "2,4", "--slo", "batch", "--json", "-q")
    assert code == 0, err
    r = json.loads(out)
    assert r["slo_target"] == 0.9 and r["knee_metric"] == "p99_e2el_ms"
    assert r["goodput_slos_ms"] == {"e2el": 600000.0}
    code, out, err = run("sweep", *SMALL, "-n", "20", "--rates", "2,4", "--slo", "batch", "--slo-target", "0.5",
                         "--knee-metric", "ttft", "--json", "-q")
    r = json.loads(out)
    assert r["slo_target"] == 0.5 and r["knee_metric"] == "p99_ttft_ms"


# ---- finding 8: plot labels never overlap; the legend hides no point ------------------

def _boxes(fig):
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    return [t.get_window_extent(r) for ax in fig.axes for t in ax.texts if t.get_text()], r


def _overlaps(boxes):
    return [(i, j) for i in range(len(boxes)) for j in range(i + 1, len(boxes)) if boxes[i].overlaps(boxes[j])]


@pytest.fixture(scope="module")
def close_rates_sweep():
    """A real sweep whose SLO capacity (13) and saturation rate (13.1) are 1 % apart."""
    from simulator.analysis import sweep as sw

    sc = Scenario(workload="random", input_len=256, output_len=16, num_requests=60, goodput={"ttft": 2000})
    r = sw.sweep(sc, [2, 6, 10, 14])
    r["curves"][0].update(knee={"rate": 12.9, "metric": "p99_ttft_ms", "value": 50.0},
                          slo_capacity=13.0, saturation_rate=13.1)
    return r


def test_sweep_plots_no_overlapping_labels(close_rates_sweep):
    from simulator.cli import plots

    for make in (plots.sweep_latency_fig, plots.sweep_throughput_fig):
        fig = make(close_rates_sweep)
        boxes, _ = _boxes(fig)
        assert _overlaps(boxes) == [], make.__name__
        labels = [t.get_text() for leg in [*fig.legends, *[a.get_legend() for a in fig.axes if a.get_legend()]]
                  for t in leg.get_texts()]
        assert {"knee 12.9 req/s", "SLO capacity 13 req/s", "saturation 13.1 req/s"} <= set(labels)


def test_throughput_legend_hides_no_point():
    """Goodput past saturation falls into the lower right, where the legend used to sit."""
    from simulator.analysis import sweep as sw
    from simulator.cli import plots

    sc = Scenario(workload="random", input_len=2048, output_len=256, num_requests=100,
                  goodput={"ttft": 500, "tpot": 30})
    r = sw.sweep(sc, [1, 2, 4, 6, 7, 8, 9, 10, 11, 12])
    assert min(p["request_goodput"] for p in r["points"] if p["rate"] >= 11) < 3  # low, at the right
    fig = plots.sweep_throughput_fig(r)
    fig.canvas.draw()
    ax = fig.axes[0]
    leg = ax.get_legend().get_window_extent(fig.canvas.get_renderer())
    for line in ax.lines:
        for x, y in ax.transData.transform(line.get_xydata()):
            assert not leg.contains(x, y)


def test_plan_labels_do_not_overlap():
    from simulator.cli import planplots

    def cand(hw: str, gpus: int, cost: float) -> dict:
        return {"hardware": hw, "tp": 1, "pp": 1, "weight_dtype": "bf16", "kv_dtype": "bf16", "replicas": gpus,
                "slo_capacity": 3.0, "gpus": gpus, "cost_per_hour_usd": cost}

    result = {"model": "m", "rate": 10.0, "workload": "w", "goodput_slos_ms": {"ttft": 500}, "headroom": 0.2,
              "candidates": [cand("h100-sxm", 4, 10.0), cand("h100-sxm", 4, 10.0), cand("a100-sxm-80gb", 4, 10.2),
                             cand("l40s", 5, 10.1), cand("h200", 4, 10.4)]}
    fig = planplots.plan_fig(result)
    boxes, _ = _boxes(fig)
    assert len(boxes) == 4  # the two coincident candidates share the label "1,2"
    assert _overlaps(boxes) == []


# ---- finding 7: an SLO capacity above the saturation rate is flagged -------------------

def test_capacity_above_saturation_warns():
    from simulator.analysis.sweep import _warn_capacity_above_saturation

    info = {"slo_capacity": 1.712, "saturation_rate": 1.408, "warnings": []}
    _warn_capacity_above_saturation(info, 100)
    assert info["warnings"] == [
        "SLO capacity 1.712 req/s is above the saturation rate 1.408 req/s: with 100 requests per point the "
        "queue has no time to build, so the SLO capacity is optimistic; raise --num-requests until it falls "
        "below the saturation rate"]
    ok = {"slo_capacity": 1.4, "saturation_rate": 1.59, "warnings": []}
    _warn_capacity_above_saturation(ok, 400)
    assert ok["warnings"] == []


def test_readme_whatif_short_run_is_flagged():
    code, out, err = run("whatif", "kv-dtype", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-w", "random",
                         "--input-len", "8192", "--output-len", "512", "-n", "100", "--values", "bf16",
                         "--goodput", "ttft:4000", "tpot:100", "--serial", "--json")
    assert code == 0, err
    row = json.loads(out)["values"][0]
    assert row["slo_capacity_rate"] > row["saturation_rate"]
    assert any("above the saturation rate" in w for w in row["warnings"])


# ---- finding 6: docs point at files that exist and at commands that work ---------------

def test_docs_point_at_real_things():
    root = Path(__file__).resolve().parent.parent
    texts = {p: p.read_text(encoding="utf-8") for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))]}
    import simulator.analysis.executors as ex_mod
    import simulator.cli.commands as cli_mod

    texts[Path(cli_mod.__file__)] = Path(cli_mod.__file__).read_text(encoding="utf-8")
    texts[Path(ex_mod.__file__)] = Path(ex_mod.__file__).read_text(encoding="utf-8")
    for p, t in texts.items():
        assert "reference/measurements/SCHEMA.md" not in t, p
        assert "pip install llmsim[dask]" not in t, p
        assert not re.search(r"llmsim (predict|roofline) [^\n`]* -g ", t), p  # -H, as every other command


# ---- energy and cost per token (simulator.metrics.energy) ---------------------------------------

class _Hw:
    def __init__(self, tdp_w, price=None):
        self.tdp_w, self.price_per_gpu_hour_usd = tdp_w, price


def test_energy_by_hand():
    from simulator.metrics.energy import power_w, run_energy

    assert power_w(700, 0.0) == pytest.approx(140.0) and power_w(700, 1.0) == 700 and power_w(700, 0.5) == 420
    # 2 GPUs, 4 s run, busy 1 s: E = 2 x (140 W x 4 s + 560 W x 1 x 1 s) = 2240 J
    meta = {"gpus_per_replica": 2, "num_replicas": 1, "busy_s": 1.0}
    e = run_energy(_Hw(700, price=3.6), meta, 4.0, 100)
    assert e["energy_j"] == pytest.approx(2240.0)
    assert e["mean_power_w_per_gpu"] == pytest.approx(280.0)
    assert e["joules_per_output_token"] == pytest.approx(22.4)
    assert e["energy_usd_per_million_output_tokens"] == pytest.approx(22.4e6 / 3.6e6 * 0.10)
    # $3.6 per GPU-hour x 2 GPUs x 4 s = $0.008 for 100 tokens -> $80 per million
    assert e["gpu_usd_per_million_output_tokens"] == pytest.approx(80.0)
    half = run_energy(_Hw(700), {**meta, "busy_utilization": 0.5}, 4.0, 100)
    assert half["energy_j"] == pytest.approx(2 * (560 + 280))
    assert run_energy(_Hw(None), meta, 4.0, 100)["energy_j"] is None


def test_simulate_reports_energy():
    code, out, err = run("simulate", *SMALL, "-n", "30", "-r", "4", "--json", "-q")
    assert code == 0, err
    s = json.loads(out)
    assert s["joules_per_output_token"] == pytest.approx(s["energy_j"] / s["total_output_tokens"])
    # between all-idle and all-at-TDP for h100-sxm (700 W)
    assert 140 <= s["mean_power_w_per_gpu"] <= 700


def test_sweep_and_plan_report_energy_at_slo_capacity():
    code, out, err = run("sweep", *SMALL, "-n", "30", "--rates", "5,20,80,320", "--goodput", "ttft:300", "--json", "-q")
    assert code == 0, err
    r = json.loads(out)
    c = r["curves"][0]
    assert c["slo_capacity"] is not None
    at = [p for p in r["points"] if p["rate"] == c["slo_capacity"]][0]
    assert c["joules_per_output_token_at_slo_capacity"] == at["joules_per_output_token"] > 0
    code, out, err = run("plan", *SMALL, "-n", "30", "-r", "20", "--goodput", "ttft:300", "--json", "-q")
    assert code == 0, err
    assert json.loads(out)["best"]["joules_per_output_token"] > 0


def test_saved_result_round_trips_through_validate(tmp_path):
    """`validate` reads llmsim's vLLM-format file as it reads vLLM's: re-predicting the same
    run gives 0 % error on every metric (same seed, same lengths from input_lens/output_lens)."""
    code, _, err = run("simulate", *SMALL, "--num-prompts", "80", "--request-rate", "6", "--goodput", "ttft:500",
                       "--save-result", "--result-dir", str(tmp_path), "--result-filename", "r.json", "-q")
    assert code == 0, err
    code, out, err = run("validate", str(tmp_path / "r.json"), "-m", "llama-3.1-8b", "-H", "h100-sxm", "--json", "-q")
    assert code == 0, err
    v = json.loads(out)
    assert v["predicted"] >= 10
    assert v["median_ape"] == pytest.approx(0.0, abs=1e-6) and v["p90_ape"] == pytest.approx(0.0, abs=1e-6)
