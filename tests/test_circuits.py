"""Each equation of the paper against an obvious direct implementation."""

import math
from contextlib import nullcontext

import pytest
import torch
import torch.nn.functional as F

from nac.circuits.attention import SKMDPA
from nac.circuits.generators import ConditionalCircuitGenerator
from nac.circuits.kernel import Kernel, link_probabilities, log_normalized_kernel, sample_kernel
from nac.circuits.modfc import ModFC, ModFCForm, ModFFN
from nac.circuits.readin import ReadIn
from nac.testing.reference_forms import direct_readin
from nac.testing.reference_kernel import plain_log_normalized_kernel


# ---------------------------------------------------------------- eq. 1: ModFC
def test_modfc_with_alpha_zero_is_a_linear_layer():
    fc = ModFC(6, 5, d_code=4)
    with torch.no_grad():
        fc.alpha.zero_()
    x, codes = torch.randn(3, 7, 6), torch.randn(7, 4)
    assert torch.allclose(fc(x, codes), fc.linear(x), atol=1e-6)


def test_modfc_matches_equation_per_module_and_per_sample_codes():
    fc = ModFC(6, 5, d_code=4, form=ModFCForm(alpha_init=0.3))
    x = torch.randn(2, 3, 6)
    for codes in (torch.randn(3, 4), torch.randn(2, 3, 4)):
        expected = torch.empty(2, 3, 5)
        for b in range(2):
            for u in range(3):
                c = codes[u] if codes.dim() == 2 else codes[b, u]
                scale = 1 + fc.alpha * F.layer_norm(
                    fc.code_proj.weight @ c, (6,), fc.code_norm.weight, fc.code_norm.bias
                )
                expected[b, u] = fc.linear.weight @ (x[b, u] * scale) + fc.linear.bias
        assert torch.allclose(fc(x, codes), expected, atol=1e-5)
    assert fc.alpha.item() == pytest.approx(0.3)


def test_modfc_alpha_initialised_to_0_1_and_codes_change_output():
    fc = ModFC(6, 5, d_code=4)
    assert fc.alpha.item() == pytest.approx(0.1)
    x_same = torch.randn(1, 1, 6).expand(1, 2, 6)  # the same input to both modules
    y = fc(x_same, torch.randn(2, 4))
    assert not torch.allclose(y[0, 0], y[0, 1])


def test_modfc_unmodulated_ignores_code_and_modffn_shapes():
    fc = ModFC(6, 5, d_code=4, form=ModFCForm(modulated=False))
    x = torch.randn(2, 3, 6)
    assert torch.equal(fc(x, None), fc.linear(x))
    for gated in (False, True):
        ffn = ModFFN(d=6, d_code=4, ffn_mult=2.0, gated=gated)
        assert ffn(x, torch.randn(2, 3, 4)).shape == (2, 3, 6)


# ---------------------------------------------------------------- eq. 2: kernel
def test_link_probabilities_formula():
    s = torch.randn(5, 3)
    P = link_probabilities(s, bandwidth=0.7)
    for i in range(5):
        for j in range(5):
            cos = torch.dot(s[i], s[j]) / (s[i].norm() * s[j].norm())
            assert P[i, j].item() == pytest.approx(math.exp(-(1 - cos.item()) / 0.7), rel=1e-5)
    assert torch.allclose(P.diagonal(), torch.ones(5))


def test_truncation_gives_exact_zeros_and_straight_through_gradients():
    from nac.circuits.kernel import cosine_distance

    torch.manual_seed(0)
    s = torch.randn(10, 6, requires_grad=True)
    d = cosine_distance(s).detach()
    cut = d > 0.9
    assert cut.any() and (~cut).any()
    P = link_probabilities(s, bandwidth=0.8, truncation=0.9)
    assert torch.all(P[cut] == 0) and torch.all(P[~cut] > 0)
    assert torch.allclose(P[~cut], torch.exp(-d / 0.8)[~cut])
    # straight-through: a loss on truncated pairs only still reaches their signatures
    P[cut].sum().backward()
    i, j = cut.nonzero()[0].tolist()
    assert s.grad[i].abs().sum() > 0 and s.grad[j].abs().sum() > 0
    s.grad = None
    hard = link_probabilities(s, bandwidth=0.8, truncation=0.9, straight_through=False)
    hard[cut].sum().backward()
    assert s.grad is None or s.grad.abs().sum() == 0  # without it, a cut pair gets no gradient
    # the bandwidth is differentiable
    bw = torch.tensor(1.0, requires_grad=True)
    link_probabilities(s.detach(), bandwidth=bw, truncation=0.9).sum().backward()
    assert bw.grad.abs() > 0


def test_truncated_links_stay_exactly_zero_in_kernel_samples():
    torch.manual_seed(0)
    P = link_probabilities(torch.randn(12, 6), truncation=0.9)
    K = sample_kernel(P, tau=0.5, batch_size=64)
    assert torch.all(K[:, P == 0] == 0) and torch.all(K[:, P > 0] > 0)
    assert sample_kernel(P, 0.5, mode="dense") is None


def test_kernel_samples_become_binary_as_tau_goes_to_zero():
    P = torch.rand(6, 6) * 0.8 + 0.1
    torch.manual_seed(0)
    K_warm = sample_kernel(P, tau=1.0, batch_size=4000)
    K_cold = sample_kernel(P, tau=1e-3, batch_size=4000)
    frac_binary = lambda K: ((K < 1e-3) | (K > 1 - 1e-3)).float().mean().item()
    assert frac_binary(K_cold) > 0.99 > frac_binary(K_warm)
    # and 0/1 with the right frequencies: P(K = 1) = P
    assert torch.allclose((K_cold > 0.5).float().mean(0), P, atol=0.03)


def test_kernel_samples_are_independent_per_example_and_eval_modes():
    P = torch.full((4, 4), 0.5)
    K = sample_kernel(P, tau=0.5, batch_size=3)
    assert K.shape == (3, 4, 4) and not torch.allclose(K[0], K[1])
    assert torch.equal(sample_kernel(P, 0.5, mode="expectation"), P)
    P2 = torch.tensor([[1.0, 0.2], [0.7, 0.5]])
    assert torch.equal(sample_kernel(P2, 0.5, mode="threshold"), torch.tensor([[1.0, 0.0], [1.0, 0.0]]))
    with pytest.raises(ValueError, match="expectation, threshold, sample"):
        sample_kernel(P, 0.5, mode="bogus")


def test_kernel_sample_is_differentiable():
    s = torch.randn(4, 3, requires_grad=True)
    sample_kernel(link_probabilities(s), tau=0.5, batch_size=2).sum().backward()
    assert s.grad is not None and s.grad.abs().sum() > 0


# ---------------------------------------------------------------- eq. 3: SKMDPA
def _plain_mha(attn: SKMDPA, xr, xs, cr, cs, bias=None):
    """Obvious multi-head attention with the layer's own projections."""
    H, e = attn.heads, attn.d_head
    q = attn.q(xr, cr).view(*xr.shape[:2], H, e)
    k = attn.k(xs, cs).view(*xs.shape[:2], H, e)
    v = attn.v(xs, cs).view(*xs.shape[:2], H, e)
    scores = torch.einsum("buhe,bvhe->bhuv", q, k) / math.sqrt(e)
    if bias is not None:
        scores = scores + bias
    w = scores.softmax(-1)
    return attn.out(torch.einsum("bhuv,bvhe->buhe", w, v).flatten(2), cr)


def test_skmdpa_with_all_ones_kernel_is_plain_attention():
    attn = SKMDPA(d=16, d_code=8, heads=4)
    xr, xs, cr, cs = torch.randn(2, 5, 16), torch.randn(2, 7, 16), torch.randn(5, 8), torch.randn(7, 8)
    ones = torch.ones(5, 7)
    expected = _plain_mha(attn, xr, xs, cr, cs)
    assert torch.allclose(attn(xr, xs, cr, cs, K=Kernel(ones)), expected, atol=1e-5)
    assert torch.allclose(attn(xr, xs, cr, cs, K=None), expected, atol=1e-5)


def test_skmdpa_matches_equation_3_with_a_kernel():
    attn = SKMDPA(d=16, d_code=8, heads=2)
    xr, xs, cr, cs = torch.randn(3, 5, 16), torch.randn(3, 6, 16), torch.randn(3, 5, 8), torch.randn(3, 6, 8)
    K = torch.rand(3, 5, 6)
    delta = attn.delta
    K_hat = K / (delta + K.sum(-1, keepdim=True))
    expected = _plain_mha(attn, xr, xs, cr, cs, bias=torch.log(K_hat).unsqueeze(1))
    assert torch.allclose(attn(xr, xs, cr, cs, K=Kernel(K)), expected, atol=1e-5)
    W = attn.weights(xr, xs, cr, cs, K=Kernel(K))
    assert torch.allclose(W.sum(-1), torch.ones(3, 2, 5), atol=1e-5)


def test_skmdpa_zero_kernel_entries_get_no_weight_and_empty_rows_stay_finite():
    attn = SKMDPA(d=8, d_code=4, heads=1)
    xr, xs, c = torch.randn(1, 3, 8), torch.randn(1, 3, 8), torch.randn(3, 4)
    K = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    W = attn.weights(xr, xs, c, c, K=Kernel(K))[0, 0]
    assert W[0, 1] < 1e-10 and W[1, 0] < 1e-10 and W[1, 1] > 0.999
    assert torch.isfinite(attn(xr, xs, c, c, K=Kernel(K))).all()
    assert torch.isfinite(plain_log_normalized_kernel(K)).all()
    bias = log_normalized_kernel(K)  # the default: exact zeros for cut links, the empty row as plain
    assert torch.isinf(bias[:2][K[:2] == 0]).all() and torch.isfinite(bias[2]).all()


# ---------------------------------------------------------------- eqs. 4-5: read-in
@pytest.mark.parametrize("modulated", [True, False])
@pytest.mark.parametrize("heads", [1, 4])
@pytest.mark.parametrize("per_sample_codes", [False, True])
def test_fast_readin_equals_direct_readin(modulated, heads, per_sample_codes):
    torch.manual_seed(1)
    d_in, d, d_code, B, U, T = 12, 16, 8, 3, 5, 7
    readin = ReadIn(
        d_in=d_in, d=d, d_code=d_code, heads=heads, form=ModFCForm(modulated=modulated, alpha_init=0.5)
    ).double()
    with torch.no_grad():  # non-trivial modulation and biases
        for p in readin.parameters():
            p.add_(0.1 * torch.randn_like(p))
    tokens = torch.randn(B, T, d_in, dtype=torch.double)
    states = torch.randn(U, d, dtype=torch.double)
    codes = torch.randn(*((B,) if per_sample_codes else ()), U, d_code, dtype=torch.double)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[0, -3:] = False

    outs, grads = {}, {}
    for impl in ("fast", "direct"):
        readin.zero_grad()
        tok = tokens.clone().requires_grad_()
        with direct_readin(readin) if impl == "direct" else nullcontext():
            out = readin(tok, states, codes, mask=mask)
        (out * torch.randn_like(out, generator=torch.Generator().manual_seed(3))).sum().backward()
        outs[impl] = out
        grads[impl] = [tok.grad] + [p.grad.clone() for p in readin.parameters() if p.grad is not None]
    assert torch.allclose(outs["fast"], outs["direct"], atol=1e-10)
    assert len(grads["fast"]) == len(grads["direct"])
    for gf, gd in zip(grads["fast"], grads["direct"]):
        assert torch.allclose(gf, gd, atol=1e-9)


def test_readin_masked_tokens_are_ignored():
    readin = ReadIn(d_in=6, d=8, d_code=4, heads=2)
    tokens, states, codes = torch.randn(1, 5, 6), torch.randn(3, 8), torch.randn(3, 4)
    mask = torch.tensor([[True, True, True, False, False]])
    a = readin(tokens, states, codes, mask)
    tokens2 = tokens.clone()
    tokens2[:, 3:] = 100.0
    assert torch.allclose(a, readin(tokens2, states, codes, mask), atol=1e-6)


# ---------------------------------------------------------------- section 2.2: conditional generator
def test_conditional_generator_gives_different_graphs_for_different_inputs():
    gen = ConditionalCircuitGenerator(n_processor=6, n_readout=2, d=16, d_code=16, d_sig=8, d_cond=10, heads=2)
    cond = torch.randn(2, 4, 10)
    design = gen(cond)
    assert design.signatures.shape == (2, 6, 8) and design.codes.shape == (2, 6, 16)
    assert design.states.shape == (2, 6, 16) and design.readout_signatures.shape == (2, 2, 8)
    P = link_probabilities(design.signatures)
    assert P.shape == (2, 6, 6)
    assert (P[0] - P[1]).abs().max() > 1e-3
    # the same conditioning input gives the same design
    again = gen(cond[:1])
    assert torch.allclose(link_probabilities(again.signatures)[0], P[0], atol=1e-6)


def test_conditional_generator_starts_sparse_and_sentence_dependent():
    """The defect of issue 25 (item 9): with its queries at 0.02 every module attended alike and
    every generated signature pointed the same way, so the graph was complete for every input
    (truncation 0.9, the 0.5 cut). At the authors' unit scale (the default) the untrained
    generator gives sparse graphs that differ between inputs."""
    torch.manual_seed(0)
    cond = torch.randn(16, 8, 24)
    off = ~torch.eye(32, dtype=torch.bool)

    def cut_graphs(query_init):
        torch.manual_seed(1)
        gen = ConditionalCircuitGenerator(
            n_processor=32, n_readout=4, d=64, d_code=64, d_sig=32, d_cond=24, heads=4, query_init=query_init
        )
        with torch.no_grad():
            return link_probabilities(gen(cond).signatures, truncation=0.9)[:, off] > 0.5  # [B, U(U-1)]

    old, new = cut_graphs(0.02), cut_graphs(1.0)
    assert old.float().mean() > 0.95  # the old init: (nearly) complete graphs
    assert new.float().mean() < 0.75 and not new.all(dim=1).any()
    assert len(torch.unique(new, dim=0)) == len(new)  # every input its own graph
    with pytest.raises(ValueError, match="generator_query_init"):
        ConditionalCircuitGenerator(
            n_processor=4, n_readout=1, d=8, d_code=8, d_sig=4, d_cond=6, heads=2, query_init=0.0
        )


def test_conditional_generator_respects_padding_mask():
    gen = ConditionalCircuitGenerator(n_processor=4, n_readout=1, d=8, d_code=8, d_sig=4, d_cond=6, heads=2)
    cond = torch.randn(1, 5, 6)
    mask = torch.tensor([[True, True, False, False, False]])
    a = gen(cond, mask).signatures
    cond2 = cond.clone()
    cond2[:, 2:] = 50.0
    assert torch.allclose(a, gen(cond2, mask).signatures, atol=1e-5)
