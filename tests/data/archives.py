"""Tiny archives that mimic each real dataset's published layout, for offline loader tests.

Every ``make_*`` writes one archive (or folder) under ``out`` and returns what a test needs to
"download" it: ``Fake(path, url, md5, sha256, facts)`` where ``url`` is a ``file://`` URL.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import pickle
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import scipy.io
from PIL import Image

# Two wnids shared by Tiny-ImageNet and ImageNet-R, plus one ImageNet-R wnid outside the overlap.
WNIDS = ["n02085620", "n01443537"]
NOT_SHARED = "n09999999"


@dataclass
class Fake:
    path: Path
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.path.resolve().as_uri()

    @property
    def md5(self) -> str:
        return hashlib.md5(self.path.read_bytes()).hexdigest()

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()


def image_bytes(color: tuple[int, int, int], size: tuple[int, int] = (64, 64), fmt: str = "JPEG") -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format=fmt)
    return buf.getvalue()


def color(i: int) -> tuple[int, int, int]:
    return (40 * i % 256, 255 - 30 * i % 256, 90)


def _tar(path: Path, files: dict[str, bytes], mode: str = "w") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, mode) as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def _zip(path: Path, files: dict[str, bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


# ------------------------------------------------------------------------------------- images
def make_tiny_imagenet(out: Path, n_train: int = 3, n_val: int = 2, corrupt: str | None = None) -> Fake:
    """``tiny-imagenet-200.zip`` with 2 classes (wnids.txt in non-sorted order). ``corrupt``
    names a train file to replace with garbage bytes."""
    top = "tiny-imagenet-200"
    files = {
        f"{top}/wnids.txt": "\n".join(WNIDS).encode() + b"\n",
        f"{top}/words.txt": b"n02085620\tChihuahua\nn01443537\tgoldfish, Carassius auratus\n",
        f"{top}/test/images/test_0.JPEG": image_bytes((0, 0, 0)),
    }
    for c, wnid in enumerate(WNIDS):
        for i in range(n_train):
            name = f"{top}/train/{wnid}/images/{wnid}_{i}.JPEG"
            files[name] = image_bytes(color(c))
        files[f"{top}/train/{wnid}/{wnid}_boxes.txt"] = b""
    ann, k = [], 0
    for i in range(n_val):
        for c, wnid in enumerate(WNIDS):
            files[f"{top}/val/images/val_{k}.JPEG"] = image_bytes(color(c))
            ann.append(f"val_{k}.JPEG\t{wnid}\t0\t0\t63\t63")
            k += 1
    files[f"{top}/val/val_annotations.txt"] = ("\n".join(ann) + "\n").encode()
    if corrupt:
        files[f"{top}/train/{WNIDS[0]}/images/{corrupt}"] = b"\xff\xd8\xff\xe0 this is not a jpeg"
    return Fake(_zip(out / "tiny-imagenet-200.zip", files), {"n_train": 2 * n_train, "n_val": 2 * n_val})


def make_imagenet_r(out: Path, n: int = 2) -> Fake:
    """``imagenet-r.tar``: ``imagenet-r/<wnid>/*.jpg`` for the two shared wnids and one other;
    images are not square (the builder resizes them to 64x64)."""
    files = {"imagenet-r/README.txt": b"renditions"}
    for c, wnid in enumerate([*WNIDS, NOT_SHARED]):
        for i in range(n):
            files[f"imagenet-r/{wnid}/art_{i}.jpg"] = image_bytes(color(c), size=(90, 70))
    return Fake(_tar(out / "imagenet-r.tar", files), {"n": 2 * n})


def make_cub(out: Path) -> Fake:
    """``CUB_200_2011.tgz`` with 2 classes, 3 images each, ids 1..6; ids 1, 4 are test."""
    top = "CUB_200_2011"
    classes = ["001.Black_footed_Albatross", "002.Laysan_Albatross"]
    files, images, labels, split = {}, [], [], []
    k = 0
    for c, cls in enumerate(classes):
        for i in range(3):
            k += 1
            rel = f"{cls}/{cls.split('.')[1]}_{i}.jpg"
            files[f"{top}/images/{rel}"] = image_bytes(color(c), size=(120, 80))
            images.append(f"{k} {rel}")
            labels.append(f"{k} {c + 1}")
            split.append(f"{k} {0 if i == 0 else 1}")
    files[f"{top}/images.txt"] = "\n".join(images).encode()
    files[f"{top}/image_class_labels.txt"] = "\n".join(labels).encode()
    files[f"{top}/train_test_split.txt"] = "\n".join(split).encode()
    files[f"{top}/classes.txt"] = "\n".join(f"{i + 1} {c}" for i, c in enumerate(classes)).encode()
    files["attributes.txt"] = b"1 has_bill_shape::curved\n"
    return Fake(_tar(out / "CUB_200_2011.tgz", files, "w:gz"), {"classes": classes})


def make_cifar(out: Path, kind: str = "cifar10", per_batch: int = 4) -> Fake:
    """``cifar-10-python.tar.gz`` (5 data batches + test batch + batches.meta) or
    ``cifar-100-python.tar.gz`` (train, test, meta), as pickles of uint8 [n, 3072] rows."""
    rng = np.random.default_rng(0)

    def batch(n: int, key: str, classes: int) -> bytes:
        return pickle.dumps(
            {"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), key: [int(i % classes) for i in range(n)]}
        )

    if kind == "cifar10":
        top, names = "cifar-10-batches-py", [f"c{i}" for i in range(10)]
        files = {f"{top}/data_batch_{i}": batch(per_batch, "labels", 10) for i in range(1, 6)}
        files[f"{top}/test_batch"] = batch(per_batch, "labels", 10)
        files[f"{top}/batches.meta"] = pickle.dumps({"label_names": names})
        n_train, fname = 5 * per_batch, "cifar-10-python.tar.gz"
    else:
        top, names = "cifar-100-python", [f"f{i}" for i in range(100)]
        files = {
            f"{top}/train": batch(2 * per_batch, "fine_labels", 100),
            f"{top}/test": batch(per_batch, "fine_labels", 100),
            f"{top}/meta": pickle.dumps({"fine_label_names": names}),
        }
        n_train, fname = 2 * per_batch, "cifar-100-python.tar.gz"
    return Fake(_tar(out / fname, files, "w:gz"), {"n_train": n_train, "n_test": per_batch, "names": names})


def make_imagenet(out: Path) -> dict[str, Fake]:
    """The three user-supplied ILSVRC2012 files: a train tar of per-wnid tars, a flat val tar and a
    devkit with ``meta.mat`` (ILSVRC ids 1 = n02085620, 2 = n01443537, 3 = a non-leaf synset) and
    the val ground truth."""
    out.mkdir(parents=True, exist_ok=True)
    inner = {}
    for c, wnid in enumerate(WNIDS):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            for i in range(2):
                data = image_bytes(color(c), size=(80, 60))
                info = tarfile.TarInfo(f"{wnid}_{i}.JPEG")
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
        inner[f"{wnid}.tar"] = buf.getvalue()
    train = _tar(out / "ILSVRC2012_img_train.tar", inner)
    truth = [2, 1, 2]  # ILSVRC ids of val images 1..3
    val = _tar(
        out / "ILSVRC2012_img_val.tar",
        {f"ILSVRC2012_val_{i + 1:08d}.JPEG": image_bytes(color(t - 1), size=(64, 96)) for i, t in enumerate(truth)},
    )
    synsets = np.zeros(3, dtype=[("ILSVRC2012_ID", "O"), ("WNID", "O"), ("words", "O"), ("num_children", "O")])
    for i, (wnid, kids) in enumerate([(WNIDS[0], 0), (WNIDS[1], 0), ("n00000001", 2)]):
        synsets[i] = (i + 1, wnid, wnid, kids)
    buf = io.BytesIO()
    scipy.io.savemat(buf, {"synsets": synsets})
    devkit = _tar(
        out / "ILSVRC2012_devkit_t12.tar.gz",
        {
            "ILSVRC2012_devkit_t12/data/meta.mat": buf.getvalue(),
            "ILSVRC2012_devkit_t12/data/ILSVRC2012_validation_ground_truth.txt": "\n".join(map(str, truth)).encode(),
        },
        "w:gz",
    )
    # Sorted wnids: n01443537 -> 0, n02085620 -> 1; ILSVRC id 1 = n02085620 -> 1, id 2 -> 0.
    return {
        "train": Fake(train, {"labels": [1, 1, 0, 0]}),
        "val": Fake(val, {"labels": [0, 1, 0]}),
        "devkit": Fake(devkit),
    }


# ------------------------------------------------------------------------------ other modalities
def make_modelnet(out: Path, points: int = 16) -> Fake:
    """``modelnet40_ply_hdf5_2048.zip`` with 2 train shards and 1 test shard (``points`` per cloud)."""
    rng = np.random.default_rng(0)
    files, sizes = {}, {"train0": 3, "train1": 2, "test0": 2}
    for shard, n in sizes.items():
        buf = io.BytesIO()
        with h5py.File(buf, "w") as f:
            f["data"] = rng.standard_normal((n, points, 3)).astype(np.float32)
            f["label"] = (np.arange(n) % 3).reshape(n, 1).astype(np.uint8)
        files[f"modelnet40_ply_hdf5_2048/ply_data_{shard}.h5"] = buf.getvalue()
    files["modelnet40_ply_hdf5_2048/shape_names.txt"] = b"airplane\nbathtub\nbed\n"
    files["modelnet40_ply_hdf5_2048/train_files.txt"] = b"data/modelnet40_ply_hdf5_2048/ply_data_train0.h5\n"
    return Fake(_zip(out / "modelnet40_ply_hdf5_2048.zip", files), {"n_train": 5, "n_test": 2})


LISTOPS_ROWS = [("( ( ( [MAX 2 ) 9 ) ] )", 9), ("( ( ( [MIN 4 ) 7 ) ] )", 4), ("( ( ( [SM 5 ) 8 ) ] )", 3)]


def make_lra(out: Path) -> Fake:
    """``lra_release.gz``: a gzipped tar holding ``lra_release/listops-1000/basic_*.tsv`` (and
    another task's folder, which is not extracted)."""
    tsv = ("Source\tTarget\n" + "".join(f"{s}\t{t}\n" for s, t in LISTOPS_ROWS)).encode()
    files = {f"lra_release/listops-1000/basic_{s}.tsv": tsv for s in ("train", "val", "test")}
    files["lra_release/tsv_data/other_task.tsv"] = b"x\ty\n"
    return Fake(_tar(out / "lra_release.gz", files, "w:gz"), {"targets": [t for _, t in LISTOPS_ROWS]})


def make_imdb(out: Path) -> Fake:
    """``aclImdb_v1.tar.gz``: 2 pos + 2 neg reviews per split, plus unsup/ (not extracted)."""
    files = {"aclImdb/README": b"imdb"}
    for split in ("train", "test"):
        for cls in ("pos", "neg"):
            for i in range(2):
                files[f"aclImdb/{split}/{cls}/{i}_{7 if cls == 'pos' else 2}.txt"] = f"{cls} review {i} \xe9".encode()
    files["aclImdb/train/unsup/0_0.txt"] = b"unlabelled"
    return Fake(_tar(out / "aclImdb_v1.tar.gz", files, "w:gz"), {"n": 4})


def make_nlvr2(out: Path, with_images: bool = True) -> dict[str, Fake]:
    """``{train,dev,test1}.json`` (JSON lines, 3 records over 2 image pairs each) and, if
    ``with_images``, PNG images under ``out/images/<split>/`` (train ones in a sub-folder)."""
    fakes = {}
    for split in ("train", "dev", "test1"):
        recs = [
            {
                "sentence": s,
                "left_url": "http://x/l.jpg",
                "right_url": "http://x/r.jpg",
                "label": lab,
                "identifier": f"{split}-{pair}-0-{k}",
            }
            for k, (s, lab, pair) in enumerate(
                [("Two dogs.", "True", 1), ("One cat.", "False", 1), ("Two dogs.", "False", 2)]
            )
        ]
        path = out / f"{split}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in recs))
        fakes[split] = Fake(path, {"labels": [1, 0, 0]})
        if with_images:
            folder = out / "images" / split / ("7" if split == "train" else "")
            folder.mkdir(parents=True, exist_ok=True)
            for pair in (1, 2):
                for side in (0, 1):
                    (folder / f"{split}-{pair}-0-img{side}.png").write_bytes(
                        image_bytes(color(pair + side), size=(30, 20), fmt="PNG")
                    )
    return fakes


# ------------------------------------------------------------------------------ unsafe archives
def make_tar(path: Path, members: list[tarfile.TarInfo | tuple[str, bytes]], mode: str = "w") -> Path:
    """A tar from (name, bytes) pairs and ready-made ``TarInfo`` (links) entries, in order."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, mode) as tf:
        for m in members:
            if isinstance(m, tarfile.TarInfo):
                tf.addfile(m)
            else:
                info = tarfile.TarInfo(m[0])
                info.size = len(m[1])
                tf.addfile(info, io.BytesIO(m[1]))
    return path


def link(name: str, target: str, hard: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.LNKTYPE if hard else tarfile.SYMTYPE
    info.linkname = target
    return info


def make_gz(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data))
    return path
