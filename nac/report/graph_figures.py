"""Figures of circuits: Figure 3 (graph priors and the graphs the NACs learned) and Figure 6 (the
circuits the conditional NAC designs per NLVR sentence). Each is saved as PNG and SVG."""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib.pyplot as plt
import networkx as nx
import numpy as np
import pandas as pd
import seaborn as sns
from scipy.cluster.hierarchy import leaves_list, linkage
from scipy.spatial.distance import squareform

from nac.graphs import PRIORS, sample_prior_graph
from nac.report.published import PRIOR_LABELS
from nac.report.style import save


def draw_graph(ax, graph: nx.Graph, title: str, seed: int = 0) -> None:
    """Force-directed drawing; node colour = degree (as Figure 3). A graph without edges has no degree
    to colour: its nodes are drawn grey, without a colour bar, and the panel says so."""
    pos = nx.spring_layout(graph, seed=seed)
    ax.set_title(title, fontsize=10)
    ax.set_axis_off()
    if graph.number_of_edges() == 0:
        nx.draw_networkx_nodes(graph, pos, ax=ax, node_size=28, node_color="lightgrey")
        ax.text(0.5, 0.5, "no link kept", transform=ax.transAxes, ha="center", va="center", fontsize=10)
        return
    degrees = np.array([d for _, d in graph.degree()])
    nx.draw_networkx_edges(graph, pos, ax=ax, alpha=0.35, width=0.6)
    nodes = nx.draw_networkx_nodes(graph, pos, ax=ax, node_size=28, node_color=degrees, cmap="viridis")
    plt.colorbar(nodes, ax=ax, fraction=0.046, pad=0.02, label="degree")


def learned_graph(P: np.ndarray, threshold: float = 0.0) -> nx.Graph:
    """The graph with an edge wherever the link probability exceeds ``threshold`` (default: every
    link the truncated kernel keeps, ``P > 0``)."""
    A = (P > threshold) & ~np.eye(len(P), dtype=bool)
    g = nx.from_numpy_array(A.astype(int))
    return g


def figure3(
    learned: dict[str, np.ndarray], n: int, out_dir: str | Path, seed: int = 0, caption: str = ""
) -> list[Path]:
    """Top: samples of the four priors (networkx); bottom: the graphs the trained NACs learned
    (edges where P > 0: the links the truncated kernel keeps). ``learned`` maps prior name -> P ``[U, U]``;
    a prior without one says so in its panel. ``caption``: profile, seeds and model version."""
    fig, axes = plt.subplots(2, len(PRIORS), figsize=(4.2 * len(PRIORS), 7.6))
    for j, prior in enumerate(PRIORS):
        draw_graph(axes[0, j], sample_prior_graph(prior, n, seed=seed), f"{PRIOR_LABELS[prior]}: prior sample", seed)
        if prior in learned:
            P = learned[prior]
            off = ~np.eye(len(P), dtype=bool)
            draw_graph(
                axes[1, j],
                learned_graph(P),
                f"learned by NAC ({PRIOR_LABELS[prior]}): P > 0\n"
                f"{100 * (P[off] == 0).mean():.0f}% of links cut, mean P {P[off].mean():.3f}",
                seed,
            )
        else:
            axes[1, j].set_axis_off()
            axes[1, j].text(
                0.5, 0.5, f"NAC ({PRIOR_LABELS[prior]}):\nno checkpoint here", ha="center", va="center", fontsize=10
            )
    fig.suptitle(f"Figure 3: graph priors (top) and learned module graphs (bottom), {n} modules\n{caption}")
    return save(fig, out_dir, "figure3_graph_priors")


def circuit_graph(P: np.ndarray, threshold: float, bandwidth: float) -> nx.Graph:
    """Edges where ``P_ij > threshold``, weighted by the inverse signature distance
    ``1 / (1 - cos) = 1 / (-bandwidth log P_ij)`` (the spring layout's attraction, as in Figure 6)."""
    dist = -bandwidth * np.log(np.clip(P, 1e-12, 1.0))
    g = nx.Graph()
    g.add_nodes_from(range(len(P)))
    rows, cols = np.nonzero(np.tril(P > threshold, k=-1))
    g.add_weighted_edges_from((int(i), int(j), 1.0 / max(float(dist[i, j]), 1e-6)) for i, j in zip(rows, cols))
    return g


def _module_order(Ps: list[np.ndarray]) -> np.ndarray:
    """One module order for every drawn matrix: average-linkage clustering of the signature
    distances ``-log P`` averaged over the shown sentences (modules that tend to link sit together)."""
    D = np.mean([-np.log(np.clip(P, 1e-6, 1.0)) for P in Ps], axis=0)
    D = (D + D.T) / 2
    np.fill_diagonal(D, 0.0)
    return leaves_list(linkage(squareform(D, checks=False), "average")) if len(D) > 2 else np.arange(len(D))


def figure6(embedding: pd.DataFrame, examples: dict, out_dir, seed: int = 0, caption: str = "") -> list[Path]:
    """Left: t-SNE of the link-probability matrices of the validation sentences, coloured by
    reasoning type. Right, one column per typical sentence of a type (at most 4): top, its
    circuit (edges where ``P > threshold``, force-directed; node colour = module index, the same in
    every drawing); bottom, the same graph as an adjacency matrix with the modules in one order for
    all sentences (``_module_order``), so that the sentences' graphs can be compared link by link.
    Titles give each graph's link density."""
    shown = [ex["reasoning_type"] for ex in examples["examples"]]
    types = list(dict.fromkeys(shown + list(embedding["reasoning_type"])))  # the paper's order where given
    exs = examples["examples"][:4]
    cols = max(len(exs), 1)
    fig = plt.figure(figsize=(5.5 + 3.4 * cols, 7.5))
    grid = fig.add_gridspec(2, 1 + cols, width_ratios=[1.6] + [1] * cols, height_ratios=[1.25, 1])
    ax = fig.add_subplot(grid[:, 0])
    sns.scatterplot(
        embedding.assign(type=embedding["reasoning_type"].str.replace("_", " ")),
        x="x",
        y="y",
        hue="type",
        hue_order=[t.replace("_", " ") for t in types],
        s=18,
        ax=ax,
    )
    ax.set(xlabel="t-SNE 1", ylabel="t-SNE 2", title="t-SNE of P (PCA first), by reasoning type")
    ax.legend(fontsize=8, title=None)
    threshold, bandwidth = examples["threshold"], examples["bandwidth"]
    cmap = plt.get_cmap("turbo")
    Ps = [np.asarray(ex["P"], dtype=float) for ex in exs]
    order = _module_order(Ps) if Ps else np.arange(0)
    graph_axes = []
    for k, (ex, P) in enumerate(zip(exs, Ps)):
        g = circuit_graph(P, threshold, bandwidth)
        U = len(P)
        density = 2 * g.number_of_edges() / max(U * (U - 1), 1)
        axg = fig.add_subplot(grid[0, 1 + k])
        graph_axes.append(axg)
        pos = nx.spring_layout(g, weight="weight", seed=seed)
        nx.draw_networkx_edges(g, pos, ax=axg, alpha=0.3, width=0.5)
        nx.draw_networkx_nodes(
            g, pos, ax=axg, node_size=max(8.0, 600.0 / U), node_color=[cmap(i / max(U - 1, 1)) for i in g.nodes]
        )
        axg.set_title(
            f"{ex['reasoning_type'].replace('_', ' ')}: {100 * density:.0f}% of links\n"
            + textwrap.fill(ex["sentence"], 42),
            fontsize=8,
        )
        axg.set_axis_off()
        axm = fig.add_subplot(grid[1, 1 + k])
        A = (P > threshold) & ~np.eye(U, dtype=bool)
        axm.imshow(A[np.ix_(order, order)], cmap="Greys", vmin=0, vmax=1, interpolation="nearest")
        axm.set(xticks=[], yticks=[], xlabel="module (common order)" if k == 0 else "")
        axm.set_title(f"P > {threshold}", fontsize=8)
        axm.grid(False)
    U = len(Ps[0]) if Ps else 1
    bar = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(0, max(U - 1, 1)))
    if graph_axes:
        fig.colorbar(bar, ax=graph_axes, fraction=0.02, pad=0.01, label="module index")
    fig.suptitle(
        f"Figure 6: circuits the conditional NAC designs per sentence (edges where P > {threshold})\n{caption}", y=1.05
    )
    return save(fig, out_dir, "figure6_nlvr_circuits")
