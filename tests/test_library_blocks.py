"""timm's blocks in the model are proven equal to the hand-written forms they replaced (kept here
as the reference): DropPath, LayerScale, LayerNorm2d, the ConvNeXt block and the soft-target
cross-entropy give the same outputs and gradients from the same weights and RNG state, the same
initial weights from the same seed, and models built either way have the same state_dict (keys,
order, shapes, values) and load each other's checkpoints: the mini image NAC, the paper's
Tiny-ImageNet NAC and its ConvNeXt tokenizer."""

import copy
from dataclasses import replace

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from nac.circuits import layers, tokenizers
from nac.pipeline.params import compose, load_params
from nac.registry import build_model
from nac.tracks.image import image_model_config
from nac.training.augment import soft_cross_entropy


# ------------------------------------------------------------------ the hand-written reference forms
class RefDropPath(nn.Module):
    def __init__(self, p: float = 0.0):
        super().__init__()
        self.p = p

    def forward(self, x):
        if not self.training or self.p == 0.0:
            return x
        keep = x.new_empty((x.shape[0],) + (1,) * (x.dim() - 1)).bernoulli_(1.0 - self.p)
        return x * keep / (1.0 - self.p)


class RefLayerScale(nn.Module):
    def __init__(self, d: int, init):
        super().__init__()
        self.gamma = nn.Parameter(torch.full((d,), float(init))) if init is not None else None

    def forward(self, x):
        return x if self.gamma is None else x * self.gamma


class RefLayerNorm2d(nn.LayerNorm):
    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class RefConvNeXtBlock(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.gamma = nn.Parameter(torch.full((dim,), 1e-6))

    def forward(self, x):
        h = self.dw(x).permute(0, 2, 3, 1)
        return x + (self.gamma * self.mlp(self.norm(h))).permute(0, 3, 1, 2)


def ref_soft_cross_entropy(logits, targets):
    return torch.sum(-targets * F.log_softmax(logits, dim=-1), dim=-1).mean()


def _reference_blocks(monkeypatch):
    """Build models with the hand-written blocks (as before timm's replaced them)."""
    monkeypatch.setattr(layers, "make_drop_path", RefDropPath)
    monkeypatch.setattr(layers, "make_layer_scale", RefLayerScale)
    monkeypatch.setattr(tokenizers, "layer_norm_2d", RefLayerNorm2d)
    monkeypatch.setitem(tokenizers.NORMS, "layer", RefLayerNorm2d)
    monkeypatch.setattr(tokenizers, "convnext_block", RefConvNeXtBlock)


def _outputs_and_grads(module, x, seed=0):
    """Output, input gradient and parameter gradients (by state_dict name) of ``module(x)`` under
    ``seed``, and the RNG state after it."""
    x = x.clone().requires_grad_(True)
    module.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    out = module(x)
    out.mul(torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    names = {id(p): k for k, p in module.state_dict(keep_vars=True).items()}
    grads = {names[id(p)]: p.grad for p in module.parameters()}
    return out.detach(), x.grad, grads, torch.get_rng_state()


# ------------------------------------------------------------------ block by block
@pytest.mark.parametrize("p", [0.05, 0.1, 0.3, 0.7])
def test_drop_path_same_mask_same_rng_stream(p):
    """timm draws the same mask from the same RNG call; it scales by ``x * (1 / (1 - p))`` instead
    of ``x / (1 - p)``: the same number within one float32 rounding (relative 2**-23)."""
    x = torch.randn(64, 9, 16)
    ref, new = RefDropPath(p), layers.make_drop_path(p)
    o_ref, g_ref, _, rng_ref = _outputs_and_grads(ref, x)
    o_new, g_new, _, rng_new = _outputs_and_grads(new, x)
    assert torch.equal(o_ref == 0, o_new == 0) and 0 < int((o_new[:, 0, 0] == 0).sum()) < 64
    assert torch.equal(rng_ref, rng_new)
    torch.testing.assert_close(o_new, o_ref, rtol=2**-23, atol=0)
    torch.testing.assert_close(g_new, g_ref, rtol=2**-23, atol=0)
    for m in (ref, new):  # evaluation and p = 0: the identity, no RNG drawn
        m.eval()
        assert m(x) is x
    state = torch.get_rng_state()
    assert layers.make_drop_path(0.0).train()(x) is x and torch.equal(torch.get_rng_state(), state)


@pytest.mark.parametrize("init", [0.1, 1e-6, None])
def test_layer_scale_equal(init):
    ref, new = RefLayerScale(12, init), layers.make_layer_scale(12, init)
    assert {k: v.shape for k, v in ref.state_dict().items()} == {k: v.shape for k, v in new.state_dict().items()}
    new.load_state_dict(ref.state_dict())
    x = torch.randn(4, 5, 12)
    if init is None:
        assert new(x) is x and ref(x) is x and not list(new.parameters())
        return
    for a, b in zip(_outputs_and_grads(ref, x), _outputs_and_grads(new, x)):
        assert (
            (a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a))
            if isinstance(a, dict)
            else torch.equal(a, b)
        )


def _assert_same(ref: nn.Module, new: nn.Module, x: torch.Tensor) -> None:
    """Same state_dict (keys, order, values), then bitwise the same outputs and gradients."""
    a, b = ref.state_dict(), new.state_dict()
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)
    o_ref, g_ref, p_ref, _ = _outputs_and_grads(ref, x)
    o_new, g_new, p_new, _ = _outputs_and_grads(new, x)
    assert torch.equal(o_new, o_ref) and torch.equal(g_new, g_ref)
    assert p_ref.keys() == p_new.keys()
    for k in p_ref:
        torch.testing.assert_close(p_new[k], p_ref[k], rtol=0, atol=0, msg=k)


def test_layer_norm_2d_equal():
    torch.manual_seed(0)
    ref = RefLayerNorm2d(24)
    new = tokenizers.layer_norm_2d(24)
    with torch.no_grad():  # non-trivial affine parameters
        ref.weight.normal_(), ref.bias.normal_()
    new.load_state_dict(ref.state_dict())
    _assert_same(ref, new, torch.randn(3, 24, 5, 7) * 3 + 1)


def test_convnext_block_equal_and_keeps_our_names():
    torch.manual_seed(0)
    ref = RefConvNeXtBlock(16)
    torch.manual_seed(0)
    new = tokenizers.convnext_block(16)  # the same seed gives the same initial weights
    with torch.no_grad():  # a layer scale large enough for the branch to show in the output
        ref.gamma.fill_(0.5), new.gamma.fill_(0.5)
    x = torch.randn(2, 16, 9, 9)
    _assert_same(ref, new, x)
    # checkpoints both ways, and after a deep copy (EMA, the few-shot copies)
    torch.manual_seed(1)
    other = RefConvNeXtBlock(16)
    for src, dst in ((other, new), (new, copy.deepcopy(ref)), (other, copy.deepcopy(new))):
        dst.load_state_dict(src.state_dict())
        _assert_same(src, dst, x)


def test_soft_cross_entropy_equal():
    logits = torch.randn(8, 10, requires_grad=True)
    targets = torch.softmax(torch.randn(8, 10), dim=-1)
    ref = ref_soft_cross_entropy(logits, targets)
    (g_ref,) = torch.autograd.grad(ref, logits)
    new = soft_cross_entropy(logits, targets)
    (g_new,) = torch.autograd.grad(new, logits)
    assert torch.equal(new, ref) and torch.equal(g_new, g_ref)


# ------------------------------------------------------------------ whole models
def _mini_nac():
    return image_model_config(load_params("params.yaml"), "nac-scale_free", 0, 10)


def _tiny_inet_nac():
    return image_model_config(compose(["profile=paper"]), "nac-scale_free", 0, 200)


def _both_ways(monkeypatch, build):
    """``build()`` under seed 0 with the reference blocks, then with timm's."""
    with monkeypatch.context() as m:
        _reference_blocks(m)
        torch.manual_seed(0)
        ref = build()
    torch.manual_seed(0)
    return ref, build()


@pytest.mark.parametrize(
    "make", [_mini_nac, pytest.param(_tiny_inet_nac, marks=pytest.mark.slow)], ids=["mini", "tiny_inet"]
)
def test_models_same_state_dict_and_outputs(monkeypatch, make):
    """The NAC built before and after: the same state_dict keys, order, shapes and values (the
    signature fit shortened: it does not touch the blocks), the same logits, and a checkpoint of
    the one loads strictly into the other."""
    cfg = replace(make(), signature_fit_steps=5)
    ref, new = _both_ways(monkeypatch, lambda: build_model(cfg))
    a, b = ref.state_dict(), new.state_dict()
    assert list(a) == list(b) and all(a[k].shape == b[k].shape and torch.equal(a[k], b[k]) for k in a)
    size = cfg.tokenizer.get("image_size", 32)
    x = torch.randint(0, 256, (2, 3, size, size), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(1)
    with torch.no_grad():
        out_ref = ref.eval()(x)
        torch.manual_seed(1)
        out_new = new.eval()(x)
    assert torch.equal(out_new, out_ref)
    # a training step's gradients (sampled kernels, drop-path): bitwise equal without drop-path,
    # within float rounding with it (timm's DropPath scales by a rounded reciprocal)
    grads = []
    for model in (ref.train(), new.train()):
        torch.manual_seed(2)
        out = model(x)
        (out if torch.is_tensor(out) else out["logits"]).square().mean().backward()
        grads.append([p.grad for p in model.parameters()])
    for g_ref, g_new in zip(*grads):
        if cfg.drop_path == 0:
            assert (g_ref is None and g_new is None) or torch.equal(g_ref, g_new)
        else:
            torch.testing.assert_close(g_new, g_ref)
    new.load_state_dict(ref.state_dict())
    ref.load_state_dict(new.state_dict())


@pytest.mark.parametrize("paper", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["small", "paper"])
def test_convnext_tokenizer_same_state_dict_outputs_and_gradients(monkeypatch, paper):
    """A ConvNeXt tokenizer (the paper's: 3/3/9 blocks, 96/192/384 channels, 64 px; or a small
    one), built both ways from one seed: the same state_dict, bitwise the same tokens and
    gradients."""
    spec = (
        compose(["profile=paper"])["image"]["model"]["tokenizer"]
        if paper
        else {"kind": "convnext", "depths": [1, 2], "dims": [8, 16], "pos_dim": 4, "image_size": 32}
    )
    assert spec["kind"] == "convnext"
    ref, new = _both_ways(monkeypatch, lambda: tokenizers.build_tokenizer(spec))
    x = torch.rand(2, 3, spec["image_size"], spec["image_size"], generator=torch.Generator().manual_seed(0))
    _assert_same(ref, new, x)


# ------------------------------------------------------------------ throughput's clock
class _Counting(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls, self.grad = 0, []

    def forward(self, x):
        self.calls += 1
        self.grad.append(torch.is_grad_enabled())
        return x.float().mean(dim=(1, 2, 3))


@pytest.mark.parametrize("repeats", [1, 2, 5])
def test_throughput_reads_the_benchmark_clock(monkeypatch, repeats):
    """One rate per timed pass, ``max(2, repeats)`` of them after one warm-up, each the batch size
    over the time ``torch.utils.benchmark.timer`` measured around the pass; no autograd."""
    import torch.utils.benchmark as benchmark

    from nac.tracks.image import throughput

    ticks = iter(range(1000))
    monkeypatch.setattr(benchmark, "timer", lambda: 0.25 * next(ticks) ** 2)  # each pass slower
    model = _Counting()
    rates = throughput(model, torch.zeros(8, 3, 4, 4, dtype=torch.uint8), repeats, torch.device("cpu"))
    n = max(2, repeats)
    assert model.calls == 1 + n and not any(model.grad) and not model.training
    assert rates == [8 / (0.25 * ((2 * i + 1) ** 2 - (2 * i) ** 2)) for i in range(n)]
