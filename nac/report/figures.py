"""Figures: Figure 4 (few-shot adaptation), Figures 5a, 5b and 15 (module dropping), learning
curves and the baselines' routing. Each is saved as PNG and SVG. Figures 3 and 6 (circuits):
``nac.report.graph_figures``; the figures of committed benchmark files: ``nac.report.bench_figures``."""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from nac.report.published import RUN_LABELS
from nac.report.style import legend_outside, save, series_style
from nac.report.tables import random_order_mean
from nac.stats import summarize


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
