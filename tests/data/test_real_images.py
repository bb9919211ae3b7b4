"""Real image datasets end to end (download from file:// -> prepare -> load) on tiny fake archives."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from archives import WNIDS, make_cifar, make_cub, make_imagenet, make_imagenet_r, make_tiny_imagenet

from nac.data import get_builder
from nac.data.cache import CacheMismatchError
from nac.data.download import ChecksumError, CorruptFileError, UserDataRequired


def run(name, root, params, split):
    b = get_builder(name, root, params)
    b.download()
    b.prepare()
    return b, b.load(split)


def test_tiny_imagenet_and_r(tmp_path):
    fake = make_tiny_imagenet(tmp_path / "srv")
    root = tmp_path / "data"
    b, train = run("tiny_imagenet", root, {"url": fake.url, "md5": fake.md5}, "train")
    assert len(train) == fake.facts["n_train"]
    item = train[0]
    assert item["input"].shape == (3, 64, 64) and item["input"].dtype == torch.uint8
    info = b.info()
    assert info["wnids"] == sorted(WNIDS) and info["num_classes"] == 2  # sorted, not wnids.txt order
    assert info["class_names"][0] == "goldfish, Carassius auratus"
    # Label = sorted-wnid index; each class has a distinct colour, so labels and pixels agree.
    labels = np.array([int(train[i]["label"]) for i in range(len(train))])
    assert sorted(labels.tolist()) == [0, 0, 0, 1, 1, 1]
    val = b.load("val")
    assert len(val) == fake.facts["n_val"]
    val_by_label = {int(val[i]["label"]): val[i]["input"].float().mean((1, 2)) for i in range(len(val))}
    train_by_label = {int(train[i]["label"]): train[i]["input"].float().mean((1, 2)) for i in range(len(train))}
    for k in (0, 1):
        assert torch.allclose(val_by_label[k], train_by_label[k], atol=3)
    assert not (b.extracted / "tiny-imagenet-200" / "test").exists()  # unlabelled test images skipped

    fake_r = make_imagenet_r(tmp_path / "srv")
    r, test = run("tiny_imagenet_r", root, {"url": fake_r.url, "md5": fake_r.md5}, "test")
    assert len(test) == fake_r.facts["n"]  # the non-shared wnid is dropped
    assert test[0]["input"].shape == (3, 64, 64)
    rinfo = r.info()
    assert rinfo["class_indices"] == [0, 1] and rinfo["num_classes"] == 2
    assert {int(test[i]["label"]) for i in range(len(test))} == {0, 1}
    assert len(r.load("val")) == len(test)


def test_cache_is_checked_against_params_but_not_urls(tmp_path):
    fake = make_tiny_imagenet(tmp_path / "srv", n_train=1, n_val=1)
    root = tmp_path / "data"
    run("tiny_imagenet", root, {"url": fake.url, "md5": fake.md5}, "train")
    mirror = get_builder("tiny_imagenet", root, {"url": "https://mirror.invalid/x.zip", "md5": fake.md5})
    assert len(mirror.load("train")) == 2  # another URL does not invalidate the cache
    with pytest.raises(CacheMismatchError, match="image_size"):
        get_builder("tiny_imagenet", root, {"image_size": 32}).load("train")
    small = get_builder("tiny_imagenet", root, {"url": fake.url, "md5": fake.md5, "image_size": 32})
    small.prepare()
    assert small.load("val")[0]["input"].shape == (3, 32, 32)


def test_corrupt_jpeg_is_named(tmp_path):
    fake = make_tiny_imagenet(tmp_path / "srv", n_train=1, n_val=1, corrupt="broken_9.JPEG")
    b = get_builder("tiny_imagenet", tmp_path / "data", {"url": fake.url, "md5": fake.md5})
    b.download()
    with pytest.raises(CorruptFileError, match="broken_9.JPEG"):
        b.prepare()


def test_wrong_checksum_param_names_both_hashes(tmp_path):
    fake = make_tiny_imagenet(tmp_path / "srv", n_train=1, n_val=1)
    b = get_builder("tiny_imagenet", tmp_path / "data", {"url": fake.url})  # the published md5
    with pytest.raises(ChecksumError) as err:
        b.download()
    assert "90528d7ca1a48142e341f4ef8d21d0de" in str(err.value) and fake.md5 in str(err.value)
    assert not b.archive.exists()


def test_cub(tmp_path):
    fake = make_cub(tmp_path / "srv")
    b, train = run("cub", tmp_path / "data", {"url": fake.url, "md5": fake.md5, "image_size": 32}, "train")
    test = b.load("test")
    assert (len(train), len(test)) == (4, 2)
    assert train[0]["input"].shape == (3, 32, 32)
    assert [int(test[i]["label"]) for i in range(2)] == [0, 1]
    assert b.info()["class_names"] == fake.facts["classes"]


@pytest.mark.parametrize("kind", ["cifar10", "cifar100"])
def test_cifar(tmp_path, kind):
    fake = make_cifar(tmp_path / "srv", kind)
    b, train = run(kind, tmp_path / "data", {"url": fake.url, "md5": fake.md5}, "train")
    assert len(train) == fake.facts["n_train"] and len(b.load("test")) == fake.facts["n_test"]
    assert train[0]["input"].shape == (3, 32, 32) and train[0]["input"].dtype == torch.uint8
    assert b.info()["class_names"] == fake.facts["names"]
    assert len(b.load("val")) == fake.facts["n_test"]


def test_cifar_canonical_md5_still_checks_members(tmp_path):
    """With the published archive md5, torchvision's per-pickle md5s apply and fail clearly."""
    fake = make_cifar(tmp_path / "srv")
    b = get_builder("cifar10", tmp_path / "data", {"url": fake.url, "md5": None})
    b.download()
    b.params["md5"] = "c58f30108f718f92721af3b95e74349a"  # pretend it was the canonical archive
    with pytest.raises(CorruptFileError, match="cifar-10-batches-py.*rerun"):
        b.prepare()


def test_imagenet_user_supplied(tmp_path):
    root = tmp_path / "data"
    b = get_builder("imagenet", root)
    with pytest.raises(UserDataRequired) as err:
        b.download()
    assert str((root / "raw" / "imagenet" / "ILSVRC2012_img_train.tar").resolve()) in str(err.value)
    assert "1d675b47d978889d74fa0da5fadfb00e" in str(err.value) and "image-net.org" in str(err.value)
    fakes = make_imagenet(root / "raw" / "imagenet")
    b = get_builder("imagenet", root, {"image_size": 16, "md5s": {k: f.md5 for k, f in fakes.items()}})
    b.download()
    b.prepare()
    train, val = b.load("train"), b.load("val")
    assert [int(train[i]["label"]) for i in range(len(train))] == fakes["train"].facts["labels"]
    assert [int(val[i]["label"]) for i in range(len(val))] == fakes["val"].facts["labels"]
    assert val[0]["input"].shape == (3, 16, 16)
    assert b.info()["wnids"] == sorted(WNIDS)
    assert not (b.raw_dir / "scratch" / "train.u8").exists()
    before = np.array(b.load("train").arrays["images"])
    b.params["workers"] = 2  # decoding in a process pool gives the same arrays, in the same order
    b.prepare()
    assert np.array_equal(np.array(b.load("train").arrays["images"]), before)
