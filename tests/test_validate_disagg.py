"""A measurement row of a disaggregated deployment (its notes give each pool's layout, as
InferenceX records prefill_tp / prefill_ep / prefill_dp_attention / prefill_num_workers and the
decode ones) is priced as that deployment (`Scenario` with `disagg` and per-pool
`deployment:`), not as one aggregated server."""

from __future__ import annotations

import math

import pytest

from simulator.analysis import validate as V
from simulator.analysis.measurements import disagg_layout


@pytest.mark.parametrize("notes,want", [
    ("single server, TP4 EP1 dp-attention false; one replica (num_gpus = tp)", None),
    ("disaggregated (Dynamo): prefill 2 workers TP4 EP4 dp-attention true, decode 1 worker TP8 EP8 "
     "dp-attention true; multinode", ((2, 4, 4, True), (1, 8, 8, True), [])),
    ("disagg true; prefill_tp 4, prefill_ep 4, prefill_dp_attention false, prefill_num_workers 3; "
     "decode_tp 8 decode_ep 8 decode_dp_attention true decode_num_workers 1", ((3, 4, 4, False), (1, 8, 8, True), [])),
    ("disaggregated prefill/decode: prefill 1 x TP8 EP8 dp-attention false; decode 2 x TP16 EP16 dp-attention true",
     ((1, 8, 8, False), (2, 16, 16, True), [])),
    ("disaggregated: prefill TP2, decode TP4", ((1, 2, 1, False), (1, 4, 1, False),
                                                ["prefill workers 1", "decode workers 1"])),
    ("disagg false; prefill_tp 4 decode_tp 4", None),
])
def test_pool_layouts_read_from_the_notes(notes: str, want: tuple | None) -> None:
    got = disagg_layout({"notes": notes})
    if want is None:
        assert got is None
        return
    for name, (workers, tp, ep, dpa) in zip(("prefill", "decode"), want[:2], strict=True):
        assert got[name] == {"workers": workers, "tp": tp, "ep": ep, "dp_attention": dpa}
    assert got["assumed"] == want[2]


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
