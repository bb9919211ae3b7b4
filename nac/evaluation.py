"""Evaluation: logits over a dataset, Acc@k (optionally restricted to a class subset, as
Tiny-ImageNet-R is to its 62 classes), and accuracy per group (rendition style, reasoning type)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

INPUT_KEYS = ("input", "mask", "cond", "cond_mask")


def model_kwargs(batch: dict, device: torch.device) -> dict:
    """The model's keyword inputs from a dataset item batch (``input`` -> ``inputs``)."""
    kw = {("inputs" if k == "input" else k): batch[k].to(device, non_blocking=True) for k in INPUT_KEYS if k in batch}
    if "mask" in kw:
        kw["mask"] = kw["mask"].bool()
    if "cond_mask" in kw:
        kw["cond_mask"] = kw["cond_mask"].bool()
    return kw


@contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """``model`` in eval mode inside the block, its previous train/eval mode restored after."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


@torch.no_grad()
def predict(
    model: torch.nn.Module,
    data: Dataset | DataLoader,
    device: torch.device | str = "cpu",
    batch_size: int = 256,
    keep: Iterable[str] = (),
    *,
    eval_kernel: str | None = None,
) -> dict[str, np.ndarray]:
    """Run ``model`` in eval mode over ``data``; returns ``logits`` ``[N, C]``, ``label`` ``[N]``
    and any item fields named in ``keep`` (e.g. ``style``). ``eval_kernel`` (a NAC's
    ``KERNEL_MODES``; keyword): the kernel of these calls instead of the config's ``eval_kernel``
    (``NAC.forward``; ``"dense"``: the kernel ablation), the model left unchanged; None (the
    default) passes nothing, so any model works."""
    device = torch.device(device)
    loader = data if isinstance(data, DataLoader) else DataLoader(data, batch_size=batch_size, shuffle=False)
    out: dict[str, list] = {"logits": [], "label": [], **{k: [] for k in keep}}
    extra = {} if eval_kernel is None else {"eval_kernel": eval_kernel}
    with eval_mode(model):
        for batch in loader:
            out["logits"].append(model(**model_kwargs(batch, device), **extra).float().cpu())
            out["label"].append(batch["label"])
            for k in keep:
                out[k].append(batch[k])
    return {k: torch.cat(v).numpy() for k, v in out.items()}


@torch.no_grad()
def tokenize(
    model: torch.nn.Module, data: Dataset, device: torch.device | str = "cpu", batch_size: int = 256
) -> tuple[list[torch.Tensor], np.ndarray]:
    """The eval-mode tokenizer output of ``data``'s inputs in ``predict``'s batches (kept on the
    CPU) and the labels: ``predict_tokens(model, *tokenize(model, data))`` equals
    ``predict(model, data)``, for ``model`` and for any copy with the same tokenizer (models with
    modules dropped). Inputs only (no mask or condition)."""
    device = torch.device(device)
    batches, labels = [], []
    with eval_mode(model):
        for batch in DataLoader(data, batch_size=batch_size, shuffle=False):
            batches.append(model.tokenizer(batch["input"].to(device)).cpu())
            labels.append(batch["label"])
    return batches, torch.cat(labels).numpy()


@torch.no_grad()
def predict_tokens(
    model: torch.nn.Module, token_batches: list[torch.Tensor], labels: np.ndarray, device: torch.device | str = "cpu"
) -> dict[str, np.ndarray]:
    """``predict``'s output from ``tokenize``'s batches (``model.execute`` on each)."""
    device = torch.device(device)
    with eval_mode(model):
        logits = [model.execute(t.to(device)).float().cpu() for t in token_batches]
    return {"logits": torch.cat(logits).numpy(), "label": labels}


def topk_accuracy(logits: np.ndarray, labels: np.ndarray, k: int = 1, classes: Sequence[int] | None = None) -> float:
    """Acc@k in percent. With ``classes``, logits outside that subset are ignored (labels must
    lie in it)."""
    logits = np.asarray(logits, dtype=np.float64)
    if classes is not None:
        masked = np.full_like(logits, -np.inf)
        idx = np.asarray(classes)
        masked[:, idx] = logits[:, idx]
        logits = masked
    k = min(k, logits.shape[1])
    top = np.argpartition(-logits, k - 1, axis=1)[:, :k]
    return float(100.0 * np.mean((top == np.asarray(labels)[:, None]).any(axis=1)))


def accuracy_by_group(
    logits: np.ndarray,
    labels: np.ndarray,
    groups: np.ndarray,
    names: Sequence[str] | None = None,
    classes: Sequence[int] | None = None,
) -> dict[str, float]:
    """Acc@1 (percent) within each group value (e.g. each rendition style)."""
    res = {}
    for g in np.unique(groups):
        sel = groups == g
        key = names[int(g)] if names is not None else str(int(g))
        res[key] = topk_accuracy(logits[sel], labels[sel], 1, classes)
    return res
