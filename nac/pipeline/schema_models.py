"""The model-bearing params sections (``image``, the tracks, ``fewshot``): their ``model``, ``train``,
``protocol`` and ``baselines`` are the config classes less the keys the pipeline sets (apart from
``nac.pipeline.schema``: the data-only stages import no model code)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import annotated_types as at
from pydantic import AfterValidator, create_model

from nac.config import ModelConfig
from nac.fields import NONNEGATIVE_INT, Section, section_of, unique
from nac.pipeline.paths import FEWSHOT_BASELINES
from nac.pipeline.schema import Analysis, Names, Ngram, ParamsError, Prune, Runs, Split, check  # noqa: F401 (ParamsError: re-exported)
from nac.pipeline.stage_params import guarded, whole
from nac.registry import BASELINES
from nac.tracks.fewshot import FewShotConfig
from nac.training.config import TrainConfig

# ModelConfig / TrainConfig fields the pipeline sets itself (from the run, the dataset, ``seeds``,
# ``device`` and ``prior``): a value in params.yaml would be silently overwritten, so it is refused.
IMAGE_MODEL_SET = dict(variant="the ladder run", num_classes="the dataset", graph_seed="the seed")
IMAGE_MODEL_SET.update(prior="the ladder run (nac-<prior>)", prior_params="nac.graphs.PRIOR_DEFAULTS")
TRACK_MODEL_SET = dict(variant="the run", num_classes="the dataset", generator="the run")
TRACK_MODEL_SET.update(prior="the `prior` group (prior.name)", prior_params="the `prior` group (prior.params)")
TRAIN_SET = {"seed": "`seeds`", "device": "the top-level `device`"}
BASELINE_SET = {"variant": "the ladder run", "num_classes": "the dataset", "selection_seed": "the seed"}

Train = section_of(TrainConfig, TRAIN_SET)
TrackModel = section_of(ModelConfig, TRACK_MODEL_SET)
Baselines = create_model(  # named as the module's attribute: a stage's section is pickled to its workers
    "Baselines",
    __base__=Section,
    __module__=__name__,
    **{n: (section_of(c[0], BASELINE_SET) | None, None) for n, c in BASELINES.items()},
)


class Image(Section):
    dataset: str
    val_split: Split = "val"
    test_split: Split = "val"
    ood_dataset: str
    ood_split: Split = "test"
    ladder: Runs
    model: section_of(ModelConfig, IMAGE_MODEL_SET)
    train: Train
    baselines: Baselines | None = None


class Track(Section):
    dataset: str
    runs: Runs
    val_split: Split = "val"
    test_split: Split = "test"
    model: TrackModel
    train: Train
    ngram: Ngram | None = None


class Nlvr(Track):
    analysis: Analysis | None = None


class Pretrain(Section):
    dataset: str
    val_split: Split = "val"
    model: TrackModel
    perceiver_io: TrackModel | None = None
    train: Train


class FewShot(Section):
    source: Literal["image", "pretrain"]
    runs: Annotated[list[Literal[("perceiver_io", "nac", *FEWSHOT_BASELINES)]], at.MinLen(1), AfterValidator(unique)]
    targets: Runs
    seed: NONNEGATIVE_INT = 0
    protocol: section_of(FewShotConfig) | None = None
    pretrain: Pretrain | None = None


SECTIONS = {"image": Image, "image.baselines": Baselines, "prune": Prune, "fewshot": FewShot, "nlvr": Nlvr}
SECTIONS.update(dict.fromkeys(("points", "listops", "text"), Track))


def section(params: dict[str, Any], name: str) -> Any:
    """Section ``name`` (dotted) of params.yaml as its typed model (``SECTIONS``; None where absent),
    validated from the whole of params.yaml (a ParamsError where invalid). ``params`` may be a
    stage's view (``load_params(stage=...)``): then a field the stage does not declare raises on
    reading, as the view does (``nac.pipeline.stage_params.guarded``)."""
    raw, view = whole(params), params
    for part in name.split("."):
        raw, view = (raw or {}).get(part), None if view is None else view.get(part)
    return guarded(None if raw is None else check(SECTIONS[name], raw, name), view)
