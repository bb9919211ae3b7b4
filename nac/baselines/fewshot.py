"""Few-shot heads of the baselines (Figure 4 rows; the protocol, episodes and optimiser are
``nac.tracks.fewshot``'s, shared with NAC and Perceiver IO). Which parameters train is spelled
out here; everything else is frozen (``requires_grad=False``, and kept in eval mode by the
few-shot loop through ``frozen_modules``).

- Neural Interpreter: its paper's fine-tuning protocol (``NeuralInterpreter.finetune``): a new CLS
  token (``cls_tokens.<n>``, the one read out) and a new ``ways``-way head (``head.*``) train;
  every pre-trained parameter is frozen. ``new_functions`` > 0 also appends that many functions
  (random signatures, learnable codes: ``scripts.<i>.functions.<g>.codes``) to every script.
  Default 0 (``fewshot.protocol.ni_new_functions``): the paper presents them as optional, and
  each function adds one stream to every function iteration: on the mini checkpoints 2 new
  functions (4 -> 6) about doubled the cost of the few-shot stage without a gain in query Acc@1.
- Modular Network: its paper has no few-shot protocol. Our choice, ``train="modules"`` (default,
  ``fewshot.protocol.mn_train``): the suite's own protocol, as NAC and Perceiver IO get it: a new
  ``ways``-way classifier (``head.*``), and every other parameter the protocol does not freeze
  trains, i.e. the modules' weights and biases (``layers.<i>.weight|bias``; a Modular Network
  has no tokenizer). The controllers stay frozen: fine-tuning runs the controller's mode
  selection (the model's evaluation path), which gives them no gradient, and no EM runs: a
  support set of 8 to 128 examples trained for 30 steps is too small for a persistent
  per-example a* to mean anything. ``train="head"`` trains the new head only, over the frozen
  modular layers (the Neural Interpreter's "new head, old weights frozen"); on the mini
  checkpoints it gave a clearly lower query Acc@1 than ``"modules"``, at less than half the cost.
- ``freeze`` prefixes (the few-shot protocol's) further restrict what trains.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import torch
import torch.nn as nn

MN_TRAIN = ("head", "modules")


def _under(name: str, prefixes) -> bool:
    return any(name == f or name.startswith(f + ".") for f in prefixes)


def train_only(model: nn.Module, train: list[str], freeze=()) -> None:
    """``requires_grad`` exactly for the parameters under a ``train`` prefix and under no
    ``freeze`` prefix."""
    for name, p in model.named_parameters():
        p.requires_grad_(_under(name, train) and not _under(name, freeze))


def frozen_modules(model: nn.Module) -> list[str]:
    """Names of the sub-modules that hold parameters, none of them trainable: they stay in eval
    mode while fine-tuning, and a frozen ``tokenizer`` allows precomputed tokens."""
    return [
        name
        for name, m in model.named_modules()
        if name and any(True for _ in m.parameters()) and not any(p.requires_grad for p in m.parameters())
    ]


def prepare_neural_interpreter(
    pretrained: nn.Module, ways: int, seed: int, new_functions: int = 0, freeze=()
) -> nn.Module:
    """A copy of a pre-trained Neural Interpreter set up for its fine-tuning protocol (see the
    module docstring); ``seed`` seeds the new parameters."""
    model = copy.deepcopy(pretrained)
    n_cls, n_groups = len(model.cls_tokens), len(model.scripts[0].functions)
    torch.manual_seed(seed)
    model.finetune(ways, num_new_functions=int(new_functions), freeze_existing=True)
    train = [f"cls_tokens.{n_cls}", "head"]
    if new_functions:
        train += [f"scripts.{i}.functions.{n_groups}" for i in range(len(model.scripts))]
    train_only(model, train, freeze)
    return model


def prepare_modular_network(
    pretrained: nn.Module, ways: int, seed: int, train: str = "modules", freeze=()
) -> nn.Module:
    """A copy of a pre-trained Modular Network with a new ``ways``-way head (see the module
    docstring for ``train``); ``seed`` seeds the new head."""
    if train not in MN_TRAIN:
        raise ValueError(f"modular network few-shot train={train!r}; valid choices: {', '.join(MN_TRAIN)}")
    model = copy.deepcopy(pretrained)
    torch.manual_seed(seed)
    model.head = nn.Linear(model.head.in_features, ways)
    model.config = replace(model.config, num_classes=ways)
    names = ["head"]
    if train == "modules":
        names += [f"layers.{i}.{w}" for i in range(len(model.layers)) for w in ("weight", "bias")]
    train_only(model, names, freeze)
    return model


def prepare_baseline(
    pretrained: nn.Module, ways: int, seed: int, ni_new_functions: int = 0, mn_train: str = "modules", freeze=()
) -> tuple[nn.Module, list[str]] | None:
    """The baseline's few-shot model and its frozen modules, or None when ``pretrained`` is not a
    baseline (NAC, Perceiver IO: the few-shot protocol's own head and ``freeze``)."""
    variant = getattr(pretrained.config, "variant", None)
    if variant == "neural_interpreter":
        model = prepare_neural_interpreter(pretrained, ways, seed, ni_new_functions, freeze)
    elif variant == "modular_network":
        model = prepare_modular_network(pretrained, ways, seed, mn_train, freeze)
    else:
        return None
    return model, frozen_modules(model)
