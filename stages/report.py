"""DVC stage report: tables, figures, the index README and claims.md under reports/ from metrics/.
Every metrics file is checked before anything is written, and the outputs replace the previous
ones only once all are built (``nac.report.build``)."""

import argparse
import sys

from nac.metrics_io import MetricsError
from nac.pipeline.lifeline import run_stage
from nac.pipeline.params import load_params
from nac.pipeline.paths import add_root_arguments
from nac.repo import ROOT
from nac.report.build import build_report

KEPT = "the previous report is untouched (its outputs are replaced together, only once all are built); rerun"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    add_root_arguments(ap, "models", "metrics")
    ap.add_argument("--out", default="reports", help="the report's folder (dvc.yaml passes reports)")
    args = ap.parse_args(argv)
    build_report(load_params(stage="report"), out=args.out, metrics=args.metrics, models=args.models, root=ROOT)


if __name__ == "__main__":
    try:
        run_stage(main, "report", kept=KEPT)
    except MetricsError as e:
        sys.exit(f"report: {e}")
