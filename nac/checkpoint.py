"""Checkpoints that load without unpickling arbitrary objects.

A checkpoint is a dict of tensors and plain values (``torch.load(weights_only=True)`` reads it):
``{"format": 1, "config": ModelConfig.to_dict(), "model": state_dict, **extra}``; ``extra``
carries training state (optimizer, scheduler, epoch, RNG states, ...). Writes are atomic (a
temporary file renamed into place), so an interrupted save never leaves a truncated checkpoint.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from nac.model import NAC, build_model

FORMAT = 1


def save_checkpoint(path: str | Path, model: NAC, **extra: Any) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"format": FORMAT, "config": model.config.to_dict(), "model": model.state_dict(), **extra}
    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)
    return path


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}; train the model first (`dvc repro`)")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # a truncated file or a foreign pickle
        raise RuntimeError(f"checkpoint {path} cannot be read safely ({e}); delete it and retrain") from e
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise RuntimeError(f"{path} is not a nac checkpoint of format {FORMAT}; delete it and retrain")
    return ckpt


def load_model(path: str | Path, map_location: str | torch.device = "cpu") -> NAC:
    """Rebuild the model from the stored config and load its weights (strictly): the EMA
    weights when training kept an EMA (they are what training evaluated), else the raw ones."""
    ckpt = load_checkpoint(path, map_location)
    model = build_model(ckpt["config"], fit_frozen_graph=False)  # frozen signatures come from the state dict
    model.load_state_dict(model_weights(ckpt))
    return model


def model_weights(ckpt: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The weights to evaluate: the EMA copy's (``AveragedModel`` state, ``module.`` prefix) if any."""
    if "ema" in ckpt:
        return {k[len("module."):]: v for k, v in ckpt["ema"].items() if k.startswith("module.")}
    return ckpt["model"]
