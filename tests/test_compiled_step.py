"""Issue 21, "one compiled step": the training forward and loss (``nac.training.compiled``,
``train.compile``) trace as one graph on the code paths CUDA takes (``cpu_shortcuts=False``),
do not recompile when the number of links changes, and give the eager step's loss and gradients
(``aot_eager``: the same aten ops and random stream, so equal to float rounding).

Before this, ``torch._dynamo.explain(Objective(nac))`` broke the tiny NAC's forward into 6
graphs (5 breaks), all of them the regularizer's matching: the worker thread's executor
(``SimpleQueue.__new__``, its lock in ``submit``) and ``Future.result``'s lock. The matching now
runs before the compiled region (``Objective.matching_in_advance``) and its permutations are inputs.
"""

import copy

import pytest
import torch
import torch._dynamo as dynamo
from tiny_models import TINY_KERNEL, make_tiny_config, tiny_batch

from nac import build_model
from nac.training import compiled
from nac.training.config import TrainConfig
from nac.training.loop import fit
from nac.training.objective import Objective, objective_losses

CONFIGS = {
    "default": dict(variant="nac"),  # inet_baral: one fixed, untruncated kernel
    "kernel_per_module": dict(variant="nac", **TINY_KERNEL),  # tiny_inet_nc_x: truncated, a bandwidth per module
    "shared_kernel": dict(variant="nac", **{**TINY_KERNEL, "kernel_per_module": False}, truncation_mode="masked"),
    "input_latents": dict(variant="nac", input_latents=3),
    "perceiver_io": dict(variant="perceiver_io"),
}


@pytest.fixture(autouse=True)
def _one_thread_fresh_dynamo():
    torch.set_num_threads(1)
    dynamo.reset()
    yield
    dynamo.reset()


def _model(cpu_shortcuts=False, **kw):
    """A tiny model, by default on the sampler and attention CUDA takes (``cpu_shortcuts=False``)."""
    torch.manual_seed(0)
    cfg = make_tiny_config(signature_fit_steps=20, n_processor=12, depth=3, **kw)
    return build_model(cfg, cpu_shortcuts=cpu_shortcuts).train()


def _args(model, seed=5, smoothing=0.1):
    """``objective_losses``' arguments for one batch, the permutations matched in advance."""
    x, y, _ = tiny_batch(model, seed=seed)
    obj = Objective(model)
    perms = compiled.finish_matching(obj.matching_in_advance(), x.device)
    return (obj, {"inputs": x}, y, None, perms, smoothing, 0.1, False)


# the default run keeps one NAC and Perceiver IO; the other forms run with the slow tests
SLOW = pytest.mark.slow


@pytest.mark.parametrize(
    "name", [n if n in ("kernel_per_module", "perceiver_io") else pytest.param(n, marks=SLOW) for n in CONFIGS]
)
def test_the_training_forward_is_one_graph(name):
    model = _model(**CONFIGS[name])
    explained = dynamo.explain(objective_losses)(*_args(model))
    assert explained.graph_count == 1 and explained.graph_break_count == 0, explained.break_reasons


@pytest.mark.parametrize(
    "kw,amp,soft",
    [
        (dict(variant="nac"), True, True),  # bf16 autocast (the CPU's here), mixup/cutmix's soft targets
        pytest.param(dict(variant="nac", code_noise=0.1, state_noise=0.1, drop_path=0.2), False, False, marks=SLOW),
        pytest.param(dict(variant="nac", regularizer="kl", matching="search"), False, False, marks=SLOW),
    ],
)
def test_the_step_options_stay_one_graph(kw, amp, soft):
    model = _model(**kw)
    args = list(_args(model))
    if soft:
        args[3] = torch.softmax(torch.randn(len(args[2]), model.config.num_classes), -1)
    args[-1] = amp
    explained = dynamo.explain(objective_losses)(*args)
    assert explained.graph_count == 1 and explained.graph_break_count == 0, explained.break_reasons


@pytest.mark.parametrize("name", ["kernel_per_module", pytest.param("shared_kernel", marks=SLOW)])
def test_compiling_on_the_cpu_takes_cudas_paths(name):
    """With the CPU shortcuts on (the CPU's default), tracing takes CUDA's fixed-shape forms
    anyway (``cpu_shortcut`` is False while compiling): before, the sparse sampler's
    ``nonzero``, ``bool(tensor)`` and ``.item()`` broke the tiny NAC's step into 35 graphs."""
    model = _model(cpu_shortcuts=True, **CONFIGS[name])
    explained = dynamo.explain(objective_losses)(*_args(model))
    assert explained.graph_count == 1 and explained.graph_break_count == 0, explained.break_reasons


@pytest.mark.slow  # the diagnosis of the breaks (seconds); the one-graph tests above stay in the default run
def test_the_matching_inside_the_forward_was_the_break():
    """The test above can fail: the eager form (matching on the worker thread inside the
    forward) breaks the graph, at the matching."""
    model = _model(variant="nac")
    args = list(_args(model))
    args[4] = None
    explained = dynamo.explain(objective_losses)(*args)
    assert explained.graph_break_count > 0
    matching = {"match_async", "_submit_matching", "result"}  # nac.regularizer's matching, Future.result
    assert all(matching & {f.name for f in r.user_stack} for r in explained.break_reasons)


def _links(model) -> int:
    return int((model.graph.link_probabilities() > 0).sum())


def test_no_recompile_when_the_number_of_links_changes():
    """One compilation serves steps whose ``P`` has a different number of nonzero links (the
    sparse CPU sampler's shapes followed it; CUDA's fixed-shape sampler does not). The truncated
    kernel: only there does a link turn off (``P = 0``)."""
    model = _model(**CONFIGS["kernel_per_module"])
    counter = dynamo.testing.CompileCounter()
    step = torch.compile(objective_losses, backend=counter, dynamic=False)
    seen = []
    for spread in (0.0, 1.0, 3.0):  # signatures from one direction (every link) to scattered
        with torch.no_grad():
            sig = model.generator.signatures
            sig.copy_(torch.nn.functional.normalize(sig[:1] + spread * torch.randn_like(sig), dim=-1))
        seen.append(_links(model))
        with dynamo.config.patch(error_on_recompile=True):
            _, _, _, loss = step(*_args(model))
        loss.backward()
    assert len(set(seen)) == 3, seen
    assert counter.frame_count == 1


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize(
    "name,shortcuts",
    [
        ("kernel_per_module", False),
        pytest.param("default", False, marks=pytest.mark.slow),  # a default-run sibling: the line above
        pytest.param("input_latents", False, marks=pytest.mark.slow),
        pytest.param("kernel_per_module", True, marks=pytest.mark.slow),
    ],
)
def test_compiled_losses_equal_eager(name, shortcuts):
    """``aot_eager`` (the same aten ops, the same random stream): the same logits, loss and
    gradients to float rounding, and the generator left in the same state. ``shortcuts``: the
    eager step takes the CPU's sparse sampler and explicit attention, the compiled one CUDA's
    forms (the same draws and formula: equal to float rounding too)."""
    eager_model = _model(cpu_shortcuts=shortcuts, **CONFIGS[name])
    compiled_model = copy.deepcopy(eager_model)
    step = compiled.compile_losses("aot_eager")
    out = {}
    for key, model, fn in (("eager", eager_model, objective_losses), ("compiled", compiled_model, step)):
        torch.manual_seed(3)
        logits, ce, reg, loss = fn(*_args(model))
        loss.backward()
        out[key] = (logits.detach(), ce.detach(), reg.detach(), _grads(model), torch.rand(()))
    _assert_same_step(out["compiled"], out["eager"])


def _assert_same_step(got, want):
    """``(logits, loss or ce, reg, grads, next uniform)`` of two steps equal to float rounding, and
    the same number of draws from the global generator (the next uniform)."""
    for g, w in zip(got[:3], want[:3]):
        torch.testing.assert_close(g, w)
    assert got[3].keys() == want[3].keys() and len(want[3]) > 0
    for n in want[3]:
        torch.testing.assert_close(got[3][n], want[3][n], msg=n)
    assert got[4] == want[4]


def test_compile_is_a_train_param():
    assert TrainConfig().compile is False and "compile" not in TrainConfig().to_dict()
    assert TrainConfig(compile="reduce-overhead").to_dict()["compile"] == "reduce-overhead"
    with pytest.raises(ValueError, match=r"train\.compile='fast': Input should be False, 'default', 'reduce-overhead'"):
        TrainConfig(compile="fast")
    assert "compile_matching" not in TrainConfig(compile="default").to_dict()
    with pytest.raises(ValueError, match=r"train\.compile_matching='after': Input should be 'before'"):
        TrainConfig(compile_matching="after")
    # "overlap" was removed (issue 48)
    with pytest.raises(ValueError, match=r"train\.compile_matching='overlap': Input should be 'before'"):
        TrainConfig(compile_matching="overlap")


@pytest.mark.parametrize(
    "matching,scope",
    [
        pytest.param("before", "forward", marks=pytest.mark.slow),
        # seconds each; the default run keeps the forward's equality test (test_compiled_losses_equal_eager),
        # CI's slow run the update's (test_the_compiled_update_equals_eager) and these fits through the loop
        pytest.param("before", "step", marks=pytest.mark.slow),
    ],
)
def test_a_compiled_fit_trains_as_the_eager_one(matching, scope):
    """Through the loop (matching in advance, the compiled forward and loss, the optimizer step
    eager, or with ``scope="step"`` compiled too): after 3 steps the same weights and
    losses as the eager fit, to float rounding."""
    from test_overfit import Quadrants
    from test_training import small_train

    results = {}
    dynamo.utils.counters.clear()
    for mode in (False, "aot_eager"):
        torch.manual_seed(0)
        model = build_model(make_tiny_config(variant="nac", num_classes=4, signature_fit_steps=20), cpu_shortcuts=False)
        kw = dict(compile=mode, compile_matching=matching, compile_scope=scope) if mode else {}
        cfg = small_train(epochs=1, batch_size=8, **kw)
        out = fit(model, Quadrants(24, 0), None, cfg, progress=False)
        results[mode] = (out["final"], {k: v.clone() for k, v in model.state_dict().items()})
    # the compiled fit: the forward and loss one graph, compiled once; scope step: the update's two
    assert dynamo.utils.counters["stats"]["unique_graphs"] == (3 if scope == "step" else 1)
    (fe, we), (fc, wc) = results[False], results["aot_eager"]
    assert fe.keys() == fc.keys()
    for k in fe:
        assert fc[k] == pytest.approx(fe[k], rel=1e-5, abs=1e-6), k
    for k in we:
        if scope == "step" and k in BATCHNORMED_BIASES:
            # its gradient is zero but for rounding (BatchNorm removes it); Adam normalises that
            # rounding into steps of about the LR, whose signs follow the last-ulp differences
            # of torch's capturable AdamW (test_the_compiled_update_equals_eager compares step by step)
            assert (wc[k] - we[k]).abs().max() <= 3 * 3e-3 * 1.01, k
            continue
        torch.testing.assert_close(wc[k], we[k], msg=k)


# the tiny tokenizer's convolutions feeding BatchNorm, and the running means their biases shift
BATCHNORMED_BIASES = {f"tokenizer.trunk.{i}.bias" for i in (0, 3, 6)} | {
    f"tokenizer.trunk.{i}.running_mean" for i in (1, 4, 7)
}


def test_what_cannot_be_compiled_is_refused():
    """A conditional design's ``P`` depends on the input (matched per sample inside the forward),
    and a model with its own objective is not the NAC objective: both named, with the fix."""
    from tiny_models import COND_TOKENIZER

    model = _model(variant="nac", generator="conditional", cond_tokenizer=COND_TOKENIZER, generator_regularizer=True)
    with pytest.raises(ValueError, match="generator_regularizer.*train.compile: false"):
        Objective(model).matching_in_advance()

    class OwnObjective(torch.nn.Linear):
        def training_loss(self, *a, **k):
            raise AssertionError("not reached")

    from test_overfit import Quadrants
    from test_training import small_train

    with pytest.raises(ValueError, match="defines its own: set false"):
        fit(OwnObjective(2, 4), Quadrants(8, 0), None, small_train(batch_size=8, compile="aot_eager"), progress=False)


# ---- train.compile_scope: step (the update compiled too: clip_and_step, torch's compiled optimizer) ----


def _optimizer(model, compiled_update=False, impl="default"):
    from nac.training.optim import decay_groups, make_adamw

    decay, no_decay = decay_groups(model, "baral_x")
    groups = [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}]
    return make_adamw(groups, lr=3e-3, impl=impl, compiled=compiled_update)


def _gradients(model, seed):
    """The gradients of one step of ``model`` (``objective_losses``, backward)."""
    torch.manual_seed(seed)
    loss = objective_losses(*_args(model, seed=seed))[-1]
    model.zero_grad(set_to_none=True)
    loss.backward()


@pytest.mark.slow  # ~10 s each (dynamo traces AdamW): CI's slow run; the default run stays under 5 minutes
@pytest.mark.parametrize("impl", ["default", "fused"])
@pytest.mark.parametrize("clip", [1.0, 0.0])
def test_the_compiled_update_equals_eager(clip, impl):
    """``clip_and_step`` compiled (``aot_eager``) against itself eager, over 3 steps whose LR the
    scheduler changes (the compiled optimizer's LR a tensor it fills: no recompilation after the
    first step): the same gradient norm, weights and AdamW moments to float rounding, each step
    from the same gradients and state. Its graphs: the clipping's and AdamW's; its breaks torch's
    own, none of the suite's code."""
    from torch.optim.lr_scheduler import LambdaLR

    from nac.training.optim import clip_and_step

    eager_model = _model(**CONFIGS["kernel_per_module"])
    step_model = copy.deepcopy(eager_model)
    eager_opt, step_opt = _optimizer(eager_model, impl=impl), _optimizer(step_model, True, impl=impl)
    assert all(torch.is_tensor(g["lr"]) for g in step_opt.param_groups)
    schedules = [LambdaLR(opt, lambda t: 1 / (1 + t)) for opt in (eager_opt, step_opt)]
    update = compiled.compile_update("aot_eager")
    dynamo.utils.counters.clear()
    for k in range(3):
        if k:
            for schedule in schedules:
                schedule.step()
        for model in (eager_model, step_model):
            _gradients(model, seed=5 + k)
        norm = clip_and_step(list(eager_model.parameters()), eager_opt, clip)
        with dynamo.config.patch(error_on_recompile=k > 0):
            norm2 = update(list(step_model.parameters()), step_opt, clip)
        assert float(step_opt.param_groups[0]["lr"]) == pytest.approx(eager_opt.param_groups[0]["lr"], rel=1e-6)
        torch.testing.assert_close(norm2, norm)
        with torch.no_grad():
            for (n, p), q in zip(eager_model.named_parameters(), step_model.parameters()):
                torch.testing.assert_close(q, p, msg=f"step {k}: {n}")
                if p in eager_opt.state:
                    for key in ("exp_avg", "exp_avg_sq"):
                        want = eager_opt.state[p][key]
                        torch.testing.assert_close(step_opt.state[q][key], want, msg=f"step {k}: {n} {key}")
                        step_opt.state[q][key].copy_(want)
                q.copy_(p)  # each step from the same weights (a bias before BatchNorm: see BATCHNORMED_BIASES)
    if impl == "fused":  # one kernel: no graph of AdamW's own to count
        return
    assert dynamo.utils.counters["stats"]["unique_graphs"] == 2
    # torch's own breaks only: the scheduler's wrapper around ``step`` (dynamo skips lr_scheduler.py,
    # then compiles the ``step`` it calls) and the graph_break() where the step's no-grad region starts
    breaks = dynamo.utils.counters["graph_break"]
    assert len(breaks) == 2 and all("lr_scheduler.py" in r or "graph_break()" in r for r in breaks), dict(breaks)


@pytest.mark.parametrize("name", ["default", "perceiver_io"])
def test_a_regionally_compiled_fit_trains_as_the_eager_one(name):
    """``compile_scope: regional`` (issue 51): each propagator compiled on its own, one graph for all
    of them (a NAC's propagators read their modulations by the same keys, ``Modulations.scope``; keyed
    by the ModFCs' full names they compiled one graph each), no graph break (``float(reg)`` of the
    host's constant 0 broke one before), and a 3-step fit under ``aot_eager`` equal to the eager fit
    to float rounding."""
    from test_overfit import Quadrants
    from test_training import small_train

    results = {}
    for mode in (False, "aot_eager"):
        dynamo.reset()
        dynamo.utils.counters.clear()
        torch.manual_seed(0)
        model = build_model(
            make_tiny_config(num_classes=4, signature_fit_steps=20, **CONFIGS[name]), cpu_shortcuts=False
        )
        cfg = small_train(epochs=1, batch_size=8, **(dict(compile=mode, compile_scope="regional") if mode else {}))
        out = fit(model, Quadrants(24, 0), None, cfg, progress=False)
        results[mode] = (out["final"], {k: v.clone() for k, v in model.state_dict().items()})
        if mode:
            regions = [n for n, m in model.named_modules() if getattr(m, "_compiled_call_impl", None) is not None]
            assert regions == [f"propagators.{i}" for i in range(len(model.propagators))], regions
            graphs = dynamo.utils.counters["stats"]["unique_graphs"]
            assert graphs == 1, graphs  # every propagator the same compiled code (Modulations.scope)
            assert not dynamo.utils.counters["graph_break"], dict(dynamo.utils.counters["graph_break"])
    (fe, we), (fc, wc) = results[False], results["aot_eager"]
    for k in fe:
        assert fc[k] == pytest.approx(fe[k], rel=1e-5, abs=1e-6), k
    for k in we:
        torch.testing.assert_close(wc[k], we[k], msg=k)


def test_the_compile_settings_are_checked():
    for kw, match in (
        (
            dict(compile_scope="graph"),
            r"train\.compile_scope='graph': Input should be 'forward', 'step' or 'regional'",
        ),
        (dict(compile_scope="step"), "set train.compile"),
        (dict(compile_scope="regional"), "set train.compile"),
    ):
        with pytest.raises(ValueError, match=match):
            TrainConfig(**kw)
    assert TrainConfig(compile="default", compile_scope="step").to_dict()["compile_scope"] == "step"
    assert "compile_scope" not in TrainConfig(compile="default").to_dict()


@pytest.mark.slow  # two short compiled fits (~20 s); CI's slow run
def test_a_compiled_update_run_resumes_as_the_uninterrupted_one(tmp_path):
    """``compile_scope: step`` keeps the LR as a tensor in the optimizer (``make_adamw(compiled=True)``):
    the checkpoint holds it and the scheduler's state, and a run interrupted after epoch 1 and resumed
    (a fresh process's optimizer, recompiled) logs exactly the uninterrupted run's history."""
    from interrupted_runs import interrupt_then_resume
    from test_overfit import Quadrants
    from test_training import small_train

    cfg = small_train(epochs=2, batch_size=8, compile="aot_eager", compile_scope="step")
    train, val = Quadrants(24, 0), Quadrants(8, 1)

    def make():
        return build_model(make_tiny_config(variant="nac", num_classes=4, signature_fit_steps=20), cpu_shortcuts=False)

    torch.manual_seed(0)
    full = fit(make(), train, val, cfg, checkpoint=tmp_path / "a.pt", progress=False)
    resumed = interrupt_then_resume(make, train, val, cfg, tmp_path / "b.pt")
    assert resumed.result["history"] == full["history"]
    assert all(isinstance(h["lr"], float) for h in full["history"])
