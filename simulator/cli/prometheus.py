"""A simulated run as Prometheus metrics under vLLM V1's names: a time series, a snapshot, a
live replay.

So that the Grafana dashboards vLLM users already have (they query `vllm:*` series) show a
simulated run, `run_series(res, ...)` samples what vLLM's `PrometheusStatLogger`
(vllm-project/vllm@005a810b: vllm/v1/metrics/loggers.py) would have exported, every scrape
interval of simulated time, with its names, types, labels and histogram buckets. Counters and
histograms are cumulative from t = 0 (the first sample, all zero), so `rate()`,
`increase()` and `histogram_quantile(rate(...))` work on them. Three ways out:

* `openmetrics_text(series, start_unix_s)`: every sample with its timestamp (seconds, as
  OpenMetrics has them), ending in `# EOF`: what `promtool tsdb create-blocks-from
  openmetrics` backfills (`llmsim simulate --metrics-out`);
* `text_snapshot(series)`: one sample per series, no timestamps, in the text format a
  scrape returns (0.0.4): what vLLM's /metrics would show at the end of the run (`promtool
  check metrics` reads it);
* `serve_replay(series, port, speed)`: the run replayed at `speed` x on
  127.0.0.1:PORT/metrics (prometheus_client serves it).

What is observed when (vLLM's moments, vllm/v1/metrics/stats.py and loggers.py):

* at a request's first token: `vllm:time_to_first_token_seconds`, `vllm:prompt_tokens_total`
  (its prompt) and one `vllm:generation_tokens_total`;
* at every later token (`SimResult.itl_timed`: the step that emitted it): one
  `vllm:generation_tokens_total` and one inter-token gap in `vllm:inter_token_latency_seconds`
  and its older name `vllm:time_per_output_token_seconds` (the same data); a speculative
  verify step's chunk of n tokens is one gap and n `vllm:generation_tokens_total`
  (`SimResult.merged_timed`), as vLLM streams it;
* at a request's finish: `vllm:request_success_total{finished_reason="length"}` (bench
  requests stop at max_tokens), `vllm:e2e_request_latency_seconds`,
  `vllm:request_queue_time_seconds` (arrival to first scheduled),
  `vllm:request_inference_time_seconds` (first scheduled to finish),
  `vllm:request_prefill_time_seconds` (first scheduled to first token),
  `vllm:request_decode_time_seconds` (first token to finish),
  `vllm:request_time_per_output_token_seconds` (requests of 2+ tokens), the token-count
  histograms `vllm:request_prompt_tokens`, `vllm:request_generation_tokens`,
  `vllm:request_max_num_generation_tokens` (n = 1: the request's own generation tokens),
  `vllm:request_params_max_tokens` (`vllm bench serve` sends max_tokens = output length) and
  `vllm:request_params_n` (1), and `vllm:num_preemptions_total` (the request's preemptions:
  llmsim keeps their count, not their moments);
* at a request's first scheduling: `vllm:prefix_cache_queries_total` (its prompt tokens) and
  `vllm:prefix_cache_hits_total` (its cached tokens; 0 with prefix caching off);
* gauges, at each sample time: the engine step in progress then (the timeline row whose step
  spans the time; an idle engine reads 0): `vllm:num_requests_running` (the step's batch),
  `vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc` and its deprecated name
  `vllm:gpu_cache_usage_perc`. A timeline decimated on a long run (a row per k steps) is read
  sample-and-hold instead.

llmsim adds three counters of its own, per engine, from the timeline (at each row's end time;
scaled by the run's busy time over the rows' when the timeline was decimated):
`llmsim_busy_seconds_total` (simulated seconds in steps), `llmsim_mfu_busy_seconds_total` and
`llmsim_mbu_busy_seconds_total` (sum over steps of MFU x step time, MBU x step time):
`rate(llmsim_mfu_busy_seconds_total[w]) / rate(llmsim_busy_seconds_total[w])` is the busy-time
MFU over the window (what `simulate` prints as mfu_mean), `rate(llmsim_mfu_busy_seconds_total[w])`
alone the MFU over wall time.

Labels are vLLM's: `model_name` and `engine`. Each replica is one engine (`engine="0"`,
`"1"`, ...), every family split the same way; a disaggregated run's engines are
`prefill-<i>` and `decode-<j>` (request histograms on the decode engine that finished them).
Bucket boundaries are vLLM's (seconds; token counts in 1-2-5 steps up to max_model_len).

An observation at time o is in every sample at t > o; the samples are t_k = k W for
k = 0..K, K = floor(end / W) + 1, so the last sample holds the whole run.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simulator.specs.checks import SpecError

#: vllm/v1/metrics/loggers.py bucket boundaries (seconds)
TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                  7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                 10.0, 20.0, 40.0, 80.0)
REQUEST_LATENCY_BUCKETS_S = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                             50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
#: vllm:request_params_n buckets (loggers.py)
N_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0)
#: the default scrape interval of the time series (seconds of simulated time): Prometheus's
#: own default `scrape_interval` is 1m, vLLM's example prometheus.yaml scrapes every 5 s, 15 s
#: is the common production setting and Grafana's default $__rate_interval floor (4 x 15 s)
DEFAULT_INTERVAL_S = 15.0


def buckets_1_2_5(max_value: int) -> list[float]:
    """vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, ... up to max_value."""
    out: list[float] = []
    exponent = 0
    while True:
        for m in (1, 2, 5):
            v = m * 10**exponent
            if v > max_value:
                return out
            out.append(float(v))
        exponent += 1


# ---------------------------------------------------------------------------- the series


@dataclass
class Series:
    """One label set of a family over the sample times: `values` (K + 1,) for a counter or a
    gauge; for a histogram `buckets` (cumulative counts, (K + 1, len(bounds) + 1), the last
    column +Inf = the count) and `sums` (K + 1,)."""

    labels: dict[str, str]
    values: np.ndarray | None = None
    buckets: np.ndarray | None = None
    sums: np.ndarray | None = None


@dataclass
class Family:
    """A metric family: `name` without the `_total` of a counter's samples."""

    name: str
    kind: str  # "counter" | "gauge" | "histogram"
    doc: str
    bounds: tuple[float, ...] = ()
    series: list[Series] = field(default_factory=list)


@dataclass
class RunSeries:
    """A run sampled every `interval_s` of simulated time: `times_s` (K + 1,), the families."""

    times_s: np.ndarray
    interval_s: float
    families: list[Family]

    def family(self, name: str) -> Family:
        for f in self.families:
            if f.name == name:
                return f
        raise KeyError(name)


class _Grid:
    """Sample k at t_k = k W: an observation at o is in samples k >= floor(o / W) + 1."""

    def __init__(self, interval_s: float, end_s: float) -> None:
        self.W = interval_s
        self.K = int(math.floor(end_s / interval_s)) + 1
        self.times = np.arange(self.K + 1, dtype=float) * interval_s

    def first_sample(self, t: np.ndarray) -> np.ndarray:
        k = np.floor(np.asarray(t, dtype=float) / self.W).astype(np.int64) + 1
        return np.clip(k, 1, self.K)

    def counter(self, t: np.ndarray, amounts: np.ndarray | float = 1.0) -> np.ndarray:
        """Cumulative sum of `amounts` observed at times t, at every sample."""
        w = np.broadcast_to(np.asarray(amounts, dtype=float), np.shape(t))
        return np.bincount(self.first_sample(t), weights=w, minlength=self.K + 1).cumsum()

    def histogram(self, t: np.ndarray, values: np.ndarray, bounds: Sequence[float],
                  weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(cumulative bucket counts (K + 1, nb + 1), cumulative sums (K + 1,)) of `values`
        observed at times t (le: upper bound inclusive, vLLM's prometheus_client)."""
        v = np.asarray(values, dtype=float)
        w = np.ones(len(v)) if weights is None else np.asarray(weights, dtype=float)
        k = self.first_sample(t)
        nb = len(bounds) + 1
        b = np.searchsorted(np.asarray(bounds, dtype=float), v, side="left")  # first bound >= v
        flat = np.bincount(k * nb + b, weights=w, minlength=(self.K + 1) * nb)
        counts = flat.reshape(self.K + 1, nb).cumsum(axis=0).cumsum(axis=1)
        sums = np.bincount(k, weights=v * w, minlength=self.K + 1).cumsum()
        return counts, sums


def _end_time(res: Any) -> float:
    """The last moment anything happened in the run (s of simulated time)."""
    cands = [0.0]
    for a in (res.finish_s, res.first_token_s, res.arrival_s, res.scheduled_s):
        if a is not None and len(a) and np.isfinite(a).any():
            cands.append(float(np.nanmax(a)))
    if len(res.timeline):
        cands.append(float(res.timeline["time_s"].max()))
    if res.itl_timed is not None and len(res.itl_timed[0]):
        cands.append(float(res.itl_timed[0].max()))
    return max(cands)


def sample_interval(res: Any, interval_s: float | None = None, points: int | None = None) -> float:
    """The sample interval: `interval_s` (simulated seconds), or the one that spreads `points`
    samples over the run (t = 0 to its end), or DEFAULT_INTERVAL_S."""
    if interval_s is not None and points is not None:
        raise SpecError("--metrics-interval and --metrics-points: give one, not both")
    if points is not None:
        if not isinstance(points, int) or points < 2:
            raise SpecError(f"--metrics-points: {points!r} must be an integer >= 2")
        end = _end_time(res)
        # end / W just under points - 1: samples 0 .. points - 1, the last one past the end
        return max(end, 1e-9) * (1 + 1e-9) / (points - 1)
    W = DEFAULT_INTERVAL_S if interval_s is None else interval_s
    if not (isinstance(W, (int, float)) and math.isfinite(W) and W > 0):
        raise SpecError(f"--metrics-interval: {interval_s!r} must be a number of seconds > 0")
    return float(W)


#: the most samples a series may have (a sample is ~25 lines per histogram and engine)
MAX_SAMPLES = 100_000


def run_series(res: Any, model_name: str, interval_s: float | None = None,
               points: int | None = None) -> RunSeries:
    """The run `res` (simulated with `itl_times=True`) sampled every `interval_s` seconds of
    simulated time, or at `points` evenly spaced samples (module docstring)."""
    if res.itl_timed is None:
        raise SpecError("a time series of the run needs the time of every token: simulate with "
                        "itl_times=True (Scenario.run(itl_times=True))")
    W = sample_interval(res, interval_s, points)
    end = _end_time(res)
    if end / W + 2 > MAX_SAMPLES:
        raise SpecError(f"--metrics-interval: {W:g} s gives {end / W + 2:.4g} samples over the "
                        f"{end:.6g} s run, more than {MAX_SAMPLES}; use a longer interval")
    grid = _Grid(W, end)
    fams: dict[str, Family] = {}
    for engine, sel in _request_engines(res):
        labels = {"model_name": model_name, "engine": engine}
        _request_families(fams, grid, res, sel, labels)
        _token_counters(fams, grid, res, sel, labels, _itl_engine(res, engine))
    tl = res.timeline
    scale = _decimation_scale(res)
    for engine, rows in _timeline_engines(tl):
        labels = {"model_name": model_name, "engine": engine}
        _gauges(fams, grid, rows, labels, decimated=scale != 1.0)
        _busy_counters(fams, grid, rows, labels, scale)
    return RunSeries(grid.times, W, list(fams.values()))


def _request_engines(res: Any) -> Iterator[tuple[str, np.ndarray]]:
    """(engine label, mask of its requests) for every engine that served requests."""
    prefix = "decode-" if res.meta.get("disagg") else ""
    n_rep = int(res.meta.get("decode_replicas", res.meta.get("num_replicas", 1)))
    seen = set(np.unique(res.replica[res.replica >= 0]).tolist())
    for r in sorted(seen | set(range(min(n_rep, len(res.replica))))):
        yield f"{prefix}{r}", res.replica == r


def _itl_engine(res: Any, engine: str) -> np.ndarray:
    r = int(engine.rsplit("-", 1)[-1])
    return res.itl_timed[1] == r


def _timeline_engines(tl: Any) -> Iterator[tuple[str, Any]]:
    if "pool" in tl.columns:  # disaggregated: prefill-<i>, decode-<j>
        for (pool, rep), rows in tl.groupby(["pool", "replica"], sort=True):
            yield f"{pool}-{int(rep)}", rows
    else:
        for rep, rows in tl.groupby("replica", sort=True):
            yield str(int(rep)), rows


def _add(fams: dict[str, Family], name: str, kind: str, doc: str, s: Series,
         bounds: Sequence[float] = ()) -> None:
    f = fams.get(name)
    if f is None:
        f = fams[name] = Family(name, kind, doc, tuple(float(b) for b in bounds))
    f.series.append(s)


def _hist(fams: dict[str, Family], grid: _Grid, name: str, doc: str, bounds: Sequence[float],
          labels: dict[str, str], t: np.ndarray, v: np.ndarray, w: np.ndarray | None = None) -> None:
    counts, sums = grid.histogram(t, v, bounds, w)
    _add(fams, name, "histogram", doc, Series(dict(labels), buckets=counts, sums=sums), bounds)


def _counter(fams: dict[str, Family], grid: _Grid, name: str, doc: str, labels: dict[str, str],
             t: np.ndarray, amounts: np.ndarray | float = 1.0) -> None:
    _add(fams, name, "counter", doc, Series(dict(labels), values=grid.counter(t, amounts)))


def _request_families(fams: dict[str, Family], grid: _Grid, res: Any, sel: np.ndarray,
                      labels: dict[str, str]) -> None:
    """Histograms and counters observed per request (module docstring), one engine."""
    from simulator.serving.records import COMPLETED

    done = sel & (res.status == COMPLETED)
    arr, first, fin = res.arrival_s[done], res.first_token_s[done], res.finish_s[done]
    sched = res.scheduled_s[done] if res.scheduled_s is not None else arr
    out_len = res.output_len[done].astype(float)
    in_len = res.input_len[done].astype(float)
    lat = REQUEST_LATENCY_BUCKETS_S
    mml = int(res.meta.get("max_model_len") or max(int(res.input_len.max(initial=1)) + int(res.output_len.max(initial=1)), 1))
    tok = buckets_1_2_5(mml)
    _hist(fams, grid, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
          TTFT_BUCKETS_S, labels, first, first - arr)
    for name, doc, bounds, v in (
            ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", lat, fin - arr),
            ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", lat, sched - arr),
            ("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", lat, fin - sched),
            ("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", lat, first - sched),
            ("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", lat, fin - first),
            ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tok, in_len),
            ("vllm:request_generation_tokens", "Number of generation tokens processed.", tok, out_len),
            ("vllm:request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens.",
             tok, out_len),
            ("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", tok, out_len),
            ("vllm:request_params_n", "Histogram of the n request parameter.", N_BUCKETS, np.ones(len(fin)))):
        _hist(fams, grid, name, doc, bounds, labels, fin, v)
    multi = out_len > 1  # vLLM observes per-request TPOT only for requests of 2+ tokens
    _hist(fams, grid, "vllm:request_time_per_output_token_seconds",
          "Histogram of time_per_output_token_seconds per request.", ITL_BUCKETS_S, labels,
          fin[multi], (fin - first)[multi] / (out_len[multi] - 1))
    _counter(fams, grid, "vllm:request_success", "Count of successfully processed requests.",
             {**labels, "finished_reason": "length"}, fin)
    _counter(fams, grid, "vllm:num_preemptions", "Cumulative number of preemption from the engine.",
             labels, fin, res.preemptions[done].astype(float))
    # prefix cache: looked up when a request is first scheduled (its prompt; hits = cached)
    ssel = sel & np.isfinite(res.scheduled_s if res.scheduled_s is not None else res.first_token_s)
    st = (res.scheduled_s if res.scheduled_s is not None else res.first_token_s)[ssel]
    hits = res.cached_tokens[ssel].astype(float) if res.cached_tokens is not None else np.zeros(len(st))
    _counter(fams, grid, "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
             labels, st, res.input_len[ssel].astype(float))
    _counter(fams, grid, "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
             labels, st, hits)


def _token_counters(fams: dict[str, Family], grid: _Grid, res: Any, sel: np.ndarray,
                    labels: dict[str, str], itl_sel: np.ndarray) -> None:
    """Prompt and generation tokens as the engine emits them, and the inter-token gaps."""
    fsel = sel & np.isfinite(res.first_token_s)  # every request that got its first token
    first = res.first_token_s[fsel]
    _counter(fams, grid, "vllm:prompt_tokens", "Number of prefill tokens processed.", labels, first,
             res.input_len[fsel].astype(float))
    t, _, v, c = (a[itl_sel] for a in res.itl_timed)
    gen = grid.counter(first) + grid.counter(t, c.astype(float))
    if res.merged_timed is not None:  # speculative chunks: tokens beyond each chunk's first
        mt, mr, mn = res.merged_timed
        r = int(labels["engine"].rsplit("-", 1)[-1])
        gen = gen + grid.counter(mt[mr == r], mn[mr == r].astype(float))
    _add(fams, "vllm:generation_tokens", "counter", "Number of generation tokens processed.",
         Series(dict(labels), values=gen))
    for name in ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"):
        _hist(fams, grid, name, "Histogram of inter-token latency in seconds.", ITL_BUCKETS_S, labels,
              t, v, c.astype(float))


def _decimation_scale(res: Any) -> float:
    """1 for a complete timeline; else the run's busy time over the rows' (a decimated
    timeline keeps one row per k steps)."""
    rows = float(res.timeline["busy_s"].sum()) if len(res.timeline) else 0.0
    busy = float(res.meta.get("busy_s", rows) or 0.0)
    return busy / rows if rows > 0 and busy > rows * (1 + 1e-9) else 1.0


def _gauges(fams: dict[str, Family], grid: _Grid, rows: Any, labels: dict[str, str],
            decimated: bool) -> None:
    """Running, waiting and KV usage at each sample: the step in progress then (0 when idle)."""
    end = rows["time_s"].to_numpy(dtype=float)
    start = end - rows["busy_s"].to_numpy(dtype=float)
    t = grid.times
    j = np.searchsorted(end, t, side="left")  # the first step ending at or after t
    jj = np.minimum(j, len(end) - 1)
    if decimated:  # rows are a sample: hold the last row before t, until the engine's last step
        jj = np.clip(np.searchsorted(end, t, side="right") - 1, 0, len(end) - 1)
        busy = (t >= end[0]) & (t <= end[-1])
    else:
        busy = (j < len(end)) & (start[jj] <= t)
    for name, col, doc in (
            ("vllm:num_requests_running", "batch_size", "Number of requests in model execution batches."),
            ("vllm:num_requests_waiting", "queue_length", "Number of requests waiting to be processed."),
            ("vllm:kv_cache_usage_perc", "kv_utilization", "KV-cache usage. 1 means 100 percent usage."),
            ("vllm:gpu_cache_usage_perc", "kv_utilization",
             "GPU KV-cache usage. 1 means 100 percent usage. DEPRECATED: Use vllm:kv_cache_usage_perc instead.")):
        vals = np.where(busy, rows[col].to_numpy(dtype=float)[jj], 0.0)
        _add(fams, name, "gauge", doc, Series(dict(labels), values=vals))


def _busy_counters(fams: dict[str, Family], grid: _Grid, rows: Any, labels: dict[str, str],
                   scale: float) -> None:
    t = rows["time_s"].to_numpy(dtype=float)
    busy = rows["busy_s"].to_numpy(dtype=float) * scale
    _counter(fams, grid, "llmsim_busy_seconds", "Simulated seconds this engine spent in steps (llmsim).",
             labels, t, busy)
    for col, doc in (("mfu", "Sum over steps of MFU x step time (llmsim); rate over the rate of "
                             "llmsim_busy_seconds_total is the busy-time MFU."),
                     ("mbu", "Sum over steps of MBU x step time (llmsim); rate over the rate of "
                             "llmsim_busy_seconds_total is the busy-time MBU.")):
        u = rows[col].to_numpy(dtype=float) if col in rows.columns else np.zeros(len(t))
        _counter(fams, grid, f"llmsim_{col}_busy_seconds", doc, labels, t, np.nan_to_num(u) * busy)


# ---------------------------------------------------------------------------- writing


def _num(x: float) -> str:
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    if math.isnan(x):
        return "NaN"
    if float(x).is_integer() and abs(x) < 2**53:
        return str(int(x))
    return repr(float(x))


def _le(b: float) -> str:
    return "+Inf" if math.isinf(b) else repr(float(b))


def _labels(labels: dict[str, str]) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

    return "{" + ",".join(f'{k}="{esc(str(v))}"' for k, v in labels.items()) + "}"


def _doc(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _sample_lines(f: Family, s: Series, k: int, ts: str) -> Iterator[str]:
    """The sample lines of series s at sample k (`ts`: " <timestamp>" or "")."""
    if f.kind == "histogram":
        assert s.buckets is not None and s.sums is not None
        for b, n in zip((*f.bounds, math.inf), s.buckets[k], strict=True):
            yield f"{f.name}_bucket{_labels({**s.labels, 'le': _le(b)})} {_num(n)}{ts}"
        yield f"{f.name}_count{_labels(s.labels)} {_num(s.buckets[k][-1])}{ts}"
        yield f"{f.name}_sum{_labels(s.labels)} {_num(s.sums[k])}{ts}"
    else:
        assert s.values is not None
        suffix = "_total" if f.kind == "counter" else ""
        yield f"{f.name}{suffix}{_labels(s.labels)} {_num(s.values[k])}{ts}"


def openmetrics_text(series: RunSeries, start_unix_s: float) -> str:
    """Every sample of the run with its timestamp (`start_unix_s` + simulated time, seconds),
    one family after another, each series' samples in time order, then `# EOF`."""
    stamps = [f" {start_unix_s + t:.3f}" for t in series.times_s]
    out: list[str] = []
    for f in series.families:
        out += [f"# HELP {f.name} {_doc(f.doc)}", f"# TYPE {f.name} {f.kind}"]
        for s in f.series:
            for k, ts in enumerate(stamps):
                out.extend(_sample_lines(f, s, k, ts))
    out.append("# EOF")
    return "\n".join(out) + "\n"


def text_snapshot(series: RunSeries, k: int = -1) -> str:
    """Sample k (default: the last, the whole run) in the text exposition format a scrape of
    vLLM's /metrics returns (0.0.4: a counter's TYPE line names its `_total` sample)."""
    out: list[str] = []
    for f in series.families:
        name = f"{f.name}_total" if f.kind == "counter" else f.name
        out += [f"# HELP {name} {_doc(f.doc)}", f"# TYPE {name} {f.kind}"]
        for s in f.series:
            out.extend(_sample_lines(f, s, k, ""))
    return "\n".join(out) + "\n"


def prometheus_text(res: Any, model_name: str) -> str:
    """The end-of-run snapshot of `res` (simulated with `itl_times=True`), text format."""
    return text_snapshot(run_series(res, model_name))


# ---------------------------------------------------------------------------- live replay


class ReplayCollector:
    """A prometheus_client collector that shows the run as it was `speed` x faster than real
    time since `start()` (the last sample at or before that simulated time; the final one
    after the run's end)."""

    def __init__(self, series: RunSeries, speed: float, clock: Any = None) -> None:
        import time

        if not (isinstance(speed, (int, float)) and math.isfinite(speed) and speed > 0):
            raise SpecError(f"--replay-speed: {speed!r} must be a number > 0")
        self.series = series
        self.speed = float(speed)
        self.clock = clock or time.monotonic
        self.t0 = self.clock()

    def start(self) -> None:
        self.t0 = self.clock()

    def sim_time(self) -> float:
        return (self.clock() - self.t0) * self.speed

    def index(self) -> int:
        k = int(np.searchsorted(self.series.times_s, self.sim_time(), side="right")) - 1
        return min(max(k, 0), len(self.series.times_s) - 1)

    def done(self) -> bool:
        return self.sim_time() >= float(self.series.times_s[-1])

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        k = self.index()
        for f in self.series.families:
            names = list(f.series[0].labels) if f.series else []
            mf: Any
            if f.kind == "histogram":
                mf = HistogramMetricFamily(f.name, f.doc, labels=names)
                for s in f.series:
                    assert s.buckets is not None and s.sums is not None
                    bk = [(_le(b), float(n)) for b, n in zip((*f.bounds, math.inf), s.buckets[k], strict=True)]
                    mf.add_metric([s.labels[n] for n in names], bk, float(s.sums[k]))
            else:
                cls = CounterMetricFamily if f.kind == "counter" else GaugeMetricFamily
                mf = cls(f.name, f.doc, labels=names)
                for s in f.series:
                    assert s.values is not None
                    mf.add_metric([s.labels[n] for n in names], float(s.values[k]))
            yield mf


def serve_replay(series: RunSeries, port: int, speed: float) -> tuple[Any, ReplayCollector]:
    """Start serving the replay on 127.0.0.1:port/metrics (a daemon thread); returns (the
    server, whose `shutdown()` stops it, the collector). Needs prometheus_client."""
    try:
        from prometheus_client import CollectorRegistry, start_http_server
    except ImportError:
        raise SpecError("--serve-metrics needs prometheus_client: pip install prometheus-client") from None
    if not (isinstance(port, int) and 0 <= port <= 65535):
        raise SpecError(f"--serve-metrics: {port!r} must be a TCP port (0-65535; 0: any free one)")
    collector = ReplayCollector(series, speed)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    try:
        server, _thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    except OSError as e:
        raise SpecError(f"--serve-metrics: cannot listen on 127.0.0.1:{port} ({e.strerror or e})") from None
    collector.start()
    return server, collector


# ---------------------------------------------------------------------------- the command line


def check_options(interval_s: float | None, points: int | None, start: str | None,
                  serve_port: int | None, speed: float) -> None:
    """The Prometheus options' one-line errors, before the run (not after minutes of it)."""
    from simulator.cli.options import parse_metrics_start

    if interval_s is not None and points is not None:
        raise SpecError("--metrics-interval and --metrics-points: give one, not both")
    if interval_s is not None and not (math.isfinite(interval_s) and interval_s > 0):
        raise SpecError(f"--metrics-interval: {interval_s!r} must be a number of seconds > 0")
    if points is not None and points < 2:
        raise SpecError(f"--metrics-points: {points!r} must be an integer >= 2")
    parse_metrics_start(start, 0.0)
    if not (math.isfinite(speed) and speed > 0):
        raise SpecError(f"--replay-speed: {speed!r} must be a number > 0")
    if serve_port is not None and not 0 <= serve_port <= 65535:
        raise SpecError(f"--serve-metrics: {serve_port!r} must be a TCP port (0-65535; 0: any free one)")


def emit(res: Any, model_name: str, metrics_out: str | None, metrics_format: str,
         interval_s: float | None, points: int | None, start: str | None, quiet: bool) -> RunSeries:
    """`simulate --metrics-out`: sample the run, write the series (or the snapshot); returns
    the series (for `serve`)."""
    import click

    from simulator.cli import outputs
    from simulator.cli.options import parse_metrics_start

    series = run_series(res, model_name, interval_s, points)
    if metrics_out:
        if metrics_format == "text":
            text = text_snapshot(series)
        else:
            text = openmetrics_text(series, parse_metrics_start(start, float(series.times_s[-1])))
        outputs.write_atomic(metrics_out, text)
        if not quiet:
            click.echo(f"wrote {metrics_out} ({len(series.times_s)} samples, every "
                       f"{series.interval_s:.6g} s of simulated time)", err=True)
    return series


def serve(series: RunSeries, port: int, speed: float) -> None:
    """`simulate --serve-metrics`: replay the run on 127.0.0.1:PORT until Ctrl-C or SIGTERM."""
    import time

    import click

    server, collector = serve_replay(series, port, speed)
    try:
        host, bound = server.server_address[:2]
        span = float(series.times_s[-1])
        click.echo(f"serving http://{host}:{bound}/metrics: the run's {span:.6g} s at {speed:g}x "
                   f"(over in {span / speed:.6g} s, then its final values); Ctrl-C stops", err=True)
        said = False
        while True:
            time.sleep(0.2)
            if collector.done() and not said:
                click.echo("replay over: serving the final values; Ctrl-C stops", err=True)
                said = True
    except KeyboardInterrupt:
        click.echo("stopped serving", err=True)
    finally:
        server.shutdown()
        server.server_close()


__all__ = ["DEFAULT_INTERVAL_S", "ITL_BUCKETS_S", "REQUEST_LATENCY_BUCKETS_S", "TTFT_BUCKETS_S",
           "Family", "ReplayCollector", "RunSeries", "Series", "buckets_1_2_5", "check_options", "emit", "serve", "openmetrics_text",
           "prometheus_text", "run_series", "sample_interval", "serve_replay", "text_snapshot"]
