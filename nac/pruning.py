"""Module dropping (paper section 4.1, "Effect of Dropping Modules"; Figures 5a, 5b, 15).

Processor modules are ranked by connectivity and the least connected are dropped first. The
result is a genuinely smaller model: the dropped modules' codes, signatures (or Perceiver IO
latents) are removed, so attention and ModFFN run over fewer modules; nothing is masked.

Connectivity:
- models with signatures (``frozen_graph``, ``nac``): the expected degree of each module in the
  learned graph, ``deg_i = sum_{j != i} P_ij`` (eq. 2); no data needed.
- the control: a random order (``random_connectivity``), which any ranking must beat for the
  ranking to be credited.
- dense models (``perceiver_io``, ``modfc``) have no graph; the analogous ranking is by the
  attention a module *receives*: ``W_{i<-j}`` averaged over a calibration batch, heads and
  receivers, summed over the propagator layers and the read-out (the expected in-degree of the
  attention graph actually used). It needs a batch of inputs.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import torch

from nac.model import NAC


def expected_degree(model: NAC) -> torch.Tensor:
    """``[U_p]`` expected degree from the link probabilities (self-links excluded)."""
    with torch.no_grad():
        P = model.graph.link_probabilities()
        return P.sum(dim=-1) - P.diagonal()


@torch.no_grad()
def attention_received(model: NAC, inputs, mask=None) -> torch.Tensor:
    """``[U_p]`` mean attention each processor module receives as a sender, over a batch (with
    input latents, the processors are the last ``U_p`` senders; the latents are not ranked)."""
    U = model.config.n_processor
    received = torch.zeros(U)
    attns = [layer.attn for layer in model.propagators] + [model.read_out.attn]

    def hook(module, args, kwargs, _out):
        received.add_(module.weights(*args, **kwargs).float().mean(dim=(0, 1)).mean(dim=0)[-U:].cpu())

    handles = [a.register_forward_hook(hook, with_kwargs=True) for a in attns]
    was_training = model.training
    try:
        model.eval()
        model(inputs, mask=mask)
    finally:
        model.train(was_training)
        for h in handles:
            h.remove()
    return received


def module_connectivity(model: NAC, inputs=None, mask=None) -> torch.Tensor:
    """Connectivity score per processor module (higher = better connected), ``[U_p]``."""
    if model.config.generator == "conditional":
        raise ValueError("a conditional NAC generates a graph per sample; drop modules from an unconditional NAC")
    if model.config.uses_kernel:
        return expected_degree(model)
    if inputs is None:
        raise ValueError(
            f"variant {model.config.variant!r} has a dense graph: ranking its modules by the attention "
            "they receive needs a calibration batch; pass inputs="
        )
    return attention_received(model, inputs, mask)


def random_connectivity(n: int, seed: int) -> torch.Tensor:
    """A random ranking ``[n]`` (a seeded permutation of ``0..n-1``) for the random-order control:
    passed as ``connectivity`` to ``drop_modules`` it drops modules in a random order."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(int(seed))).float()


def drop_modules(model: NAC, k: int, connectivity: torch.Tensor | None = None, inputs=None, mask=None) -> NAC:
    """Return a copy of ``model`` without its ``k`` least connected processor modules.

    ``connectivity`` (``[U_p]``) may be given to reuse one ranking across several ``k``.
    """
    U = model.config.n_processor
    if not 0 <= k < U:
        raise ValueError(f"can drop between 0 and {U - 1} of {U} processor modules, asked for {k}")
    if connectivity is None:
        connectivity = module_connectivity(model, inputs, mask)
    order = torch.argsort(connectivity, descending=True, stable=True)
    keep = order[: U - k].sort().values
    smaller = copy.deepcopy(model)
    smaller.generator.keep_processors(keep)
    smaller.config = replace(model.config, n_processor=U - k)
    if smaller.prior_target is not None:  # the training target no longer applies; keep its matching rows
        smaller.prior_target = smaller.prior_target[keep][:, keep]
    return smaller
