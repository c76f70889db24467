"""The client view inside the simulation (serving/client_view.py): the API-server latency F
between a send and the engine, async scheduling's one-step admission lag, and the client's
timeout. Hand schedules use the fake cost model of tests/fake_costs.py (a step lasts
1 s + 1 ms per scheduled token); the property tests run every engine profile on a real model.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from fake_costs import COST, d
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.metrics.summary import summarize
from simulator.scenario import Scenario
from simulator.serving.client_view import ClientView
from simulator.serving.records import COMPLETED, REJECTED
from simulator.serving.sched.registry import EngineConfig
from simulator.serving.simulate import simulate
from simulator.specs.checks import SpecError
from simulator.workloads.workload import Workload, arrivals, vllm_rng

ENGINES = ("vllm", "vllm-v0", "trtllm", "trtllm-pytorch", "sglang", "generic")


def wl(arr, ins, outs, **kw):
    return Workload(np.asarray(arr, dtype=float), np.asarray(ins, dtype=np.int64),
                    np.asarray(outs, dtype=np.int64), **kw)


def cfg(**kw):
    kw.setdefault("kv_capacity_tokens", 100_000)
    kw.setdefault("debug", True)
    return EngineConfig(**kw)


def end_times(res):
    """When the client saw each request end: its last token, or the failure (timeout, refusal)."""
    failed = res.failed_s if res.failed_s is not None else np.full(len(res.status), np.nan)
    return np.where(res.status == COMPLETED, res.finish_s, failed)


def peak_in_flight(send, end) -> int:
    """Most requests in flight over [send, end), ends first on ties (a slot freed at t is reused at t)."""
    ok = np.isfinite(send)
    events = sorted([(t, 1) for t in send[ok]] + [(t, -1) for t in end[ok]])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


# --------------------------------------------------------------------------- hand schedules


def test_frontend_latency_delays_the_engine_and_holds_the_slot():
    """F = 0.5 s. Closed loop of one client, two requests of 10 prompt and 2 output tokens.
    A: sent 0, at the engine 0.5, prefill step to 0.5 + d(10) = 1.51 (first token), one decode
    step to 2.511 (last). The client sees A end at 2.511 and sends B then; B reaches the
    engine at 3.011: first token 4.021, last 5.022. TTFT = F + d(10) for both, TPOT = d(1)."""
    res = simulate(COST, wl([0, 0], [10, 10], [2, 2], concurrency=1), cfg(), client=ClientView(0.5))
    one = d(10) + d(1)
    np.testing.assert_allclose(res.arrival_s, [0.0, 0.5 + one], rtol=1e-12)
    np.testing.assert_allclose(res.first_token_s, [0.5 + d(10), 1.0 + one + d(10)], rtol=1e-12)
    np.testing.assert_allclose(res.finish_s, [0.5 + one, 1.0 + 2 * one], rtol=1e-12)
    s = summarize(res)
    assert s["mean_ttft_ms"] == pytest.approx((0.5 + d(10)) * 1e3)
    assert s["mean_tpot_ms"] == pytest.approx(d(1) * 1e3)
    # the same requests under a cap of 1 at a finite rate: B scheduled at 0.1 waits for A's end
    capped = simulate(COST, wl([0, 0.1], [10, 10], [2, 2], max_concurrency=1), cfg(), client=ClientView(0.5))
    np.testing.assert_allclose(capped.arrival_s, [0.0, 0.5 + one], rtol=1e-12)
    np.testing.assert_allclose(capped.client_queue_s, [0.0, 0.5 + one - 0.1], rtol=1e-12)
    np.testing.assert_allclose(capped.finish_s, res.finish_s, rtol=1e-12)


def test_frontend_latency_before_a_later_turn():
    """Multi-turn: turn 2 is sent a think time after the client sees turn 1 end, and reaches
    the engine F after that. F = 0.5, think 2 s: turn 1 sent 0, ends 0.5 + d(10) + d(1) =
    2.511; turn 2 sent 4.511, at the engine 5.011, prefill of 10 tokens to 6.021."""
    w = wl([0, 0], [10, 10], [2, 1], extra={"parent": np.array([-1, 0]), "think_time_s": np.array([0.0, 2.0])})
    res = simulate(COST, w, cfg(), client=ClientView(0.5))
    one = d(10) + d(1)
    np.testing.assert_allclose(res.arrival_s, [0.0, 0.5 + one + 2.0], rtol=1e-12)
    np.testing.assert_allclose(res.first_token_s[1], 0.5 + one + 2.0 + 0.5 + d(10), rtol=1e-12)


def test_async_lag_holds_an_arrival_out_of_the_next_step():
    """lag 1 step. A (10 prompt, 3 out) at 0: prefill step [0, 1.010]. B (10, 2) arrives at 0.5,
    during that step: the step from 1.010 was planned before B came, so it is A's decode alone
    [1.010, 2.011]; then A's decode + B's prefill (11 tokens) [2.011, 3.022]: A ends, B's first
    token; B's decode [3.022, 4.023]. Without the lag B's prefill joins the step from 1.010."""
    w = wl([0, 0.5], [10, 10], [3, 2])
    lag = simulate(COST, w, cfg(), client=ClientView(0.0, 1))
    t1 = d(10)
    t2 = t1 + d(1)
    t3 = t2 + d(11)
    np.testing.assert_allclose(lag.first_token_s, [t1, t3], rtol=1e-12)
    np.testing.assert_allclose(lag.finish_s, [t3, t3 + d(1)], rtol=1e-12)
    sync = simulate(COST, w, cfg())
    np.testing.assert_allclose(sync.first_token_s, [t1, t1 + d(11)], rtol=1e-12)
    # a request that finds the engine idle is scheduled at once, lag or not
    alone = simulate(COST, wl([0, 5.0], [10, 10], [2, 2]), cfg(), client=ClientView(0.0, 1))
    np.testing.assert_allclose(alone.first_token_s, [t1, 5.0 + d(10)], rtol=1e-12)


def test_timeout_aborts_running_and_waiting_requests():
    """Timeout 2.5 s, one seat. A (10 prompt, 5 out) at 0: prefill [0, 1.010], decodes end
    2.011, 3.012: at the step boundary 3.012 A is past its deadline 2.5 and is aborted; it
    failed at 2.5. B (10, 1) at 0.2 and C (10, 1) at 0.3 wait for the seat all along; at that
    boundary both are past their deadlines (2.7, 2.8) and leave the queue, failed then. D
    (10, 1) at 3.0 takes the freed seat: prefill [3.012, 4.022], done."""
    w = wl([0, 0.2, 0.3, 3.0], [10, 10, 10, 10], [5, 1, 1, 1])
    res = simulate(COST, w, cfg(max_num_seqs=1), client=ClientView(timeout_s=2.5))
    assert list(res.status) == [REJECTED, REJECTED, REJECTED, COMPLETED]
    np.testing.assert_allclose(res.failed_s[:3], [2.5, 2.7, 2.8], rtol=1e-12)
    assert all("client timeout" in res.reasons[i] for i in range(3))
    t_abort = d(10) + 2 * d(1)
    np.testing.assert_allclose(res.finish_s[3], t_abort + d(10), rtol=1e-12)
    s = summarize(res)
    assert s["completed"] == 1 and s["failed"] == 3
    # failed requests are out of every latency statistic
    assert s["mean_ttft_ms"] == pytest.approx((t_abort + d(10) - 3.0) * 1e3)
    # a request finishing past its deadline is a timeout too: 3 tokens end at 1.010, 2.011 and
    # 3.012 > 3.0 (the step began before the deadline): failed at 3.0
    late = simulate(COST, wl([0], [10], [3]), cfg(), client=ClientView(timeout_s=3.0))
    assert late.status[0] == REJECTED and late.failed_s[0] == pytest.approx(3.0)
    assert summarize(late)["duration"] == pytest.approx(3.0)


def test_timeout_releases_the_closed_loop_client():
    """A closed-loop client whose request times out sends its next one when it gives up."""
    w = wl([0, 0], [10, 10], [50, 1], concurrency=1)
    res = simulate(COST, w, cfg(), client=ClientView(timeout_s=4.0))
    assert list(res.status) == [REJECTED, COMPLETED]
    assert res.failed_s[0] == pytest.approx(4.0)
    assert res.arrival_s[1] == pytest.approx(4.0)


def test_client_view_checks_its_values():
    for kw, match in (({"frontend_s": -1.0}, "frontend_s"), ({"lag_steps": 2}, "lag_steps"),
                      ({"timeout_s": 0.0}, "timeout_s"), ({"frontend_s": 1.0, "timeout_s": 0.5}, "timeout_s")):
        with pytest.raises(SpecError, match=match):
            ClientView(**kw)
    with pytest.raises(SpecError, match="request_timeout_s"):
        Scenario(request_timeout_s=-3)


# --------------------------------------------------------------------------- every engine profile


@functools.cache
def engine_parts(engine: str):
    """(cost model, scheduler limits, client view) of a small model under an engine profile."""
    sc = Scenario(model="llama-3.1-8b", hardware="h100-sxm", engine=engine, max_num_seqs=8,
                  max_num_batched_tokens=512, max_model_len=4096)
    cost = sc.cost_model()
    return cost, sc.engine_config(cost), sc.client_view()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(engine=st.sampled_from(ENGINES), n=st.integers(1, 30), slots=st.integers(1, 6),
       rate=st.one_of(st.just(math.inf), st.floats(0.5, 400.0)), seed=st.integers(0, 50),
       ins=st.lists(st.integers(1, 3000), min_size=30, max_size=30),
       outs=st.lists(st.integers(1, 40), min_size=30, max_size=30),
       timeout=st.one_of(st.none(), st.floats(0.05, 2.0)))
def test_in_flight_never_exceeds_max_concurrency_under_every_engine(engine, n, slots, rate, seed, ins, outs,
                                                                    timeout):
    """vLLM's --max-concurrency N: from each send until the client sees the request end (its
    last token, its timeout or its refusal) at most N are in flight, whatever the engine's
    client view (API-server latency, async lag) and the client's timeout."""
    import dataclasses

    cost, config, view = engine_parts(engine)
    if timeout is not None:
        view = dataclasses.replace(view, timeout_s=view.frontend_s + timeout)
    sched = arrivals(n, rate, rng=vllm_rng(seed))
    w = wl(sched, ins[:n], outs[:n], max_concurrency=slots) if math.isfinite(rate) else \
        wl(sched, ins[:n], outs[:n], concurrency=slots)
    res = simulate(cost, w, config, client=view)
    assert ((res.status == COMPLETED) | (res.status == REJECTED)).all()
    send, end = res.arrival_s, end_times(res)
    assert np.isfinite(end[np.isfinite(send)]).all()
    assert peak_in_flight(send, end) <= slots
    if math.isfinite(rate):
        assert (send >= sched).all()  # nobody is sent before its scheduled time
        assert (np.diff(send) >= 0).all()  # first come, first served
    ok = res.status == COMPLETED
    assert (res.first_token_s[ok] - send[ok] >= view.frontend_s - 1e-12).all()
    if view.timeout_s is not None:
        assert (end - send <= view.timeout_s + 1e-9).all()


@pytest.mark.parametrize("engine", ENGINES)
def test_default_engines_hold_the_cap_on_sharegpt(engine):
    """The case of issue 23: 16 slots at 20 req/s under each profile (up to 27 were in flight
    under vllm when the client view was added after the run)."""
    sc = Scenario(workload="sharegpt", rate=20.0, concurrency=16, num_requests=300, engine=engine)
    res, _ = sc.run()
    assert peak_in_flight(res.arrival_s, end_times(res)) == 16


# --------------------------------------------------------------------------- saturation


def test_saturated_open_loop_reports_what_the_server_delivers():
    """One seat, prompts of 10 and 3 output tokens: service S = d(10) + 2 d(1) = 3.012 s. Sent at
    1 req/s (vLLM's schedule, 60 requests, the last at 60 s), three times what the server
    serves: it is busy from the first arrival t_0 on, so the last request ends at t_0 + 60 S
    and the throughput is 60 / (t_0 + 60 S) ~ 1/S = 0.332 req/s, not the offered 1 req/s."""
    n = 60
    s_time = d(10) + 2 * d(1)
    sched = arrivals(n, 1.0, rng=vllm_rng(0))
    w = wl(sched, np.full(n, 10), np.full(n, 3), clock_start_s=0.0)
    res = simulate(COST, w, cfg(max_num_seqs=1))
    s = summarize(res)
    assert s["completed"] == n
    assert s["duration"] == pytest.approx(sched[0] + n * s_time, rel=1e-12)
    assert s["request_throughput"] == pytest.approx(n / (sched[0] + n * s_time), rel=1e-12)
    assert s["request_throughput"] < 1.0 / s_time < s["offered_rate"] == pytest.approx(1.0)
    # the same stream at rate inf (the offline maximum) delivers the same per-second count
    off = summarize(simulate(COST, wl(np.zeros(n), np.full(n, 10), np.full(n, 3)), cfg(max_num_seqs=1)))
    assert off["request_throughput"] == pytest.approx(1.0 / s_time, rel=1e-12)


def test_saturated_run_with_a_client_timeout_counts_successes():
    """The same overload with a 20 s client timeout: a request either ends within 20 s of its
    send or fails at exactly send + 20 s (aborted where it was: the queue or the batch); the
    server never serves more than 1/S, and the run lasts until the last request ends or fails
    (inference-perf's stage, vLLM's gather)."""
    n = 60
    s_time = d(10) + 2 * d(1)
    sched = arrivals(n, 1.0, rng=vllm_rng(0))
    w = wl(sched, np.full(n, 10), np.full(n, 3), clock_start_s=0.0)
    res = simulate(COST, w, cfg(max_num_seqs=1), client=ClientView(timeout_s=20.0))
    s = summarize(res)
    ok, failed = res.status == COMPLETED, res.status == REJECTED
    assert ok.sum() + failed.sum() == n and failed.sum() > n / 2
    assert (res.finish_s[ok] - res.arrival_s[ok] <= 20.0 + 1e-9).all()
    np.testing.assert_allclose(res.failed_s[failed], res.arrival_s[failed] + 20.0, rtol=1e-12)
    assert s["duration"] == pytest.approx(max(np.nanmax(res.finish_s), np.nanmax(res.failed_s)))
    assert s["request_throughput"] == pytest.approx(ok.sum() / s["duration"])
    assert s["request_throughput"] <= 1.0 / s_time
    # while the queue is short the server ends a request every S; once the wait nears 20 s
    # the head of the queue is admitted and then aborted part-way (its first token came, its
    # last could not): work thrown away, as the overloaded dev_serving reasoning runs show
    fin = np.sort(res.finish_s[ok])
    assert np.allclose(np.diff(fin[:10]), s_time)
    assert (failed & np.isfinite(res.first_token_s)).sum() > 0


def test_cli_flags_reach_the_scenario():
    """--request-timeout and vLLM's ramp-up flags on the command line (one-line errors)."""
    import json

    from click.testing import CliRunner

    from simulator.cli.commands import main

    base = ["simulate", "-w", "random", "--input-len", "256", "--output-len", "150", "-n", "60", "--json"]
    r = CliRunner().invoke(main, [*base, "-r", "40", "--request-timeout", "1.5"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["completed"] > 0 and s["failed"] > 0 and set(s["failed_reasons"]) == {"client timeout: not finished 1.5 s after it was sent"}
    assert s["p99_e2el_ms"] <= 1500.0
    r = CliRunner().invoke(main, [*base, "--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1",
                                  "--ramp-up-end-rps", "9"])
    assert r.exit_code == 0, r.output
    # the ramp's delays summed: the mean gap over the ramp is about the mean of 1/r_i
    rates = np.linspace(1, 9, 60)
    assert json.loads(r.stdout)["offered_rate"] == pytest.approx(60 / np.sum(1 / rates), rel=0.3)
    for extra, msg in ((["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1"], "ramp_up_end_rps: missing"),
                       (["--request-timeout", "0"], "request_timeout_s")):
        r = CliRunner().invoke(main, [*base, *extra])
        assert r.exit_code != 0 and msg in r.output, r.output


# --------------------------------------------------------------------------- the tokenizer


def test_tokenizer_is_a_fifo_server_after_the_frontend():
    """F = 0.5 s, b = 1 ms per prompt token. A (100 prompt, 2 out) sent at 0, B (10, 1) at 0.05.
    A reaches the tokenizer at 0.5 and the engine at 0.6; B reaches the tokenizer at 0.55,
    waits for A until 0.6 and reaches the engine at 0.61. A's prefill [0.6, 0.6 + d(100)];
    B joins the next step with A's decode: d(11) more. TTFT(A) = 0.6 + d(100), TTFT(B) =
    0.6 + d(100) + d(11) - 0.05; the ITLs are the steps' as without a tokenizer."""
    view = ClientView(0.5, prompt_token_s=1e-3)
    res = simulate(COST, wl([0, 0.05], [100, 10], [2, 1]), cfg(), client=view)
    a_first = 0.6 + d(100)
    np.testing.assert_allclose(res.arrival_s, [0.0, 0.05], rtol=1e-12)
    np.testing.assert_allclose(res.first_token_s, [a_first, a_first + d(11)], rtol=1e-12)
    np.testing.assert_allclose(res.finish_s, [a_first + d(11), a_first + d(11)], rtol=1e-12)
    # it never holds up a step: A's one gap is the shared step, as without a tokenizer
    np.testing.assert_allclose(res.itl_values_s, [d(11)], rtol=1e-12)
    # the report's breakdown: F, and the mean time from the tokenizer to the engine
    # (A 0.1 s, B 0.01 s + 0.05 s waiting for A)
    s = summarize(res)
    assert s["api_server_latency_ms"] == pytest.approx(500.0)
    assert s["tokenizer_mean_ms"] == pytest.approx(80.0)
    assert summarize(simulate(COST, wl([0], [10], [2]), cfg()))["api_server_latency_ms"] is None
    # b = 0 is the run without a tokenizer, bit for bit
    plain = simulate(COST, wl([0, 0.05], [100, 10], [2, 1]), cfg(), client=ClientView(0.5))
    zero = simulate(COST, wl([0, 0.05], [100, 10], [2, 1]), cfg(), client=ClientView(0.5, prompt_token_s=0.0))
    assert np.array_equal(plain.first_token_s, zero.first_token_s)
    assert np.array_equal(plain.finish_s, zero.finish_s)


def test_tokenizer_in_closed_loops_caps_and_later_turns():
    """b = 1 ms per token, F = 0.5, 10-token prompts: every request reaches the engine
    0.5 + 0.01 after its send. Closed loop of one client: A sent 0, first token 0.51 + d(10),
    ends 0.51 + d(10) + d(1); B is sent then and takes the same path."""
    view = ClientView(0.5, prompt_token_s=1e-3)
    one = 0.51 + d(10) + d(1)
    res = simulate(COST, wl([0, 0], [10, 10], [2, 2], concurrency=1), cfg(), client=view)
    np.testing.assert_allclose(res.arrival_s, [0.0, one], rtol=1e-12)
    np.testing.assert_allclose(res.first_token_s, [0.51 + d(10), one + 0.51 + d(10)], rtol=1e-12)
    np.testing.assert_allclose(res.finish_s, [one, 2 * one], rtol=1e-12)
    capped = simulate(COST, wl([0, 0.1], [10, 10], [2, 2], max_concurrency=1), cfg(), client=view)
    np.testing.assert_allclose(capped.finish_s, res.finish_s, rtol=1e-12)
    # a later turn, sent a think time of 2 s after the client sees turn 1 end
    w = wl([0, 0], [10, 10], [2, 1], extra={"parent": np.array([-1, 0]), "think_time_s": np.array([0.0, 2.0])})
    turns = simulate(COST, w, cfg(), client=view)
    np.testing.assert_allclose(turns.first_token_s[1], one + 2.0 + 0.51 + d(10), rtol=1e-12)


def test_timeout_counts_from_the_send_through_the_tokenizer():
    """b = 1 ms per token, a 1,000-token prompt: it reaches the engine at 1.0 and its prefill
    ends at 1.0 + d(1000) = 3.0, past the deadline send + 1.5: failed at 1.5 (not at 2.5, the
    deadline counted from its arrival at the engine)."""
    res = simulate(COST, wl([0], [1000], [2]), cfg(), client=ClientView(timeout_s=1.5, prompt_token_s=1e-3))
    assert res.status[0] != COMPLETED
    assert res.failed_s[0] == pytest.approx(1.5, rel=1e-12)


@pytest.mark.parametrize("bad", [-1e-6, math.inf, 0.01, True, "1e-6"])
def test_tokenizer_time_is_checked(bad):
    with pytest.raises(SpecError, match="prompt_token_s"):
        ClientView(prompt_token_s=bad)


def test_one_tokenizer_per_replica_in_send_order():
    """b = 1 ms per token, two replicas (two API servers). A and B, 100 prompt tokens each,
    both sent at 0: tokenised side by side, both reach the engine at 0.1 and prefill at once,
    first tokens at 0.1 + d(100); one replica (one tokenizer) takes B second, at 0.2. A long
    prompt first (1,000 tokens, 1 s) and a short one (10 tokens) on two tokenizers: the short
    one is done at 0.01 but reaches the engine in send order, at 1.0, with A."""
    view = ClientView(prompt_token_s=1e-3)
    two = simulate(COST, wl([0, 0], [100, 100], [1, 1]), cfg(), replicas=2, client=view)
    np.testing.assert_allclose(two.first_token_s, [0.1 + d(100)] * 2, rtol=1e-12)
    one = simulate(COST, wl([0, 0], [100, 100], [1, 1]), cfg(), replicas=1, client=view)
    np.testing.assert_allclose(one.first_token_s, [0.1 + d(100), 0.1 + d(100) + d(100)], rtol=1e-12)
    order = simulate(COST, wl([0, 0], [1000, 10], [1, 1]), cfg(), replicas=2, client=view)
    np.testing.assert_allclose(order.first_token_s, [1.0 + d(1000), 1.0 + d(10)], rtol=1e-12)


def test_two_api_servers_tokenize_side_by_side_and_halve_the_stream():
    """vLLM's --api-server-count 2 on one replica: A and B (100 prompt tokens each, b = 1 ms a
    token) sent at 0 are tokenised side by side and prefilled in one step from 0.1, first
    tokens at 0.1 + d(200); with one server B reaches the engine at 0.2, after A's prefill has
    started at 0.1 (A's first token at 0.1 + d(100)). The stream at c = 0.2 s an output on two
    loops is priced as one loop at 0.1: the first hand schedule's times, 1.12 and 1.22 from its
    step at 1.02."""
    two = simulate(COST, wl([0, 0], [100, 100], [1, 1]), cfg(), client=ClientView(prompt_token_s=1e-3, api_servers=2))
    np.testing.assert_allclose(two.first_token_s, [0.1 + d(200)] * 2, rtol=1e-12)
    one = simulate(COST, wl([0, 0], [100, 100], [1, 1]), cfg(), client=ClientView(prompt_token_s=1e-3))
    np.testing.assert_allclose(one.first_token_s[0], 0.1 + d(100), rtol=1e-12)
    halved = simulate(COST, wl([0, 0], [10, 10], [3, 2]), cfg(), client=ClientView(stream_output_s=0.2, api_servers=2))
    np.testing.assert_allclose(halved.first_token_s, [1.12, 1.22], rtol=1e-12)
    np.testing.assert_allclose(halved.finish_s, [3.123, 2.222], rtol=1e-12)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, 5000])
def test_api_servers_are_checked(bad):
    with pytest.raises(SpecError, match=r"^api_servers: .* must be an integer number of API servers in \[1, 1024\]$"):
        ClientView(api_servers=bad)
    with pytest.raises(SpecError, match=r"api_server_count: .* must be an integer number of API servers"):
        Scenario(api_server_count=bad)


def test_api_server_count_defaults_to_the_data_parallel_size_under_vllm():
    """`vllm serve --data-parallel-size D` starts D API servers unless --api-server-count says
    otherwise; the other engines keep one."""
    assert Scenario(model="deepseek-r1", hardware="h200-sxm", tp=16, dp_attention=16, ep=16).client_view().api_servers == 16
    assert Scenario(model="deepseek-r1", hardware="h200-sxm", tp=16, dp_attention=16, ep=16,
                    api_server_count=4).client_view().api_servers == 4
    assert Scenario(model="deepseek-r1", hardware="h200-sxm", tp=16, dp_attention=16, ep=16,
                    engine="sglang").client_view().api_servers == 1
    assert Scenario().client_view().api_servers == 1


def test_tokenizer_past_the_time_cap_starts_no_step():
    """Cap 1.2 s, b = 1 ms per token, closed loop of 2: the 5,000-token request reaches the
    engine at 5.01, after the cap: nothing past the cap runs, with one replica as with two (the
    one-replica shortcut ran on to 5.02 before)."""
    w = wl([0, 0, 0], [10, 5000, 10], [5, 1, 1], concurrency=2)
    runs = [simulate(COST, w, cfg(max_duration_s=1.2), replicas=k, client=ClientView(prompt_token_s=1e-3))
            for k in (1, 2)]
    for res in runs:
        assert not (res.status == COMPLETED).any()
        np.testing.assert_allclose(res.first_token_s[0], 0.01 + d(10), rtol=1e-12)
        assert np.isnan(res.first_token_s[1:]).all()
        assert "not finished within the simulated-time cap" in res.reasons[1]


def test_profile_tokenizer_time_is_checked_at_load():
    import copy

    from simulator.profiles.profile import engine_from_dict, load_engine
    from simulator.specs.catalog import read_yaml

    assert load_engine("vllm").overheads.per_prompt_token_s.value == pytest.approx(2.45e-6)
    from pathlib import Path

    data = copy.deepcopy(read_yaml(Path(__file__).resolve().parents[1] / "engine_specs" / "vllm.yaml"))
    data["overheads"]["per_prompt_token_s"]["value"] = 0.002
    with pytest.raises(SpecError, match=r"^x\.yaml: overheads\.per_prompt_token_s\.value: 0\.002 must be a number of "
                                        r"seconds per prompt token in \[0, 0\.001\]$"):
        engine_from_dict(data, "x.yaml")


# --------------------------------------------------------------------------- the API server streams


def test_streaming_places_each_output_in_its_steps_burst():
    """c = 0.1 s per streamed output, A (10 prompt, 3 out) and B (10, 2) sent at 0. Step 1
    prefills both and ends at d(20) = 1.02; its burst streams A's first token at 1.12, B's at
    1.22. Step 2 (both decode) ends at 1.02 + d(2) = 2.022: A's token at 2.122, B's (its last)
    at 2.222. Step 3 (A alone) ends at 2.022 + d(1) = 3.023, A's last token at 3.123. The
    engine's steps are the run without streaming; TTFT and E2E move, not the gaps."""
    res = simulate(COST, wl([0, 0], [10, 10], [3, 2]), cfg(), client=ClientView(stream_output_s=0.1))
    np.testing.assert_allclose(res.first_token_s, [1.12, 1.22], rtol=1e-12)
    np.testing.assert_allclose(res.finish_s, [3.123, 2.222], rtol=1e-12)
    plain = simulate(COST, wl([0, 0], [10, 10], [3, 2]), cfg())
    np.testing.assert_allclose(plain.finish_s, [3.023, 2.022], rtol=1e-12)
    np.testing.assert_allclose(sorted(res.itl_values_s), sorted(plain.itl_values_s), rtol=1e-12)
    # 0 is the run without streaming, bit for bit
    zero = simulate(COST, wl([0, 0], [10, 10], [3, 2]), cfg(), client=ClientView(stream_output_s=0.0))
    assert np.array_equal(zero.first_token_s, plain.first_token_s) and np.array_equal(zero.finish_s, plain.finish_s)


def test_streaming_slower_than_the_engine_backs_up():
    """c = 0.6 s, A and B (10 prompt, 4 out) at 0: a burst of two (1.2 s) outlasts a decode
    step (1.002 s), so each burst waits for the one before. Step ends 1.02, 2.022, 3.024,
    4.026; bursts start at 1.02, 2.22, 3.42, 4.62; the last tokens leave at 5.22 (A) and 5.82
    (B); B's TPOT is the loop's 1.2 s a token, not the engine's 1.002. The decode segment's
    closed form gives the step-by-step answer (max_segment_steps 1)."""
    w = wl([0, 0], [10, 10], [4, 4])
    view = ClientView(stream_output_s=0.6)
    for steps in (4096, 1):
        res = simulate(COST, w, cfg(max_segment_steps=steps), client=view)
        np.testing.assert_allclose(res.first_token_s, [1.62, 2.22], rtol=1e-12)
        np.testing.assert_allclose(res.finish_s, [5.22, 5.82], rtol=1e-12)


def test_a_step_that_ends_before_its_burst_begins_merges_into_it():
    """c = 0.6 s, A and B (10 prompt, 8 out) at 0: steps end at 1.02 + 1.002 k (k = 0..7), each
    burst of two lasts 1.2 s, so the loop falls behind by 0.198 s a step. Bursts start at 1.02,
    2.22, 3.42, 4.62, 5.82, 7.02 and 8.22 (opened by steps 1-7); step 8 ends at 8.034, before
    the burst at 8.22 has begun, so its tokens merge into the outputs already waiting there (vLLM
    keeps one pending output per request): A's last token leaves at 8.82 and B's at 9.42, not
    at 10.02 and 10.62 as an eighth burst would give. The client sees 7 chunks a request, the
    last with two tokens: 6 inter-token gaps each, all 1.2 s (burst start to burst start), and
    the two merged tokens have none. Segments and single steps agree."""
    w = wl([0, 0], [10, 10], [8, 8])
    view = ClientView(stream_output_s=0.6)
    for steps in (4096, 1):
        res = simulate(COST, w, cfg(max_segment_steps=steps, debug=True), client=view)
        np.testing.assert_allclose(res.first_token_s, [1.62, 2.22], rtol=1e-12)
        np.testing.assert_allclose(res.finish_s, [8.82, 9.42], rtol=1e-12)
        assert res.itl_counts.sum() == 12
        np.testing.assert_allclose(np.repeat(res.itl_values_s, res.itl_counts), 1.2, rtol=1e-12)


def test_a_loop_far_behind_the_engine_stays_one_burst_behind():
    """c = 0.6 s and A, B (10 prompt, 200 out): the engine's last step ends at 1.02 + 199 x
    1.002 = 200.418 s. Without merging every step would add a burst of 1.2 s and the last
    token would leave after 1.02 + 200 x 1.2 = 241 s; with it the loop runs back to back and
    the last tokens leave within two bursts of the engine's last step."""
    w = wl([0, 0], [10, 10], [200, 200])
    view = ClientView(stream_output_s=0.6)
    for steps in (4096, 1):
        res = simulate(COST, w, cfg(max_segment_steps=steps, debug=True), client=view)
        assert 200.418 < res.finish_s.max() <= 200.418 + 2 * 1.2
        # the bursts chain from 1.02 in steps of 1.2: the one after 200.418 starts at 201.42
        np.testing.assert_allclose(res.finish_s, [202.02, 202.62], rtol=1e-12)
        # one chunk a request a burst: 1 + 167 chunks, 167 gaps of 1.2 s each; the other 32
        # tokens of each request merged (the engine's step is 1.002 s)
        assert res.itl_counts.sum() == 2 * 167
        np.testing.assert_allclose(np.repeat(res.itl_values_s, res.itl_counts), 1.2, rtol=1e-10)


def test_a_loop_behind_keeps_the_engines_rate_under_a_closed_loop():
    """8 clients, 24 requests of 200 + 200 tokens on a real model whose decode step is about
    7 ms, and the API server at 10 ms an output: its bursts of 8 take 80 ms, 11x the step.
    Merging keeps the engine's rate (output throughput within 10 % of the run without the
    stream, TPOT within 5 %), the client gets a chunk every burst (median ITL 80 ms = 8 x 10
    ms), and the requests' ends move by about a burst. Without merging the loop would hand
    out one output every 10 ms: 100 tokens/s against the engine's ~1,100."""
    import dataclasses

    from simulator.metrics.summary import summarize

    cost, config, view = engine_parts("vllm")
    w = wl([0.0] * 24, [200] * 24, [200] * 24, concurrency=8)
    plain = summarize(simulate(cost, w, config, client=dataclasses.replace(view, stream_output_s=0.0)))
    behind = summarize(simulate(cost, w, config, client=dataclasses.replace(view, stream_output_s=0.01)))
    assert behind["output_throughput"] >= 0.9 * plain["output_throughput"]
    assert behind["median_tpot_ms"] == pytest.approx(plain["median_tpot_ms"], rel=0.05)
    assert behind["median_itl_ms"] == pytest.approx(80.0, rel=1e-6)
    assert plain["median_itl_ms"] < 10.0
    # about 11 steps a burst: ~10 of every 11 tokens join a chunk already waiting (reported)
    assert 0.8 < behind["stream_merged_fraction"] < 0.95
    assert plain["stream_merged_fraction"] == 0.0


@pytest.mark.parametrize("start,free,prev,t,ready", [
    (10.0, 11.2, 10.0, 10.5, 11.2),   # the latest burst [10, 11.2) is in flight: after it
    (10.0, 11.2, 10.0, 11.5, 11.5),   # the loop is free: at once
    (10.0, 11.2, 10.0, 9.9, 10.0),    # chained bursts of 1.2: the one in flight ends at 10
    (10.0, 11.2, 10.0, 7.5, 7.6),     # ... two before it: [6.4, 7.6)
    (10.0, 11.2, 10.0, 8.8, 10.0),    # on a boundary: the burst that begins there, [8.8, 10)
    (10.0, 11.2, 10.0, 8.8 - 1e-13, 10.0),  # ... also a rounding error away from it
    (10.0, 11.2, 10.0, 8.8 + 1e-13, 10.0),
    (10.0, 11.2, 9.0, 9.5, 9.5),      # a gap between the bursts: at once
    (10.0, 11.2, 9.0, 8.5, 9.0),      # the burst before, [7.8, 9.0)
])
def test_a_request_is_taken_up_after_the_burst_in_flight(start, free, prev, t, ready):
    """`Replica.api_ready`: the latest burst starts at `start` and ends at `free`, the one
    before ends at `prev`; bursts before run back to back at the latest's length."""
    from simulator.serving.replica import Replica

    rep = Replica.__new__(Replica)
    rep.api_start, rep.api_free, rep.api_prev = start, free, prev
    assert rep.api_ready(t) == pytest.approx(ready, rel=1e-12)


def test_closed_loop_request_waits_for_the_burst_in_flight():
    """c = 0.1 s, two clients: A and B (10 prompt, 2 out) sent at 0 end in step 2 (at 2.022);
    the loop streams A's last token at 2.122 and B's at 2.222. A's client sends C (10, 1) at
    2.122; the loop takes it up after B's token, at 2.222, and the idle engine prefills it
    until 2.222 + d(10) = 3.232: C's token leaves at 3.332 (TTFT 1.21 s, 1.01 s without)."""
    w = wl([0, 0, 0], [10, 10, 10], [2, 2, 1], concurrency=2)
    res = simulate(COST, w, cfg(), client=ClientView(stream_output_s=0.1))
    np.testing.assert_allclose(res.arrival_s, [0.0, 0.0, 2.122], rtol=1e-12)
    np.testing.assert_allclose(res.first_token_s, [1.12, 1.22, 3.332], rtol=1e-12)
    np.testing.assert_allclose(res.finish_s, [2.122, 2.222, 3.332], rtol=1e-12)
    # under a cap the same request takes the same path
    capped = simulate(COST, wl([0, 0, 0], [10, 10, 10], [2, 2, 1], max_concurrency=2), cfg(),
                      client=ClientView(stream_output_s=0.1))
    np.testing.assert_allclose(capped.first_token_s, res.first_token_s, rtol=1e-12)


def test_a_segment_after_a_prefill_only_burst_appends_the_running_requests():
    """c = 0.6 s under vLLM V0's prefill-priority scheduler: A and B (10 prompt, 8 out) at 0,
    C (10, 4) sent at 5.0. A and B's steps end at 1.02 + 1.002 k and their bursts chain from
    1.02 in steps of 1.2 s. C reaches the engine after the burst in flight (4.62-5.82), at
    5.82, during step 6 (5.028-6.030); step 7 is C's prefill alone, ending at 7.040, and its
    burst holds C only: it starts when the loop is free, 8.22 (C's first token at 8.82). The
    decode step of A, B, C ends at 8.043, before that burst has begun: C's token merges into
    its output there, while A and B, not in it, are appended (at 9.42 and 10.02), as vLLM's
    output queue would. Then the step ending 9.046 opens the burst at 10.02 (A's last token
    at 10.62, B's at 11.22, C's third at 11.82) and C's last leaves at max(10.047, 11.82) +
    0.6 = 12.42. Gaps run burst start to burst start: A and B 6 x 1.2 and 8.22 -> 10.02 =
    1.8, C 1.8 and 1.8; C's merged token has none (16 gaps + 1 merged + 3 first = 20 tokens).
    A closed-form segment whose steps merged into that burst had left A and B out of it
    (finishing them at 9.646 and 10.246, and a KeyError when one finished there)."""
    w = wl([0, 0, 5.0], [10, 10, 10], [8, 8, 4])
    view = ClientView(stream_output_s=0.6)
    for steps in (4096, 1):
        res = simulate(COST, w, cfg(scheduler="prefill-priority", max_segment_steps=steps), client=view)
        np.testing.assert_allclose(res.first_token_s, [1.62, 2.22, 8.82], rtol=1e-12)
        np.testing.assert_allclose(res.finish_s, [10.62, 11.22, 12.42], rtol=1e-12)
        np.testing.assert_allclose(np.repeat(res.itl_values_s, res.itl_counts), [1.2] * 12 + [1.8] * 4, rtol=1e-10)
        assert res.meta["api_server"]["merged_fraction"] == pytest.approx(1 / 20)


def test_a_multi_step_round_of_one_step_streams_as_a_v0_step():
    """vLLM 0.6 multi-step scheduling with one step a round is V0: the round's burst goes
    through the API server's loop as a step's does, so with the loop behind (c = 0.5 s, three
    outputs a step) a round that ends before a prefill's burst has begun appends the running
    requests to it. Same first tokens, finishes and gaps as the V0 scheduler."""
    w = wl([0, 0, 0, 1.5], [10] * 4, [12, 12, 12, 4])
    view = ClientView(stream_output_s=0.5)
    v0 = simulate(COST, w, cfg(scheduler="vllm-v0"), client=view)
    ms = simulate(COST, w, cfg(scheduler="vllm-multistep", policy_params={"num_scheduler_steps": 1}), client=view)
    np.testing.assert_allclose(ms.first_token_s, v0.first_token_s, rtol=1e-12)
    np.testing.assert_allclose(ms.finish_s, v0.finish_s, rtol=1e-12)
    np.testing.assert_allclose(np.repeat(ms.itl_values_s, ms.itl_counts), np.repeat(v0.itl_values_s, v0.itl_counts),
                               rtol=1e-12)
    # by hand: the first prefill (30 tokens) ends at 1.03 and its burst sends A, B, C's first
    # tokens at 1.53, 2.03, 2.53. D reaches the engine after that burst, at 2.53, in step 3
    # (2.033-3.036); its prefill alone ends at 4.046 and its burst, D alone, starts when the
    # loop is free, at 5.53 (first token 6.03). The round ending 5.050 merges D's token there
    # and appends A, B, C (free at 7.53); the one ending 6.054 opens the burst at 7.53 (D's
    # third token at 9.53), and D's fourth, from the round ending 7.058, merges into it
    np.testing.assert_allclose(v0.first_token_s, [1.53, 2.03, 2.53, 6.03], rtol=1e-12)
    np.testing.assert_allclose(v0.finish_s[3], 9.53, rtol=1e-12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(engine=st.sampled_from(ENGINES), n=st.integers(1, 25), rate=st.one_of(st.just(math.inf), st.floats(1.0, 400.0)),
       seed=st.integers(0, 50), c_us=st.sampled_from([50.0, 400.0, 3000.0]), closed=st.booleans(),
       ins=st.lists(st.integers(1, 1500), min_size=25, max_size=25),
       outs=st.lists(st.integers(1, 60), min_size=25, max_size=25))
def test_streaming_segments_match_the_step_by_step_loop(engine, n, rate, seed, c_us, closed, ins, outs):
    """The decode segments' closed-form bursts (`_segment_stream`) against one step at a
    time, under every engine, on a real model whose decode steps lengthen with the context;
    and every output leaves after the step that made it. (Not against the run without
    streaming: an arrival that meets a burst reaches the engine later, so the engine's
    schedule differs.)"""
    import dataclasses

    cost, config, view = engine_parts(engine)
    view = dataclasses.replace(view, stream_output_s=c_us * 1e-6)
    sched = arrivals(n, rate, rng=vllm_rng(seed))
    w = wl(sched, ins[:n], outs[:n], concurrency=4) if closed else wl(sched, ins[:n], outs[:n])
    config = dataclasses.replace(config, debug=True)  # with the ledger: every token a gap or merged
    fast = simulate(cost, w, config, client=view)
    slow = simulate(cost, w, dataclasses.replace(config, max_segment_steps=1), client=view)
    np.testing.assert_allclose(fast.first_token_s, slow.first_token_s, rtol=1e-9)
    np.testing.assert_allclose(fast.finish_s, slow.finish_s, rtol=1e-9)
    # the same chunks: inter-token gaps between burst starts, merged tokens without one
    np.testing.assert_allclose(np.repeat(fast.itl_values_s, fast.itl_counts),
                               np.repeat(slow.itl_values_s, slow.itl_counts), rtol=1e-9, atol=1e-12)
    # every output leaves at least one c after its step, which ends after the request reached
    # the engine (F after its send); the last no earlier than the first
    ok = fast.status == COMPLETED
    assert (fast.first_token_s[ok] - fast.arrival_s[ok] >= view.frontend_s + c_us * 1e-6 - 1e-12).all()
    assert (fast.finish_s[ok] >= fast.first_token_s[ok]).all()


@pytest.mark.parametrize("bad", [-1e-6, math.inf, 2.0, True])
def test_streaming_time_is_checked(bad):
    with pytest.raises(SpecError, match="stream_output_s"):
        ClientView(stream_output_s=bad)
