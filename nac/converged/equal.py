"""Proving that changed code computes the same pieces (``tools/run_converged.py --prove-equal COMMIT``).

A written piece is stale once the code it ran changes (``nac.converged.pieces.fingerprint``), even
when the change is a refactor that computes the same numbers. A refactor can prove it does: the
pieces of a small profile (``converged_smoke`` by default: every kind of piece, every track) are
run once with the code of ``COMMIT`` (extracted by ``git archive``) and once with this checkout's
code, on this machine, and compared file by file; every JSON value must be equal (the measured
timings, ``images_per_s``, aside) and every other file byte for byte. Where they are, each kind of
piece compared gets a proof ``{"from": <its code fingerprint at COMMIT>, "to": <here>}`` in
``results/converged/equal_code.json``, and the pieces written under the old code stay done
(``pieces.status`` follows chains of proofs; the report and ``--list`` say "carried over").

What a proof does not cover, and each entry says: it runs on this machine's device (a CPU), at the
small profile's sizes; pieces computed on another kind of device, or at sizes that take other code
paths, are carried over on its strength.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import torch

from nac.converged import pieces as P
from nac.pipeline.params import compose
from nac.provenance import git_commit

TIMINGS = frozenset({"images_per_s"})  # measured time: differs between any two runs of the same code


class ProofError(RuntimeError):
    """The proof could not be made (a bad commit, a dirty checkout, a run that failed)."""


def _strip(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in TIMINGS}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def _first_difference(a: Any, b: Any, where: str = "") -> str | None:
    if type(a) is not type(b):
        return f"{where or '.'}: {a!r} vs {b!r}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{where}.{k}: only in {'the first' if k in a else 'the second'}"
            if d := _first_difference(a[k], b[k], f"{where}.{k}"):
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{where or '.'}: {len(a)} vs {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b)):
            if d := _first_difference(x, y, f"{where}[{i}]"):
                return d
        return None
    return None if a == b else f"{where or '.'}: {a!r} vs {b!r}"


def differences(a: Path, b: Path, limit: int = 10) -> list[str]:
    """Where two folders of one profile's pieces differ (``<track>/<run>-<seed>/<file>``): pieces or
    files present in one only, the first differing JSON value of each file (timings aside), other
    files byte for byte. ``piece.json`` (the record: times, machine) is not compared."""
    out: list[str] = []
    pa = {d.relative_to(a).as_posix() for d in a.glob("*/*") if d.is_dir()}
    pb = {d.relative_to(b).as_posix() for d in b.glob("*/*") if d.is_dir()}
    out += [f"{x}: only in the first run" for x in sorted(pa - pb)]
    out += [f"{x}: only in the second run" for x in sorted(pb - pa)]
    for piece in sorted(pa & pb):
        fa = {f.name for f in (a / piece).iterdir()} - {P.RECORD}
        fb = {f.name for f in (b / piece).iterdir()} - {P.RECORD}
        out += [f"{piece}/{f}: only in {'the first' if f in fa else 'the second'} run" for f in sorted(fa ^ fb)]
        for name in sorted(fa & fb):
            x, y = a / piece / name, b / piece / name
            if name.endswith(".json"):
                d = _first_difference(
                    _strip(json.loads(x.read_text("utf-8"))), _strip(json.loads(y.read_text("utf-8")))
                )
                if d:
                    out.append(f"{piece}/{name}: {d}")
            elif x.read_bytes() != y.read_bytes():
                out.append(f"{piece}/{name}: the bytes differ")
        if len(out) >= limit:
            break
    return out[:limit]


def _git(root: Path, *args: str) -> str:
    got = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    if got.returncode != 0:
        raise ProofError(f"git {' '.join(args)}: {got.stderr.strip() or got.stdout.strip()}")
    return got.stdout.strip()


def extract(root: Path, commit: str, dest: Path) -> str:
    """The tree of ``commit`` into ``dest`` (``git archive``); returns its full sha."""
    sha = _git(root, "rev-parse", "--verify", f"{commit}^{{commit}}")
    dest.mkdir(parents=True)
    archive = dest.parent / f"{dest.name}.tar"
    with open(archive, "wb") as f:
        if subprocess.run(["git", "archive", sha], cwd=root, stdout=f).returncode != 0:
            raise ProofError(f"git archive {sha} failed")
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    archive.unlink()
    return sha


def run_pieces(code: Path, profile: str, pieces: Path, work: Path, workers: int, only: list[str] | None) -> None:
    """``code``'s own ``tools/run_converged.py`` on ``profile``, its own ``nac`` first on the path."""
    tool = code / "tools" / "run_converged.py"
    if not tool.is_file():
        raise ProofError(f"{code} has no tools/run_converged.py: that commit cannot run pieces")
    cmd = [sys.executable, str(tool), "--profile", profile, "--budget", "600", "--workers", str(workers)]
    cmd += ["--pieces", str(pieces), "--workdir", str(work)] + (["--only", *only] if only else [])
    env = dict(os.environ, PYTHONPATH=str(code), NAC_WORKERS=str(workers))
    got = subprocess.run(cmd, cwd=code, env=env, capture_output=True, text=True)
    if got.returncode != 0:
        tail = (got.stdout + got.stderr).strip().splitlines()[-5:]
        raise ProofError(f"the pieces of {code.name} did not run (exit {got.returncode}): " + " | ".join(tail))


def prove(
    root: Path,
    commit: str,
    tmp: Path,
    profile: str = "converged_smoke",
    workers: int = 2,
    only: list[str] | None = None,
) -> dict[str, Any]:
    """Run ``profile``'s pieces (those ``only`` selects) with the code of ``commit`` and with the
    checkout ``root``, compare them; returns ``{"equal", "differences", "entries", "pieces"}``
    (``entries``: a proof per kind of piece compared whose code fingerprint changed)."""
    here = git_commit(root)
    if here["commit"] is None:
        raise ProofError(f"{root} is not a git checkout: a proof names the commits it compares")
    if here["dirty"]:
        raise ProofError("the checkout has uncommitted changes in nac, stages, conf or dvc.yaml: commit them first")
    old = tmp / "old"
    sha = extract(root, commit, old)
    params = compose([f"profile={profile}"], conf_dir=root / "conf")
    selected = P.select(P.plan(params), only)
    a, b = tmp / "pieces-old", tmp / "pieces-new"
    run_pieces(old, profile, a, tmp / "work-old", workers, only)
    run_pieces(root, profile, b, tmp / "work-new", workers, only)
    for side, folder in (("old", a), ("new", b)):
        n = sum(1 for d in (folder / profile).glob(f"*/*/{P.RECORD}"))
        if n != len(selected):
            raise ProofError(f"the {side} code wrote {n} of the {len(selected)} pieces selected: compare needs all")
    diffs = differences(a / profile, b / profile)
    device = f"CPU ({platform.machine()}, torch {torch.__version__})"
    entries, kinds = [], {}
    for p in selected:
        kinds.setdefault(P.kind(params, p), p)
    for k, p in sorted(kinds.items()):
        was, now = P.fingerprint(old, params, p)["code"], P.fingerprint(root, params, p)["code"]
        if was != now:
            entries.append(
                {
                    "kind": k,
                    "from": was,
                    "to": now,
                    "from_commit": sha,
                    "to_commit": here["commit"],
                    "evidence": f"{profile}: the {len(selected)} pieces selected ({', '.join(only or ['all'])}) "
                    "computed "
                    f"by both, every metric equal (timings aside), on {device}; pieces of other devices and sizes "
                    "are carried over on this",
                    "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                }
            )
    return {"equal": not diffs, "differences": diffs, "entries": entries, "pieces": len(selected), "commit": sha}


def record(pieces_root: Path, entries: list[dict]) -> Path:
    """Add ``entries`` to ``<pieces_root>/../equal_code.json`` (in the order proven, no duplicate from/to)."""
    f = Path(pieces_root).parent / P.EQUAL_CODE
    have = P.equal_code(pieces_root)
    keys = {(e["from"], e["to"]) for e in have}
    have += [e for e in entries if (e["from"], e["to"]) not in keys]
    tmp = f.with_name(f".{f.name}.tmp")
    tmp.write_text(json.dumps(have, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, f)
    return f
