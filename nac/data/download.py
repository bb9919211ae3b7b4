"""Downloads for the ``paper`` profile: one table of sources, checksummed fetches, safe extraction.

- ``SOURCES``: every real dataset's URL(s), file name and checksum (facts from REFERENCE.md).
  Builders copy these into their ``defaults`` (params ``url`` / ``urls`` / ``md5`` / ``sha256``),
  so a mirror is one param override away.
- ``fetch(url, dest, md5=, sha256=)``: streams to ``<dest>.part`` with a progress bar, checks the
  hash, then renames into place. A verified ``dest`` is never fetched again; a leftover ``.part``
  (interrupted download) is never taken for a complete file.
- ``extract(archive, dest)``: zip, tar, tar.gz / tgz (by content, whatever the suffix) and plain
  .gz. Every member is checked *before* anything is written: absolute paths, ``..`` components,
  links leaving the target folder and device files are refused, naming the member.
- ``UserDataRequired``: raised where the user must supply files (ImageNet, NLVR2 images); its
  message says which files go where. Uncaught, it makes the stage exit non-zero.
"""
from __future__ import annotations

import gzip
import hashlib
import http.client
import json
import os
import posixpath
import shutil
import sys
import tarfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable, Iterable, Sequence

from tqdm.auto import tqdm

CHUNK = 1 << 20


@dataclass(frozen=True)
class Source:
    """Where one file comes from. ``urls`` are tried in order (the first is canonical)."""

    filename: str
    urls: tuple[str, ...] = ()
    md5: str | None = None
    sha256: str | None = None
    user_supplied: bool = False  # no public URL: the user puts the file in place
    note: str = ""


SOURCES: dict[str, Source] = {
    "tiny_imagenet": Source("tiny-imagenet-200.zip", ("https://cs231n.stanford.edu/tiny-imagenet-200.zip",),
                            md5="90528d7ca1a48142e341f4ef8d21d0de"),
    "imagenet_r": Source("imagenet-r.tar", ("https://people.eecs.berkeley.edu/~hendrycks/imagenet-r.tar",),
                         md5="a61312130a589d0ca1a8fca1f2bd3337", note="2.19 GB"),
    "cub": Source("CUB_200_2011.tgz", ("https://data.caltech.edu/records/65de6-vp158/files/CUB_200_2011.tgz",),
                  md5="97eceeb196236b17998738112f37df78"),
    "cifar10": Source("cifar-10-python.tar.gz", ("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",),
                      md5="c58f30108f718f92721af3b95e74349a"),
    "cifar100": Source("cifar-100-python.tar.gz", ("https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",),
                       md5="eb9058c3a382ffc7106e4002c42a8d85"),
    "modelnet40": Source(
        "modelnet40_ply_hdf5_2048.zip",
        ("https://shapenet.cs.stanford.edu/media/modelnet40_ply_hdf5_2048.zip",
         # The Stanford host is often down; this mirror serves the same archive.
         "https://huggingface.co/datasets/Msun/modelnet40/resolve/main/modelnet40_ply_hdf5_2048.zip"),
        md5="c9ab8e6dfb16f67afdab25e155c79e59"),
    "lra": Source("lra_release.gz", ("https://storage.googleapis.com/long-range-arena/lra_release.gz",),
                  note="a gzipped tar; no checksum is published"),
    "imdb": Source("aclImdb_v1.tar.gz", ("https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",),
                   sha256="c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe", note="84 MB"),
    **{
        f"nlvr2_{split}": Source(f"{split}.json",
                                 (f"https://raw.githubusercontent.com/lil-lab/nlvr/master/nlvr2/data/{split}.json",),
                                 md5="e0423ecad966f61a6548bacddb79edc8" if split == "dev" else None)
        for split in ("train", "dev", "test1")
    },
    "imagenet_train": Source("ILSVRC2012_img_train.tar", md5="1d675b47d978889d74fa0da5fadfb00e", user_supplied=True),
    "imagenet_val": Source("ILSVRC2012_img_val.tar", md5="29b22e2961454d5413ddabcf34fc5622", user_supplied=True),
    "imagenet_devkit": Source("ILSVRC2012_devkit_t12.tar.gz", md5="fa75699e90414af021442c21a62c3abf",
                              user_supplied=True),
}


# ---------------------------------------------------------------------------------------- errors
class DownloadError(RuntimeError):
    """No URL could be fetched; the message lists each URL with its error."""


class ChecksumError(RuntimeError):
    """A file's hash differs from the expected one (the file has been removed)."""


class UnsafeArchiveError(RuntimeError):
    """An archive member would be written outside the target folder (nothing was extracted)."""


class CorruptFileError(RuntimeError):
    """A file inside a dataset could not be decoded; the message names it."""


class UserDataRequired(FileNotFoundError):
    """Files the user must supply are missing. ``exit_code`` is what a stage should exit with."""

    exit_code = 2


def require_files(folder: str | Path, files: dict[str, str | None], dataset: str, how: str) -> None:
    """Raise ``UserDataRequired`` unless every ``files`` name (-> md5 or None) exists in ``folder``.

    ``how`` says where to obtain them (e.g. "log in at https://image-net.org and download ...").
    """
    folder = Path(folder).resolve()
    missing = [name for name in files if not (folder / name).exists()]
    if missing:
        listing = "\n".join(f"  {folder / n}" + (f"  (md5 {files[n]})" if files[n] else "") for n in missing)
        raise UserDataRequired(
            f"dataset {dataset!r} needs files that you must supply; missing:\n{listing}\n"
            f"{how}\nPut them at exactly these paths, then rerun `python stages/download.py {dataset}`."
        )


# --------------------------------------------------------------------------------------- hashing
def file_digest(path: str | Path, algo: str = "md5") -> str:
    h = hashlib.new(algo)
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _expected(md5: str | None, sha256: str | None) -> tuple[str, str] | None:
    if sha256:
        return "sha256", sha256.lower()
    if md5:
        return "md5", md5.lower()
    return None


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def verify(path: str | Path, md5: str | None = None, sha256: str | None = None) -> str | None:
    """Check ``path`` against the given hash (sha256 wins if both). Returns the digest (None if no
    hash was given), raises ``ChecksumError`` naming the file, expected and actual hash.

    A ``<path>.verified`` stamp (size, mtime, digest) spares re-hashing big unchanged files.
    """
    path = Path(path)
    want = _expected(md5, sha256)
    if want is None:
        return None
    algo, expected = want
    st = path.stat()
    stamp = _stamp(path)
    key = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "algo": algo, "digest": expected}
    if stamp.exists():
        try:
            if json.loads(stamp.read_text()) == key:
                return expected
        except (OSError, ValueError):
            pass
    actual = file_digest(path, algo)
    if actual != expected:
        raise ChecksumError(f"checksum mismatch for {path}: expected {algo} {expected}, got {actual}")
    stamp.write_text(json.dumps(key))
    return actual


# -------------------------------------------------------------------------------------- fetching
def _stream(url: str, part: Path, algo: str, desc: str) -> str:
    """Copy ``url`` to ``part`` (truncating any leftover), returning the hex digest of the bytes."""
    h = hashlib.new(algo)
    req = urllib.request.Request(url, headers={"User-Agent": "nac-repro"})
    with urllib.request.urlopen(req, timeout=60) as resp, open(part, "wb") as out:
        total = resp.headers.get("Content-Length")
        with tqdm(total=int(total) if total else None, unit="B", unit_scale=True, unit_divisor=1024,
                  desc=desc, mininterval=1.0) as bar:
            while chunk := resp.read(CHUNK):
                out.write(chunk)
                h.update(chunk)
                bar.update(len(chunk))
        out.flush()
        os.fsync(out.fileno())
    return h.hexdigest()


def fetch(url: str | Sequence[str], dest: str | Path, md5: str | None = None, sha256: str | None = None) -> Path:
    """Download ``url`` (or the first of several mirrors that answers) to ``dest`` and verify it.

    Returns ``dest``. Skips the download if ``dest`` exists and verifies (a ``dest`` that fails
    verification is removed and fetched again). The bytes go to ``<dest>.part`` first and are
    renamed only once the hash matches, so ``dest`` existing always means complete. Works with
    ``file://`` URLs. Without a hash the file is accepted and its sha256 is printed.
    """
    dest = Path(dest)
    urls = [url] if isinstance(url, (str, os.PathLike)) else list(url)
    if not urls:
        raise DownloadError(f"no URL given for {dest.name}; pass the `url` param")
    want = _expected(md5, sha256)
    if dest.exists():
        try:
            verify(dest, md5, sha256)
            return dest
        except ChecksumError as e:
            print(f"{e}; removing it and downloading again", file=sys.stderr)
            dest.unlink()
            _stamp(dest).unlink(missing_ok=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    algo = want[0] if want else "sha256"
    errors = []
    for u in urls:
        try:
            actual = _stream(str(u), part, algo, desc=dest.name)
            break
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as e:
            errors.append(f"  {u}: {e}")
            part.unlink(missing_ok=True)
        except BaseException:  # interrupted: never leave bytes that could pass for the file
            part.unlink(missing_ok=True)
            raise
    else:
        raise DownloadError(
            f"could not download {dest.name}:\n" + "\n".join(errors)
            + f"\nCheck the network, or set the dataset's `url` param to a mirror (a list of URLs is "
            f"tried in order), or place the file at {dest} yourself."
        )
    if want and actual != want[1]:
        part.unlink(missing_ok=True)
        raise ChecksumError(
            f"checksum mismatch for {dest} (from {u}): expected {algo} {want[1]}, got {actual}. "
            f"The file was removed; rerun the download to fetch it again, or, if this mirror serves a "
            f"different archive on purpose, pass its checksum in the `{algo}` param."
        )
    if not want:
        print(f"{dest.name}: no published checksum; sha256 {actual}", file=sys.stderr)
    os.replace(part, dest)
    if want:
        st = dest.stat()
        _stamp(dest).write_text(json.dumps({"size": st.st_size, "mtime_ns": st.st_mtime_ns, "algo": algo,
                                            "digest": actual}))
    return dest


# ------------------------------------------------------------------------------------ extracting
def _check_name(archive: Path, name: str) -> str:
    """Return the member's normalised relative name, or raise if it would escape the target."""
    norm = name.replace("\\", "/")
    if norm.startswith("/") or (len(norm) > 1 and norm[1] == ":"):
        raise UnsafeArchiveError(f"{archive}: member {name!r} has an absolute path; refusing to extract")
    if ".." in PurePosixPath(norm).parts:
        raise UnsafeArchiveError(f"{archive}: member {name!r} has a '..' component; refusing to extract")
    return norm


def _inside(rel: str) -> bool:
    """True if the relative posix path ``rel`` (after normalisation) stays inside the root."""
    n = posixpath.normpath(rel)
    return not (n == ".." or n.startswith("../") or n.startswith("/"))


def _check_tar_member(archive: Path, m: tarfile.TarInfo) -> None:
    name = _check_name(archive, m.name)
    if m.issym():
        target = m.linkname.replace("\\", "/")
        if target.startswith("/") or not _inside(posixpath.join(posixpath.dirname(name), target)):
            raise UnsafeArchiveError(
                f"{archive}: member {m.name!r} is a symlink to {m.linkname!r}, outside the target folder; "
                f"refusing to extract")
    elif m.islnk():
        target = m.linkname.replace("\\", "/")
        if target.startswith("/") or not _inside(target):
            raise UnsafeArchiveError(
                f"{archive}: member {m.name!r} is a hard link to {m.linkname!r}, outside the target folder; "
                f"refusing to extract")
    elif not (m.isfile() or m.isdir()):
        raise UnsafeArchiveError(f"{archive}: member {m.name!r} is a device or fifo; refusing to extract")


def archive_kind(path: str | Path) -> str:
    """'zip', 'tar' (any compression tarfile reads) or 'gz' (a single gzipped file), by content."""
    path = Path(path)
    if zipfile.is_zipfile(path):
        return "zip"
    if tarfile.is_tarfile(path):
        return "tar"
    with open(path, "rb") as f:
        if f.read(2) == b"\x1f\x8b":
            return "gz"
    raise ValueError(f"{path}: not a zip, tar or gzip archive (first bytes do not match any)")


def extract(archive: str | Path, dest: str | Path, members: Callable[[str], bool] | None = None) -> Path:
    """Extract ``archive`` into the folder ``dest`` and return it.

    ``members`` (optional) selects member names to extract (e.g. one task of LRA's 7 GB tar).
    All selected members are checked before anything is written (``UnsafeArchiveError`` names the
    first bad one). Extraction goes to ``<dest>.partial`` and is renamed into place, replacing an
    older ``dest``, so an interrupted extraction never looks complete. A plain .gz becomes
    ``dest/<name without .gz>``.
    """
    archive, dest = Path(archive), Path(dest)
    kind = archive_kind(archive)
    tmp = dest.with_name(dest.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        if kind == "zip":
            with zipfile.ZipFile(archive) as zf:
                infos = [i for i in zf.infolist() if members is None or members(i.filename)]
                for i in infos:
                    _check_name(archive, i.filename)
                for i in tqdm(infos, desc=f"extract {archive.name}", unit="file", mininterval=1.0):
                    zf.extract(i, tmp)
        elif kind == "tar":
            with tarfile.open(archive, "r:*") as tf:
                chosen = [m for m in tf.getmembers() if members is None or members(m.name)]
                for m in chosen:
                    _check_tar_member(archive, m)
                # tarfile's own "data" filter (Python >= 3.11.4 / 3.10.12) as a second line of defence.
                kw = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
                for m in tqdm(chosen, desc=f"extract {archive.name}", unit="file", mininterval=1.0):
                    tf.extract(m, tmp, **kw)
        else:
            out = tmp / (archive.name[:-3] if archive.name.endswith(".gz") else archive.name + ".out")
            with gzip.open(archive, "rb") as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, CHUNK)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)
    return dest


def prefix_filter(prefixes: Iterable[str]) -> Callable[[str], bool]:
    """A ``members`` selector keeping names under any of ``prefixes`` (and their parent folders)."""
    prefixes = tuple(p.rstrip("/") for p in prefixes)

    def keep(name: str) -> bool:
        n = name.rstrip("/")
        return any(n == p or n.startswith(p + "/") or p.startswith(n + "/") for p in prefixes)

    return keep
