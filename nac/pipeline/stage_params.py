"""The params each stage reads: one declaration, used both by the stages and by dvc.yaml.

``STAGE_PARAMS[stage]`` lists the params.yaml keys a stage reads, in dvc.yaml's own syntax (dotted
keys, ``${...}`` interpolated from params.yaml, ``${item}`` the dataset of a ``foreach`` stage).
A stage loads its params with ``load_params(stage=...)``, which hands it a view of params.yaml
holding exactly these keys (:func:`project`): reading any other key that params.yaml has raises
:class:`UndeclaredParam` naming the key and this file, so the code cannot read a param that DVC
does not track. ``tests/test_dvc_deps.py`` checks that dvc.yaml's ``params:`` of every stage are
exactly these (``python tools/dvc_deps.py`` names the difference and the fix); so a change of a
param reruns every stage that reads it (``dvc exp run -S prior=ring_of_cliques`` reruns ``train``,
whose ladder names the prior) and no other.

No import of the rest of ``nac``: the dependency checker reads this module.
"""

from __future__ import annotations

import re
from typing import Any

ALL = None  # the whole of params.yaml (the validate stage)

_COMMON = ["device", "seeds", "data.root"]
# a track's neural_interpreter run reads Table 1's settings of it (nac.tracks.common.track_model_config)
_TRACK = [*_COMMON, "prior", "{t}", "data.${{{t}.dataset}}", "image.baselines.neural_interpreter"]

STAGE_PARAMS: dict[str, list[str] | None] = {
    "validate": ALL,
    "generate": [
        "data.root",
        "data.shapes",
        "data.shapes_r",
        "data.digits",
        "data.shapes_novel",
        "data.pointclouds",
        "data.listops",
        "data.bytes",
        "data.nlvr_shapes",
        "data.objects",  # the paper-regime stand-in (issue 50)
        "data.objects_r",
        "data.objects_novel",
    ],
    "download": ["data.root", "data.${item}"],
    "prepare": ["data.root", "data.${item}"],
    "train": [
        *_COMMON,
        "prior",
        "data.${image.dataset}",
        "data.${image.ood_dataset}",
        "image.dataset",
        "image.val_split",
        "image.test_split",
        "image.ood_dataset",
        "image.ood_split",
        "image.model",
        "image.train",
        "image.baselines",
        "image.ladder",
    ],
    "prune": [
        *_COMMON,
        "prune",
        "data.${image.dataset}",
        "image.dataset",
        "image.val_split",
        "image.model",  # the checkpoints' expected config (and a baseline's)
        "image.baselines",
        "image.train.eval_batch_size",
    ],
    **{f"train_{t}": [k.format(t=t) for k in _TRACK] for t in ("points", "listops", "text", "nlvr")},
    "nlvr_analysis": [
        *_COMMON,
        "nlvr.dataset",
        "nlvr.val_split",
        "nlvr.analysis",
        "nlvr.train.eval_batch_size",
        "data.${nlvr.dataset}",
    ],
    "pretrain": [*_COMMON, "prior", "fewshot.source", "fewshot.runs", "fewshot.pretrain"],
    "fewshot": [*_COMMON, "prior.name", "fewshot", "data"],
    "costs": ["costs.pairs"],
    "throughput": ["costs.throughput", "prune.dropped_fraction"],
    "report": [
        "profile",
        "seeds",
        "prior",
        "data.root",
        "image.ladder",
        "image.dataset",
        "image.val_split",
        "image.test_split",
        "image.ood_dataset",
        "image.ood_split",
        "image.model",
        "image.train",
        "data.${image.dataset}",  # a bench file's settings (nac.report.switches.bench_params)
        "data.${image.ood_dataset}",
        "prune.runs",
        "prune.random_orders",  # the random-order control (nac.report.claims.prune)
        "points.runs",
        "points.dataset",
        "listops.runs",
        "listops.dataset",
        "text.runs",
        "text.dataset",
        "nlvr.runs",
        "nlvr.dataset",
        "nlvr.analysis",  # the analysed model's seed (Figure 6's caption)
        # each track's test-set size: the noise floor under an accuracy claim's delta (nac.report.claims.deltas)
        "data.${points.dataset}",
        "data.${listops.dataset}",
        "data.${text.dataset}",
        "data.${nlvr.dataset}",
        "fewshot.targets",
        "fewshot.runs",
        "fewshot.source",
        "fewshot.protocol",
    ],
    "notebooks": [
        "profile",
        *_COMMON,
        "prior.name",
        "image.dataset",
        "image.val_split",
        "image.train.eval_batch_size",
        "data.${image.dataset}",
        "nlvr.dataset",
        "nlvr.runs",
        "nlvr.val_split",
        "nlvr.analysis",
        "data.${nlvr.dataset}",
    ],
}

HERE = "nac/pipeline/stage_params.py"


class UndeclaredParam(Exception):
    """A stage read a params.yaml key that it does not declare (a bug in the code, not the params)."""


def _resolve(key: str, params: dict[str, Any], item: str | None) -> str:
    def one(m: re.Match) -> str:
        name = m.group(1)
        if name == "item":
            if item is None:
                raise ValueError(f"{key!r} needs the foreach item")
            return item
        node: Any = params
        for part in name.split("."):
            node = node[part]
        return str(node)

    return re.sub(r"\$\{([^}]+)\}", one, key)


def keys(stage: str, params: dict[str, Any], item: str | None = None) -> list[str] | None:
    """The dotted keys ``stage`` reads, interpolated against ``params`` (None: all of them)."""
    declared = STAGE_PARAMS[stage]
    return None if declared is ALL else [_resolve(k, params, item) for k in declared]


class StageParams(dict):
    """A stage's view of params.yaml: a dict of the declared keys; a key params.yaml has but the
    stage does not declare raises :class:`UndeclaredParam` on ``[]``, ``get`` and ``in``."""

    def __init__(self, data: dict, hidden: set[str], stage: str, prefix: str = ""):
        super().__init__(data)
        self._hidden, self._stage, self._prefix = hidden, stage, prefix

    def _check(self, k: Any) -> None:
        if k in self._hidden:
            raise UndeclaredParam(
                f"stage {self._stage!r} reads params key {self._prefix + str(k)!r}, which it does not declare: "
                f"add it to STAGE_PARAMS[{self._stage!r}] in {HERE} and to the stage's params in dvc.yaml "
                "(`python tools/dvc_deps.py` checks both)"
            )

    def __getitem__(self, k):
        self._check(k)
        return super().__getitem__(k)

    def get(self, k, default=None):
        self._check(k)
        return super().get(k, default)

    def __contains__(self, k):
        self._check(k)
        return super().__contains__(k)


class StageSection:
    """A typed section (a pydantic model or config, validated from the whole of params.yaml) as a
    stage sees it: ``view`` is the section's :class:`StageParams`, and a field that params.yaml has
    and the stage does not declare raises :class:`UndeclaredParam` as the view does."""

    def __init__(self, typed: Any, view: StageParams):
        self.__dict__.update(_typed=typed, _view=view)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # dunder lookups (pickle, copy) and the private fields
            raise AttributeError(name)
        self._view._check(name)
        return guarded(getattr(self._typed, name), dict.get(self._view, name))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a stage's params are read-only ({name})")

    def __repr__(self) -> str:
        return f"StageSection({self._typed!r}, stage={self._view._stage!r})"


def guarded(typed: Any, view: Any) -> Any:
    """``typed`` as the stage sees it: itself where the stage declares all of it (``view`` not a
    :class:`StageParams`), else a :class:`StageSection` over ``view``."""
    return StageSection(typed, view) if isinstance(view, StageParams) else typed


def whole(params: dict[str, Any]) -> dict[str, Any]:
    """The whole of params.yaml behind a stage's view (what its typed sections are validated
    from; reading it goes through :func:`guarded`), or ``params`` itself."""
    return getattr(params, "_whole", params)


def project(params: dict[str, Any], stage: str, item: str | None = None) -> dict[str, Any]:
    """``params`` restricted to the keys ``stage`` declares (``params`` itself for ``ALL``); the
    whole stays behind it for the typed sections (:func:`whole`, :func:`guarded`)."""
    wanted = keys(stage, params, item)
    if wanted is None:
        return params
    tree: dict = {}
    for key in wanted:  # a tree of the wanted paths; True marks a whole subtree
        node, parts = tree, key.split(".")
        for p in parts[:-1]:
            nxt = node.setdefault(p, {})
            if nxt is True:
                break
            node = nxt
        else:
            node[parts[-1]] = True

    def build(src: Any, want: dict | bool, prefix: str) -> Any:
        if want is True or not isinstance(src, dict):
            return src
        kept = {k: build(src[k], w, f"{prefix}{k}.") for k, w in want.items() if k in src}
        return StageParams(kept, set(src) - set(kept), stage, prefix)

    view = build(params, tree, "")
    view._whole = params
    return view
