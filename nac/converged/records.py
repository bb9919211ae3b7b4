"""Records: a finished converged run of an earlier benchmark, kept readable after the benchmark
changes (issue 50, item 6).

When the data or the protocol a profile trains changes, every piece of its converged run becomes
stale against the new code and params: it no longer measures this benchmark. It still measures the
one it ran on, and what it showed (and could not show) is the reason the benchmark changed. So
before the change, ``tools/run_converged.py --archive NAME --about FILE`` moves the profile's
pieces, all done, into ``results/converged/records/NAME/pieces/<profile>/`` with ``record.json``:
the composed params they were judged against, the commit, the date, and what the run could and
could not show (from ``FILE``, written by whoever archives it). A record is read with those params
and never against the code of the day: its pieces are checked only for being whole
(``pieces.inspect``), and the report builds its tables and claims with today's report code
(``nac.report.converged.record_section``), labelled as the record it is.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from nac.converged import pieces as P
from nac.converged.gpu_proof import PROOF, RECOMPUTED

RECORDS = "records"  # beside the live pieces folder: results/converged/records/<name>/
ABOUT = "record.json"
ABOUT_KEYS = ("title", "could_show", "could_not_show")  # what the archiving person writes (--about FILE)
NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


class RecordError(ValueError):
    """A record that cannot be written or read; the message names the file and the fix."""


def records_root(results: str | Path) -> Path:
    return Path(results) / RECORDS


def _commit(root: Path) -> tuple[str, bool]:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout.strip()

    try:
        return git("rev-parse", "HEAD"), bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.CalledProcessError):
        return "unknown", False


def read_about(path: str | Path) -> dict[str, str]:
    """The ``--about`` file: JSON or YAML with ``title``, ``could_show``, ``could_not_show`` (text)."""
    path = Path(path)
    try:
        about = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise RecordError(f"--about {path}: cannot read it ({type(e).__name__}: {e})") from e
    if not isinstance(about, dict):
        raise RecordError(f"--about {path}: must be a mapping with keys {', '.join(ABOUT_KEYS)}")
    bad = [k for k in ABOUT_KEYS if not isinstance(about.get(k), str) or not about[k].strip()]
    extra = sorted(set(about) - set(ABOUT_KEYS))
    if bad or extra:
        raise RecordError(
            f"--about {path}: needs non-empty text for {', '.join(ABOUT_KEYS)}"
            + (f" (missing or empty: {', '.join(bad)})" if bad else "")
            + (f"; unknown keys: {', '.join(extra)}" if extra else "")
        )
    return {k: about[k].strip() for k in ABOUT_KEYS}


def archive(
    results: str | Path, profile: str, name: str, params: dict, code_root: str | Path, about: dict[str, str]
) -> Path:
    """Move the profile's pieces (``<results>/pieces/<profile>/``), every one done under this code
    and these params, into ``<results>/records/<name>/``; write ``record.json``. Returns its folder.
    Refused (``RecordError``, nothing moved) for a bad name, an existing record, a piece not done,
    or a checkout with uncommitted changes (the record names the commit its params came from)."""
    results, code_root = Path(results), Path(code_root)
    if not NAME.match(name):
        raise RecordError(
            f"--archive {name!r}: a record's name is lower-case letters, digits, - and _ (e.g. benchmark1)"
        )
    dest = records_root(results) / name
    if dest.exists():
        raise RecordError(f"--archive {name}: {dest} exists; choose another name (a record is never overwritten)")
    pieces_root = results / "pieces"
    rows = P.status(pieces_root, profile, params, code_root)
    not_done = [f"{p.id} ({st}{': ' + why if why else ''})" for p, st, _, why in rows if st != "done"]
    if not rows or not_done:
        raise RecordError(
            f"--archive {name}: only a whole run is kept as a record; {len(not_done)} of {len(rows)} pieces of "
            f"profile {profile} are not done: {', '.join(not_done[:4])}{' ...' if len(not_done) > 4 else ''}. "
            "Run them first (python tools/run_converged.py --budget MINUTES)"
        )
    commit, dirty = _commit(code_root)
    if dirty:
        raise RecordError(f"--archive {name}: the checkout has uncommitted changes; commit them first")
    record = {
        "name": name,
        **about,
        "profile": profile,
        "pieces": len(rows),
        "commit": commit,
        "archived": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "params": params,
    }
    staging = records_root(results) / f".{name}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "pieces").mkdir(parents=True)
    equal = pieces_root / P.EQUAL_CODE
    if equal.is_file():  # the proofs its pieces were carried over on, with them
        shutil.copy2(equal, staging / P.EQUAL_CODE)
    for name in (PROOF, RECOMPUTED):  # the GPU path's proof is of these pieces: it moves with them
        if (results / name).exists():
            (results / name).rename(staging / name)
    (staging / ABOUT).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    (pieces_root / profile).rename(staging / "pieces" / profile)  # one rename: the pieces move whole
    staging.rename(dest)
    return dest


def read(folder: str | Path) -> dict[str, Any]:
    """A record's ``record.json``, checked: its keys, its name matching the folder."""
    folder = Path(folder)
    f = folder / ABOUT
    try:
        rec = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise RecordError(f"{f}: cannot read the record ({type(e).__name__}: {e})") from e
    need = ("name", *ABOUT_KEYS, "profile", "pieces", "commit", "archived", "params")
    missing = [k for k in need if k not in rec] if isinstance(rec, dict) else list(need)
    if missing:
        raise RecordError(f"{f}: not a record (missing {', '.join(missing)}); restore it from git")
    if rec["name"] != folder.name:
        raise RecordError(f"{f}: names record {rec['name']!r}, its folder is {folder.name!r}")
    return rec


def all_records(results: str | Path) -> list[Path]:
    """The record folders under ``<results>/records/`` (those with ``record.json``), by name."""
    root = records_root(results)
    return sorted(d for d in root.iterdir() if d.is_dir() and (d / ABOUT).is_file()) if root.is_dir() else []


def status(folder: str | Path, rec: dict[str, Any]) -> list[tuple[P.Piece, str, dict | None, str]]:
    """``[(piece, status, record, why)]`` of a record's pieces: ``done`` when whole, ``damaged`` or
    ``missing`` otherwise; never ``stale`` (a record is read against its own params, not today's code)."""
    found = P.status(Path(folder) / "pieces", rec["profile"], rec["params"], None)
    return [(p, st, piece_rec, why or ("recorded" if st == "done" else "")) for p, st, piece_rec, why in found]
