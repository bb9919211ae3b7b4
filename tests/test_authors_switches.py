"""Issue 25: the model switches that make the authors' NAC (docs/reference.md, "Switches"), each
against a direct implementation of the authors' formula written here, and the templates that set
them (conf/template/)."""

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
import yaml
from tiny_models import TINY_KERNEL, make_tiny_config

from nac.circuits.kernel import Kernel, link_probabilities
from nac.circuits.layers import ReadOut
from nac.circuits.modfc import ModFC, ModFCForm
from nac.config import ModelConfig
from nac.mechanism import mechanism_numbers
from nac.registry import build_model
from nac.training.optim import decay_groups


def _signatures(n=12, d=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g)


def _distance(s):
    u = s / s.norm(dim=-1, keepdim=True)
    return 1 - (u @ u.T).clamp(-1, 1)


# ------------------------------------------------------------- item 1: gradient through cut links
@pytest.mark.parametrize("mode", ["direct", "masked"])
def test_cut_links_get_zero_gradient_in_direct_mode_and_the_untruncated_one_in_masked(mode):
    """A loss on the cut entries only: ``direct`` gives exactly zero gradient (distance +inf, exp(-inf)
    = 0); ``masked`` with straight-through gives the gradient of the untruncated exp(-d / eps)."""
    t = 0.9
    s = _signatures().requires_grad_()
    bw = torch.tensor(0.8, requires_grad=True)
    d = _distance(s.detach())
    cut = d > t
    assert 0 < cut.sum() < cut.numel() - 12  # both kinds of pair present
    W = torch.randn(12, 12, generator=torch.Generator().manual_seed(1))
    P = link_probabilities(s, bandwidth=bw, truncation=t, straight_through=True, mode=mode)
    assert torch.equal(P[cut], torch.zeros(int(cut.sum())))  # the forward value: cut either way
    (P * W * cut).sum().backward()
    if mode == "direct":
        assert torch.equal(s.grad, torch.zeros_like(s)) and bw.grad.item() == 0.0
        return
    # the direct formula, untruncated, on the same entries
    s2, bw2 = s.detach().clone().requires_grad_(), bw.detach().clone().requires_grad_()
    (torch.exp(-_distance(s2) / bw2) * W * cut).sum().backward()
    assert s.grad.abs().max() > 0
    torch.testing.assert_close(s.grad, s2.grad)
    torch.testing.assert_close(bw.grad, bw2.grad)


@pytest.mark.parametrize("mode", ["direct", "masked"])
def test_linked_entries_have_the_formula_and_its_gradient_in_both_modes(mode):
    t = 0.9
    s = _signatures(seed=2).requires_grad_()
    bw = torch.tensor(1.3, requires_grad=True)
    linked = _distance(s.detach()) <= t
    W = torch.randn(12, 12, generator=torch.Generator().manual_seed(3))
    P = link_probabilities(s, bandwidth=bw, truncation=t, mode=mode)
    (P * W).sum().backward()
    s2, bw2 = s.detach().clone().requires_grad_(), bw.detach().clone().requires_grad_()
    P2 = torch.where(linked, torch.exp(-_distance(s2) / bw2), torch.zeros(()))
    torch.testing.assert_close(P, P2)
    if mode == "direct":  # the direct mode's gradient is exactly that of the linked entries alone
        (P2 * W).sum().backward()
        torch.testing.assert_close(s.grad, s2.grad)
        torch.testing.assert_close(bw.grad, bw2.grad)


def test_nac_passes_its_truncation_mode_to_the_kernel():
    for mode, zero in (("direct", True), ("masked", False)):
        model = build_model(make_tiny_config(truncation_mode=mode, signature_fit_steps=20, **TINY_KERNEL))
        P = model.graph.link_probabilities(layer=0)
        cut = P.detach() == 0
        assert cut.any()
        (P * cut).sum().backward()
        g = model.generator.signatures.grad
        assert (g is None or torch.equal(g, torch.zeros_like(g))) == zero


# ------------------------------------------------------------- item 4: one kernel per attention module
def test_a_bandwidth_per_propagator_and_the_readout_and_the_regularizer_sums_over_propagators():
    cfg = make_tiny_config(depth=3, signature_fit_steps=20, stochastic_kernel=False, **TINY_KERNEL)
    model = build_model(cfg)
    names = sorted(n for n, _ in model.named_parameters() if n.endswith("bandwidth"))
    assert names == sorted([f"propagators.{i}.bandwidth" for i in range(3)] + ["read_out.bandwidth"])
    with torch.no_grad():
        for i, layer in enumerate(model.propagators):
            layer.bandwidth.fill_(0.6 + 0.2 * i)
        model.read_out.bandwidth.fill_(1.7)
    s, so = model.generator.signatures.detach(), model.generator.readout_signatures.detach()
    d = _distance(s)
    expected = [torch.exp(-d / (0.6 + 0.2 * i)).masked_fill(d > cfg.truncation, 0.0) for i in range(3)]
    for i in range(3):
        torch.testing.assert_close(model.graph.link_probabilities(layer=i), expected[i])
    torch.testing.assert_close(model.graph.link_probabilities(), torch.stack(expected).mean(0))  # the model's graph
    # the regularizer: the sum over the propagators' kernels, the read-out's left out
    from nac.regularizer import graph_structure_loss

    reg = model.graph.regularizer()
    torch.testing.assert_close(reg, sum(graph_structure_loss(P, model.prior_target) for P in expected))
    reg.backward()
    assert model.read_out.bandwidth.grad is None
    assert all(layer.bandwidth.grad is not None for layer in model.propagators)
    # execution: each propagator attends with its own kernel, the read-out with its untruncated one
    seen = []
    for layer in list(model.propagators) + [model.read_out]:
        layer.register_forward_pre_hook(lambda m, args: seen.append(args[-1]))
    model.train()
    model(torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8))
    for i in range(3):
        torch.testing.assert_close(seen[i].dense().detach(), expected[i])
    du = 1 - F.normalize(so, dim=-1) @ F.normalize(s, dim=-1).T
    torch.testing.assert_close(seen[3].dense().detach(), torch.exp(-du.clamp(0, 2) / 1.7))


def test_shared_bandwidth_form_keeps_one_parameter_named_bandwidth():
    shared = {**TINY_KERNEL, "kernel_per_module": False}  # nac v1: one learnable bandwidth
    model = build_model(make_tiny_config(signature_fit_steps=20, **shared))
    names = [n for n, _ in model.named_parameters() if n.endswith("bandwidth")]
    assert names == ["bandwidth"]
    assert model.graph.kernel_bandwidth(0) is model.graph.kernel_bandwidth("readout") is model.bandwidth
    state = model.state_dict()
    again = build_model(make_tiny_config(**shared), fit_signatures=False)
    again.load_state_dict(state)  # the old checkpoint layout loads


def test_per_module_state_dict_round_trips_and_bandwidth_reads_the_graph_mean():
    model = build_model(make_tiny_config(signature_fit_steps=20, **TINY_KERNEL))
    with torch.no_grad():
        model.propagators[0].bandwidth.fill_(0.5)
    again = build_model(make_tiny_config(**TINY_KERNEL), fit_signatures=False)
    again.load_state_dict(model.state_dict())
    assert again.propagators[0].bandwidth.item() == 0.5
    assert model.graph.bandwidth() == pytest.approx((0.5 + 1.0) / 2)
    assert not hasattr(model, "bandwidth")  # only the shared form has a model-level bandwidth
    assert mechanism_numbers(model)["bandwidth"] == model.graph.bandwidth()  # what the mechanism numbers read


# ------------------------------------------------------------- item 5: read-out
def _pool(readout, y):
    w = readout.confidence(y).softmax(dim=1)
    return (w * readout.head(y)).sum(dim=1)


def test_readout_without_residual_and_norm_is_pooling_on_raw_states():
    torch.manual_seed(0)
    ro = ReadOut(d=16, d_code=8, heads=2, num_classes=5, ffn_mult=2.0, residual=False, norm=False, layer_scale=0.1)
    y0, proc = torch.randn(3, 16), torch.randn(4, 7, 16)
    c_o, c_p = torch.randn(3, 8), torch.randn(7, 8)
    K = Kernel(torch.rand(3, 7))
    # the authors' read-out, written out: y = 0.1 attn(...), y += 0.1 ffn(LN(y)), pool the raw y
    a = 0.1 * ro.attn(ro.norm_recv(y0.expand(4, 3, 16)), ro.norm_send(proc), c_o, c_p, K)
    y = a + 0.1 * ro.ffn(ro.norm_ffn(a), c_o)
    torch.testing.assert_close(ro(y0, proc, c_o, c_p, K), _pool(ro, y))
    # nac v1: residual, no LayerScale, a LayerNorm before the pooling
    v1 = ReadOut(d=16, d_code=8, heads=2, num_classes=5, ffn_mult=2.0, residual=True, norm=True, layer_scale=None)
    a = v1.attn(v1.norm_recv(y0.expand(4, 3, 16)), v1.norm_send(proc), c_o, c_p, K)
    y = y0 + a
    y = y + v1.ffn(v1.norm_ffn(y), c_o)
    torch.testing.assert_close(v1(y0, proc, c_o, c_p, K), _pool(v1, v1.norm_out(y)))
    assert isinstance(v1.norm_out, torch.nn.LayerNorm) and isinstance(ro.norm_out, torch.nn.Identity)


def test_readout_kernel_is_truncated_only_with_truncate_readout():
    for truncate in (False, True):
        model = build_model(make_tiny_config(truncate_readout=truncate, signature_fit_steps=20, **TINY_KERNEL))
        d = model.generator.readout_signatures, model.generator.signatures
        P = model.graph._P(*d, layer="readout")
        assert bool((P == 0).any()) == truncate


# ------------------------------------------------------------- item 7: ModFC forms
def _plain_ln(v):
    return (v - v.mean(-1, keepdim=True)) / torch.sqrt(v.var(-1, unbiased=False, keepdim=True) + 1e-5)


@pytest.mark.parametrize("gain", ["one_plus_alpha", "ln_only"])
def test_modfc_forms_match_the_direct_formulas(gain):
    fc = ModFC(6, 5, d_code=4, form=ModFCForm(norm_affine=False, gain=gain))
    assert not any(n.startswith("code_norm") for n, _ in fc.named_parameters())  # no scale, no shift
    x, c = torch.randn(2, 3, 6), torch.randn(3, 4)
    h = _plain_ln(c @ fc.code_proj.weight.T)
    scale = 1 + 0.1 * h if gain == "one_plus_alpha" else h
    torch.testing.assert_close(fc(x, c), (x * scale) @ fc.linear.weight.T + fc.linear.bias)
    assert (fc.alpha is None) == (gain == "ln_only")


def test_the_model_wide_modfc_switch_reaches_every_modfc():
    model = build_model(make_tiny_config(signature_fit_steps=20))
    fcs = [m for m in model.modules() if isinstance(m, ModFC)]
    assert fcs and all(not m.code_norm.elementwise_affine and m.alpha is not None for m in fcs)
    v1 = build_model(make_tiny_config(modfc_norm_affine=True, modfc_gain="ln_only", signature_fit_steps=20))
    assert all(m.code_norm.elementwise_affine and m.alpha is None for m in v1.modules() if isinstance(m, ModFC))
    assert all(m.alpha.item() == pytest.approx(0.1) for m in fcs)  # each built in its form, alpha at alpha_init


# ------------------------------------------------------------- item 8: drop path, stochastic kernel, decay
@pytest.mark.parametrize("schedule", ["uniform", "linear"])
def test_drop_path_schedule(schedule):
    model = build_model(make_tiny_config(depth=4, drop_path=0.2, drop_path_schedule=schedule, signature_fit_steps=20))
    rates = [layer.drop_path.drop_prob for layer in model.propagators]
    expected = [0.2] * 4 if schedule == "uniform" else [0.2 * (i + 1) / 4 for i in range(4)]
    assert rates == pytest.approx(expected)


def test_stochastic_kernel_off_trains_with_P_itself():
    model = build_model(make_tiny_config(stochastic_kernel=False, signature_fit_steps=20)).train()
    assert model.graph.kernel_mode() == "expectation"
    x = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8)
    torch.manual_seed(1)
    a = model(x)
    torch.manual_seed(2)
    assert torch.equal(a, model(x))  # no sample drawn (drop path 0)
    on = build_model(make_tiny_config(sample_readout=False, signature_fit_steps=20)).train()
    assert on.graph.kernel_mode() == "sample" and on.graph.kernel_mode(readout=True) == "expectation"


@pytest.mark.parametrize("decay_filter", ["baral_x", "tiny", "ours", "all"])
def test_weight_decay_groups_by_filter(decay_filter):
    model = build_model(make_tiny_config(signature_fit_steps=20, **TINY_KERNEL))  # learnable bandwidths
    decay, no_decay = decay_groups(model, decay_filter)
    ids = {id(p) for p in decay}
    named = dict(model.named_parameters())
    decayed = {n for n, p in named.items() if id(p) in ids}
    assert len(decay) + len(no_decay) == sum(p.requires_grad for p in named.values())
    if decay_filter == "all":
        assert not no_decay
        return
    one_d = [n for n, p in named.items() if p.dim() == 1]
    assert one_d and not decayed & set(one_d)
    assert "generator.signatures" not in decayed and "generator.readout_signatures" not in decayed
    alphas = [n for n in named if n.endswith(".alpha")]
    if decay_filter == "tiny":  # codes (2-d) and the 0-d bandwidths and gains are decayed
        assert {"generator.codes", "propagators.0.bandwidth", alphas[0]} <= decayed
    elif decay_filter == "baral_x":  # codes decayed; the 0-d bandwidths and gains and the positional grid not
        assert "generator.codes" in decayed
        assert not decayed & {"propagators.0.bandwidth", "tokenizer.pos", *alphas}
    else:
        assert not decayed & {"generator.codes", "generator.readout_codes", "propagators.0.bandwidth", *alphas}


# ------------------------------------------------------------- item 6: initial states, noise, input latents
def test_initial_states_from_the_code_and_noise_only_in_training():
    model = build_model(
        make_tiny_config(initial_state="code", code_noise=0.05, state_noise=0.1, signature_fit_steps=20)
    )
    g = model.generator
    assert not hasattr(g, "state_mlp")
    g.eval()
    design = g()
    assert torch.equal(design.states, g.codes) and torch.equal(design.codes, g.codes)
    g.train()
    torch.manual_seed(0)
    design = g()
    torch.manual_seed(0)
    noise_c = 0.05 * torch.randn_like(g.codes)
    torch.testing.assert_close(design.codes, g.codes + noise_c)
    assert float((design.states - design.codes).detach().std()) == pytest.approx(0.1, rel=0.3)


def test_input_latents_are_a_switch():  # the layout itself: tests/test_input_latents.py
    assert make_tiny_config(input_latents=64).input_latents == 64
    with pytest.raises(ValueError, match="input_latents"):  # a ValueError: params validation names the key
        make_tiny_config(input_latents=-1)


@pytest.mark.parametrize(
    "field,value",
    [
        ("truncation_mode", "soft"),
        ("modfc_gain", "two"),
        ("matching", "greedy"),
        ("signature_fit", "x"),
        ("target_diagonal", "zero"),
        ("drop_path_schedule", "cosine"),
        ("initial_state", "zeros"),
    ],
)
def test_bad_switch_values_name_the_field_and_the_choices(field, value):
    with pytest.raises(ValueError, match=rf"model\.{field}='{value}': Input should be '"):
        ModelConfig(**{field: value})


# TINY-INET-NC-X's blocks where they differ from BARAL-X's (docs/reference.md, "Switches")
TINY_BLOCKS = {
    "readout_layer_scale": 0.1,
    "layer_scale": 0.1,
    "drop_path": 0.1,
    "qkv_bias": True,
    "gated_ffn": False,
    "ffn_mult": 1.333,
}


def _template(name):
    from pathlib import Path

    return yaml.safe_load((Path(__file__).parents[1] / "conf" / "template" / f"{name}.yaml").read_text())


def test_defaults_are_the_authors_where_the_paper_is_silent():
    """The defaults are the default template's, inet_baral: the authors' regularized
    INET-110E-NC-CHONKER-BARAL-X for the model, every block (no truncation, a fixed bandwidth, one kernel,
    regularizer weight 0.1, no q/v bias, GEGLU x 4, no LayerScale, its decay filter, no clipping), the
    dataset's template for the data side (docs/reference.md, "Configurations")."""
    c = ModelConfig()
    assert (
        c.truncation,
        c.learn_bandwidth,
        c.bandwidth,
        c.truncation_mode,
        c.kernel_per_module,
        c.stochastic_kernel,
        c.readout_residual,
        c.readout_norm,
        c.readout_layer_scale,
        c.truncate_readout,
        c.modfc_norm_affine,
        c.modfc_gain,
        c.drop_path_schedule,
        c.input_latents,
        c.initial_state,
        c.signature_fit,
        c.signature_fit_threshold,
        c.matching,
        c.target_diagonal,
    ) == (
        None,
        False,
        1.0,
        "direct",
        False,
        True,
        False,
        False,
        None,
        False,
        False,
        "one_plus_alpha",
        "uniform",
        0,
        "mlp",
        "authors",
        0.8,
        "hungarian",
        "formula",
    )
    assert (c.qkv_bias, c.gated_ffn, c.ffn_mult, c.layer_scale, c.drop_path, c.head_dim) == (
        False,
        True,
        4.0,
        None,
        0.0,
        None,
    )
    from nac.training.config import TrainConfig

    assert TrainConfig().decay_filter == "baral_x" and TrainConfig().reg_weight == 0.1
    assert TrainConfig().grad_clip is None


def test_the_defaults_are_the_default_templates_and_tiny_kernel_the_truncated_ones(tmp_path):
    """``ModelConfig()`` and ``TrainConfig()`` equal conf/template/inet_baral.yaml on every key it
    sets (so the defaults and the default template cannot drift), inet_baral is what composes by
    default, and the truncated template tiny_inet_nc_x differs from it exactly in the kernel the tests
    pass as ``TINY_KERNEL``, TINY-INET-NC-X's blocks (``TINY_BLOCKS``) and in having no regularizer."""
    from nac.compose import write_params
    from nac.training.config import TrainConfig

    baral, tiny = _template("inet_baral")["image"], _template("tiny_inet_nc_x")["image"]
    c, t = ModelConfig(), TrainConfig()
    assert {k: getattr(c, k) for k in baral["model"]} == baral["model"]
    assert {k: getattr(t, k) for k in baral["train"]} == baral["train"]
    assert (baral["model"]["truncation"], baral["model"]["learn_bandwidth"], baral["model"]["kernel_per_module"]) == (
        None,
        False,
        False,
    )
    assert baral["train"]["reg_weight"] == 0.1 and tiny["train"]["reg_weight"] == 0.0
    assert baral["model"].keys() == tiny["model"].keys()
    assert {k: v for k, v in tiny["model"].items() if v != baral["model"][k]} == {**TINY_KERNEL, **TINY_BLOCKS}
    params = yaml.safe_load(write_params(tmp_path / "params.yaml", []).read_text())
    assert params["template"] == "inet_baral"
    assert {k: params["image"]["model"][k] for k in baral["model"]} == baral["model"]


# ------------------------------------------------------------- the templates
@pytest.mark.parametrize(
    "template,expect",
    [
        (
            "inet_baral",
            dict(truncation=None, learn_bandwidth=False, kernel_per_module=False, signature_fit_threshold=0.8),
        ),
        (
            "tiny_inet_nc_x",
            dict(
                truncation=0.9,
                learn_bandwidth=True,
                truncation_mode="direct",
                kernel_per_module=True,
                matching="hungarian",
                signature_fit_threshold=None,
            ),
        ),
        (
            "nac_v1",
            dict(
                truncation=0.9,
                learn_bandwidth=True,
                truncation_mode="masked",
                kernel_per_module=False,
                matching="search",
                signature_fit="margin",
                target_diagonal="one",
                readout_residual=True,
                readout_norm=True,
                readout_layer_scale=None,
                truncate_readout=True,
                modfc_norm_affine=True,
                drop_path_schedule="linear",
            ),
        ),
        (
            "m2mkd",
            dict(
                truncation=0.9,
                learn_bandwidth=True,
                kernel_per_module=True,
                sample_readout=False,
                code_noise=0.05,
                initial_state="code",
                input_latents=64,
            ),
        ),
    ],
)
def test_each_template_composes_validates_and_reaches_every_track(tmp_path, template, expect):
    from nac.compose import write_params
    from nac.tracks.image import image_model_config

    path = write_params(tmp_path / "params.yaml", [f"template={template}"])  # validates every section
    params = yaml.safe_load(path.read_text())
    assert params["template"] == template
    cfg = image_model_config(params, "nac-scale_free", 0, num_classes=10)
    assert {k: getattr(cfg, k) for k in expect} == expect
    for track in ("points", "listops", "text", "nlvr"):
        assert {k: params[track]["model"][k] for k in expect} == expect
    decay = {"inet_baral": "baral_x", "tiny_inet_nc_x": "tiny", "nac_v1": "ours", "m2mkd": "all"}[template]
    assert all(params[s]["train"]["decay_filter"] == decay for s in ("image", "points", "listops", "text", "nlvr"))
    reg = 0.0 if template == "tiny_inet_nc_x" else 0.1  # TINY-INET-NC-X has no graph_sparsity criterion
    assert all(params[s]["train"]["reg_weight"] == reg for s in ("image", "points", "listops", "text", "nlvr"))
    assert params["fewshot"]["protocol"]["reg_weight"] == reg
    assert replace(cfg).to_dict() == cfg.to_dict()


def test_params_validation_rejects_a_bad_switch_or_template(tmp_path):
    from nac.compose import write_params
    from nac.pipeline.params import ParamsError

    with pytest.raises(
        ParamsError, match=r"image\.model\.truncation_mode='soft': Input should be 'direct' or 'masked'"
    ):
        write_params(tmp_path / "params.yaml", ["image.model.truncation_mode=soft"])
    with pytest.raises(ParamsError, match=r"decay_filter='some'"):
        write_params(tmp_path / "params.yaml", ["points.train.decay_filter=some"])
    with pytest.raises(Exception, match="nac_v9"):
        write_params(tmp_path / "params.yaml", ["template=nac_v9"])
