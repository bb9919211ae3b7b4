"""The training loop's finiteness checks: every step's loss, total gradient norm and weights
are checked on the device (``StepChecks.record``, no host sync); the host reads the record every
``nac.training.loop.SYNC_EVERY`` steps and at each epoch end (``StepChecks.raise_if_bad``) and
raises the error the failing step would have raised (``nac.training.errors``), naming that step.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.distributed as dist
import torch.nn as nn

from nac.model import NAC
from nac.training.distributed import World, all_reduce_
from nac.training.errors import (
    ADVICE,
    NonFiniteGradientError,
    NonFiniteLossError,
    NonFiniteTrainingError,
    NonFiniteWeightsError,
)
from nac.training.resume import RunState


def check_finite(
    value: torch.Tensor, what: str, error: type[NonFiniteTrainingError], state: RunState, world: World | None = None
) -> None:
    """Raise ``error`` when ``value`` is NaN or infinite on any process (all stop together;
    ``world=None``: a value already identical on every process, no collective needed)."""
    bad = torch.tensor(0.0 if torch.isfinite(value) else 1.0, device=value.device)
    if world is not None and world.distributed:
        all_reduce_(bad)
    if bad.item():
        raise error(
            f"{state.desc}: non-finite {what} at epoch {state.epoch}, step {state.step + 1}; {state.kept()}. {ADVICE}"
        )


def check_weights(model: NAC, state: RunState) -> None:
    """After the optimizer step: one fused norm over the parameters (identical on every process
    under DDP); only when it is not finite are the tensors inspected one by one, so a finite but
    overflowing norm is not mistaken for a NaN."""
    params = [p.detach() for p in model.parameters()]
    if bool(torch.isfinite(nn.utils.get_total_norm(params))):
        return
    bad = [name for name, p in model.named_parameters() if not bool(torch.isfinite(p).all())]
    if bad:
        raise NonFiniteWeightsError(
            f"{state.desc}: non-finite weights after the optimizer step at epoch {state.epoch}, "
            f"step {state.step + 1} ({', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''}); "
            f"{state.kept()}. {ADVICE}"
        )


class StepChecks:
    """The loop's finiteness checks, kept on the device: ``record`` notes (no host sync) the
    first step of the epoch whose loss, total gradient norm or weights (one fused norm over the
    parameters) is not finite, as ``3 * step + kind`` (kind 0 loss, 1 gradient norm, 2 weights:
    the order the old per-step checks raised in); ``raise_if_bad`` reads it (one sync; under DDP
    the minimum over the processes, so all stop together) and raises the error the per-step
    check raised, naming that step. A non-finite weight norm whose weights are all finite (an
    overflowing norm) is not an error, as before; the record then starts again."""

    NONE = 2**62

    def __init__(self, model: nn.Module, device):
        # detached once: views of the same storage, so they see every in-place optimizer update
        # (a detach per parameter per step would be ~300 ops of a NAC step)
        self.model, self.params = model, [p.detach() for p in model.parameters()]
        self.kinds = torch.arange(3, device=device)
        self.first = torch.full((), self.NONE, dtype=torch.long, device=device)

    def reset(self) -> None:
        self.first.fill_(self.NONE)

    @torch.no_grad()
    def record(self, step: int, loss: torch.Tensor, grad_norm: torch.Tensor) -> None:
        weights = nn.utils.get_total_norm(self.params)
        values = torch.stack([loss.detach().float(), grad_norm.detach().float(), weights.float()])
        codes = torch.where(torch.isfinite(values), self.NONE, self.kinds + 3 * step)
        torch.minimum(self.first, codes.min(), out=self.first)

    @contextmanager
    def guard(self, state: RunState):
        """Non-finite weights can make a later forward fail (the regularizer's matching refuses
        a NaN ``P``) before the record is read: an error there is reported as the non-finite
        step it came from, when there is one (this process's record: no collective)."""
        try:
            yield
        except Exception:
            self.raise_if_bad(state, None)
            raise

    def raise_if_bad(self, state: RunState, world: World | None) -> None:
        first = self.first
        if world is not None and world.distributed:
            first = all_reduce_(first.clone(), op=dist.ReduceOp.MIN)
        code = int(first)
        if code == self.NONE:
            return
        step, kind = divmod(code, 3)
        seen, state.step = state.step, step  # the messages name state.step + 1
        nan = torch.tensor(float("nan"))
        try:
            if kind == 0:
                check_finite(nan, "loss", NonFiniteLossError, state)
            if kind == 1:
                check_finite(nan, "gradient norm", NonFiniteGradientError, state)
            check_weights(self.model, state)
        finally:
            state.step = seen
        self.reset()  # an overflowing norm of finite weights: not an error
