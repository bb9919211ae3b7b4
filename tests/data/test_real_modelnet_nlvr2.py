"""ModelNet40 and NLVR2 end to end on tiny fakes (NLVR2 with a stand-in CLIP encoder)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from archives import make_modelnet, make_nlvr2

from nac.data import get_builder
from nac.data.download import CorruptFileError, UserDataRequired


def test_modelnet40_with_mirror_list(tmp_path):
    fake = make_modelnet(tmp_path / "srv", points=16)
    dead = (tmp_path / "down.zip").as_uri()  # the Stanford host being down
    b = get_builder("modelnet40", tmp_path / "data", {"url": [dead, fake.url], "md5": fake.md5, "num_points": 8})
    b.download()
    b.prepare()
    train, test = b.load("train"), b.load("test")
    assert (len(train), len(test)) == (fake.facts["n_train"], fake.facts["n_test"])
    assert train[0]["input"].shape == (8, 3) and train[0]["input"].dtype == torch.float32
    assert [int(train[i]["label"]) for i in range(5)] == [0, 1, 2, 0, 1]  # shard order train0, train1
    assert b.info()["class_names"] == ["airplane", "bathtub", "bed"]
    with pytest.raises(ValueError, match="num_points=64"):
        get_builder("modelnet40", tmp_path / "data", {"num_points": 64}).prepare()


class TinyEncoder:
    """Stand-in for CLIP: image -> mean colour (3-d), text -> [length, #words, 1]."""

    name = "tiny-stand-in"

    def __init__(self):
        self.images_seen = 0

    def encode_images(self, images):
        self.images_seen += len(images)
        return torch.stack(
            [torch.from_numpy(np.asarray(im.resize((4, 4)), dtype=np.float32)).reshape(-1, 3).mean(0) for im in images]
        )

    def encode_texts(self, texts):
        return torch.tensor([[len(t), len(t.split()), 1.0] for t in texts])


def nlvr2_params(fakes):
    return {"urls": {k: f.url for k, f in fakes.items()}, "md5s": {k: f.md5 for k, f in fakes.items()}, "batch_size": 3}


def test_nlvr2_features_with_injected_encoder(tmp_path):
    root = tmp_path / "data"
    fakes = make_nlvr2(root / "raw" / "nlvr2" / "srv")
    (root / "raw" / "nlvr2" / "srv" / "images").rename(root / "raw" / "nlvr2" / "images")
    b = get_builder("nlvr2", root, nlvr2_params(fakes))
    b.download()
    b.encoder = enc = TinyEncoder()
    b.prepare()
    assert enc.images_seen == 3 * 4  # each distinct image encoded once per split
    val = b.load("val")
    assert len(val) == 3
    item = val[0]
    assert item["input"].shape == (2, 3) and item["cond"].shape == (3,) and item["input"].dtype == torch.float32
    assert [int(val[i]["label"]) for i in range(3)] == fakes["dev"].facts["labels"]
    assert torch.equal(val[0]["cond"], val[2]["cond"])  # the same sentence
    assert torch.equal(val[0]["input"], val[1]["input"]) and not torch.equal(val[0]["input"], val[2]["input"])
    assert b.info()["encoder"] == "tiny-stand-in"
    assert [r["identifier"] for r in b.records("test")] == ["test1-1-0-0", "test1-1-0-1", "test1-2-0-2"]


def test_nlvr2_missing_images_and_missing_clip(tmp_path):
    root = tmp_path / "data"
    fakes = make_nlvr2(tmp_path / "srv", with_images=False)
    b = get_builder("nlvr2", root, nlvr2_params(fakes))
    with pytest.raises(UserDataRequired) as err:
        b.download()
    msg = str(err.value)
    assert str((root / "raw" / "nlvr2" / "images").resolve()) in msg and "train-1-0-img0.png" in msg
    try:
        import open_clip  # noqa: F401
    except ImportError:
        make_nlvr2(tmp_path / "srv2")
        (tmp_path / "srv2" / "images").rename(root / "raw" / "nlvr2" / "images")
        with pytest.raises(ImportError, match=r"pip install -e \.\[clip\]"):
            b.prepare()


def test_nlvr2_corrupt_image_is_named(tmp_path):
    root = tmp_path / "data"
    fakes = make_nlvr2(root / "raw" / "nlvr2" / "srv")
    images = root / "raw" / "nlvr2" / "images"
    (root / "raw" / "nlvr2" / "srv" / "images").rename(images)
    (images / "dev" / "dev-2-0-img1.png").write_bytes(b"\x89PNG garbage")
    b = get_builder("nlvr2", root, nlvr2_params(fakes))
    b.download()
    b.encoder = TinyEncoder()
    with pytest.raises(CorruptFileError, match="dev-2-0-img1.png"):
        b.prepare()


def test_corrupt_records_are_named(tmp_path):
    fake = make_modelnet(tmp_path / "srv")
    b = get_builder("modelnet40", tmp_path / "data", {"url": fake.url, "md5": fake.md5, "num_points": 8})
    b.download()
    shard = b.extracted / "modelnet40_ply_hdf5_2048" / "ply_data_test0.h5"
    shard.write_bytes(b"not hdf5")
    with pytest.raises(CorruptFileError, match="ply_data_test0.h5"):
        b.prepare()
    bad = tmp_path / "srv" / "dev.json"
    bad.write_text('{"sentence": "x", "label": "True", "identifier": "dev-1-0-0"}\n{"sentence": "y"}\n')
    from nac.data.real.nlvr2 import read_records

    with pytest.raises(CorruptFileError, match=r"dev.json line 2"):
        read_records(bad)
