"""The optimizer and its schedule: AdamW over two parameter groups (weight decay by ``decays``)
and the linear warm-up + cosine LR schedule (a torch ``LambdaLR``, its state in the checkpoint).

AdamW's implementation is ``train.adamw`` (``make_adamw``'s ``impl``): ``default`` is PyTorch's
default, a Python loop over the parameters on the CPU (the reference; ``foreach`` is no faster on
the CPU and bitwise the same) and its foreach form on CUDA, which reads each parameter's step
count on the host (a host tensor: no sync). ``fused`` (opt-in) is one kernel over all parameters,
a cheaper optimizer step (``bench/bench_ops.py --adamw fused``: bench/results/ops.md), but its
arithmetic rounds differently: measured on the CPU (torch 2.15, 3,105 weights), after 10 steps 12
weights differ by 1 ulp, after 100 by up to 8 ulps, after 1,000 by up to 24 (the last-ulp
differences random-walk; ``tests/test_loop_sync.py::test_fused_adamw_differs_from_the_default_in_the_last_ulp``),
so a trained model's numbers change beyond float rounding: off by default. ``fused`` is made
``capturable`` on CUDA (step counts on the device, what a CUDA graph needs).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
from torch.optim.lr_scheduler import LambdaLR

from nac.training.config import ADAMW_IMPLS, DECAY_FILTERS


def make_adamw(param_groups, lr: float, impl: str | None = "default", *, compiled: bool = False) -> torch.optim.AdamW:
    """``torch.optim.AdamW(param_groups, lr=lr)`` in implementation ``impl`` (``ADAMW_IMPLS``;
    None is ``default``; see the module's docstring).

    ``compiled`` (``train.compile_scope: step``: ``clip_and_step`` under ``torch.compile``): the
    LR a tensor on the parameters' device and the optimizer ``capturable`` (its step counts
    there too), torch's recipe for a compiled optimizer step: the scheduler fills the LR tensor in
    place, so the compiled step neither recompiles as the LR changes nor reads the host. The same
    update to float rounding (``tests/test_compiled_step.py``)."""
    impl = "default" if impl is None else impl
    if impl not in ADAMW_IMPLS:
        raise ValueError(f"unknown AdamW impl {impl!r}; valid choices: {', '.join(ADAMW_IMPLS)}")
    kw = {"foreach": True} if impl == "foreach" else {"fused": True} if impl == "fused" else {}
    if impl == "fused" or compiled:
        groups = list(param_groups)
        params = [p for g in groups for p in (g["params"] if isinstance(g, dict) else [g])]
        device = params[0].device if params else torch.device("cpu")
        kw["capturable"] = compiled or device.type == "cuda"
        param_groups = groups
        if compiled:
            lr = torch.tensor(float(lr), device=device)
    return torch.optim.AdamW(param_groups, lr=lr, **kw)


def clip_gradients(params: list[torch.Tensor], grad_clip: float) -> torch.Tensor:
    """The total norm of the gradients ``loss.backward()`` filled (before clipping; on the device),
    clipped to ``grad_clip`` by ``clip_grad_norm_`` (0: only measured)."""
    if grad_clip:
        return nn.utils.clip_grad_norm_(params, grad_clip)
    return nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])  # the same norm, nothing rescaled


def clip_and_step(params: list[torch.Tensor], optimizer: torch.optim.Optimizer, grad_clip: float) -> torch.Tensor:
    """A training step's update once ``loss.backward()`` has filled the gradients:
    ``clip_gradients`` and ``optimizer.step()``; returns the norm. The eager step
    (``loop.train_step``) runs these two lines itself; ``train.compile_scope: step`` runs this
    function under ``torch.compile`` (``nac.training.compiled.compile_update``), a CUDA-graphs step
    captures it (``nac.training.graphed``)."""
    grad_norm = clip_gradients(params, grad_clip)
    optimizer.step()
    return grad_norm


def warmup_cosine(optimizer: torch.optim.Optimizer, total: int, warmup: int, peak: float, floor: float) -> LambdaLR:
    """The LR schedule as torch's ``LambdaLR`` over the optimizer's groups (their lr is ``peak``):
    at scheduler step ``t`` (the optimizer step about to be taken), a linear warm-up
    ``peak * (t + 1) / warmup`` for ``t < warmup``, then cosine decay from ``peak`` to ``floor`` at
    ``t = total``. Equal to the formula to float rounding (nac/testing/reference_forms.py ``lr_at``).
    A closed form: SequentialLR(LinearLR, CosineAnnealingLR) updates recursively (its rounding
    drifts with the step count) and has no form for ``warmup = 0`` or ``total = warmup``."""
    span = max(1, total - warmup)

    def factor(t: int) -> float:
        if t < warmup:
            return (t + 1) / warmup
        return (floor + 0.5 * (peak - floor) * (1.0 + math.cos(math.pi * min(1.0, (t - warmup) / span)))) / peak

    return LambdaLR(optimizer, factor)


def decays(name: str, p: torch.Tensor, decay_filter: str = "baral_x") -> bool:
    """Whether AdamW's weight decay applies to parameter ``name``. The authors' two filters
    (``no_weight_decay_filter``) exempt names ending in ``bias`` or ``signatures`` and the
    tokenizer's positional grid (their name ends in ``grid``; our positional embeddings' in ``pos``)
    and, ``baral_x`` (INET-110E-NC-CHONKER-BARAL-X), every parameter with ``dim() <= 1`` (norms,
    LayerScale, the 0-d ModFC gains and bandwidths), ``tiny`` (TINY-INET-NC-X), ``dim() == 1`` (so the
    0-d gains and bandwidths decay); codes (2-d) decay under both. ``ours`` (nac v1): no decay for
    ``dim() < 2`` or a name containing ``signatures`` or ``codes``. ``all`` (m2mKD, which sets no
    filter): every parameter."""
    if decay_filter == "all":
        return True
    if decay_filter in ("baral_x", "tiny"):
        named = name.endswith(("bias", "signatures", "grid")) or name.rsplit(".", 1)[-1] == "pos"
        small = p.dim() <= 1 if decay_filter == "baral_x" else p.dim() == 1
        return not (small or named)
    if decay_filter == "ours":
        return not (p.dim() < 2 or "signatures" in name or "codes" in name)
    raise ValueError(f"unknown decay_filter {decay_filter!r}; valid choices: {', '.join(DECAY_FILTERS)}")


def decay_groups(model: nn.Module, decay_filter: str = "baral_x") -> tuple[list, list]:
    """The trainable parameters split into ``(decayed, not decayed)`` by ``decays``."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (decay if decays(name, p, decay_filter) else no_decay).append(p)
    return decay, no_decay
