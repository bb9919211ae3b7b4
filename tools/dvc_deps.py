"""dvc.yaml's ``nac`` deps, exact: check them, print them, or rewrite them.

    python tools/dvc_deps.py            # check every stage; exit 1 naming what is missing or unused
    python tools/dvc_deps.py --show report train   # the exact nac deps of those stages (all if none named)
    python tools/dvc_deps.py --write    # rewrite each stage's run of `- nac/...` dep lines to the exact set,
                                        # and its params: to the keys its code reads (STAGE_PARAMS)

Run it from the repository root after a stage script or a ``nac`` module it reaches gains or loses an
import (``tests/test_dvc_deps.py`` runs the check and names this command when it fails).

A stage declares every ``nac`` file its script can run, and nothing of ``nac`` it cannot run. "Can
run" is the static import closure (``nac.imports.reached``): the stage's script (``python
stages/<x>.py ...`` in its ``cmd``; for ``foreach``/``matrix`` stages the template's script) and the
scripts it executes (``stages/notebooks.py`` runs every ``notebooks/*.py``) are parsed with
:mod:`ast`, and every import is followed, module level and function-local alike (``import a.b``,
``from a import b`` where ``b`` may be a submodule, relative imports,
``importlib.import_module("...")`` with a literal name), together with the ``__init__.py`` of every
package on the way (importing ``nac.x.y`` runs ``nac/__init__.py`` and ``nac/x/__init__.py``). Only
files under ``nac/`` are kept, plus the data a reached module reads: a file beside it whose name its
source spells (``switches.yaml``), or a folder of data (no ``.py``) beside it whose name its source
spells as a string (``"templates"``). A reached file must be covered by a declared dep (the same
path, or a folder holding it); a declared ``nac/...`` dep must cover at least one reached file, and
a declared ``nac`` folder must hold no source file the stage never runs (else a change there would
rerun the stage for nothing: list the files instead).

A stage's ``params:`` are exactly ``STAGE_PARAMS[stage]`` of ``nac/pipeline/stage_params.py``,
the declaration the stage's code loads its params through (``load_params(stage=...)`` hands it
only those keys), so a stage cannot read a param whose change would not rerun it.

No dvc import and of ``nac`` only the walker and the params declaration: dvc.yaml is read with yaml,
the sources with ast.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's nac, whatever is installed
from nac.imports import reached  # noqa: E402  (the walker; it imports nothing else of nac)
from nac.pipeline.stage_params import ALL, STAGE_PARAMS  # noqa: E402  (the params each stage reads; no other import)

PKG = "nac"
# Scripts that execute other scripts (not by importing them): script -> glob of the executed ones.
EXECUTES = {"stages/notebooks.py": "notebooks/*.py"}
_SCRIPT = re.compile(r"\bpython3?\s+(?:-[^m\s]\S*\s+)*(?:-m\s+(stages\.\w+)|(\S+\.py))\b")
COMMAND = "python tools/dvc_deps.py --write"


# ---- dvc.yaml --------------------------------------------------------------------------------
def stages(root: Path = ROOT) -> dict[str, dict]:
    """dvc.yaml's stages, by name."""
    return yaml.safe_load((root / "dvc.yaml").read_text(encoding="utf-8"))["stages"]


def _body(stage: dict) -> dict:
    return stage["do"] if "do" in stage else stage  # foreach stages keep cmd/deps under `do`


def scripts(stage: dict) -> list[str]:
    """The scripts of a stage's ``cmd``: ``python <script>.py`` and ``python -m stages.<x>``."""
    cmds = _body(stage)["cmd"]
    found = [
        mod.replace(".", "/") + ".py" if mod else path  # `python -m stages.x` runs stages/x.py
        for c in ([cmds] if isinstance(cmds, str) else cmds)
        for mod, path in _SCRIPT.findall(c)
    ]
    if not found:
        raise ValueError(f"no `python <script>.py` or `python -m stages.<x>` in cmd {cmds!r}")
    return found


def declared(stage: dict) -> list[str]:
    """A stage's deps as written (a dep with options is its path)."""
    return [d if isinstance(d, str) else next(iter(d)) for d in _body(stage).get("deps", [])]


def covers(dep: str, rel: str) -> bool:
    """Whether dep ``dep`` (a file or folder) covers the path ``rel``."""
    dep = dep.rstrip("/")
    return rel == dep or rel.startswith(dep + "/")


def _data_files(root: Path, files: set[str]) -> set[str]:
    """Non-Python data of ``nac`` that a reached module reads: a file beside the module whose name
    its source spells (``Path(__file__).with_name("switches.yaml")``), and a folder beside it that
    holds no Python source and whose name its source spells as a string (``"templates"``)."""
    out = set()
    for f in files:
        src = (root / f).read_text(encoding="utf-8")
        strings = {
            n.value for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Constant) and isinstance(n.value, str)
        }
        for p in (root / f).parent.iterdir():
            if p.is_file() and p.suffix not in (".py", ".pyc") and p.name in src:
                out.add(p.relative_to(root).as_posix())
            elif p.is_dir() and p.name in strings and p.name != "__pycache__" and not any(p.rglob("*.py")):
                out.add(p.relative_to(root).as_posix())
    return out


def _run_files(stage: dict, root: Path) -> tuple[list[str], set[str]]:
    """(the scripts a stage runs, the ``nac`` files and data they reach), paths relative to root."""
    run = scripts(stage)
    for s in list(run):
        if s in EXECUTES:
            run += sorted(p.relative_to(root).as_posix() for p in root.glob(EXECUTES[s]))
    files = {f.relative_to(root).as_posix() for f in reached(root, [root / s for s in run])}
    return run, files | _data_files(root, files)


def check_stage(name: str, stage: dict, root: Path = ROOT) -> tuple[list[str], list[str]]:
    """(missing, unused): reached files no dep covers (plus undeclared scripts the stage runs),
    and declared ``nac/...`` deps that cover no reached file, or folders that also cover source
    files never run (annotated with those files)."""
    deps = declared(stage)
    run, files = _run_files(stage, root)
    needed = sorted(files | set(run))
    missing = [f for f in needed if not any(covers(d, f) for d in deps)]
    unused = []
    for d in deps:
        if not covers(PKG, d):
            continue
        if not any(covers(d, f) for f in files):
            unused.append(d)
        elif (root / d).is_dir():
            idle = sorted(
                p.relative_to(root).as_posix()
                for p in (root / d).rglob("*.py")
                if "__pycache__" not in p.parts and p.relative_to(root).as_posix() not in files
            )
            if idle:
                unused.append(f"{d} (folder also holds files never run: {', '.join(idle)})")
    return missing, unused


def declared_params(stage: dict) -> list[str] | None:
    """A stage's ``params:`` as written (None: the whole of params.yaml, ``- params.yaml:``)."""
    out = []
    for p in _body(stage).get("params", []):
        if isinstance(p, dict):
            if list(p) == ["params.yaml"] and not p["params.yaml"]:
                return ALL
            raise ValueError(f"params entry {p!r}: only params.yaml's keys are read by the stages")
        out.append(p)
    return out


def params_problem(name: str, stage: dict) -> str:
    """How a stage's dvc.yaml ``params:`` differ from the keys its code reads
    (``nac.pipeline.stage_params.STAGE_PARAMS``, the view ``load_params(stage=...)`` hands it);
    empty when they are the same."""
    if name not in STAGE_PARAMS:
        return f"dvc.yaml stage {name!r} has no entry in STAGE_PARAMS of nac/pipeline/stage_params.py; add one"
    have, want = declared_params(stage), STAGE_PARAMS[name]
    if have == want or (have is not ALL and want is not ALL and sorted(have) == sorted(want)):
        return ""
    show = lambda v: "the whole of params.yaml" if v is ALL else ", ".join(v)
    extra = sorted(set(have or []) - set(want or [])) if ALL not in (have, want) else []
    lacking = sorted(set(want or []) - set(have or [])) if ALL not in (have, want) else []
    return (
        f"dvc.yaml stage {name!r}: params are not the keys its code reads (nac/pipeline/stage_params.py); "
        f"set them to: [{show(want)}]"
        + (f"; read but not declared: {', '.join(lacking)}" if lacking else "")
        + (f"; declared but never read: {', '.join(extra)}" if extra else "")
    )


def problems(name: str, stage: dict, root: Path = ROOT) -> str:
    """What is wrong with a stage's deps (and params), in words; empty when they are exact."""
    missing, unused = check_stage(name, stage, root)
    param_msg = params_problem(name, stage)
    if not missing and not unused:
        return param_msg
    msg = [param_msg] if param_msg else []
    msg += [f"dvc.yaml stage {name!r} ({', '.join(scripts(stage))}): deps are not exact (fix: `{COMMAND}`)."]
    if missing:
        msg.append("  run but not declared (add a dep covering them):\n" + "\n".join(f"    - {m}" for m in missing))
    if unused:
        msg.append(
            "  declared but never run (remove, or narrow a folder to its files):\n"
            + "\n".join(f"    - {u}" for u in unused)
        )
    return "\n".join(msg)


# ---- the exact set, and rewriting dvc.yaml to it ------------------------------------------------
def exact_deps(stage: dict, root: Path = ROOT) -> list[str]:
    """The minimal ``nac`` deps of a stage: reached files and data, with a folder in place of its
    files when the stage runs every source file in it (and in its subfolders)."""
    _, files = _run_files(stage, root)
    sources = {f for f in files if f.endswith(".py")}

    def whole(folder: Path) -> bool:
        srcs = [p for p in folder.rglob("*.py") if "__pycache__" not in p.parts]
        return bool(srcs) and all(p.relative_to(root).as_posix() in sources for p in srcs)

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
    lines = path.read_text(encoding="utf-8").split("\n")
    by_name = stages(path.parent)
    changed, name, i = 0, None, 0
    while i < len(lines):
        m = re.match(r"^  ([A-Za-z_][\w-]*):", lines[i])
        if m:
            name = m.group(1)
        if name in by_name and re.match(r"^\s+- nac/", lines[i]):
            j = i
            while j < len(lines) and re.match(r"^\s+- nac/", lines[j]):
                j += 1
            indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
            new = [f"{indent}- {d}" for d in exact_deps(by_name[name], path.parent)]
            if new != lines[i:j]:
                changed += 1
            lines[i:j] = new
            i += len(new)
            continue
        i += 1
    path.write_text("\n".join(lines), encoding="utf-8")
    return changed


def write_exact_params(path: Path = ROOT / "dvc.yaml") -> int:
    """Rewrite each stage's ``params:`` to ``STAGE_PARAMS`` (a block list); returns the number of
    stages changed. Comments on the lines of the old list are dropped, the rest is kept."""
    lines = path.read_text(encoding="utf-8").split("\n")
    by_name = stages(path.parent)
    changed, name, i = 0, None, 0
    while i < len(lines):
        m = re.match(r"^  ([A-Za-z_][\w-]*):", lines[i])
        if m:
            name = m.group(1)
        p = re.match(r"^(\s+)params:(.*)$", lines[i])
        if name in by_name and p and name in STAGE_PARAMS and not params_problem(name, by_name[name]) == "":
            indent, rest = p.group(1), p.group(2).strip()
            j = i + 1
            if rest.startswith("["):
                j = i
                while "]" not in lines[j].split("#")[0]:
                    j += 1
                j += 1
            else:
                while j < len(lines) and lines[j].startswith(indent + "  ") and lines[j].strip().startswith("-"):
                    j += 1
            want = STAGE_PARAMS[name]
            items = ["params.yaml:"] if want is ALL else want
            lines[i:j] = [f"{indent}params:"] + [f"{indent}  - {k}" for k in items]
            changed += 1
        i += 1
    path.write_text("\n".join(lines), encoding="utf-8")
    return changed


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    ap = argparse.ArgumentParser(prog="python tools/dvc_deps.py", description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite dvc.yaml's nac deps to the exact set")
    mode.add_argument(
        "--show", nargs="*", metavar="STAGE", help="print the exact nac deps of these stages (all if none)"
    )
    args = ap.parse_args(argv)
    by_name = stages(root)
    if args.write:
        print(f"dvc.yaml: rewrote the nac deps of {write_exact_deps(root / 'dvc.yaml')} stage(s)")
        print(f"dvc.yaml: rewrote the params of {write_exact_params(root / 'dvc.yaml')} stage(s)")
        return 0
    if args.show is not None:
        unknown = [s for s in args.show if s not in by_name]
        if unknown:
            ap.error(f"no stage {unknown} in dvc.yaml (stages: {', '.join(by_name)})")
        for name in args.show or by_name:
            print(f"{name}:\n" + "\n".join(f"  - {d}" for d in exact_deps(by_name[name], root)))
        return 0
    bad = [msg for name, st in by_name.items() if (msg := problems(name, st, root))]
    print("\n".join(bad) if bad else f"dvc.yaml: the nac deps of all {len(by_name)} stages are exact")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
