"""DVC stage train_<track> (points, listops, text, nlvr): train every run of the track with every
seed from scratch, each then evaluated on the validation and test splits by the process that
trained it; writes metrics/tracks/<track>/<run>-<seed>.json.

The jobs run side by side in worker processes (``nac.pipeline.pool``; ``NAC_WORKERS``
overrides; the results do not depend on it). Each resumes from models/<track>/<run>-<seed>.pt
when interrupted. ``--run R --seed S`` trains that one job in this process, e.g. under
``torchrun --nproc_per_node=N stages/train_track.py points --run nac --seed 0`` with DDP.
"""
import argparse

from nac.pipeline.params import load_params
from nac.pipeline.pool import run_jobs
from nac.tracks.common import TRACK_RUNS, train_and_evaluate_track_run, train_track_jobs, validator


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("track", choices=sorted(TRACK_RUNS))
    ap.add_argument("--run", help="one run of the track")
    ap.add_argument("--seed", type=int, help="with --run: its seed")
    args = ap.parse_args()
    if (args.run is None) != (args.seed is None):
        ap.error("--run and --seed go together (give both for one job, neither for every run of the track)")
    params = load_params(check=[validator(args.track)])
    jobs = train_track_jobs(params, args.track) if args.run is None else [(params, args.track, args.run, args.seed)]
    run_jobs(train_and_evaluate_track_run, jobs, device=params.get("device", "auto"), desc=f"train_{args.track}",
             label=lambda job: f"{job[2]}-{job[3]}")


if __name__ == "__main__":
    main()
