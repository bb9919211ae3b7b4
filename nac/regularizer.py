"""The Graph Structure Regularizer (paper section 2, "Regularization via Graph Priors").

The generated link-probability matrix ``P`` (eq. 2, ``nac.circuits.kernel.link_probabilities``,
no sampling, no normalisation) is compared with a prior's target ``G`` (``nac.graphs``) after
permuting P's rows and columns by a matching computed without gradient. Authors' code
(docs/reference.md, "Graph-structure regularizer"): **one** Hungarian matching of P's rows to G's
rows, the same permutation applied to rows and columns, loss ``mse(P_perm, G)`` (a KL variant
exists), weight 0.1, processor modules only (weight and module choice are the caller's).

``matching`` selects the permutation (``MATCHINGS``): ``"hungarian"`` (default, the authors' one
step, ``hungarian_permutation``) or ``"search"`` (this project's wider search,
``nac.graph_matching.closest_permutation``: the authors' step plus sorted-row, Weisfeiler-Lehman
and refinement candidates, never worse). ``match_async`` computes either on a worker thread, so that a caller
can take the matching off the critical path and finish with ``loss_from_permutation``.
"""

from __future__ import annotations

from concurrent.futures import Executor, Future

import numpy as np
import torch

from nac.graph_matching import _blas_limit, _closest_permutation, _hungarian, _sq_dist, closest_permutation

LOSS_KINDS = ("mse", "kl")
MATCHINGS = ("hungarian", "search")
KL_EPS = 1e-6


def _check_pair(P: torch.Tensor, G: torch.Tensor) -> None:
    if P.dim() != 2 or P.shape[0] != P.shape[1] or P.shape != G.shape:
        raise ValueError(
            f"P and G must both be square [n, n] with the same n; got {tuple(P.shape)} and {tuple(G.shape)}"
        )


def _host(P: torch.Tensor, G) -> tuple[np.ndarray, np.ndarray]:
    """P and G as float64 numpy arrays on the host (no gradient)."""
    G = torch.as_tensor(G)
    _check_pair(P, G)
    return P.detach().to("cpu", torch.float64).numpy(), G.detach().to("cpu", torch.float64).numpy()


def _match_host(
    Pn: np.ndarray, Gn: np.ndarray, matching: str, match_kwargs: dict, blas_threads: int | None = 1
) -> np.ndarray:
    """The permutation (numpy ``[n]``) of ``matching`` for host arrays, numpy's BLAS limited to
    ``blas_threads`` (``closest_permutation``)."""
    with _blas_limit(blas_threads):
        if matching == "hungarian":
            return _hungarian(_sq_dist(Gn, Pn))
        settings = {"refine_steps": 5, "wl_rounds": 32, "max_anchors": 16, **match_kwargs}  # closest_permutation's
        return _closest_permutation(Pn, Gn, **settings)


def _check_matching(matching: str, match_kwargs: dict) -> None:
    if matching not in MATCHINGS:
        raise ValueError(f"unknown graph matching {matching!r}; valid choices: {', '.join(MATCHINGS)}")
    if matching == "hungarian" and match_kwargs:
        raise ValueError(
            f"the authors' one-step Hungarian matching takes no search settings (got {sorted(match_kwargs)}); "
            f"pass matching='search' to use them"
        )
    allowed = {"refine_steps", "wl_rounds", "max_anchors"}
    if set(match_kwargs) - allowed:
        raise ValueError(f"unknown matching setting(s) {sorted(set(match_kwargs) - allowed)}; valid: {sorted(allowed)}")
    if any(int(v) < 0 for v in match_kwargs.values()):
        raise ValueError(f"refine_steps, wl_rounds and max_anchors must be >= 0; got {match_kwargs}")


@torch.no_grad()
def hungarian_permutation(P: torch.Tensor, G, *, blas_threads: int | None = 1) -> torch.Tensor:
    """The authors' matching: **one** Hungarian step (``scipy.optimize.linear_sum_assignment``) of
    P's rows to G's rows with cost ``C[t, i] = mean_j (G[t, j] - P[i, j])^2``.

    P, G: ``[n, n]``; computed without gradient in float64 on the CPU (the cost as a sum over
    ``j``, the same assignment as the mean); returns LongTensor ``[n]`` on P's device,
    ``perm[t] = i``: P's module ``i`` plays target node ``t``. The rows are compared without
    aligning columns, so even an exact permuted copy of G is not in general matched exactly
    (``closest_permutation`` searches further). Exact ties in the cost (identical rows in P or
    G) are broken by the cost's float rounding, as in any implementation of the step; ties
    between identical target rows (a block of a planted partition with the formula's diagonal)
    are symmetries of G, so every tie-break gives the same loss and gradient. ``blas_threads``:
    ``closest_permutation``'s.
    """
    Pn, Gn = _host(P, G)
    perm = _match_host(Pn, Gn, "hungarian", {}, blas_threads)
    return torch.as_tensor(perm, dtype=torch.long, device=P.device)


def match_permutation(
    P: torch.Tensor, G, matching: str = "hungarian", *, blas_threads: int | None = 1, **match_kwargs
) -> torch.Tensor:
    """The regularizer's permutation (LongTensor ``[n]`` on P's device, no gradient):
    ``hungarian_permutation`` for ``"hungarian"``, ``closest_permutation(P, G, **match_kwargs)``
    for ``"search"``; ``blas_threads`` is passed to either."""
    _check_matching(matching, match_kwargs)
    if matching == "hungarian":
        return hungarian_permutation(P, G, blas_threads=blas_threads)
    return closest_permutation(P, torch.as_tensor(G).to(P.device), blas_threads=blas_threads, **match_kwargs)


def match_async(
    P: torch.Tensor,
    G,
    matching: str = "hungarian",
    *,
    executor: Executor,
    blas_threads: int | None = 1,
    **match_kwargs,
) -> Future:
    """``match_permutation`` on a worker thread: a Future of the permutation (LongTensor ``[n]`` on
    the host, pinned when ``P`` is on CUDA, so that ``loss_from_permutation`` copies it to the
    device without blocking).

    P (``[n, n]``, any device) is copied here, in the caller's thread, so later in-place changes
    to it do not reach the matching: on CUDA into pinned host memory without blocking (the worker
    waits for the copy on a CUDA event, the caller does not), elsewhere a clone. G is the target:
    pass it on the host (a numpy array or CPU tensor; a device tensor is copied, blocking). The
    numpy and scipy work then runs on ``executor`` (keyword; the caller's worker, e.g. the training
    objective's own thread, ``nac.training.objective.Objective.matcher``) while the caller goes on,
    e.g. with the forward pass. Finish with ``loss_from_permutation(P, G, future.result(), kind)``:
    the same permutation and loss as ``graph_structure_loss`` (float64 on the host either way;
    ``tests/test_regularizer.py``). ``match_stacked_async``: several ``P`` with one copy each way.
    ``blas_threads``: ``closest_permutation``'s, on the worker.
    """
    return _submit_matching(P, G, matching, executor, match_kwargs, blas_threads)


def match_stacked_async(
    Ps: torch.Tensor,
    G,
    matching: str = "hungarian",
    *,
    executor: Executor,
    blas_threads: int | None = 1,
    **match_kwargs,
) -> Future:
    """``match_async`` of each of ``Ps``' ``L`` matrices (``[L, n, n]``) with one copy each way:
    ``Ps`` copied to the host at once, matched one after the other on the worker thread, a
    Future of the permutations stacked (LongTensor ``[L, n]``, pinned when ``Ps`` is on CUDA:
    one non-blocking copy to the device). Row ``l`` is ``match_async(Ps[l], G, ...)``'s (tested)."""
    if Ps.dim() != 3:
        raise ValueError(f"match_stacked_async takes P stacked [L, n, n], got shape {tuple(Ps.shape)}")
    return _submit_matching(Ps, G, matching, executor, match_kwargs, blas_threads)


def _submit_matching(
    P: torch.Tensor,
    G,
    matching: str,
    executor: Executor,
    match_kwargs: dict,
    blas_threads: int | None = 1,
) -> Future:
    """``match_async``'s work for ``P`` ``[n, n]`` or stacked ``[L, n, n]`` (then ``[L, n]``)."""
    _check_matching(matching, match_kwargs)
    _check_pair(P[0] if P.dim() == 3 else P, G if isinstance(G, torch.Tensor) else torch.from_numpy(np.asarray(G)))
    if not callable(getattr(executor, "submit", None)):
        raise TypeError(
            f"the matching needs executor=, the worker it runs on (e.g. ThreadPoolExecutor(max_workers=1)), "
            f"got {executor!r}"
        )
    Gn = G.detach().to("cpu", torch.float64).numpy() if isinstance(G, torch.Tensor) else np.asarray(G, np.float64)
    P = P.detach()
    event = None
    if P.is_cuda:
        host = torch.empty(P.shape, dtype=P.dtype, pin_memory=True)
        host.copy_(P, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
    else:
        host = P.clone()

    def work() -> torch.Tensor:
        if event is not None:
            event.synchronize()  # this thread waits for the copy; the caller's stream goes on
        Pn = host.to(torch.float64).numpy()
        if Pn.ndim == 3:
            perm = np.stack([_match_host(Pl, Gn, matching, match_kwargs, blas_threads) for Pl in Pn])
        else:
            perm = _match_host(Pn, Gn, matching, match_kwargs, blas_threads)
        perm = torch.from_numpy(perm)
        return perm.pin_memory() if event is not None else perm

    return executor.submit(work)


def loss_from_permutation(P: torch.Tensor, G, perm: torch.Tensor, kind: str = "mse") -> torch.Tensor:
    """The regularizer's loss at a fixed permutation ``perm`` ``[n]`` (from ``match_permutation``
    or ``match_async``): ``P_perm = P[perm][:, perm]``, then

    * ``"mse"`` (authors' default): ``mean((P_perm - G)^2)``;
    * ``"kl"``: mean elementwise Bernoulli ``KL(G || P_perm) = G log(G / P) + (1 - G)
      log((1 - G) / (1 - P))``, both clamped to ``[1e-6, 1 - 1e-6]`` (``P_ii = 1`` would be
      infinite otherwise).

    P: ``[n, n]``, differentiable; G: ``[n, n]`` (numpy array or tensor). Returns a scalar.
    """
    if kind not in LOSS_KINDS:
        raise ValueError(f"unknown graph-structure loss kind {kind!r}; valid choices: {', '.join(LOSS_KINDS)}")
    G = torch.as_tensor(G).to(device=P.device, dtype=P.dtype)
    _check_pair(P, G)
    perm = perm.to(P.device, non_blocking=True)  # pinned on the host (match_async), else already there
    P_perm = P[perm][:, perm]
    if kind == "mse":
        return torch.mean((P_perm - G) ** 2)
    p = P_perm.clamp(KL_EPS, 1.0 - KL_EPS)
    g = G.clamp(KL_EPS, 1.0 - KL_EPS)
    return torch.mean(g * torch.log(g / p) + (1.0 - g) * torch.log((1.0 - g) / (1.0 - p)))


def layer_losses_from_permutations(P: torch.Tensor, G, perms: torch.Tensor, kind: str = "mse") -> torch.Tensor:
    """``sum_l loss_from_permutation(P[l], G, perms[l], kind)`` by one chain of ops: every
    propagator's kernel regularised at once (``NAC.graph.regularizer``). P ``[L, n, n]``
    (differentiable), G ``[n, n]``, perms ``[L, n]`` (``stacked_permutations``). The same
    elementwise terms and per-layer means as the per-layer form; only the final sum's rounding
    may differ (``tests/test_batched_kernels.py``). Returns a scalar."""
    if kind not in LOSS_KINDS:
        raise ValueError(f"unknown graph-structure loss kind {kind!r}; valid choices: {', '.join(LOSS_KINDS)}")
    G = torch.as_tensor(G).to(device=P.device, dtype=P.dtype)
    if P.dim() != 3 or P.shape[1:] != G.shape or G.shape[0] != G.shape[1] or perms.shape != P.shape[:2]:
        raise ValueError(
            f"P must be [L, n, n], G [n, n] and perms [L, n]; "
            f"got {tuple(P.shape)}, {tuple(G.shape)}, {tuple(perms.shape)}"
        )
    perms = perms.to(P.device, non_blocking=True)
    layer = torch.arange(P.shape[0], device=P.device)
    P_perm = P[layer[:, None, None], perms[:, :, None], perms[:, None, :]]  # P[l][perm_l][:, perm_l]
    if kind == "mse":
        return ((P_perm - G) ** 2).mean(dim=(-2, -1)).sum()
    p = P_perm.clamp(KL_EPS, 1.0 - KL_EPS)
    g = G.clamp(KL_EPS, 1.0 - KL_EPS)
    return (g * torch.log(g / p) + (1.0 - g) * torch.log((1.0 - g) / (1.0 - p))).mean(dim=(-2, -1)).sum()


def stacked_permutations(perms: list, device) -> torch.Tensor:
    """Permutations (``[n]`` each, on the host from ``match_async`` or on ``device``) as one
    ``[L, n]`` LongTensor on ``device``: stacked where they are (on the host, pinned again when
    ``device`` is CUDA) and copied once without blocking, not one copy per layer."""
    perm = torch.stack(perms)
    if perm.device.type == "cpu" and torch.device(device).type == "cuda":
        perm = perm.pin_memory()
    return perm.to(device, non_blocking=True)


def graph_structure_loss(
    P: torch.Tensor,
    G,
    kind: str = "mse",
    matching: str = "hungarian",
    *,
    blas_threads: int | None = 1,
    **match_kwargs,
) -> torch.Tensor:
    """Graph Structure Regularizer: scalar loss between the matched permutation of P and G.

    P: ``[n, n]`` link probabilities (eq. 2), differentiable; G: ``[n, n]`` target
    (``nac.graphs.prior_target``; numpy array or tensor). ``perm = match_permutation(P, G,
    matching, **match_kwargs)`` (no gradient): ``"hungarian"`` (default) is the authors' one
    Hungarian step, ``"search"`` this project's ``closest_permutation`` (``match_kwargs`` are its
    settings). Then ``loss_from_permutation(P, G, perm, kind)``: ``"mse"`` (authors' default)
    or ``"kl"``. Raises ValueError for an unknown ``kind`` or ``matching``. ``blas_threads``:
    numpy's BLAS threads in the matching (``closest_permutation``; default 1, None: numpy's
    default), the same permutation either way.
    """
    if kind not in LOSS_KINDS:
        raise ValueError(f"unknown graph-structure loss kind {kind!r}; valid choices: {', '.join(LOSS_KINDS)}")
    G = torch.as_tensor(G).to(device=P.device, dtype=P.dtype)
    perm = match_permutation(P, G, matching, blas_threads=blas_threads, **match_kwargs)
    return loss_from_permutation(P, G, perm, kind)
