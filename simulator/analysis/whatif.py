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
  (`Efficiency.kv_dequant_rate_by_kv_dtype`, fitted per engine and chip family; on Ampere
  also one thread block's rate, `kv_dequant_block_rate_by_kv_dtype`, the floor of a small
  batch), so the same batch steps slower, as measured (fp8/fp16 latency 1.0-1.3 on H100 and 1.2-4.9 on A100 under
  vLLM V0).
* `speculative_whatif(base, speculative_config)`: speculative decoding simulated in the engine
  (`serving/speculative.py`: drafts priced per step, gamma+1 tokens verified per sequence,
  per-position acceptance drawn per request) against concurrency: per-user speed (1000 / mean
  TPOT) and total output throughput, plain and speculative, and the concurrency where the
  speedup falls below 1 (the crossover), with the verify step's bound at each concurrency.
* `hardware_whatif(base, ["h100-sxm", "h200-sxm", "b200"])`: the same workload on each
  accelerator: fit, latency at the base rate, saturation, SLO capacity, $/hour, $/M tokens.

Pure: no printing, no files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from simulator.analysis.executors import Executor
from simulator.analysis.plan import normalise_prices
from simulator.analysis.sweep import run_point, sweep
from simulator.cost.predict import predict_static
from simulator.cost.stepbatch import StepBatch
from simulator.scenario import Scenario
from simulator.specs.catalog import load_hardware
from simulator.specs.checks import (
    SpecError,
    check_choice,
    check_instance,
    check_int,
    check_list,
    is_number,
)
from simulator.specs.dtypes import DTYPE_BYTES, DTYPES, attention_format


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
    values = list(dict.fromkeys(check_choice(f"values[{i}]", v, DTYPES)
                                for i, v in enumerate(check_list("values", values, "KV formats") or [])))
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


def _attention_path(cost: Any, kv_dtype: str) -> str:
    """How the decode attention reads a `kv_dtype` cache on this chip and engine: natively (the
    smaller read), or converted to the attention format (`dtypes.attention_format`, as the cost
    model prices it) by a kernel without a native path."""
    eff = cost.hardware.efficiency
    attn = cost.hardware.gemm_dtype(attention_format(cost.dtypes.activation, kv_dtype))
    if DTYPE_BYTES[kv_dtype] >= DTYPE_BYTES[attn]:
        return f"native (attention in {attn})"
    rate = eff.dequant_rate_for(kv_dtype)
    if rate is None:
        return (f"read as {DTYPE_BYTES[kv_dtype]:g}-byte elements with no conversion priced (a native "
                f"{kv_dtype} attention path: the engine profile gives no kv_dequant_rate for this chip family)")
    block = eff.dequant_block_rate_for(kv_dtype)
    floor = "" if block is None else (
        f", one thread block at {block:.3g} elements/s along a decode's context or 512-token "
        f"partition (kv_dequant_block_rate: the floor of a batch too small to fill the chip)")
    return (f"no native {kv_dtype} attention: every KV element read is converted to "
            f"{attn} at {rate:.3g} elements/s (kv_dequant_rate){floor}")


def _gain_split(q: dict[str, float | None]) -> dict[str, float | None]:
    """Decode throughput at the capacity batch over the first format's, split into its two
    factors: the batch the larger capacity admits (x batch ratio) and the step time at the
    same batch (x 1 / TPOT ratio at the first format's batch: bandwidth saved or conversion
    paid). Their product is the throughput ratio up to the context growth of the larger batch."""
    b, t = q.get("capacity_batch"), q.get("tpot_ms_reference_batch")
    return {"from_admitted_batch": b, "from_step_time_same_batch": (1.0 / t) if t else None,
            "total": q.get("decode_tokens_per_s_capacity_batch")}


# --------------------------------------------------------------------------- speculative decoding

#: concurrencies the speculative what-if tries by default (capped at max_num_seqs)
SPEC_CONCURRENCIES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def spec_point(scenario_dict: dict[str, Any]) -> dict[str, Any]:
    """One closed-loop run of `Scenario(**scenario_dict)`: the numbers the speculative what-if
    compares (top-level and fed plain data, so it pickles into a process pool)."""
    res, s = Scenario(**scenario_dict).run()
    keys = ("output_throughput", "request_throughput", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
            "p99_tpot_ms", "mean_itl_ms", "p99_itl_ms", "completed", "spec_decode_acceptance_length")
    out = {k: s.get(k) for k in keys}
    out["mean_batch_size"] = res.meta["mean_batch_size"]
    out["kv_capacity_tokens"] = res.meta["kv_capacity_tokens_per_replica"]
    out["preemptions"] = int(res.preemptions.sum())
    tpot = s.get("mean_tpot_ms")
    out["per_user_tokens_per_s"] = 1e3 / tpot if isinstance(tpot, (int, float)) and tpot > 0 else None
    return out


def _verify_anatomy(spec: Any, batch: float, context: float) -> dict[str, Any]:
    """The target's verify step of `batch` sequences at `context` cached tokens, q = k + 1
    tokens each, beside the plain decode step of the same batch: times and whether each is
    compute- or memory-bound (`CostModel.breakdown`)."""
    target = spec.target
    B = max(1.0, float(batch))
    q = spec.config.k + 1
    W = target.model.sliding_window.window if target.model.sliding_window else None

    def step(tokens: int) -> StepBatch:
        pairs = B * tokens * (context + tokens / 2.0)
        return StepBatch(T=B * tokens, S=B * tokens, Ad=pairs, R=B * (context + tokens),
                         Aw=B * tokens * min(context + tokens / 2.0, W) if W else None,
                         Rw=B * min(context + tokens, W) if W else None)

    v, d = target.breakdown(step(q)), target.breakdown(step(1))
    return {"verify_tokens": B * q, "verify_step_ms": v["time_ms"], "verify_bound": v["bound"],
            "plain_decode_step_ms": d["time_ms"], "plain_decode_bound": d["bound"]}


def speculative_whatif(base: Scenario, speculative_config: Any = None, concurrencies: Sequence[int] | None = None,
                       requests_per_client: int = 8, min_requests: int = 32, executor: Executor | None = None,
                       progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Speculative decoding against concurrency, simulated in the engine (`serving/speculative.py`).

    For each concurrency C (closed loop: C clients, max(requests_per_client x C, min_requests)
    requests of the base workload, or the scenario's num_requests when it was given, as
    `vllm bench serve --max-concurrency C --num-prompts N` at rate inf), the
    base scenario runs plain and with `speculative_config` (default: the base scenario's own):
    per-user speed = 1000 / mean TPOT (output tokens/s one user sees), total = output tokens/s.
    `crossover_concurrency`: the smallest C whose total-throughput speedup is below 1;
    `per_user_crossover_concurrency` the same for per-user speed. Each row also prices the verify
    step at the run's mean batch (context = mean prompt + half the mean output) and says whether
    it is compute- or memory-bound.
    """
    cfg_in = speculative_config if speculative_config is not None else base.speculative_config
    if not cfg_in:
        raise SpecError("speculative what-if: give --speculative-config (vLLM's JSON with an acceptance, "
                        "docs/plan.md)")
    check_int("requests_per_client", requests_per_client)
    check_int("min_requests", min_requests)
    plain = base.replace(speculative_config=None, rate=None)
    spec_sc = base.replace(speculative_config=cfg_in, rate=None)
    spec = spec_sc.speculative()
    assert spec is not None
    given = check_list("concurrencies", concurrencies, "integers >= 1", optional=True)
    cs = sorted({int(check_int("concurrency", c)) for c in (SPEC_CONCURRENCIES if given is None else given)
                 if given is not None or c <= base.max_num_seqs})
    if not cs:
        raise SpecError("speculative what-if: give at least one concurrency")
    def requests(c: int) -> int:  # the scenario's own count when given (-n), else per client
        return int(base.num_requests) if base.num_requests_given else max(requests_per_client * c, min_requests)

    tasks = []
    for c in cs:
        tasks += [(plain.replace(concurrency=c, num_requests=requests(c)).as_dict(),),
                  (spec_sc.replace(concurrency=c, num_requests=requests(c)).as_dict(),)]
    done = [0]

    def tick() -> None:
        done[0] += 1
        if progress is not None:
            progress(done[0], len(tasks))

    results = (executor or Executor()).map(spec_point, tasks, done=tick)
    I, O, _ = _mean_lengths(base)  # noqa: E741
    rows = []
    for i, c in enumerate(cs):
        p, s = results[2 * i], results[2 * i + 1]
        row: dict[str, Any] = {"concurrency": c, "requests": requests(c)}
        for name, r in (("plain", p), ("speculative", s)):
            row.update({f"{name}_{k}": r[k] for k in ("per_user_tokens_per_s", "output_throughput", "mean_tpot_ms",
                                                      "mean_ttft_ms", "p99_itl_ms", "mean_batch_size", "preemptions")})
        row["per_user_speedup"] = _ratio(s["per_user_tokens_per_s"], p["per_user_tokens_per_s"])
        row["throughput_speedup"] = _ratio(s["output_throughput"], p["output_throughput"])
        row["measured_acceptance_length"] = s["spec_decode_acceptance_length"]
        row.update(_verify_anatomy(spec, s["mean_batch_size"], I + O / 2.0))
        rows.append(row)

    def first_below(key: str) -> int | None:
        return next((r["concurrency"] for r in rows if is_number(r[key]) and r[key] < 1.0), None)

    cross, cross_user = first_below("throughput_speedup"), first_below("per_user_speedup")
    again = [r["concurrency"] for r in rows
             if cross is not None and r["concurrency"] > cross and (r["throughput_speedup"] or 0) >= 1.0]
    warnings = ([f"speculative decoding pays again at concurrency {', '.join(map(str, again))} above the crossover"]
                if again else [])
    few = [c for c in cs if requests(c) < 2 * c]
    if few:
        warnings.append(f"at concurrency {', '.join(map(str, few))} the runs have fewer than two requests per client "
                        f"(--num-requests {base.num_requests}): the batch never stays full; drop -n to use "
                        "--requests-per-client")
    conf = spec.config
    return {
        "whatif": "speculative", "model": spec.target.model.id, "hardware": spec.target.hardware.id, "tp": base.tp,
        "workload": str(base.workload), "mean_input_tokens": I, "mean_output_tokens": O,
        "speculative_config": dict(cfg_in) if isinstance(cfg_in, dict) else cfg_in,
        "method": conf.method, "num_speculative_tokens": conf.k, "acceptance": list(conf.acceptance),
        "mean_acceptance_length": conf.mean_acceptance_length, "draft_tp": spec.drafter.tp,
        "kv_capacity_tokens": {"plain": p["kv_capacity_tokens"], "speculative": s["kv_capacity_tokens"]},
        "crossover_concurrency": cross, "per_user_crossover_concurrency": cross_user,
        "speedup_at_1": rows[0]["per_user_speedup"] if cs[0] == 1 else None,
        "rows": rows, "notes": list(spec.notes), "scenario": base.as_dict(),
        "warnings": warnings,
    }


# --------------------------------------------------------------------------- hardware


def hardware_whatif(base: Scenario, hardware: Sequence[str], prices: dict[str, float] | None = None,
                    load: bool = True, executor: Executor | None = None,
                    progress: Callable[[int, int], None] | None = None, slo_target: float = 0.99,
                    tol: float = 0.02) -> dict[str, Any]:
    """The same scenario on each accelerator: memory fit, TTFT/TPOT p50/p99 at the base rate
    (the trace's own timing when the scenario has no rate), saturation rate and SLO capacity
    (one sweep, one curve per accelerator), $/hour for the scenario's GPUs and $ per million
    output tokens, both at the base rate (as served) and at the SLO capacity."""
    hws = list(dict.fromkeys(str(check_instance(f"hardware[{i}]", h, str, what="hardware id or file path"))
                             for i, h in enumerate(check_list("hardware", hardware, "hardware ids") or [])))
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
    check_instance("base", base, Scenario)
    key = str(kind).replace("_", "-")
    if key not in WHATIFS:
        raise SpecError(f"what-if {kind!r}: one of {', '.join(WHATIFS)}")
    return WHATIFS[key](base, *args, **kw)


__all__ = ["kv_dtype_whatif", "speculative_whatif", "hardware_whatif", "whatif", "spec_point", "SPEC_CONCURRENCIES",
           "WHATIFS"]
