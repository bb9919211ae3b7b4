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
from nac.pipeline.runs import prior_settings, seeded_train_config, start_run
from nac.training.loop import fit


def pretrain(
    pre: schema.Pretrain,
    run: str,
    seed: int,
    progress: bool = True,
    *,
    data: dict,
    prior: dict,
    device: str = "auto",
    models: str | Path = MODELS,
    resume: str | Path | None = None,
) -> nn.Module:
    """Pre-train (or resume / reload) the source model of a few-shot run on ``pre``
    (``fewshot.pretrain``; ``data``, ``prior``, ``device``: those sections of params.yaml). A
    finished checkpoint is reloaded at no cost, so the few-shot stages of several targets read it
    without training. The checkpoint: ``<models>/fewshot_pretrain/<run>-<seed>.pt``."""
    ds = builder(data, pre.dataset)
    cfg = dict(given(pre.model), num_classes=int(ds.info()["num_classes"]))
    if run == "perceiver_io":
        cfg.update(variant="perceiver_io", **given(pre.perceiver_io))
    else:
        cfg.update(variant="nac", **prior_settings(prior))
    train_cfg = seeded_train_config(given(pre.train), seed, device)
    train_set, val_set = ds.load("train"), ds.load(pre.val_split)
    model, world, fingerprint = start_run(
        data, ModelConfig.from_dict(cfg), train_cfg, dataset=pre.dataset, source=__name__
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
    fs: schema.FewShot,
    progress: bool = True,
    *,
    data: dict,
    prior: dict,
    seeds: list[int],
    device: str = "auto",
    models: str | Path = MODELS,
    resume: str | Path | None = None,
) -> dict:
    """The stage: every few-shot run (``fs``: the ``fewshot`` section) and seed when
    ``fewshot.source`` is ``pretrain``, nothing otherwise; writes
    ``<models>/fewshot_pretrain/manifest.json``."""
    done = []
    if fs.source == "pretrain":
        for run in fs.runs:
            for seed in seeds:
                pretrain(
                    fs.pretrain,
                    run,
                    seed,
                    progress,
                    data=data,
                    prior=prior,
                    device=device,
                    models=models,
                    resume=resume,
                )
                done.append(pretrain_checkpoint(run, seed, models).name)
    manifest = {"source": fs.source, "dataset": fs.pretrain.dataset if fs.pretrain else None, "checkpoints": done}
    write_json(pretrain_dir(models) / "manifest.json", manifest)
    return manifest
