"""The fingerprint of the sources a training runs: the files its result depends on, found by
following the import statements from its entry modules (``source_closure``), hashed
(``source_fingerprint``). A checkpoint is resumed only under the same fingerprint."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path
from typing import Iterable

# What a training's result depends on, besides its configs and data: the model, the training
# loop, checkpointing, evaluation and the data pipeline, the one build-then-fit (``train_run``)
# and the tracks' input wrappers.
RESULT_SOURCES = (
    "circuits/",
    "baselines/",
    "model.py",
    "config.py",
    "graphs.py",
    "regularizer.py",
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
    by parsing, so the answer never depends on what a process happened to import), keeping and
    following only files under ``include`` (paths relative to the package ``root``, a trailing
    ``/`` for a folder). The entries' own imports are always followed. Sorted; deterministic."""
    root = Path(root) if root is not None else Path(__file__).resolve().parent
    pkg, include = root.name, tuple(include)

    def allowed(f: Path) -> bool:
        rel = f.relative_to(root).as_posix()
        return any(rel == inc or (inc.endswith("/") and rel.startswith(inc)) for inc in include)

    def files_of(module: str) -> list[Path]:
        """The module's file and the ``__init__`` of every package above it (they run on import)."""
        parts = module.split(".")
        if parts[0] != pkg:
            return []
        out = [root.joinpath(*parts[1:i], "__init__.py") for i in range(1, len(parts))]
        rel = root.joinpath(*parts[1:])
        out += [rel.with_name(rel.name + ".py") if len(parts) > 1 else root / "__init__.py", rel / "__init__.py"]
        return [f for f in out if f.is_file()]

    def imports(f: Path) -> set[str]:
        module = ".".join((pkg, *f.relative_to(root).with_suffix("").parts))
        package = module.rsplit(".", 1)[0] if f.name != "__init__.py" else module.removesuffix(".__init__")
        names = set()
        for node in ast.walk(ast.parse(f.read_bytes(), filename=str(f))):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                names.add(base)
                names.update(f"{base}.{a.name}" for a in node.names)  # `from pkg import submodule`
        return {n for n in names if n == pkg or n.startswith(pkg + ".")}

    seen: set[Path] = set()
    kept: set[Path] = set()
    queue = [(f, True) for m in entries for f in files_of(m)]
    while queue:
        f, is_entry = queue.pop()
        if f in seen:
            continue
        seen.add(f)
        if allowed(f):
            kept.add(f)
        elif not is_entry:
            continue
        for name in imports(f):
            queue.extend((g, False) for g in files_of(name))
    return sorted(kept)


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
