"""Issue 26, the readers' causes: engine-profile domains (4, 5), the ShareGPT and Mooncake
readers (6), Mooncake memory (8, Mooncake part), vLLM result fields in `validate` (13) and
ignored input (14). Each test failed before its fix (the counts are in the helper's report)."""

from __future__ import annotations

import json
import re
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reliability_helpers import invoke, one_line_error

from simulator.specs.checks import SpecError

pytestmark = pytest.mark.reliability

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
VLLM = json.loads((DATA / "vllm_bench_serve_result.json").read_text())




def _profile_run(tmp_path: Path, text: str):
    """A profile overlay loaded and used as a run uses it (limits, policy, cost model)."""
    from simulator.scenario import Scenario

    f = tmp_path / "engine.yaml"
    f.write_text(text)
    sc = Scenario(workload="random", model="llama-3.1-8b", hardware="h100-sxm", engine=str(f), num_requests=3, input_len=100,
                  output_len=10)
    sc.engine_config()
    sc.cost_model()
    return sc


# ---------------------------------------------------------------------- cause 4: tracebacks

#: (overlay, words of the one-line error): a bare value where a mapping is expected, and
#: wrong-typed scheduler parameters; each was a traceback (AttributeError, TypeError, ValueError)
CAUSE4 = [
    ("base: vllm\noverheads:\n  step_overhead_s: 0.004\n", ["overheads.step_overhead_s", "not a mapping"]),
    ("base: trtllm\noverheads:\n  runtime_reserve_bytes: 5\n", ["overheads.runtime_reserve_bytes", "not a mapping"]),
    ("base: vllm-v0\noverheads:\n  sequence_overhead_s: abc\n", ["overheads.sequence_overhead_s", "not a mapping"]),
    ("base: sglang\nscheduler:\n  params:\n    new_token_ratio: {init: abc}\n",
     ["params.new_token_ratio.init", "'abc'", "must be a number"]),
    ("base: sglang\nscheduler:\n  params:\n    new_token_ratio: {decay_steps: [1]}\n",
     ["params.new_token_ratio.decay_steps"]),
    ("base: vllm-v0\nscheduler:\n  params:\n    num_scheduler_steps: x\n",
     ["params.num_scheduler_steps", "'x'", "must be an integer >= 1"]),
    ("base: vllm\nscheduler:\n  params:\n    watermark_fraction: abc\n", ["params.watermark_fraction", "'abc'"]),
    ("base: sglang\nlimits:\n  tables:\n    gpu_tiers: 5\n", ["tables.gpu_tiers", "not a list"]),
    ("base: sglang\nlimits:\n  tables:\n    gpu_tiers: [[20, abc, 8, 8]]\n", ["tables.gpu_tiers[0].chunked_prefill_size"]),
    ("base: vllm\nlimits:\n  tables:\n    batch_defaults: [1]\n", ["tables.batch_defaults[0]", "not a mapping"]),
]


@pytest.mark.parametrize(("text", "words"), CAUSE4, ids=[w[0] for _, w in CAUSE4])
def test_cause4_profile_type_mismatches_are_one_line(tmp_path, text, words):
    with pytest.raises(SpecError) as e:
        _profile_run(tmp_path, text)
    msg = str(e.value)
    assert msg.startswith(str(tmp_path / "engine.yaml")) and "\n" not in msg
    for w in words:
        assert w in msg, (w, msg)


def test_cause4_through_the_cli(tmp_path):
    f = tmp_path / "engine.yaml"
    f.write_text(CAUSE4[0][0])
    one_line_error(invoke("simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--engine", str(f), "-n", "3"),
                   "engine.yaml", "overheads.step_overhead_s", "not a mapping")


# ---------------------------------------------------------------------- cause 5: silent acceptance

CAUSE5 = [
    ("trtllm", "capacity_scheduler_policy: bogus",
     "is not one of GUARANTEED_NO_EVICT, MAX_UTILIZATION, STATIC_BATCH"),
    ("trtllm", "capacity_scheduler_policy: 5", "is not one of GUARANTEED_NO_EVICT"),
    ("trtllm", "capacity_scheduler_policy: STATIC_BATCH",
     "'STATIC_BATCH' is not modelled by llmsim (STATIC_BATCH is not simulated); allowed: GUARANTEED_NO_EVICT, "
     "MAX_UTILIZATION"),
    ("trtllm", "context_chunking_policy: EQUAL_PROGRESS", "not modelled"),
    ("sglang", "schedule_conservativeness: -1", "params.schedule_conservativeness: -1 must be a number >= 0"),
    ("sglang", "schedule_policy: lpm", "'lpm' is not modelled"),
    ("sglang", "clip_max_new_tokens: 100", "not modelled"),
    ("vllm-v0", "num_scheduler_steps: 0", "params.num_scheduler_steps: 0 must be an integer >= 1"),
    ("vllm", "preemption: swap", "params.preemption: 'swap' is not a mapping"),
    ("vllm", "preemption: {mode: swap}", "params.preemption.mode: 'swap' is not modelled"),
    ("vllm", "order: priority", "params.order: 'priority' is not modelled"),
    ("vllm", "running_first: 1", "params.running_first: 1 is not true or false"),
    ("vllm", "admission_kv_check: everything", "is not one of full_prompt, first_chunk"),
    ("vllm-v0", "chunked_prefill: true", "disagrees with limits.chunked_prefill"),
]


@pytest.mark.parametrize(("base", "param", "words"), CAUSE5, ids=[f"{b}-{p}" for b, p, _ in CAUSE5])
def test_cause5_invalid_profile_values_are_refused(tmp_path, base, param, words):
    """Each of these ran the default behaviour silently (GUARANTEED_NO_EVICT, recompute, ...)."""
    with pytest.raises(SpecError) as e:
        _profile_run(tmp_path, f"base: {base}\nscheduler:\n  params:\n    {param}\n")
    assert words in str(e.value), str(e.value)


def test_cause5_schedule_conservativeness_is_applied(tmp_path):
    """SGLang: init_new_token_ratio = min(0.7 x schedule_conservativeness, 1); it was ignored."""
    half = _profile_run(tmp_path, "base: sglang\nscheduler:\n  params:\n    schedule_conservativeness: 0.5\n")
    assert half.policy_params["init_new_token_ratio"] == pytest.approx(0.35)
    big = _profile_run(tmp_path, "base: sglang\nscheduler:\n  params:\n    schedule_conservativeness: 3\n")
    assert big.policy_params["init_new_token_ratio"] == pytest.approx(1.0)


def test_cause5_every_domain_holds_its_default_and_the_shipped_values():
    """One declaration per parameter: its default is in its own domain, and every shipped
    profile's value is in it (they load)."""
    from simulator.profiles.profile import (
        BENCH_SETTINGS,
        POLICY_PARAM_DOMAINS,
        TABLE_DOMAINS,
        engine_catalog,
    )
    from simulator.specs.fields import Param

    def walk(where: str, p: Param):
        if p.default is not None:
            p.check(where, p.default)
        for k, sub in (p.fields or {}).items():
            walk(f"{where}.{k}", sub)

    for policy, params in POLICY_PARAM_DOMAINS.items():
        for k, p in params.items():
            walk(f"{policy}.{k}", p)
    walk("settings", BENCH_SETTINGS)
    assert set(TABLE_DOMAINS) == {"batch_defaults", "gpu_tiers"}
    assert len(engine_catalog()) == len(list((ROOT / "engine_specs").glob("*.yaml")))


def test_cause5_profile_comments_list_what_the_code_allows():
    """An enum named in an engine_specs comment is a value the code knows, and one the code
    does not simulate is marked "not modelled" there (the trtllm comment listed STATIC_BATCH
    as allowed)."""
    from simulator.profiles.profile import POLICY_PARAM_DOMAINS

    trt = POLICY_PARAM_DOMAINS["trtllm"]
    checked = 0
    for f in sorted((ROOT / "engine_specs").glob("*.yaml")):
        for line in f.read_text().splitlines():
            key = line.strip().split(":", 1)[0]
            if key not in ("capacity_scheduler_policy", "context_chunking_policy") or "#" not in line:
                continue
            comment = line.split("#", 1)[1]
            dom = trt[key]
            for word in re.findall(r"\b[A-Z][A-Z_]{4,}\b", comment):
                assert word in dom.choices, (f.name, word)
                if dom.modelled is not None and word not in dom.modelled:
                    assert "not modelled" in comment.split(word, 1)[1].split(",")[0] + comment, (f.name, word)
                    checked += 1
    assert checked >= 2  # trtllm and trtllm-mlperf name STATIC_BATCH / EQUAL_PROGRESS


# ---------------------------------------------------------------------- cause 6: ShareGPT, Mooncake readers

SHAREGPT_GOOD = '{"id": "a", "conversations": [{"from": "human", "value": "hi there"}, {"from": "gpt", "value": "ok"}]}'
SHAREGPT_CASES = [
    ("digits.json", '[{"id": ' + "7" * 5000 + ', "conversations": []}]', ["digits.json:1:", "5000 digits"]),
    ("deep.json", "[\n" + "[" * 100_000 + "]" * 100_000 + "]", ["deep.json:2:", "nested more than"]),
    ("deep_cut.json", "[" + SHAREGPT_GOOD + ", " + "[" * 100_000, ["deep_cut.json:1:", "nested more than"]),
    ("digits_cut.json", "[" + SHAREGPT_GOOD + ",\n[" + "9" * 5000, ["digits_cut.json:2:", "5000 digits"]),
    ("conv_number.json", '[{"conversations": 5}]', ["[0].conversations", "is not a list of turns"]),
    ("turn_number.json", '[{"conversations": [1, 2]}]', ["[0].conversations[0]", "is not a turn mapping"]),
    ("no_value.json", '[{"conversations": [{"from": "human"}, {"value": "x"}]}]',
     ["[0].conversations[0].value", "None is not a string"]),
    ("value_list.json", '[' + SHAREGPT_GOOD + ', {"conversations": [{"value": "a"}, {"value": [1]}]}]',
     ["[1].conversations[1].value", "is not a string"]),
]


@pytest.mark.parametrize(("name", "text", "words"), SHAREGPT_CASES, ids=[c[0] for c in SHAREGPT_CASES])
def test_cause6_sharegpt_dataset_reader(tmp_path, name, text, words):
    """`--dataset-path`: deep nesting, 5,000-digit integers and malformed entries are one line
    naming the file (and its line or the entry's path); they were tracebacks."""
    from simulator.workloads.sharegpt import sample_sharegpt

    f = tmp_path / name
    f.write_text(text)
    with pytest.raises(SpecError) as e:
        sample_sharegpt(3, dataset_path=f)
    msg = str(e.value)
    assert msg.startswith("dataset_path: ") and "\n" not in msg
    for w in words:
        assert w in msg, (w, msg)


def test_cause6_sharegpt_through_the_cli(tmp_path):
    f = tmp_path / "deep.json"
    f.write_text(next(c[1] for c in SHAREGPT_CASES if c[0] == "deep.json"))
    one_line_error(invoke("simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-w", "sharegpt", "--dataset-path",
                          str(f), "-n", "3"), "deep.json", "nested more than")


MOONCAKE_OK = '{"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [0, 1]}\n'


@pytest.mark.parametrize("careful", [False, True])
def test_cause6_mooncake_5000_digit_hash_id(tmp_path, careful):
    """A 5,000-digit hash id (canonical line, or one read by the careful path) names its line."""
    from simulator.workloads.traces import read_trace

    big = "8" * 5000
    line2 = (f'{{"timestamp": 5, "input_length": 700, "output_length": 3, "hash_ids": [0, {big}]}}\n' if not careful
             else f'{{"output_length": 3, "timestamp": 5, "input_length": 700, "hash_ids": [0, {big}]}}\n')
    f = tmp_path / "t.jsonl"
    f.write_text(MOONCAKE_OK + line2)
    with pytest.raises(SpecError, match=rf"^{re.escape(str(f))}:2: key 'hash_ids': an id of 5,000 digits"):
        read_trace(f)
    w = read_trace(f, skip_bad_rows=True)
    assert w.num_requests == 1 and w.bad_rows == 1 and w.extra["hash_ids"].tolist() == [(0, 1)]


def test_cause6_mooncake_through_the_cli(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text(MOONCAKE_OK + MOONCAKE_OK.replace("[0, 1]", "[" + "1" * 5000 + "]"))
    one_line_error(invoke("simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-w", str(f)), "t.jsonl:2:", "digits")


def test_cause8_mooncake_line_bound_before_parsing(tmp_path, monkeypatch):
    """A line over MAX_JSONL_LINE_BYTES (1 MB; here lowered to 200 bytes) is refused naming it
    before any line is parsed (a 480 MB line took 11.6 GB)."""
    from simulator.workloads.traces import mooncake, read_trace

    monkeypatch.setattr(mooncake, "MAX_JSONL_LINE_BYTES", 200)

    def boom(*a, **k):
        raise AssertionError("parsed before the line bound")

    monkeypatch.setattr(mooncake, "_read_canonical", boom)
    monkeypatch.setattr(mooncake, "_parse_line", boom)
    f = tmp_path / "t.jsonl"
    long = MOONCAKE_OK.replace("[0, 1]", "[" + ", ".join(map(str, range(100))) + "]")
    f.write_text(MOONCAKE_OK * 3 + long)
    with pytest.raises(SpecError, match=rf"^{re.escape(str(f))}:4: a line of {len(long) - 1:,} bytes; a Mooncake "
                                        r"JSONL line is at most 200 bytes$"):
        read_trace(f)


def test_cause8_mooncake_line_bound_is_documented_size():
    from simulator.specs.readers import MAX_JSONL_LINE_BYTES
    from simulator.workloads.traces.mooncake import MAX_HASH_DIGITS

    # a 10M-token prompt's ids (one per 512 tokens) at the longest id and ", " fit in a line
    ids = -(-10_000_000 // 512)
    assert ids == 19_532 and ids * (MAX_HASH_DIGITS + 2) + 200 < MAX_JSONL_LINE_BYTES


# ---------------------------------------------------------------------- cause 8: Mooncake memory


@settings(max_examples=60, derandomize=True, deadline=None)
@given(rows=st.lists(st.tuples(st.lists(st.integers(0, 4), max_size=6), st.integers(1, 3000)), min_size=1, max_size=6),
       bs=st.sampled_from([1, 3, 16, 64, 100, 512, 1024]))
def test_cause8_shared_block_hashes_equal_the_reference(rows, bs):
    """The shared storage gives exactly block_hashes(mooncake_segments(...)) per request."""
    from simulator.workloads.shared_prefix import (
        _UNIQUE_BASE,
        block_hashes,
        mooncake_segments,
        request_block_hashes,
    )
    from simulator.workloads.workload import Workload, object_column

    ids = [tuple(r[0]) for r in rows]
    lens = [r[1] for r in rows]
    wl = Workload(np.zeros(len(rows)), lens, [1] * len(rows), extra={"hash_ids": object_column(ids)})
    got = [list(h) for h in request_block_hashes(wl, bs)]
    assert got == [block_hashes(mooncake_segments(list(h), n, _UNIQUE_BASE + i), bs)
                   for i, (h, n) in enumerate(zip(ids, lens, strict=True))]


def test_cause8_mooncake_hashes_are_shared_not_copied():
    """200 requests of 64,000 tokens sharing all 125 of their 512-token ids: 4,000 blocks of 16
    tokens each. Copied per request that was 800,000 Python ints (~30 MB); shared it is the 125
    chunks' 4,000 hashes (32 kB) plus 125 chunk indices per request (200 x 1 kB)."""
    from simulator.workloads.shared_prefix import request_block_hashes
    from simulator.workloads.workload import Workload, object_column

    n, ids = 200, tuple(range(1000, 1125))
    wl = Workload(np.zeros(n), [64_000] * n, [1] * n, extra={"hash_ids": object_column([ids] * n)})
    tracemalloc.start()
    try:
        hashes = request_block_hashes(wl, 16)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(hashes) == n and len(hashes[0]) == 4000 and hashes[7] == hashes[0]
    assert peak < 1_000_000, peak  # bytes, for 200 x 64k-token prompts


# ---------------------------------------------------------------------- cause 13: vLLM result fields


def _vllm(tmp_path: Path, **changes) -> Path:
    f = tmp_path / "r.json"
    f.write_text(json.dumps({**VLLM, **changes}))
    return f


CAUSE13 = [
    ({"max_concurrency": 1.5}, "max_concurrency: 1.5 must be an integer >= 1"),
    ({"num_prompts": 4, "completed": 4}, "input_lens: 8 entries, more than num_prompts 4"),
    ({"num_prompts": None, "completed": 4}, "input_lens: 8 entries, more than the 4 completed requests"),
    ({"completed": -1}, "completed: -1 must be an integer >= 0"),
    ({"completed": 300}, "completed: 300 is more than num_prompts 200"),
    ({"duration": "x"}, "duration: 'x' must be a number >= 0"),
    ({"duration": 0}, "duration: 0 must be > 0 s for 200 completed requests"),
    ({"output_lens": [1, 2]}, "input_lens has 8 entries, output_lens 2"),
    ({"input_lens": [100, -5]}, "input_lens[1]: -5 must be an integer >= 0"),
    ({"backend": "llmsim", "llmsim_scenario": '{"engine": "vllm"'}, "llmsim_scenario:1: invalid JSON"),
    ({"backend": "llmsim", "llmsim_scenario": "[1, 2]"}, "llmsim_scenario: [1, 2] is not the saved scenario"),
    ({"backend": "llmsim"}, "llmsim_scenario: None is not the saved scenario"),
    ({"backend": "llmsim", "llmsim_scenario": '{"engine": 5}'}, "llmsim_scenario.engine: 5 is not an engine"),
]


@pytest.mark.parametrize(("changes", "words"), CAUSE13, ids=[",".join(c) for c, _ in CAUSE13])
def test_cause13_vllm_result_fields_are_checked(tmp_path, changes, words):
    from simulator.analysis.measurements import read_vllm_result

    f = _vllm(tmp_path, **changes)
    with pytest.raises(SpecError) as e:
        read_vllm_result(f, model="llama-3.1-8b", hardware="h100-sxm")
    assert str(e.value).startswith(f"{f}: ") and words in str(e.value), str(e.value)


def test_cause13_a_sound_llmsim_result_keeps_its_engine(tmp_path):
    from simulator.analysis.measurements import read_vllm_result

    f = _vllm(tmp_path, backend="llmsim", llmsim_scenario='{"engine": "sglang"}')
    assert {r["engine"] for r in read_vllm_result(f, model="llama-3.1-8b", hardware="h100-sxm")} == {"sglang"}


def test_cause13_through_validate(tmp_path):
    f = _vllm(tmp_path, max_concurrency=1.5)
    one_line_error(invoke("validate", str(f), "-m", "llama-3.1-8b", "-H", "h100-sxm"),
                   "r.json", "max_concurrency: 1.5 must be an integer")


# ---------------------------------------------------------------------- cause 14: ignored input


def test_cause14_deployment_without_disagg_is_refused(tmp_path):
    from simulator.scenario import Scenario

    with pytest.raises(SpecError, match=r"^deployment: applies only to a disaggregated run; give disagg: P:D"):
        Scenario(model="llama-3.1-8b", hardware="h100-sxm", deployment={"decode": {"tp": 2}})
    c = tmp_path / "s.yaml"
    c.write_text("model: llama-3.1-8b\nhardware: h100-sxm\nnum_requests: 3\ndeployment:\n  prefill: {tp: 2}\n")
    one_line_error(invoke("simulate", "-c", str(c)), "deployment: applies only to a disaggregated run")
    # with disagg the same section applies
    assert Scenario(model="llama-3.1-8b", hardware="h100-sxm", disagg="1:1",
                    deployment={"decode": {"tp": 2}}).pool("decode").tp == 2


@pytest.mark.parametrize("method", [["fp8"], "int3-magic", 5])
def test_cause14_hf_quant_method_is_checked(tmp_path, method):
    from simulator.specs.catalog import QUANT_METHODS, import_hf_config

    cfg = json.loads((DATA / "hf_configs" / "DeepSeek-V3.json").read_text())
    cfg["quantization_config"]["quant_method"] = method
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    with pytest.raises(SpecError, match=r"quantization_config\.quant_method: .* is not one of fp8, mxfp4, awq"):
        import_hf_config(f)
    assert "fp8" in QUANT_METHODS


def test_cause14_hf_quant_method_known_but_unmapped_is_said(tmp_path):
    from simulator.specs.catalog import import_hf_config

    cfg = json.loads((DATA / "hf_configs" / "DeepSeek-V3.json").read_text())
    cfg["quantization_config"]["quant_method"] = "awq"
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    spec = import_hf_config(f)
    assert spec.default_weight_dtype == "bf16" and "quantized (awq)" in spec.notes
