"""DVC stage download@<dataset> (one per entry of data.downloads): fetch, checksum and extract the
raw files of one dataset into data/raw/<dataset>/. (Given an embedded dataset, it generates its raw
files; the pipeline generates those in the generate stage, stages/generate.py.)"""

import argparse
import sys

from nac.data.download import UserDataRequired
from nac.pipeline.datasets import builder
from nac.pipeline.lifeline import foreign_nac
from nac.pipeline.params import load_params


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("dataset")
    args = ap.parse_args()
    params = load_params(stage="download", item=args.dataset)
    try:
        builder(params["data"], args.dataset).download()
    except UserDataRequired as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)


if __name__ == "__main__":
    foreign_nac(main, "download")  # a nac other than this checkout's: one line, no run
    main()
