"""Graph priors for the Graph Structure Regularizer and frozen-graph initialisation.

Paper section 2, "Regularization via Graph Priors", and Figure 3 (samples from the planted
partition, scale-free, ring-of-cliques and Erdos-Renyi priors). The target matrices follow the
authors' code as recorded in ``docs/reference.md`` ("Target matrices"); the Erdos-Renyi target has no
counterpart there and is defined by this project (see ``prior_target``).

Conventions shared by every prior:

* Node ``k`` (0-based) is the paper's ``i = k + 1``; blocks / cliques are contiguous node ranges
  of equal size: as in the authors' code, ``n`` must be divisible by ``n_blocks`` (else a
  ValueError names both and the sizes that would divide).
* Diagonal (``prior_target(diagonal=...)``): ``"formula"`` (default, the authors' targets)
  keeps each formula's own value on the diagonal: ``p_in`` for the planted partition and the
  ring of cliques (1 on the first node of each clique, which its ring row sets to 1),
  ``clip(sqrt(N) / (c i), 0, 1)`` for scale-free, ``p`` for this project's Erdos-Renyi target.
  ``"one"`` (this project's earlier targets, an option) sets ``G_ii = 1``, the value the kernel
  always gives (``cos(s, s) = 1``). The diagonal changes neither the gradient nor a matching that
  scores the whole permuted matrix (``sum_t (P_{pi(t)pi(t)} - G_tt)^2 = sum_t (1 - G_tt)^2`` for
  every ``pi``), but it shifts the loss by that constant and enters the authors' Hungarian
  row cost (``nac.regularizer``).
* Targets are symmetric ``float32`` numpy arrays ``[n, n]`` with values in ``[0, 1]``.
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np

PRIORS = ("scale_free", "planted_partition", "ring_of_cliques", "erdos_renyi")
DIAGONALS = ("formula", "one")

# One parameter namespace per prior, shared by ``prior_target`` and ``sample_prior_graph``.
# scale_free: ``c`` shapes the target matrix, ``m`` the Barabasi-Albert sample (Figure 3).
# erdos_renyi: ``seed`` picks the sampled target (``sample_prior_graph`` takes its own seed).
PRIOR_DEFAULTS: dict[str, dict] = {
    "scale_free": {"c": 16.0, "m": 2},
    # Authors: 10 blocks at 320 mediators (32 per block). Our processor counts (16 smoke, 32 mini,
    # 256 paper) are not multiples of 10, so 8 blocks (2, 4 and 32 modules per block).
    "planted_partition": {"n_blocks": 8, "p_in": 0.9, "p_out": 0.05},
    "ring_of_cliques": {"n_blocks": 8, "p_in": 0.9, "p_out": 0.05},
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
            f"unknown parameter(s) {unknown} for prior {name!r}; valid parameters: {', '.join(PRIOR_DEFAULTS[name])}"
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
        if n % p["n_blocks"]:
            divisors = [b for b in range(lo, min(n, 16) + 1) if n % b == 0]
            raise ValueError(
                f"{name!r} needs n divisible by n_blocks (equal blocks, as in the authors' code): n = {n} "
                f"modules do not split into {p['n_blocks']} blocks; choose n_blocks in {divisors} or an n "
                f"that is a multiple of {p['n_blocks']}"
            )
    return p


def block_sizes(n: int, n_blocks: int) -> list[int]:
    """Sizes of ``n_blocks`` equal contiguous blocks covering ``n`` nodes (``n % n_blocks == 0``)."""
    return [n // n_blocks] * n_blocks


def ring_links(n: int, n_blocks: int) -> list[tuple[int, int]]:
    """The authors' ring-of-cliques links (``RingOfCliquesRegularization``): for each block ``c``
    of size ``s``, its first node ``c * s`` is linked to every node of blocks ``c`` and ``c + 1``
    (the slice ``c*s : (c+2)*s``, cut at ``n``: the last block has no link back to the first)."""
    s = n // n_blocks
    return [(c * s, j) for c in range(n_blocks) for j in range(c * s, min(n, (c + 2) * s)) if j != c * s]


def _sbm_matrix(sizes: list[int], p_in: float, p_out: float) -> np.ndarray:
    labels = np.repeat(np.arange(len(sizes)), sizes)
    return np.where(labels[:, None] == labels[None, :], p_in, p_out)


# ----------------------------------------------------------------------------- targets
def prior_target(name: str, n: int, diagonal: str = "formula", **params) -> np.ndarray:
    """Target link-probability matrix ``G`` ``[n, n]`` (float32) of a graph prior.

    Section 2 "Regularization via Graph Priors"; authors' code per docs/reference.md. Parameters
    default to ``PRIOR_DEFAULTS[name]``. ``diagonal``: ``"formula"`` (the authors': each
    formula's value, listed below) or ``"one"`` (``G_ii = 1``); see the module docstring.

    * ``scale_free`` (``c=16``): ``G_ij = clip(sqrt(N) / (c sqrt(i j)), 0, 1)``, ``i, j = 1..N``
      (a Chung-Lu-style expected adjacency: expected degree of node i falls like ``1/sqrt(i)``);
      diagonal ``clip(sqrt(N) / (c i), 0, 1)``.
    * ``planted_partition`` (``n_blocks=10, p_in=0.9, p_out=0.05``): the expected adjacency of
      ``networkx.stochastic_block_model`` (``planted_partition_graph`` when sizes are equal):
      ``p_in`` within a block, ``p_out`` between blocks, blocks as equal as possible; diagonal
      ``p_in``.
    * ``ring_of_cliques`` (same parameters): that SBM plus links of 1.0 from the first node of
      each clique to every node of its own clique and the next one, with no wrap-around from the
      last clique to the first (the authors' construction, ``ring_links``); diagonal ``p_in``
      but 1 on each clique's first node (its ring row and column, which include itself).
    * ``erdos_renyi`` (``p=0.1, seed=0``): not in the authors' code; defined here as the
      adjacency of one ``networkx.gnp_random_graph(n, p, seed)`` sample (binary off the
      diagonal); diagonal ``p``, the formula's link probability (there is no authors' version).
      ``p=0.1`` keeps the density close to the planted partition's (0.135 when n divides
      into the default 10 blocks; 0.12 at n=64, 0.13 at n=256); the scale-free target is far
      sparser (0.03 at n=64, 0.014 at n=256).

    Raises ValueError for an unknown prior, diagonal, unknown parameter or out-of-range value.
    """
    if diagonal not in DIAGONALS:
        raise ValueError(f"unknown target diagonal {diagonal!r}; valid choices: {', '.join(DIAGONALS)}")
    p = _resolve(name, n, params)
    if name == "scale_free":
        idx = np.arange(1, n + 1, dtype=np.float64)
        # the diagonal is the formula's sqrt(N) / (c i), clipped
        G = np.clip(math.sqrt(n) / (float(p["c"]) * np.sqrt(np.outer(idx, idx))), 0.0, 1.0)
    elif name in ("planted_partition", "ring_of_cliques"):
        sizes = block_sizes(n, int(p["n_blocks"]))
        G = _sbm_matrix(sizes, float(p["p_in"]), float(p["p_out"]))  # diagonal p_in
        if name == "ring_of_cliques":
            for u, v in ring_links(n, int(p["n_blocks"])):
                G[u, v] = G[v, u] = 1.0
            first = np.arange(0, n, n // int(p["n_blocks"]))
            G[first, first] = 1.0  # the authors' slice c*s:(c+2)*s of row c*s includes c*s itself
    else:  # erdos_renyi
        graph = nx.gnp_random_graph(n, float(p["p"]), seed=int(p["seed"]))
        G = nx.to_numpy_array(graph, nodelist=range(n), dtype=np.float64)
        np.fill_diagonal(G, float(p["p"]))
    if diagonal == "one":
        np.fill_diagonal(G, 1.0)
    return G.astype(np.float32)


def sample_prior_graph(name: str, n: int, seed: int, **params) -> nx.Graph:
    """One graph drawn from a prior (Figure 3), deterministic per ``seed``; nodes ``0..n-1``.

    * ``scale_free``: ``networkx.barabasi_albert_graph(n, m, seed)`` (``m=2``).
    * ``planted_partition``: ``networkx.planted_partition_graph`` (``p_in`` / ``p_out``).
    * ``ring_of_cliques``: that sample plus the ring links of ``prior_target`` (links of
      probability 1), so every prior's sample is a Bernoulli draw of its target.
    * ``erdos_renyi``: ``networkx.gnp_random_graph(n, p, seed)``; the ``seed`` argument wins
      over a ``seed`` parameter, so ``prior_target(..., seed=s)`` is this sample plus its diagonal.
    """
    params = {k: v for k, v in params.items() if not (name == "erdos_renyi" and k == "seed")}
    p = _resolve(name, n, params)
    if name == "scale_free":
        graph = nx.barabasi_albert_graph(n, int(p["m"]), seed=seed)
    elif name == "erdos_renyi":
        graph = nx.gnp_random_graph(n, float(p["p"]), seed=seed)
    else:
        k = int(p["n_blocks"])
        graph = nx.Graph(nx.planted_partition_graph(k, n // k, float(p["p_in"]), float(p["p_out"]), seed=seed))
        if name == "ring_of_cliques":
            graph.add_edges_from(ring_links(n, k))
    graph.graph["prior"] = name
    return graph
