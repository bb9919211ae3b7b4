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
# # Exploring a trained circuit
#
# A Neural Attentive Circuit (NAC) routes information between its processor modules through a
# *learned* graph: every module has a signature, and the link probability between modules `i` and
# `j` is a kernel of their signatures (paper eq. 2). During training the **Graph Structure
# Regularizer** pulls this link-probability matrix `P` towards the target `G` of a graph prior
# (scale-free, planted partition, ring of cliques, Erdos-Renyi), after permuting `P`'s modules to
# match `G` as well as possible.
#
# This notebook loads the image-track NAC trained with the prior named in `params.yaml`
# (`prior.name`, first seed) and looks at
#
# 1. its learned link probabilities next to the prior's target (paper Figure 3),
# 2. the degree distribution of the learned graph against the target's,
# 3. what happens when the least connected modules are dropped (paper section 4.1, Figures 5a/5b).
#
# It runs from the repository root (`reports/notebooks/explore_circuit.ipynb` is its executed copy,
# written by the `notebooks` stage); the numbers depend on the profile that produced the models
# (`smoke` models are tiny and barely trained, so expect little structure there).

# %%
import json
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import networkx as nx
import numpy as np
import pandas as pd
import seaborn as sns
import torch
from IPython.display import display

warnings.filterwarnings("ignore", message="IProgress not found")  # nac imports tqdm.auto; no ipywidgets

from nac.checkpoint_io import load_model
from nac.evaluation import predict, topk_accuracy
from nac.pipeline.datasets import builder
from nac.pipeline.params import load_params
from nac.pipeline.paths import image_checkpoint
from nac.pruning import drop_modules, module_connectivity
from nac.regularizer import closest_permutation
from nac.training.distributed import resolve_device

torch.manual_seed(0)
np.random.seed(0)
sns.set_theme(context="notebook", style="white", palette="colorblind")

params = load_params(stage="notebooks")
prior, seed = params["prior"]["name"], params["seeds"][0]
run = f"nac-{prior}"
device = resolve_device(params.get("device", "auto"))
model = load_model(image_checkpoint(run, seed), map_location=device).to(device).eval()
U = model.config.n_processor
print(f"profile {params.get('profile')!r}: {run}-{seed}, {U} processor modules, evaluated on {device}")

# %% [markdown]
# ## Learned link probabilities vs the prior's target
#
# Left: `P` in the model's own module order (module indices carry no meaning, so structure is
# hidden). Middle: `P` with rows and columns permuted by the regularizer's matching
# (`nac.regularizer.closest_permutation`, `P[perm][:, perm]`). Right: the target `G`. The paper
# (Figure 3) shows that learned graphs take on the character of their prior; the squared error
# printed below is the regularizer's objective before and after the matching.

# %%
with torch.no_grad():
    P = model.graph.link_probabilities().float().cpu()
G = model.prior_target.float().cpu()
perm = closest_permutation(P, G)
P_perm = P[perm][:, perm]
print(
    f"mean squared error to G: module order {torch.mean((P - G) ** 2):.4f}, "
    f"after matching {torch.mean((P_perm - G) ** 2):.4f}"
)

fig, axes = plt.subplots(1, 3, figsize=(13, 4.2), constrained_layout=True)
for ax, M, title in zip(
    axes, (P, P_perm, G), ("learned P (module order)", "learned P, matched to G", f"target G ({prior})")
):
    im = ax.imshow(M.numpy(), vmin=0, vmax=1, cmap="viridis")
    ax.set(title=title, xlabel="module")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.yaxis.get_major_locator().set_params(integer=True)
fig.colorbar(im, ax=axes, shrink=0.85, label="link probability")
plt.show()

# %% [markdown]
# ## Degree distributions
#
# Thresholding at 0.5 gives a graph (an edge where `P > 0.5`, self-links excluded, as in the
# paper's Figure 3). Its degree histogram is set beside that of the target graph `G > 0.5`.
# Soft targets can be empty at this threshold: the scale-free target's off-diagonal entries,
# `sqrt(N) / (c sqrt(ij))` with `c = 16`, stay below 0.5 unless there are hundreds of modules. The
# right panel therefore also compares the *expected* degrees `sum_j P_ij` and `sum_j G_ij`
# (`j != i`), sorted, which need no threshold.

# %%
off = ~torch.eye(U, dtype=torch.bool)


def thresholded(M: torch.Tensor) -> nx.Graph:
    """networkx graph with an edge where ``M > 0.5`` (no self-links)."""
    return nx.from_numpy_array(((M > 0.5) & off).numpy().astype(int))


g_learned, g_target = thresholded(P), thresholded(G)
hist = pd.DataFrame(
    {
        "learned (P > 0.5)": pd.Series(nx.degree_histogram(g_learned)),
        "target (G > 0.5)": pd.Series(nx.degree_histogram(g_target)),
    }
).fillna(0)
print(
    f"edges: learned {g_learned.number_of_edges()}, target {g_target.number_of_edges()} "
    f"(of {U * (U - 1) // 2} possible)"
)

fig, axes = plt.subplots(1, 2, figsize=(12, 3.8), constrained_layout=True)
hist.plot.bar(ax=axes[0], width=0.8, rot=0)
axes[0].set(xlabel="degree", ylabel="modules", title="degree histogram, thresholded at 0.5")
for M, label in ((P, "learned P"), (G, "target G")):
    axes[1].plot(np.sort((M * off).sum(1).numpy())[::-1], marker="o", ms=3, label=label)
axes[1].set(xlabel="module (by rank)", ylabel="expected degree", title="expected degree, sorted")
axes[1].legend()
plt.show()

# %% [markdown]
# ## Dropping modules live
#
# `nac.pruning.module_connectivity` ranks processor modules by their expected degree in the
# learned graph; `nac.pruning.drop_modules` returns a genuinely smaller model without the `k`
# least connected modules. The paper reports that more than 80% of the modules can be dropped at
# under 3% accuracy loss, for an ~8x inference speed-up (abstract; Figures 5a/5b). Below, Acc@1 on
# the image validation split at a few dropped fractions, by connectivity and - as a control, at one
# fraction - by a random ranking. Where the `prune` stage swept the same model, its numbers are
# shown too (dashed): the live computation should reproduce them.

# %%
FRACTIONS, RANDOM_AT = (0.0, 0.5, 0.75, 0.875), 0.75  # the random control at one fraction (CPU time)
image = params["image"]
val_set = builder(params["data"], image["dataset"]).load(image["val_split"])
batch_size = image["train"].get("eval_batch_size", 256)
connectivity = module_connectivity(model)
random_rank = torch.rand(U, generator=torch.Generator().manual_seed(seed)).to(device)
rows = []
sweeps = (("least connected first", connectivity, FRACTIONS), ("random", random_rank, (RANDOM_AT,)))
for ranking, rank, fractions in sweeps:
    for frac in fractions:
        k = min(U - 1, int(round(frac * U)))
        out = predict(drop_modules(model, k, connectivity=rank), val_set, device, batch_size)
        rows.append(
            {
                "ranking": ranking,
                "dropped_fraction": frac,
                "modules": U - k,
                "acc1": topk_accuracy(out["logits"], out["label"], 1),
            }
        )
live = pd.DataFrame(rows)

sweep_file = Path("metrics/image/prune.json")
sweep = pd.DataFrame(json.loads(sweep_file.read_text())) if sweep_file.exists() else pd.DataFrame()
if len(sweep):  # the stage's connectivity order (its random orders are the report's control)
    sweep = sweep[
        (sweep["run"] == run) & (sweep["seed"] == seed) & (sweep.get("order", "connectivity") == "connectivity")
    ]

fig, ax = plt.subplots(figsize=(6.5, 4))
for ranking, sub in live.groupby("ranking", sort=False):
    ax.plot(sub["dropped_fraction"], sub["acc1"], marker="o" if len(sub) > 1 else "X", ms=6, label=f"live: {ranking}")
if len(sweep):
    ax.plot(sweep["dropped_fraction"], sweep["acc1"], "k--", lw=1, label="prune stage")
ax.set(xlabel="fraction of processor modules dropped", ylabel="Acc@1 (%)", title=f"{run}-{seed}: dropping modules")
ax.legend()
plt.show()
live.pivot(index="dropped_fraction", columns="ranking", values="acc1").round(2)

# %% [markdown]
# The `prune` stage also timed the smaller models (inference images per second at a fixed batch,
# first seed). The paper's ~8x was measured on its full-size models; tiny models on a CPU gain far
# less, since the tokenizer and the read-out do not shrink with the number of modules.

# %%
if len(sweep):
    both = live[live["ranking"] == "least connected first"].merge(sweep, on="dropped_fraction", suffixes=("", "_stage"))
    print(
        f"largest difference to the prune stage: {np.abs(both['acc1'] - both['acc1_stage']).max():.3f} points "
        f"over {len(both)} shared fractions"
    )
    stage = sweep.set_index("dropped_fraction").sort_index()
    stage = stage[[c for c in ("modules", "acc1", "images_per_s") if c in stage]]
    if "images_per_s" in stage:  # one value per timed repeat: the mean here, the CI in the report
        stage["images_per_s"] = [float(np.mean(v)) for v in stage["images_per_s"]]
        stage["speed-up"] = stage["images_per_s"] / stage["images_per_s"].iloc[0]
    display(stage.round(2))
else:
    print(f"the prune stage did not sweep {run}-{seed}")
