"""Training hyper-parameters (one dataclass; the ``train`` block of params.yaml)."""

from __future__ import annotations

from dataclasses import dataclass

from nac.config import ConfigDict, check_field_types

DECAY_FILTERS = ("authors", "ours", "all")  # nac.training.optim.decays


@dataclass
class TrainConfig(ConfigDict):
    section = "train config"
    epochs: int = 10
    batch_size: int = 128  # global batch (split across processes under torchrun)
    lr: float = 1e-3  # peak learning rate, after warm-up
    lr_batch_scaling: int | None = None  # authors: lr * global_batch / 512; None = no scaling
    weight_decay: float = 0.05
    decay_filter: str = (
        "authors"  # which parameters decay (nac.training.optim.decays): authors | ours (nac v1) | all (m2mKD)
    )
    warmup_epochs: float = 1.0
    min_lr: float = 1e-5
    label_smoothing: float = 0.1
    grad_clip: float | None = 1.0
    reg_weight: float = 0.1  # weight of the graph-structure regularizer
    ema: float | None = None  # EMA decay of the weights (e.g. 0.99996); evaluated with EMA if set
    amp: bool = True  # bf16 autocast, on CUDA only
    # images: true = random flip and 4 px translation; false = none; "authors_tinyimagenet" = the
    # authors' recipe (RandAugment, random erasing, repeated augmentation x3, mixup/cutmix with
    # label_smoothing; nac/training/augment.py)
    augment: bool | str = True
    num_workers: int = 0
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda
    eval_batch_size: int = 256
    # AdamW's implementation (nac.training.optim.make_adamw): default | foreach | fused. "fused" is
    # one kernel over all parameters (capturable on CUDA: no host reads, CUDA-graph ready); it
    # rounds differently from the default: weights differ in the last ulp, up to 8 ulps after 100
    # steps and 24 after 1,000 (nac/training/optim.py), so a run's numbers change
    # beyond float rounding.
    adamw: str = "default"
    # torch.compile of the step's forward and loss (nac/training/compiled.py): false (eager) |
    # default | reduce-overhead (CUDA graphs) | aot_eager (traced, no code generation). Inductor's
    # random draws differ from eager's: the same distribution, not the same numbers.
    compile: bool | str = False
    # where a compiled step waits for the regularizer's matching (nac.training.compiled): before |
    # overlap (while the device runs the forward; the regularizer's few ops then run eagerly)
    compile_matching: str = "before"
    # what train.compile compiles (nac/training/compiled.py): forward (forward and loss; backward,
    # clipping and AdamW eager) | step (the whole step, AdamW included, one graph)
    compile_scope: str = "forward"

    def __post_init__(self) -> None:
        check_field_types(self)
        for name in ("epochs", "batch_size", "eval_batch_size"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"train.{name} must be >= 1, got {getattr(self, name)!r}")
        if self.lr <= 0 or self.min_lr < 0 or self.min_lr > self.lr:
            raise ValueError(f"need 0 <= train.min_lr <= train.lr and lr > 0; got lr={self.lr}, min_lr={self.min_lr}")
        if self.warmup_epochs < 0 or self.warmup_epochs > self.epochs:
            raise ValueError(f"train.warmup_epochs must be in [0, epochs={self.epochs}], got {self.warmup_epochs}")
        if self.ema is not None and not 0 < self.ema < 1:
            raise ValueError(f"train.ema must be a decay in (0, 1) or null, got {self.ema}")
        if self.decay_filter not in DECAY_FILTERS:
            raise ValueError(f"train.decay_filter={self.decay_filter!r}; valid choices: {', '.join(DECAY_FILTERS)}")
        from nac.training.augment import check_augment

        check_augment(self.augment)
        if self.adamw not in ("default", "foreach", "fused"):
            raise ValueError(f"train.adamw={self.adamw!r}; valid choices: default, foreach, fused")
        from nac.training.compiled import check_compile

        check_compile(self.compile, self.compile_matching, self.compile_scope, self.adamw)
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"train.device={self.device!r}; valid choices: auto, cpu, cuda")

    def to_dict(self) -> dict:
        """All fields, less ``adamw`` and the ``compile`` fields at their defaults:
        checkpoints written before the fields existed keep matching (and resuming)."""
        d = super().to_dict()
        if d.get("adamw") == "default":
            del d["adamw"]
        if d.get("compile") is False:
            del d["compile"]
        if d.get("compile_matching") == "before":
            del d["compile_matching"]
        if d.get("compile_scope") == "forward":
            del d["compile_scope"]
        return d

    @property
    def peak_lr(self) -> float:
        return self.lr * (self.batch_size / self.lr_batch_scaling if self.lr_batch_scaling else 1.0)
