"""Scheduler policies against hand-computed schedules, invariants and a no-thrash bound.

The oracle tests price steps with a fake cost model, step = 1 s + 1 ms per scheduled token
(`LinearCost`), so every time below is a sum of such steps computed by hand."""

from __future__ import annotations

import numpy as np
import pytest
from fake_costs import COST, d
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.resolve import make_cost_model
from simulator.serving.records import COMPLETED, REJECTED
from simulator.serving.sched.registry import SCHEDULERS, EngineConfig
from simulator.serving.simulate import simulate
from simulator.specs.checks import SpecError
from simulator.workloads.workload import Workload, synthetic


def wl(arrivals, ins, outs):
    return Workload(np.asarray(arrivals, dtype=float), np.asarray(ins, dtype=np.int64),
                    np.asarray(outs, dtype=np.int64))


def run(scheduler, w, blocks, block_size=4, budget=100, seats=8, **params):
    c = EngineConfig(scheduler=scheduler, policy_params=params, block_size=block_size, max_num_seqs=seats,
                     max_num_batched_tokens=budget, kv_capacity_tokens=blocks * block_size, debug=True)
    return simulate(COST, w, c)


THREE = wl([0, 0, 0], [8, 8, 8], [8, 8, 8])  # each needs ceil(16/4) = 4 blocks of 4 tokens


# ---------------------------------------------------------------- TensorRT-LLM


def test_trtllm_no_evict_reserves_prompt_plus_output():
    """10 blocks, 4 per request: A and B start (8 reserved), C (4 > 2 left) waits for both.
    step 1 prefill A+B (16 tokens); steps 2-8 decode A+B (2); step 9 prefill C (8); 10-16 C."""
    res = run("trtllm", THREE, blocks=10)
    t8 = d(16) + 7 * d(2)
    assert res.first_token_s == pytest.approx([d(16), d(16), t8 + d(8)], rel=1e-12)
    assert res.finish_s == pytest.approx([t8, t8, t8 + d(8) + 7 * d(1)], rel=1e-12)
    assert res.preemptions.sum() == 0


def test_trtllm_no_evict_reservation_holds_while_decoding():
    """10 blocks of 4. A (8 in, 24 out) keeps a reservation of ceil(32 / 4) = 8 blocks for its
    whole life, so B (4 in, 8 out: 3 blocks), arriving at t = 10.5 while A decodes, finds
    10 - 8 = 2 blocks unreserved and waits for A to finish (a reservation that shrank with
    every token A generated let B in early and used blocks that did not exist). A: first
    token at d(8), 23 decodes of d(1); then B: prefill d(4), 7 decodes."""
    res = run("trtllm", wl([0, 10.5], [8, 4], [24, 8]), blocks=10)
    t_a = d(8) + 23 * d(1)
    assert res.finish_s[0] == pytest.approx(t_a, rel=1e-12)
    assert res.first_token_s[1] == pytest.approx(t_a + d(4), rel=1e-12)
    assert res.finish_s[1] == pytest.approx(t_a + d(4) + 7 * d(1), rel=1e-12)


def test_trtllm_chunked_context_in_block_units():
    """Budget 6, blocks of 4. A (10 in, 2 out), B (4 in, 2 out) at t=0.
    step 1: A chunk 6 -> 4 (rounded down to a block); B's 2 leftover tokens round to 0: waits.
    step 2: A's last 6 (token 1).  step 3: A decode (1) + B whole (4 <= 5): A done, B token 1.
    step 4: B decode."""
    res = run("trtllm", wl([0, 0], [10, 4], [2, 2]), blocks=100, budget=6)
    t1, t2, t3, t4 = np.cumsum([d(4), d(6), d(5), d(1)])
    assert res.first_token_s == pytest.approx([t2, t3], rel=1e-12)
    assert res.finish_s == pytest.approx([t3, t4], rel=1e-12)


def test_trtllm_without_chunking_runs_whole_contexts_and_rejects_long_prompts():
    res = run("trtllm", wl([0, 0], [10, 4], [2, 2]), blocks=100, budget=12, chunked_context=False)
    # step 1: A (10); B (4) does not fit the 2 tokens left. step 2: A decode + B (5). step 3: B.
    t1, t2, t3 = np.cumsum([d(10), d(5), d(1)])
    assert res.first_token_s == pytest.approx([t1, t2], rel=1e-12)
    assert res.finish_s == pytest.approx([t2, t3], rel=1e-12)
    res = run("trtllm", wl([0], [10], [2]), blocks=100, budget=6, chunked_context=False)
    assert res.status[0] == REJECTED and "max_num_tokens" in res.reasons[0]


@pytest.mark.parametrize("capacity", ["guaranteed_no_evict", "max_utilization"])
def test_trtllm_prompt_longer_than_the_budget_is_served_in_block_chunks(capacity):
    """A prompt several times the token budget (MLPerf 405B: 9.4k tokens, budget 1,536-2,048)
    is served in chunks under chunked context, whatever the capacity policy (the micro-batch
    scheduler chunks in block units under both). Budget 8, blocks of 4; A (2 in, 6 out) and
    B (23 in, 2 out) at t = 0:
      step 1: A whole (2), B 6 -> 4 (a block)           T = 6  A token 1
      steps 2-4: A decode (1), B 7 -> 4 each            T = 5  B at 8, 12, 16
      step 5: A decode, B's last 7 (fits the 7 left)    T = 8  B token 1
      step 6: A decode (its 6th), B decode (its 2nd)    T = 2  both done"""
    res = run("trtllm", wl([0, 0], [2, 23], [6, 2]), blocks=100, budget=8, capacity_policy=capacity)
    t5 = d(6) + 3 * d(5) + d(8)
    assert res.status.tolist() == [COMPLETED, COMPLETED]
    assert res.first_token_s == pytest.approx([d(6), t5], rel=1e-12)
    assert res.finish_s == pytest.approx([t5 + d(2), t5 + d(2)], rel=1e-12)


def test_trtllm_chunked_context_off_refuses_a_prompt_over_the_budget_with_the_reason():
    for capacity in ("guaranteed_no_evict", "max_utilization"):
        res = run("trtllm", wl([0], [23], [2]), blocks=100, budget=8, capacity_policy=capacity,
                  chunked_context=False)
        assert res.status[0] == REJECTED and "exceeds max_num_tokens 8 with chunked context off" in res.reasons[0]


def test_max_utilization_and_vllm_pause_the_newest():
    """10 blocks, 2 per prompt: A, B, C all start (6 blocks). step 1 prefill (24 tokens);
    step 2 every decode opens a block (free 1); steps 3-5 fill them; step 6 all three need a
    block, one is free: A takes it, B needs one -> C (newest) is paused (frees 3) and nothing
    is admitted; steps 6-8 A+B (A and B done); C resumes with 8 + 5 tokens (4 blocks) at
    step 9, then 2 decodes."""
    for scheduler, params in (("trtllm", {"capacity_policy": "max_utilization"}), ("vllm", {}),
                              ("vllm-v1", {})):
        res = run(scheduler, THREE, blocks=10, **params)
        t5 = d(24) + 4 * d(3)
        t8 = t5 + 3 * d(2)
        assert res.preemptions.tolist() == [0, 0, 1], scheduler
        assert res.finish_s == pytest.approx([t8, t8, t8 + d(13) + 2 * d(1)], rel=1e-12), scheduler


@pytest.mark.parametrize("n_blocks", [10, 17, 40, 63])
def test_trtllm_concurrency_is_blocks_over_blocks_per_request(n_blocks):
    """Fixed lengths (12 in, 20 out: 8 blocks of 4): the running batch is
    floor(blocks / 8) while the queue lasts, never more, and nothing is preempted."""
    n = 12
    res = run("trtllm", wl([0] * n, [12] * n, [20] * n), blocks=n_blocks, budget=1000, seats=64)
    assert res.preemptions.sum() == 0 and (res.status == COMPLETED).all()
    # equal lengths: requests start and finish in waves of k
    k = n_blocks // 8
    firsts = np.unique(np.round(res.first_token_s, 9))
    assert len(firsts) == -(-n // k)
    assert (np.sum(np.isclose(res.first_token_s[:, None], firsts[None, :]), axis=0)[:-1] == k).all()


# ---------------------------------------------------------------- vLLM


def test_vllm_admission_gate_whole_prompt_vs_first_chunk():
    """3 blocks of 4, budget 10. A (8 in, 1 out), B (11 in, 1 out) at t=0.
    whole_prompt: step 1 A (8); B's 3 blocks are not free. step 2 B chunk 10; step 3 B 1.
    first_chunk: step 1 A (8) + B's first 2 tokens (1 block); step 2 B's last 9."""
    w = wl([0, 0], [8, 11], [1, 1])
    whole = run("vllm", w, blocks=3, budget=10)
    assert whole.finish_s == pytest.approx([d(8), d(8) + d(10) + d(1)], rel=1e-12)
    first = run("vllm", w, blocks=3, budget=10, admission_gate="first_chunk")
    assert first.finish_s == pytest.approx([d(10), d(10) + d(9)], rel=1e-12)


def test_vllm_v0_watermark_keeps_one_percent_free():
    """100 blocks of 4; A and B 200 in (50 blocks each). prefill-priority fills the cache
    (step 1 both, 400 tokens; B done; step 2 A decodes). vllm-v0 keeps 1 block free, so B
    waits: step 1 A; step 2 A decodes (done); step 3 B."""
    w = wl([0, 0], [200, 200], [2, 1])
    pp = run("prefill-priority", w, blocks=100, budget=1000)
    assert pp.finish_s == pytest.approx([d(400) + d(1), d(400)], rel=1e-12)
    v0 = run("vllm-v0", w, blocks=100, budget=1000)
    assert v0.finish_s == pytest.approx([d(200) + d(1), d(200) + d(1) + d(200)], rel=1e-12)


def test_vllm_multistep_rounds_stream_in_bursts():
    """N = 4. A (8 in, 6 out) at 0; B (4 in, 2 out) arrives at 0.5 s, during A's prefill.
    step 1 prefill A; step 2 prefill B (the head fits: prefill first, single step);
    round 1: A+B, 4 steps of 2 tokens (B done after its first, kept to the round's end),
    all delivered at its end; round 2: A's last token (1 step: nobody has more left).
    Gaps: A 5.012 then 3 zeros, then 1.001; B 4.008."""
    res = run("vllm-multistep", wl([0, 0.5], [8, 4], [6, 2]), blocks=1000, num_scheduler_steps=4)
    t_round1 = d(8) + d(4) + 4 * d(2)
    assert res.first_token_s == pytest.approx([d(8), d(8) + d(4)], rel=1e-12)
    assert res.finish_s == pytest.approx([t_round1 + d(1), t_round1], rel=1e-12)
    gaps = dict(zip(np.round(res.itl_values_s, 9), res.itl_counts, strict=True))
    assert gaps == {0.0: 3, round(d(1), 9): 1, round(t_round1 - d(8) - d(4), 9): 1, round(t_round1 - d(8), 9): 1}


def test_vllm_multistep_no_admission_inside_a_round():
    """B arrives at 1.5 s, during A's first round (starts 1.008): it waits for the round's end
    (t = 1.008 + 4 x 1.001), where prefill comes first."""
    res = run("vllm-multistep", wl([0, 1.5], [8, 4], [9, 1]), blocks=1000, num_scheduler_steps=4)
    assert res.first_token_s[1] == pytest.approx(d(8) + 4 * d(1) + d(4), rel=1e-12)


def test_vllm_multistep_lookahead_preempts_the_newest():
    """5 blocks of 4: A and B (8 in, 3 out) take 2 blocks each; a round of 2 needs a third
    block each (computed 8 -> 10), 1 free: B (newest) is preempted; A's round (2 steps, its
    2 outputs left) ends; B re-prefills 8 + 1 = 9 tokens (its token 2), then a round of 1."""
    res = run("vllm-multistep", wl([0, 0], [8, 8], [3, 3]), blocks=5, num_scheduler_steps=4)
    assert res.preemptions.tolist() == [0, 1]
    t_a = d(16) + 2 * d(1)
    assert res.finish_s == pytest.approx([t_a, t_a + d(9) + d(1)], rel=1e-12)


# ---------------------------------------------------------------- SGLang


def test_sglang_reserves_outputs_with_ignore_eos():
    """ignore_eos: ratio 1. 40 free tokens: A takes 8 + 8 + a page (20), B 16 < 20 fits, C
    does not; C stays out until A and B are done (free 24 - their 14 outputs left < 16)."""
    res = run("sglang", THREE, blocks=10, ignore_eos=True)
    t8 = d(16) + 7 * d(2)
    assert res.first_token_s == pytest.approx([d(16), d(16), t8 + d(8)], rel=1e-12)
    assert res.finish_s == pytest.approx([t8, t8, t8 + d(8) + 7 * d(1)], rel=1e-12)
    assert res.preemptions.sum() == 0


def test_sglang_prefill_batch_excludes_decodes():
    """A (8 in, 4 out) at 0; B (8 in, 2 out) arrives at 1.5 s during A's first decode.
    step 1 prefill A; step 2 decode A; step 3 prefill B only (A waits); step 4 A+B (B done);
    step 5 A (done)."""
    res = run("sglang", wl([0, 1.5], [8, 8], [4, 2]), blocks=1000)
    t = np.cumsum([d(8), d(1), d(8), d(2), d(1)])
    assert res.first_token_s == pytest.approx([t[0], t[2]], rel=1e-12)
    assert res.finish_s == pytest.approx([t[4], t[3]], rel=1e-12)


def test_sglang_retracts_fewest_outputs_to_the_tail():
    """Ratio 0 (running requests reserve nothing of their outputs), 10 blocks of 4.
    A, B (8 in, 8 out), C (12 in, 8 out) at 0; D (2 in, 1 out) arrives at 5.5 s.
    step 1 prefill A+B (16): 40 tokens free, A reserves 8 + 8 + a page, B 16 < 20 fits, C not;
    step 2 prefill C (12; 24 free, running reserve 0);
    step 3 decode A+B+C, each opens a block (3 free -> 0); steps 4-6 decode (3 tokens);
    step 7: D (3 tokens) > 0 free, no prefill; all three need a block, none free: retract
    C (outputs tie at 5, longest prompt) to the TAIL behind D (C frees 4 blocks); A+B decode;
    ratio -> min(1, (5 + 5 + 40) / 17) = 1;
    step 8 prefill D: 3 < 8 free - 1.0 x 4 outputs left (C at the head would block it);
    steps 9-10 A+B (done); step 11 C re-prefills 12 + 5 = 17 tokens; steps 12-13 decode."""
    w = wl([0, 0, 0, 5.5], [8, 8, 12, 2], [8, 8, 8, 1])
    res = run("sglang", w, blocks=10, init_new_token_ratio=0.0)
    assert res.preemptions.tolist() == [0, 0, 1, 0]
    t = np.cumsum([d(16), d(12)] + [d(3)] * 4 + [d(2), d(2)] + [d(2)] * 2 + [d(17), d(1), d(1)])
    assert res.first_token_s == pytest.approx([t[0], t[0], t[1], t[7]], rel=1e-12)
    assert res.finish_s == pytest.approx([t[9], t[9], t[12], t[7]], rel=1e-12)


# ---------------------------------------------------------------- parameters


def test_policy_params_are_validated_with_one_line_errors():
    with pytest.raises(SpecError, match=r"policy_params.capacity_policy: 'evict' is not one of"):
        EngineConfig(scheduler="trtllm", policy_params={"capacity_policy": "evict"})
    with pytest.raises(SpecError, match=r"policy_params.watermark: not a parameter of scheduler 'trtllm'"):
        EngineConfig(scheduler="trtllm", policy_params={"watermark": 0.1})
    with pytest.raises(SpecError, match=r"policy_params.watermark: 2 must be a number in \[0.0, 1.0\]"):
        EngineConfig(scheduler="vllm-v0", policy_params={"watermark": 2})
    with pytest.raises(SpecError, match=r"policy_params.ignore_eos: 1 is not one of"):
        EngineConfig(scheduler="sglang", policy_params={"ignore_eos": 1})
    with pytest.raises(SpecError, match=r"policy_params.num_scheduler_steps: 2.5 must be an integer >= 1 and <= 1024"):
        EngineConfig(scheduler="vllm-multistep", policy_params={"num_scheduler_steps": 2.5})
    with pytest.raises(SpecError, match=r"policy_params: \[1\] must be a mapping"):
        EngineConfig(policy_params=[1])
    assert {"vllm", "vllm-v1", "vllm-v0", "vllm-multistep", "prefill-priority", "static", "trtllm",
            "sglang"} <= set(SCHEDULERS)


# ---------------------------------------------------------------- no thrash at saturation

THRASH_CASES = [("vllm", {}), ("vllm", {"admission_gate": "first_chunk"}), ("vllm-v0", {}), ("prefill-priority", {}),
                ("vllm-multistep", {}),
                ("trtllm", {}), ("trtllm", {"capacity_policy": "max_utilization"}),
                ("trtllm", {"chunked_context": False}), ("sglang", {}), ("sglang", {"ignore_eos": True}),
                ("static", {})]


@pytest.fixture(scope="module")
def h200_70b():
    return make_cost_model("llama-3.1-70b", "h200-sxm", tp=1, weight_dtype="fp8", activation_dtype="fp8",
                           kv_dtype="fp8")


@pytest.mark.parametrize(("scheduler", "params"), THRASH_CASES)
def test_no_thrash_long_prompts_at_saturation(h200_70b, scheduler, params):
    """Issue 13's case (20,000 / 2,000 tokens, all at t = 0): preemptions per request stay
    below 1 (0 under no-evict admission); `first_chunk` (vLLM <= 0.11's gate) is the
    thrashing contrast."""
    n = 60
    whole = scheduler in ("vllm-v0", "prefill-priority", "vllm-multistep") or params.get("chunked_context") is False
    cfg = EngineConfig(scheduler=scheduler, policy_params=params, max_num_batched_tokens=32768 if whole else 8192)
    res = simulate(h200_70b, synthetic(n, float("inf"), 20000, 2000, seed=0), cfg)
    assert (res.status == COMPLETED).all()
    per_request = res.preemptions.sum() / n
    if params.get("admission_gate") == "first_chunk":
        assert per_request > 5  # the thrash the other gates avoid
    elif scheduler in ("trtllm", "static") and not params.get("capacity_policy"):
        assert per_request == 0
    elif params.get("ignore_eos"):
        assert per_request == 0  # full output reserved: behaves like no-evict
    else:
        assert per_request < 1


# ---------------------------------------------------------------- properties over random workloads

ALL_POLICIES = [("vllm", {}), ("vllm", {"admission_gate": "first_chunk", "watermark": 0.05}), ("vllm-v0", {}),
                ("prefill-priority", {}), ("vllm-multistep", {"num_scheduler_steps": 3}), ("trtllm", {}),
                ("trtllm", {"capacity_policy": "max_utilization"}), ("trtllm", {"chunked_context": False}),
                ("sglang", {}), ("sglang", {"ignore_eos": True}), ("static", {})]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), n=st.integers(1, 25), blocks=st.integers(12, 80), rate=st.sampled_from([0.5, 3.0, 1e9]),
       policy=st.sampled_from(ALL_POLICIES))
def test_every_policy_conserves_and_accounts(seed, n, blocks, rate, policy):
    """Random lengths, tight KV: blocks and seats stay conserved every step (debug mode), every
    request ends completed with its output or rejected with a reason, and GUARANTEED_NO_EVICT
    never preempts."""
    rng = np.random.default_rng(seed)
    w = wl(np.cumsum(rng.exponential(1 / rate, n)), rng.integers(1, 30, n), rng.integers(1, 20, n))
    scheduler, params = policy
    res = run(scheduler, w, blocks=blocks, budget=int(rng.integers(8, 64)), seats=int(rng.integers(1, 9)), **params)
    done = res.status == COMPLETED
    assert (done | (res.status == REJECTED)).all()
    assert all(res.reasons[i] for i in np.flatnonzero(~done))
    assert (res.finish_s[done] >= res.first_token_s[done]).all()
    if scheduler == "trtllm" and not params:
        assert res.preemptions.sum() == 0
