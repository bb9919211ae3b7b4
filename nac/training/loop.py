"""The training loop: AdamW, linear warm-up + cosine schedule, label smoothing, gradient
clipping, the graph-structure regularizer, bf16 autocast on CUDA, optional EMA, dvclive logging
per epoch, a tqdm bar with ETA, and an atomic checkpoint per epoch that a rerun resumes from.

Reproducibility: every epoch reseeds torch from ``(seed, epoch, rank)`` and the sampler
shuffles with ``(seed, epoch)``, so a run resumed from the checkpoint of epoch ``e`` continues
exactly as the uninterrupted run would (same batches, same kernel samples, same metrics).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler
from tqdm.auto import tqdm

from nac.checkpoint import load_checkpoint, save_checkpoint
from nac.evaluation import model_kwargs, predict, topk_accuracy
from nac.model import NAC
from nac.training.config import TrainConfig
from nac.training.distributed import World, all_reduce_, barrier


class NonFiniteLossError(FloatingPointError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


class Objective(nn.Module):
    """Wraps the model so one forward returns the logits and the graph regularizer computed from
    the same circuit design (one module for DDP to wrap)."""

    def __init__(self, model: NAC):
        super().__init__()
        self.model = model

    def forward(self, inputs, mask=None, cond=None, cond_mask=None):
        design = self.model.design(cond, cond_mask)
        return self.model(inputs, mask=mask, design=design), self.model.graph_regularizer(design).to(inputs.device)


def lr_at(step: int, total: int, warmup: int, peak: float, floor: float) -> float:
    """Linear warm-up from ~0 to ``peak`` over ``warmup`` steps, then cosine decay to ``floor``."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return floor + 0.5 * (peak - floor) * (1.0 + math.cos(math.pi * min(1.0, progress)))


def augment_images(x: torch.Tensor, pad: int = 4) -> torch.Tensor:
    """Random horizontal flip and translation by up to ``pad`` px for images ``[B, 3, H, W]``
    (other inputs pass through). Uses the global torch RNG (reseeded per epoch)."""
    if x.dim() != 4 or x.shape[1] != 3:
        return x
    B, _, H, W = x.shape
    flip = torch.rand(B) < 0.5
    x = torch.where(flip[:, None, None, None].to(x.device), x.flip(-1), x)
    padded = F.pad(x, (pad, pad, pad, pad), mode="replicate" if x.is_floating_point() else "constant")
    dy, dx = torch.randint(0, 2 * pad + 1, (2, B)).tolist()
    return torch.stack([padded[i, :, dy[i]:dy[i] + H, dx[i]:dx[i] + W] for i in range(B)])


def _epoch_seed(seed: int, epoch: int, rank: int) -> int:
    return (seed * 1_000_003 + epoch * 7919 + rank * 104_729) % (2**31)


def evaluate_accuracy(model: nn.Module, data: Dataset, device, batch_size: int) -> dict[str, float]:
    out = predict(model, data, device, batch_size)
    return {"acc1": topk_accuracy(out["logits"], out["label"], 1), "acc5": topk_accuracy(out["logits"], out["label"], 5)}


def fit(model: NAC, train_set: Dataset, val_set: Dataset | None, cfg: TrainConfig, world: World | None = None,
        checkpoint: str | Path | None = None, live_dir: str | Path | None = None, progress: bool = True,
        desc: str = "train", on_epoch_end: Callable[[int], None] | None = None,
        fingerprint: str | None = None) -> dict[str, Any]:
    """Train ``model`` in place; returns ``{"history": [per-epoch metrics], "final": last entry}``.

    ``checkpoint``: written atomically after every epoch and resumed from when it exists and was
    written with the same model and training configs and the same ``fingerprint`` (callers pass
    a hash of the data and code, so a checkpoint from before a code or data change is never
    resumed). ``val_set`` is held-out data: never the training set. ``on_epoch_end(epoch)`` is
    called after each checkpoint (tests use it).
    """
    world = world or World()
    device = world.device
    if world.distributed and device.type == "cuda":  # batch statistics over the global batch
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model.to(device)
    objective = Objective(model)
    wrapped = DistributedDataParallel(objective) if world.distributed else objective
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if p.dim() < 2 or "signatures" in name or "codes" in name else decay).append(p)
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=cfg.peak_lr)
    ema = None
    if cfg.ema:
        ema = torch.optim.swa_utils.AveragedModel(model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(cfg.ema),
                                                  use_buffers=True)  # BatchNorm statistics averaged too

    if cfg.batch_size % world.world_size:
        raise ValueError(f"train.batch_size={cfg.batch_size} must be divisible by the number of processes ({world.world_size})")
    per_rank = cfg.batch_size // world.world_size
    sampler = DistributedSampler(train_set, num_replicas=world.world_size, rank=world.rank, shuffle=True,
                                 seed=cfg.seed, drop_last=True)
    # Its own generator: worker seeds never draw from the (per-epoch reseeded) global RNG, so a
    # resumed run sees exactly the random numbers of an uninterrupted one.
    loader = DataLoader(train_set, batch_size=per_rank, sampler=sampler, drop_last=True, num_workers=cfg.num_workers,
                        pin_memory=device.type == "cuda", persistent_workers=cfg.num_workers > 0,
                        generator=torch.Generator().manual_seed(cfg.seed))
    steps_per_epoch = len(loader)
    if steps_per_epoch == 0:
        raise ValueError(f"training set of {len(train_set)} items is smaller than one global batch ({cfg.batch_size})")
    total, warmup = cfg.epochs * steps_per_epoch, round(cfg.warmup_epochs * steps_per_epoch)

    start_epoch, history = 0, []
    ckpt_path = Path(checkpoint) if checkpoint else None
    if ckpt_path and ckpt_path.exists():
        ckpt = load_checkpoint(ckpt_path, map_location=device)
        same = (ckpt.get("config") == model.config.to_dict() and ckpt.get("train_config") == cfg.to_dict()
                and ckpt.get("fingerprint") == fingerprint)
        if same:
            model.load_state_dict(ckpt["model"])
            optimizer.load_state_dict(ckpt["optimizer"])
            if ema is not None:
                ema.load_state_dict(ckpt["ema"])
            start_epoch, history = int(ckpt["epoch"]), list(ckpt["history"])
            if world.is_main and progress:
                tqdm.write(f"{desc}: resuming from {ckpt_path} after epoch {start_epoch}/{cfg.epochs}")
        elif world.is_main:
            tqdm.write(f"{desc}: {ckpt_path} was written with other settings, data or code; starting over")

    live = _open_live(live_dir, history) if world.is_main else None
    bar = tqdm(total=total, initial=start_epoch * steps_per_epoch, desc=desc, unit="step", dynamic_ncols=True,
               disable=not (progress and world.is_main))
    use_amp = cfg.amp and device.type == "cuda"
    try:
        for epoch in range(start_epoch, cfg.epochs):
            torch.manual_seed(_epoch_seed(cfg.seed, epoch, world.rank))
            sampler.set_epoch(epoch)
            wrapped.train()
            sums = torch.zeros(4, dtype=torch.float64, device=device)  # loss, reg, correct, count
            for i, batch in enumerate(loader):
                step = epoch * steps_per_epoch + i
                for group in optimizer.param_groups:
                    group["lr"] = lr_at(step, total, warmup, cfg.peak_lr, cfg.min_lr)
                kw = model_kwargs(batch, device)
                if cfg.augment:
                    kw["inputs"] = augment_images(kw["inputs"])
                labels = batch["label"].to(device).long()
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_amp):
                    logits, reg = wrapped(**kw)
                    ce = F.cross_entropy(logits.float(), labels, label_smoothing=cfg.label_smoothing)
                    loss = ce + cfg.reg_weight * reg.float()
                _check_finite(loss, epoch, i, ckpt_path, world)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if cfg.grad_clip:
                    nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                optimizer.step()
                if ema is not None:
                    ema.update_parameters(model)
                with torch.no_grad():
                    sums += torch.stack([ce.detach().double() * len(labels), reg.detach().double() * len(labels),
                                         (logits.argmax(-1) == labels).sum().double(),
                                         torch.tensor(float(len(labels)), dtype=torch.float64, device=device)])
                bar.update(1)
                bar.set_postfix(loss=f"{ce.item():.3f}", epoch=epoch + 1)
            all_reduce_(sums)
            entry = {"epoch": epoch + 1, "train_loss": (sums[0] / sums[3]).item(), "train_reg": (sums[1] / sums[3]).item(),
                     "train_acc": (100 * sums[2] / sums[3]).item(), "lr": optimizer.param_groups[0]["lr"]}
            if world.is_main:
                if val_set is not None:
                    eval_model = ema.module if ema is not None else model
                    entry.update({f"val_{k}": v for k, v in evaluate_accuracy(eval_model, val_set, device, cfg.eval_batch_size).items()})
                history.append(entry)
                if ckpt_path:
                    extra = {"ema": ema.state_dict()} if ema is not None else {}
                    save_checkpoint(ckpt_path, model, optimizer=optimizer.state_dict(), epoch=epoch + 1, history=history,
                                    train_config=cfg.to_dict(), fingerprint=fingerprint, **extra)
                _log_live(live, entry)
                bar.write(f"{desc}: epoch {epoch + 1}/{cfg.epochs} " + " ".join(
                    f"{k}={v:.4g}" for k, v in entry.items() if k != "epoch"))
            barrier()
            if on_epoch_end:
                on_epoch_end(epoch + 1)
    finally:
        bar.close()
        if live is not None:
            live.end()
    if ema is not None:  # hand back the averaged weights: they are what was evaluated
        model.load_state_dict(ema.module.state_dict())
    return {"history": history, "final": history[-1] if history else {}}


def _check_finite(loss: torch.Tensor, epoch: int, i: int, ckpt: Path | None, world: World) -> None:
    bad = torch.tensor(0.0 if torch.isfinite(loss) else 1.0, device=loss.device)
    if world.distributed:
        all_reduce_(bad)
    if bad.item():
        kept = f"the last good checkpoint is kept at {ckpt}" if ckpt and ckpt.exists() else "no checkpoint was written yet"
        raise NonFiniteLossError(f"non-finite loss at epoch {epoch + 1}, step {i + 1}; {kept}. "
                                 "Lower train.lr, enable train.grad_clip, or check the data for NaNs")


def _open_live(live_dir, history):
    """dvclive logger; the history from a resumed checkpoint is replayed so the logged curves
    are identical to an uninterrupted run's."""
    if live_dir is None:
        return None
    from dvclive import Live

    live = Live(dir=str(live_dir), resume=False, save_dvc_exp=False, dvcyaml=False)
    for entry in history:
        _log_live(live, entry)
    return live


def _log_live(live, entry: dict) -> None:
    if live is None:
        return
    for k, v in entry.items():
        if k != "epoch":
            live.log_metric(k.replace("_", "/", 1), v, plot=True)
    live.next_step()
