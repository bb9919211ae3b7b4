"""The batched code modulation (issue 21) against the per-layer form.

``NAC.code_modulations`` computes one forward's modulations ``1 + alpha * LN(W_c c)`` of every
ModFC at once (``nac.circuits.modfc.batched_modulations``); the per-layer form (the reference,
``reference_forms.per_layer_modulation``; what direct calls of the layers keep) has each ModFC
compute its own. Same inputs and seed: the same
logits, loss and every parameter gradient to float rounding, the same random-number stream, the
same parameters and state-dict keys.

Why not bit-exact: the elementwise steps (LayerNorm per row, ``1 + alpha * h``) are the same
operations, but ``W_c c`` runs as one product with every ``W_c`` stacked, and its backward sums
the code's gradient over all the ModFCs in one product instead of accumulating one product per
ModFC, so the summation order (and BLAS blocking) differs in the last bits.
"""

import copy
from contextlib import nullcontext

import pytest
import torch
from tiny_models import COND_TOKENIZER, TINY_KERNEL, make_tiny_config, tiny_batch
from torch.utils._python_dispatch import TorchDispatchMode

from nac import build_model
from nac.circuits.modfc import ModFC, ModFCForm, Modulations, batched_modulations, modfcs, name_modfcs
from nac.pruning import attention_received, drop_modules
from nac.testing import reference_forms
from nac.testing.reference_forms import per_layer_modulation

CONFIGS = {
    "mini_nac": dict(),
    "shared_kernel": dict(TINY_KERNEL, kernel_per_module=False, truncation_mode="masked"),  # nac v1
    "conditional": dict(generator="conditional", cond_tokenizer=COND_TOKENIZER),
    "input_latents": dict(input_latents=4),
    "conditional_input_latents": dict(input_latents=3, generator="conditional", cond_tokenizer=COND_TOKENIZER),
    "ln_only": dict(modfc_gain="ln_only"),
    "norm_affine": dict(modfc_norm_affine=True),
    "gated_direct_readin": dict(gated_ffn=True, direct_readin=True),
    "modfc_rung": dict(variant="modfc"),
    "frozen_graph": dict(variant="frozen_graph"),
}


def _build(direct_readin=False, **kw):
    """The tiny NAC of ``kw``; ``direct_readin=True``: its read-in in the direct form."""
    kw = {"variant": "nac", "signature_fit_steps": 20, "n_processor": 12, **kw}
    torch.manual_seed(0)
    model = build_model(make_tiny_config(**kw))
    if direct_readin:
        reference_forms.direct_readin(model)
    if kw.get("modfc_norm_affine"):  # non-trivial affine parameters, so a mix-up would show
        with torch.no_grad():
            for m in modfcs(model):
                m.code_norm.weight.normal_(1.0, 0.3)
                m.code_norm.bias.normal_(0.0, 0.3)
    return model


def _form(impl, *models):
    """The models in modulation form ``impl``: "batched" (the package's) or "per_layer"."""
    return per_layer_modulation(*models) if impl == "per_layer" else nullcontext()


def _step(model, impl, x, y, kw):
    """Logits, loss, the gradient of every parameter (None where it has none) and the next random
    number (the stream must be consumed alike)."""
    model.zero_grad(set_to_none=True)
    torch.manual_seed(123)
    with _form(impl, model):
        logits = model(x, **kw)
    loss = torch.nn.functional.cross_entropy(logits, y)
    if model.prior_target is not None:  # the unconditional NAC's regularizer, as training adds it
        loss = loss + model.graph.regularizer()
    loss.backward()
    grads = {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}
    return logits.detach(), loss.detach(), grads, torch.rand(())


def _assert_same(a, b):
    logits_a, loss_a, grads_a, next_a = a
    logits_b, loss_b, grads_b, next_b = b
    torch.testing.assert_close(logits_a, logits_b, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(loss_a, loss_b, rtol=1e-6, atol=1e-7)
    assert torch.equal(next_a, next_b)  # the same random-number stream
    assert grads_a.keys() == grads_b.keys()
    # A gradient that is zero in exact arithmetic (a bias before a normalisation) is rounding noise
    # of the gradients upstream: the floor is relative to the model's largest gradient.
    floor = 1e-7 * max(float(g.abs().max()) for g in grads_a.values() if g is not None)
    for name in grads_a:
        ga, gb = grads_a[name], grads_b[name]
        assert (ga is None) == (gb is None), name
        if ga is not None:
            scale = max(float(ga.abs().max()), float(gb.abs().max()))
            torch.testing.assert_close(
                ga, gb, rtol=1e-5, atol=max(1e-5 * scale, floor), msg=lambda m, n=name: f"{n}: {m}"
            )


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_batched_modulation_gives_the_per_layer_step(name, train):
    model = _build(**CONFIGS[name]).train(train)
    x, y, kw = tiny_batch(model, seed=7)
    batched, per_layer = _step(model, "batched", x, y, kw), _step(model, "per_layer", x, y, kw)
    _assert_same(batched, per_layer)
    # every modulated ModFC's own parameters get a gradient through the batched path
    for m in modfcs(model):
        assert m.code_proj.weight.grad is not None and m.code_proj.weight.grad.abs().sum() > 0, m.modulation_key


def test_batched_modulation_is_used_and_covers_every_modfc():
    """Every modulated ModFC reads a precomputed entry (none computes its own), and the
    LayerNorms of the modulation are one per (code tensor, width) instead of one per ModFC."""
    for kw in (dict(), dict(input_latents=4)):
        model = _build(**kw)
        x, _, _ = tiny_batch(model, seed=7)
        calls = []
        orig = ModFC.modulation

        def spy(self, code, _orig=orig):
            calls.append(self.modulation_key)
            return _orig(self, code)

        ModFC.modulation = spy
        try:
            model(x)
            assert calls == []
            with per_layer_modulation(model):
                model(x)
        finally:
            ModFC.modulation = orig
        # the per-layer form: one modulation per ModFC call (k and v of the read-in once each too)
        assert set(calls) == {m.modulation_key for m in modfcs(model)}
        norms = {impl: _count(model, impl, x, "native_layer_norm") for impl in ("batched", "per_layer")}
        n_modfc = len(modfcs(model))
        assert norms["per_layer"] - norms["batched"] >= n_modfc - 2 * 4  # <= 4 code tensors, <= 2 widths each
        assert _count(model, "batched", x) < _count(model, "per_layer", x)


def _count(model, impl, x, op=None) -> int:
    n = [0]

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if op is None or func._overloadpacket.__name__ == op:
                n[0] += 1
            return func(*args, **(kwargs or {}))

    with Count(), _form(impl, model):
        model(x).sum().backward()
    model.zero_grad(set_to_none=True)
    return n[0]


def test_perceiver_io_has_no_modulation():
    model = _build(variant="perceiver_io")
    assert modfcs(model) == []
    codes = model.code_modulations(model.design())
    assert all(v is None for v in codes.values())
    x, y, kw = tiny_batch(model, seed=7)
    a, b = _step(model, "batched", x, y, kw), _step(model, "per_layer", x, y, kw)
    assert torch.equal(a[0], b[0])


def test_batched_modulation_adds_no_state_and_loads_checkpoints():
    """No parameter or buffer is added or renamed: a per-layer model's state dict loads into a
    batched one with the same keys, and gives the same logits."""
    model = _build()
    keys = set(model.state_dict())
    allowed = {"linear.weight", "linear.bias", "code_proj.weight", "code_norm.weight", "code_norm.bias", "alpha"}
    for m in modfcs(model):
        assert set(m.state_dict()) <= allowed
    x, _, _ = tiny_batch(model, seed=7)
    model.eval()
    with per_layer_modulation(model):
        ref = model(x)
    fresh = build_model(model.config, fit_signatures=False).eval()
    fresh.load_state_dict(model.state_dict())
    assert set(fresh.state_dict()) == keys and "code_modulations" not in vars(fresh)
    torch.testing.assert_close(fresh(x), ref, rtol=1e-5, atol=1e-6)


def test_a_copy_modulates_with_its_own_parameters():
    """The EMA and module dropping deep-copy the model: the copy's batched modulations read the
    copy's parameters (gradients reach the copy only)."""
    model = _build()
    x, _, _ = tiny_batch(model, seed=7)
    twin = copy.deepcopy(model).eval()
    with torch.no_grad():
        for m in modfcs(twin):
            m.code_proj.weight.mul_(2.0)
    torch.manual_seed(1)
    with per_layer_modulation(twin):
        ref = twin(x)
    torch.manual_seed(1)
    out = twin(x)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    out.sum().backward()
    assert all(p.grad is None for p in model.parameters())
    assert all(m.code_proj.weight.grad is not None for m in modfcs(twin))


@pytest.mark.parametrize("kw", [dict(), dict(input_latents=3), dict(variant="modfc")])
def test_dropped_modules_batched_equals_per_layer(kw):
    model = _build(**kw).eval()
    x, _, _ = tiny_batch(model, seed=7)
    inputs = dict(inputs=x) if model.config.variant == "modfc" else {}
    smaller = drop_modules(model, 4, **inputs)
    outs = {}
    for impl in ("batched", "per_layer"):
        with _form(impl, smaller, model):
            outs[impl] = (smaller(x), attention_received(model, x))
    torch.testing.assert_close(outs["batched"][0], outs["per_layer"][0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(outs["batched"][1], outs["per_layer"][1], rtol=1e-5, atol=1e-7)


def test_batched_modulations_on_its_own():
    """``batched_modulations`` for ModFCs of mixed widths and forms, unbatched and per-sample codes."""
    torch.manual_seed(0)
    fcs = torch.nn.ModuleDict(
        {
            "a": ModFC(6, 5, 4),
            "b": ModFC(7, 3, 4),
            "c": ModFC(6, 2, 4),
            "d": ModFC(6, 2, 4, form=ModFCForm(norm_affine=True)),
            "e": ModFC(7, 2, 4, form=ModFCForm(gain="ln_only")),
        }
    )
    name_modfcs(fcs)
    with torch.no_grad():
        fcs["d"].code_norm.weight.normal_()
        fcs["d"].code_norm.bias.normal_()
    for shape in ((5, 4), (2, 5, 4)):
        code = torch.randn(shape, requires_grad=True)
        mods = batched_modulations(code, list(fcs.values()))
        assert isinstance(mods, Modulations) and mods.code is code
        for fc in fcs.values():
            torch.testing.assert_close(mods.of(fc), fc.modulation(code), rtol=1e-6, atol=1e-6)
            x = torch.randn(*shape[:-1], 3, fc.d_in)
            if len(shape) == 2:
                x = torch.randn(2, *shape[:-1], 3, fc.d_in)
            torch.testing.assert_close(fc(x, mods), fc(x, code), rtol=1e-6, atol=1e-6)


def test_missing_or_unnamed_modfc_is_refused():
    fc, other = ModFC(6, 5, 4), ModFC(6, 5, 4)
    with pytest.raises(ValueError, match="name_modfcs"):
        batched_modulations(torch.randn(3, 4), [fc])
    fc.modulation_key, other.modulation_key = "fc", "other"
    mods = batched_modulations(torch.randn(3, 4), [fc])
    with pytest.raises(KeyError, match="pass it the code tensor itself"):
        other(torch.randn(2, 3, 6), mods)


@pytest.mark.slow
def test_batched_modulation_compiles_without_a_graph_break():
    """The ``Modulations`` handed to the layers (a plain object with a dict of tensors keyed by
    name) trace into one graph: a dense NAC (the ``modfc`` rung, no kernel sampler) is one graph."""
    import torch._dynamo as dynamo

    model = _build(variant="modfc").train()
    x, _, _ = tiny_batch(model, seed=7)
    dynamo.reset()
    try:
        explained = dynamo.explain(model)(x)
    finally:
        dynamo.reset()
    assert explained.graph_count == 1 and explained.graph_break_count == 0, explained.break_reasons
