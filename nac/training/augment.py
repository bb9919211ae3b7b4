"""Training-time augmentation recipes (``train.augment``).

- ``true``: random horizontal flip and translation by up to 4 px on the batch
  (``nac.training.loop.augment_images``, unchanged).
- ``false``: none.
- ``"authors_tinyimagenet"``: the authors' Tiny-ImageNet recipe (docs/reference.md, DeiT-style,
  built from timm):

  * per sample (``AugmentedDataset``): ``timm.data.create_transform(64, is_training=True,
    color_jitter=0.4, auto_augment="rand-m9-mstd0.5-inc1", interpolation="bicubic", re_prob=0.25,
    re_mode="pixel", re_count=1)``: a random resized crop (scale 0.08-1, bicubic), a horizontal
    flip, RandAugment m9 (mstd 0.5, increasing ops) and random erasing (p 0.25, per-pixel normal
    noise, one box). As in the authors' timm, colour jitter is *off* whenever RandAugment is on
    (timm ignores ``color_jitter`` then); the setting is passed as they passed it. timm normalises
    with the ImageNet mean/std; the result is mapped back to the [0, 1] scale our models take
    (they normalise internally), so the pixels are exactly those of the authors' pipeline up to a
    fixed per-channel affine map that the first layer absorbs.
  * repeated augmentation x3 (``RepeatedAugSampler``): each chosen image appears three times per
    epoch with independent augmentations, on different processes where there are 3 or more.
  * on the batch (``BatchMixer``): ``timm.data.Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, prob=1.0,
    switch_prob=0.5, mode="batch", label_smoothing=train.label_smoothing)``; soft targets, and the
    loss is the soft-target cross-entropy (``soft_cross_entropy``).

Determinism: every random draw of the recipe is a function of ``(seed, epoch, ...)``, never of the
global RNG's history: a sample's augmentation of ``(seed, epoch, virtual index)`` (so it does not
depend on ``num_workers`` or on which worker loads it), the mixing of ``(seed, epoch, rank,
step)``, the sampler's order of ``(seed, epoch)``. A run resumed at epoch ``e`` therefore sees the
same inputs as an uninterrupted one. The global RNGs (``random``, numpy, torch) are restored after
each draw, so nothing else's randomness shifts.
"""

from __future__ import annotations

import contextlib
import math
import random
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from nac.training.config import AUGMENT_RECIPES, AUTHORS_TINYIMAGENET

RECIPES = AUGMENT_RECIPES  # train.augment's recipes (TrainConfig declares them): AUTHORS_TINYIMAGENET
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class Recipe:
    """The settings of one recipe (timm's names)."""

    color_jitter: float = 0.4
    auto_augment: str = "rand-m9-mstd0.5-inc1"
    interpolation: str = "bicubic"
    re_prob: float = 0.25
    re_mode: str = "pixel"
    re_count: int = 1
    repeats: int = 3
    mixup_alpha: float = 0.8
    cutmix_alpha: float = 1.0
    mix_prob: float = 1.0
    switch_prob: float = 0.5
    mix_mode: str = "batch"


RECIPE_SETTINGS = {AUTHORS_TINYIMAGENET: Recipe()}


def recipe_of(augment: Any) -> Recipe | None:
    """The recipe named by ``train.augment``, or None for ``true`` / ``false``."""
    return RECIPE_SETTINGS.get(augment) if isinstance(augment, str) else None


def _mix_seed(*parts: int) -> list[int]:
    return [int(p) % (2**32) for p in parts]


@contextlib.contextmanager
def seeded(*parts: int):
    """Seed python's ``random``, numpy's and torch's (CPU) global RNGs from ``parts`` for the body
    (timm's transforms draw from them), restoring their previous states afterwards. Only torch's
    CPU generator: ``torch.manual_seed`` would also reseed every CUDA generator, which the fork
    (CPU only) does not restore, so each mixup step reset the training's CUDA draws."""
    seq = np.random.SeedSequence(_mix_seed(*parts))
    s_py, s_np, s_torch = (int(v) for v in seq.generate_state(3, dtype=np.uint32))
    py_state, np_state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        random.seed(s_py)
        np.random.seed(s_np)
        torch.default_generator.manual_seed(s_torch)
        try:
            yield
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)


def sample_transform(recipe: Recipe, image_size: int):
    """timm's training transform of ``recipe`` for ``image_size`` px: PIL image -> float tensor
    ``[3, S, S]``, ImageNet-normalised (as the authors' pipeline gives it)."""
    from timm.data import create_transform  # deferred: timm ~2.2 s after torch, only for the authors' recipe

    return create_transform(
        image_size,
        is_training=True,
        color_jitter=recipe.color_jitter,
        auto_augment=recipe.auto_augment,
        interpolation=recipe.interpolation,
        re_prob=recipe.re_prob,
        re_mode=recipe.re_mode,
        re_count=recipe.re_count,
        mean=IMAGENET_MEAN,
        std=IMAGENET_STD,
    )


class AugmentedDataset(Dataset):
    """Applies the per-sample transform of a recipe to the ``"input"`` image (uint8 ``[3, H, W]``)
    of each dict item; the result is float32 ``[3, H, W]`` on the [0, 1] scale (values outside it
    where random erasing wrote noise). Indexed by the *virtual* indices ``v`` that
    ``RepeatedAugSampler`` yields (any integer >= 0): item ``v % len(data)``, augmented with the
    draws of ``(seed, v)``. The virtual index carries the epoch and the copy, so the dataset holds
    no state: it works the same in DataLoader workers, persistent or not."""

    def __init__(self, data: Dataset, recipe: Recipe, seed: int = 0, image_size: int | None = None):
        self.data, self.recipe, self.seed = data, recipe, int(seed)
        self.n = len(data)
        self._image_size = image_size
        self._transform = None

    def __len__(self) -> int:
        return self.n

    def transform(self, image: torch.Tensor) -> torch.Tensor:
        """uint8 ``[3, H, W]`` -> float32 ``[3, S, S]`` (global RNGs as they are: see ``seeded``)."""
        from torchvision.transforms.functional import to_pil_image  # deferred: torchvision ~2.5 s, as timm

        if image.dim() != 3 or image.shape[0] != 3:
            raise ValueError(f"the {AUTHORS_TINYIMAGENET!r} recipe needs images [3, H, W], got {tuple(image.shape)}")
        if self._transform is None:
            self._transform = sample_transform(self.recipe, self._image_size or int(image.shape[-1]))
        if image.dtype != torch.uint8:
            image = (image.float().clamp(0, 1) * 255).round().to(torch.uint8)
        out = self._transform(to_pil_image(image))
        mean, std = torch.tensor(IMAGENET_MEAN)[:, None, None], torch.tensor(IMAGENET_STD)[:, None, None]
        return (out * std + mean).float()

    def __getitem__(self, v: int):
        item = dict(self.data[int(v) % self.n])
        with seeded(self.seed, int(v) // 2**32, int(v), 0x5A17):
            item["input"] = self.transform(torch.as_tensor(item["input"]))
        return item


class RepeatedAugSampler(Sampler[int]):
    """Repeated augmentation (Hoffer et al. 2020; DeiT's and timm's ``RepeatAugSampler``, reseeded
    with ``(seed, epoch)`` like ``DistributedSampler``). Each epoch: a permutation of the ``N``
    items (seeded by ``seed + epoch``), each repeated ``repeats`` times in a row, padded by
    wrapping to a multiple of ``num_replicas``; process ``rank`` takes every ``num_replicas``-th
    entry from ``rank`` on, so the copies of an item go to different processes.

    Yields *virtual* indices ``v = (epoch * repeats + k) * N + i`` (copy ``k`` of item ``i`` in
    this epoch; ``i = v % N``, ``AugmentedDataset`` reads them), so every copy in every epoch is
    augmented differently and deterministically.

    ``full_epoch=False`` (the default; as DeiT and timm): each process keeps the first
    ``N // num_replicas`` of its entries, so an epoch has the dataset's length (the schedule in
    epochs is unchanged) and shows about ``N / repeats`` distinct items ``repeats`` times each.
    ``full_epoch=True``: every item appears exactly ``repeats`` times per epoch across the
    processes (``ceil(repeats * N / num_replicas)`` per process)."""

    def __init__(
        self,
        dataset,
        num_replicas: int = 1,
        rank: int = 0,
        repeats: int = 3,
        shuffle: bool = True,
        seed: int = 0,
        full_epoch: bool = False,
    ):
        if repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {repeats}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} outside [0, {num_replicas})")
        self.n = len(dataset)
        self.num_replicas, self.rank, self.repeats = num_replicas, rank, repeats
        self.shuffle, self.seed, self.full_epoch, self.epoch = shuffle, int(seed), full_epoch, 0
        self.total = math.ceil(self.n * repeats / num_replicas) * num_replicas
        self.num_samples = self.total // num_replicas if full_epoch else self.n // num_replicas

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[int]:
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.n, generator=g)
        else:
            order = torch.arange(self.n)
        copies = torch.arange(self.repeats).repeat(self.n)  # 0, 1, 2, 0, 1, 2, ...
        virtual = order.repeat_interleave(self.repeats) + (self.epoch * self.repeats + copies) * self.n
        pad = self.total - len(virtual)
        if pad:
            virtual = torch.cat([virtual, virtual[:pad]])
        return iter(virtual[self.rank : self.total : self.num_replicas][: self.num_samples].tolist())


class BatchMixer:
    """Mixup / CutMix on a batch with soft targets (``timm.data.Mixup``), its draws seeded by
    ``(seed, epoch, rank, step)``. ``__call__(x, labels, epoch, rank, step)`` -> ``(x_mixed,
    targets)``: ``x`` float ``[B, 3, H, W]`` (B even; mixed in place), targets float ``[B, C]``
    rows summing to 1, each mixing two labels (the row's and the flipped batch's) with
    ``label_smoothing`` spread over all classes."""

    def __init__(self, recipe: Recipe, num_classes: int, label_smoothing: float = 0.1, seed: int = 0):
        from timm.data import Mixup  # deferred: timm, as above

        self.seed = int(seed)
        self.mixup = Mixup(
            mixup_alpha=recipe.mixup_alpha,
            cutmix_alpha=recipe.cutmix_alpha,
            prob=recipe.mix_prob,
            switch_prob=recipe.switch_prob,
            mode=recipe.mix_mode,
            label_smoothing=label_smoothing,
            num_classes=int(num_classes),
        )

    def __call__(self, x: torch.Tensor, labels: torch.Tensor, epoch: int, rank: int, step: int):
        if len(x) % 2:
            raise ValueError(f"mixup/cutmix needs an even batch per process, got {len(x)}")
        if not x.is_floating_point():
            x = x.float() / 255.0
        with seeded(self.seed, epoch, rank, step, 0x313C):
            return self.mixup(x, labels.long())


def soft_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean over the batch of ``-sum(targets * log_softmax(logits))`` for logits and soft targets
    ``[B, C]``: timm's ``SoftTargetCrossEntropy`` (imported on use, as timm's ``Mixup`` that makes
    the soft targets)."""
    from timm.loss import SoftTargetCrossEntropy  # deferred: timm, as above

    return SoftTargetCrossEntropy()(logits, targets)
