"""Graph Structure Regularizer (paper section 2): closest permutation and loss."""
import numpy as np
import pytest
import torch
from scipy.optimize import linear_sum_assignment

from nac.circuits.kernel import link_probabilities
from nac.graphs import PRIORS, prior_target
from nac.regularizer import closest_permutation, graph_structure_loss


def _objective(P, G, perm):
    return float(((P[perm][:, perm] - G).double() ** 2).mean())


def _authors_perm(P, G):
    """The authors' step alone: Hungarian on C[t, i] = mean_j (G[t, j] - P[i, j])^2."""
    Pn, Gn = P.double().numpy(), G.double().numpy()
    cost = ((Gn[:, None, :] - Pn[None, :, :]) ** 2).mean(-1)
    rows, cols = linear_sum_assignment(cost)
    return torch.as_tensor(cols[np.argsort(rows)])


@pytest.mark.parametrize("name", PRIORS)
@pytest.mark.parametrize("n", [16, 32, 64])
def test_loss_is_zero_for_a_permuted_copy_of_the_target(name, n):
    G = torch.from_numpy(prior_target(name, n))
    for seed in range(3):
        pi = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
        P = G[pi][:, pi]
        perm = closest_permutation(P, G)
        assert perm.dtype == torch.long and torch.equal(perm.sort().values, torch.arange(n))
        assert graph_structure_loss(P, G).item() < 1e-10
        assert graph_structure_loss(P, G, kind="kl").item() < 1e-10


def test_authors_step_alone_misses_the_permutation():
    # Why closest_permutation does more than the authors' step: their row cost does not align
    # columns, so it fails even on an exact permuted copy.
    G = torch.from_numpy(prior_target("planted_partition", 64))
    pi = torch.randperm(64, generator=torch.Generator().manual_seed(0))
    P = G[pi][:, pi]
    assert _objective(P, G, _authors_perm(P, G)) > 1e-3
    assert _objective(P, G, closest_permutation(P, G)) < 1e-10


@pytest.mark.parametrize("name", PRIORS)
def test_loss_is_positive_and_never_worse_than_the_authors_matching(name):
    n = 48
    G = torch.from_numpy(prior_target(name, n))
    g = torch.Generator().manual_seed(1)
    P_random = link_probabilities(torch.randn(n, 16, generator=g))
    pi = torch.randperm(n, generator=g)
    noise = 0.1 * torch.randn(n, n, generator=g)
    P_noisy = (G[pi][:, pi] + (noise + noise.T) / 2).clamp(0, 1).fill_diagonal_(1.0)
    for P in (P_random, P_noisy):
        ours = _objective(P, G, closest_permutation(P, G))
        assert ours <= _objective(P, G, _authors_perm(P, G)) + 1e-12
        assert graph_structure_loss(P, G).item() == pytest.approx(ours, rel=1e-4)
        assert ours > 1e-4 and graph_structure_loss(P, G, kind="kl").item() > 1e-4


@pytest.mark.parametrize("kind", ["mse", "kl"])
def test_gradient_reaches_the_signatures_through_the_kernel(kind):
    sig = torch.randn(32, 8, requires_grad=True)
    G = torch.from_numpy(prior_target("scale_free", 32))
    loss = graph_structure_loss(link_probabilities(sig), G, kind=kind)
    loss.backward()
    assert torch.isfinite(sig.grad).all() and sig.grad.abs().sum() > 0
    # the permutation is a constant: the gradient is that of the loss at the fixed matching
    perm = closest_permutation(link_probabilities(sig), G)
    assert not perm.requires_grad
    sig2 = sig.detach().clone().requires_grad_(True)
    P = link_probabilities(sig2)[perm][:, perm]
    if kind == "mse":
        ref = ((P - G) ** 2).mean()
    else:
        p, g = P.clamp(1e-6, 1 - 1e-6), G.clamp(1e-6, 1 - 1e-6)
        ref = (g * (g / p).log() + (1 - g) * ((1 - g) / (1 - p)).log()).mean()
    ref.backward()
    assert torch.allclose(sig.grad, sig2.grad, atol=1e-6)


def test_accepts_a_numpy_target_and_cheap_settings():
    G = prior_target("ring_of_cliques", 32)
    P = link_probabilities(torch.randn(32, 8))
    cheap = closest_permutation(P, torch.from_numpy(G), refine_steps=0, wl_rounds=0)
    full = closest_permutation(P, torch.from_numpy(G))
    Gt = torch.from_numpy(G)
    assert _objective(P, Gt, full) <= _objective(P, Gt, cheap) + 1e-12
    assert graph_structure_loss(P, G).shape == ()


def test_bad_arguments_raise_with_the_fix():
    P = torch.rand(8, 8)
    with pytest.raises(ValueError, match="valid choices: mse, kl"):
        graph_structure_loss(P, P, kind="l1")
    with pytest.raises(ValueError, match="same n"):
        closest_permutation(P, torch.rand(9, 9))
    with pytest.raises(ValueError, match="same n"):
        graph_structure_loss(torch.rand(2, 8, 8), torch.rand(8, 8))
    with pytest.raises(ValueError, match=">= 0"):
        closest_permutation(P, P, refine_steps=-1)
