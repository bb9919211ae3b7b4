"""Validation of the ``fewshot`` section (on top of ``nac.pipeline.params.validate``), read by the
``pretrain`` and ``fewshot`` stages."""

from __future__ import annotations

from typing import Any

from nac.pipeline import schema_models as schema
from nac.pipeline.datasets import dataset_info
from nac.pipeline.paths import FEWSHOT_BASELINES, fewshot_image_run
from nac.tracks.fewshot import FewShotConfig

ParamsError = schema.ParamsError


def validate(params: dict[str, Any]) -> None:
    """Keys, types and ranges (``nac.pipeline.schema_models.check_fewshot``), then targets, runs, the
    source of the pre-trained models and the protocol's fit to each target."""
    if "fewshot" not in params:
        return
    schema.check_fewshot(params, FewShotConfig)
    fs = params["fewshot"]
    datasets = params.get("data", {}).get("datasets", [])
    for t in fs.get("targets", []):
        if t not in datasets:
            raise ParamsError(f"fewshot.targets lists {t!r}, which is not in data.datasets {datasets}")
    if not fs.get("targets"):
        raise ParamsError("fewshot.targets is empty; name at least one dataset (mini: digits, shapes_novel)")
    valid = ("perceiver_io", "nac", *FEWSHOT_BASELINES)
    bad = [r for r in fs.get("runs", []) if r not in valid]
    if bad or not fs.get("runs"):
        raise ParamsError(f"fewshot.runs {fs.get('runs')} must be a non-empty list of: {', '.join(valid)}")
    if fs.get("source") not in ("image", "pretrain"):
        raise ParamsError(
            f"fewshot.source={fs.get('source')!r}; valid choices: image (the image track's checkpoints), "
            "pretrain (fewshot.pretrain settings)"
        )
    if fs["source"] == "image":
        ladder = params.get("image", {}).get("ladder", [])
        need = [fewshot_image_run(params, r) for r in fs["runs"]]
        missing = [r for r in need if r not in ladder]
        if missing:
            raise ParamsError(
                f"fewshot.source=image needs {missing} in image.ladder {ladder} "
                f"(nac means nac-<prior.name>); add them or pick another prior"
            )
    elif not fs.get("pretrain"):
        raise ParamsError("fewshot.source=pretrain needs a fewshot.pretrain section {dataset, model, train}")
    elif any(r in FEWSHOT_BASELINES for r in fs["runs"]):
        raise ParamsError(
            f"fewshot.runs {fs['runs']}: the baselines ({', '.join(FEWSHOT_BASELINES)}) adapt the image "
            "track's checkpoints only (fewshot.source: image)"
        )
    try:
        cfg = FewShotConfig.from_dict(dict(fs.get("protocol") or {}))
    except ValueError as e:
        raise ParamsError(f"fewshot.protocol: {e}") from e
    for t in fs["targets"]:
        info = dataset_info(params, t)
        if info is not None and isinstance(info.get("num_classes"), int) and cfg.ways > info["num_classes"]:
            raise ParamsError(
                f"fewshot.protocol.ways={cfg.ways} exceeds the {info['num_classes']} classes of target "
                f"{t!r}; lower fewshot.protocol.ways to <= {info['num_classes']}"
            )
    if fs["source"] == "pretrain" and fs["pretrain"]["dataset"] not in datasets:
        raise ParamsError(f"fewshot.pretrain.dataset={fs['pretrain']['dataset']!r} is not in data.datasets {datasets}")
