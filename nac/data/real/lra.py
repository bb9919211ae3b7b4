"""Long Range Arena tasks of Table 3: ListOps and byte-level text classification (IMDB).

Tokenization is shared with the embedded stand-ins (``nac.data.embedded.listops`` /
``nac.data.embedded.bytes``), so the paper and offline profiles feed models identical token
streams.
"""

from __future__ import annotations

import numpy as np

from nac.data.download import CorruptFileError, prefix_filter
from nac.data.embedded import bytes as byte_text
from nac.data.embedded import listops
from nac.data.real._common import RealBuilder, progress, source_defaults
from nac.data.registry import register

LISTOPS_DIR = "lra_release/listops-1000"
IMDB_DIR = "aclImdb"


@register("lra_listops")
class LRAListOps(RealBuilder):
    """LRA ListOps: 10-way classification of nested MIN/MAX/MED/SM expressions.

    Read from ``lra_release/listops-1000/basic_{train,val,test}.tsv`` (``Source``, ``Target``)
    inside ``lra_release.gz`` (a gzipped tar of all LRA tasks; only ListOps is extracted).
    No checksum is published, so ``md5`` defaults to None (pass one to pin the file).
    Splits ``train`` [96000], ``val`` [2000], ``test`` [2000]. Items: ``input`` int64 [L] token
    ids (L = ``max_length``, 2000 as in LRA; cached as uint8), ``mask`` bool [L] (True on real
    tokens), ``label`` int64 (the value, 0-9). A sequence longer than L is an error, not truncated.
    """

    source = "lra"
    defaults = {**source_defaults("lra"), "max_length": 2000}
    rename = {"tokens": "input", "labels": "label"}
    long_keys = ("tokens",)
    members = staticmethod(prefix_filter([LISTOPS_DIR]))

    def prepare(self) -> None:
        max_length = int(self.params["max_length"])
        splits = {}
        for split in ("train", "val", "test"):
            path = self.require_extracted(LISTOPS_DIR, f"basic_{split}.tsv")
            try:
                sources, targets = listops.read_lra_tsv(path)
            except (ValueError, KeyError, IndexError, UnicodeDecodeError) as e:
                raise CorruptFileError(f"cannot parse {path} as an LRA TSV (Source, Target): {e}") from e
            tokens, mask = listops.tokenize_listops(sources, max_length)  # raises on a sequence > max_length
            splits[split] = {
                "tokens": tokens.astype(np.uint8),
                "mask": mask,
                "labels": np.asarray(targets, dtype=np.int64),
            }
        # The same info() keys as the embedded ``listops``.
        self.write(
            splits,
            extra={
                "num_classes": 10,
                "class_names": [str(i) for i in range(10)],
                "input_kind": "tokens",
                "input_shape": [max_length],
                "input_dtype": "int64",
                "vocab": list(listops.VOCAB),
                "vocab_size": len(listops.VOCAB),
                "pad_id": listops.PAD_ID,
                "operators": list(listops.OPERATORS),
            },
        )


@register("imdb_bytes")
class IMDBBytes(RealBuilder):
    """LRA byte-level text classification: IMDB reviews as raw bytes, positive vs negative.

    Read from ``aclImdb/{train,test}/{pos,neg}/*.txt`` (files in sorted order; label 1 = pos).
    Each review's raw bytes are truncated/padded to ``max_length`` (default 4000; LRA's configs use
    1000 or 4000); token = byte + 1, padding 0. Splits ``train`` [25000] and ``test`` [25000]; as
    in LRA, **the test split doubles as validation**: ``load("val")`` returns the test split.
    Items: ``input`` int64 [L] (cached as int16), ``mask`` bool [L], ``label`` int64 (1 = positive).
    """

    source = "imdb"
    defaults = {**source_defaults("imdb"), "max_length": 4000}
    rename = {"tokens": "input", "labels": "label"}
    long_keys = ("tokens",)
    split_alias = {"val": "test"}
    members = staticmethod(prefix_filter([f"{IMDB_DIR}/{s}/{c}" for s in ("train", "test") for c in ("pos", "neg")]))

    def prepare(self) -> None:
        max_length = int(self.params["max_length"])
        splits = {}
        for split in ("train", "test"):
            texts, labels = [], []
            files = [
                (p, label)
                for label, cls in ((0, "neg"), (1, "pos"))
                for p in sorted(self.require_extracted(IMDB_DIR, split, cls).glob("*.txt"))
            ]
            for path, label in progress(files, f"imdb_bytes {split}", total=len(files), unit="file"):
                try:
                    texts.append(path.read_bytes())
                except OSError as e:
                    raise CorruptFileError(f"cannot read {path}: {e}; rerun the download") from e
                labels.append(label)
            tokens, mask = byte_text.encode_bytes(texts, max_length, dtype=np.int16)
            splits[split] = {"tokens": tokens, "mask": mask, "labels": np.asarray(labels, dtype=np.int64)}
        # The same info() keys as the embedded ``bytes``.
        self.write(
            splits,
            extra={
                "num_classes": 2,
                "class_names": ["negative", "positive"],
                "input_kind": "bytes",
                "input_shape": [max_length],
                "input_dtype": "int64",
                "vocab_size": byte_text.VOCAB_SIZE,
                "pad_id": byte_text.PAD_ID,
            },
        )
