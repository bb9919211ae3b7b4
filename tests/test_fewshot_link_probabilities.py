"""Few-shot adaptation computes a NAC's link probabilities ``P`` (eq. 2) once per step (for the
forward and the graph regularizer, ``nac.training.objective.Objective``) and once per evaluation (for
every batch of queries), and gives what the plain forms give."""

import pytest
import torch

from nac.circuit_graph import CircuitGraph
from nac.registry import build_model
from nac.tracks import fewshot as fs
from nac.training.objective import Objective


def _plain_objective(self, inputs, mask=None, cond=None, cond_mask=None, perms=None):
    """The step before: the forward and the regularizer each compute ``P`` from the same design."""
    design = self.model.design(cond, cond_mask)
    return self.model(inputs, mask=mask, design=design), self.model.graph.regularizer(design)


@pytest.fixture
def counted(monkeypatch):
    """The number of ``CircuitGraph.kernel_probabilities`` calls (every propagator's ``P``) so far."""
    calls = []
    real = CircuitGraph.kernel_probabilities
    monkeypatch.setattr(CircuitGraph, "kernel_probabilities", lambda self, d: calls.append(1) or real(self, d))
    return calls


def test_an_adaptation_step_computes_P_once_and_trains_as_the_plain_step(tiny_config, counted, monkeypatch):
    """The same adapted model to float rounding (the backward through ``P`` runs once on the sum of
    both consumers' gradients instead of twice)."""
    torch.manual_seed(0)
    pre = build_model(tiny_config(variant="nac", num_classes=10)).eval()
    assert pre.prior_target is not None  # the regularizer reads P
    x = torch.randint(0, 256, (12, 3, 32, 32), dtype=torch.uint8)
    y = torch.arange(12) % 4
    cfg = fs.FewShotConfig(ways=4, shots=[3], steps=3, lr=1e-2, batch_size=8, precompute_tokens=False)
    assert cfg.reg_weight > 0
    once = fs.adapt(pre, x, y, cfg, seed=5).state_dict()
    assert len(counted) == cfg.steps
    monkeypatch.setattr(Objective, "forward", _plain_objective)
    counted.clear()
    twice = fs.adapt(pre, x, y, cfg, seed=5).state_dict()
    assert len(counted) == 2 * cfg.steps
    assert any(
        not torch.equal(once[k], v) for k, v in pre.state_dict().items() if k in once and v.shape == once[k].shape
    )
    for k, v in twice.items():
        torch.testing.assert_close(once[k], v, rtol=1e-5, atol=1e-6, msg=lambda m, k=k: f"{k}: {m}")


@pytest.mark.parametrize("variant", ["nac", "perceiver_io"])
def test_an_evaluation_computes_P_once_and_gives_the_per_batch_logits(tiny_config, counted, variant):
    """Bit for bit the logits of a plain forward per batch (an evaluation design draws no noise)."""
    torch.manual_seed(0)
    model = build_model(tiny_config(variant=variant, num_classes=4)).eval()
    qx = torch.randint(0, 256, (10, 3, 32, 32), dtype=torch.uint8)
    qy = torch.arange(10) % 4
    seen = []
    hook = model.register_forward_hook(lambda m, args, out: seen.append(out))
    torch.manual_seed(3)  # an eval kernel may be sampled: the same draws for both
    acc = fs.query_accuracy(model, qx, qy, batch_size=4)  # three batches
    hook.remove()
    assert len(counted) == 1  # (Perceiver IO: None, no signatures)
    torch.manual_seed(3)
    with torch.no_grad():
        plain = torch.cat([model(qx[i : i + 4]) for i in range(0, 10, 4)])
    assert torch.equal(torch.cat(seen), plain)
    assert acc == 100.0 * (plain.argmax(-1) == qy).float().mean().item()
