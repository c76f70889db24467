"""`--max-concurrency N` at a finite rate: an open-loop stream with at most N requests in flight,
as `vllm bench serve` (a semaphore around each request; TTFT/E2EL from the send time, the wait
apart as client_queue_time; see simulator/client_cap.py).

Hand schedules price steps with a fake cost model, step = 1 s + 1 ms per scheduled token (as
tests/test_schedulers.py), so every time below is a sum of such steps."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner
from fake_costs import COST, d
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.cli.commands import main
from simulator.cli.vllm_result import result_filename, result_json
from simulator.metrics.summary import summarize
from simulator.scenario import Scenario
from simulator.serving.records import COMPLETED, REJECTED
from simulator.serving.sched.registry import EngineConfig
from simulator.serving.simulate import simulate
from simulator.specs.checks import SpecError
from simulator.workloads.workload import Workload


def wl(arrivals, ins, outs, **kw):
    return Workload(np.asarray(arrivals, dtype=float), np.asarray(ins, dtype=np.int64),
                    np.asarray(outs, dtype=np.int64), **kw)


def cfg(**kw):
    kw.setdefault("kv_capacity_tokens", 100_000)
    kw.setdefault("debug", True)
    return EngineConfig(**kw)


def test_three_requests_one_slot_by_hand():
    """N = 1; prompts of 10 tokens, 2 output tokens (prefill gives token 1, one decode step).
    A scheduled at 0: sent 0, first d(10), done d(10) + d(1) = 2.011.
    B scheduled at 0.5: waits for A's slot, sent 2.011 (client queue 1.511), done 4.022.
    C scheduled at 1.0: waits behind B (first come first served), sent 4.022 (queue 3.022)."""
    res = simulate(COST, wl([0, 0.5, 1.0], [10, 10, 10], [2, 2, 2], max_concurrency=1), cfg())
    one = d(10) + d(1)
    send = np.array([0.0, one, 2 * one])
    np.testing.assert_allclose(res.arrival_s, send, rtol=1e-12)
    np.testing.assert_allclose(res.client_queue_s, send - [0, 0.5, 1.0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(res.first_token_s, send + d(10), rtol=1e-12)
    np.testing.assert_allclose(res.finish_s, send + one, rtol=1e-12)
    s = summarize(res)
    # vLLM: TTFT from the send (after the semaphore); the wait is reported apart
    assert s["mean_ttft_ms"] == pytest.approx(d(10) * 1e3)
    assert s["mean_client_queue_time_ms"] == pytest.approx((1.511 + 3.022) / 3 * 1e3)
    assert s["mean_e2el_including_client_queue_ms"] == pytest.approx((3 * one + 1.511 + 3.022) / 3 * 1e3)
    rec = res.records()
    np.testing.assert_allclose(rec["client_queue_time_s"], res.client_queue_s)


def test_a_closed_loop_request_freed_on_one_replica_meets_the_other_mid_step():
    """Two replicas (round-robin), 3 clients, requests of 10 prompt tokens and 2, 20, 20, 5
    outputs. Replica 0 runs r0 and r2: prefill ends at d(20) = 1.02, the next step at 2.022
    ends r0, and its client sends r3 then, routed to replica 1. Replica 1 runs r1 alone: its
    prefill ends at d(10) = 1.01, its decode steps at 2.011 and 3.012, so r3 joins the step that
    starts at 3.012 (its prefill with r1's decode, d(11): first token 4.023), then four steps
    of two decodes, d(2) = 1.002 each (r3 done at 8.031), and r1's last 12 alone (d(1) = 1.001:
    20.043); r2 ends at 2.022 + 18 x 1.001 = 20.04. A decode segment on replica 1 must stop
    where replica 0 may free a client: run to r1's first completion it would have passed 2.022
    and r3 would have waited for r1's end (first token 21.039). Segments and single steps agree."""
    w = wl([0.0] * 4, [10] * 4, [2, 20, 20, 5], concurrency=3)
    for steps in (4096, 1):
        res = simulate(COST, w, EngineConfig(kv_capacity_tokens=100_000, debug=True, max_segment_steps=steps),
                       replicas=2, router="round-robin")
        np.testing.assert_array_equal(res.replica, [0, 1, 0, 1])
        np.testing.assert_allclose(res.arrival_s, [0, 0, 0, 2.022], rtol=1e-12)
        np.testing.assert_allclose(res.first_token_s, [1.02, 1.01, 1.02, 4.023], rtol=1e-12)
        np.testing.assert_allclose(res.finish_s, [2.022, 20.043, 20.04, 8.031], rtol=1e-12)


def test_a_late_arrival_is_sent_at_its_own_time():
    """C scheduled at 5 s finds the slot free (B done at 4.022): no client wait."""
    res = simulate(COST, wl([0, 0.5, 5.0], [10, 10, 10], [2, 2, 2], max_concurrency=1), cfg())
    one = d(10) + d(1)
    np.testing.assert_allclose(res.arrival_s, [0, one, 5.0], rtol=1e-12)
    np.testing.assert_allclose(res.client_queue_s, [0, one - 0.5, 0], atol=1e-12)
    np.testing.assert_allclose(res.finish_s, [one, 2 * one, 5.0 + one], rtol=1e-12)


def test_a_cap_above_the_load_changes_nothing():
    """N >= n: nobody waits, and the schedule is the uncapped open loop's bit for bit."""
    w = dict(arrivals=np.arange(6) * 0.3, ins=np.full(6, 50), outs=np.full(6, 5))
    free = simulate(COST, wl(w["arrivals"], w["ins"], w["outs"]), cfg())
    capped = simulate(COST, wl(w["arrivals"], w["ins"], w["outs"], max_concurrency=6), cfg())
    assert np.array_equal(free.first_token_s, capped.first_token_s)
    assert np.array_equal(free.finish_s, capped.finish_s)
    assert np.array_equal(capped.client_queue_s, np.zeros(6))


def _release_times(res):
    """When each request gave its slot back: its finish, or its send when refused at once."""
    return np.where(res.status == COMPLETED, res.finish_s, res.arrival_s)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 25), slots=st.integers(1, 5), replicas=st.integers(1, 2),
       gaps=st.lists(st.floats(0, 3), min_size=25, max_size=25),
       ins=st.lists(st.integers(1, 300), min_size=25, max_size=25),
       outs=st.lists(st.integers(1, 12), min_size=25, max_size=25))
def test_never_more_than_n_in_flight_and_fcfs(n, slots, replicas, gaps, ins, outs):
    sched = np.cumsum(gaps[:n])
    w = wl(sched, ins[:n], outs[:n], max_concurrency=slots)
    res = simulate(COST, w, cfg(max_num_seqs=8, max_num_batched_tokens=256, kv_capacity_tokens=2000),
                   replicas=replicas)
    assert ((res.status == COMPLETED) | (res.status == REJECTED)).all()
    send, rel = res.arrival_s, _release_times(res)
    # in flight over [send, release): never above the cap (releases first on ties)
    events = sorted([(t, 1) for t in send] + [(t, -1) for t in rel])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    assert peak <= slots
    # oracle: s_i = max(a_i, s_{i-1}, (i-N+1)-th release among requests 0..i-1)
    for i in range(n):
        want = max(sched[i], send[i - 1] if i else 0.0)
        if i >= slots:
            want = max(want, np.sort(rel[:i])[i - slots])
        assert send[i] == pytest.approx(want, rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(res.client_queue_s, send - sched, atol=1e-9)


@pytest.mark.parametrize("slots", [1, 3, 8])
def test_capped_stream_at_rate_inf_is_the_closed_loop(slots):
    """All scheduled at t = 0, the cap is N closed-loop clients, bit for bit."""
    n = 30
    ins, outs = np.arange(n) * 17 % 200 + 10, np.arange(n) * 7 % 20 + 1
    a = simulate(COST, wl(np.zeros(n), ins, outs, max_concurrency=slots), cfg())
    b = simulate(COST, wl(np.zeros(n), ins, outs, concurrency=slots), cfg())
    for f in ("arrival_s", "first_token_s", "finish_s", "client_queue_s"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f


def test_time_cap_leaves_waiting_requests_unsent():
    """N = 1, cap 3 s: A done 2.011, B sent 2.011 (finishes past the cap: cut off), C waits
    for B's slot past the cap: never sent, with a reason naming the slot."""
    res = simulate(COST, wl([0, 0.5, 1.0], [10, 10, 10], [2, 2, 2], max_concurrency=1),
                   cfg(max_duration_s=3.0, debug=False))
    assert list(res.status) == [COMPLETED, REJECTED, REJECTED]
    assert "free --max-concurrency slot" in res.reasons[2]
    assert np.isnan(res.arrival_s[2])


def test_time_cap_still_uses_a_slot_freed_before_it():
    """N = 1, cap 10 s, C scheduled at 100 s (after the cap): A done 2.011 frees the slot in
    time, so B (waiting since 0.1) is sent at 2.011 and done at 4.022; only C, never arrived
    before the cap, is cut off (the run used to stop at C's arrival, leaving B unsent)."""
    res = simulate(COST, wl([0, 0.1, 100.0], [10, 10, 10], [2, 2, 2], max_concurrency=1), cfg(max_duration_s=10.0))
    one = d(10) + d(1)
    assert list(res.status) == [COMPLETED, COMPLETED, REJECTED]
    np.testing.assert_allclose(res.finish_s[:2], [one, 2 * one], rtol=1e-12)
    assert "not finished within" in res.reasons[2]


def test_scenario_and_workload_wiring():
    sc = Scenario(workload="random", rate=20.0, concurrency=8, num_requests=10)
    w = sc.make_workload()
    assert w.max_concurrency == 8 and w.concurrency is None
    closed = Scenario(workload="random", concurrency=8, num_requests=10).make_workload()
    assert closed.concurrency == 8 and closed.max_concurrency is None
    with pytest.raises(SpecError, match="max_concurrency"):
        wl([0, 1], [5, 5], [5, 5], concurrency=2, max_concurrency=2)
    with pytest.raises(SpecError, match="max_concurrency"):
        wl([0, 1], [5, 5], [5, 5], max_concurrency=0)


def test_disagg_refuses_the_cap():
    sc = Scenario(workload="random", rate=20.0, concurrency=4, num_requests=10, disagg="1:1",
                  input_len=64, output_len=8)
    with pytest.raises(SpecError, match="max_concurrency.*disaggregated"):
        sc.run()


def test_vllm_result_carries_max_concurrency():
    sc = Scenario(workload="random", rate=20.0, concurrency=8, num_requests=20, input_len=128, output_len=8)
    res, _ = sc.run()
    out = result_json(sc, res, "llama-3.1-8b", version="x",
                      percentile_metrics="ttft,client_queue_time,e2el_including_client_queue")
    assert out["max_concurrency"] == 8 and out["request_rate"] == 20.0
    assert out["mean_client_queue_time_ms"] == pytest.approx(float(np.nanmean(res.client_queue_s)) * 1e3)
    assert "-concurrency8-" in result_filename(out)
    uncapped = Scenario(workload="random", rate=20.0, num_requests=20, input_len=128, output_len=8)
    r2, _ = uncapped.run()
    with pytest.raises(SpecError, match="needs --max-concurrency"):
        result_json(uncapped, r2, "llama-3.1-8b", version="x", percentile_metrics="client_queue_time")


def test_cli_line_runs():
    r = CliRunner().invoke(main, ["simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-w", "random",
                                  "--input-len", "512", "--output-len", "64", "-n", "200", "--request-rate", "20",
                                  "--max-concurrency", "8", "--json"])
    assert r.exit_code == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["completed"] == 200
    # 8 in flight cannot keep up with 20 req/s here: the backlog waits at the client
    assert s["mean_client_queue_time_ms"] > 0
    assert s["mean_e2el_including_client_queue_ms"] == pytest.approx(
        s["mean_e2el_ms"] + s["mean_client_queue_time_ms"], rel=1e-9)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mode=st.sampled_from(["closed", "capped", "sessions"]), replicas=st.integers(1, 3),
       router=st.sampled_from(["round-robin", "least-outstanding", "least-kv"]), clients=st.integers(1, 6),
       timeout=st.sampled_from([None, 1.0173, 5.0313]), front=st.sampled_from([0.0, 0.00317]),
       ins=st.lists(st.integers(1, 3000), min_size=20, max_size=20),
       outs=st.lists(st.integers(1, 30), min_size=20, max_size=20), seed=st.integers(0, 1000))
def test_events_are_handled_in_time_order(mode, replicas, router, clients, timeout, front, ins, outs, seed):
    """Wherever a request's end makes the next request (closed loops, capped clients, sessions'
    next turns, client timeouts), no event is created earlier than one already handled: the
    pool never runs a replica past a request end that another replica, or a client's deadline,
    had still to produce (the bugs behind 3f681ef and 47beac4, and a timeout on a replica
    ahead of the others). Segments give the same records as single steps."""
    from simulator.serving import events as ev
    from simulator.serving.client_view import ClientView

    handled = [-math.inf]
    late: list[tuple[float, float]] = []
    push, pop = ev.EventQueue.push, ev.EventQueue.pop

    def checked_push(self, time_s, kind, payload=-1):
        if time_s < handled[0] - 1e-9:
            late.append((time_s, handled[0]))
        push(self, time_s, kind, payload)

    def checked_pop(self):
        out = pop(self)
        handled[0] = max(handled[0], out[0])
        return out

    rng = np.random.default_rng(seed)
    n = 20
    extra = {}
    if mode == "sessions":
        parent = np.array([-1 if i < clients else int(rng.integers(0, i)) for i in range(n)])
        extra = {"parent": parent, "think_time_s": rng.uniform(0.0, 2.0, n) * (parent >= 0)}
    arrivals = np.zeros(n) if mode == "closed" else np.sort(rng.uniform(0.0, 5.0, n))
    kw = {"concurrency": clients} if mode == "closed" else {"max_concurrency": clients} if mode == "capped" else {}
    w = Workload(arrivals, np.asarray(ins, dtype=np.int64), np.asarray(outs, dtype=np.int64), extra=extra, **kw)
    view = ClientView(front, 0, timeout)
    runs = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ev.EventQueue, "push", checked_push)
        mp.setattr(ev.EventQueue, "pop", checked_pop)
        for steps in (4096, 1):
            handled[0] = -math.inf
            cfg = EngineConfig(kv_capacity_tokens=6000, debug=True, max_num_seqs=4, max_num_batched_tokens=1024,
                               max_segment_steps=steps)
            runs.append(simulate(COST, w, cfg, replicas, router, client=view))
            assert not late, late[:3]
    a, b = runs
    np.testing.assert_array_equal(a.status, b.status)
    np.testing.assert_allclose(a.finish_s, b.finish_s, rtol=1e-9, equal_nan=True)


def test_a_slot_freed_before_the_time_cap_is_used_in_time():
    """2 slots, cap 20 s: A (10 prompt, 2 out) and B (10, 30) at 0, C (10, 2) scheduled at 0.1,
    D at 100. A ends at 2.022 (prefill 1.02, one decode step), so C is sent then; it joins B's
    step starting at 2.022 (its prefill and B's decode, d(11): first token 3.033) and ends at
    3.033 + d(2) = 4.035, well before the cap. Run to the cap replica by replica first, the
    slot was freed too late and C was cut off. B (done at 30.061) and D are cut off."""
    w = wl([0, 0, 0.1, 100.0], [10] * 4, [2, 30, 2, 2], max_concurrency=2)
    for steps in (4096, 1):
        res = simulate(COST, w, EngineConfig(kv_capacity_tokens=100_000, max_segment_steps=steps, max_duration_s=20.0))
        assert res.status.tolist() == [COMPLETED, REJECTED, COMPLETED, REJECTED]
        np.testing.assert_allclose(res.arrival_s[:3], [0, 0, 2.022], rtol=1e-12)
        np.testing.assert_allclose(res.finish_s[[0, 2]], [2.022, 4.035], rtol=1e-12)


def test_an_idle_replica_under_a_time_cap_passes_the_debug_checks():
    """Arrivals at 0 and 10 with a 10 s cap in debug mode: the replica idles until the second
    arrival moves its clock, and no step follows (the cap); the run ends cleanly."""
    res = simulate(COST, wl([0.0, 10.0], [10, 10], [3, 3]),
                   EngineConfig(kv_capacity_tokens=100_000, debug=True, max_duration_s=10.0))
    assert res.status.tolist() == [COMPLETED, REJECTED]
