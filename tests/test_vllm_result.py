"""Issue 25: vLLM's result JSON (keys, types, --save-detailed, --metadata, the derived keys)
and vLLM's flag spellings (--tensor-parallel-size, --quantization, --kv-cache-dtype, ...)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from simulator.cli import vllm_result as vr
from simulator.cli.commands import main
from simulator.specs.checks import SpecError

DATA = Path(__file__).parent / "data"
REAL = json.loads((DATA / "vllm_bench_serve_result_v018.json").read_text())
KEYS = json.loads((DATA / "vllm_bench_serve_keys.json").read_text())
LLMSIM_META = ("llmsim_version", "llmsim_scenario")  # written as --metadata items


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.stdout, r.stderr


def json_type(v: object) -> str:
    """The JSON type of a value, lists by their elements ('list[float]', 'list[list[float]]')."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, list):
        inner = {json_type(x) for x in v}
        assert len(inner) <= 1, inner
        return f"list[{inner.pop() if inner else '?'}]"
    return {int: "int", float: "float", str: "str", dict: "dict"}[type(v)]


def saved(tmp_path: Path, *args: str) -> dict:
    d = tmp_path / "out"
    code, _, err = run("simulate", *args, "--save-result", "--result-dir", str(d))
    assert code == 0, err
    files = list(d.glob("*.json"))
    assert len(files) == 1, files
    return json.loads(files[0].read_text())


# A `vllm bench serve` command as a user runs it, plus the `vllm serve` flags of the deployment
# (tensor parallelism, quantization, KV format, the API name): only vLLM's spellings.
VLLM_COMMAND = ("--model", "meta-llama/Llama-3.1-70B-Instruct", "--tensor-parallel-size", "4",
                "--quantization", "fp8", "--kv-cache-dtype", "fp8_e4m3", "--served-model-name", "llama-70b",
                "--backend", "openai", "--host", "127.0.0.1", "--port", "8000", "--endpoint", "/v1/completions",
                "--dataset-name", "random", "--random-input-len", "1024", "--random-output-len", "128",
                "--random-range-ratio", "0.1", "--num-prompts", "120", "--request-rate", "4", "--burstiness", "1.0",
                "--seed", "0", "--ignore-eos", "--disable-tqdm", "--percentile-metrics", "ttft,tpot,itl",
                "--metric-percentiles", "99")


def test_must_show_vllm_only_command_writes_a_vllm_result(tmp_path):
    """Must show: a simulate command written with only vLLM's flags runs and writes a result
    file whose keys and value types equal a real vLLM file's."""
    ours = saved(tmp_path, *VLLM_COMMAND)
    # llmsim's two additions are --metadata items (string values at vLLM's metadata position)
    assert [k for k in ours if k.startswith("llmsim_")] == list(LLMSIM_META)
    assert all(isinstance(ours[k], str) for k in LLMSIM_META)
    keys = [k for k in ours if k not in LLMSIM_META]
    # 1. the real file (an older vLLM): every key of it, with its type, and only these plus
    #    latencies/queue_times, which newer vLLM writes even without --save-detailed
    assert set(keys) - set(REAL) == {"latencies", "queue_times"}
    assert set(REAL) - set(keys) == set()
    for k, v in REAL.items():
        assert json_type(ours[k]) == json_type(v), k
    assert [k for k in keys if k in REAL] == list(REAL)  # the same order
    # 2. the newer vLLM's keys, order and types, read from its source
    assert [[k, json_type(ours[k])] for k in keys] == KEYS["keys"]
    # the deployment the vLLM flags asked for was simulated
    sc = json.loads(ours["llmsim_scenario"])
    assert (sc["tp"], sc["weight_dtype"], sc["activation_dtype"], sc["kv_dtype"]) == (4, "fp8", "fp8", "fp8")
    assert ours["model_id"] == "meta-llama/Llama-3.1-70B-Instruct"  # --model as given, as vLLM writes it
    assert ours["num_prompts"] == ours["completed"] == len(ours["latencies"]) == 120


def test_save_detailed_adds_vllms_per_request_lists(tmp_path):
    ours = saved(tmp_path, *VLLM_COMMAND, "--save-detailed")
    keys = [k for k in ours if k not in LLMSIM_META]
    for key, typ, after in KEYS["detailed"]:
        assert json_type(ours[key]) == typ, key
        assert keys[keys.index(key) - 1] == after, key
    assert len(keys) == len(KEYS["keys"]) + len(KEYS["detailed"])
    n = len(ours["latencies"])
    assert all(len(ours[k]) == n for k, _, _ in KEYS["detailed"])
    for i in range(n):  # vLLM's latency is ttft + the sum of the request's gaps
        assert ours["ttfts"][i] + sum(ours["itls"][i]) == pytest.approx(ours["latencies"][i], rel=1e-9)
        assert len(ours["itls"][i]) == ours["output_lens"][i] - 1
    assert set(ours["generated_texts"]) == {""} and set(ours["errors"]) == {""}


def test_defaults_write_what_vllm_writes(tmp_path):
    """No input/output lengths without --save-detailed; e2el percentiles only on request."""
    ours = saved(tmp_path, "-n", "30", "--request-rate", "5", "--input-len", "256", "--output-len", "16")
    assert "input_lens" not in ours and "output_lens" not in ours and "mean_e2el_ms" not in ours
    asked = saved(tmp_path / "b", "-n", "30", "--request-rate", "5", "--input-len", "256", "--output-len", "16",
                  "--percentile-metrics", "e2el,ttft", "--metric-percentiles", "50,99.9")
    keys = [k for k in asked if k.endswith("_ms")]
    # vLLM writes ttft before e2el whatever order they were named in
    assert keys == ["mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p50_ttft_ms", "p99.9_ttft_ms",
                    "mean_e2el_ms", "median_e2el_ms", "std_e2el_ms", "p50_e2el_ms", "p99.9_e2el_ms"]
    assert asked["mean_e2el_ms"] == pytest.approx(1e3 * np.mean(asked["latencies"]))


def test_metadata_as_vllm_adds_it(tmp_path):
    ours = saved(tmp_path, "-n", "10", "--input-len", "64", "--output-len", "8",
                 "--metadata", "gpu=h100 sxm", "tp=1", "request_rate=2", "empty=", "--request-rate", "3")
    keys = list(ours)
    # after num_prompts and llmsim's own items, before the traffic keys; values are text
    assert keys[7:12] == [*LLMSIM_META, "gpu", "tp", "request_rate"]
    assert ours["gpu"] == "h100 sxm" and ours["tp"] == "1" and ours["empty"] == ""
    assert ours["request_rate"] == 3.0  # a later vLLM key overwrites a metadata item of that name
    code, _, err = run("simulate", "-n", "5", "--metadata", "novalue", "--save-result", "--result-dir", str(tmp_path))
    assert code == 2 and "metadata: 'novalue' is not KEY=VALUE" in err
    assert vr.parse_metadata(["a = b=c "]) == [("a", "b=c")]


def test_append_result_adds_one_json_line(tmp_path):
    f = tmp_path / "r.json"
    for _ in range(2):
        code, _, err = run("simulate", "-n", "5", "--input-len", "64", "--output-len", "4", "--append-result",
                           "--result-filename", str(f), "-q")
        assert code == 0, err
    lines = f.read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(ln)["completed"] == 5 for ln in lines)


def test_closed_loop_queue_times(tmp_path):
    """Rate inf with --max-concurrency: every request is created at t = 0 and waits for a slot
    (vLLM's client_queue_time); no e2el_including_client_queue at rate inf (vLLM's rule)."""
    # --engine none: the vllm profile's client view (API-server latency) ends a request for the
    # client ~12 ms after the engine frees its slot, and the closed loop sends the next one at the
    # engine's finish, so the client would see 6 in flight (a serving-layer issue, reported)
    ours = saved(tmp_path, "-n", "12", "--input-len", "128", "--output-len", "8", "--max-concurrency", "3",
                 "--percentile-metrics", "ttft,client_queue_time", "--engine", "none")
    q = ours["queue_times"]
    assert q[:3] == [0.0, 0.0, 0.0] and all(x > 0 for x in q[3:])
    assert ours["max_concurrent_requests"] == 3
    assert ours["mean_client_queue_time_ms"] == pytest.approx(1e3 * np.mean(q))
    code, _, err = run("simulate", "-n", "5", "--max-concurrency", "2", "--percentile-metrics",
                       "e2el_including_client_queue", "--save-result", "--result-dir", str(tmp_path / "x"))
    assert code == 2 and "needs --max-concurrency and a finite --request-rate" in err


# ---- the derived keys, by hand ---------------------------------------------------------------

def test_max_output_tokens_per_s_by_hand():
    # A: sent at 0, first token 0.5, last 2.5, 5 tokens -> 0.5 | 1.0 1.5 | 2.0 2.5
    # B: sent at 1.2, tokens at 1.4, 1.6, 1.8 -> bucket 1; bucket 1 holds 2 + 3 = 5
    start, first = np.array([0.0, 1.2]), np.array([0.5, 1.4])
    fin, out = np.array([2.5, 1.8]), np.array([5, 3])
    assert vr.max_output_tokens_per_s(start, first, fin, out) == 5.0
    assert vr.max_output_tokens_per_s(start[:1], first[:1], fin[:1], out[:1]) == 2.0
    # a one-token request counts once, in its first token's bucket
    assert vr.max_output_tokens_per_s(np.array([0.0]), np.array([0.3]), np.array([0.3]), np.array([1])) == 1.0
    assert vr.max_output_tokens_per_s(np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0)) == 0.0


def test_max_output_tokens_per_s_counts_every_token():
    rng = np.random.default_rng(3)
    n = 200
    start = np.sort(rng.uniform(0, 30, n))
    first = start + rng.uniform(0.01, 0.5, n)
    out = rng.integers(1, 300, n)
    fin = first + (out - 1) * rng.uniform(0.005, 0.05, n)
    peak = vr.max_output_tokens_per_s(start, first, fin, out)
    # a slow, obvious reference: place every token, count per bucket
    s0, counts = start.min(), {}
    for f, e, m in zip(first, fin, out, strict=True):
        times = [f] if m == 1 else list(np.linspace(f, e, m))
        for t in times:
            counts[int(t - s0)] = counts.get(int(t - s0), 0) + 1
    assert peak == max(counts.values())


def test_max_concurrent_requests_by_hand():
    # A [0, 2.5), B [1.2, 1.8), C [2.5, 3): C starts as A leaves (departure first) -> peak 2
    assert vr.max_concurrent_requests(np.array([0.0, 1.2, 2.5]), np.array([2.5, 1.8, 3.0])) == 2
    assert vr.max_concurrent_requests(np.array([0.0, 2.5]), np.array([2.5, 3.0])) == 1
    assert vr.max_concurrent_requests(np.zeros(0), np.zeros(0)) == 0


def test_ramp_up_keys_and_events():
    """Ramp-up (the serving branch's schedule): vLLM's header keys, file name and events."""
    sc = SimpleNamespace(ramp_up_strategy="linear", ramp_up_start_rps=1, ramp_up_end_rps=3)
    t0 = datetime(2026, 1, 1, 12, 0, 0)
    ev = vr.rps_change_events(sc, np.array([0.5, 1.0, 1.5, 2.0, 2.5]), t0)
    # rates 1, 1.5, 2, 2.5, 3: 2 reached by request 2 (sent at 1.5 s), 3 by request 4 (2.5 s)
    assert ev == [{"rps": 1, "timestamp": "2026-01-01T12:00:00"}, {"rps": 2, "timestamp": "2026-01-01T12:00:01.500000"},
                  {"rps": 3, "timestamp": "2026-01-01T12:00:02.500000"}]
    name = vr.result_filename({"label": None, "backend": "llmsim", "max_concurrency": None, "model_id": "a/B",
                               "date": "D", "request_rate": "inf", "ramp_up_strategy": "linear",
                               "ramp_up_start_rps": 1, "ramp_up_end_rps": 3})
    assert name == "llmsim-ramp-up-linear-1qps-3qps-B-D.json"


# ---- vLLM's spellings -------------------------------------------------------------------------

def test_vllm_deployment_flags_equal_llmsim_flags():
    a = run("simulate", "-m", "llama-3.1-70b", "--tensor-parallel-size", "4", "--quantization", "awq",
            "--kv-cache-dtype", "auto", "-n", "20", "--input-len", "512", "--output-len", "16", "--json", "-q")
    b = run("simulate", "-m", "llama-3.1-70b", "--tp", "4", "--weight-dtype", "int4", "--kv-dtype", "bf16",
            "-n", "20", "--input-len", "512", "--output-len", "16", "--json", "-q")
    c = run("simulate", "-m", "llama-3.1-70b", "-tp", "4", "--weight-dtype", "int4",
            "-n", "20", "--input-len", "512", "--output-len", "16", "--json", "-q")
    assert a[0] == b[0] == c[0] == 0, a[2] + b[2] + c[2]
    assert json.loads(a[1]) == json.loads(b[1]) == json.loads(c[1])


@pytest.mark.parametrize(("method", "weight", "act"), [
    ("fp8", "fp8", "fp8"), ("awq", "int4", None), ("gptq_marlin", "int4", None), ("mxfp4", "fp4", None),
    ("modelopt_fp4", "fp4", "fp4"), ("int8_per_channel_weight_only", "int8", None)])
def test_quantization_methods(method, weight, act):
    from simulator.cli.vllm_flags import quantization_dtypes

    assert quantization_dtypes(method) == (weight, act)


@pytest.mark.parametrize(("name", "act", "kv"), [
    ("auto", "bf16", "bf16"), ("auto", "fp16", "fp16"), ("auto", "fp8", "bf16"), ("fp8", "bf16", "fp8"),
    ("fp8_e4m3", "bf16", "fp8"), ("fp8_e5m2", "bf16", "fp8"), ("bfloat16", "bf16", "bf16"), ("int4", "bf16", "int4")])
def test_kv_cache_dtype_names(name, act, kv):
    from simulator.cli.vllm_flags import kv_cache_dtype

    assert kv_cache_dtype(name, act) == kv


def test_kv_cache_dtype_in_predict():
    a = run("predict", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--kv-cache-dtype", "fp8_e5m2", "--json")
    assert a[0] == 0, a[2]
    assert json.loads(a[1])["kv_dtype"] == "fp8"


@pytest.mark.parametrize(("args", "message"), [
    (["--quantization", "gguf"], "quantization: 'gguf': GGUF mixes bit widths"),
    (["--quantization", "compressed-tensors"], "give --weight-dtype and --activation-dtype"),
    (["--quantization", "nonsense"], "is not a vLLM method llmsim prices"),
    (["--quantization", "fp8", "--weight-dtype", "int4"], "--weight-dtype int4 contradicts it"),
    (["--kv-cache-dtype", "turboquant_k8v4"], "different bit widths"),
    (["--lora-modules", "a", "b"], "--lora-modules: not simulated: LoRA adapters are not modelled"),
    (["--num-warmups", "3"], "--num-warmups: not simulated"),
    (["--tokenizer", "other/tok"], "--tokenizer: not simulated"),
    (["--backend", "openai-embeddings"], "--backend: 'openai-embeddings'"),
    (["--plot-timeline"], "--out DIR"),
    (["--dataset-name", "hf"], "dataset-name: vLLM's 'hf' dataset is not simulated: a Hugging Face dataset"),
])
def test_unhonourable_vllm_flags_are_refused_in_one_line(args, message):
    code, out, err = run("simulate", "-n", "5", "-q", *args)
    assert code == 2 and message in err, err
    assert err.count("\n") == 1 and err.startswith("error: ")


def test_accepted_client_flags_change_nothing():
    base = ["simulate", "-n", "10", "--input-len", "128", "--output-len", "8", "--json", "-q"]
    a = run(*base)
    b = run(*base, "--host", "10.0.0.1", "--port", "9", "--base-url", "http://x", "--header", "a=b", "c=d",
            "--served-model-name", "m", "--temperature", "0", "--top-p", "1", "--ignore-eos", "--insecure",
            "--request-id-prefix", "x-", "--ready-check-timeout-sec", "5", "--backend", "openai-chat",
            "--tokenizer", "llama-3.1-8b", "-m", "llama-3.1-8b")
    c = run(*base, "-m", "llama-3.1-8b")
    assert a[0] == b[0] == c[0] == 0, b[2]
    assert json.loads(b[1]) == json.loads(c[1])


def test_dataset_path_is_honoured_or_refused_for_every_dataset(tmp_path):
    """Every workload of the registries and every vLLM dataset name: --dataset-path is read
    (a bad file is then an error about its content) or refused with a one-line reason."""
    from simulator.cli.vllm_flags import VLLM_DATASETS_REFUSED
    from simulator.workloads.named import NAMED_WORKLOADS
    from simulator.workloads.traces import BUILTIN_WORKLOADS

    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    names = [*NAMED_WORKLOADS, *BUILTIN_WORKLOADS, *VLLM_DATASETS_REFUSED]
    for name in names:
        code, _, err = run("simulate", "--dataset-name", name, "--dataset-path", str(bad), "-n", "3", "-q")
        assert code == 2 and err.count("\n") == 1, (name, err)
        entry = NAMED_WORKLOADS.get(name)
        if entry is not None and entry.dataset_path:  # read: the error is about the file's content
            assert "dataset_path" in err and "bad.json" in err and "applies to" not in err, (name, err)
        elif name in VLLM_DATASETS_REFUSED:
            assert "is not simulated" in err, (name, err)
        else:
            assert "applies to workload" in err and "reads no dataset file" in err, (name, err)


def test_parse_metadata_and_percentiles_errors():
    with pytest.raises(SpecError, match="is not KEY=VALUE"):
        vr.parse_metadata(["=x"])
    assert vr.parse_percentile_metrics("e2el, itl,ttft") == ["ttft", "itl", "e2el"]


def test_validate_reads_a_large_detailed_result(tmp_path):
    """A --save-detailed file of 800 prompts holds > 100,000 values (the per-request itls):
    validate reads it (the bound on a spec's values does not apply to result files)."""
    f = tmp_path / "d.json"
    code, _, err = run("simulate", "-n", "800", "--input-len", "64", "--output-len", "130", "--request-rate", "50",
                       "--save-detailed", "--result-filename", str(f), "-q")
    assert code == 0, err
    assert sum(len(x) for x in json.loads(f.read_text())["itls"]) > 100_000
    code, out, err = run("validate", str(f), "-m", "llama-3.1-8b", "-H", "h100-sxm", "--num-requests", "50",
                         "--json", "-q")
    assert code == 0, err
    assert json.loads(out)["predicted"] > 0
