"""How far the `mini` image track is from a plateau (issue: "a regime where the question can be
answered"). Trains the given ladder runs on one seed with the committed `params.yaml` except for
the number of epochs (the cosine schedule stretches with it), in a scratch folder (checkpoints are
not the pipeline's), and writes each run's validation curve for every length:

    python bench/bench_convergence.py [--runs perceiver_io nac-scale_free] [--epochs 6 24] [--seed 0]
                                      [--out bench/results/convergence.json]

Needs the prepared image data (`dvc repro prepare@shapes`). Not a test: it takes minutes per run.
The report draws the curves beside Table 1 (`figure_convergence`).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nac.tracks.image import train_image_run  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", nargs="+", default=["perceiver_io", "nac-scale_free"])
    ap.add_argument("--epochs", nargs="+", type=int, default=[24])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="bench/results/convergence.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    data_root = (ROOT / params["data"]["root"]).resolve()
    out_path = ROOT / args.out
    results = json.loads(out_path.read_text()) if out_path.exists() else {}
    results.update(machine={"platform": platform.platform(), "torch": torch.__version__, "threads": args.threads,
                            "cpus": os.cpu_count()},
                   profile=params["profile"], seed=args.seed, mini_epochs=params["image"]["train"]["epochs"])
    runs = results.setdefault("runs", {})
    for run in args.runs:
        for epochs in args.epochs:
            p = copy.deepcopy(params)
            p["image"]["train"]["epochs"] = epochs
            p["data"]["root"] = str(data_root)
            with tempfile.TemporaryDirectory() as tmp:
                cwd = os.getcwd()
                os.chdir(tmp)
                try:
                    t0 = time.time()
                    res = train_image_run(p, run, args.seed, progress=False)
                    wall = time.time() - t0
                finally:
                    os.chdir(cwd)
            runs.setdefault(run, {})[str(epochs)] = {
                "val_acc1": [h["val_acc1"] for h in res["history"]], "train_acc": [h["train_acc"] for h in res["history"]],
                "wall_s": round(wall, 1), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            print(f"{run} {epochs} epochs: val Acc@1 {res['history'][-1]['val_acc1']:.1f} ({wall:.0f} s)", flush=True)
            out_path.parent.mkdir(parents=True, exist_ok=True)
            out_path.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
