"""Engine profiles wired into runs: `--engine` on the scenario commands, a row's engine column
in `validate`, user flags over profile defaults, and a CI-speed accuracy check on
dev_throughput.csv (a stratified subset, event simulation)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from simulator.analysis import measurements
from simulator.analysis import validate as V
from simulator.cli.commands import main
from simulator.cost.memory import activation_reserve_bytes, weights_bytes_per_gpu
from simulator.profiles.apply import (
    BENCH_WAVES,
    bench_num_requests,
    policy_params_for,
    profile_hardware,
    scheduler_for,
)
from simulator.profiles.limits import trtllm_bench_limits_for
from simulator.profiles.profile import load_engine
from simulator.scenario import Scenario
from simulator.specs.catalog import load_hardware, load_model
from simulator.specs.checks import SpecError
from simulator.specs.dtypes import DTypes
from simulator.specs.parallelism import Parallelism

THROUGHPUT = Path("/work/shared/reference/measurements/dev_throughput.csv")


def _runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        return CliRunner()


# ---------------------------------------------------------------- profile -> scenario


def test_trtllm_profile_sets_limits_policy_and_cost() -> None:
    sc = Scenario.from_dict({"engine": "trtllm", "model": "llama-3.1-8b", "hardware": "h100-sxm"})
    # engine_specs/trtllm.yaml: BuildConfig 2048 seats / 8192 tokens, 64-token blocks, 0.9 free fraction
    assert (sc.max_num_seqs, sc.max_num_batched_tokens, sc.block_size) == (2048, 8192, 64)
    assert sc.scheduler == "trtllm" and sc.gpu_memory_utilization == 0.9
    assert sc.policy_params == {"capacity_policy": "guaranteed_no_evict", "chunked_context": True}  # as trtllm-bench runs it
    cost = sc.cost_model()
    prof = load_engine("trtllm")
    assert cost.hardware.efficiency.step_overhead_s == prof.step_overhead_s
    assert cost.hardware.link_latency_s == prof.kernels.allreduce_latency_s.value
    assert cost.link_dtype == "bf16"


def test_trtllm_kv_rule_by_hand() -> None:
    """KV = (C - W - A - reserve) x 0.9, tokens = KV / (2 L n_kv d bytes) for llama-3.1-8b."""
    sc = Scenario.from_dict({"engine": "trtllm", "model": "llama-3.1-8b", "hardware": "h100-sxm"})
    m, hw = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    dt = DTypes("bf16", "bf16", "bf16")
    w = weights_bytes_per_gpu(m, Parallelism(1, 1), dt)
    a = activation_reserve_bytes(m, Parallelism(1, 1), dt, 8192, 2048)
    per_token = 2 * 32 * 8 * 128 * 2  # 131072 bytes
    want = int((hw.hbm_capacity_bytes - w - a - load_engine("trtllm").runtime_reserve_bytes) * 0.9 // per_token)
    assert sc.engine_config().kv_capacity_tokens == want


def test_vllm_profile_limits_by_gpu_tier() -> None:
    h100 = Scenario.from_dict({"engine": "vllm", "hardware": "h100-sxm"})
    a100 = Scenario.from_dict({"engine": "vllm", "hardware": "a100-sxm-80gb"})
    # vllm.yaml batch_defaults, openai_server: >= 70 GiB and not A100 -> 8192/1024; else 2048/256
    assert (h100.max_num_batched_tokens, h100.max_num_seqs) == (8192, 1024)
    assert (a100.max_num_batched_tokens, a100.max_num_seqs) == (2048, 256)
    assert h100.gpu_memory_utilization == 0.92 and h100.scheduler == "vllm"
    assert h100.policy_params == {"admission_gate": "whole_prompt", "watermark": 0.0}
    # vLLM's KV rule is memory_plan's: no profile KV override
    assert h100.engine_config().kv_capacity_tokens is None


def test_user_flags_override_profile() -> None:
    sc = Scenario.from_dict({"engine": "trtllm", "max_num_seqs": 7, "max_num_batched_tokens": 512,
                             "scheduler": "vllm", "gpu_memory_utilization": 0.5})
    assert (sc.max_num_seqs, sc.max_num_batched_tokens, sc.scheduler, sc.gpu_memory_utilization) == (7, 512, "vllm", 0.5)
    assert sc.policy_params == {}  # trtllm's parameters do not apply to the vllm policy
    eff = Scenario.from_dict({"engine": "trtllm", "efficiency": {"step_overhead_s": 0.01}}).cost_model()
    assert eff.hardware.efficiency.step_overhead_s == 0.01


def test_engine_none_keeps_historical_defaults() -> None:
    for sc in (Scenario.from_dict({"engine": "none"}), Scenario(engine=None)):
        assert sc.engine is None
        assert (sc.max_num_seqs, sc.max_num_batched_tokens, sc.block_size, sc.scheduler) == (256, 8192, 16, "vllm")
        assert (sc.gpu_memory_utilization, sc.enable_prefix_caching, sc.policy_params) == (0.9, False, {})
        assert sc.cost_model().hardware == load_hardware(sc.hardware)


def test_default_engine_is_vllm() -> None:
    """No engine given: the vllm profile's `vllm serve` defaults on the chip (H100, 80 GB: 1024
    seats, 8192 tokens; A100 and small GPUs: 256 and 2048), KV fraction 0.92, prefix caching on."""
    for sc in (Scenario.from_dict({}), Scenario()):
        assert sc.engine == "vllm" and sc.hardware == "h100-sxm"
        assert (sc.max_num_seqs, sc.max_num_batched_tokens, sc.gpu_memory_utilization) == (1024, 8192, 0.92)
        assert sc.enable_prefix_caching is True
        assert sc.cost_model().hardware == profile_hardware(load_hardware("h100-sxm"), load_engine("vllm"))
    a100 = Scenario(hardware="a100-sxm-80gb")
    assert (a100.max_num_seqs, a100.max_num_batched_tokens) == (256, 2048)
    # replace() re-derives the unset limits for the new chip; explicit ones stay
    assert (a100.replace(hardware="h100-sxm").max_num_seqs, a100.replace(hardware="h100-sxm").max_num_batched_tokens) == (1024, 8192)
    pinned = Scenario(hardware="a100-sxm-80gb", max_num_seqs=300)
    assert pinned.replace(hardware="h100-sxm").max_num_seqs == 300
    # a round trip through as_dict keeps the unset ones unset
    assert Scenario(**a100.as_dict()).replace(hardware="b200").max_num_batched_tokens == 16384


def test_policy_mapping() -> None:
    assert scheduler_for(load_engine("vllm-v0")) == "vllm-v0"
    assert scheduler_for(load_engine("sglang")) == "sglang"
    assert policy_params_for(load_engine("vllm-v0"), "vllm-v0") == {"watermark": 0.01}
    sg = policy_params_for(load_engine("sglang"), "sglang")
    assert sg == {"init_new_token_ratio": 0.7, "min_new_token_ratio_factor": 0.14, "new_token_ratio_decay_steps": 600.0}


def test_sglang_seats_from_kv() -> None:
    from simulator.profiles.limits import sglang_max_running_requests

    sc = Scenario.from_dict({"engine": "sglang", "model": "llama-3.1-8b", "hardware": "h100-sxm"})
    kv = sc.engine_config().kv_capacity_tokens
    assert sc.max_num_seqs == sglang_max_running_requests(kv, load_model("llama-3.1-8b").max_context)


def test_no_evict_concurrency_is_kv_blocks_over_request_blocks() -> None:
    """trtllm + fixed lengths: 5 requests' worth of blocks -> exactly 5 run at once, none preempted."""
    per_req_blocks = math.ceil((1000 + 100) / 64)  # 18
    sc = Scenario.from_dict({"engine": "trtllm", "model": "llama-3.1-8b", "workload": "random",
                             "input_len": 1000, "output_len": 100, "num_requests": 12, "rate": "inf",
                             "kv_capacity_tokens": 64 * per_req_blocks * 5 + 63})
    res, summary = sc.run()
    first_finish = np.min(res.finish_s)
    assert int(np.sum(res.first_token_s < first_finish)) == 5
    assert int(np.sum(res.preemptions)) == 0
    assert summary["engine"] == "trtllm"


def test_unknown_engine_is_one_line_error() -> None:
    with pytest.raises(SpecError, match=r"engine: 'vllmm' is not a profile id or a file .*known ids"):
        Scenario.from_dict({"engine": "vllmm"})
    r = _runner().invoke(main, ["simulate", "--engine", "nope", "-n", "5", "-q"])
    assert r.exit_code != 0
    msg = (r.stderr if hasattr(r, "stderr") else r.output).strip()
    assert "engine: 'nope' is not a profile id" in msg and "Traceback" not in msg and len(msg.splitlines()) == 1


def test_simulate_cli_engine_json() -> None:
    r = _runner().invoke(main, ["simulate", "--engine", "trtllm", "-m", "llama-3.1-8b", "-w", "random",
                                "--input-len", "256", "--output-len", "16", "-n", "20", "-r", "inf", "--json", "-q"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout if hasattr(r, "stdout") else r.output)
    assert out["engine"] == "trtllm"


# ---------------------------------------------------------------- validate


HEADER = ("id,source,model,hardware,num_gpus,tp,pp,engine,weight_dtype,activation_dtype,kv_dtype,scenario,"
          "batch_size,request_rate,concurrency,num_requests,input_len,output_len,dataset,max_batch_size,"
          "max_num_tokens,metric,value,unit,quality,notes")


def test_validate_engine_column(tmp_path: Path) -> None:
    p = tmp_path / "m.csv"
    p.write_text("\n".join([
        HEADER,
        "s1,hand,llama-2-7b,a100-sxm-80gb,1,1,1,TensorRT-LLM v0.5.0 (static batch),fp16,fp16,fp16,static_batch,"
        "8,,,,128,128,,,,output_tokens_per_s,1000,tokens/s,high,",
        "t1,hand,llama-3.1-8b,h100-sxm,1,1,1,TensorRT-LLM v0.14.0 trtllm-bench,fp16,fp16,fp16,"
        "offline_max_throughput,,,,200,128,128,,,,output_tokens_per_s,20000,tokens/s,high,",
    ]) + "\n")
    r = _runner().invoke(main, ["validate", str(p), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout if hasattr(r, "stdout") else r.output)
    engines = {pt["id"]: pt["engine"] for pt in out["points"]}
    assert engines == {"s1": "generic", "t1": "trtllm"}
    assert set(out["by_engine"]) == {"generic", "trtllm"}
    txt = _runner().invoke(main, ["validate", str(p), "-q"]).output
    assert "engine" in txt and "trtllm" in txt


def test_trtllm_row_uses_bench_limits() -> None:
    """An offline trtllm-bench row without limits: trtllm-bench's build heuristic from ISL/OSL."""
    row = {"id": "x", "model": "llama-3.1-8b", "hardware": "h100-sxm", "tp": 1, "pp": 1, "engine": "TensorRT-LLM v0.14.0",
           "weight_dtype": "fp16", "activation_dtype": "fp16", "kv_dtype": "fp16", "input_len": 128, "output_len": 128,
           "max_batch_size": None, "max_num_tokens": None, "num_requests": None}
    v = V.Validator()
    from simulator.profiles.apply import row_settings

    s = row_settings(v.profile_of(row), v.cost_model(row), row, 1000, offline=True)
    lim = trtllm_bench_limits_for(load_model("llama-3.1-8b"), 79.65, 128, 128)
    assert (s["max_num_seqs"], s["max_num_batched_tokens"]) == (lim.max_batch_size, lim.max_num_tokens)
    assert s["scheduler"] == "trtllm" and s["policy_params"]["chunked_context"] is True
    bound = min(lim.max_batch_size, s["kv_capacity_tokens"] // 256)
    assert s["num_requests"] == BENCH_WAVES * bound == bench_num_requests(None, bound, 1000)


# ---------------------------------------------------------------- accuracy (real check)


def _stratified(rows: list[dict]) -> list[dict]:
    seen: dict[tuple, dict] = {}
    for r in rows:
        seen.setdefault((r["input_len"], r["output_len"], r["hardware"]), r)
    return list(seen.values())


@pytest.mark.skipif(not THROUGHPUT.is_file(), reason="dev_throughput.csv not present")
def test_dev_throughput_subset_accuracy() -> None:
    """1 row per (shape, hardware) cell of dev_throughput.csv (45 rows), event simulation under
    the trtllm profile: median APE within a point of today's 14.4 % on this subset (11.6 % on
    all 622 rows, under the issue's 12 % target; docs/validation.md) and every shape's median
    APE under 25 % (the target is 20 % on each shape's 40+ rows; 5 rows a shape here). Fails if
    the model regresses. (The subset read 11.5 % and all rows 10.4 % while the no-evict
    reservation shrank as tokens were generated and over-committed the KV cache; see
    docs/validation.md.)"""
    rows, _ = measurements.load_rows(THROUGHPUT)
    sub = _stratified(rows)
    res = V.validate(sub)
    assert res["predicted"] == len(sub) == 45
    assert res["median_ape"] < 15.4, res["median_ape"]
    by_shape: dict[str, list[float]] = {}
    for pt, r in zip(res["points"], sub, strict=True):
        by_shape.setdefault(f"{r['input_len']}/{r['output_len']}", []).append(abs(pt["error_pct"]))
    worst = max(float(np.median(v)) for v in by_shape.values())
    assert worst < 25.0, {k: float(np.median(v)) for k, v in by_shape.items()}
    assert {pt["engine"] for pt in res["points"]} == {"trtllm"}
    # the per-row CSV behind docs/validation.md's serving tables is today's simulation
    doc = {p["id"]: float(p["predicted"]) for p in _fit_engines().read_doc_points()}
    for pt in res["points"]:
        assert pt["predicted"] == pytest.approx(doc[pt["id"]], rel=1e-4), pt["id"]


# ---------------------------------------------------------------- docs/validation.md serving tables


def _fit_engines():
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "fit_engines.py"
    spec = importlib.util.spec_from_file_location("fit_engines", path)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def test_serving_tables_match_csv() -> None:
    """docs/validation.md's serving tables are what fit_engines.doc_tables makes of the per-row CSV."""
    fe = _fit_engines()
    text = (fe.DOCS / "validation.md").read_text()
    block = text.split(fe.BEGIN, 1)[1].split(fe.END, 1)[0].strip()
    pts = fe.read_doc_points()
    assert len(pts) == 622
    assert block == fe.doc_tables(pts)


def test_loo_table_matches_csv() -> None:
    """docs/validation.md's leave-one-out table is what fit_engines.loo_doc_table makes of
    docs/serving_loo.csv (benchmarks/loo_engines.py): every row held out once per kind."""
    fe = _fit_engines()
    text = (fe.DOCS / "validation.md").read_text()
    block = text.split(fe.LOO_BEGIN, 1)[1].split(fe.LOO_END, 1)[0].strip()
    pts = fe.read_doc_points(fe.LOO_CSV)
    for kind in ("hardware", "shape"):
        ids = [q["id"] for q in pts if q["kind"] == kind]
        assert len(ids) == len(set(ids)) == 622, kind
    assert block == fe.loo_doc_table(pts)


def test_loo_table_by_hand() -> None:
    """Two held-out groups of a kind: per-group median/p90/signed error and the fold's parameters,
    then all held-out rows of that kind."""
    fe = _fit_engines()
    par = {"step_overhead_s": "0.003", "runtime_reserve_gib": "4", "fp8_rel_hopper": "1", "fp8_rel_ada": "0.8",
           "pcie_link_efficiency": "0.4", "allreduce_latency_s": "5e-05"}
    pts = [{"kind": "hardware", "group": "a", "measured": "100", "predicted": "110", **par},
           {"kind": "hardware", "group": "a", "measured": "100", "predicted": "70", **par},
           {"kind": "hardware", "group": "bb", "measured": "200", "predicted": "200", **par}]
    lines = fe.loo_doc_table(pts).splitlines()
    # group a: errors +10, -30 -> median |e| 20, p90 of (10, 30) = 28, median signed -10
    assert lines[2] == "| hardware | a | 2 | 20.0 | 28.0 | -10.0 | 3.00 | 4.00 | 1.00 | 0.80 | 0.40 | 50 |"
    assert lines[3].startswith("| hardware | bb | 1 | 0.0 | 0.0 | 0.0 |")
    # all: errors +10, -30, 0 -> median |e| 10, p90 26, median signed 0
    assert lines[4] == "| hardware | all held-out rows | 3 | 10.0 | 26.0 | 0.0 | | | | | | |"


def test_fit_coordinate_descent_recovers_known_parameters() -> None:
    """fit_engines.fit on a synthetic predictor whose optimum is known: throughput falls as
    1/step_overhead and rises with fp8_rel_hopper; the fit lands within its finest step."""
    fe = _fit_engines()
    rows = [{"id": i, "value": 100.0 * (i + 1)} for i in range(6)]
    truth = {"step_overhead_s": 0.0025, "fp8_rel_hopper": 0.8}

    def pred(rs, p):
        return np.array([r["value"] * truth["step_overhead_s"] / p["step_overhead_s"]
                         * p["fp8_rel_hopper"] / truth["fp8_rel_hopper"] for r in rs])

    p0 = {n: 1.0 for n in fe.PARAMS} | {"step_overhead_s": 0.0032, "fp8_rel_hopper": 0.95}
    # the two parameters are degenerate here (only their ratio matters): fit one at a time
    got = fe.fit(pred, rows, p0, ["step_overhead_s"], log=lambda s: None)
    assert got["step_overhead_s"] == pytest.approx(0.0025 * 0.95 / 0.8, rel=0.03)
    got = fe.fit(pred, rows, p0 | {"step_overhead_s": 0.0025}, ["fp8_rel_hopper"], log=lambda s: None)
    assert got["fp8_rel_hopper"] == pytest.approx(0.8, rel=0.03)


@pytest.mark.parametrize("bad", [[], 3, ""])
def test_engine_of_wrong_type_is_one_line_error(bad) -> None:
    with pytest.raises(SpecError, match=r"engine: .* must be a profile id or file path"):
        Scenario.from_dict({"engine": bad})
