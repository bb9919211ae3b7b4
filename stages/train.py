"""DVC stage train@<run>-<seed>: train one rung of the Table 1 ladder with one seed.

Resumes from models/image/<run>-<seed>.pt when a previous run was interrupted. Under
``torchrun --nproc_per_node=N stages/train.py ...`` it trains with DDP.
"""
import argparse

from nac.pipeline.image import train_image_run
from nac.pipeline.params import load_params, write_json


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--run", required=True, help="perceiver_io | modfc | frozen_graph | nac-<prior>")
    ap.add_argument("--seed", type=int, required=True)
    args = ap.parse_args()
    params = load_params()
    name = f"{args.run}-{args.seed}"
    res = train_image_run(params, args.run, args.seed, live_dir=f"metrics/image/live/{name}")
    if res is not None:  # the main process writes
        write_json(f"metrics/image/train/{name}.json", res)


if __name__ == "__main__":
    main()
