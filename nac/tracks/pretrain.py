"""Pre-training of the few-shot source models (``fewshot.source: pretrain``; the paper profile:
ImageNet), the ``pretrain`` stage. With ``fewshot.source: image`` (smoke, mini) the few-shot
stages adapt the image track's checkpoints and there is nothing to pre-train.

Checkpoints are ``models/fewshot_pretrain/<run>-<seed>.pt`` (``nac.pipeline.paths``), resumed
when interrupted; ``models/fewshot_pretrain/manifest.json`` lists what the stage produced, so
the stage's output exists in every profile.
"""

from __future__ import annotations

from pathlib import Path

import torch.nn as nn

from nac.checkpoint_io import mirror_path
from nac.config import ModelConfig
from nac.fields import given
from nac.pipeline import schema_models as schema
from nac.pipeline.datasets import builder
from nac.pipeline.io import write_json
from nac.pipeline.paths import MODELS, pretrain_checkpoint, pretrain_dir
from nac.pipeline.runs import prior_settings, start_run, train_config
from nac.training.loop import fit


def pretrain(
    params: dict,
    run: str,
    seed: int,
    progress: bool = True,
    *,
    models: str | Path = MODELS,
    resume: str | Path | None = None,
) -> nn.Module:
    """Pre-train (or resume / reload) the source model of a few-shot run on ``fewshot.pretrain``.
    A finished checkpoint is reloaded at no cost, so the few-shot stages of several targets read
    it without training. The checkpoint: ``<models>/fewshot_pretrain/<run>-<seed>.pt``."""
    pre = schema.section(params, "fewshot").pretrain
    ds = builder(params, pre.dataset)
    cfg = dict(given(pre.model), num_classes=int(ds.info()["num_classes"]))
    if run == "perceiver_io":
        cfg.update(variant="perceiver_io", **given(pre.perceiver_io))
    else:
        cfg.update(variant="nac", **prior_settings(params))
    train_cfg = train_config(params, given(pre.train), seed)
    train_set, val_set = ds.load("train"), ds.load(pre.val_split)
    model, world, fingerprint = start_run(
        params, ModelConfig.from_dict(cfg), train_cfg, dataset=pre.dataset, source=__name__
    )
    fit(
        model,
        train_set,
        val_set,
        train_cfg,
        world=world,
        checkpoint=pretrain_checkpoint(run, seed, models),
        mirror=None if resume is None else mirror_path(pretrain_checkpoint(run, seed, models), models, resume),
        progress=progress,
        desc=f"pretrain {run}-{seed}",
        fingerprint=fingerprint,
    )
    return model


def pretrain_all(
    params: dict, progress: bool = True, *, models: str | Path = MODELS, resume: str | Path | None = None
) -> dict:
    """The stage: every few-shot run and seed when ``fewshot.source`` is ``pretrain``, nothing
    otherwise; writes ``<models>/fewshot_pretrain/manifest.json``."""
    fs = schema.section(params, "fewshot")
    done = []
    if fs.source == "pretrain":
        for run in fs.runs:
            for seed in params["seeds"]:
                pretrain(params, run, seed, progress, models=models, resume=resume)
                done.append(pretrain_checkpoint(run, seed, models).name)
    manifest = {"source": fs.source, "dataset": fs.pretrain.dataset if fs.pretrain else None, "checkpoints": done}
    write_json(pretrain_dir(models) / "manifest.json", manifest)
    return manifest
