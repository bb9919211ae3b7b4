"""``P`` computed once per training step and the regularizer's matching off the critical path
(issue 21).

``nac.training.objective.Objective`` (the training step's forward, and the one call a user's
own loop takes) computes each of a NAC's propagators' ``P`` (eq. 2) once
(``kernel_probabilities``), starts the regularizer's matching on a worker thread
(``match_async``: ``P`` copied to the host without blocking, the target read from its host
copy), runs the forward with the same ``P`` and then finishes the
regularizer with the thread's permutations.

* Against the plain step (``forward`` then ``graph.regularizer`` of the same design, each
  computing its own ``P``, the matching in the caller's thread): the same logits, regularizer and
  loss, every parameter gradient to float rounding (not bit-exact: the backward through ``P`` runs
  once on the sum of both consumers' gradients instead of twice, a different summation order).
* Against the same ``P`` matched in the caller's thread: bit for bit the same.
"""

import threading

import pytest
import torch
import torch.nn.functional as F
from tiny_models import COND_TOKENIZER, TINY_KERNEL, make_tiny_config, tiny_batch

from nac import build_model, graph_matching, regularizer
from nac.circuit_graph import CircuitGraph
from nac.training.objective import Objective

CONFIGS = {
    "default": dict(),  # inet_baral: one fixed, untruncated kernel
    "kernel_per_module": dict(TINY_KERNEL),  # tiny_inet_nc_x: truncated, a learnable bandwidth per module
    "shared_kernel": dict(TINY_KERNEL, kernel_per_module=False, truncation_mode="masked"),  # nac v1
    "input_latents": dict(input_latents=3),
    "conditional_regularised": dict(
        TINY_KERNEL, generator="conditional", cond_tokenizer=COND_TOKENIZER, generator_regularizer=True
    ),
}


def _model(cpu_shortcuts=True, **kw):
    torch.manual_seed(0)
    cfg = make_tiny_config(variant="nac", signature_fit_steps=20, n_processor=12, depth=3, **kw)
    return build_model(cfg, cpu_shortcuts=cpu_shortcuts).train()


def _plain(model, x, mask=None, cond=None, cond_mask=None):
    """The step before issue 21: the executor and the regularizer each compute ``P``."""
    design = model.design(cond, cond_mask)
    return model(x, mask=mask, design=design), model.graph.regularizer(design)


def _step(model, x, y, kw, calls, forward):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(11)
    logits, reg = forward(model, x, **kw)
    loss = F.cross_entropy(logits, y) + reg
    loss.backward()
    grads = {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}
    return logits.detach(), reg.detach(), grads, torch.rand(()), len(calls)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_P_once_gives_the_step_that_computes_it_twice(name, monkeypatch):
    model = _model(**CONFIGS[name])
    assert model.prior_target is not None
    x, y, kw = tiny_batch(model, seed=5)
    calls = []
    real = CircuitGraph._P
    monkeypatch.setattr(CircuitGraph, "_P", lambda self, *a, **k: calls.append(k.get("layer")) or real(self, *a, **k))
    shared = _step(model, x, y, kw, calls, lambda m, *a, **k: Objective(m)(*a, **k))
    calls.clear()
    ref = _step(model, x, y, kw, calls, _plain)
    torch.testing.assert_close(shared[0], ref[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(shared[1], ref[1], rtol=1e-5, atol=1e-7)
    assert torch.equal(shared[3], ref[3])  # the same random-number stream
    floor = 1e-7 * max(float(g.abs().max()) for g in ref[2].values() if g is not None)
    for n, g in ref[2].items():
        assert (g is None) == (shared[2][n] is None), n
        if g is not None:
            torch.testing.assert_close(
                shared[2][n], g, rtol=1e-5, atol=max(1e-5 * float(g.abs().max()), floor), msg=lambda m, n=n: f"{n}: {m}"
            )
    # the propagators' P (one batched call for all layers) + the read-out's; the plain step twice the first;
    # with input latents one more batched call: the propagators' links from the latents (issue 31)
    extra = int(bool(model.config.input_latents))
    assert shared[4] == 2 + extra and ref[4] == 3 + extra


@pytest.mark.parametrize("name", ["default", "kernel_per_module", "shared_kernel", "conditional_regularised"])
def test_kernel_probabilities_are_each_layers_own_P(name):
    """Every layer's ``P`` from one cosine distance and one batched exp: bit for bit each layer's
    own ``P`` (``_P`` of that layer), gradients to float rounding (summed before the distance's
    backward instead of after)."""
    model = _model(**CONFIGS[name])
    x, _, kw = tiny_batch(model, seed=5)
    design = model.design(kw.get("cond"), kw.get("cond_mask"))
    batched = model.graph.kernel_probabilities(design)
    own = {i: model.graph._P(design.signatures, layer=i) for i in batched}
    assert list(batched) == (list(range(model.config.depth)) if model.config.kernel_per_module else [None])
    w = torch.randn(batched[next(iter(batched))].shape, generator=torch.Generator().manual_seed(0))
    grads = []
    for Ps in (batched, own):
        bandwidths = [model.graph.kernel_bandwidth(i) for i in Ps]
        assert all(b.requires_grad == model.config.learn_bandwidth for b in bandwidths)  # fixed: a buffer
        params = [design.signatures, *(b for b in bandwidths if b.requires_grad)]
        loss = sum((P * w * (k + 1)).sum() for k, P in enumerate(Ps.values()))
        grads.append(torch.autograd.grad(loss, params, retain_graph=True))
    for i in own:
        assert torch.equal(batched[i], own[i]), i
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6 * float(b.abs().max()))


@pytest.mark.parametrize("matching", ["hungarian", "search"])
def test_the_matching_on_a_thread_gives_the_sequential_step_bit_for_bit(matching, monkeypatch):
    """The same ``P``: matched on the worker thread (while the forward runs) or in the caller's
    thread after it, the same permutations, so the same regularizer and gradients exactly."""
    model = _model(matching=matching, **TINY_KERNEL)  # a kernel per propagator: one matching each
    x, y, _ = tiny_batch(model, seed=5)
    threads = []
    real = regularizer._hungarian  # every matching's Hungarian steps (the authors' and the search's)
    for module in (regularizer, graph_matching):
        monkeypatch.setattr(module, "_hungarian", lambda c: threads.append(threading.current_thread().name) or real(c))
    on_thread = _step(model, x, y, {}, [], lambda m, *a, **k: Objective(m)(*a, **k))
    assert len(threads) >= model.config.depth and all(t.startswith("nac-matching") for t in threads)
    threads.clear()
    monkeypatch.setattr(Objective, "match_async", lambda self, Ps: None)  # graph_regularizer matches itself
    here = _step(model, x, y, {}, [], lambda m, *a, **k: Objective(m)(*a, **k))
    assert len(threads) >= model.config.depth and set(threads) == {threading.current_thread().name}
    assert torch.equal(on_thread[0], here[0]) and torch.equal(on_thread[1], here[1])
    assert torch.equal(on_thread[3], here[3])
    for n, g in here[2].items():
        assert (g is None) == (on_thread[2][n] is None), n
        assert g is None or torch.equal(on_thread[2][n], g), n


def test_the_target_is_read_from_its_host_copy(monkeypatch):
    """The matching gets the target as one host array, made once (not copied from the device at
    every step), and a new target (a pruned model's, a device move) replaces it."""
    model = _model(**TINY_KERNEL)  # a kernel per propagator: one matching each, all against the one copy
    x, _, _ = tiny_batch(model, seed=5)
    seen = []
    real = regularizer.match_async
    monkeypatch.setattr(
        "nac.training.objective.match_async", lambda P, G, *a, **k: seen.append(G) or real(P, G, *a, **k)
    )
    objective = Objective(model)
    for _ in range(2):
        objective(x)
    assert len(seen) == 2 * model.config.depth and all(G is seen[0] for G in seen)
    assert seen[0].dtype.name == "float64" and (seen[0] == model.prior_target.double().numpy()).all()
    model.prior_target = model.prior_target.flip(0)
    objective(x)
    assert seen[-1] is not seen[0] and (seen[-1] == model.prior_target.double().numpy()).all()


@pytest.mark.slow
def test_sharing_adds_no_graph_break():
    """Under ``torch.compile`` the shared P (and the batched modulation) trace without a graph
    break of their own (the training objective's other breaks are the regularizer's matching)."""
    import torch._dynamo as dynamo

    model = _model(cpu_shortcuts=False)  # CUDA's sampler
    x, _, _ = tiny_batch(model, seed=5)
    dynamo.reset()
    try:
        explained = dynamo.explain(Objective(model))(x)
    finally:
        dynamo.reset()
    ours = {"kernel_probabilities", "kernel_samplers", "_layer_samplers", "sample", "layer_kernel_biases"}
    ours |= {"link_probabilities", "code_modulations", "batched_modulations", "of"}
    for reason in explained.break_reasons:
        assert not {frame.name for frame in reason.user_stack} & ours, reason


def test_the_readme_training_call_waits_on_no_host_copy():
    """The README's training call, ``Objective(model)(images)``, on the code paths CUDA takes: no
    op the host would wait on (``nac.bench.opcount``'s counter: sync ops, copies to the host,
    blocking copies from it), forward and backward, once its first call has copied the prior's
    constant target to the host (``host_target``, once per model); the plain form, ``model(x)`` then
    ``model.graph.regularizer()``, copies every ``P`` to the host (the counter can fail)."""
    from contextlib import ExitStack

    from nac.bench import opcount

    model = _model(cpu_shortcuts=False, **TINY_KERNEL)  # a kernel per propagator: one matching each
    x, y, _ = tiny_batch(model, seed=5)
    objective = Objective(model)
    objective(x)  # the first step: the target's one host copy
    forms = {
        "objective": lambda: objective(x),
        "plain": lambda: (model(x), model.graph.regularizer()),
    }
    syncs = {}
    for name, form in forms.items():
        t = opcount.Tracker()
        with ExitStack() as stack:
            opcount.host_patches(t, stack)
            with opcount.OpCounter(t):
                logits, reg = form()
                (F.cross_entropy(logits, y) + 0.1 * reg).backward()
        syncs[name] = dict(t.sync_kinds)
    assert syncs["objective"] == {}, syncs["objective"]
    assert sum(syncs["plain"].values()) >= model.config.depth, syncs["plain"]
