"""The image track: the Table 1 ladder trained over seeds, IID/OOD evaluation, module dropping.

A *run* is a ladder entry: ``perceiver_io``, ``modfc``, ``frozen_graph`` or ``nac-<prior>``;
with a seed it names one trained model, ``<run>-<seed>``.
"""
from __future__ import annotations

import hashlib
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from nac.config import VARIANTS, ModelConfig
from nac.data.registry import get_builder
from nac.graphs import PRIOR_DEFAULTS, PRIORS
from nac.training.config import TrainConfig

PLAIN_RUNS = tuple(v for v in VARIANTS if v != "nac")


def parse_run(run: str) -> tuple[str, str | None]:
    """``"nac-ring_of_cliques"`` -> ``("nac", "ring_of_cliques")``; ``"modfc"`` -> ``("modfc", None)``."""
    if run in PLAIN_RUNS:
        return run, None
    if run.startswith("nac-") and run[4:] in PRIORS:
        return "nac", run[4:]
    from nac.pipeline.params import ParamsError
    raise ParamsError(f"unknown run {run!r}; valid: {', '.join(PLAIN_RUNS)}, " + ", ".join(f"nac-{p}" for p in PRIORS))


def checkpoint_path(run: str, seed: int) -> Path:
    return Path("models") / "image" / f"{run}-{seed}.pt"


def builder(params: dict, name: str):
    data = params["data"]
    return get_builder(name, data.get("root", "data"), data.get(name) or {})


def run_fingerprint(params: dict, dataset: str) -> str:
    """Hash of the training data's cache manifest and of the ``nac`` sources: a checkpoint is
    resumed only under the same fingerprint, so a rerun after a code or data change retrains."""
    import nac

    h = hashlib.sha256((builder(params, dataset).cache_dir / "manifest.json").read_bytes())
    pkg = Path(nac.__file__).parent
    for f in sorted(pkg.rglob("*.py")):
        h.update(f.relative_to(pkg).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def image_model_config(params: dict, run: str, seed: int, num_classes: int) -> ModelConfig:
    """The ladder entry's model: ``image.model`` plus the rung's settings. Table 1's NAC rows use
    each prior's published parameters (``nac.graphs.PRIOR_DEFAULTS``), whatever ``prior`` says."""
    variant, prior = parse_run(run)
    cfg = dict(params["image"]["model"], variant=variant, num_classes=num_classes, frozen_graph_seed=seed)
    if prior is not None:
        cfg.update(prior=prior, prior_params=dict(PRIOR_DEFAULTS[prior]))
        cfg["prior_params"].pop("m", None)  # the Barabasi-Albert sample's m is not a target parameter
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
    out = fit(model, train_set, val_set if world.is_main else None, image_train_config(params, seed), world=world,
              checkpoint=checkpoint_path(run, seed), live_dir=live_dir, progress=progress, desc=f"train {run}-{seed}",
              fingerprint=run_fingerprint(params, image["dataset"]))
    if not world.is_main:
        return None
    from nac.model import count_parameters
    return {"run": run, "seed": seed, "parameters": count_parameters(model), **out["final"], "history": out["history"]}


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
    model = load_model(checkpoint_path(run, seed), map_location=device).to(device)
    bs = image["train"].get("eval_batch_size", 256)
    iid = predict(model, builder(params, image["dataset"]).load(image["val_split"]), device, bs)
    ood_builder = builder(params, image["ood_dataset"])
    ood_set = ood_builder.load(image["ood_split"])
    has_style = "style" in ood_set[0]
    ood = predict(model, ood_set, device, bs, keep=("style",) if has_style else ())
    classes = _ood_classes(params)
    res = {"run": run, "seed": seed,
           "iid_acc1": topk_accuracy(iid["logits"], iid["label"], 1), "iid_acc5": topk_accuracy(iid["logits"], iid["label"], 5),
           "ood_acc1": topk_accuracy(ood["logits"], ood["label"], 1, classes),
           "ood_acc5": topk_accuracy(ood["logits"], ood["label"], 5, classes),
           "iid_n": int(len(iid["label"])), "ood_n": int(len(ood["label"]))}
    if has_style:
        styles = ood_builder.info().get("styles")
        res["ood_acc1_by_style"] = accuracy_by_group(ood["logits"], ood["label"], ood["style"], styles, classes)
    return res


@torch.no_grad()
def throughput(model: torch.nn.Module, example: torch.Tensor, repeats: int, device: torch.device) -> float:
    """Inference images per second at the batch size of ``example`` (median over repeats)."""
    model.eval().to(device)
    x = example.to(device)
    model(x)  # warm-up
    times = []
    for _ in range(max(1, repeats)):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        model(x)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return len(x) / statistics.median(times)


def prune_sweep(params: dict, progress: bool = True) -> list[dict[str, Any]]:
    """Drop processor modules by connectivity, least connected first, at every fraction of
    ``prune.dropped_fraction``; accuracy on IID validation for every run and seed, inference
    throughput for the first seed. Returns one row per (run, seed, fraction)."""
    from nac.checkpoint import load_model
    from nac.evaluation import predict, topk_accuracy
    from nac.model import count_parameters
    from nac.pruning import drop_modules, module_connectivity
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
        model = load_model(checkpoint_path(run, seed), map_location=device).to(device).eval()
        U = model.config.n_processor
        connectivity = module_connectivity(model, calib.to(device))
        for frac in prune["dropped_fraction"]:
            k = min(U - 1, int(round(frac * U)))
            smaller = drop_modules(model, k, connectivity=connectivity)
            out = predict(smaller, val_set, device, image["train"].get("eval_batch_size", 256))
            row = {"run": run, "seed": seed, "dropped_fraction": frac, "dropped": k, "modules": U - k,
                   "acc1": topk_accuracy(out["logits"], out["label"], 1), "parameters": count_parameters(smaller),
                   "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"}
            if seed == params["seeds"][0]:
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
