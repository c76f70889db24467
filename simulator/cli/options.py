"""The command line's shared options and their conversion into values: the scenario options
(simulate, sweep, plan, whatif) into a `Scenario`, the cost-model options (predict,
roofline) into a `CostModel`, and the small list/pair parsers (`--tp 1,2,4`,
`--price HW=USD`, `--workload NAME=FILE`). Bad values raise `SpecError` with one line.
"""

from __future__ import annotations

from typing import Any

import click

from simulator.specs.checks import SpecError


def cost_options(fn: Any) -> Any:
    """Options shared by `predict` and `roofline`: model, hardware, parallelism, dtypes, efficiency."""
    from simulator.specs.dtypes import DTYPES

    dt = click.Choice(list(DTYPES))
    opts = [
        click.option("--model", "-m", required=True, help="Model id, alias, YAML or config.json path."),
        click.option("--hardware", "-H", "-g", required=True, help="Hardware id or YAML path (-g is an alias)."),
        click.option("--tp", type=int, default=1, show_default=True, help="Tensor-parallel degree."),
        click.option("--pp", type=int, default=1, show_default=True, help="Pipeline-parallel degree."),
        click.option("--ep", type=int, default=1, show_default=True, help="MoE expert-parallel degree (divides --tp)."),
        click.option("--dp-attention", type=int, default=1, show_default=True,
                     help="Data-parallel attention groups inside the replica (divides --tp; see simulate --help)."),
        click.option("--weight-dtype", type=dt, default=None, help="Weight format [default: the model's]."),
        click.option("--activation-dtype", type=dt, default=None,
                     help="Activation format [default: the checkpoint's: fp8 for a W8A8 FP8 checkpoint "
                          "(DeepSeek-V3, Kimi-K2) at its own weight format, else bf16]."),
        click.option("--kv-dtype", "--kv-cache-dtype", "kv_dtype", default=None,
                     help="KV-cache format, independent of --activation-dtype as in vLLM; vLLM's names too "
                          "(auto = the model dtype, fp8_e4m3, fp8_e5m2, ...) [default: bf16]."),
        click.option("--ideal", is_flag=True, help="Pure roofline: efficiencies 1, no overheads."),
        click.option("--efficiency", "efficiency", multiple=True, metavar="KEY=VALUE",
                     help="Override one hardware efficiency field for this run (repeatable), "
                          "e.g. compute_efficiency=0.7 or step_overhead_s=0.002."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def build_cost(model: str, hardware: str, tp: int, pp: int, weight_dtype: str | None,
                activation_dtype: str, kv_dtype: str | None, ideal: bool,
                efficiency: tuple[str, ...], ep: int = 1, dp_attention: int = 1) -> Any:
    from simulator.resolve import make_cost_model
    from simulator.specs.catalog import load_hardware
    from simulator.specs.hardware import parse_efficiency_overrides

    overrides = parse_efficiency_overrides(efficiency)
    hw = load_hardware(hardware)
    if ideal:  # ideal first, so --efficiency can still add e.g. an overhead on top of it
        hw = hw.ideal()
    from simulator.cli.vllm_flags import kv_cache_dtype
    from simulator.scenario import DEFAULT_KV_DTYPE

    kv = kv_cache_dtype(kv_dtype, activation_dtype) if kv_dtype is not None else DEFAULT_KV_DTYPE
    return make_cost_model(model, hw, tp=tp, pp=pp, weight_dtype=weight_dtype,
                           activation_dtype=activation_dtype, kv_dtype=kv,
                           efficiency=overrides or None, ep=ep, dp_attention=dp_attention)


def _rate_type(value: Any) -> float:
    from simulator.scenario import parse_rate

    return parse_rate(value)


SCENARIO_OPTIONS: list[tuple[tuple, dict]] = [
    (("--model", "-m"), {"help": "Catalog id/alias, model YAML, or HF config.json (file or folder). [default: llama-3.1-8b]"}),
    (("--hardware", "-H"), {"help": "Catalog id, hardware YAML, or calibration overlay. [default: h100-sxm]"}),
    (("--tp", "--tensor-parallel-size", "-tp"), {"type": int, "help": "Tensor-parallel degree per replica (vLLM: --tensor-parallel-size, -tp). [default: 1]"}),
    (("--pp",), {"type": int, "help": "Pipeline-parallel degree per replica. [default: 1]"}),
    (("--ep",), {"type": int, "help": "MoE expert-parallel degree (divides --tp; docs/deployments.md). [default: 1]"}),
    (("--pp-microbatches",), {"type": int, "help": "Micro-batches in flight through the --pp stages. [default: 1]"}),
    (("--expert-imbalance",), {"type": float, "help": "Busiest EP rank's tokens over the mean, >= 1. [default: 1]"}),
    (("--dp-attention",), {"type": int, "help": "Data-parallel attention groups inside the replica (divides --tp): each group of tp/N GPUs runs attention on its own sequences and keeps their KV; MoE layers span all --tp GPUs (--ep = --tp: wide expert parallelism). vLLM --data-parallel-size D --tensor-parallel-size T --enable-expert-parallel is --tp D*T --dp-attention D --ep D*T; SGLang --enable-dp-attention --dp D. [default: 1]"}),
    (("--weight-dtype",), {"help": "Weight format (default: the model's own)."}),
    (("--activation-dtype",), {"help": "Activation format. [default: the checkpoint's: fp8 for a W8A8 FP8 "
                                         "checkpoint (DeepSeek-V3, Kimi-K2) at its own weight format, else bf16]"}),
    (("--kv-dtype", "--kv-cache-dtype"), {"help": "KV-cache format (vLLM: --kv-cache-dtype, whose names it takes too: auto = the model dtype, fp8, fp8_e4m3, fp8_e5m2, ...), independent of --activation-dtype. [default: bf16]"}),
    (("--quantization",), {"help": "vLLM's --quantization method, as weight/activation formats: fp8 (W8A8), awq/gptq (int4 weight-only), mxfp4 (fp4 weights), modelopt_fp4 (W4A4), ...; others are refused with the reason."}),
    (("--ideal",), {"is_flag": True, "default": None, "help": "Pure roofline: efficiencies 1, overheads 0."}),
    (("--efficiency",), {"multiple": True, "help": "Override an efficiency field, KEY=VALUE (repeatable)."}),
    (("--engine",), {"help": "Engine profile: vllm | vllm-v0 | trtllm | trtllm-pytorch | sglang | generic, or a profile YAML; its limits, scheduler and overheads apply where flags leave them unset; none: llmsim's historical limits (256 seqs, 8192 tokens, 0.9 of HBM, no prefix caching) and the hardware YAML's overheads, as generic. [default: vllm]"}),
    (("--replicas",), {"type": int, "help": "Replicas behind the router. [default: 1]"}),
    (("--router",), {"help": lambda: f"{' | '.join(_registries()['routers'])}. [default: round-robin]"}),
    (("--disagg",), {"metavar": "P:D", "help": "Disaggregated serving: P prefill and D decode replicas, KV moved between them (docs/deployments.md)."}),
    (("--workload", "-w"), {"help": lambda: f"{' | '.join(_registries()['traces'] + _registries()['workloads'])} | a trace file (replayed whole unless -n). [default: azure-conv]"}),
    (("--dataset-name",), {"help": lambda: f"vLLM spelling of --workload: {' | '.join(_registries()['workloads'])} (vLLM's other datasets are refused with the reason)."}),
    (("--dataset-path",), {"help": lambda: f"The dataset file of a workload that reads one ({' | '.join(_registries()['dataset_path'])}; refused for the others), e.g. sharegpt: the full ShareGPT JSON (vLLM's exact draw; needs the sharegpt extras). [default: the shipped count table]"}),
    (("--enable-prefix-caching/--no-enable-prefix-caching",), {"default": None, "help": "Automatic prefix caching (vLLM V1 block hashing, LRU). [default: the engine's: on for vllm, off for --engine none]"}),
    (("--kv-offloading-size",), {"type": float, "help": "GiB of host memory per replica holding prefix blocks evicted from the GPU (vLLM's name); reloads priced by the host link. [default: 0]"}),
    (("--warm-cache",), {"is_flag": True, "default": None, "help": "Prefix cache starts holding this workload's prompts (a re-run against a live server)."}),
    (("--rate", "-r", "--request-rate"), {"help": "Requests/s (number or inf). A trace is time-scaled to it; default: the trace's own timing (random: inf)."}),
    (("--burstiness",), {"type": float, "help": "Gamma arrival shape (vLLM): 1 = Poisson, < 1 burstier. [default: 1]"}),
    # vLLM's ramp-up of the send rate (serving branch, issue 23)
    (("--ramp-up-strategy",), {"type": click.Choice(["linear", "exponential"]), "help": "vLLM ramp-up: request i is sent at a rate going from --ramp-up-start-rps to --ramp-up-end-rps (linear or exponential in i); replaces --rate."}),
    (("--ramp-up-start-rps",), {"type": int, "help": "Ramp-up: the first request's rate (req/s, an integer as in vLLM)."}),
    (("--ramp-up-end-rps",), {"type": int, "help": "Ramp-up: the last request's rate (req/s, an integer as in vLLM)."}),
    (("--api-server-count",), {"type": int, "help": "vLLM's API-server processes per replica, each with its own event loop and tokenizer (the stream and tokenizer time divide among them). [default: vLLM's: the data-parallel size, --dp-attention; 1 for other engines]"}),
    (("--request-timeout-s", "--request-timeout"), {"type": float, "help": "The client's timeout (s) per request: unfinished then, it is aborted (its KV freed) and counts as failed (inference-perf with request_timeout null: aiohttp's 300). [default: none]"}),
    (("--concurrency", "--max-concurrency"), {"type": int, "help": "At most N requests in flight (vLLM's --max-concurrency): with a finite --rate, arrivals wait at the client for a free slot (TTFT counts from the send; the wait is client_queue_time); at rate inf, N closed-loop clients."}),
    (("--num-requests", "-n", "--num-prompts"), {"type": int, "help": "Requests to simulate. [default: 1000]"}),
    (("--input-len", "--random-input-len"), {"type": int, "help": "random workload: prompt tokens. [default: 1024]"}),
    (("--output-len", "--random-output-len"), {"type": int, "help": "random workload: output tokens. [default: 128]"}),
    (("--range-ratio", "--random-range-ratio"), {"type": float, "help": "random workload: lengths uniform in L(1±r). [default: 0]"}),
    (("--max-num-seqs",), {"type": int, "help": "Scheduler seat cap. [default: the engine's: vllm 1024 on GPUs of 70+ GiB but A100, else 256; none 256]"}),
    (("--max-num-batched-tokens",), {"type": int, "help": "Token budget per step. [default: the engine's: vllm serve 8192 on GPUs of 70+ GiB but A100 (16384 from 160 GiB), else 2048; none 8192]"}),
    (("--scheduler",), {"help": lambda: f"{' | '.join(_registries()['schedulers'])} (vllm: V1, chunked prefill). [default: the engine's policy: vllm]"}),
    (("--gpu-memory-utilization",), {"type": float, "help": "Fraction of HBM the engine may use. [default: the engine's: vllm 0.92, none 0.9]"}),
    (("--max-model-len",), {"type": int, "help": "Longest prompt+output accepted (default: the model's context)."}),
    (("--speculative-config",), {"metavar": "JSON", "help": "Speculative decoding in vLLM's JSON, e.g. '{\"method\": \"eagle3\", \"num_speculative_tokens\": 3, \"mean_acceptance_length\": 2.6}' (methods eagle, eagle3, mtp, draft_model with \"model\", ngram), plus llmsim's acceptance: acceptance_rate (conditional, per position), mean_acceptance_length or per_position_acceptance_rates (docs/serving_model.md)."}),
    (("--goodput",), {"multiple": True, "help": "SLOs in ms, vLLM syntax: --goodput ttft:500 tpot:50 e2el:2000 (or the flag repeated). Overrides --slo."}),
    (("--slo",), {"help": "SLO preset: chat | code | batch | agent (docs/concepts.md); --goodput overrides its SLOs."}),
    (("--seed",), {"type": int, "help": "Seed of every random draw. [default: 0]"}),
    (("--max-duration-s",), {"type": float, "help": "Simulated-time cap (s): requests unfinished then are cut off, with that reason."}),
    (("--skip-bad-rows",), {"is_flag": True, "default": None, "help": "Skip malformed trace rows (counted in the summary)."}),
    (("--debug",), {"is_flag": True, "default": None, "help": "Check conservation invariants while simulating."}),
    (("-c", "--config"), {"type": click.Path(dir_okay=False), "help": "Scenario YAML with the same settings (flags override it)."}),
]


def _registries() -> dict[str, list[str]]:
    """The names the registries hold: help text reads them (never a hand-written list)."""
    from simulator.serving.pool import ROUTERS
    from simulator.serving.sched.registry import SCHEDULERS
    from simulator.workloads.named import NAMED_WORKLOADS
    from simulator.workloads.traces import BUILTIN_WORKLOADS

    return {"routers": list(ROUTERS), "schedulers": list(SCHEDULERS), "traces": list(BUILTIN_WORKLOADS),
            "workloads": [w.name for w in dict.fromkeys(NAMED_WORKLOADS.values())],
            "dataset_path": [w.name for w in dict.fromkeys(NAMED_WORKLOADS.values()) if w.dataset_path]}


class LazyHelpOption(click.Option):
    """An option whose help text is computed when help is shown (it reads a registry, which
    `llmsim --help` and every command that does not show this help never import)."""

    def __init__(self, *args: Any, help_fn: Any = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.help_fn = help_fn

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        if self.help_fn is not None and self.help is None:
            self.help = self.help_fn()
        return super().get_help_record(ctx)


def workload_param_options() -> list[tuple[tuple, dict]]:
    """One flag per parameter of the named workloads (`workloads.named.NAMED_WORKLOADS`)."""
    from simulator.workloads.named import NAMED_WORKLOADS

    out: dict[str, tuple[tuple, dict]] = {}
    for entry in dict.fromkeys(NAMED_WORKLOADS.values()):
        for p in entry.params:
            if p.name in out:
                continue
            kw: dict[str, Any] = ({"is_flag": True, "default": None} if p.minimum is None else {"type": int})
            kw["help"] = f"{entry.name}: {p.help}. [default: {p.default}]"
            out[p.name] = ((p.flag, p.name), kw)
    return list(out.values())


def _option(decls: tuple, kw: dict[str, Any]) -> Any:
    if callable(kw.get("help")):
        kw = {**kw, "help": None, "help_fn": kw["help"], "cls": LazyHelpOption}
    return click.option(*decls, **kw)


def scenario_options(fn: Any) -> Any:
    """Attach the shared scenario options (simulate, sweep, plan, whatif)."""
    return scenario_options_except()(fn)


def scenario_from_options(opts: dict[str, Any], **overrides: Any) -> Any:
    """Build a Scenario from the scenario YAML (if any) and the options given (which win)."""
    from simulator.metrics.slo import goodput_ms
    from simulator.scenario import Scenario

    base: dict[str, Any] = {}
    if opts.get("config"):
        from simulator.specs.catalog import read_yaml

        data = read_yaml(opts["config"])
        if isinstance(data, dict):
            data = {str(k).replace("-", "_"): v for k, v in data.items()}
            base["slo"] = data.pop("slo", None)
        Scenario.from_dict(data, str(opts["config"]))  # validate the file on its own
        base.update(data)
    for k, v in opts.items():
        if k == "config" or v is None or v == ():
            continue
        base[k] = v
    base.update(overrides)
    _apply_preset(base)
    _apply_dataset_name(base)
    _apply_vllm_formats(base)
    if "efficiency" in base and isinstance(base["efficiency"], (tuple, list)):
        from simulator.specs.hardware import parse_efficiency_overrides

        base["efficiency"] = parse_efficiency_overrides(base["efficiency"])
    if "goodput" in base:
        base["goodput"] = goodput_ms(base["goodput"])
    if "rate" in base and isinstance(base["rate"], str):
        base["rate"] = _rate_type(base["rate"])
    from simulator.workloads.named import named_workload

    lengths = [k for k in ("input_len", "output_len", "range_ratio") if base.get(k) is not None]
    entry = named_workload(base.get("workload", ""))
    if entry is not None and entry.uses_output_len:
        lengths = [k for k in lengths if k != "output_len"]
    if lengths:
        base.setdefault("workload", "random")
        entry = named_workload(base["workload"])
        if entry is None or not entry.uses_lengths:
            what = f"workload {entry.name!r}" if entry is not None else f"trace {base['workload']!r}"
            raise SpecError(f"{lengths[0]}: applies to --workload random only; {what} "
                            "sets its own prompt and output lengths")
    return Scenario.from_dict(base, "options")


def _apply_preset(base: dict[str, Any]) -> None:
    """--slo NAME: its goodput SLOs unless --goodput (or the YAML's goodput) gave some."""
    name = base.pop("slo", None)
    if name is None:
        return
    from simulator.metrics.slo import slo_preset

    preset = slo_preset(name)
    if not base.get("goodput"):
        base["goodput"] = dict(preset.goodput_ms)


def _apply_dataset_name(base: dict[str, Any]) -> None:
    """vLLM's --dataset-name: a named workload or built-in trace, or a one-line refusal that
    says why (`vllm_flags.dataset_workload`)."""
    name = base.pop("dataset_name", None)
    if name is None:
        return
    from simulator.cli.vllm_flags import dataset_workload

    key = dataset_workload(name)
    given = base.get("workload")
    if given is not None and str(given).lower() != key:
        raise SpecError(f"dataset-name: {name!r} contradicts --workload {given!r}; give one of them")
    base["workload"] = key


def _apply_vllm_formats(base: dict[str, Any]) -> None:
    """vLLM's --quantization (weight/activation formats) and --kv-cache-dtype names (auto,
    fp8_e4m3, ...) as llmsim's formats (`vllm_flags`); a contradiction is a one-line error."""
    from simulator.cli.vllm_flags import kv_cache_dtype, quantization_dtypes

    method = base.pop("quantization", None)
    if method is not None:
        w, a = quantization_dtypes(method)
        for key, want in (("weight_dtype", w), ("activation_dtype", a)):
            if want is None:
                continue
            if base.get(key) is not None and str(base[key]).lower() != want:
                raise SpecError(f"quantization: {method!r} means {key.replace('_', '-')} {want}; "
                                f"--{key.replace('_', '-')} {base[key]} contradicts it")
            base[key] = want
    if base.get("kv_dtype") is not None:
        base["kv_dtype"] = kv_cache_dtype(str(base["kv_dtype"]), base.get("activation_dtype"))


def preset_setting(opts: dict[str, Any], name: str, given: Any, default: Any) -> Any:
    """A sweep/plan setting (`knee_metric`, `slo_target`): the explicit value, else the --slo
    preset's, else `default`."""
    if given is not None:
        return given
    if opts.get("slo"):
        from simulator.metrics.slo import slo_preset

        return getattr(slo_preset(opts["slo"]), name)
    return default


#: Options that take vLLM's space-separated list (argparse nargs="+" / "*"): the values after
#: the flag, up to the next option, are repeated as separate `--flag value` pairs for Click;
#: each option's pattern says which tokens are its values (so a positional argument after
#: the list is left alone).
NARGS_OPTIONS: dict[str, str] = {
    "--goodput": r"[A-Za-z_][A-Za-z0-9_]*[:=]\S+",  # KEY:VALUE
    "--metadata": r"[^-=\s][^=]*=.*",  # KEY=VALUE (vLLM: split at the first '=')
    "--header": r"[^-=\s][^=]*=.*",  # KEY=VALUE
    "--lora-modules": r"[^-].*",  # names
}


def expand_nargs(args: list[str]) -> list[str]:
    """['--goodput', 'ttft:1', 'tpot:2', '-q'] -> ['--goodput', 'ttft:1', '--goodput', 'tpot:2', '-q'].

    A vLLM list option given no value at all (argparse nargs="*": `--metadata` alone) is dropped."""
    import re

    out: list[str] = []
    flag: str | None = None
    for i, a in enumerate(args):
        item = re.compile(NARGS_OPTIONS[flag]) if flag else None
        if flag and item is not None and item.fullmatch(a):
            if out[-1] != flag:
                out.append(flag)
            out.append(a)
            continue
        if a in NARGS_OPTIONS:
            nxt = args[i + 1] if i + 1 < len(args) else None
            if a in ("--metadata", "--header") and (nxt is None or nxt.startswith("-")):
                flag = None  # nargs="*": no items is allowed, and adds nothing
                continue
            flag = a
            out.append(a)
            continue
        flag = None
        out.append(a)
    return out


def pop_scenario_opts(kw: dict[str, Any]) -> dict[str, Any]:
    names = {d[0].split("/")[0].lstrip("-").replace("-", "_") if not d[0].startswith("-c") else "config"
             for d, _ in SCENARIO_OPTIONS + workload_param_options()}
    names = {n if n != "c" else "config" for n in names}
    return {k: kw.pop(k) for k in list(kw) if k in names}


def name_file_pairs(items: tuple[str, ...], option: str) -> dict[str, str]:
    """--workload NAME=FILE items -> {name: file}; a bad item is a one-line error."""
    from pathlib import Path

    out: dict[str, str] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise SpecError(f"{option}: {item!r} is not NAME=FILE (e.g. sharegpt=ShareGPT_V3.json)")
        if not Path(path.strip()).is_file():
            raise SpecError(f"{option}: {path.strip()!r} is not a file")
        out[name.strip()] = path.strip()
    return out


def hardware_spec_map(items: tuple[str, ...]) -> dict[str, Any]:
    """--hardware-spec FILE items -> {hardware id: spec} (an overlay replaces its base id)."""
    from simulator.specs.catalog import load_hardware

    out = {}
    for ref in items:
        hw = load_hardware(ref)
        out[hw.id] = hw
    return out


LIST_OPTS = ("--hardware", "--tp", "--kv-dtype", "--weight-dtype")


def scenario_options_except(*drop: str) -> Any:
    """The shared scenario options minus `drop` (plan/whatif redefine some as lists). The named
    workloads' flags follow them, added by `LazyOptionsCommand` when the command is parsed or
    its help shown (listing them reads the workload registry, which imports numpy)."""
    def deco(fn: Any) -> Any:
        for decls, kw in reversed(SCENARIO_OPTIONS):
            if decls[0] not in drop:
                fn = _option(decls, kw)(fn)
        fn.__llmsim_workload_params__ = True
        return fn
    return deco


class LazyOptionsCommand(click.Command):
    """A command whose named-workload flags (`workload_param_options`) join its parameters the
    first time they are read (parsing its arguments, showing its help), right after the shared
    scenario options: `llmsim --help` and the commands without scenario options never import
    the workload layer."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        self._lazy_params = False
        super().__init__(*args, **kw)
        self._lazy_params = bool(getattr(self.callback, "__llmsim_workload_params__", False))

    @property  # type: ignore[override]
    def params(self) -> list[click.Parameter]:
        if self._lazy_params:
            self._lazy_params = False
            names = [p.name for p in self._params]
            at = names.index("config") + 1 if "config" in names else len(names)
            self._params[at:at] = [_option(decls, kw)(_Holder()).__click_params__[0]
                                   for decls, kw in workload_param_options()]
        return self._params

    @params.setter
    def params(self, value: list[click.Parameter]) -> None:
        self._params = value


class _Holder:
    """What click's option decorator attaches a parameter to (`__click_params__`)."""

    __click_params__: list[click.Parameter]


class LazyOptionsGroup(click.Group):
    """A command group (`llmsim whatif`) whose commands are `LazyOptionsCommand`s."""

    command_class = LazyOptionsCommand


def csv_list(text: str | tuple[str, ...] | None, option: str, conv: Any = str) -> list[Any] | None:
    """'a,b,c' -> [conv(a), conv(b), conv(c)] (None when not given); a repeatable option's
    values (a tuple: ('a,b', 'c')) are one list."""
    if isinstance(text, tuple):
        text = ",".join(text) or None
    if text is None:
        return None
    out = []
    for tok in str(text).split(","):
        tok = tok.strip()
        if not tok:
            continue
        try:
            v = conv(tok)
        except ValueError:
            raise SpecError(f"{option}: {tok!r} is not a valid value") from None
        if v not in out:
            out.append(v)
    if not out:
        raise SpecError(f"{option}: no values given")
    return out


def prices(items: tuple[str, ...]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items:
        hw, sep, val = item.partition("=")
        if not sep or not hw.strip():
            raise SpecError(f"--price {item!r}: expected HARDWARE=USD_PER_GPU_HOUR, e.g. h100-sxm=3.5")
        try:
            out[hw.strip()] = float(val)
        except ValueError:
            raise SpecError(f"--price {item!r}: {val.strip()!r} is not a number of $ per GPU-hour") from None
    return out


def executor_options(fn: Any) -> Any:
    options: list[tuple[tuple[str, ...], dict[str, Any]]] = [
        (("--slo-target",), {"type": float, "default": None,
                             "help": "SLO capacity: the good fraction (--goodput) that must be met. [default: the --slo preset's, else 0.99]"}),
        (("--tol",), {"type": float, "default": 0.02, "show_default": True,
                      "help": "SLO capacity: relative tolerance of the bisection."}),
        (("--workers",), {"type": int, "default": None, "help": "Process-pool size. [default: serial, or one per CPU once a pool pays off]"}),
        (("--serial",), {"is_flag": True, "help": "Run every simulation in this process."}),
        (("--dask", "dask_address"), {"metavar": "ADDRESS", "help": "Run simulations on a Dask scheduler."}),
    ]
    for decls, kw in reversed(options):
        fn = click.option(*decls, **kw)(fn)
    return fn


def vllm_result_options(fn: Any) -> Any:
    """`vllm bench serve`'s result-file options (simulate): --save-result and its companions,
    with vLLM's defaults (what is written follows vLLM: simulator.cli.vllm_result)."""
    from simulator.cli.vllm_result import DEFAULT_METRIC_PERCENTILES, DEFAULT_PERCENTILE_METRICS

    opts: list[tuple[tuple[str, ...], dict[str, Any]]] = [
        (("--save-result",), {"is_flag": True, "help": "Write a vLLM-format result JSON (vllm bench serve's keys)."}),
        (("--save-detailed",), {"is_flag": True, "help": "Also write the per-request lists vLLM writes only on "
                                "request: input_lens, output_lens, ttfts, itls, start_times, generated_texts, errors."}),
        (("--append-result",), {"is_flag": True, "help": "Append the result to an existing result file (one JSON "
                                "object per line), as vLLM's --append-result."}),
        (("--metadata",), {"multiple": True, "metavar": "KEY=VALUE",
                           "help": "Extra result keys (string values), vLLM's syntax: --metadata gpu=h100 tp=1."}),
        (("--result-dir",), {"type": click.Path(file_okay=False), "help": "Folder of the result JSON [default: .]."}),
        (("--result-filename",), {"help": "Result file name [default: vLLM's, {backend}-{rate}qps-{model}-{date}.json]."}),
        (("--percentile-metrics",), {"default": None,
                                     "help": f"Metrics whose percentiles the result JSON lists [default: vLLM's, "
                                             f"{DEFAULT_PERCENTILE_METRICS}; add e2el, client_queue_time, "
                                             "e2el_including_client_queue]."}),
        (("--metric-percentiles",), {"default": DEFAULT_METRIC_PERCENTILES, "show_default": True,
                                     "help": "Percentiles listed, comma-separated, e.g. 25,50,99."}),
        (("--label",), {"help": "Result label (vLLM's --label; prefixes the file name)."}),
    ]
    for decls, kw in reversed(opts):
        fn = click.option(*decls, **kw)(fn)
    return fn


#: the result-file options' parameter names (simulate hands them to report.save_vllm_result)
VLLM_RESULT_OPTS = ("save_result", "save_detailed", "append_result", "metadata", "result_dir",
                    "result_filename", "percentile_metrics", "metric_percentiles", "label")


def pop_vllm_result_opts(kw: dict[str, Any]) -> dict[str, Any]:
    return {k: kw.pop(k) for k in VLLM_RESULT_OPTS if k in kw}


# [observe: the Prometheus time series, its live replay, the HTML report]


def metrics_options(fn: Any) -> Any:
    """`simulate`'s Prometheus options: the time-series file, its sampling and origin, the
    live replay (`simulator.cli.prometheus`)."""
    opts: list[tuple[tuple[str, ...], dict[str, Any]]] = [
        (("--metrics-out",), {"type": click.Path(dir_okay=False),
                              "help": "Write the run as Prometheus metrics under vLLM's names (vllm:*): a time "
                                      "series in OpenMetrics (a sample every --metrics-interval of simulated "
                                      "time, for `promtool tsdb create-blocks-from openmetrics`; docs/observability.md)."}),
        (("--metrics-format",), {"type": click.Choice(["openmetrics", "text"]), "default": "openmetrics",
                                 "show_default": True,
                                 "help": "openmetrics: the time series with timestamps, ending in # EOF; text: the "
                                         "end-of-run snapshot a scrape of vLLM's /metrics would return."}),
        (("--metrics-interval",), {"type": float, "default": None, "metavar": "SECONDS",
                                   "help": "Seconds of simulated time between samples. [default: 15]"}),
        (("--metrics-points",), {"type": int, "default": None, "metavar": "N",
                                 "help": "Instead of --metrics-interval: N samples spread over the run (short runs)."}),
        (("--metrics-start",), {"default": None, "metavar": "TIME",
                                "help": "Wall-clock time of the run's t = 0: unix seconds, ISO 8601 "
                                        "(2026-01-01T00:00:00Z) or 'now'. [default: the run ends now]"}),
        (("--serve-metrics",), {"type": int, "default": None, "metavar": "PORT",
                                "help": "After the run, replay it on 127.0.0.1:PORT/metrics for a Prometheus to "
                                        "scrape, until Ctrl-C (needs prometheus-client)."}),
        (("--replay-speed",), {"type": float, "default": 1.0, "show_default": True, "metavar": "X",
                               "help": "--serve-metrics: replay X times faster than the simulated run."}),
    ]
    for decls, kw in reversed(opts):
        fn = click.option(*decls, **kw)(fn)
    return fn


#: 9999-12-31T23:59:59Z in unix seconds: the last time an ISO 8601 date can name
MAX_UNIX_S = 253402300799


def parse_metrics_start(text: str | None, duration_s: float) -> float:
    """--metrics-start as unix seconds: a number, ISO 8601 or 'now'; None: now - duration."""
    import datetime
    import math
    import time

    if text is None:
        return time.time() - duration_s
    if text.strip().lower() == "now":
        return time.time()
    try:
        v = float(text)
    except ValueError:
        try:
            d = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        except ValueError:
            raise SpecError(f"--metrics-start: {text!r} is not unix seconds, an ISO 8601 time "
                            "(e.g. 2026-01-01T00:00:00Z) or 'now'") from None
        if d.tzinfo is None:
            d = d.replace(tzinfo=datetime.timezone.utc)
        v = d.timestamp()
    # the domain of both spellings: 1970 to the end of year 9999, the last time ISO 8601 (and
    # Prometheus' timestamps) can write; 1e308 gave 309-digit timestamps, year 1 negative ones
    if not math.isfinite(v) or not 0 <= v <= MAX_UNIX_S:
        raise SpecError(f"--metrics-start: {text!r} must be unix seconds in [0, {MAX_UNIX_S}] "
                        "(1970-01-01 to 9999-12-31T23:59:59Z)")
    return v


def html_option(fn: Any) -> Any:
    """`--html FILE` (simulate, sweep, plan, validate): the one-page report (`cli/html.py`)."""
    return click.option("--html", "html_out", type=click.Path(dir_okay=False), default=None,
                        help="Write a self-contained HTML report (tables and charts; opens offline).")(fn)
