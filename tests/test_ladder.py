"""The Table 1 ladder and every graph prior as one parametrized family (timm style)."""

import math

import numpy as np
import pytest
import torch
from tiny_models import TINY_KERNEL

from nac import VARIANTS, build_model
from nac.graphs import PRIORS
from nac.signatures import link_threshold

CASES = [(v, "scale_free") for v in VARIANTS if v != "nac"] + [("nac", p) for p in PRIORS]


@pytest.mark.parametrize("variant,prior", CASES, ids=[f"{v}-{p}" if v == "nac" else v for v, p in CASES])
def test_ladder_forward_backward_determinism(variant, prior, tiny_config):
    cfg = tiny_config(variant=variant, prior=prior, drop_path=0.1)
    torch.manual_seed(0)
    model = build_model(cfg)
    torch.manual_seed(0)
    again = build_model(cfg)  # same seed -> same model
    for (n, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), n
    x = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8)
    model.train()
    logits = model(x)
    assert logits.shape == (4, cfg.num_classes)
    assert torch.isfinite(logits).all()
    loss = torch.nn.functional.cross_entropy(logits, torch.arange(4) % cfg.num_classes) + model.graph.regularizer()
    loss.backward()
    missing = [
        n
        for n, p in model.named_parameters()
        if p.requires_grad and (p.grad is None or not torch.isfinite(p.grad).all())
    ]
    assert not missing, f"parameters without a (finite) gradient: {missing}"
    dead = [n for n, p in model.named_parameters() if p.requires_grad and p.grad.abs().sum() == 0]
    assert not dead, f"parameters whose gradient is identically zero: {dead}"

    # same seed -> same outputs (training mode: same kernel samples too)
    again.load_state_dict(model.state_dict())
    torch.manual_seed(7)
    y1 = model(x)
    torch.manual_seed(7)
    y2 = again(x)
    assert torch.equal(y1, y2)
    model.eval()
    assert torch.equal(model(x), model(x))  # evaluation kernel (expectation) is deterministic


def test_ladder_rungs_differ_as_described(tiny_config):
    pio = build_model(tiny_config(variant="perceiver_io"))
    modfc = build_model(tiny_config(variant="modfc"))
    frozen = build_model(tiny_config(variant="frozen_graph"))
    nac = build_model(tiny_config(variant="nac"))
    assert not any(hasattr(m, "alpha") for m in pio.modules())  # plain linear layers
    assert any(hasattr(m, "alpha") for m in modfc.modules())
    assert not hasattr(pio.generator, "signatures") and not modfc.generator.use_signatures  # dense graph
    assert "generator.signatures" not in dict(frozen.named_parameters())  # frozen: not learnable
    assert "generator.signatures" in dict(frozen.named_buffers())
    assert nac.generator.signatures.requires_grad
    assert modfc.graph.regularizer().item() == 0.0 and nac.graph.regularizer().detach().item() > 0.0


def _fit_threshold(cfg) -> float:
    """The cosine distance the preset fit separates linked from unlinked pairs at (``NAC._preset_signatures``):
    ``signature_fit_threshold``, or where it is null the kernel's truncation (else ``bandwidth * ln 2``)."""
    t = cfg.truncation if cfg.signature_fit_threshold is None else cfg.signature_fit_threshold
    return link_threshold(t, cfg.bandwidth)


KERNELS = {"default": {}, "truncated": TINY_KERNEL}


@pytest.mark.parametrize("kernel", KERNELS)
def test_frozen_graph_kernel_reproduces_a_barabasi_albert_graph(kernel, tiny_config):
    import networkx as nx

    from nac.graphs import sample_prior_graph

    cfg = tiny_config(variant="frozen_graph", n_processor=16, signature_fit_steps=1000, **KERNELS[kernel])
    model = build_model(cfg)
    A = torch.as_tensor(nx.to_numpy_array(sample_prior_graph("scale_free", 16, seed=0, m=2), nodelist=range(16)))
    P = model.graph.link_probabilities().detach()
    off = ~torch.eye(16, dtype=torch.bool)
    # an edge is a pair closer than the fit's threshold t: P >= exp(-t / bandwidth) (untruncated: P > 0 everywhere)
    linked = P >= math.exp(-_fit_threshold(cfg) / cfg.bandwidth)
    agree = (linked == (A > 0))[off].float().mean().item()
    assert agree > 0.95, f"frozen-graph kernel agrees with the BA adjacency on only {agree:.2%} of pairs"
    if cfg.truncation is not None:  # truncated at the fit's threshold: a non-edge is P = 0 exactly
        assert _fit_threshold(cfg) == cfg.truncation
        assert (P[off & (A == 0)] == 0).float().mean() > 0.95
    else:
        assert (P > 0).all()


@pytest.mark.parametrize(
    "prior,kernel", [(p, "default") for p in PRIORS] + [("ring_of_cliques", "truncated")]
)  # the default fits at signature_fit_threshold 0.8, the truncated form at its truncation 0.9
def test_nac_signatures_start_fitted_to_a_graph_from_their_own_prior(prior, kernel, tiny_config):
    import networkx as nx

    from nac.graphs import sample_prior_graph
    from nac.signatures import graph_agreement

    kw = KERNELS[kernel]
    cfg = tiny_config(prior=prior, n_processor=16, signature_fit_steps=1000, graph_seed=3, **kw)
    model = build_model(cfg)
    A = nx.to_numpy_array(sample_prior_graph(prior, 16, seed=3), nodelist=range(16))
    t = _fit_threshold(cfg)
    assert t == (0.8 if kernel == "default" else 0.9)
    assert graph_agreement(model.generator.signatures, A, t) >= 0.95
    torch.manual_seed(0)
    rand = build_model(tiny_config(prior=prior, signature_init="random", graph_seed=3, **kw))
    assert graph_agreement(rand.generator.signatures, A, t) < 0.95 or prior == "scale_free"
    assert not torch.equal(rand.generator.signatures, model.generator.signatures)
    # the regularizer-off control keeps the prior's initialisation but has no target
    off = build_model(tiny_config(prior=prior, regularizer="none", graph_seed=3, signature_fit_steps=1000, **kw))
    assert torch.equal(off.generator.signatures, model.generator.signatures) and off.prior_target is None


def test_bandwidth_is_a_learnable_scalar_without_weight_decay_and_gets_a_gradient(tiny_config):
    # one shared learnable bandwidth (nac v1); the per-module kernels: tests/test_authors_switches.py
    model = build_model(tiny_config(bandwidth=0.7, **{**TINY_KERNEL, "kernel_per_module": False}))
    assert isinstance(model.bandwidth, torch.nn.Parameter) and model.bandwidth.dim() == 0
    assert model.bandwidth.item() == pytest.approx(0.7)
    model.train()
    x = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8)
    (model(x).logsumexp(-1).sum() + model.graph.regularizer()).backward()
    assert model.bandwidth.grad is not None and model.bandwidth.grad.abs() > 0
    fixed = build_model(tiny_config(learn_bandwidth=False, kernel_per_module=False))  # the default (inet_baral)
    assert "bandwidth" not in dict(fixed.named_parameters()) and "bandwidth" in dict(fixed.named_buffers())


def test_dense_evaluation_kernel_equals_the_modfc_path(tiny_config):
    # The kernel ablation: eval_kernel "dense" runs the same weights with all-to-all attention.
    from dataclasses import replace

    model = build_model(tiny_config()).eval()
    x = torch.randint(0, 256, (3, 3, 32, 32), dtype=torch.uint8)
    with_kernel = model(x)
    model.config = replace(model.config, eval_kernel="dense")
    dense = model(x)
    design = model.design()
    tokens = model.tokenizer(x)
    states = model.read_in(tokens, design.states, design.codes)
    for layer in model.propagators:
        states = layer(states, design.codes, None)
    direct = model.read_out(design.readout_states, states, design.readout_codes, design.codes, None)
    assert torch.allclose(dense, direct, atol=1e-6)
    assert not torch.allclose(dense, with_kernel, atol=1e-4)  # the sparse kernel changes the function


@pytest.mark.parametrize("kw", [{}, TINY_KERNEL, {"input_latents": 3}], ids=["default", "kernel", "input_latents"])
def test_eval_kernel_per_call_is_the_config_field_without_changing_the_model(tiny_config, kw):
    """``eval_kernel=`` on the call (the image track's kernel ablation, through ``predict``) gives,
    bit for bit, the logits of the same model whose config says so, and leaves the config as it
    is; training mode ignores it, as it ignores the config's."""
    import copy
    from dataclasses import replace

    from nac.evaluation import predict

    torch.manual_seed(0)
    model = build_model(tiny_config(**kw)).eval()
    ref = copy.deepcopy(model)
    ref.config = replace(ref.config, eval_kernel="dense")
    x = torch.randint(0, 256, (5, 3, 32, 32), dtype=torch.uint8)
    with torch.no_grad():
        with_kernel = model(x)
        assert torch.equal(model(x, eval_kernel="dense"), ref(x))
        assert model.config.eval_kernel == "expectation" and torch.equal(model(x), with_kernel)
    data = [{"input": x[i], "label": i % 2} for i in range(len(x))]
    got, want = predict(model, data, batch_size=2, eval_kernel="dense"), predict(ref, data, batch_size=2)
    assert np.array_equal(got["logits"], want["logits"]) and model.config.eval_kernel == "expectation"
    model.train()
    assert model.graph.kernel_mode(eval_kernel="dense") == model.graph.kernel_mode()
    with pytest.raises(ValueError, match="unknown eval_kernel 'none'"):
        model(x, eval_kernel="none")


def test_conditional_nac_forward(tiny_config):
    cfg = tiny_config(
        generator="conditional", cond_tokenizer={"kind": "sequence", "vocab_size": 20, "dim": 16, "max_length": 6}
    )
    model = build_model(cfg)
    x = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8)
    cond = torch.randint(1, 20, (2, 6))
    logits = model(x, cond=cond, cond_mask=cond > 0)
    assert logits.shape == (2, 5)
    logits.sum().backward()
    assert model.generator.queries.grad.abs().sum() > 0
    assert model.graph.link_probabilities(model.design(cond)).shape == (2, 16, 16)


def test_conditional_regularizer_is_off_by_default_and_per_sample_when_on(tiny_config):
    """Section 4.4 trains the conditional NAC without a graph regularizer (the default); the
    option regularizes every sample's P against the prior, one matching per sample."""
    from nac.graphs import prior_target
    from nac.regularizer import graph_structure_loss

    cond_tok = {"kind": "sequence", "vocab_size": 20, "dim": 16, "max_length": 6}
    cond = torch.randint(1, 20, (3, 6))
    torch.manual_seed(0)
    off = build_model(tiny_config(generator="conditional", cond_tokenizer=cond_tok))
    assert off.prior_target is None and float(off.graph.regularizer(off.design(cond))) == 0.0
    torch.manual_seed(0)
    on = build_model(
        tiny_config(
            generator="conditional",
            cond_tokenizer=cond_tok,
            generator_regularizer=True,
            prior="planted_partition",
            prior_params={"n_blocks": 2},
        )
    )
    design = on.design(cond)
    reg = on.graph.regularizer(design)
    G = prior_target("planted_partition", 16, n_blocks=2)
    P = on.graph.link_probabilities(design)
    direct = sum(graph_structure_loss(P[b], G) for b in range(3)) / 3
    assert reg.item() == pytest.approx(direct.item(), rel=1e-6) and reg.item() > 0
    reg.backward()
    assert on.generator.queries.grad.abs().sum() > 0


@pytest.mark.parametrize(
    "bad,match",
    [
        (dict(variant="transformer"), "'perceiver_io', 'modfc', 'frozen_graph' or 'nac'"),
        (dict(prior="small_world"), "'scale_free', 'planted_partition'"),
        (dict(d_model=30, heads=4), "not divisible"),
        (dict(n_processor=0), r"model\.n_processor=0: Input should be greater than or equal to 1"),
        (dict(eval_kernel="mean"), "'expectation', 'threshold', 'sample' or 'dense'"),
        (dict(truncation=2.5), "truncation"),
        (dict(signature_init="orthogonal"), "'prior' or 'random'"),
        (dict(tokenizer={"kind": "vit"}), "conv32"),
        (dict(generator="conditional"), "cond_tokenizer"),
        (dict(generator_query_init=0.0), "generator_query_init"),
    ],
)
def test_bad_config_is_rejected_with_the_valid_choices(bad, match, tiny_config):
    with pytest.raises(ValueError, match=match):
        tiny_config(**bad)


def test_other_tokenizers_run_through_the_model(tiny_config):
    cases = [
        ({"kind": "points", "dim": 16}, torch.randn(2, 50, 3), None),
        ({"kind": "sequence", "vocab_size": 30, "dim": 16, "max_length": 40}, torch.randint(1, 30, (2, 40)), True),
        (
            {"kind": "convnext", "depths": [1, 1], "dims": [8, 16], "pos_dim": 8, "image_size": 32},
            torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8),
            None,
        ),
        (
            {"kind": "image_pair", "image": {"kind": "conv32", "dim": 16, "pos_dim": 4}},
            torch.randint(0, 256, (2, 2, 3, 32, 32), dtype=torch.uint8),
            None,
        ),
        ({"kind": "features", "d_feat": 12, "dim": 16}, torch.randn(2, 3, 12), None),
    ]
    for tok, x, masked in cases:
        model = build_model(tiny_config(tokenizer=tok))
        mask = (x > 0) if masked else None
        out = model(x, mask=mask)
        assert out.shape == (2, 5) and torch.isfinite(out).all(), tok["kind"]
