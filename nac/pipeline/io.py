"""Writing the stages' outputs."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def write_json(path: str | Path, obj: Any) -> Path:
    """Write JSON atomically (temporary file + rename), creating parent folders."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


@contextmanager
def signals_deferred() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP held back while the block runs (in the main thread; Python runs
    signal handlers there), then delivered to the handlers they would have reached: a stop never
    lands between two renames of one set of outputs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    held = [s for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)]
    old = {s: signal.signal(s, lambda signum, frame: got.append(signum)) for s in held}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        for s in dict.fromkeys(got):  # each once, in arrival order
            os.kill(os.getpid(), s)


@contextmanager
def staged(*targets: str | Path, clean: tuple[str, ...] = ()) -> Iterator[list[Path]]:
    """All-or-nothing outputs: yields one staging folder per target folder (created next to it, so
    on the same file system); everything written there replaces the files of the same relative path
    under the target (``os.replace``) only when the block ends without an error. On any error the
    staging folders are removed and every target is left exactly as it was. Files of a target that
    the block did not write are kept (e.g. ``reports/notebooks/``, written by another stage), except
    under the first target's subfolders named in ``clean``, which end up holding exactly what the block wrote
    there (as if removed first, the way ``dvc repro`` removes a stage's outputs). The swap runs with
    stop signals held back (``signals_deferred``): an interruption leaves all the old files or all
    the new ones, never a mix."""
    targets = [Path(t) for t in targets]
    stages = []
    try:
        for t in targets:
            t.parent.mkdir(parents=True, exist_ok=True)
            stages.append(Path(tempfile.mkdtemp(prefix=f".{t.name}.staging-", dir=t.parent)))
        yield stages
        with signals_deferred():  # swapped in together: Ctrl-C or SIGTERM takes effect after the swap
            for i, (t, s) in enumerate(zip(targets, stages)):
                written = sorted(p.relative_to(s) for p in s.rglob("*") if p.is_file())
                for rel in written:
                    (t / rel).parent.mkdir(parents=True, exist_ok=True)
                    os.replace(s / rel, t / rel)
                for sub in clean if i == 0 else ():
                    for old in [
                        p for p in (t / sub).rglob("*") if p.is_file() and p.relative_to(t) not in set(written)
                    ]:
                        old.unlink()
    finally:
        for s in stages:
            shutil.rmtree(s, ignore_errors=True)
