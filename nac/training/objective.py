"""The training objective of every model, ``Objective``: one forward that returns the logits and
the graph regularizer from one circuit design. It is the one call a training loop takes, the
suite's (``nac.training.loop.train_step``) or a user's own::

    objective = Objective(model)
    logits, reg = objective(images)
    loss = F.cross_entropy(logits, labels) + 0.1 * reg

For a NAC it holds what the paper's model does not need and a fast step does, so that the model
(``nac.model.NAC``) stays the paper's: each propagator's ``P`` (eq. 2) computed once for the
executor and the regularizer; the regularizer's Hungarian matching started on its own worker thread
while the forward runs (``match_async``: ``P`` copied to pinned host memory without blocking,
the prior's target read from a host copy made once), so the step never waits on a device-to-host
copy; and, for a compiled step (``nac.training.compiled``), the matching done before the graph
(``matching_in_advance``), whose permutations then enter the graph as inputs (``perms``). The
model's own ``NAC.graph.regularizer`` is the plain form, matching synchronously: the same
permutations, the same loss and gradients (``tests/test_shared_link_probabilities.py``).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn as nn
import torch.nn.functional as F

from nac.model import NAC
from nac.regularizer import (
    layer_losses_from_permutations,
    loss_from_permutation,
    match_async,
    match_stacked_async,
    stacked_permutations,
)
from nac.training.augment import soft_cross_entropy


class Objective(nn.Module):
    """``forward(inputs, mask=None, cond=None, cond_mask=None, perms=None) -> (logits, reg)``:
    the logits ``[B, num_classes]`` and the graph regularizer (0-d, on the inputs' device) of one
    circuit design; what DDP wraps in distributed training.

    ``perms``: a NAC's permutations matched before the step (``matching_in_advance``, a compiled
    step's), or ``"later"``: ``(logits, Ps)`` returned, the regularizer left to the caller
    (``regularizer(None, Ps, perms=...)``: the CUDA-graphs step's second graph,
    ``nac.training.graphed``). A model with its own training objective (``training_loss``, a
    baseline trained by EM) is called with the step's extra keywords."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self._target_on_host = None  # (the prior's target tensor, its float64 host copy): host_target
        self._matcher: ThreadPoolExecutor | None = None  # this objective's matching thread: matcher

    def matcher(self) -> ThreadPoolExecutor:
        """The one worker thread this objective's matchings run on (started at the first)."""
        if self._matcher is None:
            self._matcher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nac-matching")
        return self._matcher

    def forward(self, inputs, mask=None, cond=None, cond_mask=None, perms=None, **own):
        model = self.model
        if own:  # a model with its own training objective: ``training_loss`` -> (logits, loss)
            kw = {
                k: v
                for k, v in (("inputs", inputs), ("mask", mask), ("cond", cond), ("cond_mask", cond_mask))
                if v is not None
            }
            return model.training_loss(kw, **own)
        design = model.design(cond, cond_mask)
        if isinstance(model, NAC):  # Perceiver IO too: its regularizer is the host's constant 0
            Ps = model.graph.kernel_probabilities(design)  # once, for the executor and the regularizer
            if perms == "later":  # (logits, Ps): the regularizer is the caller's
                return model(inputs, mask=mask, design=design, Ps=Ps), Ps
            pending = self.match_async(Ps) if perms is None else None
            logits = model(inputs, mask=mask, design=design, Ps=Ps)
            reg = self.regularizer(design, Ps, pending=pending, perms=perms)
        else:
            logits, reg = model(inputs, mask=mask, design=design), model.graph_regularizer(design)
        if reg.device != inputs.device:  # a host value: the constant 0 of a model without the regularizer
            # (the regularizer's ``torch.zeros(())``, the only host value without a gradient) made
            # on the device: no copy for the host to wait on (a blocking copy from the host synchronises
            # on CUDA) and no read of its value (``float(reg)`` broke a compiled graph); a
            # differentiable one is copied non-blocking
            reg = (
                reg.to(inputs.device, non_blocking=True)
                if reg.requires_grad
                else torch.zeros((), dtype=reg.dtype, device=inputs.device)
            )
        return logits, reg

    def regularizer(self, design, Ps: dict, pending: dict | None = None, perms: dict | None = None) -> torch.Tensor:
        """The NAC's graph regularizer of the design whose ``kernel_probabilities`` are ``Ps``, at the
        permutations already found: ``pending`` (``match_async``'s futures) or ``perms`` (``{layer:
        LongTensor [U_p]}`` on the device; no host work here: what a compiled step traces). With
        neither, or for a conditional design, ``NAC.graph.regularizer`` (matched here). The same loss
        either way; every layer's at once (the per-layer sum: ``tests/test_batched_kernels.py``)."""
        model = self.model
        if not self.matches() or (perms is None and pending is None):
            return model.graph.regularizer(design, Ps)
        P = next(iter(Ps.values()))
        found = [perms[i] if perms is not None else pending[i].result() for i in Ps]
        if len(Ps) == 1:
            return loss_from_permutation(P, model.prior_target, found[0], kind=model.config.regularizer)
        return layer_losses_from_permutations(
            torch.stack(list(Ps.values())),
            model.prior_target,
            stacked_permutations(found, P.device),
            model.config.regularizer,
        )

    def matches(self) -> bool:
        """Whether a step of this model matches ``P`` to the prior outside the model's own
        regularizer: a NAC with the regularizer and an unconditional design."""
        model = self.model
        return isinstance(model, NAC) and model.prior_target is not None and model.config.generator != "conditional"

    def host_target(self):
        """The prior's target as a float64 numpy array on the host, copied once per target tensor
        (a device move or a pruned model replaces the buffer, and the copy with it): the matching
        reads the constant target without a per-step device-to-host copy."""
        G = self.model.prior_target
        if self._target_on_host is None or self._target_on_host[0] is not G:
            self._target_on_host = (G, G.detach().to("cpu", torch.float64).numpy())
        return self._target_on_host[1]

    def match_async(self, Ps: dict | None) -> dict | None:
        """The regularizer's matchings of ``Ps`` (``kernel_probabilities``) started on a worker
        thread (``nac.regularizer.match_async``: ``P`` copied to pinned host memory without
        blocking, the target read from ``host_target``), ``{layer: Future}``; ``None`` where there
        is nothing to match here (no regularizer, no signatures, a conditional design)."""
        if Ps is None or not self.matches():
            return None
        G = self.host_target()
        return {i: match_async(P, G, self.model.config.matching, executor=self.matcher()) for i, P in Ps.items()}

    def probabilities_in_advance(self) -> torch.Tensor | None:
        """Every propagator's ``P`` the next training forward computes, stacked ``[L, U_p, U_p]``
        (``NAC.graph.layer_probabilities``), without gradient; ``None`` where a step matches nothing.
        ``P`` depends only on the parameters (the signatures and bandwidths, no noise and no random
        draw), so it is computed from the same tensors by the same ops: the same values, so the
        same permutations as the forward's own matching. A conditional design's ``P`` depends on
        the input: refused (``ValueError``)."""
        model = self.model
        if not isinstance(model, NAC) or model.prior_target is None:
            return None
        if model.config.generator == "conditional":
            raise ValueError(
                "train.compile: a conditional circuit generator with generator_regularizer matches each "
                "sample's P inside the forward, which cannot be compiled as one graph; set train.compile: false"
            )
        with torch.no_grad():
            return model.graph.layer_probabilities()

    def matching_in_advance(self, Ps: torch.Tensor | None = None) -> tuple | None:
        """The regularizer's matchings of the ``P`` the next training forward computes
        (``probabilities_in_advance``, or ``Ps``: those computed already, by the last compiled
        step), started now on the worker thread: ``(layers, Future)``, the Future's result every
        layer's permutation stacked (``match_stacked_async``: one copy each way); ``None`` where a
        step matches nothing. What a compiled step (``train.compile``) passes as ``perms``,
        keeping the host's numpy/scipy work out of the graph."""
        Ps = Ps if Ps is not None else self.probabilities_in_advance()
        if Ps is None:
            return None
        c = self.model.config
        layers = list(range(c.depth)) if c.kernel_per_module else [None]
        return layers, match_stacked_async(Ps, self.host_target(), c.matching, executor=self.matcher())


def objective_losses(wrapped, kw: dict, labels, targets, perms, label_smoothing: float, reg_weight: float, amp: bool):
    """One step's forward and loss: ``(logits [B, classes], ce, reg, loss)`` (scalars) of
    ``wrapped`` (``Objective``, or DDP around it) on the batch ``kw`` (``model_kwargs``), with
    hard ``labels [B]`` or soft ``targets [B, classes]`` (mixup/cutmix; else None), the
    regularizer at ``perms`` (``Objective.matching_in_advance``'s permutations on the device; None:
    matched inside, on the worker thread) and bf16 autocast when ``amp``. The eager step calls it
    as it is, a compiled one compiled (``nac.training.compiled.compile_losses``)."""
    with torch.autocast(labels.device.type, dtype=torch.bfloat16, enabled=amp):
        logits, reg = wrapped(**kw) if perms is None else wrapped(**kw, perms=perms)
        ce = cross_entropy(logits, labels, targets, label_smoothing)
        loss = ce + reg_weight * reg.float()
    return logits, ce, reg, loss


def cross_entropy(logits, labels, targets, label_smoothing: float) -> torch.Tensor:
    """The step's cross-entropy (float32) of ``logits``: against soft ``targets`` (mixup/cutmix)
    when given, else against ``labels`` with ``label_smoothing``. ``objective_losses``' and the
    CUDA-graphs step's first graph's (``nac.training.graphed``)."""
    if targets is not None:
        return soft_cross_entropy(logits.float(), targets)
    return F.cross_entropy(logits.float(), labels, label_smoothing=label_smoothing)
