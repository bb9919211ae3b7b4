"""DVC stage prune: drop processor modules by connectivity in steps (Figures 5a, 5b, 15)."""
import pandas as pd

from nac.pipeline.image import prune_sweep
from nac.pipeline.params import load_params, write_json


def main() -> None:
    rows = prune_sweep(load_params())
    write_json("metrics/image/prune.json", rows)
    pd.DataFrame(rows).to_csv("metrics/image/prune.csv", index=False)


if __name__ == "__main__":
    main()
