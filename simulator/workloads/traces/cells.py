"""Cell checks shared by the trace readers: what a valid time or token count is, and why not.

A column kind is (expected text, minimum value, integer?). Vectorised readers build a bad-row
mask per column with `_bad_mask`; row-by-row readers use `_scalar_ok`; the first bad cell's
error message comes from `_problem`.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from simulator.workloads.workload import MAX_TOKENS

# Exact (round-trip) float parsing: the default from pandas 3, which deprecates the option.
_FLOAT_KW: dict[str, Any] = (
    {"float_precision": "round_trip"} if int(pd.__version__.split(".")[0]) < 3 else {}
)

_HINT = " (pass skip_bad_rows / --skip-bad-rows to skip malformed rows)"


class ParsedTrace(NamedTuple):
    """What a format reader returns, in file order (`read_trace` sorts by arrival)."""

    arrival_s: np.ndarray  # float64, not yet shifted to start at 0
    input_len: np.ndarray  # float64 whole numbers
    output_len: np.ndarray
    bad_rows: int
    failed_in_trace: int
    extra: dict[str, np.ndarray]  # further per-request columns the format carries


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
            ns = _as_ns(np.asarray(ts.dt.tz_localize(None).to_numpy()))
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


def _as_ns(arr: np.ndarray) -> np.ndarray:
    """datetime64 values of any unit as int64 ns; those beyond the ns range (years before 1678
    or after 2261) -> _NAT, a bad timestamp. pandas returns a coarser unit when every date of a
    column lies outside that range, and casting it to ns wrapped around silently (a trace of
    years 0001 and 9999 ran with arrivals 1.9e9 s apart)."""
    unit, count = np.datetime_data(arr.dtype)
    if unit == "ns" and count == 1:
        return arr.view(np.int64).copy()
    v = arr.view(np.int64)
    per = int(np.array([count], dtype=f"m8[{unit}]").astype("m8[ns]").view(np.int64)[0])  # ns per step
    ok = (v != _NAT) & (np.abs(v) <= (np.iinfo(np.int64).max - 1) // per)
    out = np.full(len(v), _NAT, dtype=np.int64)
    out[ok] = v[ok] * per
    return out

