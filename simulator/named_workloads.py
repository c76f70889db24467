"""Workloads built by name from a scenario: ShareGPT (as vLLM samples it), inference-perf's
shared prefix, and trace replay (whole trace by default).

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
from pathlib import Path
from typing import Any

import numpy as np

from . import workload as wl
from .specs import SpecError


class DefaultCount(int):
    """The default `Scenario.num_requests`, told apart from the same number given on purpose
    (an int subclass: it prints, compares and serialises as the plain number)."""

    __slots__ = ()


#: requests when -n is not given and the workload has no natural size
DEFAULT_NUM_REQUESTS = DefaultCount(1000)

#: workloads this module builds (besides random and traces)
NAMED = ("sharegpt", "shared-prefix")


def tokenizer_family(model: Any) -> str:
    """The ShareGPT table family of a model spec's `tokenizer` (llama3 when unknown)."""
    from .sharegpt import TOKENIZER_FAMILIES

    tok = str(getattr(model, "tokenizer", "") or "llama3").lower()
    for fam, enc in TOKENIZER_FAMILIES.items():
        if tok in (fam, enc) or tok.startswith(fam):
            return fam
    return "llama3"


#: (HF model_type prefix, vocab_size) -> tokenizer family, for the HF importer
_HF_TOKENIZERS = {("llama", 128256): "llama3", ("qwen", 151936): "qwen", ("qwen", 152064): "qwen",
                  ("gpt_oss", 201088): "o200k"}


def tokenizer_for(model_type: str, vocab_size: object) -> str:
    """A model's tokenizer family from its HF config (model_type and vocab_size), or ""."""
    for (mt, vocab), fam in _HF_TOKENIZERS.items():
        if model_type.startswith(mt) and vocab_size == vocab:
            return fam
    return ""


def sharegpt_workload(n: int | None, rate: float | None, burstiness: float, seed: int, model: Any,
                      dataset_path: str | None = None) -> wl.Workload:
    from .sharegpt import sample_sharegpt

    n = int(DEFAULT_NUM_REQUESTS) if n is None else n
    s = sample_sharegpt(n, seed=seed, tokenizer=tokenizer_family(model), dataset_path=dataset_path)
    t = wl.arrivals(n, math.inf if rate is None else rate, burstiness, rng=np.random.default_rng(seed))
    return wl.Workload(t, s.prompt_tokens, s.output_tokens, name="sharegpt",
                       extra={"prompt_chars": s.prompt_chars, "output_chars": s.output_chars})


def shared_prefix_workload(sc: Any) -> wl.Workload:
    from .prefix import shared_prefix

    rate = math.inf if sc.rate is None else sc.rate
    process = "constant" if sc.burstiness == 1.0 else "gamma"
    n = sc.num_requests if sc.num_requests_given else None
    pw = shared_prefix(sc.num_groups, sc.prompts_per_group, sc.system_prompt_len, sc.question_len,
                       sc.output_len, n, rate=rate, process=process,
                       burstiness=sc.burstiness, multi_turn=sc.multi_turn, seed=sc.seed)
    return pw.to_workload(name="shared-prefix")


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
    from .traces import BUILTIN_WORKLOADS

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


def check_shared_prefix_fields(sc: Any) -> None:
    for name in ("num_groups", "prompts_per_group"):
        v = getattr(sc, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise SpecError(f"{name}: {v!r} must be an integer >= 1")
    for name in ("system_prompt_len", "question_len"):
        v = getattr(sc, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise SpecError(f"{name}: {v!r} must be an integer >= 0")
