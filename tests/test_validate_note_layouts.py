"""What a measurement row's notes say about how the run was served, and no column holds:

* a disaggregated deployment (InferenceX records prefill_tp / prefill_ep / prefill_dp_attention /
  prefill_num_workers and the decode ones) is priced as that deployment (`Scenario` with
  `disagg` and per-pool `deployment:`), not as one aggregated server;
* speculative decoding (spec_method / MTP / num_speculative_tokens, with its acceptance) is
  priced with it, and a row that states it without its acceptance is skipped with the reason.
"""

from __future__ import annotations

import math

import pytest

from simulator.analysis import validate as V
from simulator.analysis.measurements import disagg_layout, speculative_stated


@pytest.mark.parametrize("notes,gpus,want", [
    ("single server, TP4 EP1 dp-attention false; one replica (num_gpus = tp)", 4, None),
    ("disaggregated (Dynamo): prefill 2 workers TP4 EP4 dp-attention true, decode 1 worker TP8 EP8 "
     "dp-attention true; multinode", 16, ((2, 4, 4, True), (1, 8, 8, True), [])),
    ("disagg true; prefill_tp 4, prefill_ep 4, prefill_dp_attention false, prefill_num_workers 3; "
     "decode_tp 8 decode_ep 8 decode_dp_attention true decode_num_workers 1", 20,
     ((3, 4, 4, False), (1, 8, 8, True), [])),
    ("disaggregated prefill/decode: prefill 1 x TP8 EP8 dp-attention false; decode 2 x TP16 EP16 dp-attention true",
     40, ((1, 8, 8, False), (2, 16, 16, True), [])),
    ("disaggregated: 2 prefill workers TP4 EP4, 4 decode workers TP8 EP8", 40, ((2, 4, 4, False), (4, 8, 8, False), [])),
    ("disaggregated 2P1D: prefill TP4, decode TP8", 16, ((2, 4, 1, False), (1, 8, 1, False), [])),
    ("disaggregated: prefill TP4 x2, decode TP8 x1", 16, ((2, 4, 1, False), (1, 8, 1, False), [])),
    ("disaggregated: no prefix caching; prefill 1 worker TP4, decode 1 worker TP8", 12,
     ((1, 4, 1, False), (1, 8, 1, False), [])),
    # counts from num_gpus where that is one answer: both unstated and one of each adds up; one unstated
    ("disaggregated: prefill TP2, decode TP4", 6, ((1, 2, 1, False), (1, 4, 1, False),
                                                   ["1 worker a pool (num_gpus = one of each)"])),
    ("disaggregated: prefill 1 worker TP2, decode TP4", 10, ((1, 2, 1, False), (2, 4, 1, False),
                                                             ["decode workers 2 (from num_gpus)"])),
    # said not to be disaggregated
    ("disagg false; prefill_tp 4 decode_tp 4", 4, None),
    ("aggregated (no disagg); TP8", 8, None),
    ("non-disaggregated single server, TP8", 8, None),
    ("disagg=0; single server; prefill TP4 decode TP4", 4, None),
])
def test_pool_layouts_read_from_the_notes(notes: str, gpus: int, want: tuple | None) -> None:
    got = disagg_layout({"notes": notes, "num_gpus": gpus, "pp": 1})
    if want is None:
        assert got is None
        return
    for name, (workers, tp, ep, dpa) in zip(("prefill", "decode"), want[:2], strict=True):
        assert got[name] == {"workers": workers, "tp": tp, "ep": ep, "dp_attention": dpa}
    assert got["assumed"] == want[2]


@pytest.mark.parametrize("notes,gpus,match", [
    ("disaggregated: prefill 1 worker TP1, decode 1 worker TP1", 8, "num_gpus: 8 but the notes' pools hold 2 GPUs"),
    ("disaggregated: prefill TP2, decode TP4", 8, "worker counts neither the notes nor num_gpus"),
])
def test_pools_must_add_up_to_the_rows_gpus(notes: str, gpus: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        disagg_layout({"notes": notes, "num_gpus": gpus, "pp": 1})


def test_a_pool_without_its_tp_is_an_error() -> None:
    with pytest.raises(ValueError, match="without the decode pool's TP"):
        disagg_layout({"notes": "disaggregated run, prefill TP4"})


_ROW = dict(source="hand-made", model="llama-3.1-8b", hardware="h100-sxm", tp=1, pp=1,
            engine="vLLM 0.11.2", weight_dtype="bf16", activation_dtype="bf16", kv_dtype="bf16",
            scenario="closed_loop", batch_size=None, request_rate=None, concurrency=8, num_requests=48,
            input_len=2048, output_len=64, dataset="", max_batch_size=8, max_num_tokens=8192, value=1.0,
            quality="high", layout_stated=True)


def _row(metric: str, notes: str, gpus: int) -> dict:
    unit = "tokens/s" if "tokens" in metric else "ms"
    return {**_ROW, "id": f"{gpus}-{metric}", "metric": metric, "unit": unit, "notes": notes,
            "num_gpus": gpus, "replicas": gpus}


def test_a_disaggregated_row_runs_both_pools() -> None:
    """Llama-3.1-8B, 8 clients of 2,048-token prompts and 64 outputs on H100: one prefill and one
    decode replica (2 GPUs). Its prefill GPU does the same prompt work as one aggregated server
    of the same 8 clients but never shares a step with decodes, so both its TTFT and its TPOT
    (no prefill stalls the decodes) are below that server's; the per-GPU throughput is the run's
    over its 2 GPUs; the note says what it was priced as."""
    dis = "disaggregated: prefill 1 worker TP1 EP1 dp-attention false, decode 1 worker TP1 EP1 dp-attention false"
    agg = "single server, TP1"
    metrics = ("median_ttft_ms", "median_tpot_ms", "output_tokens_per_s", "output_tokens_per_s_per_gpu")
    rows = [_row(m, dis, 2) for m in metrics] + [{**_row(m, agg, 1), "id": f"agg-{m}"} for m in metrics]
    res = V.validate(rows, validator=V.Validator())
    assert not res["skipped"]
    got = {p["id"]: p for p in res["points"]}
    assert all(math.isfinite(p["predicted"]) and p["predicted"] > 0 for p in got.values())
    assert "disaggregated: prefill 1 x TP1 EP1 dp-attention false, decode 1 x TP1" in got["2-median_ttft_ms"]["note"]
    assert "disaggregated" not in got["agg-median_ttft_ms"]["note"]
    assert got["2-median_ttft_ms"]["predicted"] < got["agg-median_ttft_ms"]["predicted"]
    assert got["2-median_tpot_ms"]["predicted"] < got["agg-median_tpot_ms"]["predicted"]
    assert got["2-output_tokens_per_s_per_gpu"]["predicted"] == pytest.approx(
        got["2-output_tokens_per_s"]["predicted"] / 2, rel=1e-12)


def test_a_disaggregated_row_without_a_pool_is_skipped_with_the_reason() -> None:
    res = V.validate([_row("median_ttft_ms", "disaggregated run, prefill TP1", 2)], validator=V.Validator())
    (s,) = res["skipped"]
    assert "without the decode pool's TP" in s["reason"]


# ------------------------------------------------------------------ speculative decoding in the notes

@pytest.mark.parametrize("notes,want", [
    ("single server, TP4 EP1 dp-attention false", None),
    ("spec_method mtp; MTP 3; mean acceptance length 2.6",
     {"method": "mtp", "num_speculative_tokens": 3, "mean_acceptance_length": 2.6}),
    ("speculative decoding: EAGLE3, num_speculative_tokens 3, acceptance rate 0.7",
     {"method": "eagle3", "num_speculative_tokens": 3, "acceptance_rate": 0.7}),
    ("decoding_type: MTP, num_nextn_predict_layers: 1", {"method": "mtp", "num_speculative_tokens": 1}),
    ("spec_method none", None),
    ("no MTP, TP8", None),
    ("MTP mode: off", None),
    ("DeepSeek checkpoint, MTP head unused", None),
    ("EAGLE3 head not loaded", None),
    ("quantization method: fp8; speculative method: ngram, num_speculative_tokens 4, acceptance length 1.8",
     {"method": "ngram", "num_speculative_tokens": 4, "mean_acceptance_length": 1.8}),
    ("decoding_type MTP, max_draft_len 3, acceptance rate 85%",
     {"method": "mtp", "num_speculative_tokens": 3, "acceptance_rate": 0.85}),
])
def test_speculative_decoding_read_from_the_notes(notes: str, want: dict | None) -> None:
    assert speculative_stated({"notes": notes}) == want


def test_a_speculative_row_is_priced_with_its_stated_acceptance_or_skipped() -> None:
    """Llama-3.1-8B on H100, 4 clients of 512/256 under vLLM: with an EAGLE-3 head, 3 drafts and
    a stated mean acceptance length of 2.5 the median TPOT falls (2.5 tokens a verify step for
    a step a little longer than one token's), and the note says what was priced; without the
    acceptance, or under an engine whose scheduler llmsim does not speculate under, the row is
    skipped with the reason, never priced as if the drafts were not there."""
    def row(i: int, notes: str, engine: str = "vLLM 0.11.2") -> dict:
        return {**_ROW, "id": f"s{i}", "metric": "median_tpot_ms", "unit": "ms", "notes": notes, "num_gpus": 1,
                "replicas": 1, "input_len": 512, "output_len": 256, "concurrency": 4, "num_requests": 40,
                "engine": engine}
    spec = "spec_method eagle3, num_speculative_tokens 3, mean acceptance length 2.5"
    res = V.validate([row(0, "single server"), row(1, spec), row(2, "spec_method eagle3, num_speculative_tokens 3"),
                      row(3, spec, "SGLang 0.5.5")], validator=V.Validator())
    got = {p["id"]: p for p in res["points"]}
    assert 1.5 < got["s0"]["predicted"] / got["s1"]["predicted"] < 2.5
    assert "speculative decoding: eagle3, k=3" in got["s1"]["note"]
    skipped = {s["id"]: s["reason"] for s in res["skipped"]}
    assert "give exactly one acceptance" in skipped["s2"]
    assert "modelled under vLLM V1's scheduler" in skipped["s3"]


def test_a_speculative_static_row_is_skipped() -> None:
    row = {**_ROW, "id": "st", "scenario": "static_batch", "batch_size": 1, "concurrency": None, "metric": "tpot_ms",
           "unit": "ms", "notes": "spec_method mtp, MTP 1, acceptance rate 0.8", "num_gpus": 1, "replicas": 1}
    (s,) = V.validate([row], validator=V.Validator())["skipped"]
    assert s["reason"].startswith("notes state speculative decoding (mtp): not modelled for a static batch")


def test_one_client_disaggregated_matches_one_server() -> None:
    """With one client nothing overlaps: the prefill pool's TTFT is the aggregated server's
    prefill, and the decode pool's TPOT the server's decode plus the KV transfer over 63 gaps.
    Each pool prices the engine profile once, as the server does (vLLM 0.6.3 ROCm on MI300X,
    whose profile scales the chip's efficiencies: applied twice, its steps were ~5x slower)."""
    dis = "disaggregated: prefill 1 worker TP1, decode 1 worker TP1"
    rows = []
    for eng, hw in (("vLLM 0.6.3 (ROCm, Dockerfile.rocm)", "mi300x"), ("vLLM 0.11.2", "h100-sxm")):
        for m in ("median_ttft_ms", "median_tpot_ms"):
            base = {**_ROW, "engine": eng, "hardware": hw, "concurrency": 1, "num_requests": 6, "max_batch_size": 1,
                    "metric": m, "unit": "ms"}
            rows += [{**base, "id": f"dis-{hw}-{m}", "notes": dis, "num_gpus": 2, "replicas": 2},
                     {**base, "id": f"agg-{hw}-{m}", "notes": "single server", "num_gpus": 1, "replicas": 1}]
    res = V.validate(rows, validator=V.Validator())
    got = {p["id"]: p["predicted"] for p in res["points"]}
    for hw in ("mi300x", "h100-sxm"):
        assert got[f"dis-{hw}-median_ttft_ms"] == pytest.approx(got[f"agg-{hw}-median_ttft_ms"], rel=0.005)
        assert got[f"dis-{hw}-median_tpot_ms"] == pytest.approx(got[f"agg-{hw}-median_tpot_ms"], rel=0.01)


def test_pools_with_their_own_expert_parallelism() -> None:
    """Qwen3-30B-A3B (MoE) with a TP8 EP8 prefill pool and a TP2 EP2 decode pool: each pool its
    own EP (the decode replica's limits read its own, not the prefill pool's EP8)."""
    notes = ("disaggregated: prefill 1 worker TP8 EP8 dp-attention false, decode 1 worker TP2 EP2 "
             "dp-attention false")
    row = {**_ROW, "id": "moe", "model": "qwen3-30b-a3b", "metric": "median_tpot_ms", "unit": "ms", "notes": notes,
           "num_gpus": 10, "replicas": 1}
    res = V.validate([row], validator=V.Validator())
    assert not res["skipped"] and "prefill 1 x TP8 EP8" in res["points"][0]["note"]


def test_note_layouts_on_paths_that_do_not_model_them_are_skipped() -> None:
    """An MLPerf row (LoadGen's Offline query) whose notes say disaggregated is skipped with the
    reason, not priced as the aggregated run it was not."""
    row = {**_ROW, "id": "mlp", "scenario": "offline_max_throughput", "concurrency": None, "num_requests": None,
           "input_len": None, "output_len": None, "dataset": "mlperf-cnndm-llama3.1-8b", "metric": "output_tokens_per_s",
           "unit": "tokens/s", "notes": "disaggregated: prefill 1 worker TP1, decode 1 worker TP1", "num_gpus": 2,
           "replicas": 2}
    (s,) = V.validate([row], validator=V.Validator())["skipped"]
    assert s["reason"].startswith("notes state a disaggregated deployment: not modelled for an MLPerf run")
