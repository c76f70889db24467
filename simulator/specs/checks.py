"""The package's one validation layer: value checks and input bounds shared by specs, files and API.

Every user-facing check raises `SpecError` with one line naming the field, the value and what is
allowed. Values are shown by `show` (a repr cut to `SHOW_CHARS` characters) and messages are made
one line (newlines escaped) and cut to `MESSAGE_CHARS`, so no input can make an error message
long, multi-line or slow to build (a YAML alias bomb's repr is never expanded into a message).

Bounds on input size, documented here and in docs/reliability.md (issue 17):

* `MAX_SPEC_BYTES`: a hardware/model YAML or a config.json larger than 1 MB is refused (the
  largest real one is a few kB); `MAX_RESULT_BYTES` for a vLLM result JSON (per-request lists);
* `MAX_DEPTH`: nesting deeper than 64 levels (a spec needs 3);
* `MAX_NODES`: a document whose values, with YAML aliases expanded, number more than 100,000;
* `MAX_INT_DIGITS`: integers longer than 30 digits (before Python's 4,300-digit limit);
* `MAX_TOKENS`, `MAX_REQUESTS`, `MAX_BATCH`: lengths, request counts and batch sizes a
  prediction or simulation accepts (a measurement row asking for more is refused before any
  memory is allocated).
"""

from __future__ import annotations

import json
import math
import os
import stat
import sys
import typing
from pathlib import Path
from typing import Any

MAX_SPEC_BYTES = 1_000_000
MAX_RESULT_BYTES = 256_000_000
MAX_DEPTH = 64
MAX_NODES = 100_000
#: values a result file may hold (its byte bound, MAX_RESULT_BYTES, is the real limit)
MAX_RESULT_NODES = 100_000_000
MAX_INT_DIGITS = 30
MAX_TOKENS = 10_000_000
MAX_REQUESTS = 1_000_000
MAX_BATCH = 1_000_000
#: seeds: numpy's legacy RandomState (vLLM's send schedule, `workload.vllm_rng`) takes 32 bits
MAX_SEED = 2**32 - 1
#: requests one generated workload may hold (the simulation's own bound; memory is refused below it)
MAX_SIM_REQUESTS = 10**12
SHOW_CHARS = 80
MESSAGE_CHARS = 2000


class SpecError(ValueError):
    """A user-supplied spec, option or file is invalid. The message is one line for the user:
    newlines and carriage returns are escaped and the text is cut to `MESSAGE_CHARS`."""

    def __init__(self, message: Any = "", *args: Any) -> None:
        text = str(message).replace("\r", "\\r").replace("\n", "\\n")
        if len(text) > MESSAGE_CHARS:
            text = text[:MESSAGE_CHARS] + "..."
        super().__init__(text, *args)


class SpecTypeError(SpecError, TypeError):
    """A `SpecError` for an argument of the wrong type: caught as SpecError (one line for the
    user) and, for callers written before it, as the TypeError it used to be."""


def show(value: Any, limit: int = SHOW_CHARS) -> str:
    """`repr(value)` for a message, cut to `limit` characters; containers are summarised by type
    and size before any repr, so a huge (or alias-shared) structure is never expanded."""
    if isinstance(value, (list, tuple, dict, set)) and len(value) > 8:
        return f"<{type(value).__name__} of {len(value)} items>"
    if isinstance(value, (list, tuple, dict)) and any(isinstance(v, (list, tuple, dict)) for v in
                                                       (value.values() if isinstance(value, dict) else value)):
        return f"<nested {type(value).__name__} of {len(value)} items>"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** MAX_INT_DIGITS:
        return f"<integer of {len(str(abs(value)))} digits>" if abs(value) < 10 ** 4000 else "<huge integer>"
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "...'"[: 3 + isinstance(value, str)]


def is_numpy_scalar(value: Any, kind: str) -> bool:
    """`value` is a numpy scalar of `kind` ("integer", "number", "floating"). numpy is looked
    up, never imported: while no module has imported it no value can be a numpy scalar, and
    `llmsim --help` and the spec layer start without its ~0.1 s import."""
    np = sys.modules.get("numpy")
    return np is not None and isinstance(value, getattr(np, kind))


def is_int(value: Any) -> bool:
    """An integer (Python or numpy), not a bool (True is an int to Python, not a count to a user)."""
    if isinstance(value, int):
        return not isinstance(value, bool)
    return is_numpy_scalar(value, "integer")


def is_number(value: Any) -> bool:
    """A real number (Python or numpy), not a bool; NaN and inf count as numbers here."""
    if isinstance(value, (int, float)):
        return not isinstance(value, bool)
    return is_numpy_scalar(value, "number")


def check_int(name: str, value: Any, minimum: int = 1, *, maximum: int | None = None,
              optional: bool = False, note: str = "") -> Any:
    """The one integer check of the package: `value` must be an integer (not a bool) >= `minimum`
    (and <= `maximum` when given).

    Raises `SpecError` "<name>: <value> must be an integer >= <minimum>[ and <= max][ note][ (or
    omitted)]"; `optional` lets None through. Returns `value` unchanged, so callers can check
    and assign.
    """
    if value is None and optional:
        return value
    if not is_int(value) or value < minimum or (maximum is not None and value > maximum):
        top = f" and <= {maximum}" if maximum is not None else ""
        tail = (f" {note}" if note else "") + (" (or omitted)" if optional else "")
        raise SpecError(f"{name}: {show(value)} must be an integer >= {minimum}{top}{tail}")
    return value


def check_number(name: str, value: Any, low: float, high: float, *, low_open: bool = False,
                 unit: str = "") -> float:
    """`value` must be a finite real number in [low, high] ((low, high] with `low_open`).

    Raises `SpecError` "<name>: <value> must be a number >= low and <= high[ unit]" (an integer
    beyond float range is out of range, never an OverflowError). Returns it as a float."""
    ok = False
    if is_number(value):
        try:
            v = float(value)
        except OverflowError:  # an integer beyond float range
            v = math.inf
        ok = math.isfinite(v) and (v > low if low_open else v >= low) and v <= high
    if not ok:
        raise SpecError(f"{name}: {show(value)} must be a number {'>' if low_open else '>='} {low:g} "
                        f"and <= {high:g}" + (f" {unit}" if unit else ""))
    return float(value)


def check_choice(name: str, value: Any, choices: typing.Iterable[str]) -> Any:
    """`value` must be one of `choices`: "<name>: <value> is not one of a, b, c"."""
    allowed = tuple(choices)
    try:
        known = value in allowed
    except TypeError:  # an unhashable or oddly comparing value is simply not a choice
        known = False
    if not known:
        raise SpecError(f"{name}: {show(value)} is not one of {', '.join(allowed)}")
    return value


def check_instance(name: str, value: Any, cls: type | tuple[type, ...], *, optional: bool = False,
                   what: str = "") -> Any:
    """An object argument of the Python API: an instance of `cls` (None too with `optional`), else
    "<name>: <type> is not a <what>" (never an AttributeError deep inside; issue 26)."""
    if (value is None and optional) or isinstance(value, cls):
        return value
    names = what or " or ".join(c.__name__ for c in (cls if isinstance(cls, tuple) else (cls,)))
    raise SpecTypeError(f"{name}: {show(value)} ({type(value).__name__}) is not a {names}"
                    + (" (or None)" if optional else ""))


def check_list(name: str, value: Any, what: str, *, optional: bool = False) -> list[Any] | None:
    """A list argument of the Python API (a list or tuple; a bare string is one value, not a
    list of its characters): a list, or None with `optional`; else "<name>: <value> (<type>)
    is not a list of <what>" (never a TypeError from iterating a number; issue 26 review)."""
    if value is None and optional:
        return None
    if isinstance(value, (list, tuple)):
        return list(value)
    raise SpecTypeError(f"{name}: {show(value)} ({type(value).__name__}) is not a list of {what}"
                        + (" (or None)" if optional else ""))


def check_callable(name: str, value: Any, *, optional: bool = True) -> Any:
    """A callback argument: callable (or None with `optional`)."""
    if (value is None and optional) or callable(value):
        return value
    raise SpecError(f"{name}: {show(value)} is not callable" + (" (or None)" if optional else ""))


def check_path(name: str, value: Any) -> Path:
    """A file argument: a str or os.PathLike (never a number or None)."""
    if isinstance(value, bool) or not isinstance(value, (str, Path)) and not hasattr(value, "__fspath__"):
        raise SpecError(f"{name}: {show(value)} is not a file path (give a str or pathlib.Path)")
    return Path(value)


def check_not_special(path: str | os.PathLike[str]) -> None:
    """Refuse a FIFO, socket or device before it is opened for reading: opening a FIFO blocks
    until some writer comes (`--dataset-path FIFO` hung), a device never ends. A path that
    does not exist or is a folder is left to `open`, which names the reason."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise SpecError(f"{path}: not a regular file (a FIFO, socket or device); give a file path")


def read_text_bounded(path: Path, limit: int, what: str) -> str:
    """The UTF-8 text of `path`, refused (one line) when larger than `limit` bytes or unreadable."""
    check_not_special(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as e:
        raise SpecError(f"{path}: cannot read ({e.__class__.__name__}: {e.strerror or e})") from None
    if len(data) > limit:
        raise SpecError(f"{path}: larger than {limit:,} bytes; a {what} is at most that size")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise SpecError(f"{path}:{line}: not UTF-8 text (byte 0x{data[e.start]:02x})") from None


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"integer of {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def load_json(path: Path, limit: int, what: str, max_nodes: int | None = None) -> Any:
    """Parse a JSON file with bounded size, depth and integer length; errors as one line.
    `max_nodes`: the bound on values (default MAX_NODES, sized for specs; a result file's
    per-request lists, e.g. vLLM's --save-detailed `itls`, hold far more within its size bound)."""
    text = read_text_bounded(path, limit, what)
    try:
        data = json.loads(text, parse_int=_bounded_int)
    except json.JSONDecodeError as e:
        raise SpecError(f"{path}:{e.lineno}: invalid JSON: {e.msg}") from None
    except RecursionError:
        raise SpecError(f"{path}: invalid JSON: nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as e:
        raise SpecError(f"{path}: invalid JSON: {e}") from None
    check_tree(data, str(path), MAX_NODES if max_nodes is None else max_nodes)
    return data


def check_tree(data: Any, where: str, max_nodes: int = MAX_NODES) -> None:
    """Refuse a parsed document nested deeper than `MAX_DEPTH` or with more than `MAX_NODES`
    values once shared (aliased) parts are counted each time they appear. Each container is
    sized once (memoised by identity), so an alias bomb is measured without being expanded; a
    container that holds itself is refused."""
    sizes: dict[int, int] = {}
    stack: list[tuple[Any, int, bool]] = [(data, 1, False)]
    open_: set[int] = set()
    while stack:
        node, depth, done = stack.pop()
        if not isinstance(node, (list, dict)):
            continue
        key = id(node)
        children = list(node.values()) if isinstance(node, dict) else node
        if done:
            open_.discard(key)
            sizes[key] = 1 + sum(sizes.get(id(c), 1) for c in children)
            if sizes[key] > max_nodes:
                raise SpecError(f"{where}: more than {max_nodes:,} values (YAML aliases counted "
                                "expanded); a spec needs far fewer")
            continue
        if key in open_:
            raise SpecError(f"{where}: a value contains itself (recursive YAML alias)")
        if key in sizes:
            continue
        if depth > MAX_DEPTH:
            raise SpecError(f"{where}: nested more than {MAX_DEPTH} levels deep")
        open_.add(key)
        stack.append((node, depth, True))
        stack.extend((c, depth + 1, False) for c in children)



def check_cost_model(cost: Any) -> None:
    """Refuse a cost model (a custom one from the Python API) whose step time for a one-token
    step, a 512-token prefill or a 64-sequence decode is not a finite number of seconds > 0:
    the engine would otherwise divide by zero or carry NaN times into every metric."""
    import math

    probes = ((1.0, 1.0, 0.5, 0.0, 1.0), (512.0, 1.0, 256.0, 0.0, 512.0), (64.0, 64.0, 64.0 * 512, 0.0, 64.0 * 512))
    for T, S, Ad, Ap, R in probes:
        try:
            dt = cost.step_time(T, S, Ad, Ap, R)
        except (ArithmeticError, ValueError, TypeError) as e:
            raise SpecError(f"cost model: step_time({T:g} tokens, {S:g} seqs) failed ({type(e).__name__}: "
                            f"{show(str(e))})") from None
        if not is_number(dt) or not (math.isfinite(dt) and dt > 0):
            raise SpecError(f"cost model: step_time({T:g} tokens, {S:g} seqs) = {show(dt)}; "
                            "a step time must be a finite number of seconds > 0")

__all__ = [
    "MAX_BATCH", "MAX_DEPTH", "check_cost_model", "MAX_INT_DIGITS", "MAX_NODES", "MAX_REQUESTS", "MAX_RESULT_BYTES", "MAX_RESULT_NODES", "MAX_SEED", "MAX_SIM_REQUESTS",
    "MAX_SPEC_BYTES", "MAX_TOKENS", "SpecError", "SpecTypeError", "check_callable", "check_choice", "check_instance", "check_int", "check_number",
    "check_path", "check_tree", "is_int", "is_number", "load_json", "read_text_bounded", "show",
]
