"""Constructing what a run needs, for every track: the training config, the prior settings, the
fingerprint a resume must agree on, and ``start_run``, what every training job does before it
calls ``fit``. Imports no track."""

from __future__ import annotations

import hashlib
from typing import Any

import torch

from nac.config import ModelConfig
from nac.fingerprint import source_fingerprint
from nac.pipeline.datasets import builder
from nac.registry import build_model
from nac.training.config import TrainConfig
from nac.training.distributed import World, init_distributed


def train_config(params: dict, train: dict[str, Any], seed: int) -> TrainConfig:
    """A section's ``train`` settings (as params.yaml gives them) with the run's seed and the
    top-level ``device`` of ``params`` (a profile's params: benches, tests)."""
    return seeded_train_config(train, seed, params.get("device", "auto"))


def seeded_train_config(train: dict[str, Any], seed: int, device: str) -> TrainConfig:
    """A section's ``train`` settings (as params.yaml gives them: ``nac.fields.given``) with the
    run's seed and the top-level ``device``."""
    return TrainConfig.from_dict(dict(train, seed=seed, device=device))


def prior_settings(prior: dict | None) -> dict[str, Any]:
    """``{prior, prior_params}`` of the ``prior`` config group (the section as params.yaml gives
    it), for the NACs of every track but the image ladder (whose rungs name their prior)."""
    prior = prior or {}
    prior_params = dict(prior.get("params") or {})
    prior_params.pop("m", None)  # the Barabasi-Albert sample's m (Figure 3) is not a target parameter
    return {"prior": prior.get("name", "scale_free"), "prior_params": prior_params}


def run_fingerprint(data: dict, dataset: str, source: str) -> str:
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
    h = hashlib.sha256((builder(data, dataset).cache_dir / "manifest.json").read_bytes())
    h.update(source_fingerprint(("nac.training.loop", "nac.data.registry", source)).encode())
    return h.hexdigest()[:16]


def start_run(
    data: dict, model_config: ModelConfig, train_cfg: TrainConfig, *, dataset: str, source: str
) -> tuple[torch.nn.Module, World, str]:
    """What every training job does before ``fit``: this process's device (``init_distributed`` of
    ``train_cfg.device``, the top-level ``device``), ``torch.manual_seed(train_cfg.seed)`` then the
    model (so runs with one seed share every initialisation), and the fingerprint a resume must
    agree on (``run_fingerprint``). Returns ``(model, world, fingerprint)``; the caller calls
    ``fit`` with them (the validation set on the main process only); under torchrun only the
    process with ``world.is_main`` writes results."""
    world = init_distributed(train_cfg.device)
    torch.manual_seed(train_cfg.seed)
    model = build_model(model_config)
    return model, world, run_fingerprint(data, dataset, source)
