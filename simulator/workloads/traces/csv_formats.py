"""CSV trace formats: simple (`arrived_at,num_prefill_tokens,num_decode_tokens`), Azure LLM
inference 2023/2024 and BurstGPT.

pandas' C parser reads clean files; a file it complains about is re-split line by line so
that every problem gets its exact 1-based line number.
"""

from __future__ import annotations

import csv
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simulator.specs.checks import SpecError
from simulator.specs.fields import _did_you_mean
from simulator.specs.readers import MAX_TRACE_BYTES, read_bytes, read_csv_file
from simulator.workloads.traces.cells import (
    _DATETIME,
    _FLOAT_KW,
    _HINT,
    _NAT,
    _TIME,
    _TOKENS,
    _TOKENS0,
    ParsedTrace,
    _bad_mask,
    _problem,
    _to_float,
    _to_ns,
)

SIMPLE_COLUMNS = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")
_AZURE_COLS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_BURST_COLS = ("Timestamp", "Request tokens", "Response tokens")
#: BurstGPT's other columns, kept in Workload.extra when present: file name -> extra name.
_BURST_EXTRA = {"Model": "model", "Total tokens": "total_tokens", "Log Type": "log_type"}


def _norm(name: Any) -> str:
    return str(name).lstrip("\ufeff").strip().strip('"').strip().lower()


def _read_csv(
    path: Path, wanted: tuple[str, ...], optional: tuple[str, ...] = ()
) -> tuple[pd.DataFrame, np.ndarray, dict[int, str], np.ndarray]:
    """Read a CSV trace.

    Returns the frame (the `wanted` columns and those of `optional` the file has, under
    those names), the 1-based file line
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
            df = read_csv_file(
                path, MAX_TRACE_BYTES, "trace file",
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
    for opt in optional:
        if opt.lower() in pos:
            out[opt] = df.iloc[:, pos[opt.lower()]]
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
    text = read_bytes(path, MAX_TRACE_BYTES, "trace file").decode("utf-8", errors="replace")
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


def _extra_column(col: pd.Series, numeric: bool) -> np.ndarray:
    """A kept column: float64 (NaN when missing) or objects (None when missing)."""
    if numeric:
        return _to_float(col)
    v = np.array(col.to_numpy(dtype=object), dtype=object)  # a writable copy
    v[pd.isna(v)] = None
    return v


def _read_simple_like(path: Path, fmt: str, skip_bad_rows: bool) -> ParsedTrace:
    """Simple, Azure or BurstGPT CSV (the three share one reader; only the columns differ)."""
    wanted = {"simple": SIMPLE_COLUMNS, "azure": _AZURE_COLS, "burstgpt": _BURST_COLS}[fmt]
    optional = tuple(_BURST_EXTRA) if fmt == "burstgpt" else ()
    df, lines, field_errors, blank = _read_csv(path, wanted, optional)
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
    extra = {
        _BURST_EXTRA[c]: _extra_column(df[c], c == "Total tokens")[keep]
        for c in optional
        if c in df.columns
    }
    return ParsedTrace(t[keep], i[keep], o[keep], nbad, nfailed, extra)

