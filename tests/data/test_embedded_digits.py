"""digits: sklearn's handwritten digits, resized, three channels, stratified deterministic split."""

from __future__ import annotations

import numpy as np
import torch

from nac.data.embedded.digits import Digits


def test_round_trip_and_split(build_dataset):
    b = build_dataset(Digits, image_size=16)
    info = b.info()
    assert info["num_classes"] == 10 and info["input_shape"] == [3, 16, 16]
    sizes = {}
    for split in ("train", "val", "test"):
        a = b.arrays(split)
        assert a["images"].dtype == np.uint8 and a["images"].shape[1:] == (16, 16, 3)
        assert np.array_equal(a["images"][..., 0], a["images"][..., 2])  # grey replicated to 3 channels
        counts = np.bincount(a["labels"], minlength=10)
        assert counts.min() >= 1
        sizes[split] = len(a["labels"])
        item = b.load(split)[0]
        assert item["input"].shape == (3, 16, 16) and item["input"].dtype == torch.uint8
        assert item["label"].dtype == torch.int64
    assert sum(sizes.values()) == 1797  # every real image used exactly once
    assert abs(sizes["test"] / 1797 - 0.5) < 0.01 and abs(sizes["val"] / 1797 - 0.1) < 0.01
    # ink is bright, background dark, full range used
    test = np.asarray(b.arrays("test")["images"])
    assert test.max() == 255 and np.median(test) < 50


def test_splits_disjoint(build_dataset):
    b = build_dataset(Digits, image_size=8)  # at 8 px the images are sklearn's own, so rows identify examples
    rows = {s: {img.tobytes() for img in np.asarray(b.arrays(s)["images"])} for s in ("train", "val", "test")}
    # a few sklearn digits are exact duplicates of each other; allow for those
    assert len(rows["train"] & rows["test"]) <= 5 and len(rows["train"] & rows["val"]) <= 5


def test_deterministic(build_dataset, cache_files):
    a, b = build_dataset(Digits, "a"), build_dataset(Digits, "b")
    assert cache_files(a) == cache_files(b)
    c = build_dataset(Digits, "c", seed=3)
    assert not np.array_equal(a.arrays("test")["labels"], c.arrays("test")["labels"])
