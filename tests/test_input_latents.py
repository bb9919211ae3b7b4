"""Issue 25 item 6, issue 31 item 4: ``ModelConfig.input_latents = N > 0``, the authors'
Tiny-ImageNet / m2mKD layout (their ``LatentGraph``, ``model/nc/block.py``, with its defaults).
The input is read into N separate input latents (their own codes, initial states and signatures)
that send to the processors at every propagator and to the read-out; the processors start from
their own initial states; the latents are not updated after the read-in. Each propagator's and
the read-out's kernel runs over the senders' concatenated signatures ``[input latents;
processors]``: the links from the input latents are gated like the processors' (same bandwidth,
truncation, sampling, eq. 3 normalisation over the whole row); the regularizer, the graph and
module dropping cover the processors only."""

import copy

import pytest
import torch
import torch.nn.functional as F
import yaml
from tiny_models import TINY_KERNEL, make_tiny_config

from nac.checkpoint_io import load_model, save_checkpoint
from nac.circuits.kernel import Kernel, link_probabilities
from nac.pruning import attention_received, drop_modules
from nac.registry import build_model
from nac.testing.reference_forms import per_layer_modulation
from nac.testing.reference_kernel import use_reference_kernel
from nac.training.optim import decay_groups

N = 6
TRUNCATED = dict(truncation=0.9, learn_bandwidth=True)  # the tiny_inet_nc_x kernel: P = 0 where 1 - cos > 0.9


def _images(seed=0, n=3):
    return torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def _model(**kw):
    kw.setdefault("signature_fit_steps", 20)
    return build_model(make_tiny_config(input_latents=N, **kw))


def _authors_P(model, recv, layer):
    """The authors' kernel of one attention module, written out: eq. 2 on the receivers'
    signatures against the concatenation ``[input latents; processors]`` (``block.py``), with that
    module's bandwidth and the config's truncation (the read-out's only with ``truncate_readout``)."""
    c = model.config
    send = torch.cat([model.input_latents.signatures, model.generator.signatures], 0)
    readout = layer == "readout"
    return link_probabilities(
        recv,
        send,
        bandwidth=model.graph.kernel_bandwidth(layer).clamp_min(1e-3),
        truncation=None if readout and not c.truncate_readout else c.truncation,
        mode=c.truncation_mode,
    )


def _manual(model, x, perturb_layer=None, noise=None, latent_noise=None):
    """The layout written out (evaluation, P as the kernel): read-in into the latents, every
    propagator attending to [latents; processors] through the authors' kernel of the concatenated
    signatures, the read-out over the same set. ``perturb_layer``: feed latents + ``noise`` to that
    propagator only (``"readout"``: the read-out); ``latent_noise``: to every one."""
    design = model.design()
    codes_in, states_in = model.input_latents()
    latents = model.read_in(model.tokenizer(x), states_in, codes_in)
    latents = latents if latent_noise is None else latents + latent_noise
    states = design.states.expand(x.shape[0], *design.states.shape)
    for i, layer in enumerate(model.propagators):
        lat = latents + noise if perturb_layer == i else latents
        K = Kernel(_authors_P(model, design.signatures, i))
        states = layer(states, design.codes, K, latents=lat, latent_codes=codes_in)
    lat = latents + noise if perturb_layer == "readout" else latents
    K = Kernel(_authors_P(model, design.readout_signatures, "readout"))
    send_codes = torch.cat([codes_in, design.codes], 0)
    return (
        model.read_out(design.readout_states, torch.cat([lat, states], 1), design.readout_codes, send_codes, K),
        latents,
        states,
    )


def test_shapes_and_the_read_in_reads_into_the_input_latents_only():
    model = _model().eval()
    assert model.input_latents.codes.shape == (N, 32) and model.input_latents.state_mlp is not None
    assert isinstance(model.input_latents.signatures, torch.nn.Parameter)
    assert model.input_latents.signatures.shape == (N, 8)
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
    assert args[2].shape == (16, N + 16)  # the kernel covers [latents; processors]
    manual, _, _ = _manual(model, x)
    torch.testing.assert_close(logits, manual, rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "kw",
    [dict(), dict(TRUNCATED, truncate_readout=True), dict(kernel_per_module=False), dict(TRUNCATED, depth=3)],
)
def test_the_executor_gates_input_latent_links_by_the_kernel_of_the_concatenated_signatures(kw):
    """Every propagator's P and the read-out's, as the executor samples them, equal the authors'
    kernel of ``[input latents; processors]``; their processor block is the graph the regularizer
    reads (``kernel_probabilities``)."""
    model = _model(**kw)
    with torch.no_grad():  # distinct bandwidths per module, so a swapped kernel shows
        for i, m in enumerate([*model.propagators, model.read_out]):
            if "bandwidth" in m._parameters or "bandwidth" in m._buffers:
                m.bandwidth.fill_(0.7 + 0.1 * i)
    design = model.design()
    Ps, P_out = model.graph.executor_probabilities(design)
    graph = model.graph.kernel_probabilities(design)
    for layer, P in Ps.items():
        assert P.shape == (16, N + 16)
        torch.testing.assert_close(P, _authors_P(model, design.signatures, 0 if layer is None else layer))
        assert torch.equal(P[:, N:], graph[layer])
    torch.testing.assert_close(P_out, _authors_P(model, design.readout_signatures, "readout"))
    if kw.get("truncation"):
        assert (P[:, :N] == 0).any() and (P[:, :N] > 0).any()  # some input-latent links cut, some kept
    if not kw.get("truncate_readout"):
        assert (P_out > 0).all()  # the authors' read-out kernel is untruncated


def _run(model, x, latent_noise=None, readout_noise=None):
    """The model's own forward (evaluation: K = P), with ``latent_noise`` added to the read-in's
    output (every module sees it) or ``readout_noise`` to the read-out's senders only; returns
    (the processors' states after the first propagator, logits)."""
    seen, hooks = {}, []
    if latent_noise is not None:
        hooks.append(model.read_in.register_forward_hook(lambda m, a, out: out + latent_noise))
    if readout_noise is not None:
        hooks.append(model.read_out.register_forward_pre_hook(lambda m, a: (a[0], a[1] + readout_noise, *a[2:])))
    hooks.append(model.propagators[0].register_forward_hook(lambda m, a, out: seen.update(states=out)))
    try:
        with torch.no_grad():
            logits = model(x)
    finally:
        for h in hooks:
            h.remove()
    return seen["states"], logits


def test_a_cut_input_latent_link_contributes_nothing():
    """Truncated kernel, evaluation (K = P), the model's own forward: perturbing input latent j
    changes exactly the processors linked to it (P_ij > 0) in the first propagator; a receiver
    whose link to j is cut gets bit-identical output. The same for the read-out with
    ``truncate_readout``: a latent whose read-out links are all cut cannot change the logits."""
    model = _model(truncate_readout=True, **TRUNCATED).eval()
    x = _images()
    with torch.no_grad():
        P = _authors_P(model, model.generator.signatures, 0)[:, :N]
    cols = [j for j in range(N) if (P[:, j] == 0).any() and (P[:, j] > 0).any()]
    assert cols, "no input latent with both cut and kept links: pick another seed"
    j = cols[0]
    noise = torch.zeros(3, N, 32)
    noise[:, j] = 3 * torch.randn(32)
    base, logits = _run(model, x)
    moved, _ = _run(model, x, latent_noise=noise)
    cut, kept = P[:, j] == 0, P[:, j] > 0
    assert torch.equal(moved[:, cut], base[:, cut])
    assert ((moved[:, kept] - base[:, kept]).abs().amax(dim=(0, 2)) > 1e-4).all()
    # the read-out: every link to input latent j cut -> its state cannot change the logits
    with torch.no_grad():
        R = model.generator.readout_signatures  # [3, 8]: a v with v . r_k = -1 for every k, so 1 - cos > 1
        model.input_latents.signatures[j] = -torch.linalg.pinv(R) @ torch.ones(R.shape[0])
        assert (_authors_P(model, R, "readout")[:, j] == 0).all()
    senders = torch.zeros(3, N + 16, 32)
    senders[:, j] = 3 * torch.randn(32)
    _, logits = _run(model, x)
    _, perturbed = _run(model, x, readout_noise=senders)
    assert torch.equal(logits, perturbed)
    senders[:, j], senders[:, N] = 0, 3 * torch.randn(32)  # a linked sender (processor 0) does change them
    assert (_run(model, x, readout_noise=senders)[1] - logits).abs().max() > 1e-5


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


@pytest.mark.parametrize("kw", [dict(), TRUNCATED])
def test_the_input_latents_signatures_learn_but_take_no_part_in_the_regularizer(kw):
    """The task loss reaches the input latents' signatures; the graph regularizer, the model's
    graph and the mechanism numbers do not depend on them (the authors' ``regularize_input_latents:
    false``)."""
    model = _model(**kw).train()
    x = _images()
    F.cross_entropy(model(x), torch.tensor([0, 1, 2])).backward()
    g = model.input_latents.signatures.grad
    assert g is not None and g.abs().sum() > 0
    model.zero_grad(set_to_none=True)
    reg = model.graph.regularizer()
    assert reg.requires_grad and reg > 0
    reg.backward()
    assert model.input_latents.signatures.grad is None
    P = model.graph.link_probabilities().detach().clone()
    with torch.no_grad():
        model.input_latents.signatures.copy_(torch.randn(N, 8))
    assert torch.equal(model.graph.link_probabilities().detach(), P) and P.shape == (16, 16)
    assert torch.equal(model.graph.regularizer().detach(), reg.detach())


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(variant="perceiver_io"),
        dict(variant="modfc"),
        dict(variant="frozen_graph"),
        dict(kernel_per_module=False),
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
    sig = model.input_latents.signatures
    if kw.get("variant") in ("perceiver_io", "modfc"):  # no kernel: every link dense, no signatures
        assert sig is None
    elif kw.get("variant") == "frozen_graph":  # the whole graph fixed: a buffer, in the state dict
        assert "input_latents.signatures" in dict(model.named_buffers()) and not sig.requires_grad
    else:
        assert sig.grad.abs().sum() > 0


def _old_execute(model, tokens):
    """``NAC.execute`` as it was before input latents (the processors read the input)."""
    B = tokens.shape[0]
    design = model.design()
    states = model.read_in(tokens, design.states, design.codes, None)
    # P as the executor computes it (every layer's at once, issue 21; equal to each layer's own to
    # float rounding in the backward: tests/test_shared_link_probabilities.py)
    samplers = [model.graph.kernel_sampler(P) for P in model.graph.kernel_probabilities(design).values()]
    samplers = samplers if model.config.kernel_per_module else samplers * model.config.depth  # one shared P
    sample_op = model.graph.kernel_sampler(
        model.graph._P(design.readout_signatures, design.signatures, layer="readout"), readout=True
    )
    for layer, sample in zip(model.propagators, samplers):
        states = layer(states, design.codes, sample(B))
    return model.read_out(design.readout_states, states, design.readout_codes, design.codes, sample_op(B))


@pytest.mark.slow  # ~4 s; the batched path against the plain one stays in test_modfc_batched's default run
@pytest.mark.parametrize("kw", [dict(), dict(TRUNCATED, kernel_per_module=True)])
def test_the_default_path_is_unchanged(kw):
    """input_latents = 0: no input-latent module, and the model's output and every gradient equal
    the old execute's (training mode, stochastic kernel, same seed) exactly; for the default
    kernel (untruncated, one shared fixed bandwidth) and the truncated one with a kernel per module."""
    model = build_model(make_tiny_config(signature_fit_steps=20, **kw)).train()
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
    loss = F.cross_entropy(model(x), y) + model.graph.regularizer()
    assert torch.isfinite(loss)
    loss.backward()
    opt.step()
    assert not torch.equal(before, model.input_latents.codes)
    model.eval()
    loaded = load_model(save_checkpoint(tmp_path / "m.pt", model)).eval()
    assert loaded.config.input_latents == N
    assert torch.equal(model(x), loaded(x))


def test_a_checkpoint_with_dense_input_latent_links_is_refused(tmp_path):
    """A checkpoint saved before issue 31 (input latents without signatures, dense links) cannot
    be evaluated as the kernel-gated model: loading it fails with a message naming the fix."""
    model = _model().eval()
    path = save_checkpoint(tmp_path / "m.pt", model)
    ckpt = torch.load(path, weights_only=False)
    del ckpt["model"]["input_latents.signatures"]  # the old form's state dict
    torch.save(ckpt, path)
    with pytest.raises(ValueError, match="dense .*retrain"):
        load_model(path)


def test_module_dropping_keeps_the_input_latents():
    model = _model().eval()
    smaller = drop_modules(model, 4)
    assert smaller.config.n_processor == 12 and smaller.input_latents.codes.shape == (N, 32)
    assert torch.equal(smaller.input_latents.signatures, model.input_latents.signatures)
    Ps, P_out = smaller.graph.executor_probabilities(smaller.design())
    assert all(P.shape == (12, N + 12) for P in Ps.values()) and P_out.shape == (3, N + 12)
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
    with pytest.raises(ValueError, match=r"model\.input_latents=-1: Input should be greater than or equal to 0"):
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
    (``tests/test_speed_equivalence.py``'s check) with kernel-gated input-latent senders: same
    logits and gradients, the same random stream. The truncated kernel (``tiny_inet_nc_x``), so that
    cut links, of processors and of input latents, exercise the sparse and masked paths."""
    model = _model(n_processor=24, depth=3, signature_fit_steps=50, **TINY_KERNEL).train(train)
    assert (model.graph.link_probabilities().detach() == 0).float().mean() > 0.1  # cut links: the masked path matters
    P_in = next(iter(model.graph.executor_probabilities(model.design())[0].values()))[:, :N].detach()
    assert (P_in == 0).any() and (P_in > 0).any()  # and cut input-latent links
    x, y = _images(), torch.tensor([0, 1, 2])
    results = {}
    for plain in (False, True):
        model = use_reference_kernel(copy.deepcopy(model)) if plain else model
        torch.manual_seed(123)
        logits = model(x)
        model.zero_grad(set_to_none=True)
        (F.cross_entropy(logits, y) + 0.1 * model.graph.regularizer()).backward()
        results[plain] = (logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}, torch.rand(4))
    (lf, gf, rf), (lp, gp, rp) = results[False], results[True]
    torch.testing.assert_close(lf, lp, rtol=1e-4, atol=1e-4 * float(lp.abs().max()))
    scale = max(float(g.abs().max()) for g in gp.values())
    for name in gp:
        torch.testing.assert_close(gf[name], gp[name], rtol=1e-4, atol=1e-4 * scale)
    assert torch.equal(rf, rp)
