"""Mooncake JSONL traces: one object per line with `timestamp` (ms), `input_length`,
`output_length` and `hash_ids` (the request's KV-block hashes, kept per request).

Read through the reader layer (`specs.readers`): the file at most MAX_TRACE_BYTES and every
line at most MAX_JSONL_LINE_BYTES, both refused before any line is parsed; a hash id is a
whole number of at most `MAX_HASH_DIGITS` digits (one of 5,000 digits is refused naming its
line, not a ValueError). Memory: equal hash ids share one int object across the whole trace
(`_Interner`), so a request's id tuple costs 8 bytes per id; the engine's per-block hashes are
built from chunks shared by every request with the same prefix (`mooncake_block_hashes`).
"""

from __future__ import annotations

import io
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simulator.specs.checks import SpecError
from simulator.specs.readers import (
    JSON_DECODER,
    MAX_JSONL_LINE_BYTES,
    MAX_TRACE_BYTES,
    check_line_bytes,
    read_bytes,
    read_csv_text,
)
from simulator.workloads.traces.cells import _FLOAT_KW, _HINT, _TOKENS, ParsedTrace, _scalar_ok
from simulator.workloads.workload import MAX_TOKENS, object_column


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
    rf'(?:,{_JSP}"hash_ids"{_JSP}:{_JSP}\[([0-9, \t]*)\]{_JSP})?'
    rf"\}}[ \t\r]*$",
    re.MULTILINE,
)
_NONBLANK_RE = re.compile(r"^[^\S\n]*\S", re.MULTILINE)
# A hash_ids list of digits, commas and blanks is read by its digit runs, without JSON
# (fast, and as lenient as the reader has always been about such lists).
_HASH_IDS_RE = re.compile(r'"hash_ids"[ \t]*:[ \t]*\[([0-9, \t]*)\]')
_DIGITS_RE = re.compile(r"[0-9]+")

_KINDS = {
    "timestamp": ("a finite number of milliseconds >= 0", 0.0, False),
    "input_length": _TOKENS,
    "output_length": _TOKENS,
}
#: a hash id is a 64-bit block hash: at most 19 digits (5,000 would be a 4,300-digit ValueError)
MAX_HASH_DIGITS = 19
_HASH_EXPECTED = f"a list of block hashes (whole numbers >= 0 of at most {MAX_HASH_DIGITS} digits)"


class _LongHashId(ValueError):
    """A hash id longer than MAX_HASH_DIGITS digits."""


class _Interner(dict):
    """One int object per distinct hash id over the whole trace: requests sharing a prefix share
    its ids (a Python int is 28-32 bytes; a shared one costs each tuple 8)."""

    def ids(self, values: Any) -> tuple[int, ...]:
        vals = values if isinstance(values, list) else list(values)
        return tuple(map(self.setdefault, vals, vals))  # C-speed: no Python loop per id


def _hash_tuple(digits_and_commas: str, intern: _Interner | None = None) -> tuple[int, ...]:
    """The ints of a hash_ids list body ("1, 2, 3"); digit runs if it is not plain CSV.
    Raises `_LongHashId` for an id of more than MAX_HASH_DIGITS digits."""
    if not digits_and_commas.strip():
        return ()
    parts = digits_and_commas.split(",")
    if max(map(len, parts)) > MAX_HASH_DIGITS:  # a long part: blanks, or a too long id
        longest = max(map(len, _DIGITS_RE.findall(digits_and_commas)), default=0)
        if longest > MAX_HASH_DIGITS:
            raise _LongHashId(f"an id of {longest:,} digits")
    try:  # the published form; str.split is ~1.6x faster than the regex
        values: Any = map(int, parts)
        out = tuple(values) if intern is None else intern.ids(values)
    except ValueError:  # "1,,2", "1 2": read as the reader always has, by digit runs
        values = map(int, _DIGITS_RE.findall(digits_and_commas))
        out = tuple(values) if intern is None else intern.ids(values)
    return out


def _read_canonical(text: str) -> ParsedTrace | None:
    """Every non-blank line in the canonical published form, or None.

    The regex matches within one line, so a match is a valid JSON object with valid values;
    the numbers are then parsed by pandas in one go.
    """
    csv_text, nmatch = _MOONCAKE_RE.subn(r"\1,\2,\3", text)
    nlines = text.count("\n") + (0 if text.endswith("\n") else 1)
    if not (nmatch and (nmatch == nlines or nmatch == len(_NONBLANK_RE.findall(text)))):
        return None
    try:
        a = read_csv_text(
            io.StringIO(csv_text), "mooncake", header=None, dtype=np.float64, **_FLOAT_KW
        ).to_numpy()
    except (ValueError, pd.errors.ParserError, OverflowError):
        return None  # odd whitespace lines etc.: take the careful path
    if not (a.shape == (nmatch, 3) and np.all(a[:, 1:] <= MAX_TOKENS) and np.all(a[:, 1:] >= 1)):
        return None
    extra = {}
    if '"hash_ids"' in text:
        intern = _Interner()
        try:
            hashes = [_hash_tuple(m.group(4) or "", intern) for m in _MOONCAKE_RE.finditer(text)]
        except _LongHashId:
            return None  # the careful path names the line
        extra["hash_ids"] = object_column(hashes)
    return ParsedTrace(a[:, 0] / 1000.0, a[:, 1], a[:, 2], 0, 0, extra)


def _parse_line(line: str, intern: _Interner) -> tuple[list[float], tuple[int, ...] | None, str | None]:
    """One JSONL line -> ([timestamp ms, input, output], hash_ids or None, problem or None)."""
    found = _HASH_IDS_RE.findall(line)
    if found:  # JSON keeps the last of repeated keys
        line = _HASH_IDS_RE.sub('"hash_ids": []', line)
    try:
        obj = JSON_DECODER.decode(line)  # the reader layer's decoder: integers bounded
    except (ValueError, RecursionError) as e:
        return [], None, f"not a JSON object ({getattr(e, 'msg', e.__class__.__name__)})"
    if not isinstance(obj, dict):
        return [], None, f"not a JSON object (got {type(obj).__name__})"
    vals: list[float] = []
    for key, kind in _KINDS.items():
        if key not in obj:
            return [], None, f"key {key!r}: missing; expected {kind[0]}"
        v = _num(obj[key])
        if not _scalar_ok(v, kind):
            return [], None, f"key {key!r}: {repr(obj[key])[:40]} is invalid; expected {kind[0]}"
        vals.append(v)
    if "hash_ids" not in obj:
        return vals, None, None
    h = obj["hash_ids"]
    if h == [] and found:
        try:
            return vals, _hash_tuple(found[-1], intern), None
        except _LongHashId as e:
            return [], None, f"key 'hash_ids': {e}; expected {_HASH_EXPECTED}"
    if isinstance(h, list) and all(type(x) is int and 0 <= x < 10 ** MAX_HASH_DIGITS for x in h):
        return vals, intern.ids(h), None
    return [], None, f"key 'hash_ids': {repr(h)[:40]} is invalid; expected {_HASH_EXPECTED}"


def _read_mooncake(path: Path, skip_bad_rows: bool) -> ParsedTrace:
    """Mooncake JSONL: `timestamp` ms -> s; `hash_ids` kept in extra (empty tuple if absent)."""
    data = read_bytes(path, MAX_TRACE_BYTES, "trace file")
    # before any parsing: one 480 MB line would become GBs of strings and ints
    check_line_bytes(data, MAX_JSONL_LINE_BYTES, path, "Mooncake JSONL")
    text = data.decode("utf-8", errors="replace").lstrip("\ufeff")
    del data
    fast = _read_canonical(text)
    if fast is not None:
        return fast
    rows: list[list[float]] = []
    hashes: list[tuple[int, ...] | None] = []
    nbad = 0
    intern = _Interner()
    for lineno, line in enumerate(text.split("\n"), start=1):
        line = line.strip()
        if not line:
            continue
        vals, h, problem = _parse_line(line, intern)
        if problem is not None:
            if not skip_bad_rows:
                raise SpecError(f"{path}:{lineno}: {problem}{_HINT}")
            nbad += 1
            continue
        rows.append(vals)
        hashes.append(h)
    a = np.array(rows, dtype=np.float64).reshape(-1, 3)
    extra = {}
    if any(h is not None for h in hashes):
        extra["hash_ids"] = object_column([() if h is None else h for h in hashes])
    return ParsedTrace(a[:, 0] / 1000.0, a[:, 1], a[:, 2], nbad, 0, extra)
