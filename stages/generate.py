"""DVC stage generate: every embedded dataset generated from its seed into data/raw/<dataset>/ and
cached as tensors into data/cache/<dataset>/, all in one process (each takes well under a second;
a stage per dataset cost seconds of start-up and DVC bookkeeping each). The downloaded datasets
have a download and a prepare stage each (stages/download.py, stages/prepare.py)."""

import argparse

from nac.data.registry import embedded
from nac.pipeline.datasets import builder
from nac.pipeline.lifeline import foreign_nac
from nac.pipeline.params import load_params


def main() -> None:
    argparse.ArgumentParser(description=__doc__).parse_args()
    params = load_params(stage="generate")
    for name in embedded():
        ds = builder(params["data"], name)
        ds.download()
        ds.prepare()


if __name__ == "__main__":
    foreign_nac(main, "generate")  # a nac other than this checkout's: one line, no run
    main()
