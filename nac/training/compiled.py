"""``train.compile``: a training step's forward and loss (and with ``compile_scope: step`` its
update) under ``torch.compile`` (issue 21, "one compiled step"; issue 32, the same functions).

The step's only host work, the regularizer's Hungarian matching (numpy/scipy on a worker
thread), cannot be inside a graph, so it is done before the compiled region:
``Objective.matching_in_advance`` computes the step's ``P`` from the parameters (``P`` depends on
nothing else: no input, no random draw) and starts its matching on the worker thread while the
host prepares the batch; its permutations enter the compiled region as inputs (``perms``). The
region, ``objective_losses`` (design, ``P``, kernel samples, executor, cross-entropy and the
regularizer at the given permutations; its backward compiled with it), then has no graph break
on the code paths CUDA takes, and the kernel sampler's fixed-shape form (no ``nonzero``) keeps
it from recompiling when the number of links changes (``tests/test_compiled_step.py``).

What changes against the eager step: nothing with ``aot_eager`` (the same aten ops, the same
random stream: loss and gradients to float rounding, tested); with inductor (``default``,
``reduce-overhead``) random draws come from inductor's own generator, so kernel samples and
drop-path masks are equal in distribution, not in value, and fused kernels round differently.
The matching waits on the host before the region starts (eager runs it during the forward):
on a GPU the device idles for it (tens of ms at 256 modules).

``COMPILE_MODES``: ``false`` (eager, the default), ``"default"`` (inductor),
``"reduce-overhead"`` (inductor with CUDA graphs), ``"aot_eager"`` (traced and differentiated
by AOT autograd but run op by op: no code generation; what the CPU tests compile with).

The compiled step is the eager step's own functions compiled, nothing re-implemented:
``nac.training.objective.objective_losses`` (the forward and the loss; AOT autograd compiles its
backward with it) and, with ``train.compile_scope: step``, ``nac.training.optim.clip_and_step``
(the gradients' norm, clipping and ``optimizer.step()``: torch's compiled optimizer, its LR a
device tensor, ``make_adamw(..., compiled=True)``). ``compile_scope: forward`` (the default when
compiling) leaves the update eager (foreach ops). ``loop.train_step`` reads the same either way.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from nac.training.config import TrainConfig
from nac.training.objective import Objective, objective_losses
from nac.training.optim import clip_and_step


def check_compile(value, matching: str = "before", scope: str = "forward") -> None:
    """A compiled step's settings, checked as ``train``'s (``TrainConfig``: one place)."""
    TrainConfig(compile=value, compile_matching=matching, compile_scope=scope)


def compile_losses(mode):
    """``objective_losses`` compiled in ``mode`` (``COMPILE_MODES``; ``False``: itself)."""
    check_compile(mode)
    if mode is False:
        return objective_losses
    if mode == "aot_eager":
        return torch.compile(objective_losses, backend="aot_eager", dynamic=False)
    return torch.compile(objective_losses, mode=mode, dynamic=False)


def finish_matching(pending: tuple | None, device) -> dict | None:
    """The permutations of ``Objective.matching_in_advance`` on ``device``, ``{layer: LongTensor [U_p]}`` (waits
    for the worker thread; one copy of the stacked permutations from pinned memory, which does
    not block; each layer's a view of it); None for None."""
    if pending is None:
        return None
    layers, future = pending
    perms = future.result().to(device, non_blocking=True)
    return dict(zip(layers, perms.unbind(0)))


def compile_update(mode):
    """``nac.training.optim.clip_and_step`` (the gradients' norm, clipping and ``optimizer.step()``)
    compiled in ``mode`` (not False): ``train.compile_scope: step``. Torch's compiled optimizer:
    the clipping and AdamW's foreach update become graphs (two: torch breaks the graph where
    ``Optimizer.step`` enters its no-grad region), with the LR a device tensor the scheduler fills
    (``make_adamw(..., compiled=True)``): no recompilation as it changes."""
    check_compile(mode, scope="step")
    if mode == "aot_eager":
        return torch.compile(clip_and_step, backend="aot_eager", dynamic=False)
    return torch.compile(clip_and_step, mode=mode, dynamic=False)


def compile_regions(model: nn.Module, mode) -> list[str]:
    """``train.compile_scope: regional``: each repeated layer of ``model`` compiled on its own
    (``nn.Module.compile`` in place: its parameters and state_dict names unchanged), the step
    around them eager. The layers are the items of every ``nn.ModuleList`` (a NAC's propagators, a
    Neural Interpreter's scripts) and timm's ConvNeXt blocks (the paper tokenizer's stages), the
    outermost only; layers of one kind share their compiled code (a NAC's propagators read their
    ModFCs' modulations by the same keys, ``Modulations.scope``: one graph for all). What it buys: a
    compilation of seconds per kind of layer instead of one of the whole forward, whose first step
    did not end in 192 s on an H200 (issue 51); the regularizer's matching then runs where the eager
    step runs it (on its worker thread during the forward). Returns the names compiled."""
    check_compile(mode, scope="regional")
    kw = {"backend": "aot_eager"} if mode == "aot_eager" else {"mode": mode}
    kw["dynamic"] = False
    names: list[str] = []
    for name, m in model.named_modules():
        if any(name.startswith(n + ".") for n in names):
            continue  # inside a region already chosen
        if isinstance(m, nn.ModuleList):
            for i, layer in enumerate(m):
                layer.compile(**kw)
                names.append(f"{name}.{i}")
        elif type(m).__name__ == "ConvNeXtBlock":
            m.compile(**kw)
            names.append(name)
    return names


class CompiledStep:
    """A training step's compiled forms (``train.compile`` ``mode``, ``train.compile_scope``
    ``scope``; see the module's docstring): ``fn``, ``objective_losses`` compiled (the step calls it
    as it calls ``objective_losses``, with the permutations of the matching ``begin`` started:
    ``perms``); ``update``, ``clip_and_step`` compiled (``scope="step"``; else None: the eager one).

    ``loop.train_step`` calls ``begin`` before it prepares the batch (the matching then runs on the
    worker thread while the host does) and ``perms`` with the batch on the device."""

    def __init__(self, mode, scope: str = "forward", matching: str = "before"):
        check_compile(mode, matching, scope)
        self.mode = mode
        self.fn = compile_losses(mode)  # the forward and the loss (objective_losses)
        self.update = compile_update(mode) if scope == "step" else None  # clip_and_step
        self.pending: tuple | None = None  # this step's matching (begin)

    def begin(self, objective: Objective) -> None:
        """Start this step's matching on the objective's worker thread."""
        self.pending = objective.matching_in_advance()

    def perms(self, device) -> dict | None:
        """The permutations of the matching ``begin`` started, on ``device`` (waited for: the
        compiled region takes them as inputs); under ``reduce-overhead`` a new step begins."""
        pending, self.pending = self.pending, None
        if self.mode == "reduce-overhead":  # a new step: the CUDA graphs' outputs may be reused
            torch.compiler.cudagraph_mark_step_begin()
        return finish_matching(pending, device)
