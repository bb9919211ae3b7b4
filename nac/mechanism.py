"""Mechanism numbers of a trained circuit: how sparse its learned graph is, how close it is to
each graph prior's target, and how much it moved from its initialisation.

These are first-class outputs (the training metrics carry them at initialisation and at the end;
the report tabulates them beside Table 1 and draws them in Figure 3), because a NAC whose graph
is dense, or the same whatever its prior, is not measuring what the paper claims.

* ``sparsity``: fraction of off-diagonal processor links with ``P = 0`` exactly (truncated).
* ``mean_p``: mean off-diagonal ``P``.
* ``distance[prior]``: the graph-structure regularizer's MSE (``nac.regularizer``) between ``P``
  and that prior's target at this size, for every prior, with each prior's parameters
  (``nac.graphs.PRIOR_DEFAULTS``). A measurement, not the training loss, so it does not follow the
  training switches: it takes the best permutation found (``matching="search"``; the authors' one
  Hungarian step can miss even an exact copy) and targets with ``G_ii = 1`` (``diagonal="one"``,
  what the kernel always gives: the formula's diagonal would add ``sum_t (1 - G_tt)^2 / n^2``, a
  different constant per prior, ~0.03 for scale-free at 32 modules, that no graph can remove).
"""

from __future__ import annotations

from typing import Any

import torch

from nac.graphs import PRIOR_DEFAULTS, PRIORS, prior_target
from nac.model import NAC
from nac.regularizer import graph_structure_loss


def has_graph(model: NAC) -> bool:
    """An unconditional circuit with signatures: one learned graph to measure."""
    c = model.config
    return getattr(c, "uses_kernel", False) and c.generator == "unconditional"


@torch.no_grad()
def processor_graph(model: NAC) -> torch.Tensor:
    """``P`` among processor modules, ``[U_p, U_p]`` float64 on the CPU (no sampling)."""
    return model.link_probabilities().detach().to("cpu", torch.float64)


def graph_numbers(P: torch.Tensor) -> dict[str, Any]:
    """Sparsity, mean link probability and the distance to every prior's target for ``P``."""
    n = P.shape[0]
    off = ~torch.eye(n, dtype=torch.bool)
    distance = {}
    for prior in PRIORS:
        try:
            G = prior_target(prior, n, diagonal="one", **PRIOR_DEFAULTS[prior])
        except ValueError:  # e.g. a block prior whose block count does not divide n
            continue
        distance[prior] = float(graph_structure_loss(P, torch.as_tensor(G, dtype=P.dtype), matching="search"))
    return {"sparsity": float((P[off] == 0).double().mean()), "mean_p": float(P[off].mean()), "distance": distance}


def mechanism_numbers(model: NAC, P_init: torch.Tensor | None = None) -> dict[str, Any]:
    """``graph_numbers`` of the model's current graph, its bandwidth, and (given the initial
    ``P``) the mean absolute change of off-diagonal ``P`` since initialisation."""
    P = processor_graph(model)
    out = graph_numbers(P)
    out["bandwidth"] = model.graph_bandwidth()
    if P_init is not None:
        off = ~torch.eye(P.shape[0], dtype=torch.bool)
        out["p_change"] = float((P - P_init).abs()[off].mean())
        out["links_changed"] = float(((P > 0) != (P_init > 0))[off].double().mean())
    return out
