"""Measurement rows of online serving runs -> the Scenario that reproduces each run.

A serving run (one server, one workload, one stage at one rate) gives several rows, one per
metric (mean/median/p99 TTFT and E2E, mean TPOT, request throughput in `dev_serving.csv`).
`run_key(row)` groups them so `ServingRuns` simulates each run once.

inference-perf shared-prefix rows (dataset `inference-perf-shared-prefix-<preset>`)
----------------------------------------------------------------------------------
The preset is a named workload (`workloads.named.INFERENCE_PERF_PRESETS`: general, codegen,
roleplay, reasoning, general-lite, reasoning-lite, general-ez). Each row is simulated as the run
actually ran, not as its profile asked (documented choices, none fitted):

* single-turn or multi-turn from the row's measured prompt lengths (notes: "measured
  prompt_len mean M (min a, max b)"): history re-sent by multi-turn rounds grows a prompt by a
  whole question + answer per round, so a spread b - a under Q + O means single-turn. The
  Feb-2026 runs asked for multi-turn and ran single-turn: their inference-perf build ignored
  the alias keys num_unique_system_prompts / num_users_per_system_prompt and
  enable_multi_turn_chat (their dumped results/config.yaml says num_groups 10,
  num_prompts_per_group 10 and no multi-turn;
  inference-sim/training@c4f03409:default_args/*/results/config.yaml). So a run that asked for
  multi-turn and ran single-turn ran inference-perf's default 10 x 10 prompts
  (`INFERENCE_PERF_DEFAULT_GROUPS`); one that ran multi-turn ran the preset's groups.
* question_len = row input_len - system_prompt_len: the measured mean prompt includes the chat
  template and BOS tokens (about 25 more than configured), per prompt, so question tokens.
* arrivals: inference-perf's `load.type: constant` timer draws n = int(rate x duration)
  exponential gaps and rescales them to sum to the stage duration
  (`inference_perf/loadgen/load_timer.py` ConstantLoadTimer, kubernetes-sigs/inference-perf@0949afc8,
  the same in every stored version since the rescale): Poisson-like arrivals whose last
  request goes out at the stage's end, not a fixed 1/rate spacing (the rows' notes say
  "fixed 1/rate spacing"; the code says otherwise, and the achieved rates of 5.0001 or 4.0002
  req/s match the rescale). The stage duration comes from the notes ("(R req/s for D s"),
  else the preset's stage at that rate; num_requests = int(rate x duration).
* the client's timeout: `request_timeout: null` in those configs leaves aiohttp's default
  `ClientTimeout(total=300)` (aio-libs/aiohttp issue #7274: "print(timeout.total) # 300, default
  value"); the overloaded reasoning runs' p99 E2E sit at 290-298 s. A request unfinished
  300 s after its send is aborted by the server (vLLM aborts a request whose client
  disconnects) and counts as failed, out of every latency statistic; the request throughput
  is successes over the run (`client_view.py`).
* a later stage (notes: "stage k of m", k > 0) starts with a warm prefix cache: inference-perf
  runs the stages back to back against the same server, cycling through the same prompts
  (request i of the run uses prompt i mod N), so every prompt of stage k > 0 was cached
  during stage 0 (`Scenario.warm_cache`).
* server: max_num_seqs / max_num_batched_tokens from the row's max_batch_size /
  max_num_tokens columns, max_model_len 4096, prefix caching and chunked prefill on, CPU KV
  offloading of KV_OFFLOAD_GIB (the runs' OffloadingConnector size).
* client-side times (`serving.client_view.ClientView`): vLLM's API server (HTTP, tokenisation,
  streaming detokenisation) adds a latency outside the engine core (the engine profile's
  `overheads.per_request_s`), and async scheduling admits a request one engine step later
  (`scheduler.params.async_scheduling`); both act inside the simulation.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any

from simulator.profiles.apply import client_view_for
from simulator.scenario import Scenario
from simulator.serving.client_view import ClientView
from simulator.serving.records import SimResult
from simulator.specs.checks import SpecError
from simulator.workloads.named import (
    INFERENCE_PERF_DEFAULT_GROUPS,
    INFERENCE_PERF_PRESET_PREFIX,
    INFERENCE_PERF_PRESETS,
    SharedPrefixPreset,
    preset_of,
)

SHARED_PREFIX_PREFIX = INFERENCE_PERF_PRESET_PREFIX
#: inference-perf stage duration when neither the notes nor the preset give one (s)
STAGE_S = 600.0
#: CPU KV offloading of the runs (OffloadingConnector, GiB)
KV_OFFLOAD_GIB = 8.0
MAX_MODEL_LEN = 4096
#: inference-perf's client timeout with `request_timeout: null`: aiohttp's default total (s)
CLIENT_TIMEOUT_S = 300.0


def is_serving_run_row(row: Mapping[str, Any]) -> bool:
    """A row this module maps: an online run on an inference-perf shared-prefix dataset."""
    return str(row.get("dataset") or "").strip().lower().startswith(SHARED_PREFIX_PREFIX)


def shared_prefix_spec(dataset: str) -> SharedPrefixPreset:
    """The preset a dataset names (one-line error listing the known ones)."""
    preset = preset_of(dataset)
    if preset is None:
        raise SpecError(f"dataset: {dataset!r} is not a known inference-perf shared-prefix dataset; "
                        f"known: {', '.join(SHARED_PREFIX_PREFIX + k for k in INFERENCE_PERF_PRESETS)}")
    return preset


_PROMPT = re.compile(r"prompt_len mean ([\d.]+) \(min (\d+), max (\d+)\)")
_STAGE = re.compile(r"\(([\d.]+) req/s for ([\d.]+) s\b")


def ran_multi_turn(row: Mapping[str, Any], preset: SharedPrefixPreset) -> bool:
    """Whether the run re-sent history (module docstring): the notes' measured prompt spread
    reaches one round's growth (question + answer). Without the spread: single-turn, as every
    dev_serving.csv run ran."""
    m = _PROMPT.search(str(row.get("notes") or ""))
    if m is None or not preset.multi_turn:
        return False
    return int(m.group(3)) - int(m.group(2)) >= preset.question_len + preset.output_len


def stage_duration_s(row: Mapping[str, Any], preset: SharedPrefixPreset | None = None) -> float:
    """The run's stage duration: the notes' "(R req/s for D s", else the preset's stage at the
    row's rate, else STAGE_S."""
    m = _STAGE.search(str(row.get("notes") or ""))
    if m is not None:
        return float(m.group(2))
    rate = row.get("request_rate")
    for r, d in (preset.stages if preset is not None else ()):
        if rate is not None and float(rate) == r:
            return float(d)
    return STAGE_S


_RUN = re.compile(r"\brun (\S+?),? stage (\d+)")


def run_key(row: Mapping[str, Any]) -> tuple:
    """Rows with the same key come from one run (the notes' run id and stage when present,
    else every setting that shapes the simulation)."""
    m = _RUN.search(str(row.get("notes") or ""))
    settings = tuple(row.get(k) for k in ("model", "hardware", "tp", "pp", "weight_dtype", "activation_dtype",
                                          "kv_dtype", "dataset", "input_len", "output_len", "request_rate",
                                          "max_batch_size", "max_num_tokens"))
    return (m.group(1), int(m.group(2)), *settings) if m else settings


def num_requests_for(rate: float, max_requests: int | None = None, duration_s: float = STAGE_S) -> int:
    """int(rate x duration) requests (inference-perf's count for a stage), at most `max_requests`."""
    n = max(1, int(rate * duration_s + 1e-9))
    return n if max_requests is None else max(1, min(n, max_requests))


def scenario_for_row(row: Mapping[str, Any], model: Any, hardware: Any,
                     max_requests: int | None = None, settings: Mapping[str, Any] | None = None) -> Scenario:
    """The Scenario of a shared-prefix serving row (module docstring). `model`/`hardware`:
    ids or specs (validate passes its own, engine profile applied); `settings`: the engine
    profile's (`profiles.apply.row_settings`: scheduler, its parameters, block size, KV rule),
    under the row's own workload, limits and switches."""
    preset = shared_prefix_spec(str(row["dataset"]))
    rate = row.get("request_rate")
    if rate is None or not math.isfinite(float(rate)) or float(rate) <= 0:
        raise SpecError(f"request_rate: {rate!r}: a shared-prefix serving row needs a finite rate > 0")
    input_len, output_len = row.get("input_len"), row.get("output_len")
    if input_len is None or output_len is None:
        raise SpecError("input_len/output_len: a shared-prefix serving row needs both")
    multi = ran_multi_turn(row, preset)
    groups, per_group = ((preset.num_groups, preset.prompts_per_group) if multi or not preset.multi_turn
                         else INFERENCE_PERF_DEFAULT_GROUPS)
    question_len = max(1, int(input_len) - preset.system_prompt_len) if not multi else preset.question_len
    profile_kw = {k: v for k, v in (settings or {}).items()
                  if k in ("engine", "scheduler", "policy_params", "block_size", "gpu_memory_utilization",
                           "kv_capacity_tokens")}
    return Scenario(
        **profile_kw, model=model, hardware=hardware, tp=int(row["tp"]), pp=int(row.get("pp") or 1),
        weight_dtype=row.get("weight_dtype"), activation_dtype=row.get("activation_dtype") or "bf16",
        kv_dtype=row.get("kv_dtype"), workload=SHARED_PREFIX_PREFIX + _preset_key(str(row["dataset"])),
        rate=float(rate), num_requests=num_requests_for(float(rate), max_requests, stage_duration_s(row, preset)),
        workload_params={"num_groups": groups, "prompts_per_group": per_group,
                         "system_prompt_len": preset.system_prompt_len, "question_len": question_len,
                         "output_tokens": int(output_len), "multi_turn": multi},
        max_num_seqs=int(row.get("max_batch_size") or 256),
        max_num_batched_tokens=int(row.get("max_num_tokens") or 2048), max_model_len=MAX_MODEL_LEN,
        enable_prefix_caching=True, kv_offloading_size=KV_OFFLOAD_GIB, request_timeout_s=CLIENT_TIMEOUT_S,
        warm_cache=stage_index(row) > 0)


def stage_index(row: Mapping[str, Any]) -> int:
    """The run's stage (notes: "stage k of m"), 0 when not stated."""
    m = _RUN.search(str(row.get("notes") or ""))
    return int(m.group(2)) if m else 0


def _preset_key(dataset: str) -> str:
    key = dataset.strip().lower()
    return key[len(SHARED_PREFIX_PREFIX):] if key.startswith(SHARED_PREFIX_PREFIX) else key


def client_for(profile: Any) -> ClientView:
    """The run's client view: the engine profile's, with inference-perf's 300 s timeout."""
    return dataclasses.replace(client_view_for(profile), timeout_s=CLIENT_TIMEOUT_S)


def simulate_row(row: Mapping[str, Any], cost: Any, client: ClientView | None = None,
                 max_requests: int | None = None, settings: Mapping[str, Any] | None = None) -> SimResult:
    """Simulate the run of `row` on `cost` (a CostModel: model, hardware, engine profile), as
    its client saw it (`client`: `client_for(profile)`; None: the scenario's own view without
    an engine profile's latency, its timeout kept)."""
    from simulator.serving.simulate import simulate

    sc = scenario_for_row(row, cost.model, cost.hardware, max_requests, settings)
    view = client if client is not None else ClientView(timeout_s=CLIENT_TIMEOUT_S)
    return simulate(cost, sc.make_workload(), sc.engine_config(cost), sc.replicas, sc.router, client=view)


def predict_metric(validator: Any, row: Mapping[str, Any], profile: Any) -> tuple[float, str]:
    """(`row['metric']` of the simulated run of `row` under the engine `profile`, note): one
    simulation per run, cached on the validator, at the stage's own request count unless
    `validator.max_requests` caps it (`Validator.run_count`); SpecError when the simulation
    gives no value."""
    from simulator.analysis.measurements import SERVING_METRICS, metric_percentile
    from simulator.metrics.summary import summarize
    from simulator.profiles.apply import row_settings

    cost = validator.cost_model(row)
    key = ("serving-run", id(cost), profile.id, validator.max_requests, *run_key(row))
    n, note = validator.run_count(num_requests_for(float(row["request_rate"] or 1.0), None,
                                                   stage_duration_s(row, preset_of(row["dataset"]))))

    def run() -> tuple[dict[str, Any], SimResult]:
        settings = row_settings(profile, cost, dict(row), n, offline=False)
        res = simulate_row(row, cost, client_for(profile), validator.max_requests, settings)
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
    return float(v), note


__all__ = [
    "CLIENT_TIMEOUT_S",
    "KV_OFFLOAD_GIB",
    "STAGE_S",
    "client_for",
    "is_serving_run_row",
    "ran_multi_turn",
    "stage_duration_s",
    "num_requests_for",
    "run_key",
    "scenario_for_row",
    "shared_prefix_spec",
    "simulate_row",
    "predict_metric",
]
