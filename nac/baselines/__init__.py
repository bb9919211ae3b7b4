"""Baselines under the training objective's model interface (``forward``, ``design``,
``graph_regularizer``, ``config``; a NAC's regularizer is its circuit graph's, ``NAC.graph.regularizer``)."""

from nac.baselines.modular_networks import ModularNetwork, ModularNetworkConfig, build_modular_network  # noqa: F401
from nac.baselines.neural_interpreter import NeuralInterpreter, NeuralInterpreterConfig, build_neural_interpreter  # noqa: F401
