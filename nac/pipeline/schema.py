"""The shape of params.yaml as pydantic models (strict types, ranges, choices, unknown keys refused):
``Params``, the sections every stage reads (the tracks' are ``nac.pipeline.schema_models``'); the
types of ``data.<dataset>`` and ``prior.params`` come from the code's defaults. ``check`` raises
``ParamsError`` (``nac.fields.explain``); ``check_reads`` relates a section to ``data``."""

from __future__ import annotations

import re
from functools import cache
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal, Union

import annotated_types as at
from pydantic import AfterValidator, Field, TypeAdapter, ValidationError, create_model, field_validator, model_validator

from nac import repo
from nac.data.registry import _REGISTRY, available, embedded
from nac.fields import AT_LEAST_2, DEVICES, NONNEGATIVE_INT, POSITIVE, POSITIVE_INT, TAGS, Section, explain, unique
from nac.graphs import PRIOR_DEFAULTS, PRIORS

PROFILES = ("smoke", "mini", "converged", "converged_smoke", "paper")
SPLITS = ("train", "val", "test")
COST_PAIRS = ("tiny", "imagenet")  # nac.bench.step_ops.pairs' paper-size pairs
Split = Literal[SPLITS]
Names = Annotated[list[str], AfterValidator(unique)]
Runs = Annotated[list[str], at.MinLen(1), AfterValidator(unique)]


class ParamsError(ValueError):
    """params.yaml asks for something impossible; raised before any work starts."""


def check(model: Any, value: Any, where: str = "") -> Any:
    """``value`` validated by ``model`` (a class or an annotation), or ParamsError."""
    try:
        return TypeAdapter(model).validate_python(value)
    except ValidationError as e:
        raise ParamsError(explain(e, where, model)) from None


# ------------------------------------------------------------------------------------- data
def _data_type(key: str, default: Any, ranges: dict) -> Any:
    """A dataset param's type from its default: the builder's range, else >= 1 (>= 0: n_val, n_test,
    seed, workers; [0, 1): fractions)."""
    if isinstance(default, (bool, str)):
        return bool if isinstance(default, bool) else str | list[str]
    if isinstance(default, list) and default and all(isinstance(v, (int, float)) for v in default):
        return list[float | int]
    if not isinstance(default, (int, float)):
        return Any
    kind = float if isinstance(default, float) else int
    lo, hi = ranges.get(key, (0 if key in ("seed", "workers", "n_val", "n_test") else 1, None))
    if key.endswith("fraction") and key not in ranges:
        return Annotated[kind, at.Ge(0), at.Lt(1)]
    return Annotated[kind, at.Ge(lo)] if hi is None else Annotated[kind, at.Ge(lo), at.Le(hi)]


class _Dataset(Section):
    @model_validator(mode="after")
    def _splits(self):
        fr = {k: v for k, v in self if k.endswith("_fraction")}
        if len(fr) > 1 and (total := sum(fr.values())) >= 1:
            raise ValueError(f"the split fractions {', '.join(fr)} sum to {total}; they must leave a training split")
        lo, hi = getattr(self, "min_length", None), getattr(self, "max_length", None)
        if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
            raise ValueError(f"min_length={lo} exceeds max_length={hi}")
        return self


class _Data(Section):
    root: str = "data"
    datasets: Names
    downloads: Names = []

    @field_validator("root")
    @classmethod
    def _inside(cls, root: str) -> str:
        path = PurePosixPath(root.replace("\\", "/"))
        outside = path.is_absolute() or re.match(r"^[A-Za-z]:", root) or root.startswith("~") or ".." in path.parts
        if outside or not root.strip() or path == PurePosixPath("."):
            raise ValueError(
                f"data.root={root!r} must be a relative folder inside the repository (DVC 3 tracks no output "
                "outside it); for another disk, bind-mount it at data (`sudo mount --bind /mnt/disk/nac-data data`)"
                " or put DVC's cache there (`dvc cache dir /mnt/disk/dvc-cache && dvc config cache.type symlink`)"
            )
        return root

    @model_validator(mode="after")
    def _downloads(self):
        """``downloads``: the downloaded datasets of ``datasets`` (``generate`` makes the embedded ones)."""
        generated = set(embedded())
        for ds in self.downloads:
            if ds in generated:
                raise ValueError(
                    f"downloads lists the embedded dataset {ds!r} (the generate stage makes it); remove it"
                )
            if ds not in self.datasets:
                raise ValueError(f"downloads lists {ds!r}, which is not in datasets {self.datasets}; add it there")
        missing = [ds for ds in self.datasets if ds not in generated and ds not in self.downloads]
        if missing:
            raise ValueError(
                f"datasets lists {missing}, downloaded datasets missing from downloads {self.downloads}; add them "
                "there (dvc.yaml downloads and prepares only those)"
            )
        return self


@cache
def data_model() -> type:
    sections = {}
    for ds in available():
        reg = _REGISTRY[ds]
        keys = {k: (_data_type(k, v, reg.ranges or {}), v) for k, v in reg.defaults.items()}
        sections[ds] = (create_model(f"data.{ds}", __base__=_Dataset, **keys) | None, None)
    return create_model("data", __base__=_Data, datasets=(list[Literal[tuple(available())]], ...), **sections)


# ----------------------------------------------------------------------------------- sections
def _prior(name: str) -> type:
    keys = {k: (type(v) if isinstance(v, (int, float)) else Any, None) for k, v in PRIOR_DEFAULTS[name].items()}
    params = create_model(f"prior.params.{name}", __base__=Section, **keys)
    return create_model(f"prior.{name}", __base__=Section, name=(Literal[name], ...), params=(params | None, None))


TAGS.update(PRIORS)  # a location names the key, not the prior
Prior = Annotated[Union[tuple(_prior(name) for name in PRIORS)], Field(discriminator="name")]  # noqa: UP007


class Costs(Section):
    class Throughput(Section):
        repeats: AT_LEAST_2
        batch: POSITIVE_INT
        threads: POSITIVE_INT

    pairs: Annotated[list[Literal[COST_PAIRS]], at.MinLen(1), AfterValidator(unique)]
    throughput: Throughput


def _template(name: str) -> str:
    valid = sorted(p.stem for p in (repo.CONF_DIR / "template").glob("*.yaml"))
    if valid and name not in valid:
        raise ValueError(f"valid choices: {', '.join(valid)} (pick one with `template=<name>`)")
    return name


class _Params(Section):
    profile: Literal[PROFILES]
    device: Literal[DEVICES] = "auto"
    seeds: Annotated[list[NONNEGATIVE_INT], at.MinLen(1), AfterValidator(unique)]
    data: Any
    prior: Prior
    template: Annotated[str, AfterValidator(_template)] = None
    costs: Costs = None

    @field_validator("data")
    @classmethod
    def _data(cls, data: Any) -> Any:
        return data_model().model_validate(data)


TRACK_SECTIONS = ("image", "prune", "fewshot", "points", "listops", "text", "nlvr")  # their tracks check them
Params = create_model("params", __base__=_Params, **dict.fromkeys(TRACK_SECTIONS, (Any, None)))


class Prune(Section):
    runs: Names
    dropped_fraction: list[Annotated[float, at.Ge(0), at.Lt(1)]]
    calibration_size: POSITIVE_INT
    throughput_batch: POSITIVE_INT
    throughput_repeats: POSITIVE_INT
    random_orders: NONNEGATIVE_INT = 0

    @field_validator("dropped_fraction")
    @classmethod
    def _increasing(cls, fr: list[float]) -> list[float]:
        if not fr or fr[0] != 0.0 or sorted(fr) != list(fr):
            raise ValueError("must be increasing fractions in [0, 1) starting at 0.0 (the full model)")
        return fr


class Ngram(Section):
    n: POSITIVE_INT
    buckets: AT_LEAST_2


class Analysis(Section):
    run: str = "conditional"
    seed: NONNEGATIVE_INT = None
    pca_dim: POSITIVE_INT = None
    knn_k: POSITIVE_INT = None
    folds: AT_LEAST_2 = None
    shuffles: POSITIVE_INT = None
    perplexity: POSITIVE = None
    clique_sentences: AT_LEAST_2 = None


# ------------------------------------------------------------------------- across sections
def dataset_params(params: dict, dataset: str) -> dict:
    return {**_REGISTRY[dataset].defaults, **((params.get("data") or {}).get(dataset) or {})}


def check_reads(params: dict, where: str, sec: Any, ood: bool = False) -> None:
    """Section ``where`` (``sec``) reads a prepared dataset's non-empty splits (``ood``: its
    ``ood_dataset``'s ``ood_split``) and trains on whole batches (the last incomplete batch is
    dropped: a batch larger than the training split would take no step)."""
    key = "ood_dataset" if ood else "dataset"
    ds = getattr(sec, key)
    check_in_data(params, f"{where}.{key}", [ds])
    sizes = dataset_params(params, ds)
    splits = {"ood_split": sec.ood_split} if ood else {"dataset (train)": "train", "val_split": sec.val_split}
    for name, split in {**splits, **({} if ood else {"test_split": sec.test_split})}.items():
        if isinstance(n := sizes.get(f"n_{split}"), int) and n < 1:
            raise ParamsError(
                f"{where}.{name}={split!r} reads the {split} split of {ds!r}, but data.{ds}.n_{split}={n}; "
                "make it >= 1 or read another split"
            )
    if not ood and isinstance(n := sizes.get("n_train"), int) and sec.train.batch_size > n:
        raise ParamsError(
            f"{where}.train.batch_size={sec.train.batch_size} exceeds data.{ds}.n_train={n}: the last incomplete "
            f"batch is dropped, so no step would be taken; make batch_size <= {n}"
        )


def check_in_data(params: dict, where: str, datasets: list[str]) -> None:
    """Every dataset a section reads is one of ``data.datasets`` (prepared by the pipeline)."""
    listed = params["data"]["datasets"]
    for ds in datasets:
        if ds not in listed:
            raise ParamsError(f"{where}={ds!r} is not in data.datasets {listed}; add it there")
