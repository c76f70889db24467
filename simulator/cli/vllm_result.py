"""A simulated run written as `vllm bench serve --save-result` writes a measured one.

The run-description keys and their order follow vLLM's `vllm/benchmarks/serve.py`
(`date` as ``%Y%m%d-%H%M%S``, `endpoint_type`, `backend`, `label`, `model_id`,
`tokenizer_id`, `num_prompts`, `request_rate` ("inf" when unbounded), `burstiness`,
`max_concurrency`), then the benchmark keys (`duration`, `completed`, `failed`, token totals,
throughputs, `request_goodput`, `input_lens`, `output_lens`) and, for every metric of
`--percentile-metrics` and percentile of `--metric-percentiles`, ``mean_/median_/std_/pP_
{metric}_ms`` (P printed as vLLM does: ``99``, ``99.9``). llmsim's own additions come last:
`llmsim_version`, the scenario and llmsim's full summary, so one plotting script reads a
measured and a simulated file alike. The file name is vLLM's default,
``{label or backend}-{request_rate}qps[-concurrency{N}]-{model basename}-{date}.json``.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from simulator.specs.checks import SpecError

BACKEND = "llmsim"
#: the last two need --max-concurrency (vLLM: the client-side semaphore wait, and E2EL plus
#: that wait); as in vLLM they are written only when selected (llmsim_summary always has them)
PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el", "client_queue_time", "e2el_including_client_queue")
#: vLLM's default is ttft,tpot,itl; e2el is added so a result has every metric llmsim models.
DEFAULT_PERCENTILE_METRICS = "ttft,tpot,itl,e2el"
DEFAULT_METRIC_PERCENTILES = "99"
_RUN_KEYS = ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
             "request_throughput", "request_goodput", "output_throughput", "total_token_throughput")


def parse_percentile_metrics(text: str) -> list[str]:
    out = [t.strip().lower() for t in str(text).split(",") if t.strip()]
    for m in out:
        if m not in PERCENTILE_METRICS:
            raise SpecError(f"percentile-metrics: {m!r} is not one of {', '.join(PERCENTILE_METRICS)}")
    if not out:
        raise SpecError("percentile-metrics: no metric given (e.g. ttft,tpot,itl)")
    return out


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


def _p_word(p: float) -> str:
    return str(int(p)) if int(p) == p else str(p)  # vLLM's spelling: 99, 99.9


def model_id(model: Any) -> str:
    """The id vLLM would record: the model's Hugging Face id when the catalog knows it."""
    return getattr(model, "hf_id", "") or getattr(model, "id", str(model))


def result_json(scenario: Any, res: Any, summary: dict[str, Any], model: Any, *, version: str,
                percentile_metrics: str = DEFAULT_PERCENTILE_METRICS,
                metric_percentiles: str = DEFAULT_METRIC_PERCENTILES, label: str | None = None,
                now: datetime | None = None) -> dict[str, Any]:
    """The result dict (see the module docstring). `res`: the SimResult; `summary`: llmsim's."""
    from simulator.metrics.summary import summarize

    metrics = parse_percentile_metrics(percentile_metrics)
    pcts = parse_metric_percentiles(metric_percentiles)
    rate = scenario.rate if scenario.rate is not None else math.inf
    mid = model_id(model)
    out: dict[str, Any] = {
        "date": (now or datetime.now()).strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": BACKEND,
        "backend": BACKEND,
        "label": label,
        "model_id": mid,
        "tokenizer_id": mid,
        "num_prompts": scenario.num_requests,
        "request_rate": rate if math.isfinite(rate) else "inf",
        "burstiness": scenario.burstiness,
        "max_concurrency": scenario.concurrency,
    }
    stats = summarize(res, scenario.slos_s, percentiles=tuple(pcts))
    for k in _RUN_KEYS:
        out[k] = stats.get(k)
    # speculative decoding: vLLM's spec_decode_* keys, present only when it ran (as in vLLM)
    out.update({k: v for k, v in summary.items() if k.startswith("spec_decode_")})
    out["input_lens"] = [int(x) for x in res.input_len]
    out["output_lens"] = [int(x) for x in res.output_len]
    for m in metrics:
        if f"mean_{m}_ms" not in stats:
            raise SpecError(f"percentile-metrics: {m!r} needs --max-concurrency (a client-side cap)")
        for k in ("mean", "median", "std"):
            out[f"{k}_{m}_ms"] = stats[f"{k}_{m}_ms"]
        for p in pcts:
            out[f"p{_p_word(p)}_{m}_ms"] = stats[f"p{p:g}_{m}_ms"]
    out["llmsim_version"] = version
    out["llmsim_scenario"] = scenario.as_dict()
    out["llmsim_summary"] = summary
    return out


def result_filename(result: dict[str, Any]) -> str:
    """vLLM's default file name for this result."""
    rate = result["request_rate"]
    rate_word = "inf" if rate == "inf" else str(float(rate))
    conc = f"-concurrency{result['max_concurrency']}" if result["max_concurrency"] is not None else ""
    base = str(result["model_id"]).split("/")[-1]
    return f"{result['label'] or result['backend']}-{rate_word}qps{conc}-{base}-{result['date']}.json"


__all__ = ["result_json", "result_filename", "model_id", "parse_percentile_metrics",
           "parse_metric_percentiles", "DEFAULT_PERCENTILE_METRICS", "DEFAULT_METRIC_PERCENTILES"]
