"""Every propagator's kernel drawn, its ``log K_hat`` computed and its regularizer term taken at
once, on CUDA's path (issue 21, item 1), against the per-layer forms.

* ``KernelSampler(P [L, U, V], layers=True)`` draws ``[L, B, U, V]`` by one ``torch.rand``;
  ``layer_kernel_biases`` computes every layer's ``log K_hat`` by one chain of ops
  (``NAC.graph._layer_samplers``). The plain form, ``nac/testing/reference_kernel.py``'s
  ``per_layer_kernels``, draws ``[B, U, V]`` and computes the bias in each layer.
* ``layer_losses_from_permutations`` (every layer's regularizer term from ``[L, n, n]``) against
  the sum of ``loss_from_permutation`` per layer.

Random stream: the CPU generator fills a ``torch.rand`` of ``[L, B, U, V]`` with the same numbers
as ``L`` draws of ``[B, U, V]`` one after another (tested below), so without drop-path (no draw
between two layers' kernels) both forms give the same step to float rounding and consume the
stream identically. With drop-path the batched form draws layers ``1..L-1``'s uniforms before
layer 0's drop-path mask instead of after it; both are independent draws, so reordering them
leaves the joint distribution of kernels and masks unchanged. The test with drop-path shows that
this reorder is the only difference: the per-layer form with its kernels drawn first gives the
batched form's step. (On CUDA, Philox splits one draw differently from ``L`` draws: other numbers,
each still an independent U(0, 1) draw, so the same distribution.)
"""

import copy
import types

import pytest
import torch
import torch.nn.functional as F
from tiny_models import TINY_KERNEL, make_tiny_config

from nac import build_model
from nac.circuits.kernel import KernelSampler, link_probabilities
from nac.regularizer import layer_losses_from_permutations, loss_from_permutation, stacked_permutations
from nac.testing.reference_kernel import per_layer_kernels, per_layer_samplers
from nac.training.objective import Objective


def _close(a, b, rtol=1e-5, scale=None):
    a, b = a.detach(), b.detach()
    scale = scale or max(float(a.abs().max()), float(b.abs().max()), 1e-12)
    torch.testing.assert_close(a, b, rtol=rtol, atol=rtol * scale)


def test_one_draw_is_the_per_layer_draws_on_the_cpu():
    """The CPU generator: one ``[L, B, U, V]`` draw is the ``L`` draws of ``[B, U, V]`` in a row,
    and the layered sampler's samples are each layer's prepared sampler's, to float rounding."""
    torch.manual_seed(1)
    one = torch.rand(3, 2, 7, 7)
    torch.manual_seed(1)
    assert torch.equal(one, torch.stack([torch.rand(2, 7, 7) for _ in range(3)]))
    g = torch.Generator().manual_seed(0)
    s = torch.randn(12, 5, generator=g)
    P = torch.stack([link_probabilities(s, bandwidth=bw, truncation=0.9, mode="direct") for bw in (0.5, 0.8, 1.3)])
    assert (P == 0).any()
    torch.manual_seed(3)
    K = KernelSampler(P, 0.5, layers=True)(4).dense()
    after = torch.rand(2)
    torch.manual_seed(3)
    ref = torch.stack([KernelSampler(p, 0.5, impl="prepared")(4).dense() for p in P])
    assert K.shape == (3, 4, 12, 12) and torch.equal(after, torch.rand(2))
    _close(K, ref)
    assert torch.equal(K == 0, ref == 0)
    for mode in ("expectation", "threshold", "dense"):  # no draw: every layer's kernel as it is
        out = KernelSampler(P, 0.5, mode=mode, layers=True)(4)
        ref = [KernelSampler(p, 0.5, mode)(4) for p in P]
        assert (out is None and mode == "dense") or torch.equal(out.dense(), torch.stack([r.dense() for r in ref]))


CONFIGS = {
    "default": dict(),  # inet_baral: one fixed, untruncated kernel
    "kernel_per_module": dict(TINY_KERNEL),  # tiny_inet_nc_x: truncated, a learnable bandwidth per module
    "shared_kernel": dict(TINY_KERNEL, kernel_per_module=False, truncation_mode="masked"),  # nac v1
    "input_latents": dict(input_latents=3),
}


def _model(drop_path=0.0, **kw):
    """A tiny NAC on CUDA's paths (``cpu_shortcuts=False``: the batched form is CUDA's)."""
    torch.manual_seed(0)
    cfg = make_tiny_config(variant="nac", signature_fit_steps=20, n_processor=12, depth=3, drop_path=drop_path, **kw)
    return build_model(cfg, cpu_shortcuts=False).train()


def _step(model, x, y, seed=7):
    torch.manual_seed(seed)
    logits, reg = Objective(model)(x)
    loss = F.cross_entropy(logits, y) + 0.1 * reg
    model.zero_grad(set_to_none=True)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), reg.detach(), loss.detach(), grads, torch.rand(3)


def _compare(fast, plain):
    (lf, rf, Lf, gf, nf), (lp, rp, Lp, gp, np_) = fast, plain
    _close(lf, lp)
    _close(rf, rp)
    _close(Lf, Lp)
    assert gf.keys() == gp.keys() and "generator.signatures" in gf
    scale = max(float(g.abs().max()) for g in gp.values())  # some gradients are 0 but for rounding
    for name in gf:
        _close(gf[name], gp[name], rtol=1e-4, scale=scale)
    assert torch.equal(nf, np_)  # the same numbers drawn from the stream


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("config", list(CONFIGS))
def test_batched_kernels_give_the_per_layer_step(config, train, monkeypatch):
    """CUDA's path (the CPU's shortcuts off): logits, regularizer, loss and every gradient of the
    batched form equal the per-layer form's; the batched form was taken (``Kernel(bias=...)``)."""
    model = _model(**CONFIGS[config]).train(train)
    seen = []
    real = type(model.propagators[0]).forward

    def spy(self, states, codes, K=None, *a, **k):
        seen.append(K)
        return real(self, states, codes, K, *a, **k)

    monkeypatch.setattr(type(model.propagators[0]), "forward", spy)
    x = torch.randint(0, 256, (3, 3, 32, 32), dtype=torch.uint8)
    y = torch.randint(0, 5, (3,))
    plain = per_layer_kernels(copy.deepcopy(model))
    fast = _step(model, x, y)
    assert len(seen) == 3 and all(K.bias is not None for K in seen)
    seen.clear()
    ref = _step(plain, x, y)
    assert len(seen) == 3 and not any(K.bias is not None for K in seen)
    _compare(fast, ref)


def _kernels_first(self, design, Ps=None, eval_kernel=None):
    """``per_layer_samplers`` with every layer's kernel drawn at the first layer's call: the
    batched form's order of the random stream, each layer's own sampler and bias."""
    samplers, sample_op = per_layer_samplers(self, design, Ps, eval_kernel)
    drawn = []

    def layer(i):
        def sample(B):
            if not drawn:
                drawn.extend(s(B) for s in samplers)
            return drawn[i]

        return sample

    return [layer(i) for i in range(len(samplers))], sample_op


def test_with_drop_path_only_the_order_of_independent_draws_differs():
    """With drop-path (a draw between layers) the per-layer form, its kernels drawn before the
    first layer's drop-path mask, gives the batched form's step: the batched form reorders
    independent draws and changes nothing else."""
    model = _model(drop_path=0.3, **TINY_KERNEL)  # a kernel per layer
    x = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8)
    y = torch.randint(0, 5, (4,))
    reordered = copy.deepcopy(model)
    reordered.graph.kernel_samplers = types.MethodType(_kernels_first, reordered.graph)
    _compare(_step(model, x, y), _step(reordered, x, y))


@pytest.mark.parametrize("kind", ["mse", "kl"])
def test_layer_losses_are_the_per_layer_sum(kind):
    g = torch.Generator().manual_seed(0)
    s = torch.randn(10, 4, generator=g, requires_grad=True)
    bw = torch.tensor([0.6, 1.0, 1.7], requires_grad=True)
    P = link_probabilities(s, bandwidth=bw.view(-1, 1, 1), truncation=0.9, mode="direct")
    G = (torch.rand(10, 10, generator=g) > 0.7).float()
    perms = [torch.randperm(10, generator=g) for _ in range(3)]
    fast = layer_losses_from_permutations(P, G.numpy(), stacked_permutations(perms, P.device), kind)
    ref = sum(loss_from_permutation(P[i], G, perms[i], kind) for i in range(3))
    _close(fast, ref)
    gf = torch.autograd.grad(fast, (s, bw), retain_graph=True)
    gr = torch.autograd.grad(ref, (s, bw))
    for a, b in zip(gf, gr):
        _close(a, b)
    with pytest.raises(ValueError, match=r"perms \[L, n\]"):
        layer_losses_from_permutations(P, G, torch.stack(perms)[:2], kind)
