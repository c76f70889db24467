"""How a spec dataclass is checked and built: field types, numeric ranges, the mapping builder.

Every spec dataclass (`specs.HardwareSpec`, `specs.ModelSpec`, ...) calls `_check_fields` in its
`__post_init__`: each field must have its annotated type and, for numbers, be finite and inside the
range its metadata declares (`positive`, `nonneg`, `min`/`max`/`unit`; else +-GENERIC_MAX), so no
spec prices to inf. `build(cls, mapping)` turns a YAML mapping into such a dataclass, with one-line
errors naming the unknown key (and the closest allowed one) or the missing field. Re-exported by
`specs`, where callers import them.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from simulator.specs.checks import (
    SpecError,
    check_choice,
    check_int,
    check_number,
    is_number,
    is_numpy_scalar,
    show,
)

#: any spec number without its own range must stay below this (so float arithmetic on it is finite)
GENERIC_MAX = 1e18


def _where(owner: str, name: str) -> str:
    return f"{owner}.{name}" if owner else name


def _type_ok(value: Any, tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if tp is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, a) for a in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is bool:
        return isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis and isinstance(value, tuple):
            return all(_type_ok(v, args[0]) for v in value)
        return isinstance(value, tuple)
    if origin is dict or tp is dict:
        return isinstance(value, dict)
    return isinstance(value, tp)


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        names = [_type_name(a) for a in typing.get_args(tp) if a is not type(None)]
        return " or ".join(names) + " (or omitted)"
    if tp is float:
        return "a number"
    if tp is int:
        return "an integer"
    if tp is bool:
        return "true or false"
    if tp is str:
        return "a string"
    if origin is tuple:
        args = typing.get_args(tp)
        return "a list of strings" if args and args[0] is str else "a list"
    if origin is dict:
        return "a mapping"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return str(tp)


def _check_fields(obj: Any, owner: str) -> None:
    """Check types and the numeric constraints declared in each field's metadata."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        tp = hints[f.name]
        where = _where(owner, f.name)
        if not _type_ok(value, tp):
            raise SpecError(f"{where}: {show(value)} is not {_type_name(tp)}")
        if value is None:
            continue
        meta = f.metadata
        if is_number(value):
            _check_range(where, value, meta)
        if "choices" in meta:
            check_choice(where, value, meta["choices"])


def _check_range(where: str, value: Any, meta: Any) -> None:
    """A spec number: finite, of the field's sign (metadata `positive`, `nonneg`) and in its
    physically meaningful range (`min`, `max`, `unit`; else within +-GENERIC_MAX)."""
    try:
        v = float(value)
    except OverflowError:  # an integer beyond float range: out of range below
        v = math.inf
    if math.isnan(v) or (math.isinf(v) and (isinstance(value, float) or is_numpy_scalar(value, "floating"))):
        raise SpecError(f"{where}: {show(value)} is not a finite number")
    if meta.get("positive") and v <= 0:
        rng = f" (allowed: {meta['min']:g} to {meta['max']:g})" if "min" in meta and "max" in meta else ""
        raise SpecError(f"{where}: {show(value)} must be > 0{rng}")
    if meta.get("nonneg") and v < 0:
        raise SpecError(f"{where}: {show(value)} must be >= 0")
    signed = meta.get("positive") or meta.get("nonneg")
    low, high = meta.get("min", 0.0 if signed else -GENERIC_MAX), meta.get("max", GENERIC_MAX)
    if not low <= v <= high:
        check_number(where, value, low, high, unit=meta.get("unit", ""))


def _pos(default: Any = dataclasses.MISSING, **kw: Any) -> Any:
    return field(default=default, metadata={"positive": True, **kw})


def _nonneg(default: Any = dataclasses.MISSING, **kw: Any) -> Any:
    return field(default=default, metadata={"nonneg": True, **kw})


def _did_you_mean(key: str, options: typing.Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(options), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def build(cls: type, data: Any, owner: str = "") -> Any:
    """Make a spec dataclass from a plain mapping, with one-line errors for bad keys/types."""
    if not isinstance(data, dict):
        got = "nothing (empty)" if data is None else type(data).__name__
        raise SpecError(f"{owner or 'spec'}: expected a mapping of fields, got {got}")
    hints = typing.get_type_hints(cls)
    names = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if not isinstance(key, str) or key not in names:
            raise SpecError(
                f"{_where(owner, str(key))}: unknown field{_did_you_mean(str(key), names)}; "
                f"allowed: {', '.join(names)}"
            )
        tp = hints[key]
        sub = _dataclass_in(tp)
        if sub is not None and not isinstance(value, (dict, sub)) and not (value is None and _type_ok(None, tp)):
            # a bare value where the field is a mapping of sub-fields (`overheads: {step_overhead_s: 0.004}`)
            raise SpecError(f"{_where(owner, key)}: {show(value)} is not a mapping; its fields: "
                            f"{', '.join(f.name for f in dataclasses.fields(sub))}")
        if sub is not None and isinstance(value, dict):
            value = build(sub, value, _where(owner, key))
        elif typing.get_origin(tp) is tuple and isinstance(value, list):
            value = tuple(value)
        elif typing.get_origin(tp) is tuple and isinstance(value, str):
            value = (value,)
        elif tp is float and isinstance(value, str):
            value = _parse_number(value, _where(owner, key))
        kwargs[key] = value
    missing = [n for n, f in names.items() if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and n not in kwargs]
    if missing:
        raise SpecError(f"{_where(owner, missing[0])}: required field is missing")
    try:
        return cls(**kwargs)
    except SpecError as e:
        if owner and not str(e).startswith(owner):
            raise SpecError(f"{owner}.{e}") from None
        raise


def _parse_number(text: str, where: str) -> Any:
    try:
        return float(text)
    except ValueError:
        return text  # the type check then names the field and value


def _dataclass_in(tp: Any) -> type | None:
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return tp
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        for a in typing.get_args(tp):
            if isinstance(a, type) and dataclasses.is_dataclass(a):
                return a
    return None


# ---------------------------------------------------------------------- free-form parameters


@dataclass(frozen=True)
class Param:
    """The type and domain of one free-form parameter (an engine profile's scheduler parameter,
    a limits table, a benchmark setting), declared once next to its default.

    `kind`: "bool", "int", "number" (within [low, high]), "choice" (one of `choices`: the
    values the engine itself accepts), "text", "mapping" (keys `fields`, each a Param; unknown
    keys refused), "list" (items `item`, at most `high` of them) or "row" (a fixed-length list,
    position i checked by `fields[str(i)]`). `modelled`: the values llmsim can simulate (None:
    all of the domain); a value in the domain but not modelled is refused as "not modelled"
    rather than silently run as something else. `optional`: None is accepted.
    """

    kind: str
    default: Any = None
    low: float | None = None
    high: float | None = None
    choices: tuple = ()
    modelled: tuple | None = None
    fields: dict[str, Param] | None = None
    item: Param | None = None
    optional: bool = False
    note: str = ""

    def check(self, where: str, value: Any) -> Any:
        """`value` checked against this domain; returns it (a list as given). Raises SpecError
        "<where>: <value> ..." naming the field path and what is allowed."""
        if value is None and self.optional:
            return value
        checker = getattr(self, f"_check_{self.kind}")
        checker(where, value)
        if self.modelled is not None and not _member(value, self.modelled):
            allowed = ", ".join(_fmt(m) for m in self.modelled)
            raise SpecError(f"{where}: {show(value)} is not modelled by llmsim{self._why()}; allowed: {allowed}")
        return value

    def _why(self) -> str:
        return f" ({self.note})" if self.note else ""

    def _check_bool(self, where: str, value: Any) -> None:
        if not isinstance(value, bool):
            raise SpecError(f"{where}: {show(value)} is not true or false")

    def _check_int(self, where: str, value: Any) -> None:
        low = int(self.low) if self.low is not None else -(10 ** 18)
        check_int(where, value, low, maximum=int(self.high) if self.high is not None else 10 ** 18)

    def _check_number(self, where: str, value: Any) -> None:
        check_number(where, value, -GENERIC_MAX if self.low is None else self.low,
                     GENERIC_MAX if self.high is None else self.high)

    def _check_choice(self, where: str, value: Any) -> None:
        if not _member(value, self.choices):
            raise SpecError(f"{where}: {show(value)} is not one of {', '.join(_fmt(c) for c in self.choices)}")

    def _check_text(self, where: str, value: Any) -> None:
        if not isinstance(value, str) or len(value) > 1000:
            raise SpecError(f"{where}: {show(value)} is not a string (of at most 1,000 characters)")

    def _check_mapping(self, where: str, value: Any) -> None:
        if not isinstance(value, dict):
            keys = f"; its keys: {', '.join(self.fields)}" if self.fields else ""
            raise SpecError(f"{where}: {show(value)} is not a mapping{keys}")
        if self.fields is None and self.item is not None:  # free keys, one value domain
            for key, sub in value.items():
                if not isinstance(key, str):
                    raise SpecError(f"{where}: key {show(key)} is not a string")
                self.item.check(f"{where}.{key}", sub)
            return
        known = self.fields or {}
        for key, sub in value.items():
            if not isinstance(key, str) or key not in known:
                raise SpecError(f"{where}.{key}: unknown key{_did_you_mean(str(key), known)}; "
                                f"allowed: {', '.join(known)}")
            known[key].check(f"{where}.{key}", sub)

    def _check_list(self, where: str, value: Any) -> None:
        top = int(self.high) if self.high is not None else 1000
        if not isinstance(value, list) or not 1 <= len(value) <= top:
            raise SpecError(f"{where}: {show(value)} is not a list of 1 to {top} items")
        assert self.item is not None
        for i, v in enumerate(value):
            self.item.check(f"{where}[{i}]", v)

    def _check_row(self, where: str, value: Any) -> None:
        cols = self.fields or {}
        if not isinstance(value, list) or len(value) != len(cols):
            raise SpecError(f"{where}: {show(value)} is not a list of {len(cols)} values "
                            f"({', '.join(cols)})")
        for (name, sub), v in zip(cols.items(), value, strict=True):
            sub.check(f"{where}.{name}", v)


def _member(value: Any, options: tuple) -> bool:
    """`value` is one of `options`, by type as well (True is not 1, 1.0 is not 1)."""
    for o in options:
        if type(value) is type(o) and value == o:
            return True
    return False


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# ------------------------------------------------------------------ domains of API parameters
@dataclasses.dataclass(frozen=True)
class Domain:
    """A parameter's type and allowed values, declared once next to its default (`domain`) and
    checked by `check_domains` (issue 26, cause 16: a Python-API object refuses a bad value with
    a `SpecError` naming it, never a TypeError later or a silently wrong number).

    `kind`: "int" (an integer in [low, high]), "number" (a finite real in [low, high], (low,
    high] with `low_open`), "bool", "mapping"; `optional`: None is allowed."""

    kind: str
    low: float = 0
    high: float | None = None
    low_open: bool = False
    optional: bool = False
    unit: str = ""

    def check(self, name: str, value: Any) -> None:
        if value is None and self.optional:
            return
        tail = " (or None)" if self.optional else ""
        if self.kind == "int":
            check_int(name, value, int(self.low), maximum=None if self.high is None else int(self.high),
                      optional=self.optional)
        elif self.kind == "number":
            try:
                check_number(name, value, self.low, GENERIC_MAX if self.high is None else self.high,
                             low_open=self.low_open, unit=self.unit)
            except SpecError as e:
                raise SpecError(f"{e}{tail}") from None
        elif self.kind == "bool":
            if not isinstance(value, bool) and not is_numpy_scalar(value, "bool_"):
                raise SpecError(f"{name}: {show(value)} must be true or false{tail}")
        elif self.kind == "mapping":
            if not isinstance(value, typing.Mapping):
                raise SpecError(f"{name}: {show(value)} must be a mapping{tail}")


def domain(default: Any = dataclasses.MISSING, kind: str = "number", *, default_factory: Any = dataclasses.MISSING,
           **kw: Any) -> Any:
    """A dataclass field with its `Domain` (checked by `check_domains` in `__post_init__`)."""
    meta = {"domain": Domain(kind, **kw)}
    if default_factory is not dataclasses.MISSING:
        return field(default_factory=default_factory, metadata=meta)
    return field(default=default, metadata=meta)


def check_domains(obj: Any) -> None:
    """Check every field of dataclass `obj` that declares a `domain`; one-line `SpecError`."""
    for f in dataclasses.fields(obj):
        d = f.metadata.get("domain")
        if d is not None:
            d.check(f.name, getattr(obj, f.name))
