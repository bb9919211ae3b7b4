"""Modular Networks (Kirsch, Kunze & Barber, NeurIPS 2018, "Modular Networks: Learning to
Decompose Neural Computation"), trained with generalized Viterbi EM, as a baseline.

Architecture: ``L`` modular layers (conv layers first, then dense layers), then a linear
classifier head. Each modular layer holds ``M`` modules (conv: weights ``[M, kh, kw, cin, cout]``;
dense: ``[M, in, out]``; each module is followed by a ReLU, as in the paper) and a controller,
one linear map of the flattened layer input giving logits ``[B, K, M]``: ``K`` independent
categoricals over the modules. The ``K`` chosen modules run on the layer input and their outputs
are **summed** (a module chosen twice counts twice). ``log p(a|x)`` is the sum over layers and
the ``K`` slots of the chosen modules' log-probabilities.

Training (generalized Viterbi EM, as the authors' code does it): a persistent best selection
``a*`` per training example (buffer ``best_selection``, int64 ``[dataset_size, L, K]``,
initialised uniformly at random from ``selection_seed``, indexed by the example's dataset index,
saved in the ``state_dict``, so a resume is exact).

- partial E-step every ``e_step_every`` iterations: the batch is tiled ``samples`` (S) times;
  candidate 0 is the stored ``a*``, candidates 1..S-1 are sampled from the controller (layer by
  layer, each layer's controller reading the input the sampled earlier choices produced, with the
  global torch RNG, which the training loop reseeds per epoch); the score is
  ``log p(y|x,a) + sum_layers log p(a|x)`` and the argmax (ties keep ``a*``) replaces ``a*``,
  so the stored score never decreases.
- partial M-step every iteration: ``-mean log p(a*|x) - mean log p(y|x,a*)`` (label smoothing,
  when the loop passes it, applies to the likelihood term of the M-step only, never to the
  E-step's score).

``forward`` (training or evaluation mode) uses the controller's mode (the argmax of every slot,
layer by layer); ``a*`` is used only by ``training_loss``. ``selection_stats`` holds, after each
training step, ``exp`` of the module-selection entropies per layer (the paper's two measures:
the mean per-example entropy, and the entropy of the batch-averaged controller distribution), to
watch for module collapse; ``selection_entropy(inputs)`` computes them for any batch, and
``module_usage(inputs)`` gives the controller's mode choices ``[B, L, K]`` (module usage per class).

Interface of the suite's models: ``forward(inputs, mask=None, cond=None, cond_mask=None,
design=None) -> logits``, ``design(...) -> None``, ``graph_regularizer(...) -> 0``, ``config``;
plus ``training_loss(batch_kwargs, labels, indices, step, label_smoothing=0.0) -> (logits, loss)``
and ``needs_example_index = True``, which ``nac.training.loop.fit`` uses (it adds the dataset
index to each training item).
"""

from __future__ import annotations

import math
from dataclasses import field
from typing import Callable, Literal

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from pydantic import model_validator

from nac.config import ConfigDict
from nac.fields import NONNEGATIVE_INT, POSITIVE_INT, config

VARIANT = "modular_network"


@config
class ModularNetworkConfig(ConfigDict):
    """Defaults: the authors' ``cifar10.py`` example (4 modular conv layers of ``M = 5`` modules,
    3x3 filters x 8, ``K = 1``; E-step every 10 iterations with ``S = 10`` samples)."""

    section = "model"
    variant: Literal[VARIANT] = VARIANT
    num_classes: POSITIVE_INT = 10
    image_size: POSITIVE_INT = 32
    in_channels: POSITIVE_INT = 3
    conv_layers: list[POSITIVE_INT] = field(
        default_factory=lambda: [8, 8, 8, 8]
    )  # output channels per modular conv layer
    kernel_size: POSITIVE_INT = 3
    pool_after: list[int] = field(default_factory=lambda: [1, 3])  # conv layers (0-based) followed by 2x2 max-pool
    dense_layers: list[POSITIVE_INT] = field(default_factory=list)  # units per modular dense layer (after the convs)
    modules_per_layer: POSITIVE_INT = 5  # M
    k: POSITIVE_INT = 1  # modules chosen (and summed) per layer
    e_step_every: POSITIVE_INT = 10  # N: partial E-step every N iterations
    samples: POSITIVE_INT = 10  # S: candidates per E-step (a* + S-1 samples)
    dataset_size: NONNEGATIVE_INT = 0  # rows of a*; set by the caller (training set size)
    selection_seed: int = 0  # a*'s uniform random initialisation

    @model_validator(mode="after")
    def _rules(self):
        self.pool_after = sorted(self.pool_after)
        if not self.conv_layers and not self.dense_layers:
            raise ValueError("a modular network needs at least one modular layer (conv_layers or dense_layers)")
        bad = [i for i in self.pool_after if not 0 <= i < len(self.conv_layers)]
        if bad:
            raise ValueError(
                f"pool_after: conv layers {bad} do not exist ({len(self.conv_layers)} conv layers, 0-based)"
            )
        if self.kernel_size % 2 == 0:
            raise ValueError(f"model.kernel_size must be odd ('same' padding), got {self.kernel_size}")
        if self.image_size >> len(self.pool_after) < 1:
            raise ValueError(f"image_size={self.image_size} is too small for {len(self.pool_after)} 2x2 poolings")
        return self

    @property
    def num_layers(self) -> int:
        return len(self.conv_layers) + len(self.dense_layers)


def _to_float(images: torch.Tensor) -> torch.Tensor:
    """uint8 images (or floats in [0, 1]) -> roughly zero-mean, unit-scale floats."""
    x = images.float() / 255.0 if images.dtype == torch.uint8 else images.float()
    return (x - 0.5) / 0.25


class ModularLayer(nn.Module):
    """``M`` modules and a controller (linear map of the flattened input to ``[B, K, M]`` logits).
    Subclasses define ``all_modules(x) -> [B, M, *out]`` (every module's ReLU output)."""

    def __init__(self, num_modules: int, k: int, controller_in: int):
        super().__init__()
        self.num_modules, self.k = num_modules, k
        self.controller = nn.Linear(controller_in, k * num_modules)

    def controller_logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.controller(x.flatten(1)).view(x.shape[0], self.k, self.num_modules)

    def all_modules(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor, selection: torch.Tensor) -> torch.Tensor:
        """``selection`` long ``[B, K]`` -> the sum of the ``K`` chosen modules' outputs."""
        out = self.all_modules(x)  # [B, M, *out]
        B, rest = out.shape[0], out.shape[2:]
        idx = selection.long().view(B, self.k, *([1] * len(rest))).expand(B, self.k, *rest)
        return out.gather(1, idx).sum(1)


class ConvModules(ModularLayer):
    """``M`` conv modules, weights ``[M, kh, kw, cin, cout]`` and biases ``[M, cout]``, 'same'
    padding, each followed by a ReLU."""

    def __init__(self, num_modules: int, k: int, cin: int, cout: int, kernel_size: int, size: int):
        super().__init__(num_modules, k, cin * size * size)
        self.cin, self.cout, self.kernel_size = cin, cout, kernel_size
        self.weight = nn.Parameter(torch.empty(num_modules, kernel_size, kernel_size, cin, cout))
        self.bias = nn.Parameter(torch.zeros(num_modules, cout))
        nn.init.normal_(self.weight, std=math.sqrt(2.0 / (cin * kernel_size * kernel_size)))  # He init per module

    def module_weight(self, m: int) -> torch.Tensor:
        """Module ``m``'s weight in ``F.conv2d`` layout ``[cout, cin, kh, kw]``."""
        return self.weight[m].permute(3, 2, 0, 1)

    def all_modules(self, x: torch.Tensor) -> torch.Tensor:
        M = self.num_modules
        w = self.weight.permute(0, 4, 3, 1, 2).reshape(M * self.cout, self.cin, self.kernel_size, self.kernel_size)
        y = F.conv2d(x, w, self.bias.reshape(-1), padding=self.kernel_size // 2)
        return F.relu(y.view(x.shape[0], M, self.cout, *y.shape[-2:]))


class DenseModules(ModularLayer):
    """``M`` dense modules, weights ``[M, in, out]`` and biases ``[M, out]``, each followed by a ReLU."""

    def __init__(self, num_modules: int, k: int, d_in: int, d_out: int):
        super().__init__(num_modules, k, d_in)
        self.weight = nn.Parameter(torch.empty(num_modules, d_in, d_out))
        self.bias = nn.Parameter(torch.zeros(num_modules, d_out))
        nn.init.normal_(self.weight, std=math.sqrt(2.0 / d_in))

    def all_modules(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(torch.einsum("bi,mio->bmo", x.flatten(1), self.weight) + self.bias)


Chooser = Callable[[int, torch.Tensor], torch.Tensor]  # (layer, log-probs [B, K, M]) -> selection [B, K]


def _mode(layer: int, logq: torch.Tensor) -> torch.Tensor:
    return logq.argmax(-1)


class ModularNetwork(nn.Module):
    """See the module docstring. ``best_selection`` (buffer): ``a*``, long ``[dataset_size, L, K]``."""

    needs_example_index = True  # nac.training.loop.fit adds each training item's dataset index

    def __init__(self, config: ModularNetworkConfig | dict):
        super().__init__()
        if isinstance(config, dict):
            config = ModularNetworkConfig.from_dict(config)
        self.config = config
        c = config
        M, K = c.modules_per_layer, c.k
        layers, size, ch = [], c.image_size, c.in_channels
        for i, cout in enumerate(c.conv_layers):
            layers.append(ConvModules(M, K, ch, cout, c.kernel_size, size))
            ch = cout
            if i in c.pool_after:
                size //= 2
        width = ch * size * size
        for units in c.dense_layers:
            layers.append(DenseModules(M, K, width, units))
            width = units
        self.layers = nn.ModuleList(layers)
        self.head = nn.Linear(width, c.num_classes)
        g = torch.Generator().manual_seed(int(c.selection_seed))
        self.register_buffer("best_selection", torch.randint(0, M, (c.dataset_size, c.num_layers, K), generator=g))
        self.selection_stats: dict[str, list[float]] = {}

    # ---- the suite's model interface -------------------------------------------------------
    def design(self, cond=None, cond_mask=None):
        return None

    def graph_regularizer(self, design=None) -> torch.Tensor:
        return torch.zeros(())

    def forward(self, inputs, mask=None, cond=None, cond_mask=None, design=None) -> torch.Tensor:
        """Logits ``[B, num_classes]`` with the controller's mode selection (train or eval mode)."""
        return self.run(inputs, _mode)[0]

    # ---- the network under a selection policy ------------------------------------------------
    def run(self, inputs: torch.Tensor, choose: Chooser | torch.Tensor):
        """One pass; ``choose`` is a fixed selection ``[B, L, K]`` or ``(layer, logq) -> [B, K]``.
        Returns ``(logits [B, C], log p(a|x) [B] (summed over layers and slots), selection
        [B, L, K], controller log-probs per layer [B, K, M])``."""
        if (
            inputs.dim() != 4
            or inputs.shape[1] != self.config.in_channels
            or tuple(inputs.shape[-2:]) != (self.config.image_size,) * 2
        ):
            raise ValueError(
                f"modular network expects images [B, {self.config.in_channels}, {self.config.image_size}, "
                f"{self.config.image_size}], got {tuple(inputs.shape)}"
            )
        if isinstance(choose, torch.Tensor):
            fixed = choose.long()
            choose = lambda layer, logq: fixed[:, layer]  # noqa: E731
        h = _to_float(inputs)
        n_conv = len(self.config.conv_layers)
        log_pa = h.new_zeros(h.shape[0])
        chosen, logqs = [], []
        for i, layer in enumerate(self.layers):
            if i == n_conv:
                h = h.flatten(1)
            logq = F.log_softmax(layer.controller_logits(h).float(), dim=-1)
            a = choose(i, logq).long()
            log_pa = log_pa + logq.gather(-1, a.unsqueeze(-1)).squeeze(-1).sum(-1)
            h = layer(h, a)
            if i < n_conv and i in self.config.pool_after:
                h = F.max_pool2d(h, 2)
            chosen.append(a)
            logqs.append(logq)
        return self.head(h.flatten(1)), log_pa, torch.stack(chosen, 1), logqs

    @torch.no_grad()
    def selection_score(self, inputs: torch.Tensor, labels: torch.Tensor, selection: torch.Tensor) -> torch.Tensor:
        """``log p(y|x,a) + log p(a|x)`` per example ``[B]`` for a fixed selection ``[B, L, K]``."""
        logits, log_pa, _, _ = self.run(inputs, selection)
        return log_pa - F.cross_entropy(logits.float(), labels.long(), reduction="none")

    @torch.no_grad()
    def module_usage(self, inputs: torch.Tensor) -> torch.Tensor:
        """The controller's mode choices, long ``[B, L, K]`` (for module usage per class)."""
        return self.run(inputs, _mode)[2]

    @torch.no_grad()
    def selection_entropy(self, inputs: torch.Tensor) -> dict[str, list[float]]:
        """``exp`` of the module-selection entropies per layer on ``inputs`` (controller mode path)."""
        return _entropy_stats(self.run(inputs, _mode)[3])

    # ---- generalized Viterbi EM ----------------------------------------------------------------
    def _check_indices(self, indices: torch.Tensor | None) -> torch.Tensor:
        if indices is None:
            raise ValueError(
                "modular network training needs each example's dataset index (the training loop adds "
                "it when the model sets needs_example_index)"
            )
        indices = indices.long().to(self.best_selection.device)
        n = self.best_selection.shape[0]
        if indices.numel() and (int(indices.min()) < 0 or int(indices.max()) >= n):
            raise ValueError(
                f"example index {int(indices.max())} outside a* of {n} rows: set "
                "model.dataset_size to the training set's size"
            )
        return indices

    @torch.no_grad()
    def e_step(self, inputs: torch.Tensor, labels: torch.Tensor, indices: torch.Tensor) -> dict[str, torch.Tensor]:
        """Partial E-step on a batch: replace each example's ``a*`` with the best of itself and
        ``S - 1`` selections sampled from the controller (global torch RNG). Returns the scores
        ``old`` (of the previous ``a*``) and ``new`` (of the kept one), ``[B]`` each."""
        indices = self._check_indices(indices)
        B, S, M, K = inputs.shape[0], self.config.samples, self.config.modules_per_layer, self.config.k
        stored = self.best_selection[indices]  # [B, L, K]
        tiled_x = inputs.repeat(S, *([1] * (inputs.dim() - 1)))  # candidate s: rows s*B .. s*B+B-1
        tiled_y = labels.long().repeat(S)

        def choose(layer: int, logq: torch.Tensor) -> torch.Tensor:
            a = stored[:, layer]
            if S > 1:
                probs = logq[B:].exp().reshape(-1, M)
                sampled = torch.multinomial(probs, 1).view((S - 1) * B, K).to(a.device)
                a = torch.cat([a, sampled], 0)
            return a

        logits, log_pa, cand, _ = self.run(tiled_x, choose)
        score = (log_pa - F.cross_entropy(logits.float(), tiled_y, reduction="none")).view(S, B)
        best = score.argmax(0)  # first maximum: ties keep a*
        new = cand.view(S, B, *cand.shape[1:])[best, torch.arange(B, device=best.device)]
        self._store(indices, new.to(self.best_selection.dtype))
        return {"old": score[0], "new": score.max(0).values}

    def _store(self, indices: torch.Tensor, new: torch.Tensor) -> None:
        """Write the new ``a*`` rows; under torch.distributed every process applies every
        process's updates, so ``a*`` stays identical across processes."""
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            world = dist.get_world_size()
            all_idx = [torch.empty_like(indices) for _ in range(world)]
            all_new = [torch.empty_like(new) for _ in range(world)]
            dist.all_gather(all_idx, indices)
            dist.all_gather(all_new, new)
            indices, new = torch.cat(all_idx), torch.cat(all_new)
        self.best_selection[indices] = new

    def training_loss(
        self,
        batch_kwargs: dict,
        labels: torch.Tensor,
        indices: torch.Tensor | None,
        step: int,
        label_smoothing: float = 0.0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One EM iteration's objective: a partial E-step when ``step % e_step_every == 0``, then
        the M-step loss ``-mean log p(a*|x) - mean log p(y|x,a*)``. Returns ``(logits under a*, loss)``."""
        inputs = batch_kwargs["inputs"]
        indices = self._check_indices(indices)
        if step % self.config.e_step_every == 0:
            self.e_step(inputs, labels, indices)
        logits, log_pa, _, logqs = self.run(inputs, self.best_selection[indices])
        loss = -log_pa.mean() + F.cross_entropy(logits.float(), labels.long(), label_smoothing=label_smoothing)
        with torch.no_grad():
            self.selection_stats = _entropy_stats([q.detach() for q in logqs])
        return logits, loss


def _entropy_stats(logqs: list[torch.Tensor]) -> dict[str, list[float]]:
    """Per layer: ``exp`` of the mean per-example selection entropy (the paper's H_a; "is each
    example's choice certain?") and of the entropy of the batch-averaged controller distribution
    (H_b; "are many modules used across the batch?", low = module collapse). Entropies are over
    the ``M`` modules of one slot, averaged over the ``K`` slots (``exp``: effective module count)."""
    per_example, batch = [], []
    for logq in logqs:
        p = logq.exp()  # [B, K, M]
        h_a = -(p * logq).sum(-1).mean()
        p_bar = p.mean(0)  # [K, M]
        h_b = -(p_bar * p_bar.clamp_min(1e-30).log()).sum(-1).mean()
        per_example.append(float(h_a.exp()))
        batch.append(float(h_b.exp()))
    return {"exp_selection_entropy": per_example, "exp_batch_selection_entropy": batch}


def build_modular_network(config: ModularNetworkConfig | dict) -> ModularNetwork:
    return ModularNetwork(config)
