"""``train.cuda_graphs``: the training step replayed as CUDA graphs, no inductor (issue 51).

A NAC step at the paper's batch is bound by the host's kernel launches (docs/gpu.md): replaying a
captured CUDA graph launches the step's thousands of kernels in one call. What is captured is the
eager step's own functions on static buffers, nothing re-implemented:

* **one graph** for a model that matches nothing on the host (Perceiver IO, a NAC without the
  regularizer, the frozen graph, ModFC, the Neural Interpreter): ``zero_grad`` (the gradients kept
  where they are, zeroed in place), ``objective_losses``, ``loss.backward()`` and
  ``clip_and_step`` (clipping and AdamW, ``capturable`` with its LR a device tensor that the LR
  schedule fills in place before each replay);
* **two graphs** for a NAC whose regularizer matches ``P`` to its prior on the host (the Hungarian
  step cannot be in a graph). Before the step, ``Objective.matching_in_advance`` computes the
  step's ``P`` from the parameters (it depends on nothing else) and starts its matching on the
  worker thread; graph 1 (``objective_parts``: the forward and the cross-entropy, then its backward)
  replays while the host matches; the permutations are copied into a static buffer and graph 2
  replays the regularizer at them (``Objective.regularizer`` on ``P`` recomputed from the same
  parameters by the same ops: the same values), its backward (accumulated into the same gradients)
  and ``clip_and_step``. The eager step differentiates ``ce + reg_weight * reg`` at once; here the
  two terms' gradients are summed at the parameters: equal to float rounding.

The first ``WARMUP_STEPS`` steps of a run are the eager step (AdamW's state is made there; torch's
recipe runs them on a side stream), then the next step is captured and every later step replays.
Random draws (kernel samples, drop-path) come from torch's default CUDA generator, whose graph-safe
state gives a replay the offsets the eager step would use. The finiteness checks, the EMA and the
epoch's sums run eagerly on the graphs' static outputs. A run whose batch shape changed would need a
new capture: the loader drops the last partial batch, and a changed shape is refused.

On the CPU the switch refuses in one line (``graphs_refusal``). ``GraphedStep(..., capture=False)``
runs the same plumbing with each capture replaced by running its function at replay (``Replay``):
what the CPU tests use to prove the two-graph step equal to the eager one
(``tests/test_cuda_graphs.py``); the capture itself is proven on a GPU by the same file's CUDA test.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable

import torch

from nac.model import NAC
from nac.training.objective import cross_entropy, objective_losses
from nac.training.optim import clip_and_step

WARMUP_STEPS = 2  # eager steps before the capture (AdamW's state made, cuBLAS and the allocator warm)


def graphs_refusal(model, device: torch.device, distributed: bool, compile_mode) -> str | None:
    """Why ``train.cuda_graphs: true`` cannot run this training, one line, or None."""
    if device.type != "cuda":
        return (
            f"train.cuda_graphs: true replays the training step as CUDA graphs and needs a CUDA device; "
            f"this run's device is {device.type}: set train.cuda_graphs: false"
        )
    if distributed:
        return "train.cuda_graphs: true is for one process; under DDP set train.cuda_graphs: false"
    if compile_mode is not False:
        return f"train.cuda_graphs: true and train.compile={compile_mode!r} are two ways to one end: choose one"
    if hasattr(model, "training_loss"):
        return (
            f"train.cuda_graphs: true captures the NAC objective's step; {type(model).__name__} trains with its "
            f"own objective (training_loss): set train.cuda_graphs: false for it"
        )
    if isinstance(model, NAC) and model.prior_target is not None and model.config.generator == "conditional":
        return (
            "train.cuda_graphs: true: a conditional circuit generator with the regularizer matches each sample's P "
            "inside the forward, which cannot be captured; set train.cuda_graphs: false"
        )
    return None


def objective_parts(wrapped, kw: dict, labels, targets, label_smoothing: float, amp: bool):
    """Graph 1's forward: ``objective_losses`` of a NAC less its regularizer, ``(logits, ce, Ps)``,
    ``Ps`` the step's ``{layer: P}`` (``Objective(..., perms="later")``) for graph 2's regularizer."""
    with torch.autocast(labels.device.type, dtype=torch.bfloat16, enabled=amp):
        logits, Ps = wrapped(**kw, perms="later")
        ce = cross_entropy(logits, labels, targets, label_smoothing)
    return logits, ce, Ps


class Replay:
    """A stand-in for ``torch.cuda.CUDAGraph`` that captures nothing: ``capture(fn)`` keeps
    ``fn``, ``replay()`` runs it and keeps its outputs (the CPU tests' form of the same step)."""

    def __init__(self):
        self.fn: Callable | None = None
        self.outputs = None

    def capture(self, fn: Callable):
        self.fn = fn
        return None  # nothing ran: the outputs exist after the first replay

    def replay(self):
        self.outputs = self.fn()
        return self.outputs


class CudaGraph:
    """``fn`` captured once in a ``torch.cuda.CUDAGraph`` (its own memory pool; ``thread_local``
    capture, so the matching thread's CUDA calls are not the capture's concern); ``replay()``
    relaunches it and returns the outputs captured (rewritten in place by each replay)."""

    def __init__(self):
        self.graph = torch.cuda.CUDAGraph()
        self.outputs = None

    def capture(self, fn: Callable):
        with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
            self.outputs = fn()
        return self.outputs

    def replay(self):
        self.graph.replay()
        return self.outputs


class GraphedStep:
    """The step of ``train.cuda_graphs`` (see the module's docstring) for one ``Run``.

    ``loop.train_step`` takes the first ``warmup`` steps eagerly ``with warming()``, then every
    step by ``step(run, batch, epoch, step)`` (the captured graphs), which returns what the eager
    step computes, ``(logits, ce, reg, loss, grad_norm, labels)``. ``capture=False``: ``Replay``
    stand-ins (the CPU)."""

    def __init__(self, run, *, capture: bool = True, warmup: int = WARMUP_STEPS):
        self.capture_graphs, self.warmup_left = capture, warmup
        objective = run.objective
        self.matching = objective.matches()
        c = getattr(run.model, "config", None)
        self.layers = (list(range(c.depth)) if c.kernel_per_module else [None]) if self.matching else []
        self.graphs: list | None = None  # [whole] or [forward and cross-entropy, regularizer and update]
        self.shapes: dict | None = None  # the static inputs' shapes, checked at each step
        self.static: dict = {}
        self.captured_at: int | None = None  # the step the graphs were captured at

    # -- the step ---------------------------------------------------------------------------
    @property
    def warm(self) -> bool:
        """The warm-up's eager steps are taken: every later step is ``step`` (captured, replayed)."""
        return self.warmup_left <= 0

    @contextmanager
    def warming(self):
        """One of the first ``warmup`` steps, the eager step, taken inside: on a side stream
        (torch's recipe for the steps before a capture); on the CPU as it is."""
        self.warmup_left -= 1
        if not self.capture_graphs or not torch.cuda.is_available():
            yield
            return
        side, main = torch.cuda.Stream(), torch.cuda.current_stream()
        side.wait_stream(main)
        with torch.cuda.stream(side):
            yield
        main.wait_stream(side)

    def step(self, run, batch: dict, epoch: int, step: int):
        """A step after the warm-up: captured at the first, replayed; returns what the eager step
        computes, ``(logits, ce, reg, loss, grad_norm, labels)``."""
        from nac.training.loop import batch_inputs  # (the loop imports this module's class through Run)

        pending = run.objective.matching_in_advance() if self.matching else None  # P, then the host matches
        kw, labels, targets = batch_inputs(run, batch, epoch, step)
        if self.graphs is None:
            if pending is not None:  # the worker idle while this thread captures
                pending[1].result()
            self._capture(run, kw, labels, targets, step)
        self._copy_in(kw, labels, targets)
        with run.checks.guard(run.state):
            first = self.graphs[0].replay()  # while the host matches (two graphs)
            if not self.matching:
                logits, ce, reg, loss, grad_norm = first
            else:
                logits, ce = first
                layers, future = pending
                self.static["perms"].copy_(future.result(), non_blocking=True)  # pinned: no host wait
                reg, loss, grad_norm = self.graphs[1].replay()
        return logits, ce, reg, loss, grad_norm, self.static["labels"]

    # -- the capture ---------------------------------------------------------------------------
    def _copy_in(self, kw: dict, labels, targets) -> None:
        shapes = {k: tuple(v.shape) for k, v in self._inputs(kw, labels, targets).items()}
        if shapes != self.shapes:
            raise ValueError(
                f"train.cuda_graphs: the batch changed shape after the capture ({self.shapes} -> {shapes}); "
                f"a captured step replays one shape: keep the batch size fixed (the loader drops the last partial "
                f"batch) or set train.cuda_graphs: false"
            )
        for k, v in self._inputs(kw, labels, targets).items():
            self.static[k].copy_(v, non_blocking=True)

    @staticmethod
    def _inputs(kw: dict, labels, targets) -> dict:
        out = {f"kw.{k}": v for k, v in kw.items() if isinstance(v, torch.Tensor)}
        out["labels"] = labels
        if targets is not None:
            out["targets"] = targets
        return out

    def _capture(self, run, kw: dict, labels, targets, step: int) -> None:
        inputs = self._inputs(kw, labels, targets)
        if any(not isinstance(v, torch.Tensor) for k, v in kw.items() if v is not None):
            raise ValueError(f"train.cuda_graphs: the batch holds non-tensor inputs {sorted(kw)}; set it false")
        self.static = {k: v.clone() for k, v in inputs.items()}
        self.shapes = {k: tuple(v.shape) for k, v in inputs.items()}
        if self.matching:
            n = run.model.prior_target.shape[0]
            self.static["perms"] = torch.zeros(len(self.layers), n, dtype=torch.long, device=labels.device)
        self.captured_at = step
        make = CudaGraph if self.capture_graphs else Replay
        if self.capture_graphs:
            torch.cuda.synchronize()
        if not self.matching:
            self.graphs = [make()]
            self.graphs[0].capture(lambda: self._whole(run))
        else:
            self.graphs = [make(), make()]
            self.graphs[0].capture(lambda: self._forward(run))
            self.graphs[1].capture(lambda: self._regularizer_and_update(run))

    # -- what is captured: the eager step's own functions on the static buffers ------------------
    def _kw(self) -> dict:
        return {k[3:]: v for k, v in self.static.items() if k.startswith("kw.")}

    def _whole(self, run):
        cfg = run.cfg
        run.optimizer.zero_grad(set_to_none=False)  # the gradients stay where the graph writes them
        logits, ce, reg, loss = objective_losses(
            run.wrapped,
            self._kw(),
            self.static["labels"],
            self.static.get("targets"),
            None,
            cfg.label_smoothing,
            cfg.reg_weight,
            run.use_amp,
        )
        loss.backward()
        grad_norm = clip_and_step(run.params, run.optimizer, cfg.grad_clip)
        return logits, ce, reg, loss, grad_norm

    def _forward(self, run):
        cfg = run.cfg
        run.optimizer.zero_grad(set_to_none=False)
        logits, ce, _ = objective_parts(
            run.wrapped, self._kw(), self.static["labels"], self.static.get("targets"), cfg.label_smoothing, run.use_amp
        )
        ce.backward()
        self._ce = ce
        return logits, ce

    def _regularizer_and_update(self, run):
        cfg, model, device = run.cfg, run.model, self.static["labels"].device
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=run.use_amp):
            Ps = dict(zip(self.layers, model.graph.layer_probabilities().unbind(0)))  # the forward's P, recomputed
            reg = run.objective.regularizer(None, Ps, perms=dict(zip(self.layers, self.static["perms"].unbind(0))))
            loss = self._ce.detach() + cfg.reg_weight * reg.float()
        loss.backward()  # the regularizer's gradients, added to the cross-entropy's
        grad_norm = clip_and_step(run.params, run.optimizer, cfg.grad_clip)
        return reg, loss, grad_norm
