"""The shape of params.yaml: known keys, types and ranges of every section, checked before any
semantic rule. ``check_schema`` covers the sections every stage reads (``profile``, ``device``,
``seeds``, ``data``, ``prior``) and ``check_prune``; the checks of model-bearing sections
(``check_image``, ``check_track``, ``check_fewshot``) live in ``nac.pipeline.schema_models`` so
that data-only stages do not import the model code. Each is called by the validator of the track
that reads the section (``nac.tracks.<track>.validate``), and all of them by the composer
(``nac.compose``).

Types come from the code wherever a section maps to it, so a field added there is checked here
without a change: the dataclass annotations of ``ModelConfig`` (``<section>.model``),
``TrainConfig`` (``<section>.train``) and ``FewShotConfig`` (``fewshot.protocol``), the
signatures of the tokenizers (``model.tokenizer``), the ``defaults`` of the dataset builders
(``data.<dataset>``) and ``nac.graphs.PRIOR_DEFAULTS`` (``prior.params``). The remaining
sections (``image``, ``prune``, ``fewshot``, the tracks) are described by the tables below.

Every message names the key (``image.train.lr``), the problem and the fix; a quoted number
(``"5"``, ``"1e-3"``) is named as the string it is. params.yaml is read by OmegaConf
(``nac.pipeline.params.read_params``), as YAML 1.2 reads it and as DVC and Hydra do: ``1e-3`` is a
float.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Annotated, Any

import annotated_types as at

from nac import repo
from nac.data.registry import _REGISTRY, available, embedded
from nac.fields import AT_LEAST_2, NONNEGATIVE_INT, POSITIVE, POSITIVE_INT
from nac.graphs import PRIOR_DEFAULTS, PRIORS
from nac.pipeline.typecheck import (
    ParamsError,
    article,
    check_keys,
    check_table,
    check_type,
    check_unique,
)

TOP_LEVEL = (
    "profile",
    "device",
    "seeds",
    "data",
    "image",
    "prune",
    "fewshot",
    "points",
    "listops",
    "text",
    "nlvr",
    "prior",
    "template",
    "costs",
)
TRACKS = ("points", "listops", "text", "nlvr")
DEVICES = ("auto", "cpu", "cuda")
SPLITS = ("train", "val", "test")

# ModelConfig / TrainConfig fields the pipeline sets itself (from the run, the dataset, ``seeds``,
# ``device`` and ``prior``): a value in params.yaml would be silently overwritten, so it is rejected.
# (Names that are not ModelConfig fields are ignored, so both old and new field names may be listed.)
IMAGE_MODEL_SET = {
    "variant": "the ladder run",
    "num_classes": "the dataset",
    "frozen_graph_seed": "the seed",
    "graph_seed": "the seed",
    "prior": "the ladder run (nac-<prior>)",
    "prior_params": "nac.graphs.PRIOR_DEFAULTS",
}
TRACK_MODEL_SET = {
    "variant": "the run",
    "num_classes": "the dataset",
    "generator": "the run",
    "prior": "the `prior` group (prior.name)",
    "prior_params": "the `prior` group (prior.params)",
}
TRAIN_SET = {"seed": "`seeds`", "device": "the top-level `device`"}

# Hand-written sections (no dataclass reads them): key -> (annotated type, required).
PRUNE_KEYS = {
    "runs": (list[str], True),
    "dropped_fraction": (list[float], True),
    "calibration_size": (POSITIVE_INT, True),
    "throughput_batch": (POSITIVE_INT, True),
    "throughput_repeats": (POSITIVE_INT, True),
    "random_orders": (NONNEGATIVE_INT, False),
}
NLVR_ANALYSIS_KEYS = {
    "run": (str, False),
    "seed": (NONNEGATIVE_INT, False),
    "pca_dim": (POSITIVE_INT, False),
    "knn_k": (POSITIVE_INT, False),
    "folds": (AT_LEAST_2, False),
    "shuffles": (POSITIVE_INT, False),
    "perplexity": (POSITIVE, False),
    "clique_sentences": (AT_LEAST_2, False),
}
NGRAM_KEYS = {"n": (POSITIVE_INT, True), "buckets": (AT_LEAST_2, True)}


# ------------------------------------------------------------------------------------- data
def _data_type(key: str, default: int | float, ranges: dict | None = None) -> Any:
    """A dataset param's annotated type, from its builder default: the builder's declared range
    where it has one (``ranges``: ``{key: (lo, hi)}``), else sizes >= 1; ``n_val``, ``n_test``,
    seeds and worker counts >= 0; fractions in [0, 1). A float param takes an int too."""
    kind = float | int if isinstance(default, float) else type(default)
    if ranges and key in ranges:
        lo, hi = ranges[key]
        return Annotated[kind, at.Ge(lo)] if hi is None else Annotated[kind, at.Ge(lo), at.Le(hi)]
    if key.endswith("fraction"):
        return Annotated[type(default), at.Ge(0), at.Lt(1)]
    if key in ("seed", "workers", "n_val", "n_test"):
        return Annotated[type(default), at.Ge(0)]
    return Annotated[type(default), at.Ge(1)]


def check_downloads(downloads: Any, datasets: list[str]) -> None:
    """``data.downloads``: the downloaded datasets of ``data.datasets``, each once (dvc.yaml runs one
    download and one prepare stage per entry; the ``generate`` stage makes every embedded one)."""
    check_type("data.downloads", downloads, list[str])
    generated = set(embedded())
    for ds in downloads:
        if ds in generated:
            raise ParamsError(
                f"data.downloads lists the embedded dataset {ds!r}, which the generate stage makes; remove it"
            )
        if ds not in datasets:
            raise ParamsError(f"data.downloads lists {ds!r}, which is not in data.datasets {datasets}; add it there")
    if len(set(downloads)) != len(downloads):
        raise ParamsError(f"data.downloads contains duplicates: {downloads}")
    missing = [ds for ds in datasets if ds not in generated and ds not in downloads]
    if missing:
        raise ParamsError(
            f"data.datasets lists {missing}, downloaded datasets missing from data.downloads {downloads}; "
            "add them there (dvc.yaml downloads and prepares only those)"
        )


def check_data(params: dict) -> None:
    """``data``: root, datasets (known names) and one section per dataset, typed and ranged by
    the builder's ``defaults`` (ints stay ints; sizes >= 1, ``n_val`` / ``n_test`` / seeds >= 0,
    fractions in [0, 1))."""
    names = available()
    data = params.get("data")
    if not isinstance(data, dict):
        raise ParamsError(f"data must be a mapping {{root, datasets, <dataset>: {{...}}}}, got {data!r}")
    check_keys("data", data, ["root", "datasets", "downloads", *names], ["datasets"])
    if "root" in data:
        check_type("data.root", data["root"], str)
        check_data_root(data["root"])
    datasets = data["datasets"]
    check_type("data.datasets", datasets, list[str])
    for ds in datasets:
        if ds not in names:
            raise ParamsError(f"data.datasets lists unknown dataset {ds!r}; valid choices: {', '.join(names)}")
    if len(set(datasets)) != len(datasets):
        raise ParamsError(f"data.datasets contains duplicates: {datasets}")
    check_downloads(data.get("downloads", []), datasets)
    for ds in names:
        if ds not in data or data[ds] is None:
            continue
        where = f"data.{ds}"
        sec, defaults = data[ds], _REGISTRY[ds].defaults
        if not isinstance(sec, dict):
            raise ParamsError(
                f"{where} must be a mapping of dataset params ({', '.join(sorted(defaults))}), got {sec!r}"
            )
        unknown = sorted(set(sec) - set(defaults))
        if unknown:
            raise ParamsError(
                f"{where}.{unknown[0]}: unknown params {unknown} of dataset {ds!r}; valid params: {sorted(defaults)}"
            )
        for key, value in sec.items():
            default = defaults[key]
            if isinstance(default, bool):
                check_type(f"{where}.{key}", value, bool)
            elif isinstance(default, (int, float)):
                check_type(f"{where}.{key}", value, _data_type(key, default, _REGISTRY[ds].ranges))
            elif isinstance(default, list) and default and all(isinstance(v, (int, float)) for v in default):
                check_type(f"{where}.{key}", value, list[float | int])
            elif isinstance(default, str):
                check_type(f"{where}.{key}", value, str | list[str])
        merged = {**defaults, **sec}
        fr = [merged[k] for k in merged if k.endswith("_fraction")]
        if len(fr) > 1 and sum(fr) >= 1:
            raise ParamsError(
                f"{where}: the split fractions {', '.join(k for k in merged if k.endswith('_fraction'))} "
                f"sum to {sum(fr)}; they must leave a training split (sum < 1)"
            )
        if (
            isinstance(merged.get("min_length"), int)
            and isinstance(merged.get("max_length"), int)
            and merged["min_length"] > merged["max_length"]
        ):
            raise ParamsError(
                f"{where}.min_length={merged['min_length']} exceeds {where}.max_length={merged['max_length']}"
            )


def check_data_root(root: str) -> None:
    """``data.root`` holds DVC outputs (``<root>/raw/<dataset>``, ``<root>/cache/<dataset>``), and
    DVC 3 tracks no output outside the repository (nor through a symlinked folder): it must be a
    relative path that stays inside the repository, refused here before any download."""
    path = PurePosixPath(root.replace("\\", "/"))
    outside = path.is_absolute() or re.match(r"^[A-Za-z]:", root) or root.startswith("~") or ".." in path.parts
    if outside or not root.strip() or path == PurePosixPath("."):
        raise ParamsError(
            f"data.root={root!r} must be a relative folder inside the repository (e.g. data): DVC 3 tracks no "
            f"output outside the repository, nor through a symlinked folder, and would refuse the downloads only "
            f"after fetching them. To keep the data on another disk, keep data.root: data and bind-mount the disk "
            f"there (`mkdir -p data && sudo mount --bind /mnt/disk/nac-data data`), or put DVC's cache on it "
            f"(`dvc cache dir /mnt/disk/dvc-cache && dvc config cache.type symlink`)"
        )


def check_batch_fits(params: dict, where: str, dataset: Any, train: Any) -> None:
    """Training drops the last incomplete batch: a batch larger than the training split (when its
    size is a param) would train on nothing."""
    if dataset not in _REGISTRY or not isinstance(train, dict):
        return
    n = {**_REGISTRY[dataset].defaults, **(params.get("data", {}).get(dataset) or {})}.get("n_train")
    bs = train.get("batch_size")
    if isinstance(n, int) and isinstance(bs, int) and bs > n:
        raise ParamsError(
            f"{where}.batch_size={bs} exceeds data.{dataset}.n_train={n}: the last incomplete batch is "
            f"dropped, so no step would be taken; make batch_size <= {n}"
        )


def check_split_read(params: dict, where: str, dataset: Any, split: Any) -> None:
    """A split a stage reads must be one of train/val/test and, where the dataset's size is a param
    (``n_<split>``), non-empty."""
    if split not in SPLITS:
        raise ParamsError(f"{where}={split!r}; valid choices: {', '.join(SPLITS)}")
    if dataset not in _REGISTRY:
        return
    merged = {**_REGISTRY[dataset].defaults, **(params.get("data", {}).get(dataset) or {})}
    n = merged.get(f"n_{split}")
    if isinstance(n, int) and n < 1:
        raise ParamsError(
            f"{where}={split!r} reads the {split} split of {dataset!r}, but data.{dataset}.n_{split}={n}; "
            f"make it >= 1 or read another split"
        )


# ----------------------------------------------------------------------------------- sections
def check_schema(params: Any) -> None:
    """The sections every stage reads: the top-level keys, ``device``, ``prior`` and ``data``
    (known keys at every level, types, ranges; see the module doc). The other sections are
    checked by their tracks' validators."""
    if not isinstance(params, dict):
        raise ParamsError(
            f"params.yaml must be a mapping of sections ({', '.join(TOP_LEVEL)}), got {article(params)}; "
            "recreate it with `python -m nac.compose`"
        )
    unknown = [k for k in params if k not in TOP_LEVEL]
    if unknown:
        raise ParamsError(
            f"params.yaml has an unknown top-level key {unknown[0]!r} (unknown: {unknown}); valid keys: "
            f"{', '.join(TOP_LEVEL)}"
        )
    if "device" in params and params["device"] not in DEVICES:
        raise ParamsError(f"device={params['device']!r}; valid choices: {', '.join(DEVICES)}")
    check_prior(params)
    check_template(params)
    check_data(params)
    check_costs(params)


def templates() -> list[str]:
    """The model templates (``conf/template/<name>.yaml``): their switch values sit in every
    track's ``model`` / ``train`` section, where the model config checks them."""
    conf = repo.CONF_DIR
    return sorted(p.stem for p in (conf / "template").glob("*.yaml"))


def check_template(params: dict) -> None:
    """``template``: the name of the ``template`` group's choice (a record; the values it set are
    checked with the sections they sit in)."""
    if "template" not in params:
        return
    name, known = params["template"], templates()
    if not isinstance(name, str) or (known and name not in known):
        raise ParamsError(f"template={name!r}; valid choices: {', '.join(known)} (pick one with `template=<name>`)")


COST_PAIRS = ("tiny", "imagenet")  # nac.bench.step_ops.pairs' paper-size pairs


THROUGHPUT_KEYS = {
    "repeats": (AT_LEAST_2, True),
    "batch": (POSITIVE_INT, True),
    "threads": (POSITIVE_INT, True),
}


def check_costs(params: dict) -> None:
    """``costs.pairs``: which of the paper-size model pairs the ``costs`` stage counts;
    ``costs.throughput``: the ``throughput`` stage's timing (repeats >= 2: a CI needs two)."""
    if "costs" not in params:
        return
    check_keys("costs", params["costs"], ["pairs", "throughput"], ["pairs", "throughput"])
    check_table("costs.throughput", params["costs"]["throughput"], THROUGHPUT_KEYS)
    pairs = params["costs"]["pairs"]
    if not isinstance(pairs, list) or not pairs:
        raise ParamsError(f"costs.pairs must be a non-empty list of {', '.join(COST_PAIRS)}, got {pairs!r}")
    for i, pair in enumerate(pairs):
        if pair not in COST_PAIRS:
            raise ParamsError(f"costs.pairs[{i}]={pair!r}; valid choices: {', '.join(COST_PAIRS)}")
    check_unique("costs.pairs", pairs)


def check_prune(params: dict) -> None:
    check_table("prune", params["prune"], PRUNE_KEYS)
    check_unique("prune.runs", params["prune"]["runs"])


def check_prior(params: dict) -> None:
    prior = params.get("prior")
    if not isinstance(prior, dict):
        raise ParamsError(
            f"prior must be a mapping {{name, params}}, got {prior!r}; pick one with `prior=<name>` "
            f"({', '.join(PRIORS)})"
        )
    check_keys("prior", prior, ["name", "params"], ["name"])
    if prior["name"] not in PRIORS:
        raise ParamsError(f"prior.name={prior['name']!r}; valid choices: {', '.join(PRIORS)}")
    pp = prior.get("params") or {}
    defaults = PRIOR_DEFAULTS[prior["name"]]
    check_keys("prior.params", pp, defaults, what="param")
    for key, value in pp.items():
        default = defaults[key]
        if isinstance(default, (int, float)) and not isinstance(default, bool):
            check_type(f"prior.params.{key}", value, type(default))
