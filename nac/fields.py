"""One check of a config value against its annotation, by pydantic (strict): the type, the
choices (a ``Literal``) and the range (``annotated_types`` bounds in an ``Annotated``, e.g.
``POSITIVE_INT``). ``ModelConfig``, ``TrainConfig`` and ``FewShotConfig`` declare their fields
with these annotations, and the params checks (``nac.pipeline.typecheck``) read the same ones: a
field's type and range are written once, where the field is, and checked by the library.

``problem(value, tp)`` says what is wrong, as a ``Problem`` the caller words for its reader (a
config's ``ConfigTypeError``, params.yaml's ``ParamsError``); what no annotation expresses (rules
across fields) is in ``nac.rules``. Strict means: a bool is no number, a string no number, a
float no int; an int is a float (JSON and YAML write ``1`` for ``1.0``); numpy scalars and tuples
read as the Python numbers and lists they hold. Floats must be finite.
"""

from __future__ import annotations

import math
import numbers
import types
import typing
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Annotated, Any

import annotated_types as at
from pydantic import ConfigDict, TypeAdapter, ValidationError

POSITIVE_INT = Annotated[int, at.Ge(1)]
NONNEGATIVE_INT = Annotated[int, at.Ge(0)]
AT_LEAST_2 = Annotated[int, at.Ge(2)]
POSITIVE = Annotated[float, at.Gt(0)]
NONNEGATIVE = Annotated[float, at.Ge(0)]
COSINE_DISTANCE = Annotated[float, at.Gt(0), at.Lt(2)]  # 1 - cos of two distinct directions
FRACTION = Annotated[float, at.Ge(0), at.Lt(1)]  # a probability that leaves something: [0, 1)
DECAY = Annotated[float, at.Gt(0), at.Lt(1)]

_STRICT = ConfigDict(strict=True, allow_inf_nan=False)
_BOUNDS = ((at.Ge, "ge", ">="), (at.Gt, "gt", ">"), (at.Le, "le", "<="), (at.Lt, "lt", "<"))


@dataclass(frozen=True)
class Problem:
    """Why a value fails its annotation: ``kind`` is ``"type"`` (``want``: the types, in words),
    ``"choice"`` (``want``: the valid choices), ``"range"`` (``want``: the bounds, ``>= 1``,
    ``in (0, 2)``), ``"length"`` (a list too short) or ``"finite"`` (a NaN or an infinity; ``want``: the
    bounds, if any)."""

    kind: str
    want: str  # for ``"length"``: the fewest entries


@lru_cache(maxsize=None)
def _adapter(tp: Any) -> TypeAdapter:
    return TypeAdapter(tp, config=_STRICT)


def _plain(value: Any) -> Any:
    """numpy scalars as Python numbers, tuples as lists (recursively): what the configs accept."""
    if isinstance(value, numbers.Number) and not isinstance(value, (bool, int, float)) and hasattr(value, "item"):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def problem(value: Any, tp: Any) -> Problem | None:
    """None when ``value`` has the annotated type ``tp`` (within its bounds), else the ``Problem``."""
    try:
        _adapter(tp).validate_python(_plain(value))
    except ValidationError as e:
        errors = e.errors()
        if any(err["type"] == "finite_number" for err in errors):
            return Problem("finite", bounds(tp))
        if all(err["type"] == "literal_error" for err in errors) or (
            any(err["type"] == "literal_error" for err in errors) and isinstance(value, str)
        ):
            others = [
                "true, false" if m is bool else describe(m)
                for m in _members(tp)
                if typing.get_origin(m) is not typing.Literal
            ]
            return Problem("choice", ", ".join([*others, *map(_yaml, choices(tp))]))
        if any(err["type"] in ("greater_than", "greater_than_equal", "less_than", "less_than_equal") for err in errors):
            return Problem("range", bounds(tp))
        short = [err for err in errors if err["type"] == "too_short" and not err["loc"]]
        if short:
            return Problem("length", f"at least {short[0]['ctx']['min_length']}")
        return Problem("type", describe(tp))
    return None


def value_message(where: str, value: Any, bad: Problem) -> str | None:
    """The message of a value outside its choices, bounds or length, or not finite (``where=value``
    named); None for a wrong type, which each caller words for its reader."""
    said = f"{where}={value!r}"
    return {
        "choice": f"{said} is not a valid choice; valid choices: {bad.want}",
        "range": f"{said} is out of range: must be {bad.want}",
        "length": f"{said} is too short: list {bad.want} entries",
        "finite": f"{said} is not a finite number; write a finite value" + (f" ({bad.want})" if bad.want else ""),
    }.get(bad.kind)


def _members(tp: Any) -> tuple:
    """A union's members (``tp`` itself when not a union), each ``Annotated`` kept whole."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return typing.get_args(tp)
    return (tp,)


def _base(tp: Any) -> Any:
    return typing.get_args(tp)[0] if typing.get_origin(tp) is Annotated else tp


def _yaml(value: Any) -> str:
    """A choice as params.yaml spells it: ``false``, ``null``, ``default``."""
    return {True: "true", False: "false", None: "null"}.get(value, str(value)) if not isinstance(value, str) else value


def choices(tp: Any) -> tuple:
    """The values of the ``Literal`` members of ``tp``."""
    return tuple(v for m in _members(tp) if typing.get_origin(m) is typing.Literal for v in typing.get_args(m))


def bounds(tp: Any) -> str:
    """The bounds of ``tp``'s annotated members in words: ``>= 1``, ``> 0``, ``in (0, 2)``, ``in [0, 1)``
    (a list's: its entries')."""
    for m in _members(tp):
        found = {}
        for meta in typing.get_args(m)[1:] if typing.get_origin(m) is Annotated else ():
            for cls, attr, sign in _BOUNDS:
                if isinstance(meta, cls):
                    found[attr] = (getattr(meta, attr), sign)
        lo, hi = found.get("ge") or found.get("gt"), found.get("le") or found.get("lt")
        if lo and hi:
            return f"in {'[' if lo[1] == '>=' else '('}{lo[0]}, {hi[0]}{']' if hi[1] == '<=' else ')'}"
        if lo or hi:
            return f"{(lo or hi)[1]} {(lo or hi)[0]}"
        if typing.get_origin(_base(m)) is list and typing.get_args(_base(m)):
            return bounds(typing.get_args(_base(m))[0])
    return ""


def describe(tp: Any) -> str:
    """``tp`` in words: ``int``, ``float or null``, ``a list of float``, ``one of a, b``, ``a mapping``."""
    if tp is None or tp is type(None):
        return "null"
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " or ".join(describe(a) for a in typing.get_args(tp))
    tp = _base(tp)
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return "one of " + ", ".join(map(_yaml, typing.get_args(tp)))
    if origin is list:
        return f"a list of {describe(typing.get_args(tp)[0])}" if typing.get_args(tp) else "a list"
    if origin is dict or tp is dict:
        return "a mapping"
    return getattr(tp, "__name__", str(tp))


def numeric(tp: Any) -> str | None:
    """``"int"`` / ``"float"`` when the annotation admits that number (the first found), else None."""
    for m in _members(tp):
        if _base(m) in (int, float):
            return _base(m).__name__
    return None


@lru_cache(maxsize=None)
def field_types(cls: type) -> dict[str, Any]:
    """A dataclass's fields and their annotations (``Annotated`` bounds kept), in field order."""
    hints = typing.get_type_hints(cls, include_extras=True)
    return {f.name: hints.get(f.name, Any) for f in fields(cls)}


def article(value: Any) -> str:
    """``value``'s type with its article: ``null``, ``a str``, ``an int``, ``a bool``."""
    if value is None:
        return "null"
    name = "bool" if isinstance(value, bool) else type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def as_number(text: str) -> int | float | None:
    """The finite number a string spells (``"5"``, ``"1e-3"``, ``"1_000"``), or None (``"nan"``,
    ``"inf"``: YAML's own spellings of those are ``.nan`` and ``.inf``)."""
    t = text.strip()
    for cast in (int, float):
        try:
            number = cast(t)
        except ValueError:
            continue
        return number if isinstance(number, int) or math.isfinite(number) else None  # an int is finite
    return None
