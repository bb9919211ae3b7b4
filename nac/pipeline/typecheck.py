"""The generic checks of params.yaml's values, with messages that name the key, the problem and
the fix (``ParamsError``): a value's annotated type (``check_type``; a quoted number is named as
one), a range (``check_range``), known and required keys
(``check_keys``), a table of keys (``check_table``), a dataclass's fields (``check_dataclass``).
``nac.pipeline.schema`` describes the sections with them."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from functools import lru_cache
from typing import Any


class ParamsError(ValueError):
    """params.yaml asks for something impossible; raised before any work starts."""


# Top-level sections of params.yaml (the keys of conf/config.yaml's composition).
# ------------------------------------------------------------------------------------- types
def _accepts(value: Any, tp: Any) -> bool:
    """Whether a YAML value has the annotated type (an int is a float; a bool is never a number)."""
    if tp is Any or tp is object or isinstance(tp, (str, typing.TypeVar)):
        return True
    if tp is None or tp is type(None):
        return value is None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union or origin is types.UnionType:
        return any(_accepts(value, a) for a in args)
    if origin is typing.Literal:
        return value in args
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if tp in (list, tuple) or origin in (list, tuple, typing.Sequence):
        if not isinstance(value, (list, tuple)):
            return False
        if args and origin is list:
            return all(_accepts(v, args[0]) for v in value)
        return True
    if tp is dict or origin is dict:
        return isinstance(value, dict)
    return True  # a type YAML cannot express: leave it to the code


def _numeric(tp: Any) -> str | None:
    """``"int"`` / ``"float"`` when the annotation admits that number (first found), else None."""
    if tp is int or tp is float:
        return tp.__name__
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        for a in typing.get_args(tp):
            if _numeric(a):
                return _numeric(a)
    return None


def _describe(tp: Any) -> str:
    if tp is type(None) or tp is None:
        return "null"
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(tp))
    if typing.get_origin(tp) is list:
        return f"a list of {_describe(typing.get_args(tp)[0])}" if typing.get_args(tp) else "a list"
    if typing.get_origin(tp) is dict or tp is dict:
        return "a mapping"
    return getattr(tp, "__name__", str(tp))


def _as_number(text: str) -> int | float | None:
    """The finite number a string spells (``"5"``, ``"1e-3"``, ``"1_000"``), or None (``"nan"``,
    ``"inf"``: YAML's own spellings of those are ``.nan`` and ``.inf``)."""
    t = text.strip()
    for cast in (int, float):
        try:
            number = cast(t)
        except ValueError:
            continue
        return number if math.isfinite(number) else None
    return None


def check_type(where: str, value: Any, tp: Any) -> None:
    """Raise ParamsError unless ``value`` has type ``tp``; a string that reads as a number (a
    quoted ``"5"`` or ``"1e-3"``: params.yaml is read as YAML 1.2, where unquoted ``1e-3`` is a
    float) is named as one, with the unquoted spelling to write."""
    if _accepts(value, tp):
        return
    num = _numeric(tp)
    if isinstance(value, str) and num and _as_number(value) is not None:
        text, number = value.strip(), _as_number(value)
        if num == "int" and isinstance(number, float) and number.is_integer():
            text = str(int(number))  # an int field: write the whole number
        raise ParamsError(f"{where}={value!r} is a string, not a number: remove the quotes (write {text})")
    if isinstance(value, float) and num == "int":
        fix = f"write {int(value)}" if math.isfinite(value) and value.is_integer() else "use a whole number"
        raise ParamsError(f"{where}={value!r} must be an int; {fix}")
    if isinstance(value, list) and typing.get_origin(tp) is list and typing.get_args(tp):
        for i, v in enumerate(value):
            check_type(f"{where}[{i}]", v, typing.get_args(tp)[0])
    raise ParamsError(f"{where}={value!r} is {article(value)}; expected {_describe(tp)}")


def article(value: Any) -> str:
    """``value``'s type with its article: ``null``, ``a str``, ``an int``, ``a bool``."""
    if value is None:
        return "null"
    name = "bool" if isinstance(value, bool) else type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def check_range(where: str, value: Any, rng: tuple | None) -> None:
    """``rng`` = (lower, lower_inclusive, upper, upper_inclusive); None ends are open. Skips null.
    A float must be finite whatever its range (YAML's ``.nan``, ``.inf``; ``1e+400`` reads as inf)."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise ParamsError(
            f"{where}={value!r} is not a finite number; write a finite value"
            + (f" ({_want(rng)})" if rng is not None else "")
        )
    if rng is None:
        return
    lo, lo_in, hi, hi_in = rng
    bad = (lo is not None and (value < lo if lo_in else value <= lo)) or (
        hi is not None and (value > hi if hi_in else value >= hi)
    )
    if bad:
        raise ParamsError(f"{where}={value!r} is out of range: must be {_want(rng)}")


def _want(rng: tuple) -> str:
    """A range in words: ``>= 0``, ``< 1``, ``in (0, 1]``."""
    lo, lo_in, hi, hi_in = rng
    if lo is not None and hi is None:
        return f">= {lo}" if lo_in else f"> {lo}"
    if lo is None:
        return f"<= {hi}" if hi_in else f"< {hi}"
    return f"in {'[' if lo_in else '('}{lo}, {hi}{']' if hi_in else ')'}"


def check_keys(where: str, section: Any, valid, required=(), what: str = "key") -> dict:
    """``section`` must be a mapping whose keys are all in ``valid``; returns it."""
    if not isinstance(section, dict):
        raise ParamsError(f"{where} must be a mapping of {what}s ({', '.join(sorted(valid))}), got {section!r}")
    unknown = [k for k in section if k not in valid]
    if unknown:
        raise ParamsError(
            f"{where}.{unknown[0]} is not a known {what} (unknown {what}s {unknown}); "
            f"valid {what}s at {where}: {', '.join(sorted(valid))}"
        )
    missing = [k for k in required if k not in section]
    if missing:
        raise ParamsError(f"{where}.{missing[0]} is missing; required keys at {where}: {', '.join(required)}")
    return section


def check_table(where: str, section: Any, table: dict[str, tuple]) -> dict:
    """A hand-written section: ``table`` maps key -> (type, range, required)."""
    check_keys(where, section, table, [k for k, (_, _, req) in table.items() if req])
    for key, value in section.items():
        tp, rng, _ = table[key]
        check_type(f"{where}.{key}", value, tp)
        check_range(f"{where}.{key}", value, rng)
    return section


def check_unique(where: str, values: list) -> None:
    """A list that names runs (or targets) must name each once: a repeated run would be trained,
    evaluated and reported twice, as two rows of one table."""
    seen: set = set()
    for i, v in enumerate(values):
        if v in seen:
            raise ParamsError(
                f"{where}[{i}]={v!r} repeats an earlier entry of {where} {values}; list each run once "
                f"(seeds come from `seeds`)"
            )
        seen.add(v)


@lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls)}


def check_dataclass(
    where: str, section: Any, cls: type, set_by: dict[str, str] | None = None, ranges: dict[str, tuple] | None = None
) -> dict:
    """A section read into dataclass ``cls``: keys are its fields (less those the pipeline sets,
    ``set_by``: field -> what sets it), types its annotations, plus ``ranges``."""
    fields = _hints(cls)
    set_by = {k: v for k, v in (set_by or {}).items() if k in fields}
    if isinstance(section, dict):
        for key in section:
            if key in set_by:
                raise ParamsError(f"{where}.{key} is set by {set_by[key]}, not by params.yaml; remove it")
    check_keys(where, section, [f for f in fields if f not in set_by])
    for key, value in section.items():
        check_type(f"{where}.{key}", value, fields[key])
        check_range(f"{where}.{key}", value, (ranges or {}).get(key))
    return section
