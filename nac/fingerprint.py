"""The fingerprint of the sources a training runs: the files its result depends on, found by
following the import statements from its entry modules (``source_closure``), hashed
(``source_fingerprint``). A checkpoint is resumed only under the same fingerprint."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterable

from nac.imports import files_run_by_import, reached

# What a training's result depends on, besides its configs and data: the model, the training
# loop, checkpointing, evaluation and the data pipeline, what every job does before ``fit``
# (``start_run``) and the tracks' input wrappers.
RESULT_SOURCES = (
    "circuits/",
    "baselines/",
    "model.py",
    "circuit_graph.py",
    "signatures.py",
    "config.py",
    "graphs.py",
    "regularizer.py",
    "graph_matching.py",
    "training/",
    "checkpoint_io.py",
    "evaluation.py",
    "data/",
    "pipeline/runs.py",
    "pipeline/datasets.py",
    "tracks/common.py",
)


def source_closure(
    entries: Iterable[str], root: str | Path | None = None, include: Iterable[str] = RESULT_SOURCES
) -> list[Path]:
    """The source files a training runs: start from the ``entries`` modules (e.g.
    ``"nac.training.loop"``) and follow every import statement (function-local ones too, found
    by parsing, so the answer never depends on what a process happened to import; the walker is
    ``nac.imports.reached``), keeping and following only files under ``include`` (paths relative
    to the package ``root``, a trailing ``/`` for a folder). The entries' own imports are always
    followed. Sorted; deterministic."""
    root = Path(root) if root is not None else Path(__file__).resolve().parent
    include = tuple(include)

    def allowed(f: Path) -> bool:
        rel = f.relative_to(root).as_posix()
        return any(rel == inc or (inc.endswith("/") and rel.startswith(inc)) for inc in include)

    starts = [f for m in entries if m.split(".")[0] == root.name for f in files_run_by_import(root.parent, m)]
    return sorted(f for f in reached(root.parent, starts, root.name, follow=allowed) if allowed(f))


def source_fingerprint(
    entries: Iterable[str], root: str | Path | None = None, include: Iterable[str] = RESULT_SOURCES
) -> str:
    """sha256 over the relative paths and bytes of ``source_closure(entries, root, include)``."""
    root = Path(root) if root is not None else Path(__file__).resolve().parent
    h = hashlib.sha256()
    for f in source_closure(entries, root, include):
        h.update(f.relative_to(root).as_posix().encode() + b"\0")
        h.update(f.read_bytes() + b"\0")
    return h.hexdigest()
