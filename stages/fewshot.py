"""DVC stage fewshot: fine-tune the pre-trained models (fewshot.runs) on few-shot episodes of
every target dataset (Figure 4); writes metrics/fewshot/<target>.json and .csv.

The targets run side by side in worker processes (``nac.pipeline.pool``; ``NAC_WORKERS``
overrides; the results do not depend on it). ``python stages/fewshot.py <target>`` runs one
target in this process.
"""
import argparse

from nac.pipeline.lifeline import run_stage
from nac.pipeline.params import load_params
from nac.pipeline.pool import run_jobs
from nac.tracks import fewshot_params
from nac.tracks.fewshot import run_target


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("target", nargs="?", help="one target (default: every one of fewshot.targets)")
    args = ap.parse_args()
    params = load_params(check=[fewshot_params.validate])
    targets = params["fewshot"]["targets"] if args.target is None else [args.target]
    run_jobs(run_target, [(params, t) for t in targets], device=params.get("device", "auto"), desc="fewshot",
             label=lambda job: job[1])


if __name__ == "__main__":
    run_stage(main, "fewshot")
