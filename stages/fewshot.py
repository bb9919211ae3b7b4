"""DVC stage fewshot@<target>: fine-tune the pre-trained NAC and Perceiver IO on few-shot
episodes of one target dataset (Figure 4). Writes metrics/fewshot/<target>.json and .csv."""
import argparse

from nac.pipeline.params import load_params
from nac.tracks import fewshot_params
from nac.tracks.fewshot import run_target


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("target")
    args = ap.parse_args()
    run_target(load_params(check=[fewshot_params.validate]), args.target)


if __name__ == "__main__":
    main()
