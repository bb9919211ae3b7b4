"""DVC stage train_<track> (points, listops, text, nlvr): train every run of the track with every
seed from scratch, each then evaluated on the validation and test splits by the process that
trained it; writes <metrics>/tracks/<track>/<run>-<seed>.json.

The jobs run side by side in worker processes (``nac.pipeline.pool``; ``NAC_WORKERS``
overrides; the results do not depend on it). Each resumes from <models>/<track>/<run>-<seed>.pt
when interrupted. ``--run R --seed S`` trains that one job in this process, e.g. under
``torchrun --nproc_per_node=N -m stages.train_track points --run nac --seed 0`` with DDP.
"""

import argparse
from functools import partial

from nac.checkpoint_io import RESUME_DIR
from nac.pipeline.lifeline import run_stage
from nac.pipeline.params import load_params
from nac.pipeline.paths import add_root_arguments
from nac.pipeline.pool import add_job_arguments, one_job, run_jobs
from nac.pipeline.schema_models import section
from nac.tracks.common import TRACK_RUNS, train_track_jobs, train_track_run, validator


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("track", choices=sorted(TRACK_RUNS))
    add_job_arguments(ap, "one run of the track")
    add_root_arguments(ap, "models", "metrics")
    args = ap.parse_args()
    single = one_job(ap, args, "every run of the track")
    params = load_params(check=[validator(args.track)], stage=f"train_{args.track}")
    sec, device = section(params, args.track), params.get("device", "auto")
    jobs = [(args.run, args.seed)] if single else train_track_jobs(sec, params["seeds"])
    run_jobs(
        partial(
            train_track_run,
            sec,
            track=args.track,
            data=params["data"],
            prior=params["prior"],
            baselines=section(params, "image.baselines"),
            device=device,
            metrics=args.metrics,
            models=args.models,
            resume=RESUME_DIR,
        ),
        jobs,
        device=device,
        desc=f"train_{args.track}",
        label=lambda job: f"{job[0]}-{job[1]}",
    )


if __name__ == "__main__":
    run_stage(main, "train_track")
