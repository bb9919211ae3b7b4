"""The Python environment a run used, against the committed run's (``requirements.lock``).

``requirements.lock`` (beside ``pyproject.toml``) is ``pip freeze --exclude-editable`` of the
environment that produced the committed ``metrics/`` and ``reports/``: the one environment that
reproduces them bit for bit (another torch, say, changes the numbers within their noise). A stage
says at its start, in one line, which installed packages differ from it (``mismatch_line``,
printed by ``nac.pipeline.params.load_params``); the report records every installed version
(``installed``) in its provenance and compares the run with the committed one
(``nac.report.reproduction``).

    python -m nac.environment            # the differences from requirements.lock, if any
    python -m nac.environment --freeze   # rewrite requirements.lock from this environment
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from nac import repo

LOCK = repo.LOCK
SELF = "nac"  # the package under test: its code is fingerprinted, not versioned
TOOLING = {"pip", "setuptools", "wheel", "distribute"}  # what `pip freeze` leaves out: no effect on a result


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed() -> dict[str, str]:
    """Every installed distribution (normalized name -> version), this package excluded."""
    out = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name and _norm(name) != SELF and _norm(name) not in TOOLING:
            out[_norm(name)] = dist.version
    return dict(sorted(out.items()))


def read_lock(path: str | Path | None = None) -> dict[str, str]:
    """``requirements.lock``'s pins (normalized name -> version); ``{}`` when there is none."""
    path = Path(LOCK if path is None else path)
    if not path.is_file():
        return {}
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[_norm(name.split("[", 1)[0])] = version.strip()
    return pins


def differences(locked: dict[str, str], have: dict[str, str]) -> list[str]:
    """``name have (locked X)`` for each package whose version differs, ``name missing`` /
    ``name extra`` for one only on one side; version differences first."""
    changed = [f"{n} {have[n]} (locked {v})" for n, v in locked.items() if n in have and have[n] != v]
    missing = [f"{n} missing (locked {v})" for n, v in locked.items() if n not in have]
    extra = [f"{n} {v} (not locked)" for n, v in have.items() if n not in locked]
    return changed + missing + extra


def mismatch_line(lock: str | Path | None = None, have: dict[str, str] | None = None, shown: int = 6) -> str | None:
    """One line when this environment differs from the lock (None when it matches, or there is no lock)."""
    locked = read_lock(LOCK if lock is None else lock)
    if not locked:
        return None
    diff = differences(locked, installed() if have is None else have)
    if not diff:
        return None
    more = f" and {len(diff) - shown} more" if len(diff) > shown else ""
    return (
        f"environment: {len(diff)} package(s) differ from requirements.lock (the committed run's): "
        f"{', '.join(diff[:shown])}{more}; the numbers will differ from the committed ones within their noise "
        "(`pip install -r requirements.lock` reproduces them bit for bit; `python -m nac.environment` lists all)"
    )


def freeze() -> str:
    """``pip freeze --exclude-editable`` of this interpreter."""
    return subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--exclude-editable"], capture_output=True, text=True, check=True
    ).stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nac.environment", description=__doc__.split("\n")[0])
    ap.add_argument("--freeze", action="store_true", help="rewrite requirements.lock from this environment")
    args = ap.parse_args(argv)
    if args.freeze:
        head = (
            [ln for ln in LOCK.read_text(encoding="utf-8").splitlines() if ln.startswith("#")] if LOCK.is_file() else []
        )
        LOCK.write_text("\n".join(head) + ("\n" if head else "") + freeze(), encoding="utf-8")
        print(f"{LOCK.name}: {len(read_lock())} packages")
        return 0
    diff = differences(read_lock(), installed())
    print("\n".join(diff) if diff else "this environment matches requirements.lock")
    return 1 if diff else 0


if __name__ == "__main__":
    raise SystemExit(main())
