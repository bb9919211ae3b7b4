"""Typed configs and params sections, checked by pydantic (strict: a bool or a string is no number,
a float no int; an int is a float and stays the int it was, ``Real``; floats finite): field types,
``config`` (a config class as a pydantic dataclass), ``Section`` (a params section, unknown keys
refused) and ``explain`` (pydantic's location and message, the value given and the fix)."""

from __future__ import annotations

import contextlib
import difflib
import functools
import math
import typing
from typing import Annotated, Any

import annotated_types as at
from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError, WrapValidator
from pydantic.dataclasses import dataclass
from pydantic_core import ArgsKwargs


def _keep_int(value: Any, handler) -> Any:
    out = handler(value)
    return value if type(value) is int else out  # an int is a float, recorded as given


def _exact(value: Any, handler) -> Any:
    out = handler(value)
    if type(out) is bool and type(value) is not bool:  # a Literal compares by ==: 0 would be False
        raise ValueError("write true or false, not a number")
    return out


Real = Annotated[float, WrapValidator(_keep_int)]
POSITIVE_INT = Annotated[int, at.Ge(1)]
NONNEGATIVE_INT = Annotated[int, at.Ge(0)]
AT_LEAST_2 = Annotated[int, at.Ge(2)]
POSITIVE = Annotated[Real, at.Gt(0)]
NONNEGATIVE = Annotated[Real, at.Ge(0)]
COSINE_DISTANCE = Annotated[Real, at.Gt(0), at.Lt(2)]  # 1 - cos of two distinct directions
FRACTION = Annotated[Real, at.Ge(0), at.Lt(1)]  # a probability that leaves something: [0, 1)
DECAY = Annotated[Real, at.Gt(0), at.Lt(1)]
EXACT = WrapValidator(_exact)  # after a Literal holding false or true: 0 and 1 are refused

STRICT = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)
DEVICES = ("auto", "cpu", "cuda")  # the top-level `device` and `train.device`
TAGS: set[str] = set()  # the tags of discriminated unions (a tokenizer's kind): no key of a location


class ConfigError(TypeError, ValueError):
    """A config holds an invalid value (``explain`` says where, and the fix)."""


class Section(BaseModel):
    """A section of params.yaml: strict types, unknown keys refused."""

    model_config = STRICT


def config(cls: type) -> type:
    """``cls`` as a strict pydantic dataclass whose errors are a ``ConfigError`` under ``cls.section``."""
    cls = dataclass(cls, config=STRICT)
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        try:
            init(self, *args, **kwargs)
        except ValidationError as e:
            raise ConfigError(explain(e, cls.section, cls)) from None

    cls.__init__ = __init__
    return cls


def section_of(cls: type, set_by: dict[str, str] | None = None) -> Any:
    """Config class ``cls`` as a params section, refusing the keys the pipeline sets (``set_by``)."""

    def check(value: dict) -> Any:
        if (key := next((k for k in value if k in (set_by or {})), None)) is not None:
            raise ValueError(f"{key} is set by {set_by[key]}, not by params.yaml; remove it")
        obj = cls.__new__(cls)
        cls.__pydantic_validator__.validate_python(ArgsKwargs((), value), self_instance=obj)
        obj.__dict__["_given"] = dict(value)  # ``given``: not a field, never recorded
        return obj

    check.config_class = cls  # what ``explain`` lists the valid keys of
    return Annotated[dict, AfterValidator(check)]


def given(obj: Any) -> dict:
    """The mapping params.yaml gave a ``section_of`` config (checked; {} for None): what a config
    composed from the section (with the run's settings) is built from, key for key as written."""
    return dict(getattr(obj, "__dict__", {}).get("_given", {}))


def unique(values: list) -> list:
    """A list of runs (or targets) names each once: a repeat would be trained twice."""
    for i, v in enumerate(values):
        if v in values[:i]:
            raise ValueError(f"[{i}]={v!r} repeats an earlier entry; list each once (seeds come from `seeds`)")
    return values


def _holder(tp: Any, metadata: tuple = ()) -> Any:
    """The model or config class an annotation holds (through Annotated, unions, ``section_of``)."""
    if hasattr(tp, "__pydantic_fields__"):
        return tp
    for meta in (*metadata, *getattr(tp, "__metadata__", ())):  # section_of: AfterValidator(check)
        if cls := getattr(getattr(meta, "func", None), "config_class", None):
            return cls
    return next(filter(None, map(_holder, typing.get_args(tp))), None)


def _known_keys(cls: Any, loc: tuple) -> list[str]:
    """The valid keys beside the unknown last key of ``loc``, from the model ``cls`` down."""
    for part in loc[:-1]:
        if part not in (fields := getattr(cls, "__pydantic_fields__", {})):
            return []
        cls = _holder(fields[part].annotation, tuple(fields[part].metadata))
    return sorted(getattr(cls, "__pydantic_fields__", ()))


def _fix(err: dict, root: Any = None) -> str:
    """What to write instead, for the errors whose message does not say it."""
    kind, value = err["type"], err.get("input")
    if isinstance(value, str) and kind in ("int_type", "float_type"):
        with contextlib.suppress(ValueError):  # a number in quotes
            if math.isfinite(number := float(value)):
                whole = kind == "int_type" and number.is_integer()
                return f"remove the quotes (write {int(number) if whole else value.strip()})"
    if kind in ("int_from_float", "int_type") and isinstance(value, float):
        return f"write {int(value)}" if math.isfinite(value) and value.is_integer() else "use a whole number"
    if kind in ("extra_forbidden", "unexpected_keyword_argument"):
        known = _known_keys(root, err["loc"]) if root is not None and err["loc"] else []
        near = difflib.get_close_matches(str(err["loc"][-1]), known, n=1)
        hint = f": did you mean {near[0]}?" if near else f"; valid keys here: {', '.join(known)}" if known else ""
        return f"remove it (or correct its spelling{hint or '; conf/base.yaml has every key'})"
    return {
        "finite_number": "write a finite value",
        "bool_type": "write true or false",
        "missing": "add it (conf/base.yaml has a complete section)",
        "multiple_of": "use such a multiple (the tokenizer's strided convolutions divide it)",
    }.get(kind, "")


def explain(e: ValidationError, prefix: str = "", root: Any = None) -> str:
    """pydantic's first error: its location (under ``prefix``; no union tag or validator name in it),
    the value, its message and the fix."""
    err, where = e.errors()[0], prefix
    for part in err["loc"]:
        if isinstance(part, int):
            where += f"[{part}]"
        elif not part.startswith(("function-", "literal[", "nullable[")) and part not in ("bool", "str", "int", *TAGS):
            where += f".{part}" if where else part
    fix = _fix(err, root)
    shown = err["loc"] and err["type"] not in ("missing", "value_error") and not isinstance(err["input"], ArgsKwargs)
    said = f"{where}={err['input']!r}" if shown else where
    return f"{said}: {err['msg']}" + (f"; {fix}" if fix else "")
