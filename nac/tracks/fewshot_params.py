"""Validation of the ``fewshot`` section, read by the ``pretrain`` and ``fewshot`` stages."""

from __future__ import annotations

from typing import Any

from nac.pipeline import schema_models as schema
from nac.pipeline.datasets import dataset_info
from nac.pipeline.paths import FEWSHOT_BASELINES, fewshot_image_run
from nac.pipeline.schema import check_in_data
from nac.tracks.fewshot import FewShotConfig

ParamsError = schema.ParamsError


def validate(params: dict[str, Any]) -> None:
    """``schema_models.FewShot``, then targets, runs, the models' source and the ways per target."""
    if "fewshot" not in params:
        return
    fs = schema.section(params, "fewshot")
    check_in_data(params, "fewshot.targets", fs.targets)
    if fs.source == "image":
        ladder = params.get("image", {}).get("ladder", [])
        missing = [r for r in (fewshot_image_run(params["prior"], r) for r in fs.runs) if r not in ladder]
        if missing:
            raise ParamsError(
                f"fewshot.source=image needs {missing} in image.ladder {ladder} "
                f"(nac means nac-<prior.name>); add them or pick another prior"
            )
    elif fs.pretrain is None:
        raise ParamsError("fewshot.source=pretrain needs a fewshot.pretrain section {dataset, model, train}")
    elif any(r in FEWSHOT_BASELINES for r in fs.runs):
        raise ParamsError(
            f"fewshot.runs {fs.runs}: the baselines ({', '.join(FEWSHOT_BASELINES)}) adapt the image "
            "track's checkpoints only (fewshot.source: image)"
        )
    else:
        check_in_data(params, "fewshot.pretrain.dataset", [fs.pretrain.dataset])
    ways = (fs.protocol or FewShotConfig()).ways
    for t in fs.targets:
        info = dataset_info(params, t)
        if info is not None and isinstance(info.get("num_classes"), int) and ways > info["num_classes"]:
            raise ParamsError(
                f"fewshot.protocol.ways={ways} exceeds the {info['num_classes']} classes of target "
                f"{t!r}; lower fewshot.protocol.ways to <= {info['num_classes']}"
            )
