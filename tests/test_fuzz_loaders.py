"""Bounded fuzz of the loaders not fuzzed elsewhere (issue 17): byte-level mutations of a valid
file must give a result or one `SpecError` line, never another exception.

Loaders fuzzed in other modules: hardware/model/overlay YAML, HF config.json, traces, scenario
YAML and CLI options (test_reliability.py); measurement CSV and vLLM result JSON
(test_hostile.py). Here: kept sweep points (`--resume`), engine profiles, Vidur op and
all-reduce CSVs (`calibrate --ops/--allreduce`), ShareGPT JSON and Mooncake prefix JSONL.
Every run is derandomized (fixed seed, no example database) and bounded (`FUZZ`): a few
seconds per loader, so CI runs it on every commit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.specs.checks import MESSAGE_CHARS, SpecError

pytestmark = pytest.mark.reliability

ROOT = Path(__file__).resolve().parents[1]
FUZZ = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))
MUTATIONS = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 8), st.binary(max_size=8)), max_size=4)


def _mutate(data: bytes, muts) -> bytes:
    """Replace `cut` bytes at `at` (modulo the length) by `junk`, for each mutation."""
    for at, cut, junk in muts:
        i = at % (len(data) + 1)
        data = data[:i] + junk + data[i + cut:]
    return data


def _one_line(e: SpecError) -> None:
    msg = str(e)
    assert "\n" not in msg and len(msg) <= MESSAGE_CHARS + 3, msg


def _run(tmp_path_factory, name: str, good: bytes, muts, load) -> None:
    f = tmp_path_factory.mktemp("fz") / name
    f.write_bytes(_mutate(good, muts))
    try:
        load(f)
    except SpecError as e:
        _one_line(e)


def _points_file() -> bytes:
    from simulator.cli.pointstore import PointStore
    from simulator.scenario import Scenario

    sc = Scenario(workload="random", num_requests=3, input_len=16, output_len=2)
    header = PointStore.make_header(sc, ())
    lines = [json.dumps(header)]
    from simulator.cli.pointstore import _digest

    for i, rate in enumerate((1.0, 2.0)):
        key = PointStore.key(sc.as_dict(), rate)
        summary = {"completed": 3, "failed": 0, "rate": rate, "mean_ttft_ms": 10.0 + i}
        lines.append(json.dumps({"key": key, "summary": summary, "sha256": _digest(key, summary)}))
    return ("\n".join(lines) + "\n").encode()


@FUZZ
@given(muts=MUTATIONS)
def test_fuzz_kept_sweep_points(tmp_path_factory, muts):
    from simulator.cli.pointstore import PointStore
    from simulator.scenario import Scenario

    sc = Scenario(workload="random", num_requests=3, input_len=16, output_len=2)
    header = PointStore.make_header(sc, ())

    def load(f: Path) -> None:
        d = f.parent / "keep"
        d.mkdir()
        (d / PointStore.FILE).write_bytes(f.read_bytes())
        store = PointStore.resume(d, header)
        try:
            for v in store.points.values():  # every kept point passed its digest and count checks
                assert isinstance(v, dict) and v.get("completed", 0) >= 0
        finally:
            store.close()

    _run(tmp_path_factory, "points.jsonl", _points_file(), muts, load)


@FUZZ
@given(muts=MUTATIONS, name=st.sampled_from(sorted(p.name for p in (ROOT / "engine_specs").glob("*.yaml"))))
def test_fuzz_engine_profile(tmp_path_factory, muts, name):
    from simulator.profiles.profile import load_engine

    _run(tmp_path_factory, "engine.yaml", (ROOT / "engine_specs" / name).read_bytes(), muts,
         lambda f: load_engine(str(f)))


_OPS = ("gpu,model,n_head,n_kv_head,n_embd,n_expanded_embd,use_gated_mlp,vocab_size,"
        "num_tensor_parallel_workers,num_tokens,attn_pre_proj_ms,mlp_up_proj_ms,mlp_down_proj_ms,attn_post_proj_ms\n"
        "h100,llama,32,8,4096,14336,True,128256,1,128,0.05,0.1,0.09,0.03\n"
        "h100,llama,32,8,4096,14336,True,128256,2,256,0.06,0.11,0.1,0.04\n")
_ALLREDUCE = ("node,all_reduce_ms,num_workers,size_bytes,devices_per_node\n"
              "h100_dgx,0.02,2,1048576,2\nh100_dgx,0.05,4,8388608,4\n")


@FUZZ
@given(muts=MUTATIONS, which=st.sampled_from(["ops", "allreduce"]))
def test_fuzz_vidur_csvs(tmp_path_factory, muts, which):
    from simulator.analysis import calibrate as C

    if which == "ops":
        _run(tmp_path_factory, "ops.csv", _OPS.encode(), muts, lambda f: C.vidur_gemm_points(f, "h100-sxm"))
    else:
        _run(tmp_path_factory, "ar.csv", _ALLREDUCE.encode(), muts, lambda f: C.allreduce_points(f, "h100-sxm"))


_SHAREGPT = json.dumps([
    {"id": "a", "conversations": [{"from": "human", "value": "Hello there"}, {"from": "gpt", "value": "Hi!"}]},
    {"id": "b", "conversations": [{"from": "human", "value": "Sum 2+2"}, {"from": "gpt", "value": "4"}]},
]).encode()
_MOONCAKE = (b'{"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [0, 1]}\n'
             b'{"timestamp": 5, "input_length": 700, "output_length": 3, "hash_ids": [0, 2]}\n')


@FUZZ
@given(muts=MUTATIONS, which=st.sampled_from(["sharegpt", "mooncake"]))
def test_fuzz_conversation_and_prefix_traces(tmp_path_factory, muts, which):
    if which == "sharegpt":
        from simulator.workloads.sharegpt import read_conversations

        _run(tmp_path_factory, "sg.json", _SHAREGPT, muts, read_conversations)
    else:
        from simulator.workloads.shared_prefix import read_mooncake_prefix

        _run(tmp_path_factory, "mc.jsonl", _MOONCAKE, muts, read_mooncake_prefix)


def test_fuzz_seeds_are_valid(tmp_path):
    """The unmutated files load (so the fuzzers start from real inputs)."""
    from simulator.analysis import calibrate as C
    from simulator.workloads.shared_prefix import read_mooncake_prefix
    from simulator.workloads.sharegpt import read_conversations

    for name, data in (("ops.csv", _OPS), ("ar.csv", _ALLREDUCE)):
        (tmp_path / name).write_text(data)
    assert len(C.vidur_gemm_points(tmp_path / "ops.csv", "h100-sxm")) > 0
    assert len(C.allreduce_points(tmp_path / "ar.csv", "h100-sxm")) > 0
    (tmp_path / "sg.json").write_bytes(_SHAREGPT)
    assert len(read_conversations(tmp_path / "sg.json")[0]) == 2
    (tmp_path / "mc.jsonl").write_bytes(_MOONCAKE)
    read_mooncake_prefix(tmp_path / "mc.jsonl")
