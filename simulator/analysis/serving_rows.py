"""Measurement rows of online serving runs -> the Scenario that reproduces each run.

A serving run (one server, one workload, one stage at one rate) gives several rows, one per
metric (mean/median/p99 TTFT and E2E, mean TPOT, request throughput in `dev_serving.csv`).
`run_key(row)` groups them so `ServingRuns` simulates each run once.

inference-perf shared-prefix rows (dataset `inference-perf-shared-prefix-<name>`)
--------------------------------------------------------------------------------
The generator's parameters are not columns, so `SHARED_PREFIX_DATASETS` holds them per
dataset name, copied from the rows' `notes` (inference-perf `data.shared_prefix`):

    name       groups x prompts   system_prompt_len   question_len (configured)
    codegen    11 x 4             100                 466
    general     9 x 5             100                 447
    roleplay   10 x 5             150                 600
    reasoning  23 x 1             100                 934

Mapping (all documented choices, none fitted):

* question_len = row input_len - system_prompt_len: the measured mean prompt (input_len)
  includes the chat template and BOS tokens (about 25 more than configured), and those
  tokens are per-prompt, so they count as question tokens.
* single-turn: the notes say "multi-turn chat on", but the measured prompt lengths stay
  within +-3 % of the mean (e.g. min 580, max 604 for a 592 mean over 3,000 requests);
  re-sent history would grow them by whole answers. So each request is system prompt +
  its user's fixed question, and the N = groups x prompts distinct prompts repeat in the
  generator's shuffled order (a repeated prompt hits the prefix cache whole).
* arrivals: constant rate (fixed 1/rate spacing, inference-perf `load.type=constant`);
  num_requests = rate x STAGE_S (the whole 600 s stage: overloaded stages' queues grow for
  the whole stage, so a shorter run would under-state their TTFT); `max_requests` caps it
  for quick checks only.
* server: max_num_seqs / max_num_batched_tokens from the row's max_batch_size /
  max_num_tokens columns, max_model_len 4096, prefix caching and chunked prefill on, CPU KV
  offloading of KV_OFFLOAD_GIB (the runs' OffloadingConnector size).
* client-side times (`serving.client_view.ClientView`): vLLM's API server (HTTP, tokenisation, streaming
  detokenisation) adds a latency d outside the engine core (the engine profile's
  `overheads.per_request_s`), and async scheduling admits a request one engine step later
  than the event engine's synchronous scheduler (`scheduler.params.async_scheduling`): both
  shift first-token and finish times (TTFT and E2E), not TPOT.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from simulator.profiles.apply import client_view_for
from simulator.scenario import Scenario
from simulator.serving.client_view import ClientView
from simulator.serving.records import SimResult
from simulator.specs.checks import SpecError

SHARED_PREFIX_PREFIX = "inference-perf-shared-prefix-"
#: inference-perf stage duration of the dev_serving.csv runs (s)
STAGE_S = 600.0
#: CPU KV offloading of the runs (OffloadingConnector, GiB)
KV_OFFLOAD_GIB = 8.0
MAX_MODEL_LEN = 4096


@dataclass(frozen=True)
class SharedPrefixSpec:
    """inference-perf shared_prefix generator settings of one named dataset."""

    num_groups: int
    prompts_per_group: int
    system_prompt_len: int
    question_len: int  # as configured; the run uses the measured prompt mean (module docstring)


#: dataset name (after `inference-perf-shared-prefix-`) -> generator settings (rows' notes)
SHARED_PREFIX_DATASETS: dict[str, SharedPrefixSpec] = {
    "codegen": SharedPrefixSpec(11, 4, 100, 466),
    "general": SharedPrefixSpec(9, 5, 100, 447),
    "roleplay": SharedPrefixSpec(10, 5, 150, 600),
    "reasoning": SharedPrefixSpec(23, 1, 100, 934),
}


def is_serving_run_row(row: Mapping[str, Any]) -> bool:
    """A row this module maps: an online run on an inference-perf shared-prefix dataset."""
    return str(row.get("dataset") or "").strip().lower().startswith(SHARED_PREFIX_PREFIX)


def shared_prefix_spec(dataset: str) -> SharedPrefixSpec:
    name = dataset.strip().lower()
    key = name[len(SHARED_PREFIX_PREFIX):] if name.startswith(SHARED_PREFIX_PREFIX) else name
    if key not in SHARED_PREFIX_DATASETS:
        raise SpecError(f"dataset: {dataset!r} is not a known inference-perf shared-prefix dataset; "
                        f"known: {', '.join(SHARED_PREFIX_PREFIX + k for k in SHARED_PREFIX_DATASETS)}")
    return SHARED_PREFIX_DATASETS[key]


_RUN = re.compile(r"\brun (\S+?),? stage (\d+)")


def run_key(row: Mapping[str, Any]) -> tuple:
    """Rows with the same key come from one run (the notes' run id and stage when present,
    else every setting that shapes the simulation)."""
    m = _RUN.search(str(row.get("notes") or ""))
    settings = tuple(row.get(k) for k in ("model", "hardware", "tp", "pp", "weight_dtype", "activation_dtype",
                                          "kv_dtype", "dataset", "input_len", "output_len", "request_rate",
                                          "max_batch_size", "max_num_tokens"))
    return (m.group(1), int(m.group(2)), *settings) if m else settings


def num_requests_for(rate: float, max_requests: int | None = None) -> int:
    """rate x STAGE_S requests (the whole stage), at most `max_requests` when given."""
    n = max(1, round(rate * STAGE_S))
    return n if max_requests is None else max(1, min(n, max_requests))


def scenario_for_row(row: Mapping[str, Any], model: Any, hardware: Any,
                     max_requests: int | None = None, settings: Mapping[str, Any] | None = None) -> Scenario:
    """The Scenario of a shared-prefix serving row (module docstring). `model`/`hardware`:
    ids or specs (validate passes its own, engine profile applied); `settings`: the engine
    profile's (`profiles.apply.row_settings`: scheduler, its parameters, block size, KV rule),
    under the row's own workload, limits and switches."""
    spec = shared_prefix_spec(str(row["dataset"]))
    rate = row.get("request_rate")
    if rate is None or not math.isfinite(float(rate)) or float(rate) <= 0:
        raise SpecError(f"request_rate: {rate!r}: a shared-prefix serving row needs a finite rate > 0")
    input_len, output_len = row.get("input_len"), row.get("output_len")
    if input_len is None or output_len is None:
        raise SpecError("input_len/output_len: a shared-prefix serving row needs both")
    question_len = max(1, int(input_len) - spec.system_prompt_len)
    profile_kw = {k: v for k, v in (settings or {}).items()
                  if k in ("engine", "scheduler", "policy_params", "block_size", "gpu_memory_utilization",
                           "kv_capacity_tokens")}
    return Scenario(
        **profile_kw, model=model, hardware=hardware, tp=int(row["tp"]), pp=int(row.get("pp") or 1),
        weight_dtype=row.get("weight_dtype"), activation_dtype=row.get("activation_dtype") or "bf16",
        kv_dtype=row.get("kv_dtype"), workload="shared-prefix", rate=float(rate),
        num_requests=num_requests_for(float(rate), max_requests),
        workload_params={"num_groups": spec.num_groups, "prompts_per_group": spec.prompts_per_group,
                         "system_prompt_len": spec.system_prompt_len, "question_len": question_len,
                         "multi_turn": False},
        output_len=int(output_len), max_num_seqs=int(row.get("max_batch_size") or 256),
        max_num_batched_tokens=int(row.get("max_num_tokens") or 2048), max_model_len=MAX_MODEL_LEN,
        enable_prefix_caching=True, kv_offloading_size=KV_OFFLOAD_GIB)


def simulate_row(row: Mapping[str, Any], cost: Any, client: ClientView | None = None,
                 max_requests: int | None = None, settings: Mapping[str, Any] | None = None) -> SimResult:
    """Simulate the run of `row` on `cost` (a CostModel: model, hardware, engine profile), as
    its client saw it (`client`: the engine profile's `client_view_for`)."""
    from simulator.serving.simulate import simulate

    sc = scenario_for_row(row, cost.model, cost.hardware, max_requests, settings)
    return simulate(cost, sc.make_workload(), sc.engine_config(cost), sc.replicas, sc.router, client=client)




def predict_metric(validator: Any, row: Mapping[str, Any], profile: Any) -> float:
    """`row['metric']` of the simulated run of `row` under the engine `profile` (one simulation
    per run, cached on the validator); SpecError when the simulation gives no value."""
    from simulator.analysis.measurements import SERVING_METRICS, metric_percentile
    from simulator.metrics.summary import summarize
    from simulator.profiles.apply import row_settings

    cost = validator.cost_model(row)
    key = ("serving-run", id(cost), profile.id, validator.num_requests, *run_key(row))

    def run() -> tuple[dict[str, Any], SimResult]:
        n = num_requests_for(float(row["request_rate"] or 1.0), validator.num_requests)
        settings = row_settings(profile, cost, dict(row), n, offline=False)
        res = simulate_row(row, cost, client_view_for(profile), validator.num_requests, settings)
        return summarize(res, {}), res

    s, res = validator.cached(key, run)
    metric = row["metric"]
    if metric not in SERVING_METRICS and metric not in s:
        pct = metric_percentile(metric)
        if pct is None:
            raise SpecError(f"metric {metric} is not a serving metric")
        s.update(summarize(res, {}, (pct,)))
    v = s.get(SERVING_METRICS.get(metric, metric))
    if v is None or not math.isfinite(float(v)):
        raise SpecError(f"simulation gave no {metric} (completed {s.get('completed')} of {s.get('num_requests')})")
    return float(v)


__all__ = [
    "KV_OFFLOAD_GIB",
    "SHARED_PREFIX_DATASETS",
    "STAGE_S",
    "SharedPrefixSpec",
    "is_serving_run_row",
    "num_requests_for",
    "run_key",
    "scenario_for_row",
    "shared_prefix_spec",
    "simulate_row",
    "predict_metric",
]
