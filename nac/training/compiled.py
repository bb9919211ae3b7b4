"""``train.compile``: a training step's forward and loss under ``torch.compile`` as one graph
(issue 21, "one compiled step").

The step's only host work, the regularizer's Hungarian matching (numpy/scipy on a worker
thread), cannot be inside a graph, so it is done before the compiled region:
``NAC.matching_in_advance`` computes the step's ``P`` from the parameters (``P`` depends on
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
optimizer step, clipping, the finiteness checks and the EMA stay eager (foreach ops).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from nac.model import NAC
from nac.training.augment import soft_cross_entropy

COMPILE_MODES = (False, "default", "reduce-overhead", "aot_eager")
# ``train.compile_matching``: where the compiled step waits for the matching. ``before``: before
# the region, whose graph then holds the regularizer too (the whole forward one graph; the device
# idles while the host matches). ``overlap``: the region returns ``P`` (``objective_parts``), the
# host waits for the matching while the device runs it, and the regularizer's few ops
# (``loss_from_permutation``, per layer) run eagerly after it. The same loss and gradients.
COMPILE_MATCHINGS = ("before", "overlap")


def check_compile(value, matching: str = "before") -> None:
    """Refuse a ``train.compile`` value not in ``COMPILE_MODES`` or a ``train.compile_matching``
    not in ``COMPILE_MATCHINGS``."""
    if value is not False and value not in COMPILE_MODES[1:]:
        raise ValueError(f"train.compile={value!r}; valid choices: false, default, reduce-overhead, aot_eager")
    if matching not in COMPILE_MATCHINGS:
        raise ValueError(f"train.compile_matching={matching!r}; valid choices: {', '.join(COMPILE_MATCHINGS)}")


def objective_losses(wrapped, kw: dict, labels, targets, perms, label_smoothing: float, reg_weight: float, amp: bool):
    """One step's forward and loss: ``(logits [B, classes], ce, reg, loss)`` (scalars) of
    ``wrapped`` (``Objective``, or DDP around it) on the batch ``kw`` (``model_kwargs``), with
    hard ``labels [B]`` or soft ``targets [B, classes]`` (mixup/cutmix; else None), the
    regularizer at ``perms`` (``NAC.matching_in_advance``'s permutations on the device; None:
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
    step's ``{layer: P}`` (``NAC.logits_and_probabilities``) for ``overlapped_losses`` to finish."""
    with torch.autocast(labels.device.type, dtype=torch.bfloat16, enabled=amp):
        logits, Ps = wrapped(**kw, perms="later")
        if targets is not None:
            ce = soft_cross_entropy(logits.float(), targets)
        else:
            ce = F.cross_entropy(logits.float(), labels, label_smoothing=label_smoothing)
    return logits, ce, Ps


def overlapped_losses(
    parts, model: NAC, wrapped, kw: dict, labels, targets, pending: dict, label_smoothing, reg_weight, amp
):
    """``objective_losses`` with the matching ``pending`` (``start_matching``) awaited only after
    ``parts`` (``objective_parts``, compiled) is launched: ``(logits, ce, reg, loss)``, the same
    values; the regularizer at the permutations computed eagerly from the region's ``Ps``."""
    logits, ce, Ps = parts(wrapped, kw, labels, targets, label_smoothing, amp)
    reg = model.graph_regularizer(Ps=Ps, perms=finish_matching(pending, labels.device))
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


def start_matching(model) -> dict | None:
    """``model.matching_in_advance()`` for a NAC (``{layer: Future}``), else None."""
    return model.matching_in_advance() if isinstance(model, NAC) else None


def finish_matching(pending: dict | None, device) -> dict | None:
    """The permutations of ``start_matching`` on ``device`` (waits for the worker thread; the
    copies from pinned memory do not block), ``{layer: LongTensor [U_p]}``; None for None."""
    if pending is None:
        return None
    return {i: future.result().to(device, non_blocking=True) for i, future in pending.items()}
