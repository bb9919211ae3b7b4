# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: -all
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # NLVR: what the conditional circuit generator does with the sentence (Figure 6)
#
# In the conditional NAC the *circuit generator* reads the sentence and produces the module
# signatures, hence a link-probability matrix `P` per sentence, while the executor reads the image
# pair through that circuit. The paper (Figure 6) embeds the generated `P` of NLVR2 sentences with
# t-SNE and finds that sentences of the same reasoning type (hard cardinality, soft cardinality,
# existential, spatial) produce similar graphs, while the graphs remain diverse.
# Its abstract reports ~64% on NLVR2 for the conditional NAC against 53% for zero-shot CLIP.
#
# This notebook reads what the `train_nlvr` and `nlvr_analysis` stages wrote, then recomputes `P`
# live for a few validation sentences. In this repository the default data set is
# `nlvr_shapes`, a synthetic stand-in that stores each sentence's reasoning type; `smoke` models
# are tiny and barely trained, so expect chance-level accuracy there.

# %%
import json
import textwrap
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import networkx as nx
import numpy as np
import pandas as pd
import seaborn as sns
import torch
from IPython.display import display
from torch.utils.data import Subset

warnings.filterwarnings("ignore", message="IProgress not found")  # nac imports tqdm.auto; no ipywidgets

from nac.checkpoint_io import load_model
from nac.pipeline.datasets import builder
from nac.pipeline.params import load_params
from nac.pipeline.paths import track_checkpoint, track_metrics
from nac.registry import build_model
from nac.tracks.common import reasoning_types, sentences
from nac.tracks.nlvr import graph_of, link_matrices, lower_triangle
from nac.training.distributed import resolve_device

torch.manual_seed(0)
np.random.seed(0)
sns.set_theme(context="notebook", style="whitegrid", palette="colorblind")
pd.set_option("display.max_colwidth", None)

params = load_params(stage="notebooks")
nlvr = params["nlvr"]
analysis_cfg = nlvr.get("analysis") or {}
seed = int(analysis_cfg.get("seed", params["seeds"][0]))
analysis = json.loads(Path("metrics/nlvr/analysis.json").read_text())
embedding = pd.read_csv("metrics/nlvr/embedding.csv")
examples = json.loads(Path("metrics/nlvr/examples.json").read_text())
type_names = analysis["reasoning_types"]
print(
    f"profile {params.get('profile')!r}, data set {nlvr['dataset']!r}, seed {seed}; "
    f"analysed run {analysis['run']!r} on {analysis['n']} {analysis['split']} sentences"
)

# %% [markdown]
# ## Does the conditional NAC use both inputs?
#
# The conditional NAC is set beside two controls: a NAC that reads only the sentence
# (`text_only`) and one that reads only the image pair (`image_only`). Only a model that combines
# both can beat chance (the majority-class rate, dotted) by much: each sentence is true of some
# image pairs and false of others.

# %%
results = {
    run: json.loads(track_metrics("nlvr", run, seed).read_text())
    for run in nlvr["runs"]
    if track_metrics("nlvr", run, seed).exists()
}
table = pd.DataFrame(
    {
        run: {k: r.get(k) for k in ("val_acc1", "val_chance", "test_acc1", "test_chance", "parameters")}
        for run, r in results.items()
    }
).T
by_type = pd.DataFrame({run: r["val_acc1_by_type"] for run, r in results.items()}).T[type_names]

fig, ax = plt.subplots(figsize=(8, 3.8))
by_type.T.plot.bar(ax=ax, width=0.8, rot=0)
ax.axhline(max(r["val_chance"] for r in results.values()), color="k", ls=":", lw=1, label="chance")
ax.set(ylabel="validation Acc@1 (%)", xlabel="reasoning type", title="accuracy by reasoning type")
ax.legend(loc="lower right", fontsize=9)
plt.show()
table

# %% [markdown]
# ## The t-SNE embedding of the generated graphs (Figure 6, left)
#
# Each point is one validation sentence: its `P` (strict lower triangle, PCA to at most 64
# dimensions) embedded in 2-D, coloured by reasoning type.

# %%
fig, ax = plt.subplots(figsize=(6.5, 5.2))
sns.scatterplot(data=embedding, x="x", y="y", hue="reasoning_type", hue_order=type_names, s=18, ax=ax)
ax.set(xticks=[], yticks=[], xlabel="t-SNE 1", ylabel="t-SNE 2", title="generated link matrices, by reasoning type")
plt.show()
embedding.groupby("reasoning_type").head(2)[["reasoning_type", "sentence"]]

# %% [markdown]
# ## How much of the reasoning type is in `P`?
#
# A picture can mislead, so the analysis stage also measures the structure: the k-NN accuracy of
# predicting the reasoning type from the PCA features of `P` (cross-validated, with 95% intervals
# over folds) and the silhouette score of the types, each beside the same measure with the types
# shuffled (no structure). `p_spread` is the mean over entries of the standard deviation of `P`
# across sentences: the diversity of the generated graphs.

# %%
if "knn_accuracy" in analysis:
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), constrained_layout=True)
    axes[0].bar(
        ["types", "shuffled"],
        [analysis["knn_accuracy"], analysis["knn_shuffled"]],
        yerr=[analysis["knn_accuracy_ci95"], analysis["knn_shuffled_ci95"]],
        capsize=4,
        color=sns.color_palette()[:2],
    )
    axes[0].axhline(analysis["chance"], color="k", ls=":", lw=1, label="majority type")
    axes[0].set(ylabel="%", title=f"{analysis['knn_k']}-NN accuracy ({analysis['folds']}-fold)")
    axes[0].legend()
    axes[1].bar(
        ["types", "shuffled"], [analysis["silhouette"], analysis["silhouette_shuffled"]], color=sns.color_palette()[:2]
    )
    axes[1].axhline(0, color="k", lw=0.8)
    axes[1].set(title="silhouette score")
    plt.show()
else:
    print("too few sentences per type for cross-validation: no k-NN / silhouette measures")
pd.Series({k: v for k, v in analysis.items() if not isinstance(v, (list, dict))}, name="analysis.json").to_frame()

# %% [markdown]
# ## Live: the generated graphs per reasoning type
#
# The conditional model is loaded and `P` is computed for the first few validation sentences of
# every type (`nac.tracks.nlvr.link_matrices`). Top row: the mean `P` per type; bottom row: the
# same minus the mean over all selected sentences, which shows where the types differ (the
# generated `P` are often close to each other in absolute terms).

# %%
N_PER_TYPE = 8
run = analysis_cfg.get("run", "conditional")
device = resolve_device(params.get("device", "auto"))
model = load_model(track_checkpoint("nlvr", run, seed), map_location=device).eval()
ds = builder(params["data"], nlvr["dataset"])
split = nlvr.get("val_split", "val")
data = ds.load(split)
types, names = reasoning_types(ds, split)
texts = sentences(ds, split)
chosen = {t: np.flatnonzero(types == t)[:N_PER_TYPE] for t in range(len(names)) if (types == t).any()}
index = np.concatenate(list(chosen.values()))
P = link_matrices(model, Subset(data, index.tolist()), device)
offset = np.cumsum([0] + [len(v) for v in chosen.values()])
mean_P = {names[t]: P[offset[i] : offset[i + 1]].mean(0) for i, t in enumerate(chosen)}
grand = P.mean(0)
dev = max(float(np.abs(m - grand).max()) for m in mean_P.values()) or 1.0

fig, axes = plt.subplots(2, len(mean_P), figsize=(3.4 * len(mean_P), 6.4), constrained_layout=True, squeeze=False)
for j, (name, M) in enumerate(mean_P.items()):
    top = axes[0, j].imshow(M, vmin=0, vmax=1, cmap="viridis")
    bottom = axes[1, j].imshow(M - grand, vmin=-dev, vmax=dev, cmap="RdBu_r")
    axes[0, j].set_title(f"{name} (n={len(chosen[names.index(name)])})")
for ax in axes.flat:
    ax.grid(False)
fig.colorbar(top, ax=axes[0], shrink=0.8, label="mean P")
fig.colorbar(bottom, ax=axes[1], shrink=0.8, label="mean P - overall mean")
plt.show()
firsts = index[offset[:-1]]
pd.DataFrame({"reasoning type": [names[types[i]] for i in firsts], "first sentence": [texts[i] for i in firsts]})

# %% [markdown]
# ## One typical graph per reasoning type (Figure 6, right)
#
# `examples.json` names, per type, the sentence closest to its type's mean in PCA space. Its `P`
# is recomputed live (and checked against the stored matrix) and drawn with
# `nac.tracks.nlvr.graph_of`: an edge where `P > 0.5`, laid out force-directed with attraction
# inversely proportional to the signature distance.

# %%
ex = examples["examples"]
live_P = link_matrices(model, Subset(data, [e["index"] for e in ex]), device)
stored = np.asarray([e["P"] for e in ex])
print(f"largest difference between live and stored P: {np.abs(live_P - stored).max():.2e} (stored rounded to 1e-5)")

fig, axes = plt.subplots(1, len(ex), figsize=(3.4 * len(ex), 3.6), dpi=72, constrained_layout=True, squeeze=False)
for ax, e, Pe in zip(axes[0], ex, live_P):
    graph = graph_of(Pe, examples["threshold"])
    pos = nx.spring_layout(graph, weight="weight", seed=0)
    nx.draw_networkx(
        graph,
        pos,
        ax=ax,
        node_size=60,
        with_labels=False,
        width=0.4,
        edge_color="0.6",
        node_color=[d for _, d in graph.degree()],
        cmap="viridis",
    )
    ax.set_title(
        f"{e['reasoning_type']}: {graph.number_of_edges()} edges\n" + textwrap.fill(f'"{e["sentence"]}"', 40),
        fontsize=9,
    )
    ax.set_axis_off()
plt.show()

# %% [markdown]
# ## Sparse, sentence-dependent, two cliques?
#
# The paper draws the graphs at `P > 0.5` and sees sparse graphs that differ by sentence, "with
# two large cliques, with nodes that bridge them". `analysis.json` measures all three: the link
# density, the share of complete graphs and of sentences whose graph differs from the most common
# one, and, against each graph rewired with the same degrees (degree-preserving swaps, the
# control), the modularity of a greedy partition and the rate of exactly two large clique-like
# communities (paired by sentence, 95% CI). Below: the cut graphs of the first 12 sentences as
# adjacency matrices, modules in one common order.

# %%
clique_keys = [
    "cut_density",
    "cut_complete_fraction",
    "cut_distinct_fraction",
    "clique_modularity",
    "clique_modularity_null",
    "clique_modularity_gap",
    "clique_modularity_gap_ci95",
    "clique_two_fraction",
    "clique_two_fraction_null",
    "clique_two_gap",
    "clique_two_gap_ci95",
]
display(
    pd.DataFrame(
        {
            "trained": {k: analysis.get(k) for k in clique_keys},
            "untrained": {k: analysis.get("untrained", {}).get(k) for k in clique_keys},
        }
    )
)
first = P[:12] > examples["threshold"]
order = np.argsort(-first.mean(axis=(0, 1)))  # modules by mean degree
fig, axes = plt.subplots(2, 6, figsize=(14, 5), constrained_layout=True)
for ax, A, i in zip(axes.flat, first, index[:12]):
    A = A & ~np.eye(len(A), dtype=bool)
    ax.imshow(A[np.ix_(order, order)], cmap="Greys", vmin=0, vmax=1, interpolation="nearest")
    ax.set_title(f"{names[types[i]]}: {100 * A.mean():.0f}%", fontsize=8)
    ax.set(xticks=[], yticks=[])
    ax.grid(False)
plt.show()

# %% [markdown]
# ## How much of the structure comes from training?
#
# The generator is a function of the sentence, and sentences of one reasoning type share words, so
# even an *untrained* generator may map them to similar `P`. As a control, the k-NN accuracy and
# the silhouette score are recomputed (same PCA, folds and seed as the analysis stage, no t-SNE)
# for the trained model on all validation sentences - this should reproduce `analysis.json` - and
# for a freshly initialised model of the same configuration. Structure well above the untrained
# model's is what training added.

# %%
from sklearn.decomposition import PCA
from sklearn.metrics import silhouette_score
from sklearn.model_selection import StratifiedKFold, cross_val_score
from sklearn.neighbors import KNeighborsClassifier


def type_structure(P: np.ndarray) -> dict:
    """k-NN accuracy (%) and silhouette of the reasoning types in PCA space, as the analysis stage."""
    X = lower_triangle(P).astype(np.float64)
    Z = PCA(n_components=int(min(analysis["pca_dim"], len(X) - 1, X.shape[1])), random_state=seed).fit_transform(X)
    cv = StratifiedKFold(n_splits=analysis["folds"], shuffle=True, random_state=seed)
    knn = KNeighborsClassifier(n_neighbors=analysis["knn_k"])
    return {
        "knn_accuracy": 100.0 * cross_val_score(knn, Z, types, cv=cv).mean(),
        "silhouette": float(silhouette_score(Z, types)),
        "p_spread": float(P.std(axis=0).mean()),
    }


if analysis.get("folds", 0) >= 2:
    torch.manual_seed(seed)
    untrained = build_model(model.config, fit_signatures=False)
    control = pd.DataFrame(
        {
            "analysis.json": {k: analysis.get(k) for k in ("knn_accuracy", "silhouette", "p_spread")},
            "trained (live)": type_structure(link_matrices(model, data, device)),
            "untrained": type_structure(link_matrices(untrained, data, device)),
        }
    )
    display(control.round(3))
    print(
        f"k-NN accuracy with shuffled types (analysis.json): {analysis['knn_shuffled']:.1f}%, "
        f"majority type {analysis['chance']:.1f}%"
    )
