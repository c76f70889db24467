"""An MLPerf Inference v5.1 Offline row as the LoadGen run that reproduces it (a Server row:
`predict_server`).

A row of `dev_mlperf51_offline.csv` names its dataset (`workloads.mlperf.DATASETS`) and gives
the system's `Tokens per second` or `Samples per second`. The run is rebuilt as LoadGen ran it
(module docstring of `workloads/mlperf.py`, its source keys):

* one query of `loadgen_sample_count` samples, all at t = 0: max(min_query_count,
  1.1 x min_duration x target_qps) padded to whole passes over the dataset. `min_duration`
  is the row's (notes); target_qps, the submitter's expected rate, is taken as the rate the
  simulation itself reaches at saturation (a submitter tunes it to the achieved rate; using
  the measured rate would put the answer into the question).
* the engine instances (num_gpus / (tp x pp)) serve disjoint shares of the query and never
  interact, so one instance is simulated with its share (ceil(samples / instances)) and the
  system's numbers are instances x the instance's totals / its makespan. An attention-DP
  instance (DeepSeek-R1 on TensorRT-LLM) is `tp` ranks, each scheduling its own batch with
  the row's per-rank limits: one rank is simulated with 1/tp of the instance's share, its
  steps priced as tp ranks in lockstep (`LockstepRanks`);
* Tokens per second = output tokens / time of the last completion, Samples per second =
  samples / that time (INF-RES): the drain tail counts, as it does in the measurement;
* the workload is the synthetic dataset with the **run's own mean output per sample** (its
  Tokens/s over its Samples/s, stated in the notes): both numbers come from the same run, the
  makespan cancels, and what is left is how many tokens that model and quantisation generate
  per sample, a property of the workload, not of the hardware. The dataset's reference mean is
  used where a row does not state it. This is the row's workload description, not a fitted
  parameter (docs/validation.md).
* engine limits: the row's max_batch_size / max_num_tokens, with the harness's own rules
  (`profiles.apply.mlperf_limits`: runtime budget where the CSV holds the build flag,
  attention-DP ranks, chunked context, MAX_UTILIZATION, the KV fraction).

Simulating a whole query (up to ~100,000 samples per instance) is too slow, so an instance
serves n1 = min(its share of the minimum query, max(its seats, MIN_PILOT_SAMPLES)) samples,
then n2 = 2 n1; a longer query's makespan is extended linearly from the two runs: an Offline
engine at saturation completes samples at a constant rate, and the drain tail is in both runs
and cancels in the slope. The slope also gives target_qps (instances / slope). A validator's
`max_requests` (`llmsim validate --max-requests N`; `--num-requests` leaves an MLPerf row alone, as
LoadGen fixes its query) lowers MIN_PILOT_SAMPLES to N and changes
nothing else: the answer is still the LoadGen query's (it used to be N samples' own makespan,
a different and drain-dominated quantity).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from simulator.analysis.measurements import SkipRow, note_facts
from simulator.profiles.apply import client_view_for, mlperf_limits, profile_kv_tokens, row_settings
from simulator.profiles.profile import EngineProfile
from simulator.specs.checks import SpecError
from simulator.workloads.mlperf import DATASETS, MlperfDataset, loadgen_sample_count, offline_query

#: LoadGen's default min_duration of an Offline run (loadgen/mlperf.conf *.Offline.min_duration)
DEFAULT_MIN_DURATION_S = 600.0


@dataclasses.dataclass(frozen=True)
class LoadgenConfig:
    """A submission config's LoadGen overrides: min_query_count, and offline_expected_qps (the
    submitter's target_qps; None: taken as the rate the simulation reaches, module docstring)."""

    min_query_count: int
    expected_qps: float | None = None


#: LoadGen overrides of the v5.1 DeepSeek-R1 Offline configs (mlcommons/inference_results_v5.1
#: closed/<submitter>/configs/<system>/Offline/deepseek-r1.py, NV-CFG-deepseek-r1), by
#: (benchmark, engine policy, hardware, GPUs); (benchmark, policy) alone is the fallback for a
#: system whose config was not read:
#: * NVIDIA B200-SXM-180GBx8: min_query_count 26328 = 6 x 4388, offline_expected_qps 10 (the
#:   Dell and GigaComputing B200 rows carry the same engine flags: ASSUMED copied, as is the
#:   fallback);
#: * NVIDIA GB200-NVL72: 26328 x 8 = 210,624 and 10: a query of 2,925 samples a rank, not the
#:   366 of the B200 count (until 2026-12-05 every system took 26,328, and the simulated GB200
#:   run was a drain of 610 samples a rank);
#: * CoreWeave GB300-NVL8: 10 x 4388 = 43,880 and 10; NVIDIA GB300-NVL72: 70 x 4388 = 307,160
#:   and 10 x 18 = 180 (both with min_duration 2,000 s, which the rows' notes carry).
LOADGEN_CONFIGS: dict[tuple[str, ...], LoadgenConfig] = {
    ("deepseek-r1", "trtllm"): LoadgenConfig(26328),
    ("deepseek-r1", "trtllm", "b200", "8"): LoadgenConfig(26328, 10.0),
    ("deepseek-r1", "trtllm", "gb200", "72"): LoadgenConfig(26328 * 8, 10.0),
    ("deepseek-r1", "trtllm", "gb300", "8"): LoadgenConfig(10 * 4388, 10.0),
    ("deepseek-r1", "trtllm", "gb300", "72"): LoadgenConfig(70 * 4388, 180.0),
}
#: the first simulated run of an instance serves min(its share of the minimum query, max(its
#: seats, MIN_PILOT_SAMPLES)) samples; the second twice that; a longer query's makespan is
#: extended linearly from the two (module docstring)
MIN_PILOT_SAMPLES = 1000
#: seed of every synthetic MLPerf dataset and query permutation in validation
SEED = 0
#: what an Offline run reports (LoadGen's summary: tokens and samples per second)
THROUGHPUT_METRICS = ("output_tokens_per_s", "request_throughput", "output_tokens_per_s_per_gpu")
#: what a Server run reports: its completed rates and its latency statistics (LoadGen's summary
#: gives mean and percentiles of the first-token latency, TPOT and the query latency)
SERVER_METRICS = (*THROUGHPUT_METRICS, "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
                  "median_tpot_ms", "p99_tpot_ms", "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms")
#: a simulated Server run: two minutes of one scheduler's arrivals, between these sample counts
SERVER_SPAN_S = 120.0
SERVER_MIN_SAMPLES = 3000
SERVER_MAX_SAMPLES = 40000
#: the share of a Server run's first arrivals left out of its steady state (warm-up)
SERVER_WARMUP = 0.1


def is_mlperf_row(row: Mapping[str, Any]) -> bool:
    return str(row.get("dataset") or "").strip().lower() in DATASETS


def loadgen_config(ds: MlperfDataset, profile: EngineProfile, hardware_id: str, num_gpus: int) -> LoadgenConfig:
    """The row's LoadGen overrides (LOADGEN_CONFIGS), else LoadGen's defaults for the dataset."""
    for key in ((ds.benchmark, profile.policy, hardware_id, str(num_gpus)), (ds.benchmark, profile.policy)):
        if key in LOADGEN_CONFIGS:
            return LOADGEN_CONFIGS[key]
    return LoadgenConfig(ds.min_query_count)


def settings(profile: EngineProfile, cost: Any, row: Mapping[str, Any], ds: MlperfDataset) -> dict[str, Any]:
    """Scenario settings of one engine instance of the row (`profiles.apply.row_settings` with
    the harness rules of `profiles.apply.mlperf_limits`), plus `notes`."""
    lim = mlperf_limits(profile, ds.benchmark, cost.hardware.id, cost.par.tp, row.get("max_batch_size"),
                        row.get("max_num_tokens"))
    r = {**row, "max_batch_size": lim["max_batch_size"], "max_num_tokens": lim["max_num_tokens"],
         "input_len": None, "output_len": None}
    out = row_settings(profile, cost, r, 1, offline=True)
    if lim["kv_fraction"] is not None:
        out["gpu_memory_utilization"] = lim["kv_fraction"]
        out["kv_capacity_tokens"] = profile_kv_tokens(profile, cost, lim["kv_fraction"],
                                                      out["max_num_batched_tokens"], out["max_num_seqs"])
    params = dict(out["policy_params"])
    if lim["capacity_policy"] is not None:
        params["capacity_policy"] = lim["capacity_policy"]
    if lim["chunked"] is not None and "chunked_context" in params:
        params["chunked_context"] = lim["chunked"]
    out["policy_params"] = params
    out["notes"] = lim["notes"]
    out["dp_ranks"] = lim["dp_ranks"]
    return out


class LockstepRanks:
    """The cost of one attention-DP rank's step when `ranks` identical ranks step together: the
    instance's batch statistics are `ranks` x the rank's (every statistic is a sum over
    sequences), priced by the instance's cost model. Simulating one rank this way is the
    instance with its sequences spread evenly over the ranks, at 1/ranks of the work."""

    def __init__(self, cost: Any, ranks: int) -> None:
        self._cost, self._k = cost, float(ranks)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cost, name)

    def step_time(self, T: float, S: float, Ad: float = 0.0, Ap: float = 0.0, R: float = 0.0,
                  Aw: float | None = None, Rw: float | None = None, Pc: float = 0.0) -> float:
        k = self._k
        return self._cost.step_time(k * T, k * S, k * Ad, k * Ap, k * R, None if Aw is None else k * Aw,
                                    None if Rw is None else k * Rw, k * Pc)

    def step_times(self, T: Any, S: Any, Ad: Any = 0.0, Ap: Any = 0.0, R: Any = 0.0, Aw: Any = None,
                   Rw: Any = None, Pc: Any = 0.0) -> np.ndarray:
        k = self._k
        return self._cost.step_times(np.multiply(k, T), np.multiply(k, S), np.multiply(k, Ad), np.multiply(k, Ap),
                                     np.multiply(k, R), None if Aw is None else np.multiply(k, Aw),
                                     None if Rw is None else np.multiply(k, Rw), np.multiply(k, Pc))


def _dp_cost(cost: Any, ranks: int) -> Any:
    """`cost` with its tp GPUs as `ranks` data-parallel attention groups and the experts over
    all of them (wide EP), as NVIDIA's DeepSeek-R1 harness runs it (enable_attention_dp, WIDEEP).
    (A small touch of the chips branch: the cost side of the attention-DP ranks.)"""
    from simulator.cost.roofline import CostModel

    par = cost.par
    if par.tp % ranks or cost.model.moe is None:
        return cost
    dp = dataclasses.replace(par, ep=par.tp, dp_attention=ranks)
    return CostModel(cost.model, cost.hardware, dp, cost.dtypes, link_dtype=cost.link_dtype)


def _serve(cost: Any, profile: EngineProfile, row: Mapping[str, Any], ds: MlperfDataset, limits: dict[str, Any],
           n: int, mean_out: float | None, rate: float | None = None) -> Any:
    """The simulated records of one scheduler (an instance, or one attention-DP rank of it)
    serving n samples: all at t = 0 (Offline), or Poisson at `rate` samples/s (Server)."""
    from simulator.scenario import Scenario
    from simulator.serving.simulate import simulate

    lim = {k: v for k, v in limits.items() if k not in ("notes", "num_requests", "dp_ranks")}
    sc = Scenario(model=cost.model, hardware=cost.hardware, tp=cost.par.tp, pp=cost.par.pp,
                  weight_dtype=row["weight_dtype"], activation_dtype=row["activation_dtype"],
                  kv_dtype=row["kv_dtype"], replicas=1, workload="random", rate=math.inf,
                  num_requests=n, **lim)
    w = offline_query(ds.name, n, seed=SEED, output_mean=mean_out, rate=rate)
    ranks = limits.get("dp_ranks", 1)
    # an attention-DP rank's steps: the instance's cost model with data-parallel attention (each
    # rank's attention on its own sequences, MoE over all ranks: Parallelism.dp_attention), fed
    # the instance's statistics (ranks x the rank's); the KV capacity stays the rank's own
    step_cost: Any = LockstepRanks(_dp_cost(cost, ranks), ranks) if ranks > 1 else cost
    # LoadGen hands the SUT token ids (MLPerf's datasets are tokenised), so no API server
    # tokenizer stands in front of the engine: the profile's tokenizer time is dropped
    view = dataclasses.replace(client_view_for(profile), prompt_token_s=0.0)
    res = simulate(step_cost, w, sc.engine_config(cost), 1, sc.router, client=view)
    done = res.status == 1
    if not done.all():
        reason = next(iter(res.reasons.values()), "not completed")
        raise SkipRow(f"{int((~done).sum())} of {n} samples not served: {reason}")
    return res


def _run(cost: Any, profile: EngineProfile, row: Mapping[str, Any], ds: MlperfDataset, limits: dict[str, Any],
         n: int, mean_out: float | None) -> tuple[float, int, int]:
    """(makespan s, completed samples, their output tokens) of one scheduler serving an
    Offline query of n samples."""
    res = _serve(cost, profile, row, ds, limits, n, mean_out)
    return float(np.max(res.finish_s)), n, int(res.output_len.sum())


def predict(validator: Any, row: Mapping[str, Any]) -> tuple[float, str]:
    """(the row's metric as the simulated LoadGen run gives it, a note of what was assumed).
    An `online_poisson` row is a Server (or Interactive) run (`predict_server`), any other an
    Offline one."""
    if row["scenario"] == "online_poisson":
        return predict_server(validator, row)
    metric = row["metric"]
    if metric not in THROUGHPUT_METRICS:
        raise SkipRow(f"metric {metric} is not reported by an MLPerf Offline run")
    ds = DATASETS[str(row["dataset"]).strip().lower()]
    facts = note_facts(row)
    mean_out = facts.get("run_mean_output")
    duration = facts.get("min_duration_ms", DEFAULT_MIN_DURATION_S * 1e3) / 1e3
    profile = validator.profile_of(row)
    cost = validator.cost_model(row)
    key = ("mlperf", id(cost), ds.name, row.get("max_batch_size"), row.get("max_num_tokens"), row["replicas"],
           duration, mean_out, validator.pilot_cap)

    def compute() -> tuple[float, float, str]:
        try:
            lim = settings(profile, cost, row, ds)
            # schedulers that never interact: every engine instance, every attention-DP rank
            instances = int(row["replicas"]) * lim["dp_ranks"]
            lg = loadgen_config(ds, profile, cost.hardware.id, int(row["num_gpus"]))
            minq = lg.min_query_count
            # the submitter's expected rate where its config states it: the query is then known
            # before any run (the simulated rate would put the answer into the question, and a
            # pilot that never fills its seats misjudges it)
            stated = None if lg.expected_qps is None else loadgen_sample_count(ds, duration, lg.expected_qps, minq)
            n_min = -(-(stated or loadgen_sample_count(ds, 0.0, 0.0, minq)) // instances)

            def query(rate: float) -> int:
                """LoadGen's query at target_qps `rate` (the stated one wins), at least n_min a scheduler."""
                return stated or max(loadgen_sample_count(ds, duration, rate, minq), n_min * instances)

            # first run: the minimum query, at most one full batch of seats (but >= 1,000;
            # `--max-requests` N lowers that floor to N, never below the seats: a run that
            # never fills them measures its longest sample, not the Offline throughput, which
            # made a quick look 18-69 % off on dev_mlperf51_offline.csv)
            cap = validator.pilot_cap
            floor = min(MIN_PILOT_SAMPLES, cap) if cap else MIN_PILOT_SAMPLES
            n1 = min(n_min, max(int(lim["max_num_seqs"]), floor))
            t1, k1, tok1 = _run(cost, profile, row, ds, lim, n1, mean_out)
            total = query(instances * k1 / t1)
            n2 = -(-total // instances)
            if n2 <= n1:
                t, k, tok = t1, k1, tok1
            else:
                m = min(n2, 2 * n1)
                t, k, tok = _run(cost, profile, row, ds, lim, m, mean_out)
                if m < n2:  # extend the makespan at the saturated rate (module docstring)
                    slope = (t - t1) / (m - n1)
                    total = query(instances / slope)
                    n2 = -(-total // instances)
                    t += (n2 - m) * slope
                    tok = int(round(tok * n2 / m))
                    k = n2
            note = "; ".join([*lim["notes"], f"LoadGen query {total} samples ({k} per scheduler x {instances})"])
            return instances * tok / t, instances * k / t, note
        except SpecError as e:
            raise SkipRow(str(e)) from None

    tokens_s, samples_s, note = validator.cached(key, compute)
    if mean_out is None:
        note += f"; reference mean output {ds.output.mean:g} (the row states no run mean)"
    if metric == "request_throughput":
        return samples_s, note
    if metric == "output_tokens_per_s_per_gpu":
        return tokens_s / row["num_gpus"], note
    return tokens_s, note


def server_sample_count(rate: float, cap: int | None) -> int:
    """Samples one scheduler serves in a simulated Server run at `rate` samples/s: two minutes
    of arrivals, at least SERVER_MIN_SAMPLES and at most SERVER_MAX_SAMPLES (`cap`, a
    validator's max_requests, lowers both)."""
    n = min(max(SERVER_MIN_SAMPLES, math.ceil(rate * SERVER_SPAN_S)), SERVER_MAX_SAMPLES)
    return max(min(n, cap), 2) if cap else n


def server_numbers(res: Any) -> dict[str, float]:
    """The latencies of one scheduler's Server run in LoadGen's steady state: the samples that
    arrived after the first SERVER_WARMUP of them (an empty system at t = 0 is not the run's
    state), and `mean_output_tokens` their mean output. TPOT is LoadGen's and vLLM's:
    (latency - TTFT) / (tokens - 1), over samples of two or more tokens. (Throughput is not read
    off the run: `predict_server`.)"""
    arr, first, fin, out = res.arrival_s, res.first_token_s, res.finish_s, res.output_len
    k0 = int(len(arr) * SERVER_WARMUP)
    o = out[k0:]
    many = o > 1
    vals = {"mean_output_tokens": float(o.mean())}
    for name, x in (("ttft_ms", (first - arr)[k0:] * 1e3),
                    ("tpot_ms", (fin[k0:] - first[k0:])[many] / (o[many] - 1) * 1e3),
                    ("e2el_ms", (fin - arr)[k0:] * 1e3)):
        if x.size:
            vals[f"mean_{name}"] = float(np.mean(x))
            vals[f"median_{name}"] = float(np.median(x))
            vals[f"p99_{name}"] = float(np.percentile(x, 99))
    return vals


def predict_server(validator: Any, row: Mapping[str, Any]) -> tuple[float, str]:
    """An MLPerf Server (or Interactive) row: LoadGen issues single-sample queries at the
    row's `request_rate` (the scheduled samples per second, Poisson) for the whole system.
    The engine instances (and attention-DP ranks) serve disjoint shares, so one scheduler is
    simulated at its share of the rate, with the Offline run's limits and cost
    (`settings`, `LockstepRanks`), for `server_sample_count` samples, and the steady-state
    numbers are read off it (`server_numbers`): TTFT / TPOT / latency. Its throughput: a
    system under its capacity (the same row priced as Offline) completes its scheduled rate in
    the long run, samples/s = the row's rate and tokens/s = that x the samples' mean output; one
    over it completes its capacity, and the note says so (a published Server run kept up)."""
    metric = row["metric"]
    if metric not in SERVER_METRICS:
        raise SkipRow(f"metric {metric} is not reported by an MLPerf Server run (allowed: {', '.join(SERVER_METRICS)})")
    rate = row.get("request_rate")
    if rate is None or not (isinstance(rate, (int, float)) and 0 < rate < math.inf):
        raise SkipRow(f"request_rate: {rate!r}; an MLPerf Server row needs LoadGen's scheduled samples per second")
    ds = DATASETS[str(row["dataset"]).strip().lower()]
    mean_out = note_facts(row).get("run_mean_output")
    profile = validator.profile_of(row)
    cost = validator.cost_model(row)
    key = ("mlperf-server", id(cost), ds.name, row.get("max_batch_size"), row.get("max_num_tokens"), row["replicas"],
           float(rate), mean_out, validator.pilot_cap)

    def compute() -> tuple[dict[str, float], str]:
        try:
            lim = settings(profile, cost, row, ds)
            instances = int(row["replicas"]) * lim["dp_ranks"]
            per = float(rate) / instances
            n = server_sample_count(per, validator.pilot_cap)
            res = _serve(cost, profile, row, ds, lim, n, mean_out, rate=per)
        except SpecError as e:
            raise SkipRow(str(e)) from None
        vals = server_numbers(res)
        notes = [*lim["notes"], f"Server: {n} samples a scheduler at {per:.4g} samples/s (Poisson) x {instances}"]
        # the most it can complete: the same row priced as Offline (its queue full all the time)
        off = {**row, "scenario": "offline_max_throughput"}
        cap, _ = predict(validator, {**off, "metric": "request_throughput"})
        if float(rate) <= cap:
            # a system under its capacity completes, in the long run, what it is offered:
            # LoadGen's scheduled rate (the window's own count adds the noise of a few thousand
            # Poisson arrivals, ~2 %, that a 600 s run does not have)
            vals["request_throughput"] = float(rate)
            vals["output_tokens_per_s"] = float(rate) * vals["mean_output_tokens"]
        else:
            vals["request_throughput"] = cap
            vals["output_tokens_per_s"], _ = predict(validator, {**off, "metric": "output_tokens_per_s"})
            notes.append(f"the scheduled {float(rate):.4g} samples/s exceed the simulated Offline capacity {cap:.4g} "
                         "(a published Server run kept up): throughput is that capacity, latencies grow with the run")
        return vals, "; ".join(notes)

    vals, note = validator.cached(key, compute)
    if mean_out is None:
        note += f"; reference mean output {ds.output.mean:g} (the row states no run mean)"
    if metric == "output_tokens_per_s_per_gpu":
        return vals["output_tokens_per_s"] / row["num_gpus"], note
    if metric not in vals:
        raise SkipRow(f"no sample of two or more tokens for {metric}")
    return vals[metric], note


__all__ = ["DEFAULT_MIN_DURATION_S", "LOADGEN_CONFIGS", "LoadgenConfig", "MIN_PILOT_SAMPLES", "SEED", "SERVER_METRICS",
           "THROUGHPUT_METRICS", "loadgen_config", "is_mlperf_row", "predict", "predict_server", "server_numbers",
           "server_sample_count", "settings"]
