"""Training hyper-parameters (one dataclass; the ``train`` block of params.yaml)."""

from __future__ import annotations

from typing import Annotated, Literal

import annotated_types as at
from pydantic import model_validator

from nac.config import ConfigDict
from nac.fields import DECAY, DEVICES, EXACT, FRACTION, NONNEGATIVE, NONNEGATIVE_INT, POSITIVE_INT, Real, config

# The choices of the fields below, defined here (where the field is) and read by the code they select.
DECAY_FILTERS = ("baral_x", "tiny", "ours", "all")  # nac.training.optim.decays
AUTHORS_TINYIMAGENET = "authors_tinyimagenet"  # the authors' recipe (nac.training.augment)
AUGMENT_RECIPES = (AUTHORS_TINYIMAGENET,)  # nac.training.augment's recipes besides true / false
ADAMW_IMPLS = ("default", "foreach", "fused")  # nac.training.optim.make_adamw
COMPILE_MODES = (False, "default", "reduce-overhead", "aot_eager")  # nac.training.compiled
COMPILE_MATCHINGS = ("before",)  # where a compiled step waits for the matching (the field; "overlap" removed, issue 48)
COMPILE_SCOPES = ("forward", "step", "regional")
# Bounds of plain sanity, not of taste: an lr above 1 or ten thousand epochs is a typo (1e+300, 100000000).
EPOCHS = Annotated[int, at.Ge(1), at.Le(10_000)]


@config
class TrainConfig(ConfigDict):
    section = "train"
    epochs: EPOCHS = 10
    batch_size: POSITIVE_INT = 128  # global batch (split across processes under torchrun)
    lr: Annotated[Real, at.Gt(0), at.Le(1)] = 1e-3  # peak learning rate, after warm-up
    lr_batch_scaling: POSITIVE_INT | None = None  # authors: lr * global_batch / 512; None = no scaling
    weight_decay: NONNEGATIVE = 0.05
    # which parameters decay (nac.training.optim.decays): baral_x (the default template's) | tiny
    # (TINY-INET-NC-X's) | ours (nac v1) | all (m2mKD)
    decay_filter: Literal[DECAY_FILTERS] = "baral_x"
    warmup_epochs: Annotated[Real, at.Ge(0), at.Le(10_000)] = 1.0
    min_lr: NONNEGATIVE = 1e-5
    label_smoothing: FRACTION = 0.1
    grad_clip: NONNEGATIVE | None = None  # both authors' templates: none
    reg_weight: NONNEGATIVE = 0.1  # weight of the graph-structure regularizer
    ema: DECAY | None = None  # EMA decay of the weights (e.g. 0.99996); evaluated with EMA if set
    amp: bool = True  # bf16 autocast, on CUDA only
    # images: true = random flip and 4 px translation; false = none; "authors_tinyimagenet" = the
    # authors' recipe (RandAugment, random erasing, repeated augmentation x3, mixup/cutmix with
    # label_smoothing; nac/training/augment.py)
    augment: Annotated[Literal[(True, False, *AUGMENT_RECIPES)], EXACT] = True
    num_workers: NONNEGATIVE_INT = 0
    seed: int = 0
    device: Literal[DEVICES] = "auto"
    eval_batch_size: POSITIVE_INT = 256
    # AdamW's implementation (nac.training.optim.make_adamw): default | foreach | fused. "fused" is
    # one kernel over all parameters (capturable on CUDA: no host reads, CUDA-graph ready); it
    # rounds differently from the default: weights differ in the last ulp, up to 8 ulps after 100
    # steps and 24 after 1,000 (nac/training/optim.py), so a run's numbers change
    # beyond float rounding.
    adamw: Literal[ADAMW_IMPLS] = "default"
    # torch.compile of the step's forward and loss (nac/training/compiled.py): false (eager) |
    # default | reduce-overhead (CUDA graphs) | aot_eager (traced, no code generation). Inductor's
    # random draws differ from eager's: the same distribution, not the same numbers.
    compile: Annotated[Literal[COMPILE_MODES], EXACT] = False
    # where a compiled step waits for the regularizer's matching (nac.training.compiled): before (the
    # only one left: "overlap", a second loss path no committed result used, was removed in issue 48)
    compile_matching: Literal[COMPILE_MATCHINGS] = "before"
    # what train.compile compiles (nac/training/compiled.py): forward (forward and loss; backward,
    # clipping and AdamW eager) | step (the update too: clip_and_step compiled, torch's compiled optimizer)
    # | regional (each repeated layer on its own, the step around them eager: compile_regions)
    compile_scope: Literal[COMPILE_SCOPES] = "forward"
    # the step replayed as CUDA graphs, no inductor (nac/training/graphed.py): false | true. CUDA only;
    # equal to the eager step to bf16 rounding (tests/test_cuda_graphs.py). How the step runs, not what
    # it computes: a converged piece's params leave it out, as they leave out the device.
    cuda_graphs: bool = False

    @model_validator(mode="after")
    def _rules(self):
        if self.min_lr > self.lr:
            raise ValueError(f"need train.min_lr <= train.lr; got lr={self.lr}, min_lr={self.min_lr}")
        if self.warmup_epochs > self.epochs:
            raise ValueError(f"train.warmup_epochs must be in [0, epochs={self.epochs}], got {self.warmup_epochs}")
        if self.compile_scope in ("step", "regional") and self.compile is False:
            raise ValueError(f"train.compile_scope={self.compile_scope} compiles the step: set train.compile (default)")
        return self

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
        if d.get("cuda_graphs") is False:
            del d["cuda_graphs"]
        return d

    @property
    def peak_lr(self) -> float:
        return self.lr * (self.batch_size / self.lr_batch_scaling if self.lr_batch_scaling else 1.0)
