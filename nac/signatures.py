"""Signatures whose kernel reproduces a graph: the authors' preset fit (orthogonal init, hinge loss
against the truncation distance, Adam) used to initialise NAC and frozen-graph signatures from a
graph sampled from a prior (``nac.graphs``), plus random signatures and the agreement measure.
Split from ``nac.graphs`` so that code that only needs the priors does not import the kernel."""
from __future__ import annotations

import math

import networkx as nx
import numpy as np
import torch

from nac.circuits.kernel import cosine_distance
from nac.graphs import sample_prior_graph


def link_threshold(truncation: float | None, bandwidth: float) -> float:
    """The cosine distance that separates linked from unlinked pairs: the truncation distance
    when the kernel is truncated (``P = 0`` beyond it), else ``bandwidth * ln 2`` (``P > 0.5``)."""
    return float(truncation) if truncation is not None else float(bandwidth) * math.log(2.0)


def graph_agreement(signatures: torch.Tensor, adjacency: np.ndarray, threshold: float) -> float:
    """Fraction of off-diagonal pairs on the right side of ``threshold``: linked pairs closer
    (cosine distance ``<= threshold``), unlinked pairs farther."""
    d = cosine_distance(signatures.detach()).numpy()
    A = np.asarray(adjacency) != 0
    A = A | A.T
    off = ~np.eye(len(A), dtype=bool)
    return float(((d <= threshold) == A)[off].mean())


def fit_signatures_to_graph(
    adjacency: np.ndarray,
    d_sig: int,
    truncation: float | None = None,
    bandwidth: float = 1.0,
    steps: int = 1000,
    lr: float = 1e-3,
    seed: int = 0,
    margin: float = 0.1,
) -> torch.Tensor:
    """Fit signatures ``[n, d_sig]`` whose kernel reproduces a graph (the authors' preset fit).

    ``docs/reference.md`` ("Signatures"): ``nn.init.orthogonal_`` signatures, then ``steps``
    Adam steps at ``lr`` on a hinge loss so that linked pairs end closer than the link threshold
    ``t`` (``link_threshold``: the truncation distance, or ``bandwidth * ln 2`` untruncated) and
    unlinked pairs farther: linked pairs pay ``relu(d_ij - (t - margin))``, unlinked pairs
    ``relu((t + margin) - d_ij)``. The two hinge means are added (linked and unlinked pairs weigh
    equally, since prior graphs are sparse); the diagonal is ignored (``P_ii = 1`` always).
    Stops early once every pair clears its margin.

    Our choice (not in the authors' code): the fitted rows are rescaled to unit norm. The kernel
    depends only on directions, but Adam's steps are absolute, so the norm sets how fast a
    signature can turn during training; unit norm gives every initialisation (prior-fitted or
    random, ``random_signatures``) the same angular learning rate.

    CPU, seeded generator: deterministic per ``seed``. Runs with ``torch.set_num_threads(1)``
    (restored on exit): the loop is thousands of tiny ops, and on a busy 2-core machine two
    intra-op threads made it 10-20x slower. adjacency: ``[n, n]``, nonzero off-diagonal entries
    are links (symmetrised). Returns a detached float32 tensor; check with ``graph_agreement``.
    """
    A = np.asarray(adjacency)
    if A.ndim != 2 or A.shape[0] != A.shape[1] or A.shape[0] < 2:
        raise ValueError(f"adjacency must be a square [n, n] matrix with n >= 2, got shape {A.shape}")
    if int(d_sig) < 1 or int(steps) < 0 or not lr > 0 or margin < 0:
        raise ValueError(
            f"need d_sig >= 1, steps >= 0, lr > 0, margin >= 0; got d_sig={d_sig}, steps={steps}, "
            f"lr={lr}, margin={margin}"
        )
    threshold = link_threshold(truncation, bandwidth)
    if not 0 < threshold < 2.0:
        raise ValueError(
            f"link threshold {threshold:.3f} (truncation={truncation}, bandwidth={bandwidth}) admits no "
            f"unlinked pair: cosine distances lie in [0, 2]; use a truncation in (0, 2), or without "
            f"truncation 0 < bandwidth < {2 / math.log(2):.3f}"
        )
    if margin >= min(threshold, 2.0 - threshold):
        raise ValueError(
            f"margin {margin} leaves no feasible cosine distance around the threshold "
            f"{threshold:.3f}; use margin < {min(threshold, 2.0 - threshold):.3f}"
        )
    n = A.shape[0]
    linked = torch.from_numpy((A != 0) | (A.T != 0))
    off = ~torch.eye(n, dtype=torch.bool)
    # One hinge for both kinds of pair: relu(sign * (d - t) + margin), sign = +1 for linked and
    # -1 for unlinked pairs, with per-pair weights giving each kind's mean (diagonal weight 0).
    sign = torch.where(linked, 1.0, -1.0)
    w_pos, w_neg = (linked & off).float(), (~linked & off).float()
    weight = w_pos / w_pos.sum().clamp_min(1.0) + w_neg / w_neg.sum().clamp_min(1.0)
    gen = torch.Generator().manual_seed(int(seed))
    sig = torch.nn.init.orthogonal_(torch.empty(n, int(d_sig)), generator=gen).requires_grad_(True)
    opt = torch.optim.Adam([sig], lr=lr)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny ops: extra intra-op threads only add barriers (see docstring)
    try:
        for _ in range(int(steps)):
            loss = (torch.relu(sign * (cosine_distance(sig) - threshold) + margin) * weight).sum()
            if loss.item() == 0.0:  # every pair beyond its margin: nothing left to fit
                break
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    return torch.nn.functional.normalize(sig.detach().float(), dim=-1)


def random_signatures(n: int, d_sig: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Gaussian signatures ``[n, d_sig]`` rescaled to unit norm (the ``random`` initialisation;
    the authors' ``torch.randn`` has norm ~``sqrt(d_sig)``, see ``fit_signatures_to_graph``)."""
    return torch.nn.functional.normalize(torch.randn(n, d_sig, generator=generator), dim=-1)


def prior_signatures(prior: str, n: int, d_sig: int, seed: int, prior_params: dict | None = None,
                     truncation: float | None = None, bandwidth: float = 1.0, steps: int = 1000,
                     lr: float = 1e-3) -> tuple[torch.Tensor, nx.Graph]:
    """Signatures fitted to one graph sampled from ``prior`` (``sample_prior_graph``, ``seed``):
    the authors' preset initialisation. Returns ``(signatures [n, d_sig], graph)``."""
    # erdos_renyi's own `seed` picks its target; the initial graph is drawn with the run's seed
    params = {k: v for k, v in (prior_params or {}).items() if k != "seed"}
    graph = sample_prior_graph(prior, n, seed=seed, **params)
    adjacency = nx.to_numpy_array(graph, nodelist=range(n))
    sig = fit_signatures_to_graph(adjacency, d_sig, truncation=truncation, bandwidth=bandwidth, steps=steps,
                                  lr=lr, seed=seed)
    return sig, graph
