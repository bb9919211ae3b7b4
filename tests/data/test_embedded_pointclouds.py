"""pointclouds: round trip, determinism, classes, posing (SO(3), scale, jitter)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nac.data.embedded import pointclouds as pc

TINY = {"num_points": 64, "n_train": 48, "n_val": 24, "n_test": 24}


def test_round_trip(build_dataset):
    b = build_dataset(pc.PointClouds, **TINY)
    info = b.info()
    assert info["num_classes"] == len(pc.CLASSES) >= 10 and info["input_shape"] == [64, 3]
    for split in ("train", "val", "test"):
        a = b.arrays(split)
        assert a["points"].shape == (TINY[f"n_{split}"], 64, 3) and a["points"].dtype == np.float32
        assert np.isfinite(a["points"]).all()
        assert np.bincount(a["labels"], minlength=len(pc.CLASSES)).min() == TINY[f"n_{split}"] // len(pc.CLASSES)
        item = b.load(split)[0]
        assert item["input"].shape == (64, 3) and item["input"].dtype == torch.float32
        assert item["label"].dtype == torch.int64


def test_deterministic(build_dataset, cache_files):
    a, b = build_dataset(pc.PointClouds, "a", **TINY), build_dataset(pc.PointClouds, "b", **TINY)
    assert cache_files(a) == cache_files(b)
    c = build_dataset(pc.PointClouds, "c", **TINY, seed=5)
    assert not np.array_equal(a.arrays("train")["points"], c.arrays("train")["points"])


def test_rotations_are_uniform_proper_rotations():
    rot = pc.random_rotations(np.random.default_rng(0), 2000)
    eye = np.broadcast_to(np.eye(3), rot.shape)
    assert np.allclose(rot @ rot.transpose(0, 2, 1), eye, atol=1e-9)
    assert np.allclose(np.linalg.det(rot), 1.0)
    # a uniform rotation sends e_z to a uniform point on the sphere: mean ~ 0, E[z^2] = 1/3
    z = rot[:, :, 2]
    assert np.abs(z.mean(0)).max() < 0.06 and np.abs((z**2).mean(0) - 1 / 3).max() < 0.04


@pytest.mark.parametrize("name", pc.CLASSES)
def test_each_class_is_centred_and_bounded(name):
    rng = np.random.default_rng(1)
    p = pc.sample_cloud(rng, name, 512)
    assert p.shape == (512, 3) and p.dtype == np.float32
    assert np.abs(p.mean(0)).max() < 0.05  # centred on the centroid (up to jitter)
    r = np.linalg.norm(p, axis=1).max()
    assert 0.55 < r < 1.25  # unit sphere x U(0.7, 1) x per-axis U(0.85, 1.15) + jitter


def test_classes_have_distinct_geometry():
    """Sorted distance-to-centroid profiles (rotation invariant) differ between classes."""
    rng = np.random.default_rng(2)
    prof = {}
    for name, sampler in pc.SAMPLERS.items():
        p = sampler(rng, 4000)
        d = np.linalg.norm(p - p.mean(0), axis=1)
        prof[name] = np.quantile(d / d.max(), np.linspace(0.05, 0.95, 19))
    names = list(prof)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert np.abs(prof[a] - prof[b]).max() > 0.03, (a, b)
