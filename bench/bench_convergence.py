"""How far the `mini` image track is from a plateau, and the Table 1 comparison near it (issue:
"a regime where the question can be answered"). Trains the given ladder runs with the committed
`params.yaml` except for the number of epochs (the cosine schedule stretches with it), in a scratch
folder (checkpoints are not the pipeline's), evaluates each as the `train` stage does (IID
validation, OOD, the kernel ablation) and records, per run, length and seed, the validation curve,
the evaluation and, for models with a graph, the mechanism numbers at initialisation and at the end:

    python bench/bench_convergence.py [--runs perceiver_io nac-scale_free] [--epochs 24] [--seeds 0 1 2]
                                      [--out bench/results/convergence.json]

Several invocations may run side by side (one per core, `--threads 1`): each result is merged into
the JSON file under a lock. Needs the prepared image data (`dvc repro prepare@shapes prepare@shapes_r`).
Not a test: a 24-epoch run takes about 6 minutes on one CPU thread. The report draws the curves
beside Table 1 and compares the models near the plateau, paired by seed (`figure_convergence`).
"""

from __future__ import annotations

import argparse
import copy
import fcntl
import json
import os
import platform
import time
from pathlib import Path

import torch

from nac.bench.scratch import train_in_scratch
from nac.pipeline.params import read_params
from nac.report.switches import bench_params

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", nargs="+", default=["perceiver_io", "nac-scale_free"])
    ap.add_argument("--epochs", nargs="+", type=int, default=[24])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="bench/results/convergence.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    params = read_params(ROOT / "params.yaml")
    data_root = (ROOT / params["data"]["root"]).resolve()
    out_path = ROOT / args.out
    machine = {
        "platform": platform.platform(),
        "torch": torch.__version__,
        "threads": args.threads,
        "cpus": os.cpu_count(),
    }
    for run in args.runs:
        for epochs in args.epochs:
            for seed in args.seeds:
                p = copy.deepcopy(params)
                p["image"]["train"]["epochs"] = epochs
                p["data"]["root"] = str(data_root)
                res, ev, wall = train_in_scratch(p, run, seed)
                entry = {
                    "val_acc1": [h["val_acc1"] for h in res["history"]],
                    "train_acc": [h["train_acc"] for h in res["history"]],
                    "eval": {k: v for k, v in ev.items() if k not in ("run", "seed")},
                    **({"mechanism": res["mechanism"]} if "mechanism" in res else {}),
                    "wall_s": round(wall, 1),
                    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                }
                _merge(out_path, run, epochs, seed, entry, machine, params)
                print(
                    f"{run} seed {seed}, {epochs} epochs: val Acc@1 {ev['iid_acc1']:.1f}, OOD {ev['ood_acc1']:.1f} "
                    f"({wall:.0f} s)",
                    flush=True,
                )


def _merge(out_path: Path, run: str, epochs: int, seed: int, entry: dict, machine: dict, params: dict) -> None:
    """Add one result to the JSON file, under an exclusive lock (runs may go side by side)."""
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with open(out_path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        results = json.loads(out_path.read_text()) if out_path.exists() else {}
        if results.get("params") != bench_params(params):  # runs of other settings would not pair with these
            results = {}
        results.update(
            machine=machine,
            profile=params["profile"],
            mini_epochs=params["image"]["train"]["epochs"],
            params=bench_params(params),
        )
        results.setdefault("runs", {}).setdefault(run, {}).setdefault(str(epochs), {})[str(seed)] = entry
        tmp = out_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(results, indent=1) + "\n")
        tmp.replace(out_path)


if __name__ == "__main__":
    main()
