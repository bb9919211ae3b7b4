"""LRA ListOps and byte-level IMDB end to end on tiny fake archives."""

from __future__ import annotations

import torch
from archives import LISTOPS_ROWS, make_imdb, make_lra

from nac.data import get_builder


def test_lra_listops(tmp_path):
    fake = make_lra(tmp_path / "srv")
    b = get_builder("lra_listops", tmp_path / "data", {"url": fake.url, "md5": fake.md5, "max_length": 16})
    b.download()
    assert not (b.extracted / "lra_release" / "tsv_data").exists()  # only ListOps is extracted
    b.prepare()
    for split in ("train", "val", "test"):
        ds = b.load(split)
        assert len(ds) == len(LISTOPS_ROWS)
        assert [int(ds[i]["label"]) for i in range(len(ds))] == fake.facts["targets"]
    item = b.load("train")[0]
    assert item["input"].shape == (16,) and item["input"].dtype == torch.int64
    assert int(item["mask"].sum()) == 4  # [MAX 2 9 ] without the parentheses
    assert b.info()["vocab_size"] == len(b.info()["vocab"])


def test_lra_listops_without_checksum_is_accepted(tmp_path):
    fake = make_lra(tmp_path / "srv")
    b = get_builder("lra_listops", tmp_path / "data", {"url": fake.url, "max_length": 8})  # md5 None by default
    b.download()
    assert b.archive.exists()


def test_imdb_bytes(tmp_path):
    fake = make_imdb(tmp_path / "srv")
    b = get_builder("imdb_bytes", tmp_path / "data", {"url": fake.url, "sha256": fake.sha256, "max_length": 12})
    b.download()
    assert not (b.extracted / "aclImdb" / "train" / "unsup").exists()
    b.prepare()
    train, test, val = b.load("train"), b.load("test"), b.load("val")
    assert len(train) == len(test) == len(val) == fake.facts["n"]  # val is the test split
    assert [int(train[i]["label"]) for i in range(4)] == [0, 0, 1, 1]  # neg files, then pos
    item = train[0]
    text = "neg review 0 \xe9".encode()
    assert item["input"].dtype == torch.int64 and item["input"].shape == (12,)
    assert item["input"].tolist() == [c + 1 for c in text[:12]]  # raw bytes + 1, truncated
    short = get_builder("imdb_bytes", tmp_path / "data", {"max_length": 20})
    short.prepare()
    assert int(short.load("train")[0]["mask"].sum()) == len(text)  # padded with 0 past the text
