"""A serving scenario: every setting of one simulation run, in one validated object.

`simulate`, `sweep`, `plan` and the what-ifs all build a `Scenario` (from CLI options, a
scenario YAML, or Python) and vary fields of it with `dataclasses.replace`. `run()` returns
the per-request result and vLLM's summary.

Workload semantics (as `vllm bench serve`): `workload` names a built-in trace
(`azure-conv`, `azure-code`), a trace file, or `random` (synthetic lengths from
`input_len`/`output_len`/`range_ratio`). A trace replays its own timestamps unless `rate`
is given, which time-scales it to that mean rate; `random` uses Poisson/gamma arrivals at
`rate` (inf: all at t = 0). `concurrency` (`--max-concurrency`) caps the requests in flight at
N: with a finite `rate` the open-loop arrivals wait at the client for a free slot (vLLM's
semaphore, `client_cap.py`); without one (or at rate inf) it is a closed loop of N clients (each
sends its next request when the previous one returns; arrival times are then ignored), the same
schedule as the cap on arrivals all at t = 0.

Engine profiles (`engine`, `--engine NAME|FILE`, `profiles/apply`; default `vllm`, vLLM V1):
the profile prices the run (overheads and kernel factors on the hardware, the all-reduce
width), picks the scheduler policy and, when its KV rule is not vLLM's, the KV capacity
(`gpu_memory_utilization` is then the engine's own fraction). Its default limits fill the
engine settings left unset (`AUTO`: max_num_seqs, max_num_batched_tokens, block_size,
scheduler, gpu_memory_utilization, enable_prefix_caching, policy_params; explicit values win),
on the scenario's hardware; `replace` re-derives the unset ones when it changes the hardware,
parallelism or engine. `engine` None (or "none") keeps llmsim's historical limits (256 seats,
8192 tokens, 0.9 of HBM, no prefix caching) and the hardware YAML's overheads; the `generic`
profile is the same limits and overheads under the vLLM V1 policy.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from simulator.cost.roofline import CostModel
from simulator.cost.speculative import SpeculativeDecoding
from simulator.deployment import check_deployment, kv_link, parse_disagg, price_per_hour
from simulator.metrics.energy import run_energy
from simulator.metrics.slo import goodput_ms, parse_goodput
from simulator.metrics.summary import summarize
from simulator.profiles.apply import (
    client_view_for,
    policy_params_for,
    profile_hardware,
    profile_kv_tokens,
    profile_model,
    profile_settings,
    sglang_seats,
)
from simulator.profiles.profile import load_engine
from simulator.resolve import make_cost_model, make_speculative
from simulator.serving.client_view import ClientView, check_api_servers
from simulator.serving.pool import ROUTERS
from simulator.serving.records import MAX_CLOCK_S, SimResult
from simulator.serving.sched.registry import SCHEDULERS, EngineConfig
from simulator.serving.simulate import Watch, simulate
from simulator.serving.speculative import SPECULATIVE_SCHEDULERS, spec_decode_summary
from simulator.specs.catalog import load_hardware, load_model, read_yaml
from simulator.specs.checks import MAX_SEED, MAX_TOKENS, SpecError, check_int
from simulator.specs.dtypes import DTYPES
from simulator.specs.fields import _did_you_mean
from simulator.specs.hardware import HardwareSpec
from simulator.specs.model import ModelSpec
from simulator.specs.speculative import normalise_speculative_config
from simulator.workloads import workload as wl
from simulator.workloads.named import (
    DEFAULT_NUM_REQUESTS,
    NAMED_WORKLOADS,
    DefaultCount,
    WorkloadRequest,
    chars_summary,
    is_trace_file,
    named_workload,
    replay,
    workload_memory_error,
    workload_param,
)
from simulator.workloads.traces import load_workload

DEFAULT_WORKLOAD = "azure-conv"
#: KV-cache format when none is given: bf16 whatever the activation format, as vLLM's
#: `--kv-cache-dtype auto` keeps the model's 16-bit dtype under `--quantization fp8`.
DEFAULT_KV_DTYPE = "bf16"
#: engine profile when none is given (`--engine none` / `engine=None`: the historical defaults)
DEFAULT_ENGINE = "vllm"
#: marker of an engine setting left to the engine profile (resolved in `Scenario.__post_init__`)
AUTO: Any = None
#: the engine settings a profile fills when unset, and llmsim's historical values without one
ENGINE_FIELDS: dict[str, Any] = {"max_num_seqs": 256, "max_num_batched_tokens": 8192, "block_size": 16,
                                 "scheduler": "vllm", "gpu_memory_utilization": 0.9,
                                 "enable_prefix_caching": False, "policy_params": {}}
#: changing one of these re-derives the engine settings left unset (`Scenario.replace`)
_ENGINE_INPUTS = ("engine", "hardware", "tp", "pp", "max_model_len", "model", "weight_dtype", "kv_dtype")


#: beyond numpy's array sizes (2**63 raised ValueError); below it a run too big for the
#: machine's memory is refused by `run` with a memory message
MAX_SIM_REQUESTS = 10**12
#: peak bytes a simulated request costs: docs/reliability.md's memory bound (105 B kept +
#: 76 B of the summary's temporaries). Checked before the workload is built: between ~1e8
#: requests and the 1e12 cap, numpy's lazily committed arrays were allocated without a
#: MemoryError and the kernel's OOM killer ended the process instead (-n 2147483648).
PEAK_BYTES_PER_REQUEST = 181


def _physical_memory_bytes() -> int | None:
    """This machine's memory (None where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def check_requests_fit(num_requests: int) -> None:
    """Refuse a run whose request records alone would exceed this machine's memory."""
    total = _physical_memory_bytes()
    need = num_requests * PEAK_BYTES_PER_REQUEST
    if total and need > total:
        raise SpecError(f"num_requests: {num_requests:,} requests need about {need / 1e9:,.1f} GB at the peak "
                        f"({PEAK_BYTES_PER_REQUEST} bytes each, docs/reliability.md), more than this machine's "
                        f"{total / 1e9:,.1f} GB of memory; simulate fewer")


#: the synthetic workload's lengths (read by `NamedWorkload.uses_lengths` workloads; output_len
#: also by `uses_output_len` ones) and their defaults, which any other workload must leave as they are
_LENGTH_FIELDS = ("input_len", "output_len", "range_ratio")


@dataclass(frozen=True)
class Scenario:
    """Model x hardware x parallelism x engine limits x workload x SLOs."""

    model: str = "llama-3.1-8b"
    hardware: str = "h100-sxm"
    tp: int = 1
    pp: int = 1
    ep: int = 1  # expert parallelism of MoE layers (divides tp; parallel.py)
    pp_microbatches: int = 1  # micro-batches in flight through the pipeline stages
    expert_imbalance: float = 1.0  # busiest EP rank's load over the mean (1: uniform routing)
    dp_attention: int = 1  # data-parallel attention groups inside the replica (divides tp)
    weight_dtype: str | None = None
    activation_dtype: str | None = None  # None: the checkpoint's (ModelSpec.activation_for: W8A8 fp8, else bf16)
    kv_dtype: str | None = None
    ideal: bool = False
    efficiency: dict = field(default_factory=dict)
    replicas: int = 1
    router: str = "round-robin"
    workload: str = DEFAULT_WORKLOAD
    rate: float | None = None
    burstiness: float = 1.0
    # vLLM's ramp-up (`--ramp-up-strategy linear|exponential`, start/end rps; workloads.workload.RampUp)
    ramp_up_strategy: str | None = None
    ramp_up_start_rps: int | None = None
    ramp_up_end_rps: int | None = None
    #: the client's timeout (s) after a send: an unfinished request is aborted then and counts
    #: as failed (serving/client_view.py); None: none (vLLM bench serve's is 6 h)
    request_timeout_s: float | None = None
    #: vLLM's --api-server-count: API-server processes per replica (serving/client_view.py);
    #: None: vLLM's default, the data-parallel size (dp_attention) under the vllm profile, else 1
    api_server_count: int | None = None
    concurrency: int | None = None
    num_requests: int = DEFAULT_NUM_REQUESTS  # not given: a trace file replays whole
    input_len: int = 1024
    output_len: int = 128
    range_ratio: float = 0.0
    max_num_seqs: int = AUTO  # AUTO: the engine profile's default (ENGINE_FIELDS without one)
    max_num_batched_tokens: int = AUTO
    scheduler: str = AUTO
    block_size: int = AUTO
    gpu_memory_utilization: float = AUTO
    max_model_len: int | None = None
    kv_capacity_tokens: int | None = None
    goodput: dict = field(default_factory=dict)  # {"ttft": ms, "tpot": ms, "e2el": ms}
    seed: int = 0
    skip_bad_rows: bool = False
    max_duration_s: float | None = None
    debug: bool = False
    engine: str | None = DEFAULT_ENGINE  # engine profile id or file (None / "none": historical defaults)
    policy_params: dict = AUTO  # the scheduler policy's parameters
    disagg: str | None = None  # "P:D": disaggregated prefill/decode pools (deployment.py)
    deployment: dict = field(default_factory=dict)  # per-pool settings of a disaggregated run
    # prefix caching and the workloads that exercise it (workloads/named.py)
    enable_prefix_caching: bool = AUTO
    warm_cache: bool = False
    kv_offloading_size: float = 0.0  # GiB of host memory for evicted prefix blocks (per replica)
    dataset_path: str | None = None
    #: the named workload's own parameters (`workloads.named.NAMED_WORKLOADS`, e.g. shared-prefix's
    #: num_groups); a scenario YAML and `replace` also take them as top-level keys
    workload_params: dict = field(default_factory=dict)
    #: vLLM's --speculative-config (a mapping or its JSON text; `specs/speculative.py`): speculative
    #: decoding simulated in the engine (`serving/speculative.py`); None: off
    speculative_config: dict | None = None
    #: the engine settings that were left unset (filled from the profile); not a setting
    auto_fields: frozenset = field(default=frozenset(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._fill_engine_settings()
        def need(cond: bool, name: str, allowed: str) -> None:
            if not cond:
                raise SpecError(f"{name}: {getattr(self, name)!r} {allowed}")

        def is_num(v: Any) -> bool:
            return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)

        for name in ("tp", "pp", "ep", "dp_attention", "pp_microbatches", "replicas", "num_requests", "input_len", "output_len",
                     "max_num_seqs", "max_num_batched_tokens", "block_size"):
            check_int(name, getattr(self, name))
        for name in ("input_len", "output_len"):  # the token limit, before anything is built (issue 26)
            check_int(name, getattr(self, name), maximum=MAX_TOKENS)
        need(self.num_requests <= MAX_SIM_REQUESTS, "num_requests", f"must be at most {MAX_SIM_REQUESTS:,}")
        check_int("seed", self.seed, 0, maximum=MAX_SEED)
        check_int("concurrency", self.concurrency, optional=True)
        if self.api_server_count is not None:
            check_api_servers("api_server_count", self.api_server_count)
        need(self.rate is None or (is_num(self.rate) and self.rate > 0), "rate",
             "must be a number > 0 requests/s, or inf")
        need(is_num(self.expert_imbalance) and 1 <= self.expert_imbalance <= self.ep, "expert_imbalance",
             "must be a number in [1, ep]")
        need(is_num(self.burstiness) and 0 < self.burstiness < math.inf, "burstiness", "must be a number > 0")
        need(is_num(self.range_ratio) and 0 <= self.range_ratio < 1, "range_ratio", "must be in [0, 1)")
        need(isinstance(self.router, str) and self.router in ROUTERS, "router", f"is not one of {', '.join(ROUTERS)}")
        need(isinstance(self.scheduler, str) and self.scheduler in SCHEDULERS, "scheduler", f"is not one of {', '.join(SCHEDULERS)}")
        for name in ("weight_dtype", "activation_dtype", "kv_dtype"):
            need(getattr(self, name) is None or getattr(self, name) in DTYPES, name, f"is not one of {', '.join(DTYPES)}")
        need(is_num(self.gpu_memory_utilization) and 0 < self.gpu_memory_utilization <= 1,
             "gpu_memory_utilization", "must be in (0, 1]")
        # every other field's type too: a scenario YAML can hold anything (issue 9)
        need(isinstance(self.model, (str, ModelSpec)) and bool(self.model), "model",
             "must be a model id, alias or file path")
        need(isinstance(self.hardware, (str, HardwareSpec)) and bool(self.hardware), "hardware",
             "must be a hardware id or file path")
        for name in ("max_model_len", "kv_capacity_tokens"):
            check_int(name, getattr(self, name), optional=True)
        need(self.max_duration_s is None or (is_num(self.max_duration_s) and self.max_duration_s > 0),
             "max_duration_s", "must be a number of seconds > 0 (or omitted)")
        need(self.request_timeout_s is None or (is_num(self.request_timeout_s) and 0 < self.request_timeout_s < math.inf),
             "request_timeout_s", "must be a number of seconds > 0 (or omitted)")
        for name in ("ideal", "skip_bad_rows", "debug", "enable_prefix_caching", "warm_cache"):
            need(isinstance(getattr(self, name), bool), name, "must be true or false")
        need(isinstance(self.efficiency, dict), "efficiency", "must be a mapping of efficiency fields")
        need(isinstance(self.policy_params, dict), "policy_params", "must be a mapping of scheduler parameters")
        need(isinstance(self.goodput, (dict, str, list, tuple)), "goodput",
             "must be a mapping like {ttft: 500, tpot: 50} (ms)")
        need(is_num(self.kv_offloading_size) and 0 <= self.kv_offloading_size < math.inf,
             "kv_offloading_size", "must be a number of GiB >= 0")
        need(self.dataset_path is None or isinstance(self.dataset_path, str), "dataset_path",
             "must be a file path (or omitted)")
        need(isinstance(self.workload_params, dict), "workload_params", "must be a mapping of workload parameters")
        self._check_workload()
        # the prefix cache's companions act only on a prefix cache: with caching off they were
        # accepted and silently had no effect (issue 26 review)
        for name, on in (("warm_cache", self.warm_cache), ("kv_offloading_size", self.kv_offloading_size > 0)):
            if on and not self.enable_prefix_caching:
                why = (f"engine {self.engine!r} leaves it off" if "enable_prefix_caching" in self.auto_fields
                       else "enable_prefix_caching is false")
                raise SpecError(f"{name}: {getattr(self, name)!r} applies only with prefix caching, and {why}; "
                                "set enable_prefix_caching: true or drop it")
        if self.disagg is not None or self.deployment:
            if self.disagg is not None:
                object.__setattr__(self, "disagg", "{}:{}".format(*parse_disagg(self.disagg)))
                self._check_disagg_settings()
            check_deployment(self.deployment)
            if self.disagg is None:
                # refused, not applied: its prefill/decode/link settings describe two pools; a
                # single pool has no place for them, and dropping them would run another deployment
                raise SpecError("deployment: applies only to a disaggregated run; give disagg: P:D "
                                "(e.g. 1:1) or remove the deployment: section")
        # any spelling (mapping, "ttft:500 e2el:2000", a list of items) -> {metric: ms}; validates
        object.__setattr__(self, "goodput", goodput_ms(self.goodput))
        self._check_speculative()

    def _check_disagg_settings(self) -> None:
        """The aggregated-only settings, refused under disagg: the deployment gives the replicas
        (P + D), and the disaggregated engine models no client timeout (its client view is the
        prefill pool's API-server latency and async lag); both were accepted and silently had no
        effect (issue 26 review)."""
        if self.replicas != 1:
            raise SpecError(f"replicas: {self.replicas!r} applies only to an aggregated run; disagg {self.disagg} "
                            "sets the replicas (P prefill + D decode): drop replicas or disagg")
        if self.request_timeout_s is not None:
            raise SpecError(f"request_timeout_s: {self.request_timeout_s!r}: the client's timeout is not modelled for "
                            f"a disaggregated deployment (disagg {self.disagg}); drop request_timeout_s or disagg")

    def _check_workload(self) -> None:
        """The workload's own parameters, its dataset file, ramp-up and burstiness."""
        named = named_workload(self.workload)
        if named is not None:
            object.__setattr__(self, "workload_params", named.checked_params(self.workload_params))
        elif self.workload_params:
            k = next(iter(self.workload_params))
            param = workload_param(k)
            owners = [w.name for w in set(NAMED_WORKLOADS.values()) if param in w.params]
            raise SpecError(f"{k}: applies to workload {' / '.join(sorted(owners)) or '(none)'} only; "
                            f"{self.workload!r} is a trace")
        if self.dataset_path is not None and not (named is not None and named.dataset_path):
            takes = [w.name for w in NAMED_WORKLOADS.values() if w.dataset_path]
            raise SpecError(f"dataset_path: {self.dataset_path!r} applies to workload {' / '.join(sorted(set(takes)))} "
                            f"only; workload {self.workload!r} reads no dataset file")
        self._check_ramp_up(named)
        # the synthetic lengths act only on a workload that reads them: another workload (or a
        # trace) sets its own lengths, and a value given for it was silently ignored (the CLI
        # refused it; `Scenario(...)`, `from_dict` and a scenario YAML did not; issue 26 review)
        uses = (_LENGTH_FIELDS if named is not None and named.uses_lengths
                else ("output_len",) if named is not None and named.uses_output_len else ())
        for k in _LENGTH_FIELDS:
            if k not in uses and getattr(self, k) != _LENGTH_DEFAULTS[k]:
                readers = sorted({w.name for w in NAMED_WORKLOADS.values()
                                  if w.uses_lengths or (k == "output_len" and w.uses_output_len)})
                what = f"workload {named.name!r}" if named is not None else f"trace {self.workload!r}"
                raise SpecError(f"{k}: {getattr(self, k)!r} applies to workload {' / '.join(readers)} only; "
                                f"{what} sets its own prompt and output lengths")
        if named is None and self.rate is None and self.burstiness != 1.0:
            raise SpecError(
                f"burstiness: {self.burstiness!r} applies only with a rate: trace {self.workload!r} "
                "replays its own arrival times unless --rate time-scales it")

    def _check_speculative(self) -> None:
        """--speculative-config parsed (JSON text to a mapping) and checked against the rest."""
        spec = normalise_speculative_config(self.speculative_config)
        object.__setattr__(self, "speculative_config", spec)
        if spec is None:
            return
        if self.disagg is not None:
            raise SpecError("speculative_config: speculative decoding with --disagg is not modelled")
        if self.scheduler not in SPECULATIVE_SCHEDULERS:
            raise SpecError(f"speculative_config: speculative decoding is modelled under vLLM V1's scheduler "
                            f"({', '.join(SPECULATIVE_SCHEDULERS)}), not {self.scheduler!r}")

    def _check_ramp_up(self, named: Any) -> None:
        """The ramp-up settings: all three or none, no --rate with them, a workload that sends
        as vLLM does (one-line errors; the values are checked by `RampUp`)."""
        given = {k: getattr(self, k) for k in ("ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps")
                 if getattr(self, k) is not None}
        if not given:
            return
        for k in ("ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps"):
            if k not in given:
                raise SpecError(f"{k}: missing; a ramp-up needs ramp_up_strategy, ramp_up_start_rps and "
                                f"ramp_up_end_rps (given: {', '.join(given)})")
        if self.rate is not None and not math.isinf(self.rate):
            raise SpecError(f"rate: {self.rate!r} cannot be combined with ramp_up_strategy (vLLM: 'When using "
                            "ramp-up, do not specify --request-rate'); the ramp sets the rates")
        if named is not None and not named.ramp_up:
            takes = sorted({w.name for w in NAMED_WORKLOADS.values() if w.ramp_up})
            raise SpecError(f"ramp_up_strategy: applies to workloads sent as vLLM sends them "
                            f"({', '.join(takes)}, or a trace), not {named.name!r}")
        self.ramp_up()  # checks the values

    def ramp_up(self) -> wl.RampUp | None:
        """vLLM's ramp-up of this scenario, or None."""
        if self.ramp_up_strategy is None:
            return None
        return wl.RampUp(self.ramp_up_strategy, self.ramp_up_start_rps, self.ramp_up_end_rps)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_dict(cls, data: Any, source: str = "scenario") -> Scenario:
        """Build from a mapping (a scenario YAML); keys are the field names ('-' or '_')."""
        if not isinstance(data, dict):
            raise SpecError(f"{source}: expected a mapping of settings")
        names = {f.name for f in dataclasses.fields(cls) if f.init}
        kw: dict[str, Any] = {}
        params: dict[str, Any] = {}
        for k, v in data.items():
            key = str(k).replace("-", "_")
            if key not in names:
                if workload_param(key) is not None:
                    params[key] = v  # a named workload's parameter, given at the top level
                    continue
                known = names | {p.name for w in NAMED_WORKLOADS.values() for p in w.params}
                raise SpecError(f"{source}: {k}: unknown setting{_did_you_mean(key, known)}")
            kw[key] = v
        if params:
            if not isinstance(kw.get("workload_params", {}), dict):
                raise SpecError(f"{source}: workload_params: must be a mapping of workload parameters")
            kw["workload_params"] = {**kw.get("workload_params", {}), **params}
        if "goodput" in kw:
            kw["goodput"] = goodput_ms(kw["goodput"])
        if isinstance(kw.get("rate"), str):
            kw["rate"] = parse_rate(kw["rate"])
        try:
            return cls(**kw)
        except SpecError as e:
            raise SpecError(f"{source}: {e}") from None

    @classmethod
    def from_yaml(cls, path: str) -> Scenario:
        return cls.from_dict(read_yaml(path), str(path))

    def replace(self, **kw: Any) -> Scenario:
        """A copy with `kw` changed; engine settings left unset stay unset (re-derived for the
        new hardware, parallelism or engine)."""
        if any(k in kw for k in _ENGINE_INPUTS):
            kw = {**{k: AUTO for k in self.auto_fields}, **kw}
        params = {k: kw.pop(k) for k in list(kw) if workload_param(k) is not None}
        if "workload" in kw and "workload_params" not in kw:
            # another workload: keep only the parameters it takes too
            new = named_workload(kw["workload"])
            keep = {p.name for p in new.params} if new is not None else set()
            kw["workload_params"] = {k: v for k, v in self.workload_params.items() if k in keep}
            # and the synthetic lengths it does not read (as `_check_workload` requires)
            uses = (_LENGTH_FIELDS if new is not None and new.uses_lengths
                    else ("output_len",) if new is not None and new.uses_output_len else ())
            kw.update({k: _LENGTH_DEFAULTS[k] for k in _LENGTH_FIELDS if k not in uses and k not in kw})
        if params:
            kw["workload_params"] = {**kw.get("workload_params", self.workload_params), **params}
        return dataclasses.replace(self, **kw)

    def as_dict(self) -> dict[str, Any]:
        """The settings (engine settings left unset as None, so `Scenario(**d)` re-derives them)."""
        d = dataclasses.asdict(self)
        d.pop("auto_fields")
        d.update({k: AUTO for k in self.auto_fields})
        return d

    def _fill_engine_settings(self) -> None:
        """Fill the engine settings left unset (`AUTO`) from the engine profile on this
        hardware, or with llmsim's historical values when `engine` is None / "none"."""
        if isinstance(self.engine, str) and self.engine.strip().lower() == "none":
            object.__setattr__(self, "engine", None)
        auto = frozenset(k for k in ENGINE_FIELDS if getattr(self, k) is AUTO)
        object.__setattr__(self, "auto_fields", auto)
        if self.engine is not None and not (isinstance(self.engine, str) and self.engine):
            raise SpecError(f"engine: {self.engine!r} must be a profile id or file path (or none)")
        if not auto:
            if self.engine is not None:
                load_engine(self.engine)  # one-line error for an unknown id
            return
        if self.engine is None:
            for k in auto:
                object.__setattr__(self, k, dict(ENGINE_FIELDS[k]) if k == "policy_params" else ENGINE_FIELDS[k])
            return
        profile = load_engine(self.engine)
        if not isinstance(self.hardware, (str, HardwareSpec)) or not self.hardware:
            raise SpecError(f"hardware: {self.hardware!r} must be a hardware id or file path")
        tp, pp = self.tp, self.pp
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in (tp, pp)):
            tp, pp = 1, 1  # the field checks that follow name the bad value
        settings = profile_settings(profile, load_hardware(self.hardware), tp=tp, pp=pp,
                                    max_model_len=self.max_model_len if isinstance(self.max_model_len, int) else None)
        for k in auto - {"policy_params"}:
            object.__setattr__(self, k, settings[k])
        if "policy_params" in auto:
            object.__setattr__(self, "policy_params", policy_params_for(profile, self.scheduler))
        if "max_num_seqs" in auto and profile.limits.max_num_seqs == "sglang_kv_derived":
            kv = self.engine_config().kv_capacity_tokens or self.cost_model().memory(
                self.gpu_memory_utilization, self.max_num_batched_tokens, self.max_num_seqs).kv_capacity_tokens
            object.__setattr__(self, "max_num_seqs",
                               sglang_seats(kv, int(self.max_model_len or self.cost_model().model.max_context)))

    # ------------------------------------------------------------------ parts
    def cost_model(self) -> CostModel:
        hw: Any = self.hardware
        model: Any = self.model
        link_dtype = None
        interleaved = False
        if self.engine is not None:
            profile = load_engine(self.engine)
            hw = profile_hardware(load_hardware(hw), profile)
            model = profile_model(load_model(model), profile)
            link_dtype = profile.link_dtype
            interleaved = profile.kernels.pipeline == "interleaved"
        return make_cost_model(model, hw, self.tp, self.pp, self.weight_dtype,
                               self.activation_dtype, self.kv_dtype or DEFAULT_KV_DTYPE, self.ideal,
                               self.efficiency or None, ep=self.ep, pp_microbatches=self.pp_microbatches,
                               expert_imbalance=self.expert_imbalance, link_dtype=link_dtype,
                               dp_attention=self.dp_attention, pp_interleaved=interleaved)

    def speculative(self, cost: CostModel | None = None) -> SpeculativeDecoding | None:
        """Speculative decoding on this scenario's replica (None when off): the draft priced on
        `cost` (default: `cost_model()`). Under an engine profile whose KV rule is not vLLM's it
        is refused (the draft's share of memory is priced with vLLM's rule)."""
        if self.speculative_config is None:
            return None
        if self.engine is not None and load_engine(self.engine).limits.kv_memory_rule != "total_fraction":
            raise SpecError(f"speculative_config: modelled with vLLM's KV memory rule; engine "
                            f"{load_engine(self.engine).id!r} sizes KV by another rule")
        return make_speculative(cost or self.cost_model(), dict(self.speculative_config, seed=self.speculative_config.get(
            "seed", self.seed)))

    def engine_config(self, cost: CostModel | None = None) -> EngineConfig:
        """The scheduler limits; under an engine profile whose KV rule is not vLLM's, the KV
        capacity from that rule (`profiles.apply.profile_kv_tokens`, priced on `cost`)."""
        kv_tokens = self.kv_capacity_tokens
        if kv_tokens is None and self.engine is not None:
            kv_tokens = profile_kv_tokens(load_engine(self.engine), cost or self.cost_model(),
                                          self.gpu_memory_utilization, self.max_num_batched_tokens,
                                          self.max_num_seqs)
        return EngineConfig(max_num_seqs=self.max_num_seqs, max_num_batched_tokens=self.max_num_batched_tokens,
                            block_size=self.block_size, scheduler=self.scheduler,
                            gpu_memory_utilization=self.gpu_memory_utilization,
                            max_model_len=self.max_model_len, kv_capacity_tokens=kv_tokens,
                            max_duration_s=self.max_duration_s, debug=self.debug,
                            enable_prefix_caching=self.enable_prefix_caching, warm_cache=self.warm_cache,
                            cpu_offload_bytes=float(self.kv_offloading_size) * 2**30,
                            policy_params=self.policy_params)

    def client_view(self) -> ClientView:
        """Between the client and the engine core (`serving.client_view`): the engine profile's
        API-server latency and async-scheduling lag, and this scenario's client timeout."""
        profile = load_engine(self.engine) if self.engine is not None else None
        view = client_view_for(profile) if profile is not None else ClientView()
        # vLLM starts one API server per data-parallel rank unless told otherwise
        # (`vllm serve`: api_server_count = data_parallel_size under its internal load balancer)
        servers = self.api_server_count
        if servers is None:
            servers = self.dp_attention if profile is not None and profile.policy == "vllm" else 1
        if servers != 1:
            view = dataclasses.replace(view, api_servers=servers)
        if self.request_timeout_s is None:
            return view
        if self.request_timeout_s <= view.frontend_s:
            raise SpecError(f"request_timeout_s: {self.request_timeout_s!r} must exceed the engine's API-server "
                            f"latency of {view.frontend_s} s")
        return dataclasses.replace(view, timeout_s=float(self.request_timeout_s))

    @property
    def num_requests_given(self) -> bool:
        """num_requests was set (any int but the default marker): otherwise a trace file
        replays whole and a shared-prefix workload runs one round (groups x prompts)."""
        return type(self.num_requests) is not DefaultCount

    @property
    def slos_s(self) -> dict[str, float]:
        return parse_goodput(self.goodput)

    def make_workload(self) -> wl.Workload:
        """The request stream this scenario serves (deterministic in `seed`)."""
        return self.make_workload_noted()[0]

    def make_workload_noted(self) -> tuple[wl.Workload, str]:
        """The workload and how a trace was replayed ("" for generated workloads); refused when
        its arrival times lie beyond `MAX_CLOCK_S`, where float seconds stop resolving a step."""
        if self.num_requests_given:
            check_requests_fit(self.num_requests)
        w, note = self._make_workload()
        a = w.arrival_s
        if len(a) and max(abs(float(a[0])), abs(float(a[-1]))) > MAX_CLOCK_S:
            field_ = "rate" if self.rate is not None else "workload"
            value = self.rate if self.rate is not None else self.workload
            low = f"; use a rate >= {(len(a) - 1) / MAX_CLOCK_S:.3g} requests/s" if self.rate is not None else ""
            raise SpecError(f"{field_}: {value!r}: arrivals reach {max(abs(a[0]), abs(a[-1])):.3g} s, beyond the "
                            f"simulated clock's range of {MAX_CLOCK_S:g} s (float seconds stop resolving "
                            f"short steps beyond it){low}")
        return w, note

    def _make_workload(self) -> tuple[wl.Workload, str]:
        name = str(self.workload)
        n = self.num_requests if self.num_requests_given else None
        named = named_workload(name)
        if named is not None:
            req = WorkloadRequest(n, self.rate, self.burstiness,
                                  self.seed, self.input_len, self.output_len, self.range_ratio, self.dataset_path,
                                  self.workload_params, lambda: self.cost_model().model, self.ramp_up())
            return self._clients(named.build(req)), ""
        trace = load_workload(name, skip_bad_rows=self.skip_bad_rows)
        w, note = replay(trace, n, is_trace_file(name))
        if self.ramp_up_strategy is not None:
            w = wl.with_arrivals(w, math.inf, self.burstiness, self.seed, ramp_up=self.ramp_up())
        elif self.rate is not None:
            if self.burstiness != 1.0:
                w = wl.with_arrivals(w, self.rate, self.burstiness, self.seed)
            else:
                w = wl.scale_to_rate(w, self.rate)
        return self._clients(w), note

    def _clients(self, w: wl.Workload) -> wl.Workload:
        """`concurrency` applied: a cap on the open loop at a finite rate, else closed-loop clients."""
        if self.concurrency is None:
            return w
        if (self.rate is not None and math.isfinite(self.rate)) or self.ramp_up_strategy is not None:
            return dataclasses.replace(w, max_concurrency=self.concurrency)
        return dataclasses.replace(w, concurrency=self.concurrency)

    def pool(self, name: str) -> Scenario:
        """The scenario of one pool of a disaggregated deployment ("prefill" or "decode"): this
        one with the pool's `deployment:` overrides (`deployment.POOL_KEYS`)."""
        over = {str(k).replace("-", "_"): v for k, v in (self.deployment or {}).get(name, {}).items()}
        try:
            return self.replace(disagg=None, deployment={}, **over)
        except SpecError as e:
            raise SpecError(f"deployment.{name}.{e}") from None

    def run(self, progress: Callable[[int, int], None] | None = None,
            workload: wl.Workload | None = None, itl_times: bool = False, watch: Watch | None = None,
            cost: CostModel | None = None) -> tuple[SimResult, dict[str, Any]]:
        """Simulate; returns (per-request result, vLLM-style summary). `itl_times`: keep when
        each inter-token gap was observed (`SimResult.itl_timed`: a time series of the run).
        `workload`, `cost`: this scenario's own, already made (a capacity search reuses them
        across its probes); `watch`: may stop the run early (`serving.simulate.simulate`)."""
        if self.disagg is not None:
            return self._run_disagg(workload if workload is not None else self.make_workload(), progress,
                                    itl_times)
        cost = cost if cost is not None else self.cost_model()
        try:  # each MemoryError names what was being built (issue 26, cause 9)
            w, note = (workload, "") if workload is not None else self.make_workload_noted()
        except MemoryError:
            raise SpecError(workload_memory_error(self.workload, self.workload_params, self.num_requests)) from None
        spec = self.speculative(cost)
        try:
            res = simulate(cost, w, self.engine_config(cost), self.replicas, self.router, progress,
                           self.client_view(), speculative=spec, itl_times=itl_times, watch=watch)
        except MemoryError:
            raise SpecError(f"num_requests: simulating {w.num_requests} requests of workload {w.name or self.workload!r} "
                            "does not fit in this machine's memory (about 80 bytes each, plus the prompts' "
                            "block hashes with prefix caching); simulate fewer") from None
        summary = summarize(res, self.slos_s)
        summary.update(run_energy(cost.hardware, res.meta, summary["duration"], summary["total_output_tokens"]))
        summary["workload"] = w.name or str(self.workload)
        summary["model"] = cost.model.id
        summary["hardware"] = cost.hardware.id
        summary["tp"] = self.tp
        summary.update(formats_summary(cost))
        if self.engine is not None:
            summary["engine"] = load_engine(self.engine).id
        summary["replicas"] = self.replicas
        summary["kv_capacity_tokens_per_replica"] = res.meta["kv_capacity_tokens_per_replica"]
        if note:
            summary["trace_replay"] = note
        summary.update(chars_summary(w, res.status == 1, summary["duration"]))
        if w.bad_rows:
            summary["bad_rows_skipped"] = w.bad_rows
        if "speculative" in res.meta:
            summary.update(spec_decode_summary(res.meta["speculative"]))
        notes = list(cost.notes) + (spec.notes if spec is not None else [])
        if notes:
            summary["notes"] = notes
        return res, summary


    def _run_disagg(self, workload: wl.Workload, progress: Callable[[int, int], None] | None = None,
                    itl_times: bool = False) -> tuple[SimResult, dict[str, Any]]:
        """Simulate the scenario's disaggregated deployment (`deployment.py`): (result, summary)."""
        from simulator.serving.disagg import simulate_disagg, transfer_summary

        sc = self
        P, D = parse_disagg(sc.disagg)
        ps, ds = sc.pool("prefill"), sc.pool("decode")
        pc, dc = ps.cost_model(), ds.cost_model()
        if pc.model.id != dc.model.id:
            raise SpecError("deployment: both pools must serve the same model")
        link = kv_link(pc, dc, P, D, (sc.deployment or {}).get("link"))
        # the client's side (API-server latency, async lag) is the prefill pool's engine's: the
        # request enters there (before, a disaggregated TTFT left it out and `plan --disagg`
        # compared it with aggregated TTFTs that include it)
        res = simulate_disagg(pc, dc, workload, link, ps.engine_config(), ds.engine_config(), P, D,
                              ps.router, ds.router, progress, itl_times, client=ps.client_view())
        summary = summarize(res, sc.slos_s)
        summary.update(transfer_summary(res))
        summary.update({
            "workload": workload.name or str(sc.workload), "model": pc.model.id,
            "hardware": pc.hardware.id if pc.hardware.id == dc.hardware.id else f"{pc.hardware.id}/{dc.hardware.id}",
            "disagg": f"{P}:{D}", "tp": sc.tp, "prefill_tp": ps.tp, "decode_tp": ds.tp,
            "prefill_hardware": pc.hardware.id, "decode_hardware": dc.hardware.id,
            "replicas": P + D, "prefill_replicas": P, "decode_replicas": D,
            "kv_capacity_tokens_per_replica": res.meta["kv_capacity_tokens_per_replica"],
            "prefill_busy_s": res.meta["prefill_busy_s"], "decode_busy_s": res.meta["decode_busy_s"],
            **formats_summary(pc, dc),
        })
        price = price_per_hour(pc, dc, P, D)
        if price is not None:
            summary["price_per_hour_usd"] = price
        notes = list(dict.fromkeys(pc.notes + dc.notes))
        if notes:
            summary["notes"] = notes
        return res, summary

_LENGTH_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(Scenario) if f.name in _LENGTH_FIELDS}


def formats_summary(cost: CostModel, decode: CostModel | None = None) -> dict[str, str]:
    """The number formats a run priced, for its report: `weights_format` (with the format of
    the weights a checkpoint leaves unquantised, "fp4 (routed experts; rest bf16)" for gpt-oss's
    MXFP4 checkpoint), `activations_format`, `kv_cache_format`; a disaggregated run's pools
    each ("fp8 (prefill) / bf16 (decode)" where they differ). Said because a model's default
    weight format is its checkpoint's (`ModelSpec.default_weight_dtype`), not always bf16. The
    keys are not the scenario's field names (`weight_dtype`, ...): a sweep's points carry both."""
    def one(c: CostModel) -> tuple[str, str, str]:
        d, m = c.dtypes, c.model
        rest = m.unquantized_dtype(d.weight)
        return (d.weight if rest == d.weight else f"{d.weight} (routed experts; rest {rest})", d.activation, d.kv)

    p = one(cost)
    q = p if decode is None else one(decode)
    both = [a if a == b else f"{a} (prefill) / {b} (decode)" for a, b in zip(p, q, strict=True)]
    return dict(zip(("weights_format", "activations_format", "kv_cache_format"), both, strict=True))


def parse_rate(text: Any) -> float:
    """A request rate: a positive number or 'inf'."""
    s = str(text).strip().lower()
    if s in ("inf", "infinity", "max"):
        return math.inf
    try:
        v = float(s)
    except ValueError:
        raise SpecError(f"rate: {text!r} is not a number of requests/s or 'inf'") from None
    if not v > 0:
        raise SpecError(f"rate: {text!r} must be > 0 requests/s (or inf)")
    return v


def check_model_exists(name: str) -> None:
    load_model(name)
