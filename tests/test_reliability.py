"""Reliability (issue 9): nothing lost, nothing silently wrong, under hostile input and at scale.

* conservation: every request ends completed or rejected (with a reason), tokens and KV
  blocks balance, over random small workloads x schedulers x routers x replicas x KV sizes
  (hypothesis), checked from the outside and by the engine itself (`EngineConfig(debug=True)`);
* hostile input (test_reliability_inputs.py): the YAML spec loader, the HF config importer,
  every trace reader (mutated real traces), the scenario YAML and the CLI option parsers either
  give a valid result or one `error: ...` line with exit status 2: never a traceback, a hang or
  a NaN/negative time;
* numerical guards (rate 0 / 1e-9, one request, context at the limit, saturation, tiny KV,
  a 1-token budget, one seat, huge settings);
* sweeps keep finished points, stop cleanly on Ctrl-C and resume without redoing them.

Every fuzzer is derandomized and bounded (CI is deterministic); docs/reliability.md.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from reliability_helpers import _check_json_numbers, _one_line_error, fuzz

from simulator.analysis import sweep as sw
from simulator.cli.commands import main
from simulator.cli.outputs import write_atomic
from simulator.cli.pointstore import PointStore
from simulator.metrics.summary import summarize
from simulator.resolve import make_cost_model
from simulator.scenario import Scenario
from simulator.serving.records import COMPLETED, REJECTED
from simulator.serving.sched.registry import EngineConfig
from simulator.serving.simulate import simulate
from simulator.workloads.workload import Workload

pytestmark = pytest.mark.reliability

@pytest.fixture(scope="module")
def cost():
    return make_cost_model("llama-2-7b", "a100-sxm-80gb", ideal=True)



# =========================================================================== conservation


@st.composite
def _serving_case(draw):
    n = draw(st.integers(1, 24))
    gaps = draw(st.lists(st.sampled_from([0.0, 1e-4, 0.003, 0.05, 1.0]), min_size=n, max_size=n))
    arr = np.cumsum(gaps) - gaps[0]
    ins = draw(st.lists(st.integers(1, 400), min_size=n, max_size=n))
    outs = draw(st.lists(st.integers(1, draw(st.sampled_from([60, 300]))), min_size=n, max_size=n))
    closed = draw(st.one_of(st.none(), st.integers(1, 6)))
    cfg = dict(scheduler=draw(st.sampled_from(["vllm", "prefill-priority", "static", "trtllm", "sglang"])),
               max_num_seqs=draw(st.sampled_from([1, 2, 3, 8, 64])),
               max_num_batched_tokens=draw(st.sampled_from([1, 7, 64, 512, 8192])),
               block_size=draw(st.sampled_from([1, 16])),
               kv_capacity_tokens=draw(st.sampled_from([16, 64, 200, 480, 1000, 100_000])),
               max_duration_s=draw(st.sampled_from([None, None, 0.05, 1.0])),
               max_segment_steps=draw(st.sampled_from([1, 3, 4096])),
               max_model_len=draw(st.sampled_from([None, 300])),
               debug=True)
    return (Workload(arr, np.array(ins), np.array(outs), concurrency=closed), cfg,
            draw(st.integers(1, 3)), draw(st.sampled_from(["round-robin", "least-outstanding", "least-kv"])))


@fuzz(250)
@given(_serving_case())
def test_conservation_property(cost, case):
    """Random small workloads x schedulers x routers x replicas x KV sizes x budgets x caps:
    the engine's own ledger (debug=True) holds, and so do the invariants seen from outside."""
    w, cfg, replicas, router = case
    res = simulate(cost, w, EngineConfig(**cfg), replicas=replicas, router=router)
    status = res.status
    assert ((status == COMPLETED) | (status == REJECTED)).all()
    rejected = np.flatnonzero(status == REJECTED)
    assert all(res.reasons.get(int(r)) for r in rejected)
    # a request is rejected before it produced a token, never after (issue 17, cause 1)
    # (requests cut off by the time cap excepted: they are reported as not finished)
    uncapped = [r for r in rejected if "max_duration_s" not in res.reasons[int(r)]]
    assert np.isnan(res.first_token_s[uncapped]).all(), res.reasons
    assert set(res.reasons) == set(rejected.tolist())
    done = status == COMPLETED
    a, f, e = res.arrival_s[done], res.first_token_s[done], res.finish_s[done]
    assert np.isfinite(a).all() and np.isfinite(f).all() and np.isfinite(e).all()
    assert (a < f).all() and (f <= e).all()  # TTFT > 0, first <= finish
    gaps = int(res.itl_counts.sum())
    want = int(res.output_len[done].sum()) - int(done.sum())
    if cfg["max_duration_s"] is None:
        assert gaps == want  # every token of every completed request, none else
    else:
        assert gaps >= want  # plus the tokens of requests cut off by the cap
        if cfg["scheduler"] != "static":  # static runs a whole batch as one action
            assert np.all(e <= cfg["max_duration_s"] + 1.0)  # only a step begun before the cap ends after it
            tl = res.timeline
            assert not ((tl["time_s"] - tl["busy_s"] >= cfg["max_duration_s"]) & (tl["busy_s"] > 0)).any()
    assert (res.replica[done] >= 0).all() and (res.replica < replicas).all()
    rec = res.records()[done]
    cols = ["arrival_s", "first_token_s", "finish_s", "ttft_s", "e2el_s"]
    assert np.isfinite(rec[cols].to_numpy()).all()
    assert np.isfinite(rec["tpot_s"][rec["output_len"] > 1]).all()
    s = summarize(res)
    assert s["completed"] + s["failed"] == w.num_requests
    _check_json_numbers({k: v for k, v in s.items() if isinstance(v, float) and math.isfinite(v)})


@pytest.mark.parametrize("router", ["round-robin", "least-outstanding", "least-kv"])
def test_prefill_priority_resumed_prompt_over_budget_is_not_rejected(cost, router):
    """Issue 17, cause 1: prompts of 48 tokens with 40 outputs under a 64-token budget and a
    KV cache of 4 requests' worth: preempted requests resume with 48 + generated > 64 tokens.
    They run alone instead of being rejected after producing tokens; the ledger holds."""
    from simulator.workloads.workload import synthetic

    w = synthetic(20, math.inf, 48, 40, seed=1)
    res = simulate(cost, w, EngineConfig(kv_capacity_tokens=4 * 88, block_size=1, max_num_batched_tokens=64,
                                         scheduler="prefill-priority", debug=True), replicas=2, router=router)
    assert res.preemptions.sum() > 0  # the pressure is real
    assert (res.status == COMPLETED).all(), res.reasons
    assert int(res.itl_counts.sum()) == 20 * 39


@pytest.mark.parametrize("scheduler", ["vllm", "prefill-priority", "static"])
@pytest.mark.parametrize("closed", [None, 5])
def test_conservation_under_kv_pressure(cost, scheduler, closed):
    """KV pressure with preemptions (the continuous schedulers), 3 replicas, each router."""
    from simulator.workloads.workload import synthetic

    w = synthetic(150, 40.0, 300, 120, range_ratio=0.9, seed=5, concurrency=closed)
    for router in ("round-robin", "least-outstanding", "least-kv"):
        res = simulate(cost, w, EngineConfig(kv_capacity_tokens=16 * 40, max_num_seqs=16,
                                             scheduler=scheduler, debug=True), replicas=3, router=router)
        done = res.status == COMPLETED
        assert done.sum() + (res.status == REJECTED).sum() == 150
        assert int(res.itl_counts.sum()) + int(done.sum()) == int(res.output_len[done].sum())
        if scheduler == "vllm" and closed is None:
            assert res.preemptions.sum() > 0  # the pressure is real


def test_debug_ledger_catches_a_lost_token(cost, monkeypatch):
    """The engine's own conservation check is live: drop one logged gap and it fails."""
    from simulator.serving import steplog

    orig = steplog.StepLog.gap
    state = {"dropped": False}

    def lossy(self, value, count):
        if count and not state["dropped"]:
            state["dropped"] = True
            count -= 1
        orig(self, value, count)

    monkeypatch.setattr(steplog.StepLog, "gap", lossy)
    w = Workload(np.array([0.0, 0.0, 0.001]), np.array([50, 60, 70]), np.array([5, 6, 7]))
    with pytest.raises(AssertionError, match="inter-token gaps"):
        simulate(cost, w, EngineConfig(kv_capacity_tokens=10_000, max_segment_steps=1, debug=True))


# =========================================================================== numerical guards


def _sim(*args: str) -> dict:
    r = CliRunner().invoke(main, ["simulate", "--json", "-q", *args])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    _check_json_numbers(out)
    return out


def test_rate_zero_tiny_and_underflowing():
    assert "rate" in _one_line_error(CliRunner().invoke(main, ["simulate", "-q", "--rate", "0"]))
    s = _sim("-w", "random", "--rate", "1e-9", "-n", "3", "--input-len", "64", "--output-len", "4")
    assert s["completed"] == 3 and s["duration"] > 1e9  # gaps of ~1e9 s, no overflow
    for wl in ("random", "azure-conv"):
        err = _one_line_error(CliRunner().invoke(main, ["simulate", "-q", "-w", wl, "-n", "3", "--rate", "1e-320"]))
        assert "too small" in err
    # huge but finite times lose the clock's resolution (TTFT rounds to 0): refused (issue 17)
    err = _one_line_error(CliRunner().invoke(main, ["simulate", "-q", "-n", "3", "--rate", "1e-306"]))
    assert "rate: 1e-306" in err and "clock" in err


def test_single_request_and_one_token():
    s = _sim("-w", "random", "-n", "1", "--input-len", "1", "--output-len", "1")
    assert s["completed"] == 1 and s["mean_ttft_ms"] > 0 and s["mean_tpot_ms"] is None


def test_context_at_the_model_maximum(cost):
    """prompt + output == max_model_len is served; one more token is rejected with a reason."""
    L = cost.model.max_context
    w = Workload(np.array([0.0, 0.0]), np.array([L - 10, L - 9]), np.array([10, 10]))
    res = simulate(cost, w, EngineConfig(kv_capacity_tokens=4 * L, debug=True))
    assert res.status.tolist() == [COMPLETED, REJECTED]
    assert "exceeds max_model_len" in res.reasons[1]
    res = simulate(cost, w, EngineConfig(kv_capacity_tokens=4 * L, max_model_len=L - 1, debug=True))
    assert res.status.tolist() == [REJECTED, REJECTED]


def test_far_past_saturation_is_bounded_and_flagged():
    s = _sim("-w", "random", "--rate", "1e6", "-n", "400", "--input-len", "2048", "--output-len", "64",
             "--max-num-seqs", "4")
    assert s["unstable"] is True and s["completed"] == 400
    s = _sim("-w", "random", "--rate", "1e6", "-n", "3000", "--input-len", "2048", "--output-len", "64",
             "--max-num-seqs", "4", "--max-duration-s", "2")
    assert 0 < s["completed"] < 3000 and s["completed"] + s["failed"] == 3000
    assert any("max_duration_s" in k for k in s["failed_reasons"])


def test_tiny_kv_cache_rejects_everything_with_reasons(cost):
    w = Workload(np.zeros(50), np.full(50, 100), np.full(50, 20))
    for sched in ("vllm", "prefill-priority", "static"):
        res = simulate(cost, w, EngineConfig(kv_capacity_tokens=16, scheduler=sched, debug=True))
        assert (res.status == REJECTED).all() and all("KV" in res.reasons[i] for i in range(50))
        assert summarize(res)["completed"] == 0


@pytest.mark.parametrize("kw", [dict(max_num_batched_tokens=1), dict(max_num_seqs=1),
                                dict(max_num_batched_tokens=1, max_num_seqs=1, block_size=1)])
def test_one_token_budget_and_one_seat_complete(cost, kw):
    w = Workload(np.array([0.0, 0.0, 0.01]), np.array([40, 7, 1]), np.array([5, 1, 3]))
    res = simulate(cost, w, EngineConfig(kv_capacity_tokens=4096, debug=True, **kw))
    assert (res.status == COMPLETED).all()
    assert int(res.itl_counts.sum()) == 5 + 1 + 3 - 3


def test_huge_settings_cost_nothing():
    """Seats, replicas beyond what the run can use are not allocated (no hang, no memory)."""
    a = _sim("-w", "random", "-n", "5", "--input-len", "64", "--output-len", "4", "--max-num-seqs", "1000000000")
    b = _sim("-w", "random", "-n", "5", "--input-len", "64", "--output-len", "4", "--max-num-seqs", "256")
    assert a["mean_e2el_ms"] == b["mean_e2el_ms"]
    c = _sim("-w", "random", "-n", "5", "--input-len", "64", "--output-len", "4", "--replicas", "100000000")
    assert c["completed"] == 5 and c["num_gpus"] == 100000000
    err = _one_line_error(CliRunner().invoke(main, ["simulate", "-q", "-n", "1000000000000"]))
    assert "memory" in err
    err = _one_line_error(CliRunner().invoke(main, ["simulate", "-q", "-n", "3", "--efficiency",
                                                    "step_overhead_s=1e308"]))
    assert "step_overhead_s" in err and "<= 10 s" in err  # refused by its range (issue 17)


def test_replicas_beyond_requests_give_the_same_result(cost):
    from simulator.workloads.workload import synthetic

    w = synthetic(7, 50.0, 200, 30, range_ratio=0.5, seed=1)
    for router in ("round-robin", "least-outstanding", "least-kv"):
        a = simulate(cost, w, EngineConfig(kv_capacity_tokens=5000), replicas=7, router=router)
        b = simulate(cost, w, EngineConfig(kv_capacity_tokens=5000), replicas=50, router=router)
        assert a.finish_s.tobytes() == b.finish_s.tobytes() and (a.replica == b.replica).all()


# =========================================================================== sweeps: keep, interrupt, resume


_SWEEP_ARGS = ["sweep", "-w", "random", "--input-len", "64", "--output-len", "8", "-n", "40",
               "--rates", "5,50,500", "--serial", "--json", "--goodput", "ttft:30", "--tol", "0.2"]


def _interrupting(monkeypatch, after: int) -> dict:
    orig = sw.run_point
    calls = {"n": 0, "after": after}

    def hook(*a):
        calls["n"] += 1
        if calls["after"] is not None and calls["n"] > calls["after"]:
            raise KeyboardInterrupt
        return orig(*a)

    monkeypatch.setattr(sw, "run_point", hook)
    return calls


def test_sweep_interrupt_and_resume_cli(tmp_path, monkeypatch):
    clean = CliRunner().invoke(main, _SWEEP_ARGS)
    assert clean.exit_code == 0, clean.output
    calls = _interrupting(monkeypatch, after=3)
    d = tmp_path / "kept"
    r = CliRunner().invoke(main, [*_SWEEP_ARGS, "--out", str(d)])
    assert r.exit_code == 130
    assert f"interrupted: 3 points kept in {d}; rerun with --resume {d}" in r.output
    assert not (d / "sweep.json").exists()  # no partial result files
    calls.update(n=0, after=None)
    r = CliRunner().invoke(main, [*_SWEEP_ARGS, "--resume", str(d)])
    assert r.exit_code == 0, r.output
    total = len(json.loads(clean.output)["points"]) + 1  # + the offline run
    assert calls["n"] == total - 3  # only the missing points ran
    assert r.output == clean.output  # identical to the uninterrupted run
    # a finished keep resumes with nothing to run
    calls.update(n=0)
    assert CliRunner().invoke(main, [*_SWEEP_ARGS, "--resume", str(d)]).output == clean.output
    assert calls["n"] == 0


def test_sweep_resume_refuses_another_scenario(tmp_path, monkeypatch):
    _interrupting(monkeypatch, after=1)
    d = tmp_path / "kept"
    assert CliRunner().invoke(main, [*_SWEEP_ARGS, "--out", str(d)]).exit_code == 130
    err = _one_line_error(CliRunner().invoke(main, [*_SWEEP_ARGS, "-n", "41", "--resume", str(d)]))
    assert "different scenario" in err and "num_requests" in err
    err = _one_line_error(CliRunner().invoke(main, [*_SWEEP_ARGS, "--resume", str(tmp_path / "nothing")]))
    assert "no kept sweep points" in err


def test_sweep_resume_python_api_after_progress_interrupt(tmp_path):
    """Interrupt from the progress callback after k points; the kept points (including a
    torn last line) resume to the same result."""
    sc = Scenario(workload="random", input_len=64, output_len=8, num_requests=40, goodput={"ttft": 30})
    clean = sw.sweep(sc, [5.0, 50.0, 500.0], tol=0.2)
    header = PointStore.make_header(sc, [])
    store = PointStore.open(tmp_path, header)

    def stop(done, total):
        if done >= 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sw.sweep(sc, [5.0, 50.0, 500.0], progress=stop, tol=0.2, store=store)
    store.close()
    with open(tmp_path / "points.jsonl", "a", encoding="utf-8") as f:
        f.write('{"key": "[{\\"activation')  # killed mid-write
    store = PointStore.resume(tmp_path, header)
    assert store.loaded == 2
    resumed = sw.sweep(sc, [5.0, 50.0, 500.0], tol=0.2, store=store)
    store.close()
    canon = lambda x: json.dumps(x, sort_keys=True, default=str)  # noqa: E731
    assert canon(resumed) == canon(clean)


# =========================================================================== atomic outputs


def test_write_atomic_never_leaves_a_truncated_file(tmp_path, monkeypatch):
    p = tmp_path / "out.json"
    write_atomic(p, "old\n")

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(p, "new\n" * 1000)
    assert p.read_text() == "old\n"


def test_simulate_out_writes_complete_files_only(tmp_path):
    d = tmp_path / "o"
    r = CliRunner().invoke(main, ["simulate", "-w", "random", "-n", "20", "--input-len", "64", "--output-len", "4",
                                  "-q", "--out", str(d)])
    assert r.exit_code == 0, r.output
    names = sorted(x.name for x in d.iterdir())
    assert names == ["requests.csv", "summary.json", "timeline.csv", "timeline.png"]
    assert json.loads((d / "summary.json").read_text())["completed"] == 20
