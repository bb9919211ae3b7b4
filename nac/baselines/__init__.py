"""Baselines under NAC's model interface (``forward``, ``design``, ``graph_regularizer``, ``config``)."""

from nac.baselines.modular_networks import ModularNetwork, ModularNetworkConfig, build_modular_network  # noqa: F401
from nac.baselines.neural_interpreter import NeuralInterpreter, NeuralInterpreterConfig, build_neural_interpreter  # noqa: F401
