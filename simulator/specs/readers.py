"""The reader layer: every file llmsim reads is opened here (or by `checks.read_text_bounded` /
`checks.load_json` and `catalog.read_yaml`, which this layer builds on).

Each reader bounds what it accepts before anything is built from it: the file's size (refused
from its `stat` size, before reading), the longest line of a line-oriented file, UTF-8
encoding, nesting depth and integer length of JSON. Every refusal is a one-line `SpecError`
that starts with `file:line:` (or names the field path). `tests/test_architecture.py` checks
that no module outside this layer opens a file for reading or calls a parser on one
(`open`, `json.load(s)`, `yaml.load`, `csv.reader`, `pd.read_csv`, `np.load`,
`Path.read_text/read_bytes`), except an explicit allowlist there, each with its reason.

Bounds (docs/reliability.md, round three):

* `MAX_TRACE_BYTES`: a trace file (CSV or JSONL) of at most 4 GB (the 1M-request simple CSV of
  the scale benchmark is 26.5 MB);
* `MAX_JSONL_LINE_BYTES`: one Mooncake line of at most 1 MB (a 10M-token prompt has 19,532
  ids of at most 19 digits: about 430 kB), refused before it is parsed;
* `MAX_DATASET_BYTES`: a ShareGPT dataset JSON of at most 2 GB (the full V3 file is 673 MB);
* `MAX_TABLE_BYTES`: a measurement CSV or a load generator's result file of at most 256 MB.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from simulator.specs.checks import (
    MAX_DEPTH,
    MAX_INT_DIGITS,
    SpecError,
    check_not_special,
    check_tree,
    show,
)

MAX_TRACE_BYTES = 4_000_000_000
MAX_JSONL_LINE_BYTES = 1_000_000
MAX_DATASET_BYTES = 2_000_000_000
MAX_TABLE_BYTES = 256_000_000


def read_bytes(path: str | os.PathLike[str], limit: int, what: str) -> bytes:
    """The bytes of `path`, refused (one line) when its size exceeds `limit` (checked from
    `fstat` before any byte is read, so a huge file costs no memory) or when it is unreadable."""
    p = Path(path)
    check_not_special(p)
    try:
        with open(p, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > limit:
                raise SpecError(f"{p}: {size:,} bytes; a {what} is at most {limit:,} bytes")
            data = fh.read(limit + 1)
    except OSError as e:
        raise SpecError(f"{p}: cannot read ({e.__class__.__name__}: {e.strerror or e})") from None
    if len(data) > limit:  # a file that grew, or a device without a size
        raise SpecError(f"{p}: larger than {limit:,} bytes; a {what} is at most that size")
    return data


def decode_utf8(data: bytes, path: str | os.PathLike[str]) -> str:
    """`data` as UTF-8 text (a leading BOM dropped); refused naming the line of the first bad byte."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise SpecError(f"{path}:{line}: not UTF-8 text (byte 0x{data[e.start]:02x})") from None


def check_line_bytes(data: bytes, limit: int, path: str | os.PathLike[str], what: str) -> None:
    """Refuse `data` when a line is longer than `limit` bytes, naming the first such line, before
    it is parsed (a 480 MB line would otherwise be split, matched and turned into objects)."""
    if len(data) <= limit:
        return
    import numpy as np

    # newline positions per 64 MB slice (no file-sized temporary), carried across slices
    step = 1 << 26
    start_of_line, line = 0, 1
    for lo in range(0, len(data), step):
        view = np.frombuffer(data, dtype=np.uint8, count=min(step, len(data) - lo), offset=lo)
        ends = np.flatnonzero(view == 10) + lo
        bounds = np.concatenate(([start_of_line - 1], ends))
        lengths = np.diff(bounds) - 1
        if len(lengths) and lengths.max() > limit:
            k = int(np.argmax(lengths > limit))
            raise SpecError(f"{path}:{line + k}: a line of {int(lengths[k]):,} bytes; a {what} line is at "
                            f"most {limit:,} bytes")
        if len(ends):
            line += len(ends)
            start_of_line = int(ends[-1]) + 1
    if len(data) - start_of_line > limit:
        raise SpecError(f"{path}:{line}: a line of {len(data) - start_of_line:,} bytes; a {what} line is at "
                        f"most {limit:,} bytes")


def _bounded_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {digits} digits (at most {MAX_INT_DIGITS})")
    return int(text)


#: a JSON decoder whose integers are bounded (before Python's 4,300-digit ValueError)
JSON_DECODER = json.JSONDecoder(parse_int=_bounded_int)


_RAISE: Any = object()
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _deep_line(text: str) -> int:
    """The line where `text` first nests deeper than MAX_DEPTH (strings skipped); for an error
    message only, so the scan runs only on that path."""
    depth = 0
    for m in _TOKENS.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return text.count("\n", 0, m.start()) + 1
        elif c in "]}":
            depth -= 1
    return 1


def _long_int_line(text: str) -> int:
    """The line of the first integer longer than MAX_INT_DIGITS digits outside strings."""
    pattern = re.compile(r'"(?:[^"\\]|\\.)*"|[0-9]{' + str(MAX_INT_DIGITS + 1) + ",}")
    for m in pattern.finditer(text):
        if not m.group().startswith('"'):
            return text.count("\n", 0, m.start()) + 1
    return 1


def parse_json(text: str, where: str, *, max_nodes: int | None = None, check: bool = True,
               invalid: Any = _RAISE) -> Any:
    """Parse JSON `text` from `where` (a file name) with bounded integers and nesting; with
    `check`, also at most `max_nodes` values and MAX_DEPTH levels (`checks.check_tree`).
    Errors: `where:line: invalid JSON: ...`; `invalid`, when given, is returned instead for
    text that is not JSON (a truncated file the caller reads entry by entry)."""
    try:
        data = JSON_DECODER.decode(text)
    except json.JSONDecodeError as e:
        if invalid is not _RAISE:
            return invalid
        raise SpecError(f"{where}:{e.lineno}: invalid JSON: {e.msg}") from None
    except RecursionError:
        raise SpecError(f"{where}:{_deep_line(text)}: invalid JSON: nested more than {MAX_DEPTH} levels "
                        "deep") from None
    except ValueError as e:
        raise SpecError(f"{where}:{_long_int_line(text)}: invalid JSON: {e}") from None
    if check:
        check_tree(data, where, *(() if max_nodes is None else (max_nodes,)))
    return data


def raw_decode_json(text: str, start: int, where: str) -> tuple[Any, int] | None:
    """One JSON value of `text` at `start`: (value, end), or None where the text is cut short or
    invalid there (a truncated file's last entry). Too deep or a too long integer: SpecError
    naming the line."""
    try:
        return JSON_DECODER.raw_decode(text, start)
    except json.JSONDecodeError:
        return None
    except (RecursionError, ValueError) as e:
        line = text.count("\n", 0, start) + 1
        why = f"nested more than {MAX_DEPTH} levels deep" if isinstance(e, RecursionError) else str(e)
        raise SpecError(f"{where}:{line}: invalid JSON: {why}") from None


def read_csv_text(buffer: Any, where: str, **kw: Any) -> Any:
    """pandas' C parser on text already read (and bounded) by this layer; `where` names the file
    in an error. pandas is imported here, on first use (it is half of a short run's start-up)."""
    import pandas as pd

    return pd.read_csv(buffer, **kw)


def read_csv_file(path: str | os.PathLike[str], limit: int, what: str, **kw: Any) -> Any:
    """pandas' C parser streaming `path` (no copy of the file in memory: the 1M-row trace stays
    at its 0.28 s), after this layer refused a file over `limit` bytes from its size."""
    import pandas as pd

    p = Path(path)
    check_not_special(p)
    try:
        size = p.stat().st_size
    except OSError as e:
        raise SpecError(f"{p}: cannot read ({e.__class__.__name__}: {e.strerror or e})") from None
    if size > limit:
        raise SpecError(f"{p}: {size:,} bytes; a {what} is at most {limit:,} bytes")
    try:
        return pd.read_csv(p, **kw)
    except OSError as e:
        raise SpecError(f"{p}: cannot read ({e.__class__.__name__}: {e.strerror or e})") from None


def read_head(path: str | os.PathLike[str], size: int) -> bytes:
    """The first `size` bytes of `path` (a format sniff)."""
    p = Path(path)
    check_not_special(p)
    try:
        with open(p, "rb") as fh:
            return fh.read(size)
    except OSError as e:
        raise SpecError(f"{p}: cannot read ({e.__class__.__name__}: {e.strerror or e})") from None


def load_csv_numbers(path: str | os.PathLike[str]) -> tuple[str, Any]:
    """A packaged CSV of numbers (the built-in traces): its header line and a float64 array of
    its rows (empty where numpy cannot read them: the caller then reads it the careful way)."""
    import numpy as np

    with open(path, encoding="utf-8") as fh:
        header = fh.readline()
        try:
            rows = np.loadtxt(fh, delimiter=",", dtype=np.float64, comments=None, ndmin=2)
        except ValueError:
            rows = np.zeros((0, 3))
    return header, rows


def decoded_lines(fh: Any, path: str | os.PathLike[str], at: list[int]) -> Any:
    """The lines of a binary file as text: UTF-8 (a leading BOM dropped), each line decoded on
    its own so that a bad byte is reported with its line number; `at[0]` is the line last read."""
    for number, raw in enumerate(fh, start=1):
        at[0] = number
        try:
            yield raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as e:
            raise SpecError(f"{path}:{number}: not UTF-8 text (byte 0x{raw[e.start]:02x} at column "
                            f"{e.start + 1}); save the file as UTF-8") from None


def csv_dict_reader(path: str | os.PathLike[str], limit: int, what: str) -> tuple[Any, list[int], Any]:
    """(csv.DictReader over the file's UTF-8 lines, [line last read], the open file to close):
    a CSV read row by row, refused from its size over `limit` bytes; `csv.Error` and `OSError`
    while reading are the caller's to name with the line in `at[0]`."""
    import csv

    p = Path(path)
    check_not_special(p)
    try:
        size = p.stat().st_size
        if size > limit:
            raise SpecError(f"{p}: {size:,} bytes; a {what} is at most {limit:,} bytes")
        fh = open(p, "rb")
    except OSError as e:
        raise SpecError(f"{p}: cannot read ({e.__class__.__name__}: {e.strerror or e})") from None
    at = [0]
    return csv.DictReader(decoded_lines(fh, p, at)), at, fh


def load_npz(path: str | os.PathLike[str], what: str) -> Any:
    """A numpy `.npz` archive (packaged data tables), never unpickling objects."""
    import numpy as np

    check_not_special(path)
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise SpecError(f"{what}: cannot read {show(str(path))} ({e})") from None


__all__ = ["JSON_DECODER", "MAX_DATASET_BYTES", "MAX_JSONL_LINE_BYTES", "MAX_TABLE_BYTES", "MAX_TRACE_BYTES",
           "check_line_bytes", "decode_utf8", "load_npz", "parse_json", "raw_decode_json", "read_bytes",
           "csv_dict_reader", "decoded_lines", "load_csv_numbers", "read_csv_file", "read_csv_text", "read_head"]
