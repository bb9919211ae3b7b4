"""Who may import what (issue 32): the reference forms (``nac.testing``) reach the model through its
public interface and only tests/ and bench/ import them; bench/ imports only ``nac``, the standard
library and installed distributions, never a module of tests/ through a ``sys.path`` edit. Read
from the sources with :mod:`ast` (``nac.imports.imports``), not from what a process imported."""

import ast
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

from nac.imports import imports

ROOT = Path(__file__).resolve().parents[1]
TESTING = ROOT / "nac" / "testing"


def _imports_nac_testing(f: Path) -> bool:
    """Whether ``f`` imports ``nac.testing`` or a module of it (``from nac import testing`` too)."""
    for module, names in imports(ROOT, f):
        if module == "nac.testing" or module.startswith("nac.testing.") or (module == "nac" and "testing" in names):
            return True
    return False


def _edits_sys_path(tree: ast.AST) -> bool:
    """Whether the module reads or edits ``sys.path`` (``sys.path.insert``, ``from sys import path``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", None) == "sys":
            return True
        if isinstance(node, ast.ImportFrom) and node.module == "sys" and any(a.name == "path" for a in node.names):
            return True
    return False


def script_import_problems(folder: Path) -> list[str]:
    """Each ``.py`` file under ``folder`` that touches ``sys.path`` or imports a top-level module
    other than ``nac``, the standard library's or an installed distribution's; a module of tests/
    (or ``tests`` itself) is a problem even where a distribution happens to ship one of that name."""
    local = {"tests", *(f.stem for f in (ROOT / "tests").glob("*.py"))}
    installed = set(packages_distributions())
    problems = []
    for f in sorted(folder.rglob("*.py")):
        if _edits_sys_path(ast.parse(f.read_bytes(), filename=str(f))):
            problems.append(f"{f.name}: sys.path")
        for module, _ in imports(ROOT, f):
            top = module.split(".")[0]
            if top in local or not (top == "nac" or top in sys.stdlib_module_names or top in installed):
                problems.append(f"{f.name}: imports {module}")
    return problems


def test_only_nac_testing_imports_nac_testing():
    """No module of the package outside ``nac/testing/`` imports it: the model, training and
    stage code never run a reference form (and no DVC stage depends on one)."""
    files = [f for f in (ROOT / "nac").rglob("*.py") if TESTING not in f.parents]
    assert files
    assert [str(f.relative_to(ROOT)) for f in files if _imports_nac_testing(f)] == []


def test_nac_testing_imports_nothing_from_tests():
    """The reference forms import the package and installed distributions, not tests/."""
    assert script_import_problems(TESTING) == []


def test_bench_scripts_import_only_nac_and_installed_modules():
    """bench/ reaches the reference forms as ``nac.testing``: no ``sys.path`` edit, no module of tests/."""
    assert script_import_problems(ROOT / "bench") == []
