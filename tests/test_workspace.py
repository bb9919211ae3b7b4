"""Issue 36, case 2: a stage runs the code of the workspace DVC runs it in (the repository, a queued
or ``--temp`` experiment's copy), never the checkout an editable install points at.

dvc.yaml runs every stage as ``python -m stages.<x>`` from the workspace root: ``-m`` puts the
working directory first on ``sys.path``, before the editable install's finder (which setuptools
appends to ``sys.meta_path``), so ``import nac`` finds the workspace's own ``nac/``. The old
``python stages/<x>.py`` put ``stages/`` first instead, and ``nac`` came from the install's
checkout: a queued experiment started after an edit of the workspace ran the edited code.
Under DVC (``DVC_STAGE`` set) a stage that still imports another checkout's ``nac`` stops."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nac.pipeline.params import ParamsError, check_workspace

ROOT = Path(__file__).resolve().parents[1]
STAGES = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"]


def _cmd(stage: dict) -> str:
    return (stage.get("do") or stage)["cmd"]


@pytest.mark.parametrize("name", list(STAGES))
def test_every_stage_runs_as_a_module_from_its_workspace(name):
    assert re.match(r"^python -m stages\.\w+( |$)", _cmd(STAGES[name])), _cmd(STAGES[name])


def test_a_stage_imports_nac_from_its_own_working_tree(tmp_path):
    """A copy of the repository whose ``nac`` announces itself, run with dvc.yaml's ``validate``
    command and no PYTHONPATH, as DVC runs it in a queued experiment's copy: the copy's ``nac`` is
    the one imported, whatever checkout the environment's editable install points at (on the old
    ``python stages/validate.py`` this test fails: ``nac`` came from the install, or, with none,
    was not found)."""
    for name in ("nac", "stages"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    init = tmp_path / "nac" / "__init__.py"
    marker = (
        "import sys as _s, os as _o\n"
        "_s.stderr.write('nac from ' + _o.path.dirname(__file__) + '\\n')\n"
        "raise SystemExit(0)\n"
    )
    init.write_text(marker + init.read_text(encoding="utf-8"), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    proc = subprocess.run(_cmd(STAGES["validate"]), shell=True, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert f"nac from {tmp_path / 'nac'}" in proc.stderr, proc.stderr[-2000:]


def test_under_dvc_a_stage_refuses_another_checkout_s_nac(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DVC_STAGE", raising=False)
    check_workspace("train")  # by hand: not checked
    monkeypatch.setenv("DVC_STAGE", "train")
    with pytest.raises(
        ParamsError, match=rf"stage 'train' runs the nac of {re.escape(str(ROOT))}, not of the workspace"
    ):
        check_workspace("train")
    monkeypatch.chdir(ROOT)
    check_workspace("train")


@pytest.mark.slow  # ~1 min: a git repository, dvc init, a queued experiment run by DVC's queue worker
def test_a_queued_experiment_runs_its_snapshot_not_a_later_edit(tmp_path):
    """The issue's case: an experiment queued with ``dvc exp run --queue``, then the workspace's
    code edited, then the queue started. ``PYTHONPATH`` points at the workspace, as an editable
    install of it does. The queued run must run the code of its snapshot (the marker the edit
    prints must not appear in its log); the old ``python stages/<x>.py`` imported the edited
    workspace's ``nac``."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("nac", "stages", "conf"):
        shutil.copytree(ROOT / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("dvc.yaml", "params.yaml", "pyproject.toml"):
        shutil.copy(ROOT / name, repo / name)
    env = {**os.environ, "PYTHONPATH": str(repo), "DVC_NO_ANALYTICS": "1"}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])

    def run(*cmd: str) -> str:
        proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"{cmd}: {proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        return proc.stdout + proc.stderr

    git = ("git", "-c", "user.name=t", "-c", "user.email=t@example.invalid")
    run("git", "init", "-q")
    run(sys.executable, "-m", "dvc", "init", "-q")
    shutil.copy(ROOT / ".dvc" / "config", repo / ".dvc" / "config")
    run("git", "add", "-A")
    run(*git, "commit", "-qm", "copy")
    run(sys.executable, "-m", "dvc", "repro", "-s", "validate")
    run("git", "add", "-A")
    run(*git, "commit", "-qm", "validated")
    run(
        sys.executable,
        "-m",
        "dvc",
        "exp",
        "run",
        "--queue",
        "-n",
        "queued",
        "-S",
        "prune.throughput_repeats=7",
        "validate",
    )
    init = repo / "nac" / "__init__.py"  # the edit, after the experiment was queued
    init.write_text(
        init.read_text(encoding="utf-8") + "\nimport sys\nprint('EDITED-WORKSPACE', file=sys.stderr)\n",
        encoding="utf-8",
    )
    run(sys.executable, "-m", "dvc", "queue", "start", "-j", "1")
    for _ in range(300):
        status = run(sys.executable, "-m", "dvc", "queue", "status")
        if "Success" in status or "Failed" in status:
            break
        subprocess.run(["sleep", "1"])
    assert "Success" in status, status
    logs = run(sys.executable, "-m", "dvc", "queue", "logs", "queued")
    assert "Running stage 'validate'" in logs and "EDITED-WORKSPACE" not in logs, logs[-3000:]
    run(sys.executable, "-m", "dvc", "queue", "stop", "--kill")
