"""The image track: the Table 1 ladder trained over seeds, IID/OOD evaluation (in the same
process as the training: the ``train`` stage), module dropping (the ``prune`` stage).

Runs are named as in ``nac.pipeline.paths`` (``perceiver_io``, ``modfc``, ``frozen_graph``, a
baseline, ``nac-<prior>``, ``nac-<prior>-noreg``, ``nac-<prior>-randinit``); ``<run>-<seed>`` is
one trained model. Runs with the same seed share the initialisation of every other parameter and
the data order, so differences between them are paired by seed.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from nac.baselines.analysis import baseline_analysis
from nac.checkpoint_io import load_model, mirror_path
from nac.config import ModelConfig
from nac.evaluation import accuracy_by_group, predict, predict_tokens, tokenize, topk_accuracy
from nac.fields import given
from nac.graphs import PRIOR_DEFAULTS
from nac.mechanism import has_graph, mechanism_numbers, processor_graph
from nac.pipeline import schema_models as schema
from nac.pipeline.datasets import builder
from nac.pipeline.io import write_json
from nac.pipeline.paths import MODELS, image_checkpoint, parse_run
from nac.pipeline.runs import seeded_train_config, start_run, train_config
from nac.pipeline.schema import check_reads, dataset_params
from nac.pruning import drop_modules, module_connectivity, random_connectivity
from nac.registry import BASELINES, count_parameters
from nac.training.config import TrainConfig
from nac.training.distributed import resolve_device
from nac.training.loop import fit

ParamsError = schema.ParamsError


def ladder_config(image: schema.Image, data: dict, run: str, seed: int, num_classes: int):
    """The ladder entry's model config: ``image.model`` plus the rung's settings. Table 1's NAC rows
    use each prior's published parameters (``nac.graphs.PRIOR_DEFAULTS``), whatever ``prior`` says.
    The baselines (``neural_interpreter``, ``modular_network``) read ``image.baselines.<run>`` and
    share NAC's tokenizer where they have one; a Modular Network's persistent selection needs the
    training-set size (``dataset_size``, default ``data.<dataset>.n_train`` of the ``data`` section)."""
    variant, prior, control = parse_run(run)
    if variant in BASELINES:
        cfg = dict(given(getattr(image.baselines, variant, None)), num_classes=num_classes)
        if variant == "neural_interpreter":
            cfg.setdefault("tokenizer", image.model.tokenizer)
        else:
            cfg.setdefault("selection_seed", seed)
            if not cfg.get("dataset_size"):
                cfg["dataset_size"] = int((data.get(image.dataset) or {}).get("n_train", 0))
        return BASELINES[variant][0].from_dict(cfg)
    cfg = dict(given(image.model), variant=variant, num_classes=num_classes, graph_seed=seed)
    if prior is not None:
        cfg.update(prior=prior, prior_params=dict(PRIOR_DEFAULTS[prior]))
    if control == "noreg":
        cfg["regularizer"] = "none"
    elif control == "randinit":
        cfg["signature_init"] = "random"
    return ModelConfig.from_dict(cfg)


def image_model_config(params: dict, run: str, seed: int, num_classes: int):
    """``ladder_config`` of a profile's params (benches, tests)."""
    return ladder_config(schema.section(params, "image"), params.get("data") or {}, run, seed, num_classes)


def image_train_config(params: dict, seed: int) -> TrainConfig:
    return train_config(params, given(schema.section(params, "image").train), seed)


def train_image_run(
    image: schema.Image,
    run: str,
    seed: int,
    progress: bool = True,
    *,
    data: dict,
    device: str = "auto",
    metrics: str | Path | None = None,
    models: str | Path = MODELS,
    resume: str | Path | None = None,
) -> dict | None:
    """Train one ladder entry with one seed (resuming its checkpoint, or reloading a finished one);
    returns the training history and final metrics (on the main process; ``None`` on the others
    under torchrun). ``image``, ``data``, ``device``: those sections of params.yaml. ``metrics``
    (the ``train`` stage's job, ``metrics``): also write the curves under
    ``<metrics>/image/live/<run>-<seed>``, the result to ``<metrics>/image/train/<run>-<seed>.json``,
    and evaluate the model IID and OOD (``evaluate_image_run``) into
    ``<metrics>/image/eval/<run>-<seed>.json``."""
    name = f"{run}-{seed}"
    ds = builder(data, image.dataset)
    train_set, val_set = ds.load("train"), ds.load(image.val_split)
    cfg = seeded_train_config(given(image.train), seed, device)
    model_config = ladder_config(image, data, run, seed, ds.info()["num_classes"])
    model, world, fingerprint = start_run(data, model_config, cfg, dataset=image.dataset, source=__name__)
    initial = {"P": processor_graph(model), "numbers": mechanism_numbers(model)} if has_graph(model) else None
    out = fit(
        model,
        train_set,
        val_set,
        cfg,
        world=world,
        checkpoint=image_checkpoint(run, seed, models),
        mirror=None if resume is None else mirror_path(image_checkpoint(run, seed, models), models, resume),
        live_dir=None if metrics is None else f"{metrics}/image/live/{name}",
        progress=progress,
        desc=f"train {name}",
        fingerprint=fingerprint,
    )
    if not world.is_main:
        return None
    res = {"run": run, "seed": seed, "parameters": count_parameters(model), **out["final"], "history": out["history"]}
    if initial:
        res["mechanism"] = {"init": initial["numbers"], "final": mechanism_numbers(model, initial["P"])}
    if metrics is not None:
        write_json(f"{metrics}/image/train/{name}.json", res)
        evaluated = evaluate_image_run(image, run, seed, data=data, device=device, models=models)
        write_json(f"{metrics}/image/eval/{name}.json", evaluated)
    return res


# Relative training cost of a run on mini (rough weights, not a measurement to quote): only the order
# in which ``train_image_jobs`` hands jobs to the workers (longest first), never a result.
_COST = {
    "neural_interpreter": 96,
    "nac": 60,
    "frozen_graph": 59,
    "modfc": 55,
    "perceiver_io": 48,
    "modular_network": 41,
}


def train_image_jobs(image: schema.Image, seeds: list[int]) -> list[tuple[str, int]]:
    """The ``train`` stage's jobs, ``(run, seed)`` for every ladder run and seed, longest first (so
    that the last job to finish is a short one)."""
    jobs = [(run, seed) for run in image.ladder for seed in seeds]
    return sorted(jobs, key=lambda j: -_COST.get(parse_run(j[0])[0], 60))


def evaluate_image_run(
    image: schema.Image, run: str, seed: int, *, data: dict, device: str = "auto", models: str | Path = MODELS
) -> dict[str, Any]:
    """IID validation and OOD Acc@1 / Acc@5, and OOD Acc@1 per rendition style, of the checkpoint
    ``<models>/image/<run>-<seed>.pt``."""
    device = resolve_device(device)
    num_classes = builder(data, image.dataset).info()["num_classes"]
    model = load_model(
        image_checkpoint(run, seed, models),
        map_location=device,
        expect_config=ladder_config(image, data, run, seed, num_classes).to_dict(),
    ).to(device)
    bs = image.train.eval_batch_size
    # IID: the held-out test split (image.test_split; "val" where a profile sets none, as before it existed)
    val_set = builder(data, image.dataset).load(image.test_split)
    iid = predict(model, val_set, device, bs)
    analysis = baseline_analysis(model, val_set, device, bs, seed)
    ood_builder = builder(data, image.ood_dataset)
    ood_set = ood_builder.load(image.ood_split)
    has_style = "style" in ood_set[0]
    ood = predict(model, ood_set, device, bs, keep=("style",) if has_style else ())
    dense = None
    if getattr(model.config, "uses_kernel", False):  # the kernel ablation: the same weights with all-to-all attention
        dense = predict(model, val_set, device, bs, eval_kernel="dense")  # model.config left as it is
    classes = ood_builder.info().get("class_indices")  # the OOD set's classes where a subset (Tiny-ImageNet-R: 62)
    res = {
        "run": run,
        "seed": seed,
        "iid_acc1": topk_accuracy(iid["logits"], iid["label"], 1),
        "iid_acc5": topk_accuracy(iid["logits"], iid["label"], 5),
        "ood_acc1": topk_accuracy(ood["logits"], ood["label"], 1, classes),
        "ood_acc5": topk_accuracy(ood["logits"], ood["label"], 5, classes),
        "iid_n": int(len(iid["label"])),
        "ood_n": int(len(ood["label"])),
    }
    if dense is not None:
        res["iid_acc1_dense"] = topk_accuracy(dense["logits"], dense["label"], 1)
    if analysis is not None:
        res.update(analysis)
    if has_style:
        styles = ood_builder.info().get("styles")
        res["ood_acc1_by_style"] = accuracy_by_group(ood["logits"], ood["label"], ood["style"], styles, classes)
    return res


@torch.no_grad()
def throughput(model: torch.nn.Module, example: torch.Tensor, repeats: int, device: torch.device) -> list[float]:
    """Inference images per second at the batch size of ``example`` ``[B, ...]``, one value per
    timed pass (``max(2, repeats)`` of them, after one warm-up pass): the spread is what the
    report's CI is computed from. The clock is ``torch.utils.benchmark``'s, which synchronises the
    accelerator (CUDA or another) before it reads the time; its ``Timer.timeit`` would add two
    warm-up passes per value, and ``blocked_autorange`` picks the number of values itself."""
    cpp = logging.getLogger("torch.utils.cpp_extension")  # its import warns "No CUDA runtime" on a CPU machine
    level = cpp.level
    cpp.setLevel(logging.ERROR)
    try:
        from torch.utils.benchmark import timer  # imported on use: it loads torch's C++ extension tools
    finally:
        cpp.setLevel(level)

    model.eval().to(device)
    x = example.to(device)
    model(x)  # warm-up
    rates = []
    for _ in range(max(2, repeats)):
        t = timer()
        model(x)
        rates.append(len(x) / (timer() - t))
    return rates


def prune_sweep(
    image: schema.Image,
    prune: schema.Prune,
    progress: bool = True,
    *,
    data: dict,
    seeds: list[int],
    device: str = "auto",
    models: str | Path = MODELS,
) -> list[dict[str, Any]]:
    """Drop processor modules at every fraction of ``prune.dropped_fraction``, least connected
    first (``order: "connectivity"``) and, as the control any ranking must beat, in
    ``prune.random_orders`` seeded random orders (``order: "random-<i>"``). Accuracy on IID
    validation for every run and seed; inference throughput (one value per timed repeat, so the
    report can give a CI) for the connectivity order of the first seed. One row per (run, seed,
    order, fraction)."""
    device = resolve_device(device)
    ds = builder(data, image.dataset)
    val_set, train_set = ds.load(image.val_split), ds.load("train")
    calib = torch.stack([train_set[i]["input"] for i in range(min(prune.calibration_size, len(train_set)))])
    speed_batch = torch.stack([val_set[i % len(val_set)]["input"] for i in range(prune.throughput_batch)])
    rows, eval_batch = [], image.train.eval_batch_size
    jobs = [(run, seed) for run in prune.runs for seed in seeds]
    for run, seed in tqdm(jobs, desc="prune", disable=not progress):
        model = (
            load_model(
                image_checkpoint(run, seed, models),
                map_location=device,
                expect_config=ladder_config(image, data, run, seed, ds.info()["num_classes"]).to_dict(),
            )
            .to(device)
            .eval()
        )
        U = model.config.n_processor
        orders = {"connectivity": module_connectivity(model, calib.to(device))}
        tokens, labels = tokenize(model, val_set, device, eval_batch)  # dropping modules keeps the tokenizer
        for i in range(prune.random_orders):
            orders[f"random-{i}"] = random_connectivity(U, seed=1000 * seed + i)
        for order, connectivity in orders.items():
            for frac in prune.dropped_fraction:
                k = min(U - 1, int(round(frac * U)))
                smaller = drop_modules(model, k, connectivity=connectivity)
                out = predict_tokens(smaller, tokens, labels, device)
                row = {
                    "run": run,
                    "seed": seed,
                    "order": order,
                    "dropped_fraction": frac,
                    "dropped": k,
                    "modules": U - k,
                    "acc1": topk_accuracy(out["logits"], out["label"], 1),
                    "parameters": count_parameters(smaller),
                    "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
                }
                if seed == seeds[0] and order == "connectivity":
                    row["images_per_s"] = throughput(smaller, speed_batch, prune.throughput_repeats, device)
                rows.append(row)
    return rows


# ------------------------------------------------------------------------------------ params
def validate(params: dict[str, Any]) -> None:
    """The ``image`` section: ``schema_models.Image``, its datasets and splits, every run's model."""
    if "image" not in params:
        return
    image = schema.section(params, "image")
    check_reads(params, "image", image)
    check_reads(params, "image", image, ood=True)
    size, tok = dataset_params(params, image.dataset).get("image_size"), image.model.tokenizer.get("image_size")
    if isinstance(size, int) and tok is not None and tok != size:
        raise ParamsError(
            f"image.model.tokenizer.image_size={tok} but data.{image.dataset}.image_size={size}; "
            "the tokenizer must read the dataset's image size"
        )
    for run in image.ladder:
        try:  # parse_run raises ParamsError (a ValueError) naming the valid runs
            ladder_config(image, params["data"], run, params["seeds"][0], num_classes=2)
        except ParamsError:
            raise
        except ValueError as e:
            raise ParamsError(f"image.model for {run!r}: {e}") from e


def validate_prune(params: dict[str, Any]) -> None:
    """``prune``: its runs are trained NAC-family models, its fractions drop whole modules."""
    if "prune" not in params:
        return
    prune, image = schema.section(params, "prune"), schema.section(params, "image")
    for i, run in enumerate(prune.runs):  # module dropping ranks a NAC-family model's processor modules
        if run not in image.ladder:
            raise ParamsError(f"prune.runs[{i}]={run!r} is not trained (not in image.ladder {image.ladder})")
        if parse_run(run)[0] in BASELINES:
            raise ParamsError(
                f"prune.runs[{i}]={run!r} cannot be pruned: module dropping ranks the processor modules "
                f"of a NAC-family model by their graph (perceiver_io, modfc, frozen_graph, nac-<prior>), "
                f"and the baselines ({', '.join(BASELINES)}) have none; remove it from prune.runs"
            )
    n = given(image.model).get("n_processor")
    uneven = [f for f in prune.dropped_fraction if isinstance(n, int) and abs(f * n - round(f * n)) > 1e-9]
    if uneven:
        raise ParamsError(
            f"prune.dropped_fraction {uneven} of image.model.n_processor={n} modules is not a whole "
            f"number of modules (the sweep would drop a rounded count and report the wrong fraction); "
            f"use multiples of 1/{n}"
        )
