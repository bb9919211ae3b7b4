"""DVC stage prune: drop processor modules by connectivity, and in random orders as the control,
in steps (Figures 5a, 5b, 15)."""
import numpy as np
import pandas as pd

from nac.pipeline.io import write_json
from nac.pipeline.params import load_params
from nac.tracks.image import prune_sweep, validate, validate_prune


def main() -> None:
    rows = prune_sweep(load_params(check=[validate, validate_prune]))
    write_json("metrics/image/prune.json", rows)
    flat = pd.DataFrame(rows)  # dvc plots: one throughput number per row (the mean of the timed repeats)
    flat["images_per_s"] = [float(np.mean(v)) if isinstance(v, list) else np.nan for v in flat.get("images_per_s", [])]
    flat.to_csv("metrics/image/prune.csv", index=False)


if __name__ == "__main__":
    main()
