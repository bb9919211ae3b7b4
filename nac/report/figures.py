"""Figures: Figure 3 (graph priors and learned graphs), Figure 4 (few-shot adaptation), Figures
5a, 5b and 15 (module dropping), Figure 6 (NLVR circuits) and learning curves. Each is saved as
PNG and SVG."""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib.pyplot as plt
import networkx as nx
import numpy as np
import pandas as pd
import seaborn as sns

from nac.graphs import PRIORS, sample_prior_graph
from nac.report.published import PRIOR_LABELS, RUN_LABELS
from nac.report.style import legend_outside, save, series_style
from nac.report.tables import random_order_mean
from nac.stats import summarize


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


def _ci_lines(
    ax,
    df: pd.DataFrame,
    x: str,
    y: str,
    runs: list[str],
    labels: dict[str, str] = RUN_LABELS,
    styles: dict[str, dict] | None = None,
) -> None:
    """One line per run: mean of ``y`` per ``x`` with a Student-t 95% CI band; ``styles`` (run ->
    ``ax.plot`` keywords, e.g. marker and linestyle) overrides the default circle markers."""
    for run in runs:
        sub = df[df["run"] == run]
        stats = [(xv, summarize(g[y].tolist())) for xv, g in sub.groupby(x)]
        xs = np.array([s[0] for s in stats])
        mean = np.array([s[1]["mean"] for s in stats])
        ci = np.array([s[1]["ci95"] for s in stats])
        (line,) = ax.plot(
            xs, mean, **{"ms": 3.5, **series_style(run), **(styles or {}).get(run, {})}, label=labels.get(run, run)
        )
        ax.fill_between(xs, mean - ci, mean + ci, alpha=0.2, color=line.get_color())


def _with_random_control(prune: pd.DataFrame, runs: list[str]) -> tuple[pd.DataFrame, list[str], dict[str, str]]:
    """The connectivity-order rows plus, per run, the random-order control (orders averaged within
    a seed) as the run ``<run>|random``; returns (rows, runs to draw, labels)."""
    if "order" not in prune:
        return prune, runs, dict(RUN_LABELS)
    conn = prune[prune["order"] == "connectivity"]
    rnd = random_order_mean(prune)
    rnd = rnd.assign(run=rnd["run"] + "|random")
    labels = dict(RUN_LABELS) | {f"{r}|random": f"{RUN_LABELS.get(r, r)}, random order" for r in runs}
    drawn = runs + [f"{r}|random" for r in runs if f"{r}|random" in set(rnd["run"])]
    return pd.concat([conn, rnd], ignore_index=True), drawn, labels


def _loss_vs_full(prune: pd.DataFrame) -> pd.DataFrame:
    """Connectivity-order rows with ``loss``: Acc@1 minus the same run's and seed's Acc@1 with nothing
    dropped (paired by seed: the seed-to-seed spread of the full models drops out)."""
    conn = prune[prune["order"] == "connectivity"] if "order" in prune else prune
    full = conn[conn["dropped"] == 0].set_index(["run", "seed"])["acc1"]
    return conn.assign(loss=[a - full[(r, s)] for r, s, a in zip(conn["run"], conn["seed"], conn["acc1"])])


def figure5a(prune: pd.DataFrame, out_dir, runs: list[str], head: str = "", caption: str = "") -> list[Path]:
    """Left: Acc@1 change against the undropped model (paired by seed, mean and 95% CI over seeds) of
    every pruned model as the least connected modules are dropped, with the claim's 3-point loss
    line. Right: the difference the claim ``prune_vs_pio`` judges, ``head`` − Perceiver IO in that
    change (paired by seed, 95% CI), with 0 drawn."""
    df = _loss_vs_full(prune)
    fig, (ax, ax_d) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"wspace": 0.3})
    _ci_lines(ax, df, "dropped_fraction", "loss", runs)
    ax.axhline(-3.0, ls="--", lw=1.0, color="black", label="3-point loss (claim)")
    ax.axvline(0.8, ls=":", lw=0.8, color="grey", label="80% dropped (claim)")
    ax.set(xlabel="fraction of processor modules dropped (least connected first)", ylabel="Acc@1 − undropped (points)")
    ax.set_title("each model against its undropped self (mean, 95% CI over seeds)", fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, frameon=False)
    if head in runs and "perceiver_io" in runs:
        a = df[df["run"] == head].set_index(["dropped_fraction", "seed"])["loss"]
        b = df[df["run"] == "perceiver_io"].set_index(["dropped_fraction", "seed"])["loss"]
        diff = (a - b).dropna().reset_index().assign(run=f"{head}−perceiver_io")
        stats = [(x, summarize(g["loss"].tolist())) for x, g in diff.groupby("dropped_fraction")]
        xs = np.array([x for x, _ in stats])
        mean = np.array([st["mean"] for _, st in stats])
        ci = np.array([st["ci95"] for _, st in stats])
        (line,) = ax_d.plot(
            xs, mean, **{**series_style(head), "ms": 3.5}, label=f"{RUN_LABELS.get(head, head)} − Perceiver IO"
        )
        ax_d.fill_between(xs, mean - ci, mean + ci, alpha=0.2, color=line.get_color())
        ax_d.axhline(0.0, color="black", lw=0.8)
        ax_d.legend(fontsize=7, loc="lower left")
    ax_d.set(xlabel="fraction of processor modules dropped", ylabel="difference in Acc@1 change (points)")
    ax_d.set_title("NAC − Perceiver IO, paired by seed (95% CI)", fontsize=9)
    fig.suptitle(f"Figure 5a: accuracy as modules are dropped\n{caption}", fontsize=10, y=1.04)
    return save(fig, out_dir, "figure5a_prune_accuracy")


def figure5b(prune: pd.DataFrame, out_dir, runs: list[str], device_label: str, caption: str = "") -> list[Path]:
    """Throughput ratio to the same model undropped (the claim ``prune_speedup`` is a ratio, ~8×): each
    timed repeat at a fraction over the mean of the undropped model's repeats, mean and 95% CI over
    the repeats (first seed, connectivity order); log axis, 1× and the claim's 8× drawn."""
    fig, ax = plt.subplots(figsize=(6.4, 4))
    speed = prune.dropna(subset=["images_per_s"])
    speed = speed[speed["order"] == "connectivity"] if "order" in speed else speed
    as_list = lambda v: [float(x) for x in v] if isinstance(v, (list, tuple, np.ndarray)) else [float(v)]  # noqa: E731
    for run in runs:
        sub = speed[speed["run"] == run].sort_values("dropped")
        if sub.empty:
            continue
        full = np.mean(as_list(sub[sub["dropped"] == 0]["images_per_s"].iloc[0]))
        stats = [summarize([x / full for x in as_list(v)]) for v in sub["images_per_s"]]
        mean = np.array([st["mean"] for st in stats])
        ci = np.array([st["ci95"] for st in stats])
        (line,) = ax.plot(sub["dropped_fraction"], mean, ms=3.5, **series_style(run), label=RUN_LABELS.get(run, run))
        ax.fill_between(sub["dropped_fraction"], mean - ci, mean + ci, alpha=0.2, color=line.get_color())
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.axhline(8.0, ls="--", lw=1.0, color="black", label="~8× (claim)")
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}×"))
    ax.set_xlabel("fraction of processor modules dropped")
    ax.set_ylabel(f"throughput ÷ undropped model's ({device_label})")
    ax.set_title(
        f"Figure 5b: inference speed-up as modules are dropped\n(mean, 95% CI over timed repeats)\n{caption}",
        fontsize=9,
    )
    legend_outside(ax)
    return save(fig, out_dir, "figure5b_prune_throughput")


def figure15(prune: pd.DataFrame, out_dir, runs: list[str], caption: str = "") -> list[Path]:
    """Accuracy relative to the undropped model, one panel per model: connectivity order (the run's
    colour, solid) and the random-order control (black, dashed), mean and 95% CI over seeds; the
    claim's 3-point loss drawn at 97% of the full model's mean Acc@1 (per panel: 3 points is a
    different share of each model's accuracy)."""
    df, _, _ = _with_random_control(prune, runs)
    df = df.copy()
    base = df[(df["dropped"] == 0) & ~df["run"].str.endswith("|random")].set_index(["run", "seed"])["acc1"]
    df["relative_acc1"] = [
        100.0 * a / max(base[(r.split("|")[0], s)], 1e-9) for r, s, a in zip(df["run"], df["seed"], df["acc1"])
    ]
    cols = min(4, len(runs))
    rows = -(-len(runs) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.3 * cols, 2.9 * rows), sharex=True, sharey=True, squeeze=False)
    for ax, run in zip(axes.flat, runs):
        styles = {f"{run}|random": {"color": "black", "marker": "", "ls": "--"}}
        names = {run: "connectivity order", f"{run}|random": "random order"}
        _ci_lines(ax, df, "dropped_fraction", "relative_acc1", [run, f"{run}|random"], names, styles)
        full = base.xs(run, level="run").mean()
        ax.axhline(100.0 * (full - 3.0) / full, ls=":", lw=1.0, color="black", label="3-point loss (claim)")
        ax.set_title(RUN_LABELS.get(run, run), fontsize=8)
        ax.legend(fontsize=6, loc="lower left")
    for ax in axes.flat[len(runs) :]:
        ax.set_axis_off()
    for ax in axes[-1]:
        ax.set_xlabel("fraction dropped")
    for ax in axes[:, 0]:
        ax.set_ylabel("Acc@1 ÷ undropped (%)")
    fig.suptitle(
        f"Figure 15: accuracy relative to the undropped model (mean, 95% CI over seeds)\n{caption}", fontsize=10
    )
    return save(fig, out_dir, "figure15_prune_relative")


# Table 1's learning curves in panels of at most 6 series: the ablation ladder with the headline NAC's
# controls, the four priors, the baselines (each against Perceiver IO); runs of none go to the last.
CURVE_PANELS = (
    (
        "ablation ladder and controls",
        ("perceiver_io", "modfc", "frozen_graph", "nac-scale_free", "-noreg", "-randinit"),
    ),
    (
        "graph priors",
        ("perceiver_io", "nac-scale_free", "nac-planted_partition", "nac-ring_of_cliques", "nac-erdos_renyi"),
    ),
    ("baselines", ("perceiver_io", "neural_interpreter", "modular_network")),
)


def _curve_panels(runs: list[str]) -> list[tuple[str, list[str]]]:
    panels, placed = [], set()
    for title, names in CURVE_PANELS:
        got = [r for r in runs if r in names or any(n.startswith("-") and r.endswith(n) for n in names)]
        placed.update(got)
        if len(got) > 1 or (got and got != ["perceiver_io"]):
            panels.append((title, got))
    rest = [r for r in runs if r not in placed]
    for k in range(0, len(rest), 6):
        panels.append(("other runs", rest[k : k + 6]))
    return panels


def learning_curves(histories: dict[str, list[list[dict]]], out_dir, caption: str = "") -> list[Path]:
    """Validation Acc@1 per epoch of Table 1's runs, mean and 95% CI over seeds, in panels of at most
    six series (``CURVE_PANELS``: the ladder and controls, the priors, the baselines)."""
    df = pd.DataFrame([{"run": run, **e} for run, hs in histories.items() for h in hs for e in h])
    panels = _curve_panels([r for r in histories if any(histories[r])])
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4.6), sharey=True, squeeze=False)
    for ax, (title, runs) in zip(axes[0], panels):
        _ci_lines(ax, df, "epoch", "val_acc1", runs)
        ax.set(xlabel="epoch", title=title)
        ax.title.set_fontsize(9)
        ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
    axes[0, 0].set_ylabel("validation Acc@1 (%)")
    fig.suptitle(f"Table 1's learning curves (mean, 95% CI over seeds)\n{caption}", fontsize=10, y=1.05)
    return save(fig, out_dir, "learning_curves_image")


FIGURE4_BASELINE_STYLES = {
    "neural_interpreter": {"marker": "s", "ls": "-."},
    "modular_network": {"marker": "^", "ls": ":"},
}


def figure4(
    stats: dict[str, pd.DataFrame], shots: list[int], ways: int, labels: dict[str, str], out_dir, caption: str = ""
) -> list[Path]:
    """Few-shot adaptation, one column per target: top, query Acc@1 against shots per class (log2
    axis), NAC and Perceiver IO with 95% CI bands over episodes, and the baselines (dash-dot /
    dotted, square / triangle markers; labels from ``RUN_LABELS`` unless ``labels`` names them)
    where the rows have them; bottom, the difference the claim judges, NAC − Perceiver IO paired by
    episode (95% CI), with 0 and the paper's low-shot regime (1-4 shots) marked. ``stats``: target ->
    the episode rows (``shots, episode, run, acc1``)."""
    fig, axes = plt.subplots(
        2, len(stats), figsize=(5 * len(stats), 6.6), squeeze=False, gridspec_kw={"height_ratios": [1.4, 1]}
    )
    labels = {**RUN_LABELS, **labels}
    for k, (target, df) in enumerate(stats.items()):
        ax, ax_d = axes[0, k], axes[1, k]
        baselines = [b for b in FIGURE4_BASELINE_STYLES if b in set(df["run"])]
        _ci_lines(ax, df, "shots", "acc1", ["perceiver_io", "nac", *baselines], labels, FIGURE4_BASELINE_STYLES)
        ax.axhline(100.0 / ways, ls="--", lw=0.8, color="grey", label=f"chance ({ways}-way)")
        ax.set_ylabel("query Acc@1 (%)")
        ax.set_title(f"{target}: {ways}-way episodes", fontsize=10)
        pair = df[df["run"].isin(["nac", "perceiver_io"])].pivot_table(
            index=["shots", "episode"], columns="run", values="acc1"
        )
        if {"nac", "perceiver_io"} <= set(pair.columns):
            diff = (pair["nac"] - pair["perceiver_io"]).rename("d").reset_index().assign(run="nac")
            _ci_lines(ax_d, diff, "shots", "d", ["nac"], {"nac": f"{labels['nac']} − {labels['perceiver_io']}"})
        ax_d.axhline(0.0, color="black", lw=0.8)
        ax_d.axvspan(0.8, 4.5, color="grey", alpha=0.12, lw=0, label="low-shot regime (claim: 1-4 shots)")
        ax_d.set_ylabel("NAC − Perceiver IO (points)")
        for a in (ax, ax_d):
            a.set_xscale("log", base=2)
            a.set_xticks(shots, [str(s) for s in shots])
            a.minorticks_off()
        ax_d.set_xlabel("labelled examples per class (shots)")
    legend_outside(axes[0, -1], fontsize=8)
    legend_outside(axes[1, -1], fontsize=8)
    fig.suptitle(f"Figure 4: few-shot adaptation (mean, 95% CI over episodes)\n{caption}", y=1.03)
    return save(fig, out_dir, "figure4_fewshot")


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
    from scipy.cluster.hierarchy import leaves_list, linkage
    from scipy.spatial.distance import squareform

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


def learning_curves_tracks(
    histories: dict[str, dict[str, list[list[dict]]]],
    chance: dict[str, float],
    titles: dict[str, str],
    labels: dict[str, str],
    out_dir,
    caption: str = "",
) -> list[Path]:
    """Validation Acc@1 per epoch of every track (one panel each), one line per run, mean and
    95% CI band over seeds; dashed: the validation split's majority-class rate. Each panel's legend
    sits below it (never over the next panel)."""
    fig, axes = plt.subplots(1, len(histories), figsize=(4.4 * len(histories), 3.8), squeeze=False)
    for ax, (track, runs) in zip(axes[0], histories.items()):
        df = pd.DataFrame([{"run": run, **h} for run, hs in runs.items() for hist in hs for h in hist])
        _ci_lines(ax, df, "epoch", "val_acc1", list(runs), {**RUN_LABELS, **labels})
        ax.axhline(chance[track], ls="--", lw=0.8, color="grey", label="majority class")
        ax.set(
            xlabel="epoch", ylabel="validation Acc@1 (%)" if ax is axes[0, 0] else "", title=titles.get(track, track)
        )
        ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
    fig.suptitle(f"Learning curves of Tables 2, 3 and NLVR (mean, 95% CI over seeds)\n{caption}", y=1.08)
    return save(fig, out_dir, "learning_curves_tracks")


def figure_baselines(
    usage: dict | None, routing: dict | None, class_names: list[str], out_dir, caption: str = ""
) -> list[Path] | None:
    """Left panels: the Modular Network's module usage per class (share of each class's validation
    examples routed to each module, one panel per modular layer). Right: the Neural Interpreter's
    type-to-function routing (mean compatibility C of each class's tokens with each function)."""
    panels = (len(usage["counts"]) if usage else 0) + (1 if routing else 0)
    if not panels:
        return None
    fig, axes = plt.subplots(1, panels, figsize=(3.2 * panels + 1, 3.6), squeeze=False)
    axes = list(axes[0])
    names = [textwrap.shorten(n, 10, placeholder=".") for n in class_names]
    for layer, counts in enumerate(usage["counts"] if usage else []):
        c = np.asarray(counts, dtype=float)
        share = c / np.maximum(c.sum(axis=1, keepdims=True), 1)
        ax = axes.pop(0)
        sns.heatmap(
            share,
            ax=ax,
            vmin=0,
            vmax=1,
            cmap="viridis",
            cbar=layer == len(usage["counts"]) - 1,
            yticklabels=names[: len(share)] if layer == 0 else False,
        )
        ax.set(
            title=f"Modular Network layer {layer + 1}\nI(module; class) = {usage['mi'][layer]:.2f} nats",
            xlabel="module",
        )
        ax.title.set_fontsize(8)
    if routing:
        ax = axes.pop(0)
        # the classes are labelled on the leftmost panel already; repeating them here overlaps its colour bar
        C = np.asarray(routing["by_class"], dtype=float)
        uniform = 1.0 / C.shape[1]  # every function alike: no routing
        # centred on uniform routing, from 0 to twice it: a colour step is a real share of the routing,
        # not the stretch of the smallest to the largest value seen
        sns.heatmap(
            C, ax=ax, cmap="RdBu_r", vmin=0.0, vmax=2 * uniform, center=uniform, yticklabels=False if usage else names
        )
        ax.set(title=f"Neural Interpreter: mean C\n(white: uniform routing, {uniform:.2f})", xlabel="function")
        ax.title.set_fontsize(8)
    fig.suptitle(f"Baselines: what routes where, per class (validation data)\n{caption}", y=1.1)
    return save(fig, out_dir, "figure_baselines_routing")


def figure_5b_paper_size(results: dict, out_dir) -> list[Path]:
    """Figure 5b at the paper's size from ``bench/bench_throughput.py``'s results: inference
    throughput of the paper-profile NAC (untrained weights) against the fraction of processor
    modules dropped, for the executor alone and the whole model, mean and 95% CI over the timed
    repeats (left), and the speed-up over 0% dropped (right: ratio of means, the band the point's
    CI over the 0% mean). Images per CPU-second where the
    results have them (one thread: the work done, whatever else loads the machine), else per
    wall-clock second."""
    res, machine = results["figure5b_paper_size"], results["machine"]
    rows = sorted(res["rows"], key=lambda r: r["dropped_fraction"])
    clock = "images_per_cpu_s" if "executor_images_per_cpu_s" in rows[0] else "images_per_s"
    unit = "images per CPU-second" if clock == "images_per_cpu_s" else "images/s"
    x = np.array([r["dropped_fraction"] for r in rows])
    fig, (ax, ax_up) = plt.subplots(1, 2, figsize=(10, 4))
    for kind, label in (("executor", "executor (tokens and design given)"), ("whole", "whole model")):
        iv = [r[f"{kind}_{clock}"] for r in rows]
        mean = np.array([v["mean"] for v in iv])
        lo = np.array([v["lo"] if v["lo"] is not None else v["mean"] for v in iv])
        hi = np.array([v["hi"] if v["hi"] is not None else v["mean"] for v in iv])
        (line,) = ax.plot(x, mean, marker="o", ms=3.5, label=label)
        ax.fill_between(x, lo, hi, alpha=0.2, color=line.get_color())
        base = mean[0]
        ax_up.plot(x, mean / base, marker="o", ms=3.5, color=line.get_color(), label=label)
        ax_up.fill_between(x, lo / base, hi / base, alpha=0.2, color=line.get_color())
    ax.set_yscale("log")
    ax.set_xlabel("fraction of processor modules dropped")
    ax.set_ylabel(f"inference throughput ({unit})")
    ax_up.set_xlabel("fraction of processor modules dropped")
    ax_up.set_ylabel("speed-up over 0% dropped")
    ax_up.axhline(1.0, color="grey", lw=0.8)
    legend_outside(ax_up, fontsize=8)
    tok = res.get("tokenizer", {})
    fig.suptitle(
        f"Figure 5b (paper-size model, untrained weights, this CPU): {res['n_processor']} processor modules, "
        f"{tok.get('kind', '')} tokenizer, {res['image_size']} px, batch {res['batch']}, "
        f"{machine['threads']} thread(s), torch {machine['torch']}\n"
        f"profile paper (untrained weights, no seed), mean and 95% CI over {machine['repeats']} timed repeats, "
        f"{machine.get('date', '')}",
        fontsize=9,
        y=1.04,
    )
    return save(fig, out_dir, "figure5b_paper_size_throughput")


def figure_convergence(
    results: dict,
    histories: dict[str, list[list[dict]]],
    labels: dict[str, str],
    out_dir,
    current: bool = True,
    caption: str = "",
) -> list[Path]:
    """How far the profile's image-track training is from a plateau, one panel per model: validation
    Acc@1 per epoch of the longer runs of ``bench/bench_convergence.py`` (the cosine schedule
    stretched to their length; mean over the seeds run at that length), one colour per length,
    beside the pipeline's own runs (black, dashed, ending at the profile's epoch count, marked by the
    vertical line). ``current``: whether the longer runs were trained with this pipeline's settings
    (else their labels and the title say they are an earlier model's)."""
    mini_epochs = results["mini_epochs"]
    runs = list(results["runs"])
    fig, axes = plt.subplots(1, len(runs), figsize=(5.2 * len(runs), 4), sharey=True, squeeze=False)
    colours = sns.color_palette("colorblind", 10)
    which = "longer run" if current else "earlier model"
    for ax, run in zip(axes[0], runs):
        by_len = results["runs"][run]
        for j, (epochs, by_seed) in enumerate(sorted(by_len.items(), key=lambda kv: int(kv[0]))):
            y = np.mean([r["val_acc1"] for r in by_seed.values()], axis=0)
            n = len(by_seed)
            ax.plot(
                range(1, len(y) + 1),
                y,
                marker="os^D"[j % 4],
                ms=2.5,
                color=colours[j % 10],
                label=f"{which}: {epochs} epochs ({n} seed{'s' if n > 1 else ''})",
            )
        own = [h for h in histories.get(run, []) if h]
        if own:
            y = np.mean([[e["val_acc1"] for e in h] for h in own], axis=0)
            ax.plot(
                range(1, len(y) + 1),
                y,
                ls="--",
                marker="s",
                ms=3,
                color="black",
                label=f"this pipeline: {len(y)} epochs ({len(own)} seeds)",
            )
        ax.axvline(mini_epochs, color="grey", lw=0.8, ls=":")
        ax.set(xlabel="epoch", title=labels.get(run, run))
        ax.title.set_fontsize(9)
        ax.legend(fontsize=7, loc="lower right")
    axes[0, 0].set_ylabel("validation Acc@1 (%)")
    earlier = "" if current else "\nthe longer runs: an earlier model (template=nac_v1), not this pipeline's"
    fig.suptitle(
        f"How far {results['profile']} is from a plateau (image track){earlier}\n{caption}", fontsize=9, y=1.08
    )
    return save(fig, out_dir, "convergence")
