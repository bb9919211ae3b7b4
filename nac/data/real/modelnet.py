"""ModelNet40 point clouds (Table 2), from the PointNet HDF5 release (2048 points per shape)."""

from __future__ import annotations

import re
from pathlib import Path

import h5py
import numpy as np

from nac.data.download import CorruptFileError
from nac.data.real._common import RealBuilder, progress, read_lines, source_defaults
from nac.data.registry import register

TOP = "modelnet40_ply_hdf5_2048"


def _shard_index(path: Path) -> int:
    m = re.search(r"(\d+)\.h5$", path.name)
    return int(m.group(1)) if m else -1


@register("modelnet40")
class ModelNet40(RealBuilder):
    """ModelNet40: 40 shape classes, 9840 train / 2468 test clouds.

    Read from ``ply_data_train{0..4}.h5`` / ``ply_data_test{0,1}.h5`` (datasets ``data`` float32
    [n, 2048, 3] and ``label`` [n, 1]) and ``shape_names.txt``. Params: ``num_points`` P keeps the
    first P points of each cloud (the release stores them in random order), at most 2048; ``url``
    is a list of mirrors tried in order. Splits ``train`` and ``test`` (``val`` = ``test``).
    Items: ``input`` float32 [P, 3], ``label`` int64 in [0, 40).
    """

    source = "modelnet40"
    defaults = {**source_defaults("modelnet40"), "num_points": 2048}
    rename = {"points": "input", "labels": "label"}
    split_alias = {"val": "test"}

    def _folder(self) -> Path:
        top = self.extracted / TOP
        return top if top.is_dir() else self.require_extracted()

    def _read_split(self, split: str, num_points: int) -> dict[str, np.ndarray]:
        folder = self._folder()
        shards = sorted(folder.glob(f"ply_data_{split}*.h5"), key=_shard_index)
        if not shards:
            raise FileNotFoundError(f"no ply_data_{split}*.h5 under {folder}; rerun the download stage")
        points, labels = [], []
        for path in progress(shards, f"modelnet40 {split}", unit="shard"):
            try:
                with h5py.File(path, "r") as f:
                    data, label = np.asarray(f["data"], dtype=np.float32), np.asarray(f["label"])
            except (OSError, KeyError) as e:
                raise CorruptFileError(
                    f"cannot read {path} (needs datasets 'data' and 'label'): {e}; "
                    f"delete {self.raw_dir} and rerun the download"
                ) from e
            if data.ndim != 3 or data.shape[2] != 3 or len(label) != len(data):
                raise CorruptFileError(
                    f"{path}: expected data [n, points, 3] and label [n, 1], got {data.shape} and {label.shape}"
                )
            if data.shape[1] < num_points:
                raise ValueError(f"num_points={num_points} but {path} holds {data.shape[1]} points per cloud")
            points.append(data[:, :num_points])
            labels.append(label.reshape(len(label)).astype(np.int64))
        return {"points": np.concatenate(points), "labels": np.concatenate(labels)}

    def prepare(self) -> None:
        num_points = int(self.params["num_points"])
        names_file = self._folder() / "shape_names.txt"
        names = [r[0] for r in read_lines(names_file)] if names_file.exists() else []
        splits = {s: self._read_split(s, num_points) for s in ("train", "test")}
        top = max(int(s["labels"].max()) for s in splits.values()) + 1
        if names and top > len(names):
            raise CorruptFileError(f"labels go up to {top - 1} but {names_file} names {len(names)} classes")
        self.write(
            splits,
            extra={
                "num_classes": len(names) or top,
                "class_names": names or [str(i) for i in range(top)],
                "input_kind": "points",
                "input_shape": [num_points, 3],
            },
        )
