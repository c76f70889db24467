"""Issue 26 (reliability, round three), causes 8, 9 and 16: memory before checks, the context of
MemoryError, and the Python API's argument domains."""

from __future__ import annotations

import math
import time
import tracemalloc

import numpy as np
import pytest

import simulator as L
from simulator.scenario import Scenario
from simulator.specs.checks import SpecError
from simulator.workloads.shared_prefix import block_hashes, shared_prefix
from simulator.workloads.workload import Workload

# ---- cause 8: limits before anything is built; multi-turn linear; hashes shared --------------

def test_system_prompt_len_over_the_token_limit_is_refused_before_building():
    # 1e9 tokens built 5.8 GB of hashes for 8 requests; now refused before anything is built
    t = time.perf_counter()
    with pytest.raises(SpecError, match=r"system_prompt_len: 1000000000 must be an integer >= 0 and <= 10000000"):
        Scenario(workload="shared-prefix", num_requests=8,
                 workload_params={"system_prompt_len": 10**9}).make_workload()
    with pytest.raises(SpecError, match="a prompt is at most 10,000,000 tokens"):
        shared_prefix(1, 1, 9_000_000, 2_000_000, 1, 8)
    # multi-turn: round k re-sends the history: 1000 + 100 + 99 x (100 + 128) tokens > 20,000
    with pytest.raises(SpecError, match="a prompt is at most"):
        shared_prefix(1, 1, 9_990_000, 100, 128, 100, multi_turn=True)
    with pytest.raises(SpecError, match="at most 10,000,000"):
        shared_prefix(10**6, 10**6, 10, 10, 1, 8)
    assert time.perf_counter() - t < 2.0


@pytest.mark.parametrize("fields, match", [
    (dict(input_len=10**9), "input_len: 1000000000 must be an integer >= 1 and <= 10000000"),
    (dict(output_len=10**7 + 1), "output_len: 10000001 must be an integer >= 1 and <= 10000000"),
    (dict(workload="inference-perf-shared-prefix-general", workload_params={"question_len": 10**8}),
     "question_len: 100000000 must be an integer >= 0 and <= 10000000"),
    (dict(workload="mlperf-openorca-llama2", workload_params={"mean_output_tokens": 10**9}),
     "mean_output_tokens: 1000000000 must be an integer >= 0 and <= 10000000"),
])
def test_every_workload_length_has_the_token_limit(fields, match):
    with pytest.raises(SpecError, match=match):
        Scenario(num_requests=4, **fields).make_workload()


def test_multi_turn_memory_is_linear_in_n():
    # 8 sessions: 1,000 vs 4,000 requests (125 vs 500 rounds). Flattened histories and
    # per-request hash lists grew as n^2 (x16 for x4 requests); shared ones grow as n.
    def peak(n: int) -> int:
        tracemalloc.start()
        w = shared_prefix(2, 4, 64, 16, 16, n, multi_turn=True).to_workload()
        from simulator.workloads.shared_prefix import request_block_hashes

        h = request_block_hashes(w, 16)
        size = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert len(h) == n
        return size

    small, big = peak(1000), peak(4000)
    assert big < 6 * small, (small, big)


def test_shared_hashes_equal_the_flat_hashes():
    # every request's (shared) hashes equal the hashes of its flattened prompt; a parent's
    # extend over its answer (the child's leading blocks)
    pw = shared_prefix(2, 3, 40, 9, 7, 30, multi_turn=True, seed=1)
    from simulator.workloads.shared_prefix import request_block_hashes

    for bs in (1, 4, 16):
        got = pw.block_hashes(bs)
        for p, h in zip(pw.prompts, got, strict=True):
            assert list(h) == block_hashes(tuple(p), bs)
        w = pw.to_workload()
        ext = request_block_hashes(w, bs)
        for c, par in enumerate(pw.parent.tolist()):
            if par >= 0:
                full = (int(w.input_len[par]) + int(w.output_len[par])) // bs
                assert list(ext[par]) == list(ext[c])[:full]


def test_a_long_session_is_read_without_recursion():
    # 3,000 rounds of one session (deeper than Python's recursion limit): the last prompt links
    # to the history; indexing, equality and hashing walk it in a loop (no RecursionError).
    # A guard of the linked prompts, not a regression test (flat tuples pass it too)
    pw = shared_prefix(1, 1, 3, 1, 1, 3000, multi_turn=True)
    last = pw.prompts[-1]
    assert len(last) == 2 + 2 * 2999 and last[0].num_tokens == 3 and last[1].num_tokens == 1
    assert int(pw.input_len[-1]) == 3 + 1 + 2999 * 2
    assert last[:3] == tuple(last)[:3]
    h = pw.block_hashes(16)
    assert len(h[-1]) == int(pw.input_len[-1]) // 16 and h[-1][-1] == block_hashes(tuple(last), 16)[-1]


def test_mooncake_hash_ids_share_their_prefix_hashes():
    # 400 rows of 32 ids (16,384 tokens, 1,024 blocks of 16): the first 24 ids common. Each
    # row kept its own list of 1,024 int objects (45 kB a row); the common prefix is now stored
    # once and a row's own 256 blocks take 8 bytes each
    from simulator.workloads.shared_prefix import (
        _UNIQUE_BASE,
        mooncake_segments,
        request_block_hashes,
    )
    from simulator.workloads.workload import object_column

    n = 400
    ids = [tuple(range(24)) + tuple(10_000 + 8 * i + j for j in range(8)) for i in range(n)]
    lens = np.full(n, 32 * 512)
    lens[7] = 32 * 512 - 100  # a partial last id
    lens[8] = 24 * 512 + 5    # ids beyond the length are ignored
    w = Workload(np.zeros(n), lens, np.full(n, 2), extra={"hash_ids": object_column(ids)})
    tracemalloc.start()
    h = request_block_hashes(w, 16)
    kept = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert kept / n < 4000, kept / n
    for i in (0, 1, 7, 8, n - 1):  # the same hashes as the row's own segments give
        assert list(h[i]) == block_hashes(mooncake_segments(ids[i], int(lens[i]), _UNIQUE_BASE + i), 16)
    assert list(h[0])[:24 * 32] == list(h[1])[:24 * 32] and h[0][24 * 32] != h[1][24 * 32]


def test_a_trace_without_prompt_structure_keeps_no_hash_list_per_request():
    from simulator.workloads.shared_prefix import request_block_hashes

    w = Workload(np.zeros(100_000), np.full(100_000, 10), np.full(100_000, 2))
    tracemalloc.start()
    h = request_block_hashes(w, 16)
    size = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(h) == 100_000 and h[5] == () and list(h[:3]) == [(), (), ()]
    assert size < 100_000  # was 100,000 empty lists (~6 MB)


@pytest.mark.parametrize("args, words", [
    # prefix caching off: before the fix these runs built the prompts and then served them (all
    # rejected at arrival); with caching on they hashed them, gigabytes that a test must not take
    (["-w", "shared-prefix", "--no-enable-prefix-caching", "--system-prompt-len", "1000000000", "-n", "8"],
     ["system_prompt_len: 1000000000", "<= 10000000"]),
    (["-w", "shared-prefix", "--no-enable-prefix-caching", "--multi-turn", "--system-prompt-len", "9999000",
      "-n", "1000"], ["a prompt is at most 10,000,000 tokens"]),
    (["-w", "random", "--input-len", "1000000000", "-n", "2"], ["input_len: 1000000000"]),
    (["--seed", "4294967296", "-w", "random", "-n", "2"], ["seed: 4294967296", "<= 4294967295"]),
])
def test_cli_refuses_before_building(args, words):
    from tests.test_hostile import invoke, one_line_error

    t = time.perf_counter()
    one_line_error(invoke("simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", *args), *words)
    assert time.perf_counter() - t < 5.0


# ---- cause 9: MemoryError names what was being built ------------------------------------------

def _raise_memory(*a, **k):
    raise MemoryError


def test_memory_error_reading_a_trace_names_the_file(tmp_path, monkeypatch):
    path = tmp_path / "big.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 5, "output_length": 2}\n')
    import simulator.scenario as S

    monkeypatch.setattr(S, "load_workload", _raise_memory)
    with pytest.raises(SpecError) as e:
        Scenario(workload=str(path), num_requests=1).run()
    msg = str(e.value)
    assert msg.startswith("workload: reading the trace file") and "big.jsonl" in msg and "num_requests: 1" not in msg


def test_memory_error_building_a_named_workload_names_it(monkeypatch):
    import simulator.workloads.shared_prefix as SP

    monkeypatch.setattr(SP, "shared_prefix", _raise_memory)
    with pytest.raises(SpecError, match=r"workload: building 'shared-prefix' \(.*system_prompt_len=1000"):
        Scenario(workload="shared-prefix", num_requests=3).run()


def test_memory_error_while_simulating_names_the_requests(monkeypatch):
    import simulator.scenario as S

    monkeypatch.setattr(S, "simulate", _raise_memory)
    with pytest.raises(SpecError, match=r"num_requests: simulating 4 requests of workload"):
        Scenario(workload="random", num_requests=4).run()


# ---- cause 16: the Python API refuses bad values with SpecError -------------------------------

BAD = ["x", "0.9", None, math.nan, math.inf, -math.inf, -1, 0, 1e300, 10**40, True, [], {}, 1.5, -0.5]


def _calls():
    m = L.load_model("llama-3.1-8b")
    hw = L.load_hardware("h100-sxm")
    cost = L.make_cost_model("llama-3.1-8b", "h100-sxm")
    res = L.simulate(cost, L.synthetic(5, 1.0, 10, 5))
    cfg = {f: getattr(L.EngineConfig(), f) for f in L.EngineConfig.__dataclass_fields__}
    return [
        ("prefill_step", L.prefill_step, dict(model=m, batch_size=2, input_len=128)),
        ("decode_step", L.decode_step, dict(model=m, batch_size=2, cached=1024)),
        ("StepBatch", L.StepBatch, dict(T=10.0, S=2.0, Ad=100.0, Ap=0.0, R=10.0)),
        ("EngineConfig", L.EngineConfig, cfg),
        ("simulate", L.simulate, dict(cost=cost, workload=L.synthetic(3, 1.0, 10, 3), config=None, replicas=1,
                                      router="round-robin", progress=None, client=None, speculative=None,
                                      watch=None)),
        ("summarize", L.summarize, dict(res=res, percentiles=(50, 90))),
        ("validate_rows", L.validate_rows, dict(rows=[], skipped=None, validator=None)),
        ("predict_static", L.predict_static, dict(cost=cost, batch_size=2, input_len=128, output_len=8)),
        ("memory_plan", L.memory_plan, dict(model=m, hardware=hw, par=L.Parallelism(), dtypes=L.DTypes(),
                                            gpu_memory_utilization=0.9, max_num_batched_tokens=8192,
                                            max_num_seqs=256)),
        ("Parallelism", L.Parallelism, dict(tp=1, pp=1, ep=1, pp_microbatches=1, expert_imbalance=1.0,
                                            dp_attention=1, pp_interleaved=False)),
        ("DTypes", L.DTypes, dict(weight="bf16", activation="bf16", kv="bf16")),
        ("make_cost_model", L.make_cost_model, dict(model="llama-3.1-8b", hardware="h100-sxm", tp=1, pp=1,
                                                    weight_dtype=None, activation_dtype="bf16", kv_dtype=None,
                                                    ideal=False, efficiency=None, link_dtype=None)),
        ("CostModel", L.CostModel, dict(model=m, hardware=hw, parallelism=None, dtypes=None, ideal=False,
                                        efficiency=None, link_dtype=None)),
        ("synthetic", L.synthetic, dict(num_requests=5, rate=1.0, input_len=10, output_len=5, range_ratio=0.0,
                                        burstiness=1.0, length_dist=None, sigma=1.0, process=None,
                                        concurrency=None, seed=0, name=None)),
        ("make_workload", L.make_workload, dict(workload="random", num_requests=5, rate=1.0)),
        ("load_model", L.load_model, dict(ref="llama-3.1-8b")),
        ("load_hardware", L.load_hardware, dict(ref="h100-sxm")),
        ("parse_sweep", L.parse_sweep, dict(items=["tp=1,2"])),
        ("make_executor", L.make_executor, dict(serial=True, workers=None, dask=None)),
        ("Validator", L.Validator, dict(hardware_specs=None, workloads=None, efficiency=None, num_requests=None,
                                        engine=None)),
        ("Scenario", L.Scenario, dict(workload="random", num_requests=5, seed=0, rate=1.0, input_len=10, output_len=5)),
    ]


def _nan_in(r) -> bool:
    import dataclasses

    if isinstance(r, float):
        return math.isnan(r)
    if isinstance(r, dict):
        return any(_nan_in(v) for v in r.values())
    if dataclasses.is_dataclass(r) and not isinstance(r, type):
        return any(_nan_in(getattr(r, f.name)) for f in dataclasses.fields(r))
    return False


def test_public_api_bad_values_give_a_result_or_spec_error():
    # every parameter of these calls, one at a time, set to a hostile value: SpecError or a
    # result without NaN or negative counts; never another exception
    bad: list[str] = []
    for name, fn, base in _calls():
        fn(**base)
        for arg in base:
            for v in BAD:
                try:
                    r = fn(**{**base, arg: v})
                except SpecError:
                    continue
                except Exception as e:  # noqa: BLE001 - the point of the test
                    bad.append(f"{name}({arg}={v!r}): {type(e).__name__}: {e}")
                    continue
                # summarize reports NaN for an empty set on purpose (vLLM's keys); other results never
                if (name != "summarize" and _nan_in(r)) or (name in ("prefill_step", "decode_step", "StepBatch")
                                  and any(isinstance(x, float) and x < 0 for x in vars(r).values() if x is not None)):
                    bad.append(f"{name}({arg}={v!r}) accepted: {r}")
    assert not bad, "\n".join(bad[:30]) + f"\n({len(bad)} in all)"


@pytest.mark.parametrize("call, match", [
    (lambda m: L.decode_step(m, -1, 1024), "batch_size: -1 must be an integer >= 1"),
    (lambda m: L.decode_step(m, 2, math.nan), "cached: nan must be a number"),
    (lambda m: L.prefill_step(m, 2, 0), "input_len: 0 must be"),
    (lambda m: L.EngineConfig(gpu_memory_utilization="0.9"), "gpu_memory_utilization: '0.9' must be a number > 0"),
    (lambda m: L.EngineConfig(debug=math.nan), "debug: nan must be true or false"),
    (lambda m: L.EngineConfig(scheduler=[]), "scheduler: \\[\\] is not one of"),
    (lambda m: L.StepBatch(T=math.nan, S=1.0), "T: nan must be a number >= 0"),
    (lambda m: L.validate_rows([{"x": 1}]), r"rows\[0\]: missing column\(s\) id, source"),
    (lambda m: L.validate_rows("rows.csv"), "rows: 'rows.csv' is not a list of rows"),
    (lambda m: L.summarize(None), "res: None .* is not a SimResult"),
    (lambda m: Scenario(seed=2**40), "seed: 1099511627776 must be an integer >= 0 and <= 4294967295"),
    (lambda m: L.synthetic(3, 1.0, 10, 5, seed=2**32), "seed: .* <= 4294967295"),
    (lambda m: L.CostModel("llama-3.1-8b", "h100-sxm"), "CostModel takes a ModelSpec"),
    (lambda m: L.Parallelism(pp_interleaved=math.nan), "pp_interleaved: nan must be true or false"),
])
def test_issue_examples_are_refused(call, match):
    m = L.load_model("llama-3.1-8b")
    with pytest.raises(SpecError, match=match):
        call(m)


@pytest.mark.parametrize("call", ["read_trace", "builtin"])
@pytest.mark.parametrize("bad", [None, 5, 1.5, ["x"]])
def test_trace_readers_refuse_a_path_that_is_not_one(call: str, bad: object) -> None:
    """Cause 16: read_trace(None) raised TypeError and builtin(None) AttributeError."""
    from simulator.workloads import traces

    with pytest.raises(SpecError, match=r"^(trace|workload): "):
        getattr(traces, call)(bad)
