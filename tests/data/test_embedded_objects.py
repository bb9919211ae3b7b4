"""objects / objects_r / objects_novel (issue 50): the paper-regime image stand-in's datasets."""

from __future__ import annotations

import numpy as np
import pytest

from nac.data.embedded import objects as O
from nac.data.embedded.drawing import draw_parts, fill_mask
from nac.data.embedded.shapes import Shapes

SMALL = {"n_classes": 12}
TINY = {
    O.Objects: {"n_train": 36, "n_val": 12, "n_test": 24, **SMALL},
    O.ObjectsR: {"n_val": 0, "n_test": 60, **SMALL},
    O.ObjectsNovel: {"n_train": 24, "n_val": 12, "n_test": 24, **SMALL},
}


@pytest.mark.parametrize("cls", list(TINY), ids=lambda c: c.name)
def test_round_trip_balanced_and_deterministic(cls, build_dataset, cache_files):
    b = build_dataset(cls, **TINY[cls])
    info = b.info()
    assert info["num_classes"] == 12 and info["input_shape"] == [3, 32, 32]
    for split in b.splits():
        raw = b.arrays(split)
        assert raw["images"].shape == (TINY[cls][f"n_{split}"], 32, 32, 3) and raw["images"].dtype == np.uint8
        counts = np.bincount(raw["labels"], minlength=12)
        assert counts.min() >= 1 and counts.max() - counts.min() <= 1
    assert cache_files(b) == cache_files(build_dataset(cls, "again", **TINY[cls]))


def test_templates_are_seeded_per_class_and_the_novel_ones_are_other_shapes():
    a, b = O.templates(5, 0), O.templates(8, 0)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))  # the first classes of a larger set are the same
    novel = O.templates(5, 0, O.NOVEL_STREAM)
    assert not any(np.array_equal(x, y) for x in a for y in novel)
    for poly in a:  # star-shaped, 5-9 vertices, farthest vertex at radius 1
        r = np.linalg.norm(poly, axis=1)
        assert 5 <= len(poly) <= 9 and r.max() == pytest.approx(1.0) and r.min() > 0.3


def test_objects_r_draws_the_objects_classes_in_every_style_without_clutter(build_dataset):
    b = build_dataset(O.ObjectsR, **TINY[O.ObjectsR])
    raw = b.arrays("test")
    assert b.info()["styles"] == list(O.OOD_STYLES) and b.info()["same_classes_as"] == "objects"
    combo = raw["style"] * 12 + raw["labels"]
    assert len(set(combo.tolist())) == 60  # 60 images over 12 classes x 5 styles: every pair once
    assert O.ObjectsR.with_clutter is False and O.Objects.with_clutter is True


def test_clutter_is_painted_under_the_object():
    """A distractor overlapping the object stays under it: the object's pixels are its one shaded
    colour (spread below the shading's), while the distractor shows beside it."""
    rng = np.random.default_rng(0)
    parts = O.pose_polygon(O.templates(1, 0)[0], 16, 16, 12, 0.0)
    behind = [O.pose_polygon(O.random_polygon(rng), 10, 10, 7, 0.0)]
    img = draw_parts(np.random.default_rng(1), parts, 32, "iid", behind).astype(float)
    inside = fill_mask(parts, 32) > 0.99
    under = fill_mask(behind[0], 32) > 0.99
    assert (inside & under).sum() > 10 and (under & ~inside).sum() > 5
    assert img[inside].std(axis=0).max() < 12  # one colour with mild shading, distractor hidden


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"n_classes": 1}, "n_classes must be an int >= 2"),
        ({"jitter": 2.0}, r"jitter must be in \[0, 1\]"),
        ({"clutter": -1}, "clutter must be an int >= 0"),
        ({"scale": [0.4, 0.2]}, r"scale must be \[lo, hi\]"),
    ],
)
def test_a_bad_knob_is_refused_with_its_fix(params, message, build_dataset):
    with pytest.raises(ValueError, match=message):
        build_dataset(O.Objects, **{**TINY[O.Objects], **params})


def test_shapes_still_draws_its_named_classes():
    assert Shapes.classes[0] == "circle" and len(Shapes.classes) == 10
