"""Plumbing shared by the embedded (generated, offline) datasets.

Every embedded builder generates its raw data from ``params["seed"]`` in ``download()``, records
the parameters that produced the raw files in ``<raw_dir>/params.json`` (so ``prepare()`` can
refuse raw files made with other parameters), writes the tokenization cache with
``nac.data.cache.write_cache`` in ``prepare()`` and reads it back with ``read_manifest`` /
``load_arrays`` / ``ArrayDataset`` in ``load()``.

Randomness: one ``numpy.random.Generator`` per (seed, stream) pair, never the global RNG, so
every split is bit-identical across runs and independent of the sizes of the other splits.
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import numpy as np

from nac.data.cache import ArrayDataset, load_arrays, read_manifest, write_cache
from nac.data.registry import DatasetBuilder

if TYPE_CHECKING:  # the data stages (download, prepare) run without importing torch
    import torch

RAW_PARAMS = "params.json"
SPLIT_IDS = {"train": 1, "val": 2, "test": 3}


def make_rng(seed: Any, *stream: int) -> np.random.Generator:
    """A Generator for one stream of one seed (``default_rng([seed, *stream])``)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}; set params['seed'] to e.g. 0")
    return np.random.default_rng([int(seed), *(int(s) for s in stream)])


def atomic_savez(path: Path, **arrays: np.ndarray) -> None:
    """``np.savez`` to ``path`` through a temporary file, so a crash never leaves half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.savez(f, **arrays)
    os.replace(tmp, path)


def atomic_write_text(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def load_npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def balanced_labels(rng: np.random.Generator, n: int, num_classes: int) -> np.ndarray:
    """``n`` labels, every class ``n // num_classes`` or one more times, in random order. int64 [n]."""
    return rng.permutation(np.arange(n, dtype=np.int64) % num_classes)


class ToItem:
    """Item transform: images HWC -> CHW (uint8 kept), token arrays -> int64.

    A module-level class (not a lambda) so DataLoader workers can pickle it.
    """

    def __init__(self, chw: Sequence[str] = (), long: Sequence[str] = ()):
        self.chw = tuple(chw)
        self.long = tuple(long)

    def __call__(self, item: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        for k in self.chw:
            item[k] = item[k].movedim(-1, -3).contiguous()
        for k in self.long:
            item[k] = item[k].long()
        return item


class EmbeddedBuilder(DatasetBuilder):
    """Base of the generated datasets: raw-params bookkeeping and the cache round trip.

    Subclasses set ``defaults`` (must contain ``seed``), ``rename`` (cache array -> item key),
    ``raw_files`` (what ``download()`` writes), ``raw_param_keys`` (params that change the raw
    data; ``None`` = all of them) and implement ``generate()``, ``prepare()`` and ``info()``.
    """

    embedded = True
    rename: Mapping[str, str] = {}
    raw_files: tuple[str, ...] = ()
    raw_param_keys: tuple[str, ...] | None = None

    # ---- raw data ------------------------------------------------------------------------
    def _raw_params(self) -> dict[str, Any]:
        keys = self.params if self.raw_param_keys is None else self.raw_param_keys
        return json.loads(json.dumps({k: self.params[k] for k in keys}, sort_keys=True, default=str))

    def _raw_is_current(self) -> bool:
        path = self.raw_dir / RAW_PARAMS
        if not path.exists() or not all((self.raw_dir / f).exists() for f in self.raw_files):
            return False
        return json.loads(path.read_text(encoding="utf-8")) == self._raw_params()

    def download(self) -> None:
        """Generate the raw files into ``raw_dir`` (skipped when they exist for these params)."""
        if self._raw_is_current():
            return
        self.raw_dir.mkdir(parents=True, exist_ok=True)
        (self.raw_dir / RAW_PARAMS).unlink(missing_ok=True)
        self.generate()
        # Written last: its presence means every raw file is complete.
        atomic_write_text(self.raw_dir / RAW_PARAMS, json.dumps(self._raw_params(), indent=1, sort_keys=True))

    def generate(self) -> None:
        raise NotImplementedError

    def check_raw(self) -> None:
        """Raise unless ``download()`` produced the raw files for the current params."""
        path = self.raw_dir / RAW_PARAMS
        missing = [f for f in self.raw_files if not (self.raw_dir / f).exists()]
        if not path.exists() or missing:
            raise FileNotFoundError(
                f"raw data for {self.name!r} missing under {self.raw_dir} ({', '.join(missing) or RAW_PARAMS}); "
                f"run `python stages/download.py {self.name}` (builder.download()) first"
            )
        have, want = json.loads(path.read_text(encoding="utf-8")), self._raw_params()
        if have != want:
            diff = ", ".join(
                f"{k}: raw {have.get(k)!r} != requested {want.get(k)!r}"
                for k in sorted(set(have) | set(want))
                if have.get(k) != want.get(k)
            )
            raise ValueError(
                f"raw data for {self.name!r} at {self.raw_dir} was generated with other params ({diff}); "
                f"rerun download() with the current params"
            )

    def rng(self, *stream: int) -> np.random.Generator:
        """The Generator of one stream (e.g. a split id); the dataset name is part of the key so
        datasets sharing a seed draw unrelated numbers."""
        return make_rng(self.params["seed"], zlib.crc32(self.name.encode()), *stream)

    # ---- cache ---------------------------------------------------------------------------
    def write(self, splits: Mapping[str, Mapping[str, np.ndarray]], extra: Mapping[str, Any] | None = None) -> None:
        write_cache(self.cache_dir, self.name, self.params, splits, extra={**self.info(), **(extra or {})})

    def manifest(self) -> dict[str, Any]:
        return read_manifest(self.cache_dir, self.name, self.params)

    def arrays(self, split: str) -> dict[str, np.ndarray]:
        """All cached arrays of ``split`` (memory-mapped), including non-numeric ones."""
        return load_arrays(self.cache_dir, self.manifest(), split)

    def splits(self) -> list[str]:
        return sorted(self.manifest()["splits"])

    def transform(self) -> ToItem | None:
        return None

    def load(self, split: str) -> torch.utils.data.Dataset:
        arrays = {k: v for k, v in self.arrays(split).items() if v.dtype.kind in "biuf"}
        return ArrayDataset(arrays, rename=self.rename, transform=self.transform())


def split_sizes(params: Mapping[str, Any], names: Iterable[str] = ("train", "val", "test")) -> dict[str, int]:
    """``{split: params['n_<split>']}`` for the splits with a positive size."""
    sizes = {s: int(params[f"n_{s}"]) for s in names if f"n_{s}" in params}
    bad = {s: n for s, n in sizes.items() if n < 0}
    if bad:
        raise ValueError(f"split sizes must be >= 0, got {bad}")
    return {s: n for s, n in sizes.items() if n > 0}
