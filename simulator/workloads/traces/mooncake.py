"""Mooncake JSONL traces: one object per line with `timestamp` (ms), `input_length`,
`output_length` and `hash_ids` (the request's KV-block hashes, kept per request).
"""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simulator.specs.checks import SpecError
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
_HASH_EXPECTED = "a list of block hashes (whole numbers >= 0)"


def _hash_tuple(digits_and_commas: str) -> tuple[int, ...]:
    """The ints of a hash_ids list body ("1, 2, 3"); digit runs if it is not plain CSV."""
    if not digits_and_commas.strip():
        return ()
    try:  # the published form; str.split is ~1.6x faster than the regex
        return tuple(map(int, digits_and_commas.split(",")))
    except ValueError:  # "1,,2", "1 2": read as the reader always has, by digit runs
        return tuple(map(int, _DIGITS_RE.findall(digits_and_commas)))


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
        a = pd.read_csv(
            io.StringIO(csv_text), header=None, dtype=np.float64, **_FLOAT_KW
        ).to_numpy()
    except (ValueError, pd.errors.ParserError, OverflowError):
        return None  # odd whitespace lines etc.: take the careful path
    if not (a.shape == (nmatch, 3) and np.all(a[:, 1:] <= MAX_TOKENS) and np.all(a[:, 1:] >= 1)):
        return None
    extra = {}
    if '"hash_ids"' in text:
        hashes = [_hash_tuple(m.group(4) or "") for m in _MOONCAKE_RE.finditer(text)]
        extra["hash_ids"] = object_column(hashes)
    return ParsedTrace(a[:, 0] / 1000.0, a[:, 1], a[:, 2], 0, 0, extra)


def _parse_line(line: str) -> tuple[list[float], tuple[int, ...] | None, str | None]:
    """One JSONL line -> ([timestamp ms, input, output], hash_ids or None, problem or None)."""
    found = _HASH_IDS_RE.findall(line)
    if found:  # JSON keeps the last of repeated keys
        line = _HASH_IDS_RE.sub('"hash_ids": []', line)
    try:
        obj = json.loads(line)
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
        return vals, _hash_tuple(found[-1]), None
    if isinstance(h, list) and all(type(x) is int and x >= 0 for x in h):
        return vals, tuple(h), None
    return [], None, f"key 'hash_ids': {repr(h)[:40]} is invalid; expected {_HASH_EXPECTED}"


def _read_mooncake(path: Path, skip_bad_rows: bool) -> ParsedTrace:
    """Mooncake JSONL: `timestamp` ms -> s; `hash_ids` kept in extra (empty tuple if absent)."""
    try:
        text = path.read_bytes().decode("utf-8", errors="replace").lstrip("\ufeff")
    except OSError as e:
        raise SpecError(
            f"{path}: cannot read ({e.__class__.__name__}: {e.strerror or e})"
        ) from None
    fast = _read_canonical(text)
    if fast is not None:
        return fast
    rows: list[list[float]] = []
    hashes: list[tuple[int, ...] | None] = []
    nbad = 0
    for lineno, line in enumerate(text.split("\n"), start=1):
        line = line.strip()
        if not line:
            continue
        vals, h, problem = _parse_line(line)
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
