"""`llmsim simulate`: options, scenario YAML, outputs, and the vLLM result keys."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from click.testing import CliRunner

from simulator.cli.commands import main
from simulator.scenario import Scenario

VLLM_KEYS = ["duration", "completed", "request_throughput", "request_goodput", "output_throughput",
             "total_token_throughput", "failed"] + [
    f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el")
    for s in ("mean", "median", "std", "p50", "p90", "p95", "p99")]


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.stdout, r.stderr


def test_json_has_vllm_keys_and_extras():
    code, out, err = run("simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-n", "60",
                         "--goodput", "ttft:500", "--goodput", "tpot:50", "--json")
    assert code == 0, err
    s = json.loads(out)
    for k in VLLM_KEYS:
        assert k in s, k
    for k in ("mean_batch_size", "peak_kv_utilization", "preemptions", "output_chars_per_s",
              "good_fraction", "unstable", "offered_rate", "achieved_rate"):
        assert k in s, k
    assert s["completed"] == 60
    assert s["output_chars_per_s"] == pytest.approx(s["output_throughput"] * 4.4)
    assert 0 <= s["good_fraction"] <= 1


def test_scenario_yaml_and_flags_override(tmp_path):
    cfg = tmp_path / "scenario.yaml"
    cfg.write_text("model: llama-3.1-8b\nhardware: a100-sxm-80gb\nworkload: random\n"
                   "input-len: 256\noutput-len: 16\nnum_requests: 20\nrate: inf\nmax_num_seqs: 4\n")
    code, out, err = run("simulate", "-c", str(cfg), "--json", "-q")
    assert code == 0, err
    a = json.loads(out)
    assert a["completed"] == 20 and a["hardware"] == "a100-sxm-80gb"
    assert a["total_input_tokens"] == 20 * 256
    code, out, err = run("simulate", "-c", str(cfg), "-n", "8", "-H", "h100-sxm", "--json", "-q")
    b = json.loads(out)
    assert b["completed"] == 8 and b["hardware"] == "h100-sxm"
    assert b["mean_batch_size"] <= 4


def test_scenario_yaml_typo_is_one_line(tmp_path):
    cfg = tmp_path / "s.yaml"
    cfg.write_text("modle: llama-3.1-8b\n")
    code, out, err = run("simulate", "-c", str(cfg))
    assert code == 2
    assert err.strip().count("\n") == 0 and "did you mean 'model'" in err


def test_out_dir_files(tmp_path):
    d = tmp_path / "out"
    code, out, err = run("simulate", "-n", "40", "-w", "azure-code", "--out", str(d), "-q")
    assert code == 0, err
    rec = pd.read_csv(d / "requests.csv")
    assert len(rec) == 40 and set(rec["status"]) == {"completed"}
    assert {"arrival_s", "first_token_s", "finish_s", "ttft_s", "tpot_s", "e2el_s", "preemptions",
            "replica"} <= set(rec.columns)
    s = json.loads((d / "summary.json").read_text())
    assert s["completed"] == 40 and "scenario" in s
    assert (d / "timeline.png").stat().st_size > 1000
    assert not list(d.glob(".*tmp*"))  # no temporaries left behind


@pytest.mark.parametrize("args,word", [
    (["--rate", "fast"], "rate"),
    (["--rate", "-1"], "rate"),
    (["--goodput", "ttft=abc"], "goodput"),
    (["--goodput", "latency:5"], "goodput"),
    (["--tp", "3"], "tp"),
    (["--scheduler", "fifo"], "scheduler"),
    (["--workload", "azure-cnv"], "did you mean"),
    (["--kv-dtype", "fp7"], "kv_dtype"),
    (["-m", "llama-3.1-70b", "-H", "a100-sxm-80gb"], "smallest TP"),
    (["-w", "azure-conv", "--input-len", "4096"], "applies to --workload random only"),
    (["-w", "azure-conv", "--burstiness", "0.3"], "applies only with a rate"),
    (["--max-concurrency", "0", "--rate", "5"], "concurrency: 0 must be an integer >= 1"),
    (["--efficiency", "compute_eficiency=0.5"], "did you mean 'compute_efficiency'"),
])
def test_bad_options_one_line_exit_2(args, word):
    code, out, err = run("simulate", "-n", "5", "-q", *args)
    assert code == 2, (out, err)
    assert err.strip().count("\n") == 0 and word in err


def test_rate_inf_is_offline_and_stable_flag_absent():
    code, out, err = run("simulate", "-w", "random", "--input-len", "128", "--output-len", "8",
                         "-n", "30", "--rate", "inf", "--json", "-q")
    s = json.loads(out)
    assert s["completed"] == 30 and s["unstable"] is False
    assert s["offered_rate"] is None or math.isinf(s["offered_rate"] or math.inf)


def test_replicas_and_router_spread_load():
    code, out, err = run("simulate", "-n", "90", "--replicas", "3", "--router", "least-outstanding",
                         "--json", "-q")
    s = json.loads(out)
    assert s["num_gpus"] == 3 and s["completed"] == 90


def test_scenario_defaults_are_valid():
    sc = Scenario()
    assert sc.workload == "azure-conv"  # a real trace is the default workload
