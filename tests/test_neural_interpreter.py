"""Neural Interpreters baseline (nac.baselines.neural_interpreter) against direct implementations."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import nac.circuits.kernel as nac_kernel
from nac.baselines.neural_interpreter import (
    LOC,
    Interpreter,
    ModAttn,
    ModLin,
    NeuralInterpreter,
    NeuralInterpreterConfig,
    Script,
    aggregate_streams,
    build_neural_interpreter,
    normalize_compatibilities,
    truncated_kernel,
)

B, V, D, DC, U = 2, 5, 8, 6, 3


def small_config(**kw) -> NeuralInterpreterConfig:
    base = dict(
        num_classes=4,
        tokenizer={"kind": "conv32", "dim": 16, "pos_dim": 8},
        d_model=16,
        d_type=8,
        d_code=12,
        n_functions=3,
        n_scripts=2,
        n_iterations=2,
        loc_layers=1,
        heads=2,
        mlp_mult=1.0,
    )
    base.update(kw)
    return NeuralInterpreterConfig(**base)


def images(n=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=g)


# -- config ---------------------------------------------------------------------------------------
def test_config_roundtrip_and_unknown_keys():
    c = small_config()
    assert c.variant == "neural_interpreter" and c.d_code == 12 and c.head_dim == 8
    assert NeuralInterpreterConfig.from_dict(c.to_dict()) == c
    with pytest.raises(ValueError, match=r"neural_interpreter\.bogus=1: Unexpected keyword argument; remove it"):
        NeuralInterpreterConfig.from_dict({**c.to_dict(), "bogus": 1})
    d = NeuralInterpreterConfig()
    assert d.bandwidth == 1.0 and abs(d.truncation - 1.4202567871309753) < 1e-12 and not d.learn_signatures


# -- eq. 4: ModLin --------------------------------------------------------------------------------
def test_modlin_is_linear_when_modulation_is_one():
    torch.manual_seed(0)
    m = ModLin(D, 7, DC)
    with torch.no_grad():
        m.cond_norm.weight.zero_()
        m.cond_norm.bias.fill_(1.0)
    ref = nn.Linear(D, 7)
    ref.load_state_dict(m.linear.state_dict())
    x, c = torch.randn(B, U, V, D), torch.randn(U, DC)
    torch.testing.assert_close(m(x, c), ref(x))


def test_modlin_formula():
    torch.manual_seed(0)
    m = ModLin(D, 7, DC)
    x, c = torch.randn(B, U, V, D), torch.randn(U, DC)
    direct = torch.stack(
        [
            F.linear(
                x[:, u] * F.layer_norm(c[u] @ m.cond.weight.T, (D,), m.cond_norm.weight, m.cond_norm.bias),
                m.linear.weight,
                m.linear.bias,
            )
            for u in range(U)
        ],
        dim=1,
    )
    torch.testing.assert_close(m(x, c), direct)


# -- eqs. 6-8: ModAttn ----------------------------------------------------------------------------
def _proj(m: ModLin, x, c):
    return F.linear(x * m.modulation(c).unsqueeze(-2), m.linear.weight, m.linear.bias)


def test_modattn_with_unit_compatibility_is_plain_attention():
    torch.manual_seed(0)
    H = 2
    attn = ModAttn(D, DC, heads=H, head_dim=3)
    x, c = torch.randn(B, U, V, D), torch.randn(U, DC)
    out = attn(x, c, torch.ones(B, U, V))
    q = _proj(attn.query, x, c).unflatten(-1, (H, 3)).transpose(2, 3)  # [B, U, H, V, 3]
    k = _proj(attn.key, x, c).unflatten(-1, (H, 3)).transpose(2, 3)
    v = _proj(attn.value, x, c).unflatten(-1, (H, D // H)).transpose(2, 3)
    y = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(3), dim=-1) @ v
    direct = _proj(attn.out, y.transpose(2, 3).flatten(-2), c)
    torch.testing.assert_close(out, direct, atol=1e-5, rtol=1e-5)


def test_modattn_modulation_renormalises_over_keys():
    torch.manual_seed(0)
    H = 2
    attn = ModAttn(D, DC, heads=H, head_dim=3)
    x, c = torch.randn(B, U, V, D), torch.randn(U, DC)
    C = torch.rand(B, U, V)
    q = _proj(attn.query, x, c).unflatten(-1, (H, 3)).transpose(2, 3)
    k = _proj(attn.key, x, c).unflatten(-1, (H, 3)).transpose(2, 3)
    v = _proj(attn.value, x, c).unflatten(-1, (H, D // H)).transpose(2, 3)
    A = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(3), dim=-1)
    Wt = C[:, :, None, :, None] * C[:, :, None, None, :] * A
    W = Wt / (1e-6 + Wt.sum(-1, keepdim=True))
    direct = _proj(attn.out, (W @ v).transpose(2, 3).flatten(-2), c)
    torch.testing.assert_close(attn(x, c, C), direct, atol=1e-5, rtol=1e-5)


# -- eqs. 9-10: LOC -------------------------------------------------------------------------------
def test_loc_leaves_variable_unchanged_where_compatibility_is_zero():
    torch.manual_seed(0)
    loc = LOC(D, DC, heads=2, head_dim=4, mlp_hidden=10)
    x, c = torch.randn(B, U, V, D), torch.randn(U, DC)
    C = torch.rand(B, U, V) + 0.1
    C[:, 1, 2] = 0.0
    C[0, 0, 0] = 0.0
    y = loc(x, c, C)
    torch.testing.assert_close(y[:, 1, 2], x[:, 1, 2], rtol=0, atol=0)
    torch.testing.assert_close(y[0, 0, 0], x[0, 0, 0], rtol=0, atol=0)
    assert not torch.allclose(y[:, 0, 1], x[:, 0, 1])


# -- eq. 11: interpreter aggregation --------------------------------------------------------------
def test_aggregation_is_the_direct_sum():
    torch.manual_seed(0)
    x, s, C = torch.randn(B, V, D), torch.randn(B, U, V, D), torch.rand(B, U, V)
    direct = x.clone()
    for b in range(B):
        for i in range(V):
            for u in range(U):
                direct[b, i] += C[b, u, i] * s[b, u, i]
    torch.testing.assert_close(aggregate_streams(x, s, C), direct)


def test_interpreter_is_eq11_over_the_loc_stack():
    torch.manual_seed(0)
    interp = Interpreter(D, DC, loc_layers=2, heads=2, head_dim=4, mlp_hidden=10)
    x, codes, C = torch.randn(B, V, D), torch.randn(U, DC), torch.rand(B, U, V)
    streams = x.unsqueeze(1).expand(B, U, V, D)
    for loc in interp.locs:
        streams = loc(streams, codes, C)
    torch.testing.assert_close(interp(x, codes, C), x + (C.unsqueeze(-1) * streams).sum(1))
    C0 = C.clone()
    C0[:, :, 3] = 0.0  # no function accepts x_3: y_3 = x_3
    torch.testing.assert_close(interp(x, codes, C0)[:, 3], x[:, 3], rtol=0, atol=0)


# -- eqs. 2-3: the kernel is NAC's ----------------------------------------------------------------
def test_kernel_is_nacs_and_truncation_gives_exact_zeros(monkeypatch):
    torch.manual_seed(0)
    s = F.normalize(torch.randn(U, 4), dim=-1)
    t = F.normalize(torch.randn(B, V, 4), dim=-1)
    t[0, 0] = -s[0]  # distance 2 > truncation: cut
    K = truncated_kernel(s, t, 1.0, 0.5)
    d = 1 - torch.einsum("ud,bvd->buv", s, t)
    torch.testing.assert_close(K, torch.where(d > 0.5, torch.zeros(()), torch.exp(-d)))
    assert K[0, 0, 0].item() == 0.0 and (K == 0).any()
    torch.testing.assert_close(K, nac_kernel.link_probabilities(s, t, bandwidth=1.0, truncation=0.5))
    C = normalize_compatibilities(K)
    torch.testing.assert_close(C, K / (1e-6 + K.sum(1, keepdim=True)))
    # the script's type matching goes through nac.circuits.kernel.link_probabilities
    calls = []
    real = nac_kernel.link_probabilities

    def spy(*a, **kw):
        calls.append(kw)
        return real(*a, **kw)

    monkeypatch.setattr("nac.baselines.ni_layers.link_probabilities", spy)  # where eq. 2 calls it
    script = Script(small_config(truncation=0.3))
    C = script.type_matching(torch.randn(B, V, 16))
    assert calls and calls[0]["truncation"] == 0.3 and C.shape == (B, 3, V)
    assert isinstance(script.bandwidth, nn.Parameter) and script.bandwidth.item() == 1.0
    assert "functions.0.signatures" not in dict(script.named_parameters())  # frozen: a buffer
    assert "functions.0.signatures" in script.state_dict()


# -- the model ------------------------------------------------------------------------------------
def test_model_forward_backward_conv32():
    torch.manual_seed(0)
    model = NeuralInterpreter(small_config())
    model.train()
    x = images(2)
    logits = model(x, design=model.design())
    assert logits.shape == (2, 4) and torch.isfinite(logits).all()
    assert model.design() is None and model.graph_regularizer(None).shape == () and model.graph_regularizer() == 0
    (logits.square().mean() + model.graph_regularizer()).backward()
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert not any("signatures" in n for n in names)  # frozen at initialisation by default
    for n, p in model.named_parameters():
        assert p.grad is not None, n
        assert torch.isfinite(p.grad).all(), n
        assert p.grad.abs().sum() > 0, n
    R = model.routing(x)
    assert R.shape == (2, 1 + 64, 3) and torch.isfinite(R).all() and (R >= 0).all()
    assert model.routing(x, script=1, iteration=1, include_cls=False).shape == (2, 64, 3)


def test_learnable_signatures_get_gradients():
    torch.manual_seed(0)
    model = NeuralInterpreter(small_config(learn_signatures=True, n_scripts=1, n_iterations=1))
    model(images(2)).sum().backward()
    sig = model.scripts[0].functions[0].signatures
    assert isinstance(sig, nn.Parameter) and sig.grad is not None and sig.grad.abs().sum() > 0


def test_model_deterministic_under_seed():
    outs = []
    for _ in range(2):
        torch.manual_seed(3)
        model = NeuralInterpreter(small_config(n_scripts=1)).eval()
        with torch.no_grad():
            outs.append(model(images(2)))
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=0)


def test_model_sequence_tokenizer_with_mask():
    torch.manual_seed(0)
    cfg = small_config(tokenizer={"kind": "sequence", "vocab_size": 20, "dim": 16, "max_length": 12}, n_scripts=1)
    model = NeuralInterpreter(cfg).eval()
    ids = torch.randint(1, 20, (2, 10))
    mask = torch.ones(2, 10, dtype=torch.bool)
    mask[0, 6:] = False
    ids[0, 6:] = 0
    out = model(ids, mask=mask)
    assert out.shape == (2, 4) and torch.isfinite(out).all()
    ids2 = ids.clone()
    ids2[0, 6:] = 7  # change only padded tokens: same output
    torch.testing.assert_close(model(ids2, mask=mask)[0], out[0])
    model.train()
    model(ids, mask=mask).sum().backward()


def test_finetune_new_head_new_functions_and_frozen_old_parameters():
    torch.manual_seed(0)
    model = build_neural_interpreter(small_config(n_scripts=1).to_dict())
    old_params = list(model.parameters())
    old_head = model.head
    model.finetune(num_classes=7, num_new_functions=2, freeze_existing=True)
    assert model.head.linear.out_features == 7 and model.config.num_classes == 7
    assert model.config.added_functions == [2] and model.config.n_cls_tokens == 2
    assert model.head is not old_head and all(not p.requires_grad for p in old_params)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == {
        "cls_tokens.1",
        "scripts.0.functions.1.codes",
        "head.norm.weight",
        "head.norm.bias",
        "head.linear.weight",
        "head.linear.bias",
    }
    x = images(2)
    logits = model(x)
    assert logits.shape == (2, 7)
    logits.sum().backward()
    for n, p in model.named_parameters():
        assert (p.grad is not None and p.grad.abs().sum() > 0) == (n in trainable), n
    assert model.routing(x).shape == (2, 2 + 64, 5)
    # the updated config rebuilds the fine-tuned model (what a checkpoint stores)
    rebuilt = build_neural_interpreter(model.config.to_dict())
    rebuilt.load_state_dict(model.state_dict())
    model.eval(), rebuilt.eval()
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(x), model(x))
    # without new functions and without freezing: everything trains
    m2 = NeuralInterpreter(small_config(n_scripts=1)).finetune(3, freeze_existing=False)
    assert all(p.requires_grad for p in m2.parameters()) and m2(x).shape == (2, 3)
