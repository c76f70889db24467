"""Prefix structure of shared-prefix, multi-turn and Mooncake prompts; hashes checked by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.specs.checks import SpecError
from simulator.workloads.shared_prefix import (
    MOONCAKE_BLOCK_TOKENS,
    PrefixWorkload,
    Segment,
    block_hashes,
    mooncake_segments,
    multi_turn_chats,
    read_mooncake_prefix,
    shared_blocks,
    shared_prefix,
)


def _tokens(segments):
    """The brute-force token sequence: token j of segment s is (s, j)."""
    return [(s.segment_id, j) for s in segments for j in range(s.num_tokens)]


# --------------------------------------------------------------------------- block hashes


def test_block_hashes_count_only_full_blocks():
    assert len(block_hashes((Segment(0, 100), Segment(1, 40)), 16)) == 140 // 16 == 8
    assert len(block_hashes((Segment(0, 15),), 16)) == 0
    assert len(block_hashes((Segment(0, 16),), 16)) == 1
    assert block_hashes((), 16) == []


def test_block_hashes_chain_by_prefix():
    # Same second block content (segment 2, tokens 0..15) after different first blocks:
    # the chained hash differs, as in vLLM V1.
    a = block_hashes((Segment(0, 16), Segment(2, 16)), 16)
    b = block_hashes((Segment(1, 16), Segment(2, 16)), 16)
    assert a[1] != b[1]
    assert shared_blocks(a, b) == 0
    # Identical prefixes hash identically, in a fresh call too (deterministic values).
    assert block_hashes((Segment(0, 16), Segment(2, 16)), 16) == a


def test_segment_offsets_matter():
    # Segment 5 twice (tokens 0..9 then 0..9 again) is not segment 5's tokens 0..19.
    assert block_hashes((Segment(5, 10), Segment(5, 10)), 20) != block_hashes((Segment(5, 20),), 20)
    # Splitting a segment at a block boundary is the same tokens.
    assert block_hashes((Segment(5, 20),), 10) == block_hashes((Segment(5, 20),), 10)


seg_lists = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 12)), min_size=0, max_size=6).map(
    lambda xs: tuple(Segment(i, n) for i, n in xs)
)


@settings(max_examples=200, deadline=None)
@given(seg_lists, seg_lists, st.integers(1, 9))
def test_shared_blocks_iff_identical_token_prefix(a, b, block):
    # Oracle: expand both prompts to tokens; block k is shared iff the first (k+1)*block
    # tokens are identical.
    ta, tb = _tokens(a), _tokens(b)
    ha, hb = block_hashes(a, block), block_hashes(b, block)
    assert len(ha) == len(ta) // block
    for k in range(min(len(ha), len(hb))):
        same = ta[: (k + 1) * block] == tb[: (k + 1) * block]
        assert (ha[k] == hb[k]) == same


def test_block_size_must_be_positive():
    with pytest.raises(SpecError, match="block_size"):
        block_hashes((Segment(0, 4),), 0)


# --------------------------------------------------------------------------- shared prefix


def test_shared_prefix_distinct_and_shared_blocks_by_hand():
    # G=3 groups x P=4 prompts, S=100 system tokens, Q=40 question tokens, block 16:
    # each prompt has floor(140/16)=8 full blocks; the first floor(100/16)=6 are pure system
    # prompt (shared inside the group), the other 2 hold question tokens (unique).
    w = shared_prefix(3, 4, 100, 40, 10, seed=1)
    assert w.num_requests == 12
    hashes = w.block_hashes(16)
    assert all(len(h) == 8 for h in hashes)
    distinct = {x for h in hashes for x in h}
    assert len(distinct) == 3 * 6 + 12 * 2 == 42
    # With a cache that holds everything, blocks already seen are hits: (R - G) x 6 blocks.
    seen: set[int] = set()
    hit_blocks = 0
    for h in hashes:
        hit_blocks += sum(1 for x in h if x in seen)
        seen.update(h)
    assert hit_blocks == (12 - 3) * 6 == 54
    assert hit_blocks * 16 == (12 - 3) * (100 // 16) * 16


def test_shared_prefix_groups_and_shuffle():
    w = shared_prefix(3, 4, 96, 40, 10, seed=7)
    groups = [p[0].segment_id for p in w.prompts]
    assert sorted(groups) == [0] * 4 + [1] * 4 + [2] * 4
    # Every question once; each question belongs to its own group (id = G + p, p // 4 = group).
    qs = [p[1].segment_id for p in w.prompts]
    assert sorted(qs) == list(range(3, 15))
    assert all((q - 3) // 4 == g for q, g in zip(qs, groups, strict=True))
    h = w.block_hashes(16)
    for i in range(12):
        for j in range(12):
            if i != j:
                assert shared_blocks(h[i], h[j]) == (6 if groups[i] == groups[j] else 0)
    assert np.array_equal(w.input_len, np.full(12, 136))
    assert np.array_equal(w.output_len, np.full(12, 10))
    # Seeded: same seed, same order; another seed, (here) another order.
    assert shared_prefix(3, 4, 96, 40, 10, seed=7).prompts == w.prompts
    assert shared_prefix(3, 4, 96, 40, 10, seed=8).prompts != w.prompts


def test_shared_prefix_cycles_prompts():
    w = shared_prefix(2, 2, 32, 8, 5, num_requests=10, seed=0)
    for i in range(10):
        assert w.prompts[i] == w.prompts[i % 4]
    assert np.all(w.parent == -1)


def test_constant_rate_spacing_exact():
    w = shared_prefix(11, 4, 100, 466, 247, num_requests=100, rate=4.0, process="constant")
    np.testing.assert_array_equal(w.arrival_s, np.arange(1, 101) * 0.25)  # the last at n / rate
    assert np.all(w.input_len == 566)


def test_poisson_and_gamma_arrivals_seeded():
    a = shared_prefix(2, 2, 16, 16, 4, num_requests=20000, rate=5.0, process="poisson", seed=3)
    b = shared_prefix(2, 2, 16, 16, 4, num_requests=20000, rate=5.0, process="poisson", seed=3)
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)
    gaps = np.diff(a.arrival_s)
    assert gaps.mean() == pytest.approx(0.2, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)  # exponential: CV = 1
    g = shared_prefix(
        2, 2, 16, 16, 4, num_requests=20000, rate=5.0, process="gamma", burstiness=4.0, seed=3
    )
    gg = np.diff(g.arrival_s)
    assert gg.mean() == pytest.approx(0.2, rel=0.03)
    assert gg.std() / gg.mean() == pytest.approx(0.5, rel=0.05)  # CV^2 = 1/burstiness


def test_inference_perf_multi_turn_rounds_resend_history():
    # N = 2 x 3 = 6 sessions; request i is round i // 6 of session i % 6 (in shuffled order).
    S, Q, A = 100, 40, 10
    w = shared_prefix(2, 3, S, Q, A, num_requests=18, multi_turn=True, rate=1.0, seed=2)
    for i in range(18):
        r = i // 6
        assert w.input_len[i] == S + Q + r * (A + Q)
        assert w.parent[i] == (i - 6 if r else -1)
        assert w.session[i] == w.session[i % 6]
        if r:
            prev = w.prompts[i - 6]
            answer, question = w.prompts[i][len(prev)], w.prompts[i][len(prev) + 1]
            # round r = round r-1's prompt + its answer + the same question again
            assert w.prompts[i][: len(prev)] == prev
            assert answer.num_tokens == A and question == prev[1]
            assert len(w.prompts[i]) == len(prev) + 2
    # Answers are unique segments (ids G + N + request index).
    answers = [p[2].segment_id for p in w.prompts[6:12]]
    assert answers == [2 + 6 + i for i in range(6)]


# --------------------------------------------------------------------------- multi-turn chats


def test_multi_turn_chats_by_hand():
    w = multi_turn_chats(
        [[(10, 5), (7, 3), (4, 2)], [(9, 1)]],
        system_prompt_len=20,
        rate=1.0,
        process="constant",
        think_time_s=2.5,
    )
    # Turn k = system + u_0 + a_0 + ... + u_k: 20+10; 30+5+7; 42+3+4; then 20+9.
    assert w.input_len.tolist() == [30, 42, 49, 29]
    assert w.output_len.tolist() == [5, 3, 2, 1]
    assert w.parent.tolist() == [-1, 0, 1, -1]
    assert w.session.tolist() == [0, 0, 0, 1]
    assert w.think_time_s.tolist() == [0.0, 2.5, 2.5, 0.0]
    assert w.arrival_s.tolist() == [1.0, 1.0, 1.0, 2.0]  # constant: conversation k starts at (k + 1) / rate
    # Turn k starts with turn k-1's whole prompt + answer.
    for k in (1, 2):
        prev, cur = w.prompts[k - 1], w.prompts[k]
        assert cur[: len(prev)] == prev
        assert cur[len(prev)].num_tokens == w.output_len[k - 1]
    # Blocks of 8: turn 1 (42 tokens, 5 blocks) holds turn 0's prompt + answer (35 tokens) in
    # its first 35 tokens, so it shares floor(35/8) = 4 full blocks with that history, and all
    # 3 full blocks of turn 0's prompt (30 tokens).
    h = w.block_hashes(8)
    history0 = (*w.prompts[0], w.prompts[1][len(w.prompts[0])])
    assert shared_blocks(block_hashes(history0, 8), h[1]) == 4
    assert shared_blocks(h[0], h[1]) == 3
    # The second conversation shares the system prompt: floor(20/8) = 2 blocks.
    assert shared_blocks(h[0], h[3]) == 2


def test_multi_turn_exponential_think_time_seeded():
    conv = [[(5, 5)] * 200]
    a = multi_turn_chats(conv, think_time_s=3.0, think_time_dist="exponential", seed=4)
    b = multi_turn_chats(conv, think_time_s=3.0, think_time_dist="exponential", seed=4)
    np.testing.assert_array_equal(a.think_time_s, b.think_time_s)
    assert a.think_time_s[0] == 0.0
    assert a.think_time_s[1:].mean() == pytest.approx(3.0, rel=0.2)


def test_multi_turn_bad_input():
    with pytest.raises(SpecError, match="think_time_dist"):
        multi_turn_chats([[(1, 1)]], think_time_dist="weibull")
    with pytest.raises(SpecError, match=r"conversations\[0\]\[1\]"):
        multi_turn_chats([[(1, 1), (2,)]])
    with pytest.raises(SpecError, match="answer_tokens"):
        multi_turn_chats([[(1, 0)]])
    with pytest.raises(SpecError, match="think_time_s"):
        multi_turn_chats([[(1, 1)]], think_time_s=-1.0)


# --------------------------------------------------------------------------- Mooncake


def test_mooncake_hash_ids_map_to_blocks():
    assert MOONCAKE_BLOCK_TOKENS == 512
    a = mooncake_segments([1, 2, 3], 1200)
    assert [s.num_tokens for s in a] == [512, 512, 176]
    b = mooncake_segments([1, 2, 9], 1200)
    c = mooncake_segments([1, 2], 1024)
    d = mooncake_segments([5, 2], 1024)
    ha, hb, hc, hd = (block_hashes(x, 16) for x in (a, b, c, d))
    assert len(ha) == 1200 // 16 == 75
    assert shared_blocks(ha, hb) == 1024 // 16 == 64
    assert shared_blocks(ha, hc) == 64
    # Same id 2 in the second position after a different first block: nothing shared.
    assert shared_blocks(hc, hd) == 0
    # Block size 512 = one hash per id.
    assert shared_blocks(block_hashes(a, 512), block_hashes(b, 512)) == 2


def test_mooncake_uncovered_tail():
    with pytest.raises(SpecError, match="cover 512 of input_length 600"):
        mooncake_segments([1], 600)
    s = mooncake_segments([1], 600, unique_id=10**9)
    assert [x.num_tokens for x in s] == [512, 88]
    with pytest.raises(SpecError, match="hash_ids"):
        mooncake_segments([-3], 10)


# --------------------------------------------------------------------------- validation


def test_prefix_workload_validates():
    ok = dict(
        arrival_s=np.zeros(1),
        input_len=np.array([5]),
        output_len=np.array([1]),
        prompts=((Segment(0, 5),),),
        session=np.array([-1]),
        parent=np.array([-1]),
        think_time_s=np.zeros(1),
    )
    PrefixWorkload(**ok)
    with pytest.raises(SpecError, match="input_len 6"):
        PrefixWorkload(**{**ok, "input_len": np.array([6])})
    with pytest.raises(SpecError, match="parent"):
        PrefixWorkload(**{**ok, "parent": np.array([0])})
    with pytest.raises(SpecError, match="arrival_s"):
        PrefixWorkload(**{**ok, "arrival_s": np.array([math.nan])})


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(num_groups=0), "num_groups"),
        (dict(num_prompts_per_group=1.5), "num_prompts_per_group"),
        (dict(system_prompt_len=-1), "system_prompt_len"),
        (dict(output_len=0), "output_len"),
        (dict(rate=-1.0), "rate"),
        (dict(process="uniform"), "process"),
    ],
)
def test_shared_prefix_bad_input(kwargs, field):
    args = dict(
        num_groups=2, num_prompts_per_group=2, system_prompt_len=8, question_len=8, output_len=4
    )
    args.update(kwargs)
    with pytest.raises(SpecError, match=field):
        shared_prefix(**args)


def test_read_mooncake_prefix(tmp_path):
    rows = [
        '{"timestamp": 0, "input_length": 1200, "output_length": 7, "hash_ids": [1, 2, 3]}',
        '{"timestamp": 250, "input_length": 1100, "output_length": 9, "hash_ids": [1, 2, 4]}',
        "",
        '{"timestamp": 250, "input_length": 600, "output_length": 1, "hash_ids": [5]}',
    ]
    path = tmp_path / "mc.jsonl"
    path.write_text("\n".join(rows) + "\n")
    w = read_mooncake_prefix(path)
    assert w.arrival_s.tolist() == [0.0, 0.25, 0.25]
    assert w.input_len.tolist() == [1200, 1100, 600]
    assert w.output_len.tolist() == [7, 9, 1]
    # Row 3 has one id for 600 tokens: 512 from id 5, an unshared 88-token tail (id 2).
    assert w.prompts[2] == (Segment(-6, 512), Segment(2, 88))
    h = w.block_hashes(16)
    assert shared_blocks(h[0], h[1]) == 64  # ids 1, 2 in common: 1024 tokens
    assert shared_blocks(h[0], h[2]) == 0
    bad = tmp_path / "bad.jsonl"
    bad.write_text(rows[0] + "\n" + '{"timestamp": -1, "input_length": 5}\n')
    with pytest.raises(SpecError, match=r"bad.jsonl:2: key 'timestamp': -1 is invalid"):
        read_mooncake_prefix(bad)
    # the one Mooncake reader sorts rows by arrival; each prompt follows its row
    bad.write_text(rows[1] + "\n" + rows[0] + "\n")
    w = read_mooncake_prefix(bad)
    assert w.input_len.tolist() == [1200, 1100] and w.output_len.tolist() == [7, 9]
