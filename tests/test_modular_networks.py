"""Modular Networks baseline (Kirsch et al. 2018): shapes, summed modules, generalized Viterbi EM
(the E-step never lowers a*'s score), a* in the checkpoint (exact resume), evaluation by the
controller's mode, and the training loop's generic hook."""

import json

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from interrupted_runs import interrupt_then_resume
from test_overfit import Quadrants, quadrant_batch

from nac.baselines import ModularNetwork, ModularNetworkConfig
from nac.baselines.modular_networks import ConvModules, DenseModules
from nac.evaluation import predict
from nac.training.config import TrainConfig
from nac.training.loop import fit
from nac.training.run import WithIndex


def tiny_config(**kw):
    base = dict(
        num_classes=4,
        image_size=32,
        conv_layers=[4, 4],
        pool_after=[0, 1],
        dense_layers=[8],
        modules_per_layer=3,
        k=2,
        e_step_every=2,
        samples=4,
        dataset_size=32,
    )
    base.update(kw)
    return ModularNetworkConfig(**base)


def train_cfg(**kw):
    base = dict(
        epochs=2, batch_size=8, lr=3e-3, warmup_epochs=0, min_lr=1e-4, label_smoothing=0.0, augment=False, seed=0
    )
    base.update(kw)
    return TrainConfig(**base)


def test_config_defaults_roundtrip_and_validation():
    c = ModularNetworkConfig()
    assert (c.variant, c.conv_layers, c.kernel_size, c.modules_per_layer, c.k, c.e_step_every, c.samples) == (
        "modular_network",
        [8, 8, 8, 8],
        3,
        5,
        1,
        10,
        10,
    )
    d = json.loads(json.dumps(c.to_dict()))
    assert ModularNetworkConfig.from_dict(d) == c
    with pytest.raises(ValueError, match=r"model\.bogus=1: Unexpected keyword argument; remove it"):
        ModularNetworkConfig.from_dict({**d, "bogus": 1})
    with pytest.raises(ValueError, match="pool_after"):
        ModularNetworkConfig(conv_layers=[8], pool_after=[3])
    m = ModularNetwork(ModularNetworkConfig(dataset_size=7))
    assert m.best_selection.shape == (7, 4, 1) and m.best_selection.dtype == torch.long
    assert int(m.best_selection.min()) >= 0 and int(m.best_selection.max()) < 5
    assert m.layers[0].weight.shape == (5, 3, 3, 3, 8)  # [M, kh, kw, cin, cout]


def test_shapes_finite_grads_and_determinism():
    torch.manual_seed(0)
    model = ModularNetwork(tiny_config())
    x, y = quadrant_batch(12, 0)
    model.eval()
    out = model(x)
    assert out.shape == (12, 4) and torch.isfinite(out).all()
    assert torch.equal(out, model(x))
    torch.manual_seed(0)
    assert torch.equal(out, ModularNetwork(tiny_config()).eval()(x))
    # a selection using every module of every layer: every parameter (and every module) gets a gradient
    model.train()
    idx = torch.arange(12)
    with torch.no_grad():
        model.best_selection[idx] = (
            (idx[:, None, None] + torch.arange(2)[None, None, :]) % 3 * torch.ones(1, 3, 1, dtype=torch.long)
        )
    logits, loss = model.training_loss({"inputs": x}, y, idx, step=1)
    assert logits.shape == (12, 4) and torch.isfinite(loss)
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name
    for layer in model.layers:
        for m in range(3):
            assert layer.weight.grad[m].abs().sum() > 0


def test_k_module_outputs_are_summed():
    torch.manual_seed(0)
    conv = ConvModules(num_modules=3, k=2, cin=3, cout=4, kernel_size=3, size=8)
    nn.init.normal_(conv.bias)
    x = torch.randn(5, 3, 8, 8)
    sel = torch.tensor([[0, 1], [2, 2], [1, 0], [2, 1], [0, 0]])
    want = torch.stack(
        [
            sum(
                F.relu(F.conv2d(x[b : b + 1], conv.module_weight(int(m)), conv.bias[int(m)], padding=1))[0]
                for m in sel[b]
            )
            for b in range(5)
        ]
    )
    assert torch.allclose(conv(x, sel), want, atol=1e-5)
    dense = DenseModules(num_modules=3, k=2, d_in=6, d_out=4)
    nn.init.normal_(dense.bias)
    h = torch.randn(5, 6)
    want = torch.stack(
        [sum(F.relu(h[b] @ dense.weight[int(m)] + dense.bias[int(m)]) for m in sel[b]) for b in range(5)]
    )
    assert torch.allclose(dense(h, sel), want, atol=1e-5)


def test_e_step_never_lowers_the_stored_score():
    torch.manual_seed(0)
    model = ModularNetwork(tiny_config(samples=5))
    x, y = quadrant_batch(16, 3)
    idx = torch.arange(16)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    improved = 0
    for it in range(6):
        before = model.selection_score(x, y, model.best_selection[idx].clone())
        res = model.e_step(x, y, idx)
        after = model.selection_score(x, y, model.best_selection[idx])
        assert torch.allclose(res["old"], before, atol=1e-4)
        assert torch.allclose(res["new"], after, atol=1e-4)
        assert (after >= before - 1e-4).all(), (after - before).min()
        improved += int((after > before + 1e-4).sum())
        _, loss = model.training_loss({"inputs": x}, y, idx, step=1)  # an M-step in between (changes the scores)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert improved > 0  # the E-step did replace some a*


def test_evaluation_uses_the_controller_mode_not_a_star():
    torch.manual_seed(0)
    model = ModularNetwork(tiny_config())
    x, y = quadrant_batch(16, 2)
    model.eval()
    logits = model(x)
    usage = model.module_usage(x)
    assert usage.shape == (16, 3, 2)
    # the mode, layer by layer, from the controllers' own logits
    logits2, _, sel, logqs = model.run(x, lambda layer, logq: logq.argmax(-1))
    assert torch.equal(sel, usage) and torch.equal(logits2, logits)
    for layer, logq in enumerate(logqs):
        assert torch.equal(usage[:, layer], logq.argmax(-1))
    with torch.no_grad():
        model.best_selection.copy_(torch.randint(0, 3, model.best_selection.shape))
    assert torch.equal(model(x), logits)
    model.train()
    assert torch.equal(model(x), logits)  # plain forward in train mode: the mode too
    data = [{"input": x[i], "label": y[i]} for i in range(16)]
    assert torch.allclose(torch.from_numpy(predict(model, data, batch_size=16)["logits"]), logits)
    stats = model.selection_entropy(x)
    for key in ("exp_selection_entropy", "exp_batch_selection_entropy"):
        assert len(stats[key]) == 3 and all(1.0 - 1e-4 <= v <= 3.0 + 1e-4 for v in stats[key])


def test_a_star_survives_checkpoint_and_resume_bit_exactly(tmp_path):
    cfg, train, val = train_cfg(epochs=2), Quadrants(32, 0), Quadrants(8, 1)
    init = ModularNetwork(tiny_config()).best_selection.clone()
    torch.manual_seed(0)
    full_model = ModularNetwork(tiny_config())
    full = fit(full_model, train, val, cfg, checkpoint=tmp_path / "a.pt", progress=False)

    resumed = interrupt_then_resume(lambda: ModularNetwork(tiny_config()), train, val, cfg, tmp_path / "b.pt")
    assert resumed.interrupted["model"]["best_selection"].shape == (32, 3, 2)
    assert resumed.result["history"] == full["history"]
    assert not torch.equal(full_model.best_selection, init)  # the E-steps changed a*
    a, b = full_model.state_dict(), resumed.model.state_dict()
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert all(torch.isfinite(torch.tensor(v)) for h in full["history"] for v in h.values())


class _Probe(nn.Module):
    """A model without ``training_loss``: records the batches the loop hands it."""

    def __init__(self):
        super().__init__()
        self.config = ModularNetworkConfig(dataset_size=0)
        self.lin = nn.Linear(3 * 32 * 32, 4)
        self.seen = []

    def design(self, cond=None, cond_mask=None):
        return None

    def graph_regularizer(self, design=None):
        return torch.zeros(())

    def forward(self, inputs, mask=None, cond=None, cond_mask=None, design=None):
        self.seen.append(inputs.clone())
        return self.lin(inputs.float().flatten(1) / 255)


def test_loop_hook_leaves_models_without_it_unchanged():
    train = Quadrants(16, 0)
    probe = _Probe()
    fit(probe, train, None, train_cfg(epochs=1), progress=False)
    assert not hasattr(probe, "training_loss")
    # the batches a plain model sees are the plain items in the sampler's order (no index added)
    seen = torch.cat(probe.seen)
    assert seen.shape == (16, 3, 32, 32)
    assert sorted(seen.flatten(1).sum(1).tolist()) == sorted(train.x.flatten(1).sum(1).tolist())
    item = WithIndex(train)[5]
    assert item["index"] == 5 and torch.equal(item["input"], train[5]["input"])


def test_training_loss_hook_receives_indices_and_the_global_step():
    calls = []

    class Spy(ModularNetwork):
        def training_loss(self, batch_kwargs, labels, indices, step, label_smoothing=0.0):
            calls.append((indices.clone(), step, label_smoothing))
            return super().training_loss(batch_kwargs, labels, indices, step, label_smoothing)

    train = Quadrants(32, 0)
    torch.manual_seed(0)
    out = fit(Spy(tiny_config()), train, None, train_cfg(epochs=1, label_smoothing=0.1), progress=False)
    assert [c[1] for c in calls] == [0, 1, 2, 3]
    assert all(c[2] == 0.1 for c in calls)
    assert sorted(torch.cat([c[0] for c in calls]).tolist()) == list(range(32))  # one epoch: every example once
    assert out["final"]["train_reg"] == 0.0 and out["final"]["train_loss"] > 0
