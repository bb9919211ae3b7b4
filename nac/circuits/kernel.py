"""The link-probability kernel of SKMDPA (paper eq. 2).

``P_ij = exp(-d(s_i, s_j) / eps)`` with ``d = 1 - cos``: modules whose signatures point the same
way are likely to communicate. ``sample_kernel`` draws ``K ~ Concrete(P, tau)`` (the relaxed
Bernoulli, reparameterised) independently per example in training; at evaluation the kernel is
``P`` itself (``expectation``, the authors' default), ``P > 0.5`` (``threshold``) or a sample.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.distributions import RelaxedBernoulli

KERNEL_MODES = ("expectation", "threshold", "sample")


def link_probabilities(s_recv: torch.Tensor, s_send: torch.Tensor | None = None, bandwidth: float | torch.Tensor = 1.0) -> torch.Tensor:
    """Eq. 2: ``P_ij = exp(-(1 - cos(s_i, s_j)) / eps)``.

    s_recv: ``[..., U, d_sig]`` receiver signatures; s_send: ``[..., V, d_sig]`` sender
    signatures (defaults to ``s_recv``). Returns ``[..., U, V]`` in (0, 1].
    """
    s_send = s_recv if s_send is None else s_send
    with torch.autocast(s_recv.device.type, enabled=False):  # fp32 even under bf16 autocast
        cos = F.normalize(s_recv.float(), dim=-1) @ F.normalize(s_send.float(), dim=-1).transpose(-1, -2)
        cos = cos.clamp(-1.0, 1.0)  # rounding can push cos(s, s) past 1, and P past 1
        return torch.exp(-(1.0 - cos) / bandwidth)


def sample_kernel(P: torch.Tensor, tau: float, batch_size: int | None = None, mode: str = "sample") -> torch.Tensor:
    """Draw the kernel ``K`` from link probabilities ``P`` (eq. 2).

    P: ``[U, V]`` (shared design) or ``[B, U, V]`` (per-sample design). With ``mode="sample"``
    and a shared ``P``, ``batch_size`` independent samples are drawn, giving ``[B, U, V]``.
    ``expectation`` returns ``P``; ``threshold`` returns ``(P > 0.5)`` as floats.
    """
    if mode == "expectation":
        return P
    if mode == "threshold":
        return (P > 0.5).to(P.dtype)
    if mode != "sample":
        raise ValueError(f"unknown kernel mode {mode!r}; valid choices: {', '.join(KERNEL_MODES)}")
    if P.dim() == 2 and batch_size is not None:
        P = P.expand(batch_size, *P.shape)
    # RelaxedBernoulli clamps probabilities away from {0, 1}, so P_ii = 1 stays finite.
    return RelaxedBernoulli(torch.as_tensor(tau, dtype=P.dtype, device=P.device), probs=P).rsample()
