"""The NAC step's optimised paths against their plain forms (issue 14, item 1).

The plain forms of the kernel's optimisations live in ``nac/testing/reference_kernel.py`` (not as
switches in the model); each test here runs both on the same inputs and seed:
outputs and gradients agree to float tolerance, and the random-number stream
is consumed identically (the pipeline's reproducibility depends on it).

* ``log_normalized_kernel`` (cut links get ``-inf``, no subnormal floats in the attention
  backward) vs ``plain_log_normalized_kernel`` (``log(max(K_hat, 1e-30))``);
* ``explicit_attention`` with the kernel bias (the CPU's) vs PyTorch's SDPA (CUDA's, the plain);
* ``KernelSampler`` ``"prepared"`` (logit(P) once per forward; CUDA's) vs ``PlainSampler``
  (``sample_kernel`` per layer); ``"sparse"`` (the CPU's) draws the same sample as a
  ``Kernel`` of the linked entries' values, whose attention bias is computed on those only;
* the Neural Interpreter's ``ModLin``, ``ModAttn``, ``LOC`` (modulation folded into per-function
  weights, one q/k/v GEMM, eqs. 7-8 without the weights ``W``) vs the equations as printed
  (``reference_forms.plain_ni``: the package keeps only the fast forms);
* the regularizer's ``blas_threads``: 1 (the matching's numpy products on one thread, the
  default) vs None (numpy's default threads): bitwise the same.
"""

import copy
from contextlib import nullcontext

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tiny_models import TINY_KERNEL

from nac import build_model
from nac.baselines.neural_interpreter import ModLin, NeuralInterpreter, NeuralInterpreterConfig
from nac.circuits.attention import explicit_attention
from nac.circuits.kernel import KernelSampler, link_probabilities, log_normalized_kernel, sample_kernel
from nac.testing.reference_forms import plain_ni
from nac.testing.reference_kernel import PlainKernel, PlainSampler, plain_log_normalized_kernel, use_reference_kernel
from tests.conftest import make_tiny_config


def _close(a, b, rtol=1e-4, scale=None):
    """Equal up to ``rtol`` of ``scale`` (default: the larger tensor's largest entry)."""
    a, b = a.detach(), b.detach()
    scale = scale or max(float(a.abs().max()), float(b.abs().max()), 1e-12)
    torch.testing.assert_close(a, b, rtol=rtol, atol=rtol * scale)


def _truncated_P(n=24, d_sig=5, seed=0, requires_grad=True):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(n, d_sig, generator=g).requires_grad_(requires_grad)
    P = link_probabilities(s, bandwidth=0.8, truncation=0.9)
    assert (P == 0).any() and (P > 0).any()
    return s, P


# ------------------------------------------------------------------ kernel bias: masked vs plain
def test_masked_kernel_bias_gives_plain_attention_and_gradients():
    torch.manual_seed(0)
    s, P = _truncated_P()
    K = sample_kernel(P, tau=0.5, batch_size=3)
    K = torch.cat([K, torch.zeros(3, 1, K.shape[-1])], dim=1)  # plus a row with no link at all
    scores = torch.randn(3, 2, *K.shape[1:]).requires_grad_()
    outs = {}
    for impl, log_k_hat in (("masked", log_normalized_kernel), ("plain", plain_log_normalized_kernel)):
        bias = log_k_hat(K).unsqueeze(1)
        w = (scores + bias).softmax(-1)
        loss = (w * torch.randn(w.shape, generator=torch.Generator().manual_seed(1))).sum()
        outs[impl] = (w, *torch.autograd.grad(loss, (scores, s), retain_graph=True))
    for a, b in zip(outs["masked"], outs["plain"]):
        _close(a, b)
    masked = log_normalized_kernel(K)
    assert torch.isinf(masked[:, :-1][K[:, :-1] == 0]).all()  # cut links: exactly no weight
    assert torch.equal(masked[:, -1], plain_log_normalized_kernel(K)[:, -1])  # empty row as plain


def test_kernel_sampler_rejects_unknown_impl():
    with pytest.raises(ValueError, match="sparse, prepared"):
        KernelSampler(torch.rand(2, 2), 0.5, impl="plain")


# ------------------------------------------------------------------ attention: explicit vs SDPA
def test_explicit_attention_equals_sdpa_with_a_learnable_bias():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 7, 4, requires_grad=True) for _ in range(3))
    _, P = _truncated_P(n=7)
    K = sample_kernel(P, 0.5, batch_size=2)
    bias = log_normalized_kernel(K).unsqueeze(1)
    g = torch.randn(2, 3, 7, 4)
    ys = {}
    for name, fn in (
        ("explicit", explicit_attention),
        ("sdpa", lambda *a: F.scaled_dot_product_attention(*a[:3], attn_mask=a[3])),
    ):
        y = fn(q, k, v, bias)
        ys[name] = (y, *torch.autograd.grad((y * g).sum(), (q, k, v, P), retain_graph=True))
    for a, b in zip(ys["explicit"], ys["sdpa"]):
        _close(a, b)


def test_explicit_attention_adds_the_bias_in_place_bitwise():
    """The in-place bias add gives the out-of-place form's outputs and gradients to the bit."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 7, 4, requires_grad=True) for _ in range(3))
    _, P = _truncated_P(n=7)
    bias = log_normalized_kernel(sample_kernel(P, 0.5, batch_size=2)).unsqueeze(1)
    g = torch.randn(2, 3, 7, 4)

    def out_of_place(q, k, v, bias):
        return torch.matmul((torch.matmul(q * 0.5, k.transpose(-1, -2)) + bias).softmax(-1), v)

    res = [
        (y, *torch.autograd.grad((y * g).sum(), (q, k, v, P), retain_graph=True))
        for y in (explicit_attention(q, k, v, bias), out_of_place(q, k, v, bias))
    ]
    assert all(torch.equal(a, b) for a, b in zip(*res))


# ------------------------------------------------------------------ sampler: prepared vs plain
@pytest.mark.parametrize("batch, per_sample", [(4, False), (None, False), (None, True)])
def test_kernel_sampler_equals_sample_kernel_and_consumes_the_same_randomness(batch, per_sample):
    s, P = _truncated_P()
    if per_sample:  # a conditional design's [B, U, V] P
        P = torch.stack([P, P.flip(0)])
    draws = {}
    for impl in ("prepared", "plain"):
        torch.manual_seed(7)
        sampler = KernelSampler(P, 0.5, impl=impl) if impl == "prepared" else PlainSampler(P, 0.5, "sample")
        Ks = [sampler(batch).dense() for _ in range(3)]  # several layers from one P
        after = torch.rand(5)  # where the generator was left
        grad = torch.autograd.grad(
            sum((K * torch.linspace(-1, 1, K.numel()).view_as(K)).sum() for K in Ks), s, retain_graph=True
        )[0]
        draws[impl] = (Ks, after, grad)
    (Kp, after_p, grad_p), (Kr, after_r, grad_r) = draws["prepared"], draws["plain"]
    assert torch.equal(after_p, after_r)
    for a, b in zip(Kp, Kr):
        assert torch.equal(a == 0, b == 0)
        _close(a, b)
    _close(grad_p, grad_r)


# ------------------------------------------------------------------ sparse kernel sample and bias
@pytest.mark.parametrize("batch", [4, None])
def test_sparse_kernel_gives_the_dense_sample_bias_and_gradients(batch):
    """``impl="sparse"``: the same draw as ``"prepared"`` (the same generator use; equal to float
    rounding: "prepared" computes densely, issue 21), and its
    attention bias (computed on linked entries only) equals the dense masked bias, ``-inf`` on
    exactly the same entries, with the same gradients to the signatures."""
    s, P = _truncated_P(n=32)
    out = {}
    for impl in ("sparse", "prepared"):
        torch.manual_seed(3)
        sampler = KernelSampler(P, 0.5, impl=impl)
        Ks = [sampler(batch) for _ in range(2)]
        after = torch.rand(3)
        dense = [K.dense() for K in Ks]
        biases = [K.log_normalized(1e-6) for K in Ks]
        w = [torch.randn(b.shape, generator=torch.Generator().manual_seed(i)) for i, b in enumerate(biases)]
        loss = sum((b.masked_fill(b.isinf(), 0.0) * wi).sum() for b, wi in zip(biases, w))
        out[impl] = (Ks, dense, biases, after, torch.autograd.grad(loss, s, retain_graph=True)[0])
    (Ks, ds, bs, after_s, gs), (Kp, dp, bp, after_p, gp) = out["sparse"], out["prepared"]
    assert all(K.links is not None for K in Ks) and not any(K.links is not None for K in Kp)
    assert torch.equal(after_s, after_p)
    for a, b in zip(ds, dp):  # the same formula elementwise; vectorised log / log1p round by position
        assert torch.equal(a == 0, b == 0)
        _close(a, b, rtol=1e-6)
    for a, b in zip(bs, bp):
        assert torch.equal(a.isinf(), b.isinf()) and a.isinf().float().mean() > 0.1
        _close(a.masked_fill(a.isinf(), 0.0), b.masked_fill(b.isinf(), 0.0))
    _close(gs, gp)


def test_sparse_kernel_bias_takes_the_dense_form_for_its_special_cases():
    """A row without links (a read-out module cut from every processor) and a linked entry
    below the floor fall back to the dense masked bias exactly."""
    _, P = _truncated_P(n=16, requires_grad=False)
    P_empty = torch.cat([P, torch.zeros(1, P.shape[1])])
    torch.manual_seed(0)
    K = KernelSampler(P_empty, 0.5, impl="sparse")(3)
    assert K.links.empty_rows
    assert torch.equal(K.log_normalized(), log_normalized_kernel(K.dense()))
    torch.manual_seed(0)
    K = KernelSampler(P, 0.5, impl="sparse")(3)
    K.values = K.values.clone()
    K.values[0, 1] = 1e-37  # K_hat below the 1e-30 floor
    assert not K.links.empty_rows
    assert torch.equal(K.log_normalized(), log_normalized_kernel(K.dense()))


@pytest.mark.parametrize("mode", ["expectation", "threshold", "dense"])
def test_kernel_sampler_eval_modes_are_sample_kernel(mode):
    _, P = _truncated_P(requires_grad=False)
    out, ref = KernelSampler(P, 0.5, mode=mode)(4), sample_kernel(P, 0.5, batch_size=4, mode=mode)
    assert (out is None and ref is None) or torch.equal(out.dense(), ref)


# ------------------------------------------------------------------ the whole model
@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("kernels", ["default", "per_module", "shared_masked"])
def test_nac_fast_paths_give_the_plain_step(train, kernels, monkeypatch):
    """A NAC with each kernel (the default's: untruncated, one fixed bandwidth; the truncated ones:
    truncation 0.9, straight-through, learnable bandwidth), signatures fitted to the prior and the
    regularizer: same logits, loss and parameter gradients, and the same random-number stream,
    with every optimisation on or off."""
    from nac.circuits import kernel

    sparse_biases = []
    real = kernel._sparse_log_normalized_kernel
    monkeypatch.setattr(
        kernel, "_sparse_log_normalized_kernel", lambda *a: sparse_biases.append(real(*a)) or sparse_biases[-1]
    )
    plain_biases = []  # the plain form's bias was what the reference model attended with
    real_plain = PlainKernel.log_normalized
    monkeypatch.setattr(
        PlainKernel, "log_normalized", lambda *a, **k: plain_biases.append(real_plain(*a, **k)) or plain_biases[-1]
    )
    torch.manual_seed(0)
    # the default (inet_baral), tiny_inet_nc_x's (a kernel per module, direct truncation) and nac v1's
    # (one learnable bandwidth, masked truncation)
    form = {
        "default": {},
        "per_module": TINY_KERNEL,
        "shared_masked": dict(TINY_KERNEL, kernel_per_module=False, truncation_mode="masked"),
    }[kernels]
    cfg = make_tiny_config(variant="nac", n_processor=24, depth=3, signature_fit_steps=50, **form)
    model = build_model(cfg)
    model.train(train)
    x = torch.randint(0, 256, (3, 3, 32, 32), dtype=torch.uint8)
    y = torch.randint(0, 5, (3,))
    P = model.graph.link_probabilities().detach()
    if kernels == "default":
        assert cfg.truncation is None and not cfg.learn_bandwidth and (P > 0).all()
    else:
        assert cfg.truncation == 0.9 and cfg.straight_through and cfg.learn_bandwidth
        assert (P == 0).float().mean() > 0.1  # the kernel cuts links: the masked path matters
    results = {}
    for plain in (False, True):
        model = use_reference_kernel(copy.deepcopy(model)) if plain else model
        torch.manual_seed(123)
        logits = model(x)
        loss = F.cross_entropy(logits, y) + 0.1 * model.graph.regularizer()
        model.zero_grad(set_to_none=True)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results[plain] = (logits.detach(), loss.detach(), grads, torch.rand(4))
    (lf, Lf, gf, rf), (lp, Lp, gp, rp) = results[False], results[True]
    if train:  # the sparse bias was taken (every layer, no fallback to the dense form)
        assert len(sparse_biases) == 4 and all(b is not None for b in sparse_biases)
    else:
        assert not sparse_biases
    assert len(plain_biases) == cfg.depth + 1  # every propagator's and the read-out's, in the plain run
    _close(lf, lp)
    _close(Lf, Lp)
    bandwidths = [n for n in gf if n.endswith("bandwidth")]
    assert (
        gf.keys() == gp.keys()
        and "generator.signatures" in gf
        and len(bandwidths) == {"default": 0, "per_module": cfg.depth + 1, "shared_masked": 1}[kernels]
    )
    # Some gradients are zero but for rounding (e.g. biases a softmax ignores): compare every
    # tensor against the largest gradient of the model.
    scale = max(float(g.abs().max()) for g in gp.values())
    for name in gf:
        _close(gf[name], gp[name], scale=scale)
    assert torch.equal(rf, rp)


# ------------------------------------------------------------------ regularizer: one BLAS thread
@pytest.mark.parametrize("prior, n", [("scale_free", 256), ("planted_partition", 64)])
def test_regularizer_matching_is_bitwise_the_same_with_one_blas_thread(prior, n):
    """``closest_permutation`` limits numpy's BLAS to ``blas_threads=1``; with the library's
    default threads (the plain form) the cost matrices, the permutation and the loss are the same
    to the bit. (On a 1-core machine both forms use one thread and this cannot tell them apart.)"""
    from threadpoolctl import threadpool_info

    from nac import regularizer
    from nac.graphs import prior_target

    G = torch.as_tensor(prior_target(prior, n), dtype=torch.float64)
    gen = torch.Generator().manual_seed(n)
    P = (G + 0.05 * torch.rand(n, n, generator=gen, dtype=torch.float64)).clamp(0, 1)
    if prior == "planted_partition":  # an exact permuted copy: the tie-breaking (anchored) search runs
        perm = torch.randperm(n, generator=gen)
        P = G[perm][:, perm]
    Pn, Gn = P.numpy(), G.numpy()
    out = {}
    for threads in (None, 1):
        with regularizer._blas_limit(threads):
            blas = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
            costs = (regularizer._sq_dist(Gn, Pn), regularizer._sq_dist(np.sort(Gn, 1), np.sort(Pn, 1)))
        if threads == 1:
            assert blas and set(blas) == {1}
        out[threads] = (
            costs,
            regularizer.closest_permutation(P, G, blas_threads=threads),
            regularizer.graph_structure_loss(P, G, blas_threads=threads),
        )
    (c0, p0, l0), (c1, p1, l1) = out[None], out[1]
    assert all(np.array_equal(a, b) for a, b in zip(c0, c1))
    assert torch.equal(p0, p1) and torch.equal(l0, l1)


# ------------------------------------------------------------------ the optimizer: AdamW's implementations
def _adamw_run(impl, steps=5):
    from nac.training.optim import make_adamw

    torch.manual_seed(0)
    model = build_model(make_tiny_config(variant="nac", n_processor=12, depth=2, signature_fit_steps=10))
    params = list(model.parameters())
    decay = [p for p in params if p.dim() >= 2]
    opt = make_adamw(
        [{"params": decay, "weight_decay": 0.05}, {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
        lr=1e-2,
        impl=impl,
    )
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen)
        opt.step()
    return [p.detach().clone() for p in params], opt


def test_adamw_foreach_is_bitwise_the_default_and_fused_agrees_to_rounding():
    """``train.adamw`` (``make_adamw``): "foreach" gives the default (per-parameter loop) parameters to the bit after
    5 steps; "fused" (opt-in, off by default) to ~1e-6 relative, not bitwise; its state loads
    into the default optimizer."""
    ref, ref_opt = _adamw_run(None)
    fe, _ = _adamw_run("foreach")
    fu, fu_opt = _adamw_run("fused")
    assert all(torch.equal(a, b) for a, b in zip(ref, fe))
    scale = max(float(p.abs().max()) for p in ref)
    for a, b in zip(fu, ref):
        _close(a, b, rtol=1e-6, scale=scale)
    ref_opt.load_state_dict(fu_opt.state_dict())


def test_make_adamw_rejects_unknown_impl():
    from nac.training.optim import make_adamw

    with pytest.raises(ValueError, match="fused"):
        make_adamw([torch.zeros(1, requires_grad=True)], lr=1e-3, impl="bogus")


@pytest.mark.parametrize("variant", ["nac", "frozen_graph", "modfc", "perceiver_io"])
def test_prune_sweep_tokenizing_once_equals_predict(variant, tiny_config):
    """The prune sweep tokenizes the validation set once per model and executes every smaller
    model on those tokens (``tokenize`` + ``predict_tokens``); the plain form runs ``predict``
    on each smaller model. Same logits, bit for bit, with and without modules dropped."""
    from nac.evaluation import predict, predict_tokens, tokenize
    from nac.pruning import drop_modules, random_connectivity

    model = build_model(tiny_config(variant=variant))
    g = torch.Generator().manual_seed(0)
    data = [
        {"input": torch.randint(0, 256, (3, 32, 32), dtype=torch.uint8, generator=g), "label": i % 5} for i in range(23)
    ]
    tokens, labels = tokenize(model, data, batch_size=8)
    assert len(tokens) == 3 and model.training  # predict's batches; the mode is restored
    for k in (0, 5, 12):
        smaller = drop_modules(model, k, connectivity=random_connectivity(16, seed=k)) if k else model
        plain, fast = predict(smaller, data, batch_size=8), predict_tokens(smaller, tokens, labels)
        assert np.array_equal(plain["logits"], fast["logits"]) and np.array_equal(plain["label"], fast["label"])


# ------------------------------------------------ Neural Interpreter: fast forms vs plain_ni
def _ni_grads(fn, params, impl, module, seed=0):
    """Outputs, every parameter's gradient and the RNG state after ``fn()`` under ``seed``, with
    ``module``'s layers in form ``impl`` ("plain": ``plain_ni``; "fast": the package's)."""
    torch.manual_seed(seed)
    with plain_ni(module) if impl == "plain" else nullcontext():
        out = fn()
    grads = torch.autograd.grad(
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum(), params, allow_unused=True
    )
    return out.detach(), grads, torch.get_rng_state()


def _assert_ni_same(fn, params, module):
    """Outputs and gradients agree to ``rtol=1e-5``, ``atol=max(1e-6, 1e-5 * max|plain|)`` (float32
    rounding through the whole model: observed differences are <= 3e-6 of each tensor's scale)."""
    (o1, g1, rng1), (o2, g2, rng2) = (_ni_grads(fn, params, impl, module) for impl in ("plain", "fast"))
    assert all((a is None) == (b is None) for a, b in zip(g1, g2))
    for a, b in zip((o1, *g1), (o2, *g2)):
        if a is not None:
            torch.testing.assert_close(b, a, rtol=1e-5, atol=max(1e-6, 1e-5 * float(a.abs().max())))
    assert torch.equal(rng1, rng2)  # the same random numbers drawn


@pytest.mark.parametrize("form", ["full", "broadcast", "one_code", "batched_codes"])
def test_ni_modlin_fast_forms_equal_plain(form):
    torch.manual_seed(0)
    m, B, U, V = ModLin(8, 12, 6), 3, 4, 5
    x, c = torch.randn(B, U, V, 8, requires_grad=True), torch.randn(U, 6, requires_grad=True)
    if form == "broadcast":  # x_ui = x_i: one GEMM
        x = torch.randn(B, V, 8, requires_grad=True)
    elif form == "one_code":
        x, c = torch.randn(B, V, 8, requires_grad=True), torch.randn(6, requires_grad=True)
    elif form == "batched_codes":
        c = torch.randn(B, U, 6, requires_grad=True)

    def run():
        return m(x.unsqueeze(1).expand(-1, U, -1, -1) if form == "broadcast" else x, c)

    _assert_ni_same(run, [x, c, *m.parameters()], m)


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("size", ["small", "mini"])
def test_ni_fast_model_gives_the_plain_outputs_and_gradients(train, size):
    """The whole model (eqs. 1-14): two LOCs (a broadcast and a full input), a key mask with padded
    tokens, train (BatchNorm batch statistics) and eval; ``mini`` has params.yaml's mini sizes."""
    kw = (
        dict(
            tokenizer={"kind": "conv32", "dim": 16, "pos_dim": 8},
            d_model=16,
            d_type=8,
            d_code=12,
            n_functions=3,
            n_scripts=2,
            loc_layers=2,
        )
        if size == "small"
        else dict(
            tokenizer={"kind": "conv32", "dim": 48, "pos_dim": 16, "width": 32, "norm": "batch"},
            n_functions=4,
            loc_layers=1,
        )
    )
    torch.manual_seed(0)
    model = NeuralInterpreter(NeuralInterpreterConfig(num_classes=5, heads=2, n_iterations=2, **kw))
    images = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8)
    mask = torch.ones(4, 64, dtype=torch.bool)
    mask[1, 40:] = mask[3, ::3] = False
    state = {k: v.clone() for k, v in model.state_dict().items()}

    def run():
        model.load_state_dict(state)  # BatchNorm statistics too
        return model.train(train)(images, mask)

    _assert_ni_same(run, list(model.parameters()), model)
    assert not any("forward" in vars(m) for m in model.modules())  # the plain forms are taken off again
