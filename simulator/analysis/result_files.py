"""Result files of other load generators as measurement rows, each with the run it describes.

`load_rows(path, ...)` detects a file's format and reads it: llmsim's measurement CSV and
`vllm bench serve`'s JSON through `measurements`, and three more here, read by their real
layouts (docs/engines.md has the sources):

* **GuideLLM** report JSON (`benchmarks.json`; eras 0.3 to 0.7, detected by key): one row per
  metric of every benchmark (one load setting each: `config.strategy`, or `args.strategy` in
  0.3 files). Metrics from `metrics.<name>.successful` (TTFT and ITL in ms, request latency in
  s), per-request definitions of vllm-project/guidellm@06cef291:src/guidellm/schemas/request_stats.py.
* **inference-perf** lifecycle reports (a run folder, or any `*lifecycle_metrics.json` in it):
  one row per metric of every `stage_<i>_lifecycle_metrics.json` (all times in seconds), the
  workload rebuilt from the `config.yaml` inference-perf writes next to them
  (kubernetes-sigs/inference-perf@010d12fb:inference_perf/reportgen/base.py). Without the
  config the stages cannot be rebuilt, and the file is refused with that reason.
* **AIPerf** `profile_export_aiperf.json` (or its artifact folder, or a folder of such
  folders: one run per load point): one row per metric (`avg`, `p50`, `p99`; ms), the load
  from `input_config` (ai-dynamo/aiperf@1554b478:docs/reference/json-export-schema.md).

Each row keeps the schema's columns (`measurements.parse_row`) plus `run`, a `RunSpec` that
rebuilds the workload the file describes (lengths, shared prefixes, arrival process per
stage, closed-loop clients), and `run_stage`. `predict_metric` simulates the run once and
computes every metric *by the tool's own definition* over the stage's requests:

* throughput: completed requests (output tokens) / (last finish - first send) of the stage,
  the window all three tools use when nothing is cut (GuideLLM without warm-up/cool-down);
* percentiles: GuideLLM takes the first value whose cumulative weight reaches q, without
  interpolation (`numpy.percentile(method="inverted_cdf")`, statistics.py@03820eba);
  inference-perf and AIPerf interpolate linearly (numpy's default);
* TPOT = (E2E - TTFT)/(out - 1) per request (inference-perf `time_per_output_token`, AIPerf
  `inter_token_latency`); GuideLLM's `inter_token_latency_ms` is the same per-request value
  weighted by out - 1, so its mean is the pooled mean gap (llmsim's `mean_itl_ms`) and its
  percentiles equal TPOT's when every output has the same length (otherwise not compared);
* AIPerf's `inter_chunk_latency` is the pooled gap distribution (`*_itl_ms`).

Not compared, with the reason in the skipped list: GuideLLM's `time_per_output_token_ms`
(it includes the wait for the first token), the percentiles of inference-perf's
`inter_token_latency` (client re-tokenised chunks give many ~0 gaps; only its mean is the
pooled mean). Arrivals: GuideLLM `constant` sends request k at k/rate; inference-perf
`constant` draws n = int(rate x duration) exponential gaps rescaled to end at the stage's
duration (load_timer.py@0949afc8 `ConstantLoadTimer`), `poisson` a Poisson count per second
spread the same way; stages run one after another, each after the previous one drained
(load_generator.py@0167ee66 `run_stage`), on one server: stage k > 0 starts with the
prompts of the earlier stages in the prefix cache. Seeds are the files' own (GuideLLM
`random_seed`, inference-perf `shared_prefix.seed`, AIPerf `random_seed`) fed to numpy's
generator: the tools' own draws are not reproduced, their distributions are.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from simulator.analysis.measurements import parse_row, read_measurements, read_vllm_result
from simulator.specs.checks import (
    MAX_REQUESTS,
    MAX_RESULT_BYTES,
    MAX_RESULT_NODES,
    SpecError,
    check_path,
    load_json,
    show,
)
from simulator.specs.readers import read_head

FORMATS = ("measurements-csv", "vllm", "guidellm", "inference-perf", "aiperf")
#: the metrics every row set draws from; the ones a file has become rows
_STATS = ("mean", "median", "p99")


# --------------------------------------------------------------------------- the run a file describes

@dataclass(frozen=True)
class Stage:
    """One load point. `process`: "constant" (request k at k/rate), "poisson", "rescaled"
    (inference-perf constant: exponential gaps rescaled to end at `duration_s`), "per-second"
    (inference-perf poisson), "burst" (every request at t = 0), "closed" (`concurrency`
    clients, each sending its next request when the previous one ends)."""

    process: str
    num_requests: int
    rate: float | None = None
    duration_s: float | None = None
    concurrency: int | None = None
    max_concurrency: int | None = None  # a client-side cap on an open loop


@dataclass(frozen=True)
class RunSpec:
    """The workload a result file describes: fixed lengths, or inference-perf's shared
    prefix (`prefix` = groups, prompts per group, system prompt tokens, question tokens;
    `multi_turn`), and its stages. `tool` selects the metric definitions."""

    tool: str
    input_len: int
    output_len: int
    stages: tuple[Stage, ...]
    seed: int = 0
    prefix: tuple[int, int, int, int] | None = None
    multi_turn: bool = False
    warm_later_stages: bool = False


def _arrivals(stage: Stage, rng: np.random.Generator) -> np.ndarray:
    n = stage.num_requests
    rate = stage.rate
    if stage.process in ("burst", "closed") or rate is None or not math.isfinite(rate):
        return np.zeros(n)
    if stage.process == "constant":
        return np.arange(n, dtype=float) / rate
    if stage.process == "poisson":
        return np.concatenate([[0.0], np.cumsum(rng.exponential(1.0 / rate, n - 1))]) if n else np.zeros(0)
    if stage.process == "rescaled":  # ConstantLoadTimer: n gaps, the last request at `duration`
        gaps = rng.exponential(1.0 / rate, n)
        return np.cumsum(gaps * (float(stage.duration_s or n / rate) / gaps.sum())) if n else np.zeros(0)
    if stage.process == "per-second":  # PoissonLoadTimer: k ~ Poisson(rate) per second, rescaled in it
        times: list[np.ndarray] = []
        second = 0
        while sum(len(t) for t in times) < n:
            k = int(rng.poisson(rate))
            if k:
                g = rng.exponential(1.0 / k, k)
                times.append(second + np.cumsum(g / g.sum()))
            second += 1
        return np.concatenate(times)[:n]
    raise SpecError(f"arrival process {stage.process!r} is not known")


def build_workload(spec: RunSpec, k: int, cap: int | None = None) -> Any:
    """The llmsim Workload of stage k (at most `cap` requests when given)."""
    import dataclasses

    from simulator.workloads import workload as wl

    stage = spec.stages[k]
    n = stage.num_requests if cap is None else max(1, min(stage.num_requests, cap))
    stage = dataclasses.replace(stage, num_requests=n)
    rng = np.random.default_rng([spec.seed, k])
    t = _arrivals(stage, rng)
    conc = stage.concurrency if stage.process == "closed" else None
    if spec.prefix is None:
        return wl.Workload(t, np.full(n, spec.input_len), np.full(n, spec.output_len), name=f"{spec.tool} stage {k}",
                           concurrency=conc, max_concurrency=stage.max_concurrency)
    from simulator.workloads.shared_prefix import shared_prefix

    g, p, s_len, q_len = spec.prefix
    # every stage restarts at prompt 0 of the same shuffled list (inference-perf's request
    # numbers restart per stage), so the permutation's seed is the run's, not the stage's
    pw = shared_prefix(g, p, s_len, q_len, spec.output_len, n, rate=math.inf, multi_turn=spec.multi_turn,
                       seed=spec.seed)
    w = pw.to_workload(name=f"{spec.tool} stage {k}")
    return wl.Workload(t, w.input_len, w.output_len, name=w.name, extra=dict(w.extra), concurrency=conc,
                       max_concurrency=stage.max_concurrency)


# --------------------------------------------------------------------------- the tools' statistics

def _percentile(x: np.ndarray, q: float, tool: str, w: np.ndarray | None = None) -> float:
    if len(x) == 0:
        return float("nan")
    if tool != "guidellm":
        return float(np.percentile(x, q))
    # GuideLLM: the first value whose cumulative weight reaches q (no interpolation)
    order = np.argsort(x)
    xs = x[order]
    ws = np.ones(len(x)) if w is None else np.asarray(w, dtype=float)[order]
    cum = np.cumsum(ws) / ws.sum()
    return float(xs[min(int(np.searchsorted(cum, q / 100.0 - 1e-12, side="left")), len(xs) - 1)])


def _three(prefix: str, x: np.ndarray, tool: str, out: dict[str, float], w: np.ndarray | None = None) -> None:
    """mean_/median_/p99_{prefix}_ms (x in seconds) by the tool's rules."""
    if len(x) == 0:
        return
    mean = float(np.average(x, weights=w)) if w is not None else float(np.mean(x))
    out[f"mean_{prefix}_ms"] = mean * 1e3
    out[f"median_{prefix}_ms"] = _percentile(x, 50, tool, w) * 1e3
    out[f"p99_{prefix}_ms"] = _percentile(x, 99, tool, w) * 1e3


def tool_metrics(res: Any, tool: str) -> dict[str, float]:
    """A stage's metrics by `tool`'s definitions (module docstring), from a SimResult."""
    from simulator.metrics.summary import weighted_percentile
    from simulator.serving.records import COMPLETED

    ok = np.asarray(res.status) == COMPLETED
    out: dict[str, float] = {}
    if not ok.any():
        return out
    arr = np.asarray(res.arrival_s, dtype=float)
    ttft = (np.asarray(res.first_token_s) - arr)[ok]
    e2el = (np.asarray(res.finish_s) - arr)[ok]
    n_out = np.asarray(res.output_len)[ok].astype(float)
    window = float(np.max(np.asarray(res.finish_s)[ok]) - np.min(arr))
    if window > 0:
        out["request_throughput"] = float(ok.sum()) / window
        out["output_tokens_per_s"] = float(n_out.sum()) / window
    _three("ttft", ttft, tool, out)
    _three("e2el", e2el, tool, out)
    multi = n_out > 1
    tpot = (e2el[multi] - ttft[multi]) / (n_out[multi] - 1)
    # GuideLLM weights each request's gap by its out - 1 gaps
    _three("tpot", tpot, tool, out, w=(n_out[multi] - 1) if tool == "guidellm" else None)
    if multi.any():
        out["mean_itl_ms"] = float((e2el[multi] - ttft[multi]).sum() / (n_out[multi] - 1).sum()) * 1e3
    v, c = res.itl_values_s, res.itl_counts
    if tool == "aiperf" and c.sum():  # inter_chunk_latency: the pooled gaps of the (one-stage) run
        out["median_itl_ms"] = weighted_percentile(v, c, 50) * 1e3
        out["p99_itl_ms"] = weighted_percentile(v, c, 99) * 1e3
    return out


def predict_metric(validator: Any, row: Mapping[str, Any], profile: Any) -> tuple[float, str]:
    """(`row['metric']` of the simulated run of `row['run']`, stage `row['run_stage']`, under
    the engine `profile`, note): one simulation per stage, cached on the validator, at the
    stage's own request count unless `validator.max_requests` caps it (`Validator.run_count`)."""
    from simulator.profiles.apply import client_view_for, row_settings
    from simulator.scenario import Scenario
    from simulator.serving.simulate import simulate

    spec: RunSpec = row["run"]
    k = int(row["run_stage"])
    cost = validator.cost_model(row)
    key = ("described-run", id(cost), profile.id, validator.max_requests, row["max_batch_size"],
           row["max_num_tokens"], row["replicas"], spec, k)
    _, note = validator.run_count(spec.stages[k].num_requests)

    def run() -> dict[str, float]:
        w = build_workload(spec, k, validator.max_requests)
        limits = row_settings(profile, cost, dict(row), w.num_requests, offline=False)
        warm = spec.warm_later_stages and k > 0 and bool(limits.get("enable_prefix_caching"))
        sc = Scenario(model=cost.model, hardware=cost.hardware, tp=row["tp"], pp=row["pp"],
                      weight_dtype=row["weight_dtype"], activation_dtype=row["activation_dtype"],
                      kv_dtype=row["kv_dtype"], replicas=row["replicas"], workload="random",
                      input_len=max(1, int(np.max(w.input_len))), output_len=spec.output_len,
                      warm_cache=warm, **limits)
        res = simulate(cost, w, sc.engine_config(cost), sc.replicas, sc.router, client=client_view_for(profile))
        return tool_metrics(res, spec.tool)

    metrics = validator.cached(key, run)
    v = metrics.get(row["metric"])
    if v is None or not math.isfinite(float(v)):
        raise SpecError(f"simulation gave no {row['metric']} (no request of the stage completed)")
    return float(v), note


# --------------------------------------------------------------------------- reading

@dataclass
class _Reader:
    """What every format reader needs: the caller's settings (model, hardware, parallelism,
    dtypes, server limits) and the rows and skipped entries it collects."""

    path: Path
    settings: dict[str, Any]
    rows: list[dict[str, Any]]
    skipped: list[dict[str, Any]]

    def base(self, source: str, model: str | None, engine: str, note: str) -> dict[str, Any]:
        s = self.settings
        model = s.get("model") or model
        if not model:
            raise SpecError(f"{self.path}: the file names no model; pass --model")
        if not s.get("hardware"):
            raise SpecError(f"{self.path}: a result file does not record the hardware; pass --hardware")
        tp, pp = int(s.get("tp") or 1), int(s.get("pp") or 1)
        engine_note = "" if s.get("engine") or engine else "; engine not recorded: vllm assumed (--engine)"
        return {"source": source, "model": model, "hardware": s["hardware"], "tp": tp, "pp": pp,
                "num_gpus": s.get("num_gpus") or tp * pp, "engine": s.get("engine") or engine or "vllm",
                **checkpoint_formats(model, s.get("weight_dtype"), s.get("activation_dtype")),
                "kv_dtype": s.get("kv_dtype") or "bf16",
                "max_batch_size": s.get("max_num_seqs") or "", "max_num_tokens": s.get("max_num_batched_tokens") or "",
                "quality": "high", "notes": note + engine_note}

    def add(self, base: dict[str, Any], spec: RunSpec, k: int, stage_id: str, values: Mapping[str, Any]) -> None:
        """One row per metric of `values` ({metric: number}) with `base`'s settings."""
        stage = spec.stages[k]
        extra: dict[str, Any]
        if stage.process == "closed":
            scenario, extra = "closed_loop", {"concurrency": stage.concurrency}
        elif stage.rate is None or not math.isfinite(stage.rate):
            scenario, extra = "offline_max_throughput", {}
        else:
            scenario, extra = "online_poisson", {"request_rate": stage.rate}
        for metric, value in values.items():
            if value is None or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
                continue
            from simulator.analysis.measurements import metric_unit

            raw = {**base, **extra, "id": f"{self.path.stem}-{stage_id}-{metric}", "scenario": scenario,
                   "metric": metric, "value": repr(float(value)), "unit": metric_unit(metric),
                   "num_requests": stage.num_requests, "input_len": spec.input_len, "output_len": spec.output_len,
                   "dataset": "" if spec.prefix is None else "shared-prefix"}
            try:
                row = parse_row({k2: ("" if v is None else str(v)) for k2, v in raw.items()})
            except ValueError as e:
                raise SpecError(f"{self.path}: {metric}: {e}") from None
            row["line"] = len(self.rows) + 1
            row["run"], row["run_stage"] = spec, k
            self.rows.append(row)

    def skip(self, stage_id: str, what: str, reason: str) -> None:
        self.skipped.append({"id": f"{self.path.stem}-{stage_id}-{what}", "reason": reason})


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, Mapping):
            return None
        d = d.get(k)
    return d


def _count(v: Any, what: str) -> int:
    x = _num(v)
    if x is None or x < 1 or x != int(x) or x > MAX_REQUESTS:
        raise SpecError(f"{what}: {show(v)} is not a request count in 1..{MAX_REQUESTS}")
    return int(x)


# ---- GuideLLM

def _guidellm_data(args: Mapping[str, Any], path: Path) -> tuple[int, int]:
    """(prompt, output) tokens of GuideLLM's synthetic data spec (`args.data`): fixed lengths
    only; anything else is a one-line refusal naming what is not modelled."""
    data = args.get("data")
    items = data if isinstance(data, list) else [data]
    if len(items) != 1 or not isinstance(items[0], (str, dict)):
        raise SpecError(f"{path}: args.data {show(data)}: one synthetic data spec expected")
    spec = items[0]
    if isinstance(spec, str):
        text = spec.strip()
        if text.startswith("{"):
            try:
                spec = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                raise SpecError(f"{path}: args.data {show(text)} is not a data spec") from None
        else:
            parts = [p.partition("=") for p in text.split(",")]
            if not all(sep for _, sep, _ in parts):
                raise SpecError(f"{path}: args.data {show(text)} is a dataset, not a synthetic spec "
                                "(prompt_tokens=...,output_tokens=...): its lengths are not in the file")
            spec = {k.strip(): v.strip() for k, _, v in parts}
    if not isinstance(spec, dict):
        raise SpecError(f"{path}: args.data {show(spec)} is not a data spec")
    for key in ("prompt_tokens_stdev", "output_tokens_stdev"):
        if float(spec.get(key) or 0) != 0:
            raise SpecError(f"{path}: args.data {key}={spec[key]}: normal-distributed lengths are not generated "
                            "by llmsim (fixed lengths only)")
    for key in ("prefix_tokens", "prefix_count", "prefix_buckets"):
        if spec.get(key) not in (None, 0, "0"):
            raise SpecError(f"{path}: args.data {key}: GuideLLM's randomly chosen shared prefixes are not generated "
                            "by llmsim")
    if int(float(spec.get("turns") or 1)) != 1:
        raise SpecError(f"{path}: args.data turns={spec['turns']}: multi-turn GuideLLM data is not generated")
    try:
        return int(float(spec["prompt_tokens"])), int(float(spec["output_tokens"]))
    except (KeyError, ValueError, TypeError):
        raise SpecError(f"{path}: args.data {show(spec)}: prompt_tokens and output_tokens expected") from None


def _guidellm_stage(b: Mapping[str, Any], path: Path) -> Stage:
    strat = _get(b, "config", "strategy") or _get(b, "args", "strategy") or {}
    kind = str(strat.get("type_") or "")
    made = _get(b, "scheduler_metrics", "requests_made", "total") or _get(b, "run_stats", "requests_made", "total") \
        or _get(b, "metrics", "request_totals", "total") or _get(b, "request_totals", "total")
    n = _count(made, f"{path}: benchmark requests made")
    if _num(strat.get("startup_duration")) or _num(strat.get("rampup_duration")):
        raise SpecError(f"{path}: strategy {kind}: a start-up ramp is not modelled")
    cap_v = _num(strat.get("max_concurrency"))
    cap = int(cap_v) if cap_v else None
    if kind == "constant":
        return Stage("constant", n, rate=float(strat["rate"]), max_concurrency=cap)
    if kind == "poisson":
        return Stage("poisson", n, rate=float(strat["rate"]), max_concurrency=cap)
    if kind == "synchronous":
        return Stage("closed", n, concurrency=1)
    if kind == "concurrent":
        return Stage("closed", n, concurrency=int(strat.get("streams") or cap or 1))
    if kind == "throughput":
        return Stage("closed", n, concurrency=cap) if cap else Stage("burst", n, rate=math.inf)
    raise SpecError(f"{path}: GuideLLM strategy {kind!r} is not modelled (constant, poisson, synchronous, "
                    "concurrent, throughput are)")


def _guidellm_values(r: _Reader, b: Mapping[str, Any], sid: str) -> dict[str, Any]:
    """{metric: value} of one GuideLLM benchmark (`metrics.<name>.successful`); what is not
    comparable goes to the skipped list with the reason."""
    m = b.get("metrics") or {}

    def succ(name: str) -> Mapping[str, Any]:
        return _get(m, name, "successful") or {}

    def three(name: str) -> dict[str, Any]:
        d = succ(name)
        return {"mean": _num(d.get("mean")), "median": _num(d.get("median") or _get(d, "percentiles", "p50")),
                "p99": _num(_get(d, "percentiles", "p99"))} if d else {}

    vals: dict[str, Any] = {"request_throughput": _num(succ("requests_per_second").get("mean")),
                            "output_tokens_per_s": _num(succ("output_tokens_per_second").get("mean"))}
    for name, key, scale in (("time_to_first_token_ms", "ttft", 1.0), ("request_latency", "e2el", 1e3)):
        for s, v in three(name).items():
            vals[f"{s}_{key}_ms"] = None if v is None else v * scale  # request_latency is in seconds
    itl = three("inter_token_latency_ms")
    vals["mean_itl_ms"] = itl.get("mean")
    outs = succ("output_token_count")
    if outs and _num(outs.get("min")) == _num(outs.get("max")):  # equal weights: TPOT's percentiles
        vals["median_tpot_ms"], vals["p99_tpot_ms"] = itl.get("median"), itl.get("p99")
    elif itl:
        r.skip(sid, "inter_token_latency_ms-percentiles", "GuideLLM weights each request's gap by its "
               "output tokens; with varied output lengths its percentiles are not TPOT's")
    if succ("time_per_output_token_ms"):
        r.skip(sid, "time_per_output_token_ms", "GuideLLM's TPOT counts the wait for the first token "
               "((last token - request start) / output tokens); not vLLM's TPOT")
    return vals


def _read_guidellm(r: _Reader, data: Mapping[str, Any]) -> None:
    args = data.get("args") or {}
    meta = data.get("metadata") or {}
    version = meta.get("guidellm_version") or ("0.7+" if meta.get("version") == 2 else "0.3-0.6")
    benches = data.get("benchmarks")
    if not isinstance(benches, list) or not benches:
        raise SpecError(f"{r.path}: a GuideLLM report with no benchmarks")
    model = args.get("model") or _get(benches[0], "config", "backend", "model")
    seed = _num(args.get("random_seed"))
    for i, b in enumerate(benches):
        sid = f"b{b.get('run_index', i)}"
        try:  # 0.4-0.6: args.data; 0.7+: each benchmark's config.requests
            inp, out = _guidellm_data(args if args.get("data") else _get(b, "config", "requests") or {}, r.path)
            stage = _guidellm_stage(b, r.path)
        except SpecError as e:
            r.skip(sid, "all", str(e))
            continue
        spec = RunSpec("guidellm", inp, out, (stage,), seed=42 if seed is None else int(seed))
        vals = _guidellm_values(r, b, sid)
        desc = f"{stage.process} {stage.rate:g} req/s" if stage.rate and math.isfinite(stage.rate) else \
            f"{stage.concurrency} clients" if stage.concurrency else "all at once"
        base = r.base(f"{r.path.name} (GuideLLM {version}, benchmark {i}: {desc})", model, "",
                      f"GuideLLM {version}; {inp} in / {out} out tokens; arrivals {stage.process}")
        r.add(base, spec, 0, sid, vals)


# ---- inference-perf

def _ip_length(v: Any, what: str, path: Path) -> int:
    """A length of the config: an int, or a Distribution that is fixed (type fixed, or std 0)."""
    if _num(v) is not None:
        return int(v)
    if isinstance(v, Mapping):
        lo, hi, mean = _num(v.get("min")), _num(v.get("max")), _num(v.get("mean"))
        fixed = str(v.get("type", "")).lower() == "fixed" or _num(v.get("std_dev")) == 0 or (lo is not None and lo == hi)
        if fixed and (mean is not None or lo is not None):
            return int(mean if mean is not None else lo)  # type: ignore[arg-type]
        raise SpecError(f"{path}: {what}: a {v.get('type', 'normal')} length distribution is not generated by "
                        "llmsim (fixed lengths only)")
    raise SpecError(f"{path}: {what}: {show(v)} is not a length")


_SP_ALIASES = {"num_unique_system_prompts": "num_groups", "num_users_per_system_prompt": "num_prompts_per_group"}


def _ip_data(cfg: Mapping[str, Any], path: Path) -> tuple[int, int, tuple[int, int, int, int] | None, bool, int]:
    """(input_len, output_len, prefix, multi_turn, seed) of inference-perf's `data` block."""
    data = cfg.get("data") or {}
    kind = str(data.get("type") or "")
    if kind == "shared_prefix":
        sp = {_SP_ALIASES.get(k, k): v for k, v in (data.get("shared_prefix") or {}).items()}
        g, p = int(sp.get("num_groups", 10)), int(sp.get("num_prompts_per_group", 10))
        s_len = _ip_length(sp.get("system_prompt_len", 100), "system_prompt_len", path)
        q_len = _ip_length(sp.get("question_len", 50), "question_len", path)
        o_len = _ip_length(sp.get("output_len", 50), "output_len", path)
        seed = _num(sp.get("seed"))
        return s_len + q_len, o_len, (g, p, s_len, q_len), bool(sp.get("enable_multi_turn_chat")), \
            int(seed) if seed is not None else 0
    if kind in ("random", "synthetic"):
        i_len = _ip_length(data.get("input_distribution"), "input_distribution", path)
        o_len = _ip_length(data.get("output_distribution"), "output_distribution", path)
        return i_len, o_len, None, False, 0
    raise SpecError(f"{path}: data.type {kind!r}: only shared_prefix and fixed-length random/synthetic data are "
                    "rebuilt (its prompts are not in the results)")


def _ip_stage(cfg: Mapping[str, Any], i: int, stage_file: Mapping[str, Any], path: Path) -> Stage:
    load = cfg.get("load") or {}
    kind = str(load.get("type") or "constant")
    stages = load.get("stages") or []
    st = stages[i] if i < len(stages) and isinstance(stages[i], Mapping) else {}
    workers, per = _num(load.get("num_workers")), _num(load.get("worker_max_concurrency"))
    cap = int(workers * (per or 100)) if workers else None
    if kind == "concurrent":
        n = _count(st.get("num_requests"), f"{path}: load.stages[{i}].num_requests")
        return Stage("closed", n, concurrency=_count(st.get("concurrency_level"), f"load.stages[{i}].concurrency_level"))
    if kind not in ("constant", "poisson"):
        raise SpecError(f"{path}: load.type {kind!r} is not rebuilt (constant, poisson, concurrent are)")
    rate = _num(st.get("rate")) or _num(_get(stage_file, "load_summary", "requested_rate"))
    dur = _num(st.get("duration")) or _num(_get(load, "sweep", "stage_duration"))
    if not rate or not dur:
        raise SpecError(f"{path}: stage {i}: no rate and duration in config.yaml (load.stages) or the stage file")
    n = _count(int(rate * dur) if kind == "constant" else _get(stage_file, "load_summary", "count") or int(rate * dur),
               f"{path}: stage {i} requests")
    return Stage("rescaled" if kind == "constant" else "per-second", n, rate=rate, duration_s=dur, max_concurrency=cap)


def _ip_values(d: Mapping[str, Any]) -> dict[str, Any]:
    succ = d.get("successes") or {}
    lat = succ.get("latency") or {}
    thr = succ.get("throughput") or {}
    vals: dict[str, Any] = {"request_throughput": _num(thr.get("requests_per_sec")),
                            "output_tokens_per_s": _num(thr.get("output_tokens_per_sec"))}
    for name, key in (("time_to_first_token", "ttft"), ("time_per_output_token", "tpot"),
                      ("request_latency", "e2el")):
        st = lat.get(name) or {}
        for s in _STATS:
            v = _num(st.get(s))
            vals[f"{s}_{key}_ms"] = None if v is None else v * 1e3  # seconds in the file
    itl = _num((lat.get("inter_token_latency") or {}).get("mean"))
    vals["mean_itl_ms"] = None if itl is None else itl * 1e3
    return vals


def _ip_files(path: Path) -> tuple[Path, str, dict[int, Path]]:
    """(folder, file-name prefix, {stage: stage file}) of an inference-perf run."""
    folder = path if path.is_dir() else path.parent
    name = "" if path.is_dir() else path.name
    cands = sorted(folder.glob("*summary_lifecycle_metrics.json")) + sorted(folder.glob("*stage_*_lifecycle_metrics.json"))
    prefix = ""
    for c in cands if not name else [path]:
        for tag in ("summary_lifecycle_metrics.json", "stage_"):
            if tag in c.name:
                prefix = c.name[: c.name.index(tag)]
                break
        break
    stages: dict[int, Path] = {}
    for f in folder.glob(f"{prefix}stage_*_lifecycle_metrics.json"):
        mid = f.name[len(prefix) + len("stage_"): -len("_lifecycle_metrics.json")]
        if mid.isdigit():
            stages[int(mid)] = f
    return folder, prefix, dict(sorted(stages.items()))


def _read_inference_perf(r: _Reader) -> None:
    from simulator.specs.catalog import read_yaml

    folder, prefix, stage_files = _ip_files(r.path)
    cfg_path = next((folder / n for n in ("config.yaml", "config.yml") if (folder / n).is_file()), None)
    if cfg_path is None:
        raise SpecError(f"{r.path}: no config.yaml next to the inference-perf reports; inference-perf writes it "
                        "there, and the stages' rates, durations and data settings are only in it")
    cfg = read_yaml(cfg_path)
    if not isinstance(cfg, Mapping):
        raise SpecError(f"{cfg_path}: not an inference-perf config (a mapping expected)")
    if not stage_files:
        raise SpecError(f"{r.path}: no {prefix}stage_<i>_lifecycle_metrics.json next to it: the per-stage reports are "
                        "the load points (the summary pools all stages)")
    if _get(cfg, "api", "streaming") not in (True, None):
        raise SpecError(f"{cfg_path}: api.streaming is off: inference-perf then records no first-token time")
    inp, out, pfx, multi, seed = _ip_data(cfg, cfg_path)
    server = cfg.get("server") or {}
    model = server.get("model_name") or _get(cfg, "tokenizer", "pretrained_model_name_or_path")
    engine = str(server.get("type") or "")
    eos = "" if server.get("ignore_eos") else "; ignore_eos not set: the server may have stopped before output_len"
    files = {i: load_json(f, MAX_RESULT_BYTES, "inference-perf stage report", MAX_RESULT_NODES) for i, f in stage_files.items()}
    last = max(files)
    stages = [_ip_stage(cfg, i, files.get(i) or {}, cfg_path) for i in range(last + 1)]
    spec = RunSpec("inference-perf", inp, out, tuple(stages), seed=seed, prefix=pfx, multi_turn=multi,
                   warm_later_stages=pfx is not None)
    what = (f"shared prefix {pfx[0]}x{pfx[1]} groups, {pfx[2]}+{pfx[3]} -> {out} tokens" if pfx else
            f"{inp} in / {out} out tokens")
    for i, d in files.items():
        st = stages[i]
        desc = f"{st.rate:g} req/s" if st.rate else f"{st.concurrency} clients"
        base = r.base(f"{r.path.name if r.path.is_file() else folder.name} (inference-perf, stage {i}: {desc})",
                      model, engine, f"inference-perf {what}; {st.process} arrivals{eos}")
        r.add(base, spec, i, f"stage{i}", _ip_values(d))
        if _get(d, "successes", "latency", "inter_token_latency"):
            r.skip(f"stage{i}", "inter_token_latency-percentiles", "inference-perf re-tokenises each streamed chunk "
                   "and gives its tokens the chunk's time (many ~0 gaps): only the mean is the pooled mean gap")


# ---- AIPerf

def _aiperf_lengths(ic: Mapping[str, Any], path: Path) -> tuple[int, int]:
    prompt = _get(ic, "input", "prompt") or {}
    res = []
    for key, flag in (("input_tokens", "--synthetic-input-tokens-mean"), ("output_tokens", "--output-tokens-mean")):
        d = prompt.get(key) or {}
        if _num(d.get("stddev")):
            raise SpecError(f"{path}: input_config.input.prompt.{key}.stddev {d['stddev']}: normal-distributed "
                            "lengths are not generated by llmsim (fixed lengths only)")
        mean = _num(d.get("mean"))
        if mean is None:
            raise SpecError(f"{path}: input_config.input.prompt.{key}.mean missing ({flag}): the lengths of a "
                            "dataset-driven run are not in the export")
        res.append(int(mean))
    return res[0], res[1]


def _aiperf_stage(ic: Mapping[str, Any], agg: Mapping[str, Any], path: Path) -> Stage:
    phases = ic.get("phases")
    prof = next((p for p in phases if isinstance(p, Mapping) and p.get("name") == "profiling"), {}) \
        if isinstance(phases, list) else {}
    load = {**(ic.get("loadgen") or {}), **prof}
    n = load.get("request_count") or _get(agg, "request_count", "avg")
    n = _count(n, f"{path}: request count")
    conc, rate = _num(load.get("concurrency")), _num(load.get("request_rate"))
    mode = str(load.get("request_rate_mode") or "")
    if rate:
        return Stage("constant" if mode == "constant" else "poisson", n, rate=rate,
                     max_concurrency=int(conc) if conc else None)
    if conc:
        return Stage("closed", n, concurrency=int(conc))
    raise SpecError(f"{path}: input_config: neither concurrency nor request_rate (the load point is not recorded)")


def _read_aiperf_one(r: _Reader, path: Path) -> None:
    agg = load_json(path, MAX_RESULT_BYTES, "AIPerf export", MAX_RESULT_NODES)
    if not isinstance(agg, Mapping):
        raise SpecError(f"{path}: an AIPerf export is a JSON object")
    ic = agg.get("input_config") or {}
    sid = path.parent.name if path.name == "profile_export_aiperf.json" else path.stem
    try:
        inp, out = _aiperf_lengths(ic, path)
        stage = _aiperf_stage(ic, agg, path)
    except SpecError as e:
        r.skip(sid, "all", str(e))
        return
    seed = _num(_get(ic, "input", "random_seed")) or 0
    spec = RunSpec("aiperf", inp, out, (stage,), seed=int(seed))
    names = _get(ic, "endpoint", "model_names") or [m.get("name") for m in _get(ic, "models", "items") or []
                                                    if isinstance(m, Mapping)]
    model = names[0] if names else None
    vals: dict[str, Any] = {"request_throughput": _num(_get(agg, "request_throughput", "avg")),
                            "output_tokens_per_s": _num(_get(agg, "output_token_throughput", "avg"))}
    for tag, key in (("time_to_first_token", "ttft"), ("inter_token_latency", "tpot"),
                     ("request_latency", "e2el"), ("inter_chunk_latency", "itl")):
        block = agg.get(tag) or {}
        if block.get("unit") not in (None, "ms"):
            r.skip(sid, tag, f"unit {block.get('unit')!r}, expected ms")
            continue
        for s, k in (("mean", "avg"), ("median", "p50"), ("p99", "p99")):
            vals[f"{s}_{key}_ms"] = _num(block.get(k))
    desc = f"{stage.concurrency} clients" if stage.process == "closed" else f"{stage.rate:g} req/s"
    warm = _num(_get(ic, "loadgen", "warmup_request_count"))
    note = f"AIPerf {agg.get('aiperf_version') or ''}".strip() + f"; {inp} in / {out} out tokens" + \
        (f"; {int(warm)} warm-up requests not simulated" if warm else "")
    base = r.base(f"{path.name} (AIPerf, {sid}: {desc})", model, "", note)
    r.add(base, spec, 0, sid, vals)


def _read_aiperf(r: _Reader) -> None:
    p = r.path
    if p.is_dir():
        files = [p / "profile_export_aiperf.json"] if (p / "profile_export_aiperf.json").is_file() else \
            sorted(p.glob("*/profile_export_aiperf.json"))
    else:
        files = [p]
    if not files:
        raise SpecError(f"{p}: no profile_export_aiperf.json in it or its sub-folders")
    for f in files:
        _read_aiperf_one(r, f)


# --------------------------------------------------------------------------- detection

def _is_aiperf(d: Mapping[str, Any]) -> bool:
    return "input_config" in d or any(isinstance(v, Mapping) and "unit" in v and "avg" in v for v in d.values())


def detect_format(path: str | Path) -> str:
    """One of FORMATS, from the content (a folder: inference-perf's or AIPerf's files in it)."""
    p = check_path("path", path)
    if p.is_dir():
        if list(p.glob("*lifecycle_metrics.json")):
            return "inference-perf"
        if (p / "profile_export_aiperf.json").is_file() or list(p.glob("*/profile_export_aiperf.json")):
            return "aiperf"
        raise SpecError(f"{p}: a folder without inference-perf (*lifecycle_metrics.json) or AIPerf "
                        "(profile_export_aiperf.json) results")
    head = read_head(p, 64).lstrip()
    if not head.startswith((b"{", b"[")):
        if head.startswith(b"Metric,"):
            raise SpecError(f"{p}: an AIPerf CSV export; give its profile_export_aiperf.json (same folder) instead")
        return "measurements-csv"
    if p.name.endswith("lifecycle_metrics.json"):
        return "inference-perf"
    data = load_json(p, MAX_RESULT_BYTES, "result file", MAX_RESULT_NODES)
    if isinstance(data, Mapping):
        if "benchmarks" in data:
            return "guidellm"
        if "load_summary" in data or "successes" in data:
            return "inference-perf"
        if _is_aiperf(data):
            return "aiperf"
        return "vllm"
    raise SpecError(f"{p}: a JSON list: not a GuideLLM, inference-perf summary, AIPerf or vLLM result "
                    "(inference-perf's per-request file: give its folder)")


_VLLM_ONLY = ("input_len", "output_len", "dataset")


def checkpoint_formats(model: Any, weight_dtype: str | None, activation_dtype: str | None) -> dict[str, str]:
    """A result file's weight and activation formats: the ones given (--weight-dtype,
    --activation-dtype), else the served checkpoint's (`ModelSpec.default_weight_dtype`,
    `activation_for`: DeepSeek-V3's FP8 W8A8, gpt-oss's MXFP4 W4A16), else bf16 (a model the
    catalog does not know: its row is skipped later, naming it)."""
    from simulator.specs.catalog import load_model

    try:
        w, a = load_model(model).run_formats(weight_dtype, activation_dtype) if model else (None, None)
    except SpecError:
        w, a = weight_dtype, activation_dtype
    return {"weight_dtype": w or "bf16", "activation_dtype": a or "bf16"}


def load_rows(path: str | Path, skip_bad_rows: bool = False, **settings: Any) -> tuple[list[dict], list[dict]]:
    """(rows, skipped) of a measurement CSV, a vLLM result JSON, a GuideLLM report, an
    inference-perf run or an AIPerf export (`detect_format`). `settings`: model, hardware,
    tp, pp, num_gpus, weight_dtype, activation_dtype, kv_dtype, max_num_seqs,
    max_num_batched_tokens, engine (the files of the other tools record the model, not the
    hardware); input_len/output_len apply to vLLM files only (the others state their lengths)."""
    p = check_path("path", path)
    fmt = detect_format(p)
    if fmt == "measurements-csv":
        return read_measurements(p, skip_bad_rows)
    if fmt == "vllm":
        if not settings.get("model") or not settings.get("hardware"):
            raise SpecError(f"{p}: a vLLM result JSON does not record the model or hardware; "
                            "pass --model and --hardware")
        kw = {k: v for k, v in settings.items() if k != "engine"}
        kw.update(checkpoint_formats(kw["model"], kw.get("weight_dtype"), kw.get("activation_dtype")))
        return read_vllm_result(p, **kw), []
    given = [k for k in _VLLM_ONLY if settings.get(k) is not None]
    if given:
        raise SpecError(f"{given[0]}: applies to vLLM result files; a {fmt} result states its own lengths")
    r = _Reader(p, dict(settings), [], [])
    if fmt == "guidellm":
        _read_guidellm(r, load_json(p, MAX_RESULT_BYTES, "GuideLLM report", MAX_RESULT_NODES))
    elif fmt == "inference-perf":
        _read_inference_perf(r)
    else:
        _read_aiperf(r)
    if not r.rows and not r.skipped:
        raise SpecError(f"{p}: no metrics found in this {fmt} result")
    return r.rows, r.skipped


def run_description(row: Mapping[str, Any]) -> str:
    """One line on the run a row's file describes (for reports)."""
    spec: RunSpec | None = row.get("run")
    if spec is None:
        return ""
    st = spec.stages[int(row.get("run_stage") or 0)]
    return f"{spec.tool}: {st.num_requests} requests, {st.process}" + (f" at {st.rate:g} req/s" if st.rate else "")


__all__ = ["FORMATS", "RunSpec", "Stage", "build_workload", "detect_format", "load_rows", "predict_metric",
           "run_description", "tool_metrics"]
