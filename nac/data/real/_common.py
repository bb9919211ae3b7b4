"""Plumbing shared by the real-data builders (``paper`` profile).

``RealBuilder`` adds to ``DatasetBuilder``: fetching + extracting the archive named in
``nac.data.download.SOURCES`` (params ``url`` and ``md5`` / ``sha256`` override the table),
the cache round trip, and image decoding that names the file it could not read.

Download-only params (URLs, checksums, worker counts, devices) are left out of the cache
manifest, so switching to a mirror does not invalidate a prepared cache.

Images are cached HWC uint8 ``[N, S, S, 3]`` and served CHW uint8 ``[3, S, S]`` (as the embedded
datasets do); labels int64 ``[N]``.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
from PIL import Image, UnidentifiedImageError
from tqdm.auto import tqdm

from nac.data.cache import ArrayDataset, load_arrays, read_manifest, write_cache
from nac.data.download import SOURCES, CorruptFileError, extract, fetch
from nac.data.embedded._base import ToItem
from nac.data.registry import DatasetBuilder

if TYPE_CHECKING:  # the data stages (download, prepare) run without importing torch
    import torch

#: params that only affect how files are obtained or how fast, never the cached arrays.
DOWNLOAD_KEYS = frozenset(
    {
        "url",
        "urls",
        "md5",
        "sha256",
        "md5s",
        "workers",
        "device",
        "batch_size",
        "image_dir",
        "max_extract_mb",
        "max_extract_files",
    }
)
EXTRACTED = "extracted"


def progress(iterable: Iterable, desc: str, total: int | None = None, unit: str = "it") -> Iterator:
    """A tqdm bar for decode loops (updates at most once a second)."""
    return iter(tqdm(iterable, desc=desc, total=total, unit=unit, mininterval=1.0))


def source_defaults(key: str) -> dict[str, Any]:
    """``{"url": ..., "md5"/"sha256": ...}`` from ``SOURCES[key]``, for a builder's ``defaults``."""
    src = SOURCES[key]
    out: dict[str, Any] = {"url": src.urls[0] if len(src.urls) == 1 else list(src.urls)}
    if src.sha256:
        out["sha256"] = src.sha256
    else:
        out["md5"] = src.md5
    if src.max_extract_mb is not None:  # extraction bounds (nac.data.archives.extract), overridable
        out.update(max_extract_mb=src.max_extract_mb, max_extract_files=src.max_extract_files)
    return out


class RealBuilder(DatasetBuilder):
    """Base of the real datasets. Subclasses set ``source`` (a ``SOURCES`` key), ``rename``,
    ``image_keys`` (served CHW) and implement ``prepare()``; ``info()`` reads the manifest's extra.
    """

    source: str = ""
    rename: Mapping[str, str] = {}
    image_keys: tuple[str, ...] = ()
    long_keys: tuple[str, ...] = ()
    split_alias: Mapping[str, str] = {}
    #: archive members to extract (``None`` = all); see ``nac.data.download.prefix_filter``.
    members: Callable[[str], bool] | None = None

    # ---- raw files -------------------------------------------------------------------------
    @property
    def archive(self) -> Path:
        return self.raw_dir / SOURCES[self.source].filename

    @property
    def extracted(self) -> Path:
        return self.raw_dir / EXTRACTED

    def download(self) -> None:
        """Fetch the archive (skipped if present and verified), then extract it (if not done yet)."""
        fetch(self.params["url"], self.archive, md5=self.params.get("md5"), sha256=self.params.get("sha256"))
        stamp = self.extracted / ".from.json"
        have = json.loads(stamp.read_text(encoding="utf-8")) if stamp.exists() else None
        want = {
            "archive": self.archive.name,
            "size": self.archive.stat().st_size,
            "mtime_ns": self.archive.stat().st_mtime_ns,
        }
        if have != want:
            mb, files = self.params.get("max_extract_mb"), self.params.get("max_extract_files")
            extract(
                self.archive,
                self.extracted,
                members=self.members,
                max_members=files,
                max_bytes=None if mb is None else int(mb) << 20,
            )
            stamp.write_text(json.dumps(want), encoding="utf-8")

    def require_extracted(self, *parts: str) -> Path:
        """``extracted/<parts>``, or a clear error if the download stage has not run."""
        path = self.extracted.joinpath(*parts)
        if not path.exists():
            raise FileNotFoundError(
                f"{path} not found: the raw data for {self.name!r} is missing or incomplete; run "
                f"`python stages/download.py {self.name}` (builder.download()) first"
            )
        return path

    # ---- cache -----------------------------------------------------------------------------
    def cache_params(self) -> dict[str, Any]:
        return {k: v for k, v in self.params.items() if k not in DOWNLOAD_KEYS}

    def write(self, splits: Mapping[str, Mapping[str, np.ndarray]], extra: Mapping[str, Any]) -> None:
        write_cache(self.cache_dir, self.name, self.cache_params(), splits, extra=extra)

    def manifest(self) -> dict[str, Any]:
        return read_manifest(self.cache_dir, self.name, self.cache_params())

    def load(self, split: str) -> torch.utils.data.Dataset:
        split = self.split_alias.get(split, split)
        arrays = load_arrays(self.cache_dir, self.manifest(), split)
        transform = ToItem(
            chw=[self.rename.get(k, k) for k in self.image_keys], long=[self.rename.get(k, k) for k in self.long_keys]
        )
        return ArrayDataset(arrays, rename=self.rename, transform=transform)

    def info(self) -> dict[str, Any]:
        return dict(self.manifest()["extra"])


# ------------------------------------------------------------------------------------- images
def to_square(img: Image.Image, size: int, mode: str = "crop") -> Image.Image:
    """Resize to ``size`` x ``size``: ``crop`` scales the shorter side to ``size`` and centre-crops
    (keeps the aspect ratio); ``stretch`` resizes both sides directly."""
    if img.size == (size, size):
        return img
    if mode == "stretch":
        return img.resize((size, size), Image.BICUBIC)
    if mode != "crop":
        raise ValueError(f"resize mode must be 'crop' or 'stretch', got {mode!r}")
    w, h = img.size
    scale = size / min(w, h)
    nw, nh = max(size, round(w * scale)), max(size, round(h * scale))
    img = img.resize((nw, nh), Image.BICUBIC)
    left, top = (nw - size) // 2, (nh - size) // 2
    return img.crop((left, top, left + size, top + size))


def decode_image(src: str | Path | bytes, size: int, mode: str = "crop", name: str | None = None) -> np.ndarray:
    """Decode one image file (path or bytes) to RGB uint8 ``[size, size, 3]``.

    Raises ``CorruptFileError`` naming the file if it cannot be decoded.
    """
    label = name or str(src)
    try:
        with Image.open(io.BytesIO(src) if isinstance(src, bytes) else src) as img:
            img.draft("RGB", (size, size))  # JPEG: decode at reduced scale when much larger
            arr = np.asarray(to_square(img.convert("RGB"), size, mode), dtype=np.uint8)
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
        raise CorruptFileError(
            f"cannot decode image {label}: {e}. The file is corrupt or truncated; delete the raw folder "
            f"and rerun the download stage (or replace this file)"
        ) from e
    return arr


def decode_images(paths: Sequence[Path], size: int, mode: str, desc: str) -> np.ndarray:
    """Decode ``paths`` to uint8 ``[len(paths), size, size, 3]`` with a progress bar."""
    out = np.empty((len(paths), size, size, 3), dtype=np.uint8)
    for i, p in enumerate(progress(paths, desc, total=len(paths), unit="img")):
        out[i] = decode_image(p, size, mode)
    return out


def read_lines(path: Path) -> list[list[str]]:
    """Whitespace-split non-empty lines of a text file (naming the file if it cannot be read)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CorruptFileError(f"cannot read {path}: {e}; rerun the download stage") from e
    return [line.split() for line in text.splitlines() if line.strip()]
