"""params.yaml: composed from ``conf/`` by Hydra (as ``dvc exp run`` does), loaded and validated
by every stage before any work starts.

``load_params`` reads params.yaml and validates the sections every stage reads (``profile``,
``seeds``, ``device``, ``data``, ``prior``); a stage passes the validators of the sections it
reads besides (``load_params(check=[image.validate])``), so it runs (and depends on) no other
track's code. The composer, ``python -m nac.compose [overrides...]``, validates every section.

Validation is pydantic's (``nac.pipeline.schema``: known keys at every level, types, ranges, the
rules within a section), then the rules between sections; every message names the key, the
problem and the fix.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from nac import repo
from nac.environment import mismatch_line
from nac.pipeline.datasets import builder
from nac.pipeline.schema import PROFILES, Params, ParamsError, check
from nac.pipeline.stage_params import project

CONF_DIR = repo.CONF_DIR
__all__ = ["CONF_DIR", "PROFILES", "ParamsError", "compose", "load_params", "read_params", "validate"]


def compose(overrides: list[str] | None = None, conf_dir: str | Path = CONF_DIR) -> dict[str, Any]:
    """Compose ``conf/config.yaml`` with Hydra overrides, as DVC's Hydra integration does."""
    from hydra import compose as hydra_compose  # deferred: Hydra ~0.15 s, only composing needs it
    from hydra import initialize_config_dir

    with initialize_config_dir(str(Path(conf_dir).resolve()), version_base=None):
        cfg = hydra_compose(config_name="config", overrides=list(overrides or []))
    OmegaConf.resolve(cfg)
    return OmegaConf.to_container(cfg)


def read_params(path: Path, shown_as: str | Path | None = None) -> dict[str, Any]:
    """Parse a params file as OmegaConf reads it (YAML 1.2's numbers, as DVC and Hydra read the
    same file: ``1e-3`` is a float; a repeated key is refused). Nothing is interpolated: DVC
    tracks params.yaml's text, so a ``${...}`` stays the string it is (and a typed key refuses
    it). A YAML syntax error, an empty file, a non-mapping or a value OmegaConf refuses is a
    ParamsError naming the file (and the line)."""
    name = shown_as or path
    try:
        cfg = OmegaConf.load(path)
    except yaml.MarkedYAMLError as e:
        mark, ctx = e.problem_mark or e.context_mark, e.context_mark
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(name)
        what = e.problem or e.context or "invalid YAML"
        if e.context and ctx is not None and ctx is not mark:
            what += f" ({e.context} at line {ctx.line + 1})"
        raise ParamsError(
            f"{where}: YAML syntax error: {what}; fix that line, or recreate the file with `python -m nac.compose`"
        ) from None
    except yaml.YAMLError as e:
        raise ParamsError(f"{name}: YAML error: {e}; recreate it with `python -m nac.compose`") from None
    except OSError:  # "Invalid loaded object type": a scalar document, not a mapping
        cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OmegaConfBaseException as e:  # e.g. a malformed ``${``, a null key
        raise ParamsError(
            f"{name}: {str(e).splitlines()[0]}; fix that value, or recreate the file with `python -m nac.compose`"
        ) from None
    if cfg is None or (isinstance(cfg, DictConfig) and not cfg):
        raise ParamsError(
            f"{name} is empty; recreate it with `python -m nac.compose` "
            "(or `dvc exp run`, which composes it from conf/)"
        )
    if not isinstance(cfg, DictConfig):
        value = OmegaConf.to_container(cfg) if OmegaConf.is_config(cfg) else cfg
        raise ParamsError(
            f"{name} must be a mapping of sections (profile, seeds, data, image, ...), got "
            f"a {'null' if value is None else type(value).__name__}: {str(value)[:60]!r}; "
            "recreate it with `python -m nac.compose`"
        )
    return OmegaConf.to_container(cfg, resolve=False)


def load_params(
    path: str | Path = "params.yaml",
    check: Iterable[Callable[[dict[str, Any]], None]] = (),
    stage: str | None = None,
    item: str | None = None,
) -> dict[str, Any]:
    """Read params.yaml, validate the sections every stage reads (``validate``), then run each
    validator of ``check`` (the sections the caller reads besides); prints
    ``params.yaml: profile=... prior=...`` to stderr unless ``NAC_QUIET`` is set. With ``stage``
    (a dvc.yaml stage; ``item`` its foreach item) the result holds only the keys that stage
    declares (``nac.pipeline.stage_params``): reading another key raises, naming it."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f"{path} not found; run stages from the repository root, or recreate it with `python -m nac.compose`"
        )
    if stage is not None:
        check_workspace(stage)
    params = read_params(path)
    validate(params)
    for validator in check:
        validator(params)
    if not os.environ.get("NAC_QUIET"):
        print(f"{path}: profile={params['profile']} prior={params['prior']['name']}", file=sys.stderr)
        _say_environment()
    return params if stage is None else project(params, stage, item)


@functools.cache
def _say_environment() -> None:
    """Once per process (its first call; ``functools.cache`` keeps that it ran): one line when the
    installed packages differ from requirements.lock (the committed run's environment), so a run
    whose numbers will not match the committed ones says why at its start (``nac.environment``)."""
    line = mismatch_line()
    if line:
        print(line, file=sys.stderr)


def check_workspace(stage: str) -> None:
    """Under DVC (which sets ``DVC_STAGE``), the ``nac`` this process imported must be the one of
    the workspace DVC runs the stage in (its working directory: the repository, a queued or
    ``--temp`` experiment's copy), else the results would come from other code than the one
    ``dvc.lock`` records. dvc.yaml runs every stage as ``python -m stages.<x>``, which puts the
    working directory first on the import path, before an editable install's checkout."""
    if not os.environ.get("DVC_STAGE"):
        return
    here = Path.cwd().resolve()
    used = repo.ROOT
    if used != here:
        raise ParamsError(
            f"stage {stage!r} runs the nac of {used}, not of the workspace DVC runs it in ({here}); "
            "run it as dvc.yaml's cmd does (`python -m stages.<name>` from the workspace root), "
            "and check PYTHONPATH"
        )


def validate(params: dict[str, Any]) -> None:
    """Reject an impossible configuration of the sections every stage reads (``nac.pipeline.schema.
    Params``), then a dataset its builder refuses, naming the key and the fix."""
    check(Params, params)
    for ds in params["data"]["datasets"]:
        try:
            builder(params["data"], ds)
        except ValueError as e:
            raise ParamsError(f"data.{ds}: {e}") from e
