"""params.yaml: composed from ``conf/`` by Hydra (as ``dvc exp run`` does), loaded and validated
by every stage before any work starts.

``python -m nac.pipeline.params [overrides...]`` rewrites params.yaml from ``conf/`` (e.g.
``profile=smoke``); ``dvc exp run -S ...`` does the same composition itself. The composition is
written to a temporary file and validated in full (image track and every other track) before it
replaces params.yaml, so a bad override never leaves a broken params.yaml behind.

Validation (``validate``) first checks the shape of every section (``nac.pipeline.schema``: known
keys at every level, types derived from the config dataclasses, ranges), then the rules between
sections; every message names the key and what would be valid.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
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
    """Compose ``conf/`` with ``overrides`` (as DVC does: OmegaConf's YAML) into a temporary file
    next to ``path``, validate everything (``validate`` and the tracks' ``validate_tracks``) and
    only then replace ``path`` atomically; on failure ``path`` is left as it was and the
    ``ParamsError`` (or Hydra's error for a bad override) propagates."""
    from dvc.utils.hydra import compose_and_dump

    from nac.tracks.params import validate_tracks

    path = Path(path)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{path.suffix or '.yaml'}", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o644)  # mkstemp's 0600 is not params.yaml's
    try:
        compose_and_dump(tmp, str(CONF_DIR), None, "config", str(CONF_DIR), list(overrides or []))
        params = _read_params(tmp, shown_as=path)
        validate(params)
        validate_tracks(params)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _read_params(path: Path, shown_as: str | Path | None = None) -> dict[str, Any]:
    """Parse a params file; a YAML syntax error, an empty file or a non-mapping is a ParamsError
    naming the file (and the line)."""
    name = shown_as or path
    try:
        params = yaml.safe_load(path.read_text())
    except yaml.MarkedYAMLError as e:
        mark, ctx = e.problem_mark or e.context_mark, e.context_mark
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(name)
        what = e.problem or e.context or "invalid YAML"
        if e.context and ctx is not None and ctx is not mark:
            what += f" ({e.context} at line {ctx.line + 1})"
        raise ParamsError(f"{where}: YAML syntax error: {what}; fix that line, or recreate the file with "
                          "`python -m nac.pipeline.params`") from None
    except yaml.YAMLError as e:
        raise ParamsError(f"{name}: YAML error: {e}; recreate it with `python -m nac.pipeline.params`") from None
    if params is None:
        raise ParamsError(f"{name} is empty; recreate it with `python -m nac.pipeline.params` "
                          "(or `dvc exp run`, which composes it from conf/)")
    if not isinstance(params, dict):
        raise ParamsError(f"{name} must be a mapping of sections (profile, seeds, data, image, ...), got a "
                          f"{type(params).__name__}: {str(params)[:60]!r}; recreate it with `python -m nac.pipeline.params`")
    return params


def load_params(path: str | Path = "params.yaml") -> dict[str, Any]:
    """Read and validate params.yaml (the image track and every section's keys, types and ranges);
    prints ``params.yaml: profile=... prior=...`` to stderr unless ``NAC_QUIET`` is set."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} not found; run stages from the repository root, or recreate it with "
                                "`python -m nac.pipeline.params`")
    params = _read_params(path)
    validate(params)
    if not os.environ.get("NAC_QUIET"):
        print(f"{path}: profile={params['profile']} prior={params['prior']['name']}", file=sys.stderr)
    return params


def validate(params: dict[str, Any]) -> None:
    """Reject an impossible configuration, naming the key and what would be valid."""
    from nac.data.registry import available, get_builder
    from nac.graphs import PRIORS
    from nac.pipeline.image import image_model_config, image_train_config

    from nac.pipeline.schema import check_schema

    if not isinstance(params, dict):
        raise ParamsError(f"params.yaml must be a mapping of sections (profile, seeds, data, ...), got {params!r}; "
                          "recreate it with `python -m nac.pipeline.params`")
    _require(params, "profile")
    if params["profile"] not in PROFILES:
        raise ParamsError(f"profile={params['profile']!r}; valid choices: {', '.join(PROFILES)}")
    seeds = params.get("seeds")
    if not isinstance(seeds, list) or not seeds or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
        raise ParamsError(f"seeds must be a non-empty list of non-negative ints, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise ParamsError(f"seeds contains duplicates: {seeds}")
    _require(params, "data")
    _require(params, "prior")
    check_schema(params)  # keys, types and ranges of every section, tracks included
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
        n = params.get("image", {}).get("model", {}).get("n_processor")
        uneven = [f for f in fr if isinstance(n, int) and abs(f * n - round(f * n)) > 1e-9]
        if uneven:
            raise ParamsError(f"prune.dropped_fraction {uneven} of image.model.n_processor={n} modules is not a whole "
                              f"number of modules (the sweep would drop a rounded count and report the wrong fraction); "
                              f"use multiples of 1/{n}")


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
    """Recompose params.yaml; an invalid composition leaves the old file and exits with status 2."""
    overrides = list(sys.argv[1:] if argv is None else argv)
    from hydra.errors import HydraException

    try:
        path = write_params("params.yaml", overrides)
    except (ParamsError, HydraException) as e:
        print(f"error: {e}\nparams.yaml was not changed ({' '.join(overrides) or 'defaults'})", file=sys.stderr)
        raise SystemExit(2) from None
    params = yaml.safe_load(path.read_text())
    print(f"wrote {path} ({' '.join(overrides) or 'defaults'}): profile={params['profile']} "
          f"prior={params['prior']['name']}")


if __name__ == "__main__":
    # Run the package's module, not this ``__main__`` copy: one ParamsError class for every check.
    from nac.pipeline.params import main as package_main

    package_main()
