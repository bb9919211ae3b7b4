"""Signatures whose kernel reproduces a graph: the authors' preset fit (orthogonal init, hinge loss
against the truncation distance, Adam) used to initialise NAC and frozen-graph signatures from a
graph sampled from a prior (``nac.graphs``), plus random signatures and the agreement measure.
Split from ``nac.graphs`` so that code that only needs the priors does not import the kernel."""

from __future__ import annotations

import math
import sys

import networkx as nx
import numpy as np
import torch
from tqdm.auto import tqdm

from nac.circuits.kernel import cosine_distance
from nac.graphs import sample_prior_graph
from nac.progress import bar_kwargs


def link_threshold(truncation: float | None, bandwidth: float) -> float:
    """The cosine distance that separates linked from unlinked pairs: the truncation distance
    when the kernel is truncated (``P = 0`` beyond it), else ``bandwidth * ln 2`` (``P > 0.5``)."""
    return float(truncation) if truncation is not None else float(bandwidth) * math.log(2.0)


def graph_agreement(signatures: torch.Tensor, adjacency: np.ndarray, threshold: float) -> float:
    """Fraction of off-diagonal pairs on the right side of ``threshold``: linked pairs closer
    (cosine distance ``<= threshold``), unlinked pairs farther."""
    if threshold is None:
        raise ValueError(
            "graph_agreement needs a distance threshold (the kernel's truncation, or the fit's "
            "signature_fit_threshold): an untruncated kernel links every pair, so no threshold is implied"
        )
    d = cosine_distance(signatures.detach()).numpy()
    A = np.asarray(adjacency) != 0
    A = A | A.T
    off = ~np.eye(len(A), dtype=bool)
    return float(((d <= threshold) == A)[off].mean())


FITS = ("authors", "margin")


def fit_signatures_to_graph(
    adjacency: np.ndarray,
    d_sig: int,
    truncation: float | None = None,
    bandwidth: float = 1.0,
    steps: int = 1000,
    lr: float = 1e-3,
    seed: int = 0,
    margin: float | None = None,
    method: str = "authors",
    progress: bool | None = None,
) -> torch.Tensor:
    """Fit signatures ``[n, d_sig]`` whose kernel reproduces a graph (the preset initialisation).

    adjacency: ``[n, n]``, nonzero entries are links (symmetrised). Both methods start from
    ``nn.init.orthogonal_`` signatures (seeded) and take ``steps`` Adam steps at ``lr`` on a hinge
    against the link threshold ``t`` (``link_threshold``: the truncation distance, where the
    kernel cuts, ``d > t`` gives ``P = 0``; or ``bandwidth * ln 2``, where ``P = 0.5``, untruncated),
    ``d_ij = 1 - cos(s_i, s_j)`` (``nac.circuits.kernel.cosine_distance``, as the kernel computes it):

    * ``"authors"`` (default; ``docs/reference.md``, "Signatures", and "Fit and regularizer
      switches"): a **plain mean hinge over all n^2 pairs**: ``mean_ij relu(sign_ij (d_ij - t))``
      with ``sign = +1`` for linked pairs (pushed to ``d <= t``: kept by the truncation) and ``-1``
      for unlinked pairs (pushed to ``d >= t``: cut). No margin (a pair stops pulling once it
      reaches ``t``), no class balancing (the sparse graph's links weigh ``1 / n^2`` each, like
      the far more numerous non-edges), no early stop, output **not normalised** (rows keep
      the norm Adam leaves them, ~0.53 at 256 x 64; the orthogonal init gives ``sqrt(d_sig / n)`` for ``n >= d_sig``).
      The diagonal counts as the adjacency says (a graph without self-loops: unlinked), a constant
      ``t / n`` in the loss with no gradient, since ``d_ii = 0`` whatever the signatures.
    * ``"margin"`` (this project's earlier fit, an option): linked pairs pay
      ``relu(d_ij - (t - margin))``, unlinked pairs ``relu((t + margin) - d_ij)``; the two hinge
      means are added (links and non-edges weigh equally, as prior graphs are sparse), the
      diagonal ignored; stops early once every pair clears its margin (``margin`` default 0.1);
      rows rescaled to unit norm (so every initialisation, prior-fitted or ``random_signatures``,
      turns at the same angular rate under Adam's absolute steps).

    ``progress``: a tqdm bar over the steps; ``None`` shows it only when stderr is a terminal
    (so not in tests, pipelines or logs). CPU, seeded generator: deterministic per ``seed`` at a
    given intra-op thread count. It runs at the caller's thread count and sets none itself (the
    loop is thousands of tiny ops, where extra intra-op threads only add barriers: the pipeline's
    CPU jobs run with one, ``nac.pipeline.pool.threads_for``). The count can change the last bits
    at large ``n``: at 32 x 32 one and two threads give equal signatures, at 256 x 64 they differ
    by up to 2e-5 (300 steps, measured 2026-11-28). Returns a detached float32 tensor; check with
    ``graph_agreement``.
    """
    if method not in FITS:
        raise ValueError(f"unknown signature fit {method!r}; valid choices: {', '.join(FITS)}")
    if method == "authors" and margin is not None:
        raise ValueError(f"the authors' fit has no margin (got margin={margin}); pass method='margin' to use one")
    margin = 0.1 if margin is None else margin
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
    if method == "margin" and margin >= min(threshold, 2.0 - threshold):
        raise ValueError(
            f"margin {margin} leaves no feasible cosine distance around the threshold "
            f"{threshold:.3f}; use margin < {min(threshold, 2.0 - threshold):.3f}"
        )
    n = A.shape[0]
    linked = torch.from_numpy((A != 0) | (A.T != 0))
    # One hinge for both kinds of pair: relu(sign * (d - t) + margin), sign = +1 for linked and
    # -1 for unlinked pairs, weighted per pair.
    sign = torch.where(linked, 1.0, -1.0)
    if method == "authors":
        weight, margin = torch.full((n, n), 1.0 / (n * n)), 0.0  # the plain mean over all n^2 pairs
    else:  # each kind's own mean, diagonal weight 0
        off = ~torch.eye(n, dtype=torch.bool)
        w_pos, w_neg = (linked & off).float(), (~linked & off).float()
        weight = w_pos / w_pos.sum().clamp_min(1.0) + w_neg / w_neg.sum().clamp_min(1.0)
    gen = torch.Generator().manual_seed(int(seed))
    sig = torch.nn.init.orthogonal_(torch.empty(n, int(d_sig)), generator=gen).requires_grad_(True)
    opt = torch.optim.Adam([sig], lr=lr)
    show = sys.stderr.isatty() if progress is None else bool(progress)
    for _ in tqdm(
        range(int(steps)),
        desc=f"signature fit ({method}, {n} x {int(d_sig)})",
        unit="step",
        disable=not show,
        **{"leave": False, **bar_kwargs()},
    ):
        loss = (torch.relu(sign * (cosine_distance(sig) - threshold) + margin) * weight).sum()
        if method == "margin" and loss.item() == 0.0:  # every pair beyond its margin: nothing left
            break
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    out = sig.detach().float()
    return torch.nn.functional.normalize(out, dim=-1) if method == "margin" else out


def random_signatures(n: int, d_sig: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Gaussian signatures ``[n, d_sig]`` rescaled to unit norm (the ``random`` initialisation;
    the authors' ``torch.randn`` has norm ~``sqrt(d_sig)``, see ``fit_signatures_to_graph``)."""
    return torch.nn.functional.normalize(torch.randn(n, d_sig, generator=generator), dim=-1)


def prior_signatures(
    prior: str,
    n: int,
    d_sig: int,
    seed: int,
    prior_params: dict | None = None,
    truncation: float | None = None,
    bandwidth: float = 1.0,
    steps: int = 1000,
    lr: float = 1e-3,
    fit: str = "authors",
    progress: bool | None = None,
) -> tuple[torch.Tensor, nx.Graph]:
    """Signatures fitted to one graph sampled from ``prior`` (``sample_prior_graph``, ``seed``):
    the preset initialisation, by ``fit_signatures_to_graph(method=fit)`` (``"authors"`` or
    ``"margin"``). Returns ``(signatures [n, d_sig], graph)``."""
    # erdos_renyi's own `seed` picks its target; the initial graph is drawn with the run's seed
    params = {k: v for k, v in (prior_params or {}).items() if k != "seed"}
    graph = sample_prior_graph(prior, n, seed=seed, **params)
    adjacency = nx.to_numpy_array(graph, nodelist=range(n))
    sig = fit_signatures_to_graph(
        adjacency,
        d_sig,
        truncation=truncation,
        bandwidth=bandwidth,
        steps=steps,
        lr=lr,
        seed=seed,
        method=fit,
        progress=progress,
    )
    return sig, graph
