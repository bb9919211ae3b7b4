"""Constructing what a run needs, for every track: the training config, the prior settings, the
fingerprint a resume must agree on, and ``train_run``, the one build-then-fit every training stage
goes through. Imports no track."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from nac.config import ModelConfig
from nac.fingerprint import source_fingerprint
from nac.model import build_model
from nac.pipeline.datasets import builder
from nac.training.config import TrainConfig
from nac.training.distributed import World, init_distributed
from nac.training.loop import fit


def train_config(params: dict, train: dict[str, Any], seed: int) -> TrainConfig:
    """A section's ``train`` settings with the run's seed and the top-level ``device``."""
    return TrainConfig.from_dict(dict(train, seed=seed, device=params.get("device", "auto")))


def prior_settings(params: dict) -> dict[str, Any]:
    """``{prior, prior_params}`` of the ``prior`` config group, for the NACs of every track but
    the image ladder (whose rungs name their prior)."""
    prior = params.get("prior") or {}
    prior_params = dict(prior.get("params") or {})
    prior_params.pop("m", None)  # the Barabasi-Albert sample's m (Figure 3) is not a target parameter
    return {"prior": prior.get("name", "scale_free"), "prior_params": prior_params}


def run_fingerprint(params: dict, dataset: str, source: str) -> str:
    """Hash of the training data's cache manifest and of the sources the training runs: a
    checkpoint is resumed only under the same fingerprint, so a rerun after a change of the data
    or of code that determines the result retrains, and any other edit (reports, stages,
    evaluation code) resumes.

    The sources (``nac.fingerprint.source_closure``): the modules reached by following the import
    statements of the training loop (``nac.training.loop``: model, circuits, graphs, regularizer,
    checkpointing, evaluation), of the data pipeline (``nac.data.registry``: every builder) and of
    ``source``, the track module that trains (its input wrappers), restricted to
    ``nac.fingerprint.RESULT_SOURCES``. The import graph is read from the files, not from
    ``sys.modules``, so it does not depend on what the process happened to import before.
    Configs are not hashed: ``fit`` compares them itself."""
    h = hashlib.sha256((builder(params, dataset).cache_dir / "manifest.json").read_bytes())
    h.update(source_fingerprint(("nac.training.loop", "nac.data.registry", source)).encode())
    return h.hexdigest()[:16]


def train_run(
    params: dict,
    model_config: ModelConfig,
    train_cfg: TrainConfig,
    train_set: Dataset,
    val_set: Dataset | None,
    *,
    dataset: str,
    checkpoint: str | Path,
    source: str,
    desc: str,
    live_dir: str | Path | None = None,
    progress: bool = True,
    before_fit: Callable[[torch.nn.Module], None] | None = None,
) -> tuple[torch.nn.Module, dict[str, Any], World]:
    """Build the model (``torch.manual_seed(train_cfg.seed)`` first, so runs with one seed share
    every initialisation) and train it with ``fit`` (resuming ``checkpoint`` under the same
    fingerprint; ``val_set`` is evaluated on the main process only). ``before_fit(model)`` runs
    between the two (e.g. to record the initial graph). Returns ``(model, fit's output, world)``;
    under torchrun only the process with ``world.is_main`` should write results."""
    world = init_distributed(params.get("device", "auto"))
    torch.manual_seed(train_cfg.seed)
    model = build_model(model_config)
    if before_fit is not None:
        before_fit(model)
    out = fit(
        model,
        train_set,
        val_set if world.is_main else None,
        train_cfg,
        world=world,
        checkpoint=checkpoint,
        live_dir=live_dir,
        progress=progress,
        desc=desc,
        fingerprint=run_fingerprint(params, dataset, source),
    )
    return model, out, world
