"""bytes: labels re-derived from the text by an independent phrase scorer; encode_bytes."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from nac.data.embedded import bytes as by

TINY = {"max_length": 512, "n_train": 200, "n_val": 20, "n_test": 40}


def phrase_scores(text: str) -> list[tuple[float, float]]:
    """Independent scorer: (score, relative position) of every sentiment adjective in ``text``."""
    lexicon = {**{w: 1.0 for w in by.POSITIVE}, **{w: -1.0 for w in by.NEGATIVE}}
    modifier = {"not": -1.0, **{w: 2.0 for w in by.INTENSIFIERS}, **{w: 0.5 for w in by.DOWNTONERS}}
    out = []
    words = list(re.finditer(r"[a-z]+", text.lower()))
    for i, m in enumerate(words):
        if m.group() in lexicon:
            prev = words[i - 1].group() if i else ""
            out.append((lexicon[m.group()] * modifier.get(prev, 1.0), m.start() / len(text)))
    return out


def test_labels_follow_from_the_text(build_dataset):
    b = build_dataset(by.Bytes, **TINY)
    texts, labels, scores = by.read_tsv(b.raw_dir / "bytes_train.tsv")
    assert np.bincount(labels).tolist() == [100, 100]  # balanced
    positions = []
    for text, y, s in zip(texts, labels, scores):
        ph = phrase_scores(text)
        total = sum(p for p, _ in ph)
        assert total == pytest.approx(s) and int(total > 0) == y and abs(total) >= 1
        assert 3 <= len(ph) <= 5  # L // 90 = 5 phrases at most at 512 bytes
        assert any((p > 0) != (y == 1) for p, _ in ph), "some phrase must oppose the label"
        assert len(text.encode()) <= TINY["max_length"]
        positions += [q for _, q in ph]
    # evidence is spread over the whole document, not front-loaded
    assert 0.4 < np.mean(positions) < 0.6 and np.mean(np.array(positions) > 0.5) > 0.35


def test_no_single_word_decides(build_dataset):
    b = build_dataset(by.Bytes, **TINY)
    texts, labels, _ = by.read_tsv(b.raw_dir / "bytes_train.tsv")
    vocab = sorted({w for t in texts for w in re.findall(r"[a-z]+", t.lower())})
    best = 0.0
    for w in vocab:
        has = np.array([re.search(rf"\b{w}\b", t.lower()) is not None for t in texts])
        best = max(best, np.mean(has == labels), np.mean(has != labels))
    assert best < 0.8, f"one word predicts the label with accuracy {best:.2f}"


def test_encode_bytes():
    tokens, mask = by.encode_bytes(["ab", b"\x00\xff", "é"], max_length=3)
    assert tokens.dtype == np.int64 and mask.dtype == bool
    assert tokens.tolist() == [[98, 99, 0], [1, 256, 0], [0xC3 + 1, 0xA9 + 1, 0]]
    assert mask.sum(1).tolist() == [2, 2, 2]
    t16, _ = by.encode_bytes(["abcdef"], max_length=4, dtype=np.int16)
    assert t16.dtype == np.int16 and t16.tolist() == [[98, 99, 100, 101]]  # truncated, as LRA does
    with pytest.raises(ValueError, match="int16"):
        by.encode_bytes(["a"], 4, dtype=np.uint8)


def test_round_trip(build_dataset):
    b = build_dataset(by.Bytes, **TINY)
    info = b.info()
    assert info["vocab_size"] == 257 and info["pad_id"] == 0 and info["num_classes"] == 2
    texts, labels, _ = by.read_tsv(b.raw_dir / "bytes_val.tsv")
    ds = b.load("val")
    item = ds[3]
    assert item["input"].dtype == torch.int64 and item["input"].shape == (512,)
    assert item["mask"].dtype == torch.bool and int(item["label"]) == labels[3]
    decoded = bytes((item["input"][item["mask"]] - 1).tolist()).decode()
    assert decoded == texts[3]
    batch = next(iter(torch.utils.data.DataLoader(ds, batch_size=8)))
    assert batch["input"].shape == (8, 512)


def test_deterministic(build_dataset, cache_files):
    small = {**TINY, "n_train": 20}
    a, b = build_dataset(by.Bytes, "a", **small), build_dataset(by.Bytes, "b", **small)
    assert cache_files(a) == cache_files(b)
    c = build_dataset(by.Bytes, "c", **small, seed=2)
    assert (a.raw_dir / "bytes_train.tsv").read_bytes() != (c.raw_dir / "bytes_train.tsv").read_bytes()
