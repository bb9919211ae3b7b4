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

The path to ``optimizer.step``: ``fit`` builds a ``Run`` (``nac.training.run.build_run``: model,
optimizer and schedule, EMA, sampler, loader), takes the lock, resumes, then runs the epochs: each
batch is one call of ``train_step``, which goes from the batch to ``optimizer.step()`` itself (the
LR, the forward with the regularizer, the loss, backward, clipping, AdamW, the checks, the EMA and
the epoch's sums in ``EpochState``); ``_end_epoch`` then evaluates, saves the checkpoint and logs.
``train.compile`` runs the step's forward and loss (and with ``compile_scope: step`` its update)
compiled (``nac.training.compiled``): the same functions. The whole route from a stage is in
docs/design.md ("The route from the stage to ``optimizer.step()``").
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import Dataset
from tqdm.auto import tqdm

from nac.checkpoint_io import restore
from nac.checkpoint_lock import CheckpointLock
from nac.evaluation import model_kwargs, predict, topk_accuracy
from nac.model import NAC
from nac.progress import bar_kwargs
from nac.training import live as dvclive_log
from nac.training.config import TrainConfig
from nac.training.distributed import World, all_reduce_, barrier
from nac.training.ema import ema_update
from nac.training.errors import TrainingInterrupted
from nac.training.optim import clip_gradients
from nac.training.resume import resume_from, save_epoch
from nac.training.run import EpochState, Run, build_run

# The host reads the device-side finiteness record (and the bar's epoch-so-far metrics) every SYNC_EVERY
# steps and at each epoch end; no other read happens in a step.
SYNC_EVERY = 32


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
    mirror: str | Path | None = None,
) -> dict[str, Any]:
    """Train ``model`` in place; returns ``{"history": [per-epoch metrics], "final": last entry}``.

    ``checkpoint``: written atomically after every epoch and resumed from when it exists and was
    written with the same model and training configs and the same ``fingerprint`` (callers pass
    a hash of the data and code, so a checkpoint from before a code or data change is never
    resumed). A checkpoint written with other settings (or holding non-finite values) is moved
    aside to ``<name>.stale-<time>`` when this run writes its first checkpoint (one line says
    where, and which of config / train_config / fingerprint differ), never overwritten in place.
    The training holds an OS lock on ``<checkpoint>.lock``: a second one on the same checkpoint is
    refused (``CheckpointBusyError``). ``val_set`` is held-out data: never the training set; only the
    main process (``world.is_main``) evaluates it.
    ``on_epoch_end(epoch)`` is called after each checkpoint (tests use it).
    ``mirror``: where the checkpoint is also hard-linked after each save and restored from when it was
    deleted after it was written (``nac.checkpoint_io.mirror_path``; the training stages pass it); None:
    no mirror.

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
    world = world or World()
    val_set = val_set if world.is_main else None  # validation runs on the main process only
    run = build_run(model, train_set, val_set, cfg, world, checkpoint, desc, on_epoch_end, fingerprint)
    state, world = run.state, run.world
    state.mirror = Path(mirror) if mirror is not None and state.ckpt_path else None
    lock = CheckpointLock(state.ckpt_path, owner=desc).acquire() if state.ckpt_path and world.is_main else None
    start_epoch, now = 0, None
    try:
        if state.ckpt_path and world.is_main and (src := restore(state.ckpt_path, state.mirror)) is not None:
            tqdm.write(
                f"{desc}: {state.ckpt_path} was deleted after it was written (`dvc checkout`?); restored it from {src}"
            )
        barrier()
        history: list = []
        if state.ckpt_path and state.ckpt_path.exists():
            start_epoch, history = resume_from(
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
        now = EpochState.of(run, history)  # the EMA's first update copies: read once
        now.live = dvclive_log.open_live(live_dir, now.history) if world.is_main else None
        now.bar = tqdm(
            total=run.total,
            initial=start_epoch * run.steps_per_epoch,
            desc=desc,
            unit="step",
            dynamic_ncols=True,
            disable=not (progress and world.is_main),
            **bar_kwargs(),
        )
        for epoch in range(start_epoch, cfg.epochs):
            state.epoch, state.step = epoch + 1, 0
            torch.manual_seed(_epoch_seed(cfg.seed, epoch, world.rank))
            run.sampler.set_epoch(epoch)
            run.wrapped.train()
            run.checks.reset()
            now.sums = torch.zeros(4, dtype=torch.float64, device=world.device)  # loss, reg, correct, count
            for i, batch in enumerate(run.loader):
                train_step(run, now, batch, epoch, i)
                now.bar.update(1)
                state.step = i + 1
                if (i + 1) % SYNC_EVERY == 0:  # the host's periodic read: finiteness, and the bar's loss
                    run.checks.raise_if_bad(state, world)
                    loss_sum, _, correct, count = now.sums.tolist()  # the epoch so far, this process's
                    now.bar.set_postfix(
                        loss=f"{loss_sum / count:.3f}", acc=f"{100 * correct / count:.1f}", epoch=epoch + 1
                    )
            run.checks.raise_if_bad(state, world)  # before anything is evaluated or saved
            _end_epoch(run, now, epoch)
    except KeyboardInterrupt:
        where = (
            f"at epoch {state.epoch} after {state.step}/{run.steps_per_epoch} steps"
            if state.epoch
            else "before the first step"
        )
        raise TrainingInterrupted(f"{desc}: interrupted {where}; {state.intact()}") from None
    finally:
        if now is not None and now.bar is not None:
            now.bar.close()
        if now is not None and now.live is not None:
            dvclive_log.close_live(now.live)
        if lock is not None:
            lock.release()
    if run.ema is not None:  # hand back the averaged weights: they are what was evaluated
        run.model.load_state_dict(run.ema.module.state_dict())
    return {"history": now.history, "final": now.history[-1] if now.history else {}}


def train_step(run: Run, now: EpochState, batch: dict, epoch: int, i: int) -> torch.Tensor:
    """Step ``i`` of ``epoch``, from a batch to ``optimizer.step()``; returns the loss minimised.

    The learning rate of this step, the batch on the device (augmented, mixed), the forward with
    the graph regularizer computed from the same link probabilities, cross-entropy + ``reg_weight``
    x regularizer (``objective_losses``, ``run.losses``; a baseline's own loss: ``own_losses``),
    backward, gradient clipping (``clip_gradients``) and AdamW's ``optimizer.step()``; then the
    device-side finiteness record (read by the host every ``SYNC_EVERY`` steps), the EMA and the
    epoch's metric sums (``now``). Nothing here waits on the device. ``train.compile`` runs these
    same functions compiled: ``run.losses`` is ``objective_losses`` compiled, at the permutations
    matched before the batch (``run.compiled``), and with ``compile_scope: step`` ``run.update`` is
    ``clip_and_step`` (the clipping and the step) compiled (``nac.training.compiled``);
    ``train.cuda_graphs`` replays this step captured as CUDA graphs after its warm-up steps
    (``run.graphed``, ``nac.training.graphed``)."""
    cfg, graphed = run.cfg, run.graphed
    step = epoch * run.steps_per_epoch + i
    if step:  # the scheduler's count becomes this step's (it starts at 0; a resumed one at the last step)
        run.scheduler.step()
    if graphed is not None and graphed.warm:  # train.cuda_graphs: the step below, captured and replayed
        logits, ce, reg, loss, grad_norm, labels = graphed.step(run, batch, epoch, step)
    else:
        with graphed.warming() if graphed is not None else nullcontext():
            if run.compiled is not None:  # its matching runs on the worker thread while the host prepares the batch
                run.compiled.begin(run.objective)
            kw, labels, targets = batch_inputs(run, batch, epoch, step)
            with run.checks.guard(run.state):
                if run.own_objective:  # a baseline's own loss (training_loss), e.g. a Modular Network's EM
                    logits, ce, reg, loss = own_losses(run, kw, labels, batch, step)
                else:  # the logits and the graph regularizer from one circuit design (Objective), and the loss
                    perms = run.compiled.perms(run.world.device) if run.compiled is not None else None
                    logits, ce, reg, loss = run.losses(
                        run.wrapped, kw, labels, targets, perms, cfg.label_smoothing, cfg.reg_weight, run.use_amp
                    )
            run.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if run.update is not None:  # compile_scope: step: clip_and_step (the two lines below) compiled
                grad_norm = run.update(run.params, run.optimizer, cfg.grad_clip)
            else:
                grad_norm = clip_gradients(run.params, cfg.grad_clip)
                run.optimizer.step()
    run.checks.record(i, loss, grad_norm)
    if run.ema is not None:
        ema_update(run.ema, run.ema_groups, cfg.ema, copy=now.ema_copy)
        now.ema_copy = False
    with torch.no_grad():
        n = len(labels)
        now.sums += torch.stack(
            [
                ce.detach().double() * n,
                reg.detach().double() * n,
                (logits.argmax(-1) == labels).sum().double(),
                torch.full((), float(n), dtype=torch.float64, device=run.world.device),
            ]
        )
    return loss


def own_losses(run: Run, kw: dict, labels: torch.Tensor, batch: dict, step: int) -> tuple:
    """``(logits, loss, 0, loss)`` of a model with its own training objective (``training_loss``, a
    baseline trained by EM, say): its loss is both the step's cross-entropy entry and what is
    minimised; no regularizer. ``indices``: the items' positions (``needs_example_index``)."""
    device = run.world.device
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=run.use_amp):
        indices = batch["index"].to(device, non_blocking=True).long() if "index" in batch else None
        logits, loss = run.wrapped(
            **kw, labels=labels, indices=indices, step=step, label_smoothing=run.cfg.label_smoothing
        )
        loss = loss.float()
    return logits, loss, torch.zeros((), device=device), loss


def batch_inputs(run: Run, batch: dict, epoch: int, step: int) -> tuple[dict, torch.Tensor, torch.Tensor | None]:
    """``(model kwargs, labels [B], soft targets [B, classes] or None)`` of ``batch`` on the device:
    ``train.augment: true``'s flips and shifts, an augmentation recipe's mixup/cutmix (``run.mixer``)."""
    device = run.world.device
    kw = model_kwargs(batch, device)
    if run.cfg.augment is True:
        kw["inputs"] = augment_images(kw["inputs"])
    labels = batch["label"].to(device, non_blocking=True).long()
    targets = None
    if run.mixer is not None:  # soft targets (label smoothing included); accuracy against `labels`
        kw["inputs"], targets = run.mixer(kw["inputs"], labels, epoch, run.world.rank, step)
    return kw, labels, targets


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


def _epoch_seed(seed: int, epoch: int, rank: int) -> int:
    return (seed * 1_000_003 + epoch * 7919 + rank * 104_729) % (2**31)


def evaluate_accuracy(model: nn.Module, data: Dataset, device, batch_size: int) -> dict[str, float]:
    out = predict(model, data, device, batch_size)
    return {
        "acc1": topk_accuracy(out["logits"], out["label"], 1),
        "acc5": topk_accuracy(out["logits"], out["label"], 5),
    }


def _end_epoch(run: Run, now: EpochState, epoch: int) -> None:
    """The epoch's metrics (``now.sums``: loss, reg, correct, count, summed on the device) reduced over
    the processes, the validation accuracy, the checkpoint and the dvclive entry (main process)."""
    cfg, world, state, ema, sums = run.cfg, run.world, run.state, run.ema, now.sums
    all_reduce_(sums)
    means = torch.stack([sums[0] / sums[3], sums[1] / sums[3], 100 * sums[2] / sums[3]]).tolist()  # one read
    entry = {
        "epoch": epoch + 1,
        "train_loss": means[0],
        "train_reg": means[1],
        "train_acc": means[2],
        "lr": float(run.optimizer.param_groups[0]["lr"]),  # (a tensor for a compiled update)
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
        now.history.append(entry)
        if state.ckpt_path:
            extra = {"ema": ema.state_dict()} if ema is not None else {}
            save_epoch(
                state,
                run.model,
                optimizer=run.optimizer.state_dict(),
                scheduler=run.scheduler.state_dict(),
                epoch=epoch + 1,
                history=now.history,
                train_config=cfg.to_dict(),
                fingerprint=run.fingerprint,
                **extra,
            )
        dvclive_log.log_live(now.live, entry)
        now.bar.write(
            f"{state.desc}: epoch {epoch + 1}/{cfg.epochs} "
            + " ".join(f"{k}={v:.4g}" for k, v in entry.items() if k != "epoch")
        )
    barrier()
    if run.on_epoch_end:
        run.on_epoch_end(epoch + 1)
