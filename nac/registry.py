"""The models by name: the baselines' registry (``BASELINES``: variant -> config class, model class)
and the one factory (``build_model``) that makes a NAC rung or a baseline from its config or a
checkpoint's dict form. Kept apart from ``nac.model``, which is the NAC itself."""

from __future__ import annotations

import torch.nn as nn

from nac.baselines import ModularNetwork, ModularNetworkConfig, NeuralInterpreter, NeuralInterpreterConfig
from nac.config import ModelConfig
from nac.model import NAC

BASELINES = {
    "neural_interpreter": (NeuralInterpreterConfig, NeuralInterpreter),
    "modular_network": (ModularNetworkConfig, ModularNetwork),
}


def build_model(
    config: ModelConfig | NeuralInterpreterConfig | ModularNetworkConfig | dict,
    *,
    fit_signatures: bool = True,
    cpu_shortcuts: bool = True,
) -> nn.Module:
    """Build a NAC (any rung of the ladder) or a baseline (``BASELINES``, by ``variant``) from its
    config or the config's dict form (what a checkpoint stores); ``fit_signatures=False`` skips
    the NAC's preset fit (the weights are loaded next). ``cpu_shortcuts``: the NAC's (``NAC``);
    the baselines have no CPU-only forms and ignore it."""
    if isinstance(config, dict):
        cls = BASELINES[config["variant"]][0] if config.get("variant") in BASELINES else ModelConfig
        config = cls.from_dict(config)
    if isinstance(config, ModelConfig):
        return NAC(config, fit_signatures=fit_signatures, cpu_shortcuts=cpu_shortcuts)
    return BASELINES[config.variant][1](config)


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
