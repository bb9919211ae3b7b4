"""The tokenization cache: arrays on disk plus a manifest of the parameters that produced them.

Layout of ``<cache_dir>``::

    manifest.json              {"dataset": name, "params": {...}, "splits": {split: {array: [shape, dtype]}}}
    <split>/<array>.npy        one file per array (memory-mapped on load)

``write_cache`` writes into a temporary folder and renames it into place, so an interrupted
prepare never leaves a cache that looks complete. ``read_cache`` refuses a cache whose manifest
does not match the current parameters, naming the keys that differ.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

MANIFEST = "manifest.json"


class CacheMismatchError(RuntimeError):
    """The cache on disk was produced with other parameters than the ones asked for."""


def _jsonable(params: Mapping[str, Any]) -> dict[str, Any]:
    # Round-trip through JSON so tuples/lists and numpy scalars compare equal to what is stored.
    return json.loads(json.dumps(dict(params), sort_keys=True, default=str))


def write_cache(
    cache_dir: str | Path,
    dataset: str,
    params: Mapping[str, Any],
    splits: Mapping[str, Mapping[str, np.ndarray]],
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``splits[split][array]`` under ``cache_dir`` atomically with a manifest.

    ``extra`` holds JSON-able facts for ``info()`` (class names, styles, vocabulary, ...).
    """
    cache_dir = Path(cache_dir)
    tmp = cache_dir.with_name(cache_dir.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    layout: dict[str, dict[str, Any]] = {}
    for split, arrays in splits.items():
        (tmp / split).mkdir()
        layout[split] = {}
        for key, arr in arrays.items():
            arr = np.ascontiguousarray(arr)
            np.save(tmp / split / f"{key}.npy", arr, allow_pickle=False)
            layout[split][key] = [list(arr.shape), str(arr.dtype)]
    manifest = {"dataset": dataset, "params": _jsonable(params), "splits": layout, "extra": _jsonable(extra or {})}
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
    if cache_dir.exists():
        shutil.rmtree(cache_dir)
    tmp.rename(cache_dir)
    return cache_dir


def read_manifest(cache_dir: str | Path, dataset: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """Return the manifest, or raise if the cache is missing or was built with other params."""
    cache_dir = Path(cache_dir)
    path = cache_dir / MANIFEST
    if not path.exists():
        raise FileNotFoundError(
            f"no prepared cache for {dataset!r} at {cache_dir}; run `python stages/prepare.py {dataset}` first"
        )
    manifest = json.loads(path.read_text())
    want = _jsonable(params)
    have = manifest.get("params", {})
    if manifest.get("dataset") != dataset or have != want:
        diff = sorted(k for k in set(want) | set(have) if want.get(k) != have.get(k))
        detail = ", ".join(f"{k}: cached {have.get(k)!r} != requested {want.get(k)!r}" for k in diff)
        raise CacheMismatchError(
            f"cache at {cache_dir} was prepared with other parameters ({detail or 'dataset name differs'}); "
            f"rerun `python stages/prepare.py {dataset}` (or `dvc repro`) to rebuild it"
        )
    return manifest


def load_arrays(cache_dir: str | Path, manifest: Mapping[str, Any], split: str) -> dict[str, np.ndarray]:
    if split not in manifest["splits"]:
        raise KeyError(f"split {split!r} not in cache {cache_dir}; available: {sorted(manifest['splits'])}")
    return {
        key: np.load(Path(cache_dir) / split / f"{key}.npy", mmap_mode="r", allow_pickle=False)
        for key in manifest["splits"][split]
    }


class ArrayDataset(torch.utils.data.Dataset):
    """Items are dicts of the cached arrays at one index, as tensors.

    ``rename`` maps cache array names to item keys (e.g. ``{"images": "input", "labels": "label"}``);
    ``transform`` (optional) is applied to the item dict.
    """

    def __init__(self, arrays: Mapping[str, np.ndarray], rename: Mapping[str, str] | None = None, transform=None):
        lengths = {k: len(v) for k, v in arrays.items()}
        if len(set(lengths.values())) != 1:
            raise ValueError(f"cached arrays disagree in length: {lengths}")
        self.arrays = dict(arrays)
        self.rename = dict(rename or {})
        self.transform = transform
        self._len = next(iter(lengths.values()))

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        item = {self.rename.get(k, k): torch.from_numpy(np.array(v[i])) for k, v in self.arrays.items()}
        return self.transform(item) if self.transform else item
