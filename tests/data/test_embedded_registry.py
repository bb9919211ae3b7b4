"""Registration, info() and the raw/cache guards shared by every embedded dataset."""

from __future__ import annotations

import pytest
import torch

import nac.data.embedded  # noqa: F401  (registers the builders)
from nac.data.cache import CacheMismatchError
from nac.data.embedded.pointclouds import PointClouds
from nac.data.registry import _REGISTRY

NAMES = ["shapes", "shapes_r", "shapes_novel", "digits", "pointclouds", "listops", "bytes", "nlvr_shapes"]


@pytest.mark.parametrize("name", NAMES)
def test_registered_with_seed_and_info(name, tmp_path):
    cls = _REGISTRY[name]
    assert cls.name == name
    assert "seed" in cls.defaults
    info = cls(tmp_path, {}).info()  # info needs no prepared cache
    assert info["num_classes"] == len(info["class_names"]) >= 2
    assert isinstance(info["input_kind"], str) and all(isinstance(d, int) for d in info["input_shape"])


def test_unknown_param_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="unknown params"):
        PointClouds(tmp_path, {"num_pointz": 3})


def test_prepare_needs_download_with_same_params(tmp_path):
    b = PointClouds(tmp_path, {"num_points": 16, "n_train": 12, "n_val": 12, "n_test": 12})
    with pytest.raises(FileNotFoundError, match="download"):
        b.prepare()
    b.download()
    other = PointClouds(tmp_path, {"num_points": 16, "n_train": 12, "n_val": 12, "n_test": 12, "seed": 1})
    with pytest.raises(ValueError, match="seed"):
        other.prepare()
    with pytest.raises(FileNotFoundError, match="prepare"):
        b.load("train")


def test_cache_with_other_params_is_refused(tmp_path):
    params = {"num_points": 16, "n_train": 12, "n_val": 12, "n_test": 12}
    b = PointClouds(tmp_path, params)
    b.download()
    b.prepare()
    assert len(b.load("train")) == 12
    with pytest.raises(CacheMismatchError, match="num_points"):
        PointClouds(tmp_path, {**params, "num_points": 32}).load("train")


def test_download_is_skipped_when_current(tmp_path):
    params = {"num_points": 16, "n_train": 12, "n_val": 0, "n_test": 0}
    b = PointClouds(tmp_path, params)
    b.download()
    raw = b.raw_dir / "pointclouds.npz"
    stamp = raw.stat().st_mtime_ns
    b.download()
    assert raw.stat().st_mtime_ns == stamp
    b.prepare()
    assert b.splits() == ["train"]
    batch = next(iter(torch.utils.data.DataLoader(b.load("train"), batch_size=4)))
    assert batch["input"].shape == (4, 16, 3)
