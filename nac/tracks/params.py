"""Validation of the tracks' params sections (``points``, ``listops``, ``text``, ``nlvr``,
``fewshot``), on top of ``nac.pipeline.params.validate`` (profile, seeds, data, image track).

Every stage loads params through ``load_all_params`` so a bad value anywhere is rejected by the
first stage that runs, before any work, with the key and the valid choices named.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from nac.pipeline.params import ParamsError
from nac.tracks.common import TRACK_RUNS, track_model_config, track_train_config

TRACKS = tuple(TRACK_RUNS)


def load_all_params(path: str | Path = "params.yaml") -> dict[str, Any]:
    from nac.pipeline.params import load_params

    params = load_params(path)
    validate_tracks(params)
    return params


def _dataset_info(params: dict, name: str) -> dict[str, Any] | None:
    """The dataset's info when it can be computed before download (embedded data), else None."""
    from nac.data.registry import get_builder

    try:
        return get_builder(name, params["data"].get("root", "data"), params["data"].get(name) or {}).info()
    except Exception:  # real datasets read parts of their info from the cache
        return None


def validate_tracks(params: dict[str, Any]) -> None:
    """Reject an impossible track or few-shot section (on top of ``validate``): keys, types and
    ranges (``nac.pipeline.schema``), then runs, datasets, models and the prior's fit to them."""
    from nac.pipeline import schema

    datasets = params.get("data", {}).get("datasets", [])
    seeds = params["seeds"]
    for track in TRACKS:
        if track not in params:
            continue
        schema.check_track(params, track)
        sec = params[track]
        if sec["dataset"] not in datasets:
            raise ParamsError(f"{track}.dataset={sec['dataset']!r} is not in data.datasets {datasets}")
        bad = [r for r in sec["runs"] if r not in TRACK_RUNS[track]]
        if bad or not sec["runs"]:
            raise ParamsError(f"{track}.runs {sec['runs']} must be a non-empty list of: {', '.join(TRACK_RUNS[track])}")
        info = _dataset_info(params, sec["dataset"])
        if info is not None and "num_classes" in info:
            for run in sec["runs"]:
                try:
                    track_model_config(params, track, run, info)
                except (ValueError, KeyError) as e:
                    raise ParamsError(f"{track}.model for run {run!r}: {e}") from e
        _check_prior_fits(params, track)
        try:
            track_train_config(params, track, seeds[0])
        except ValueError as e:
            raise ParamsError(f"{track}.train: {e}") from e
    if "nlvr" in params:
        analysis = params["nlvr"].get("analysis", {})
        if analysis.get("run", "conditional") not in params["nlvr"]["runs"]:
            raise ParamsError(f"nlvr.analysis.run={analysis.get('run')!r} is not trained (nlvr.runs {params['nlvr']['runs']})")
        if analysis.get("seed", seeds[0]) not in seeds:
            raise ParamsError(f"nlvr.analysis.seed={analysis.get('seed')!r} is not in seeds {seeds}")
    if "fewshot" in params:
        schema.check_fewshot(params)
        _validate_fewshot(params)


def _check_prior_fits(params: dict[str, Any], track: str) -> None:
    """The ``prior`` group's params must suit the track's module count (e.g. n_blocks divides
    n_processor) for the runs that use that prior."""
    from nac.tracks.common import _prior_settings

    try:
        from nac.graphs import _resolve
    except ImportError:  # the graph module validates its params under another name: left to it
        return
    if not any(r in ("nac", "text_only", "image_only") for r in params[track]["runs"]):
        return
    n = params[track]["model"].get("n_processor")
    if not isinstance(n, int):
        return
    settings = _prior_settings(params)
    try:
        _resolve(settings["prior"], n, settings["prior_params"])
    except ValueError as e:
        raise ParamsError(f"prior.params {settings['prior_params']} with {track}.model.n_processor={n}: {e}") from e


def _validate_fewshot(params: dict[str, Any]) -> None:
    from nac.tracks.fewshot import FewShotConfig

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
        raise ParamsError(f"fewshot.source={fs.get('source')!r}; valid choices: image (the image track's checkpoints), "
                          "pretrain (fewshot.pretrain settings)")
    if fs["source"] == "image":
        ladder = params.get("image", {}).get("ladder", [])
        need = [fewshot_image_run(params, r) for r in fs["runs"]]
        missing = [r for r in need if r not in ladder]
        if missing:
            raise ParamsError(f"fewshot.source=image needs {missing} in image.ladder {ladder} "
                              f"(nac means nac-<prior.name>); add them or pick another prior")
    elif not fs.get("pretrain"):
        raise ParamsError("fewshot.source=pretrain needs a fewshot.pretrain section {dataset, model, train}")
    elif any(r in FEWSHOT_BASELINES for r in fs["runs"]):
        raise ParamsError(f"fewshot.runs {fs['runs']}: the baselines ({', '.join(FEWSHOT_BASELINES)}) adapt the image "
                          "track's checkpoints only (fewshot.source: image)")
    try:
        cfg = FewShotConfig.from_dict(dict(fs.get("protocol") or {}))
    except ValueError as e:
        raise ParamsError(f"fewshot.protocol: {e}") from e
    for t in fs["targets"]:
        info = _dataset_info(params, t)
        if info is not None and isinstance(info.get("num_classes"), int) and cfg.ways > info["num_classes"]:
            raise ParamsError(f"fewshot.protocol.ways={cfg.ways} exceeds the {info['num_classes']} classes of target "
                              f"{t!r}; lower fewshot.protocol.ways to <= {info['num_classes']}")
    if fs["source"] == "pretrain" and fs["pretrain"]["dataset"] not in datasets:
        raise ParamsError(f"fewshot.pretrain.dataset={fs['pretrain']['dataset']!r} is not in data.datasets {datasets}")


FEWSHOT_BASELINES = ("neural_interpreter", "modular_network")   # few-shot runs = image-track runs of that name


def fewshot_image_run(params: dict, run: str) -> str:
    """The image-track run a few-shot run adapts: ``nac`` -> ``nac-<prior.name>``; Perceiver IO and
    the baselines keep their names."""
    return run if run in ("perceiver_io", *FEWSHOT_BASELINES) else f"nac-{params['prior']['name']}"
