"""Mechanism numbers of a trained circuit: how sparse its learned graph is, how close it is to
each graph prior's target, and how much it moved from its initialisation.

These are first-class outputs (the training metrics carry them at initialisation and at the end;
the report tabulates them beside Table 1 and draws them in Figure 3), because a NAC whose graph
is dense, or the same whatever its prior, is not measuring what the paper claims.

Measures defined for a truncated kernel (where ``P = 0`` exactly) and an untruncated one (where
``P = exp(-d / bandwidth) > 0`` everywhere) alike; all over the off-diagonal processor links:

* ``sparsity``: fraction of links with ``P = 0`` exactly (only a truncated kernel has any).
* ``mean_p``: mean ``P``: the expected fraction of links a Concrete / Bernoulli sample keeps.
* ``expected_links``: the expected number of sampled links, ``sum P`` over the ``n (n - 1)``
  directed links.
* ``below_threshold``: fraction of links with ``P < 0.5`` (the authors' ``threshold`` evaluation
  cuts there; Figure 3 and 6 draw the graph at that cut).
* ``distance_empty``: the MSE to the empty graph, ``mean P^2``.
* ``distance[prior]``: the graph-structure regularizer's MSE (``nac.regularizer``) between ``P``
  and that prior's target at this size, for every prior, with each prior's parameters
  (``nac.graphs.PRIOR_DEFAULTS``). A measurement, not the training loss, so it does not follow the
  training switches: it takes the best permutation found (``matching="search"``; the authors' one
  Hungarian step can miss even an exact copy) and targets with ``G_ii = 1`` (``diagonal="one"``,
  what the kernel always gives: the formula's diagonal would add ``sum_t (1 - G_tt)^2 / n^2``, a
  different constant per prior, ~0.03 for scale-free at 32 modules, that no graph can remove).
* ``structure[prior]``: the Pearson correlation of the matched ``P`` (the same permutation) with
  the target over the links: the *shape* of the graph, whatever its density. The empty, the
  complete and every uniform graph score 0 (no variance); a random graph scores above 0 only by
  what the matching finds in noise (the random-signature control at initialisation measures that).
  A small MSE can come from density alone (the empty graph is close to a sparse target); a
  positive structure cannot.
* ``degree_distance[prior]``: the 1-Wasserstein distance between the expected degree fractions
  (``sum_j P_ij / (n - 1)``) of ``P`` and of the target: the degree distribution, which a hub
  prior (scale-free) makes heavy-tailed. The empty and the complete graph fail it for every prior;
  a uniform graph of the target's density fails it for scale-free only (block priors have equal
  expected degrees), which is why ``structure`` is the shape measure.

``degenerate_numbers`` gives the same measures for the trivial graphs that could pass a claim
without a learned structure (empty, complete, uniform at a given density): the claims judge a
learned graph against them (``nac/report/claims/mechanism.py``).
"""

from __future__ import annotations

from typing import Any

import torch

from nac.graphs import PRIOR_DEFAULTS, PRIORS, prior_target
from nac.model import NAC
from nac.regularizer import loss_from_permutation, match_permutation

THRESHOLD = 0.5  # the authors' evaluation cut (kernel mode "threshold"); Figures 3 and 6 draw at it
DEGENERATE = ("empty", "complete", "uniform")


def has_graph(model: NAC) -> bool:
    """An unconditional circuit with signatures: one learned graph to measure."""
    c = model.config
    return getattr(c, "uses_kernel", False) and c.generator == "unconditional"


@torch.no_grad()
def processor_graph(model: NAC) -> torch.Tensor:
    """``P`` among processor modules, ``[U_p, U_p]`` float64 on the CPU (no sampling)."""
    return model.graph.link_probabilities().detach().to("cpu", torch.float64)


def _correlation(a: torch.Tensor, b: torch.Tensor) -> float:
    """Pearson correlation of two flat tensors; 0 where either has no variance (a constant graph
    has no shape to follow)."""
    a, b = a - a.mean(), b - b.mean()
    den = float(a.norm() * b.norm())
    return float((a * b).sum()) / den if den > 1e-12 else 0.0


def _degree_fractions(M: torch.Tensor, off: torch.Tensor) -> torch.Tensor:
    n = M.shape[0]
    return torch.sort((M * off).sum(1) / (n - 1)).values


def graph_numbers(P: torch.Tensor) -> dict[str, Any]:
    """The measures of the module docstring for ``P`` (``[n, n]``, float64 on the CPU)."""
    n = P.shape[0]
    off = ~torch.eye(n, dtype=torch.bool)
    links = P[off]
    constant = bool(links.max() - links.min() == 0)  # empty, complete, uniform: every permutation is alike
    distance, structure, degree = {}, {}, {}
    for prior in PRIORS:
        try:
            G = torch.as_tensor(prior_target(prior, n, diagonal="one", **PRIOR_DEFAULTS[prior]), dtype=P.dtype)
        except ValueError:  # e.g. a block prior whose block count does not divide n
            continue
        perm = torch.arange(n) if constant else match_permutation(P, G, "search")
        Pm = P[perm][:, perm]
        distance[prior] = float(loss_from_permutation(P, G, perm, "mse"))
        structure[prior] = _correlation(Pm[off], G[off])
        degree[prior] = float((_degree_fractions(P, off) - _degree_fractions(G, off)).abs().mean())
    return {
        "sparsity": float((links == 0).double().mean()),
        "mean_p": float(links.mean()),
        "expected_links": float(links.sum()),
        "below_threshold": float((links < THRESHOLD).double().mean()),
        "distance_empty": float((links**2).mean()),
        "distance": distance,
        "structure": structure,
        "degree_distance": degree,
    }


def degenerate_graph(kind: str, n: int, mean_p: float = 0.0) -> torch.Tensor:
    """A trivial ``[n, n]`` graph (``P_ii = 1``, what the kernel gives): ``empty`` (no link),
    ``complete`` (every link), ``uniform`` (every link at ``mean_p``: a given density, no shape)."""
    value = {"empty": 0.0, "complete": 1.0, "uniform": float(mean_p)}.get(kind)
    if value is None:
        raise ValueError(f"unknown degenerate graph {kind!r}; valid choices: {', '.join(DEGENERATE)}")
    P = torch.full((n, n), value, dtype=torch.float64)
    P.fill_diagonal_(1.0)
    return P


def degenerate_numbers(n: int, mean_p: float) -> dict[str, dict[str, Any]]:
    """``graph_numbers`` of each degenerate graph at size ``n`` (uniform at density ``mean_p``)."""
    return {kind: graph_numbers(degenerate_graph(kind, n, mean_p)) for kind in DEGENERATE}


def mechanism_numbers(model: NAC, P_init: torch.Tensor | None = None) -> dict[str, Any]:
    """``graph_numbers`` of the model's current graph, its bandwidth, and (given the initial
    ``P``) the mean absolute change of off-diagonal ``P`` since initialisation."""
    P = processor_graph(model)
    out = graph_numbers(P)
    out["bandwidth"] = model.graph.bandwidth()
    if P_init is not None:
        off = ~torch.eye(P.shape[0], dtype=torch.bool)
        out["p_change"] = float((P - P_init).abs()[off].mean())
        out["links_changed"] = float(((P > 0) != (P_init > 0))[off].double().mean())
    return out
