"""Checkpointing a training and the errors that stop one: where training stands (``_State``, for
the messages that say which checkpoint is kept), resuming from a checkpoint written with the same
settings (else moving it aside on the first save), the per-step finiteness checks, and the atomic
per-epoch save. ``nac.training.loop`` uses these and re-exports the errors.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.nn as nn
from tqdm.auto import tqdm

from nac.checkpoint_io import (DiskFullError, PoisonedCheckpointError, aside_path, dict_diff, human_bytes, load_checkpoint,
                            move_aside, save_checkpoint)
from nac.model import NAC
from nac.training.config import TrainConfig
from nac.training.distributed import World, all_reduce_, barrier


class NonFiniteTrainingError(FloatingPointError):
    """Training produced a NaN or infinite value; it stops and the last good checkpoint is kept."""


class NonFiniteLossError(NonFiniteTrainingError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


class NonFiniteGradientError(NonFiniteTrainingError):
    """The total gradient norm became NaN or infinite (the step is not applied)."""


class NonFiniteWeightsError(NonFiniteTrainingError):
    """The weights (or the state to checkpoint) became NaN or infinite after an optimizer step."""


class TrainingStopped(SystemExit):
    """Training ended early for a reason outside the training itself. The message is one line
    saying what is kept and how to continue; as a ``SystemExit`` it makes a stage exit non-zero
    printing just that line (``code`` is the message)."""


class TrainingInterrupted(TrainingStopped):
    """Ctrl-C (``KeyboardInterrupt``) during training; the last checkpoint is intact."""


class CheckpointWriteFailed(TrainingStopped):
    """The checkpoint could not be written (full disk); the previous one is intact."""


class _State:
    """Where training stands, for the messages that say what is kept: the 1-based epoch and
    step in progress, the epoch of this run's last checkpoint, a foreign checkpoint still in
    place (written with other settings, to be moved aside on the first save)."""

    def __init__(self, ckpt_path: Path | None, desc: str):
        self.ckpt_path, self.desc = ckpt_path, desc
        self.epoch, self.step, self.saved_epoch = 0, 0, 0   # step: steps completed in the epoch
        self.stale_dest: Path | None = None   # where the foreign checkpoint goes on the first save
        self.stale_reason = ""

    def kept(self) -> str:
        """For errors of the training itself (``NonFiniteTrainingError``)."""
        if self.ckpt_path is None:
            return "no checkpoint is kept (fit was called without one)"
        if self.saved_epoch:
            return f"the last good checkpoint is kept at {self.ckpt_path} (epoch {self.saved_epoch})"
        if self.stale_dest is not None:
            return (f"the last good checkpoint is kept at {self.ckpt_path} (written with other settings, not resumed; "
                    "this run had not saved one yet)")
        return "no checkpoint was written yet"

    def intact(self) -> str:
        """For ``TrainingStopped``: what is on disk and what a rerun does."""
        if self.ckpt_path is None:
            return "no checkpoint is kept (fit was called without one)"
        if self.saved_epoch:
            return f"the checkpoint of epoch {self.saved_epoch} at {self.ckpt_path} is intact; rerun to resume"
        if self.stale_dest is not None:
            return (f"no checkpoint of this run was written yet ({self.ckpt_path}, written with other settings, is "
                    "untouched); rerun to start over")
        if self.ckpt_path.exists():  # stopped while resuming it: not yet read, never written
            return f"the checkpoint at {self.ckpt_path} is untouched; rerun to resume"
        return "no checkpoint was written yet; rerun to start over"


def _resume(ckpt_path: Path, model: NAC, optimizer, ema, cfg: TrainConfig, fingerprint: str | None, world: World,
            desc: str, progress: bool, state: _State) -> tuple[int, list]:
    """Load the checkpoint when it was written with the same settings; returns ``(epoch, history)``.
    Otherwise plan to move it aside (``state.stale_dest``) and start over: it stays in place until
    this run writes its own first checkpoint, so a run that fails before that loses nothing."""
    try:
        ckpt = load_checkpoint(ckpt_path, map_location=world.device)
    except PoisonedCheckpointError:  # written before checkpoints were checked: worthless, never resumed
        barrier()  # every process has read it before the main one moves it
        if world.is_main:
            moved = move_aside(ckpt_path, tag="nonfinite")
            tqdm.write(f"{desc}: {ckpt_path} holds NaN or infinite values (a diverged run); moved it to {moved}; "
                       "starting over")
        return 0, []
    differ = []
    if ckpt.get("config") != model.config.to_dict():
        differ.append("config (" + ", ".join(dict_diff(ckpt.get("config") or {}, model.config.to_dict())) + ")")
    if ckpt.get("train_config") != cfg.to_dict():
        differ.append("train_config (" + ", ".join(dict_diff(ckpt.get("train_config") or {}, cfg.to_dict())) + ")")
    if ckpt.get("fingerprint") != fingerprint:
        differ.append(f"fingerprint (checkpoint {ckpt.get('fingerprint')}, now {fingerprint}: the data or the code "
                      "that determines the result changed)")
    if not differ:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        if ema is not None:
            ema.load_state_dict(ckpt["ema"])
        if world.is_main and progress:
            tqdm.write(f"{desc}: resuming from {ckpt_path} after epoch {int(ckpt['epoch'])}/{cfg.epochs}")
        return int(ckpt["epoch"]), list(ckpt["history"])
    state.stale_dest, state.stale_reason = aside_path(ckpt_path), "; ".join(differ)
    if world.is_main:
        tqdm.write(f"{desc}: {ckpt_path} was written with other settings: {state.stale_reason}; starting over, and "
                   f"moving it to {state.stale_dest} when this run saves its first checkpoint")
    return 0, []


_ADVICE = "Lower train.lr, enable train.grad_clip, or check the data for NaNs"


def _check_finite(value: torch.Tensor, what: str, error: type[NonFiniteTrainingError], state: _State,
                  world: World | None = None) -> None:
    """Raise ``error`` when ``value`` is NaN or infinite on any process (all stop together;
    ``world=None``: a value already identical on every process, no collective needed)."""
    bad = torch.tensor(0.0 if torch.isfinite(value) else 1.0, device=value.device)
    if world is not None and world.distributed:
        all_reduce_(bad)
    if bad.item():
        raise error(f"{state.desc}: non-finite {what} at epoch {state.epoch}, step {state.step + 1}; {state.kept()}. "
                    f"{_ADVICE}")


def _check_weights(model: NAC, state: _State) -> None:
    """After the optimizer step: one fused norm over the parameters (identical on every process
    under DDP); only when it is not finite are the tensors inspected one by one, so a finite but
    overflowing norm is not mistaken for a NaN."""
    params = [p.detach() for p in model.parameters()]
    if bool(torch.isfinite(nn.utils.get_total_norm(params))):
        return
    bad = [name for name, p in model.named_parameters() if not bool(torch.isfinite(p).all())]
    if bad:
        raise NonFiniteWeightsError(f"{state.desc}: non-finite weights after the optimizer step at epoch {state.epoch}, "
                                    f"step {state.step + 1} ({', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''}); "
                                    f"{state.kept()}. {_ADVICE}")


def _save(state: _State, model: NAC, **extra) -> None:
    """Write this run's checkpoint (moving a foreign one aside first); converts a refused or
    failed write into the error that says what is kept."""
    path = state.ckpt_path
    moved = None
    if state.stale_dest is not None and path.exists():
        moved = move_aside(path, state.stale_dest)
        if moved != state.stale_dest:
            tqdm.write(f"{state.desc}: moved {path} (written with other settings) to {moved}")
    try:
        save_checkpoint(path, model, **extra)
    except BaseException as e:
        if moved is not None and not path.exists():  # this run wrote nothing: put the old one back
            os.replace(moved, path)
        if isinstance(e, PoisonedCheckpointError):
            raise NonFiniteWeightsError(f"{state.desc}: {e} (end of epoch {state.epoch}); {state.kept()}. {_ADVICE}") from e
        if isinstance(e, DiskFullError):
            free = f"{human_bytes(e.free)} free" if e.free is not None else "free space unknown"
            raise CheckpointWriteFailed(
                f"{state.desc}: disk full writing {path} at the end of epoch {state.epoch}: it needs about "
                f"{human_bytes(e.needed)}, {free} in {path.parent}; {state.intact()} once space is freed") from None
        raise
    state.stale_dest = None
    state.saved_epoch = state.epoch
