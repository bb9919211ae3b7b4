"""DVC stage costs: what one training step of the paper's models asks of a GPU, counted on this
CPU along the code paths CUDA takes (``nac.bench.step_ops``): aten ops (kernel launches there)
and host syncs per steady-state step, by part, eager, for the ``paper`` profile's Tiny-ImageNet
pair and ImageNet pre-training pair (``costs.pairs``; the smoke profile counts the first only).
The report's cost section reads it. Counts, not timings: the same code and torch give the same
file on any machine. The compiled column (minutes of inductor per model on a CPU) stays a
benchmark: ``python bench/bench_ops.py --compiled tiny imagenet``."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from tqdm import tqdm

from nac.bench.step_ops import measure, pairs
from nac.pipeline.io import write_json
from nac.pipeline.lifeline import run_stage
from nac.pipeline.params import load_params

OUT = Path("metrics/costs/ops.json")
BATCH = 2  # ops per step do not depend on the batch
# how the step is counted (nac.bench.step_ops.count_fit): CUDA's default AdamW, no augmentation,
# SDPA with a bias as CUDA's one fused kernel each way
OPTIONS = {"adamw": "foreach", "augment": False, "sdpa": "fused"}


def count(out: Path, names: list[str], batch: int = BATCH) -> dict:
    """Count every model of the pairs ``names`` and write ``out``: ``{"pairs": {pair: {model:
    counts}}, "settings": {...}}``."""
    torch.set_num_threads(1)
    built = pairs(names)
    todo = [(pair, name) for pair, (models, *_) in built.items() for name in models]
    res: dict[str, dict] = {pair: {} for pair in built}
    for pair, name in tqdm(todo, desc="costs: ops per step", unit="model"):
        models, size, classes, train = built[pair]
        res[pair][name] = measure(models[name], batch, size, classes, train, **OPTIONS)
    settings = {
        "batch": batch,
        "profile": "paper",
        "torch": torch.__version__,
        **OPTIONS,
        "paths": "CUDA's (cpu_shortcuts off)",
        "precision": "fp32",
    }
    result = {"pairs": res, "settings": settings}
    write_json(out, result)
    return result


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(OUT), help=f"the counts' JSON (default {OUT})")
    a = ap.parse_args(argv)
    params = load_params(stage="costs")
    count(Path(a.out), params["costs"]["pairs"])


if __name__ == "__main__":
    run_stage(main, "costs", kept="the previous counts are untouched (written at once, at the end); rerun")
