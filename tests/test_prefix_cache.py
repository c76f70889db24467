"""Prefix caching in the engine: oracles checkable by hand (serving/prefix_cache.py, sessions.py)."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.metrics.summary import summarize
from simulator.resolve import make_cost_model
from simulator.serving.prefix_cache import PrefixKVCache
from simulator.serving.records import COMPLETED, REJECTED
from simulator.serving.sched.registry import EngineConfig
from simulator.serving.simulate import simulate
from simulator.workloads.shared_prefix import (
    PrefixWorkload,
    Segment,
    multi_turn_chats,
    prompt_tokens,
    shared_prefix,
)
from simulator.workloads.workload import Workload, synthetic


@pytest.fixture(scope="module")
def cost():
    return make_cost_model("llama-2-7b", "a100-sxm-80gb", ideal=True)


def cfg(**kw):
    kw.setdefault("kv_capacity_tokens", 100_000)
    kw.setdefault("enable_prefix_caching", True)
    kw.setdefault("debug", True)
    return EngineConfig(**kw)


def prompts_workload(prompts, outs, gap_s=10.0):
    """Requests with these prompts, one every gap_s seconds (each done before the next)."""
    n = len(prompts)
    return PrefixWorkload(
        arrival_s=np.arange(n) * gap_s,
        input_len=np.array([prompt_tokens(p) for p in prompts], dtype=np.int64),
        output_len=np.asarray(outs, dtype=np.int64),
        prompts=tuple(prompts),
        session=np.full(n, -1), parent=np.full(n, -1), think_time_s=np.zeros(n),
    ).to_workload()


@pytest.mark.parametrize("G,ppg,S,Q", [(4, 5, 100, 20), (3, 7, 64, 1), (2, 3, 15, 40)])
def test_shared_prefix_oracle_large_cache(cost, G, ppg, S, Q):
    """G groups sharing a system prompt of S tokens, Q unique tokens each, cache large enough,
    requests far apart: hit tokens = (requests - G) x floor(S / 16) x 16."""
    pw = shared_prefix(G, ppg, S, Q, output_len=5, rate=1.0, process="constant", seed=3)
    res = simulate(cost, pw.to_workload(), cfg())
    assert (res.status == COMPLETED).all()
    n = G * ppg
    want = (n - G) * (S // 16) * 16
    assert int(res.cached_tokens.sum()) == want
    assert res.meta["prefix_cache_hit_rate"] == pytest.approx(want / (n * (S + Q)))
    assert summarize(res)["prefix_cache_hit_rate"] == pytest.approx(want / (n * (S + Q)))
    # the first request of each group misses, every other one hits the whole system prompt
    firsts = {}
    for i, p in enumerate(pw.prompts):
        firsts.setdefault(p[0].segment_id, i)
    for i in range(n):
        assert res.cached_tokens[i] == (0 if i in firsts.values() else (S // 16) * 16)


def test_cached_prefix_skips_prefill_but_attention_reads_it(cost):
    """A hit request's first step prefills only its new tokens, attending over the cached
    prefix: its step time is the cost model's price of q = 20 new tokens on p = 96 cached."""
    pw = shared_prefix(1, 2, 100, 20, output_len=1, rate=1.0, process="constant")
    res = simulate(cost, pw.to_workload(), cfg())
    ttft = res.first_token_s - res.arrival_s
    q, p = 120 - 96, 96
    assert ttft[1] == pytest.approx(cost.step_time(q, 1, 0.0, q * (p + q / 2), p + q, None, None, p))
    assert ttft[0] == pytest.approx(cost.step_time(120, 1, 0.0, 120 * 60.0, 120, None, None, 0))
    assert ttft[1] < ttft[0]


def test_lru_eviction_order_by_hand(cost):
    """6 blocks of 16. A = s1[48] (blocks a0 a1 a2), B = s2[64] (b0..b3), C = s1[48] + s3[16],
    D = s2[64] + s4[16], one at a time, one output token each.
    Free queue after A: [3 never-used, a2, a1, a0] (a request's blocks go back last first).
    B takes 4 from the head: the 3 unused and a2 (evicted). After B: [a1, a0, b3, b2, b1, b0].
    C hits a0 a1 (a2 is gone): 32 tokens; it takes a1, a0 out of the queue and 2 new blocks
    from the head, evicting b3 and b2. D hits b0 b1: 32 tokens."""
    A = (Segment(1, 48),)
    B = (Segment(2, 64),)
    C = (Segment(1, 48), Segment(3, 16))
    D = (Segment(2, 64), Segment(4, 16))
    w = prompts_workload([A, B, C, D], [1, 1, 1, 1])
    res = simulate(cost, w, cfg(kv_capacity_tokens=96))
    assert res.cached_tokens.tolist() == [0, 0, 32, 32]
    # the same requests without the squeeze: every repeated block hits
    res = simulate(cost, w, cfg(kv_capacity_tokens=16 * 20))
    # C: a0 a1 a2 (at most (64 - 1) // 16 = 3 blocks); D: b0..b3 ((80 - 1) // 16 = 4)
    assert res.cached_tokens.tolist() == [0, 0, 48, 64]


def test_kvcache_queue_by_hand():
    kv = PrefixKVCache(total_blocks=4, block_size=4, num_slots=2)
    kv.allocate(0, 2)
    kv.register(0, [11, 12])
    assert kv.held[0] == 0 and kv.ref_count == {11: 1, 12: 1}
    assert kv.free(0) == 2 and kv.free_blocks == 4
    assert list(kv.queue.values()) == [2, 1, 1] and list(kv.queue)[1:] == [12, 11]
    assert kv.hit_blocks([11, 12, 13], prompt_len=12) == 2
    assert kv.hit_blocks([11, 12, 13], prompt_len=8) == 1  # at most prompt_len - 1 tokens
    kv.allocate(1, 3)  # the 2 unused, then 12 (the older end of the queue)
    kv.check([1])
    assert kv.cached == {11} and kv.hit_blocks([11, 12], prompt_len=12) == 1
    kv.take_cached(0, [11])
    assert kv.free_blocks == 0 and kv.ref_count == {11: 1}
    kv.check([0, 1])


def test_multi_turn_hits_whole_history(cost):
    """Turn k re-sends the history (system + earlier turns and answers): it hits every full
    block of it that was computed, floor((prompt_{k-1} + answer_{k-1} - 1) / 16) x 16 tokens
    (the last answer token's KV is never computed, as in vLLM); lengths chosen with history
    not a multiple of 16, so that is floor(history / 16) x 16."""
    turns = [(30, 7), (21, 9), (40, 5), (13, 3)]
    pw = multi_turn_chats([turns], system_prompt_len=50, rate=1.0, think_time_s=2.0)
    res = simulate(cost, pw.to_workload(), cfg())
    hist = 50
    for k, (u, a) in enumerate(turns):
        if k:
            assert hist % 16 and res.cached_tokens[k] == (hist // 16) * 16
        else:
            assert res.cached_tokens[k] == 0
        hist += u + a
    # turn k is sent think_time after turn k-1 ends
    assert np.allclose(res.arrival_s[1:], res.finish_s[:-1] + 2.0)


def test_multi_turn_runs_nothing_past_the_time_cap(cost):
    """Three chats of three turns, the middle answer 3000 tokens (about 20 s of decoding), a
    5 s cap: each chat's first turn completes, its second is cut off at the cap (not served to
    completion past it) and its third is never sent (no arrival time)."""
    conv = [[(100, 40), (50, 3000), (50, 40)] for _ in range(3)]
    w = multi_turn_chats(conv, rate=1.0, think_time_s=0.5).to_workload()
    res = simulate(cost, w, cfg(max_duration_s=5.0))
    assert np.flatnonzero(res.status == COMPLETED).tolist() == [0, 3, 6]
    assert np.nanmax(res.finish_s) < 5.0
    assert all("not finished within" in res.reasons[r] for r in (1, 4, 7))
    assert all("never sent" in res.reasons[r] and np.isnan(res.arrival_s[r]) for r in (2, 5, 8))
    assert summarize(res)["failed"] == 6


@pytest.mark.parametrize("scheduler", ["sglang", "trtllm", "vllm"])
def test_multi_turn_caching_under_kv_pressure_keeps_the_ledger(scheduler):
    """Random multi-turn chats, prefix caching on, a KV cache a few long prompts fill, one and
    two replicas, the debug ledger on (no block used twice or over-committed, every request
    completed or rejected) and every completed request with a first token. SGLang used to
    over-commit here (the free blocks a cached prefix takes when locked were not counted, and
    a chunked prompt waiting for blocks was advanced as a decode), and TRT-LLM's no-evict
    reservation shrank as tokens were generated."""
    real = make_cost_model("llama-2-7b", "a100-sxm-80gb")
    for seed in range(40):
        rng = np.random.default_rng(seed)
        conv = [[(int(rng.integers(20, 600)), int(rng.integers(5, 300))) for _ in range(int(rng.integers(2, 6)))]
                for _ in range(int(rng.integers(3, 15)))]
        w = multi_turn_chats(conv, system_prompt_len=int(rng.integers(0, 500)), rate=float(rng.uniform(0.5, 5)),
                             think_time_s=float(rng.uniform(0, 2))).to_workload()
        c = cfg(scheduler=scheduler, kv_capacity_tokens=int(rng.integers(2500, 8000)),
                max_num_seqs=int(rng.integers(1, 8)), max_num_batched_tokens=int(rng.choice([512, 2048, 8192])))
        for replicas in (1, 2):
            res = simulate(real, w, c, replicas=replicas)
            done = res.status == COMPLETED
            assert ((res.status == COMPLETED) | (res.status == REJECTED)).all()
            assert np.isfinite(res.first_token_s[done]).all(), (seed, replicas)


def test_shared_prefix_multi_turn_rounds(cost):
    """inference-perf multi-turn: round 2 of a session hits round 1's prompt + answer."""
    pw = shared_prefix(2, 2, 64, 16, output_len=32, num_requests=8, rate=2.0, multi_turn=True)
    res = simulate(cost, pw.to_workload(), cfg())
    assert (res.status == COMPLETED).all()
    # round 2: history = 64 + 16 + 32 = 112 tokens -> 7 blocks (112 - 1) // 16 = 6 computed
    assert res.cached_tokens[4:].tolist() == [96] * 4
    for i in range(4, 8):
        assert res.arrival_s[i] >= res.finish_s[i - 4]


def test_off_by_default_and_no_prefix_no_hits(cost):
    w = synthetic(200, rate=20.0, input_len=300, output_len=40, seed=1)
    base = simulate(cost, w, EngineConfig(kv_capacity_tokens=20_000))
    assert base.cached_tokens is None and base.meta["prefix_cache_hit_rate"] == 0.0
    on = simulate(cost, w, cfg(kv_capacity_tokens=20_000))
    assert int(on.cached_tokens.sum()) == 0
    assert np.array_equal(on.finish_s, base.finish_s)
    assert "cached_tokens" in on.records() and "cached_tokens" not in base.records()


def test_mooncake_hash_ids_reused(cost):
    """Mooncake rows' 512-token hash_ids re-cut to 16-token blocks: a row repeating the
    first row's two ids hits 2 x 512 tokens."""
    w = Workload(np.array([0.0, 50.0]), np.array([1100, 1200]), np.array([2, 2]),
                 extra={"hash_ids": [(7, 8, 9), (7, 8, 10)]})
    res = simulate(cost, w, cfg())
    assert res.cached_tokens.tolist() == [0, 1024]


def test_warm_cache_and_pressure_conserve(cost):
    """Warm cache: the first requests hit too; under KV pressure with preemptions the
    debug invariants (blocks, queue, refcounts) hold to the end."""
    pw = shared_prefix(3, 4, 200, 50, output_len=60, rate=1.0, process="constant")
    warm = simulate(cost, pw.to_workload(), cfg(warm_cache=True))
    assert (warm.cached_tokens == (250 - 1) // 16 * 16).all()  # whole prompts, from the first
    cold = simulate(cost, pw.to_workload(), cfg())
    assert cold.cached_tokens.sum() < warm.cached_tokens.sum()
    busy = shared_prefix(5, 40, 300, 200, output_len=200, rate=200.0, process="poisson")
    res = simulate(cost, busy.to_workload(), cfg(kv_capacity_tokens=4000, max_num_batched_tokens=512))
    assert (res.status == COMPLETED).all() and res.preemptions.sum() > 0
    assert res.cached_tokens.sum() > 0


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(groups=st.integers(1, 4), ppg=st.integers(1, 6), sys_len=st.integers(0, 300),
       q_len=st.integers(1, 200), out=st.integers(1, 80), blocks=st.integers(24, 120),
       budget=st.sampled_from([64, 256, 8192]), sched=st.sampled_from(["vllm", "prefill-priority"]),
       multi=st.booleans(), seed=st.integers(0, 5), offload=st.sampled_from([0.0, 2e7, 1e9]))
def test_conservation_under_pressure(cost, groups, ppg, sys_len, q_len, out, blocks, budget, sched,
                                     multi, seed, offload):
    """Random shared-prefix workloads on a small cache: the debug invariants (blocks, free
    queue, reference counts) hold at every step, every request ends, no hit reaches the last
    token to prefill, and turning caching on loses no request."""
    n = groups * ppg * (2 if multi else 1)
    pw = shared_prefix(groups, ppg, sys_len, q_len, out, n, rate=50.0, process="poisson",
                       multi_turn=multi, seed=seed)
    w = pw.to_workload()
    c = cfg(kv_capacity_tokens=16 * blocks, max_num_batched_tokens=budget, scheduler=sched,
            max_num_seqs=8, cpu_offload_bytes=offload)
    res = simulate(cost, w, c)
    assert ((res.status == COMPLETED) | (res.status == 2)).all()
    done = res.status == COMPLETED
    # a hit never covers the last token to prefill: the prompt, or after a preemption the
    # prompt + tokens generated so far (the request may hit its own blocks then, as in vLLM)
    fresh = res.preemptions == 0
    assert (res.cached_tokens[fresh] <= w.input_len[fresh] - 1).all()
    assert (res.cached_tokens <= w.input_len + w.output_len - 2).all()
    assert (res.cached_tokens % 16 == 0).all()
    off = simulate(cost, w, cfg(kv_capacity_tokens=16 * blocks, max_num_batched_tokens=budget,
                               scheduler=sched, max_num_seqs=8, enable_prefix_caching=False))
    assert done.sum() == (off.status == COMPLETED).sum()


def test_cpu_offload_tier_by_hand(cost):
    """The LRU example with a host-memory tier: a2, evicted by B, goes to the CPU tier, so C
    hits a0 a1 on the GPU and reloads a2 (48 tokens cached). C's first token waits one step
    of 16 new tokens on 48 cached plus the reload of one block over the host link:
    16 tokens x 524,288 bytes (llama-2-7b bf16 KV) / 64 GB/s."""
    A = (Segment(1, 48),)
    B = (Segment(2, 64),)
    C = (Segment(1, 48), Segment(3, 16))
    w = prompts_workload([A, B, C], [1, 1, 1])
    res = simulate(cost, w, cfg(kv_capacity_tokens=96, cpu_offload_bytes=1e9))
    assert res.cached_tokens.tolist() == [0, 0, 48]
    reload_s = 16 * 524_288 / 64e9
    step_s = cost.step_time(16, 1, 0.0, 16 * (48 + 8), 64, None, None, 48)
    assert res.first_token_s[2] - res.arrival_s[2] == pytest.approx(step_s + reload_s)
    # a tier too small for one block keeps nothing
    small = simulate(cost, w, cfg(kv_capacity_tokens=96, cpu_offload_bytes=1e6))
    assert small.cached_tokens.tolist() == [0, 0, 32]
    with pytest.raises(Exception, match="cpu_offload_bytes"):
        cfg(cpu_offload_bytes=-1.0)
