"""Reliability of training and checkpoints: no poisoned checkpoint, no lost progress.

Each test fails on the code before the fix: NaN weights saved as the last good checkpoint; a
resume decided on every source file (a comment in the report code restarted training) and an
overwritten mismatching checkpoint; evaluation of a checkpoint trained with another model
config; two trainers on one checkpoint, a bare traceback on Ctrl-C, a full disk.
"""

import errno
import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from test_training import Quadrants, small_train

from nac import build_model


def tiny(tiny_config, **kw):
    return build_model(tiny_config(variant="modfc", num_classes=4, **kw))


def all_finite(ckpt: dict) -> bool:
    from nac.checkpoint_io import non_finite_tensors

    return not non_finite_tensors(ckpt)


# 1. no poisoned checkpoint ------------------------------------------------------------------


def test_save_checkpoint_refuses_non_finite_tensors_and_leaves_the_file(tmp_path, tiny_config):
    from nac.checkpoint_io import PoisonedCheckpointError, save_checkpoint

    model = tiny(tiny_config)
    path = save_checkpoint(tmp_path / "m.pt", model, epoch=1)
    good = path.read_bytes()
    with torch.no_grad():
        next(model.parameters()).view(-1)[0] = float("nan")
    with pytest.raises(PoisonedCheckpointError, match="refusing to write checkpoint .*m.pt"):
        save_checkpoint(path, model, epoch=2)
    clean = tiny(tiny_config)
    opt_state = {"state": {0: {"exp_avg": torch.tensor([float("inf")])}}, "param_groups": []}
    with pytest.raises(PoisonedCheckpointError, match="optimizer.state.0.exp_avg"):
        save_checkpoint(path, clean, optimizer=opt_state)
    assert path.read_bytes() == good
    assert not list(tmp_path.glob("*.tmp"))


def test_nan_gradient_stops_training_and_keeps_the_last_good_checkpoint(tmp_path, tiny_config):
    """A NaN gradient with a finite loss (the case the loss check misses) on the last step of
    epoch 2: before the fix AdamW turned it into NaN weights that were saved as epoch 2."""
    from nac.checkpoint_io import load_checkpoint
    from nac.training.errors import NonFiniteGradientError, NonFiniteTrainingError
    from nac.training.loop import fit

    model, ckpt, calls = tiny(tiny_config), tmp_path / "g.pt", []
    weight = next(model.parameters())

    def poison(grad):
        calls.append(1)
        return grad * float("nan") if len(calls) == 4 else grad  # 2 steps per epoch: epoch 2, step 2

    weight.register_hook(poison)
    with pytest.raises(NonFiniteGradientError) as err:
        fit(
            model,
            Quadrants(32, 0),
            None,
            small_train(epochs=3, grad_clip=None),
            checkpoint=ckpt,
            progress=False,
            desc="train toy-0",
        )
    msg = str(err.value)
    assert isinstance(err.value, NonFiniteTrainingError)
    assert (
        "train toy-0" in msg and "epoch 2, step 2" in msg and f"last good checkpoint is kept at {ckpt} (epoch 1)" in msg
    )
    saved = load_checkpoint(ckpt)
    assert saved["epoch"] == 1 and all_finite(saved)


def test_non_finite_weights_after_the_step_stop_training(tmp_path, tiny_config):
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from nac.checkpoint_io import load_checkpoint
    from nac.training.errors import NonFiniteWeightsError
    from nac.training.loop import fit

    steps = []

    def blow_up(optimizer, args, kwargs):
        steps.append(1)
        if len(steps) == 3:  # epoch 2, step 1
            with torch.no_grad():
                optimizer.param_groups[0]["params"][0].fill_(float("inf"))

    handle = register_optimizer_step_post_hook(blow_up)
    try:
        with pytest.raises(
            NonFiniteWeightsError,
            match=r"train w: non-finite weights .* epoch 2, step 1 .*last good "
            r"checkpoint is kept at .*w\.pt \(epoch 1\)",
        ):
            fit(
                tiny(tiny_config),
                Quadrants(32, 0),
                None,
                small_train(epochs=2),
                checkpoint=tmp_path / "w.pt",
                progress=False,
                desc="train w",
            )
    finally:
        handle.remove()
    assert load_checkpoint(tmp_path / "w.pt")["epoch"] == 1


def test_poisoned_checkpoint_is_refused_by_loading_and_moved_aside_by_training(tmp_path, tiny_config):
    from nac.checkpoint_io import PoisonedCheckpointError, load_checkpoint, load_model
    from nac.training.loop import fit

    model = tiny(tiny_config)
    state = model.state_dict()
    next(v for v in state.values() if v.is_floating_point()).view(-1)[0] = float("nan")
    path = tmp_path / "p.pt"  # as the old code wrote it: no check on save
    torch.save({"format": 1, "config": model.config.to_dict(), "model": state, "epoch": 1}, path)
    with pytest.raises(
        PoisonedCheckpointError, match=r"checkpoint .*p\.pt holds NaN or infinite .*Delete it and retrain"
    ):
        load_checkpoint(path)
    with pytest.raises(PoisonedCheckpointError):
        load_model(path)  # so the evaluation stages exit non-zero
    epochs = []
    fit(
        tiny(tiny_config),
        Quadrants(32, 0),
        None,
        small_train(epochs=1),
        checkpoint=path,
        progress=False,
        on_epoch_end=epochs.append,
    )
    assert epochs == [1]  # started over
    assert all_finite(load_checkpoint(path))
    assert len(list(tmp_path.glob("p.pt.nonfinite-*"))) == 1


# 2. resume decided on what determines the result --------------------------------------------


def test_fingerprint_covers_training_sources_only(tmp_path):
    """Edits of report or evaluation-stage code keep the fingerprint (a resume continues);
    edits of the model, the loop or the data pipeline change it."""
    import nac
    from nac.fingerprint import source_closure, source_fingerprint

    root = tmp_path / "nac"
    shutil.copytree(Path(nac.__file__).parent, root, ignore=shutil.ignore_patterns("__pycache__"))
    entries = ("nac.training.loop", "nac.data.registry", "nac.tracks.image")
    files = {f.relative_to(root).as_posix() for f in source_closure(entries, root)}
    assert {
        "training/loop.py",
        "model.py",
        "checkpoint_io.py",
        "config.py",
        "data/registry.py",
        "pipeline/runs.py",
    } <= files
    assert not any(f.startswith(("report/", "tracks/image.py", "pipeline/params.py")) for f in files)
    base = source_fingerprint(entries, root)
    for rel in ("report/tables.py", "tracks/image.py", "pipeline/params.py", "pipeline/paths.py", "stats.py"):
        with open(root / rel, "a") as f:
            f.write("\n# a comment\n")
        assert source_fingerprint(entries, root) == base, rel
    for rel in ("training/loop.py", "circuits/attention.py", "data/cache.py", "pipeline/runs.py"):
        before = source_fingerprint(entries, root)
        with open(root / rel, "a") as f:
            f.write("\n# a comment\n")
        assert source_fingerprint(entries, root) != before, rel


def test_run_fingerprint_hashes_the_manifest_and_the_training_sources(tmp_path, monkeypatch):
    from nac.fingerprint import source_fingerprint
    from nac.pipeline import runs

    (tmp_path / "manifest.json").write_text('{"v": 1}')
    monkeypatch.setattr(runs, "builder", lambda params, name: types.SimpleNamespace(cache_dir=tmp_path))
    first = runs.run_fingerprint({}, "toy", __name__)
    assert runs.run_fingerprint({}, "toy", __name__) == first
    (tmp_path / "manifest.json").write_text('{"v": 2}')
    assert runs.run_fingerprint({}, "toy", __name__) != first
    # the sources part is the static closure of the loop and the data pipeline
    import hashlib

    h = hashlib.sha256(b'{"v": 2}')
    h.update(source_fingerprint(("nac.training.loop", "nac.data.registry", __name__)).encode())
    assert runs.run_fingerprint({}, "toy", __name__) == h.hexdigest()[:16]


def test_checkpoint_with_other_settings_is_moved_aside_not_overwritten(tmp_path, tiny_config, capsys):
    from nac.checkpoint_io import load_checkpoint
    from nac.training.loop import fit

    ckpt = tmp_path / "s.pt"
    fit(
        tiny(tiny_config),
        Quadrants(32, 0),
        None,
        small_train(epochs=1),
        checkpoint=ckpt,
        progress=False,
        fingerprint="code-v1",
    )
    old = ckpt.read_bytes()
    capsys.readouterr()
    fit(
        tiny(tiny_config),
        Quadrants(32, 0),
        None,
        small_train(epochs=1, lr=2e-3),
        checkpoint=ckpt,
        progress=False,
        fingerprint="code-v2",
    )
    stale = list(tmp_path.glob("s.pt.stale-*"))
    assert len(stale) == 1 and stale[0].read_bytes() == old
    assert load_checkpoint(ckpt)["fingerprint"] == "code-v2"
    line = next(line for line in capsys.readouterr().out.splitlines() if "other settings" in line)
    assert str(stale[0]) in line and "train_config (lr: checkpoint 0.003, now 0.002)" in line
    assert "fingerprint (checkpoint code-v1, now code-v2" in line and "config (" not in line.replace(
        "train_config (", ""
    )


# 3. evaluation checks the checkpoint against the params ---------------------------------------


def test_load_model_refuses_a_checkpoint_of_another_model_config(tmp_path, tiny_config):
    from nac.checkpoint_io import CheckpointMismatchError, load_model, save_checkpoint

    path = save_checkpoint(tmp_path / "m.pt", tiny(tiny_config, depth=2))
    assert load_model(path, expect_config=tiny_config(variant="modfc", num_classes=4, depth=2).to_dict()) is not None
    with pytest.raises(CheckpointMismatchError, match=r"differing keys: depth: checkpoint 2, params 3.*`dvc repro`"):
        load_model(path, expect_config=tiny_config(variant="modfc", num_classes=4, depth=3).to_dict())


def test_evaluate_image_run_refuses_a_stale_checkpoint(tmp_path, tiny_config, monkeypatch):
    from nac.checkpoint_io import CheckpointMismatchError, save_checkpoint
    from nac.pipeline.schema_models import section
    from nac.tracks import image

    model_params = {
        k: v
        for k, v in tiny_config().to_dict().items()
        if k not in ("variant", "num_classes", "graph_seed", "prior", "prior_params")  # the ladder run sets them
    }
    image_params = {"model": model_params, "dataset": "toy", "ood_dataset": "toy", "ladder": ["modfc"], "train": {}}
    params = {"device": "cpu", "image": image_params}
    monkeypatch.setattr(image, "builder", lambda p, name: types.SimpleNamespace(info=lambda: {"num_classes": 4}))
    (tmp_path / "image").mkdir()
    save_checkpoint(tmp_path / "image" / "modfc-0.pt", build_model(image.image_model_config(params, "modfc", 0, 4)))
    params["image"]["model"] = dict(model_params, d_model=64)
    with pytest.raises(CheckpointMismatchError, match=r"modfc-0\.pt was trained with another model config .*d_model"):
        image.evaluate_image_run(section(params, "image"), "modfc", 0, data={}, device="cpu", models=tmp_path)


# 4. one trainer per checkpoint, Ctrl-C, full disk ---------------------------------------------


def test_second_trainer_on_the_same_checkpoint_is_refused(tmp_path, tiny_config):
    from nac.checkpoint_lock import CheckpointBusyError
    from nac.training.loop import fit

    ckpt = tmp_path / "l.pt"
    holder = subprocess.Popen(  # another process holding the lock (what fit takes), then dying
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
            "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, b'pid 1 on host: train other'); print('locked', flush=True); "
            "time.sleep(60)",
            str(ckpt) + ".lock",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(
            CheckpointBusyError,
            match=r"l\.pt is in use by another training \(pid 1 on host: train "
            r"other\).*Wait for it to finish",
        ):
            fit(tiny(tiny_config), Quadrants(32, 0), None, small_train(epochs=1), checkpoint=ckpt, progress=False)
    finally:
        holder.kill()
        holder.wait()
    assert not ckpt.exists()
    out = fit(tiny(tiny_config), Quadrants(32, 0), None, small_train(epochs=1), checkpoint=ckpt, progress=False)
    assert out["final"]["epoch"] == 1  # the dead holder's lock is gone
    assert not (tmp_path / "l.pt.lock").exists()  # released and removed


def test_checkpoint_lock_of_a_killed_training_is_taken_over(tmp_path):
    """A CheckpointLock holder killed with SIGKILL leaves its file (and its name in it) but no lock:
    while it lives a second lock is refused naming it; after the kill the next one takes the file
    over, writes its own name, and removes the file on release."""
    from nac.checkpoint_lock import CheckpointBusyError, CheckpointLock

    ckpt = tmp_path / "k.pt"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from nac.checkpoint_lock import CheckpointLock; "
            "CheckpointLock(sys.argv[1], owner='train first').acquire(); print('locked', flush=True); time.sleep(60)",
            str(ckpt),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(CheckpointBusyError, match=rf"pid {holder.pid} on .*: train first\)"):
            CheckpointLock(ckpt, owner="train second").acquire()
    finally:
        holder.kill()  # SIGKILL: no release, the file stays
        holder.wait()
    lock_file = tmp_path / "k.pt.lock"
    assert lock_file.exists()
    with CheckpointLock(ckpt, owner="train second"):
        assert lock_file.read_text().endswith(": train second")
        with pytest.raises(CheckpointBusyError, match="train second"):
            CheckpointLock(ckpt, owner="train third").acquire()  # in the same process too
    assert not lock_file.exists()


class InterruptAt(Quadrants):
    """Raises KeyboardInterrupt (what SIGINT raises) when item number ``at`` is fetched."""

    def __init__(self, n, seed, at):
        super().__init__(n, seed)
        self.calls, self.at = 0, at

    def __getitem__(self, i):
        self.calls += 1
        if self.calls == self.at:
            raise KeyboardInterrupt
        return super().__getitem__(i)


def test_ctrl_c_ends_with_one_line_and_a_resumable_checkpoint(tmp_path, tiny_config):
    from nac.checkpoint_io import load_checkpoint
    from nac.training.errors import TrainingInterrupted
    from nac.training.loop import fit

    ckpt, cfg = tmp_path / "i.pt", small_train(epochs=2)
    data = InterruptAt(32, 0, at=32 + 16 + 3)  # 16 items a batch, 2 batches an epoch: epoch 2, batch 2
    with pytest.raises(SystemExit) as err:
        fit(tiny(tiny_config), data, None, cfg, checkpoint=ckpt, progress=False, desc="train toy-1")
    assert isinstance(err.value, TrainingInterrupted)
    assert err.value.code == (
        f"train toy-1: interrupted at epoch 2 after 1/2 steps; the checkpoint of epoch 1 at "
        f"{ckpt} is intact; rerun to resume"
    )  # non-zero exit, this one line on stderr
    assert load_checkpoint(ckpt)["epoch"] == 1
    assert not (tmp_path / "i.pt.lock").exists()
    epochs = []
    fit(tiny(tiny_config), Quadrants(32, 0), None, cfg, checkpoint=ckpt, progress=False, on_epoch_end=epochs.append)
    assert epochs == [2]  # resumed


def test_full_disk_ends_with_one_line_and_keeps_the_previous_checkpoint(tmp_path, tiny_config, monkeypatch):
    from nac.training.errors import CheckpointWriteFailed
    from nac.training.loop import fit

    real_save, calls, saved = torch.save, [], {}

    def save(obj, f, *a, **kw):
        calls.append(f)
        if len(calls) == 2:  # the second epoch's write: a partial file, then the disk is full
            Path(f).write_bytes(b"partial")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, f, *a, **kw)

    monkeypatch.setattr(torch, "save", save)
    ckpt = tmp_path / "d.pt"
    with pytest.raises(SystemExit) as err:
        fit(
            tiny(tiny_config),
            Quadrants(32, 0),
            None,
            small_train(epochs=2),
            checkpoint=ckpt,
            progress=False,
            desc="train toy-2",
            on_epoch_end=lambda e: saved.setdefault(e, ckpt.read_bytes()),
        )
    assert isinstance(err.value, CheckpointWriteFailed)
    msg = err.value.code
    assert "\n" not in msg and msg.startswith(f"train toy-2: disk full writing {ckpt} at the end of epoch 2")
    assert "it needs about" in msg and "free in" in msg and f"the checkpoint of epoch 1 at {ckpt} is intact" in msg
    assert ckpt.read_bytes() == saved[1]
    assert not list(tmp_path.glob("*.tmp"))


def test_dvclive_log_closes_without_dvc_bookkeeping_or_a_race(tmp_path, monkeypatch):
    """``nac.training.live.close_live`` under ``dvc exp run`` (its env vars set): two pooled jobs' logs close
    after the other already removed dvclive's step signal file (``Live.end()`` raised
    FileNotFoundError there), and no DVC repo work runs (``Live.end()`` built the repo index: 1.4 s a
    job). The logs keep every step's metrics."""
    import dvclive.live
    from dvc.repo import Repo
    from dvclive import Live

    from nac.training.live import close_live as _close_live
    from nac.training.live import log_live as _log_live

    Repo.init(str(tmp_path), no_scm=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    monkeypatch.setenv("DVC_EXP_BASELINE_REV", "0" * 40)

    def no_repo_work(*args, **kwargs):
        raise AssertionError("closing the log ran DVC's repo bookkeeping")

    monkeypatch.setattr(dvclive.live, "ensure_dir_is_tracked", no_repo_work)
    logs = [Live(dir=str(tmp_path / f"live{i}"), resume=False, save_dvc_exp=False, dvcyaml=False) for i in (0, 1)]
    for live in logs:
        for epoch in (1, 2):
            _log_live(live, {"epoch": epoch, "train_loss": 1.0 / epoch})
    signal = tmp_path / ".dvc" / "tmp" / "exps" / "run" / "DVCLIVE_STEP_COMPLETED"
    assert signal.exists()
    signal.unlink()  # the other worker got there first, between this one's exists() and remove()
    real_exists = os.path.exists
    monkeypatch.setattr(os.path, "exists", lambda p: True if str(p) == str(signal) else real_exists(p))
    for live in logs:
        _close_live(live)
    monkeypatch.undo()
    assert not signal.exists()
    for i in (0, 1):
        assert json.loads((tmp_path / f"live{i}" / "metrics.json").read_text())["train"]["loss"] == 0.5
