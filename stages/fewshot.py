"""DVC stage fewshot: fine-tune the pre-trained models (fewshot.runs) on few-shot episodes of
every target dataset (Figure 4); writes <metrics>/fewshot/<target>.json and .csv.

The targets run side by side in worker processes (``nac.pipeline.pool``; ``NAC_WORKERS``
overrides; the results do not depend on it). ``python -m stages.fewshot <target>`` runs one
target in this process. The targets' files are written to a staging folder, checked, and replace
the previous ones only when every target is done: a failed run leaves <metrics>/fewshot/ as it was.
"""

import argparse
import sys
from functools import partial
from pathlib import Path

from nac import metrics_io
from nac.pipeline.io import staged
from nac.pipeline.lifeline import run_stage
from nac.pipeline.params import load_params
from nac.pipeline.paths import add_root_arguments
from nac.pipeline.pool import run_jobs
from nac.pipeline.schema_models import section
from nac.tracks import fewshot_params
from nac.tracks.fewshot import run_target


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("target", nargs="?", help="one target (default: every one of fewshot.targets)")
    add_root_arguments(ap, "models", "metrics")
    args = ap.parse_args()
    OUT = Path(args.metrics) / "fewshot"
    params = load_params(check=[fewshot_params.validate], stage="fewshot")
    fs, device = section(params, "fewshot"), params.get("device", "auto")
    targets = fs.targets if args.target is None else [args.target]
    with staged(OUT) as (stage,), metrics_io.published_as(stage, OUT):
        run_jobs(
            partial(
                run_target,
                fs,
                data=params["data"],
                seeds=params["seeds"],
                prior=params["prior"],
                device=device,
                models=args.models,
            ),
            [(t, str(stage)) for t in targets],
            device=device,
            desc="fewshot",
            label=lambda job: job[0],
        )
        for t in targets:
            metrics_io.fewshot_target(stage / f"{t}.json", t)


if __name__ == "__main__":
    try:
        run_stage(main, "fewshot")
    except metrics_io.MetricsError as e:
        sys.exit(f"fewshot: {e}")
