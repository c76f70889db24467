"""Speculative decoding in the engine (issue 23): vLLM's --speculative-config checked, the draft
priced per step, one verify step worked by hand (tokens, KV blocks, step time), acceptance
draws per request, invariants under load, and the crossover against concurrency."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from simulator.analysis.whatif import speculative_whatif
from simulator.cli.commands import main
from simulator.cost.speculative import head_spec
from simulator.resolve import make_cost_model, make_speculative
from simulator.scenario import Scenario
from simulator.serving.records import Records
from simulator.serving.sched.registry import EngineConfig
from simulator.serving.speculative import SpecReplica
from simulator.serving.steplog import StepLog
from simulator.specs.catalog import load_model
from simulator.specs.checks import SpecError
from simulator.specs.speculative import (
    conditional_from_unconditional,
    iid_rate_for_length,
    parse_speculative_config,
    vllm_synthetic_rates,
)
from simulator.workloads.workload import Workload

EAGLE3 = {"method": "eagle3", "num_speculative_tokens": 3, "acceptance_rate": 0.5}


# --------------------------------------------------------------------------- the setting


def test_vllm_json_is_parsed_and_acceptance_sources_agree():
    c = parse_speculative_config('{"method": "eagle", "num_speculative_tokens": 4, "acceptance_rate": [0.9, 0.8, 0.5, 0.5],'
                                 ' "revision": "main", "prompt_lookup_max": 4}')
    assert c is not None and c.method == "eagle" and c.k == 4 and c.lookahead_tokens == 4 and c.draft_slots_per_seq == 0
    assert c.unconditional == pytest.approx((0.9, 0.72, 0.36, 0.18))
    assert c.mean_acceptance_length == pytest.approx(1 + 0.9 + 0.72 + 0.36 + 0.18)
    # vLLM's reported per-position rates (unconditional) give back the same conditional ones
    u = parse_speculative_config({"method": "eagle", "num_speculative_tokens": 4,
                                  "per_position_acceptance_rates": [0.9, 0.72, 0.36, 0.18]})
    assert u is not None and u.acceptance == pytest.approx(c.acceptance)
    # a mean acceptance length: one i.i.d. rate a with (1 - a^(k+1)) / (1 - a) = L
    m = parse_speculative_config({"method": "eagle3", "num_speculative_tokens": 7, "mean_acceptance_length": 3.4})
    assert m is not None and len(set(m.acceptance)) == 1
    a = m.acceptance[0]
    assert (1 - a ** 8) / (1 - a) == pytest.approx(3.4, rel=1e-9)
    assert m.mean_acceptance_length == pytest.approx(3.4, rel=1e-9)
    assert iid_rate_for_length(1.0, 5) == 0.0 and iid_rate_for_length(6.0, 5) == 1.0
    # vLLM's synthetic sampler: its own minimum-variance schedule (rates 1, 1, 0.5, 0)
    assert vllm_synthetic_rates(3.5, 4) == (1.0, 1.0, 0.5, 0.0)
    s = parse_speculative_config({"method": "mtp", "num_speculative_tokens": 4, "rejection_sample_method": "synthetic",
                                  "synthetic_acceptance_length": 3.5})
    assert s is not None and s.acceptance == pytest.approx((1.0, 1.0, 0.5, 0.0)) and s.mean_acceptance_length == 3.5
    assert conditional_from_unconditional((0.5, 0.0, 0.0), "x") == (0.5, 0.0, 0.0)
    # method from the model name when none is given (as vLLM detects it); *_mtp and ngram_gpu
    assert parse_speculative_config({"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 2,
                                     "acceptance_rate": 0.5}).method == "eagle3"
    assert parse_speculative_config({"model": "llama-3.2-1b", "num_speculative_tokens": 2,
                                     "acceptance_rate": 0.5}).draft_slots_per_seq == 1
    assert parse_speculative_config({"method": "deepseek_mtp", "num_speculative_tokens": 1,
                                     "acceptance_rate": 0.8}).method == "mtp"
    assert parse_speculative_config({"method": "ngram_gpu", "num_speculative_tokens": 3,
                                     "acceptance_rate": 0.8}).lookahead_tokens == 0
    assert parse_speculative_config(None) is None and parse_speculative_config("") is None


@pytest.mark.parametrize("value, words", [
    ("{method: eagle}", "invalid JSON"),
    ("[1, 2]", "JSON object"),
    ({"method": "eagle", "num_speculative_tokens": 3}, "exactly one acceptance"),
    ({"method": "eagle", "num_speculative_tokens": 3, "acceptance_rate": 0.5, "mean_acceptance_length": 2},
     "were all given"),
    ({"method": "eagle", "num_speculative_tokens": 3, "acceptance_rate": [0.5, 0.5]}, "list of 3"),
    ({"method": "eagle", "num_speculative_tokens": 3, "acceptance_rate": 1.5}, "not a rate"),
    ({"method": "eagle", "num_speculative_tokens": 3, "mean_acceptance_length": 4.5}, "[1, 4]"),
    ({"method": "eagle", "num_speculative_tokens": 2, "per_position_acceptance_rates": [0.5, 0.7]}, "non-increasing"),
    ({"method": "eagle", "num_speculative_tokens": 2, "synthetic_acceptance_length": 2}, "synthetic"),
    ({"method": "eagle", "num_speculative_tokens": 0, "acceptance_rate": 0.5}, "num_speculative_tokens"),
    ({"method": "eagle", "acceptance_rate": 0.5}, "num_speculative_tokens"),
    ({"method": "medusa", "num_speculative_tokens": 2, "acceptance_rate": 0.5}, "not modelled"),
    ({"method": "eagel", "num_speculative_tokens": 2, "acceptance_rate": 0.5}, "did you mean 'eagle'"),
    ({"method": "draft_model", "num_speculative_tokens": 2, "acceptance_rate": 0.5}, "needs the draft model"),
    ({"method": "eagle", "num_speculative_tokens": 2, "acceptance_rate": 0.5, "tensor_parallel_size": 2},
     "draft_tensor_parallel_size"),
    ({"method": "eagle", "num_speculative_tokens": 2, "acceptance_rate": 0.5, "disable_by_batch_size": 8},
     "cannot honour"),
    ({"method": "eagle", "num_speculative_tokens": 2, "acceptance_rate": 0.5, "acceptance": 0.5}, "unknown field"),
    ({"method": "eagle", "num_speculative_tokens": 2, "acceptance_rate": 0.5, "parallel_drafting": True},
     "parallel_drafting"),
    ({"method": "eagle", "num_speculative_tokens": 2, "acceptance_rate": 0.5, "quantization": "awq"}, "quantization"),
    ({"method": "mtp", "num_speculative_tokens": 2, "acceptance_rate": 0.5, "draft_vocab_size": 1000},
     "EAGLE heads"),
])
def test_bad_settings_are_one_line_errors(value, words):
    with pytest.raises(SpecError) as e:
        parse_speculative_config(value)
    msg = str(e.value)
    assert words in msg and "\n" not in msg and msg.startswith("speculative_config")


def test_settings_llmsim_cannot_run_are_refused():
    base = dict(model="llama-3.1-8b", hardware="h100-sxm", workload="random", num_requests=4)
    with pytest.raises(SpecError, match="vLLM V1's scheduler"):
        Scenario(**base, scheduler="sglang", speculative_config=EAGLE3)
    with pytest.raises(SpecError, match="disagg"):
        Scenario(**base, disagg="1:1", speculative_config=EAGLE3)
    tp2 = make_cost_model("llama-3.1-70b", "h100-sxm", tp=2)
    with pytest.raises(SpecError, match="1 or the target's tp"):
        make_speculative(tp2, {**EAGLE3, "draft_tensor_parallel_size": 4})
    with pytest.raises(SpecError, match="vocabulary"):  # vLLM refuses a draft with another vocabulary
        make_speculative(tp2, {"method": "draft_model", "model": "llama-2-7b", "num_speculative_tokens": 2,
                               "acceptance_rate": 0.5})
    with pytest.raises(SpecError, match="speculative_config.model"):
        make_speculative(tp2, {"method": "draft_model", "model": "no-such-model", "num_speculative_tokens": 2,
                               "acceptance_rate": 0.5})
    # a draft model's slot per sequence comes out of the step budget (vLLM max_num_scheduled_tokens)
    sc = Scenario(**base, max_num_batched_tokens=256, max_num_seqs=256,
                  speculative_config={"method": "draft_model", "model": "llama-3.2-1b", "num_speculative_tokens": 2,
                                      "acceptance_rate": 0.5})
    with pytest.raises(SpecError, match="max_num_batched_tokens: 256 leaves no step budget"):
        sc.run()
    res = CliRunner().invoke(main, ["simulate", "-m", "llama-3.1-8b", "-n", "4", "--speculative-config", "{oops"])
    assert res.exit_code != 0 and "speculative_config: invalid JSON" in res.output
    assert "Traceback" not in res.output


# --------------------------------------------------------------------------- the draft's shape and price


def test_eagle3_head_is_one_target_layer_with_its_own_small_lm_head():
    target = load_model("llama-3.1-8b")
    head = head_spec(target, "eagle3", None)
    assert head.num_layers == 1 and head.vocab_size == 32000 and head.moe is None and head.sliding_window is None
    assert (head.hidden_size, head.num_heads, head.num_kv_heads, head.intermediate_size) == (4096, 32, 8, 14336)
    spec = make_speculative(make_cost_model("llama-3.1-8b", "h100-sxm"), EAGLE3)
    d = spec.drafter
    # by hand: attention 4096*(32+16)*128 + 32*128*4096, norms 2*4096, MLP 3*4096*14336, own LM head
    # 32000*4096, fc 3*4096*4096 (fuses three target hidden states), QKV fed 2H: 4096*6144 more; bf16
    params = (4096 * 48 * 128 + 4096 * 4096) + 8192 + 3 * 4096 * 14336 + 32000 * 4096 + 3 * 4096 * 4096 + 4096 * 6144
    assert d.weights_bytes_per_gpu == pytest.approx(2 * params)
    assert d.kv_bytes_per_gpu_token == pytest.approx(2 * 8 * 128 * 2)  # one layer's K and V
    # the KV budget loses the head's weights and every token holds the head's KV too
    mem_t = spec.target.memory(0.9, 8192, 256)
    mem_s = spec.memory(0.9, 8192, 256)
    assert mem_s.kv_capacity_tokens == int((mem_t.kv_budget_bytes_per_gpu - d.weights_bytes_per_gpu)
                                           // (mem_t.kv_bytes_per_token_per_gpu + d.kv_bytes_per_gpu_token))
    # gemma-3: its sliding-window layers are the target's only; the EAGLE head attends fully
    g = head_spec(load_model("gemma-3-27b"), "eagle", None)
    assert g.sliding_window is None and g.vocab_size == 262208
    # MTP keeps the target's MoE layer shape
    m = head_spec(load_model("deepseek-v3"), "mtp", None)
    assert m.num_layers == 1 and m.moe is not None and m.num_moe_layers == 1 and m.mla is not None


def test_draft_passes_are_priced_by_the_roofline_without_the_engine_step_overhead():
    cost = make_cost_model("llama-3.1-8b", "h100-sxm")
    spec = make_speculative(cost, {"method": "draft_model", "model": "llama-3.2-1b", "num_speculative_tokens": 3,
                                   "acceptance_rate": 0.5})
    d = spec.drafter
    draft = make_cost_model("llama-3.2-1b", "h100-sxm")
    overhead = cost.hardware.efficiency.step_overhead_s
    assert overhead > 0
    # catch-up: the target's statistics priced on the draft model, one LM-head row per proposer
    assert d.catch_up_s(8, 2, 316.0, 0.0, 83.0, 316.0, 83.0, 0.0) == pytest.approx(
        draft.step_time(8, 2, 316.0, 0.0, 83.0) - overhead)
    # proposals: passes 2..k, one token each per sequence at growing context
    want = sum(draft.step_time(2, 2, 79 + 2 * (j - 2) + 1.0, 0.0, 79 + 2 * (j - 2) + 2.0) - overhead for j in (2, 3))
    assert d.propose_s(2, 79) == pytest.approx(want)
    assert d.propose_s(0, 0) == 0.0
    ngram = make_speculative(cost, {"method": "ngram", "num_speculative_tokens": 3, "acceptance_rate": 0.5})
    assert ngram.drafter.catch_up_s(8, 2, 316.0, 0.0, 83.0, 316.0, 83.0, 0.0) == 0.0
    assert ngram.memory(0.9, 8192, 256).kv_capacity_tokens == cost.memory(0.9, 8192, 256).kv_capacity_tokens


# --------------------------------------------------------------------------- one step by hand


def _replica(spec, input_len, output_len, blocks=100):
    cost = spec.target
    n = len(input_len)
    wl = Workload(np.zeros(n), np.array(input_len, dtype=np.int64), np.array(output_len, dtype=np.int64))
    cfg = EngineConfig(block_size=16, kv_capacity_tokens=16 * blocks, max_num_batched_tokens=2048, debug=True)
    rec, log = Records(n), StepLog()
    rep = SpecReplica(0, cost, cfg, blocks, 4096, wl, rec, log, None, spec)
    for r in range(n):
        rep.enqueue(r, 0.0)
    return rep, rec, log


def test_one_verify_step_worked_by_hand(monkeypatch):
    """Two sequences (prompts 30 and 45 tokens, k = 3 EAGLE drafts, blocks of 16) after their
    prefill step verify q = 4 tokens each; sequence 0 accepts 2 drafts, sequence 1 none."""
    cost = make_cost_model("llama-3.1-8b", "h100-sxm")
    spec = make_speculative(cost, {"method": "eagle", "num_speculative_tokens": 3, "acceptance_rate": 0.5})
    rep, rec, log = _replica(spec, [30, 45], [10, 3])
    rep.advance_until(1.0, max_actions=1)  # the prefill step: both prompts, one token each
    assert rep.computed[:2] == [30, 45] and rep.generated[:2] == [1, 1]
    assert rep.kv.free_blocks == 100 - 2 - 3  # ceil(30/16) + ceil(45/16); fresh admissions reserve no lookahead
    t1 = rep.clock
    rep.draws.update({0: [2, 2, 2], 1: [0, 0, 0]})  # the given acceptances
    rep.draw_pos.update({0: 0, 1: 0})
    free_seen = []
    orig = SpecReplica._emit

    def spy(self, *a):
        free_seen.append(self.kv.free_blocks)  # during the step: blocks for computed + q + lookahead
        return orig(self, *a)

    monkeypatch.setattr(SpecReplica, "_emit", spy)
    rep.advance_until(10.0, max_actions=1)
    # blocks during the step cover 30+4+3 = 37 (3 blocks) and 45+4+3 = 52 (4): one more each
    assert free_seen == [95 - 1 - 1]
    # emitted: sequence 0 the 2 accepted drafts + the bonus token, sequence 1 the bonus token
    assert rep.generated[:2] == [1 + 3, 1 + 1]
    # KV: the last token and the accepted drafts: 30 + 1 + 2 = 33 and 45 + 1 = 46; the rejected
    # drafts' and the lookahead's blocks are released: 33 -> 3 blocks, 46 -> 3 blocks
    assert rep.computed[:2] == [33, 46]
    assert rep.kv.free_blocks == 100 - 3 - 3
    # step time: the target's verify of T = 8 tokens (S = 8 LM-head rows, Ad = 4 (30 + 2) + 4 (45 + 2)
    # = 316 query-key pairs, R = 34 + 49 = 83 KV reads), the head's catch-up over those 8 tokens
    # (2 LM-head rows), then k - 1 = 2 proposal passes of the 2 sequences at contexts 33 and 46
    d = spec.drafter
    verify = cost.step_time(8, 8, 316.0, 0.0, 83.0)
    want = verify + d.catch_up_s(8, 2, 316.0, 0.0, 83.0, 316.0, 83.0, 0.0) + d.propose_s(2, 33 + 46)
    assert rep.clock - t1 == pytest.approx(want, rel=1e-12)
    assert d.propose_s(2, 79) == pytest.approx(sum(
        d.cost.step_time(2, 2, 79 + 2 * (j - 2) + 1.0, 0.0, 79 + 2 * (j - 2) + 2.0) + sum(
            g.time(2) for g in d.extras if not g.first_pass_only) for j in (2, 3)))
    # one chunk per sequence: two gaps of the step's length, two tokens merged into a chunk
    v, c = log.itl()
    assert list(c) == [2] and v[0] == pytest.approx(want) and log.merged_tokens == 2
    # vLLM's counters: 2 drafts of 3 tokens, 2 accepted, at positions 1 and 2
    assert (rep.n_drafts, rep.n_draft_tokens, rep.n_accepted, rep.accepted_per_pos) == (2, 6, 2, [1, 1, 0])
    # next step: sequence 1 has one output left; a verify still costs q = 4 but emits one token
    rep.advance_until(10.0, max_actions=1)
    assert rep.generated[0] == 7 and rec.status[1] == 1 and rec.finish_s[1] == rep.clock


def test_acceptance_draws_are_per_request_and_seeded():
    spec_cfg = {"method": "ngram", "num_speculative_tokens": 4, "acceptance_rate": [0.9, 0.7, 0.5, 0.3]}
    base = Scenario(model="llama-3.1-8b", hardware="h100-sxm", workload="random", input_len=200, output_len=400,
                    num_requests=300, rate=5.0, seed=3, speculative_config=spec_cfg)
    res1, s1 = base.run()
    res2, s2 = base.run()
    assert np.array_equal(res1.finish_s, res2.finish_s) and s1 == s2
    # a request's draws do not depend on its batch-mates: two replicas, the same acceptances
    _, s3 = base.replace(replicas=2).run()
    assert s3["spec_decode_accepted_tokens"] == s1["spec_decode_accepted_tokens"]
    assert s3["spec_decode_num_drafts"] == s1["spec_decode_num_drafts"]
    _, s4 = base.replace(speculative_config={**spec_cfg, "seed": 7}).run()
    assert s4["spec_decode_accepted_tokens"] != s1["spec_decode_accepted_tokens"]
    # the draws follow the configured rates: P(position i accepted) = 0.9, 0.63, 0.315, 0.0945
    want = [0.9, 0.63, 0.315, 0.0945]
    assert s1["spec_decode_per_position_acceptance_rates"] == pytest.approx(want, abs=0.01)
    assert s1["spec_decode_acceptance_length"] == pytest.approx(1 + sum(want), abs=0.02)
    assert s1["spec_decode_acceptance_rate"] == pytest.approx(100 * sum(want) / 4, abs=0.5)


def test_itl_is_per_chunk_and_tpot_per_token():
    """n-gram (no draft cost), every draft accepted, k = 3: after the first token each step
    emits 4 tokens in one chunk; 9 output tokens = 1 + 2 chunks of 4."""
    sc = Scenario(model="llama-3.1-8b", hardware="h100-sxm", workload="random", input_len=100, output_len=9,
                  num_requests=1, debug=True,
                  speculative_config={"method": "ngram", "num_speculative_tokens": 3, "acceptance_rate": 1.0})
    res, s = sc.run()
    assert int(res.itl_counts.sum()) == 2
    e2e = res.finish_s[0] - res.first_token_s[0]
    assert s["mean_tpot_ms"] == pytest.approx(e2e / 8 * 1e3)
    assert s["mean_itl_ms"] == pytest.approx(e2e / 2 * 1e3)
    assert s["spec_decode_acceptance_length"] == 4.0


# --------------------------------------------------------------------------- invariants under load


@pytest.mark.parametrize("kw", [
    dict(enable_prefix_caching=True),
    dict(enable_prefix_caching=False, kv_capacity_tokens=12_000),
    dict(enable_prefix_caching=True, kv_capacity_tokens=12_000, replicas=2, router="least-kv"),
    dict(concurrency=8),
    dict(max_duration_s=5.0),
])
def test_conservation_and_gap_ledger_hold_under_pressure(kw):
    sc = Scenario(model="llama-3.1-8b", hardware="h100-sxm", workload="random", input_len=600, output_len=200,
                  range_ratio=0.5, num_requests=150, rate=20.0, debug=True, max_num_batched_tokens=1024,
                  speculative_config={"method": "eagle", "num_speculative_tokens": 4,
                                      "acceptance_rate": [0.9, 0.8, 0.6, 0.5]}, **kw)
    res, s = sc.run()  # debug: blocks, seats, tokens and gaps are checked every step and at the end
    assert s["completed"] + s["failed"] == 150
    if kw.get("kv_capacity_tokens") and "replicas" not in kw:
        assert int(res.preemptions.sum()) > 0  # the KV pressure case does preempt


def test_zero_acceptance_never_beats_plain():
    base = Scenario(model="llama-3.1-8b", hardware="h100-sxm", workload="random", input_len=300, output_len=100,
                    num_requests=60, rate=4.0, seed=1)
    _, plain = base.run()
    _, spec = base.replace(speculative_config={"method": "eagle3", "num_speculative_tokens": 3,
                                               "acceptance_rate": 0.0}).run()
    assert spec["mean_tpot_ms"] > plain["mean_tpot_ms"] and spec["spec_decode_acceptance_length"] == 1.0


# --------------------------------------------------------------------------- the crossover


def test_crossover_on_b200_gemma3_27b_eagle3_k7():
    """Single-GPU B200, gemma-3-27b, 7 EAGLE-3 drafts, mean acceptance length 3.4, ShareGPT
    lengths, closed loop: per-user speed well above plain at concurrency 1, falling with
    concurrency; total throughput below plain once the verify batch (8 tokens a sequence) is
    compute-bound (docs/plan.md, `whatif speculative`)."""
    base = Scenario(model="gemma-3-27b", hardware="b200", workload="sharegpt",
                    speculative_config={"method": "eagle3", "num_speculative_tokens": 7, "mean_acceptance_length": 3.4})
    r = speculative_whatif(base, concurrencies=[1, 16, 64, 256])
    rows = {x["concurrency"]: x for x in r["rows"]}
    assert rows[1]["per_user_speedup"] > 2.0
    users = [rows[c]["per_user_speedup"] for c in (1, 16, 64, 256)]
    assert all(a > b for a, b in zip(users, users[1:], strict=False))
    assert rows[256]["throughput_speedup"] < 1.0 and rows[256]["verify_bound"] == "compute"
    assert rows[1]["verify_bound"] == "memory" and rows[1]["throughput_speedup"] > 2.0
    assert r["crossover_concurrency"] is not None and 16 < r["crossover_concurrency"] <= 256
    assert all(x["measured_acceptance_length"] == pytest.approx(3.4, abs=0.15) for x in r["rows"])


def test_cli_whatif_speculative(tmp_path):
    out = tmp_path / "spec"
    args = ["whatif", "speculative", "-m", "llama-3.1-8b", "-w", "random", "--input-len", "256", "--output-len", "64",
            "--concurrencies", "1,8", "--min-requests", "8", "--serial", "-q",
            "--speculative-config", json.dumps(EAGLE3)]
    res = CliRunner().invoke(main, [*args, "--json", "--out", str(out)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    r = json.loads(res.output)
    assert [x["concurrency"] for x in r["rows"]] == [1, 8]
    for name in ("speculative.json", "speculative.csv", "speculative.png"):
        assert (out / name).stat().st_size > 0
    assert (out / "speculative.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = CliRunner().invoke(main, args, catch_exceptions=False).output
    assert "x total" in text and ("crossover" in text or "at every concurrency" in text)
    res = CliRunner().invoke(main, ["whatif", "speculative", "-m", "llama-3.1-8b", "-q"])
    assert res.exit_code != 0 and "--speculative-config" in res.output


def test_an_eagle_head_takes_the_unquantised_format_of_the_targets_checkpoint() -> None:
    # gpt-oss-120b's checkpoint is MXFP4 experts + bf16 rest (its default weight format): its
    # EAGLE3 head is a dense bf16 layer, as published heads are, not fp4; a draft_weight_dtype
    # still wins; a target whose every weight takes the run's format gives the head that format
    oss = make_cost_model("gpt-oss-120b", "h100-sxm")
    assert oss.dtypes.weight == "fp4"
    assert make_speculative(oss, EAGLE3).drafter.cost.dtypes.weight == "bf16"
    assert make_speculative(oss, {**EAGLE3, "quantization": "fp8"}).drafter.cost.dtypes.weight == "fp8"
    llama = make_cost_model("llama-3.1-8b", "h100-sxm", weight_dtype="fp8", activation_dtype="fp8")
    assert make_speculative(llama, EAGLE3).drafter.cost.dtypes.weight == "fp8"
