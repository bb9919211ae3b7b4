"""One steady-state training step, counted (``nac.bench.opcount``): the eager count
(``measure``: ``fit`` run for 2 and for 3 steps of one epoch from the same model; the difference
is exactly one step, the set-up, the first step's optimizer state and the epoch end cancel) and
the compiled count (``compiled_counts``: the kernels inductor's output code launches, plus what
the compiled step leaves eager), for the models of ``pairs`` (the paper profile's Tiny-ImageNet
pair and ImageNet pre-training pair; mini's image models).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import torch
import torch.nn as nn

from nac import build_model
from nac.bench.models import TINY_CLASSES, paper_model, pretrain_model
from nac.bench.opcount import (
    PARTS,
    Images,
    OpCounter,
    Tracker,
    cuda_paths,
    host_patches,
    instrument,
    mark_host_batches,
)
from nac.bench.sdpa_counting import compiled_fused_sdpa, fused_sdpa
from nac.pipeline.params import compose
from nac.tracks.image import image_model_config
from nac.training import compiled, loop
from nac.training.config import TrainConfig
from nac.training.objective import Objective
from nac.training.optim import decay_groups, make_adamw, warmup_cosine


def count_fit(
    model: nn.Module,
    steps: int,
    batch: int,
    size: int,
    classes: int,
    cfg: dict,
    *,
    adamw: str = "foreach",
    augment: bool | str = False,
    sdpa: str = "fused",
    prepare: Callable[[nn.Module], object] | None = None,
) -> Tracker:
    """The counts of ``fit`` run for ``steps`` steps (one epoch) of a copy of ``model`` on CUDA's
    paths; ``prepare`` changes that copy first (``bench/bench_ops.py --modulation per_layer`` puts
    a reference form on it)."""
    model = cuda_paths(copy.deepcopy(model))  # CUDA's sampler, bias and attention (the CPU's shortcuts off)
    if prepare is not None:
        prepare(model)
    t = Tracker()
    train = TrainConfig.from_dict(
        {
            **cfg,
            "epochs": 1,
            "batch_size": batch,
            "augment": augment,
            "num_workers": 0,
            "device": "cpu",
            "warmup_epochs": 0,
            "amp": False,
            "adamw": adamw,  # CUDA's default AdamW is the foreach one
        }
    )
    with ExitStack() as stack:
        mark_host_batches(stack)
        instrument(model, t, stack)
        if sdpa == "fused":
            fused_sdpa(t, stack)
        host_patches(t, stack)
        stack.enter_context(OpCounter(t))
        loop.fit(model, Images(steps * batch, size, classes), None, train, progress=False)
    return t


def measure(model: nn.Module, batch: int, size: int, classes: int, cfg: dict, **options) -> dict:
    """One steady-state step's ops, host syncs and numpy calls, by part: ``fit`` for 3 steps minus
    ``fit`` for 2 (``count_fit``, with its keyword ``options``; ``train.*`` from ``cfg``, batch
    ``batch``, images ``size`` px of ``classes`` classes)."""
    a = count_fit(model, 2, batch, size, classes, cfg, **options)
    b = count_fit(model, 3, batch, size, classes, cfg, **options)
    ops = {p: b.ops[p] - a.ops[p] for p in PARTS if b.ops[p] - a.ops[p]}
    syncs = {p: b.syncs[p] - a.syncs[p] for p in PARTS if b.syncs[p] - a.syncs[p]}
    kinds = {k: b.sync_kinds[k] - a.sync_kinds[k] for k in sorted(b.sync_kinds) if b.sync_kinds[k] - a.sync_kinds[k]}
    host = {p: b.host[p] - a.host[p] for p in PARTS if b.host[p] - a.host[p]}
    return {
        "ops": ops,
        "ops_total": sum(ops.values()),
        "syncs": syncs,
        "syncs_total": sum(syncs.values()),
        "sync_kinds": kinds,
        "numpy_calls": host,
    }


# the parts a compiled step (``train.compile``) leaves eager: the loader, the batch augmentation,
# the gradient norm, the optimizer, the checks, the EMA, the loop's own ops and "backward (other)"
# (one ``detach`` per parameter in AccumulateGrad, which runs after the compiled backward)
EAGER_PARTS = ("data", "augment", "grad norm", "optimizer", "checks", "ema", "loop", "backward (other)")
# what ``train.compile_scope: step`` leaves eager: the gradients' norm, clipping and AdamW are compiled too
EAGER_PARTS_STEP = ("data", "augment", "checks", "ema", "loop", "backward (other)")


def _calls(code: str) -> tuple[int, int]:
    """``(generated kernels, extern calls)`` launched by one run of an inductor output module: the
    ``cpp_fused_*`` calls (each a Triton kernel on CUDA) and the ``extern_kernels.*`` /
    ``torch.ops.*`` calls (matrix products, convolutions, SDPA, random draws) in its ``call``."""
    body = code[code.index("def call(") :]
    body = body[: body.index("\n\n\n")] if "\n\n\n" in body else body
    kernels = re.findall(r"^\s+(?:cpp|triton)_\w+\(", body, re.M) + re.findall(r"^\s+\w+\.run\(", body, re.M)
    extern = re.findall(r"^\s+.*?(?:extern_kernels\.\w+|torch\.ops\.\w+\.\w+(?:\.\w+)?)\(", body, re.M)
    return len(kernels), len(extern)


def compiled_counts(
    model: nn.Module,
    batch: int,
    size: int,
    classes: int,
    cfg: dict,
    eager: dict,
    mode="default",
    scope="forward",
    sdpa="fused",
):
    """The compiled column: what one steady-state step with ``train.compile: mode`` launches.
    ``scope="step"`` (``train.compile_scope: step``): the update (``clip_and_step``: the
    gradients' norm, clipping and AdamW, torch's compiled optimizer with a tensor LR) is compiled
    too, two more output modules; the eager parts are then ``EAGER_PARTS_STEP`` and the LR
    schedule's step (its tensor LRs filled on the device, counted as "LR schedule (eager)").
    The region (``nac.training.objective.objective_losses``: forward, loss, regularizer at the
    permutations matched in advance, and its backward) compiled by inductor on the CPU, 3 steps;
    its kernels counted from the forward's and the backward's output code (``_calls``); plus
    the eager ops of the parts the compiled step leaves eager (``EAGER_PARTS``, from the eager
    count ``eager``) and of the matching in advance (``Objective.matching_in_advance``/``finish_matching``,
    counted here); graphs and graph breaks from dynamo's counters."""
    # deferred: torch._dynamo and inductor cost ~2-3.7 s after this module; only the compiled column needs them
    import torch._dynamo as dynamo
    import torch._inductor.config as icfg
    import torch._inductor.graph as igraph
    from torch._dynamo.utils import counters

    model = cuda_paths(copy.deepcopy(model)).train()
    objective = Objective(model)
    codes: list[str] = []
    orig = igraph.GraphLowering.compile_to_module

    def capture(self, *a, **k):
        mod = orig(self, *a, **k)
        codes.append(Path(mod.__file__).read_text(encoding="utf-8"))
        return mod

    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8, generator=g)
    y = torch.randint(0, classes, (batch,), generator=g)
    graphs = []
    with ExitStack() as stack:
        stack.callback(setattr, igraph.GraphLowering, "compile_to_module", orig)
        igraph.GraphLowering.compile_to_module = capture
        stack.enter_context(icfg.patch(fx_graph_cache=False))
        if sdpa == "fused":
            compiled_fused_sdpa(stack)
        dynamo.reset()
        counters.clear()
        losses = compiled.compile_losses(mode)
        update = compiled.compile_update(mode) if scope == "step" else None
        if update is not None:
            decay, no_decay = decay_groups(model, cfg.get("decay_filter", "baral_x"))
            wd, lr = cfg.get("weight_decay", 0.05), cfg.get("lr", 1e-3)
            param_groups = [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]
            optimizer = make_adamw(param_groups, lr=lr, impl="foreach", compiled=True)  # CUDA's form
            schedule = warmup_cosine(optimizer, 10, 2, lr, lr / 10)
            params = list(model.parameters())
        lr_ops = Tracker()
        for _ in range(3):
            t = Tracker()
            with OpCounter(t):
                perms = compiled.finish_matching(objective.matching_in_advance(), x.device)
            args = (objective, {"inputs": x}, y, None, perms, cfg.get("label_smoothing", 0.1))
            loss = losses(*args, cfg.get("reg_weight", 0.1), False)[-1]
            model.zero_grad(set_to_none=True)
            loss.backward()
            if update is not None:
                update(params, optimizer, cfg.get("grad_clip", 1.0))
                lr_ops = Tracker()  # the last step's
                with OpCounter(lr_ops):
                    schedule.step()
            graphs.append(counters["stats"]["unique_graphs"])
        breaks = sum(counters["graph_break"].values())
        dynamo.reset()
    matching = sum(t.ops.values())
    expected = 4 if scope == "step" else 2  # forward, backward (and the clipping's, AdamW's)
    if len(codes) != expected:
        raise RuntimeError(f"expected {expected} graphs (forward, backward, update), inductor compiled {len(codes)}")
    (fk, fx), (bk, bx) = _calls(codes[0]), _calls(codes[1])
    region = {"forward kernels": fk, "forward extern": fx, "backward kernels": bk, "backward extern": bx}
    if scope == "step":
        (ck, cx), (ak, ax) = _calls(codes[2]), _calls(codes[3])
        region.update({"clip kernels": ck, "clip extern": cx, "adamw kernels": ak, "adamw extern": ax})
    outside = {p: n for p, n in eager["ops"].items() if p in (EAGER_PARTS_STEP if scope == "step" else EAGER_PARTS)}
    schedule_ops = sum(lr_ops.ops.values())
    extra = {"matching (eager)": matching} if matching else {}
    if schedule_ops:
        extra["LR schedule (eager)"] = schedule_ops
    return {
        "mode": mode,
        "scope": scope,
        "region": region,
        "eager": {**outside, **extra},
        "launches_total": sum(region.values()) + sum(outside.values()) + matching + schedule_ops,
        "graphs": graphs[-1],
        "recompiles": graphs[-1] - graphs[0],
        "graph_breaks": breaks,
    }


def pairs(names) -> dict:
    params = compose(["profile=paper"])
    train = {k: v for k, v in params["image"]["train"].items() if k in TrainConfig.__dataclass_fields__}
    out = {}
    if "tiny" in names:
        size = params["image"]["model"]["tokenizer"]["image_size"]
        models = {run: paper_model(params, run) for run in ("perceiver_io", "nac-scale_free")}
        out["tiny"] = (models, size, TINY_CLASSES, train)
    if "imagenet" in names:
        pre = params["fewshot"]["pretrain"]
        size = pre["model"]["tokenizer"]["image_size"]
        models = {}
        for name in ("perceiver_io", "nac"):
            torch.manual_seed(0)
            models[name] = pretrain_model(params, name, fit_signatures=False)
        out["imagenet"] = (models, size, models["nac"].config.num_classes, train)
    if "mini" in names:  # the mini (and converged) profile's image models: the converged run's step costs
        mp = compose(["profile=mini"])
        mtrain = {k: v for k, v in mp["image"]["train"].items() if k in TrainConfig.__dataclass_fields__}
        models = {}
        for run in ("perceiver_io", "modfc", "frozen_graph", "nac-scale_free", "neural_interpreter"):
            torch.manual_seed(0)
            models[run] = build_model(image_model_config(mp, run, seed=0, num_classes=10))
        out["mini"] = (models, mp["image"]["model"]["tokenizer"]["image_size"], 10, mtrain)
    return out
