"""CUB-200-2011 (Caltech-UCSD Birds), a few-shot transfer target (Figure 4)."""

from __future__ import annotations

import numpy as np

from nac.data.download import CorruptFileError, prefix_filter
from nac.data.real._common import RealBuilder, decode_images, read_lines, source_defaults
from nac.data.registry import register

TOP = "CUB_200_2011"


@register("cub")
class CUB(RealBuilder):
    """CUB-200-2011: 200 bird species, 5994 train / 5794 test images (the official split).

    Read from ``images.txt`` (id, path), ``image_class_labels.txt`` (id, class 1..200),
    ``train_test_split.txt`` (id, is_train) and ``classes.txt`` (class id, name). Splits ``train``
    and ``test`` (``val`` is an alias of ``test``). Items: ``input`` uint8 [3, S, S] (S =
    ``image_size``; ``resize`` 'crop' keeps the aspect ratio and centre-crops), ``label`` int64 in
    [0, 200).
    """

    source = "cub"
    defaults = {**source_defaults("cub"), "image_size": 224, "resize": "crop"}
    rename = {"images": "input", "labels": "label"}
    image_keys = ("images",)
    split_alias = {"val": "test"}
    members = staticmethod(
        prefix_filter(
            [
                f"{TOP}/images",
                *(
                    f"{TOP}/{f}"
                    for f in ("images.txt", "image_class_labels.txt", "train_test_split.txt", "classes.txt")
                ),
            ]
        )
    )

    def _table(self, name: str, ncols: int = 2) -> dict[int, str]:
        path = self.require_extracted(TOP, name)
        out = {}
        for n, row in enumerate(read_lines(path), 1):
            if len(row) < ncols or not row[0].isdigit():
                raise CorruptFileError(f"{path} line {n}: expected '<id> <value>', got {' '.join(row)!r}")
            out[int(row[0])] = " ".join(row[1:])
        return out

    def prepare(self) -> None:
        images = self._table("images.txt")
        labels = self._table("image_class_labels.txt")
        is_train = self._table("train_test_split.txt")
        classes = self._table("classes.txt")
        missing = sorted(set(images) - set(labels) | set(images) - set(is_train))
        if missing:
            raise CorruptFileError(f"{self.extracted / TOP}: image ids {missing[:5]} have no label or split entry")
        size, mode = int(self.params["image_size"]), self.params["resize"]
        splits = {}
        for split, flag in (("train", "1"), ("test", "0")):
            ids = sorted(i for i in images if is_train[i] == flag)
            paths = [self.require_extracted(TOP, "images", images[i]) for i in ids]
            splits[split] = {
                "images": decode_images(paths, size, mode, f"cub {split}"),
                "labels": np.asarray([int(labels[i]) - 1 for i in ids], dtype=np.int64),
            }
        names = [classes[k] for k in sorted(classes)]
        self.write(
            splits,
            extra={
                "num_classes": len(names),
                "class_names": names,
                "input_kind": "image",
                "input_shape": [3, size, size],
            },
        )
