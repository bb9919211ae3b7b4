"""The compute of an image piece on the paper-regime stand-in against the first benchmark's
(issue 50, item 1: within 1.5x, measured).

An image piece's cost is its training (96 epochs at the converged profile) plus one evaluation.
This script trains the same model with the converged profile's settings on each benchmark's data
(``shapes``: 4,000 training images, 10 classes; ``objects``: the chosen stand-in, 6,000 images,
25 classes), a few epochs at a time, alternating the two (A B A B ...) so that a drift of the
machine's speed hits both, and times each: the ratio per pair, then its median. It also times one
evaluation of each (IID test split and OOD set: 1,000 + 1,000 images against 10,000 + 10,000).

    python bench/image_piece_cost.py [--run nac-scale_free] [--epochs 2] [--pairs 3]

Writes ``bench/results/image_piece_cost.json``. Not a test (minutes on one CPU thread).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch

from nac.pipeline.datasets import builder
from nac.pipeline.params import compose
from nac.pipeline.schema_models import section
from nac.tracks.image import evaluate_image_run, train_image_run

ROOT = Path(__file__).resolve().parent.parent
# the first benchmark's image data (its record's params: results/converged/records/benchmark1) and today's
BENCHMARKS = {
    "shapes": {"dataset": "shapes", "ood_dataset": "shapes_r", "test_split": "val"},
    "objects": {"dataset": "objects", "ood_dataset": "objects_r", "test_split": "test"},
}


def params_for(name: str, epochs: int, data_root: str) -> dict:
    params = copy.deepcopy(compose(["profile=converged"]))
    params["seeds"] = [0]
    params["data"]["root"] = data_root
    params["image"].update(BENCHMARKS[name], val_split="val", ood_split="test")
    params["image"]["train"]["epochs"] = epochs
    return params


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", default="nac-scale_free", help="an image ladder run (default: the headline NAC)")
    ap.add_argument("--epochs", type=int, default=2, help="epochs per timed training")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/image_piece_cost.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    out: dict = {"train_s": {b: [] for b in BENCHMARKS}, "eval_s": {}}
    with tempfile.TemporaryDirectory(prefix="piece-cost-") as work:
        for b in BENCHMARKS:
            p = params_for(b, args.epochs, f"{work}/data")
            for ds in (p["image"]["dataset"], p["image"]["ood_dataset"]):
                d = builder(p["data"], ds)
                d.download()
                d.prepare()
            out.setdefault("train_images", {})[b] = len(builder(p["data"], p["image"]["dataset"]).load("train"))
        for i in range(args.pairs):
            for b in BENCHMARKS:
                p = params_for(b, args.epochs, f"{work}/data")
                t0 = time.perf_counter()
                image, data = section(p, "image"), p["data"]
                train_image_run(
                    image,
                    args.run,
                    0,
                    False,
                    data=data,
                    device=p.get("device", "auto"),
                    models=f"{work}/models-{b}-{i}",
                )
                out["train_s"][b].append(round(time.perf_counter() - t0, 2))
                print(b, i, out["train_s"][b][-1], flush=True)
        for b in BENCHMARKS:
            p = params_for(b, args.epochs, f"{work}/data")
            t0 = time.perf_counter()
            ev = evaluate_image_run(
                section(p, "image"),
                args.run,
                0,
                data=p["data"],
                device=p.get("device", "auto"),
                models=f"{work}/models-{b}-0",
            )
            out["eval_s"][b] = {"s": round(time.perf_counter() - t0, 2), "iid_n": ev["iid_n"], "ood_n": ev["ood_n"]}
    ratios = [o / s for o, s in zip(out["train_s"]["objects"], out["train_s"]["shapes"])]
    train_ratio = statistics.median(ratios)
    # a piece at the converged length: 96 epochs of training and one evaluation, from the measured rates
    piece = {b: 96 / args.epochs * statistics.median(out["train_s"][b]) + out["eval_s"][b]["s"] for b in BENCHMARKS}
    record = {
        "started": started,
        "ended": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "run": args.run,
        "epochs_per_timing": args.epochs,
        "threads": 1,
        "machine": f"{platform.node()} ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)",
        **out,
        "train_ratio_per_pair": [round(r, 3) for r in ratios],
        "train_ratio_median": round(train_ratio, 3),
        "piece_s_estimate": {b: round(v, 1) for b, v in piece.items()},
        "piece_ratio": round(piece["objects"] / piece["shapes"], 3),
        "bound": 1.5,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: record[k] for k in ("train_ratio_per_pair", "train_ratio_median", "piece_ratio")}))


if __name__ == "__main__":
    main()
