"""A stage's typed sections (``nac.pipeline.schema_models.section`` on ``load_params(stage=...)``'s
view): validated from the whole of params.yaml, read through the stage's declaration, so that a
field the stage does not declare raises as the view does (the smoke pipeline's ``prune`` stage
reads ``image.val_split``, never ``image.test_split``)."""

from __future__ import annotations

import pickle

import pytest

from nac.pipeline.params import compose
from nac.pipeline.schema_models import section
from nac.pipeline.stage_params import StageSection, UndeclaredParam, project
from nac.training.config import TrainConfig


@pytest.fixture(scope="module")
def params():
    return compose(["profile=smoke"])


def test_a_stage_reads_its_declared_fields_typed_and_no_other(params):
    view = project(params, "prune")
    image = section(view, "image")
    assert isinstance(image, StageSection)
    assert image.dataset == params["image"]["dataset"] and image.val_split == params["image"]["val_split"]
    assert image.train.eval_batch_size == TrainConfig(**params["image"]["train"]).eval_batch_size
    assert image.model.n_processor == params["image"]["model"]["n_processor"]  # declared whole: the config
    for read in (lambda: image.test_split, lambda: image.ladder, lambda: image.train.batch_size):
        with pytest.raises(
            UndeclaredParam, match=r"stage 'prune' reads params key 'image\.(test_split|ladder|train\.batch_size)'"
        ):
            read()
    prune = section(view, "prune")  # declared whole: the model itself
    assert prune.runs == params["prune"]["runs"] and not isinstance(prune, StageSection)


def test_a_section_the_stage_does_not_declare_raises(params):
    with pytest.raises(UndeclaredParam, match="'nlvr'"):
        section(project(params, "prune"), "nlvr")


def test_the_view_travels_to_a_worker_with_what_its_sections_need(params):
    view = pickle.loads(pickle.dumps(project(params, "prune")))  # a job's params; its section is read there
    image = section(view, "image")
    assert image.val_split == params["image"]["val_split"]
    with pytest.raises(UndeclaredParam):
        image.test_split


def test_without_a_stage_a_section_is_its_model(params):
    assert section(params, "image").test_split == params["image"]["test_split"]
    assert section({"seeds": [0]}, "image") is None


def test_a_stage_section_travels_to_a_worker_guarded(params):
    """A stage hands its track function the typed section (a job's argument, pickled to the worker):
    it still reads the declared fields and raises on the others there."""
    image = pickle.loads(pickle.dumps(section(project(params, "prune"), "image")))
    assert isinstance(image, StageSection) and image.val_split == params["image"]["val_split"]
    assert image.train.eval_batch_size == params["image"]["train"]["eval_batch_size"]
    with pytest.raises(UndeclaredParam, match=r"'image\.test_split'"):
        image.test_split
    with pytest.raises(UndeclaredParam, match=r"'image\.train\.batch_size'"):
        image.train.batch_size
