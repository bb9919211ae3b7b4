"""DVC stage train: train every rung of the Table 1 ladder with every seed, each then evaluated
(IID validation and OOD Acc@1 / Acc@5, per style) by the process that trained it.

The jobs run side by side in worker processes (``nac.pipeline.pool``: one per CPU core, one on a
GPU; ``NAC_WORKERS`` overrides; the results do not depend on it). Each writes
<metrics>/image/train/<run>-<seed>.json and <metrics>/image/eval/<run>-<seed>.json and resumes from
<models>/image/<run>-<seed>.pt when a previous run was interrupted (a finished checkpoint written
with the same settings is reloaded without training).

``--run R --seed S`` trains that one job in this process, e.g. under
``torchrun --nproc_per_node=N -m stages.train --run nac-scale_free --seed 0`` with DDP (the main
process evaluates).
"""

import argparse
from functools import partial

from nac.checkpoint_io import RESUME_DIR
from nac.pipeline.lifeline import run_stage
from nac.pipeline.params import load_params
from nac.pipeline.paths import add_root_arguments
from nac.pipeline.pool import add_job_arguments, one_job, run_jobs
from nac.pipeline.schema_models import section
from nac.tracks.image import train_image_jobs, train_image_run, validate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    add_job_arguments(ap, "one run: perceiver_io | modfc | frozen_graph | a baseline | nac-<prior>[-<control>]")
    add_root_arguments(ap, "models", "metrics")
    args = ap.parse_args()
    single = one_job(ap, args, "the whole ladder")
    params = load_params(check=[validate], stage="train")
    image, device = section(params, "image"), params.get("device", "auto")
    jobs = [(args.run, args.seed)] if single else train_image_jobs(image, params["seeds"])
    run_jobs(
        partial(
            train_image_run,
            image,
            data=params["data"],
            device=device,
            metrics=args.metrics,
            models=args.models,
            resume=RESUME_DIR,
        ),
        jobs,
        device=device,
        desc="train",
        label=lambda job: f"{job[0]}-{job[1]}",
    )


if __name__ == "__main__":
    run_stage(main, "train")
