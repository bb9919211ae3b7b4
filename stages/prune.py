"""DVC stage prune: drop processor modules by connectivity, and in random orders as the control,
in steps (Figures 5a, 5b, 15)."""

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from nac import metrics_io
from nac.pipeline.io import staged, write_json
from nac.pipeline.lifeline import foreign_nac
from nac.pipeline.params import load_params
from nac.pipeline.paths import add_root_arguments
from nac.pipeline.schema_models import section
from nac.tracks.image import prune_sweep, validate, validate_prune


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    add_root_arguments(ap, "models", "metrics")
    args = ap.parse_args(argv)
    params = load_params(check=[validate, validate_prune], stage="prune")
    image, prune = section(params, "image"), section(params, "prune")
    rows = prune_sweep(
        image,
        prune,
        data=params["data"],
        seeds=params["seeds"],
        device=params.get("device", "auto"),
        models=args.models,
    )
    OUT = Path(args.metrics) / "image"
    # prune.json and prune.csv replace the previous ones together, and only once the rows are checked
    with staged(OUT) as (stage,), metrics_io.published_as(stage, OUT):
        write_json(stage / "prune.json", rows)
        metrics_io.prune_rows(stage / "prune.json", prune.runs, params["seeds"])
        flat = pd.DataFrame(rows)  # dvc plots: one throughput number per row (the mean of the timed repeats)
        flat["images_per_s"] = [
            float(np.mean(v)) if isinstance(v, list) else np.nan for v in flat.get("images_per_s", [])
        ]
        flat.to_csv(stage / "prune.csv", index=False)


if __name__ == "__main__":
    foreign_nac(main, "prune")  # a nac other than this checkout's: one line, no run
    try:
        main()
    except metrics_io.MetricsError as e:
        sys.exit(f"prune: {e}")
