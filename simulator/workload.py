"""Request streams for the simulator: synthetic arrivals and lengths, and published traces.

A `Workload` is three aligned arrays: arrival times (seconds, nondecreasing), prompt lengths
and output lengths (tokens, >= 1). Synthetic workloads follow vLLM's `bench serve`
conventions (Poisson or gamma arrivals with `--burstiness`, `--random-range-ratio` lengths);
traces are read in the forms they are published in (simple CSV, Azure LLM inference
2023/2024, Mooncake JSONL, BurstGPT). Every random draw comes from an explicit
`numpy.random.Generator` built from a seed, so the same seed gives the same arrays bit for bit.

Every bad user input raises `SpecError` with one line naming the file, the 1-based line,
the column, the value and what is allowed.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import importlib.resources
import io
import json
import math
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .specs import SpecError, _did_you_mean

#: Largest token count accepted in a trace or a length option (a sanity bound, not a model limit).
MAX_TOKENS = 10**9

#: Arrival processes and length distributions for synthetic workloads.
_PROCESSES = ("poisson", "gamma", "constant")
_LENGTH_DISTS = ("fixed", "uniform", "lognormal")

#: Trace formats `read_trace` understands (besides "auto").
TRACE_FORMATS = ("simple", "azure", "mooncake", "burstgpt")

#: Built-in traces: name -> (file in simulator/traces, one-line description with licence).
BUILTIN_WORKLOADS: dict[str, tuple[str, str]] = {
    "azure-conv": (
        "azure_conv_2023.csv",
        "Azure LLM inference trace 2023, conversation service: 19,366 requests over ~1 h, "
        "~5.5 req/s, prompt mean ~1155, output mean ~211 tokens (Microsoft/Splitwise, CC-BY-4.0)",
    ),
    "azure-code": (
        "azure_code_2023.csv",
        "Azure LLM inference trace 2023, code-completion service: 8,819 requests over ~1 h, "
        "~2.6 req/s, prompt mean ~2048, output mean ~28 tokens (Microsoft/Splitwise, CC-BY-4.0)",
    ),
}

# Exact (round-trip) float parsing: the default from pandas 3, which deprecates the option.
_FLOAT_KW: dict[str, Any] = (
    {"float_precision": "round_trip"} if int(pd.__version__.split(".")[0]) < 3 else {}
)

_HINT = " (pass skip_bad_rows / --skip-bad-rows to skip malformed rows)"


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
    `arrival_s`. `bad_rows` counts rows a trace reader skipped (`skip_bad_rows`);
    `failed_in_trace` counts requests the trace itself records as failed (BurstGPT rows with
    0 response tokens), which are dropped. Arrays are copied and made read-only. Equality is
    identity (`eq=False`): arrays do not compare as booleans.
    """

    arrival_s: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    name: str = ""
    concurrency: int | None = None
    bad_rows: int = 0
    failed_in_trace: int = 0

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
        if c is not None and (isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 1):
            raise SpecError(f"workload.concurrency: {c!r} must be an integer >= 1 (or omitted)")
        for f in ("bad_rows", "failed_in_trace"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise SpecError(f"workload.{f}: {v!r} must be an integer >= 0")
        for a in (arr, inp, out):
            a.setflags(write=False)
        object.__setattr__(self, "arrival_s", arr)
        object.__setattr__(self, "input_len", inp)
        object.__setattr__(self, "output_len", out)
        if c is not None:
            object.__setattr__(self, "concurrency", int(c))

    @property
    def num_requests(self) -> int:
        """Number of requests."""
        return int(self.arrival_s.size)

    @property
    def duration_s(self) -> float:
        """Seconds from the first to the last arrival."""
        return float(self.arrival_s[-1] - self.arrival_s[0])

    @property
    def offered_rate(self) -> float:
        """Mean arrival rate (req/s): (n-1) / (last - first); inf if n < 2 or all arrive at once."""
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
            "bad_rows": self.bad_rows,
            "failed_in_trace": self.failed_in_trace,
        }

    def __repr__(self) -> str:
        return (
            f"Workload(name={self.name!r}, num_requests={self.num_requests}, "
            f"offered_rate={self.offered_rate:.4g}, mean_input_len={self.mean_input_len:.1f}, "
            f"mean_output_len={self.mean_output_len:.1f}, concurrency={self.concurrency})"
        )


# --------------------------------------------------------------------------- synthetic


def _check_count(n: Any, what: str, minimum: int = 0) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < minimum:
        raise SpecError(f"{what}: {n!r} must be an integer >= {minimum}")
    return int(n)


def _check_rate(rate: Any, what: str = "rate") -> float:
    if isinstance(rate, bool) or not isinstance(rate, (int, float, np.number)):
        raise SpecError(f"{what}: {rate!r} is not a number")
    r = float(rate)
    if not (r > 0):  # also rejects NaN
        raise SpecError(f"{what}: {rate!r} must be > 0 requests/s (or inf)")
    return r


def _rng(rng: np.random.Generator | None) -> np.random.Generator:
    return np.random.default_rng(0) if rng is None else rng


def arrivals(
    n: int,
    rate: float,
    burstiness: float = 1.0,
    rng: np.random.Generator | None = None,
    process: str = "poisson",
) -> np.ndarray:
    """Arrival times (s) of `n` requests at mean `rate` (req/s), as vLLM `bench serve` sends them.

    The first request arrives at t = 0; request i arrives after the sum of i gaps.
    `process`: "poisson" (exponential gaps, mean 1/rate; `burstiness` must be 1),
    "gamma" (gaps ~ Gamma(shape=burstiness, scale=1/(rate*burstiness)): mean 1/rate,
    CV^2 = 1/burstiness; burstiness 1 is Poisson, < 1 burstier), or "constant" (gaps exactly
    1/rate). `rate` = inf puts every arrival at 0 (offline / max-throughput). `rng` defaults to
    `numpy.random.default_rng(0)`.
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
    if math.isinf(rate) or n == 0:
        return np.zeros(n, dtype=np.float64)
    if process == "constant":
        return np.arange(n, dtype=np.float64) / rate
    g = _rng(rng)
    if process == "poisson":
        gaps = g.exponential(1.0 / rate, size=n - 1)
    else:
        gaps = g.gamma(b, 1.0 / (rate * b), size=n - 1)
    out = np.empty(n, dtype=np.float64)
    out[0] = 0.0
    with np.errstate(over="ignore"):
        np.cumsum(gaps, out=out[1:])
    if not math.isfinite(out[-1]):
        raise SpecError(f"rate: {rate!r} requests/s is too small: the arrival times overflow")
    return out


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
) -> Workload:
    """A synthetic workload in the style of vLLM `bench serve --dataset-name random`.

    `rate` in req/s (inf: all at t = 0); `input_len`/`output_len` mean tokens. `length_dist`
    defaults to "uniform" when `range_ratio` > 0, else "fixed". `process` defaults to
    "poisson" when `burstiness` is 1, else "gamma". The seed feeds three independent streams
    (arrivals, prompt lengths, output lengths), so changing the rate leaves the lengths as
    they were (common random numbers across a rate sweep).
    """
    n = _check_count(num_requests, "num_requests", 1)
    seed = _check_count(seed, "seed")
    dist = length_dist or ("uniform" if range_ratio else "fixed")
    proc = process or ("poisson" if burstiness == 1 else "gamma")
    g_arr, g_in, g_out = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3))
    arr = arrivals(n, rate, burstiness, g_arr, proc)
    inp = lengths(n, input_len, range_ratio, dist, sigma, g_in)
    out = lengths(n, output_len, range_ratio, dist, sigma, g_out)
    if name is None:
        name = f"synthetic(n={n}, rate={rate:g}, in={input_len:g}, out={output_len:g}"
        name += f", {dist} r={range_ratio:g}" if range_ratio else ""
        name += f", burstiness={burstiness:g}" if burstiness != 1 else ""
        name += f", seed={seed})"
    return Workload(arr, inp, out, name=name, concurrency=concurrency)


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
    return dataclasses.replace(w, arrival_s=new, name=f"{w.name}@{rate:g}/s")


def with_arrivals(
    w: Workload, rate: float, burstiness: float = 1.0, seed: int = 0, process: str | None = None
) -> Workload:
    """The trace's own lengths (in order) with fresh synthetic arrivals (see `arrivals`)."""
    seed = _check_count(seed, "seed")
    proc = process or ("poisson" if burstiness == 1 else "gamma")
    g = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
    arr = arrivals(w.num_requests, rate, burstiness, g, proc)
    return dataclasses.replace(w, arrival_s=arr, name=f"{w.name}+{proc}@{rate:g}/s")


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
    )


# --------------------------------------------------------------------------- trace reading


# Column kinds: (expected text, minimum value, integer?) ; time columns have min 0, not integer.
_TIME = ("a finite number of seconds >= 0", 0.0, False)
_TOKENS = (f"a whole number of tokens from 1 to {MAX_TOKENS}", 1.0, True)
_DATETIME = (
    "a date-time like '2023-11-16 18:15:46.6805900' (ISO 8601, years 1678-2261)",
    0.0,
    False,
)
_TOKENS0 = (f"a whole number of tokens from 0 to {MAX_TOKENS}", 0.0, True)

_SIMPLE_COLS = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")
_AZURE_COLS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_BURST_COLS = ("Timestamp", "Request tokens", "Response tokens")
_MOON_KEYS = ("timestamp", "input_length", "output_length")


def _bad_mask(v: np.ndarray, kind: tuple[str, float, bool]) -> np.ndarray:
    _, lo, integer = kind
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(v) | (v < lo)
        if integer:
            bad |= (v > MAX_TOKENS) | (v != np.floor(v))
    return bad


def _scalar_ok(v: float, kind: tuple[str, float, bool]) -> bool:
    """The scalar version of `_bad_mask` (negated), for row-by-row readers."""
    _, lo, integer = kind
    if not (math.isfinite(v) and v >= lo):
        return False
    return not integer or (v <= MAX_TOKENS and v == math.floor(v))


def _problem(raw: Any, kind: tuple[str, float, bool]) -> str:
    """Why one raw cell is bad (for the error message)."""
    if (
        raw is None
        or (isinstance(raw, str) and not raw.strip())
        or (not isinstance(raw, str) and bool(pd.isna(raw)))
    ):
        return "missing value"
    if kind is _DATETIME:
        return f"{str(raw)[:40]!r} is not a date-time"
    try:
        v = float(str(raw).strip().strip('"'))
    except (ValueError, OverflowError):
        return f"{str(raw)[:40]!r} is not a number"
    _, lo, integer = kind
    if not math.isfinite(v):
        return f"{str(raw)[:40]!r} is not finite"
    if v < lo:
        return f"{str(raw)[:40]!r} is {'negative' if v < 0 else 'zero'}"
    if integer and v != math.floor(v):
        return f"{str(raw)[:40]!r} is not a whole number"
    if integer and v > MAX_TOKENS:
        return f"{str(raw)[:40]!r} is too large"
    return f"{str(raw)[:40]!r} is invalid"


def _to_float(col: pd.Series) -> np.ndarray:
    """A column as float64 (unparseable cells -> NaN), tolerating spaces and double quotes."""
    if col.dtype.kind in "iuf":
        return col.to_numpy(dtype=np.float64, na_value=np.nan)
    v = _numeric(col)
    retry = np.isnan(v) & col.notna().to_numpy()
    if retry.any():  # the slow path, only for cells that failed
        v[retry] = _numeric(col[retry].astype("str").str.strip().str.strip('"'))
    return v


def _numeric(col: pd.Series) -> np.ndarray:
    """pandas.to_numeric with errors -> NaN, as a writable float64 array."""
    try:
        out = pd.to_numeric(col, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        return np.array(out, dtype=np.float64)
    except (OverflowError, ValueError, TypeError):  # e.g. integers beyond float range
        return np.array([_parse_float(x) for x in col], dtype=np.float64)


def _parse_float(x: Any) -> float:
    try:
        return float(x)
    except (ValueError, TypeError, OverflowError):
        return math.nan


def _to_ns(col: pd.Series) -> np.ndarray:
    """ISO 8601 date-times as int64 ns since the epoch (UTC; naive taken as UTC); NaT -> int64 min."""

    def conv(s: pd.Series) -> np.ndarray:
        s = s.astype("str")
        try:
            ts = pd.to_datetime(s, format="ISO8601", errors="coerce", utc=True)
            ns = np.array(ts.dt.tz_localize(None), dtype="datetime64[ns]").view(np.int64)
        except (ValueError, TypeError, OverflowError):
            return np.full(len(s), _NAT, dtype=np.int64)
        # ISO 8601 also allows bare years ("2023", "-1"); a trace timestamp has a full date.
        full = s.str.match(r"[0-9]{4}-[0-9]{2}-[0-9]{2}").to_numpy(dtype=bool, na_value=False)
        ns[~full] = _NAT
        return ns

    ns = conv(col)
    retry = (ns == _NAT) & col.notna().to_numpy()
    if retry.any():
        ns[retry] = conv(col[retry].astype("str").str.strip().str.strip('"'))
    return ns


_NAT = np.iinfo(np.int64).min


def _sniff(path: Path) -> str:
    """The first line of the file (decoded leniently); SpecError if unreadable or empty."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
    except OSError as e:
        raise SpecError(
            f"{path}: cannot read ({e.__class__.__name__}: {e.strerror or e})"
        ) from None
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff")
    if not text.strip():
        raise SpecError(
            f"{path}: empty file; expected a trace with a header and at least one request"
        )
    return re.split(r"\r\n|\r|\n", text, maxsplit=1)[0]


def _header_cols(line: str) -> list[str]:
    return [c.strip().strip('"').strip() for c in line.split(",")]


def _detect(path: Path, first: str) -> str:
    cols = {c.lower() for c in _header_cols(first)}
    if {c.lower() for c in _SIMPLE_COLS} <= cols:
        return "simple"
    if {c.lower() for c in _AZURE_COLS} <= cols:
        return "azure"
    if {c.lower() for c in _BURST_COLS} <= cols:
        return "burstgpt"
    if first.lstrip().startswith("{") or path.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        return "mooncake"
    raise SpecError(
        f"{path}:1: unrecognised trace header {first[:80]!r}; expected simple CSV "
        f"'{','.join(_SIMPLE_COLS)}', Azure CSV '{','.join(_AZURE_COLS)}', BurstGPT CSV "
        f"'Timestamp,Model,Request tokens,Response tokens,...', or Mooncake JSONL "
        f"(timestamp, input_length, output_length)"
    )


def _norm(name: Any) -> str:
    return str(name).lstrip("\ufeff").strip().strip('"').strip().lower()


def _read_csv(
    path: Path, wanted: tuple[str, ...]
) -> tuple[pd.DataFrame, np.ndarray, dict[int, str], np.ndarray]:
    """Read a CSV trace.

    Returns the frame (only the `wanted` columns, under those names), the 1-based file line
    of each row, {line: problem} for lines with more fields than the header (left out of
    the frame), and a mask of blank rows. pandas' C parser reads clean files; anything it
    complains about (for instance a first row with extra fields, which pandas would
    otherwise turn into an index) is re-read line by line so that every problem gets its
    exact line number.
    """
    df: pd.DataFrame | None
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            df = pd.read_csv(
                path,
                skip_blank_lines=False,
                index_col=False,
                on_bad_lines="warn",
                quoting=csv.QUOTE_NONE,
                low_memory=False,
                encoding="utf-8",
                encoding_errors="replace",
                **_FLOAT_KW,
            )
        if caught or not isinstance(df.index, pd.RangeIndex):
            df = None
    except pd.errors.EmptyDataError:
        raise SpecError(
            f"{path}: empty file; expected a trace with a header and at least one request"
        ) from None
    except (pd.errors.ParserError, ValueError, UnicodeError, OverflowError, csv.Error):
        df = None
    if df is not None:
        # QUOTE_NONE and blank lines kept: row i is line i + 2 (header is line 1).
        lines = np.arange(2, 2 + len(df), dtype=np.int64)
        field_errors: dict[int, str] = {}
        columns = [_norm(c) for c in df.columns]
    else:
        df, lines, field_errors, columns = _read_csv_slow(path)
    pos: dict[str, int] = {}
    for k, c in enumerate(columns):
        pos.setdefault(c, k)
    blank = df.isna().all(axis=1).to_numpy()
    out = {}
    for want in wanted:
        if want.lower() not in pos:
            raise SpecError(
                f"{path}:1: column {want!r} missing{_did_you_mean(want.lower(), pos)}; "
                f"expected columns {', '.join(wanted)}"
            )
        out[want] = df.iloc[:, pos[want.lower()]]
    return pd.DataFrame(out), lines, field_errors, blank


# pandas.read_csv's default missing-value markers (so both readers agree on blank rows).
_NA_STRINGS = frozenset(
    [
        "",
        "#N/A",
        "#N/A N/A",
        "#NA",
        "-1.#IND",
        "-1.#QNAN",
        "-NaN",
        "-nan",
        "1.#IND",
        "1.#QNAN",
        "<NA>",
        "N/A",
        "NA",
        "NULL",
        "NaN",
        "None",
        "n/a",
        "nan",
        "null",
    ]
)


def _read_csv_slow(path: Path) -> tuple[pd.DataFrame, np.ndarray, dict[int, str], list[str]]:
    """Split a CSV line by line (no quoting).

    Returns a frame of strings (None for missing), each row's line number, {line: problem}
    for lines with extra non-empty fields, and the normalised header names.
    """
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError as e:
        raise SpecError(
            f"{path}: cannot read ({e.__class__.__name__}: {e.strerror or e})"
        ) from None
    all_lines = re.split(r"\r\n|\r|\n", text)
    if all_lines and all_lines[-1] == "":
        all_lines.pop()
    header = [_norm(c) for c in all_lines[0].split(",")]
    n = len(header)
    rows: list[list[str | None]] = []
    line_nos: list[int] = []
    field_errors: dict[int, str] = {}
    for lineno, line in enumerate(all_lines[1:], start=2):
        fields: list[str | None] = [None if f in _NA_STRINGS else f for f in line.split(",")]
        if len(fields) > n:
            if any(f is not None for f in fields[n:]):
                field_errors[lineno] = f"expected {n} fields, saw {len(fields)}"
                continue
            fields = fields[:n]  # trailing empty fields (e.g. a trailing comma) are harmless
        rows.append(fields + [None] * (n - len(fields)))
        line_nos.append(lineno)
    df = (
        pd.DataFrame(rows, columns=range(n), dtype=object)
        if rows
        else pd.DataFrame(columns=range(n))
    )
    return df, np.array(line_nos, dtype=np.int64), field_errors, header


def _finish(
    path: Path,
    cols: list[tuple[str, np.ndarray, np.ndarray, tuple[str, float, bool]]],
    raw: dict[str, pd.Series],
    lines: np.ndarray,
    blank: np.ndarray,
    field_errors: dict[int, str],
    skip_bad_rows: bool,
) -> tuple[np.ndarray, int]:
    """Combine per-column bad masks; raise for the first bad line or return (keep mask, bad count)."""
    bad = np.zeros(lines.size, dtype=bool)
    for _, _, b, _ in cols:
        bad |= b
    bad &= ~blank
    nbad = int(bad.sum()) + len(field_errors)
    if nbad and not skip_bad_rows:
        first_row = int(np.argmax(bad)) if bad.any() else -1
        row_line = int(lines[first_row]) if first_row >= 0 else None
        field_line = min(field_errors) if field_errors else None
        if field_line is not None and (row_line is None or field_line < row_line):
            raise SpecError(f"{path}:{field_line}: {field_errors[field_line]}{_HINT}")
        assert row_line is not None
        for name, _, b, kind in cols:
            if b[first_row]:
                cell = raw[name].iloc[first_row]
                raise SpecError(
                    f"{path}:{row_line}: column {name!r}: {_problem(cell, kind)}; expected {kind[0]}{_HINT}"
                )
    return ~bad & ~blank, nbad


def _read_simple_like(
    path: Path, fmt: str, skip_bad_rows: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    wanted = {"simple": _SIMPLE_COLS, "azure": _AZURE_COLS, "burstgpt": _BURST_COLS}[fmt]
    df, lines, field_errors, blank = _read_csv(path, wanted)
    tcol, icol, ocol = wanted
    if fmt == "azure":
        ns = _to_ns(df[tcol])
        tbad = ns == _NAT
        t = np.zeros(len(df), dtype=np.float64)
        if (~tbad).any():
            t[~tbad] = (ns[~tbad] - ns[~tbad].min()) / 1e9
        tkind = _DATETIME
    else:
        t = _to_float(df[tcol])
        tkind = _TIME
        tbad = _bad_mask(t, tkind)
    i = _to_float(df[icol])
    o = _to_float(df[ocol])
    okind = _TOKENS0 if fmt == "burstgpt" else _TOKENS
    ikind = _TOKENS
    obad = _bad_mask(o, okind)
    ibad = _bad_mask(i, ikind)
    failed = np.zeros(len(df), dtype=bool)
    if fmt == "burstgpt":
        # A request BurstGPT records as failed (0 response tokens) is dropped, not bad,
        # whatever its request-token count, as long as its timestamp and counts parse.
        failed = ~tbad & ~obad & (o == 0) & ~_bad_mask(i, _TOKENS0)
        ibad &= ~failed
    raw = {c: df[c] for c in (tcol, icol, ocol)}
    keep, nbad = _finish(
        path,
        [(tcol, t, tbad, tkind), (icol, i, ibad, ikind), (ocol, o, obad, okind)],
        raw,
        lines,
        blank,
        field_errors,
        skip_bad_rows,
    )
    nfailed = int((failed & keep).sum())
    keep &= ~failed
    return t[keep], i[keep], o[keep], nbad, nfailed


def _num(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return math.nan
    try:
        return float(v)
    except OverflowError:
        return math.inf


_JINT = r"(?:0|[1-9][0-9]*)"
_JSP = r"[ \t]*"
_MOONCAKE_RE = re.compile(
    rf'^{_JSP}\{{{_JSP}"timestamp"{_JSP}:{_JSP}({_JINT}(?:\.[0-9]+)?){_JSP},'
    rf'{_JSP}"input_length"{_JSP}:{_JSP}({_JINT}){_JSP},'
    rf'{_JSP}"output_length"{_JSP}:{_JSP}({_JINT}){_JSP}'
    rf'(?:,{_JSP}"hash_ids"{_JSP}:{_JSP}\[[0-9, \t]*\]{_JSP})?'
    rf"\}}[ \t\r]*$",
    re.MULTILINE,
)
_NONBLANK_RE = re.compile(r"^[^\S\n]*\S", re.MULTILINE)
# hash_ids (KV block hashes) are not used; a list of digits and commas is accepted as is.
_HASH_IDS_RE = re.compile(r'"hash_ids"[ \t]*:[ \t]*\[[0-9, \t]*\]')


def _read_mooncake(
    path: Path, skip_bad_rows: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    try:
        text = path.read_bytes().decode("utf-8", errors="replace").lstrip("\ufeff")
    except OSError as e:
        raise SpecError(
            f"{path}: cannot read ({e.__class__.__name__}: {e.strerror or e})"
        ) from None
    # Fast path: every non-blank line has the canonical published form, checked by a regex
    # that matches within one line, so a match is a valid JSON object with valid values.
    csv_text, nmatch = _MOONCAKE_RE.subn(r"\1,\2,\3", text)
    nlines = text.count("\n") + (0 if text.endswith("\n") else 1)
    if nmatch and (nmatch == nlines or nmatch == len(_NONBLANK_RE.findall(text))):
        try:
            a = pd.read_csv(
                io.StringIO(csv_text), header=None, dtype=np.float64, **_FLOAT_KW
            ).to_numpy()
        except (ValueError, pd.errors.ParserError, OverflowError):
            a = np.empty((0, 0))  # odd whitespace lines etc.: take the careful path
        if a.shape == (nmatch, 3) and np.all(a[:, 1:] <= MAX_TOKENS) and np.all(a[:, 1:] >= 1):
            return a[:, 0] / 1000.0, a[:, 1], a[:, 2], 0, 0
    text = _HASH_IDS_RE.sub('"hash_ids": []', text)
    kinds = {
        "timestamp": ("a finite number of milliseconds >= 0", 0.0, False),
        "input_length": _TOKENS,
        "output_length": _TOKENS,
    }
    rows: list[tuple[float, float, float]] = []
    nbad = 0
    for lineno, line in enumerate(text.split("\n"), start=1):
        line = line.strip()
        if not line:
            continue
        problem = None
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as e:
            obj = None
            problem = f"not a JSON object ({getattr(e, 'msg', e.__class__.__name__)})"
        if problem is None and not isinstance(obj, dict):
            problem = f"not a JSON object (got {type(obj).__name__})"
        vals: list[float] = []
        if problem is None:
            assert isinstance(obj, dict)
            for key, kind in kinds.items():
                if key not in obj:
                    problem = f"key {key!r}: missing; expected {kind[0]}"
                    break
                v = _num(obj[key])
                if not _scalar_ok(v, kind):
                    shown = repr(obj[key])[:40]
                    problem = f"key {key!r}: {shown} is invalid; expected {kind[0]}"
                    break
                vals.append(v)
        if problem is not None:
            if not skip_bad_rows:
                raise SpecError(f"{path}:{lineno}: {problem}{_HINT}")
            nbad += 1
            continue
        rows.append((vals[0] / 1000.0, vals[1], vals[2]))
    a = np.array(rows, dtype=np.float64).reshape(-1, 3)
    return a[:, 0], a[:, 1], a[:, 2], nbad, 0


def read_trace(path: str | Path, fmt: str = "auto", skip_bad_rows: bool = False) -> Workload:
    """Read a published request trace into a `Workload`.

    Formats (`fmt`, or "auto" to detect from the header / extension):

    - "simple": CSV `arrived_at,num_prefill_tokens,num_decode_tokens` (seconds, tokens).
    - "azure": Azure LLM inference 2023/2024 CSV `TIMESTAMP,ContextTokens,GeneratedTokens`;
      TIMESTAMP is a date-time string (e.g. `2023-11-16 18:15:46.6805900`, up to 9 fractional
      digits, optional UTC offset), converted exactly (ns) to seconds.
    - "mooncake": JSONL with `timestamp` (ms), `input_length`, `output_length` (`hash_ids` ignored).
    - "burstgpt": CSV `Timestamp` (s), `Model`, `Request tokens`, `Response tokens`, ...;
      rows with 0 response tokens are requests that failed in the trace: they are dropped
      and counted in `Workload.failed_in_trace`.

    Arrivals are shifted so the earliest is at 0 and the rows stably sorted by arrival.
    Extra columns/keys are ignored; blank lines are skipped. A row is malformed when a column
    is missing, not a number, NaN/inf, negative, fractional (token counts), or when it has
    more fields than the header. A prompt of 0 tokens is malformed, and so is an output of 0
    tokens outside BurstGPT (a served request emits at least one token; vLLM cannot serve
    max_tokens=0). A malformed row raises SpecError naming the file, the 1-based line and the
    column, unless `skip_bad_rows`, in which case it is skipped and counted in `bad_rows`.
    """
    p = Path(path)
    if fmt not in ("auto", *TRACE_FORMATS):
        raise SpecError(
            f"trace format: {fmt!r} is not one of auto, {', '.join(TRACE_FORMATS)}"
            f"{_did_you_mean(str(fmt), TRACE_FORMATS)}"
        )
    if not p.exists():
        raise SpecError(f"{p}: no such file")
    if p.is_dir():
        raise SpecError(f"{p}: is a folder, expected a trace file")
    first = _sniff(p)
    kind = _detect(p, first) if fmt == "auto" else fmt
    if kind == "mooncake":
        t, i, o, nbad, nfailed = _read_mooncake(p, skip_bad_rows)
    else:
        if not first.strip():
            raise SpecError(f"{p}:1: blank line where the CSV header belongs")
        t, i, o, nbad, nfailed = _read_simple_like(p, kind, skip_bad_rows)
    if t.size == 0:
        why = f"all {nbad} rows are malformed" if nbad else "no request rows"
        why += f", {nfailed} failed in the trace" if nfailed else ""
        raise SpecError(f"{p}: no requests ({why})")
    order = np.argsort(t, kind="stable")
    t = t[order]
    t = t - t[0]
    return Workload(
        t,
        i[order].astype(np.int64),
        o[order].astype(np.int64),
        name=p.stem,
        bad_rows=nbad,
        failed_in_trace=nfailed,
    )


def write_trace(w: Workload, path: str | Path) -> None:
    """Write `w` as a simple CSV trace (`arrived_at,num_prefill_tokens,num_decode_tokens`).

    Floats are written in shortest round-trip form, so `read_trace` gives back the same arrays.
    """
    pd.DataFrame(
        {_SIMPLE_COLS[0]: w.arrival_s, _SIMPLE_COLS[1]: w.input_len, _SIMPLE_COLS[2]: w.output_len}
    ).to_csv(path, index=False)


# --------------------------------------------------------------------------- built-ins


def _read_builtin(fname: str) -> Workload:
    """Read a packaged trace via importlib.resources, falling back to the path next to this file."""
    try:
        res = importlib.resources.files("simulator") / "traces" / fname
        if res.is_file():
            with importlib.resources.as_file(res) as p:
                return read_trace(p, fmt="simple")
    except (ModuleNotFoundError, TypeError, AttributeError, NotImplementedError, OSError):
        pass
    return read_trace(Path(__file__).resolve().parent / "traces" / fname, fmt="simple")


@functools.cache
def builtin(name: str) -> Workload:
    """A built-in trace by name (see `BUILTIN_WORKLOADS`); cached (Workloads are immutable)."""
    key = name.strip().lower().replace("_", "-")
    if key not in BUILTIN_WORKLOADS:
        raise SpecError(
            f"workload: {name!r} is not a built-in{_did_you_mean(key, BUILTIN_WORKLOADS)}; "
            f"built-ins: {', '.join(BUILTIN_WORKLOADS)}"
        )
    w = _read_builtin(BUILTIN_WORKLOADS[key][0])
    return Workload(w.arrival_s, w.input_len, w.output_len, name=key)


def load_workload(spec: str | Path, **kw: Any) -> Workload:
    """Resolve a built-in name (e.g. "azure-conv") or a trace file path; `kw` go to `read_trace`."""
    s = str(spec)
    key = s.strip().lower().replace("_", "-")
    if key in BUILTIN_WORKLOADS and not Path(s).is_file():
        return builtin(key)
    p = Path(s)
    if p.is_file():
        return read_trace(p, **kw)
    raise SpecError(
        f"workload: {s!r} is not a built-in or a file{_did_you_mean(key, BUILTIN_WORKLOADS)}; "
        f"built-ins: {', '.join(BUILTIN_WORKLOADS)}"
    )
