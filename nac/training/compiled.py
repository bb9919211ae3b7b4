"""``train.compile``: a training step's forward and loss under ``torch.compile`` as one graph
(issue 21, "one compiled step").

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
by AOT autograd but run op by op: no code generation; what the CPU tests compile with). The
optimizer step and clipping stay eager (foreach ops) unless ``train.compile_scope: step``.

``train.compile_scope``: ``forward`` (the region above; backward, clipping and AdamW eager) or
``step`` (``whole_step``: the region, its gradients by ``torch.autograd.grad`` traced in the same
graph (dynamo's ``trace_autograd_ops``), the clipping and AdamW's update as one graph with no
break: the whole training step). AdamW's update there is torch's own functional form
(``torch.optim.adam.adam``: foreach, capturable, decoupled weight decay) on the optimizer's own
state tensors, the LR a device tensor filled from the scheduler each step (no recompilation as
it changes): the eager ``optimizer.step``'s values to float rounding (tested), because
``Optimizer.step`` itself breaks the graph (torch marks it so, for its no-grad epilogue). The
finiteness checks and the EMA stay eager (a few foreach ops).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.optim.adam import adam as functional_adam

from nac.rules import compile_rules
from nac.training.augment import soft_cross_entropy
from nac.training.config import COMPILE_MATCHINGS, COMPILE_MODES, COMPILE_SCOPES
from nac.training.objective import Objective


def check_compile(value, matching: str = "before", scope: str = "forward", adamw: str = "default") -> None:
    """``nac.rules.compile_rules`` on a compiled step's settings, with ``train``'s choices."""
    compile_rules(
        value, matching, scope, adamw, modes=COMPILE_MODES, matchings=COMPILE_MATCHINGS, scopes=COMPILE_SCOPES
    )


def objective_losses(wrapped, kw: dict, labels, targets, perms, label_smoothing: float, reg_weight: float, amp: bool):
    """One step's forward and loss: ``(logits [B, classes], ce, reg, loss)`` (scalars) of
    ``wrapped`` (``Objective``, or DDP around it) on the batch ``kw`` (``model_kwargs``), with
    hard ``labels [B]`` or soft ``targets [B, classes]`` (mixup/cutmix; else None), the
    regularizer at ``perms`` (``Objective.matching_in_advance``'s permutations on the device; None:
    matched inside, on the worker thread) and bf16 autocast when ``amp``. The eager step calls it
    as it is, a compiled one through ``compile_losses``."""
    with torch.autocast(labels.device.type, dtype=torch.bfloat16, enabled=amp):
        logits, reg = wrapped(**kw) if perms is None else wrapped(**kw, perms=perms)
        if targets is not None:
            ce = soft_cross_entropy(logits.float(), targets)
        else:
            ce = F.cross_entropy(logits.float(), labels, label_smoothing=label_smoothing)
        loss = ce + reg_weight * reg.float()
    return logits, ce, reg, loss


def objective_parts(wrapped, kw: dict, labels, targets, label_smoothing: float, amp: bool):
    """``objective_losses`` of a NAC less its regularizer: ``(logits, ce, Ps)``, ``Ps`` the
    step's ``{layer: P}`` (``Objective(..., perms="later")``) for ``overlapped_losses`` to finish."""
    with torch.autocast(labels.device.type, dtype=torch.bfloat16, enabled=amp):
        logits, Ps = wrapped(**kw, perms="later")
        if targets is not None:
            ce = soft_cross_entropy(logits.float(), targets)
        else:
            ce = F.cross_entropy(logits.float(), labels, label_smoothing=label_smoothing)
    return logits, ce, Ps


def overlapped_losses(
    parts, objective: Objective, wrapped, kw: dict, labels, targets, pending: dict, label_smoothing, reg_weight, amp
):
    """``objective_losses`` with the matching ``pending`` (``Objective.matching_in_advance``) awaited only after
    ``parts`` (``objective_parts``, compiled) is launched: ``(logits, ce, reg, loss)``, the same
    values; the regularizer at the permutations computed eagerly from the region's ``Ps``."""
    logits, ce, Ps = parts(wrapped, kw, labels, targets, label_smoothing, amp)
    reg = objective.regularizer(None, Ps, perms=finish_matching(pending, labels.device))
    return logits, ce, reg, ce + reg_weight * reg.float()


def compile_losses(mode, fn=objective_losses):
    """``fn`` (``objective_losses`` or ``objective_parts``) compiled in ``mode``
    (``COMPILE_MODES``; ``False``: itself)."""
    check_compile(mode)
    if mode is False:
        return fn
    if mode == "aot_eager":
        return torch.compile(fn, backend="aot_eager", dynamic=False)
    return torch.compile(fn, mode=mode, dynamic=False)


def finish_matching(pending: tuple | None, device) -> dict | None:
    """The permutations of ``Objective.matching_in_advance`` on ``device``, ``{layer: LongTensor [U_p]}`` (waits
    for the worker thread; one copy of the stacked permutations from pinned memory, which does
    not block; each layer's a view of it); None for None."""
    if pending is None:
        return None
    layers, future = pending
    perms = future.result().to(device, non_blocking=True)
    return dict(zip(layers, perms.unbind(0)))


def adamw_groups(optimizer: torch.optim.AdamW) -> list[dict]:
    """What ``whole_step`` updates, per param group of ``optimizer``: its parameters, their AdamW
    state (created as ``optimizer.step`` creates it at its first call, in capturable's layout:
    ``step`` a float32 scalar on the parameter's device, zero moments; a resumed state kept, its
    step counts moved to the parameters' device) and the group's constants. Plain lists, so the
    compiled step guards on none of the optimizer's mutable fields (its ``lr``: ``step_lrs``)."""
    groups = []
    for group in optimizer.param_groups:
        if group.get("amsgrad") or group.get("maximize"):
            raise ValueError("train.compile_scope=step implements AdamW without amsgrad or maximize")
        for p in group["params"]:
            st = optimizer.state[p]
            if not st:
                st["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            elif st["step"].device != p.device:
                st["step"] = st["step"].to(p.device, torch.float32)
        states = [optimizer.state[p] for p in group["params"]]
        groups.append(
            {
                "params": list(group["params"]),
                "exp_avgs": [s["exp_avg"] for s in states],
                "exp_avg_sqs": [s["exp_avg_sq"] for s in states],
                "steps": [s["step"] for s in states],
                "betas": tuple(group["betas"]),
                "weight_decay": group["weight_decay"],
                "eps": group["eps"],
            }
        )
    return groups


def step_lrs(optimizer: torch.optim.AdamW, lrs: torch.Tensor | None, device) -> torch.Tensor:
    """Each group's LR (the scheduler's, a float) in one device tensor ``[groups]``, filled in place
    (no host sync; ``lrs``: the last step's tensor, None at the first)."""
    values = [float(g["lr"]) for g in optimizer.param_groups]
    if lrs is None:
        return torch.tensor(values, dtype=torch.float32, device=device)
    for i, v in enumerate(values):
        lrs[i].fill_(v)
    return lrs


def adamw_update(groups: list[dict], grads: list, lrs: torch.Tensor) -> None:
    """``optimizer.step()`` with ``grads`` (one per parameter of ``groups``, ``adamw_groups``, in
    order; None: the parameter got no gradient and is skipped, as eager skips a ``.grad`` of
    None): torch's functional AdamW (foreach, capturable) on the optimizer's own state tensors."""
    i = 0
    for gi, group in enumerate(groups):
        n = len(group["params"])
        keep = [k for k in range(n) if grads[i + k] is not None]
        if keep:
            functional_adam(
                [group["params"][k] for k in keep],
                [grads[i + k] for k in keep],
                [group["exp_avgs"][k] for k in keep],
                [group["exp_avg_sqs"][k] for k in keep],
                [],
                [group["steps"][k] for k in keep],
                foreach=True,
                capturable=True,
                decoupled_weight_decay=True,
                amsgrad=False,
                beta1=group["betas"][0],
                beta2=group["betas"][1],
                lr=lrs[gi],
                weight_decay=group["weight_decay"],
                eps=group["eps"],
                maximize=False,
            )
        i += n


def whole_step(wrapped, groups, lrs, kw: dict, labels, targets, perms, label_smoothing, reg_weight, amp, grad_clip):
    """One training step (``train.compile_scope: step``): ``objective_losses``, the gradients of
    every optimized parameter (``groups``: ``adamw_groups``), their norm (clipped to
    ``grad_clip`` as ``clip_grad_norm_`` clips) and AdamW's update (``adamw_update``, LRs
    ``lrs``), then the next step's ``P`` from the updated parameters (``probabilities_in_advance``,
    for a NAC that matches; else None), so that the host starts the next matching as soon as the
    step returns instead of computing ``P`` eagerly before the next step. Returns ``(logits, ce,
    reg, loss, grad_norm, next_P)``, detached. The eager step's values to float rounding
    (``aot_eager``, tested)."""
    logits, ce, reg, loss = objective_losses(wrapped, kw, labels, targets, perms, label_smoothing, reg_weight, amp)
    params = [p for group in groups for p in group["params"]]
    grads = list(torch.autograd.grad(loss, params, allow_unused=True))
    with torch.no_grad():
        present = [g for g in grads if g is not None]
        grad_norm = torch.nn.utils.get_total_norm(present)  # as the eager step's clip_grad_norm_
        if grad_clip:  # clip_grads_with_norm_'s scale, on the gradients themselves (not .grad)
            scaled = iter(torch._foreach_mul(present, torch.clamp(grad_clip / (grad_norm + 1e-6), max=1.0)))
            grads = [None if g is None else next(scaled) for g in grads]
        adamw_update(groups, grads, lrs)
        next_P = wrapped.probabilities_in_advance() if isinstance(wrapped, Objective) else None
    return logits.detach(), ce.detach(), reg.detach(), loss.detach(), grad_norm, next_P


def compile_step(mode):
    """``whole_step`` compiled in ``mode`` (not False), its gradients traced into the graph."""
    check_compile(mode, scope="step")
    fn = (
        torch.compile(whole_step, backend="aot_eager", dynamic=False)
        if mode == "aot_eager"
        else torch.compile(whole_step, mode=mode, dynamic=False)
    )

    def run(*args):
        with torch._dynamo.config.patch(trace_autograd_ops=True):
            return fn(*args)

    return run


class CompiledStep:
    """A training step's compiled form (``train.compile`` ``mode``, ``train.compile_scope`` ``scope``,
    ``train.compile_matching`` ``matching``; see the module's docstring), with what it carries from
    one step to the next: the matching started ahead, the whole step's LRs and AdamW state.

    ``loop.train_step`` calls ``begin`` before it prepares the batch (the matching then runs on the
    worker thread while the host does) and ``__call__`` with the batch on the device."""

    def __init__(self, mode, scope: str = "forward", matching: str = "before"):
        check_compile(mode, matching, scope)
        self.mode, self.whole = mode, scope == "step"
        self.losses = compile_losses(mode if not self.whole else False)  # the forward and the loss
        self.parts = compile_losses(mode, objective_parts) if matching == "overlap" else None
        self.step = compile_step(mode) if self.whole else None  # the whole step, AdamW included
        self.lrs: torch.Tensor | None = None  # the whole step's LRs on the device (step_lrs)
        self.adamw: list | None = None  # the whole step's parameters and AdamW state (adamw_groups)
        self.ahead: tuple | None = None  # the next step's matching, started as the last whole step returned
        self.pending: tuple | None = None  # this step's matching (begin)

    def begin(self, objective: Objective) -> None:
        """Start this step's matching (or take the one started as the last whole step returned)."""
        self.pending, self.ahead = self.ahead or objective.matching_in_advance(), None

    def __call__(
        self, run, kw: dict, labels, targets, checks
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """``(logits, ce, reg, loss, grad_norm)``: ``grad_norm`` None but for the whole step, which
        has also taken the optimizer step. ``run``: ``nac.training.run.Run``; ``checks``: its ``StepChecks``."""
        cfg, device, pending = run.cfg, run.world.device, self.pending
        args = (cfg.label_smoothing, cfg.reg_weight, run.use_amp)
        self.pending = None
        with checks.guard(run.state):
            if self.mode == "reduce-overhead":  # a new step: the CUDA graphs' outputs may be reused
                torch.compiler.cudagraph_mark_step_begin()
            if self.step is not None:
                if self.adamw is None:  # the first step (of this process): AdamW's state, fresh or resumed
                    self.adamw = adamw_groups(run.optimizer)
                self.lrs = step_lrs(run.optimizer, self.lrs, device)
                perms = finish_matching(pending, device)
                logits, ce, reg, loss, grad_norm, next_P = self.step(
                    run.wrapped, self.adamw, self.lrs, kw, labels, targets, perms, *args, cfg.grad_clip
                )
                if next_P is not None:  # the next step's matching runs while the host goes on
                    self.ahead = run.objective.matching_in_advance(next_P)
                return logits, ce, reg, loss, grad_norm
            if pending is not None and self.parts is not None:  # the matching awaited while the device runs the forward
                logits, ce, reg, loss = overlapped_losses(
                    self.parts, run.objective, run.wrapped, kw, labels, targets, pending, *args
                )
            else:
                logits, ce, reg, loss = self.losses(
                    run.wrapped, kw, labels, targets, finish_matching(pending, device), *args
                )
        return logits, ce, reg, loss, None
