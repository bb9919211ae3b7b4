"""The training loop: AdamW, linear warm-up + cosine schedule (a torch LR scheduler, its state in
the checkpoint), label smoothing, gradient
clipping, the graph-structure regularizer, bf16 autocast on CUDA, optional EMA, dvclive logging
per epoch, a tqdm bar with ETA, and an atomic checkpoint per epoch that a rerun resumes from.

Reproducibility: every epoch reseeds torch from ``(seed, epoch, rank)`` and the sampler
shuffles with ``(seed, epoch)``, so a run resumed from the checkpoint of epoch ``e`` continues
exactly as the uninterrupted run would (same batches, same kernel samples, same metrics).

Reliability: every step checks the loss, the total gradient norm and the weights; a non-finite
one stops training (``NonFiniteTrainingError``) before anything is saved, so a checkpoint only
ever holds finite tensors (``save_checkpoint`` enforces it too). The checks run on the device
(``nac.training.checks.StepChecks``: the first non-finite step is recorded there) and the host reads them every
``SYNC_EVERY`` steps and at each epoch end, before anything is evaluated or saved, so a step has
no host sync: the error names the step that went wrong, only raised up to ``SYNC_EVERY`` steps
later. The epoch's metrics are summed on the device too and read at the epoch end (and, the
epoch so far, by the progress bar at each periodic read); labels and the ``augment: true``
draws are copied non-blocking (pinned batches on CUDA), the EMA is foreach ops. One training at a time holds a
checkpoint (an OS lock on ``<checkpoint>.lock``); a checkpoint written with other settings is
moved aside, never overwritten in place. Ctrl-C and a full disk end with one line saying which
checkpoint is intact (``TrainingStopped``, a ``SystemExit``: a stage exits non-zero without a
traceback). Resuming and saving are in ``nac.training.resume``, the finiteness checks in
``nac.training.checks``, these errors in ``nac.training.errors``.

The path to ``optimizer.step``: ``fit`` builds a ``_Run`` (``_build``: model, optimizer, EMA,
sampler, loader), takes the lock, resumes, then ``_train_epochs`` runs each step (``train_step``:
``_losses``, its forward, then backward and AdamW) and ends each epoch (``_end_epoch``: metrics,
evaluation, checkpoint, dvclive).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader, Dataset, DistributedSampler
from tqdm.auto import tqdm

from nac.checkpoint_io import restore
from nac.checkpoint_lock import CheckpointLock
from nac.evaluation import model_kwargs, predict, topk_accuracy
from nac.model import NAC
from nac.progress import bar_kwargs
from nac.training.augment import AugmentedDataset, BatchMixer, RepeatedAugSampler, recipe_of
from nac.training.checks import StepChecks
from nac.training.compiled import (
    adamw_groups,
    compile_losses,
    compile_step,
    finish_matching,
    objective_losses,
    objective_parts,
    overlapped_losses,
    start_matching,
    step_lrs,
)
from nac.training.config import DECAY_FILTERS, TrainConfig
from nac.training.distributed import World, all_reduce_, barrier
from nac.training.ema import ema_groups, ema_update, make_ema
from nac.training.errors import TrainingInterrupted
from nac.training.resume import RunState, resume_from, save_epoch

# AdamW's implementation. None: PyTorch's default, a Python loop over the parameters on CPU (the
# reference; "foreach" is no faster on CPU and bitwise the same). "fused" (opt-in): one kernel over
# all parameters, a cheaper optimizer step (`bench/bench_ops.py --adamw fused`: bench/results/ops.md),
# but its arithmetic rounds differently: measured on the CPU (torch 2.15, 3,105 weights), after
# 10 steps 12 weights differ by 1 ulp, after 100 by up to 8 ulps, after 1,000 by up to 24 (the
# last-ulp differences random-walk; tests/test_loop_sync.py::test_fused_adamw_differs_from_the_
# default_in_the_last_ulp), so a trained model's numbers change beyond float rounding: off by default.
# On CUDA, None means PyTorch's foreach form (its default there), which reads each parameter's
# step count on the host (a host tensor: no sync); "fused" is also made ``capturable`` on CUDA
# (step counts on the device, what a CUDA graph needs). Selectable per run: ``train.adamw``.
ADAMW_IMPL: str | None = None
ADAMW_IMPLS = (None, "foreach", "fused")

# The host reads the device-side finiteness record (and the bar's epoch-so-far metrics) every SYNC_EVERY
# steps and at each epoch end; no other read happens in a step.
SYNC_EVERY = 32


def make_adamw(param_groups, lr: float, impl: str | None = None) -> torch.optim.AdamW:
    """``torch.optim.AdamW(param_groups, lr=lr)`` in implementation ``impl`` (default
    ``ADAMW_IMPL``; see there)."""
    impl = ADAMW_IMPL if impl in (None, "default") else impl
    if impl not in ADAMW_IMPLS:
        raise ValueError(f"unknown AdamW impl {impl!r}; valid choices: default, foreach, fused")
    kw = {"foreach": True} if impl == "foreach" else {"fused": True} if impl == "fused" else {}
    if impl == "fused":
        groups = list(param_groups)
        params = [p for g in groups for p in (g["params"] if isinstance(g, dict) else [g])]
        kw["capturable"] = bool(params) and params[0].device.type == "cuda"
        param_groups = groups
    return torch.optim.AdamW(param_groups, lr=lr, **kw)


class Objective(nn.Module):
    """Wraps the model so one forward returns the logits and the graph regularizer computed from
    the same circuit design (one module for DDP to wrap); a NAC's link probabilities are computed
    once for both, its matching run on a worker thread meanwhile (``NAC.logits_and_regularizer``).
    ``perms``: a NAC's permutations matched before the step (``NAC.matching_in_advance``, a
    compiled step's), or ``"later"``: ``(logits, Ps)`` returned, the regularizer left to the caller
    (``NAC.logits_and_probabilities``)."""

    def __init__(self, model: NAC):
        super().__init__()
        self.model = model

    def forward(self, inputs, mask=None, cond=None, cond_mask=None, perms=None, **own):
        if own:  # a model with its own training objective: ``training_loss`` -> (logits, loss)
            kw = {
                k: v
                for k, v in (("inputs", inputs), ("mask", mask), ("cond", cond), ("cond_mask", cond_mask))
                if v is not None
            }
            return self.model.training_loss(kw, **own)
        if isinstance(self.model, NAC) and perms == "later":  # (logits, Ps): the regularizer is the caller's
            return self.model.logits_and_probabilities(inputs, mask, cond, cond_mask)
        if isinstance(self.model, NAC):  # Perceiver IO too: its regularizer is the host's constant 0
            logits, reg = self.model.logits_and_regularizer(inputs, mask, cond, cond_mask, perms=perms)
        else:
            design = self.model.design(cond, cond_mask)
            logits, reg = self.model(inputs, mask=mask, design=design), self.model.graph_regularizer(design)
        if reg.device != inputs.device:  # a host value: the constant 0 of a model without the regularizer
            # made on the device from the host's number (no copy for the host to wait on: a blocking
            # copy from the host synchronises on CUDA); a differentiable one is copied non-blocking
            reg = (
                reg.to(inputs.device, non_blocking=True)
                if reg.requires_grad
                else torch.full_like(reg, float(reg), device=inputs.device)
            )
        return logits, reg


def warmup_cosine(optimizer: torch.optim.Optimizer, total: int, warmup: int, peak: float, floor: float) -> LambdaLR:
    """The LR schedule as torch's ``LambdaLR`` over the optimizer's groups (their lr is ``peak``):
    at scheduler step ``t`` (the optimizer step about to be taken), a linear warm-up
    ``peak * (t + 1) / warmup`` for ``t < warmup``, then cosine decay from ``peak`` to ``floor`` at
    ``t = total``. Equal to the formula to float rounding (tests/reference_forms.py ``lr_at``).
    A closed form: SequentialLR(LinearLR, CosineAnnealingLR) updates recursively (its rounding
    drifts with the step count) and has no form for ``warmup = 0`` or ``total = warmup``."""
    span = max(1, total - warmup)

    def factor(t: int) -> float:
        if t < warmup:
            return (t + 1) / warmup
        return (floor + 0.5 * (peak - floor) * (1.0 + math.cos(math.pi * min(1.0, (t - warmup) / span)))) / peak

    return LambdaLR(optimizer, factor)


def _from_host(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A small host tensor on ``device`` without the host waiting: on CUDA staged in pinned
    memory (PyTorch keeps the block until the copy is done) and copied asynchronously."""
    return (t.pin_memory() if device.type == "cuda" else t).to(device, non_blocking=True)


def augment_images(x: torch.Tensor, pad: int = 4) -> torch.Tensor:
    """Random horizontal flip and translation by up to ``pad`` px for images ``[B, 3, H, W]``
    (other inputs pass through). Uses the global torch RNG (reseeded per epoch).

    The draws are made on the host (the CPU generator: the same numbers on every device) and
    copied non-blocking; the crops are two gathers on the device, not a slice per image, so a
    step has no host sync here (the per-image slicing form is
    ``tests/test_augment.py::_reference_flip_translate``: the same bits)."""
    if x.dim() != 4 or x.shape[1] != 3:
        return x
    B, C, H, W = x.shape
    flip = _from_host(torch.rand(B) < 0.5, x.device)
    x = torch.where(flip[:, None, None, None], x.flip(-1), x)
    padded = F.pad(x, (pad, pad, pad, pad), mode="replicate" if x.is_floating_point() else "constant")
    shift = _from_host(torch.randint(0, 2 * pad + 1, (2, B)), x.device)  # rows, columns
    rows = shift[0, :, None] + torch.arange(H, device=x.device)  # [B, H]
    cols = shift[1, :, None] + torch.arange(W, device=x.device)  # [B, W]
    x = padded.gather(2, rows[:, None, :, None].expand(B, C, H, W + 2 * pad))
    return x.gather(3, cols[:, None, None, :].expand(B, C, H, W))


class WithIndex(Dataset):
    """A dataset whose dict items gain ``"index"``: the item's position in the dataset (for a
    model that keeps per-example state, ``needs_example_index``)."""

    def __init__(self, data: Dataset):
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i):
        return {**self.data[i], "index": i}


def _epoch_seed(seed: int, epoch: int, rank: int) -> int:
    return (seed * 1_000_003 + epoch * 7919 + rank * 104_729) % (2**31)


def evaluate_accuracy(model: nn.Module, data: Dataset, device, batch_size: int) -> dict[str, float]:
    out = predict(model, data, device, batch_size)
    return {
        "acc1": topk_accuracy(out["logits"], out["label"], 1),
        "acc5": topk_accuracy(out["logits"], out["label"], 5),
    }


def decays(name: str, p: torch.Tensor, decay_filter: str = "authors") -> bool:
    """Whether AdamW's weight decay applies to parameter ``name``. ``authors`` (their Tiny-ImageNet
    filter): every parameter but those whose name ends in ``signatures`` and those with
    ``dim() == 1`` (biases, norms, LayerScale), so codes (2-d) and the 0-d bandwidths and ModFC
    gains are decayed. ``ours`` (nac v1): no decay for ``dim() < 2`` or a name containing
    ``signatures`` or ``codes``. ``all`` (m2mKD, which sets no filter): every parameter."""
    if decay_filter == "all":
        return True
    if decay_filter == "authors":
        return not (name.endswith("signatures") or p.dim() == 1)
    if decay_filter == "ours":
        return not (p.dim() < 2 or "signatures" in name or "codes" in name)
    raise ValueError(f"unknown decay_filter {decay_filter!r}; valid choices: {', '.join(DECAY_FILTERS)}")


def decay_groups(model: nn.Module, decay_filter: str = "authors") -> tuple[list, list]:
    """The trainable parameters split into ``(decayed, not decayed)`` by ``decays``."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (decay if decays(name, p, decay_filter) else no_decay).append(p)
    return decay, no_decay


@dataclass
class _Run:
    """One training while it runs: what ``fit`` builds (``_build``) and the epoch loop reads."""

    model: NAC  # trained in place (SyncBatchNorm under DDP on CUDA)
    wrapped: nn.Module  # Objective(model), DDP-wrapped when distributed: what a step calls
    optimizer: torch.optim.AdamW
    ema: Any  # the AveragedModel (train.ema), evaluated and handed back; or None
    mixer: BatchMixer | None  # mixup/cutmix of an augmentation recipe (soft targets); or None
    sampler: Any  # the loader's sampler, reshuffled per epoch (set_epoch)
    loader: DataLoader
    val_set: Dataset | None
    cfg: TrainConfig
    world: World
    steps_per_epoch: int
    total: int  # optimizer steps of the whole training (the LR schedule's length)
    warmup: int  # of which the LR warm-up's
    use_amp: bool  # bf16 autocast (train.amp on CUDA)
    own_objective: bool  # the model defines training_loss (a baseline trained by EM, say)
    state: RunState  # where training stands, for the messages that say what is kept
    fingerprint: str | None
    on_epoch_end: Callable[[int], None] | None
    history: list = field(default_factory=list)  # per-epoch metrics (resumed ones first)
    live: Any = None  # the dvclive logger (main process, live_dir given)
    bar: Any = None  # the tqdm bar
    scheduler: LambdaLR | None = None  # the LR schedule (warmup_cosine), stepped before each optimizer step
    losses: Callable = objective_losses  # the step's forward and loss, compiled with train.compile
    parts: Callable | None = None  # its form without the regularizer (train.compile_matching: overlap)
    step: Callable | None = None  # the whole step compiled (train.compile_scope: step), AdamW included
    lrs: torch.Tensor | None = None  # the whole step's LRs on the device, one per group (compiled.step_lrs)
    adamw: list | None = None  # the whole step's parameters and AdamW state (compiled.adamw_groups)
    ahead: tuple | None = None  # the next step's matching, started as the last whole step returned


def fit(
    model: NAC,
    train_set: Dataset,
    val_set: Dataset | None,
    cfg: TrainConfig,
    world: World | None = None,
    checkpoint: str | Path | None = None,
    live_dir: str | Path | None = None,
    progress: bool = True,
    desc: str = "train",
    on_epoch_end: Callable[[int], None] | None = None,
    fingerprint: str | None = None,
) -> dict[str, Any]:
    """Train ``model`` in place; returns ``{"history": [per-epoch metrics], "final": last entry}``.

    ``checkpoint``: written atomically after every epoch and resumed from when it exists and was
    written with the same model and training configs and the same ``fingerprint`` (callers pass
    a hash of the data and code, so a checkpoint from before a code or data change is never
    resumed). A checkpoint written with other settings (or holding non-finite values) is moved
    aside to ``<name>.stale-<time>`` when this run writes its first checkpoint (one line says
    where, and which of config / train_config / fingerprint differ), never overwritten in place.
    The training holds an OS lock on ``<checkpoint>.lock``: a second one on the same checkpoint is
    refused (``CheckpointBusyError``). ``val_set`` is held-out data: never the training set.
    ``on_epoch_end(epoch)`` is called after each checkpoint (tests use it).

    A model with its own training objective (a baseline trained by EM, say) defines
    ``training_loss(batch_kwargs, labels, indices, step, label_smoothing=...) -> (logits, loss)``;
    the step then minimises that loss (through the DDP wrapper, with the same gradient clipping,
    checks and schedule) instead of cross-entropy + regularizer, and ``train_loss`` logs it
    (``train_reg`` is 0). ``step`` is the global step; ``indices`` is each item's position in
    ``train_set`` when the model sets ``needs_example_index`` (the items gain ``"index"``), else
    None. Models without ``training_loss`` (the NAC) train exactly as before.

    Stops with ``NonFiniteTrainingError`` (a non-finite loss, gradient norm or weight) or
    ``TrainingStopped`` (Ctrl-C, a full disk), naming ``desc``, the epoch and the checkpoint kept
    (``nac.training.errors``).
    """
    run = _build(model, train_set, val_set, cfg, world or World(), checkpoint, desc, on_epoch_end, fingerprint)
    state, world = run.state, run.world
    lock = CheckpointLock(state.ckpt_path, owner=desc).acquire() if state.ckpt_path and world.is_main else None
    start_epoch = 0
    run.scheduler = warmup_cosine(run.optimizer, run.total, run.warmup, cfg.peak_lr, cfg.min_lr)
    try:
        if state.ckpt_path and world.is_main and (src := restore(state.ckpt_path)) is not None:
            tqdm.write(
                f"{desc}: {state.ckpt_path} was deleted after it was written (`dvc checkout`?); restored it from {src}"
            )
        barrier()
        if state.ckpt_path and state.ckpt_path.exists():
            start_epoch, run.history = resume_from(
                state.ckpt_path,
                run.model,
                run.optimizer,
                run.ema,
                cfg,
                fingerprint,
                world,
                desc,
                progress,
                state,
                scheduler=run.scheduler,
            )
        state.saved_epoch = start_epoch
        run.live = _open_live(live_dir, run.history) if world.is_main else None
        run.bar = tqdm(
            total=run.total,
            initial=start_epoch * run.steps_per_epoch,
            desc=desc,
            unit="step",
            dynamic_ncols=True,
            disable=not (progress and world.is_main),
            **bar_kwargs(),
        )
        _train_epochs(run, start_epoch)
    except KeyboardInterrupt:
        where = (
            f"at epoch {state.epoch} after {state.step}/{run.steps_per_epoch} steps"
            if state.epoch
            else "before the first step"
        )
        raise TrainingInterrupted(f"{desc}: interrupted {where}; {state.intact()}") from None
    finally:
        if run.bar is not None:
            run.bar.close()
        if run.live is not None:
            _close_live(run.live)
        if lock is not None:
            lock.release()
    if run.ema is not None:  # hand back the averaged weights: they are what was evaluated
        run.model.load_state_dict(run.ema.module.state_dict())
    return {"history": run.history, "final": run.history[-1] if run.history else {}}


def _build(
    model: NAC,
    train_set: Dataset,
    val_set: Dataset | None,
    cfg: TrainConfig,
    world: World,
    checkpoint: str | Path | None,
    desc: str,
    on_epoch_end,
    fingerprint: str | None,
) -> _Run:
    """The model on its device, the optimizer (and EMA), the sampler and loader of ``fit``."""
    device = world.device
    if world.distributed and device.type == "cuda":  # batch statistics over the global batch
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model.to(device)
    if getattr(model, "needs_example_index", False):
        train_set = WithIndex(train_set)
    objective = Objective(model)
    wrapped = DistributedDataParallel(objective) if world.distributed else objective
    decay, no_decay = decay_groups(model, cfg.decay_filter)
    optimizer = make_adamw(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.peak_lr,
        impl=getattr(cfg, "adamw", None),
    )
    ema = make_ema(model, cfg.ema) if cfg.ema else None
    mode = getattr(cfg, "compile", False)
    if mode is not False and hasattr(model, "training_loss"):
        raise ValueError(f"train.compile={mode!r} compiles the NAC objective; this model defines its own: set false")
    whole = mode is not False and getattr(cfg, "compile_scope", "forward") == "step"
    if whole and world.distributed:
        raise ValueError(
            "train.compile_scope=step takes the gradients inside the graph, where DDP cannot reduce them: "
            "set train.compile_scope=forward to train on several processes"
        )

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
    return _Run(
        model=model,
        wrapped=wrapped,
        optimizer=optimizer,
        ema=ema,
        mixer=mixer,
        sampler=sampler,
        loader=loader,
        val_set=val_set,
        cfg=cfg,
        world=world,
        steps_per_epoch=steps_per_epoch,
        total=cfg.epochs * steps_per_epoch,
        warmup=round(cfg.warmup_epochs * steps_per_epoch),
        use_amp=cfg.amp and device.type == "cuda",
        own_objective=hasattr(model, "training_loss"),
        state=RunState(Path(checkpoint) if checkpoint else None, desc),
        fingerprint=fingerprint,
        on_epoch_end=on_epoch_end,
        losses=compile_losses(mode if not whole else False),
        parts=compile_losses(mode, objective_parts) if mode and cfg.compile_matching == "overlap" else None,
        step=compile_step(mode) if whole else None,
    )


def _train_epochs(run: _Run, start_epoch: int) -> None:
    """Epochs ``start_epoch + 1 .. cfg.epochs``: per step the LR, the loss, backward, clipping,
    the optimizer step, the device-side checks and the EMA; per epoch the metrics, the checkpoint."""
    model, ema, cfg, world, state = run.model, run.ema, run.cfg, run.world, run.state
    checks = StepChecks(model, world.device)
    groups = ema_groups(ema, model) if ema is not None else None
    ema_copy = ema is not None and int(ema.n_averaged) == 0  # read once: the first update copies
    for epoch in range(start_epoch, cfg.epochs):
        state.epoch, state.step = epoch + 1, 0
        torch.manual_seed(_epoch_seed(cfg.seed, epoch, world.rank))
        run.sampler.set_epoch(epoch)
        run.wrapped.train()
        checks.reset()
        sums = torch.zeros(4, dtype=torch.float64, device=world.device)  # loss, reg, correct, count
        for i, batch in enumerate(run.loader):
            step = epoch * run.steps_per_epoch + i
            if step:  # the scheduler's count becomes this step's (it starts at 0; a resumed one at the last step)
                run.scheduler.step()
            logits, labels, ce, reg, loss, grad_norm = train_step(run, batch, epoch, step, checks)
            checks.record(i, loss, grad_norm)
            if ema is not None:
                ema_update(ema, groups, cfg.ema, copy=ema_copy)
                ema_copy = False
            with torch.no_grad():
                n = len(labels)
                sums += torch.stack(
                    [
                        ce.detach().double() * n,
                        reg.detach().double() * n,
                        (logits.argmax(-1) == labels).sum().double(),
                        torch.full((), float(n), dtype=torch.float64, device=world.device),
                    ]
                )
            run.bar.update(1)
            state.step = i + 1
            if (i + 1) % SYNC_EVERY == 0:  # the host's periodic read: finiteness, and the bar's loss
                checks.raise_if_bad(state, world)
                loss_sum, _, correct, count = sums.tolist()  # the epoch so far, this process's
                run.bar.set_postfix(loss=f"{loss_sum / count:.3f}", acc=f"{100 * correct / count:.1f}", epoch=epoch + 1)
        checks.raise_if_bad(state, world)  # before anything is evaluated or saved
        _end_epoch(run, epoch, sums)


def train_step(run: _Run, batch: dict, epoch: int, step: int, checks: StepChecks) -> tuple[torch.Tensor, ...]:
    """One training step of ``fit`` less its schedule, checks' record and EMA: the forward and
    loss (``_losses``), then, unless the whole step is compiled (``train.compile_scope: step``),
    backward, clipping and the optimizer step. Returns ``_losses``'s ``(logits, labels, ce, reg,
    loss, grad_norm)`` with ``grad_norm`` set. bench/gpu_window.py times it."""
    logits, labels, ce, reg, loss, grad_norm = _losses(run, batch, epoch, step, checks)
    if grad_norm is None:  # not the whole step compiled: backward, clipping and AdamW here
        model, optimizer, cfg = run.model, run.optimizer, run.cfg
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip:
            grad_norm = nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        else:  # the same norm, nothing rescaled
            grad_norm = nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])
        optimizer.step()
    return logits, labels, ce, reg, loss, grad_norm


def _losses(run: _Run, batch: dict, epoch: int, step: int, checks: StepChecks) -> tuple[torch.Tensor, ...]:
    """One step's forward: ``(logits [B, classes], labels [B], ce, reg, loss, grad_norm)``
    (scalars; ``ce`` is what ``train_loss`` logs, ``loss`` what is minimised); ``grad_norm`` is
    None but for the whole compiled step (``run.step``), which has also taken the optimizer step.
    An error in the forward is reported as the non-finite step before it when there is one
    (``checks.guard``)."""
    cfg, device = run.cfg, run.world.device
    compiled = run.losses is not objective_losses or run.step is not None
    # a compiled step takes the matching's permutations as inputs: started first, so the worker
    # thread matches while the host prepares the batch (nac.training.compiled)
    pending = None
    if compiled and not run.own_objective:
        pending, run.ahead = run.ahead or start_matching(run.model), None
    kw = model_kwargs(batch, device)
    if cfg.augment is True:
        kw["inputs"] = augment_images(kw["inputs"])
    labels = batch["label"].to(device, non_blocking=True).long()
    targets = None
    if run.mixer is not None:  # soft targets (label smoothing included); accuracy against `labels`
        kw["inputs"], targets = run.mixer(kw["inputs"], labels, epoch, run.world.rank, step)
    if run.own_objective:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=run.use_amp), checks.guard(run.state):
            indices = batch["index"].to(device, non_blocking=True).long() if "index" in batch else None
            logits, loss = run.wrapped(
                **kw, labels=labels, indices=indices, step=step, label_smoothing=cfg.label_smoothing
            )
            ce = loss = loss.float()
            reg = torch.zeros((), device=device)
        return logits, labels, ce, reg, loss, None
    with checks.guard(run.state):
        if compiled and cfg.compile == "reduce-overhead":  # a new step: the CUDA graphs' outputs may be reused
            torch.compiler.cudagraph_mark_step_begin()
        if run.step is not None:
            if run.adamw is None:  # the first step (of this process): AdamW's state, fresh or resumed
                run.adamw = adamw_groups(run.optimizer)
            run.lrs = step_lrs(run.optimizer, run.lrs, device)
            perms = finish_matching(pending, device)
            logits, ce, reg, loss, grad_norm, next_P = run.step(
                run.wrapped, run.adamw, run.lrs, kw, labels, targets, perms, *_loss_args(run), cfg.grad_clip
            )
            if next_P is not None:  # the next step's matching runs while the host goes on
                run.ahead = start_matching(run.model, next_P)
            return logits, labels, ce, reg, loss, grad_norm
        if pending is not None and run.parts is not None:  # the matching awaited while the device runs the forward
            logits, ce, reg, loss = overlapped_losses(
                run.parts, run.model, run.wrapped, kw, labels, targets, pending, *_loss_args(run)
            )
        else:
            logits, ce, reg, loss = run.losses(
                run.wrapped, kw, labels, targets, finish_matching(pending, device), *_loss_args(run)
            )
    return logits, labels, ce, reg, loss, None


def _loss_args(run: _Run) -> tuple:
    return run.cfg.label_smoothing, run.cfg.reg_weight, run.use_amp


def _end_epoch(run: _Run, epoch: int, sums: torch.Tensor) -> None:
    """The epoch's metrics (``sums``: loss, reg, correct, count, summed on the device) reduced over
    the processes, the validation accuracy, the checkpoint and the dvclive entry (main process)."""
    cfg, world, state, ema = run.cfg, run.world, run.state, run.ema
    all_reduce_(sums)
    means = torch.stack([sums[0] / sums[3], sums[1] / sums[3], 100 * sums[2] / sums[3]]).tolist()  # one read
    entry = {
        "epoch": epoch + 1,
        "train_loss": means[0],
        "train_reg": means[1],
        "train_acc": means[2],
        "lr": run.optimizer.param_groups[0]["lr"],
    }
    if world.is_main:
        if run.val_set is not None:
            eval_model = ema.module if ema is not None else run.model
            entry.update(
                {
                    f"val_{k}": v
                    for k, v in evaluate_accuracy(eval_model, run.val_set, world.device, cfg.eval_batch_size).items()
                }
            )
        run.history.append(entry)
        if state.ckpt_path:
            extra = {"ema": ema.state_dict()} if ema is not None else {}
            save_epoch(
                state,
                run.model,
                optimizer=run.optimizer.state_dict(),
                scheduler=run.scheduler.state_dict(),
                epoch=epoch + 1,
                history=run.history,
                train_config=cfg.to_dict(),
                fingerprint=run.fingerprint,
                **extra,
            )
        _log_live(run.live, entry)
        run.bar.write(
            f"{state.desc}: epoch {epoch + 1}/{cfg.epochs} "
            + " ".join(f"{k}={v:.4g}" for k, v in entry.items() if k != "epoch")
        )
    barrier()
    if run.on_epoch_end:
        run.on_epoch_end(epoch + 1)


def _open_live(live_dir, history):
    """dvclive logger; the history from a resumed checkpoint is replayed so the logged curves
    are identical to an uninterrupted run's. Kept by hand rather than dvclive's ``resume=True``:
    that resumes one logged step at step 0 and trusts files that can lag the checkpoint
    (``tests/test_training.py::test_resumed_run_logs_the_dvclive_files_of_an_uninterrupted_run``)."""
    if live_dir is None:
        return None
    from dvclive import Live

    live = Live(dir=str(live_dir), resume=False, save_dvc_exp=False, dvcyaml=False)
    for entry in history:
        _log_live(live, entry)
    return live


def _close_live(live) -> None:
    """End a dvclive log without ``Live.end()``. Each ``next_step`` has already written what this
    suite reads (metrics.json, the plots' .tsv); what ``end()`` adds is DVC-experiment bookkeeping
    the stages do not use (they declare the files as outs): under ``dvc exp run`` it builds DVC's
    repo index in every job (1.4 s; docs/costs.md), and pooled workers race to remove dvclive's one
    step signal file (FileNotFoundError). The signal file is removed here, tolerating a worker that
    removed it first."""
    from dvclive.vscode import cleanup_dvclive_step_completed

    try:
        cleanup_dvclive_step_completed()
    except FileNotFoundError:
        pass


def _log_live(live, entry: dict) -> None:
    if live is None:
        return
    for k, v in entry.items():
        if k != "epoch":
            live.log_metric(k.replace("_", "/", 1), v, plot=True)
    live.next_step()
