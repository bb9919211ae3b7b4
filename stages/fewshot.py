"""DVC stage fewshot@<target>: fine-tune the pre-trained NAC and Perceiver IO on few-shot
episodes of one target dataset (Figure 4). Writes metrics/fewshot/<target>.json and .csv."""
import argparse

from nac.tracks.fewshot import run_target
from nac.tracks.params import load_all_params


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("target")
    args = ap.parse_args()
    run_target(load_all_params(), args.target)


if __name__ == "__main__":
    main()
