"""``P`` computed once per training step and shared by the executor and the regularizer (issue 21).

``NAC.execute`` leaves every propagator's ``P`` (eq. 2) on the circuit design and
``NAC.graph_regularizer`` of the same design takes it (``NAC._shared_P``) instead of computing it
again. The reference form (each computes its own, as before) is ``_shared_P`` patched to always
recompute: the same logits, regularizer and loss, and every parameter gradient to float rounding
(not bit-exact: the backward through ``P`` now runs once on the sum of both consumers' gradients
instead of twice, a different summation order).
"""

import pytest
import torch
import torch.nn.functional as F
from tiny_models import COND_TOKENIZER, make_tiny_config, tiny_batch

from nac import build_model
from nac.model import NAC
from nac.training.loop import Objective

CONFIGS = {
    "kernel_per_module": dict(),
    "shared_kernel": dict(kernel_per_module=False, truncation_mode="masked"),
    "input_latents": dict(input_latents=3),
    "conditional_regularised": dict(generator="conditional", cond_tokenizer=COND_TOKENIZER, generator_regularizer=True),
}


def _recompute(self, design, layer, P=None):
    return P if P is not None else self._P(design.signatures, layer=layer)


def _model(**kw):
    torch.manual_seed(0)
    return build_model(make_tiny_config(variant="nac", signature_fit_steps=20, n_processor=12, depth=3, **kw)).train()


def _step(model, x, y, kw, calls):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(11)
    logits, reg = Objective(model)(x, **kw)
    loss = F.cross_entropy(logits, y) + reg
    loss.backward()
    grads = {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}
    return logits.detach(), reg.detach(), grads, torch.rand(()), len(calls)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_shared_P_gives_the_step_that_computes_it_twice(name, monkeypatch):
    model = _model(**CONFIGS[name])
    assert model.prior_target is not None
    x, y, kw = tiny_batch(model, seed=5)
    calls = []
    real = NAC._P
    monkeypatch.setattr(NAC, "_P", lambda self, *a, **k: calls.append(k.get("layer")) or real(self, *a, **k))
    shared = _step(model, x, y, kw, calls)
    calls.clear()
    monkeypatch.setattr(NAC, "_shared_P", _recompute)
    ref = _step(model, x, y, kw, calls)
    torch.testing.assert_close(shared[0], ref[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(shared[1], ref[1], rtol=1e-5, atol=1e-7)
    assert torch.equal(shared[3], ref[3])  # the same random-number stream
    floor = 1e-7 * max(float(g.abs().max()) for g in ref[2].values() if g is not None)
    for n, g in ref[2].items():
        assert (g is None) == (shared[2][n] is None), n
        if g is not None:
            torch.testing.assert_close(
                shared[2][n], g, rtol=1e-5, atol=max(1e-5 * float(g.abs().max()), floor), msg=lambda m, n=n: f"{n}: {m}"
            )
    kernels = model.config.depth if model.config.kernel_per_module else 1
    assert shared[4] == kernels + 1 and ref[4] == 2 * kernels + 1  # + the read-out's P


def test_shared_P_is_not_taken_when_stale():
    """After the signatures change (an optimizer step) or under another grad mode, the regularizer
    recomputes P instead of taking the executor's."""
    model = _model()
    x, _, _ = tiny_batch(model, seed=5)
    design = model.design()
    model(x, design=design)
    with torch.no_grad():
        model.generator.signatures.add_(0.3 * torch.randn_like(model.generator.signatures))
    expected = model.graph_regularizer(model.design())
    torch.testing.assert_close(model.graph_regularizer(design), expected)
    design = model.design()
    with torch.no_grad():
        model(x, design=design)
    reg = model.graph_regularizer(design)
    assert reg.requires_grad  # the no-grad P was not taken
    design = model.design()
    model(x, design=design)
    first = model.link_probabilities(design, layer=0)
    assert first is not model.link_probabilities(design, layer=0)  # taken once, then computed afresh


@pytest.mark.slow
def test_sharing_adds_no_graph_break():
    """Under ``torch.compile`` the shared P (and the batched modulation) trace without a graph
    break of their own (the training objective's other breaks are the regularizer's matching)."""
    import torch._dynamo as dynamo

    model = _model()
    model.sampler_impl = "prepared"  # CUDA's sampler
    x, _, _ = tiny_batch(model, seed=5)
    dynamo.reset()
    try:
        explained = dynamo.explain(Objective(model))(x)
    finally:
        dynamo.reset()
    ours = {"_shared_P", "_samplers", "link_probabilities", "code_modulations", "batched_modulations", "of"}
    for reason in explained.break_reasons:
        assert not {frame.name for frame in reason.user_stack} & ours, reason
