"""``train.cuda_graphs`` (issue 51): the training step replayed as CUDA graphs equals the eager step.

On the CPU: the switch refuses in one line, and the graphed step's plumbing (static buffers, the
matching before graph 1, the permutations into graph 2, the two terms' gradients summed at the
parameters, the warm-up steps) with each capture replaced by running its function
(``GraphedStep(capture=False)``) gives the eager step's losses, gradients and weights to float
rounding. On a GPU (skipped elsewhere): the real capture, bf16, against the eager step; the same
file runs in the GPU window (``bench/gpu_window.py``, part ``graphs_equal``)."""

import pytest
import torch
from test_overfit import Quadrants
from test_training import small_train
from tiny_models import TINY_KERNEL, make_tiny_config

from nac import build_model
from nac.training import loop
from nac.training.distributed import World
from nac.training.graphed import GraphedStep, graphs_refusal
from nac.training.run import EpochState, build_run

CONFIGS = {
    "nac": dict(variant="nac"),  # the regularizer matches on the host: two graphs
    "kernel_per_module": dict(variant="nac", **TINY_KERNEL),  # a P per propagator: every layer matched
    "perceiver_io": dict(variant="perceiver_io"),  # nothing matched: one graph
    "noreg": dict(variant="nac", regularizer="none"),
}
STEPS = 6  # 2 eager warm-up steps, the capture, 3 replays after it


def _model(name: str, device="cpu"):
    torch.manual_seed(0)
    cfg = make_tiny_config(num_classes=4, signature_fit_steps=20, n_processor=12, depth=3, **CONFIGS[name])
    return build_model(cfg, cpu_shortcuts=False).to(device)


def _steps(name: str, graphed: str | None, device="cpu", steps=STEPS):
    """``steps`` training steps of ``name`` through ``loop.train_step``: ``graphed`` None (eager),
    ``"replay"`` (the stand-in) or ``"cuda"`` (``train.cuda_graphs: true``); per step the loss and
    every gradient, and the weights at the end."""
    model = _model(name, device)
    cfg = small_train(epochs=1, batch_size=4, cuda_graphs=graphed == "cuda", device=device.split(":")[0])
    run = build_run(model, Quadrants(4 * steps, 0), None, cfg, World(0, 1, torch.device(device)), None, "t", None, None)
    if graphed == "replay":
        run.graphed = GraphedStep(run, capture=False)
    now = EpochState.of(run)  # the epoch's metric sums, as fit makes them
    torch.manual_seed(1)
    losses, grads = [], []
    for i, batch in enumerate(run.loader):
        losses.append(float(loop.train_step(run, now, batch, 0, i).detach()))
        grads.append({n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None})
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return losses, grads, weights, run


@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_graphed_step_equals_eager_with_the_capture_replaced(name):
    """The stand-in runs each graph's function at replay: the two-graph split of the loss (graph 1
    the cross-entropy's backward, graph 2 the regularizer's at the permutations matched before) gives
    the eager step's losses, gradients and weights to float rounding on every step."""
    torch.set_num_threads(1)
    le, ge, we, _ = _steps(name, None)
    lg, gg, wg, run = _steps(name, "replay")
    assert run.graphed.captured_at == 2 and len(run.graphed.graphs) == (2 if run.graphed.matching else 1)
    assert run.graphed.matching == (name in ("nac", "kernel_per_module"))
    assert lg == pytest.approx(le, rel=1e-5, abs=1e-6)
    for a, b in zip(gg, ge):
        assert a.keys() == b.keys()
        for k in a:
            torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-6, msg=k)
    for k in we:
        if k in BATCHNORMED_BIASES:  # a zero gradient but for rounding, which Adam turns into steps of ~ the LR
            assert (wg[k] - we[k]).abs().max() <= 3 * 3e-3 * 1.01, k
            continue
        torch.testing.assert_close(wg[k], we[k], rtol=1e-4, atol=1e-6, msg=k)


# the tiny tokenizer's convolutions feeding BatchNorm, and the running means their biases shift
# (tests/test_compiled_step.py says why their weights differ beyond rounding)
BATCHNORMED_BIASES = {f"tokenizer.trunk.{i}.bias" for i in (0, 3, 6)} | {
    f"tokenizer.trunk.{i}.running_mean" for i in (1, 4, 7)
}


def test_the_switch_refuses_on_the_cpu():
    model = _model("nac")
    cfg = small_train(epochs=1, batch_size=4, cuda_graphs=True, device="cpu")
    with pytest.raises(
        ValueError, match=r"needs a CUDA device; this run's device is cpu: set train.cuda_graphs: false"
    ):
        loop.fit(model, Quadrants(8, 0), None, cfg, progress=False)


def test_what_cannot_be_graphed_is_refused():
    cuda = torch.device("cuda")
    nac = _model("nac")
    assert graphs_refusal(nac, cuda, False, False) is None
    assert "under DDP" in graphs_refusal(nac, cuda, True, False)
    assert "choose one" in graphs_refusal(nac, cuda, False, "default")

    class OwnObjective(torch.nn.Module):
        def training_loss(self, *a, **k):
            raise AssertionError

    assert "own objective" in graphs_refusal(OwnObjective(), cuda, False, False)
    torch.manual_seed(0)
    cond = build_model(
        make_tiny_config(
            variant="nac",
            generator="conditional",
            generator_regularizer=True,
            cond_tokenizer={"kind": "sequence", "vocab_size": 20, "dim": 16},
        )
    )
    assert "conditional circuit generator" in graphs_refusal(cond, cuda, False, False)


def test_a_changed_batch_shape_is_refused():
    _, _, _, run = _steps("perceiver_io", "replay", steps=3)
    batch = {"input": torch.zeros(2, 3, 32, 32, dtype=torch.uint8), "label": torch.zeros(2, dtype=torch.long)}
    with pytest.raises(ValueError, match="changed shape after the capture"):
        loop.train_step(run, EpochState.of(run), batch, 0, 3)


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")


def _cuda_steps(name: str, graphed: bool, amp: bool):
    """``_steps`` on the GPU with ``train.cuda_graphs: true``'s run (its capturable AdamW, the LR a
    device tensor) either replayed (``graphed``) or taken by the eager step on that same run: only
    the capture differs."""
    model = _model(name, "cuda")
    cfg = small_train(epochs=1, batch_size=4, cuda_graphs=True, device="cuda", amp=amp)
    world = World(0, 1, torch.device("cuda"))
    run = build_run(model, Quadrants(4 * STEPS, 0), None, cfg, world, None, "t", None, None)
    if not graphed:
        run.graphed = None
    now = EpochState.of(run)  # the epoch's metric sums, as fit makes them
    torch.manual_seed(1)
    losses, grads = [], []
    for i, batch in enumerate(run.loader):
        losses.append(float(loop.train_step(run, now, batch, 0, i).detach()))
        grads.append({n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None})
    return losses, grads, {k: v.detach().clone() for k, v in model.state_dict().items()}, run


def _flat(tensors: dict, keys) -> torch.Tensor:
    return torch.cat([tensors[k].detach().float().flatten() for k in keys])


@CUDA
@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_captured_step_equals_eager_on_the_gpu_fp32(name):
    """The real capture against the eager step of the same run, in float32 (``amp: false``): the
    forward's kernels and random draws are the eager step's; what differs is the two-graph split of
    the backward (the regularizer's gradient summed at the parameters, not at ``P``): per step the
    loss to 1e-5, every gradient to 1e-3 of its norm, and every weight's change over the 6 steps to
    1e-3 of the eager change (per parameter: cuDNN's convolution gradients are not bitwise
    repeatable, even eager against eager, and Adam turns an element's noise-sized gradient into a
    step of about the LR, so single elements are no measure)."""
    start = {k: v.detach().clone() for k, v in _model(name, "cuda").state_dict().items()}
    le, ge, we, _ = _cuda_steps(name, False, amp=False)
    lg, gg, wg, run = _cuda_steps(name, True, amp=False)
    assert run.graphed.captured_at == 2 and isinstance(run.graphed.graphs[0].graph, torch.cuda.CUDAGraph)
    assert lg == pytest.approx(le, rel=1e-5, abs=1e-6)
    for step, (a, b) in enumerate(zip(gg, ge)):
        assert a.keys() == b.keys()
        for k in a:
            if k not in BATCHNORMED_BIASES:
                assert float((a[k] - b[k]).norm()) <= 1e-3 * float(b[k].norm()) + 1e-7, (step, k)
    for k in we:
        if k in BATCHNORMED_BIASES or not we[k].is_floating_point():
            continue
        moved = float((we[k].float() - start[k].float()).norm())
        assert float((wg[k].float() - we[k].float()).norm()) <= 1e-3 * moved + 1e-7, k


@CUDA
@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_captured_step_equals_eager_on_the_gpu_bf16(name):
    """The same with bf16 autocast (the paper's setting): an ulp of a float32 weight can flip its
    bf16 cast, so single small parameters (a ModFC's gain, say) move by a few percent; compared as
    a whole: per step the loss within 1e-2 relative and all the gradients together within 2e-2 of
    their norm, and the weights' change over the 6 steps within 2e-2 of the eager change."""
    start = {k: v.detach().clone() for k, v in _model(name, "cuda").state_dict().items()}
    le, ge, we, _ = _cuda_steps(name, False, amp=True)
    lg, gg, wg, run = _cuda_steps(name, True, amp=True)
    assert run.graphed.captured_at == 2
    assert lg == pytest.approx(le, rel=1e-2, abs=1e-3)
    for step, (a, b) in enumerate(zip(gg, ge)):
        keys = sorted(k for k in b if k not in BATCHNORMED_BIASES)
        ga, gb = _flat(a, keys), _flat(b, keys)
        assert float((ga - gb).norm()) <= 2e-2 * float(gb.norm()), step
    keys = sorted(k for k in we if we[k].is_floating_point() and k not in BATCHNORMED_BIASES)
    moved = _flat(we, keys) - _flat(start, keys)
    assert float((_flat(wg, keys) - _flat(we, keys)).norm()) <= 2e-2 * float(moved.norm())


@CUDA
def test_a_graphed_fit_trains_as_the_eager_one_on_the_gpu():
    """Through ``fit`` (checks, sums, the epoch's end; the eager fit with its default AdamW): the
    same losses to bf16 rounding, accuracies within one image."""
    results = {}
    for graphs in (False, True):
        model = _model("nac", "cuda")
        cfg = small_train(epochs=2, batch_size=4, cuda_graphs=graphs, device="cuda")
        world = World(0, 1, torch.device("cuda"))
        out = loop.fit(model, Quadrants(24, 0), Quadrants(64, 1), cfg, world=world, progress=False)
        results[graphs] = out["final"]
    assert results[True].keys() == results[False].keys()
    for k, v in results[False].items():
        if "acc" in k:  # within one image of 24 (train) or 64 (validation)
            assert abs(results[True][k] - v) <= 100 / (24 if k.startswith("train") else 64) + 1e-6, k
        else:
            assert results[True][k] == pytest.approx(v, rel=2e-2, abs=1e-4), k


def test_the_converged_pieces_train_graphed_on_a_gpu_where_their_model_allows(monkeypatch, tmp_path):
    """``tools/run_converged.py --cuda-graphs``: asked on a GPU (the device kind is the GPU's name), a
    piece's track trains with ``train.cuda_graphs: true`` and its record says so; the Modular Network
    (its own objective) and any piece on the CPU do not; the piece's params hash is the eager one's."""
    import sys

    from nac.converged import jobs, pieces
    from nac.pipeline.params import compose

    sys.path.insert(0, str(pieces.Path(__file__).resolve().parents[1] / "tools"))
    import run_converged

    params = compose(["profile=converged_smoke"])
    nac0, mn0 = pieces.Piece("image", "nac-scale_free", 0), pieces.Piece("image", "modular_network", 0)
    assert jobs.graphed({"cuda_graphs": True}, nac0) and not jobs.graphed({"cuda_graphs": True}, mn0)
    assert not jobs.graphed({}, nac0)
    graphed = {**params, "image": {**params["image"], "train": {**params["image"]["train"], "cuda_graphs": True}}}
    assert pieces.params_part(graphed, nac0) == pieces.params_part(params, nac0)

    seen = {}

    def fake_jobs(fn, jobs_, **kw):
        seen["ctx"] = jobs_[0][2]
        return []

    monkeypatch.setattr(run_converged.piece_jobs, "device_of", lambda p: ("NVIDIA H200", "NVIDIA H200 (cuda:0)"))
    monkeypatch.setattr(run_converged, "prepare_data", lambda *a, **k: None)
    monkeypatch.setattr(run_converged, "source_commit", lambda: {"commit": "abc", "dirty": False})
    monkeypatch.setattr("nac.pipeline.pool.run_jobs", fake_jobs)
    argv = ["--profile", "converged_smoke", "--pieces", str(tmp_path / "p"), "--workdir", str(tmp_path / "w")]
    argv += ["--budget", "5", "--only", "image/nac-scale_free-0"]
    run_converged.main([*argv, "--cuda-graphs"])
    assert seen["ctx"]["cuda_graphs"] is True
    monkeypatch.setattr(run_converged.piece_jobs, "device_of", lambda p: ("CPU", "CPU (x86_64, 2 threads)"))
    run_converged.main([*argv, "--cuda-graphs"])
    assert seen["ctx"]["cuda_graphs"] is False
