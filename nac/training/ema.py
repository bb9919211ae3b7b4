"""The exponential moving average of the weights (``train.ema``): PyTorch's ``AveragedModel``
(``make_ema``), updated by ``ema_update`` with the same arithmetic in one foreach op per dtype and
no host read (``tests/test_loop_sync.py`` proves the bits equal)."""

from __future__ import annotations

import itertools

import torch
import torch.nn as nn


def make_ema(model: nn.Module, decay: float) -> torch.optim.swa_utils.AveragedModel:
    """An EMA of ``model``'s parameters and buffers (BatchNorm statistics averaged too) at ``decay``."""
    return torch.optim.swa_utils.AveragedModel(
        model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(decay), use_buffers=True
    )


def ema_groups(ema, model: nn.Module) -> dict:
    """The EMA's tensors and the model's, paired as ``AveragedModel(use_buffers=True)`` pairs
    them (parameters, then buffers), grouped by dtype: ``{dtype: (averaged, current)}``."""
    groups: dict = {}
    for a, m in zip(
        itertools.chain(ema.module.parameters(), ema.module.buffers()),
        itertools.chain(model.parameters(), model.buffers()),
    ):
        avg, cur = groups.setdefault(a.dtype, ([], []))
        avg.append(a.detach())
        cur.append(m.detach())
    return groups


@torch.no_grad()
def ema_update(ema, groups: dict, decay: float, copy: bool) -> None:
    """``ema.update_parameters(model)`` for an EMA of ``decay`` without its host read of
    ``n_averaged`` (``copy``: the first update, known on the host) and with one foreach op per
    dtype: the same arithmetic (``torch._foreach_lerp_(avg, cur, 1 - decay)``, PyTorch's EMA),
    so the same bits (``tests/test_loop_sync.py``)."""
    for dtype, (avg, cur) in groups.items():
        if copy:
            torch._foreach_copy_(avg, cur)
        elif dtype.is_floating_point or dtype.is_complex:
            torch._foreach_lerp_(avg, cur, 1 - decay)
        else:  # integer buffers (BatchNorm's batch count), as PyTorch's EMA treats them
            for a, c in zip(avg, cur):
                a.copy_(a * decay + c * (1 - decay))
    ema.n_averaged += 1
