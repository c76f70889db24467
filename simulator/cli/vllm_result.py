"""A simulated run written as `vllm bench serve --save-result` writes a measured one.

Keys, their order and their types follow vLLM's `vllm/benchmarks/serve.py`
(vllm-project/vllm@009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1: `main_async` builds the header,
`benchmark` the rest):

* the header: `date` (``%Y%m%d-%H%M%S``), `endpoint_type`, `backend`, `label`, `model_id`,
  `tokenizer_id`, `num_prompts`, then the `--metadata KEY=VALUE` items (string values), then
  `request_rate` ("inf" when unbounded), `burstiness`, `max_concurrency` and, with a ramp-up,
  `ramp_up_strategy`, `ramp_up_start_rps`, `ramp_up_end_rps`;
* the benchmark: `duration`, `completed`, `failed`, token totals, throughputs,
  `request_goodput` (null without `--goodput`), the per-request lists `input_lens`,
  `output_lens`, `ttfts`, `itls`, `latencies`, `start_times`, `queue_times`,
  `generated_texts`, `errors` (in request order, failed requests included with 0.0 times),
  `max_output_tokens_per_s`, `max_concurrent_requests`, `rtfx`, `rps_change_events` (ramp-up
  only), and for each metric of `--percentile-metrics` (vLLM's default ttft,tpot,itl; vLLM's
  order ttft, tpot, itl, e2el, client_queue_time, e2el_including_client_queue)
  ``mean_/median_/std_/pP_{metric}_ms`` at `--metric-percentiles` (P as vLLM prints it: 99, 99.9).

Without `--save-detailed` vLLM deletes input_lens, output_lens, start_times, ttfts, itls,
generated_texts and errors (`latencies` and `queue_times` stay); so does this module.

llmsim adds what a simulation has and a measurement does not the way `--metadata` adds
keys: `llmsim_version` and `llmsim_scenario` (the scenario as compact JSON text), string
values at the metadata position, before the user's own `--metadata` items. llmsim's full
summary (MFU, KV use, ...) is `--out DIR`'s summary.json and `--json`.

What a simulation cannot know is written as vLLM writes its absence: `generated_texts` are
empty strings (no text is generated), `rtfx` is 0.0 (not an audio benchmark), a rejected
request's times are 0.0 and its `errors` entry is the rejection reason. Two values are
reconstructed, not recorded (llmsim keeps inter-token gaps pooled over requests, not per
request): a request's `itls` are its out-1 gaps taken equal (its TPOT; their sum is exactly
its E2EL - TTFT, as vLLM's are), and `max_output_tokens_per_s` counts tokens in vLLM's 1-s
buckets with each request's tokens at those evenly spaced times. The pooled gap
distribution is in the ``*_itl_ms`` keys.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from simulator.specs.checks import SpecError

if TYPE_CHECKING:  # numpy and the serving layer are imported where a result is written, so
    # that importing the CLI (llmsim --help, the option defaults read from here) needs neither
    import numpy as np

BACKEND = "llmsim"
#: vLLM's percentile metrics, in the order it writes them; the last two need a client-side
#: cap (--max-concurrency); e2el_including_client_queue also a finite rate (vLLM's rules)
PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el", "client_queue_time", "e2el_including_client_queue")
#: vLLM's default for generation backends (serve.py `default_percentile_metrics`)
DEFAULT_PERCENTILE_METRICS = "ttft,tpot,itl"
DEFAULT_METRIC_PERCENTILES = "99"
_RUN_KEYS = ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
             "request_throughput", "request_goodput", "output_throughput", "total_token_throughput")
#: what vLLM deletes from the result without --save-detailed
DETAILED_KEYS = ("input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts", "errors")


def parse_percentile_metrics(text: str) -> list[str]:
    """The metrics named, in vLLM's writing order; unknown names are a one-line error."""
    out = [t.strip().lower() for t in str(text).split(",") if t.strip()]
    for m in out:
        if m not in PERCENTILE_METRICS:
            raise SpecError(f"percentile-metrics: {m!r} is not one of {', '.join(PERCENTILE_METRICS)}")
    if not out:
        raise SpecError("percentile-metrics: no metric given (e.g. ttft,tpot,itl)")
    return [m for m in PERCENTILE_METRICS if m in out]


def parse_metric_percentiles(text: str) -> list[float]:
    out = []
    for tok in str(text).split(","):
        try:
            p = float(tok)
        except ValueError:
            raise SpecError(f"metric-percentiles: {tok.strip()!r} is not a number (e.g. 25,50,99)") from None
        if not 0 < p < 100:
            raise SpecError(f"metric-percentiles: {p:g} must be in (0, 100)")
        out.append(p)
    return out


def parse_metadata(items: Any) -> list[tuple[str, str]]:
    """vLLM's `--metadata KEY=VALUE ...`: split at the first '=', both sides stripped, the
    value kept as text (vLLM raises on an item without '='; here a one-line error)."""
    out = []
    for item in items or ():
        key, sep, value = str(item).partition("=")
        if not sep or not key.strip():
            raise SpecError(f"metadata: {str(item)!r} is not KEY=VALUE (e.g. --metadata gpu=h100 tp=1)")
        out.append((key.strip(), value.strip()))
    return out


def _plain(obj: Any) -> Any:
    """JSON-safe: non-finite floats as "inf"/"-inf"/null (the scenario's rate may be inf)."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    return obj


def _p_word(p: float) -> str:
    return str(int(p)) if int(p) == p else str(p)  # vLLM's spelling: 99, 99.9


def model_id(model: Any, given: Any = None) -> str:
    """The id vLLM would record: `--model` as given when it is a Hugging Face id (vLLM writes
    args.model verbatim), else the catalog model's Hugging Face id, else its llmsim id."""
    from pathlib import Path

    if isinstance(given, str) and given.count("/") == 1 and not Path(given).exists():
        return given
    return getattr(model, "hf_id", "") or getattr(model, "id", str(model))


# --------------------------------------------------------------------------- per request

def per_request(res: Any) -> dict[str, Any]:
    """vLLM's per-request lists of a SimResult (module docstring), in request order."""
    import numpy as np

    from simulator.serving.records import COMPLETED

    ok = np.asarray(res.status) == COMPLETED
    arr = np.asarray(res.arrival_s, dtype=float)
    ttft = np.where(ok, np.asarray(res.first_token_s) - arr, 0.0)
    e2el = np.where(ok, np.asarray(res.finish_s) - arr, 0.0)
    out_len = np.where(ok, np.asarray(res.output_len), 0).astype(int)
    queue = np.zeros(len(arr)) if res.client_queue_s is None else np.nan_to_num(np.asarray(res.client_queue_s))
    itls: list[list[float]] = []
    for i in range(len(arr)):
        m = int(out_len[i])
        gap = (e2el[i] - ttft[i]) / (m - 1) if m > 1 else 0.0
        itls.append([float(gap)] * (m - 1) if ok[i] else [])
    reasons = res.reasons or {}
    return {
        "input_lens": [int(x) for x in res.input_len],
        "output_lens": [int(x) for x in out_len],
        "ttfts": [float(x) for x in ttft],
        "itls": itls,
        "latencies": [float(x) for x in e2el],
        "start_times": [float(x) for x in np.nan_to_num(arr)],
        "queue_times": [float(x) for x in queue],
        "generated_texts": [""] * len(arr),
        "errors": ["" if ok[i] else str(reasons.get(i, "rejected")) for i in range(len(arr))],
    }


def max_output_tokens_per_s(start: np.ndarray, first: np.ndarray, finish: np.ndarray,
                            out_len: np.ndarray) -> float:
    """vLLM's peak output tokens in a 1-s bucket (serve.py `calculate_metrics`): buckets start
    at the earliest start time; every token of a successful request counts once, its first at
    start + TTFT and the rest, here, evenly spaced up to its finish (module docstring).
    Arrays hold the successful requests only."""
    import numpy as np

    if len(start) == 0:
        return 0.0
    s0 = float(np.min(start))
    span = int(math.ceil(float(np.max(finish)) - s0)) + 1
    f = first - s0
    e = finish - s0
    m = np.maximum(np.asarray(out_len, dtype=np.int64), 1)
    b0 = np.floor(f).astype(np.int64)
    b1 = np.floor(e).astype(np.int64)
    per = b1 - b0 + 1
    idx = np.repeat(np.arange(len(f)), per)
    bucket = np.repeat(b0, per) + (np.arange(int(per.sum())) - np.repeat(np.cumsum(per) - per, per))
    step = np.where(m > 1, (e - f) / np.maximum(m - 1, 1), 0.0)

    def below(t: np.ndarray) -> np.ndarray:
        """Tokens of request idx strictly before relative time t (k >= 0 with f + k step < t)."""
        fi, si, mi = f[idx], step[idx], m[idx]
        with np.errstate(divide="ignore", invalid="ignore"):
            k = np.where(si > 0, np.ceil((t - fi) / np.where(si > 0, si, 1.0)), np.where(fi < t, mi, 0))
        return np.clip(k, 0, mi)

    counts = below(bucket + 1.0) - below(bucket.astype(float))
    hist = np.bincount(np.clip(bucket, 0, span - 1), weights=counts, minlength=span)
    return float(hist.max())


def max_concurrent_requests(start: np.ndarray, finish: np.ndarray) -> int:
    """vLLM's peak of in-flight successful requests: a sweep over [start, finish), a
    departure before an arrival at the same time (serve.py, `events.sort`)."""
    import numpy as np

    if len(start) == 0:
        return 0
    times = np.concatenate([start, finish])
    delta = np.concatenate([np.ones(len(start), dtype=np.int64), -np.ones(len(finish), dtype=np.int64)])
    order = np.lexsort((delta, times))
    return int(np.cumsum(delta[order]).max())


def _ramp(scenario: Any) -> tuple[str, float, float] | None:
    strategy = getattr(scenario, "ramp_up_strategy", None)
    if not strategy:
        return None
    return str(strategy), scenario.ramp_up_start_rps, scenario.ramp_up_end_rps


def rps_change_events(scenario: Any, send_s: np.ndarray, start: datetime) -> list[dict[str, Any]]:
    """vLLM's `rps_change_events` of a ramp-up: one {rps, timestamp} per whole req/s reached,
    stamped when the first request sent at that rate goes out (serve.py `benchmark`; its rate
    per request is `_get_current_request_rate`)."""
    ramp = _ramp(scenario)
    if ramp is None:
        return []
    strategy, lo, hi = ramp
    n = len(send_s)
    events = [{"rps": int(lo), "timestamp": start.isoformat()}]
    last = int(lo)
    for i in range(n):
        progress = i / max(n - 1, 1)
        rate = lo + (hi - lo) * progress if strategy == "linear" else lo * (hi / lo) ** progress
        if int(rate) > last:
            stamp = (start + timedelta(seconds=float(send_s[i]))).isoformat()
            events.extend({"rps": r, "timestamp": stamp} for r in range(last + 1, int(rate) + 1))
            last = int(rate)
    return events


# --------------------------------------------------------------------------- the file

def _values_stats(values: np.ndarray, pcts: list[float]) -> dict[str, float]:
    """vLLM's `process_one_metric` on a list of seconds (an empty list is the scalar 0)."""
    import numpy as np

    v = values if len(values) else np.zeros(1)
    out = {"mean": float(np.mean(v)) * 1e3, "median": float(np.median(v)) * 1e3, "std": float(np.std(v)) * 1e3}
    out.update({f"p{p:g}": float(np.percentile(v, p)) * 1e3 for p in pcts})
    return out


def _metric_stats(m: str, stats: dict[str, Any], detail: dict[str, Any], scenario: Any,
                  pcts: list[float]) -> dict[str, float] | None:
    """mean/median/std/pP (ms) of one percentile metric as vLLM writes it, None where vLLM
    writes nothing. A statistic of an empty list is 0.0, as vLLM's `np.mean(x or 0)`."""
    import numpy as np

    capped = scenario.concurrency is not None
    if m == "client_queue_time" and capped and "mean_client_queue_time_ms" not in stats:
        # rate inf + --max-concurrency: every task is created at t = 0 and waits for a slot;
        # llmsim's closed loop sends request i when a slot frees, at its arrival time
        send = np.asarray(detail["start_times"])
        ok = np.array([not e for e in detail["errors"]], dtype=bool)
        return _values_stats((send - (send.min() if len(send) else 0.0))[ok], pcts)
    if f"mean_{m}_ms" not in stats:
        return None
    out = {k: stats[f"{k}_{m}_ms"] for k in ("mean", "median", "std")}
    out.update({f"p{p:g}": stats[f"p{p:g}_{m}_ms"] for p in pcts})
    return {k: (float(v) if v is not None and math.isfinite(float(v)) else 0.0) for k, v in out.items()}


def check_result_options(scenario: Any, percentile_metrics: str | None, metric_percentiles: str,
                         metadata: Any) -> tuple[list[str], list[float], list[tuple[str, str]]]:
    """The result-file options parsed and checked against the scenario (SpecError if bad):
    run before the simulation, so a bad one never costs the run."""
    metrics = parse_percentile_metrics(percentile_metrics or DEFAULT_PERCENTILE_METRICS)
    pcts = parse_metric_percentiles(metric_percentiles)
    meta = parse_metadata(metadata)
    if "e2el_including_client_queue" in metrics and not (scenario.concurrency is not None
                                                          and scenario.rate is not None):
        raise SpecError("percentile-metrics: 'e2el_including_client_queue' needs --max-concurrency "
                        "and a finite --request-rate (vLLM writes it only then)")
    if "client_queue_time" in metrics and scenario.concurrency is None:
        raise SpecError("percentile-metrics: 'client_queue_time' needs --max-concurrency (a client-side cap)")
    return metrics, pcts, meta


def result_header(scenario: Any, model: Any, *, label: str | None, when: datetime,
                  version: str = "", metadata: Any = ()) -> dict[str, Any]:
    """The keys of the result known before the run (those `result_filename` reads among them),
    in vLLM's order."""
    rate = scenario.rate if scenario.rate is not None else math.inf
    mid = model_id(model, scenario.model)
    out: dict[str, Any] = {
        "date": when.strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": BACKEND,
        "backend": BACKEND,
        "label": label,
        "model_id": mid,
        "tokenizer_id": mid,
        "num_prompts": scenario.num_requests,
    }
    out["llmsim_version"] = version
    out["llmsim_scenario"] = json.dumps(_plain(scenario.as_dict()), separators=(",", ":"), default=str)
    for k, v in metadata:  # after the header, before the traffic keys (vLLM's order; later keys win)
        out[k] = v
    out["request_rate"] = rate if math.isfinite(rate) else "inf"
    out["burstiness"] = scenario.burstiness
    out["max_concurrency"] = scenario.concurrency
    ramp = _ramp(scenario)
    if ramp is not None:
        out["ramp_up_strategy"], out["ramp_up_start_rps"], out["ramp_up_end_rps"] = ramp
    return out


def result_json(scenario: Any, res: Any, model: Any, *, version: str,
                percentile_metrics: str | None = None, metric_percentiles: str = DEFAULT_METRIC_PERCENTILES,
                label: str | None = None, save_detailed: bool = False, metadata: Any = (),
                now: datetime | None = None) -> dict[str, Any]:
    """The result dict (see the module docstring). `res`: the SimResult."""
    import numpy as np

    from simulator.metrics.summary import summarize
    from simulator.serving.records import COMPLETED
    from simulator.serving.speculative import spec_decode_summary

    metrics, pcts, meta = check_result_options(scenario, percentile_metrics, metric_percentiles, metadata)
    when = now or datetime.now()
    out = result_header(scenario, model, label=label, when=when, version=version, metadata=meta)
    ramp = _ramp(scenario)
    stats = summarize(res, scenario.slos_s, percentiles=tuple(pcts))
    bench: dict[str, Any] = {k: stats.get(k) for k in _RUN_KEYS}
    # speculative decoding: vLLM's spec_decode_* keys, present only when it ran (as in vLLM)
    if "speculative" in res.meta:
        bench.update(spec_decode_summary(res.meta["speculative"]))
    detail = per_request(res)
    ok = np.asarray(res.status) == COMPLETED
    for k in ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "queue_times",
              "generated_texts", "errors"):
        bench[k] = detail[k]
    arr = np.asarray(res.arrival_s, dtype=float)[ok]
    first = np.asarray(res.first_token_s, dtype=float)[ok]
    fin = np.asarray(res.finish_s, dtype=float)[ok]
    bench["max_output_tokens_per_s"] = max_output_tokens_per_s(arr, first, fin, np.asarray(res.output_len)[ok])
    bench["max_concurrent_requests"] = max_concurrent_requests(arr, fin)
    bench["rtfx"] = 0.0
    if ramp is not None:
        bench["rps_change_events"] = rps_change_events(scenario, np.asarray(res.arrival_s, dtype=float), when)
    for m in metrics:
        st = _metric_stats(m, stats, detail, scenario, pcts)
        if st is None:
            continue
        for k in ("mean", "median", "std"):
            bench[f"{k}_{m}_ms"] = st[k]
        for p in pcts:
            bench[f"p{_p_word(p)}_{m}_ms"] = st[f"p{p:g}"]
    out = {**out, **bench}  # vLLM: {**result_json, **benchmark_result}
    if not save_detailed:
        for k in DETAILED_KEYS:
            out.pop(k, None)
    return out


def result_filename(result: dict[str, Any]) -> str:
    """vLLM's default file name for this result (serve.py `compute_result_filename`)."""
    conc = f"-concurrency{result['max_concurrency']}" if result["max_concurrency"] is not None else ""
    base = str(result["model_id"]).split("/")[-1]
    label = result["label"] or result["backend"]
    if result.get("ramp_up_strategy"):
        return (f"{label}-ramp-up-{result['ramp_up_strategy']}-{result['ramp_up_start_rps']}qps-"
                f"{result['ramp_up_end_rps']}qps{conc}-{base}-{result['date']}.json")
    rate = result["request_rate"]
    rate_word = "inf" if rate == "inf" else str(float(rate))
    return f"{label}-{rate_word}qps{conc}-{base}-{result['date']}.json"


__all__ = ["result_json", "result_header", "check_result_options", "result_filename", "model_id", "parse_percentile_metrics", "parse_metadata",
           "parse_metric_percentiles", "per_request", "max_output_tokens_per_s", "max_concurrent_requests",
           "rps_change_events", "DEFAULT_PERCENTILE_METRICS", "DEFAULT_METRIC_PERCENTILES", "DETAILED_KEYS"]
