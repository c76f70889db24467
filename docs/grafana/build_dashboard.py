"""Write docs/grafana/llmsim-vllm.json: a Grafana dashboard of a vLLM server (or of a run of
`llmsim simulate --metrics-out`, backfilled into Prometheus) under vLLM's metric names.

    python docs/grafana/build_dashboard.py          # rewrites the JSON next to this file

The JSON is generated so that its queries are data: `tests/test_prometheus_real.py` runs every
`expr` of it against a real Prometheus holding a simulated run, and `tests/test_grafana.py`
checks the committed file equals this script's output.
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parent / "llmsim-vllm.json"
DS = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
SEL = '{model_name="$model_name"}'
RI = "[$__rate_interval]"


def quantiles(metric: str, qs: tuple[float, ...] = (0.5, 0.9, 0.99)) -> list[tuple[str, str]]:
    """p50/p90/p99 of a histogram over the rate window, summed over engines, and its mean."""
    out = [(f"histogram_quantile({q}, sum by (le) (rate({metric}_bucket{SEL}{RI})))",
            f"P{round(q * 100)}") for q in qs]
    out.append((f"sum(rate({metric}_sum{SEL}{RI})) / sum(rate({metric}_count{SEL}{RI}))", "Mean"))
    return out


#: (title, description, unit, [(expr, legend)])
PANELS: list[tuple[str, str, str, list[tuple[str, str]]]] = [
    ("Time to first token", "TTFT: arrival to first token (vllm:time_to_first_token_seconds).", "s",
     quantiles("vllm:time_to_first_token_seconds")),
    ("Time per output token", "TPOT per request: (E2E - TTFT) / (output tokens - 1) "
     "(vllm:request_time_per_output_token_seconds).", "s",
     quantiles("vllm:request_time_per_output_token_seconds")),
    ("Inter-token latency", "Every gap between two tokens of a request (vllm:inter_token_latency_seconds).", "s",
     quantiles("vllm:inter_token_latency_seconds")),
    ("E2E request latency", "Arrival to last token (vllm:e2e_request_latency_seconds).", "s",
     quantiles("vllm:e2e_request_latency_seconds")),
    ("Queue time", "Arrival to first scheduled (vllm:request_queue_time_seconds).", "s",
     quantiles("vllm:request_queue_time_seconds", (0.5, 0.99))),
    ("Requests running and waiting", "Requests in the engines' batches and in their queues, all engines.", "none",
     [(f"sum(vllm:num_requests_running{SEL})", "Running"),
      (f"sum(vllm:num_requests_waiting{SEL})", "Waiting")]),
    ("KV-cache usage", "Fraction of KV-cache blocks in use, per engine (vllm:kv_cache_usage_perc).", "percentunit",
     [(f"max by (engine) (vllm:kv_cache_usage_perc{SEL})", "engine {{engine}}")]),
    ("Prefix-cache hit rate", "Prompt tokens found in the prefix cache / prompt tokens looked up.", "percentunit",
     [(f"sum(rate(vllm:prefix_cache_hits_total{SEL}{RI})) / sum(rate(vllm:prefix_cache_queries_total{SEL}{RI}))",
       "Hit rate")]),
    ("Token throughput", "Prompt and generated tokens per second, all engines.", "none",
     [(f"sum(rate(vllm:prompt_tokens_total{SEL}{RI}))", "Prompt tokens/s"),
      (f"sum(rate(vllm:generation_tokens_total{SEL}{RI}))", "Generation tokens/s")]),
    ("Request throughput", "Finished requests per second, and preemptions per second.", "reqps",
     [(f"sum(rate(vllm:request_success_total{SEL}{RI}))", "Finished/s"),
      (f"sum(rate(vllm:num_preemptions_total{SEL}{RI}))", "Preemptions/s")]),
    ("MFU and MBU (busy time)", "llmsim's model FLOPs and memory-bandwidth utilisation over the engines' "
     "busy time (llmsim_*_busy_seconds_total; a real vLLM does not export these).", "percentunit",
     [(f"sum(rate(llmsim_mfu_busy_seconds_total{SEL}{RI})) / sum(rate(llmsim_busy_seconds_total{SEL}{RI}))", "MFU"),
      (f"sum(rate(llmsim_mbu_busy_seconds_total{SEL}{RI})) / sum(rate(llmsim_busy_seconds_total{SEL}{RI}))", "MBU"),
      (f"avg(rate(llmsim_busy_seconds_total{SEL}{RI}))", "Busy fraction")]),
    ("Request lengths", "Median prompt and generation tokens, and the p99 of the most tokens a request "
     "asked to generate (vllm:request_max_num_generation_tokens).", "none",
     [(f"histogram_quantile(0.5, sum by (le) (rate(vllm:request_prompt_tokens_bucket{SEL}{RI})))", "Prompt P50"),
      (f"histogram_quantile(0.5, sum by (le) (rate(vllm:request_generation_tokens_bucket{SEL}{RI})))",
       "Generation P50"),
      (f"histogram_quantile(0.99, sum by (le) (rate(vllm:request_max_num_generation_tokens_bucket{SEL}{RI})))",
       "Max generation P99")]),
]


def panel(i: int, title: str, description: str, unit: str, targets: list[tuple[str, str]]) -> dict:
    return {
        "id": i + 1,
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DS,
        "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
        "fieldConfig": {"defaults": {"unit": unit, "custom": {"lineWidth": 1, "fillOpacity": 0,
                                                              "showPoints": "auto", "spanNulls": False}},
                        "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                    "tooltip": {"mode": "multi", "sort": "none"}},
        "targets": [{"datasource": DS, "expr": expr, "legendFormat": legend, "range": True,
                     "refId": chr(ord("A") + k)} for k, (expr, legend) in enumerate(targets)],
    }


def dashboard() -> dict:
    return {
        "__inputs": [{"name": "DS_PROMETHEUS", "label": "Prometheus", "description": "",
                      "type": "datasource", "pluginId": "prometheus", "pluginName": "Prometheus"}],
        "__requires": [{"type": "grafana", "id": "grafana", "name": "Grafana", "version": "9.0.0"},
                       {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
                       {"type": "panel", "id": "timeseries", "name": "Time series", "version": ""}],
        "title": "llmsim / vLLM serving",
        "description": "vLLM's metrics (vllm:*), from a vLLM server or a simulated run backfilled with "
                       "`llmsim simulate --metrics-out` (docs/observability.md).",
        "uid": "llmsim-vllm",
        "editable": True,
        "schemaVersion": 39,
        "version": 1,
        "tags": ["vllm", "llmsim"],
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "",
        "templating": {"list": [{
            "name": "model_name", "label": "Model", "type": "query", "datasource": DS,
            "query": {"query": "label_values(vllm:num_requests_running, model_name)", "refId": "model"},
            "definition": "label_values(vllm:num_requests_running, model_name)",
            "refresh": 2, "includeAll": False, "multi": False, "current": {}, "options": [],
            "sort": 1}]},
        "annotations": {"list": []},
        "panels": [panel(i, *p) for i, p in enumerate(PANELS)],
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
    print(f"wrote {OUT}")
