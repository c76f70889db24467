"""Static-batch prediction: B prompts of I tokens prefilled in one step, then O - 1 decode steps.

    TTFT = time(prefill step of B I tokens)
    TPOT = sum_{k=1}^{O-1} time(decode step k) / (O - 1),  decode step k: p = I + k - 1 cached tokens
    E2E  = TTFT + (O - 1) TPOT

priced by a `roofline.CostModel` (the same one the engine uses), with the memory plan
(`memory.memory_plan`) for whether the batch's KV cache fits, and helpers that read a
`CostModel.breakdown` (slowest ops, roofline-plot coordinates). `llmsim predict` prints this.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simulator.cost.roofline import CostModel
from simulator.cost.stepbatch import decode_step, prefill_step, prefill_steps
from simulator.specs.checks import MAX_BATCH, MAX_TOKENS, SpecError, check_int

#: decode steps priced per numpy call: memory stays ~20 MB whatever the output length
DECODE_CHUNK = 65536


def decode_step_arrays(batch: int, input_len: int, output_len: int, first: int = 1,
                       stop: int | None = None) -> dict[str, np.ndarray]:
    """Batch statistics of the O-1 decode steps of a static batch (context grows by 1 a step),
    or of steps first..stop-1 of them.

    Decode step k = 1..O-1 feeds token k: each sequence has p = I + k - 1 cached tokens.
    """
    end = max(output_len, 1) if stop is None else min(stop, max(output_len, 1))
    k = np.arange(first, end, dtype=float)
    p = input_len + k - 1
    B = float(batch)
    return {"T": np.full_like(k, B), "S": np.full_like(k, B), "Ad": B * (p + 0.5),
            "Ap": np.zeros_like(k), "R": B * (p + 1), "p": p}


def predict_static(cost: CostModel, batch_size: int, input_len: int, output_len: int,
                   gpu_memory_utilization: float = 0.9, prefill_chunk_tokens: int | None = None) -> dict[str, Any]:
    """A static batch: B prompts of I tokens prefilled in one step (or, under a per-step token
    budget `prefill_chunk_tokens`, in the steps `stepbatch.prefill_steps` lays out), then O-1
    decode steps.

    Returns vLLM/SCHEMA metric names: ttft_ms, tpot_ms, e2e_ms, throughputs, per-phase
    breakdowns and the memory plan.
    """
    if not hasattr(cost, "step_times") or not hasattr(cost, "breakdown"):
        raise SpecError(f"cost: {type(cost).__name__} is not a CostModel (make one with make_cost_model)")
    check_int("batch_size", batch_size, maximum=MAX_BATCH)
    for name, v in (("input_len", input_len), ("output_len", output_len)):
        check_int(name, v, maximum=MAX_TOKENS, note="tokens")
    check_int("prefill_chunk_tokens", prefill_chunk_tokens, maximum=MAX_TOKENS, optional=True, note="tokens")
    m = cost.model
    B, I, O = batch_size, input_len, output_len  # noqa: E741 (the paper's symbols)
    window = m.sliding_window.window if m.sliding_window else None
    steps = prefill_steps(m, B, I, prefill_chunk_tokens)
    prefill = cost.breakdown(steps[-1][0] if len(steps) > 1 else prefill_step(m, B, I))
    ttft_s = sum(cost.time(b) * k for b, k in steps) if len(steps) > 1 else prefill["time_ms"] / 1e3
    if O > 1:
        decode_s = _decode_time_s(cost, B, I, O, window)
        tpot_s = decode_s / (O - 1)
        p_mid = float(I + (O - 1) // 2)  # the middle decode step's cached tokens
        mid_batch = decode_step(m, B, p_mid)
        decode = cost.breakdown(mid_batch)
    else:
        decode_s, tpot_s, decode = 0.0, float("nan"), None
    e2e_s = ttft_s + decode_s
    mem = cost.memory(gpu_memory_utilization, max_num_batched_tokens=max(B * I, 1),
                      max_num_seqs=B, seq_len=I + O)
    kv_needed = B * (I + O)
    gpus = cost.par.num_gpus
    out = {
        "model": m.id,
        "hardware": cost.hardware.id,
        "tp": cost.par.tp,
        "pp": cost.par.pp,
        "batch_size": B,
        "input_len": I,
        "output_len": O,
        "weight_dtype": cost.dtypes.weight,
        "activation_dtype": cost.dtypes.activation,
        "kv_dtype": cost.dtypes.kv,
        "gemm_dtype": cost.gemm_dtype,
        "ttft_ms": ttft_s * 1e3,
        "tpot_ms": tpot_s * 1e3,
        "e2e_ms": e2e_s * 1e3,
        "decode_tokens_per_s": 1.0 / tpot_s if O > 1 else float("nan"),
        "prefill_tokens_per_s": B * I / ttft_s,
        "output_tokens_per_s": B * O / e2e_s,
        "output_tokens_per_s_per_gpu": B * O / e2e_s / gpus,
        "prefill": prefill,
        "decode": decode,
        "memory": {**mem.as_dict(), "kv_tokens_needed": kv_needed,
                   "kv_fits": kv_needed <= mem.kv_capacity_tokens},
        "notes": list(cost.notes) + ([mem.message] if mem.message else []) + (
            [f"input_len + output_len = {I + O} exceeds {m.id}'s context of {m.max_context} tokens"]
            if I + O > m.max_context else []) + (
            [f"batch needs {kv_needed} KV tokens, capacity is {mem.kv_capacity_tokens}"]
            if mem.fits and kv_needed > mem.kv_capacity_tokens else []),
        "ideal": cost.hardware.efficiency == type(cost.hardware.efficiency)(),
    }
    return out


def _decode_time_s(cost: CostModel, B: int, I: int, O: int, window: int | None) -> float:  # noqa: E741
    """Sum of the O-1 decode step times, priced DECODE_CHUNK steps at a time (bounded memory)."""
    total = 0.0
    for first in range(1, O, DECODE_CHUNK):
        dec = decode_step_arrays(B, I, O, first, first + DECODE_CHUNK)
        if window:
            Aw = B * np.minimum(dec["p"] + 0.5, window)
            Rw = B * np.minimum(dec["p"] + 1, window)
        else:
            Aw, Rw = None, None
        total += float(cost.step_times(dec["T"], dec["S"], dec["Ad"], dec["Ap"], dec["R"], Aw, Rw).sum())
    return total


def top_ops(breakdown: dict[str, Any], n: int = 5) -> list[dict[str, Any]]:
    """The `n` slowest ops of a `CostModel.breakdown` result, slowest first."""
    return sorted(breakdown["ops"], key=lambda o: o["time_ms"], reverse=True)[:n]


def op_points(breakdown: dict[str, Any]) -> list[dict[str, Any]]:
    """Roofline coordinates of the ops that do arithmetic: intensity (FLOP/byte) and attained
    FLOP/s (FLOPs over the op's time). Communication and gathers (no FLOPs) are left out."""
    pts = []
    for o in breakdown["ops"]:
        if o["flops"] > 0 and o["bytes"] > 0 and o["time_ms"] > 0:
            pts.append({"name": o["name"], "intensity": o["flops"] / o["bytes"],
                        "flops_per_s": o["flops"] / (o["time_ms"] / 1e3), "bound": o["bound"]})
    return pts


__all__ = ["decode_step_arrays", "op_points", "predict_static", "top_ops"]
