"""Downloads for the ``paper`` profile: one table of sources, checksummed fetches, safe extraction.

- ``SOURCES`` (``nac.data.sources``, re-exported here): every real dataset's URL(s), file name
  and checksum (facts from docs/reference.md). Builders copy these into their ``defaults``
  (params ``url`` / ``urls`` / ``md5`` / ``sha256``), so a mirror is one param override away.
- ``fetch(url, dest, md5=, sha256=)``: streams to ``<dest>.part`` with a progress bar, checks that
  every byte the server announced (``Content-Length``) arrived and the hash, then renames into
  place. A verified ``dest`` is never fetched again; a leftover ``.part`` (interrupted download) is
  never taken for a complete file. Sources without a published checksum get one on their first
  complete download (``<dest>.sha256``, ``sha256sum`` format) and are verified against it later.
- ``extract(archive, dest)`` (defined in ``nac.data.archives``, re-exported here): zip, tar,
  tar.gz / tgz (by content, whatever the suffix) and plain .gz. Every member is checked *before*
  anything is written: absolute paths, ``..`` components, device files, zip symlinks and any tar
  member whose final location -- resolved through the links extracted before it, as the OS
  would -- leaves the target folder are refused, naming the archive and the member. This check
  is sufficient on its own (tarfile's ``data`` filter, where the Python has one, is a second line
  of defence only).
- ``UserDataRequired``: raised where the user must supply files (ImageNet, NLVR2 images); its
  message says which files go where. Uncaught, it makes the stage exit non-zero.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Sequence

from tqdm.auto import tqdm

# extraction lives in nac.data.archives; its public names stay importable from here
from nac.data.archives import (
    CHUNK,
    ArchiveTooLargeError,
    CorruptFileError,
    ExtractionError,
    UnsafeArchiveError,
    archive_kind,
    extract,
    prefix_filter,
)

# the table of sources lives in nac.data.sources; its names stay importable from here
from nac.data.sources import SOURCES, Source  # noqa: F401


class DownloadError(RuntimeError):
    """No URL could be fetched; the message lists each URL with its error."""


class IncompleteDownloadError(DownloadError):
    """The server closed the connection before sending the ``Content-Length`` it announced."""


class ChecksumError(RuntimeError):
    """A file's hash differs from the expected one (the file has been removed)."""


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
            if json.loads(stamp.read_text(encoding="utf-8")) == key:
                return expected
        except (OSError, ValueError):
            pass
    actual = file_digest(path, algo)
    if actual != expected:
        raise ChecksumError(f"checksum mismatch for {path}: expected {algo} {expected}, got {actual}")
    stamp.write_text(json.dumps(key), encoding="utf-8")
    return actual


# -------------------------------------------------------------------------------------- fetching
def _record(path: Path) -> Path:
    """``<path>.sha256``: the sha256 of a file without a published checksum, recorded at its first
    complete download (``sha256sum`` format, so ``sha256sum -c`` reads it too)."""
    return path.with_name(path.name + ".sha256")


def _read_record(path: Path) -> str | None:
    try:
        digest = _record(path).read_text(encoding="utf-8").split()[0].lower()
    except (OSError, IndexError, UnicodeDecodeError):
        return None
    return digest if len(digest) == 64 and all(c in "0123456789abcdef" for c in digest) else None


def _write_record(path: Path, digest: str) -> None:
    record = _record(path)
    tmp = record.with_name(record.name + ".tmp")
    tmp.write_text(f"{digest}  {path.name}\n", encoding="utf-8")
    os.replace(tmp, record)


def _write_stamp(path: Path, algo: str, digest: str) -> None:
    st = path.stat()
    _stamp(path).write_text(
        json.dumps({"size": st.st_size, "mtime_ns": st.st_mtime_ns, "algo": algo, "digest": digest}), encoding="utf-8"
    )


def _forget(path: Path) -> None:
    """Remove ``path`` and its stamp and record."""
    path.unlink(missing_ok=True)
    _stamp(path).unlink(missing_ok=True)
    _record(path).unlink(missing_ok=True)


def _content_length(headers) -> int | None:
    value = (headers.get("Content-Length") or "").strip()
    return int(value) if value.isdigit() else None


def _stream(url: str, part: Path, algo: str, desc: str) -> str:
    """Copy ``url`` to ``part`` (truncating any leftover), returning the hex digest of the bytes.

    Raises ``IncompleteDownloadError`` unless exactly the ``Content-Length`` the server announced
    arrived (a connection cut short otherwise just ends the read, without an error).
    """
    h = hashlib.new(algo)
    req = urllib.request.Request(url, headers={"User-Agent": "nac-repro"})
    received = 0
    with urllib.request.urlopen(req, timeout=60) as resp, open(part, "wb") as out:
        total = _content_length(resp.headers)
        with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=desc, mininterval=1.0) as bar:
            while chunk := resp.read(CHUNK):
                out.write(chunk)
                h.update(chunk)
                received += len(chunk)
                bar.update(len(chunk))
        out.flush()
        os.fsync(out.fileno())
    if total is not None and received != total:
        raise IncompleteDownloadError(
            f"received {received} of the {total} bytes the server announced (Content-Length): the "
            f"transfer was cut short; the partial file was discarded"
        )
    return h.hexdigest()


def _remote_size(urls: Sequence[str]) -> int | None:
    """The ``Content-Length`` of the first URL that answers a HEAD request (None if none does)."""
    for u in urls:
        req = urllib.request.Request(str(u), headers={"User-Agent": "nac-repro"}, method="HEAD")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                size = _content_length(resp.headers)
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError):
            continue
        if size is not None:
            return size
    return None


def _usable(dest: Path, want: tuple[str, str] | None, urls: Sequence[str]) -> bool:
    """Whether the existing ``dest`` can be used as is. If not, it has been removed (saying why)."""
    if want is None:
        recorded = _read_record(dest)
        if recorded is None:
            return _adopt(dest, urls)
        try:
            verify(dest, sha256=recorded)
            return True
        except ChecksumError as e:
            print(
                f"{e} (the sha256 recorded in {_record(dest)} at its first complete download): the file "
                f"was truncated or modified since; removing it and downloading again",
                file=sys.stderr,
            )
    else:
        try:
            verify(dest, **{want[0]: want[1]})
            return True
        except ChecksumError as e:
            print(f"{e}; removing it and downloading again", file=sys.stderr)
    _forget(dest)
    return False


def _adopt(dest: Path, urls: Sequence[str]) -> bool:
    """``dest`` has no published checksum and no record: it was put there by hand, or downloaded by a
    version that did not check completeness. Compare its size with the server's ``Content-Length``
    (when a server answers) and record its sha256; a size mismatch removes it."""
    size = dest.stat().st_size
    remote = _remote_size(urls)
    if remote is not None and remote != size:
        print(
            f"{dest} has {size} bytes but the server announces {remote}: an incomplete earlier download; "
            f"removing it and downloading again",
            file=sys.stderr,
        )
        _forget(dest)
        return False
    digest = file_digest(dest, "sha256")
    _write_record(dest, digest)
    _write_stamp(dest, "sha256", digest)
    checked = (
        "its size matches the server's"
        if remote is not None
        else "no server answered, so its size could not be checked"
    )
    print(
        f"{dest.name}: existing file without a published checksum ({checked}); recorded its sha256 {digest} "
        f"in {_record(dest)}. If it is incomplete, delete it and rerun the download.",
        file=sys.stderr,
    )
    return True


def fetch(url: str | Sequence[str], dest: str | Path, md5: str | None = None, sha256: str | None = None) -> Path:
    """Download ``url`` (or the first of several mirrors that answers) to ``dest`` and verify it.

    Returns ``dest``. Skips the download if ``dest`` exists and verifies (a ``dest`` that fails
    verification is removed and fetched again). The bytes go to ``<dest>.part`` first and are
    renamed only once the ``Content-Length`` the server announced has arrived in full and the hash
    matches, so ``dest`` existing always means complete. Works with ``file://`` URLs.

    Without a hash, the sha256 of the first complete download is recorded in ``<dest>.sha256`` and
    later runs verify ``dest`` against it (a mismatch removes ``dest`` and fetches it again). An
    existing ``dest`` without that record (placed by hand, or by an older version) is compared
    with the server's size, then recorded.
    """
    dest = Path(dest)
    urls = [url] if isinstance(url, (str, os.PathLike)) else list(url)
    if not urls:
        raise DownloadError(f"no URL given for {dest.name}; pass the `url` param")
    want = _expected(md5, sha256)
    if dest.exists() and _usable(dest, want, urls):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    algo = want[0] if want else "sha256"
    errors = []
    for u in urls:
        try:
            actual = _stream(str(u), part, algo, desc=dest.name)
            break
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError, IncompleteDownloadError) as e:
            errors.append(f"  {u}: {e}")
            part.unlink(missing_ok=True)
        except BaseException:  # interrupted: never leave bytes that could pass for the file
            part.unlink(missing_ok=True)
            raise
    else:
        raise DownloadError(
            f"could not download {dest.name}:\n"
            + "\n".join(errors)
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
    if not want:  # recorded before the rename: a downloaded ``dest`` always has its record
        _write_record(dest, actual)
        print(f"{dest.name}: no published checksum; recorded its sha256 {actual} in {_record(dest)}", file=sys.stderr)
    os.replace(part, dest)
    _write_stamp(dest, algo, actual)
    return dest
