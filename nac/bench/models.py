"""The models the benchmarks measure, built as the pipeline builds them at the ``paper``
profile's sizes (untrained weights), and synthetic inputs for them."""

from __future__ import annotations

import torch
import torch.nn as nn

from nac.config import ModelConfig
from nac.pipeline.params import compose
from nac.pipeline.runs import prior_settings
from nac.pruning import drop_modules, random_connectivity
from nac.registry import build_model
from nac.tracks.image import image_model_config

TINY_CLASSES = 200  # Tiny-ImageNet
PRETRAIN_CLASSES = {"tiny_imagenet": 200, "imagenet": 1000}


def paper_model(params: dict, run: str, n_processor: int | None = None) -> nn.Module:
    """The image track's ``run`` (``image.ladder``'s name) of composed ``params`` with
    Tiny-ImageNet's classes, seed 0; ``n_processor`` overrides the processor's module count."""
    p = params
    if n_processor is not None:
        p = {**params, "image": {**params["image"], "model": {**params["image"]["model"], "n_processor": n_processor}}}
    torch.manual_seed(0)
    return build_model(image_model_config(p, run, seed=0, num_classes=TINY_CLASSES))


def paper_nac() -> tuple[nn.Module, dict]:
    """``(model, params)``: the ``paper`` profile's ``nac-scale_free`` of the image track, seed 0."""
    params = compose(["profile=paper"])
    return paper_model(params, "nac-scale_free"), params


def pretrain_model(p: dict, name: str, fit_signatures: bool = True) -> nn.Module:
    """The few-shot ImageNet pre-training model ``name`` (nac | perceiver_io) of composed params
    ``p``, as nac/tracks/pretrain.py builds it."""
    pre = p["fewshot"]["pretrain"]
    cfg = dict(pre["model"], num_classes=PRETRAIN_CLASSES[pre["dataset"]])
    if name == "perceiver_io":
        cfg.update(variant="perceiver_io", **(pre.get("perceiver_io") or {}))
    else:
        cfg.update(variant="nac", **prior_settings(p["prior"]))
    return build_model(ModelConfig.from_dict(cfg), fit_signatures=fit_signatures)


def inputs(batch: int, size: int, device, num_classes: int = TINY_CLASSES) -> tuple[torch.Tensor, torch.Tensor]:
    """``(images, labels)``: a seeded batch of uint8 images ``size`` px and labels, on ``device``."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8, generator=g)
    return x.to(device), torch.randint(0, num_classes, (batch,), generator=g).to(device)


class Synthetic(torch.utils.data.Dataset):
    """``n`` seeded uint8 images ``size`` px with labels of ``classes`` classes, as the data
    registry's datasets give them (``{"input", "label"}``)."""

    def __init__(self, n: int, size: int, classes: int = TINY_CLASSES, seed: int = 1):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=g)
        self.y = torch.randint(0, classes, (n,), generator=g)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"input": self.x[i], "label": self.y[i]}


def pruned_forwards(model: nn.Module, x: torch.Tensor, fractions, ranking) -> dict:
    """``{fraction: {"executor": fn, "whole": fn}}``: forwards of ``model`` with that fraction of
    its processor modules dropped (``nac.pruning.drop_modules`` in ``ranking``'s order); ``whole``
    from the images ``x``, ``executor`` from the tokenizer's output with the circuit design
    precomputed (what dropping modules can speed up). Call under ``torch.no_grad()``."""
    U, fns = model.config.n_processor, {}
    for frac in fractions:
        k = int(round(frac * U))
        smaller = drop_modules(model, k, connectivity=ranking).to(x.device).eval() if k else model
        tokens, design, tok = smaller.tokenizer(x), smaller.design(), smaller.tokenizer

        def whole(smaller=smaller):
            smaller(x)

        def executor(smaller=smaller, tokens=tokens, design=design, tok=tok):
            smaller.tokenizer = nn.Identity()
            try:
                smaller(tokens, design=design)
            finally:
                smaller.tokenizer = tok

        fns[frac] = {"executor": executor, "whole": whole}
    return fns


def pruned_throughput(params: dict, blocks: int, batch: int, fractions, device: str = "cuda", steps: int = 10) -> dict:
    """Images/s of the paper-size NAC's whole model and executor with each of ``fractions`` of
    its modules dropped, bf16 autocast on CUDA (fp32 on the CPU), ``blocks`` interleaved blocks of
    ``steps`` forwards; speed-ups over the first fraction, per block."""
    # deferred: nac.bench.timing imports nac.stats, hence scipy.stats (~0.5 s), that the costs stage
    # (stages/costs.py, through nac.bench.step_ops) would pay for nothing
    from nac.bench.timing import ci, timed_blocks

    model = paper_model(params, "nac-scale_free").to(device).eval()
    U = model.config.n_processor
    size = params["image"]["model"]["tokenizer"]["image_size"]
    x, _ = inputs(batch, size, device)
    ranking = random_connectivity(U, seed=0)
    cuda = torch.device(device).type == "cuda"
    with torch.no_grad(), torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=cuda):
        per = pruned_forwards(model, x, fractions, ranking)
        fns = {(f, kind): fn for f, d in per.items() for kind, fn in d.items()}
        t = timed_blocks(fns, blocks, steps, sync=torch.cuda.synchronize if cuda else lambda: None)
    rows = []
    for frac in fractions:
        row = {"dropped_fraction": frac, "kept_modules": U - int(round(frac * U))}
        for kind in ("whole", "executor"):
            row[f"{kind}_images_per_s"] = ci([batch / s for s in t[(frac, kind)]])
            row[f"{kind}_speedup"] = ci([a / b for a, b in zip(t[(fractions[0], kind)], t[(frac, kind)])])
        rows.append(row)
    return {"batch": batch, "amp": "bf16" if cuda else "fp32", "n_processor": U, "blocks": blocks, "rows": rows}


__all__ = ["Synthetic", "inputs", "paper_model", "paper_nac", "pretrain_model", "pruned_forwards", "pruned_throughput"]
