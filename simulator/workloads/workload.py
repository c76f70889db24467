"""Request streams for the simulator: the `Workload` type, synthetic arrivals and lengths.

A `Workload` is three aligned arrays: arrival times (seconds, nondecreasing), prompt lengths
and output lengths (tokens, >= 1), plus optional further per-request columns (`extra`).
Synthetic workloads follow vLLM's `bench serve` conventions (Poisson or gamma arrivals with
`--burstiness`, `--random-range-ratio` lengths). Every random draw comes from an explicit
`numpy.random.Generator` built from a seed, so the same seed gives the same arrays bit for bit.

Published traces (simple CSV, Azure LLM inference 2023/2024, Mooncake JSONL, BurstGPT) are
read by `simulator.workloads.traces` (`read_trace`, `write_trace`, `builtin`, `load_workload`,
`BUILTIN_WORKLOADS`, `TRACE_FORMATS`), which builds on this module.

Every bad user input raises `SpecError` with one line naming what is wrong, the value and
what is allowed.
"""

from __future__ import annotations

import dataclasses
import math
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simulator.specs.checks import MAX_SEED, MAX_SIM_REQUESTS, SpecError, check_int
from simulator.specs.fields import _did_you_mean

#: Largest token count accepted in a trace or a length option (a sanity bound, not a model limit).
MAX_TOKENS = 10**9

#: Arrival processes and length distributions for synthetic workloads.
_PROCESSES = ("poisson", "gamma", "constant")
_LENGTH_DISTS = ("fixed", "uniform", "lognormal")

_NO_EXTRA: Mapping[str, np.ndarray] = types.MappingProxyType({})


# --------------------------------------------------------------------------- Workload


def _as_lengths(value: Any, field: str) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype.kind in "iu":
        out = arr.astype(np.int64)
    elif arr.dtype.kind == "f":
        if arr.size and (not np.all(np.isfinite(arr)) or np.any(arr != np.floor(arr))):
            raise SpecError(f"workload.{field}: token counts must be whole numbers")
        if arr.size and np.any(np.abs(arr) > MAX_TOKENS):
            raise SpecError(f"workload.{field}: token counts must be <= {MAX_TOKENS}")
        out = arr.astype(np.int64)
    else:
        raise SpecError(f"workload.{field}: expected an integer array, got dtype {arr.dtype}")
    if out.ndim != 1:
        raise SpecError(f"workload.{field}: expected a 1-D array, got shape {out.shape}")
    if out.size and int(out.min()) < 1:
        i = int(np.argmin(out))
        raise SpecError(f"workload.{field}[{i}]: {int(out[i])} must be >= 1 token")
    return out


@dataclass(frozen=True, eq=False)
class Workload:
    """A request stream: arrival times (s, nondecreasing, first usually 0), prompt and output lengths (tokens).

    `concurrency` set means a closed loop of that many clients; the engine then ignores
    `arrival_s`. `max_concurrency` set keeps the open loop of `arrival_s` but lets at most that
    many requests be in flight (vLLM's `--max-concurrency` at a finite rate, `client_cap.py`).
    `clock_start_s`: when the client's clock starts (vLLM's `benchmark_start_time`, before the
    first send: 0 for a vLLM schedule, whose first request goes out at t_0 > 0); None: at the
    first arrival (a trace). The run's duration and offered rate count from it. `bad_rows` counts rows a trace reader skipped (`skip_bad_rows`);
    `failed_in_trace` counts requests the trace itself records as failed (BurstGPT rows with
    0 response tokens), which are dropped. `extra` maps a column name to one 1-D array with a
    value per request (aligned with `arrival_s`): the columns a trace carries besides the
    three above, e.g. Mooncake's `hash_ids` (an object array of int tuples, the request's
    KV-block hashes) or BurstGPT's `model`; empty for synthetic workloads. Arrays are copied
    and made read-only. Equality is identity (`eq=False`): arrays do not compare as booleans.
    """

    arrival_s: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    name: str = ""
    concurrency: int | None = None
    bad_rows: int = 0
    failed_in_trace: int = 0
    extra: Mapping[str, np.ndarray] = field(default_factory=lambda: _NO_EXTRA, repr=False)
    max_concurrency: int | None = None
    clock_start_s: float | None = None

    def __post_init__(self) -> None:
        arr = np.asarray(self.arrival_s)
        if arr.dtype.kind not in "iuf":
            raise SpecError(f"workload.arrival_s: expected a float array, got dtype {arr.dtype}")
        arr = np.array(arr, dtype=np.float64)
        if arr.ndim != 1:
            raise SpecError(f"workload.arrival_s: expected a 1-D array, got shape {arr.shape}")
        inp = np.array(_as_lengths(self.input_len, "input_len"))
        out = np.array(_as_lengths(self.output_len, "output_len"))
        if not (arr.shape == inp.shape == out.shape):
            raise SpecError(
                f"workload: arrival_s, input_len and output_len must have the same length; "
                f"got {arr.size}, {inp.size}, {out.size}"
            )
        if arr.size == 0:
            raise SpecError("workload: no requests (need at least 1)")
        if not np.all(np.isfinite(arr)):
            i = int(np.argmin(np.isfinite(arr)))
            raise SpecError(
                f"workload.arrival_s[{i}]: {arr[i]!r} is not a finite number of seconds"
            )
        if arr[0] < 0:
            raise SpecError(f"workload.arrival_s[0]: {arr[0]!r} must be >= 0 s")
        if arr.size > 1 and np.any(np.diff(arr) < 0):
            i = int(np.argmax(np.diff(arr) < 0)) + 1
            raise SpecError(
                f"workload.arrival_s[{i}]: {arr[i]!r} s is before the previous arrival "
                f"{arr[i - 1]!r} s; arrivals must be nondecreasing"
            )
        if not isinstance(self.name, str):
            raise SpecError(f"workload.name: {self.name!r} is not a string")
        c = self.concurrency
        _check_clients(c, self.max_concurrency)
        for f in ("bad_rows", "failed_in_trace"):
            v = getattr(self, f)
            check_int(f"workload.{f}", v, 0)
        for a in (arr, inp, out):
            a.setflags(write=False)
        object.__setattr__(self, "arrival_s", arr)
        object.__setattr__(self, "input_len", inp)
        object.__setattr__(self, "output_len", out)
        if c is not None:
            object.__setattr__(self, "concurrency", int(c))
        if self.max_concurrency is not None:
            object.__setattr__(self, "max_concurrency", int(self.max_concurrency))
        if self.clock_start_s is not None:
            object.__setattr__(self, "clock_start_s", _check_clock_start(self.clock_start_s, float(arr[0])))
        if self.extra is not _NO_EXTRA:
            object.__setattr__(self, "extra", _check_extra(self.extra, arr.size))

    @property
    def num_requests(self) -> int:
        """Number of requests."""
        return int(self.arrival_s.size)

    @property
    def duration_s(self) -> float:
        """Seconds from the first to the last arrival."""
        return float(self.arrival_s[-1] - self.arrival_s[0])

    @property
    def start_s(self) -> float:
        """When the client's clock starts: `clock_start_s`, else the first arrival."""
        return float(self.arrival_s[0]) if self.clock_start_s is None else self.clock_start_s

    @property
    def offered_rate(self) -> float:
        """Mean send rate (req/s). With a clock start (a vLLM schedule): n / (last - start), the
        rate vLLM was given (its last request goes out at n / rate); else (a trace)
        (n-1) / (last - first). inf if every request is sent at once."""
        if self.clock_start_s is not None:
            span = float(self.arrival_s[-1]) - self.clock_start_s
            return self.num_requests / span if span > 0 else math.inf
        span = self.duration_s
        return (self.num_requests - 1) / span if self.num_requests > 1 and span > 0 else math.inf

    @property
    def mean_input_len(self) -> float:
        """Mean prompt length (tokens)."""
        return float(self.input_len.mean())

    @property
    def mean_output_len(self) -> float:
        """Mean output length (tokens)."""
        return float(self.output_len.mean())

    def describe(self) -> dict[str, Any]:
        """Summary statistics, for display."""
        return {
            "name": self.name,
            "num_requests": self.num_requests,
            "duration_s": self.duration_s,
            "offered_rate": self.offered_rate,
            "mean_input_len": self.mean_input_len,
            "mean_output_len": self.mean_output_len,
            "max_input_len": int(self.input_len.max()),
            "max_output_len": int(self.output_len.max()),
            "concurrency": self.concurrency,
            "max_concurrency": self.max_concurrency,
            "bad_rows": self.bad_rows,
            "failed_in_trace": self.failed_in_trace,
        }

    def __repr__(self) -> str:
        return (
            f"Workload(name={self.name!r}, num_requests={self.num_requests}, "
            f"offered_rate={self.offered_rate:.4g}, mean_input_len={self.mean_input_len:.1f}, "
            f"mean_output_len={self.mean_output_len:.1f}, concurrency={self.concurrency})"
        )


def _check_clock_start(c0: Any, first: float) -> float:
    """`clock_start_s`: a number of seconds in [0, first arrival]."""
    if isinstance(c0, bool) or not isinstance(c0, (int, float, np.number)) or not (0 <= c0 <= first):
        raise SpecError(f"workload.clock_start_s: {c0!r} must be a number of seconds in [0, first arrival {first!r}]")
    return float(c0)


def _check_clients(concurrency: Any, max_concurrency: Any) -> None:
    """`concurrency` (closed loop) and `max_concurrency` (cap): integers >= 1, not both."""
    for f, v in (("concurrency", concurrency), ("max_concurrency", max_concurrency)):
        check_int(f"workload.{f}", v, optional=True)
    if concurrency is not None and max_concurrency is not None:
        raise SpecError(f"workload.max_concurrency: {max_concurrency!r} cannot be combined with "
                        f"concurrency {concurrency} (a closed loop); give one of them")


def object_column(items: Any) -> np.ndarray:
    """A 1-D object array with one element per item, even when the items are equal-length
    tuples (which `np.array` would turn into a 2-D array)."""
    return np.fromiter(items, dtype=object, count=len(items))


def _check_extra(extra: Any, n: int) -> Mapping[str, np.ndarray]:
    """`extra` as a read-only mapping of read-only 1-D arrays of length n (copied)."""
    if not isinstance(extra, Mapping):
        raise SpecError(f"workload.extra: {type(extra).__name__} is not a mapping of column -> values")
    out: dict[str, np.ndarray] = {}
    for k, v in extra.items():
        if not isinstance(k, str):
            raise SpecError(f"workload.extra: column name {k!r} is not a string")
        a = object_column(v) if isinstance(v, (list, tuple)) else np.array(v)
        if a.ndim != 1 or a.size != n:
            raise SpecError(
                f"workload.extra[{k!r}]: expected one value per request ({n}), got shape {a.shape}"
            )
        a.setflags(write=False)
        out[k] = a
    return types.MappingProxyType(out) if out else _NO_EXTRA


# --------------------------------------------------------------------------- synthetic


def _check_count(n: Any, what: str, minimum: int = 0) -> int:
    return int(check_int(what, n, minimum))


def _check_rate(rate: Any, what: str = "rate") -> float:
    if isinstance(rate, bool) or not isinstance(rate, (int, float, np.number)):
        raise SpecError(f"{what}: {rate!r} is not a number")
    r = float(rate)
    if not (r > 0):  # also rejects NaN
        raise SpecError(f"{what}: {rate!r} must be > 0 requests/s (or inf)")
    return r


def _rng(rng: np.random.Generator | None) -> np.random.Generator:
    return np.random.default_rng(0) if rng is None else rng


def vllm_rng(seed: int = 0) -> np.random.RandomState:
    """The generator `vllm bench serve` draws its send schedule from: `main_async` calls
    `np.random.seed(args.seed)` and `get_request` then draws from numpy's legacy global stream
    (`vllm/benchmarks/serve.py`; docs/engines.md §6.1). Here it is an explicit
    `RandomState(seed)`, the same stream (NumPy documents the legacy stream as frozen), so the
    same seed gives vLLM's send times to the last bit."""
    return np.random.RandomState(int(check_int("seed", seed, 0, maximum=MAX_SEED)))


#: `--ramp-up-strategy` choices (vLLM `bench serve`)
RAMP_UP_STRATEGIES = ("linear", "exponential")


@dataclass(frozen=True)
class RampUp:
    """vLLM's `--ramp-up-strategy`/`--ramp-up-start-rps`/`--ramp-up-end-rps`: request i is sent
    at rate r_i = s + (e - s) i/(n-1) (linear) or s (e/s)^(i/(n-1)) (exponential), and the
    schedule is the plain sum of the delays (no rescaling; `vllm/benchmarks/serve.py`
    `_get_current_request_rate`, `get_request`). vLLM's flags are integers >= 0 with start <= end;
    a rate of 0 is refused here (vLLM asserts on it at request 0, and an exponential ramp
    divides by the start)."""

    strategy: str
    start_rps: int
    end_rps: int

    def __post_init__(self) -> None:
        if self.strategy not in RAMP_UP_STRATEGIES:
            raise SpecError(f"ramp_up_strategy: {self.strategy!r} is not one of {', '.join(RAMP_UP_STRATEGIES)}"
                            f"{_did_you_mean(str(self.strategy), RAMP_UP_STRATEGIES)}")
        for f in ("start_rps", "end_rps"):
            check_int(f"ramp_up_{f}", getattr(self, f), 1)
        if self.start_rps > self.end_rps:
            raise SpecError(f"ramp_up_start_rps: {self.start_rps} must be <= ramp_up_end_rps {self.end_rps}")

    def rates(self, n: int) -> np.ndarray:
        """The rate of each of n requests (req/s)."""
        progress = np.arange(n, dtype=np.float64) / max(n - 1, 1)
        s, e = float(self.start_rps), float(self.end_rps)
        if self.strategy == "linear":
            return s + (e - s) * progress
        return s * (e / s) ** progress


def arrivals(
    n: int,
    rate: float,
    burstiness: float = 1.0,
    rng: np.random.Generator | np.random.RandomState | None = None,
    process: str = "poisson",
    ramp_up: RampUp | None = None,
) -> np.ndarray:
    """Send times (s) of `n` requests at `rate` (req/s), as vLLM `bench serve` sends them.

    vLLM's `get_request` (since PR #21108) draws one delay per request, g_i ~ Gamma(shape=b,
    scale=1/(rate b)), sums them, C_k = g_0 + ... + g_k, and rescales the sums so the last
    request is sent at exactly n / rate:

        t_k = (n / rate) C_k / C_{n-1}          (the first request at t_0 > 0, not at 0)

    so the offered rate is exactly n / (n / rate) = rate (`vllm/benchmarks/serve.py`;
    docs/engines.md §6.1). `process`: "poisson" (b = 1; `burstiness` must be 1),
    "gamma" (b = `burstiness`: CV^2 = 1/b, < 1 burstier), "constant" (vLLM's burstiness inf:
    t_k = (k + 1) / rate). inference-perf's `load.type: constant` timer draws n exponential gaps
    and rescales them to end at n / rate too (`inference_perf/loadgen/load_timer.py`
    `ConstantLoadTimer`): "poisson" with that generator. `rate` = inf sends everything at 0 (no
    draw). `ramp_up`: vLLM's ramp-up (`RampUp`; `rate` must then be inf): delays at each
    request's own rate, summed without rescaling. `rng` defaults to `vllm_rng(0)` (vLLM's
    default --seed); a `RandomState` from `vllm_rng(seed)` reproduces vLLM's times exactly.
    """
    n = _check_count(n, "num_requests")
    rate = _check_rate(rate)
    if isinstance(burstiness, bool) or not isinstance(burstiness, (int, float, np.number)):
        raise SpecError(f"burstiness: {burstiness!r} is not a number")
    b = float(burstiness)
    if not (math.isfinite(b) and b > 0):
        raise SpecError(f"burstiness: {burstiness!r} must be a finite number > 0")
    if process not in _PROCESSES:
        raise SpecError(
            f"process: {process!r} is not one of {', '.join(_PROCESSES)}"
            f"{_did_you_mean(str(process), _PROCESSES)}"
        )
    if process == "poisson" and b != 1.0:
        raise SpecError(
            f"burstiness: {burstiness!r} needs process 'gamma' (poisson is burstiness 1)"
        )
    if ramp_up is not None:
        if not math.isinf(rate):
            raise SpecError(f"rate: {rate!r} cannot be combined with a ramp-up (vLLM: 'When using ramp-up, "
                            "do not specify --request-rate'); the ramp sets the rates")
        return _ramp_up_arrivals(n, b, rng, process, ramp_up)
    if math.isinf(rate) or n == 0:
        return np.zeros(n, dtype=np.float64)
    if process == "constant":
        out = np.arange(1, n + 1, dtype=np.float64) / rate
    else:
        g = vllm_rng(0) if rng is None else rng
        with np.errstate(over="ignore"):
            delays = g.gamma(b, 1.0 / (rate * b), size=n)
            out = np.cumsum(delays)
            # vLLM: normalize_factor = (n / rate) / delay_ts[-1], only when delay_ts[-1] != 0
            target = n / rate
            if out[-1] != 0 and math.isfinite(out[-1]) and math.isfinite(target):
                out *= target / out[-1]
    if not math.isfinite(out[-1]):
        raise SpecError(f"rate: {rate!r} requests/s is too small: the arrival times overflow")
    return out


def _ramp_up_arrivals(n: int, b: float, rng: np.random.Generator | np.random.RandomState | None,
                      process: str, ramp: RampUp) -> np.ndarray:
    """vLLM's ramp-up schedule: request i's delay at rate r_i, summed (no rescaling)."""
    if n == 0:
        return np.zeros(0, dtype=np.float64)
    r = ramp.rates(n)
    if process == "constant":
        delays = 1.0 / r
    else:
        g = vllm_rng(0) if rng is None else rng
        # one scalar draw per request in vLLM; a scale array draws the same numbers in order
        delays = g.gamma(b, 1.0 / (r * b))
    return np.cumsum(delays)


def lengths(
    n: int,
    mean: float,
    range_ratio: float = 0.0,
    dist: str = "fixed",
    sigma: float = 1.0,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """`n` token counts (int64, each >= 1) with the given mean.

    "fixed": all equal to `mean` (a whole number). "uniform": integers uniform on
    [floor(mean*(1-r)), ceil(mean*(1+r))] with r = `range_ratio` in [0, 1), the lower bound
    raised to 1 (vLLM `--random-range-ratio`). "lognormal": round(LogNormal(mu, sigma)) with
    mu = ln(mean) - sigma^2/2 so the continuous mean is `mean`; clipped to [1, MAX_TOKENS]
    (rounding and the clip shift the mean slightly for small means).
    """
    n = _check_count(n, "num_requests")
    if dist not in _LENGTH_DISTS:
        raise SpecError(
            f"length distribution: {dist!r} is not one of {', '.join(_LENGTH_DISTS)}"
            f"{_did_you_mean(str(dist), _LENGTH_DISTS)}"
        )
    if isinstance(mean, bool) or not isinstance(mean, (int, float, np.number)):
        raise SpecError(f"length: {mean!r} is not a number of tokens")
    m = float(mean)
    if not (math.isfinite(m) and 1 <= m <= MAX_TOKENS):
        raise SpecError(f"length: {mean!r} must be between 1 and {MAX_TOKENS} tokens")
    if isinstance(range_ratio, bool) or not isinstance(range_ratio, (int, float, np.number)):
        raise SpecError(f"range_ratio: {range_ratio!r} is not a number")
    r = float(range_ratio)
    if not (0.0 <= r < 1.0):
        raise SpecError(f"range_ratio: {range_ratio!r} must be in [0, 1)")
    if r > 0 and dist != "uniform":
        raise SpecError(
            f"range_ratio: {range_ratio!r} applies only to the uniform length distribution, not {dist!r}"
        )
    if dist == "fixed":
        if m != math.floor(m):
            raise SpecError(f"length: {mean!r} must be a whole number of tokens for fixed lengths")
        return np.full(n, int(m), dtype=np.int64)
    g = _rng(rng)
    if dist == "uniform":
        low = max(1, math.floor(m * (1 - r)))
        high = max(low, math.ceil(m * (1 + r)))
        return g.integers(low, high + 1, size=n, dtype=np.int64)
    if (
        isinstance(sigma, bool)
        or not isinstance(sigma, (int, float, np.number))
        or not (math.isfinite(float(sigma)) and 0 <= float(sigma) <= 10)
    ):
        raise SpecError(f"sigma: {sigma!r} must be a number in [0, 10]")
    s = float(sigma)
    x = g.lognormal(math.log(m) - s * s / 2, s, size=n)
    return np.clip(np.rint(x), 1, MAX_TOKENS).astype(np.int64)


def synthetic(
    num_requests: int,
    rate: float,
    input_len: float,
    output_len: float,
    *,
    range_ratio: float = 0.0,
    burstiness: float = 1.0,
    length_dist: str | None = None,
    sigma: float = 1.0,
    process: str | None = None,
    concurrency: int | None = None,
    seed: int = 0,
    name: str | None = None,
    ramp_up: RampUp | None = None,
) -> Workload:
    """A synthetic workload in the style of vLLM `bench serve --dataset-name random`.

    `rate` in req/s (inf: all at t = 0); `input_len`/`output_len` mean tokens. `length_dist`
    defaults to "uniform" when `range_ratio` > 0, else "fixed". `process` defaults to
    "poisson" when `burstiness` is 1, else "gamma". Send times are vLLM's (`arrivals`, drawn
    from `vllm_rng(seed)` as vLLM draws them, optionally with a `ramp_up`); the lengths come
    from two further streams of the seed, so changing the rate leaves the lengths as they were
    (common random numbers across a rate sweep).
    """
    n = int(check_int("num_requests", num_requests, 1, maximum=MAX_SIM_REQUESTS))
    seed = int(check_int("seed", seed, 0, maximum=MAX_SEED))
    dist = length_dist or ("uniform" if range_ratio else "fixed")
    proc = process or ("poisson" if burstiness == 1 else "gamma")
    _, g_in, g_out = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3))
    arr = arrivals(n, rate, burstiness, vllm_rng(seed), proc, ramp_up)
    inp = lengths(n, input_len, range_ratio, dist, sigma, g_in)
    out = lengths(n, output_len, range_ratio, dist, sigma, g_out)
    if name is None:
        name = f"synthetic(n={n}, rate={rate:g}, in={input_len:g}, out={output_len:g}"
        name += f", {dist} r={range_ratio:g}" if range_ratio else ""
        name += f", burstiness={burstiness:g}" if burstiness != 1 else ""
        name += f", ramp-up {ramp_up.strategy} {ramp_up.start_rps}->{ramp_up.end_rps}/s" if ramp_up else ""
        name += f", seed={seed})"
    return Workload(arr, inp, out, name=name, concurrency=concurrency, clock_start_s=0.0)


# --------------------------------------------------------------------------- transforms


def scale_to_rate(w: Workload, rate: float) -> Workload:
    """Stretch or squeeze arrival times so that `offered_rate` equals `rate` (req/s).

    Gaps are scaled by one factor, so the burstiness shape is kept. rate = inf puts every
    arrival at 0. A one-request workload is returned unchanged; one whose requests all arrive
    at the same instant cannot be spread out (use `with_arrivals`).
    """
    rate = _check_rate(rate)
    a = w.arrival_s
    if math.isinf(rate):
        new = np.zeros_like(a)
    elif w.num_requests == 1:
        return w
    elif w.duration_s <= 0:
        raise SpecError(
            f"{w.name or 'workload'}: all {w.num_requests} requests arrive at the same instant; "
            "cannot scale to a finite rate (use synthetic arrivals instead)"
        )
    else:
        factor = (w.num_requests - 1) / (rate * w.duration_s)
        if not (math.isfinite(factor) and math.isfinite(a[0] + (w.num_requests - 1) / rate)):
            raise SpecError(f"rate: {rate!r} requests/s is too small: the arrival times overflow")
        new = a[0] + (a - a[0]) * factor
        new[-1] = a[0] + (w.num_requests - 1) / rate
        new = np.maximum.accumulate(new)  # guard rounding
    return dataclasses.replace(w, arrival_s=new, name=f"{w.name}@{rate:g}/s", clock_start_s=None)


def with_arrivals(
    w: Workload, rate: float, burstiness: float = 1.0, seed: int = 0, process: str | None = None,
    ramp_up: RampUp | None = None,
) -> Workload:
    """The trace's own lengths (in order) with vLLM's send schedule (see `arrivals`; drawn from
    `vllm_rng(seed)`)."""
    proc = process or ("poisson" if burstiness == 1 else "gamma")
    arr = arrivals(w.num_requests, rate, burstiness, vllm_rng(seed), proc, ramp_up)
    label = f"ramp-up {ramp_up.strategy}" if ramp_up else f"{proc}@{rate:g}/s"
    return dataclasses.replace(w, arrival_s=arr, name=f"{w.name}+{label}", clock_start_s=0.0)


def take(w: Workload, n: int) -> Workload:
    """The first `n` requests; if `n` exceeds the workload, the trace is tiled.

    Tiling repeats the requests in order, nothing resampled: copy k is shifted by
    k * (duration + mean gap), mean gap = duration / (num_requests - 1), so the time from the
    last request of one copy to the first of the next is one mean gap and the offered rate is
    unchanged. (A workload whose requests all arrive at once tiles at t = 0.)
    """
    n = _check_count(n, "num_requests", 1)
    m = w.num_requests
    if n <= m:
        sl = slice(0, n)
        return Workload(
            w.arrival_s[sl],
            w.input_len[sl],
            w.output_len[sl],
            name=w.name,
            concurrency=w.concurrency,
            bad_rows=w.bad_rows,
            failed_in_trace=w.failed_in_trace,
            extra={k: v[sl] for k, v in w.extra.items()} if w.extra else _NO_EXTRA,
            clock_start_s=w.clock_start_s,
        )
    reps = -(-n // m)
    period = w.duration_s * m / (m - 1) if m > 1 else 0.0
    base = w.arrival_s - w.arrival_s[0]
    arr = (w.arrival_s[0] + base[None, :] + period * np.arange(reps)[:, None]).ravel()[:n]
    arr = np.maximum.accumulate(arr)
    inp = np.tile(w.input_len, reps)[:n]
    out = np.tile(w.output_len, reps)[:n]
    return Workload(
        arr,
        inp,
        out,
        name=f"{w.name} x{n / m:.3g}",
        concurrency=w.concurrency,
        bad_rows=w.bad_rows,
        failed_in_trace=w.failed_in_trace,
        extra={k: np.tile(v, reps)[:n] for k, v in w.extra.items()} if w.extra else _NO_EXTRA,
        clock_start_s=w.clock_start_s,
    )
