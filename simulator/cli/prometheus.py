"""A simulated run in Prometheus text exposition format, under vLLM V1's metric names.

So that the Grafana dashboards vLLM users already have (they query `vllm:*` series) can read a
simulated run, `prometheus_text(res, ...)` writes what vLLM's `PrometheusStatLogger`
(vllm/v1/metrics/loggers.py) would have exported at the end of the run, with its names and
histogram bucket boundaries:

* histograms, one observation per completed request: `vllm:time_to_first_token_seconds`,
  `vllm:e2e_request_latency_seconds`, `vllm:request_queue_time_seconds` (arrival to first
  scheduled), `vllm:request_inference_time_seconds` (first scheduled to finish),
  `vllm:request_prefill_time_seconds` (first scheduled to first token),
  `vllm:request_decode_time_seconds` (first token to finish), `vllm:request_prompt_tokens`,
  `vllm:request_generation_tokens`, `vllm:request_time_per_output_token_seconds`;
* histograms, one observation per inter-token gap: `vllm:inter_token_latency_seconds` and its
  older name `vllm:time_per_output_token_seconds` (same data; V1 observed every gap there);
* counters: `vllm:request_success_total`, `vllm:prompt_tokens_total`,
  `vllm:generation_tokens_total`, `vllm:num_preemptions_total`,
  `vllm:prefix_cache_queries_total` / `vllm:prefix_cache_hits_total` (tokens; from
  `res.meta["prefix_cache_queries"]`/`["prefix_cache_hits"]` when the engine models a prefix
  cache, else every prompt token queried and none hit);
* gauges `vllm:num_requests_running`, `vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc`
  (and its deprecated name `vllm:gpu_cache_usage_perc`) as a series over the run's timeline,
  each sample with its timestamp (ms), decimated to at most `max_gauge_points` per replica.
  Several timestamped samples of one series are what `promtool tsdb create-blocks-from
  openmetrics` backfills; a scraper would keep the last.

Labels are vLLM's: `model_name` and `engine` (the replica index). The inter-token histograms
are pooled over replicas by the engine's log, so they carry `engine="all"` when there are
several replicas. Running requests are the step's batch size (vLLM: requests in the batch).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

#: vllm/v1/metrics/loggers.py bucket boundaries (seconds)
TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                  7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                 10.0, 20.0, 40.0, 80.0)
REQUEST_LATENCY_BUCKETS_S = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                             50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)


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


def _num(x: float) -> str:
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return repr(float(x))


def _labels(labels: dict[str, str]) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

    return "{" + ",".join(f'{k}="{esc(str(v))}"' for k, v in labels.items()) + "}"


class _Writer:
    """Lines grouped by metric family (the format wants each family's lines together)."""

    def __init__(self) -> None:
        self.families: dict[str, list[str]] = {}
        self.lines: list[str] = []

    def header(self, name: str, kind: str, doc: str) -> None:
        if name not in self.families:
            self.families[name] = [f"# HELP {name} {doc}", f"# TYPE {name} {kind}"]
        self.lines = self.families[name]

    def text(self) -> str:
        return "\n".join(line for lines in self.families.values() for line in lines) + "\n"

    def histogram(self, name: str, doc: str, buckets: Sequence[float], labels: dict[str, str],
                  values: np.ndarray, weights: np.ndarray | None = None) -> None:
        """Cumulative bucket counts (le = upper bound, inclusive), _sum and _count."""
        self.header(name, "histogram", doc)
        v = np.asarray(values, dtype=float)
        w = np.ones(len(v)) if weights is None else np.asarray(weights, dtype=float)
        order = np.argsort(v, kind="stable")
        v, w = v[order], w[order]
        cum = np.concatenate([[0.0], np.cumsum(w)])
        for b in (*buckets, math.inf):
            n = cum[np.searchsorted(v, b, side="right")]
            self.lines.append(f"{name}_bucket{_labels({**labels, 'le': _num(b)})} {_num(n)}")
        self.lines.append(f"{name}_sum{_labels(labels)} {_num(float((v * w).sum()))}")
        self.lines.append(f"{name}_count{_labels(labels)} {_num(cum[-1])}")

    def counter(self, name: str, doc: str, labels: dict[str, str], value: float) -> None:
        self.header(name, "counter", doc)  # the text format's TYPE line names the _total sample
        self.lines.append(f"{name}{_labels(labels)} {_num(value)}")

    def gauge_series(self, name: str, doc: str, labels: dict[str, str], times_ms: Iterable[int],
                     values: Iterable[float]) -> None:
        self.header(name, "gauge", doc)
        for t, v in zip(times_ms, values, strict=True):
            self.lines.append(f"{name}{_labels(labels)} {_num(v)} {int(t)}")


def _request_histograms(wr: _Writer, res: Any, sel: np.ndarray, labels: dict[str, str],
                        max_model_len: int) -> None:
    arr, first, fin = res.arrival_s[sel], res.first_token_s[sel], res.finish_s[sel]
    sched = res.scheduled_s[sel] if res.scheduled_s is not None else arr
    out_len = res.output_len[sel]
    lat = REQUEST_LATENCY_BUCKETS_S
    wr.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                 TTFT_BUCKETS_S, labels, first - arr)
    wr.histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                 lat, labels, fin - arr)
    wr.histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
                 lat, labels, sched - arr)
    wr.histogram("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.",
                 lat, labels, fin - sched)
    wr.histogram("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.",
                 lat, labels, first - sched)
    wr.histogram("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.",
                 lat, labels, fin - first)
    multi = out_len > 1  # vLLM observes per-request TPOT only for requests of 2+ tokens
    wr.histogram("vllm:request_time_per_output_token_seconds",
                 "Histogram of time_per_output_token_seconds per request.", ITL_BUCKETS_S, labels,
                 ((fin - first)[multi] / (out_len[multi] - 1)))
    tok = buckets_1_2_5(max_model_len)
    wr.histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tok, labels,
                 res.input_len[sel])
    wr.histogram("vllm:request_generation_tokens", "Number of generation tokens processed.", tok, labels,
                 out_len)


def _gauges(wr: _Writer, timeline: Any, labels: dict[str, str], start_ms: float,
            max_points: int) -> None:
    for rep, rows in timeline.groupby("replica", sort=True):
        step = max(1, -(-len(rows) // max_points))
        rows = rows.iloc[::step]
        lab = {**labels, "engine": str(int(rep))}
        t_ms = (start_ms + rows["time_s"].to_numpy() * 1e3).round().astype(np.int64)
        wr.gauge_series("vllm:num_requests_running", "Number of requests in model execution batches.",
                        lab, t_ms, rows["batch_size"].to_numpy(dtype=float))
        wr.gauge_series("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                        lab, t_ms, rows["queue_length"].to_numpy(dtype=float))
        kv = rows["kv_utilization"].to_numpy(dtype=float)
        wr.gauge_series("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", lab, t_ms, kv)
        wr.gauge_series("vllm:gpu_cache_usage_perc",
                        "GPU KV-cache usage. 1 means 100 percent usage. DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
                        lab, t_ms, kv)


def prometheus_text(res: Any, model_name: str, start_unix_s: float = 0.0,
                    max_gauge_points: int = 2000) -> str:
    """The run as Prometheus text exposition (see the module docstring). `start_unix_s` is the
    wall-clock time the simulated run's t = 0 maps to (gauge sample timestamps)."""
    from simulator.serving.records import COMPLETED

    wr = _Writer()
    done = res.status == COMPLETED
    replicas = int(res.meta.get("num_replicas", 1))
    mml = int(res.meta.get("max_model_len") or max(int(res.input_len.max(initial=1)) + int(res.output_len.max(initial=1)), 1))
    for rep in range(replicas):
        labels = {"model_name": model_name, "engine": str(rep)}
        sel = done & (res.replica == rep)
        _request_histograms(wr, res, sel, labels, mml)
        wr.counter("vllm:request_success_total", "Count of successfully processed requests.",
                   {**labels, "finished_reason": "length"}, float(sel.sum()))
        prompt = float(res.input_len[sel].sum())
        wr.counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", labels, prompt)
        wr.counter("vllm:generation_tokens_total", "Number of generation tokens processed.", labels,
                   float(res.output_len[sel].sum()))
        wr.counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", labels,
                   float(res.preemptions[res.replica == rep].sum()))
        queries = res.meta.get("prefix_cache_queries")
        hits = res.meta.get("prefix_cache_hits")
        wr.counter("vllm:prefix_cache_queries_total",
                   "Prefix cache queries, in terms of number of queried tokens.", labels,
                   float(queries[rep]) if queries is not None else prompt)
        wr.counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.",
                   labels, float(hits[rep]) if hits is not None else 0.0)
    itl_labels = {"model_name": model_name, "engine": "0" if replicas == 1 else "all"}
    for name in ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"):
        wr.histogram(name, "Histogram of inter-token latency in seconds.", ITL_BUCKETS_S, itl_labels,
                     res.itl_values_s, res.itl_counts)
    _gauges(wr, res.timeline, {"model_name": model_name}, start_unix_s * 1e3, max_gauge_points)
    return wr.text()


__all__ = ["ITL_BUCKETS_S", "REQUEST_LATENCY_BUCKETS_S", "TTFT_BUCKETS_S", "buckets_1_2_5",
           "prometheus_text"]
