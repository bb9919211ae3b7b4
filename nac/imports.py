"""The static import graph of a package: which of its files running some scripts (or importing some
modules) can execute, read from the sources with :mod:`ast`, never from what a process happened to
import. One walker, used by dvc.yaml's deps (``tools/dvc_deps.py``), a checkpoint's source
fingerprint (``nac.fingerprint``) and a result set's code fingerprint (``nac.provenance``).

Every import is followed, module level and function-local alike (``import a.b``, ``from a import b``
where ``b`` may be a submodule, relative imports, ``importlib.import_module("...")`` with a literal
name), together with the ``__init__.py`` of every package on the way (importing ``nac.x.y`` runs
``nac/__init__.py`` and ``nac/x/__init__.py``), and a package's PEP 562 names (its ``_LAZY`` dict).
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable


def module_file(root: Path, module: str) -> Path | None:
    """The file under ``root`` that defines ``module`` (``a/b.py`` or ``a/b/__init__.py``), None if neither."""
    base = root.joinpath(*module.split("."))
    for f in (base.with_name(base.name + ".py"), base / "__init__.py"):
        if f.is_file():
            return f
    return None


def files_run_by_import(root: Path, module: str) -> list[Path]:
    """Files executed by ``import module``: every package ``__init__`` above it, then its own file
    (namespace packages, i.e. folders without ``__init__.py``, contribute no file)."""
    parts = module.split(".")
    out = []
    for i in range(1, len(parts) + 1):
        f = module_file(root, ".".join(parts[:i]))
        if f is not None:
            out.append(f)
    return out


def _package_of(root: Path, f: Path) -> str:
    """The package a file under ``root`` belongs to (for relative imports); a file outside (a
    script) has none."""
    try:
        parts = f.relative_to(root).with_suffix("").parts
    except ValueError:
        return ""
    return ".".join(parts[:-1])  # `a/b.py` is in `a`; `a/__init__.py` is package `a` itself


@lru_cache(maxsize=None)
def _parse_imports(source: bytes, filename: str, package: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    # keyed on the bytes: a file edited within a process is parsed again
    out = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Import):
            out += [(a.name, ()) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".") if package else []
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            out.append((base, tuple(a.name for a in node.names if a.name != "*")))
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__")
        ):
            out.append((node.args[0].value, ()))
    return tuple(out)


def imports(root: Path, f: Path) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The import statements anywhere in ``f`` as (module, names-imported-from-it) pairs, with
    relative imports resolved; ``import a.b`` is ``("a.b", ())``."""
    return _parse_imports(f.read_bytes(), str(f), _package_of(root, f))


def lazy_names(root: Path, module: str) -> dict[str, str]:
    """A package's PEP 562 names: the literal ``_LAZY = {name: module}`` dict of its
    ``__init__.py`` (``nac/__init__.py`` loads its public names on first use)."""
    f = module_file(root, module)
    if f is None or f.name != "__init__.py":
        return {}
    for node in ast.parse(f.read_bytes()).body:
        if (
            isinstance(node, ast.Assign)
            and any(getattr(t, "id", None) == "_LAZY" for t in node.targets)
            and isinstance(node.value, ast.Dict)
        ):
            return {k.value: v.value for k, v in zip(node.value.keys, node.value.values)}
    return {}


def reached(
    root: Path, scripts: Iterable[Path], pkg: str = "nac", follow: Callable[[Path], bool] | None = None
) -> set[Path]:
    """Every file of package ``pkg`` (the folder ``root / pkg``) that running ``scripts`` can
    execute. ``follow``: when given, the imports of a reached file are followed only where it says
    True (the ``scripts`` themselves are always followed); the file itself is still reached."""
    seen: set[Path] = set()
    queue = [(f, True) for f in scripts]
    while queue:
        f, start = queue.pop()
        if f in seen:
            continue
        seen.add(f)
        if not start and follow is not None and not follow(f):
            continue
        for module, names in imports(root, f):
            if module != pkg and not module.startswith(pkg + "."):
                continue
            found = files_run_by_import(root, module)
            lazy = lazy_names(root, module)
            for n in names:  # `from a import b`: b is a submodule, a lazy name (PEP 562) or an attribute
                if module_file(root, f"{module}.{n}"):
                    found += files_run_by_import(root, f"{module}.{n}")
                elif n in lazy:
                    found += files_run_by_import(root, lazy[n])
            queue += [(g, False) for g in found]
    pkg_dir = root / pkg
    return {f for f in seen if pkg_dir in f.parents}
