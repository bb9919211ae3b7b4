"""Issue 21: a training step with no host sync (finiteness checked on the device, metrics summed
there, labels copied non-blocking, the EMA as foreach ops), and the guarantees kept: a
non-finite step still stops training before a checkpoint is written, the EMA gives PyTorch's
bits."""

import copy
import sys
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nac import build_model
from nac.checkpoint_io import load_checkpoint
from nac.circuits import kernel
from nac.training import loop
from nac.training.config import TrainConfig
from nac.training.ema import ema_groups, ema_update
from nac.training.errors import NonFiniteLossError, NonFiniteWeightsError
from nac.training.loop import fit

sys.path.insert(0, str(Path(__file__).parent))
from test_overfit import Quadrants  # noqa: E402
from test_training import small_train  # noqa: E402

SYNCS = {"nonzero", "_local_scalar_dense", "is_nonzero", "masked_select", "equal"}


class SyncOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func._overloadpacket.__name__ in SYNCS:
            self.n += 1
        return func(*args, **(kwargs or {}))


def _syncs_in_fit(tiny_config, steps: int) -> int:
    torch.manual_seed(0)
    model = build_model(tiny_config(num_classes=4))
    kernel.CPU_SHORTCUTS = False  # CUDA's paths (the kernel sampler and SKMDPA keep CPU shortcuts)
    data = Quadrants(8 * steps, 0)
    try:
        with SyncOps() as ops:
            fit(model, data, None, small_train(epochs=1, batch_size=8, ema=0.9, adamw="fused"), progress=False)
    finally:
        kernel.CPU_SHORTCUTS = True
    return ops.n


@pytest.mark.slow  # ~20 s (two short fits under the op counter); CI runs it with the slow tests
def test_a_training_step_has_no_host_sync(tiny_config, monkeypatch):
    """fit(3 steps) - fit(2 steps) = one steady-state step: no sync op in it (the old loop had
    about ten: finiteness checks, .item(), the EMA's counter)."""
    monkeypatch.setattr(loop, "SYNC_EVERY", 1000)
    assert _syncs_in_fit(tiny_config, 3) - _syncs_in_fit(tiny_config, 2) == 0


def test_ema_update_is_bitwise_pytorchs(tiny_config):
    torch.manual_seed(0)
    model = build_model(tiny_config(num_classes=4))
    ref = torch.optim.swa_utils.AveragedModel(
        model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.9), use_buffers=True
    )
    ours = copy.deepcopy(ref)
    groups = ema_groups(ours, model)
    for i in range(4):
        with torch.no_grad():
            for t in list(model.parameters()) + [b for b in model.buffers() if b.is_floating_point()]:
                t.add_(torch.randn_like(t) * 0.1)
        ref.update_parameters(model)
        ema_update(ours, groups, 0.9, copy=i == 0)
    assert ours.n_averaged.item() == ref.n_averaged.item() == 4
    for (k, a), b in zip(ours.state_dict().items(), ref.state_dict().values()):
        assert torch.equal(a, b), k


@pytest.mark.parametrize(
    "sync_every", [1, pytest.param(1000, marks=pytest.mark.slow)]
)  # read every step / at epoch end
def test_non_finite_loss_mid_epoch_stops_before_the_checkpoint(tmp_path, tiny_config, monkeypatch, sync_every):
    """The record is read every SYNC_EVERY steps or at the epoch end; either way the error names
    the step that went wrong and nothing is saved after it."""
    monkeypatch.setattr(loop, "SYNC_EVERY", sync_every)
    model, ckpt = build_model(tiny_config(num_classes=4)), tmp_path / "n.pt"
    calls = []
    orig = loop.F.cross_entropy

    def poisoned(*a, **k):
        calls.append(1)
        out = orig(*a, **k)
        return out * float("nan") if len(calls) == 5 else out  # epoch 2, step 2 of 3

    monkeypatch.setattr(loop.F, "cross_entropy", poisoned)
    with pytest.raises(NonFiniteLossError, match=r"epoch 2, step 2;.*last good checkpoint is kept at .* \(epoch 1\)"):
        fit(model, Quadrants(48, 0), None, small_train(epochs=3), checkpoint=ckpt, progress=False)
    assert load_checkpoint(ckpt)["epoch"] == 1


def test_non_finite_weight_stops_before_the_checkpoint(tmp_path, tiny_config, monkeypatch):
    monkeypatch.setattr(loop, "SYNC_EVERY", 1000)
    from torch.optim.optimizer import register_optimizer_step_post_hook

    model, steps = build_model(tiny_config(num_classes=4)), []  # (built first: its signature fit steps an optimizer)

    def blow_up(optimizer, args, kwargs):
        steps.append(1)
        if len(steps) == 2:  # epoch 1, step 2
            with torch.no_grad():
                optimizer.param_groups[0]["params"][0].fill_(float("nan"))

    handle = register_optimizer_step_post_hook(blow_up)
    try:
        with pytest.raises(NonFiniteWeightsError, match=r"epoch 1, step 2 "):
            fit(model, Quadrants(48, 0), None, small_train(epochs=2), checkpoint=tmp_path / "w.pt", progress=False)
    finally:
        handle.remove()
    assert not (tmp_path / "w.pt").exists()


def test_adamw_is_a_train_param(tiny_config):
    assert TrainConfig(adamw="fused").adamw == "fused"
    assert "adamw" not in TrainConfig().to_dict()  # old checkpoints' train_config still matches
    with pytest.raises(ValueError, match="train.adamw"):
        TrainConfig(adamw="sgd")
