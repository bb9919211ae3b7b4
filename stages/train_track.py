"""DVC stage train_<track>@<run>-<seed>: train one run of a track from scratch (points, listops,
text, nlvr) and evaluate it on the validation and test splits.

Resumes from models/<track>/<run>-<seed>.pt when interrupted; under
``torchrun --nproc_per_node=N stages/train_track.py ...`` it trains with DDP.
"""
import argparse

from nac.pipeline.io import write_json
from nac.pipeline.params import load_params
from nac.pipeline.paths import track_metrics
from nac.tracks.common import TRACK_RUNS, train_track_run, validator


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("track", choices=sorted(TRACK_RUNS))
    ap.add_argument("--run", required=True)
    ap.add_argument("--seed", type=int, required=True)
    args = ap.parse_args()
    params = load_params(check=[validator(args.track)])
    live = f"metrics/tracks/live/{args.track}/{args.run}-{args.seed}"
    res = train_track_run(params, args.track, args.run, args.seed, live_dir=live)
    if res is not None:
        write_json(track_metrics(args.track, args.run, args.seed), res)


if __name__ == "__main__":
    main()
