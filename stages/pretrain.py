"""DVC stage pretrain: pre-train the few-shot source models (``fewshot.source: pretrain``, the
paper profile) into <models>/fewshot_pretrain/ (resumed when interrupted); with
``fewshot.source: image`` it only writes <models>/fewshot_pretrain/manifest.json."""

import argparse

from nac.checkpoint_io import RESUME_DIR
from nac.pipeline.lifeline import run_stage
from nac.pipeline.params import load_params
from nac.pipeline.paths import add_root_arguments
from nac.pipeline.schema_models import section
from nac.tracks import fewshot_params
from nac.tracks.pretrain import pretrain_all


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    add_root_arguments(ap, "models")
    args = ap.parse_args(argv)
    params = load_params(check=[fewshot_params.validate], stage="pretrain")
    pretrain_all(
        section(params, "fewshot"),
        data=params["data"],
        prior=params["prior"],
        seeds=params["seeds"],
        device=params.get("device", "auto"),
        models=args.models,
        resume=RESUME_DIR,
    )


if __name__ == "__main__":
    run_stage(main, "pretrain")
