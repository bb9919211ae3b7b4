"""Graph priors for the Graph Structure Regularizer and frozen-graph initialisation.

Paper section 2, "Regularization via Graph Priors", and Figure 3 (samples from the planted
partition, scale-free, ring-of-cliques and Erdos-Renyi priors). The target matrices follow the
authors' code as recorded in ``REFERENCE.md`` ("Target matrices"); the Erdos-Renyi target has no
counterpart there and is defined by this project (see ``prior_target``).

Conventions shared by every prior:

* Node ``k`` (0-based) is the paper's ``i = k + 1``; blocks / cliques are contiguous node ranges,
  and the first ``n % n_blocks`` blocks get one extra node when ``n`` is not divisible.
* Diagonal: every target has ``G_ii = 1``. The kernel always gives ``P_ii = 1`` (``cos(s, s) = 1``,
  ``nac.circuits.kernel.link_probabilities``), so with any other diagonal the regularizer would
  carry a constant that no signature can remove (it changes neither the gradient nor the best
  permutation, because ``sum_t (P_{pi(t)pi(t)} - G_tt)^2`` is the same for every ``pi``). The
  authors' raw formulas (``p_in`` on the SBM diagonal, ``sqrt(N) / (c i)`` for scale-free) differ
  from this only on the diagonal.
* Targets are symmetric ``float32`` numpy arrays ``[n, n]`` with values in ``[0, 1]``.
"""
from __future__ import annotations

import math

import networkx as nx
import numpy as np
import torch

from nac.circuits.kernel import link_probabilities

PRIORS = ("scale_free", "planted_partition", "ring_of_cliques", "erdos_renyi")

# One parameter namespace per prior, shared by ``prior_target`` and ``sample_prior_graph``.
# scale_free: ``c`` shapes the target matrix, ``m`` the Barabasi-Albert sample (Figure 3).
# erdos_renyi: ``seed`` picks the sampled target (``sample_prior_graph`` takes its own seed).
PRIOR_DEFAULTS: dict[str, dict] = {
    "scale_free": {"c": 16.0, "m": 2},
    "planted_partition": {"n_blocks": 10, "p_in": 0.9, "p_out": 0.05},
    "ring_of_cliques": {"n_blocks": 10, "p_in": 0.9, "p_out": 0.05},
    "erdos_renyi": {"p": 0.1, "seed": 0},
}


# ----------------------------------------------------------------------------- validation
def _check_name(name: str) -> None:
    if name not in PRIORS:
        raise ValueError(f"unknown graph prior {name!r}; valid choices: {', '.join(PRIORS)}")


def _resolve(name: str, n: int, params: dict) -> dict:
    """Merge ``params`` over ``PRIOR_DEFAULTS[name]`` and validate every value."""
    _check_name(name)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
        raise ValueError(f"n must be an integer >= 2 (number of modules), got {n!r}")
    unknown = sorted(set(params) - set(PRIOR_DEFAULTS[name]))
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {unknown} for prior {name!r}; valid parameters: "
            f"{', '.join(PRIOR_DEFAULTS[name])}"
        )
    p = {**PRIOR_DEFAULTS[name], **params}
    for key in ("p_in", "p_out", "p"):
        if key in p and not 0.0 <= float(p[key]) <= 1.0:
            raise ValueError(f"{key} is a probability and must lie in [0, 1], got {p[key]!r}")
    if "c" in p and not float(p["c"]) > 0:
        raise ValueError(f"scale-free constant c must be > 0, got {p['c']!r}")
    for key in ("m", "n_blocks", "seed"):
        if key in p and (isinstance(p[key], bool) or not isinstance(p[key], (int, np.integer))):
            raise ValueError(f"{key} must be an integer, got {p[key]!r}")
    if "m" in p and not 1 <= p["m"] < n:
        raise ValueError(f"Barabasi-Albert m must satisfy 1 <= m < n = {n}, got {p['m']!r}")
    if "n_blocks" in p:
        lo = 2 if name == "ring_of_cliques" else 1
        if not lo <= p["n_blocks"] <= n:
            why = " (a ring needs at least two cliques)" if lo == 2 else ""
            raise ValueError(
                f"n_blocks must satisfy {lo} <= n_blocks <= n = {n} for {name!r}{why}, got {p['n_blocks']!r}"
            )
    return p


def block_sizes(n: int, n_blocks: int) -> list[int]:
    """Sizes of ``n_blocks`` contiguous blocks covering ``n`` nodes, as equal as possible
    (the first ``n % n_blocks`` blocks are one node larger)."""
    base, extra = divmod(n, n_blocks)
    return [base + (1 if b < extra else 0) for b in range(n_blocks)]


def _ring_links(sizes: list[int]) -> list[tuple[int, int]]:
    """The links joining each clique to the next around the ring.

    Equal sizes >= 2: taken from ``networkx.ring_of_cliques`` (its inter-clique edges, which join
    the second node of clique b to the first node of clique b + 1). Unequal sizes (n not divisible
    by n_blocks) or single-node cliques: the same rule applied to the contiguous blocks, with a
    single-node clique using its only node.
    """
    k = len(sizes)
    if len(set(sizes)) == 1 and sizes[0] >= 2:
        s = sizes[0]
        ring = nx.ring_of_cliques(k, s)
        return [(u, v) for u, v in ring.edges() if u // s != v // s]
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(int)
    return [(int(offsets[b] + min(1, sizes[b] - 1)), int(offsets[(b + 1) % k])) for b in range(k)]


def _sbm_matrix(sizes: list[int], p_in: float, p_out: float) -> np.ndarray:
    labels = np.repeat(np.arange(len(sizes)), sizes)
    return np.where(labels[:, None] == labels[None, :], p_in, p_out)


# ----------------------------------------------------------------------------- targets
def prior_target(name: str, n: int, **params) -> np.ndarray:
    """Target link-probability matrix ``G`` ``[n, n]`` (float32) of a graph prior.

    Section 2 "Regularization via Graph Priors"; authors' code per REFERENCE.md. Parameters
    default to ``PRIOR_DEFAULTS[name]``; the diagonal is 1 for every prior (module docstring).

    * ``scale_free`` (``c=16``): ``G_ij = clip(sqrt(N) / (c sqrt(i j)), 0, 1)``, ``i, j = 1..N``
      (a Chung-Lu-style expected adjacency: expected degree of node i falls like ``1/sqrt(i)``).
    * ``planted_partition`` (``n_blocks=10, p_in=0.9, p_out=0.05``): the expected adjacency of
      ``networkx.stochastic_block_model`` (``planted_partition_graph`` when sizes are equal):
      ``p_in`` within a block, ``p_out`` between blocks, blocks as equal as possible.
    * ``ring_of_cliques`` (same parameters): that SBM plus links of 1.0 joining each clique to
      the next one around a closed ring, one link per consecutive pair as in
      ``networkx.ring_of_cliques`` (see ``_ring_links`` for how unequal sizes are handled).
    * ``erdos_renyi`` (``p=0.1, seed=0``): not in the authors' code; defined here as the
      adjacency of one ``networkx.gnp_random_graph(n, p, seed)`` sample (binary, diagonal 1).
      ``p=0.1`` keeps the density close to the planted partition's (0.135 when n divides
      into the default 10 blocks; 0.12 at n=64, 0.13 at n=256); the scale-free target is far
      sparser (0.03 at n=64, 0.014 at n=256).

    Raises ValueError for an unknown prior, unknown parameter or out-of-range value.
    """
    p = _resolve(name, n, params)
    if name == "scale_free":
        idx = np.arange(1, n + 1, dtype=np.float64)
        G = np.clip(math.sqrt(n) / (float(p["c"]) * np.sqrt(np.outer(idx, idx))), 0.0, 1.0)
    elif name in ("planted_partition", "ring_of_cliques"):
        sizes = block_sizes(n, int(p["n_blocks"]))
        G = _sbm_matrix(sizes, float(p["p_in"]), float(p["p_out"]))
        if name == "ring_of_cliques":
            for u, v in _ring_links(sizes):
                G[u, v] = G[v, u] = 1.0
    else:  # erdos_renyi
        graph = nx.gnp_random_graph(n, float(p["p"]), seed=int(p["seed"]))
        G = nx.to_numpy_array(graph, nodelist=range(n), dtype=np.float64)
    np.fill_diagonal(G, 1.0)
    return G.astype(np.float32)


def sample_prior_graph(name: str, n: int, seed: int, **params) -> nx.Graph:
    """One graph drawn from a prior (Figure 3), deterministic per ``seed``; nodes ``0..n-1``.

    * ``scale_free``: ``networkx.barabasi_albert_graph(n, m, seed)`` (``m=2``).
    * ``planted_partition``: ``networkx.planted_partition_graph`` when the blocks are equal,
      else ``networkx.stochastic_block_model`` with the same ``p_in`` / ``p_out``.
    * ``ring_of_cliques``: that SBM sample plus the ring links of ``prior_target`` (with
      ``p_in=1, p_out=0`` and equal sizes this is exactly ``networkx.ring_of_cliques``).
    * ``erdos_renyi``: ``networkx.gnp_random_graph(n, p, seed)``; the ``seed`` argument wins
      over a ``seed`` parameter, so ``prior_target(..., seed=s)`` is this sample plus the diagonal.
    """
    params = {k: v for k, v in params.items() if not (name == "erdos_renyi" and k == "seed")}
    p = _resolve(name, n, params)
    if name == "scale_free":
        graph = nx.barabasi_albert_graph(n, int(p["m"]), seed=seed)
    elif name == "erdos_renyi":
        graph = nx.gnp_random_graph(n, float(p["p"]), seed=seed)
    else:
        sizes = block_sizes(n, int(p["n_blocks"]))
        p_in, p_out = float(p["p_in"]), float(p["p_out"])
        if len(set(sizes)) == 1:
            graph = nx.planted_partition_graph(len(sizes), sizes[0], p_in, p_out, seed=seed)
        else:
            probs = _sbm_matrix([1] * len(sizes), p_in, p_out).tolist()
            graph = nx.stochastic_block_model(sizes, probs, seed=seed)
        graph = nx.Graph(graph)  # plain mutable copy; graph.graph['partition'] is kept
        if name == "ring_of_cliques":
            graph.add_edges_from(_ring_links(sizes))
    graph.graph["prior"] = name
    return graph


# ----------------------------------------------------------------------------- frozen graphs
def fit_signatures_to_graph(
    adjacency: np.ndarray,
    d_sig: int,
    bandwidth: float = 1.0,
    steps: int = 1000,
    lr: float = 1e-3,
    seed: int = 0,
    margin: float = 0.1,
) -> torch.Tensor:
    """Fit signatures ``[n, d_sig]`` whose kernel reproduces a graph (frozen-graph init).

    REFERENCE.md "Frozen-graph initialisation" (Adam, lr 1e-3, 1000 steps, hinge loss on
    thresholded cosine distances); used for the paper's frozen Barabasi-Albert ablation (Table 1).
    ``P_ij > 0.5`` (eq. 2) iff the cosine distance ``d_ij < bandwidth * ln 2``; with that
    threshold ``t``, linked pairs pay ``relu(d_ij - (t - margin))`` and unlinked pairs
    ``relu((t + margin) - d_ij)``. The two hinge means are added (linked and unlinked pairs weigh
    equally, since prior graphs are sparse); the diagonal is ignored (``P_ii = 1`` always).
    Initial signatures are Gaussian with unit expected norm (cosine is scale-free, so the init
    scale sets the effective step size). CPU, seeded generator: deterministic per ``seed``. Stops
    early once every pair clears its margin. Runs with ``torch.set_num_threads(1)`` (restored on
    exit): the loop is thousands of tiny ops, and on a busy 2-core machine two intra-op threads
    made it 10-20x slower (0.4 s -> 10 s at n=64).

    adjacency: ``[n, n]``, nonzero off-diagonal entries are links (symmetrised by ``max``).
    Returns a detached float32 tensor ``[n, d_sig]``; check with
    ``link_probabilities(s, bandwidth=bandwidth) > 0.5``.
    """
    A = np.asarray(adjacency)
    if A.ndim != 2 or A.shape[0] != A.shape[1] or A.shape[0] < 2:
        raise ValueError(f"adjacency must be a square [n, n] matrix with n >= 2, got shape {A.shape}")
    if int(d_sig) < 1 or int(steps) < 0 or not lr > 0 or margin < 0:
        raise ValueError(
            f"need d_sig >= 1, steps >= 0, lr > 0, margin >= 0; got d_sig={d_sig}, steps={steps}, "
            f"lr={lr}, margin={margin}"
        )
    threshold = bandwidth * math.log(2.0)
    if not 0 < threshold < 2.0:
        raise ValueError(
            f"bandwidth {bandwidth} admits no unlinked pair (P > 0.5 for every cosine distance "
            f"in [0, 2]); use 0 < bandwidth < {2 / math.log(2):.3f}"
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
    sig = (torch.randn(n, int(d_sig), generator=gen) / math.sqrt(d_sig)).requires_grad_(True)
    opt = torch.optim.Adam([sig], lr=lr)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny ops: extra intra-op threads only add barriers (see docstring)
    try:
        for _ in range(int(steps)):
            dist = -bandwidth * torch.log(link_probabilities(sig, bandwidth=bandwidth))  # 1 - cos
            loss = (torch.relu(sign * (dist - threshold) + margin) * weight).sum()
            if loss.item() == 0.0:  # every pair beyond its margin: nothing left to fit
                break
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    return sig.detach().float()
