"""Trace readers: published request traces in the forms they are published in.

`read_trace` detects the format from the header (or takes `fmt`) and returns a `Workload`;
each format lives in its own module (`csv_formats`: simple, Azure, BurstGPT; `mooncake`), and
`cells` holds the checks every reader shares. Every column a format carries is kept: the
three request columns as the Workload's arrays, the rest in `Workload.extra`. The folder also
holds the built-in trace files (README.md there gives their source and licence).

Every bad user input raises `SpecError` with one line naming the file, the 1-based line,
the column, the value and what is allowed.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
from pathlib import Path
from typing import Any

import numpy as np

from simulator.specs.checks import SpecError, check_path
from simulator.specs.fields import _did_you_mean
from simulator.specs.readers import load_csv_numbers, read_head
from simulator.workloads.workload import MAX_TOKENS, Workload

# The readers (csv_formats, mooncake) use pandas' C parser; they are imported when a trace
# file is read, not with this module: the built-in traces are read without pandas
# (`_read_builtin`), and importing pandas was half of a short run's start-up.

#: Trace formats `read_trace` understands (besides "auto").
TRACE_FORMATS = ("simple", "azure", "mooncake", "burstgpt")

#: the simple format's header (`csv_formats.SIMPLE_COLUMNS`, which imports pandas)
_SIMPLE = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")

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


def _sniff(path: Path) -> str:
    """The first line of the file (decoded leniently); SpecError if unreadable or empty."""
    head = read_head(path, 1 << 16)
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff")
    if not text.strip():
        raise SpecError(
            f"{path}: empty file; expected a trace with a header and at least one request"
        )
    return re.split(r"\r\n|\r|\n", text, maxsplit=1)[0]


def _header_cols(line: str) -> list[str]:
    return [c.strip().strip('"').strip() for c in line.split(",")]


def _detect(path: Path, first: str) -> str:
    from simulator.workloads.traces.csv_formats import _AZURE_COLS, _BURST_COLS, SIMPLE_COLUMNS

    cols = {c.lower() for c in _header_cols(first)}
    if {c.lower() for c in SIMPLE_COLUMNS} <= cols:
        return "simple"
    if {c.lower() for c in _AZURE_COLS} <= cols:
        return "azure"
    if {c.lower() for c in _BURST_COLS} <= cols:
        return "burstgpt"
    if first.lstrip().startswith("{") or path.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        return "mooncake"
    raise SpecError(
        f"{path}:1: unrecognised trace header {first[:80]!r}; expected simple CSV "
        f"'{','.join(SIMPLE_COLUMNS)}', Azure CSV '{','.join(_AZURE_COLS)}', BurstGPT CSV "
        f"'Timestamp,Model,Request tokens,Response tokens,...', or Mooncake JSONL "
        f"(timestamp, input_length, output_length)"
    )



def read_trace(path: str | Path, fmt: str = "auto", skip_bad_rows: bool = False) -> Workload:
    """Read a published request trace into a `Workload`.

    Formats (`fmt`, or "auto" to detect from the header / extension):

    - "simple": CSV `arrived_at,num_prefill_tokens,num_decode_tokens` (seconds, tokens).
    - "azure": Azure LLM inference 2023/2024 CSV `TIMESTAMP,ContextTokens,GeneratedTokens`;
      TIMESTAMP is a date-time string (e.g. `2023-11-16 18:15:46.6805900`, up to 9 fractional
      digits, optional UTC offset), converted exactly (ns) to seconds.
    - "mooncake": JSONL with `timestamp` (ms), `input_length`, `output_length` and optional
      `hash_ids` (the request's KV-block hashes), kept as `extra["hash_ids"]`: one tuple of
      ints per request (empty where a line has none); the column is absent when no line has it.
    - "burstgpt": CSV `Timestamp` (s), `Model`, `Request tokens`, `Response tokens`,
      `Total tokens`, `Log Type`; `Model`, `Total tokens` and `Log Type` are kept as
      `extra["model"]`, `extra["total_tokens"]`, `extra["log_type"]` when present. Rows with 0
      response tokens are requests that failed in the trace: they are dropped and counted in
      `Workload.failed_in_trace`.

    Arrivals are shifted so the earliest is at 0 and the rows (with their extra columns)
    stably sorted by arrival. Columns/keys outside the format are ignored; blank lines are
    skipped. A row is malformed when a column
    is missing, not a number, NaN/inf, negative, fractional (token counts), or when it has
    more fields than the header. A prompt of 0 tokens is malformed, and so is an output of 0
    tokens outside BurstGPT (a served request emits at least one token; vLLM cannot serve
    max_tokens=0). A malformed row raises SpecError naming the file, the 1-based line and the
    column, unless `skip_bad_rows`, in which case it is skipped and counted in `bad_rows`.
    """
    p = check_path("trace", path)
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
        from simulator.workloads.traces.mooncake import _read_mooncake

        t, i, o, nbad, nfailed, extra = _read_mooncake(p, skip_bad_rows)
    else:
        from simulator.workloads.traces.csv_formats import _read_simple_like

        if not first.strip():
            raise SpecError(f"{p}:1: blank line where the CSV header belongs")
        t, i, o, nbad, nfailed, extra = _read_simple_like(p, kind, skip_bad_rows)
    if t.size == 0:
        why = f"all {nbad} rows are malformed" if nbad else "no request rows"
        why += f", {nfailed} failed in the trace" if nfailed else ""
        raise SpecError(f"{p}: no requests ({why})")
    return _sorted_workload(p, t, i, o, nbad, nfailed, extra)


def _sorted_workload(p: Path, t: np.ndarray, i: np.ndarray, o: np.ndarray, nbad: int, nfailed: int,
                     extra: dict[str, np.ndarray]) -> Workload:
    """The trace's rows stably sorted by arrival, the earliest at 0."""
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
        extra={k: v[order] for k, v in extra.items()},
    )


# --------------------------------------------------------------------------- built-ins


def _read_builtin(fname: str) -> Workload:
    """Read a packaged trace via importlib.resources, falling back to the path next to this file."""
    try:
        res = importlib.resources.files(__name__) / fname
        if res.is_file():
            with importlib.resources.as_file(res) as p:
                return _read_clean_simple(p)
    except (ModuleNotFoundError, TypeError, AttributeError, NotImplementedError, OSError):
        pass
    return _read_clean_simple(Path(__file__).resolve().parent / fname)


def _read_clean_simple(p: Path) -> Workload:
    """A shipped simple-CSV trace, read by numpy alone (no pandas import: 0.3 s and more of a
    short run's start-up). Every row must be clean (the header, three finite numbers, times
    >= 0, whole token counts >= 1); a file that is not goes through `read_trace`, whose
    messages name the line. Both read floats exactly (round-trip), which
    tests/test_workload.py checks on every built-in trace."""
    header, rows = load_csv_numbers(p)
    clean = (_header_cols(header.lstrip("\ufeff").rstrip("\r\n")) == list(_SIMPLE)
             and rows.shape[0] > 0 and rows.shape[1] == 3 and bool(np.isfinite(rows).all()))
    if clean:
        t, i, o = rows[:, 0].copy(), rows[:, 1].copy(), rows[:, 2].copy()
        clean = bool((t >= 0).all() and all(((c >= 1) & (c <= MAX_TOKENS) & (c == np.floor(c))).all()
                                            for c in (i, o)))
    if not clean:
        return read_trace(p, fmt="simple")
    return _sorted_workload(p, t, i, o, 0, 0, {})


def builtin(name: str) -> Workload:
    """A built-in trace by name (see `BUILTIN_WORKLOADS`); cached (Workloads are immutable)."""
    if not isinstance(name, str):  # checked before the cache, which needs a hashable key
        raise SpecError(f"workload: {name!r} is not a built-in trace name; built-ins: {', '.join(BUILTIN_WORKLOADS)}")
    return _builtin(name)


@functools.cache
def _builtin(name: str) -> Workload:
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
