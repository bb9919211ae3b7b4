"""dvc.yaml's ``deps:`` are exact for the ``nac`` package: a stage declares every ``nac`` source
file (and data file) its script can run, and nothing of ``nac`` it cannot run. The rule and the
generator live in ``tools/dvc_deps.py``, the import walker in ``nac/imports.py``; this file only
checks. When a stage's deps are not exact, ``python tools/dvc_deps.py --write`` rewrites them
(``--show STAGE`` prints them).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import dvc_deps  # noqa: E402
from dvc_deps import PKG, ROOT, check_stage, covers, declared, problems, reached, scripts, stages  # noqa: E402

STAGES = stages()


@pytest.mark.parametrize("name", list(STAGES))
def test_stage_deps_are_exact(name):
    """The failure names the stage, the files missing or unused, and the command that fixes it."""
    msg = problems(name, STAGES[name])
    assert not msg, msg


def test_a_report_helper_reruns_only_the_report():
    """Editing ``nac/report/<helper>.py`` (tables, figures, claims, ...) or the report's prose
    (``templates/``, ``discrepancies.yaml``, ``switches.yaml``) reruns ``report`` and no training or
    evaluation; ``nac/report/notebooks.py`` (the executor) only ``notebooks``."""
    helpers = sorted(
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / PKG / "report").rglob("*")
        if p.is_file() and p.name != "__init__.py" and "__pycache__" not in p.parts
    )
    assert any(f.endswith(".j2") for f in helpers) and any(f.endswith("discrepancies.yaml") for f in helpers)
    assert helpers
    for f in helpers:
        rerun = sorted(n for n, st in STAGES.items() if any(covers(d, f) for d in declared(st)))
        assert rerun == (["notebooks"] if f.endswith("/notebooks.py") else ["report"]), (f, rerun)


def test_the_kernel_is_a_dep_of_every_training():
    """Every stage that can run the training loop declares ``nac/circuits/kernel.py`` (eq. 2), so
    editing the kernel retrains every model that uses it."""
    trainings = []
    for name, st in STAGES.items():
        paths = [ROOT / s for s in scripts(st)]
        if ROOT / PKG / "training" / "loop.py" in reached(ROOT, paths):
            trainings.append(name)
            assert any(covers(d, f"{PKG}/circuits/kernel.py") for d in declared(st)), name
    assert {"train", "train_points", "train_listops", "train_text", "train_nlvr", "pretrain"} <= set(trainings)


# ---- the walker itself -----------------------------------------------------------------------
def test_walker_follows_every_kind_of_import(tmp_path):
    def write(rel, text=""):
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)

    write("pk/__init__.py")
    write("pk/a/__init__.py", "from . import sub\n")  # relative, submodule
    write("pk/a/sub.py", "from ..b import helper\n")  # relative, two levels
    write("pk/b.py", "def helper():\n    import pk.c.deep\n")  # function-local, dotted
    write("pk/c/__init__.py")
    write("pk/c/deep.py")
    write("pk/ns/mod.py", "import importlib\nimportlib.import_module('pk.lazy')\n")  # namespace pkg
    write("pk/lazy.py")
    write("pk/attr.py", "X = 1\n")
    write("pk/unused.py")
    write(
        "main.py", "import os\nfrom pk.a import sub\n\ndef f():\n    from pk.ns import mod\n    from pk import attr\n"
    )
    got = {f.relative_to(tmp_path).as_posix() for f in reached(tmp_path, [tmp_path / "main.py"], pkg="pk")}
    assert got == {
        "pk/__init__.py",
        "pk/a/__init__.py",
        "pk/a/sub.py",
        "pk/b.py",
        "pk/c/__init__.py",
        "pk/c/deep.py",
        "pk/ns/mod.py",
        "pk/lazy.py",
        "pk/attr.py",
    }


def test_covers_is_path_aware():
    assert covers("nac/data", "nac/data/registry.py") and covers("nac/data/", "nac/data/x.py")
    assert covers("nac/model.py", "nac/model.py")
    assert not covers("nac/data", "nac/data_extra.py") and not covers("nac/model.py", "nac/model.pyc")


def test_check_stage_reports_missing_unused_and_overbroad(tmp_path):
    for rel, text in {
        "stages/s.py": "from nac.a import x\n",
        "nac/__init__.py": "",
        "nac/a/__init__.py": "",
        "nac/a/x.py": "",
        "nac/a/idle.py": "",
        "nac/b.py": "",
    }.items():
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
    for rel, text in {
        "pk/__init__.py": "_LAZY = {'Model': 'pk.model'}\n",
        "pk/model.py": "",
        "pk/data.py": "",
        "a.py": "from pk import Model\n",
        "b.py": "import pk.data\n",
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    got = {f.relative_to(tmp_path).as_posix() for f in reached(tmp_path, [tmp_path / "a.py"], pkg="pk")}
    assert got == {"pk/__init__.py", "pk/model.py"}
    got = {f.relative_to(tmp_path).as_posix() for f in reached(tmp_path, [tmp_path / "b.py"], pkg="pk")}
    assert got == {"pk/__init__.py", "pk/data.py"}


def test_nac_lazy_names_resolve():
    import nac
    from nac.config import ModelConfig
    from nac.registry import build_model

    assert nac.ModelConfig is ModelConfig and nac.build_model is build_model
    assert set(nac.__all__) >= {"NAC", "ModelConfig", "VARIANTS", "build_model"}


def test_stages_do_not_import_torchvision_to_validate_params():
    """Every stage validates params.yaml through the dataset registry, which imports every
    builder; torchvision (~1.5 s with torch._dynamo) is imported only where CIFAR is read.
    (Not a timing: which modules load is what makes a stage's start cheap or not.)"""
    code = (
        "import sys; from nac.pipeline.params import load_params; from nac.data.registry import available; "
        "available(); import nac.tracks.image, nac.tracks.common, nac.tracks.fewshot; "
        "print('torchvision' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr


@pytest.mark.parametrize("stage", ["generate", "download", "prepare"])
def test_data_stages_run_without_importing_torch(stage, tmp_path):
    """The data stages generate and cache arrays with numpy; importing torch would cost each about
    a second."""
    code = (
        "import runpy, sys; sys.argv = ['x', '--help']; "
        f"runpy.run_path({str(ROOT / 'stages' / (stage + '.py'))!r}, run_name='__main__')"
    )
    code = (
        f"import sys\ntry:\n    exec({code!r})\nexcept SystemExit:\n    pass\n"  # --help: the module-level imports
        "from nac.data.registry import available\navailable()\n"  # params validation imports every builder
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False", out.stdout + out.stderr


def test_a_data_file_a_reached_module_reads_is_a_dep(tmp_path):
    for rel, text in {
        "stages/s.py": "from nac import t\n",
        "nac/__init__.py": "",
        "nac/t.py": "ROWS = Path(__file__).with_name('rows.yaml')\n",
        "nac/rows.yaml": "[]\n",
        "nac/other.yaml": "[]\n",
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    stage = {"cmd": "python stages/s.py", "deps": ["stages/s.py", "nac/__init__.py", "nac/t.py"]}
    assert check_stage("s", stage, root=tmp_path) == (["nac/rows.yaml"], [])
    stage["deps"].append("nac/rows.yaml")
    assert check_stage("s", stage, root=tmp_path) == ([], [])


def test_a_data_folder_a_reached_module_names_is_a_dep(tmp_path):
    """A folder of data (no ``.py``) beside a reached module whose source names it as a string (the
    report's ``templates``) is a dep as a folder; a package folder named in a string is not data."""
    for rel, text in {
        "stages/s.py": "from nac import t\n",
        "nac/__init__.py": "",
        "nac/t.py": "T = Path(__file__).with_name('templates')\nK = 'pkg'\n",
        "nac/templates/a.md.j2": "x\n",
        "nac/pkg/__init__.py": "",
        "nac/pkg/notes.txt": "x\n",
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    stage = {"cmd": "python stages/s.py", "deps": ["stages/s.py", "nac/__init__.py", "nac/t.py"]}
    assert check_stage("s", stage, root=tmp_path) == (["nac/templates"], [])
    stage["deps"].append("nac/templates")
    assert check_stage("s", stage, root=tmp_path) == ([], [])


def test_the_command_checks_shows_and_writes_the_exact_deps(tmp_path, capsys, monkeypatch):
    """``python tools/dvc_deps.py``: exit 1 naming the fix when a dep is missing, ``--show`` prints
    the exact set, ``--write`` rewrites only the ``nac`` lines (other deps and comments stay), after
    which the check passes."""
    monkeypatch.setitem(dvc_deps.STAGE_PARAMS, "s", [])  # a stage that reads no param
    for rel, text in {
        "stages/s.py": "from nac import t\n",
        "nac/__init__.py": "",
        "nac/t.py": "",
        "nac/u.py": "",
        "dvc.yaml": (
            "stages:\n  s:\n    cmd: python stages/s.py\n    deps:\n      - stages/s.py\n"
            "      - nac/__init__.py\n      - nac/u.py\n      - data/x  # kept\n"
        ),
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert dvc_deps.main([], root=tmp_path) == 1
    out = capsys.readouterr().out
    assert "nac/t.py" in out and "nac/u.py" in out and dvc_deps.COMMAND in out
    assert dvc_deps.main(["--show", "s"], root=tmp_path) == 0
    assert capsys.readouterr().out == "s:\n  - nac/__init__.py\n  - nac/t.py\n"
    assert dvc_deps.main(["--write"], root=tmp_path) == 0
    assert (
        (tmp_path / "dvc.yaml")
        .read_text()
        .endswith("      - stages/s.py\n      - nac/__init__.py\n      - nac/t.py\n      - data/x  # kept\n")
    )
    assert dvc_deps.main([], root=tmp_path) == 0


def test_every_stage_says_what_it_does():
    """`dvc stage list` shows each stage's `desc:` (under `do:` for foreach stages)."""
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    lacking = [n for n, st in stages.items() if not (st.get("desc") or (st.get("do") or {}).get("desc"))]
    assert not lacking, f"stages without desc: {lacking}"


def test_generate_makes_every_embedded_dataset_and_downloads_the_rest_one_by_one():
    """One ``generate`` stage writes the raw files and cache of every embedded dataset and reads
    exactly their ``data.<name>`` sections; ``download``/``prepare`` run once per ``data.downloads``
    entry, so a change to one downloaded dataset reruns only its own two stages."""
    from nac.data.registry import embedded

    gen = STAGES["generate"]
    names = embedded()
    assert sorted(gen["params"]) == sorted(["data.root", *(f"data.{n}" for n in names)])  # root: where they go
    want = {f"${{data.root}}/{kind}/{n}" for n in names for kind in ("raw", "cache")}
    assert len(gen["outs"]) == len(want) and set(gen["outs"]) == want
    for stage in ("download", "prepare"):
        assert STAGES[stage]["foreach"] == "${data.downloads}"
        assert STAGES[stage]["do"]["params"] == ["data.root", "data.${item}"]


@pytest.mark.parametrize("profile", ["smoke", "mini", "paper"])
def test_every_profile_has_the_params_of_the_data_stages(profile):
    """DVC stops a stage whose param is missing from params.yaml: the generate stage runs in every
    profile, so every profile has the embedded datasets' sections (conf/base.yaml); ``data.downloads``
    (the download/prepare foreach) is every downloaded dataset of ``data.datasets`` (empty in smoke
    and mini)."""
    from nac.data.registry import embedded
    from nac.pipeline.params import compose

    data = compose([f"profile={profile}"])["data"]
    assert all(p.removeprefix("data.") in data for p in STAGES["generate"]["params"])
    assert data["downloads"] == [ds for ds in data["datasets"] if ds not in embedded()]
    assert bool(data["downloads"]) == (profile == "paper")


@pytest.mark.slow  # in CI's slow run: the default run (5 min) went past 5 min on a slower VM (2026-11-27)
def test_dvc_lock_holds_only_the_stages_of_dvc_yaml(tmp_path):
    """``tools/prune_lock.py``: the committed dvc.lock has no entry of a stage dvc.yaml no longer
    defines (DVC keeps them, and parses all of dvc.lock each time a stage finishes), and the
    check can fail: a stale entry added to a copy is named, and pruning drops only it."""
    import shutil

    import prune_lock

    assert prune_lock.stale_entries(ROOT) == []
    for name in ("dvc.yaml", "dvc.lock", "params.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / ".dvc").mkdir()
    (tmp_path / ".dvc" / "config").write_text("[core]\n    no_scm = true\n")
    lock = yaml.safe_load((tmp_path / "dvc.lock").read_text())
    kept = set(lock["stages"])
    lock["stages"]["train@gone-0"] = {"cmd": "python stages/train.py gone"}
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False))
    assert prune_lock.stale_entries(tmp_path) == ["train@gone-0"]
    assert prune_lock.prune(tmp_path) == ["train@gone-0"]
    assert set(yaml.safe_load((tmp_path / "dvc.lock").read_text())["stages"]) == kept


# ---- params: the keys each stage's code reads ----------------------------------------------------
def test_train_declares_the_ladder_and_the_prior():
    """Issue 36, case 1: ``-S prior=...`` rewrites the ladder's ``nac-<prior>-noreg``/``-randinit``
    runs, so ``train`` (which builds its jobs from ``image.ladder``) must rerun; on the old dvc.yaml
    neither key was a param of ``train`` and ``dvc exp run -S prior=ring_of_cliques`` skipped it."""
    params = dvc_deps.declared_params(STAGES["train"])
    assert "image.ladder" in params and "prior" in params
    assert not dvc_deps.params_problem("train", STAGES["train"])


def test_a_stage_cannot_read_a_param_it_does_not_declare():
    """``load_params(stage=...)`` hands a stage only its declared keys; reading another key that
    params.yaml has (``[]``, ``get`` or ``in``, at any depth) names the key and the fix, also after
    the view is pickled into a worker process; keys params.yaml lacks behave as in a dict."""
    import pickle

    from nac.pipeline.stage_params import StageParams, UndeclaredParam, project

    full = {
        "device": "cpu",
        "seeds": [0],
        "data": {"root": "data", "shapes": {"n": 1}, "digits": {"n": 2}},
        "prior": {"name": "scale_free"},
        "image": {"dataset": "shapes", "train": {"eval_batch_size": 8, "lr": 1e-3}, "ladder": ["modfc"]},
        "prune": {"runs": ["modfc"]},
    }
    view = project(full, "prune")
    for v in (view, pickle.loads(pickle.dumps(view))):
        assert isinstance(v, StageParams)
        assert v["image"]["train"]["eval_batch_size"] == 8 and v["data"]["shapes"] == {"n": 1}
        assert v.get("profile", "x") == "x"  # not in params.yaml at all: a dict's behaviour
        for read in (
            lambda: v["prior"],
            lambda: v.get("prior"),
            lambda: "prior" in v,
            lambda: v["image"]["ladder"],
            lambda: v["image"]["train"].get("lr", 1.0),
            lambda: v["data"]["digits"],
        ):
            with pytest.raises(UndeclaredParam, match=r"stage 'prune' reads params key '[\w.]+'.*stage_params.py"):
                read()
    assert project(full, "validate") is full


def test_the_params_check_names_what_differs(tmp_path):
    """A dvc.yaml whose ``train`` lacks ``image.ladder`` fails the check, naming the key and the fix."""
    stage = {"cmd": "python stages/train.py", "params": [p for p in STAGE_PARAMS_TRAIN if p != "image.ladder"]}
    msg = dvc_deps.params_problem("train", stage)
    assert "read but not declared: image.ladder" in msg and "set them to" in msg


STAGE_PARAMS_TRAIN = dvc_deps.STAGE_PARAMS["train"]
