"""DVC stage train@<run>-<seed>: train one rung of the Table 1 ladder with one seed, then
evaluate it (IID validation and OOD Acc@1 / Acc@5, per style) in the same process.

Writes metrics/image/train/<run>-<seed>.json and metrics/image/eval/<run>-<seed>.json. Resumes
from models/image/<run>-<seed>.pt when a previous run was interrupted (a finished checkpoint is
reloaded without training). Under ``torchrun --nproc_per_node=N stages/train.py ...`` it trains
with DDP; the main process evaluates.
"""
import argparse

from nac.pipeline.io import write_json
from nac.pipeline.params import load_params
from nac.tracks.image import evaluate_image_run, train_image_run, validate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--run", required=True, help="perceiver_io | modfc | frozen_graph | nac-<prior>")
    ap.add_argument("--seed", type=int, required=True)
    args = ap.parse_args()
    params = load_params(check=[validate])
    name = f"{args.run}-{args.seed}"
    res = train_image_run(params, args.run, args.seed, live_dir=f"metrics/image/live/{name}")
    if res is not None:  # the main process writes and evaluates
        write_json(f"metrics/image/train/{name}.json", res)
        write_json(f"metrics/image/eval/{name}.json", evaluate_image_run(params, args.run, args.seed))


if __name__ == "__main__":
    main()
