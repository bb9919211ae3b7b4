"""Issue 36, case 1, end to end: on a finished ``smoke`` run, the README's
``dvc exp run -S prior=ring_of_cliques`` reruns ``train`` (whose ladder names the prior) and ends
with a report; the stages that read no changed param (``generate``) do not rerun. On the old
dvc.yaml ``train`` did not list ``image.ladder`` or ``prior``: DVC skipped it ("didn't change")
and the report stopped with ``missing metrics: .../nac-ring_of_cliques-noreg-0.json``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(cmd: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, encoding="utf-8")


@pytest.mark.slow  # two smoke pipelines: 5-10 min on 2 busy CPU cores
def test_a_prior_override_reruns_train_on_a_finished_smoke_run(tmp_path):
    files = _run(["git", "ls-files"], ROOT, dict(os.environ)).stdout.split()
    for rel in files:
        if (ROOT / rel).is_file():
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, tmp_path / rel)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(NAC_WORKERS="2", DVC_NO_ANALYTICS="1", NAC_QUIET="1")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@e.invalid"]
    py = [sys.executable]
    assert (
        _run(
            [*py, "-c", "from nac.compose import write_params; write_params('params.yaml', ['profile=smoke'])"],
            tmp_path,
            {**env, "PYTHONPATH": str(tmp_path)},
        ).returncode
        == 0
    )
    for cmd in (["git", "init", "-q"], [*git, "add", "-A"], [*git, "commit", "-qm", "copy"]):
        assert _run(cmd, tmp_path, env).returncode == 0
    first = _run([*py, "-m", "dvc", "repro"], tmp_path, env)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    for cmd in ([*git, "add", "-A"], [*git, "commit", "-qm", "run"]):
        assert _run(cmd, tmp_path, env).returncode == 0
    exp = _run([*py, "-m", "dvc", "exp", "run", "-S", "profile=smoke", "-S", "prior=ring_of_cliques"], tmp_path, env)
    log = exp.stdout + exp.stderr
    assert exp.returncode == 0, log[-4000:]
    ran = set(re.findall(r"Running stage '([\w@-]+)'", log))
    assert {"train", "report"} <= ran and "generate" not in ran, sorted(ran)
