"""The generic checks of params.yaml's values, with messages that name the key, the problem and
the fix (``ParamsError``): a value against its annotated type, choices and bounds (``check_type``,
by pydantic through ``nac.fields``; a quoted number is named as one), known and required keys
(``check_keys``), a table of keys (``check_table``), a dataclass's fields (``check_dataclass``).
``nac.pipeline.schema`` describes the sections with them."""

from __future__ import annotations

import math
import typing
from typing import Any

from nac.fields import article, as_number, field_types, numeric, problem, value_message


class ParamsError(ValueError):
    """params.yaml asks for something impossible; raised before any work starts."""


def check_type(where: str, value: Any, tp: Any) -> None:
    """Raise ParamsError unless ``value`` has the annotated type ``tp``, within its choices and
    bounds (``nac.fields``: checked by pydantic). A string that reads as a number (a quoted ``"5"``
    or ``"1e-3"``: params.yaml is read as YAML 1.2, where unquoted ``1e-3`` is a float) is named as
    one, with the unquoted spelling to write."""
    bad = problem(value, tp)
    if bad is None:
        return
    said = value_message(where, value, bad)
    if said is not None:
        raise ParamsError(said)
    num = numeric(tp)
    if isinstance(value, str) and num and as_number(value) is not None:
        text, number = value.strip(), as_number(value)
        if num == "int" and isinstance(number, float) and number.is_integer():
            text = str(int(number))  # an int field: write the whole number
        raise ParamsError(f"{where}={value!r} is a string, not a number: remove the quotes (write {text})")
    if isinstance(value, float) and num == "int":
        fix = f"write {int(value)}" if math.isfinite(value) and value.is_integer() else "use a whole number"
        raise ParamsError(f"{where}={value!r} must be an int; {fix}")
    entry = typing.get_args(tp)[0] if typing.get_origin(tp) is list and typing.get_args(tp) else None
    if isinstance(value, list) and entry is not None:
        for i, v in enumerate(value):
            check_type(f"{where}[{i}]", v, entry)
    raise ParamsError(f"{where}={value!r} is {article(value)}; expected {bad.want}")


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
    """A hand-written section: ``table`` maps key -> (annotated type, required)."""
    check_keys(where, section, table, [k for k, (_, req) in table.items() if req])
    for key, value in section.items():
        check_type(f"{where}.{key}", value, table[key][0])
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


def check_dataclass(where: str, section: Any, cls: type, set_by: dict[str, str] | None = None) -> dict:
    """A section read into dataclass ``cls``: keys are its fields (less those the pipeline sets,
    ``set_by``: field -> what sets it), types, choices and bounds their annotations."""
    fields = field_types(cls)
    set_by = {k: v for k, v in (set_by or {}).items() if k in fields}
    if isinstance(section, dict):
        for key in section:
            if key in set_by:
                raise ParamsError(f"{where}.{key} is set by {set_by[key]}, not by params.yaml; remove it")
    check_keys(where, section, [f for f in fields if f not in set_by])
    for key, value in section.items():
        check_type(f"{where}.{key}", value, fields[key])
    return section
