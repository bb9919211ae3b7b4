"""Issue 25 item 6: ``ModelConfig.input_latents = N > 0``, the authors' Tiny-ImageNet / m2mKD layout.
The input is read into N separate input latents (their own codes and initial states) that send to
the processors at every propagator and to the read-out; the processors start from their own
initial states. Our reading (docs/reference.md, "Switches"): the latents are fixed after the
read-in, their links are dense (K = 1), the kernel covers the processors' links only."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F
import yaml
from reference_forms import per_layer_modulation
from reference_kernel import use_reference_kernel
from tiny_models import TINY_KERNEL, make_tiny_config

from nac.checkpoint_io import load_model, save_checkpoint
from nac.circuits.attention import SKMDPA
from nac.circuits.layers import cat_modules
from nac.model import build_model
from nac.pruning import attention_received, drop_modules
from nac.training.loop import decay_groups

N = 6


def _images(seed=0, n=3):
    return torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def _model(**kw):
    kw.setdefault("signature_fit_steps", 20)
    return build_model(make_tiny_config(input_latents=N, **kw))


def _manual(model, x, perturb_layer=None, noise=None):
    """The layout written out (evaluation, P as the kernel): read-in into the latents, every
    propagator with the latents as dense senders, the read-out over [latents; processors].
    ``perturb_layer``: feed latents + ``noise`` to that propagator only (``"readout"``: the read-out)."""
    design = model.design()
    codes_in, states_in = model.input_latents()
    latents = model.read_in(model.tokenizer(x), states_in, codes_in)
    states = design.states.expand(x.shape[0], *design.states.shape)
    for i, layer in enumerate(model.propagators):
        lat = latents + noise if perturb_layer == i else latents
        states = layer(states, design.codes, model._P(design.signatures, layer=i), latents=lat, latent_codes=codes_in)
    lat = latents + noise if perturb_layer == "readout" else latents
    K = model._P(design.readout_signatures, design.signatures, layer="readout")
    return (
        model.read_out(
            design.readout_states,
            torch.cat([lat, states], 1),
            design.readout_codes,
            cat_modules(codes_in, design.codes),
            K,
            dense_senders=N,
        ),
        latents,
        states,
    )


def test_shapes_and_the_read_in_reads_into_the_input_latents_only():
    model = _model().eval()
    assert model.input_latents.codes.shape == (N, 32) and model.input_latents.state_mlp is not None
    seen = {}
    model.read_in.register_forward_hook(lambda m, args, out: seen.update(read_in=(args, out)))
    model.propagators[0].register_forward_pre_hook(lambda m, args, kw: seen.update(layer0=(args, kw)), with_kwargs=True)
    x = _images()
    logits = model(x)
    assert logits.shape == (3, 5)
    (tokens, states, codes, _mask), out = seen["read_in"]
    assert out.shape == (3, N, 32)
    # the read-in's ModFCs are conditioned on the input latents' codes, never the processors'
    # (handed over as their batched modulations, a ``Modulations`` of those codes)
    assert codes.code is model.input_latents.codes and states.shape == (N, 32)
    args, kw = seen["layer0"]
    design = model.design()
    assert torch.equal(args[0], design.states.expand(3, 16, 32))  # processors start from their own states
    assert torch.equal(kw["latents"], out) and kw["latent_codes"].code is model.input_latents.codes
    manual, _, _ = _manual(model, x)
    torch.testing.assert_close(logits, manual, rtol=0, atol=1e-6)


def test_the_processors_receive_from_the_input_latents_at_every_layer():
    model = _model(depth=3).eval()
    x = _images()
    with torch.no_grad():
        _, latents, base = _manual(model, x)
        noise = torch.zeros_like(latents)
        noise[:, 2] = torch.randn(latents.shape[-1])  # one input latent's state (not a constant: LayerNorm)
        for i in range(3):
            _, _, states = _manual(model, x, perturb_layer=i, noise=noise)
            assert (states - base).abs().max() > 1e-3, f"propagator {i} ignores the input latents"


def test_the_read_out_sees_the_input_latents():
    model = _model().eval()
    x = _images()
    with torch.no_grad():
        logits, latents, _ = _manual(model, x)
        noise = torch.zeros_like(latents)
        noise[:, 0] = torch.randn(latents.shape[-1])
        perturbed, _, _ = _manual(model, x, perturb_layer="readout", noise=noise)
    assert (perturbed - logits).abs().max() > 1e-4


def test_dense_senders_follow_eq_3_with_K_1_on_the_input_latents():
    """SKMDPA's attention weights against the direct formula: K extended by ones for the n input
    latents, eq. 3's normalisation over the whole row, log added to the scores."""
    torch.manual_seed(3)
    attn = SKMDPA(16, 8, heads=2)
    U, n = 5, 3
    recv, send = torch.randn(2, U, 16), torch.randn(2, n + U, 16)
    code_recv, code_send = torch.randn(U, 8), torch.randn(n + U, 8)
    K = torch.rand(U, U) * (torch.rand(U, U) > 0.4)
    w = attn.weights(recv, send, code_recv, code_send, K, dense_senders=n)
    q, k, _ = attn._qkv(recv, send, code_recv, code_send)
    K_ext = torch.cat([torch.ones(U, n), K], -1)
    K_hat = K_ext / (1e-6 + K_ext.sum(-1, keepdim=True))
    direct = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(8) + torch.log(K_hat.clamp_min(1e-30)), dim=-1)
    torch.testing.assert_close(w, direct, rtol=0, atol=1e-6)
    assert (w[..., :n] > 0).all()  # every receiver hears every input latent
    y = attn(recv, send, code_recv, code_send, K, dense_senders=n)
    v = attn._split(attn.v(send, code_send))
    manual = attn.out((direct @ v).transpose(1, 2).flatten(2), code_recv)
    torch.testing.assert_close(y, manual, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(variant="perceiver_io"),
        dict(variant="modfc"),
        dict(variant="frozen_graph"),
        TINY_KERNEL,  # a learnable bandwidth per module
        {**TINY_KERNEL, "kernel_per_module": False},  # one learnable bandwidth (nac v1)
        dict(initial_state="code", code_noise=0.05, state_noise=0.1),
    ],
)
def test_gradients_reach_every_parameter(kw):
    model = _model(**kw).train()
    model(_images()).square().sum().backward()
    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing
    assert all(
        p.grad.abs().sum() > 0 for n, p in model.named_parameters() if n.startswith(("input_latents", "read_in"))
    )
    if kw.get("variant") == "perceiver_io":  # a learned latent array, no codes
        codes, states = model.input_latents()
        assert codes is None and states is model.input_latents.latents and states.shape == (N, 32)


def _old_execute(model, tokens):
    """``NAC.execute`` as it was before input latents (the processors read the input)."""
    B = tokens.shape[0]
    design = model.design()
    states = model.read_in(tokens, design.states, design.codes, None)
    # P as the executor computes it (every layer's at once, issue 21; equal to each layer's own to
    # float rounding in the backward: tests/test_shared_link_probabilities.py)
    samplers = [model._sampler(P) for P in model.kernel_probabilities(design).values()]
    sample_op = model._sampler(model._P(design.readout_signatures, design.signatures, layer="readout"), readout=True)
    for layer, sample in zip(model.propagators, samplers):
        states = layer(states, design.codes, sample(B))
    return model.read_out(design.readout_states, states, design.readout_codes, design.codes, sample_op(B))


@pytest.mark.slow  # ~4 s; the batched path against the plain one stays in test_modfc_batched's default run
def test_the_default_path_is_unchanged():
    """input_latents = 0: no input-latent module, and the model's output and every gradient equal
    the old execute's (training mode, stochastic kernel, same seed) exactly."""
    model = build_model(make_tiny_config(signature_fit_steps=20)).train()
    assert not hasattr(model, "input_latents") or not isinstance(model.input_latents, torch.nn.Module)
    assert not any(k.startswith("input_latents") for k in model.state_dict())
    per_layer_modulation(model)  # the old execute's modulation (batched: tests/test_modfc_batched.py)
    x = _images()
    torch.manual_seed(7)
    new = model.execute(model.tokenizer(x))
    new.square().sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    torch.manual_seed(7)
    old = _old_execute(model, model.tokenizer(x))
    old.square().sum().backward()
    assert torch.equal(new, old)
    assert all(torch.equal(grads[n], p.grad) for n, p in model.named_parameters())


def test_a_model_with_input_latents_trains_a_step_and_round_trips_through_a_checkpoint(tmp_path):
    model = _model().train()
    decay, no_decay = decay_groups(model)
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}], lr=1e-3
    )
    x, y = _images(), torch.tensor([0, 1, 2])
    before = model.input_latents.codes.detach().clone()
    loss = F.cross_entropy(model(x), y) + model.graph_regularizer()
    assert torch.isfinite(loss)
    loss.backward()
    opt.step()
    assert not torch.equal(before, model.input_latents.codes)
    model.eval()
    loaded = load_model(save_checkpoint(tmp_path / "m.pt", model)).eval()
    assert loaded.config.input_latents == N
    assert torch.equal(model(x), loaded(x))


def test_module_dropping_keeps_the_input_latents():
    model = _model().eval()
    smaller = drop_modules(model, 4)
    assert smaller.config.n_processor == 12 and smaller.input_latents.codes.shape == (N, 32)
    assert smaller(_images()).shape == (3, 5)
    dense = _model(variant="modfc").eval()
    assert attention_received(dense, _images()).shape == (16,)  # processors only, the latents not ranked
    assert drop_modules(dense, 3, inputs=_images())(_images()).shape == (3, 5)


def test_conditional_generator_with_input_latents():
    model = _model(
        generator="conditional", cond_tokenizer={"kind": "sequence", "vocab_size": 20, "dim": 16, "max_length": 6}
    ).train()
    cond = torch.randint(1, 20, (3, 6))
    logits = model(_images(), cond=cond, cond_mask=cond > 0)
    assert logits.shape == (3, 5)
    logits.sum().backward()
    assert model.generator.queries.grad.abs().sum() > 0 and model.input_latents.codes.grad.abs().sum() > 0


def test_bad_input_latents_is_refused():
    with pytest.raises(ValueError, match="input_latents must be >= 0"):
        make_tiny_config(input_latents=-1)
    with pytest.raises(ValueError, match="input_latents"):
        make_tiny_config(input_latents=1.5)


def test_the_m2mkd_template_builds_64_input_latents_in_the_image_track(tmp_path):
    from nac.compose import write_params
    from nac.tracks.image import image_model_config

    params = yaml.safe_load(write_params(tmp_path / "params.yaml", ["template=m2mkd"]).read_text())
    assert all(params[t]["model"]["input_latents"] == 64 for t in ("image", "points", "listops", "text", "nlvr"))
    for run in ("nac-scale_free", "perceiver_io"):
        model = build_model(image_model_config(params, run, 0, num_classes=10), fit_signatures=False)
        assert model.input_latents.forward()[1].shape[0] == 64
    default = yaml.safe_load(write_params(tmp_path / "default.yaml", []).read_text())
    assert default["image"]["model"]["input_latents"] == 0


@pytest.mark.parametrize("train", [True, False])
def test_fast_paths_give_the_plain_step_with_input_latents(train):
    """The sparse sampler, masked bias and explicit attention against the plain forms
    (``tests/test_speed_equivalence.py``'s check) with dense input-latent senders: same logits and
    gradients, the same random stream."""
    model = _model(n_processor=24, depth=3, signature_fit_steps=50, **TINY_KERNEL).train(train)
    assert (model.link_probabilities().detach() == 0).float().mean() > 0.1  # cut links: the masked path matters
    x, y = _images(), torch.tensor([0, 1, 2])
    results = {}
    for plain in (False, True):
        model = use_reference_kernel(copy.deepcopy(model)) if plain else model
        torch.manual_seed(123)
        logits = model(x)
        model.zero_grad(set_to_none=True)
        (F.cross_entropy(logits, y) + 0.1 * model.graph_regularizer()).backward()
        results[plain] = (logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}, torch.rand(4))
    (lf, gf, rf), (lp, gp, rp) = results[False], results[True]
    torch.testing.assert_close(lf, lp, rtol=1e-4, atol=1e-4 * float(lp.abs().max()))
    scale = max(float(g.abs().max()) for g in gp.values())
    for name in gp:
        torch.testing.assert_close(gf[name], gp[name], rtol=1e-4, atol=1e-4 * scale)
    assert torch.equal(rf, rp)
