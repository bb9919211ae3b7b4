"""What the baselines' own claims are judged on, measured on held-out data (the image track's
validation split):

* Modular Networks: the module each layer's controller picks (its mode) against the class, as
  the mutual information I(module; class) per layer, beside the same with shuffled labels (the
  control: what a finite sample gives without any specialisation), and exp(selection entropy)
  per layer (the effective number of modules used; 1 = collapse onto one module).
* Neural Interpreters: the type-to-function routing, mean compatibility ``C`` per function for
  each class (averaged over an example's tokens).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from nac.baselines.modular_networks import ModularNetwork
from nac.baselines.neural_interpreter import NeuralInterpreter
from nac.evaluation import model_kwargs

SHUFFLES = 5


def _batches(data, batch_size: int):
    return DataLoader(data, batch_size=batch_size, shuffle=False)


@torch.no_grad()
def modular_usage(model: ModularNetwork, data, device, batch_size: int, seed: int = 0) -> dict[str, Any]:
    """Per layer: I(module; class) in nats (first of the K slots), the mean over ``SHUFFLES``
    label shuffles, exp(entropy) of the batch-averaged selection, and the usage counts
    ``[layer][class][module]``."""
    from sklearn.metrics import mutual_info_score  # deferred: sklearn.metrics ~0.8 s, only this analysis needs it

    model.eval()
    usage, labels = [], []
    for batch in _batches(data, batch_size):
        kw = model_kwargs(batch, device)
        usage.append(model.module_usage(kw["inputs"])[:, :, 0].cpu())
        labels.append(batch["label"])
    U, y = torch.cat(usage).numpy(), torch.cat(labels).numpy()
    rng = np.random.default_rng(seed)
    M, C = model.config.modules_per_layer, int(y.max()) + 1
    out = {"mi": [], "mi_shuffled": [], "exp_entropy": [], "counts": []}
    for layer in range(U.shape[1]):
        u = U[:, layer]
        out["mi"].append(float(mutual_info_score(y, u)))
        out["mi_shuffled"].append(float(np.mean([mutual_info_score(rng.permutation(y), u) for _ in range(SHUFFLES)])))
        p = np.bincount(u, minlength=M) / len(u)
        out["exp_entropy"].append(float(np.exp(-(p[p > 0] * np.log(p[p > 0])).sum())))
        counts = np.zeros((C, M), dtype=int)
        np.add.at(counts, (y, u), 1)
        out["counts"].append(counts.tolist())
    return out


@torch.no_grad()
def interpreter_routing(model: NeuralInterpreter, data, device, batch_size: int) -> dict[str, Any]:
    """Mean compatibility ``C`` per function (first script, first iteration, input tokens only)
    for each class: ``[class][function]``."""
    model.eval()
    per_example, labels = [], []
    for batch in _batches(data, batch_size):
        kw = model_kwargs(batch, device)
        C = model.routing(kw["inputs"], kw.get("mask"), include_cls=False)  # [B, T, U]
        per_example.append(C.mean(dim=1).float().cpu())
        labels.append(batch["label"])
    R, y = torch.cat(per_example).numpy(), torch.cat(labels).numpy()
    return {"by_class": [R[y == c].mean(axis=0).tolist() for c in range(int(y.max()) + 1)]}


def baseline_analysis(model: torch.nn.Module, data, device, batch_size: int, seed: int = 0) -> dict[str, Any] | None:
    if isinstance(model, ModularNetwork):
        return {"modular_usage": modular_usage(model, data, device, batch_size, seed)}
    if isinstance(model, NeuralInterpreter):
        return {"routing": interpreter_routing(model, data, device, batch_size)}
    return None
