"""dvc.yaml's ``deps:`` are exact for the ``nac`` package: a stage declares every ``nac`` source
file its script can run, and nothing of ``nac`` it cannot run.

"Can run" is the static import closure: the stage's script (``python stages/<x>.py ...`` in its
``cmd``; for ``foreach``/``matrix`` stages the template's script) and the scripts it executes
(``stages/notebooks.py`` runs every ``notebooks/*.py``) are parsed with :mod:`ast`, and every
import is followed, module level and function-local alike (``import a.b``, ``from a import b``
where ``b`` may be a submodule, relative imports, ``importlib.import_module("...")`` with a
literal name), together with the ``__init__.py`` of every package on the way (importing
``nac.x.y`` runs ``nac/__init__.py`` and ``nac/x/__init__.py``). Only files under ``nac/`` are
kept. A reached file must be covered by a declared dep (the same path, or a folder holding it);
a declared ``nac/...`` dep must cover at least one reached file, and a declared ``nac`` folder
must hold no source file the stage never runs (else a change there would rerun the stage for
nothing: list the files instead).

No dvc and no ``nac`` import: dvc.yaml is read with yaml, the sources with ast.
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PKG = "nac"
# Scripts that execute other scripts (not by importing them): script -> glob of the executed ones.
EXECUTES = {"stages/notebooks.py": "notebooks/*.py"}
_SCRIPT = re.compile(r"\bpython3?\s+(?:-\S+\s+)*(\S+\.py)\b")


# ---- the import graph ------------------------------------------------------------------------
def _module_file(root: Path, module: str) -> Path | None:
    """The file that defines ``module`` (``a/b.py`` or ``a/b/__init__.py``), None if neither."""
    base = root.joinpath(*module.split("."))
    for f in (base.with_name(base.name + ".py"), base / "__init__.py"):
        if f.is_file():
            return f
    return None


def _files_run_by_import(root: Path, module: str) -> list[Path]:
    """Files executed by ``import module``: every package ``__init__`` above it, then its own file
    (namespace packages, i.e. folders without ``__init__.py``, contribute no file)."""
    parts = module.split(".")
    out = []
    for i in range(1, len(parts) + 1):
        f = _module_file(root, ".".join(parts[:i]))
        if f is not None:
            out.append(f)
    return out


def _module_name(root: Path, f: Path) -> tuple[str, str]:
    """(module, package) of a file under ``root``; a file outside (a script) is ``__main__`` with
    no package."""
    try:
        rel = f.relative_to(root)
    except ValueError:
        return "__main__", ""
    parts = rel.with_suffix("").parts
    if parts[-1] == "__init__":
        name = ".".join(parts[:-1])
        return name, name
    name = ".".join(parts)
    return name, name.rpartition(".")[0]


@lru_cache(maxsize=None)
def _imports(root: Path, f: Path) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The import statements anywhere in ``f`` as (module, names-imported-from-it) pairs, with
    relative imports resolved; ``import a.b`` is ``("a.b", ())``."""
    _, package = _module_name(root, f)
    out = []
    for node in ast.walk(ast.parse(f.read_bytes(), filename=str(f))):
        if isinstance(node, ast.Import):
            out += [(a.name, ()) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".") if package else []
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            out.append((base, tuple(a.name for a in node.names if a.name != "*")))
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__")):
            out.append((node.args[0].value, ()))
    return tuple(out)


def _lazy_names(root: Path, module: str) -> dict[str, str]:
    """A package's PEP 562 names: the literal ``_LAZY = {name: module}`` dict of its
    ``__init__.py`` (``nac/__init__.py`` loads its public names on first use)."""
    f = _module_file(root, module)
    if f is None or f.name != "__init__.py":
        return {}
    for node in ast.parse(f.read_bytes()).body:
        if (isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_LAZY" for t in node.targets)
                and isinstance(node.value, ast.Dict)):
            return {k.value: v.value for k, v in zip(node.value.keys, node.value.values)}
    return {}


def reached(root: Path, scripts: list[Path], pkg: str = PKG) -> set[Path]:
    """Every file of package ``pkg`` (a folder of ``root``) that running ``scripts`` can execute."""
    seen: set[Path] = set()
    queue = list(scripts)
    while queue:
        f = queue.pop()
        if f in seen:
            continue
        seen.add(f)
        for module, names in _imports(root, f):
            if module != pkg and not module.startswith(pkg + "."):
                continue
            queue += _files_run_by_import(root, module)
            lazy = _lazy_names(root, module)
            for n in names:  # `from a import b`: b is a submodule, a lazy name (PEP 562) or an attribute
                if _module_file(root, f"{module}.{n}"):
                    queue += _files_run_by_import(root, f"{module}.{n}")
                elif n in lazy:
                    queue += _files_run_by_import(root, lazy[n])
    pkg_dir = root / pkg
    return {f for f in seen if pkg_dir in f.parents}


# ---- dvc.yaml --------------------------------------------------------------------------------
def _stages() -> dict[str, dict]:
    return yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]


def _body(stage: dict) -> dict:
    return stage["do"] if "do" in stage else stage  # foreach stages keep cmd/deps under `do`


def _scripts(stage: dict) -> list[str]:
    cmds = _body(stage)["cmd"]
    found = [m for c in ([cmds] if isinstance(cmds, str) else cmds) for m in _SCRIPT.findall(c)]
    assert found, f"no `python <script>.py` in cmd {cmds!r}"
    return found


def _covers(dep: str, rel: str) -> bool:
    dep = dep.rstrip("/")
    return rel == dep or rel.startswith(dep + "/")


def _data_files(root: Path, files: set[str]) -> set[str]:
    """Non-Python files of ``nac`` that a reached module reads: a file beside the module whose name
    its source spells (``Path(__file__).with_name("switches.yaml")``)."""
    out = set()
    for f in files:
        src = (root / f).read_text()
        for p in (root / f).parent.iterdir():
            if p.is_file() and p.suffix not in (".py", ".pyc") and p.name in src:
                out.add(p.relative_to(root).as_posix())
    return out


def check_stage(name: str, stage: dict, root: Path = ROOT) -> tuple[list[str], list[str]]:
    """(missing, unused): reached files no dep covers (plus undeclared scripts the stage runs),
    and declared ``nac/...`` deps that cover no reached file, or folders that also cover source
    files never run (annotated with those files)."""
    deps = [d if isinstance(d, str) else next(iter(d)) for d in _body(stage).get("deps", [])]
    scripts = _scripts(stage)
    for s in list(scripts):
        if s in EXECUTES:
            scripts += sorted(p.relative_to(root).as_posix() for p in root.glob(EXECUTES[s]))
    files = {f.relative_to(root).as_posix() for f in reached(root, [root / s for s in scripts])}
    files |= _data_files(root, files)
    needed = sorted(files | set(scripts))
    missing = [f for f in needed if not any(_covers(d, f) for d in deps)]
    unused = []
    for d in deps:
        if not _covers(PKG, d):
            continue
        if not any(_covers(d, f) for f in files):
            unused.append(d)
        elif (root / d).is_dir():
            idle = sorted(p.relative_to(root).as_posix() for p in (root / d).rglob("*.py")
                          if "__pycache__" not in p.parts and p.relative_to(root).as_posix() not in files)
            if idle:
                unused.append(f"{d} (folder also holds files never run: {', '.join(idle)})")
    return missing, unused


STAGES = _stages()


@pytest.mark.parametrize("name", list(STAGES))
def test_stage_deps_are_exact(name):
    missing, unused = check_stage(name, STAGES[name])
    msg = [f"dvc.yaml stage {name!r} ({', '.join(_scripts(STAGES[name]))}): deps are not exact."]
    if missing:
        msg.append("  run but not declared (add a dep covering them):\n" + "\n".join(f"    - {m}" for m in missing))
    if unused:
        msg.append("  declared but never run (remove, or narrow a folder to its files):\n" + "\n".join(f"    - {u}" for u in unused))
    assert not missing and not unused, "\n".join(msg)


def _declared(stage: dict) -> list[str]:
    return [d if isinstance(d, str) else next(iter(d)) for d in _body(stage).get("deps", [])]


def test_a_report_helper_reruns_only_the_report():
    """Editing ``nac/report/<helper>.py`` (tables, figures, claims, ...) reruns ``report`` and no
    training or evaluation; ``nac/report/notebooks.py`` (the executor) only ``notebooks``."""
    helpers = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / PKG / "report").rglob("*.py")
                     if p.name != "__init__.py" and "__pycache__" not in p.parts)
    assert helpers
    for f in helpers:
        rerun = sorted(n for n, st in STAGES.items() if any(_covers(d, f) for d in _declared(st)))
        assert rerun == (["notebooks"] if f.endswith("/notebooks.py") else ["report"]), (f, rerun)


def test_the_kernel_is_a_dep_of_every_training():
    """Every stage that can run the training loop declares ``nac/circuits/kernel.py`` (eq. 2), so
    editing the kernel retrains every model that uses it."""
    trainings = []
    for name, st in STAGES.items():
        scripts = [ROOT / s for s in _scripts(st)]
        if ROOT / PKG / "training" / "loop.py" in reached(ROOT, scripts):
            trainings.append(name)
            assert any(_covers(d, f"{PKG}/circuits/kernel.py") for d in _declared(st)), name
    assert {"train", "train_points", "train_listops", "train_text", "train_nlvr", "pretrain"} <= set(trainings)


# ---- the walker itself -----------------------------------------------------------------------
def test_walker_follows_every_kind_of_import(tmp_path):
    def write(rel, text=""):
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)

    write("pk/__init__.py")
    write("pk/a/__init__.py", "from . import sub\n")             # relative, submodule
    write("pk/a/sub.py", "from ..b import helper\n")             # relative, two levels
    write("pk/b.py", "def helper():\n    import pk.c.deep\n")   # function-local, dotted
    write("pk/c/__init__.py")
    write("pk/c/deep.py")
    write("pk/ns/mod.py", "import importlib\nimportlib.import_module('pk.lazy')\n")  # namespace pkg
    write("pk/lazy.py")
    write("pk/attr.py", "X = 1\n")
    write("pk/unused.py")
    write("main.py", "import os\nfrom pk.a import sub\n\ndef f():\n    from pk.ns import mod\n    from pk import attr\n")
    got = {f.relative_to(tmp_path).as_posix() for f in reached(tmp_path, [tmp_path / "main.py"], pkg="pk")}
    assert got == {"pk/__init__.py", "pk/a/__init__.py", "pk/a/sub.py", "pk/b.py", "pk/c/__init__.py",
                   "pk/c/deep.py", "pk/ns/mod.py", "pk/lazy.py", "pk/attr.py"}


def test_covers_is_path_aware():
    assert _covers("nac/data", "nac/data/registry.py") and _covers("nac/data/", "nac/data/x.py")
    assert _covers("nac/model.py", "nac/model.py")
    assert not _covers("nac/data", "nac/data_extra.py") and not _covers("nac/model.py", "nac/model.pyc")


def test_check_stage_reports_missing_unused_and_overbroad(tmp_path):
    for rel, text in {"stages/s.py": "from nac.a import x\n", "nac/__init__.py": "", "nac/a/__init__.py": "",
                      "nac/a/x.py": "", "nac/a/idle.py": "", "nac/b.py": ""}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    stage = {"cmd": "python stages/s.py --flag ${item}", "deps": ["stages/s.py", "nac/a", "nac/b.py", "data/x"]}
    missing, unused = check_stage("s", stage, root=tmp_path)
    assert missing == ["nac/__init__.py"]
    assert unused == ["nac/a (folder also holds files never run: nac/a/idle.py)", "nac/b.py"]
    stage["do"] = dict(stage, deps=["stages/s.py", "nac/__init__.py", "nac/a/__init__.py", "nac/a/x.py"])
    assert check_stage("s", stage, root=tmp_path) == ([], [])  # foreach: cmd and deps under `do`


def test_walker_resolves_lazy_package_names(tmp_path):
    """``from pk import Name`` where ``pk/__init__.py`` loads ``Name`` lazily (PEP 562, a literal
    ``_LAZY`` dict) runs the module that defines it; importing a sibling does not."""
    for rel, text in {"pk/__init__.py": "_LAZY = {'Model': 'pk.model'}\n", "pk/model.py": "",
                      "pk/data.py": "", "a.py": "from pk import Model\n", "b.py": "import pk.data\n"}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    got = {f.relative_to(tmp_path).as_posix() for f in reached(tmp_path, [tmp_path / "a.py"], pkg="pk")}
    assert got == {"pk/__init__.py", "pk/model.py"}
    got = {f.relative_to(tmp_path).as_posix() for f in reached(tmp_path, [tmp_path / "b.py"], pkg="pk")}
    assert got == {"pk/__init__.py", "pk/data.py"}


def test_nac_lazy_names_resolve():
    import nac
    from nac.config import ModelConfig
    from nac.model import build_model
    assert nac.ModelConfig is ModelConfig and nac.build_model is build_model
    assert set(nac.__all__) >= {"NAC", "ModelConfig", "VARIANTS", "build_model"}


# ---- `python tests/test_dvc_deps.py --write`: rewrite dvc.yaml's nac deps to the exact set --------
def exact_deps(stage: dict, root: Path = ROOT) -> list[str]:
    """The minimal ``nac`` deps of a stage: reached files, with a folder in place of its files when
    the stage runs every source file in it (and in its subfolders)."""
    scripts = _scripts(stage)
    for s in list(scripts):
        if s in EXECUTES:
            scripts += sorted(p.relative_to(root).as_posix() for p in root.glob(EXECUTES[s]))
    files = {f.relative_to(root).as_posix() for f in reached(root, [root / s for s in scripts])}

    def whole(folder: Path) -> bool:
        srcs = [p for p in folder.rglob("*.py") if "__pycache__" not in p.parts]
        return bool(srcs) and all(p.relative_to(root).as_posix() in files for p in srcs)

    out: set[str] = set()
    for f in files:
        top = None
        for parent in reversed(Path(f).parents[:-1]):  # outermost first, below the package folder
            if parent != Path(PKG) and whole(root / parent):
                top = parent.as_posix()
                break
        out.add(top or f)
    return sorted(out)


def write_exact_deps(path: Path = ROOT / "dvc.yaml") -> int:
    """Replace each stage's run of ``- nac/...`` dep lines by :func:`exact_deps`; returns the
    number of stages changed. Other deps, comments and layout are kept."""
    lines = path.read_text().split("\n")
    stages = _stages()
    changed, name, i = 0, None, 0
    while i < len(lines):
        m = re.match(r"^  ([A-Za-z_][\w-]*):", lines[i])
        if m:
            name = m.group(1)
        if name in stages and re.match(r"^\s+- nac/", lines[i]):
            j = i
            while j < len(lines) and re.match(r"^\s+- nac/", lines[j]):
                j += 1
            indent = lines[i][:len(lines[i]) - len(lines[i].lstrip())]
            new = [f"{indent}- {d}" for d in exact_deps(stages[name])]
            if new != lines[i:j]:
                changed += 1
            lines[i:j] = new
            i += len(new)
            continue
        i += 1
    path.write_text("\n".join(lines))
    return changed


if __name__ == "__main__":
    import sys
    if sys.argv[1:] == ["--write"]:
        print(f"dvc.yaml: rewrote the nac deps of {write_exact_deps()} stage(s)")
    else:
        sys.exit("usage: python tests/test_dvc_deps.py --write   (rewrites dvc.yaml's nac deps)")


def test_stages_do_not_import_torchvision_to_validate_params():
    """Every stage validates params.yaml through the dataset registry, which imports every
    builder; torchvision (~1.5 s with torch._dynamo) is imported only where CIFAR is read.
    (Not a timing: which modules load is what makes a stage's start cheap or not.)"""
    code = ("import sys; from nac.pipeline.params import load_params; from nac.data.registry import available; "
            "available(); import nac.tracks.image, nac.tracks.common, nac.tracks.fewshot; "
            "print('torchvision' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr


@pytest.mark.parametrize("stage", ["download", "prepare"])
def test_data_stages_run_without_importing_torch(stage, tmp_path):
    """The data stages generate and cache arrays with numpy; 16 of them run on mini and smoke,
    and importing torch would cost each about a second."""
    code = ("import runpy, sys; sys.argv = ['x', '--help']; "
            f"runpy.run_path({str(ROOT / 'stages' / (stage + '.py'))!r}, run_name='__main__')")
    code = (f"import sys\ntry:\n    exec({code!r})\nexcept SystemExit:\n    pass\n"  # --help: the module-level imports
            "from nac.data.registry import available\navailable()\n"  # params validation imports every builder
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False", out.stdout + out.stderr


def test_a_data_file_a_reached_module_reads_is_a_dep(tmp_path):
    for rel, text in {"stages/s.py": "from nac import t\n", "nac/__init__.py": "",
                      "nac/t.py": "ROWS = Path(__file__).with_name('rows.yaml')\n", "nac/rows.yaml": "[]\n",
                      "nac/other.yaml": "[]\n"}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    stage = {"cmd": "python stages/s.py", "deps": ["stages/s.py", "nac/__init__.py", "nac/t.py"]}
    assert check_stage("s", stage, root=tmp_path) == (["nac/rows.yaml"], [])
    stage["deps"].append("nac/rows.yaml")
    assert check_stage("s", stage, root=tmp_path) == ([], [])


def test_every_stage_says_what_it_does():
    """`dvc stage list` shows each stage's `desc:` (under `do:` for foreach stages)."""
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    lacking = [n for n, st in stages.items() if not (st.get("desc") or (st.get("do") or {}).get("desc"))]
    assert not lacking, f"stages without desc: {lacking}"
