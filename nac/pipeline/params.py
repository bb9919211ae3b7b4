"""params.yaml: composed from ``conf/`` by Hydra (as ``dvc exp run`` does), loaded and validated
by every stage before any work starts.

``python -m nac.pipeline.params [overrides...]`` rewrites params.yaml from ``conf/`` (e.g.
``profile=smoke``); ``dvc exp run -S ...`` does the same composition itself.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import yaml

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
PROFILES = ("smoke", "mini", "paper")


class ParamsError(ValueError):
    """params.yaml asks for something impossible; raised before any work starts."""


def compose(overrides: list[str] | None = None, conf_dir: str | Path = CONF_DIR) -> dict[str, Any]:
    """Compose ``conf/config.yaml`` with Hydra overrides, as DVC's Hydra integration does."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(str(Path(conf_dir).resolve()), version_base=None):
        cfg = hydra_compose(config_name="config", overrides=list(overrides or []))
    OmegaConf.resolve(cfg)
    return OmegaConf.to_container(cfg)


def write_params(path: str | Path = "params.yaml", overrides: list[str] | None = None) -> Path:
    """Write the composition to ``path`` in the same form as DVC (OmegaConf's YAML)."""
    from dvc.utils.hydra import compose_and_dump

    compose_and_dump(path, str(CONF_DIR), None, "config", str(CONF_DIR), list(overrides or []))
    return Path(path)


def load_params(path: str | Path = "params.yaml") -> dict[str, Any]:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} not found; run stages from the repository root, or recreate it with "
                                "`python -m nac.pipeline.params`")
    params = yaml.safe_load(path.read_text())
    validate(params)
    return params


def validate(params: dict[str, Any]) -> None:
    """Reject an impossible configuration, naming the key and what would be valid."""
    from nac.data.registry import available, get_builder
    from nac.graphs import PRIORS
    from nac.pipeline.image import image_model_config, image_train_config

    _require(params, "profile")
    if params["profile"] not in PROFILES:
        raise ParamsError(f"profile={params['profile']!r}; valid choices: {', '.join(PROFILES)}")
    seeds = params.get("seeds")
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and s >= 0 for s in seeds):
        raise ParamsError(f"seeds must be a non-empty list of non-negative ints, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise ParamsError(f"seeds contains duplicates: {seeds}")
    prior = params.get("prior", {})
    if prior.get("name") not in PRIORS:
        raise ParamsError(f"prior.name={prior.get('name')!r}; valid choices: {', '.join(PRIORS)}")
    data = params.get("data", {})
    names = available()
    for ds in data.get("datasets", []):
        if ds not in names:
            raise ParamsError(f"data.datasets lists unknown dataset {ds!r}; valid choices: {', '.join(names)}")
        try:
            get_builder(ds, data.get("root", "data"), data.get(ds) or {})
        except ValueError as e:
            raise ParamsError(f"data.{ds}: {e}") from e
    if "image" in params:
        image = params["image"]
        for key in ("dataset", "ood_dataset"):
            if image[key] not in data.get("datasets", []):
                raise ParamsError(f"image.{key}={image[key]!r} is not in data.datasets {data.get('datasets')}")
        if not image.get("ladder"):
            raise ParamsError("image.ladder is empty; list at least one of perceiver_io, modfc, frozen_graph, nac-<prior>")
        for run in image["ladder"]:
            try:  # parse_run raises ParamsError (a ValueError) naming the valid runs
                image_model_config(params, run, seeds[0], num_classes=2)
            except ParamsError:
                raise
            except ValueError as e:
                raise ParamsError(f"image.model for {run!r}: {e}") from e
        try:
            image_train_config(params, seeds[0])
        except ValueError as e:
            raise ParamsError(f"image.train: {e}") from e
    if "prune" in params:
        prune = params["prune"]
        bad = [r for r in prune["runs"] if r not in params["image"]["ladder"]]
        if bad:
            raise ParamsError(f"prune.runs {bad} are not trained (not in image.ladder {params['image']['ladder']})")
        fr = prune["dropped_fraction"]
        if not fr or not all(0 <= f < 1 for f in fr) or 0.0 not in fr or sorted(fr) != list(fr):
            raise ParamsError(f"prune.dropped_fraction must be increasing fractions in [0, 1) starting at 0.0 "
                              f"(the full model), got {fr}")


def _require(params: dict, key: str) -> None:
    if key not in params:
        raise ParamsError(f"params.yaml has no {key!r}; recreate it with `python -m nac.pipeline.params`")


def write_json(path: str | Path, obj: Any) -> Path:
    """Write JSON atomically (temporary file + rename), creating parent folders."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


def main(argv: list[str] | None = None) -> None:
    overrides = list(sys.argv[1:] if argv is None else argv)
    path = write_params("params.yaml", overrides)
    load_params(path)
    print(f"wrote {path} ({' '.join(overrides) or 'defaults'})")


if __name__ == "__main__":
    main()
