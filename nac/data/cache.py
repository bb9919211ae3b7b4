"""The tokenization cache: arrays on disk plus a manifest of the parameters that produced them.

Layout of ``<cache_dir>``::

    manifest.json              {"dataset": name, "params": {...}, "splits": {split: {array: [shape, dtype]}},
                                "files": {split: {array: {"bytes": size, "sha256": hex}}}, "extra": {...}}
    <split>/<array>.npy        one file per array (memory-mapped on load)

``write_cache`` writes into a temporary folder and renames it into place, so an interrupted
prepare never leaves a cache that looks complete. ``read_manifest`` refuses a cache whose manifest
does not match the current parameters, naming the keys that differ. ``load_arrays`` checks every
array file against the manifest -- size, shape, dtype, and the sha256 of its bytes (hashed once
per process and file, cheap beside a stage's start-up) -- and raises ``CacheCorruptError``
naming the file and the fix, so a damaged cache never yields numbers. A manifest without
``files`` (written before checksums were recorded) is refused the same way: re-prepare it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

if TYPE_CHECKING:
    import torch

MANIFEST = "manifest.json"
HASH = "sha256"
_CHUNK = 1 << 20

#: (path, inode, size, mtime_ns, digest) of the array files whose content this process has verified.
_VERIFIED: set[tuple[str, int, int, int, str]] = set()


class CacheMismatchError(RuntimeError):
    """The cache on disk was produced with other parameters than the ones asked for."""


class CacheCorruptError(RuntimeError):
    """A cache file disagrees with the manifest (missing, size, shape, dtype or content) or cannot be
    read; the message names the file and how to rebuild the cache."""


def _fix(cache_dir: Path, dataset: str) -> str:
    return f"Delete {cache_dir} and rerun `dvc repro` (or `python stages/prepare.py {dataset}`) to rebuild the cache"


def _digest(path: Path) -> str:
    h = hashlib.new(HASH)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


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
    files: dict[str, dict[str, Any]] = {}
    for split, arrays in splits.items():
        (tmp / split).mkdir()
        layout[split], files[split] = {}, {}
        for key, arr in arrays.items():
            arr = np.ascontiguousarray(arr)
            path = tmp / split / f"{key}.npy"
            np.save(path, arr, allow_pickle=False)
            layout[split][key] = [list(arr.shape), str(arr.dtype)]
            files[split][key] = {"bytes": path.stat().st_size, HASH: _digest(path)}
    manifest = {
        "dataset": dataset,
        "params": _jsonable(params),
        "splits": layout,
        "files": files,
        "extra": _jsonable(extra or {}),
    }
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")
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
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(manifest, dict) or not isinstance(manifest.get("splits"), dict):
            raise ValueError("no 'splits' table")
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise CacheCorruptError(f"cache manifest {path} is unreadable ({e}). {_fix(cache_dir, dataset)}") from e
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
    """The arrays of ``split``, memory-mapped, each checked against the manifest.

    Raises ``CacheCorruptError`` naming the file (and the fix) if one is missing, differs in size,
    shape or dtype from what the manifest records, or its sha256 differs (verified once per process
    and file; a file changed since is verified again).
    """
    cache_dir = Path(cache_dir)
    if split not in manifest["splits"]:
        raise KeyError(f"split {split!r} not in cache {cache_dir}; available: {sorted(manifest['splits'])}")
    dataset = manifest.get("dataset", cache_dir.name)
    if not isinstance(manifest.get("files"), dict):
        raise CacheCorruptError(
            f"cache manifest {cache_dir / MANIFEST} records no checksums of its array files (it was prepared by "
            f"an older version of nac), so its content cannot be verified. {_fix(cache_dir, dataset)}"
        )
    files = manifest["files"].get(split, {})
    return {
        key: _load_checked(cache_dir, dataset, split, key, layout, files.get(key))
        for key, layout in manifest["splits"][split].items()
    }


def _load_checked(cache_dir: Path, dataset: str, split: str, key: str, layout: Any, record: Any) -> np.ndarray:
    path = cache_dir / split / f"{key}.npy"

    def corrupt(problem: str) -> CacheCorruptError:
        return CacheCorruptError(f"cache file {path} {problem}. {_fix(cache_dir, dataset)}")

    try:
        shape, dtype = tuple(layout[0]), np.dtype(layout[1])
        size, digest = int(record["bytes"]), str(record[HASH])
    except (TypeError, KeyError, IndexError, ValueError) as e:
        raise corrupt(f"has no valid entry in the manifest {cache_dir / MANIFEST} ({e!r})") from e
    try:
        st = path.stat()
    except FileNotFoundError:
        raise corrupt("is missing") from None
    if st.st_size != size:
        raise corrupt(f"has {st.st_size} bytes but the manifest records {size} (truncated or overwritten)")
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise corrupt(f"cannot be read as a .npy array ({e})") from e
    if arr.shape != shape or arr.dtype != dtype:
        raise corrupt(
            f"holds an array of shape {list(arr.shape)} {arr.dtype} but the manifest records {list(shape)} {dtype}"
        )
    seen = (str(path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns, digest)
    if seen not in _VERIFIED:
        actual = _digest(path)
        if actual != digest:
            raise corrupt(f"has {HASH} {actual} but the manifest records {digest} (its content changed after prepare)")
        _VERIFIED.add(seen)
    return arr


class ArrayDataset:
    """Items are dicts of the cached arrays at one index, as tensors (a map-style dataset for
    ``torch.utils.data.DataLoader``; not a subclass of torch's ``Dataset``, so that the data
    stages, which only write caches, run without importing torch).

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
        import torch  # deferred: the data stages run without torch (~1.2 s; tests/test_dvc_deps.py)

        item = {self.rename.get(k, k): torch.from_numpy(np.array(v[i])) for k, v in self.arrays.items()}
        return self.transform(item) if self.transform else item
