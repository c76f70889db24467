"""vLLM's flag spellings: what each means in llmsim, or the one-line reason it is refused.

A `vllm bench serve` command (plus the `vllm serve` flags that shape a deployment:
`--tensor-parallel-size`, `--quantization`, `--kv-cache-dtype`) should run under
`llmsim simulate` as it is. Each vLLM flag is honoured (mapped to llmsim's setting), accepted
because it changes nothing a simulation models (where the server listens, request ids), or
refused with one line that says why. Flags and choices are vLLM's
(vllm-project/vllm@009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1:vllm/benchmarks/serve.py
`add_cli_args`; `--kv-cache-dtype` choices from
@002f10e0cfa1373a19a0d2756598a34b700d20e5:vllm/config/cache.py `CacheDType`; `--quantization`
methods from @0034007debee2a009e030804f2cde7953aff78c6:vllm/model_executor/layers/quantization/__init__.py
and a recent copy of the same file; `--dataset-name` choices from
@237145ea190a901f93c570f157091fe43835bc63:vllm/benchmarks/datasets/arg_utils.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import click

from simulator.specs.checks import SpecError

# --------------------------------------------------------------------------- --kv-cache-dtype

#: vLLM --kv-cache-dtype -> llmsim's KV format; "auto" (None) is the model's dtype (vLLM's
#: docstring: 'If "auto", will use model data type'); fp8 is e4m3, and e5m2 has the same
#: byte per element, which is all the KV format changes in llmsim's price
KV_CACHE_DTYPES: dict[str, str | None] = {
    "auto": None, "float16": "fp16", "bfloat16": "bf16", "fp8": "fp8", "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8", "fp8_inc": "fp8", "fp8_ds_mla": "fp8", "nvfp4": "fp4",
    "int8_per_token_head": "int8", "int4_per_token_head": "int4", "fp8_per_token_head": "fp8",
}
#: vLLM KV formats llmsim cannot price, with the reason
KV_CACHE_REFUSED: dict[str, str] = {
    "nvfp4_ds_mla": "DeepSeek's NVFP4 MLA cache packs a scale per block that llmsim's per-element price does not hold",
    "nvfp4_4over6": "its mixed 4- and 6-bit packing has no single bytes per element",
    **{k: "its keys and values use different bit widths; llmsim prices one KV format"
       for k in ("turboquant_k8v4", "turboquant_k3v4_nc")},
    **{k: "TurboQuant's codebook KV is not priced (its dequantisation cost is unknown to llmsim)"
       for k in ("turboquant_4bit_nc", "turboquant_3bit_nc")},
}


def kv_cache_dtype(name: str, activation_dtype: str | None) -> str:
    """llmsim's KV format for a vLLM (or llmsim) spelling; `auto` is the model's dtype: the
    activation format when it is a 16/32-bit one (vLLM's --dtype), else bf16 (a W8A8
    checkpoint still runs its model dtype, bf16, for the cache)."""
    from simulator.specs.dtypes import DTYPES

    key = str(name).strip().lower()
    if key in DTYPES:
        return key
    if key in KV_CACHE_REFUSED:
        raise SpecError(f"kv_dtype: {name!r} (vLLM's --kv-cache-dtype): {KV_CACHE_REFUSED[key]}")
    if key not in KV_CACHE_DTYPES:
        raise SpecError(f"kv_dtype: {name!r} is not one of {', '.join(DTYPES)} "
                        f"(or vLLM's --kv-cache-dtype names: {', '.join(KV_CACHE_DTYPES)})")
    got = KV_CACHE_DTYPES[key]
    if got is None:
        act = str(activation_dtype or "bf16").lower()
        return act if act in ("fp32", "fp16", "bf16") else "bf16"
    return got


# --------------------------------------------------------------------------- --quantization

#: vLLM --quantization method -> (weight, activation) formats llmsim prices; None: the
#: activation format is left as given (weight-only methods run 16-bit GEMMs)
QUANTIZATION: dict[str, tuple[str, str | None]] = {
    # FP8 W8A8 (per-tensor, per-channel, per-block, ModelOpt FP8, MX FP8); on a chip without
    # an fp8 tensor rate the GEMM runs at the next wider rate (DTYPE_FALLBACK), as vLLM's
    # weight-only FP8 Marlin path does
    **{k: ("fp8", "fp8") for k in ("fp8", "fbgemm_fp8", "ptpc_fp8", "modelopt", "fp8_per_tensor",
                                    "fp8_per_block", "fp8_per_channel", "mxfp8", "modelopt_mxfp8")},
    # 4-bit weight-only (W4A16): AWQ and GPTQ checkpoints as published are 4-bit; an 8-bit
    # GPTQ checkpoint needs --weight-dtype int8
    **{k: ("int4", None) for k in ("awq", "awq_marlin", "auto_awq", "gptq", "gptq_marlin", "auto_gptq",
                                    "gptq_bitblas")},
    # MXFP4 weights with 16-bit activations (gpt-oss on Hopper)
    "mxfp4": ("fp4", None), "gpt_oss_mxfp4": ("fp4", None),
    # NVFP4 W4A4 (ModelOpt FP4)
    "modelopt_fp4": ("fp4", "fp4"), "nvfp4_per_token": ("fp4", "fp4"),
    "int8_per_channel_weight_only": ("int8", None),
}
QUANTIZATION_REFUSED: dict[str, str] = {
    **{k: "the scheme (bits, weights and/or activations) is in the checkpoint's quantization config, "
          "not in the method name; give --weight-dtype and --activation-dtype"
       for k in ("compressed-tensors", "quark", "modelopt_mixed", "torchao", "inc", "online", "moe_wna16",
                 "auto-round")},
    "experts_int8": "int8 experts with 16-bit attention: llmsim prices one weight format per model",
    "bitsandbytes": "bitsandbytes dequantises NF4/int8 weights in kernels llmsim does not price",
    "gguf": "GGUF mixes bit widths tensor by tensor; llmsim prices one weight format",
    **{k: f"{k} kernels are not priced by llmsim"
       for k in ("aqlm", "deepspeedfp", "tpu_int8", "marlin", "bitblas", "gptq_marlin_24", "qqq", "hqq",
                 "neuron_quant", "ipex", "deepgemm_fp8", "deepseek_v4_fp8")},
}


def quantization_dtypes(method: str) -> tuple[str, str | None]:
    """(weight, activation or None) of a vLLM --quantization method; SpecError with the
    reason for a method llmsim cannot price."""
    key = str(method).strip().lower()
    if key in QUANTIZATION:
        return QUANTIZATION[key]
    if key in QUANTIZATION_REFUSED:
        raise SpecError(f"quantization: {method!r}: {QUANTIZATION_REFUSED[key]}")
    raise SpecError(f"quantization: {method!r} is not a vLLM method llmsim prices; priced: "
                    f"{', '.join(QUANTIZATION)}")


# --------------------------------------------------------------------------- --dataset-name

#: vLLM's dataset names llmsim has no generator for, with the reason (the ones it has are the
#: named-workload registry's: `random`, `sharegpt`, ...)
VLLM_DATASETS_REFUSED: dict[str, str] = {
    "burstgpt": "vLLM samples BurstGPT's GPT-4 rows at --request-rate; llmsim replays a BurstGPT CSV as a "
                "trace with its own arrival times instead: -w BurstGPT.csv",
    "sonnet": "its prompts are built from the sonnet text with the model's tokenizer, which llmsim does not load",
    "random-mm": "multimodal inputs are not modelled",
    "random-rerank": "rerank (pooling) requests are not modelled",
    "hf": "a Hugging Face dataset needs the network and the model's tokenizer",
    "custom": "a custom JSONL is tokenized with the model's tokenizer, which llmsim does not load; give its "
              "lengths and times as a trace CSV (-w FILE.csv)",
    "custom_mm": "multimodal inputs are not modelled",
    "prefix_repetition": "vLLM's prefix_repetition generator is not modelled (-w shared-prefix is inference-perf's)",
    "spec_bench": "its prompts need the dataset and the model's tokenizer",
    "txt-slices": "its prompts are cut from a text with the model's tokenizer, which llmsim does not load",
    "timed_trace": "replay its timestamps and lengths as a trace CSV instead (-w FILE.csv)",
}


def dataset_workload(name: str) -> str:
    """The llmsim workload of a vLLM --dataset-name (a named workload or built-in trace of
    the registries); SpecError with the reason for the vLLM datasets llmsim does not model."""
    from simulator.workloads.named import NAMED_WORKLOADS
    from simulator.workloads.traces import BUILTIN_WORKLOADS

    key = str(name).strip().lower()
    if key in NAMED_WORKLOADS or key in BUILTIN_WORKLOADS:
        return key
    if key in VLLM_DATASETS_REFUSED:
        raise SpecError(f"dataset-name: vLLM's {key!r} dataset is not simulated: {VLLM_DATASETS_REFUSED[key]}")
    raise SpecError(f"dataset-name: {name!r} is not one of {', '.join(NAMED_WORKLOADS)}"
                    f" (or a built-in workload: {', '.join(BUILTIN_WORKLOADS)})")


# --------------------------------------------------------------------------- client flags

@dataclass(frozen=True)
class ClientFlag:
    """One `vllm bench serve` flag llmsim has no setting for: `takes` "flag" (store_true),
    "value" or "values" (nargs); `reason` None accepts it as changing nothing simulated (the
    help text says what it is), else it is refused with that reason."""

    flag: str
    takes: str
    help: str
    reason: str | None = None


_SAMPLING = "sampling does not change a simulated run: output lengths come from the dataset"
_NO_SERVER = "there is no server to reach"
CLIENT_FLAGS: tuple[ClientFlag, ...] = (
    ClientFlag("--disable-tqdm", "flag", "No progress bar (vLLM's spelling of the bar part of -q)."),
    ClientFlag("--served-model-name", "value", "The model's name in the API; vLLM writes --model as model_id, "
                                               "so it changes neither the run nor the result file (it is the "
                                               "model_name label of --metrics-out)."),
    ClientFlag("--backend", "value", "vLLM's client backend: vllm, openai, openai-chat (the endpoint; the "
                                     "simulated run is the same). Others are refused."),
    ClientFlag("--base-url", "value", f"Server URL: accepted, {_NO_SERVER}."),
    ClientFlag("--host", "value", f"Server host: accepted, {_NO_SERVER}."),
    ClientFlag("--port", "value", f"Server port: accepted, {_NO_SERVER}."),
    ClientFlag("--endpoint", "value", f"API path: accepted, {_NO_SERVER}."),
    ClientFlag("--header", "values", f"HTTP headers: accepted, {_NO_SERVER}."),
    ClientFlag("--insecure", "flag", f"TLS check off: accepted, {_NO_SERVER}."),
    ClientFlag("--ready-check-timeout-sec", "value", f"Wait for the server: accepted, {_NO_SERVER}."),
    ClientFlag("--request-id-prefix", "value", "Request id prefix: accepted, ids are not simulated."),
    ClientFlag("--trust-remote-code", "flag", "Accepted: no model code is loaded."),
    ClientFlag("--tokenizer-mode", "value", "Accepted: no tokenizer is loaded (token counts are the dataset's)."),
    ClientFlag("--ignore-eos", "flag", "Accepted: llmsim always generates each request's full output length "
                                       "(vLLM forces it for the random dataset)."),
    *(ClientFlag(f, "value", f"Sampling parameter: accepted; {_SAMPLING}.")
      for f in ("--temperature", "--top-p", "--top-k", "--min-p", "--frequency-penalty", "--presence-penalty",
                "--repetition-penalty")),
    ClientFlag("--tokenizer", "value", "", "llmsim counts tokens with the model's own tokenizer family; "
                                            "another tokenizer is not modelled (drop --tokenizer)"),
    ClientFlag("--num-warmups", "value", "", "warm-up requests are not simulated (--warm-cache starts with a "
                                              "warm prefix cache)"),
    ClientFlag("--profile", "flag", "", "there is no torch profiler in a simulation"),
    ClientFlag("--logprobs", "value", "", "returning logprobs adds work per token that llmsim does not price"),
    ClientFlag("--use-beam-search", "flag", "", "beam search is not modelled"),
    ClientFlag("--lora-modules", "values", "", "LoRA adapters are not modelled"),
    ClientFlag("--lora-assignment", "value", "", "LoRA adapters are not modelled"),
    ClientFlag("--extra-body", "value", "", "free-form request fields cannot be mapped to a simulated setting"),
    ClientFlag("--chat-template-kwargs", "value", "", "chat templates are not rendered (no tokenizer is loaded)"),
    ClientFlag("--skip-tokenizer-init", "flag", "", "it drops TTFT/TPOT/ITL from vLLM's result; llmsim always "
                                                    "has them"),
    ClientFlag("--probe-request-rate", "value", "", "probe requests are not simulated"),
    ClientFlag("--self-timed", "flag", "", "the timed_trace dataset is not simulated (replay a trace: -w FILE.csv)"),
    ClientFlag("--no-self-timed", "flag", "", "the timed_trace dataset is not simulated"),
    ClientFlag("--plot-timeline", "flag", "", "llmsim draws its timeline with --out DIR (timeline.png)"),
    ClientFlag("--timeline-itl-thresholds", "value", "", "llmsim draws its timeline with --out DIR"),
    ClientFlag("--plot-dataset-stats", "flag", "", "not drawn by llmsim (requests.csv in --out DIR has the lengths)"),
    ClientFlag("--random-prefix-len", "value", "", "a shared random prefix on every prompt is not generated "
                                                   "(-w shared-prefix has shared system prompts)"),
    ClientFlag("--sharegpt-output-len", "value", "", "llmsim's ShareGPT keeps each conversation's own output "
                                                     "length"),
)
GENERATION_BACKENDS = ("vllm", "openai", "openai-chat")


def _param(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def client_flag_options(fn: Any) -> Any:
    """Click options for CLIENT_FLAGS (the refused ones hidden: they exist to say why)."""
    for f in reversed(CLIENT_FLAGS):
        kw: dict[str, Any] = {"hidden": f.reason is not None, "help": f.help or None}
        if f.takes == "flag":
            kw.update(is_flag=True, default=None)
        elif f.takes == "values":
            kw.update(multiple=True)
        fn = click.option(f.flag, _param(f.flag), **kw)(fn)
    return fn


def check_client_flags(kw: dict[str, Any], model: str | None = None) -> dict[str, Any]:
    """Pop CLIENT_FLAGS' values from `kw`; SpecError (one line, the reason) for a refused flag
    that was given. Returns the accepted ones that were given ({param: value})."""
    given: dict[str, Any] = {}
    for f in CLIENT_FLAGS:
        v = kw.pop(_param(f.flag), None)
        if v is None or v == () or v is False:
            continue
        if f.flag == "--tokenizer" and model is not None and str(v) == str(model):
            continue  # the model's own tokenizer: what llmsim counts with anyway
        if f.reason is not None:
            raise SpecError(f"{f.flag}: not simulated: {f.reason}")
        if f.flag == "--backend" and str(v).lower() not in GENERATION_BACKENDS:
            raise SpecError(f"--backend: {v!r}: llmsim simulates text generation "
                            f"({', '.join(GENERATION_BACKENDS)}); audio, embedding and pooling backends are not "
                            "modelled")
        given[_param(f.flag)] = v
    return given


__all__ = ["CLIENT_FLAGS", "KV_CACHE_DTYPES", "QUANTIZATION", "VLLM_DATASETS_REFUSED", "check_client_flags",
           "client_flag_options", "dataset_workload", "kv_cache_dtype", "quantization_dtypes"]
