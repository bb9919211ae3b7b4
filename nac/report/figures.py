"""Figures of the image track: Figure 3 (graph priors and learned graphs), Figures 5a, 5b and
15 (module dropping), and learning curves. Each is saved as PNG and SVG."""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import networkx as nx
import numpy as np
import pandas as pd
import seaborn as sns

from nac.graphs import PRIORS, sample_prior_graph
from nac.pipeline.image import summarize
from nac.report.published import PRIOR_LABELS, RUN_LABELS
from nac.report.style import save


def draw_graph(ax, graph: nx.Graph, title: str, seed: int = 0) -> None:
    """Force-directed drawing; node colour = degree (as Figure 3)."""
    pos = nx.spring_layout(graph, seed=seed)
    degrees = np.array([d for _, d in graph.degree()])
    nx.draw_networkx_edges(graph, pos, ax=ax, alpha=0.35, width=0.6)
    nodes = nx.draw_networkx_nodes(graph, pos, ax=ax, node_size=28, node_color=degrees, cmap="viridis")
    plt.colorbar(nodes, ax=ax, fraction=0.046, pad=0.02, label="degree")
    ax.set_title(title, fontsize=10)
    ax.set_axis_off()


def learned_graph(P: np.ndarray, threshold: float = 0.5) -> nx.Graph:
    """The graph with an edge wherever the link probability exceeds ``threshold``."""
    A = (P > threshold) & ~np.eye(len(P), dtype=bool)
    g = nx.from_numpy_array(A.astype(int))
    return g


def figure3(learned: dict[str, np.ndarray], n: int, out_dir: str | Path, seed: int = 0) -> list[Path]:
    """Top: samples of the four priors (networkx); bottom: the graphs the trained NACs learned
    (edges where P > 0.5). ``learned`` maps prior name -> P ``[U, U]``."""
    fig, axes = plt.subplots(2, len(PRIORS), figsize=(4.2 * len(PRIORS), 7.6))
    for j, prior in enumerate(PRIORS):
        draw_graph(axes[0, j], sample_prior_graph(prior, n, seed=seed), f"{PRIOR_LABELS[prior]}: prior sample", seed)
        if prior in learned:
            P = learned[prior]
            draw_graph(axes[1, j], learned_graph(P), f"learned by NAC ({PRIOR_LABELS[prior]}), P > 0.5", seed)
        else:
            axes[1, j].set_axis_off()
    fig.suptitle(f"Figure 3: graph priors (top) and learned module graphs (bottom), {n} modules")
    return save(fig, out_dir, "figure3_graph_priors")


def _ci_lines(ax, df: pd.DataFrame, x: str, y: str, runs: list[str]) -> None:
    for run in runs:
        sub = df[df["run"] == run]
        stats = [(xv, summarize(g[y].tolist())) for xv, g in sub.groupby(x)]
        xs = np.array([s[0] for s in stats])
        mean = np.array([s[1]["mean"] for s in stats])
        ci = np.array([s[1]["ci95"] for s in stats])
        line, = ax.plot(xs, mean, marker="o", ms=3.5, label=RUN_LABELS.get(run, run))
        ax.fill_between(xs, mean - ci, mean + ci, alpha=0.2, color=line.get_color())


def figure5a(prune: pd.DataFrame, out_dir, runs: list[str]) -> list[Path]:
    fig, ax = plt.subplots(figsize=(5.6, 4))
    _ci_lines(ax, prune, "dropped", "acc1", runs)
    ax.set_xlabel("processor modules dropped (least connected first)")
    ax.set_ylabel("validation Acc@1 (%)")
    ax.set_title("Figure 5a: accuracy as modules are dropped (mean, 95% CI over seeds)", fontsize=10)
    ax.legend(fontsize=8)
    return save(fig, out_dir, "figure5a_prune_accuracy")


def figure5b(prune: pd.DataFrame, out_dir, runs: list[str], device_label: str) -> list[Path]:
    fig, ax = plt.subplots(figsize=(5.6, 4))
    speed = prune.dropna(subset=["images_per_s"])
    for run in runs:
        sub = speed[speed["run"] == run].sort_values("dropped")
        ax.plot(sub["dropped"], sub["images_per_s"], marker="o", ms=3.5, label=RUN_LABELS.get(run, run))
    ax.set_xlabel("processor modules dropped")
    ax.set_ylabel(f"inference throughput (images/s, {device_label})")
    ax.set_title("Figure 5b: inference speed as modules are dropped", fontsize=10)
    ax.legend(fontsize=8)
    return save(fig, out_dir, "figure5b_prune_throughput")


def figure15(prune: pd.DataFrame, out_dir, runs: list[str]) -> list[Path]:
    """Accuracy relative to the unpruned model, for every prior and Perceiver IO."""
    df = prune.copy()
    base = df[df["dropped"] == 0].set_index(["run", "seed"])["acc1"]
    df["relative_acc1"] = [100.0 * a / max(base[(r, s)], 1e-9) for r, s, a in zip(df["run"], df["seed"], df["acc1"])]
    fig, ax = plt.subplots(figsize=(5.6, 4))
    _ci_lines(ax, df, "dropped_fraction", "relative_acc1", runs)
    ax.axhline(97, ls="--", lw=0.8, color="grey")
    ax.text(0.01, 97.5, "-3%", color="grey", fontsize=8)
    ax.set_xlabel("fraction of processor modules dropped")
    ax.set_ylabel("Acc@1 relative to the full model (%)")
    ax.set_title("Figure 15: sparsification, NAC priors vs Perceiver IO", fontsize=10)
    ax.legend(fontsize=8)
    return save(fig, out_dir, "figure15_prune_relative")


def learning_curves(histories: dict[str, list[list[dict]]], out_dir) -> list[Path]:
    """Validation Acc@1 and training loss per epoch, mean over seeds, one line per ladder entry."""
    rows = [{"run": RUN_LABELS.get(run, run), "seed": i, **h} for run, hs in histories.items()
            for i, hist in enumerate(hs) for h in hist]
    df = pd.DataFrame(rows)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    sns.lineplot(df, x="epoch", y="val_acc1", hue="run", ax=axes[0], errorbar=None, marker="o", markersize=3)
    sns.lineplot(df, x="epoch", y="train_loss", hue="run", ax=axes[1], errorbar=None, legend=False)
    axes[0].set_ylabel("validation Acc@1 (%)")
    axes[1].set_ylabel("training loss")
    axes[0].legend(fontsize=7)
    fig.suptitle("Learning curves (mean over seeds)")
    return save(fig, out_dir, "learning_curves_image")
