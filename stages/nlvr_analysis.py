"""DVC stage nlvr_analysis: the generated link-probability matrices of the conditional NAC on
every validation sentence -> PCA -> t-SNE, reasoning-type structure measures, example graphs
(Figure 6). Writes <metrics>/nlvr/analysis.json, embedding.csv and examples.json, all three or none
(written to a staging folder, checked, then moved into place)."""

import argparse
import sys
from pathlib import Path

from nac import metrics_io
from nac.pipeline.io import staged
from nac.pipeline.lifeline import foreign_nac
from nac.pipeline.params import load_params
from nac.pipeline.paths import add_root_arguments
from nac.pipeline.schema_models import section
from nac.tracks.common import validator
from nac.tracks.nlvr import run_analysis


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    add_root_arguments(ap, "models", "metrics")
    args = ap.parse_args(argv)
    params = load_params(check=[validator("nlvr")], stage="nlvr_analysis")
    OUT = Path(args.metrics) / "nlvr"
    with staged(OUT) as (stage,), metrics_io.published_as(stage, OUT):
        run_analysis(
            section(params, "nlvr"),
            out_dir=str(stage),
            data=params["data"],
            seeds=params["seeds"],
            device=params.get("device", "auto"),
            models=args.models,
        )
        metrics_io.nlvr_analysis(stage / "analysis.json")
        metrics_io.nlvr_embedding(stage / "embedding.csv")
        metrics_io.nlvr_examples(stage / "examples.json")


if __name__ == "__main__":
    foreign_nac(main, "nlvr_analysis")  # a nac other than this checkout's: one line, no run
    try:
        main()
    except metrics_io.MetricsError as e:
        sys.exit(f"nlvr_analysis: {e}")
