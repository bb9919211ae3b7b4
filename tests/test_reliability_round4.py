"""Issue 47, reliability of the converged pieces (fourth round), each case as a hostile user met it:
a listing that deleted live work, "done" that meant only a parseable piece.json, and the cases that
ended in a traceback or said nothing. Every test here failed on the code before the issue."""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from nac.converged import jobs
from nac.converged import pieces as P
from nac.pipeline.params import compose

ROOT = Path(__file__).resolve().parents[1]
PROFILE = "converged_smoke"


def _tool():
    spec = importlib.util.spec_from_file_location("run_converged", ROOT / "tools" / "run_converged.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _piece_folder(root: Path, piece: P.Piece, files=("train.json", "eval.json"), **record) -> Path:
    d = piece.path(root, PROFILE)
    d.mkdir(parents=True)
    for name in files:
        (d / name).write_text("{}")
    rec = {"id": piece.id, "seed": piece.seed, "profile": PROFILE, "track": piece.track, "files": list(files)}
    (d / P.RECORD).write_text(json.dumps({**rec, **record}))
    return d


# ---------------------------------------------------------------------------- 1. no command deletes live work
def _partial(root: Path, owner: dict | None) -> Path:
    d = root / PROFILE / "image" / f".perceiver_io-0.tmp-{os.getpid()}-abcd1234"
    d.mkdir(parents=True)
    (d / "train.json").write_text("{}")
    if owner is not None:
        (d / P.OWNER).write_text(json.dumps(owner))
    return d


def test_a_live_partial_folder_is_never_removed_and_listing_only_reads(tmp_path, capsys):
    me = {"pid": os.getpid(), "started": psutil.Process().create_time(), "host": platform.node()}
    live = _partial(tmp_path, me)
    assert P.writer_alive(live) and P.clean_partial(tmp_path, PROFILE) == [] and live.is_dir()
    _tool().main(["--profile", PROFILE, "--pieces", str(tmp_path), "--list"])
    assert live.is_dir() and "removed" not in capsys.readouterr().out


def test_a_partial_folder_whose_writer_is_gone_is_removed(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = _partial(tmp_path, {"pid": gone.pid, "started": 1.0, "host": platform.node()})
    reused = {"pid": os.getpid(), "started": psutil.Process().create_time() - 1000, "host": platform.node()}
    assert not P.writer_alive(dead)
    d2 = tmp_path / PROFILE / "image" / ".nac-0.tmp-1-x"
    d2.mkdir()
    (d2 / P.OWNER).write_text(json.dumps(reused))  # the pid runs, but it is another process (its start differs)
    assert not P.writer_alive(d2)
    assert set(P.clean_partial(tmp_path, PROFILE)) == {dead, d2}


def test_a_written_piece_lists_no_owner_file(tmp_path):
    def write(tmp: Path):
        assert (tmp / P.OWNER).is_file()  # owned while it is written
        (tmp / "train.json").write_text("{}")
        (tmp / P.RECORD).write_text("{}")

    dest = P.write_piece(tmp_path / "p", write)
    assert sorted(f.name for f in dest.iterdir()) == [P.RECORD, "train.json"]


# ---------------------------------------------------------------------------- 2. the code that ran; dirty trees
def test_a_dirty_checkout_is_refused_unless_allowed(tmp_path, monkeypatch, capsys):
    tool = _tool()
    monkeypatch.setattr(tool, "source_commit", lambda: {"commit": "abc", "dirty": True})
    ran = []
    monkeypatch.setattr(tool, "run", lambda args, params: ran.append(args))
    argv = ["--profile", PROFILE, "--pieces", str(tmp_path), "--budget", "1"]
    with pytest.raises(SystemExit) as e:
        tool.main(argv)
    assert "uncommitted changes" in str(e.value.code) and "--allow-dirty" in str(e.value.code) and not ran
    tool.main([*argv, "--allow-dirty"])
    assert ran


def test_the_report_marks_every_claim_a_dirty_piece_enters(tmp_path):
    from nac.report.converged import judge

    params = compose([f"profile={PROFILE}"])
    head = P.Piece("image", "nac-scale_free", int(params["seeds"][0]))
    everything = set(P.plan(params))
    rows = judge(params, tmp_path / "metrics", everything, {p: "CPU" for p in everything}, dirty={head})
    marked = [r for r in rows if r["reason"].startswith("dirty: ")]
    assert marked and all(head.id in r["reason"] for r in marked)


# ---------------------------------------------------------------------------- 3. done means whole
@pytest.mark.parametrize(
    "spoil, says",
    [
        (lambda d: (d / P.RECORD).write_text('{"id": "image/perc'), "does not parse"),
        (lambda d: (d / P.RECORD).write_text("null"), "holds NoneType, not a record"),
        (lambda d: (d / "eval.json").unlink(), "eval.json: listed in piece.json, absent"),
        (lambda d: (d / "eval.json").write_text("{trunc"), "eval.json: does not parse"),
        (lambda d: (d / P.RECORD).write_text(json.dumps(_rec(seed=3))), "names seed 3, the folder is 0"),
        (lambda d: (d / P.RECORD).write_text(json.dumps(_rec(profile="mini"))), "names profile 'mini'"),
    ],
)
def test_a_piece_is_done_only_when_whole(tmp_path, spoil, says):
    piece = P.Piece("image", "perceiver_io", 0)
    d = _piece_folder(tmp_path, piece)
    assert P.inspect(tmp_path, PROFILE, piece)[1] == ""
    spoil(d)
    rec, damage = P.inspect(tmp_path, PROFILE, piece)
    assert says in damage and P.read(tmp_path, PROFILE, piece) is None
    params = compose([f"profile={PROFILE}"])
    (row,) = P.status(tmp_path, PROFILE, params, ROOT, [piece])
    assert row[1] == "damaged" and says in row[3]


def _rec(**kw) -> dict:
    return {
        "id": "image/perceiver_io-0",
        "seed": 0,
        "profile": PROFILE,
        "track": "image",
        "files": ["train.json"],
        **kw,
    }


def test_damaged_pieces_are_listed_kept_out_of_the_report_and_rerun_on_request(tmp_path, monkeypatch, capsys):
    from nac.report.converged import judge

    tool = _tool()
    params = compose([f"profile={PROFILE}"])
    piece = P.Piece("image", "perceiver_io", int(params["seeds"][0]))
    d = _piece_folder(tmp_path, piece)
    (d / "eval.json").unlink()
    tool.main(["--profile", PROFILE, "--pieces", str(tmp_path), "--list", "--only", piece.id])
    out = capsys.readouterr().out
    assert "damaged: eval.json: listed in piece.json, absent (--rerun-damaged reruns it)" in out
    everything = set(P.plan(params))
    rows = judge(params, tmp_path / "m", everything - {piece}, {}, damaged={piece: "eval.json: absent"})
    assert any(f"{piece.id} (damaged: eval.json: absent)" in r["reason"] for r in rows)
    seen = {}
    monkeypatch.setattr(tool, "prepare_data", lambda *a: None)
    monkeypatch.setattr(
        "nac.pipeline.pool.run_jobs", lambda fn, jobs_, **kw: seen.update(ids=[j[1] for j in jobs_]) or []
    )
    monkeypatch.setattr(tool, "source_commit", lambda: {"commit": "abc", "dirty": False})
    argv = ["--profile", PROFILE, "--pieces", str(tmp_path), "--budget", "5", "--only", piece.id]
    tool.main(argv)
    assert "ids" not in seen and "--rerun-damaged reruns them" in capsys.readouterr().out
    tool.main([*argv, "--rerun-damaged"])
    assert seen["ids"] == [piece.id]


# ---------------------------------------------------------------------------- 4. one clear line each
@pytest.mark.parametrize("budget", ["nan", "inf", "1e-9", "-1"])
def test_a_bad_budget_is_one_line(tmp_path, budget, capsys):
    with pytest.raises(SystemExit) as e:
        _tool().main(["--profile", PROFILE, "--pieces", str(tmp_path), "--budget", budget])
    assert e.value.code == 2 and "give a finite number of minutes, at least 0.1" in capsys.readouterr().err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to a read-only folder")
def test_a_read_only_pieces_folder_is_one_line(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(SystemExit) as e:
            _tool().main(["--profile", PROFILE, "--pieces", str(ro / "p"), "--budget", "1"])
    finally:
        ro.chmod(0o700)
    assert "cannot write pieces to" in str(e.value.code) and "give a writable folder" in str(e.value.code)


def test_an_unwritable_folder_is_named_with_the_system_reason(tmp_path):
    tool = _tool()
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert tool.unwritable(blocker / "pieces") is not None
    assert tool.unwritable(tmp_path / "fine") is None


def test_sigterm_ends_with_one_line_and_exit_143(tmp_path, monkeypatch, capsys):
    tool = _tool()
    monkeypatch.setattr(tool, "prepare_data", lambda *a: None)
    monkeypatch.setattr(tool, "source_commit", lambda: {"commit": "abc", "dirty": False})

    def terminated(*a, **k):
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr("nac.pipeline.pool.run_jobs", terminated)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(SystemExit) as e:
            tool.main(["--profile", PROFILE, "--pieces", str(tmp_path), "--budget", "5", "--only", "image/modfc-0"])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert e.value.code == 143 and "stopped by SIGTERM" in capsys.readouterr().out


def test_sigterm_during_a_training_still_ends_with_its_line_and_exit_143(tmp_path, monkeypatch, capsys):
    """With one worker the training runs in this process and turns the interruption into its own
    SystemExit (``TrainingInterrupted``); the runner still says it was SIGTERM and exits 143."""
    tool = _tool()
    monkeypatch.setattr(tool, "prepare_data", lambda *a: None)
    monkeypatch.setattr(tool, "source_commit", lambda: {"commit": "abc", "dirty": False})

    def training(*a, **k):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        except KeyboardInterrupt:
            raise SystemExit(
                "train perceiver_io-0: interrupted at epoch 3; the checkpoint of epoch 2 is intact"
            ) from None

    monkeypatch.setattr("nac.pipeline.pool.run_jobs", training)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(SystemExit) as e:
            tool.main(["--profile", PROFILE, "--pieces", str(tmp_path), "--budget", "5", "--only", "image/modfc-0"])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert e.value.code == 143 and "stopped by SIGTERM" in capsys.readouterr().out


def _ctx(tmp_path) -> dict:
    return {
        "workdir": str(tmp_path / "work"),
        "pieces": str(tmp_path / "pieces"),
        "code_root": str(ROOT),
        "deadline": 1e12,
        "predicted": {},
        "stop": str(tmp_path / "stop"),
        "keep_checkpoint": False,
        "commit": {"commit": "abc", "dirty": False},
        "command": "test",
    }


@pytest.mark.parametrize(
    "error, says",
    [
        ("busy", "another run holds its checkpoint"),
        ("full", "No space left on device; free space or give a writable folder"),
    ],
)
def test_a_second_runner_or_a_full_disk_is_one_line(tmp_path, monkeypatch, error, says):
    from nac.checkpoint_lock import CheckpointBusyError

    def compute(*a, **k):
        if error == "busy":
            raise CheckpointBusyError("models/image/perceiver_io-0.pt is held by pid 1")
        raise OSError(28, "No space left on device", str(tmp_path / "pieces"))

    monkeypatch.setattr(jobs, "compute", compute)
    params = compose([f"profile={PROFILE}"])
    rec = jobs.run_piece(params, "image/perceiver_io-0", _ctx(tmp_path), progress=False)
    assert says in rec[jobs.SKIPPED] and "\n" not in rec[jobs.SKIPPED]


def test_a_second_runner_leaves_the_first_runners_stretches_alone(tmp_path):
    """The second runner finds the checkpoint's lock held before it reads or writes the piece's
    stretches: the live runner's open stretch is not marked killed, and nothing is appended."""
    from nac.checkpoint_lock import CheckpointLock

    params = compose([f"profile={PROFILE}"])
    piece = P.Piece("image", "perceiver_io", 0)
    _, models = jobs.in_work(params, tmp_path / "work")
    ckpt = jobs.checkpoint_of(piece, models)
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"c")
    live = [{"machine": "m", "start": "2026-11-28T00:00:00Z", "end": None, "wall_s": None}]
    jobs.Stretches(ckpt)._write(live)
    holder = subprocess.Popen(
        [sys.executable, "-c", f"from nac.checkpoint_lock import CheckpointLock; import time; "
         f"CheckpointLock({str(ckpt)!r}).acquire(); print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        rec = jobs.run_piece(params, piece.id, _ctx(tmp_path), progress=False)
    finally:
        holder.kill()
        holder.wait()
    assert "another run holds its checkpoint" in rec[jobs.SKIPPED]
    assert jobs.Stretches(ckpt).read() == live
    assert CheckpointLock(ckpt).acquire() is not None  # free again once the holder is gone


def test_a_computation_error_is_raised_not_called_a_full_disk(tmp_path, monkeypatch):
    """An OSError of the computation itself (a dataset file missing) is not a full or read-only
    pieces folder: it is raised, not turned into a skipped piece."""

    def compute(*a, **k):
        raise FileNotFoundError(2, "No such file or directory", "/data/shapes/train.npz")

    monkeypatch.setattr(jobs, "compute", compute)
    params = compose([f"profile={PROFILE}"])
    with pytest.raises(FileNotFoundError):
        jobs.run_piece(params, "image/perceiver_io-0", _ctx(tmp_path), progress=False)


# ---------------------------------------------------------------------------- 5. a stage runs its own nac
def test_a_stage_run_by_hand_refuses_a_foreign_nac_in_one_line(tmp_path):
    """``python stages/<x>.py`` puts ``stages/`` first on the path and imports whatever ``nac`` is
    installed; from another checkout (one with its own ``nac/``) the stage refuses in one line. A
    script outside any checkout (no ``nac/`` beside its folder) is not refused."""
    other = tmp_path / "other"
    (other / "stages").mkdir(parents=True)
    (other / "nac").mkdir()
    (other / "nac" / "__init__.py").write_text("")
    script = (
        "from nac.pipeline.lifeline import foreign_nac\n\ndef main():\n    print('ran')\n\n"
        "foreign_nac(main, 'toy')\nmain()\n"
    )
    (other / "stages" / "toy.py").write_text(script)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    got = subprocess.run([sys.executable, str(other / "stages" / "toy.py")], capture_output=True, text=True, env=env)
    assert got.returncode == 1 and "ran" not in got.stdout
    err = got.stderr.strip()
    assert "\n" not in err and f"imports nac from {ROOT}, not from its own checkout {other}" in err
    assert "python -m stages.toy" in err
    loose = tmp_path / "loose" / "bin"
    loose.mkdir(parents=True)
    (loose / "toy.py").write_text(script)
    got = subprocess.run([sys.executable, str(loose / "toy.py")], capture_output=True, text=True, env=env)
    assert got.returncode == 0 and got.stdout.strip() == "ran"
