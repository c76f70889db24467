"""`llmsim validate` / `llmsim calibrate`: reading measurements, pricing rows, fitting."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from simulator.analysis import calibrate as C
from simulator.analysis import measurements
from simulator.analysis import validate as V
from simulator.cli.commands import main
from simulator.cost.predict import predict_static
from simulator.cost.stepbatch import StepBatch, decode_step
from simulator.resolve import make_cost_model
from simulator.specs.catalog import load_hardware, load_model
from simulator.specs.checks import SpecError

DATA = Path(__file__).resolve().parent / "data"
A100 = "a100-sxm-80gb"
HEADER = ("id,source,model,hardware,num_gpus,tp,pp,engine,weight_dtype,activation_dtype,kv_dtype,scenario,"
          "batch_size,request_rate,concurrency,num_requests,input_len,output_len,dataset,max_batch_size,"
          "max_num_tokens,metric,value,unit,quality,notes")


def _row(id_: str, metric: str, value: float, unit: str, *, model: str = "llama-2-7b", hw: str = A100,
         gpus: int = 1, tp: int = 1, dtype: str = "fp16", scenario: str = "static_batch", batch: str = "1",
         inp: str = "128", out: str = "128", dataset: str = "", rate: str = "", src: str = "hand") -> str:
    return (f"{id_},{src},{model},{hw},{gpus},{tp},1,test,{dtype},{dtype},{dtype},{scenario},{batch},{rate},,,"
            f"{inp},{out},{dataset},,,{metric},{value},{unit},high,")


def _write(tmp_path: Path, *rows: str) -> Path:
    p = tmp_path / "m.csv"
    p.write_text("\n".join([HEADER, *rows]) + "\n")
    return p


def _runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        return CliRunner()


# --------------------------------------------------------------------------- predictions


def test_static_rows_match_hand_roofline(tmp_path: Path) -> None:
    """Ideal A100: batch-1 decode streams the weights; a long prefill is compute-bound."""
    p = _write(tmp_path,
               _row("dec", "tpot_ms", 10.0, "ms", inp="1", out="2"),
               _row("pre", "ttft_ms", 100.0, "ms", batch="8", inp="2048", out="1"),
               _row("tput", "output_tokens_per_s_per_gpu", 1000.0, "tokens/s", gpus=4, tp=2, batch="16"),
               _row("tot", "output_tokens_per_s", 1000.0, "tokens/s", gpus=4, tp=2, batch="16"))
    rows, skipped = measurements.read_measurements(p)
    assert len(rows) == 4 and not skipped and rows[2]["replicas"] == 2
    ideal = load_hardware(A100).ideal()
    res = V.validate(rows, hardware_specs={A100: ideal})
    pred = {pt["id"]: pt["predicted"] for pt in res["points"]}
    m, hw = load_model("llama-2-7b"), ideal
    # decode at batch 1, context 1: every weight read once (the embedding is a gather of 1 row)
    w_bytes = (m.param_count - m.embedding_params) * 2
    assert pred["dec"] == pytest.approx(w_bytes / hw.hbm_bandwidth_bytes_per_s * 1e3, rel=0.01)
    # prefill of 8 x 2048 tokens: 2 x active params FLOPs per token + causal attention
    T = 8 * 2048
    flops = 2 * (m.active_param_count - m.vocab_size * m.hidden_size) * T
    flops += 4 * m.hidden_size * m.num_layers * 8 * 2048 * 2048 / 2 + 2 * 8 * m.hidden_size * m.vocab_size
    assert pred["pre"] == pytest.approx(flops / hw.flops("fp16") * 1e3, rel=0.03)
    # per-GPU vs total: two replicas of tp=2 on four GPUs
    c = make_cost_model("llama-2-7b", ideal, tp=2, weight_dtype="fp16", activation_dtype="fp16", kv_dtype="fp16")
    one = predict_static(c, 16, 128, 128)["output_tokens_per_s"]
    assert pred["tot"] == pytest.approx(2 * one, rel=1e-9)
    assert pred["tput"] == pytest.approx(2 * one / 4, rel=1e-9)
    pt = next(x for x in res["points"] if x["id"] == "dec")
    assert pt["error_pct"] == pytest.approx((pt["predicted"] - 10.0) / 10.0 * 100)
    assert res["median_ape"] == pytest.approx(np.median([abs(x["error_pct"]) for x in res["points"]]))
    assert set(res["by_hardware"]) == {A100} and res["by_scenario"]["static_batch"]["rows"] == 4


def test_skipped_rows_have_reasons(tmp_path: Path) -> None:
    p = _write(tmp_path,
               _row("ok", "tpot_ms", 10.0, "ms"),
               _row("model", "tpot_ms", 10.0, "ms", model="gpt-5"),
               _row("hw", "tpot_ms", 10.0, "ms", hw="h999"),
               _row("fp8", "tpot_ms", 10.0, "ms", dtype="fp8"),
               _row("noout", "e2e_ms", 10.0, "ms", out=""),
               _row("ds", "mean_ttft_ms", 50.0, "ms", scenario="online_poisson", rate="2", batch="",
                    inp="", out="", dataset="lmsys-chat"))
    rows, _ = measurements.read_measurements(p)
    res = V.validate(rows)
    reasons = {s["id"]: s["reason"] for s in res["skipped"]}
    assert res["predicted"] == 1 and res["rows"] == 6
    assert reasons["model"] == "model gpt-5 not in the catalog"
    assert reasons["hw"] == "hardware h999 not in the catalog"
    assert "fp8" in reasons["fp8"]
    assert "output_len not stated" in reasons["noout"]
    assert reasons["ds"] == "dataset lmsys-chat not available; pass --workload lmsys-chat=FILE"


def test_sharegpt_rows_are_predicted_with_vllms_sampling(tmp_path: Path) -> None:
    """A measured ShareGPT serving row is priced on ShareGPT sampled as `vllm bench serve`
    samples it (issue 14): the same run as `Scenario(workload="sharegpt")` with the row's
    settings, so validate and simulate agree."""
    from simulator.metrics.summary import summarize
    from simulator.scenario import Scenario

    p = _write(tmp_path, _row("sg", "mean_ttft_ms", 50.0, "ms", model="llama-3.1-8b", hw="h100-sxm",
                              dtype="bf16", scenario="online_poisson", rate="4", batch="", inp="", out="",
                              dataset="sharegpt"))
    rows, _ = measurements.read_measurements(p)
    v = V.Validator(num_requests=200)
    got = v.predict_row(rows[0])
    engine = v.profile_of(rows[0]).id
    res, summary = Scenario.from_dict(dict(model="llama-3.1-8b", hardware="h100-sxm", workload="sharegpt",
                                           rate=4.0, num_requests=200, engine=engine)).run()
    # ShareGPT lengths (a mean prompt of about 230 tokens), not the row's empty lengths
    assert summary["num_requests"] == 200 and summary["total_input_tokens"] / 200 > 100
    assert got == pytest.approx(summarize(res, {})["mean_ttft_ms"], rel=1e-9)


def test_a_rows_stated_request_count_is_kept_and_only_max_requests_cuts_it(tmp_path: Path) -> None:
    """A row that states how many requests its run sent is simulated at that count: a
    shorter run is another experiment (cold start and queue start-up weigh more in its
    percentiles). `num_requests` sets the count of rows that state none; `max_requests` cuts
    every run and says so in the row's note."""
    stated = _row("n60", "mean_e2el_ms", 900.0, "ms", model="llama-3.1-8b", hw="h100-sxm", dtype="bf16",
                  scenario="online_poisson", rate="2", batch="", inp="64", out="16").replace(",2,,,", ",2,,60,")
    bare = _row("n0", "mean_e2el_ms", 900.0, "ms", model="llama-3.1-8b", hw="h100-sxm", dtype="bf16",
                scenario="online_poisson", rate="2", batch="", inp="64", out="16")
    rows, _ = measurements.read_measurements(_write(tmp_path, stated, bare))
    assert rows[0]["num_requests"] == 60 and rows[1]["num_requests"] is None

    def simulated(v: V.Validator, row: dict) -> tuple[int, str]:
        _, note = v.predict_row_detail(row)
        (s, _res, _note), = [x for k, x in v._pred.items() if k[0] == "serve"]
        return int(s["num_requests"]), note

    assert simulated(V.Validator(num_requests=20), rows[0]) == (60, "")
    assert simulated(V.Validator(num_requests=20), rows[1]) == (20, "")
    assert simulated(V.Validator(), rows[1])[0] == V.DEFAULT_NUM_REQUESTS
    n, note = simulated(V.Validator(num_requests=20, max_requests=25), rows[0])
    assert n == 25 and note == "simulated 25 of the run's 60 requests (--max-requests): a shorter run than the measured one"
    assert simulated(V.Validator(max_requests=25), rows[1]) == (
        25, "simulated 25 of 1000 requests (--max-requests): a shorter run than the measured one")
    assert simulated(V.Validator(max_requests=100), rows[0]) == (60, "")
    # an MLPerf row's query is LoadGen's: only --max-requests lowers its pilot runs
    assert V.Validator(num_requests=20).pilot_cap is None and V.Validator(max_requests=25).pilot_cap == 25


def test_an_offline_benchmark_row_is_sized_by_its_benchmark_not_by_num_requests(tmp_path: Path) -> None:
    """A trtllm-bench offline row states no count, but its benchmark sizes the run: BENCH_WAVES
    x the seats it fills (profiles.apply.bench_num_requests). --num-requests does not shorten
    it (500 requests did not fill the seats: dev_throughput every 16th row 14.0 % against
    12.5 %); --max-requests does, and says so."""
    from simulator.profiles.apply import BENCH_WAVES

    row = _row("t", "output_tokens_per_s", 9000.0, "tokens/s", model="llama-3.1-8b", hw="h100-sxm", dtype="fp8",
               scenario="offline_max_throughput", batch="", inp="128", out="128").replace(
        ",test,", ',"TensorRT-LLM v0.14.0 trtllm-bench throughput",')
    rows, _ = measurements.read_measurements(_write(tmp_path, row))

    def simulated(v: V.Validator) -> tuple[int, str]:
        _, note = v.predict_row_detail(rows[0])
        (s, _res, _n), = [x for k, x in v._pred.items() if k[0] == "serve"]
        return int(s["num_requests"]), note

    n, note = simulated(V.Validator())
    assert n % BENCH_WAVES == 0 and n > 500 and note == ""
    assert simulated(V.Validator(num_requests=50)) == (n, "")
    assert simulated(V.Validator(max_requests=50)) == (
        50, f"simulated 50 of the run's {n} requests (--max-requests): a shorter run than the measured one")


def test_predictions_are_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three metrics of one (model, hardware, batch, lengths) point are priced once, with one
    cost model (observed through the calls, not through private cache sizes)."""
    import simulator.cost.predict as P

    real = P.predict_static
    calls: list[tuple] = []

    def counting(*a: Any, **k: Any) -> Any:
        calls.append(a)
        return real(*a, **k)

    monkeypatch.setattr(P, "predict_static", counting)
    p = _write(tmp_path, _row("a", "tpot_ms", 10.0, "ms"), _row("b", "e2e_ms", 1000.0, "ms"),
               _row("c", "ttft_ms", 20.0, "ms"))
    rows, _ = measurements.read_measurements(p)
    v = V.Validator()
    res = V.validate(rows, validator=v)
    assert res["predicted"] == 3 and len(calls) == 1
    assert v.cost_model(rows[0]) is v.cost_model(rows[2])


# --------------------------------------------------------------------------- malformed input


@pytest.mark.parametrize("bad, needle", [
    (_row("x", "tpot_ms", 10.0, "tokens/s"), "unit"),
    (_row("x", "tpot_ms", -3, "ms"), "value"),
    (_row("x", "tpot_ms", 10.0, "ms", tp=3, gpus=4), "num_gpus"),
    (_row("x", "latency", 10.0, "ms"), "metric"),
    (_row("x", "tpot_ms", 10.0, "ms", batch="two"), "batch_size"),
    (_row("x", "tpot_ms", 10.0, "ms", dtype="fp12"), "weight_dtype"),
])
def test_malformed_row_is_one_line_error_with_line_number(tmp_path: Path, bad: str, needle: str) -> None:
    p = _write(tmp_path, _row("ok", "tpot_ms", 10.0, "ms"), bad)
    with pytest.raises(SpecError) as e:
        measurements.read_measurements(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}:3: ") and needle in msg and "\n" not in msg
    rows, skipped = measurements.read_measurements(p, skip_bad_rows=True)
    assert len(rows) == 1 and skipped[0]["id"] == "x" and "m.csv:3" in skipped[0]["reason"]
    r = _runner().invoke(main, ["validate", str(p), "-q"])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and ":3:" in r.stderr


def test_missing_column_and_duplicate_id(tmp_path: Path) -> None:
    p = tmp_path / "m.csv"
    p.write_text("id,model\nx,llama-2-7b\n")
    with pytest.raises(SpecError, match="missing column"):
        measurements.read_measurements(p)
    p = _write(tmp_path, _row("x", "tpot_ms", 10.0, "ms"), _row("x", "ttft_ms", 10.0, "ms"))
    with pytest.raises(SpecError, match=r":3: id: 'x' duplicates line 2"):
        measurements.read_measurements(p)


# --------------------------------------------------------------------------- vLLM result JSON


def test_vllm_result_json_fields_mapped() -> None:
    f = DATA / "vllm_bench_serve_result.json"
    rows = measurements.read_vllm_result(f, model="llama-3.1-8b", hardware="h100-sxm", tp=1)
    by = {r["metric"]: r for r in rows}
    r0 = rows[0]
    assert r0["scenario"] == "online_poisson" and r0["request_rate"] == 4.0
    assert r0["num_requests"] == 200 and r0["input_len"] == 512 and r0["output_len"] == 128
    assert r0["dataset"] == "" and r0["model"] == "llama-3.1-8b" and r0["num_gpus"] == 1
    assert by["output_tokens_per_s"]["value"] == 493.5 and by["request_throughput"]["value"] == 3.856
    assert by["p99_itl_ms"]["value"] == 17.84 and by["median_e2el_ms"]["value"] == 1160.3
    assert {"mean_ttft_ms", "median_tpot_ms", "p99_ttft_ms"} <= set(by)
    res = V.validate(rows)
    assert res["predicted"] == len(rows) and not res["skipped"]
    pts = {p["metric"]: p for p in res["points"]}
    # an unsaturated server finishes what arrives: throughput = offered rate x output length
    assert pts["request_throughput"]["predicted"] == pytest.approx(4.0, rel=0.1)
    assert pts["output_tokens_per_s"]["predicted"] == pytest.approx(
        pts["request_throughput"]["predicted"] * 128, rel=1e-6)
    assert 0 < pts["median_tpot_ms"]["predicted"] < 100
    # the JSON does not say the model: the CLI insists on it
    r = _runner().invoke(main, ["validate", str(f), "-q"])
    assert r.exit_code == 2 and "--model" in r.stderr


def test_vllm_closed_loop_and_offline(tmp_path: Path) -> None:
    d = json.loads((DATA / "vllm_bench_serve_result.json").read_text())
    d.update(request_rate="inf", max_concurrency=8)
    f = tmp_path / "c.json"
    f.write_text(json.dumps(d))
    assert measurements.read_vllm_result(f, model="llama-3.1-8b", hardware="h100-sxm")[0]["scenario"] == "closed_loop"
    d.update(max_concurrency=None)
    f.write_text(json.dumps(d))
    assert measurements.read_vllm_result(f, model="llama-3.1-8b", hardware="h100-sxm")[0]["scenario"] == "offline_max_throughput"



@pytest.mark.parametrize("key,value", [("request_rate", "fast"), ("request_rate", -2.0),
                                       ("request_rate", True), ("max_concurrency", "8"),
                                       ("num_prompts", [200]), ("completed", float("nan"))])
def test_vllm_settings_that_are_not_numbers_are_refused(tmp_path: Path, key, value) -> None:
    """Issue 17 cause 5: a setting that is present but not a number (or inf, or null) is an
    error naming it, never read as absent (which made `"request_rate": "fast"` offline)."""
    d = json.loads((DATA / "vllm_bench_serve_result.json").read_text())
    d.update({key: value, "num_prompts": None} if key == "completed" else {key: value})
    f = tmp_path / "r.json"
    f.write_text(json.dumps(d))
    with pytest.raises(SpecError, match=rf"^{f}: {key}: .* is not a number >= 0 \(or inf, or null\)$"):
        measurements.read_vllm_result(f, model="llama-3.1-8b", hardware="h100-sxm")


def test_vidur_csv_non_numeric_cell_names_file_and_line(tmp_path: Path) -> None:
    f = tmp_path / "ar.csv"
    f.write_text("node,all_reduce_ms,rank,num_workers,size_bytes,devices_per_node,max_devices_per_node\n"
                 "a100_dgx,0.043,0,2,2048,1,8\na100_dgx,fast,0,2,4096,1,8\n")
    with pytest.raises(SpecError, match=r"ar.csv:3: all_reduce_ms: 'fast' is not a number$"):
        C.allreduce_points(f, "a100-sxm-80gb")



# --------------------------------------------------------------------------- calibrate


TRUE = {"compute_efficiency": 0.62, "memory_efficiency": 0.81, "step_overhead_s": 1.5e-3}
SETTINGS = [  # (model, tp, batch, input, output, metric)
    ("llama-2-7b", 1, 1, 128, 128, "tpot_ms"), ("llama-2-7b", 1, 8, 2048, 1, "ttft_ms"),
    ("llama-2-13b", 1, 1, 512, 64, "e2e_ms"), ("llama-2-13b", 2, 16, 1024, 1, "ttft_ms"),
    ("llama-2-7b", 1, 64, 128, 256, "output_tokens_per_s"), ("llama-2-13b", 1, 1, 16, 32, "decode_tokens_per_s"),
    ("llama-2-7b", 1, 4, 256, 1, "ttft_ms"), ("llama-2-13b", 2, 1, 64, 128, "tpot_ms"),
]


def _synthetic_rows(hw) -> list[dict]:
    rows = []
    for i, (m, tp, b, inp, out, metric) in enumerate(SETTINGS):
        c = make_cost_model(m, hw, tp=tp, weight_dtype="fp16", activation_dtype="fp16", kv_dtype="fp16")
        v = predict_static(c, b, inp, out)[metric]
        raw = {"id": f"s{i}", "source": f"src{i % 3}", "model": m, "hardware": A100, "num_gpus": tp, "tp": tp,
               "pp": 1, "weight_dtype": "fp16", "activation_dtype": "fp16", "kv_dtype": "fp16",
               "scenario": "static_batch", "batch_size": b, "input_len": inp, "output_len": out,
               "metric": metric, "value": v, "unit": measurements.METRICS[metric]}
        rows.append(measurements.parse_row(raw))
    return rows


def test_calibrate_recovers_known_efficiencies(tmp_path: Path) -> None:
    base = load_hardware(A100).ideal()
    truth = C.apply_params(base, {**TRUE, "attention_efficiency": TRUE["compute_efficiency"]})
    rows = _synthetic_rows(truth)
    res = C.calibrate(rows, base, leave_one_out=True)
    for k, v in TRUE.items():
        assert res["params"][k] == pytest.approx(v, rel=0.02), k
    assert res["after"]["median_ape"] < 0.5 < res["before"]["median_ape"]
    assert len(res["leave_one_source_out"]) == 3 and res["leave_one_source_out_median_ape"] < 2
    # the overlay is a hardware spec --hardware accepts
    ov = tmp_path / "ov.yaml"
    ov.write_text(C.overlay_yaml(res))
    hw = load_hardware(str(ov))
    assert hw.id == A100 and hw.efficiency.memory_efficiency == pytest.approx(TRUE["memory_efficiency"], rel=0.02)
    src = yaml.safe_load(ov.read_text())["efficiency"]["sources"]
    assert {"compute_efficiency", "memory_efficiency", "step_overhead_s"} <= set(src)
    assert "msle" in src["compute_efficiency"]


def test_fast_static_evaluator_matches_predict_static() -> None:
    hw = load_hardware(A100)
    p = {**C.params_of(hw), "compute_efficiency": 0.55, "attention_efficiency": 0.4, "memory_efficiency": 0.7,
         "gemm_ramp_tokens": 120.0, "kernel_overhead_s": 4e-6, "step_overhead_s": 2e-3,
         "link_efficiency": 0.6, "link_latency_s": 3e-5}
    hwp = C.apply_params(hw, p)
    rows = _synthetic_rows(hw)
    fs = C.StaticFitSet(rows, V.Validator(hardware_specs={A100: hwp}))
    ref = [V.Validator(hardware_specs={A100: hwp}).predict_row(r) for r in rows]
    np.testing.assert_allclose(fs.predict(p), ref, rtol=1e-9)


def test_vidur_fits_recover_synthetic_parameters(tmp_path: Path) -> None:
    hw = load_hardware(A100)
    p = {**C.params_of(hw), "link_efficiency": 0.7, "link_latency_s": 2.5e-5}
    sizes = np.array([2048, 65536, 1 << 20, 1 << 24, 1 << 27], dtype=float)
    lines = ["node,all_reduce_ms,rank,num_workers,size_bytes,devices_per_node,max_devices_per_node"]
    for t in (2, 4, 8):
        for s in sizes:
            lines.append(f"a100_dgx,{C.allreduce_time(hw, p, t, s) * 1e3},0,{t},{int(s)},{t},8")
    f = tmp_path / "ar.csv"
    f.write_text("\n".join(lines) + "\n")
    r = C.fit_allreduce(f, hw)
    assert r["params"]["link_efficiency"] == pytest.approx(0.7, rel=0.02)
    assert r["params"]["link_latency_s"] == pytest.approx(2.5e-5, rel=0.02)
    q = {**C.params_of(hw), "compute_efficiency": 0.7, "memory_efficiency": 0.8, "gemm_ramp_tokens": 100.0,
         "kernel_overhead_s": 5e-6}
    lines = ["gpu,model,attn_pre_proj_ms,attn_post_proj_ms,mlp_up_proj_ms,mlp_down_proj_ms,n_head,n_kv_head,"
             "n_embd,n_expanded_embd,vocab_size,use_gated_mlp,num_tokens,num_tensor_parallel_workers"]
    for H, nh, inter in ((4096, 32, 11008), (8192, 64, 28672)):
        for T in (1, 16, 64, 256, 1024, 4096):
            for t in (1, 2):
                d = H // nh
                ts = [C.gemm_time(hw, q, T, H, 3 * H / t), C.gemm_time(hw, q, T, H / t, H),
                      C.gemm_time(hw, q, T, H, 2 * inter / t), C.gemm_time(hw, q, T, inter / t, H)]
                assert d * nh == H
                lines.append(f"a100,m{H},{','.join(str(x * 1e3) for x in ts)},{nh},{nh},{H},{inter},32000,True,{T},{t}")
    f = tmp_path / "ops.csv"
    f.write_text("\n".join(lines) + "\n")
    r = C.fit_ops(f, hw)
    for k in ("compute_efficiency", "memory_efficiency", "gemm_ramp_tokens", "kernel_overhead_s"):
        assert r["params"][k] == pytest.approx(q[k], rel=0.02), k


def test_vidur_fit_formulas_are_the_cost_models() -> None:
    """What fit_ops and fit_allreduce fit is what CostModel prices: at the same parameters,
    calibrate's GEMM time equals the cost model's per-layer GEMM op times (Llama-2-7B in fp16:
    H = 4096, I = 11008, L = 32) and its all-reduce time the per-layer all-reduce op time."""
    hw = load_hardware(A100)
    p = {**C.params_of(hw), "compute_efficiency": 0.6, "memory_efficiency": 0.75, "gemm_ramp_tokens": 90.0,
         "kernel_overhead_s": 4e-6, "link_efficiency": 0.7, "link_latency_s": 2e-5}
    H, inter, L = 4096, 11008, 32
    for tp in (1, 2):
        c = make_cost_model("llama-2-7b", C.apply_params(hw, p), tp=tp, weight_dtype="fp16",
                            activation_dtype="fp16", kv_dtype="fp16")
        for T in (1, 64, 3000):
            ops = {o["name"]: o for o in c.breakdown(StepBatch(T=T, S=1, Ap=T * T / 2.0, R=T))["ops"]}
            shapes = {"qkv_proj": (H, 3 * H / tp), "o_proj": (H / tp, H), "mlp_gate_up": (H, 2 * inter / tp),
                      "mlp_down": (inter / tp, H)}
            for name, (n_in, n_out) in shapes.items():
                assert ops[name]["time_ms"] / 1e3 / L == pytest.approx(
                    float(C.gemm_time(hw, p, T, n_in, n_out, dtype="fp16")), rel=1e-12), (name, tp, T)
        if tp > 1:
            ops = {o["name"]: o for o in c.breakdown(decode_step(c.model, 128, 500))["ops"]}
            per_layer = ops["allreduce"]["time_ms"] / 1e3 / (2 * L)
            assert per_layer == pytest.approx(float(C.allreduce_time(hw, p, tp, 128 * H * 2.0)), rel=1e-12)


# --------------------------------------------------------------------------- CLI


def test_cli_validate_out_and_json(tmp_path: Path) -> None:
    p = _write(tmp_path, _row("a", "tpot_ms", 10.0, "ms"), _row("b", "ttft_ms", 20.0, "ms"),
               _row("c", "tpot_ms", 10.0, "ms", model="gpt-5"))
    out = tmp_path / "o"
    r = _runner().invoke(main, ["validate", str(p), "--out", str(out), "-q"])
    assert r.exit_code == 0, r.output
    assert "overall" in r.stdout and "median_ape_%" in r.stdout and "1 rows skipped: model gpt-5 not in the catalog" in r.stdout
    csv_lines = (out / "validation.csv").read_text().splitlines()
    assert csv_lines[0] == "id,source,engine,scenario,hardware,model,metric,measured,predicted,error_pct"
    assert len(csv_lines) == 3
    assert (out / "scatter.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = _runner().invoke(main, ["validate", str(p), "--json"])
    doc = json.loads(r.stdout)
    assert doc["rows"] == 3 and doc["predicted"] == 2 and doc["skipped"][0]["reason"]
    for k in ("median_ape", "p90_ape", "by_scenario", "by_hardware"):
        assert k in doc
    assert math.isfinite(doc["by_hardware"][A100]["median_ape"])
    # --num-requests says which runs it does not set (a static row has no run to set)
    r = _runner().invoke(main, ["validate", str(p), "-q", "--num-requests", "30"])
    assert r.exit_code == 0 and r.stdout.splitlines()[-1].startswith(
        "note: --num-requests 30 sets only runs whose length nothing fixes; a stated count")
    r = _runner().invoke(main, ["validate", str(p), "-q", "--num-requests", "30", "--max-requests", "30"])
    assert "--num-requests 30 sets only" not in r.stdout


def test_cli_calibrate_writes_overlay(tmp_path: Path) -> None:
    truth = C.apply_params(load_hardware(A100).ideal(), {**TRUE, "attention_efficiency": 0.62})
    rows = _synthetic_rows(truth)
    lines = [HEADER]
    for r in rows:
        lines.append(_row(r["id"], r["metric"], repr(r["value"]), r["unit"], model=r["model"], tp=r["tp"],
                          gpus=r["num_gpus"], batch=str(r["batch_size"]), inp=str(r["input_len"]),
                          out=str(r["output_len"]), src=r["source"]))
    p = tmp_path / "m.csv"
    p.write_text("\n".join(lines) + "\n")
    ov = tmp_path / "ov.yaml"
    r = _runner().invoke(main, ["calibrate", str(p), "--hardware", A100, "--out", str(ov)])
    assert r.exit_code == 0, r.output
    assert "leave-one-source-out" in r.stdout and "median APE" in r.stdout
    assert yaml.safe_load(ov.read_text())["base"] == A100
    r = _runner().invoke(main, ["validate", str(p), "--hardware-spec", str(ov), "--json"])
    assert json.loads(r.stdout)["predicted"] == len(rows)


def test_a_rows_stated_expert_parallelism_and_dp_attention_price_its_layout() -> None:
    # InferenceMAX notes state the server's layout ("single server, TP8 EP8 dp-attention true"):
    # an MoE model is priced with the experts over 8 ranks and 8 attention groups of 1 GPU;
    # EP1 / false (the gpt-oss rows) and a dense model keep plain TP
    base = {"model": "deepseek-v3", "hardware": "b200", "tp": 8, "pp": 1, "weight_dtype": "fp8",
            "activation_dtype": "fp8", "kv_dtype": "fp8", "engine": "SGLang 0.5.5"}
    v = V.Validator()

    def par(notes: str, **kw: Any) -> tuple[int, int]:
        p = v.cost_model({**base, **kw, "notes": f"single server, {notes}; one replica"}).par
        return p.ep, p.dp_attention

    assert par("TP8 EP8 dp-attention true") == (8, 8)
    assert par("TP8 EP8 dp-attention false") == (8, 1)
    assert par("TP8 EP1 dp-attention false") == (1, 1)
    assert par("TP4 EP4 dp-attention true", model="llama-3.3-70b", tp=4) == (1, 1)
    assert measurements.note_facts({"notes": "MoE expert parallelism 8 (config)"}) == {}


def test_a_result_file_without_formats_takes_the_served_checkpoints() -> None:
    # vLLM's result JSON records no formats: --weight-dtype/--activation-dtype, else the
    # checkpoint's (DeepSeek-V3 FP8 W8A8, gpt-oss MXFP4 W4A16), else bf16
    from simulator.analysis.result_files import checkpoint_formats

    assert checkpoint_formats("deepseek-r1", None, None) == {"weight_dtype": "fp8", "activation_dtype": "fp8"}
    assert checkpoint_formats("gpt-oss-120b", None, None) == {"weight_dtype": "fp4", "activation_dtype": "bf16"}
    assert checkpoint_formats("deepseek-r1", "bf16", None) == {"weight_dtype": "bf16", "activation_dtype": "bf16"}
    assert checkpoint_formats("llama-3.1-8b", "fp8", "fp8") == {"weight_dtype": "fp8", "activation_dtype": "fp8"}
    assert checkpoint_formats("no-such-model", None, None) == {"weight_dtype": "bf16", "activation_dtype": "bf16"}
