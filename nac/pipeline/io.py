"""Writing the stages' outputs."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def write_json(path: str | Path, obj: Any) -> Path:
    """Write JSON atomically (temporary file + rename), creating parent folders."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


@contextmanager
def staged(*targets: str | Path, clean: tuple[str, ...] = ()) -> Iterator[list[Path]]:
    """All-or-nothing outputs: yields one staging folder per target folder (created next to it, so
    on the same file system); everything written there replaces the files of the same relative path
    under the target (``os.replace``) only when the block ends without an error. On any error the
    staging folders are removed and every target is left exactly as it was. Files of a target that
    the block did not write are kept (e.g. ``reports/notebooks/``, written by another stage), except
    under the first target's subfolders named in ``clean``, which end up holding exactly what the block wrote
    there (as if removed first, the way ``dvc repro`` removes a stage's outputs)."""
    targets = [Path(t) for t in targets]
    stages = []
    try:
        for t in targets:
            t.parent.mkdir(parents=True, exist_ok=True)
            stages.append(Path(tempfile.mkdtemp(prefix=f".{t.name}.staging-", dir=t.parent)))
        yield stages
        for i, (t, s) in enumerate(zip(targets, stages)):
            written = sorted(p.relative_to(s) for p in s.rglob("*") if p.is_file())
            for rel in written:
                (t / rel).parent.mkdir(parents=True, exist_ok=True)
                os.replace(s / rel, t / rel)
            for sub in clean if i == 0 else ():
                for old in [p for p in (t / sub).rglob("*") if p.is_file() and p.relative_to(t) not in set(written)]:
                    old.unlink()
    finally:
        for s in stages:
            shutil.rmtree(s, ignore_errors=True)
