"""The `converged` profile's wall time on one H100, estimated from measured step costs before any
GPU run (issue 22; docs/convergence.md, "The converged profile"). Not a measurement: arithmetic.

    python bench/estimate_converged.py [--workers 16] [--fixed-min 3]

A mini-sized model's step on a GPU is bound by the host (docs/gpu.md): its time is its aten ops
(kernel launches) times the host time of one. Inputs, all measured and committed:
- ops per training step of mini's image models (``bench/results/ops.json``, label ``mini``:
  ``python bench/bench_ops.py --pairs mini --label mini --batch 8``);
- the host time of one op on the H100: the bf16 step of the paper-size Perceiver IO and NAC
  (``bench/results/gpu.json``) over their op counts with the code they ran (``ops.json``, label
  ``before``, pair ``tiny``): the smaller and the larger give the range;
- the Modular Network's step: its measured paper-size H100 step (``gpu.json``, ladder), an upper bound.
Steps: ``floor(n_train / batch)`` per epoch (the loader drops the last partial batch) x epochs x
seeds, per job; a stage's jobs share ``--workers`` processes (``NAC_JOBS_PER_GPU``, one per host
core), so its wall time is max(total / workers, its longest job). ``--fixed-min``: the stages that
do not train (data, prune, few-shot, NLVR analysis, report), assumed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from nac.pipeline.params import compose

ROOT = Path(__file__).resolve().parent.parent

# ops per step of the models bench_ops.py counted at mini's size; the rest take the nearest counted model's
COUNTED = {"perceiver_io", "modfc", "frozen_graph", "nac-scale_free", "neural_interpreter"}


def per_op_seconds(ops: dict, gpu: dict) -> tuple[float, float]:
    """The host time of one op on the H100, (low, high): measured step / op count, PIO and NAC."""
    step = gpu["step"]["bf16"]
    before = ops["before"]["tiny"]
    pio = step["perceiver_io_s_per_step"]["mean"] / before["perceiver_io"]["ops_total"]
    nac = step["nac-scale_free_s_per_step"]["mean"] / before["nac-scale_free"]["ops_total"]
    return min(pio, nac), max(pio, nac)


def step_seconds(run: str, ops: dict, gpu: dict, per_op: float) -> float:
    """One training step of a mini-sized model (image ladder names; track runs map onto them)."""
    if run == "modular_network":
        return gpu["ladder"]["rows"]["Table 1: modular_network"]["s_per_step"]["mean"]
    name = {
        "nac": "nac-scale_free",
        "conditional": "nac-scale_free",
        "text_only": "nac-scale_free",
        "image_only": "nac-scale_free",
    }.get(run, run)
    if name not in COUNTED:  # the other priors and the controls: the NAC's architecture
        name = "nac-scale_free"
    return ops["mini"]["mini"][name]["ops_total"] * per_op


def stages(params: dict) -> dict[str, tuple[list[str], int]]:
    """Per training stage: its runs and steps per run (per seed)."""
    data = params["data"]
    out = {
        "train": (
            params["image"]["ladder"],
            data["shapes"]["n_train"] // params["image"]["train"]["batch_size"] * params["image"]["train"]["epochs"],
        )
    }
    sizes = {"points": "pointclouds", "listops": "listops", "text": "bytes", "nlvr": "nlvr_shapes"}
    for track, ds in sizes.items():
        t = params[track]["train"]
        out[f"train_{track}"] = (params[track]["runs"], data[ds]["n_train"] // t["batch_size"] * t["epochs"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--fixed-min", type=float, default=3.0)
    ap.add_argument("--profile", default="converged")
    a = ap.parse_args()
    ops = json.loads((ROOT / "bench/results/ops.json").read_text())
    gpu = json.loads((ROOT / "bench/results/gpu.json").read_text())
    params = compose([f"profile={a.profile}"])
    seeds = len(params["seeds"])
    totals = []
    for per_op in per_op_seconds(ops, gpu):
        print(f"\nhost time per op {per_op * 1e6:.1f} us, {a.workers} workers, {seeds} seeds")
        print("| stage | jobs | steps per job | job-seconds | longest job (s) | wall (s) |\n|---|---|---|---|---|---|")
        wall = 0.0
        for stage, (runs, steps) in stages(params).items():
            jobs = [steps * step_seconds(r, ops, gpu, per_op) for r in runs for _ in range(seeds)]
            w = max(sum(jobs) / a.workers, max(jobs))
            wall += w
            print(f"| {stage} | {len(jobs)} | {steps} | {sum(jobs):.0f} | {max(jobs):.0f} | {w:.0f} |")
        total = wall / 60 + a.fixed_min
        totals.append(total)
        print(f"training {wall / 60:.1f} min + the other stages {a.fixed_min:.1f} min (assumed) = {total:.1f} min")
    print(f"\nestimate: {totals[0]:.1f} to {totals[1]:.1f} min")


if __name__ == "__main__":
    main()
