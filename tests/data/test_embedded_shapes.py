"""shapes / shapes_r / shapes_novel: round trip, determinism, classes, styles, distinguishability."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nac.data.embedded import drawing
from nac.data.embedded.shapes import Shapes, ShapesNovel, ShapesR

TINY = {
    Shapes: {"n_train": 30, "n_val": 20, "n_test": 20},
    ShapesR: {"n_val": 0, "n_test": 50},
    ShapesNovel: {"n_train": 30, "n_val": 10, "n_test": 20},
}


@pytest.mark.parametrize("cls", list(TINY), ids=lambda c: c.name)
def test_round_trip(cls, build_dataset):
    b = build_dataset(cls, **TINY[cls])
    info = b.info()
    assert b.splits() == sorted(k for k in ("train", "val", "test") if TINY[cls].get(f"n_{k}", 0) > 0)
    for split in b.splits():
        ds = b.load(split)
        assert len(ds) == TINY[cls][f"n_{split}"]
        item = ds[0]
        assert item["input"].dtype == torch.uint8 and list(item["input"].shape) == info["input_shape"] == [3, 32, 32]
        assert item["label"].dtype == torch.int64 and 0 <= int(item["label"]) < info["num_classes"]
        raw = b.arrays(split)
        assert raw["images"].shape == (len(ds), 32, 32, 3) and raw["images"].dtype == np.uint8
        # CHW item == HWC cache
        assert torch.equal(item["input"], torch.from_numpy(np.array(raw["images"][0])).permute(2, 0, 1))
        # classes balanced: every class present, counts differ by at most one
        counts = np.bincount(raw["labels"], minlength=info["num_classes"])
        assert counts.min() >= 1 and counts.max() - counts.min() <= 1
    batch = next(iter(torch.utils.data.DataLoader(b.load(b.splits()[0]), batch_size=8)))
    assert batch["input"].shape == (8, 3, 32, 32)


@pytest.mark.parametrize("cls", list(TINY), ids=lambda c: c.name)
def test_deterministic(cls, build_dataset, cache_files):
    a, b = build_dataset(cls, "a", **TINY[cls]), build_dataset(cls, "b", **TINY[cls])
    assert cache_files(a) == cache_files(b)
    c = build_dataset(cls, "c", **TINY[cls], seed=1)
    split = c.splits()[0]
    assert not np.array_equal(a.arrays(split)["images"], c.arrays(split)["images"])


def test_class_lists():
    base, novel = Shapes.classes, ShapesNovel.classes
    assert len(base) >= 10 and len(novel) >= 8
    assert not set(base) & set(novel)
    assert ShapesR.classes == base  # same label order: a shapes model is evaluated on shapes_r as is
    assert len(set(base)) == len(base) and len(set(novel)) == len(novel)


def test_shapes_r_styles(build_dataset):
    b = build_dataset(ShapesR, **TINY[ShapesR])
    styles = b.info()["styles"]
    assert len(styles) >= 4 and "iid" not in styles
    assert b.info()["class_names"] == list(Shapes.classes)
    style = np.asarray(b.arrays("test")["style"])
    assert sorted(set(style.tolist())) == list(range(len(styles)))
    assert np.bincount(style).max() - np.bincount(style).min() <= 1
    item = b.load("test")[0]
    assert item["style"].dtype == torch.int64


def test_image_size_64(build_dataset):
    b = build_dataset(ShapesR, n_test=10, image_size=64)
    assert b.load("test")[0]["input"].shape == (3, 64, 64)
    assert b.info()["input_shape"] == [3, 64, 64]


def test_every_style_draws_every_class():
    rng = np.random.default_rng(0)
    for style in drawing.STYLES:
        for name in drawing.BASE_CLASSES + drawing.NOVEL_CLASSES:
            img = drawing.draw_image(rng, name, 32, style)
            assert img.shape == (32, 32, 3) and img.dtype == np.uint8
            assert img.std() > 5, f"{name}/{style} drew a blank image"


def test_classes_differ_by_shape():
    """Any two classes, same centre and size, overlap with IoU < 0.9 at every relative rotation."""
    size, names = 64, drawing.BASE_CLASSES + drawing.NOVEL_CLASSES
    angles = np.linspace(0, 2 * np.pi, 36, endpoint=False)
    masks = {n: [drawing.fill_mask(drawing.place(n, 32, 32, 28, a), size) > 0.5 for a in angles] for n in names}
    for i, p in enumerate(names):
        for q in names[i + 1 :]:
            ref = masks[p][0]
            iou = max((ref & m).sum() / (ref | m).sum() for m in masks[q])
            assert iou < 0.9, f"{p} and {q} overlap with IoU {iou:.2f}: not distinguishable by shape"


def test_shape_geometry_fits_the_unit_disk():
    for name, parts in drawing.GEOMETRY.items():
        r = max(np.linalg.norm(p, axis=1).max() for p, _ in parts)
        assert abs(r - 1) < 1e-9, name
