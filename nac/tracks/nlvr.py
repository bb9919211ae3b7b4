"""The NLVR analysis (Figure 6): what the conditional circuit generator does with the sentence.

For every validation sentence the generator's link-probability matrix ``P`` (eq. 2) is computed;
its strict lower triangle is flattened, reduced by PCA to (at most) 64 dimensions and embedded in
2-D by t-SNE, coloured by reasoning type (the paper's left panel). The right panel draws ``P`` of
one typical sentence per type as a graph (an edge where ``P > 0.5``, force-directed layout with
attraction inversely proportional to the signature distance ``-bandwidth * log P``).

Beyond the paper's picture, two numbers say how much the reasoning type is encoded in ``P``:
the k-NN accuracy of predicting the type from the PCA features (stratified cross-validation; set
beside the majority-class rate and the same classifier on shuffled types) and the silhouette
score of the types in that space (0 = no structure). The spread of ``P`` across sentences (the
paper's "diversity" observation) is the mean over matrix entries of the standard deviation over
sentences.

The paper's "two large cliques" is measured on the 0.5-cut graphs against the same graphs with
their links rewired by degree-preserving swaps (``clique_measures``): modularity and the rate of
exactly two large clique-like communities, paired by sentence.

Control: the same measures for a freshly initialised model of the same configuration. ``P`` is a
function of the sentence, so some type structure is there before any training; only the excess
over this control is learned.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
import pandas as pd
import torch
from networkx.algorithms.community import greedy_modularity_communities, modularity
from sklearn.decomposition import PCA
from sklearn.manifold import TSNE
from sklearn.metrics import silhouette_score
from sklearn.model_selection import StratifiedKFold, cross_val_score
from sklearn.neighbors import KNeighborsClassifier
from torch.utils.data import DataLoader

from nac.checkpoint_io import load_model
from nac.pipeline import schema_models as schema
from nac.pipeline.datasets import builder
from nac.pipeline.io import write_json
from nac.pipeline.paths import MODELS, track_checkpoint
from nac.registry import build_model
from nac.stats import t_half_width
from nac.tracks.common import reasoning_types, sentences
from nac.training.distributed import resolve_device


@torch.no_grad()
def link_matrices(
    model: torch.nn.Module, data, device: torch.device | str = "cpu", batch_size: int = 256
) -> np.ndarray:
    """``P`` ``[N, U, U]`` (float32) of the conditional circuit generator for every item of ``data``."""
    device = torch.device(device)
    model.eval().to(device)
    out = []
    for batch in DataLoader(data, batch_size=batch_size, shuffle=False):
        cond = batch["cond"].to(device)
        mask = batch["cond_mask"].to(device).bool() if "cond_mask" in batch else None
        out.append(model.graph.link_probabilities(model.design(cond, mask)).float().cpu())
    return torch.cat(out).numpy()


def lower_triangle(P: np.ndarray) -> np.ndarray:
    """Strict lower triangle of each ``[U, U]`` matrix, flattened: ``[N, U (U - 1) / 2]``."""
    rows, cols = np.tril_indices(P.shape[-1], k=-1)
    return P[:, rows, cols]


def analyse(
    P: np.ndarray,
    types: np.ndarray,
    seed: int = 0,
    pca_dim: int = 64,
    knn_k: int = 5,
    folds: int = 5,
    shuffles: int = 5,
    perplexity: float = 30.0,
    embed: bool = True,
    clique_sentences: int = 200,
) -> dict[str, Any]:
    """PCA -> t-SNE embedding of the flattened ``P`` and the structure measures (module docstring);
    the clique measures on at most ``clique_sentences`` sentences (``clique_measures``).

    Returns ``{"embedding": [N, 2] (None without ``embed``), "pca": [N, d], **measures}``.
    """

    types = np.asarray(types)
    X = lower_triangle(P).astype(np.float64)
    n = len(X)
    dim = int(min(pca_dim, n - 1, X.shape[1]))
    pca = PCA(n_components=dim, random_state=seed)
    Z = pca.fit_transform(X)
    emb = (
        TSNE(
            n_components=2, perplexity=float(min(perplexity, (n - 1) / 3)), init="pca", random_state=seed
        ).fit_transform(Z)
        if embed
        else None
    )
    n_folds = int(min(folds, np.bincount(types).min())) if len(np.unique(types)) > 1 else 0
    res: dict[str, Any] = {
        "n": int(n),
        "pca_dim": dim,
        "pca_explained": float(pca.explained_variance_ratio_.sum()),
        "knn_k": knn_k,
        "folds": n_folds,
        "chance": float(100.0 * np.bincount(types).max() / n),
        "p_spread": float(P.std(axis=0).mean()),
        "p_mean": float(P.mean()),
        **cut_graph_measures(P),
        **clique_measures(P, seed=seed, max_sentences=clique_sentences),
    }
    if n_folds >= 2:
        cv = StratifiedKFold(n_splits=n_folds, shuffle=True, random_state=seed)
        knn = KNeighborsClassifier(n_neighbors=knn_k)
        scores = 100.0 * cross_val_score(knn, Z, types, cv=cv)
        rng = np.random.default_rng(seed)
        shuffled = [100.0 * cross_val_score(knn, Z, rng.permutation(types), cv=cv).mean() for _ in range(shuffles)]
        res.update(
            knn_accuracy=float(scores.mean()),
            knn_accuracy_ci95=t_half_width(scores),
            knn_shuffled=float(np.mean(shuffled)),
            knn_shuffled_ci95=t_half_width(shuffled),
            silhouette=float(silhouette_score(Z, types)),
            silhouette_shuffled=float(np.mean([silhouette_score(Z, rng.permutation(types)) for _ in range(shuffles)])),
        )
    res["embedding"], res["pca"] = emb, Z
    return res


def cut_graph_measures(P: np.ndarray, cut: float = 0.5) -> dict[str, float]:
    """The sentence graphs at the paper's 0.5 cut (``P > cut`` off the diagonal), ``P`` ``[N, U, U]``:
    the mean link density, the fraction of sentences whose graph is complete, and the fraction of
    sentences whose graph differs from the most common one."""
    U = P.shape[-1]
    off = ~np.eye(U, dtype=bool)
    A = P[:, off] > cut  # [N, U(U-1)]
    _, counts = np.unique(A, axis=0, return_counts=True)
    return {
        "cut_density": float(A.mean()),
        "cut_complete_fraction": float(A.all(axis=1).mean()),
        "cut_distinct_fraction": float(1.0 - counts.max() / len(A)),
    }


# "Two large cliques" (section 4.4): a community of the 0.5-cut graph (greedy modularity) is
# large when it holds at least LARGE_FRACTION of the modules, clique-like when at least
# CLIQUE_DENSITY of its possible links are present.
LARGE_FRACTION = 0.2
CLIQUE_DENSITY = 0.8


def community_structure(A: np.ndarray) -> tuple[float, int]:
    """Modularity of a greedy-modularity partition of the undirected graph with adjacency ``A``
    ``[U, U]`` (bool, symmetric, no self-loops) and the number of its large clique-like communities
    (``LARGE_FRACTION``, ``CLIQUE_DENSITY``). A graph with no links has modularity 0 and none."""

    G = nx.from_numpy_array(A.astype(np.int8))
    if G.number_of_edges() == 0:
        return 0.0, 0
    parts = greedy_modularity_communities(G)
    large = 0
    for c in parts:
        k = len(c)
        if k >= max(2, LARGE_FRACTION * len(A)) and G.subgraph(c).number_of_edges() >= CLIQUE_DENSITY * k * (k - 1) / 2:
            large += 1
    return float(modularity(G, parts)), large


def degree_preserving_shuffle(A: np.ndarray, seed: int, swaps_per_edge: int = 10) -> np.ndarray:
    """The control graph: ``A`` with its links rewired by double edge swaps (``10 x`` links
    attempted, at most 10 tries per swap), which keeps every module's degree and destroys any other
    structure. A graph where no swap is possible (complete, or too few links) comes back unchanged."""

    G = nx.from_numpy_array(A.astype(np.int8))
    U, E = len(A), G.number_of_edges()
    if 2 <= E < U * (U - 1) // 2:
        try:
            nx.double_edge_swap(G, nswap=swaps_per_edge * E, max_tries=10 * swaps_per_edge * E, seed=seed)
        except (nx.NetworkXAlgorithmError, nx.NetworkXError):
            pass  # fewer swaps than asked (a dense graph): the ones done stay
    return nx.to_numpy_array(G, nodelist=range(len(A)), dtype=np.int8).astype(bool)


def clique_measures(
    P: np.ndarray, seed: int = 0, cut: float = 0.5, max_sentences: int = 200, shuffles: int = 1
) -> dict[str, float]:
    """The paper's "two large cliques, with nodes that bridge them", judged against graphs of the
    same degrees: for (at most ``max_sentences``, drawn with ``seed``) sentence graphs ``P > cut``
    (``P`` ``[N, U, U]``), the modularity and whether the graph has exactly two large clique-like
    communities, each minus the mean over ``shuffles`` degree-preserving shuffles of the same graph
    (``degree_preserving_shuffle``). The differences are paired by sentence; 95% t CIs.

    Returns ``clique_n``, ``clique_modularity`` / ``_null`` / ``_gap`` / ``_gap_ci95``,
    ``clique_two_fraction`` / ``_null`` / ``_gap`` / ``_gap_ci95`` (fractions, the gap in
    percentage points) and ``clique_large_mean`` (large clique-like communities per graph)."""
    rng = np.random.default_rng(seed)
    idx = np.arange(len(P)) if len(P) <= max_sentences else np.sort(rng.choice(len(P), max_sentences, replace=False))
    off = ~np.eye(P.shape[-1], dtype=bool)
    q, q0, two, two0, large = [], [], [], [], []
    for i in idx:
        A = (P[i] > cut) & off
        A = A | A.T  # P is symmetric; guard against rounding
        qi, li = community_structure(A)
        null = [
            community_structure(degree_preserving_shuffle(A, seed=int(rng.integers(2**31)))) for _ in range(shuffles)
        ]
        q.append(qi)
        q0.append(np.mean([n[0] for n in null]))
        two.append(float(li == 2))
        two0.append(np.mean([float(n[1] == 2) for n in null]))
        large.append(li)
    q, q0, two, two0 = map(np.asarray, (q, q0, two, two0))
    return {
        "clique_n": int(len(idx)),
        "clique_shuffles": int(shuffles),
        "clique_modularity": float(q.mean()),
        "clique_modularity_null": float(q0.mean()),
        "clique_modularity_gap": float((q - q0).mean()),
        "clique_modularity_gap_ci95": t_half_width(q - q0),
        "clique_two_fraction": float(two.mean()),
        "clique_two_fraction_null": float(two0.mean()),
        "clique_two_gap": float(100.0 * (two - two0).mean()),
        "clique_two_gap_ci95": t_half_width(100.0 * (two - two0)),
        "clique_large_mean": float(np.mean(large)),
    }


def typical_examples(Z: np.ndarray, types: np.ndarray) -> dict[int, int]:
    """Per reasoning type, the index of its medoid-like item (closest to the type's mean in ``Z``)."""
    out = {}
    for t in np.unique(types):
        idx = np.flatnonzero(types == t)
        centre = Z[idx].mean(axis=0)
        out[int(t)] = int(idx[np.argmin(((Z[idx] - centre) ** 2).sum(axis=1))])
    return out


def graph_of(P: np.ndarray, threshold: float = 0.5):
    """networkx graph of one ``P``: an edge ``i - j`` where ``P_ij > threshold`` (``i != j``),
    weighted by ``1 / (1 - cos)`` (inverse signature distance) for the force-directed layout."""

    U = P.shape[0]
    G = nx.Graph()
    G.add_nodes_from(range(U))
    dist = -np.log(np.clip(P, 1e-12, 1.0))
    for i in range(U):
        for j in range(i):
            if P[i, j] > threshold:
                G.add_edge(i, j, weight=float(1.0 / max(dist[i, j], 1e-3)))
    return G


def run_analysis(
    sec: schema.Nlvr,
    out_dir: str = "metrics/nlvr",
    progress: bool = True,
    *,
    data: dict,
    seeds: list[int],
    device: str = "auto",
    models: str | Path = MODELS,
) -> dict[str, Any]:
    """The stage: load the analysed model, compute ``P`` on the validation split, analyse, write
    ``analysis.json`` (measures), ``embedding.csv`` (t-SNE points with type and sentence) and
    ``examples.json`` (``P`` of one typical sentence per type). The model: ``<models>/nlvr/<run>-<seed>.pt``.
    ``sec``: the ``nlvr`` section; ``data``, ``seeds``, ``device``: those sections of params.yaml."""
    cfg = sec.analysis.model_dump(exclude_unset=True) if sec.analysis else {}
    run, seed = cfg.pop("run", "conditional"), int(cfg.pop("seed", seeds[0]))
    split = sec.val_split
    device = resolve_device(device)
    model = load_model(track_checkpoint("nlvr", run, seed, models), map_location=device)
    if model.config.generator != "conditional":
        raise ValueError(f"nlvr.analysis.run={run!r} has no conditional circuit generator; analyse 'conditional'")
    ds = builder(data, sec.dataset)
    data = ds.load(split)
    types, names = reasoning_types(ds, split)
    texts = sentences(ds, split)
    bs = sec.train.eval_batch_size
    P = link_matrices(model, data, device, bs)
    res = analyse(P, types, seed=seed, **cfg)
    emb, Z = res.pop("embedding"), res.pop("pca")
    torch.manual_seed(seed + 10_000)
    fresh = build_model(model.config)
    control = analyse(link_matrices(fresh, data, device, bs), types, seed=seed, embed=False, **cfg)
    res["untrained"] = {
        k: control[k]
        for k in (
            "knn_accuracy",
            "knn_accuracy_ci95",
            "knn_shuffled",
            "silhouette",
            "silhouette_shuffled",
            "p_spread",
            "p_mean",
            "cut_density",
            "cut_complete_fraction",
            "cut_distinct_fraction",
            "clique_modularity_gap",
            "clique_two_fraction",
        )
        if k in control
    }
    res.update(
        run=run,
        seed=seed,
        split=split,
        reasoning_types=names,
        modules=int(P.shape[-1]),
        bandwidth=model.graph.bandwidth(),
        count_by_type={names[int(t)]: int((types == t).sum()) for t in np.unique(types)},
    )
    out = Path(out_dir)
    write_json(out / "analysis.json", res)
    labels = (
        np.asarray(data.arrays["labels"])
        if isinstance(getattr(data, "arrays", None), dict) and "labels" in data.arrays
        else None
    )
    frame = pd.DataFrame(
        {"x": emb[:, 0], "y": emb[:, 1], "reasoning_type": [names[int(t)] for t in types], "sentence": texts}
    )
    if labels is not None:
        frame["label"] = labels
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "embedding.csv", index=False)
    examples = [
        {"reasoning_type": names[t], "index": i, "sentence": texts[i], "P": np.round(P[i], 5).tolist()}
        for t, i in typical_examples(Z, types).items()
    ]
    write_json(out / "examples.json", {"threshold": 0.5, "bandwidth": model.graph.bandwidth(), "examples": examples})
    return res
