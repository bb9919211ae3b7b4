"""A training's checkpoint: where training stands (``RunState``, for the messages that say which
checkpoint is kept), resuming from a checkpoint written with the same settings (``resume_from``;
else it is moved aside on the first save) and the atomic per-epoch save (``save_epoch``).
``nac.training.loop.fit`` uses these; the errors they raise are in ``nac.training.errors``.
"""

from __future__ import annotations

import os
from pathlib import Path

from tqdm.auto import tqdm

from nac.checkpoint_io import (
    DamagedCheckpointError,
    DiskFullError,
    PoisonedCheckpointError,
    aside_path,
    dict_diff,
    human_bytes,
    load_checkpoint,
    move_aside,
    save_checkpoint,
)
from nac.model import NAC
from nac.training.config import TrainConfig
from nac.training.distributed import World, barrier
from nac.training.errors import ADVICE, CheckpointWriteFailed, NonFiniteWeightsError


class RunState:
    """Where training stands, for the messages that say what is kept: the 1-based epoch and
    step in progress, the epoch of this run's last checkpoint, a foreign checkpoint still in
    place (written with other settings, to be moved aside on the first save)."""

    def __init__(self, ckpt_path: Path | None, desc: str, mirror: Path | None = None):
        self.ckpt_path, self.desc = ckpt_path, desc
        self.mirror = mirror  # the checkpoint's resume mirror (nac.checkpoint_io.mirror_path), if any
        self.epoch, self.step, self.saved_epoch = 0, 0, 0  # step: steps completed in the epoch
        self.stale_dest: Path | None = None  # where the foreign checkpoint goes on the first save
        self.stale_reason = ""

    def kept(self) -> str:
        """For errors of the training itself (``NonFiniteTrainingError``)."""
        if self.ckpt_path is None:
            return "no checkpoint is kept (fit was called without one)"
        if self.saved_epoch:
            return f"the last good checkpoint is kept at {self.ckpt_path} (epoch {self.saved_epoch})"
        if self.stale_dest is not None:
            return (
                f"the last good checkpoint is kept at {self.ckpt_path} (written with other settings, not resumed; "
                "this run had not saved one yet)"
            )
        return "no checkpoint was written yet"

    def intact(self) -> str:
        """For ``TrainingStopped``: what is on disk and what a rerun does."""
        if self.ckpt_path is None:
            return "no checkpoint is kept (fit was called without one)"
        if self.saved_epoch:
            return f"the checkpoint of epoch {self.saved_epoch} at {self.ckpt_path} is intact; rerun to resume"
        if self.stale_dest is not None:
            return (
                f"no checkpoint of this run was written yet ({self.ckpt_path}, written with other settings, is "
                "untouched); rerun to start over"
            )
        if self.ckpt_path.exists():  # stopped while resuming it: not yet read, never written
            return f"the checkpoint at {self.ckpt_path} is untouched; rerun to resume"
        return "no checkpoint was written yet; rerun to start over"


def resume_from(
    ckpt_path: Path,
    model: NAC,
    optimizer,
    ema,
    cfg: TrainConfig,
    fingerprint: str | None,
    world: World,
    desc: str,
    progress: bool,
    state: RunState,
    scheduler=None,
) -> tuple[int, list]:
    """Load the checkpoint when it was written with the same settings; returns ``(epoch, history)``.
    ``scheduler``: the LR scheduler, restored from the checkpoint's ``"scheduler"`` state (a
    checkpoint without one, written before the schedule was a torch scheduler, is not resumed).
    Otherwise plan to move it aside (``state.stale_dest``) and start over: it stays in place until
    this run writes its own first checkpoint, so a run that fails before that loses nothing."""
    try:
        ckpt = load_checkpoint(ckpt_path, map_location=world.device)
    except PoisonedCheckpointError:  # written before checkpoints were checked: worthless, never resumed
        barrier()  # every process has read it before the main one moves it
        if world.is_main:
            moved = move_aside(ckpt_path, tag="nonfinite", mirror_to=state.mirror)
            tqdm.write(
                f"{desc}: {ckpt_path} holds NaN or infinite values (a diverged run); moved it to {moved}; starting over"
            )
        return 0, []
    except DamagedCheckpointError as e:  # empty or truncated (a write or copy cut short): nothing to resume
        barrier()
        if world.is_main:
            moved = move_aside(ckpt_path, tag="damaged", mirror_to=state.mirror)
            tqdm.write(f"{desc}: {ckpt_path} cannot be read ({e.reason}); moved it to {moved}; starting over")
        return 0, []
    differ = []
    if ckpt.get("config") != model.config.to_dict():
        differ.append("config (" + ", ".join(dict_diff(ckpt.get("config") or {}, model.config.to_dict())) + ")")
    if ckpt.get("train_config") != cfg.to_dict():
        differ.append("train_config (" + ", ".join(dict_diff(ckpt.get("train_config") or {}, cfg.to_dict())) + ")")
    if ckpt.get("fingerprint") != fingerprint:
        differ.append(
            f"fingerprint (checkpoint {ckpt.get('fingerprint')}, now {fingerprint}: the data or the code "
            "that determines the result changed)"
        )
    if scheduler is not None and "scheduler" not in ckpt:
        differ.append("scheduler (the checkpoint has no LR scheduler state: written by older code)")
    if not differ:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        if scheduler is not None:
            scheduler.load_state_dict(ckpt["scheduler"])
        if ema is not None:
            ema.load_state_dict(ckpt["ema"])
        if world.is_main and progress:
            tqdm.write(f"{desc}: resuming from {ckpt_path} after epoch {int(ckpt['epoch'])}/{cfg.epochs}")
        return int(ckpt["epoch"]), list(ckpt["history"])
    state.stale_dest, state.stale_reason = aside_path(ckpt_path), "; ".join(differ)
    if world.is_main:
        tqdm.write(
            f"{desc}: {ckpt_path} was written with other settings: {state.stale_reason}; starting over, and "
            f"moving it to {state.stale_dest} when this run saves its first checkpoint"
        )
    return 0, []


def save_epoch(state: RunState, model: NAC, **extra) -> None:
    """Write this run's checkpoint (moving a foreign one aside first); converts a refused or
    failed write into the error that says what is kept."""
    path = state.ckpt_path
    moved = None
    if state.stale_dest is not None and path.exists():
        moved = move_aside(path, state.stale_dest, mirror_to=state.mirror)
        if moved != state.stale_dest:
            tqdm.write(f"{state.desc}: moved {path} (written with other settings) to {moved}")
    try:
        save_checkpoint(path, model, mirror_to=state.mirror, **extra)
    except BaseException as e:
        if moved is not None and not path.exists():  # this run wrote nothing: put the old one back
            os.replace(moved, path)
        if isinstance(e, PoisonedCheckpointError):
            raise NonFiniteWeightsError(
                f"{state.desc}: {e} (end of epoch {state.epoch}); {state.kept()}. {ADVICE}"
            ) from e
        if isinstance(e, DiskFullError):
            free = f"{human_bytes(e.free)} free" if e.free is not None else "free space unknown"
            raise CheckpointWriteFailed(
                f"{state.desc}: disk full writing {path} at the end of epoch {state.epoch}: it needs about "
                f"{human_bytes(e.needed)}, {free} in {path.parent}; {state.intact()} once space is freed"
            ) from None
        raise
    state.stale_dest = None
    state.saved_epoch = state.epoch
