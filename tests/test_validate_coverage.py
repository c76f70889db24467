"""Every row of the new development files is priced or skipped with a reason that names the
missing feature, with exact counts (issue 22). A catalog entry or feature added later moves rows
from a skip reason to the priced count: update the numbers here with it.

Also the row settings those files need: engine strings -> profiles, the notes' facts, the
assumed layout of rows without tp/pp, the MLPerf harness rules and InferenceMAX's lengths."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.analysis import mlperf_rows
from simulator.analysis import validate as V
from simulator.analysis.measurements import engine_family, note_facts, read_measurements
from simulator.profiles.apply import assumed_layout, mlperf_limits
from simulator.profiles.profile import engine_for_row, load_engine
from simulator.specs.catalog import load_hardware, load_model
from simulator.specs.dtypes import DTypes

MEASUREMENTS = Path(__file__).resolve().parents[2] / "shared" / "reference" / "measurements"


def _rows(name: str) -> list[dict]:
    path = MEASUREMENTS / name
    if not path.is_file():
        pytest.skip(f"{path} not present")
    rows, bad = read_measurements(path)
    assert not bad
    return rows


def _reasons(res: dict) -> dict[str, int]:
    return {c["reason"]: c["rows"] for c in res["skip_counts"]}


def test_mlperf_every_catalog_row_priced_the_rest_named() -> None:
    rows = _rows("dev_mlperf51_offline.csv")
    # a pilot floor of 20 samples (one batch of seats at least): which rows can be priced
    res = V.validate(rows, validator=V.Validator(num_requests=20))
    assert res["rows"] == res["predicted"] == 236 and not res["skipped"]
    by_id = {p["id"]: p for p in res["points"]}
    # the MangoBoost clusters: the sum of their homogeneous parts
    mixed = by_id["mlperf51off-amd-mi300x+mi325x-mixed-0001"]
    assert mixed["hardware"] == "mi300x+mi325x" and "32 x mi300x tp=1 pp=1" in mixed["note"]
    # the MAXSUN dual boards: one catalog device each
    assert by_id["mlperf51off-maxsun-ms-intel-arc-pro-b60-dual-48g-turbo-0001"]["hardware"] == "arc-pro-b60-dual"
    # rows without tp/pp are priced on an assumed layout and say so
    assert "ASSUMED tp=2 pp=1" in by_id["mlperf51off-h100-sxm-0001"]["note"]
    assert by_id["mlperf51off-h100-sxm-0001"]["tp"] == 2
    # the 405B B200 rows run the runtime budget, not the CSV's build flag
    assert "max_num_tokens 5120 is the build flag; runtime 1536" in by_id["mlperf51off-b200-0039"]["note"]
    assert "attention DP" in by_id["mlperf51off-b200-0001"]["note"]


def test_llm_inference_bench_counts() -> None:
    res = V.validate(_rows("dev_llm_inference_bench.csv"))
    assert res["rows"] == 9710 and res["predicted"] == 9298
    assert _reasons(res) == {
        "model decilm-7b not in the catalog": 170,
        "hardware sn40l not in the catalog": 82,
        "model aquila-7b not in the catalog": 42,
        "model bloom-7b1 not in the catalog": 42,
        "model opt-6.7b not in the catalog": 42,
        "unsupported setting: tp: 8 does not divide num_heads (28) of qwen2-7b": 34,
    }
    fam = {f: st["rows"] for f, st in res["by_engine_family"].items()}
    assert fam == {"deepspeed": 964, "llama.cpp": 3140, "trtllm": 1256, "vllm": 3938}


def test_inferencemax_all_rows_priced() -> None:
    res = V.validate(_rows("dev_inferencemax_gptoss.csv"))
    assert res["rows"] == res["predicted"] == 2632 and not res["skipped"]
    assert set(res["by_engine"]) == {"vllm"}


def test_engine_strings_map_to_profiles() -> None:
    cases = {
        ("TensorRT-LLM (MLPerf v5.1 submission; system framework: TensorRT 10.11, CUDA 12.9)", "llama-3.1-405b"):
            "trtllm-mlperf",
        ("TensorRT-LLM (MLPerf v5.1 submission; system framework: TensorRT 10.11, CUDA 12.9)", "deepseek-v3"):
            "trtllm-pytorch",
        ("SGLang (MLPerf v5.1 submission; system framework: vLLM 0.6.5.dev964+mlperf50, Pytorch 2.7.0a0)", ""): "sglang",
        ("vLLM (MLPerf v5.1 submission; system framework: vLLM 0.6.5.dev964+mlperf50, ROCm 6.3.1)", ""): "vllm-v0",
        ("vLLM (MLPerf v5.1 submission; system framework: vLLM 0.10.0, RHEL 9.6)", ""): "vllm",
        ("unknown engine (MLPerf v5.1 submission; system framework: Mango LLMBoost, ROCm 6.12.12)", ""): "generic",
        ("llama.cpp llama-bench -pg (commit unpinned, 2024)", ""): "llama.cpp",
        ("TensorRT-LLM v0.11.0 examples/run.py ModelRunner (static batch)", ""): "trtllm-static",
        ("vLLM v0.6.1 (ROCm, Dockerfile.rocm) LLM.generate static batch", ""): "vllm-v0-rocm",
        ("DeepSpeed-MII mii.pipeline (deepspeed>=0.15.0)", ""): "deepspeed",
        ("TensorRT-LLM v0.14.0 trtllm-bench throughput (engine, in-flight batching)", ""): "trtllm",
        ("vLLM 0.11.2 (image vllm/vllm-openai:v0.11.2)", ""): "vllm",
    }
    for (text, model), want in cases.items():
        assert engine_for_row(text, model) == want, text
    assert engine_family("DeepSpeed-MII mii.pipeline (deepspeed>=0.15.0)") == "deepspeed"
    assert engine_family("SGLang (... system framework: vLLM 0.9.0)") == "sglang"
    assert engine_family("unknown engine (MLPerf v5.1 submission)") == "unknown"


def test_note_facts_of_each_file() -> None:
    imx = _rows("dev_inferencemax_gptoss.csv")[0]
    assert note_facts(imx) == {"range_ratio": 0.8, "nominal_input_len": 8192, "nominal_output_len": 1024,
                               "requests_per_slot": 10, "warmups_per_slot": 2, "ignore_eos": True,
                               "expert_parallel": 1, "dp_attention": False}
    ml = _rows("dev_mlperf51_offline.csv")[0]
    f = note_facts(ml)
    assert f["min_duration_ms"] == 600000 and f["run_mean_output"] == 3650.4 and f["submitter"] == "Dell"


def test_inferencemax_lengths_as_its_client_draws_them() -> None:
    row = _rows("dev_inferencemax_gptoss.csv")[0]  # nominal 8192 / 1024, ratio 0.8, concurrency 64
    w = V._bench_lengths(row, 640, 64)
    assert w.concurrency == 64 and w.num_requests == 640
    assert w.input_len.min() >= int(0.8 * 8192) and w.input_len.max() <= 8192
    assert w.output_len.min() >= int(0.8 * 1024) and w.output_len.max() <= 1024
    # uniform on [6553, 8192]: mean 7372.5 (the row's input_len), within 4 standard errors
    se = (8192 - 6553) / np.sqrt(12 * 640)
    assert abs(w.input_len.mean() - 7372.5) < 4 * se


def test_assumed_layout_reproduces_the_stated_ones() -> None:
    fp8 = DTypes("fp8", "fp8", "fp8")
    l70 = load_model("llama-2-70b")
    assert assumed_layout(l70, load_hardware("h100-sxm"), fp8, 16) == (2, 1)   # 70 GB of 80
    assert assumed_layout(l70, load_hardware("h200-sxm"), fp8, 8) == (1, 1)    # as the stated H200 rows
    assert assumed_layout(l70, load_hardware("mi300x"), fp8, 8) == (1, 1)      # as the stated MI300X rows
    assert assumed_layout(load_model("llama-3.1-8b"), load_hardware("l40s"), fp8, 1) == (1, 1)
    assert assumed_layout(load_model("llama-3.1-405b"), load_hardware("h100-sxm"), fp8, 16) == (8, 2)


def test_lockstep_ranks_price_the_instance_batch() -> None:
    """One attention-DP rank's step, priced as 8 ranks in lockstep, costs what the instance's
    cost model charges for 8 x its batch statistics."""
    cost = V.Validator().cost_model(next(r for r in _rows("dev_mlperf51_offline.csv")
                                         if r["id"] == "mlperf51off-b200-0001"))
    rank = mlperf_rows.LockstepRanks(cost, 8)
    assert rank.step_time(100, 100, 100 * 2000.5, 0.0, 100 * 2001) == pytest.approx(
        cost.step_time(800, 800, 800 * 2000.5, 0.0, 800 * 2001), rel=1e-12)
    assert rank.model is cost.model  # everything else is the instance's


def test_mlperf_harness_rules() -> None:
    trt, sgl = load_engine("trtllm"), load_engine("sglang")
    r405 = mlperf_limits(trt, "llama3.1-405b", "b200", 2, 128, 5120)
    assert (r405["max_batch_size"], r405["max_num_tokens"], r405["chunked"]) == (128, 1536, True)
    assert r405["capacity_policy"] == "max_utilization" and r405["kv_fraction"] == 0.80
    ds = mlperf_limits(load_engine("trtllm-pytorch"), "deepseek-r1", "b200", 8, 512, 4608)
    assert (ds["max_batch_size"], ds["max_num_tokens"], ds["dp_ranks"], ds["chunked"]) == (512, 4608, 8, False)
    assert ds["kv_fraction"] == 0.90  # the DeepSeek-R1 configs' kvcache_free_gpu_mem_frac, not the 0.80 default
    # GB300 (NV-CFG GB300-NVL72, CoreWeave GB300-NVL8): runtime budget 6656 over the 4608 build
    # flag, KV 0.95, and max_concurrency 10240 an instance = 1280 of the 1536 seats of each of 8 ranks
    g3 = mlperf_limits(load_engine("trtllm-pytorch"), "deepseek-r1", "gb300", 8, 1536, 4608)
    assert (g3["max_batch_size"], g3["max_num_tokens"], g3["dp_ranks"], g3["kv_fraction"]) == (1280, 6656, 8, 0.95)
    assert any("max_concurrency 10240" in n for n in g3["notes"])
    # B200/GB200: 5120 is above 8 x 512: the seats stay
    assert mlperf_limits(load_engine("trtllm-pytorch"), "deepseek-r1", "gb200", 8, 512, 4608)["max_batch_size"] == 512
    amd = mlperf_limits(sgl, "llama2-70b", "mi325x", 1, 2700, 65536)
    assert (amd["max_batch_size"], amd["max_num_tokens"], amd["chunked"]) == (2700, 65536, None)


def test_mlperf_loadgen_query_is_the_systems_config() -> None:
    """Each DeepSeek-R1 system runs the min_query_count and offline_expected_qps of its own config:
    GB200-NVL72 26328 x 8 = 210,624 samples (2,926 a rank of its 72), not the B200 config's 26,328
    (366 a rank: a run that was mostly its drain); GB300-NVL72 max(70 x 4388, 1.1 x 2000 s x 180)
    = 396,000, padded to 91 passes of 4,388 = 399,308."""
    v = V.Validator()
    rows = {r["id"]: r for r in _rows("dev_mlperf51_offline.csv")}
    ds = mlperf_rows.DATASETS["mlperf-deepseek-r1-mix"]
    prof = load_engine("trtllm-pytorch")
    assert mlperf_rows.loadgen_config(ds, prof, "gb200", 72) == mlperf_rows.LoadgenConfig(210624, 10.0)
    assert mlperf_rows.loadgen_config(ds, prof, "h200-sxm", 8) == mlperf_rows.LoadgenConfig(26328)  # fallback
    assert mlperf_rows.loadgen_config(ds, load_engine("vllm"), "mi355x", 8) == mlperf_rows.LoadgenConfig(4388)
    _, note = v.predict_row_detail(rows["mlperf51off-gb200-0001"])
    assert "LoadGen query 210624 samples (2926 per scheduler x 72)" in note
    _, note = v.predict_row_detail(rows["mlperf51off-nvidia-gb300-0003"])
    assert "LoadGen query 399308 samples" in note


def test_mlperf_405b_row_is_served_under_chunked_context() -> None:
    """The issue's case: 405B prompts (mean 9.4k tokens) with a 1,536-token runtime budget are
    scheduled (chunked context on, as the v5.1 configs run it), not refused."""
    row = next(r for r in _rows("dev_mlperf51_offline.csv") if r["id"] == "mlperf51off-b200-0039")
    v = V.Validator(max_requests=30)
    lim = mlperf_rows.settings(v.profile_of(row), v.cost_model(row), row, mlperf_rows.DATASETS[row["dataset"]])
    assert lim["policy_params"]["chunked_context"] is True and lim["max_num_batched_tokens"] == 1536
    value, note = v.predict_row_detail(row)
    # --max-requests lowers the pilot's floor, never below the seats: still the LoadGen query
    assert value > 0 and "LoadGen query" in note and "(4157 per scheduler x 2)" in note


def test_system_parts_read_from_the_notes() -> None:
    from simulator.analysis.measurements import system_parts

    note = ("MLPerf ...; accelerator 'AMD Instinct MI300X 192GB HBM3 (x32), AMD Instinct MI325X 256GB HBM3e "
            "(x16)' x8 per node x 6 node(s) = 48; tp/pp not stated")
    assert system_parts({"notes": note, "num_gpus": 48}) == [("AMD Instinct MI300X 192GB HBM3", 32),
                                                              ("AMD Instinct MI325X 256GB HBM3e", 16)]
    # one kind of chip, or no list: not a heterogeneous system
    assert system_parts({"notes": "accelerator 'NVIDIA B200' x8 per node x 1 node(s) = 8", "num_gpus": 8}) == []
    assert system_parts({"notes": "", "num_gpus": 8}) == []
    with pytest.raises(ValueError, match=r"num_gpus: 40 but the notes list 48 accelerators"):
        system_parts({"notes": note, "num_gpus": 40})


def _mixed_row(metric: str, value: float) -> dict:
    return {"id": "m", "source": "s", "model": "llama-2-70b", "hardware": "amd-mi300x+mi325x-mixed", "num_gpus": 24,
            "tp": None, "pp": None, "layout_stated": False, "replicas": None,
            "engine": "unknown engine (MLPerf v5.1 submission)", "weight_dtype": "fp8", "activation_dtype": "fp8",
            "kv_dtype": "fp8", "scenario": "offline_max_throughput", "dataset": "mlperf-openorca-llama2",
            "max_batch_size": None, "max_num_tokens": None, "metric": metric, "value": value,
            "batch_size": None, "concurrency": None, "request_rate": None, "num_requests": None,
            "input_len": None, "output_len": None,
            "notes": "accelerator 'AMD Instinct MI325X 256GB HBM3E (x16), AMD Instinct MI300X 192GB HBM3 (x8)' "
                     "x8 per node x 3 node(s) = 24; run's mean output tokens/sample = 300.0 (DERIVED)"}


def test_heterogeneous_system_is_the_sum_of_its_parts() -> None:
    v = V.Validator(max_requests=64)
    row = _mixed_row("request_throughput", 300.0)
    assert v.parts(row) == [("mi325x", 16), ("mi300x", 8)]
    total, note = v.predict_row_detail(row)
    # each part priced alone, as an Offline row of its own chip and GPU count
    alone = [v.predict_row_detail({**row, "hardware": hw, "num_gpus": n})[0] for hw, n in (("mi325x", 16),
                                                                                            ("mi300x", 8))]
    assert total == pytest.approx(sum(alone), rel=1e-12)
    assert "16 x mi325x tp=1 pp=1" in note and "8 x mi300x tp=1 pp=1" in note
    # a part the catalog lacks, and a scenario whose numbers do not add up, are named
    bad = {**row, "notes": row["notes"].replace("AMD Instinct MI300X 192GB HBM3", "Mystery X1")}
    with pytest.raises(V.SkipRow, match="hardware 'Mystery X1' \\(part of amd-mi300x\\+mi325x-mixed\\) not in"):
        v.predict_row_detail(bad)
    with pytest.raises(V.SkipRow, match="only MLPerf Offline throughput rows"):
        v.predict_row_detail({**row, "dataset": None, "scenario": "online_poisson", "metric": "ttft_ms"})
    with pytest.raises(V.SkipRow, match="only MLPerf Offline throughput rows"):
        v.predict_row_detail({**row, "scenario": "online_poisson"})
    # a layout the row states holds for every part: TP 8 gives 2 instances of MI325X, 1 of MI300X
    stated = {**row, "tp": 8, "pp": 1, "layout_stated": True, "replicas": 3}
    total8, note8 = v.predict_row_detail(stated)
    assert "16 x mi325x tp=8 pp=1" in note8 and "8 x mi300x tp=8 pp=1" in note8
    assert total8 == pytest.approx(sum(v.predict_row_detail({**stated, "hardware": hw, "num_gpus": n,
                                                               "replicas": n // 8})[0]
                                       for hw, n in (("mi325x", 16), ("mi300x", 8))), rel=1e-12)
    with pytest.raises(V.SkipRow, match="tp x pp: 32 does not divide the 16 mi325x GPUs"):
        v.predict_row_detail({**stated, "tp": 32})


def test_arc_pro_b60_dual_is_two_b60s() -> None:
    one, two = load_hardware("arc-pro-b60"), load_hardware("[MAXSUN] MS-Intel Arc Pro B60 Dual 48G Turbo")
    assert two.id == "arc-pro-b60-dual"
    for dt in ("bf16", "fp16", "int8"):
        assert two.flops(dt) == pytest.approx(2 * one.flops(dt))
    assert two.hbm_bandwidth_bytes_per_s == 2 * one.hbm_bandwidth_bytes_per_s == 912e9
    assert two.hbm_capacity_bytes == pytest.approx(2 * one.hbm_capacity_bytes)
    # no fp8 rate on Xe2: fp8 falls back to bf16; copied efficiencies say so in every report
    assert one.gemm_dtype("fp8") == "bf16"
    assert one.efficiency_notice() == ("arc-pro-b60: efficiencies copied from l40s, unvalidated "
                                       "(int8 GEMMs copied from arc-pro-b60-dual, unvalidated)")
    assert two.efficiency_notice() == ("arc-pro-b60-dual: efficiencies copied from l40s, unvalidated "
                                       "(fitted: int8 GEMMs)")
    assert one.efficiency.compute_for("int8") == two.efficiency.compute_for("int8") == 0.64
