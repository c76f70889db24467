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

import array
import io
import math
import re
from collections.abc import Sequence
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


# ---------------------------------------------------------------------- block hashes

#: tokens per `hash_ids` block in the Mooncake traces (`shared_prefix.MOONCAKE_BLOCK_TOKENS`)
_ID_TOKENS = 512


def _chain(parent: int, segments: list[tuple[int, int]], block_size: int, out: list[int]) -> int:
    """Append the chained hashes of the full blocks of `segments` ((segment id, tokens), each
    from its start) to `out`, starting from `parent`; returns the last parent. The formula of
    `shared_prefix.block_hashes`: h_k = hash((h_{k-1}, runs of block k))."""
    runs: list[tuple[int, int, int]] = []
    room = block_size
    for seg_id, tokens in segments:
        off = 0
        left = tokens
        while left > 0:
            take = min(left, room)
            runs.append((seg_id, off, take))
            off += take
            left -= take
            room -= take
            if room == 0:
                parent = hash((parent, tuple(runs)))
                out.append(parent)
                runs = []
                room = block_size
    return parent


def _check_id(h: Any) -> int:
    if isinstance(h, bool) or not isinstance(h, (int, np.integer)) or h < 0:
        raise SpecError(f"hash_ids: {h!r} must be an integer >= 0")
    return int(h)


class MooncakeBlockHashes(Sequence):
    """Per request, the chained hashes of its prompt's full blocks (a read-only sequence of
    lists, built on demand). Storage is shared: each distinct 512-token chunk, keyed by the
    parent hash before it and its id, is hashed once into one flat int64 pool; a request keeps
    the indices of its chunks (8 bytes per id) and the hashes of its tail (the blocks after its
    last whole chunk). A 64k-token prompt at 16-token blocks costs ~1 kB of indices plus the
    blocks of chunks no earlier request had, 8 bytes each, instead of ~240 kB of Python ints.
    A list is built when a request is looked at (admission), the last few kept."""

    def __init__(self, per_chunk: int, pool: np.ndarray, rows: list[Any], tails: list[Any]) -> None:
        self._m = per_chunk
        self._pool = pool
        self._rows = rows
        self._tails = tails
        self._recent: dict[int, list[int]] = {}

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, r: Any) -> Any:
        if not isinstance(r, int):
            raise TypeError("MooncakeBlockHashes is indexed by a request number")
        got = self._recent.get(r)
        if got is not None:
            return got
        row, tail = self._rows[r], self._tails[r]  # IndexError ends iteration
        if len(row):
            idx = (np.asarray(row, dtype=np.int64)[:, None] * self._m + np.arange(self._m)).ravel()
            got = self._pool[idx].tolist() + list(tail)
        else:
            got = list(tail)
        if len(self._recent) >= 64:
            self._recent.pop(next(iter(self._recent)))
        self._recent[r] = got
        return got


def mooncake_block_hashes(hash_ids: Any, input_len: Any, block_size: int, unique_base: int) -> Sequence:
    """Per request, the chained hashes of its prompt's full blocks of `block_size` tokens, equal
    to `block_hashes(mooncake_segments(ids, length, unique_base + i), block_size)`: a
    `MooncakeBlockHashes` when `block_size` divides 512 (chunks shared), else plain lists."""
    whole = _ID_TOKENS % block_size == 0
    memo: dict[tuple[int, int], int] = {}  # (parent, id) -> chunk index in the pool
    last: list[int] = []  # chunk index -> its last hash (the next chunk's parent)
    pool = array.array("q")
    rows: list[Any] = []
    tails: list[Any] = []
    for i, (ids, length) in enumerate(zip(hash_ids, np.asarray(input_len).tolist(), strict=True)):
        left = int(length)
        row: list[int] = []
        parent = 0  # shared_prefix._ROOT_HASH
        k = 0
        while whole and k < len(ids) and left >= _ID_TOKENS:
            h = _check_id(ids[k])
            c = memo.get((parent, h))
            if c is None:
                block: list[int] = []
                _chain(parent, [(-(h + 1), _ID_TOKENS)], block_size, block)
                c = memo[(parent, h)] = len(last)
                last.append(block[-1])
                pool.extend(block)
            row.append(c)
            parent = last[c]
            left -= _ID_TOKENS
            k += 1
        rest: list[tuple[int, int]] = []
        while k < len(ids) and left > 0:
            take = min(left, _ID_TOKENS)
            rest.append((-(_check_id(ids[k]) + 1), take))
            left -= take
            k += 1
        if left:
            rest.append((unique_base + i, left))
        tail: list[int] = []
        _chain(parent, rest, block_size, tail)
        rows.append(array.array("q", row) if whole else row)
        tails.append(array.array("q", tail) if whole else tail)
    if not whole:
        return [list(t) for t in tails]
    flat = np.frombuffer(pool, dtype=np.int64) if len(pool) else np.zeros(0, dtype=np.int64)
    return MooncakeBlockHashes(_ID_TOKENS // block_size, flat, rows, tails)
