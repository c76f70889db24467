"""Workloads built by name: the registry `NAMED_WORKLOADS` (random, ShareGPT as vLLM samples
it, inference-perf's shared prefix, ...) and trace replay (whole trace by default).

A named workload is one `NamedWorkload` entry: its generator (a `WorkloadRequest` in, a
`Workload` out), its own parameters (`WorkloadParam`: each is a scenario setting, a scenario
YAML key and a command-line flag at once) and which of the common settings it reads (rate,
burstiness, seed, `-n` and, with `uses_lengths`, --input-len/--output-len/--range-ratio). A
new synthetic workload is one `register(NamedWorkload(...))` call here (docs/architecture.md,
"add a synthetic workload"). A name not in the registry is a trace: a built-in
(`traces.BUILTIN_WORKLOADS`) or a file.

* `sharegpt`: `sharegpt.sample_sharegpt` (vLLM's rules and seed) with the model's tokenizer
  family; the texts' character counts ride along in `extra` (`prompt_chars`,
  `output_chars`) so results report characters as well as tokens.
* `shared-prefix`: `prefix.shared_prefix` (groups x prompts per group, system prompt length,
  question length, output length, optional multi-turn rounds), arrivals at `rate`
  (constant spacing as inference-perf sends them; with `burstiness` != 1 gamma).
* a trace (a built-in or a file): a trace *file* replays whole, once, unless `-n` is given;
  a built-in trace keeps the 1,000-request default (a sample of a long trace). `-n` below the
  trace's length takes its first n requests, above it tiles the trace (`workload.take`), and
  `replay_note` says which.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from simulator.specs.checks import MAX_TOKENS, SpecError, check_int
from simulator.workloads import workload as wl


class DefaultCount(int):
    """The default `Scenario.num_requests`, told apart from the same number given on purpose
    (an int subclass: it prints, compares and serialises as the plain number)."""

    __slots__ = ()


#: requests when -n is not given and the workload has no natural size
DEFAULT_NUM_REQUESTS = DefaultCount(1000)

@dataclass(frozen=True)
class WorkloadParam:
    """One parameter of a named workload: a scenario setting `name` (in
    `Scenario.workload_params`, a YAML key of the same name, the flag `--name-with-dashes`).
    `minimum`: the smallest integer allowed; None for a true/false flag."""

    name: str
    default: Any
    help: str
    minimum: int | None = 0
    #: the largest integer allowed (token lengths: `MAX_TOKENS`, checked before anything is built)
    maximum: int | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def check(self, value: Any) -> None:
        if self.minimum is None:
            if not isinstance(value, bool):
                raise SpecError(f"{self.name}: {value!r} must be true or false")
        else:
            check_int(self.name, value, self.minimum, maximum=self.maximum)


@dataclass(frozen=True)
class WorkloadRequest:
    """What a named workload's generator is given: the scenario's common workload settings and
    the workload's own parameters (`params`, defaults filled). `num_requests` is None when `-n`
    was not given (the workload's natural size, else `DEFAULT_NUM_REQUESTS`); `rate` None is
    rate inf; `model()` loads the served model's spec (ShareGPT needs its tokenizer);
    `ramp_up`: vLLM's ramp-up of the send rate (only for entries with `ramp_up=True`)."""

    num_requests: int | None
    rate: float | None
    burstiness: float
    seed: int
    input_len: int
    output_len: int
    range_ratio: float
    dataset_path: str | None
    params: Mapping[str, Any]
    model: Callable[[], Any]
    ramp_up: wl.RampUp | None = None


@dataclass(frozen=True)
class NamedWorkload:
    """A workload built by name (module docstring). `uses_lengths`: reads --input-len,
    --output-len and --range-ratio; `uses_output_len`: reads --output-len only;
    `dataset_path`: reads --dataset-path (a file of the dataset it samples); `ramp_up`: sends as
    `vllm bench serve` does, so it takes vLLM's --ramp-up-strategy."""

    name: str
    help: str
    build: Callable[[WorkloadRequest], wl.Workload]
    params: tuple[WorkloadParam, ...] = ()
    aliases: tuple[str, ...] = ()
    uses_lengths: bool = False
    uses_output_len: bool = False
    dataset_path: bool = False
    ramp_up: bool = False

    def defaults(self) -> dict[str, Any]:
        return {p.name: p.default for p in self.params}

    def checked_params(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """`given` with the defaults filled in and every value checked; one-line errors."""
        allowed = {p.name: p for p in self.params}
        for k in given:
            if k not in allowed:
                owners = [w.name for w in NAMED_WORKLOADS.values() if any(p.name == k for p in w.params)]
                where = f"applies to workload {' / '.join(owners)} only" if owners else "is not a workload parameter"
                raise SpecError(f"{k}: {where}; workload {self.name!r} takes "
                                f"{', '.join(allowed) or 'no parameters of its own'}")
        out = {**self.defaults(), **given}
        for k, v in out.items():
            allowed[k].check(v)
        return out


#: workload name -> its entry (aliases included); `register` adds one
NAMED_WORKLOADS: dict[str, NamedWorkload] = {}


def register(entry: NamedWorkload) -> NamedWorkload:
    for key in (entry.name, *entry.aliases):
        NAMED_WORKLOADS[key] = entry
    return entry


def named_workload(name: Any) -> NamedWorkload | None:
    """The registry entry of a workload name (any case), or None for a trace."""
    return NAMED_WORKLOADS.get(str(name).strip().lower())


def workload_param(name: str) -> WorkloadParam | None:
    """The parameter called `name` in any registered workload (None if none has it)."""
    for entry in NAMED_WORKLOADS.values():
        for p in entry.params:
            if p.name == name:
                return p
    return None


def tokenizer_family(model: Any) -> str:
    """The ShareGPT table family of a model spec's `tokenizer` (llama3 when unknown)."""
    from simulator.workloads.sharegpt import TOKENIZER_FAMILIES

    tok = str(getattr(model, "tokenizer", "") or "llama3").lower()
    for fam, enc in TOKENIZER_FAMILIES.items():
        if tok in (fam, enc) or tok.startswith(fam):
            return fam
    return "llama3"


def _random(req: WorkloadRequest) -> wl.Workload:
    n = int(DEFAULT_NUM_REQUESTS) if req.num_requests is None else req.num_requests
    return wl.synthetic(n, math.inf if req.rate is None else req.rate, req.input_len, req.output_len,
                        range_ratio=req.range_ratio, burstiness=req.burstiness, seed=req.seed,
                        ramp_up=req.ramp_up)


def _sharegpt(req: WorkloadRequest) -> wl.Workload:
    return sharegpt_workload(req.num_requests, req.rate, req.burstiness, req.seed, req.model(), req.dataset_path,
                             req.ramp_up)


def sharegpt_workload(n: int | None, rate: float | None, burstiness: float, seed: int, model: Any,
                      dataset_path: str | None = None, ramp_up: wl.RampUp | None = None) -> wl.Workload:
    """ShareGPT as `vllm bench serve` samples it, sent on vLLM's schedule (`workload.arrivals`:
    its dataset shuffles with Python's `random`, so the gamma draws are the first of
    `np.random.seed(seed)`, `vllm_rng(seed)` here)."""
    from simulator.workloads.sharegpt import sample_sharegpt

    n = int(DEFAULT_NUM_REQUESTS) if n is None else n
    s = sample_sharegpt(n, seed=seed, tokenizer=tokenizer_family(model), dataset_path=dataset_path)
    t = wl.arrivals(n, math.inf if rate is None else rate, burstiness, wl.vllm_rng(seed),
                    "poisson" if burstiness == 1 else "gamma", ramp_up)
    return wl.Workload(t, s.prompt_tokens, s.output_tokens, name="sharegpt", clock_start_s=0.0,
                       extra={"prompt_chars": s.prompt_chars, "output_chars": s.output_chars})


def _shared_prefix(req: WorkloadRequest) -> wl.Workload:
    from simulator.workloads.shared_prefix import shared_prefix

    rate = math.inf if req.rate is None else req.rate
    # inference-perf's `load.type: constant` timer: exponential gaps rescaled to end at n / rate
    # (`inference_perf/loadgen/load_timer.py` ConstantLoadTimer), i.e. the "poisson" schedule
    process = "poisson" if req.burstiness == 1.0 else "gamma"
    p = req.params
    pw = shared_prefix(p["num_groups"], p["prompts_per_group"], p["system_prompt_len"], p["question_len"],
                       req.output_len, req.num_requests, rate=rate, process=process,
                       burstiness=req.burstiness, multi_turn=p["multi_turn"], seed=req.seed)
    return pw.to_workload(name="shared-prefix", clock_start_s=0.0)


register(NamedWorkload(
    "random", "synthetic lengths (--input-len, --output-len, --range-ratio) at --rate, as vLLM's random dataset",
    _random, aliases=("synthetic",), uses_lengths=True, ramp_up=True))
register(NamedWorkload(
    "sharegpt", "ShareGPT conversations sampled by vllm bench serve's rules from the shipped count table "
    "(17,400 of ~90,000 conversations), or vLLM's exact draw from the full file (--dataset-path)", _sharegpt,
    dataset_path=True, ramp_up=True))
register(NamedWorkload(
    "shared-prefix", "inference-perf's shared prefix: groups of users sharing a system prompt "
    "(inference-perf's 'constant' timer at --rate: exponential gaps rescaled to end at n/rate; gamma with --burstiness)", _shared_prefix, uses_output_len=True,
    params=(WorkloadParam("num_groups", 8, "groups (one system prompt each)", 1),
            WorkloadParam("prompts_per_group", 16, "questions per group", 1),
            WorkloadParam("system_prompt_len", 1000, "system prompt tokens", 0, MAX_TOKENS),
            WorkloadParam("question_len", 100, "question tokens", 0, MAX_TOKENS),
            WorkloadParam("multi_turn", False, "rounds re-send the session's history (-n > groups x prompts)",
                          None))))


# ------------------------------------------------------------------ inference-perf shared-prefix presets
# (serving branch, issue 23) The BLIS data-collection presets of kubernetes-sigs/inference-perf's
# shared_prefix generator, as the measurement files name them (dataset
# `inference-perf-shared-prefix-<preset>`), from
# inference-sim/tektonc-data-collection@2a7cbcd4e2338cad6d6cb2d9f119728ecd0d4fbd:workloads.yaml (`load.type:
# constant` stages, `data.shared_prefix` with the alias keys num_unique_system_prompts /
# num_users_per_system_prompt, `enable_multi_turn_chat: true`; the same blocks in
# inference-sim/training@c4f03409:default_args/*/profile.yaml).

#: dataset names of the presets start with this
INFERENCE_PERF_PRESET_PREFIX = "inference-perf-shared-prefix-"
#: inference-perf's own defaults of num_groups x num_prompts_per_group: what builds that ignored
#: the alias keys ran (the dumped results/config.yaml of the Feb-2026 runs,
#: inference-sim/training@c4f03409:default_args/20260217-155451-llama-2-7b-tp1-codegen/results/config.yaml:
#: num_groups 10, num_prompts_per_group 10, no enable_multi_turn_chat)
INFERENCE_PERF_DEFAULT_GROUPS = (10, 10)


@dataclass(frozen=True)
class SharedPrefixPreset:
    """One preset: G system prompts x P users, S system-prompt and Q question tokens, O output
    tokens (ignore_eos), multi-turn chat as configured, and the load stages (rate req/s,
    duration s) of `load.type: constant`."""

    num_groups: int
    prompts_per_group: int
    system_prompt_len: int
    question_len: int
    output_len: int
    stages: tuple[tuple[float, float], ...]
    multi_turn: bool = True

    def stage_requests(self, stage: int) -> int:
        """inference-perf's request count of a stage: int(rate x duration) (ConstantLoadTimer)."""
        rate, duration = self.stages[stage]
        return int(rate * duration)


#: preset name (without the prefix) -> its settings (workloads.yaml, above)
INFERENCE_PERF_PRESETS: dict[str, SharedPrefixPreset] = {
    "general": SharedPrefixPreset(9, 5, 100, 447, 248, ((8.0, 600), (20.0, 600))),
    "codegen": SharedPrefixPreset(11, 4, 100, 466, 247, ((5.0, 600), (10.0, 600))),
    "roleplay": SharedPrefixPreset(10, 5, 150, 600, 251, ((6.0, 1200),)),
    "reasoning": SharedPrefixPreset(23, 1, 100, 934, 1448, ((4.0, 1200),)),
    "general-lite": SharedPrefixPreset(9, 5, 100, 447, 248, ((2.5, 600), (6.0, 600))),
    "reasoning-lite": SharedPrefixPreset(23, 1, 100, 934, 1448, ((1.0, 1200),)),
    "general-ez": SharedPrefixPreset(9, 5, 100, 447, 248, ((2.5, 60), (6.0, 60))),
}


def preset_of(name: Any) -> SharedPrefixPreset | None:
    """The preset of a dataset / workload name (`inference-perf-shared-prefix-<preset>` or the
    bare preset name, any case), or None."""
    key = str(name).strip().lower()
    key = key[len(INFERENCE_PERF_PRESET_PREFIX):] if key.startswith(INFERENCE_PERF_PRESET_PREFIX) else key
    return INFERENCE_PERF_PRESETS.get(key)


def _preset_builder(name: str, preset: SharedPrefixPreset) -> Callable[[WorkloadRequest], wl.Workload]:
    def build(req: WorkloadRequest) -> wl.Workload:
        from simulator.workloads.shared_prefix import shared_prefix

        p = req.params
        stage = int(p["stage"])
        if stage >= len(preset.stages):
            raise SpecError(f"stage: {stage} is not a stage of {name} (it has {len(preset.stages)}: "
                            f"{', '.join(f'{r:g} req/s x {d:g} s' for r, d in preset.stages)})")
        rate = preset.stages[stage][0] if req.rate is None else req.rate
        n = preset.stage_requests(stage) if req.num_requests is None else req.num_requests
        if math.isinf(rate) and req.num_requests is None:
            n = preset.num_groups * preset.prompts_per_group
        # inference-perf's constant timer: exponential gaps rescaled to end at n / rate ("poisson")
        pw = shared_prefix(p["num_groups"], p["prompts_per_group"], p["system_prompt_len"], p["question_len"],
                           p["output_tokens"], max(n, 1), rate=rate,
                           process="poisson" if req.burstiness == 1.0 else "gamma",
                           burstiness=req.burstiness, multi_turn=p["multi_turn"], seed=req.seed)
        return pw.to_workload(name=name, clock_start_s=0.0)
    return build


for _key, _p in INFERENCE_PERF_PRESETS.items():
    _stages = ", ".join(f"{r:g} req/s x {d:g} s" for r, d in _p.stages)
    register(NamedWorkload(
        INFERENCE_PERF_PRESET_PREFIX + _key,
        f"inference-perf shared-prefix preset {_key!r} (BLIS campaigns): {_p.num_groups} system prompts x "
        f"{_p.prompts_per_group} users, {_p.system_prompt_len} + {_p.question_len} prompt and {_p.output_len} "
        f"output tokens, multi-turn; stages {_stages} (--stage picks one; --rate/-n override it)",
        _preset_builder(INFERENCE_PERF_PRESET_PREFIX + _key, _p),
        params=(WorkloadParam("num_groups", _p.num_groups, "groups (one system prompt each)", 1),
                WorkloadParam("prompts_per_group", _p.prompts_per_group, "questions per group", 1),
                WorkloadParam("system_prompt_len", _p.system_prompt_len, "system prompt tokens", 0, MAX_TOKENS),
                WorkloadParam("question_len", _p.question_len, "question tokens", 0, MAX_TOKENS),
                WorkloadParam("output_tokens", _p.output_len, "tokens generated per request (ignore_eos)", 1, MAX_TOKENS),
                WorkloadParam("multi_turn", _p.multi_turn,
                              "rounds re-send the session's history (-n > groups x prompts)", None),
                WorkloadParam("stage", 0, "the preset's load stage giving --rate and -n when not set", 0))))


# ---- MLPerf Inference v5.1 datasets (workloads/mlperf.py): one entry per dataset, its
# statistics and their sources live there


def _mlperf(name: str) -> Callable[[WorkloadRequest], wl.Workload]:
    def build(req: WorkloadRequest) -> wl.Workload:
        from simulator.workloads.mlperf import offline_query

        mean = req.params.get("mean_output_tokens") or None
        return offline_query(name, req.num_requests, seed=req.seed, output_mean=mean, rate=req.rate,
                             burstiness=req.burstiness)
    return build


def _register_mlperf() -> None:
    from simulator.workloads.mlperf import DATASETS

    for ds in DATASETS.values():
        register(NamedWorkload(ds.name, ds.help, _mlperf(ds.name), params=(
            WorkloadParam("mean_output_tokens", 0, "MLPerf datasets: mean output tokens per sample "
                          "(0: the reference model's published mean; a run's own mean is its Tokens/s "
                          "over Samples/s)", 0, MAX_TOKENS),)))


_register_mlperf()


def replay(trace: wl.Workload, n: int | None, is_file: bool) -> tuple[wl.Workload, str]:
    """The trace as replayed, and a note saying how (see the module docstring)."""
    m = trace.num_requests
    if n is None:
        if is_file:
            return trace, f"whole trace, once ({m} requests)"
        n = int(DEFAULT_NUM_REQUESTS)
    if n == m:
        return trace, f"whole trace, once ({m} requests)"
    if n < m:
        return wl.take(trace, n), f"first {n} of the trace's {m} requests"
    return wl.take(trace, n), f"trace of {m} requests tiled to {n} (repeated in order)"


def is_trace_file(name: str) -> bool:
    from simulator.workloads.traces import BUILTIN_WORKLOADS

    key = name.strip().lower().replace("_", "-")
    return Path(name).is_file() or key not in BUILTIN_WORKLOADS


def chars_summary(w: wl.Workload, done: np.ndarray, duration_s: float) -> dict[str, Any]:
    """Characters of the completed requests' texts when the workload knows them."""
    if "output_chars" not in w.extra or "prompt_chars" not in w.extra:
        return {}
    out_c = int(np.asarray(w.extra["output_chars"])[done].sum())
    in_c = int(np.asarray(w.extra["prompt_chars"])[done].sum())
    out_t = int(w.output_len[done].sum())
    rate = 1.0 / duration_s if duration_s > 0 else float("nan")
    return {"total_input_chars": in_c, "total_output_chars": out_c,
            "output_chars_per_s": out_c * rate,
            "output_chars_per_token": out_c / out_t if out_t else float("nan")}


def workload_memory_error(name: Any, params: Mapping[str, Any], num_requests: Any) -> str:
    """The one-line error when building workload `name` ran out of memory (issue 26, cause 9):
    it names what was being built (the trace file and its size, or the named workload and its
    settings), never just the request count."""
    text = str(name)
    entry = named_workload(text)
    if entry is not None:
        given = ", ".join(f"{k}={v!r}" for k, v in params.items()) or "its defaults"
        return (f"workload: building {entry.name!r} ({given}; num_requests={num_requests}) does not fit in "
                "this machine's memory; use fewer requests or shorter prompts")
    path = Path(text)
    if path.is_file():
        return (f"workload: reading the trace file {text} ({path.stat().st_size:,} bytes) does not fit in this "
                "machine's memory (a line or the whole file is too large); split it or use a smaller one")
    return (f"workload: the trace {text!r} tiled to num_requests={num_requests} does not fit in this machine's "
            "memory; use fewer requests")

