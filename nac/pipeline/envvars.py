"""The environment variables that place a stage's jobs (``NAC_WORKERS``, ``NAC_THREADS``,
``NAC_DEVICES``, ``NAC_JOBS_PER_GPU``, ``NAC_EXECUTOR``, ``NAC_SLURM_*``), read with errors that
name the variable and its valid form. They are not DVC params: none of them changes a result."""

from __future__ import annotations

import os
import re

_DIGITS = re.compile(r"[0-9]+")  # ASCII only: str.isdigit() accepts '²', which int() then refuses


class EnvError(ValueError):
    """An environment variable holds a value of the wrong form; the message names it and the fix."""


def raw(name: str) -> str | None:
    """The stripped value of ``name``; None when unset or empty."""
    value = os.environ.get(name, "").strip()
    return value or None


def positive_int(name: str, example: str = "1 or 2", minimum: int = 1) -> int | None:
    """``name`` as an integer >= ``minimum`` (None when unset)."""
    value = raw(name)
    if value is None:
        return None
    if not _DIGITS.fullmatch(value) or int(value) < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise EnvError(
            f"{name}={value!r} is not {what}; set it to e.g. {example} (ASCII digits), or unset it for the default"
        )
    return int(value)


def choice(name: str, choices: tuple[str, ...], default: str) -> str:
    """``name`` as one of ``choices`` (``default`` when unset)."""
    value = raw(name)
    if value is None:
        return default
    if value not in choices:
        raise EnvError(f"{name}={value!r}; valid choices: {', '.join(choices)} (unset: {default})")
    return value
