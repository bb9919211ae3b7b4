"""DVC stage train: train every rung of the Table 1 ladder with every seed, each then evaluated
(IID validation and OOD Acc@1 / Acc@5, per style) by the process that trained it.

The jobs run side by side in worker processes (``nac.pipeline.pool``: one per CPU core, one on a
GPU; ``NAC_WORKERS`` overrides; the results do not depend on it). Each writes
metrics/image/train/<run>-<seed>.json and metrics/image/eval/<run>-<seed>.json and resumes from
models/image/<run>-<seed>.pt when a previous run was interrupted (a finished checkpoint written
with the same settings is reloaded without training).

``--run R --seed S`` trains that one job in this process, e.g. under
``torchrun --nproc_per_node=N stages/train.py --run nac-scale_free --seed 0`` with DDP (the main
process evaluates).
"""
import argparse

from nac.pipeline.params import load_params
from nac.pipeline.pool import run_jobs
from nac.tracks.image import train_and_evaluate_image_run, train_image_jobs, validate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--run", help="one run: perceiver_io | modfc | frozen_graph | a baseline | nac-<prior>[-<control>]")
    ap.add_argument("--seed", type=int, help="with --run: its seed")
    args = ap.parse_args()
    if (args.run is None) != (args.seed is None):
        ap.error("--run and --seed go together (give both for one job, neither for the whole ladder)")
    params = load_params(check=[validate])
    jobs = train_image_jobs(params) if args.run is None else [(params, args.run, args.seed)]
    run_jobs(train_and_evaluate_image_run, jobs, device=params.get("device", "auto"), desc="train",
             label=lambda job: f"{job[1]}-{job[2]}")


if __name__ == "__main__":
    main()
