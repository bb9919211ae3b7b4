"""What ``nac.training.loop.fit`` builds before its first step (``build_run``): the model on its
device wrapped with its objective, the optimizer and LR schedule, the EMA, the sampler and loader,
the compiled step where ``train.compile`` asks for one, the CUDA graphs where ``train.cuda_graphs``
does: one ``Run``, what a step reads; ``EpochState``, what changes as the training runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from nac.model import NAC
from nac.training.augment import AugmentedDataset, BatchMixer, RepeatedAugSampler, recipe_of
from nac.training.checks import StepChecks
from nac.training.compiled import CompiledStep, compile_regions
from nac.training.config import TrainConfig
from nac.training.distributed import World
from nac.training.ema import ema_groups, make_ema
from nac.training.graphed import GraphedStep, graphs_refusal
from nac.training.objective import Objective, objective_losses
from nac.training.optim import decay_groups, make_adamw, warmup_cosine
from nac.training.resume import RunState


class WithIndex(Dataset):
    """A dataset whose dict items gain ``"index"``: the item's position in the dataset (for a
    model that keeps per-example state, ``needs_example_index``)."""

    def __init__(self, data: Dataset):
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i):
        return {**self.data[i], "index": i}


@dataclass
class Run:
    """One training's parts, built once (``build_run``) and read by every step."""

    model: NAC  # trained in place (SyncBatchNorm under DDP on CUDA)
    objective: Objective  # Objective(model): the logits and the regularizer of one design, the matching
    wrapped: nn.Module  # the objective, DDP-wrapped when distributed: what a step calls
    optimizer: torch.optim.AdamW
    scheduler: LambdaLR  # the LR schedule (warmup_cosine), stepped before each optimizer step
    ema: Any  # the AveragedModel (train.ema), evaluated and handed back; or None
    ema_groups: dict | None  # the EMA's tensors and the model's, paired (ema.ema_groups); or None
    mixer: BatchMixer | None  # mixup/cutmix of an augmentation recipe (soft targets); or None
    sampler: Any  # the loader's sampler, reshuffled per epoch (set_epoch)
    loader: DataLoader
    val_set: Dataset | None
    cfg: TrainConfig
    world: World
    steps_per_epoch: int
    use_amp: bool  # bf16 autocast (train.amp on CUDA)
    own_objective: bool  # the model defines training_loss (a baseline trained by EM, say)
    state: RunState  # where training stands, for the messages that say what is kept
    checks: StepChecks  # the device-side finiteness record of the epoch's steps
    fingerprint: str | None
    on_epoch_end: Callable[[int], None] | None
    params: list  # the model's parameters, what the update clips
    losses: Callable  # objective_losses, or it compiled (train.compile)
    update: Callable | None = None  # clip_and_step compiled (compile_scope: step); None: its two lines eager
    compiled: CompiledStep | None = None  # train.compile: the step's compiled forms
    graphed: GraphedStep | None = None  # train.cuda_graphs: the step's CUDA graphs (nac.training.graphed)

    @property
    def total(self) -> int:
        """Optimizer steps of the whole training (the LR schedule's length)."""
        return self.cfg.epochs * self.steps_per_epoch


@dataclass
class EpochState:
    """What changes as a training runs (``fit``'s): the epoch's metric sums, the EMA's first-update
    flag, the history, the dvclive logger and the bar."""

    sums: torch.Tensor  # this epoch's loss, reg, correct, count, summed on the device
    ema_copy: bool = False  # the next EMA update is the first: it copies
    history: list = field(default_factory=list)  # per-epoch metrics (resumed ones first)
    live: Any = None  # the dvclive logger (main process, live_dir given)
    bar: Any = None  # the tqdm bar

    @classmethod
    def of(cls, run: Run, history: list | None = None) -> EpochState:
        """A training's state at its (re)start: zero sums, the EMA's first update a copy when it has
        averaged nothing yet (read once)."""
        return cls(
            sums=torch.zeros(4, dtype=torch.float64, device=run.world.device),
            ema_copy=run.ema is not None and int(run.ema.n_averaged) == 0,
            history=[] if history is None else history,
        )


def build_run(
    model: NAC,
    train_set: Dataset,
    val_set: Dataset | None,
    cfg: TrainConfig,
    world: World,
    checkpoint: str | Path | None,
    desc: str,
    on_epoch_end,
    fingerprint: str | None,
) -> Run:
    """The model on its device, the optimizer, its schedule (and EMA), the sampler and loader of ``fit``."""
    device = world.device
    if world.distributed and device.type == "cuda":  # batch statistics over the global batch
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model.to(device)
    if getattr(model, "needs_example_index", False):
        train_set = WithIndex(train_set)
    objective = Objective(model)
    wrapped = DistributedDataParallel(objective) if world.distributed else objective
    decay, no_decay = decay_groups(model, cfg.decay_filter)
    mode = getattr(cfg, "compile", False)
    if mode is not False and hasattr(model, "training_loss"):
        raise ValueError(f"train.compile={mode!r} compiles the NAC objective; this model defines its own: set false")
    graphs = getattr(cfg, "cuda_graphs", False)
    if graphs and (why := graphs_refusal(model, device, world.distributed, mode)):
        raise ValueError(why)
    if mode is not False and cfg.compile_scope == "regional":  # the layers compiled, the step eager
        compile_regions(model, mode)
        mode = False
    compiled = CompiledStep(mode, cfg.compile_scope, cfg.compile_matching) if mode is not False else None
    optimizer = make_adamw(  # a compiled update or a captured step: the LR a device tensor, capturable
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.peak_lr,
        impl=getattr(cfg, "adamw", None),
        compiled=graphs or (compiled is not None and compiled.update is not None),
    )
    ema = make_ema(model, cfg.ema) if cfg.ema else None

    if cfg.batch_size % world.world_size:
        raise ValueError(
            f"train.batch_size={cfg.batch_size} must be divisible by the number of processes ({world.world_size})"
        )
    per_rank = cfg.batch_size // world.world_size
    recipe, mixer = recipe_of(cfg.augment), None
    if recipe is not None:  # e.g. the authors' Tiny-ImageNet recipe (nac/training/augment.py)
        # per-sample transforms in the data pipeline, repeated augmentation by the sampler, and
        # mixup/cutmix on the batch; a model with its own objective (hard labels) is not mixed
        train_set = AugmentedDataset(train_set, recipe, seed=cfg.seed)
        sampler = RepeatedAugSampler(
            train_set,
            num_replicas=world.world_size,
            rank=world.rank,
            repeats=recipe.repeats,
            shuffle=True,
            seed=cfg.seed,
        )
        if not hasattr(model, "training_loss"):
            if per_rank % 2:
                raise ValueError(
                    f"train.augment={cfg.augment!r} mixes pairs: the batch per process must be even, got {per_rank}"
                )
            mixer = BatchMixer(recipe, model.config.num_classes, cfg.label_smoothing, seed=cfg.seed)
    else:
        sampler = DistributedSampler(
            train_set, num_replicas=world.world_size, rank=world.rank, shuffle=True, seed=cfg.seed, drop_last=True
        )
    # Its own generator: worker seeds never draw from the (per-epoch reseeded) global RNG, so a
    # resumed run sees exactly the random numbers of an uninterrupted one.
    loader = DataLoader(
        train_set,
        batch_size=per_rank,
        sampler=sampler,
        drop_last=True,
        num_workers=cfg.num_workers,
        pin_memory=device.type == "cuda",
        persistent_workers=cfg.num_workers > 0,
        generator=torch.Generator().manual_seed(cfg.seed),
    )
    steps_per_epoch = len(loader)
    if steps_per_epoch == 0:
        raise ValueError(f"training set of {len(train_set)} items is smaller than one global batch ({cfg.batch_size})")
    total, warmup = cfg.epochs * steps_per_epoch, round(cfg.warmup_epochs * steps_per_epoch)
    run = Run(
        model=model,
        wrapped=wrapped,
        optimizer=optimizer,
        scheduler=warmup_cosine(optimizer, total, warmup, cfg.peak_lr, cfg.min_lr),
        ema=ema,
        mixer=mixer,
        sampler=sampler,
        loader=loader,
        val_set=val_set,
        cfg=cfg,
        world=world,
        steps_per_epoch=steps_per_epoch,
        objective=objective,
        use_amp=cfg.amp and device.type == "cuda",
        own_objective=hasattr(model, "training_loss"),
        state=RunState(Path(checkpoint) if checkpoint else None, desc),
        checks=StepChecks(model, device),
        fingerprint=fingerprint,
        on_epoch_end=on_epoch_end,
        params=list(model.parameters()),
        losses=compiled.fn if compiled is not None else objective_losses,
        update=compiled.update if compiled is not None else None,
        compiled=compiled,
        ema_groups=ema_groups(ema, model) if ema is not None else None,
    )
    run.graphed = GraphedStep(run) if graphs else None
    return run
