"""tools/window_pieces.py: converged pieces on a lent GPU machine's GPU and CPU cores at once (docs/gpu.md),
and the commit its records name when the travelling copy has no .git (tools/run_converged.py)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from nac.converged import pieces as P

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_two_sides_may_not_share_a_piece(tmp_path, capsys):
    tool = _load("window_pieces")
    with pytest.raises(SystemExit) as e:
        tool.main(
            ["--out", str(tmp_path), "--budget", "1", "--gpu-workers", "1", "--gpu-only", "image/*-0"]
            + ["--cpu-workers", "1", "--cpu-only", "image/perceiver_io-*", "--test"]
        )
    assert e.value.code == 2
    assert "share 1 piece(s), e.g. image/perceiver_io-0" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing started, nothing written


def test_a_gpu_side_without_a_gpu_is_refused_in_one_line(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    tool = _load("window_pieces")
    assert tool.main(["--out", str(tmp_path), "--budget", "1", "--gpu-workers", "2"]) == 1
    assert capsys.readouterr().err.strip() == (
        "no CUDA device here: the GPU side cannot run (--test runs both sides on the CPU)"
    )


def test_mps_missing_is_recorded_not_fatal(tmp_path, monkeypatch):
    tool = _load("window_pieces")
    monkeypatch.setattr(tool.shutil, "which", lambda name: None)
    assert tool.start_mps(tmp_path) == {"started": False, "why": "nvidia-cuda-mps-control is not on the PATH"}


def test_mps_whose_client_cannot_compute_is_stopped_and_the_window_goes_on_without_it(tmp_path, monkeypatch):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the probe would compute")
    tool = _load("window_pieces")
    calls = []
    monkeypatch.setattr(tool.shutil, "which", lambda name: "/bin/true")  # a "daemon" that starts and quits
    real_run = tool.subprocess.run
    monkeypatch.setattr(tool.subprocess, "run", lambda cmd, **kw: calls.append(cmd) or real_run(cmd, **kw))
    got = tool.start_mps(tmp_path)
    assert got["started"] is False
    assert got["why"].startswith("a CUDA client failed under MPS, so the window ran without it: exit 1")
    assert calls[0] == ["/bin/true", "-d"] and calls[-1] == ["/bin/true"]  # started, probed, quit
    assert "CUDA_MPS_PIPE_DIRECTORY" not in tool.os.environ or tool.os.environ["CUDA_MPS_PIPE_DIRECTORY"] != str(
        tmp_path / "pipe"
    )


def test_pattern_order_starts_the_pieces_of_the_first_pattern_first():
    tool = _load("run_converged")
    params = tool.load("converged")
    plan = P.plan(params)
    pats = ["image/neural_interpreter-*", "image/nac-planted_partition-0", "image/modfc-*"]
    got = [p.id for p in tool.in_pattern_order(P.select(plan, pats), pats)]
    assert got == [f"image/neural_interpreter-{s}" for s in range(5)] + ["image/nac-planted_partition-0"] + [
        f"image/modfc-{s}" for s in range(5)
    ]
    assert [p.id for p in P.select(plan, pats)][0] == "image/modfc-0"  # the profile's own order differs


def test_the_named_commit_is_recorded_only_where_git_cannot_say(monkeypatch):
    tool = _load("run_converged")
    monkeypatch.setenv("NAC_SOURCE_COMMIT", "abc123")
    monkeypatch.setattr(tool.piece_jobs, "git_commit", lambda root: {"commit": "f00", "dirty": False})
    assert tool.source_commit() == {"commit": "f00", "dirty": False}  # git knows: the env is not used
    monkeypatch.setattr(tool.piece_jobs, "git_commit", lambda root: {"commit": None, "dirty": None})
    assert tool.source_commit() == {
        "commit": "abc123",
        "dirty": None,
        "commit_from": "NAC_SOURCE_COMMIT (the copy had no .git)",
    }
    monkeypatch.delenv("NAC_SOURCE_COMMIT")
    assert tool.source_commit() == {
        "commit": "unknown",
        "dirty": None,
        "commit_from": "no .git of its own and no NAC_SOURCE_COMMIT",
    }


@pytest.mark.slow
def test_both_sides_write_their_own_pieces_and_everything_comes_back_in_out(tmp_path):
    out, pieces = tmp_path / "out", tmp_path / "pieces"
    cmd = [sys.executable, str(ROOT / "tools" / "window_pieces.py"), "--test", "--profile", "converged_smoke"]
    cmd += ["--out", str(out), "--pieces", str(pieces), "--workdir", str(tmp_path / "work"), "--budget", "3"]
    cmd += ["--gpu-workers", "1", "--gpu-only", "image/perceiver_io-*", "--cpu-workers", "1"]
    cmd += ["--cpu-only", "text/*", "--every", "2", "--commit", "abc123"]
    got = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert got.returncode == 0, got.stdout + got.stderr
    rec = json.loads((out / "window.json").read_text())
    assert rec["end"] and rec["commit"] == "abc123" and rec["mps"] is None
    assert rec["sides"]["gpu"]["wrote"] == ["image/perceiver_io-0", "image/perceiver_io-1"]
    assert rec["sides"]["cpu"]["wrote"] == sorted(f"text/{r}-{s}" for r in ("nac", "perceiver_io") for s in (0, 1))
    assert {f.name for f in out.iterdir()} == {"window.json", "pieces.tar.gz", "gpu.log", "cpu.log", "nvidia-smi.txt"}
    with tarfile.open(out / "pieces.tar.gz") as tar:
        records = sorted(n for n in tar.getnames() if n.endswith("/piece.json"))
    base = "results/converged/pieces/converged_smoke"
    assert records == sorted(f"{base}/{i}/piece.json" for s in rec["sides"].values() for i in s["wrote"])
    piece = json.loads((pieces / "converged_smoke" / "text" / "nac-0" / "piece.json").read_text())
    assert piece["device_kind"] == "CPU" and piece["workers"]["NAC_WORKERS"] == "1"
    assert piece["workers"]["NAC_SOURCE_COMMIT"] == "abc123"
