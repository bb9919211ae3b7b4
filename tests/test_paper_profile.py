"""The paper profile is proven to start: every model it trains is built from
``compose(["profile=paper"])`` and takes one AdamW step at batch 2 on CPU on synthetic inputs of
the real datasets' shapes (64 px Tiny-ImageNet, 224 px ImageNet, 2048x3 ModelNet40 points, LRA
sequence lengths, NLVR2 CLIP ViT-B-32 features), with a finite loss and changed parameters.

The whole file takes about 55 s on 2 CPU cores (24 tests, the largest the 640-module ImageNet NAC,
39 M parameters, ~10 s), so it is marked ``slow``: out of the default run, which stays under 5
minutes; ``.ci/run`` runs it after the default run (``python -m pytest -m slow``).
"""

import time

import pytest
import torch
import torch.nn.functional as F

from nac.pipeline.params import compose
from nac.registry import build_model

pytestmark = pytest.mark.slow
PARAMS = compose(["profile=paper"])
BATCH = 2


def _info():
    """The real dataset builders' info() for the track datasets (see nac/data/real)."""
    from nac.data.embedded.bytes import VOCAB_SIZE
    from nac.data.embedded.listops import VOCAB

    data = PARAMS["data"]
    clip_dim = 512  # CLIP ViT-B-32 (data.nlvr2.clip_model) embeds images and text in 512 dims
    assert data["nlvr2"]["clip_model"] == "ViT-B-32"
    return {
        "points": {
            "num_classes": 40,
            "input_kind": "points",
            "input_shape": [int(data["modelnet40"]["num_points"]), 3],
        },
        "listops": {
            "num_classes": 10,
            "input_kind": "tokens",
            "vocab_size": len(VOCAB),
            "input_shape": [int(data["lra_listops"]["max_length"])],
        },
        "text": {
            "num_classes": 2,
            "input_kind": "bytes",
            "vocab_size": VOCAB_SIZE,
            "input_shape": [int(data["imdb_bytes"]["max_length"])],
        },
        "nlvr": {"num_classes": 2, "input_kind": "features", "input_shape": [2, clip_dim], "cond_shape": [clip_dim]},
    }


def _inputs(kind: str, info: dict, g: torch.Generator) -> dict:
    if kind == "image":
        size = info["image_size"]
        return {"inputs": torch.randint(0, 256, (BATCH, 3, size, size), dtype=torch.uint8, generator=g)}
    if kind == "points":
        return {"inputs": torch.randn(BATCH, *info["input_shape"], generator=g)}
    if kind in ("tokens", "bytes"):
        L = info["input_shape"][0]
        ids = torch.randint(1, info["vocab_size"], (BATCH, L), generator=g)
        mask = torch.ones(BATCH, L, dtype=torch.bool)
        mask[1, L // 2 :] = False  # the second sequence padded to half the length
        return {"inputs": ids.masked_fill(~mask, 0), "mask": mask}
    kw = {"inputs": torch.randn(BATCH, *info["input_shape"], generator=g)}  # CLIP features
    if kind == "features":  # the conditional NAC: the image pair and the sentence
        kw["cond"] = torch.randn(BATCH, *info["cond_shape"], generator=g)
    return kw


def _one_step(config, kind: str, info: dict) -> dict:
    from nac.training.run import Objective

    t0 = time.perf_counter()
    torch.manual_seed(0)
    model = build_model(config)
    built = time.perf_counter() - t0
    n_params = sum(p.numel() for p in model.parameters())
    g = torch.Generator().manual_seed(0)
    kw = _inputs(kind, info, g)
    labels = torch.randint(0, int(info["num_classes"]), (BATCH,), generator=g)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-4, weight_decay=0.05)
    model.train()
    if hasattr(model, "training_loss"):  # a baseline with its own objective (the Modular Network's EM)
        logits, loss = Objective(model)(**kw, labels=labels, indices=torch.arange(BATCH), step=0, label_smoothing=0.1)
    else:
        logits, reg = Objective(model)(**kw)
        loss = F.cross_entropy(logits.float(), labels, label_smoothing=0.1) + 0.1 * reg.float()
    assert logits.shape == (BATCH, int(info["num_classes"]))
    assert torch.isfinite(loss), f"loss {loss}"
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    graded = {
        n
        for n, p in model.named_parameters()
        if p.requires_grad and p.grad is not None and bool(p.grad.abs().sum() > 0)
    }
    assert graded, "no parameter received a gradient"
    unchanged = [n for n, p in model.named_parameters() if n in graded and torch.equal(p.detach(), before[n])]
    assert not unchanged, f"parameters with a gradient did not change: {unchanged[:5]}"
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())
    return {"params": n_params, "build_s": built, "step_s": time.perf_counter() - t0 - built}


def _report(name, out):
    print(
        f"\n{name}: {out['params'] / 1e6:.1f} M parameters, built in {out['build_s']:.1f} s, "
        f"one step in {out['step_s']:.1f} s"
    )


@pytest.mark.parametrize("run", PARAMS["image"]["ladder"])
def test_image_ladder_rung_takes_a_step(run):
    from nac.tracks.image import image_model_config

    assert PARAMS["image"]["dataset"] == "tiny_imagenet"
    config = image_model_config(PARAMS, run, seed=0, num_classes=200)
    size = int(PARAMS["data"]["tiny_imagenet"]["image_size"])
    _report(run, _one_step(config, "image", {"num_classes": 200, "image_size": size}))


TRACK_RUNS = [(track, run) for track in ("points", "listops", "text", "nlvr") for run in PARAMS[track]["runs"]]


@pytest.mark.parametrize("track,run", TRACK_RUNS)
def test_track_model_takes_a_step(track, run):
    from nac.tracks.common import track_model_config

    info = _info()[track]
    config = track_model_config(PARAMS, track, run, info)
    kind = info["input_kind"]
    if run == "text_only":  # the sentence alone is the input (TrackData: input <- cond)
        info, kind = dict(info, input_shape=info["cond_shape"], cond_shape=None), "sentence"
    elif run == "image_only":  # the image pair without the sentence
        kind = "pair"
    _report(f"{track}/{run}", _one_step(config, kind, info))


@pytest.mark.parametrize("run", PARAMS["fewshot"]["runs"])
def test_fewshot_imagenet_pretrain_model_takes_a_step(run):
    from nac.config import ModelConfig
    from nac.pipeline.runs import prior_settings

    pre = PARAMS["fewshot"]["pretrain"]
    assert pre["dataset"] == "imagenet"
    cfg = dict(pre["model"], num_classes=1000)
    if run == "perceiver_io":
        cfg.update(variant="perceiver_io", **(pre.get("perceiver_io") or {}))
    else:
        cfg.update(variant="nac", **prior_settings(PARAMS["prior"]))
    size = int(PARAMS["data"]["imagenet"]["image_size"])
    assert size == 224 and pre["model"]["tokenizer"]["image_size"] == 224
    _report(
        f"fewshot pretrain {run}",
        _one_step(ModelConfig.from_dict(cfg), "image", {"num_classes": 1000, "image_size": size}),
    )


@pytest.mark.parametrize("run", ["nac-scale_free", "modular_network"])
def test_image_train_config_with_its_augmentation_recipe_takes_a_step(run):
    """image.train as the paper profile sets it (the authors' recipe, EMA, lr scaling), through the
    training loop, at batch 2 on 64 px images; the Modular Network (own objective, hard labels)
    gets the per-sample transforms and repeated augmentation but no mixup."""
    from torch.utils.data import Dataset

    from nac.tracks.image import image_model_config, image_train_config
    from nac.training.augment import AUTHORS_TINYIMAGENET
    from nac.training.config import TrainConfig
    from nac.training.loop import fit

    class Tiny(Dataset):
        def __init__(self):
            g = torch.Generator().manual_seed(0)
            self.x = torch.randint(0, 256, (6, 3, 64, 64), dtype=torch.uint8, generator=g)

        def __len__(self):
            return 6

        def __getitem__(self, i):
            return {"input": self.x[i], "label": torch.tensor(i * 7 % 200)}

    base = image_train_config(PARAMS, seed=0)
    assert base.augment == AUTHORS_TINYIMAGENET
    cfg = TrainConfig.from_dict(
        dict(base.to_dict(), epochs=1, batch_size=2, warmup_epochs=0, num_workers=0, device="cpu")
    )
    torch.manual_seed(0)
    model = build_model(image_model_config(PARAMS, run, seed=0, num_classes=200))
    before = [p.detach().clone() for p in model.parameters()]
    out = fit(model, Tiny(), None, cfg, progress=False)
    assert len(out["history"]) == 1 and torch.isfinite(torch.tensor(out["final"]["train_loss"]))
    assert any(not torch.equal(a, p.detach()) for a, p in zip(before, model.parameters()))
