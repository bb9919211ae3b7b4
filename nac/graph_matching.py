"""The permutation that aligns a graph's link probabilities ``P`` with a prior's target ``G``
(``nac.regularizer``'s matching, on the host, in float64): the authors' one Hungarian step
(``_hungarian`` of ``_sq_dist(G, P)``) and this project's wider search, ``closest_permutation``
(the authors' step plus sorted-row, Weisfeiler-Lehman and refinement candidates, never worse).
numpy's BLAS threads are limited by ``_blas_limit`` while a matching runs."""

from __future__ import annotations

import contextlib
import functools

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from threadpoolctl import ThreadpoolController  # a scikit-learn dependency

_TIE_RTOL = 1e-9  # cost entries this close (relative) count as ties in the anchored search
_WL_DIM = 16  # random Fourier features per Weisfeiler-Lehman round
# The matching's numpy BLAS threads are the public functions' ``blas_threads`` keyword (default 1;
# None: the library's default, one per core). Its products are n x n with n <= ~1000: a second
# thread saves nothing and, on a loaded machine, spins, costing several times the CPU time of one
# thread. The products are bitwise the same (tests/test_speed_equivalence.py).


@functools.cache
def _blas_controller():
    """threadpoolctl's ``ThreadpoolController``, made on first use (it inspects the loaded libraries)."""
    return ThreadpoolController()


def _blas_limit(threads: int | None):
    """A context limiting numpy's BLAS to ``threads`` (a no-op context for None)."""
    if threads is None:
        return contextlib.nullcontext()
    return _blas_controller().limit(limits=threads, user_api="blas")


# ----------------------------------------------------------------------------- building blocks
def _objective(P: np.ndarray, G: np.ndarray, perm: np.ndarray) -> float:
    """``||P[perm][:, perm] - G||^2`` (float64)."""
    return float(np.square(P[np.ix_(perm, perm)] - G).sum())


def _hungarian(cost: np.ndarray) -> np.ndarray:
    """Assignment minimising ``sum_t cost[t, perm[t]]``; ``perm[t] = i``: P's node i plays t."""
    rows, cols = linear_sum_assignment(cost)
    perm = np.empty(len(rows), dtype=np.int64)
    perm[rows] = cols
    return perm


def _sq_dist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``C[t, i] = sum_k (a[t, k] - b[i, k])^2`` for feature rows ``a``, ``b`` ``[n, k]``."""
    return np.maximum((a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T, 0.0)


def _max_ties(cost: np.ndarray, perm: np.ndarray) -> tuple[int, int]:
    """``(t, count)``: the target row with the most partners costing exactly (up to rounding)
    what its assigned partner costs - a sign of structurally equivalent nodes."""
    chosen = cost[np.arange(len(perm)), perm]
    ties = (np.abs(cost - chosen[:, None]) <= _TIE_RTOL * (1.0 + float(cost.max()))).sum(1)
    t = int(np.argmax(ties))
    return t, int(ties[t])


def _refine(P: np.ndarray, G: np.ndarray, perm: np.ndarray, steps: int) -> tuple[np.ndarray, float]:
    """Iterated Hungarian with P's columns aligned by the current permutation.

    ``C[t, i] = mean_j (G[t, j] - P[i, perm[j]])^2`` (computed as a sum: same matching), the
    linearisation of the quadratic assignment objective at ``perm``. A new permutation is kept
    only if it strictly lowers ``||P[perm][:, perm] - G||^2``; otherwise, or after ``steps``
    steps, the search stops.
    """
    best = _objective(P, G, perm)
    for _ in range(steps):
        if best <= 0.0:
            break
        cand = _hungarian(_sq_dist(G, P[:, perm]))  # row i of P[:, perm] is P[i, perm[j]]
        obj = _objective(P, G, cand)
        if not obj < best:
            break
        perm, best = cand, obj
    return perm, best


class _WL:
    """Soft Weisfeiler-Lehman colours of a weighted complete graph ``M`` ``[n, n]``.

    Round r maps node j's colour ``h_j`` and the multiset ``{(M_jk, h_k)}_k`` to a new scalar
    colour through fixed random Fourier features, ``e_jd = sum_k sin(2 M_jk + v_rd h_k + b_rd)``
    (two matrix products after the angle-sum identity), then ``h_j <- sin(a_r . e_j + c_r h_j)``.
    Equivalent nodes keep equal colours exactly; other nodes separate almost surely. The
    constants come from a fixed seed, so G and P are coloured by the same function.
    """

    def __init__(self, M: np.ndarray, max_rounds: int):
        rng = np.random.default_rng(20221016)
        self.S, self.C = np.sin(2.0 * M), np.cos(2.0 * M)
        self.v = rng.normal(0.0, 3.0, (max_rounds, _WL_DIM))
        self.b = rng.uniform(0.0, 2 * np.pi, (max_rounds, _WL_DIM))
        self.a = rng.normal(0.0, 1.0 / np.sqrt(_WL_DIM), (max_rounds, _WL_DIM))
        self.c = rng.normal(0.0, 1.0, max_rounds)

    def step(self, r: int, h: np.ndarray) -> np.ndarray:
        phase = h[:, None] * self.v[r] + self.b[r]
        e = self.S @ np.cos(phase) + self.C @ np.sin(phase)
        return np.sin(e @ self.a[r] + self.c[r] * h)


def _snap(h_g: np.ndarray, h_p: np.ndarray, tol: float = 1e-9) -> tuple[np.ndarray, np.ndarray, int]:
    """Merge colours of G and P closer than ``tol`` (sorted-gap clustering of both together)
    onto one shared value per class; returns both snapped and the number of classes.

    The hash amplifies float rounding by roughly ``n`` per round; snapping after every round
    keeps equivalent nodes - within P, within G and across the two - bitwise equal.
    """
    h = np.concatenate([h_g, h_p])
    order = np.argsort(h, kind="stable")
    hs = h[order]
    starts = np.concatenate([[True], np.diff(hs) > tol])
    group = np.cumsum(starts) - 1
    out = np.empty_like(h)
    out[order] = hs[starts][group]
    return out[: len(h_g)], out[len(h_g) :], int(group[-1]) + 1


def _wl_features(
    wl_g: _WL, wl_p: _WL, h_g: np.ndarray, h_p: np.ndarray, max_rounds: int
) -> tuple[np.ndarray, np.ndarray]:
    """Colours ``[n, r]`` of G and P after each round, same rounds for both; stops once the
    partition into colour classes stops getting finer (WL's stable colouring) or after
    ``max_rounds``."""
    out_g, out_p = [], []
    h_g, h_p, classes = _snap(h_g, h_p)
    for r in range(max_rounds):
        h_g, h_p, new = _snap(wl_g.step(r, h_g), wl_p.step(r, h_p))
        out_g.append(h_g)
        out_p.append(h_p)
        if new == classes:
            break
        classes = new
    return np.stack(out_g, axis=1), np.stack(out_p, axis=1)


def _anchored_search(
    P: np.ndarray, G: np.ndarray, base: np.ndarray, rounds: int, max_anchors: int, refine_steps: int
) -> tuple[np.ndarray, float]:
    """Individualisation-refinement start (as in graph-isomorphism solvers), softened.

    Match on ``base`` (the sorted-row cost) plus ``_WL`` colours. While some target node still
    has several equally good partners (exact ties: structurally equivalent nodes, e.g. the
    interchangeable blocks of a planted partition), fix one such pair ``(t, i)`` as an anchor -
    both get the same fresh initial colour - and recolour, which breaks the symmetry. Every matching is refined with
    ``_refine``; the best one is returned.
    """
    n = G.shape[0]
    wl_g, wl_p = _WL(G, rounds), _WL(P, rounds)
    h_g, h_p = np.zeros(n), np.zeros(n)
    best_perm, best = None, np.inf
    for k in range(max_anchors + 1):
        cost = base + _sq_dist(*_wl_features(wl_g, wl_p, h_g, h_p, rounds))
        perm = _hungarian(cost)
        refined, obj = _refine(P, G, perm, refine_steps)
        if obj < best:
            best_perm, best = refined, obj
        if best <= 0.0:
            break
        t, ties = _max_ties(cost, perm)
        if ties <= 1:
            break  # every node has a unique best partner: nothing left to individualise
        h_g[t] = h_p[perm[t]] = 1.0 + 0.618 * k
    return best_perm, best


# ----------------------------------------------------------------------------- public API
@torch.no_grad()
def closest_permutation(
    P: torch.Tensor,
    G: torch.Tensor,
    refine_steps: int = 5,
    wl_rounds: int = 32,
    max_anchors: int = 16,
    *,
    blas_threads: int | None = 1,
) -> torch.Tensor:
    """The permutation ``perm`` (LongTensor ``[n]``) making ``P[perm][:, perm]`` closest to ``G``.

    P, G: ``[n, n]`` (P the generated link probabilities, G the target). Computed without
    gradient, in float64 on the CPU; returned on P's device. ``perm[t] = i`` means P's module
    ``i`` is matched to target node ``t``. Objective: ``||P[perm][:, perm] - G||^2``.

    Starts, each refined by ``_refine`` (at most ``refine_steps`` iterated Hungarian steps with
    columns aligned by the current permutation, ``C[t, i] = mean_j (G[t, j] - P[i, perm[j]])^2``,
    accepting only strict improvements); the lowest objective wins, and the search stops as
    soon as one reaches 0:

    1. Authors' step: Hungarian matching (``scipy.optimize.linear_sum_assignment``) with
       ``C[t, i] = mean_j (G[t, j] - P[i, j])^2``. It compares rows without aligning columns,
       so it does not in general recover the permutation even when P is a permuted copy of G.
    2. Permutation-invariant rows: the same step on sorted rows (each node's multiset of link
       probabilities; for a binary graph, its degree).
    3. Only if step 2's matching has exact ties (structurally equivalent nodes, as in exact
       copies of a planted partition, ring of cliques or Erdos-Renyi target) and
       ``wl_rounds > 0``: ``_anchored_search`` (sorted rows plus at most ``wl_rounds`` soft
       Weisfeiler-Lehman rounds, up to ``max_anchors`` symmetry-breaking anchors). For a learned,
       noisy P there are no exact ties and this step is skipped.

    Since step 1 is always evaluated and refinement only accepts improvements, the result is
    never worse than the authors' matching; ``refine_steps=0, wl_rounds=0`` gives the better of
    steps 1 and 2 without refinement (two Hungarian calls: the cheapest setting).

    ``blas_threads`` (keyword): numpy's BLAS threads while it runs (default 1; None: the
    library's default). The result is bitwise the same either way; one thread costs less CPU time.
    """
    if P.dim() != 2 or P.shape[0] != P.shape[1] or P.shape != G.shape:
        raise ValueError(
            f"P and G must both be square [n, n] with the same n; got {tuple(P.shape)} and {tuple(G.shape)}"
        )
    if refine_steps < 0 or wl_rounds < 0 or max_anchors < 0:
        raise ValueError(
            f"refine_steps, wl_rounds and max_anchors must be >= 0; got {refine_steps}, {wl_rounds}, {max_anchors}"
        )
    Pn = P.detach().to("cpu", torch.float64).numpy()
    Gn = G.detach().to("cpu", torch.float64).numpy()
    with _blas_limit(blas_threads):
        best_perm = _closest_permutation(Pn, Gn, refine_steps, wl_rounds, max_anchors)
    return torch.as_tensor(best_perm, dtype=torch.long, device=P.device)


def _closest_permutation(
    Pn: np.ndarray, Gn: np.ndarray, refine_steps: int, wl_rounds: int, max_anchors: int
) -> np.ndarray:
    best_perm, best = _refine(Pn, Gn, _hungarian(_sq_dist(Gn, Pn)), refine_steps)
    if best > 0.0:
        sorted_cost = _sq_dist(np.sort(Gn, axis=1), np.sort(Pn, axis=1))
        sorted_perm = _hungarian(sorted_cost)
        perm, obj = _refine(Pn, Gn, sorted_perm, refine_steps)
        if obj < best:
            best_perm, best = perm, obj
        if best > 0.0 and wl_rounds > 0 and _max_ties(sorted_cost, sorted_perm)[1] > 1:
            perm, obj = _anchored_search(Pn, Gn, sorted_cost, wl_rounds, max_anchors, refine_steps)
            if obj < best:
                best_perm, best = perm, obj
    return best_perm
