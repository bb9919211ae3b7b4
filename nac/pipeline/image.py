"""The image track: the Table 1 ladder trained over seeds, IID/OOD evaluation, module dropping.

A *run* is a ladder entry: ``perceiver_io``, ``modfc``, ``frozen_graph``, ``nac-<prior>``, or a
control of a NAC, ``nac-<prior>-noreg`` (the graph regularizer off) or ``nac-<prior>-randinit``
(random instead of prior-fitted initial signatures); with a seed it names one trained model,
``<run>-<seed>``. Runs with the same seed share the initialisation of every other parameter and
the data order, so differences between them are paired by seed.
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from nac.baselines.analysis import baseline_analysis
from nac.config import VARIANTS, ModelConfig
from nac.model import BASELINES
from nac.data.registry import get_builder
from nac.graphs import PRIOR_DEFAULTS, PRIORS
from nac.mechanism import has_graph, mechanism_numbers, processor_graph
from nac.training.config import TrainConfig

PLAIN_RUNS = tuple(v for v in VARIANTS if v != "nac") + tuple(BASELINES)
CONTROLS = {"noreg": "the NAC with the graph regularizer off",
            "randinit": "the NAC from random instead of prior-fitted signatures"}


def parse_run(run: str) -> tuple[str, str | None, str | None]:
    """``"nac-ring_of_cliques"`` -> ``("nac", "ring_of_cliques", None)``;
    ``"nac-scale_free-noreg"`` -> ``("nac", "scale_free", "noreg")``; ``"modfc"`` -> ``("modfc", None, None)``."""
    if run in PLAIN_RUNS:
        return run, None, None
    parts = run.split("-")
    if len(parts) in (2, 3) and parts[0] == "nac" and parts[1] in PRIORS and (len(parts) == 2 or parts[2] in CONTROLS):
        return "nac", parts[1], (parts[2] if len(parts) == 3 else None)
    from nac.pipeline.params import ParamsError
    raise ParamsError(f"unknown run {run!r}; valid: {', '.join(PLAIN_RUNS)}, nac-<prior> or nac-<prior>-<control> "
                      f"with prior in {', '.join(PRIORS)} and control in {', '.join(CONTROLS)}")


def checkpoint_path(run: str, seed: int) -> Path:
    return Path("models") / "image" / f"{run}-{seed}.pt"


def builder(params: dict, name: str):
    data = params["data"]
    return get_builder(name, data.get("root", "data"), data.get(name) or {})


def run_fingerprint(params: dict, dataset: str) -> str:
    """Hash of the training data's cache manifest and of the sources the training runs: a
    checkpoint is resumed only under the same fingerprint, so a rerun after a change of the data
    or of code that determines the result retrains, and any other edit (reports, stages, this
    module's evaluation code) resumes.

    The sources (``nac.checkpoint.source_closure``): the modules reached by following the import
    statements of the training loop (``nac.training.loop``: model, circuits, graphs, regularizer,
    checkpointing, evaluation), of the data pipeline (``nac.data.registry``: every builder) and of
    the calling module (a track's input wrappers), restricted to ``nac.checkpoint.RESULT_SOURCES``
    (``nac/circuits/``, ``model.py``, ``config.py``, ``graphs.py``, ``regularizer.py``,
    ``training/``, ``checkpoint.py``, ``evaluation.py``, ``data/``, ``tracks/common.py``). The
    import graph is read from the files, not from ``sys.modules``, so it does not depend on what
    the process happened to import before. Configs are not hashed: ``fit`` compares them itself."""
    import sys

    from nac.checkpoint import source_fingerprint

    h = hashlib.sha256((builder(params, dataset).cache_dir / "manifest.json").read_bytes())
    caller = sys._getframe(1).f_globals.get("__name__", "")
    h.update(source_fingerprint(("nac.training.loop", "nac.data.registry", caller)).encode())
    return h.hexdigest()[:16]


def image_model_config(params: dict, run: str, seed: int, num_classes: int):
    """The ladder entry's model config: ``image.model`` plus the rung's settings. Table 1's NAC rows
    use each prior's published parameters (``nac.graphs.PRIOR_DEFAULTS``), whatever ``prior`` says.
    The baselines (``neural_interpreter``, ``modular_network``) read ``image.baselines.<run>`` and
    share NAC's tokenizer where they have one; a Modular Network's persistent selection needs the
    training-set size (``dataset_size``, default ``data.<dataset>.n_train``)."""
    variant, prior, control = parse_run(run)
    if variant in BASELINES:
        cfg = dict((params["image"].get("baselines") or {}).get(variant) or {}, num_classes=num_classes)
        if variant == "neural_interpreter":
            cfg.setdefault("tokenizer", params["image"]["model"]["tokenizer"])
        else:
            cfg.setdefault("selection_seed", seed)
            if not cfg.get("dataset_size"):
                cfg["dataset_size"] = int((params["data"].get(params["image"]["dataset"]) or {}).get("n_train", 0))
        return BASELINES[variant][0].from_dict(cfg)
    cfg = dict(params["image"]["model"], variant=variant, num_classes=num_classes, graph_seed=seed)
    if prior is not None:
        cfg.update(prior=prior, prior_params=dict(PRIOR_DEFAULTS[prior]))
    if control == "noreg":
        cfg["regularizer"] = "none"
    elif control == "randinit":
        cfg["signature_init"] = "random"
    return ModelConfig.from_dict(cfg)


def image_train_config(params: dict, seed: int) -> TrainConfig:
    return TrainConfig.from_dict(dict(params["image"]["train"], seed=seed, device=params.get("device", "auto")))


def train_image_run(params: dict, run: str, seed: int, live_dir: str | Path | None = None,
                    progress: bool = True) -> dict | None:
    """Train one ladder entry with one seed; returns the training history and final metrics
    (on the main process; ``None`` on the others under torchrun)."""
    from nac.model import build_model
    from nac.training.distributed import init_distributed
    from nac.training.loop import fit

    image = params["image"]
    ds = builder(params, image["dataset"])
    train_set, val_set = ds.load("train"), ds.load(image["val_split"])
    world = init_distributed(params.get("device", "auto"))
    torch.manual_seed(seed)
    model = build_model(image_model_config(params, run, seed, ds.info()["num_classes"]))
    graph = has_graph(model)
    if graph:
        P_init, init = processor_graph(model), mechanism_numbers(model)
    out = fit(model, train_set, val_set if world.is_main else None, image_train_config(params, seed), world=world,
              checkpoint=checkpoint_path(run, seed), live_dir=live_dir, progress=progress, desc=f"train {run}-{seed}",
              fingerprint=run_fingerprint(params, image["dataset"]))
    if not world.is_main:
        return None
    from nac.model import count_parameters
    res = {"run": run, "seed": seed, "parameters": count_parameters(model), **out["final"], "history": out["history"]}
    if graph:
        res["mechanism"] = {"init": init, "final": mechanism_numbers(model, P_init)}
    return res


def _ood_classes(params: dict) -> list[int] | None:
    """Class indices of the OOD set when it covers only a subset (Tiny-ImageNet-R: 62 classes)."""
    return builder(params, params["image"]["ood_dataset"]).info().get("class_indices")


def evaluate_image_run(params: dict, run: str, seed: int) -> dict[str, Any]:
    """IID validation and OOD Acc@1 / Acc@5, and OOD Acc@1 per rendition style."""
    from nac.checkpoint import load_model
    from nac.evaluation import accuracy_by_group, predict, topk_accuracy
    from nac.training.distributed import resolve_device

    image = params["image"]
    device = resolve_device(params.get("device", "auto"))
    model = load_model(checkpoint_path(run, seed), map_location=device, expect_config=image_model_config(
        params, run, seed, builder(params, image["dataset"]).info()["num_classes"]).to_dict()).to(device)
    bs = image["train"].get("eval_batch_size", 256)
    val_set = builder(params, image["dataset"]).load(image["val_split"])
    iid = predict(model, val_set, device, bs)
    analysis = baseline_analysis(model, val_set, device, bs, seed)
    ood_builder = builder(params, image["ood_dataset"])
    ood_set = ood_builder.load(image["ood_split"])
    has_style = "style" in ood_set[0]
    ood = predict(model, ood_set, device, bs, keep=("style",) if has_style else ())
    dense = None
    if getattr(model.config, "uses_kernel", False):  # the kernel ablation: the same weights with all-to-all attention
        model.config = replace(model.config, eval_kernel="dense")
        dense = predict(model, val_set, device, bs)
    classes = _ood_classes(params)
    res = {"run": run, "seed": seed,
           "iid_acc1": topk_accuracy(iid["logits"], iid["label"], 1), "iid_acc5": topk_accuracy(iid["logits"], iid["label"], 5),
           "ood_acc1": topk_accuracy(ood["logits"], ood["label"], 1, classes),
           "ood_acc5": topk_accuracy(ood["logits"], ood["label"], 5, classes),
           "iid_n": int(len(iid["label"])), "ood_n": int(len(ood["label"]))}
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
    """Inference images per second at the batch size of ``example``, one value per timed repeat
    (after one warm-up pass): the spread is what the report's CI is computed from."""
    model.eval().to(device)
    x = example.to(device)
    model(x)  # warm-up
    rates = []
    for _ in range(max(2, repeats)):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        model(x)
        if device.type == "cuda":
            torch.cuda.synchronize()
        rates.append(len(x) / (time.perf_counter() - t))
    return rates


def prune_sweep(params: dict, progress: bool = True) -> list[dict[str, Any]]:
    """Drop processor modules at every fraction of ``prune.dropped_fraction``, least connected
    first (``order: "connectivity"``) and, as the control any ranking must beat, in
    ``prune.random_orders`` seeded random orders (``order: "random-<i>"``). Accuracy on IID
    validation for every run and seed; inference throughput (one value per timed repeat, so the
    report can give a CI) for the connectivity order of the first seed. One row per (run, seed,
    order, fraction)."""
    from nac.checkpoint import load_model
    from nac.evaluation import predict, topk_accuracy
    from nac.model import count_parameters
    from nac.pruning import drop_modules, module_connectivity, random_connectivity
    from nac.training.distributed import resolve_device

    image, prune = params["image"], params["prune"]
    device = resolve_device(params.get("device", "auto"))
    ds = builder(params, image["dataset"])
    val_set, train_set = ds.load(image["val_split"]), ds.load("train")
    calib = torch.stack([train_set[i]["input"] for i in range(min(prune["calibration_size"], len(train_set)))])
    speed_batch = torch.stack([val_set[i % len(val_set)]["input"] for i in range(prune["throughput_batch"])])
    rows = []
    jobs = [(run, seed) for run in prune["runs"] for seed in params["seeds"]]
    for run, seed in tqdm(jobs, desc="prune", disable=not progress):
        model = load_model(checkpoint_path(run, seed), map_location=device, expect_config=image_model_config(
            params, run, seed, ds.info()["num_classes"]).to_dict()).to(device).eval()
        U = model.config.n_processor
        orders = {"connectivity": module_connectivity(model, calib.to(device))}
        for i in range(int(prune.get("random_orders", 0))):
            orders[f"random-{i}"] = random_connectivity(U, seed=1000 * seed + i)
        for order, connectivity in orders.items():
            for frac in prune["dropped_fraction"]:
                k = min(U - 1, int(round(frac * U)))
                smaller = drop_modules(model, k, connectivity=connectivity)
                out = predict(smaller, val_set, device, image["train"].get("eval_batch_size", 256))
                row = {"run": run, "seed": seed, "order": order, "dropped_fraction": frac, "dropped": k,
                       "modules": U - k, "acc1": topk_accuracy(out["logits"], out["label"], 1),
                       "parameters": count_parameters(smaller),
                       "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"}
                if seed == params["seeds"][0] and order == "connectivity":
                    row["images_per_s"] = throughput(smaller, speed_batch, prune["throughput_repeats"], device)
                rows.append(row)
    return rows


def summarize(values: list[float]) -> dict[str, float]:
    """Mean and 95% confidence half-width (Student t over seeds; 0 for a single seed)."""
    from scipy import stats

    arr = np.asarray(values, dtype=float)
    mean = float(arr.mean())
    if len(arr) < 2:
        return {"mean": mean, "ci95": 0.0, "n": int(len(arr))}
    half = float(stats.t.ppf(0.975, len(arr) - 1) * arr.std(ddof=1) / np.sqrt(len(arr)))
    return {"mean": mean, "ci95": half, "n": int(len(arr))}
