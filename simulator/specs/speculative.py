"""Speculative decoding settings: vLLM's `--speculative-config` JSON, checked, plus llmsim's own
fields for what no engine setting says (how often a draft token is accepted).

The field names are vLLM's `SpeculativeConfig` (vllm-project/vllm@002e77c1f0ef9b19cff8b9e21cfbd6feb3d6b443:
vllm/config/speculative.py). Each field is either honoured (it changes the simulated timing or
memory), accepted without effect on timing (it changes which tokens are drafted, not what a step
costs: llmsim takes the acceptance from the user), or refused with a one-line error (a mechanism
llmsim does not model, so a silent wrong answer would follow):

* honoured: `method` (eagle, eagle3, mtp and vLLM's `*_mtp` names, draft_model, ngram,
  ngram_gpu), `model`, `num_speculative_tokens` (k), `draft_tensor_parallel_size` (1 or the
  target's tp, as vLLM allows), `quantization` ("fp8": the draft's weights in fp8),
  `kv_cache_dtype` (the draft's KV format), `rejection_sample_method` with vLLM's
  `synthetic_acceptance_rates` / `synthetic_acceptance_length` (vLLM's synthetic sampler: the
  acceptance is given, exactly what llmsim needs), `parallel_drafting` false;
* no effect on timing: `revision`, `code_revision`, `prompt_lookup_max`, `prompt_lookup_min`,
  `draft_sample_method`, `enforce_eager`, `attention_backend`, `moe_backend`,
  `use_local_argmax_reduction`, `disable_eagle_block_drop`, `disable_padded_drafter_batch`,
  `draft_load_config`, `index_share_for_mtp_iteration`, `disable_log_stats`, `disable_logprobs`,
  `use_heterogeneous_vocab` and the `suffix_decoding_*` fields;
* refused: every other vLLM field (`tensor_parallel_size` as vLLM itself refuses it,
  `num_speculative_tokens_per_batch_size`, `disable_by_batch_size`, `max_model_len`,
  `speculative_token_tree`, `parallel_drafting: true`, ...), other methods (medusa,
  mlp_speculator, suffix, dflash, dspark, custom_class, extract_hidden_states) and unknown keys.

llmsim's own fields (exactly one acceptance source must be given, else a one-line error):

* `acceptance_rate`: the conditional probability that draft position i is accepted given that
  positions 1..i-1 were, one number for every position or a list of k;
* `mean_acceptance_length` L (tokens per verify step, bonus token included, in [1, k+1]), turned
  into one conditional rate a for every position under the i.i.d. model of Leviathan, Kalman
  & Matias, "Fast Inference from Transformers via Speculative Decoding" (ICML 2023), where a
  step emits (1 - a^(k+1)) / (1 - a) tokens on average: a is the root of that equation;
* `per_position_acceptance_rates`: unconditional rates u_i = P(positions 1..i all accepted), as
  `vllm bench serve` reports them (`spec_decode_per_position_acceptance_rates`), non-increasing;
  conditional c_i = u_i / u_(i-1);
* `draft_vocab_size`: the LM-head rows of an EAGLE head (eagle3 default 32000, as in
  SafeAILab/EAGLE@9666a8182d9bed8b5b637fd4a126c90d9b9c3db2:eagle/traineagle3/config.json;
  eagle: the target's vocabulary);
* `seed`: of the acceptance draws (default: the scenario's seed).

vLLM's `synthetic_acceptance_length` is vLLM's own "minimum-variance schedule" (rates 1 for the
first floor(L - 1) positions, the fraction next, then 0), not the i.i.d. model above: the two
give the same mean and different spreads, so both are kept as vLLM and the paper define them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from simulator.specs.checks import SpecError, check_int, is_number, show
from simulator.specs.dtypes import DTYPE_BYTES
from simulator.specs.fields import _did_you_mean
from simulator.specs.readers import parse_json

#: the methods llmsim prices (vLLM's names); "*_mtp" names are taken as mtp, ngram_gpu as ngram
METHODS = ("eagle", "eagle3", "mtp", "draft_model", "ngram")
#: vLLM methods llmsim does not model
NOT_MODELLED_METHODS = ("medusa", "mlp_speculator", "suffix", "dflash", "dspark", "custom_class",
                        "extract_hidden_states")
#: the largest k accepted (vLLM's MTP and EAGLE checkpoints use up to about 10)
MAX_SPEC_TOKENS = 64
#: EAGLE-3 heads' reduced draft vocabulary (SafeAILab/EAGLE@9666a81:eagle/traineagle3/config.json)
EAGLE3_DRAFT_VOCAB = 32000

HONOURED = ("method", "model", "num_speculative_tokens", "draft_tensor_parallel_size", "quantization",
            "kv_cache_dtype", "rejection_sample_method", "synthetic_acceptance_rates",
            "synthetic_acceptance_length", "parallel_drafting")
NO_TIMING_EFFECT = ("revision", "code_revision", "prompt_lookup_max", "prompt_lookup_min", "draft_sample_method",
                    "enforce_eager", "attention_backend", "moe_backend", "use_local_argmax_reduction",
                    "disable_eagle_block_drop", "disable_padded_drafter_batch", "draft_load_config",
                    "index_share_for_mtp_iteration", "disable_log_stats", "disable_logprobs",
                    "use_heterogeneous_vocab", "suffix_decoding_max_tree_depth",
                    "suffix_decoding_max_cached_requests", "suffix_decoding_max_spec_factor",
                    "suffix_decoding_min_token_prob")
LLMSIM_FIELDS = ("acceptance_rate", "mean_acceptance_length", "per_position_acceptance_rates", "draft_vocab_size",
                 "seed")
#: vLLM fields with a timing effect llmsim does not model: refused with the reason
REFUSED = {
    "tensor_parallel_size": "vLLM refuses it too; pass draft_tensor_parallel_size",
    "num_speculative_tokens_per_batch_size": "k chosen per batch size is not modelled",
    "disable_by_batch_size": "vLLM V0's speculation switch-off by batch size is not modelled",
    "max_model_len": "sequences beyond the draft's max_model_len skipping speculation is not modelled",
    "speculative_token_tree": "tree verification is not modelled (a chain of k drafts is)",
    "enable_adaptive_verification": "adaptive verification (dspark) is not modelled",
    "dspark_draft_topk": "dspark is not modelled",
}
#: vLLM `--speculative-config` kv_cache_dtype values -> llmsim KV formats (None: the target's)
_KV_DTYPES = {"auto": None, "bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16", "fp8": "fp8",
              "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "fp8_inc": "fp8"}
_FIELD = "speculative_config"


@dataclass(frozen=True)
class SpeculativeConfig:
    """One checked speculative-decoding setting (module docstring). `acceptance` holds the
    conditional acceptance probability of each of the k draft positions."""

    method: str
    num_speculative_tokens: int
    acceptance: tuple[float, ...]
    acceptance_source: str  # how the acceptance was given (for notes)
    model: str | None = None
    draft_tensor_parallel_size: int | None = None
    draft_weight_dtype: str | None = None  # None: the draft's own (eagle/mtp heads: the target's)
    draft_kv_dtype: str | None = None  # None: the target's
    draft_vocab_size: int | None = None
    seed: int = 0

    @property
    def k(self) -> int:
        return self.num_speculative_tokens

    @property
    def unconditional(self) -> tuple[float, ...]:
        """u_i = P(draft positions 1..i all accepted) = c_1 ... c_i (what vLLM reports per position)."""
        out, p = [], 1.0
        for c in self.acceptance:
            p *= c
            out.append(p)
        return tuple(out)

    @property
    def mean_acceptance_length(self) -> float:
        """Tokens a full verify step emits on average: 1 + sum_i u_i (the bonus token included)."""
        return 1.0 + sum(self.unconditional)

    @property
    def lookahead_tokens(self) -> int:
        """KV slots vLLM reserves beyond a request's scheduled tokens for the draft's own
        proposals (`Scheduler.num_lookahead_tokens`: k for EAGLE/MTP heads and draft models, 0
        for n-gram; vllm-project/vllm@00024d3:vllm/v1/core/sched/scheduler.py)."""
        return 0 if self.method == "ngram" else self.k

    @property
    def draft_slots_per_seq(self) -> int:
        """Step-budget slots vLLM keeps per sequence for the drafter
        (`SpeculativeConfig.max_num_new_slots_for_drafting`, sequential drafting: 1 for a draft
        model, 0 otherwise); the scheduler's budget is max_num_batched_tokens - this x max_num_seqs."""
        return 1 if self.method == "draft_model" else 0

    def describe(self) -> str:
        rates = ", ".join(f"{c:.3g}" for c in self.acceptance)
        return (f"speculative decoding: {self.method}{f' {self.model}' if self.model else ''}, k="
                f"{self.k}, conditional acceptance per position [{rates}] ({self.acceptance_source}), "
                f"{self.mean_acceptance_length:.3g} tokens per verify step on average")


def iid_rate_for_length(length: float, k: int) -> float:
    """The conditional acceptance a with (1 - a^(k+1)) / (1 - a) = length (Leviathan et al.
    2023's expected tokens per step; increasing in a from 1 at a = 0 to k + 1 at a = 1)."""
    if length <= 1.0:
        return 0.0
    if length >= k + 1:
        return 1.0

    def mean(a: float) -> float:
        return float(k + 1) if a >= 1.0 else (1.0 - a ** (k + 1)) / (1.0 - a)

    lo, hi = 0.0, 1.0
    for _ in range(200):  # bisection to float resolution
        mid = 0.5 * (lo + hi)
        if mean(mid) < length:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-15:
            break
    return 0.5 * (lo + hi)


def conditional_from_unconditional(u: tuple[float, ...], name: str) -> tuple[float, ...]:
    """c_i = u_i / u_(i-1) (u_0 = 1): the rates must be non-increasing (a later position is
    accepted only if the earlier ones were)."""
    out, prev = [], 1.0
    for i, v in enumerate(u):
        if v > prev + 1e-12:
            raise SpecError(f"{_FIELD}.{name}: {show(list(u))} must be non-increasing (position {i + 1} is "
                            "accepted only when the earlier ones are)")
        out.append(0.0 if prev <= 0.0 else min(v / prev, 1.0))
        prev = v
    return tuple(out)


def vllm_synthetic_rates(length: float, k: int) -> tuple[float, ...]:
    """vLLM's `SpeculativeConfig._acceptance_length_to_rates` (minimum-variance schedule):
    unconditional rates 1 for floor(L - 1) positions, then L - 1 - floor(L - 1), then 0."""
    drafts = length - 1.0
    full = int(drafts)
    return tuple(([1.0] * full + [drafts - full] + [0.0] * (k - full - 1))[:k])


def _rate_list(name: str, value: Any, k: int) -> tuple[float, ...]:
    if is_number(value) and not isinstance(value, bool):
        value = [value] * k
    if not isinstance(value, (list, tuple)) or len(value) != k:
        raise SpecError(f"{_FIELD}.{name}: {show(value)} must be a rate in [0, 1] or a list of {k} "
                        f"(one per draft position, num_speculative_tokens = {k})")
    for v in value:
        if not is_number(v) or isinstance(v, bool) or not (0.0 <= float(v) <= 1.0):
            raise SpecError(f"{_FIELD}.{name}: {show(v)} in {show(list(value))} is not a rate in [0, 1]")
    return tuple(float(v) for v in value)


def _length(name: str, value: Any, k: int) -> float:
    if not is_number(value) or isinstance(value, bool) or not (1.0 <= float(value) <= k + 1):
        raise SpecError(f"{_FIELD}.{name}: {show(value)} must be a number of tokens per verify step in "
                        f"[1, {k + 1}] (num_speculative_tokens + 1)")
    return float(value)


def _acceptance(d: Mapping[str, Any], k: int) -> tuple[tuple[float, ...], str]:
    """(conditional rates, how they were given) from exactly one acceptance source."""
    synthetic = d.get("rejection_sample_method", "standard") == "synthetic"
    given = [n for n in ("acceptance_rate", "mean_acceptance_length", "per_position_acceptance_rates",
                         "synthetic_acceptance_rates", "synthetic_acceptance_length") if d.get(n) is not None]
    for n in ("synthetic_acceptance_rates", "synthetic_acceptance_length"):
        if n in given and not synthetic:
            raise SpecError(f"{_FIELD}.{n}: only valid with rejection_sample_method 'synthetic' (as in vLLM)")
    if len(given) != 1:
        what = ("none was given" if not given else f"{', '.join(given)} were all given")
        raise SpecError(f"{_FIELD}: give exactly one acceptance (llmsim cannot predict how often a draft is "
                        "accepted): acceptance_rate (conditional, per position), mean_acceptance_length, "
                        "per_position_acceptance_rates (unconditional, as vllm bench serve reports them) or "
                        f"vLLM's synthetic_acceptance_rates / synthetic_acceptance_length; {what}")
    name = given[0]
    value = d[name]
    if name == "acceptance_rate":
        return _rate_list(name, value, k), "acceptance_rate: conditional per position"
    if name == "mean_acceptance_length":
        L = _length(name, value, k)
        a = iid_rate_for_length(L, k)
        return (a,) * k, f"mean_acceptance_length {L:g}: i.i.d. conditional rate {a:.4g} (Leviathan et al. 2023)"
    if name == "synthetic_acceptance_length":
        L = _length(name, value, k)
        return (conditional_from_unconditional(vllm_synthetic_rates(L, k), name),
                f"synthetic_acceptance_length {L:g}: vLLM's minimum-variance schedule")
    u = _rate_list(name, value, k)
    return conditional_from_unconditional(u, name), f"{name}: unconditional per position"


def _method(d: Mapping[str, Any]) -> str:
    """vLLM's method, normalised; without one, detected from `model` as vLLM does (an EAGLE
    head by name, else a draft model)."""
    method = d.get("method")
    model = d.get("model")
    if method is None:
        if model is None:
            raise SpecError(f"{_FIELD}: give method ({', '.join(METHODS)}) or model")
        name = str(model).lower()
        return "eagle3" if "eagle3" in name else "eagle" if "eagle" in name else "draft_model"
    if not isinstance(method, str):
        raise SpecError(f"{_FIELD}.method: {show(method)} is not one of {', '.join(METHODS)}")
    if method.endswith("_mtp"):
        return "mtp"
    if method == "ngram_gpu":
        return "ngram"
    if method in NOT_MODELLED_METHODS:
        raise SpecError(f"{_FIELD}.method: {method!r} is not modelled by llmsim (modelled: {', '.join(METHODS)})")
    if method not in METHODS:
        raise SpecError(f"{_FIELD}.method: {show(method)} is not one of {', '.join(METHODS)}"
                        f"{_did_you_mean(method, METHODS)}")
    return method


def _check_keys(d: Mapping[str, Any]) -> None:
    known = HONOURED + NO_TIMING_EFFECT + LLMSIM_FIELDS
    for key in d:
        if not isinstance(key, str):
            raise SpecError(f"{_FIELD}: key {show(key)} is not a field name")
        if key in REFUSED:
            raise SpecError(f"{_FIELD}.{key}: llmsim cannot honour it ({REFUSED[key]})")
        if key not in known:
            raise SpecError(f"{_FIELD}: unknown field {show(key)}{_did_you_mean(key, known + tuple(REFUSED))}; "
                            f"llmsim takes vLLM's {', '.join(HONOURED)} and its own {', '.join(LLMSIM_FIELDS)}")
    if d.get("parallel_drafting"):
        raise SpecError(f"{_FIELD}.parallel_drafting: true is not modelled (drafts are priced one pass each)")
    method = d.get("rejection_sample_method", "standard")
    if method not in ("standard", "synthetic", "block"):
        raise SpecError(f"{_FIELD}.rejection_sample_method: {show(method)} is not one of standard, synthetic, block")


def _draft_dtypes(d: Mapping[str, Any]) -> tuple[str | None, str | None]:
    q = d.get("quantization")
    if q not in (None, "fp8"):
        raise SpecError(f"{_FIELD}.quantization: {show(q)}: llmsim prices a draft's weights in its own format or "
                        "fp8 (give null or \"fp8\")")
    kv = d.get("kv_cache_dtype")
    if kv is not None and (not isinstance(kv, str) or kv not in _KV_DTYPES):
        raise SpecError(f"{_FIELD}.kv_cache_dtype: {show(kv)} is not one of {', '.join(_KV_DTYPES)}")
    kv_fmt = _KV_DTYPES[kv] if kv is not None else None
    assert kv_fmt is None or kv_fmt in DTYPE_BYTES
    return ("fp8" if q == "fp8" else None), kv_fmt


def _parse_json_text(text: str) -> Any:
    """The option's JSON string through the reader layer's bounded parser (integer digits,
    nesting depth, value count), one line on any error, with an example of the form."""
    try:
        return parse_json(text, _FIELD)
    except SpecError as e:
        # an option string, not a file: "speculative_config: ...", without the reader's line 1
        why = str(e).removeprefix(f"{_FIELD}:1: ").removeprefix(f"{_FIELD}:")
        raise SpecError(f"{_FIELD}: {why.strip()} (e.g. '{{\"method\": \"eagle3\", \"num_speculative_tokens\": 3, "
                        "\"mean_acceptance_length\": 2.5}')") from None


def parse_speculative_config(value: Any, default_seed: int = 0) -> SpeculativeConfig | None:
    """`--speculative-config` (a JSON string or a mapping) checked; None for None / "" / {}.
    Every error is one line naming the field (module docstring for what is honoured)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, str):
        value = _parse_json_text(value)
    if not isinstance(value, Mapping):
        raise SpecError(f"{_FIELD}: {show(value)} must be a JSON object of vLLM's SpeculativeConfig fields")
    if not value:
        return None
    _check_keys(value)
    method = _method(value)
    k = int(check_int(f"{_FIELD}.num_speculative_tokens", value.get("num_speculative_tokens"), 1,
                      maximum=MAX_SPEC_TOKENS))
    model = value.get("model")
    if model is not None and (not isinstance(model, str) or not model):
        raise SpecError(f"{_FIELD}.model: {show(model)} must be a model id or path")
    if method == "draft_model" and model is None:
        raise SpecError(f"{_FIELD}.model: method draft_model needs the draft model (a catalog id, YAML or config.json)")
    dtp = check_int(f"{_FIELD}.draft_tensor_parallel_size", value.get("draft_tensor_parallel_size"), 1,
                    optional=True)
    vocab = check_int(f"{_FIELD}.draft_vocab_size", value.get("draft_vocab_size"), 1, optional=True)
    if vocab is not None and method != "eagle3" and method != "eagle":
        raise SpecError(f"{_FIELD}.draft_vocab_size: applies to EAGLE heads (eagle, eagle3) only, not {method}")
    seed = check_int(f"{_FIELD}.seed", value.get("seed", default_seed), 0)
    wdt, kvdt = _draft_dtypes(value)
    acceptance, source = _acceptance(value, k)
    if any(not math.isfinite(c) for c in acceptance):
        raise SpecError(f"{_FIELD}: acceptance rates must be finite")
    return SpeculativeConfig(method=method, num_speculative_tokens=k, acceptance=acceptance, acceptance_source=source,
                             model=model, draft_tensor_parallel_size=dtp, draft_weight_dtype=wdt,
                             draft_kv_dtype=kvdt, draft_vocab_size=vocab, seed=int(seed))


def normalise_speculative_config(value: Any) -> dict[str, Any] | None:
    """The setting as a plain mapping (a JSON string parsed), checked; None when off. What a
    `Scenario` keeps (it round-trips through YAML and `as_dict`)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, str):
        value = _parse_json_text(value)
    parse_speculative_config(value)
    return dict(value) if value else None


__all__ = ["EAGLE3_DRAFT_VOCAB", "METHODS", "SpeculativeConfig", "conditional_from_unconditional",
           "iid_rate_for_length", "normalise_speculative_config", "parse_speculative_config",
           "vllm_synthetic_rates"]
