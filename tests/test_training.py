"""The training loop: schedule, resume equivalence, non-finite loss, EMA, DDP on CPU."""

import json
import math
import os
import socket
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from interrupted_runs import Interrupt, interrupt_then_resume, stop_after
from test_overfit import Quadrants
from torch.optim.optimizer import register_optimizer_step_pre_hook

from nac import build_model
from nac.checkpoint_io import load_checkpoint
from nac.testing.reference_forms import lr_at
from nac.training.config import TrainConfig
from nac.training.errors import NonFiniteLossError
from nac.training.loop import fit
from nac.training.optim import warmup_cosine


def small_train(**kw):
    base = dict(epochs=3, batch_size=16, lr=3e-3, warmup_epochs=1, min_lr=1e-4, label_smoothing=0.0, seed=0)
    base.update(kw)
    return TrainConfig(**base)


def test_lr_schedule_warms_up_then_decays_to_floor():
    lrs = [lr_at(s, 100, 10, 1.0, 0.01) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:]))
    assert lrs[-1] == pytest.approx(0.01, abs=1e-3)


@pytest.mark.parametrize(
    "total, warmup, peak, floor",
    [(100, 10, 1.0, 0.01), (3000, 750, 1.5e-3, 1e-5), (50, 0, 1e-3, 1e-5), (7, 7, 1e-3, 0.0), (20, 5, 1e-4, 2e-4)],
)
def test_torch_scheduler_gives_the_formula_at_every_step(total, warmup, peak, floor):
    """``warmup_cosine`` (torch's LambdaLR, stepped before every optimizer step but the first, as
    ``fit`` steps it) sets ``lr_at(step)`` for every step, to float rounding (``peak * (x / peak)``
    is within an ulp of ``x``); also with no warm-up, all warm-up, and a floor above the peak."""
    opt = torch.optim.AdamW([{"params": [torch.zeros(1, requires_grad=True)]}, {"params": [torch.zeros(1)]}], lr=peak)
    sched = warmup_cosine(opt, total, warmup, peak, floor)
    for step in range(total):
        if step:
            sched.step()
        ref = lr_at(step, total, warmup, peak, floor)
        assert all(math.isclose(g["lr"], ref, rel_tol=1e-15, abs_tol=0.0) for g in opt.param_groups), step
        opt.step()


def test_fit_learns_and_logs(tmp_path, tiny_config, monkeypatch):
    monkeypatch.chdir(tmp_path)  # dvclive looks for a DVC repo from the working directory
    model = build_model(tiny_config(variant="modfc", num_classes=4))
    out = fit(
        model,
        Quadrants(128, 0),
        Quadrants(64, 1),
        small_train(epochs=8, lr=1e-3, augment=False, warmup_epochs=0.5),
        checkpoint=tmp_path / "ckpt.pt",
        live_dir=tmp_path / "live",
        progress=False,
    )
    hist = out["history"]
    assert [h["epoch"] for h in hist] == list(range(1, 9))
    assert hist[-1]["train_loss"] < hist[0]["train_loss"]
    assert out["final"]["val_acc1"] > 25.0 + 15.0  # 4 classes: well above chance on held-out data
    assert (tmp_path / "live" / "metrics.json").exists()
    logged = json.loads((tmp_path / "live" / "metrics.json").read_text())
    assert logged["step"] == 7
    assert load_checkpoint(tmp_path / "ckpt.pt")["epoch"] == 8


@contextmanager
def _step_lrs():
    """Every scheduled optimizer step's learning rates (one per param group; the signature fit's
    Adam, which has no scheduler, is left out), recorded in the ``with`` block."""
    lrs = []

    def record(opt, *_):
        if "initial_lr" in opt.param_groups[0]:
            lrs.append([g["lr"] for g in opt.param_groups])

    hook = register_optimizer_step_pre_hook(record)
    try:
        yield lrs
    finally:
        hook.remove()


def test_resumed_run_equals_uninterrupted_run(tmp_path, tiny_config):
    """The same history, and the same learning rate at every step: the LR scheduler's state is in
    the checkpoint and the resumed run continues its schedule where the first one stopped."""
    cfg, train, val = small_train(epochs=3), Quadrants(48, 0), Quadrants(16, 1)
    torch.manual_seed(0)
    with _step_lrs() as full_lrs:
        full = fit(
            build_model(tiny_config(num_classes=4)), train, val, cfg, checkpoint=tmp_path / "a.pt", progress=False
        )
    total, warmup = 3 * (48 // 16), 48 // 16  # warm-up: one epoch
    assert len(full_lrs) == total
    for step, lr in enumerate(full_lrs):  # the formula at every step
        ref = lr_at(step, total, warmup, cfg.peak_lr, cfg.min_lr)
        assert all(math.isclose(x, ref, rel_tol=1e-15) for x in lr), step

    with _step_lrs() as lrs:
        resumed = interrupt_then_resume(
            lambda: build_model(tiny_config(num_classes=4)), train, val, cfg, tmp_path / "b.pt"
        )
    assert resumed.result["history"] == full["history"]
    assert lrs == full_lrs  # epoch 1, then epochs 2-3 resumed: exactly the uninterrupted run's
    assert load_checkpoint(tmp_path / "b.pt")["scheduler"]["last_epoch"] == total - 1


def test_checkpoint_without_scheduler_state_is_not_resumed(tmp_path, tiny_config, capsys):
    """A checkpoint written before the LR schedule was a torch scheduler (no ``"scheduler"``) is
    treated as written with other settings: training starts over and moves it aside."""
    cfg, train = small_train(epochs=2), Quadrants(32, 0)
    ckpt = tmp_path / "s.pt"
    fit(build_model(tiny_config(num_classes=4)), train, None, cfg, checkpoint=ckpt, progress=False)
    old = torch.load(ckpt, weights_only=True)
    del old["scheduler"]
    torch.save(old, ckpt)
    epochs_run = []
    fit(
        build_model(tiny_config(num_classes=4)),
        train,
        None,
        cfg,
        checkpoint=ckpt,
        progress=False,
        on_epoch_end=epochs_run.append,
    )
    assert epochs_run == [1, 2]
    assert "no LR scheduler state" in capsys.readouterr().out  # the line that says why (tqdm.write)
    assert "scheduler" in load_checkpoint(ckpt) and list(tmp_path.glob("s.pt.stale*"))


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_resumed_run_logs_the_dvclive_files_of_an_uninterrupted_run(tmp_path, tiny_config, monkeypatch):
    """The dvclive files are rewritten from the checkpoint's history on resume (``nac.training.live.open_live``),
    not continued with dvclive's own ``resume=True`` (this test fails with it): dvclive 3.49 resumes
    a run of one logged step at step 0 again (``Live._init_resume``: no +1 when the step is 0, case
    a), and its files can be an epoch behind the checkpoint (a stop between the checkpoint write and
    the dvclive log, case b) or belong to a run whose checkpoint was moved aside (case c)."""
    from nac.training import live as dvclive_log

    monkeypatch.chdir(tmp_path)  # dvclive looks for a DVC repo from the working directory
    cfg, train, val = small_train(epochs=3), Quadrants(32, 0), Quadrants(16, 1)

    def run(name, cfg=cfg, **kw):
        torch.manual_seed(0)
        return fit(
            build_model(tiny_config(num_classes=4)),
            train,
            val,
            cfg,
            checkpoint=tmp_path / f"{name}.pt",
            live_dir=tmp_path / name,
            progress=False,
            **kw,
        )

    run("full")
    expected = _files(tmp_path / "full")
    assert expected and all(b"step" in v for k, v in expected.items() if k.endswith(".tsv"))

    with pytest.raises(Interrupt):  # a: after epoch 1's checkpoint and log
        run("a", on_epoch_end=stop_after(1))
    run("a")
    assert _files(tmp_path / "a") == expected

    real_log = dvclive_log.log_live

    def log_until_second(live, entry):  # b: epoch 2's checkpoint written, its log not
        if entry["epoch"] == 2:
            raise Interrupt
        real_log(live, entry)

    monkeypatch.setattr(dvclive_log, "log_live", log_until_second)
    with pytest.raises(Interrupt):
        run("b")
    monkeypatch.setattr(dvclive_log, "log_live", real_log)
    assert load_checkpoint(tmp_path / "b.pt")["epoch"] == 2
    run("b")
    assert _files(tmp_path / "b") == expected

    run("c", cfg=small_train(epochs=3, lr=1e-2))  # c: a finished run with other settings, then the same
    run("c")
    assert _files(tmp_path / "c") == expected


def test_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path, tiny_config):
    model = build_model(tiny_config(num_classes=4))
    ckpt = tmp_path / "c.pt"
    fit(model, Quadrants(32, 0), None, small_train(epochs=1), checkpoint=ckpt, progress=False)
    good = ckpt.read_bytes()
    bad = Quadrants(32, 0)
    bad.x = bad.x.float() * float("nan")
    with pytest.raises(NonFiniteLossError, match="last good checkpoint is kept"):
        fit(model, bad, None, small_train(epochs=2), checkpoint=ckpt, progress=False)
    assert ckpt.read_bytes() == good


def test_ema_weights_are_returned_and_loaded_for_evaluation(tmp_path, tiny_config):
    from nac.checkpoint_io import load_model

    model = build_model(tiny_config(num_classes=4))
    out = fit(
        model,
        Quadrants(32, 0),
        Quadrants(16, 1),
        small_train(epochs=2, ema=0.9),
        checkpoint=tmp_path / "e.pt",
        progress=False,
    )
    assert "val_acc1" in out["final"]
    raw = load_checkpoint(tmp_path / "e.pt")["model"]
    loaded = load_model(tmp_path / "e.pt").state_dict()
    for k, v in model.state_dict().items():  # the returned model and load_model both carry the EMA weights
        assert torch.equal(loaded[k], v), k
    assert any(not torch.equal(raw[k], v) for k, v in loaded.items() if v.is_floating_point())
    # BatchNorm statistics are averaged too (not left at their initial values)
    assert not torch.equal(
        loaded["tokenizer.trunk.1.running_mean"], torch.zeros_like(loaded["tokenizer.trunk.1.running_mean"])
    )


def test_checkpoint_from_other_code_or_data_is_not_resumed(tmp_path, tiny_config):
    cfg, train = small_train(epochs=1), Quadrants(32, 0)
    fit(
        build_model(tiny_config(num_classes=4)),
        train,
        None,
        cfg,
        checkpoint=tmp_path / "f.pt",
        progress=False,
        fingerprint="code-v1",
    )
    epochs_run = []
    fit(
        build_model(tiny_config(num_classes=4)),
        train,
        None,
        cfg,
        checkpoint=tmp_path / "f.pt",
        progress=False,
        fingerprint="code-v1",
        on_epoch_end=epochs_run.append,
    )
    assert epochs_run == []  # same fingerprint, finished: nothing to redo
    fit(
        build_model(tiny_config(num_classes=4)),
        train,
        None,
        cfg,
        checkpoint=tmp_path / "f.pt",
        progress=False,
        fingerprint="code-v2",
        on_epoch_end=epochs_run.append,
    )
    assert epochs_run == [1]  # another fingerprint: trained again from scratch
    assert load_checkpoint(tmp_path / "f.pt")["fingerprint"] == "code-v2"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


DDP_SCRIPT = """
import json, sys, torch
sys.path.insert(0, {tests!r})
from tiny_models import make_tiny_config
from test_training import Quadrants, small_train
from nac import build_model
from nac.training.distributed import init_distributed
from nac.training.loop import fit
world = init_distributed("cpu")
torch.manual_seed(0)
model = build_model(make_tiny_config(variant="modfc", num_classes=4,
                                     tokenizer={{"kind": "conv32", "dim": 16, "pos_dim": 8, "norm": "layer"}}))
cfg = small_train(epochs=2, batch_size=8, augment=False)
out = fit(model, Quadrants(32, 0), None, cfg, world=world, progress=False)
if world.is_main:
    w = [p.detach().sum().item() for p in model.parameters()]
    json.dump({{"history": out["history"], "w": w}}, open({out!r}, "w"))
"""


@pytest.mark.slow  # two torchrun launches, ~15 s; .ci/run runs the slow tests after the default run
def test_ddp_two_processes_match_single_process(tmp_path):
    """DDP with gloo on CPU: 2 processes x 4 samples == 1 process x 8 samples (same global batch).
    ``modfc`` with no augmentation has no per-sample randomness, so the runs must agree. The
    tokenizer uses LayerNorm: BatchNorm statistics are synchronised only on CUDA (SyncBatchNorm)."""
    results = {}
    for nproc in (1, 2):
        out = tmp_path / f"ddp{nproc}.json"
        script = tmp_path / f"ddp{nproc}.py"
        script.write_text(DDP_SCRIPT.format(tests=str(Path(__file__).parent), out=str(out)))
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc_per_node={nproc}",
            "--master_addr=127.0.0.1",
            f"--master_port={_free_port()}",
            str(script),
        ]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stderr[-3000:]
        results[nproc] = json.loads(out.read_text())
    for a, b in zip(results[1]["history"], results[2]["history"]):
        for k in a:
            assert a[k] == pytest.approx(b[k], rel=1e-4, abs=1e-5), k
    assert results[1]["w"] == pytest.approx(results[2]["w"], rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("grad_clip", [1.0, 0.0])
def test_the_steps_update_is_clip_and_step_bit_for_bit(grad_clip):
    """``train_step`` updates with ``clip_gradients`` then ``optimizer.step()`` itself (the short
    route to the optimizer, issue 48); ``compile_scope: step`` runs ``clip_and_step`` (those two
    lines) compiled. With ``clip_and_step`` as the run's update, eager, the same losses, gradient
    norms and weights to the bit: the two forms are one."""
    from tiny_models import make_tiny_config

    from nac.training import loop
    from nac.training.distributed import World
    from nac.training.optim import clip_and_step
    from nac.training.run import EpochState, build_run

    out = {}
    for form in ("plain", "clip_and_step"):
        torch.manual_seed(0)
        model = build_model(make_tiny_config(variant="nac", num_classes=4, signature_fit_steps=20))
        cfg = small_train(epochs=1, batch_size=4, grad_clip=grad_clip)
        run = build_run(model, Quadrants(16, 0), None, cfg, World(0, 1, torch.device("cpu")), None, "t", None, None)
        if form == "clip_and_step":
            run.update = clip_and_step
        now, losses = EpochState.of(run), []
        torch.manual_seed(1)
        for i, batch in enumerate(run.loader):
            losses.append(loop.train_step(run, now, batch, 0, i).detach())
        out[form] = (torch.stack(losses), now.sums, {k: v.clone() for k, v in model.state_dict().items()})
    (lp, sp, wp), (lc, sc, wc) = out["plain"], out["clip_and_step"]
    assert torch.equal(lp, lc) and torch.equal(sp, sc)
    assert wp.keys() == wc.keys() and all(torch.equal(wp[k], wc[k]) for k in wp)
