"""The sufficient statistics of one engine step's batch, which the roofline cost model prices.

    T   new tokens in the step              S   sequences that emit a token (LM head rows)
    Ad  decode query-key pairs  sum_j (p_j + 1/2) over decode sequences (p_j cached tokens)
    Ap  prefill query-key pairs sum_i q_i (p_i + q_i/2) over prefill chunks (causal)
    R   KV tokens read          sum_j (p_j + q_j) over all sequences
    Aw, Rw  the same two sums with each sequence's context capped at the sliding window
    Pc  cached tokens under prefill chunks  sum_i p_i (MLA decompresses their latent K/V)

They do not grow with the batch, so a step costs the same to price for 1 or 1000 sequences
(see `roofline`). Re-exported by `roofline`, where callers import them.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.specs.checks import MAX_BATCH, MAX_TOKENS, SpecError, check_int, check_number
from simulator.specs.fields import check_domains, domain
from simulator.specs.model import ModelSpec


def _check_step_args(model: object, batch_size: object, tokens: object, name: str) -> None:
    """The public step builders' arguments, checked before any arithmetic (issue 26)."""
    if not isinstance(model, ModelSpec):
        raise SpecError(f"model: {type(model).__name__} is not a ModelSpec (load one with load_model)")
    check_int("batch_size", batch_size, 1, maximum=MAX_BATCH)
    check_number(name, tokens, 0.0, MAX_TOKENS, low_open=name == "input_len", unit="tokens")


@dataclass(frozen=True)
class StepBatch:
    """Sufficient statistics of one step's batch (see module docstring)."""

    # every statistic is a finite count >= 0 (`specs.fields.domain`; issue 26)
    T: float = domain(kind="number", low=0.0)
    S: float = domain(kind="number", low=0.0)
    Ad: float = domain(0.0, low=0.0)
    Ap: float = domain(0.0, low=0.0)
    R: float = domain(0.0, low=0.0)
    Aw: float | None = domain(None, low=0.0, optional=True)
    Rw: float | None = domain(None, low=0.0, optional=True)
    Pc: float = domain(0.0, low=0.0)

    def __post_init__(self) -> None:
        check_domains(self)

    @classmethod
    def from_sequences(cls, seqs: list[tuple[int, int]], window: int | None = None) -> StepBatch:
        """Build from (new tokens q, cached tokens p) per sequence; q=1 is a decode.

        A prefill chunk emits a token only when it finishes its prompt; here every
        sequence is taken to emit (use the constructor for finer control).
        """
        T = S = Ad = Ap = R = Aw = Rw = Pc = 0.0
        for q, p in seqs:
            T += q
            S += 1
            pairs = q * (p + q / 2)
            if q == 1:
                Ad += pairs
            else:
                Ap += pairs
                Pc += p
            R += p + q
            if window is not None:
                Aw += q * min(p + q / 2, window)
                Rw += min(p + q, window)
        if window is None:
            Aw, Rw = Ad + Ap, R
        return cls(T, S, Ad, Ap, R, Aw, Rw, Pc)


def prefill_step(model: ModelSpec, batch_size: int, input_len: int) -> StepBatch:
    """The step that prefills `batch_size` fresh prompts of `input_len` tokens at once."""
    _check_step_args(model, batch_size, input_len, "input_len")
    check_int("input_len", input_len, 1, maximum=MAX_TOKENS)
    B, n = batch_size, input_len
    window = model.sliding_window.window if model.sliding_window else None
    return StepBatch(T=B * n, S=B, Ad=0.0, Ap=B * n * n / 2.0, R=B * n,
                     Aw=B * n * min(n / 2.0, window) if window else None,
                     Rw=B * min(n, window) if window else None)


def prefill_steps(model: ModelSpec, batch_size: int, input_len: int,
                  chunk: int | None = None) -> list[tuple[StepBatch, int]]:
    """The prefill of `batch_size` fresh prompts of `input_len` tokens under a per-step token
    budget `chunk` (None: one step), as (step, how many such steps):

    * the whole batch fits: one step (`prefill_step`);
    * a prompt fits: whole prompts, floor(chunk / input_len) a step (vLLM V0 without chunked
      prefill), the remainder in one last step;
    * a prompt does not fit: each prompt in pieces of `chunk` tokens, one sequence after
      another (llama.cpp's n_batch: piece j attends to the j * chunk tokens before it); only
      the last piece emits a token.
    """
    B, n = batch_size, input_len
    if chunk is None or B * n <= chunk:
        return [(prefill_step(model, B, n), 1)]
    window = model.sliding_window.window if model.sliding_window else None
    if n <= chunk:
        k = chunk // n
        out = [(prefill_step(model, k, n), B // k)]
        if B % k:
            out.append((prefill_step(model, B % k, n), 1))
        return out
    out = []
    for start in range(0, n, chunk):
        q = min(chunk, n - start)
        b = StepBatch.from_sequences([(q, start)], window=window)
        if start + q < n:  # an intermediate piece emits no token
            b = StepBatch(b.T, 0.0, b.Ad, b.Ap, b.R, b.Aw, b.Rw, b.Pc)
        out.append((b, B))
    return out


def decode_step(model: ModelSpec, batch_size: int, cached: float) -> StepBatch:
    """One decode step of `batch_size` sequences, each with `cached` tokens in its KV cache."""
    _check_step_args(model, batch_size, cached, "cached")
    B, p = batch_size, float(cached)
    window = model.sliding_window.window if model.sliding_window else None
    return StepBatch(T=B, S=B, Ad=B * (p + 0.5), R=B * (p + 1),
                     Aw=B * min(p + 0.5, window) if window else None,
                     Rw=B * min(p + 1, window) if window else None)
