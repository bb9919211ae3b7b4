"""Issue 21: the kernel sampler and the attention bias on the CUDA path have no data-dependent
shapes and no host syncs, and give the plain form's draws (same random stream) and gradients.

Syncs are found on the CPU by the aten ops CUDA would have to wait for (``nonzero``,
``_local_scalar_dense`` (``.item()``), ``is_nonzero`` (``bool(t)``), ``masked_select`` and
boolean-mask indexing), seen by a ``TorchDispatchMode``."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nac import build_model
from nac.circuits.kernel import Kernel, KernelSampler, link_probabilities, log_normalized_kernel, sample_kernel
from tests.conftest import make_tiny_config

SYNCS = {"nonzero", "_local_scalar_dense", "is_nonzero", "masked_select", "unique", "_unique2", "equal"}


class SyncOps(TorchDispatchMode):
    """The names of the ops that would make the host wait for the device."""

    def __init__(self):
        super().__init__()
        self.found = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._overloadpacket.__name__
        bool_index = name in ("index", "index_put", "index_put_") and any(
            isinstance(t, torch.Tensor) and t.dtype == torch.bool for t in (args[1] if len(args) > 1 else []) or []
        )
        if name in SYNCS or bool_index:
            self.found.append(name)
        return func(*args, **(kwargs or {}))


def _P(n=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(n, 5, generator=g).requires_grad_()
    P = link_probabilities(s, bandwidth=0.8, truncation=0.9)
    assert (P == 0).any() and (P > 0).any()
    return s, P


def test_the_sync_detector_sees_the_cpu_only_sparse_form():
    """The check can fail: the CPU's sparse sampler finds its links with nonzero."""
    _, P = _P()
    with SyncOps() as ops:
        KernelSampler(P, 0.5, impl="sparse")(3)
    assert "nonzero" in ops.found


@pytest.mark.parametrize("batch", [3, None])
def test_prepared_sampler_and_bias_have_no_host_sync_and_give_the_plain_draws(batch):
    s, P = _P()
    torch.manual_seed(0)
    with SyncOps() as ops:
        sampler = KernelSampler(P, 0.5, impl="prepared")
        Ks = [sampler(batch) for _ in range(2)]
        biases = [K.log_normalized() for K in Ks]
        loss = sum((b.clamp_min(-50) * torch.linspace(-1, 1, b.numel()).view_as(b)).sum() for b in biases)
        grad = torch.autograd.grad(loss, s, retain_graph=True)[0]
    assert ops.found == []
    assert all(isinstance(K, Kernel) and K.links is None for K in Ks)
    Ks = [K.dense() for K in Ks]
    after = torch.rand(4)
    # the plain form from the same seed: one torch.rand of the sample's shape per draw, so the same u
    torch.manual_seed(0)
    Kr = [sample_kernel(P, 0.5, batch_size=batch) for _ in range(2)]
    br = [log_normalized_kernel(K) for K in Kr]
    grad_r = torch.autograd.grad(
        sum((b.clamp_min(-50) * torch.linspace(-1, 1, b.numel()).view_as(b)).sum() for b in br), s
    )[0]
    assert torch.equal(torch.rand(4), after)  # the generator left where the plain form leaves it
    for a, b in zip(Ks, Kr):
        assert torch.equal(a == 0, b == 0)
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    for a, b in zip(biases, br):
        assert torch.equal(torch.isinf(a), torch.isinf(b))
        fin = torch.isfinite(a)
        torch.testing.assert_close(a[fin], b[fin], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(grad, grad_r, rtol=1e-4, atol=1e-4 * float(grad_r.abs().max()))


def test_prepared_and_sparse_draw_the_same_kernel():
    """CUDA's dense form and the CPU's sparse form: the same sample from the same seed."""
    _, P = _P()
    out = {}
    for impl in ("prepared", "sparse"):
        torch.manual_seed(1)
        out[impl] = KernelSampler(P, 0.5, impl=impl)(4)
    assert out["sparse"].links is not None and out["prepared"].links is None
    torch.testing.assert_close(out["prepared"].dense(), out["sparse"].dense(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("shortcuts", [False, True])
def test_nac_training_forward_on_the_cuda_path_has_no_host_sync(shortcuts):
    """The whole executor's forward and backward as CUDA runs them (``cpu_shortcuts=False``: the
    prepared sampler, the dense bias, SDPA); with the CPU's shortcuts on, the detector sees the
    sparse sampler's ``nonzero`` (the check can fail)."""
    torch.manual_seed(0)
    model = build_model(make_tiny_config(variant="nac"), cpu_shortcuts=shortcuts)
    model.train()
    x = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8)
    with SyncOps() as ops:
        model(x).sum().backward()
    assert (ops.found == []) != shortcuts, ops.found
