"""What-if analyses: one setting changed, the rest of the scenario held fixed.

Every what-if is a thin layer over `Scenario` (static numbers from the roofline model) and
`simulator.analysis.sweep.sweep` (saturation rate and SLO capacity under load), so the numbers mean
exactly what they mean in `llmsim predict`, `simulate` and `sweep`:

* `kv_dtype_whatif(base, ["bf16", "fp8", "int4"])`: KV-cache quantization. Per format: KV
  capacity (tokens), concurrent sequences of the workload's mean length, batch-1 TPOT,
  TPOT and decode throughput at the capacity-limited batch, saturation rate and SLO
  capacity, each also as a ratio to the first format, and the throughput gain split into the
  batch the larger capacity admits and the step time at the same batch. Under load the gain
  is capacity (more sequences decode together), not fewer bytes per step: an engine without a
  native fp8-attention kernel on the chip converts every KV element it reads
  (`Efficiency.kv_dequant_rate_by_kv_dtype`, fitted per engine and chip family), so the same
  batch steps slower, as measured (fp8/fp16 latency 1.0-1.3 on H100 and 1.2-4.9 on A100 under
  vLLM V0).
* `speculative_whatif(base, draft_model, gamma, acceptance)`: speculative decoding priced by
  the step-cost function (`SpeculativeCostModel`): a decode round of B sequences costs
  gamma draft steps (the draft's CostModel, B tokens each) plus one target verify step over
  gamma+1 tokens per sequence, and emits (1 - a^(g+1)) / (1 - a) tokens per sequence on
  average. Static TPOT vs batch size (where it stops paying), then plain vs speculative
  under load.
* `hardware_whatif(base, ["h100-sxm", "h200-sxm", "b200"])`: the same workload on each
  accelerator: fit, latency at the base rate, saturation, SLO capacity, $/hour, $/M tokens.

Pure: no printing, no files.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from simulator.analysis.executors import Executor
from simulator.analysis.plan import normalise_prices
from simulator.analysis.sweep import run_point, sweep
from simulator.cost.memory import MemoryPlan, kv_bytes_per_gpu_token, weights_bytes_per_gpu
from simulator.cost.predict import predict_static
from simulator.cost.roofline import CostModel
from simulator.metrics.summary import summarize
from simulator.scenario import Scenario
from simulator.serving.simulate import simulate
from simulator.specs.catalog import load_hardware
from simulator.specs.checks import SpecError, check_int, is_number
from simulator.specs.dtypes import DTYPE_BYTES


def _ratio(v: Any, ref: Any) -> float | None:
    return v / ref if is_number(v) and is_number(ref) and ref > 0 else None


def _mean_lengths(sc: Scenario, seq_len: int | None = None) -> tuple[int, int, int]:
    """(mean prompt, mean output, sequence length) of the scenario's workload, rounded."""
    from simulator.specs.checks import MAX_TOKENS, check_int

    check_int("seq_len", seq_len, 1, maximum=MAX_TOKENS, optional=True)
    w = sc.make_workload()
    i = max(1, round(float(w.input_len.mean())))
    o = max(1, round(float(w.output_len.mean())))
    return i, o, int(seq_len) if seq_len else i + o


def _sweep_infos(base: Scenario, field: str, values: list[Any], executor: Executor | None,
                 progress: Callable[[int, int], None] | None, slo_target: float, tol: float) -> dict[Any, dict]:
    """One sweep over `field` (one curve per value, bisections in lockstep): value -> curve info."""
    if not values:
        return {}
    res = sweep(base.replace(rate=None), "auto", [(field, values)], executor, progress,
                slo_target=slo_target, tol=tol)
    return {info["values"][field]: info for info in res["curves"]}


# --------------------------------------------------------------------------- KV dtype


def kv_dtype_whatif(base: Scenario, values: Sequence[str] = ("bf16", "fp8", "int4"), seq_len: int | None = None,
                    load: bool = True, executor: Executor | None = None,
                    progress: Callable[[int, int], None] | None = None, slo_target: float = 0.99,
                    tol: float = 0.02) -> dict[str, Any]:
    """KV-cache quantization what-if. `seq_len`: the sequence length concurrency is counted
    at (default: the workload's mean prompt + output). `load=False` skips the sweeps
    (static numbers only). Ratios are to the first value."""
    values = list(dict.fromkeys(values))
    if not values:
        raise SpecError("kv-dtype what-if: give at least one KV format")
    I, O, L = _mean_lengths(base, seq_len)  # noqa: E741
    rows: list[dict[str, Any]] = []
    fitting = []
    for v in values:
        sc = base.replace(kv_dtype=v)
        cost = sc.cost_model()
        mem = cost.memory(sc.gpu_memory_utilization, sc.max_num_batched_tokens, sc.max_num_seqs, seq_len=L)
        row: dict[str, Any] = {
            "kv_dtype": v, "kv_bytes_per_element": DTYPE_BYTES[v], "fits": mem.fits,
            "kv_bytes_per_token": mem.kv_bytes_per_token, "kv_budget_gb_per_gpu": mem.kv_budget_bytes_per_gpu / 1e9,
            "kv_capacity_tokens": mem.kv_capacity_tokens, "seq_len": L,
            "max_concurrent_sequences": mem.max_concurrent_sequences,
        }
        if not mem.fits:
            row["reason"] = mem.message
            rows.append(row)
            continue
        fitting.append(v)
        b1 = predict_static(cost, 1, I, O, sc.gpu_memory_utilization)
        bcap = max(1, min(sc.max_num_seqs, mem.max_concurrent_sequences))
        bc = predict_static(cost, bcap, I, O, sc.gpu_memory_utilization)
        row.update(tpot_ms_batch1=b1["tpot_ms"], capacity_batch=bcap, tpot_ms_capacity_batch=bc["tpot_ms"],
                   decode_tokens_per_s_capacity_batch=bcap * 1e3 / bc["tpot_ms"] if is_number(bc["tpot_ms"]) else None,
                   attention_path=_attention_path(cost, v))
        # the step time at the first format's batch: the kernel's own change, apart from the
        # larger batch the capacity admits
        ref_batch = rows[0].get("capacity_batch", bcap) if rows else bcap
        same = bc if ref_batch == bcap else predict_static(cost, ref_batch, I, O, sc.gpu_memory_utilization)
        row.update(reference_batch=ref_batch, tpot_ms_reference_batch=same["tpot_ms"])
        rows.append(row)
    infos = _sweep_infos(base, "kv_dtype", fitting, executor, progress, slo_target, tol) if load else {}
    for row in rows:
        info = infos.get(row["kv_dtype"])
        row["offline_max_throughput"] = info["offline_max_throughput"] if info else None
        row["saturation_rate"] = (info["saturation_rate"] if info["saturation_rate"] is not None
                                  else info["saturation_lower_bound"]) if info else None
        row["slo_capacity_rate"] = info["slo_capacity"] if info else None
        row["slo_note"] = info["slo_note"] if info else None
        row["warnings"] = list(info["warnings"]) if info else []
    ref = rows[0]
    keys = ("kv_capacity_tokens", "max_concurrent_sequences", "tpot_ms_batch1", "tpot_ms_capacity_batch",
            "decode_tokens_per_s_capacity_batch", "offline_max_throughput", "saturation_rate", "slo_capacity_rate",
            "capacity_batch", "tpot_ms_reference_batch")
    for row in rows:
        row["ratios"] = {k: _ratio(row.get(k), ref.get(k)) for k in keys}
        row["gain"] = _gain_split(row["ratios"])
    return {
        "whatif": "kv-dtype", "model": base.model, "hardware": base.hardware, "tp": base.tp,
        "workload": str(base.workload), "mean_input_tokens": I, "mean_output_tokens": O, "seq_len": L,
        "goodput_slos_ms": dict(base.goodput), "slo_target": slo_target, "reference": values[0],
        "scenario": base.as_dict(), "values": rows,
    }


def _attention_path(cost: CostModel, kv_dtype: str) -> str:
    """How the decode attention reads a `kv_dtype` cache on this chip and engine: natively (the
    smaller read), or converted to the activation format by a kernel without a native path."""
    eff = cost.hardware.efficiency
    if DTYPE_BYTES[kv_dtype] >= DTYPE_BYTES[cost.dtypes.activation]:
        return "native (the activation format)"
    rate = eff.dequant_rate_for(kv_dtype)
    if rate is None:
        return f"native {kv_dtype} attention: {DTYPE_BYTES[kv_dtype]:g} bytes per element read"
    return (f"no native {kv_dtype} attention: every KV element read is converted to "
            f"{cost.dtypes.activation} at {rate:.3g} elements/s (kv_dequant_rate)")


def _gain_split(q: dict[str, float | None]) -> dict[str, float | None]:
    """Decode throughput at the capacity batch over the first format's, split into its two
    factors: the batch the larger capacity admits (x batch ratio) and the step time at the
    same batch (x 1 / TPOT ratio at the first format's batch: bandwidth saved or conversion
    paid). Their product is the throughput ratio up to the context growth of the larger batch."""
    b, t = q.get("capacity_batch"), q.get("tpot_ms_reference_batch")
    return {"from_admitted_batch": b, "from_step_time_same_batch": (1.0 / t) if t else None,
            "total": q.get("decode_tokens_per_s_capacity_batch")}


# --------------------------------------------------------------------------- speculative decoding


def expected_tokens(gamma: int, acceptance: float) -> float:
    """Tokens a verify step emits per sequence on average: (1 - a^(g+1)) / (1 - a) (g+1 at a = 1)."""
    if acceptance >= 1.0:
        return float(gamma + 1)
    return (1.0 - acceptance ** (gamma + 1)) / (1.0 - acceptance)


class SpeculativeCostModel:
    """A CostModel stand-in whose decode costs are those of speculative decoding, amortised.

    The engine still emits one token per sequence per step; a step's decode part costs
    (gamma x draft step + verify step) / E[tokens] instead of one plain decode step, so the
    simulated throughput and mean TPOT are those of speculative decoding. Not modelled: the
    burstiness of token emission (a verify step emits 1..gamma+1 tokens at once), so ITL
    percentiles are smoothed; the draft's catch-up forward over the accepted tokens; and
    rejected-token KV writes. A step with prefill chunks costs the plain step plus the
    difference between the speculative and plain prices of its decode part.

    Decode sequences in a step are recovered exactly from the step statistics:
    B_d = 2 (Ad + T - R + Pc) (every decode contributes 1/2, every prefill chunk 0) and
    their cached tokens sum_p = Ad - B_d / 2. With sliding-window layers a mixed step's
    windowed sums are estimated from the mean context.

    Memory: the draft's weights (per GPU, at `draft.par.tp`) and its KV cache come out of
    the target's KV budget: tokens = (budget - draft weights) / (target + draft KV per token).
    """

    def __init__(self, target: CostModel, draft: CostModel, gamma: int, acceptance: float) -> None:
        check_int("gamma", gamma, note="(draft tokens per step)")
        if not (is_number(acceptance) and 0.0 <= acceptance <= 1.0):
            raise SpecError(f"acceptance: {acceptance!r} must be a rate in [0, 1]")
        self.target = target
        self.draft = draft
        self.gamma = gamma
        self.acceptance = float(acceptance)
        self.expected_tokens = expected_tokens(gamma, acceptance)
        self.model = target.model
        self.hardware = target.hardware
        self.par = target.par
        self.dtypes = target.dtypes
        self.gemm_dtype = target.gemm_dtype
        self.notes = list(target.notes) + [
            f"speculative decoding: draft {draft.model.id} (tp={draft.par.tp}), gamma={gamma}, "
            f"acceptance={acceptance:g}, {self.expected_tokens:.3g} tokens per verify step; decode "
            "cost amortised per emitted token (mean TPOT and throughput kept, emission burstiness not)"]
        self._wt = target.model.sliding_window.window if target.model.sliding_window else None
        self._wd = draft.model.sliding_window.window if draft.model.sliding_window else None

    def __getattr__(self, name: str) -> Any:  # anything else (breakdown, ops, ...) is the target's
        return getattr(self.target, name)

    # ---- pricing
    def draft_time(self, B: float, sum_p: float) -> float:
        """gamma draft decode steps of B sequences with sum_p cached tokens (context grows by 1 a step)."""
        st, W, g = self.draft.step_time, self._wd, self.gamma
        t = 0.0
        pbar = sum_p / B
        for i in range(g):
            Ad, R = sum_p + B * (i + 0.5), sum_p + B * (i + 1)
            Aw = B * min(pbar + i + 0.5, W) if W else None
            Rw = B * min(pbar + i + 1, W) if W else None
            t += st(B, B, Ad, 0.0, R, Aw, Rw)
        return t

    def verify_time(self, B: float, sum_p: float) -> float:
        """One target step over gamma+1 tokens per sequence (causal on the cached context),
        LM head over all B (gamma+1) positions."""
        q = self.gamma + 1
        W = self._wt
        pbar = sum_p / B
        Ap = q * (sum_p + B * q / 2.0)
        Aw = B * q * min(pbar + q / 2.0, W) if W else None
        Rw = B * min(pbar + q, W) if W else None
        return self.target.step_time(B * q, B * q, 0.0, Ap, sum_p + B * q, Aw, Rw, sum_p)

    def round_time(self, B: float, sum_p: float) -> float:
        """One speculative round: gamma draft steps + one verify step (seconds)."""
        return self.draft_time(B, sum_p) + self.verify_time(B, sum_p)

    def step_time(self, T: float, S: float, Ad: float = 0.0, Ap: float = 0.0, R: float = 0.0,
                  Aw: float | None = None, Rw: float | None = None, Pc: float = 0.0) -> float:
        plain = self.target.step_time
        B = round(2.0 * (Ad + T - R + Pc))
        if B <= 0:
            return plain(T, S, Ad, Ap, R, Aw, Rw, Pc)
        sum_p = max(Ad - 0.5 * B, 0.0)
        spec = self.round_time(B, sum_p) / self.expected_tokens
        if B >= T and Ap == 0.0:  # decode-only step
            return spec
        W = self._wt
        pbar = sum_p / B
        Awd = B * min(pbar + 0.5, W) if W else None
        Rwd = B * min(pbar + 1.0, W) if W else None
        dec = plain(B, B, Ad, 0.0, sum_p + B, Awd, Rwd, 0.0)
        return plain(T, S, Ad, Ap, R, Aw, Rw, Pc) - dec + spec

    def step_times(self, T: Any, S: Any, Ad: Any = 0.0, Ap: Any = 0.0, R: Any = 0.0,
                   Aw: Any = None, Rw: Any = None, Pc: Any = 0.0) -> np.ndarray:
        if Aw is None:
            Aw = np.asarray(Ad, dtype=float) + np.asarray(Ap, dtype=float)
        if Rw is None:
            Rw = R
        arrs = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (T, S, Ad, Ap, R, Aw, Rw, Pc)))
        out = np.empty(arrs[0].shape)
        flat = [a.ravel() for a in arrs]
        res = out.reshape(-1)
        for i in range(res.size):
            res[i] = self.step_time(*(float(a[i]) for a in flat))
        return out

    def time(self, batch: Any) -> float:
        return self.step_time(batch.T, batch.S, batch.Ad, batch.Ap, batch.R, batch.Aw, batch.Rw, batch.Pc)

    # ---- memory
    def memory(self, gpu_memory_utilization: float = 0.9, max_num_batched_tokens: int = 8192,
               max_num_seqs: int = 256, seq_len: int | None = None) -> MemoryPlan:
        mem = self.target.memory(gpu_memory_utilization, max_num_batched_tokens, max_num_seqs, seq_len)
        d = self.draft
        draft_w = weights_bytes_per_gpu(d.model, d.par, d.dtypes)
        draft_kv = kv_bytes_per_gpu_token(d.model, d.par, d.dtypes.kv)
        budget = mem.kv_budget_bytes_per_gpu - draft_w
        per_tok = mem.kv_bytes_per_token_per_gpu + draft_kv
        tokens = int(max(budget, 0.0) // per_tok)
        fits = budget > 0 and tokens >= 16
        msg = mem.message
        if mem.fits and not fits:
            msg = (f"{self.model.id} with draft {d.model.id} does not fit on {self.hardware.id} tp={self.par.tp}: "
                   f"the draft's {draft_w / 1e9:.1f} GB of weights per GPU exceed the "
                   f"{mem.kv_budget_bytes_per_gpu / 1e9:.1f} GB KV budget")
        return dataclasses.replace(mem, kv_budget_bytes_per_gpu=budget, kv_bytes_per_token_per_gpu=per_tok,
                                   kv_capacity_tokens=tokens, max_concurrent_sequences=tokens // mem.seq_len,
                                   fits=fits and mem.fits, message=msg)


def make_speculative_cost(base: Scenario, draft_model: str, gamma: int = 4, acceptance: float = 0.7,
                          draft_tp: int | None = None) -> SpeculativeCostModel:
    """The base scenario's cost model with speculative decoding by `draft_model` on the same
    hardware (same TP as the target when it divides the draft's heads, else 1; the draft's own
    weight dtype; the target's KV dtype and efficiencies)."""
    target = base.cost_model()
    from simulator.resolve import make_cost_model
    from simulator.specs.catalog import load_model

    dm = load_model(draft_model)
    if draft_tp is None:
        draft_tp = base.tp if dm.num_heads % base.tp == 0 else 1
    draft = make_cost_model(dm, target.hardware, draft_tp, 1, None, base.activation_dtype, target.dtypes.kv,
                            False, None)  # target.hardware already carries --ideal / --efficiency
    return SpeculativeCostModel(target, draft, gamma, acceptance)


def _run_with(cost: Any, sc: Scenario, rate: float | None) -> dict[str, Any]:
    sc = sc.replace(rate=rate) if rate is not None else sc
    w = sc.make_workload()
    res = simulate(cost, w, sc.engine_config(), sc.replicas, sc.router)
    s = summarize(res, sc.slos_s)
    s["kv_capacity_tokens_per_replica"] = res.meta["kv_capacity_tokens_per_replica"]
    return s


_LOAD_KEYS = ("request_throughput", "output_throughput", "mean_ttft_ms", "p50_ttft_ms", "p99_ttft_ms",
              "mean_tpot_ms", "p50_tpot_ms", "p99_tpot_ms", "p99_itl_ms", "good_fraction", "mean_batch_size",
              "preemptions", "unstable", "kv_capacity_tokens_per_replica")


def speculative_whatif(base: Scenario, draft_model: str, gamma: int = 4, acceptance: float = 0.7,
                       batch_sizes: Sequence[int] | None = None, draft_tp: int | None = None,
                       context: int | None = None, load: bool = True) -> dict[str, Any]:
    """Speculative decoding what-if.

    Static: per batch size B (default 1..256), plain decode TPOT = one target decode step at
    context `context` (default: mean prompt + half the mean output), speculative TPOT =
    (gamma draft steps + verify step) / E[tokens]; `crossover_batch` = the smallest B at
    which speculative TPOT >= plain TPOT (it stops paying). Under load (`load`): the base
    scenario simulated plain and with `SpeculativeCostModel`, at its rate and offline
    (rate = inf, the max throughput).
    """
    spec = make_speculative_cost(base, draft_model, gamma, acceptance, draft_tp)
    target = spec.target
    I, O, _ = _mean_lengths(base)  # noqa: E741
    p = float(context if context is not None else I + O // 2)
    bs = sorted({int(b) for b in (batch_sizes or range(1, 257))})
    if not bs or bs[0] < 1:
        raise SpecError("batch sizes must be integers >= 1")
    rows = []
    for B in bs:
        sum_p = B * p
        plain = target.step_time(B, B, sum_p + 0.5 * B, 0.0, sum_p + B)
        d = spec.draft_time(B, sum_p)
        v = spec.verify_time(B, sum_p)
        tpot = (d + v) / spec.expected_tokens
        rows.append({"batch_size": B, "plain_tpot_ms": plain * 1e3, "speculative_tpot_ms": tpot * 1e3,
                     "draft_ms": d * 1e3, "verify_ms": v * 1e3, "speedup": plain / tpot,
                     "pays": tpot < plain})
    cross = next((r["batch_size"] for r in rows if not r["pays"]), None)
    again = [r["batch_size"] for r in rows if cross is not None and r["batch_size"] > cross and r["pays"]]
    out: dict[str, Any] = {
        "whatif": "speculative", "model": target.model.id, "hardware": target.hardware.id, "tp": base.tp,
        "draft_model": spec.draft.model.id, "draft_tp": spec.draft.par.tp, "gamma": gamma,
        "acceptance": float(acceptance), "expected_tokens_per_step": spec.expected_tokens,
        "context_tokens": p, "workload": str(base.workload), "scenario": base.as_dict(),
        "crossover_batch": cross,
        "pays_at_batch1": rows[0]["pays"] if bs[0] == 1 else None,
        "speedup_batch1": rows[0]["speedup"] if bs[0] == 1 else None,
        "static": rows,
        "approximation": spec.notes[-1],
        "warnings": ([f"speculative pays again at batch {', '.join(map(str, again[:5]))} above the crossover"]
                     if again else []),
    }
    mem_p = target.memory(base.gpu_memory_utilization, base.max_num_batched_tokens, base.max_num_seqs)
    mem_s = spec.memory(base.gpu_memory_utilization, base.max_num_batched_tokens, base.max_num_seqs)
    out["kv_capacity_tokens"] = {"plain": mem_p.kv_capacity_tokens, "speculative": mem_s.kv_capacity_tokens}
    if load:
        if not mem_s.fits:
            raise SpecError(mem_s.message)
        under = {}
        for name, cost in (("plain", target), ("speculative", spec)):
            at = _run_with(cost, base, None)
            off = _run_with(cost, base, math.inf)
            under[name] = {"at_rate": {k: at.get(k) for k in _LOAD_KEYS},
                           "offline_max_throughput": off["request_throughput"],
                           "offline_output_throughput": off["output_throughput"],
                           "offline_mean_tpot_ms": off["mean_tpot_ms"]}
        out["rate"] = base.rate
        out["under_load"] = under
    return out


# --------------------------------------------------------------------------- hardware


def hardware_whatif(base: Scenario, hardware: Sequence[str], prices: dict[str, float] | None = None,
                    load: bool = True, executor: Executor | None = None,
                    progress: Callable[[int, int], None] | None = None, slo_target: float = 0.99,
                    tol: float = 0.02) -> dict[str, Any]:
    """The same scenario on each accelerator: memory fit, TTFT/TPOT p50/p99 at the base rate
    (the trace's own timing when the scenario has no rate), saturation rate and SLO capacity
    (one sweep, one curve per accelerator), $/hour for the scenario's GPUs and $ per million
    output tokens, both at the base rate (as served) and at the SLO capacity."""
    hws = list(dict.fromkeys(str(h) for h in hardware))
    if not hws:
        raise SpecError("hardware what-if: give at least one accelerator")
    price_map = normalise_prices(prices)
    specs = {h: load_hardware(h) for h in hws}
    I, O, L = _mean_lengths(base)  # noqa: E741
    rows: list[dict[str, Any]] = []
    fitting = []
    for h in hws:
        hw = specs[h]
        sc = base.replace(hardware=h)
        row: dict[str, Any] = {"hardware": hw.id, "hardware_ref": h, "tp": sc.tp, "pp": sc.pp,
                               "replicas": sc.replicas, "gpus": sc.tp * sc.pp * sc.replicas}
        try:
            cost = sc.cost_model()
        except SpecError as e:
            rows.append({**row, "fits": False, "reason": str(e)})
            continue
        mem = cost.memory(sc.gpu_memory_utilization, sc.max_num_batched_tokens, sc.max_num_seqs, seq_len=L)
        price = price_map.get(hw.id, hw.price_per_gpu_hour_usd)
        row.update(fits=mem.fits, kv_capacity_tokens=mem.kv_capacity_tokens,
                   max_concurrent_sequences=mem.max_concurrent_sequences,
                   smallest_tp_that_fits=mem.smallest_tp_that_fits,
                   price_per_gpu_hour_usd=price, cost_per_hour_usd=price * row["gpus"] if price else None,
                   notes=list(cost.notes))
        if not mem.fits:
            row["reason"] = mem.message
        else:
            fitting.append(h)
        rows.append(row)
    by_ref = {r["hardware_ref"]: r for r in rows}
    if load and fitting:
        ex = executor or Executor()
        if base.rate is not None:
            summaries = ex.map(run_point, [(base.replace(hardware=h).as_dict(), base.rate) for h in fitting])
        else:
            summaries = [base.replace(hardware=h).run()[1] for h in fitting]
        for h, s in zip(fitting, summaries, strict=True):
            r = by_ref[h]
            for k in ("p50_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p99_tpot_ms", "request_throughput",
                      "output_throughput", "good_fraction", "unstable"):
                r[k] = s.get(k)
            if r["cost_per_hour_usd"] and is_number(s.get("output_throughput")) and s["output_throughput"] > 0:
                r["cost_per_million_output_tokens_usd"] = r["cost_per_hour_usd"] / (s["output_throughput"] * 3600) * 1e6
        infos = _sweep_infos(base, "hardware", fitting, ex, progress, slo_target, tol)
        for h in fitting:
            info, r = infos[h], by_ref[h]
            r["offline_max_throughput"] = info["offline_max_throughput"]
            r["saturation_rate"] = info["saturation_rate"]
            r["saturation_lower_bound"] = info["saturation_lower_bound"]
            r["slo_capacity_rate"] = info["slo_capacity"]
            r["slo_note"] = info["slo_note"]
            r["warnings"] = list(info["warnings"])
            cap = info["slo_capacity"]
            if r["cost_per_hour_usd"] and is_number(cap) and cap > 0:
                r["cost_per_million_output_tokens_at_slo_capacity_usd"] = (
                    r["cost_per_hour_usd"] / (cap * O * 3600) * 1e6)
    return {
        "whatif": "hardware", "model": base.model, "tp": base.tp, "workload": str(base.workload),
        "rate": base.rate, "mean_input_tokens": I, "mean_output_tokens": O,
        "goodput_slos_ms": dict(base.goodput), "slo_target": slo_target, "scenario": base.as_dict(),
        "hardware": rows,
    }


WHATIFS: dict[str, Callable[..., dict[str, Any]]] = {"kv-dtype": kv_dtype_whatif, "speculative": speculative_whatif, "hardware": hardware_whatif}


def whatif(kind: str, base: Scenario, *args: Any, **kw: Any) -> dict[str, Any]:
    """Dispatch by name: whatif("kv-dtype" | "speculative" | "hardware", base, ...)."""
    key = str(kind).replace("_", "-")
    if key not in WHATIFS:
        raise SpecError(f"what-if {kind!r}: one of {', '.join(WHATIFS)}")
    return WHATIFS[key](base, *args, **kw)


__all__ = ["kv_dtype_whatif", "speculative_whatif", "hardware_whatif", "whatif", "SpeculativeCostModel",
           "make_speculative_cost", "expected_tokens", "WHATIFS"]
