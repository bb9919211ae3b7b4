"""The plain (reference) forms of the kernel's speed work, kept here rather than as switches in
the model (issue 24, item 4): what ``tests/test_speed_equivalence.py`` and
``tests/test_speed_sync.py`` prove the fast forms equal to, and what ``bench/bench_paper.py``
times as "NAC, plain forms".

* ``plain_log_normalized_kernel``: eq. 3's ``log K_hat`` as ``log(max(K_hat, 1e-30))`` (no
  ``-inf`` on cut links; ``nac.circuits.kernel.log_normalized_kernel`` is the fast form);
* the kernel drawn by ``sample_kernel`` itself at every layer (``RelaxedBernoulli``), not by
  ``KernelSampler``;
* attention by ``F.scaled_dot_product_attention`` (CUDA's form) on every device, not
  ``explicit_attention``;
* each propagator's kernel drawn and its ``log K_hat`` computed by its own layer
  (``per_layer_samplers``), not every layer's at once (``CircuitGraph._layer_samplers``, CUDA's path).

The first two reach the model through its public kernel type: ``PlainSampler`` draws a
``PlainKernel``, a ``nac.circuits.kernel.Kernel`` whose ``log_normalized`` is the plain form.
``use_reference_kernel(model)`` switches one model to all four, giving these forms in place of
its circuit graph's public kernel draws ``model.graph.kernel_sampler`` and
``model.graph.kernel_samplers`` (attributes of that graph, so another model in the same process
keeps the fast forms; ``copy.deepcopy`` of the model binds them to the copy's graph);
``per_layer_kernels(model)`` to the last only.
"""

from __future__ import annotations

import types

import torch

from nac.circuits.attention import SKMDPA
from nac.circuits.kernel import _LOG_FLOOR, Kernel, sample_kernel


def plain_log_normalized_kernel(K: torch.Tensor, delta: float = 1e-6) -> torch.Tensor:
    """``log(max(K / (delta + sum_j K), 1e-30))``, ``[..., U, V]``: cut links get -69.1, not -inf."""
    K = K.float()
    K_hat = K / (delta + K.sum(dim=-1, keepdim=True))
    return torch.log(K_hat.clamp_min(_LOG_FLOOR))


class PlainKernel(Kernel):
    """A kernel whose ``log K_hat`` is ``plain_log_normalized_kernel``."""

    def log_normalized(self, delta: float = 1e-6, *, cpu_shortcuts: bool = True) -> torch.Tensor:
        return plain_log_normalized_kernel(self.dense(), delta)


class PlainSampler:
    """``sample_kernel(P, tau, B, mode)`` per draw: a ``RelaxedBernoulli`` built and sampled at
    ``[B, U, V]`` every layer (what ``nac.circuits.kernel.KernelSampler`` replaces), as a
    ``PlainKernel``."""

    def __init__(self, P: torch.Tensor, tau: float, mode: str):
        self.P, self.tau, self.mode = P, tau, mode

    def __call__(self, batch_size: int | None = None) -> PlainKernel | None:
        K = sample_kernel(self.P, self.tau, batch_size=batch_size, mode=self.mode)
        return None if K is None else PlainKernel(K)


def _plain_sampler(self, P, readout: bool = False, eval_kernel=None):
    return None if P is None else PlainSampler(P, self.config.tau, self.kernel_mode(readout, eval_kernel))


def per_layer_samplers(self, design, Ps=None, eval_kernel=None):
    """``CircuitGraph.kernel_samplers`` as it was before every layer's kernel was drawn at once: one sampler
    per propagator (one ``P``'s sampler ``depth`` times with a shared bandwidth), each drawing
    ``[B, U, V]`` when its layer runs; the layer computes its own ``log K_hat``."""
    c = self.config
    if design.signatures is None:
        return [None] * c.depth, None
    Ps, P_out = self.executor_probabilities(design, Ps)  # (with input latents: [latents; processors])
    samplers = [self.kernel_sampler(P, eval_kernel=eval_kernel) for P in Ps.values()]
    samplers = samplers if c.kernel_per_module else samplers * c.depth
    return samplers, self.kernel_sampler(P_out, readout=True, eval_kernel=eval_kernel)


def per_layer_kernels(model):
    """Switch ``model`` (a NAC) to ``per_layer_samplers``, in place; returns it."""
    model.graph.kernel_samplers = types.MethodType(per_layer_samplers, model.graph)
    return model


def use_reference_kernel(model):
    """Switch ``model`` (a NAC) to the plain forms above, in place; returns it."""
    model.graph.kernel_sampler = types.MethodType(_plain_sampler, model.graph)
    per_layer_kernels(model)
    for m in model.modules():
        if isinstance(m, SKMDPA):  # its CPU shortcut off: SDPA (its bias is the kernel's, plain)
            m.cpu_shortcuts = False
    return model
