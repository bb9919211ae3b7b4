"""A training interrupted after an epoch and resumed from its checkpoint: ``interrupt_then_resume``,
the scaffolding of the exact-resume tests (tests/test_training.py, test_augment.py,
test_modular_networks.py), and its pieces ``Interrupt`` and ``stop_after``."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch

from nac.checkpoint_io import load_checkpoint
from nac.training.loop import fit


class Interrupt(Exception):
    """Stands for a kill: raised from a hook once the epoch's checkpoint is written."""


def stop_after(last: int) -> Callable[[int], None]:
    """An ``on_epoch_end`` hook that interrupts the run when epoch ``last`` (1-based) ends."""

    def hook(epoch: int) -> None:
        if epoch == last:
            raise Interrupt

    return hook


@dataclass
class Resumed:
    result: dict[str, Any]  # the resumed fit's return value (``history``, ...)
    model: torch.nn.Module  # the resumed model, after training
    interrupted: dict[str, Any]  # the checkpoint as the interrupted run left it


def interrupt_then_resume(
    make_model: Callable[[], torch.nn.Module],
    train,
    val,
    cfg,
    checkpoint: Path,
    *,
    stop_after_epoch: int = 1,
    reseed: int = 123,
) -> Resumed:
    """Fit ``make_model()`` under ``torch.manual_seed(0)`` (the seed the uninterrupted run it is
    compared with uses) until epoch ``stop_after_epoch`` ends, then (after checking the checkpoint
    holds that epoch) fit a new ``make_model()`` from the checkpoint in another process state:
    torch, ``random`` and numpy seeded with ``reseed``, so a resume that leans on the process's RNG
    state instead of the checkpoint's shows up as a different history."""
    torch.manual_seed(0)
    with pytest.raises(Interrupt):
        fit(
            make_model(),
            train,
            val,
            cfg,
            checkpoint=checkpoint,
            progress=False,
            on_epoch_end=stop_after(stop_after_epoch),
        )
    interrupted = load_checkpoint(checkpoint)
    assert interrupted["epoch"] == stop_after_epoch
    torch.manual_seed(reseed), random.seed(reseed), np.random.seed(reseed)
    model = make_model()
    return Resumed(fit(model, train, val, cfg, checkpoint=checkpoint, progress=False), model, interrupted)
