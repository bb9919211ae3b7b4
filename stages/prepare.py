"""DVC stage prepare@<dataset> (one per entry of data.downloads): decode / tokenize once into the
cache data/cache/<dataset>/ (arrays + a manifest of the parameters that produced them)."""

import argparse

from nac.pipeline.datasets import builder
from nac.pipeline.lifeline import foreign_nac
from nac.pipeline.params import load_params


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("dataset")
    args = ap.parse_args()
    builder(load_params(stage="prepare", item=args.dataset)["data"], args.dataset).prepare()


if __name__ == "__main__":
    foreign_nac(main, "prepare")  # a nac other than this checkout's: one line, no run
    main()
