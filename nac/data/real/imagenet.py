"""ImageNet-1k (ILSVRC2012), from the tars the user supplies (image-net.org requires a login).

Put ``ILSVRC2012_img_train.tar``, ``ILSVRC2012_img_val.tar`` and ``ILSVRC2012_devkit_t12.tar.gz``
in ``<root>/raw/imagenet/``. Nothing is extracted to disk: ``prepare()`` streams the train tar
(one inner ``<wnid>.tar`` per class) and the val tar, decodes every JPEG to ``image_size`` and
writes the cache. Val labels come from the devkit (``data/meta.mat`` maps ILSVRC2012 ids to wnids,
``data/ILSVRC2012_validation_ground_truth.txt`` lists one id per val image, in file-name order).

Disk: at 224 px the cache holds 1.28M x 150 KB = ~193 GB of train images, and ``prepare()`` needs
as much again transiently (a scratch file that ``write_cache`` copies into place).
"""

from __future__ import annotations

import io
import os
import tarfile
from multiprocessing import Pool
from pathlib import Path
from typing import Iterator

import numpy as np
import scipy.io

from nac.data.download import SOURCES, CorruptFileError, require_files, verify
from nac.data.real._common import RealBuilder, decode_image, progress
from nac.data.registry import register

FILES = {"train": "imagenet_train", "val": "imagenet_val", "devkit": "imagenet_devkit"}
HOW = (
    "Log in at https://image-net.org, download the ILSVRC2012 (ImageNet-1k) training images, validation "
    "images and development kit (Task 1 & 2)."
)


def _decode_job(job: tuple[bytes, str, int, str]) -> np.ndarray:
    data, name, size, mode = job
    return decode_image(data, size, mode, name=name)


def _jpegs(tar: tarfile.TarFile, label: str) -> Iterator[tuple[str, bytes]]:
    """(member name, bytes) of every regular file in an open tar stream, in archive order."""
    for m in tar:
        if m.isfile():
            f = tar.extractfile(m)
            if f is None:
                raise CorruptFileError(f"{label}: cannot read member {m.name}")
            yield m.name, f.read()


@register("imagenet")
class ImageNet(RealBuilder):
    """ImageNet-1k: 1000 classes, splits ``train`` [1281167] and ``val`` [50000].

    Class order: sorted wnids (ImageFolder / torchvision order). Items: ``input`` uint8
    [3, S, S] (``resize`` 'crop': shorter side to S, centre crop), ``label`` int64. Params:
    ``image_size`` S, ``resize``, ``workers`` (decode processes; 0 = in-process), ``md5s``
    (per file; defaults are the published md5s).
    """

    defaults = {
        "image_size": 224,
        "resize": "crop",
        "workers": 0,
        "md5s": {k: SOURCES[v].md5 for k, v in FILES.items()},
    }
    rename = {"images": "input", "labels": "label"}
    image_keys = ("images",)

    def path(self, kind: str) -> Path:
        return self.raw_dir / SOURCES[FILES[kind]].filename

    def download(self) -> None:
        """Nothing to download: check the user's files are in place and verify their md5s."""
        md5s = {**self.defaults["md5s"], **(self.params["md5s"] or {})}
        require_files(self.raw_dir, {SOURCES[v].filename: md5s[k] for k, v in FILES.items()}, "imagenet", HOW)
        for kind in FILES:
            verify(self.path(kind), md5=md5s[kind])  # a stamp spares re-hashing 140 GB next time

    # ---- devkit ----------------------------------------------------------------------------
    def _devkit(self) -> tuple[list[str], dict[int, str], list[int]]:
        """(sorted leaf wnids, ILSVRC2012 id -> wnid, val ground-truth ids in file-name order)."""
        path = self.path("devkit")
        try:
            with tarfile.open(path, "r:*") as tar:
                files = {Path(m.name).name: m for m in tar.getmembers() if m.isfile()}
                meta = scipy.io.loadmat(io.BytesIO(tar.extractfile(files["meta.mat"]).read()), squeeze_me=True)
                truth = tar.extractfile(files["ILSVRC2012_validation_ground_truth.txt"]).read().decode()
        except (KeyError, OSError, tarfile.TarError, ValueError) as e:
            raise CorruptFileError(
                f"cannot read meta.mat / ILSVRC2012_validation_ground_truth.txt from {path}: "
                f"{e!r}; check the file (its md5 should be {SOURCES['imagenet_devkit'].md5})"
            ) from e
        synsets = meta["synsets"]
        ids = np.atleast_1d(synsets["ILSVRC2012_ID"]).astype(int)
        wnids = [str(w) for w in np.atleast_1d(synsets["WNID"])]
        leaf = np.atleast_1d(synsets["num_children"]).astype(int) == 0
        id_to_wnid = {int(i): w for i, w, keep in zip(ids, wnids, leaf) if keep}
        return sorted(id_to_wnid.values()), id_to_wnid, [int(t) for t in truth.split()]

    # ---- decoding --------------------------------------------------------------------------
    def _decode_stream(self, items: Iterator[tuple[str, bytes]], scratch: Path, desc: str, total: int | None) -> int:
        """Decode (name, bytes) pairs, appending uint8 [S, S, 3] rows to ``scratch``; returns the count."""
        size, mode, workers = int(self.params["image_size"]), self.params["resize"], int(self.params["workers"])
        jobs = ((data, name, size, mode) for name, data in items)
        n = 0
        with open(scratch, "wb") as out:
            if workers > 0:
                with Pool(workers) as pool:
                    for arr in progress(pool.imap(_decode_job, jobs, chunksize=32), desc, total, unit="img"):
                        out.write(arr.tobytes())
                        n += 1
            else:
                for arr in progress(map(_decode_job, jobs), desc, total, unit="img"):
                    out.write(arr.tobytes())
                    n += 1
        return n

    def _train_items(self, index: dict[str, int], labels: list[int]) -> Iterator[tuple[str, bytes]]:
        path = self.path("train")
        with tarfile.open(path, "r|*") as outer:
            for m in outer:
                wnid = Path(m.name).name.split(".")[0]
                if not m.isfile() or wnid not in index:
                    raise CorruptFileError(f"{path}: member {m.name!r} is not a '<wnid>.tar' of a known class")
                with tarfile.open(fileobj=outer.extractfile(m), mode="r|*") as inner:
                    for name, data in _jpegs(inner, f"{path}:{m.name}"):
                        labels.append(index[wnid])
                        yield f"{path}:{m.name}/{name}", data

    def prepare(self) -> None:
        self.download()
        wnids, id_to_wnid, truth = self._devkit()
        index = {w: i for i, w in enumerate(wnids)}
        size = int(self.params["image_size"])
        scratch_dir = self.raw_dir / "scratch"
        scratch_dir.mkdir(exist_ok=True)
        splits, scratches = {}, []
        try:
            labels: list[int] = []
            scratch = scratch_dir / "train.u8"
            scratches.append(scratch)
            n = self._decode_stream(self._train_items(index, labels), scratch, "imagenet train", 1281167)
            splits["train"] = {
                "images": np.memmap(scratch, np.uint8, "r", shape=(n, size, size, 3)),
                "labels": np.asarray(labels, dtype=np.int64),
            }

            path = self.path("val")
            with tarfile.open(path, "r:*") as tar:
                members = sorted((m for m in tar.getmembers() if m.isfile()), key=lambda m: m.name)
                if len(members) != len(truth):
                    raise CorruptFileError(
                        f"{path} holds {len(members)} images but the devkit lists {len(truth)} val labels"
                    )
                items = ((f"{path}:{m.name}", tar.extractfile(m).read()) for m in members)
                scratch = scratch_dir / "val.u8"
                scratches.append(scratch)
                n = self._decode_stream(items, scratch, "imagenet val", len(members))
            splits["val"] = {
                "images": np.memmap(scratch, np.uint8, "r", shape=(n, size, size, 3)),
                "labels": np.asarray([index[id_to_wnid[t]] for t in truth], dtype=np.int64),
            }
            self.write(
                splits,
                extra={
                    "num_classes": len(wnids),
                    "wnids": wnids,
                    "class_names": wnids,
                    "input_kind": "image",
                    "input_shape": [3, size, size],
                    "class_order": "sorted wnids",
                },
            )
        finally:
            splits.clear()
            for s in scratches:
                if s.exists():
                    os.remove(s)
