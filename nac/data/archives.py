"""Safe extraction of the downloaded archives: zip, tar, tar.gz / tgz (by content, whatever the
suffix) and plain .gz.

Every member is checked *before* anything is written: absolute paths, ``..`` components, device
files, zip symlinks and any tar member whose final location -- resolved through the links extracted
before it, as the OS would -- leaves the target folder are refused (``UnsafeArchiveError``), naming
the archive and the member. This check is sufficient on its own (tarfile's ``data`` filter, where
the Python has one, is a second line of defence only). A corrupt or truncated archive raises
``CorruptFileError``. ``nac.data.download`` re-exports every public name here.
"""

from __future__ import annotations

import gzip
import shutil
import stat
import tarfile
import unicodedata
import zipfile
import zlib
from pathlib import Path, PurePosixPath
from typing import Callable, Iterable, Sequence

from tqdm.auto import tqdm

CHUNK = 1 << 20


class UnsafeArchiveError(RuntimeError):
    """An archive member would be written outside the target folder (nothing was extracted)."""


class CorruptFileError(RuntimeError):
    """A file inside a dataset could not be decoded; the message names it."""


class ArchiveTooLargeError(UnsafeArchiveError):
    """The selected members exceed the extraction limits (total uncompressed size, member count)
    or the free disk space; nothing was written."""


class ExtractionError(OSError):
    """Writing a member failed (e.g. the disk filled up); the message names the archive and the member."""


#: Without a known size, an archive may expand to at most this multiple of its own size (text
#: compresses ~10x; a zip bomb of zeros ~1000x) and hold at most this many members.
DEFAULT_RATIO = 50
DEFAULT_MAX_MEMBERS = 1_000_000


def _mb(n: int) -> str:
    return f"{n / 2**20:,.1f} MB"


def _check_budget(archive: Path, sizes: list[tuple[str, int]], max_bytes: int, max_members: int, target: Path) -> None:
    """Refuse, before anything is written, ``sizes`` (member name, uncompressed bytes) over the
    limits or over the free space at ``target``, naming the archive and the largest member."""
    fix = (
        "If the archive is genuine, raise the limit (extract(max_bytes=, max_members=); in the pipeline the "
        "dataset's max_extract_mb / max_extract_files params)"
    )
    if len(sizes) > max_members:
        raise ArchiveTooLargeError(
            f"{archive}: {len(sizes):,} members selected, over the limit of {max_members:,} "
            f"(first over it: {sizes[max_members][0]!r}); refusing to extract, nothing was "
            f"written. {fix}"
        )
    total = sum(n for _, n in sizes)
    name, biggest = max(sizes, key=lambda x: x[1], default=("", 0))
    if total > max_bytes:
        raise ArchiveTooLargeError(
            f"{archive}: the selected members expand to {_mb(total)} ({total:,} bytes), over "
            f"the limit of {_mb(max_bytes)}; the largest is member {name!r} ({_mb(biggest)}); "
            f"refusing to extract, nothing was written. {fix}"
        )
    free = shutil.disk_usage(target).free
    if total > free:
        raise ArchiveTooLargeError(
            f"{archive}: extracting needs {_mb(total)} (largest member {name!r}, "
            f"{_mb(biggest)}) but only {_mb(free)} is free at {target}; free some space "
            f"and rerun; nothing was written"
        )


def _write_error(archive: Path, member: str, size: int, total: int, target: Path, e: OSError) -> ExtractionError:
    return ExtractionError(
        e.errno,
        f"{archive}: cannot write member {member!r} ({_mb(size)}; the extraction needs "
        f"{_mb(total)} in all) under {target}: {e.strerror or e}",
    )


# ------------------------------------------------------------------------------------ extracting
def _check_name(archive: Path, name: str) -> str:
    """Return the member's normalised relative name, or raise if it would escape the target."""
    norm = name.replace("\\", "/")
    if norm.startswith("/") or (len(norm) > 1 and norm[1] == ":"):
        raise UnsafeArchiveError(f"{archive}: member {name!r} has an absolute path; refusing to extract")
    if ".." in PurePosixPath(norm).parts:
        raise UnsafeArchiveError(f"{archive}: member {name!r} has a '..' component; refusing to extract")
    return norm


#: as Linux's ELOOP limit: more links than this while resolving one path is refused.
_MAX_LINK_HOPS = 40


class _Tree:
    """The symlinks a tar extraction will have created, to resolve where each member lands.

    Paths are tuples of components relative to the target folder, keyed by their *physical*
    location (parent folders resolved), the way the OS follows links. ``fold`` compares names
    case- and normalisation-insensitively (macOS, Windows); ``windows`` also splits at
    backslashes and takes drive letters for absolute paths.
    """

    def __init__(self, archive: Path, fold: bool, windows: bool):
        self.archive = archive
        self.fold = fold
        self.windows = windows
        self.links: dict[tuple[str, ...], tuple[str, str]] = {}  # location -> (link target, member name)

    def key(self, part: str) -> str:
        return unicodedata.normalize("NFC", part).casefold() if self.fold else part

    def split(self, path: str) -> list[str] | None:
        """The components of the relative ``path``; None if it is absolute."""
        if self.windows:
            path = path.replace("\\", "/")
            if path[1:2] == ":":
                return None
        if path.startswith("/"):
            return None
        return [p for p in path.split("/") if p not in ("", ".")]

    def resolve(self, parts: list[str] | None, member: str, base: tuple[str, ...] = ()) -> tuple[str, ...] | None:
        """Where ``parts`` (relative to the folder ``base``) end up once every link is followed, or
        None if that is outside the target folder."""
        if parts is None:
            return None
        todo = parts[::-1]
        here = list(base)
        hops = 0
        while todo:
            part = todo.pop()
            if part == "..":
                if not here:
                    return None
                here.pop()
                continue
            link = self.links.get((*here, self.key(part)))
            if link is None:
                here.append(self.key(part))
                continue
            hops += 1
            if hops > _MAX_LINK_HOPS:
                raise UnsafeArchiveError(
                    f"{self.archive}: member {member!r} goes through a loop of symlinks; refusing to extract"
                )
            target = self.split(link[0])
            if target is None:
                return None
            todo.extend(target[::-1])  # a relative target starts from the link's own folder, ``here``
        return tuple(here)

    def add(self, m: tarfile.TarInfo) -> None:
        """Check the member ``m`` against the links before it, then record it if it is a symlink."""
        where = "outside the target folder"
        parts = self.split(m.name)
        if m.issym():
            parent = self.resolve(parts[:-1], m.name) if parts else None
            if parent is None:
                raise UnsafeArchiveError(
                    f"{self.archive}: member {m.name!r} is a symlink placed {where} "
                    f"(through the links before it); refusing to extract"
                )
            if self.resolve(self.split(m.linkname), m.name, base=parent) is None:
                raise UnsafeArchiveError(
                    f"{self.archive}: member {m.name!r} is a symlink to {m.linkname!r}, {where}; refusing to extract"
                )
            self.links[(*parent, self.key(parts[-1]))] = (m.linkname, m.name)
            return
        # Files, folders and hard links are written *through* a link already at their path.
        if self.resolve(parts, m.name) is None:
            raise UnsafeArchiveError(
                f"{self.archive}: member {m.name!r} would be written {where} "
                f"(through the links before it); refusing to extract"
            )
        if m.islnk() and self.resolve(self.split(m.linkname), m.name) is None:
            raise UnsafeArchiveError(
                f"{self.archive}: member {m.name!r} is a hard link to {m.linkname!r}, {where}; refusing to extract"
            )

    def check_final(self) -> None:
        """Every link must still point inside once all members are in place (a later link can
        redirect an earlier one)."""
        for location, (linkname, member) in self.links.items():
            if self.resolve(list(location), member) is None:
                raise UnsafeArchiveError(
                    f"{self.archive}: member {member!r} is a symlink to {linkname!r}, which leads outside the "
                    f"target folder through the links extracted with it; refusing to extract"
                )


def _check_tar_members(archive: Path, members: Sequence[tarfile.TarInfo]) -> None:
    """Refuse (``UnsafeArchiveError``, naming the archive and the member) unless every member lands
    inside the target folder when extracted in order -- following, as the OS does, the links the
    archive creates -- and every link ends up pointing inside it. Resolved as Linux, macOS and
    Windows file systems would, so the answer holds on any of them."""
    for m in members:
        _check_name(archive, m.name)
        if not (m.isfile() or m.isdir() or m.issym() or m.islnk()):
            raise UnsafeArchiveError(f"{archive}: member {m.name!r} is a device or fifo; refusing to extract")
        if m.issym() and m.linkname.replace("\\", "/").startswith("/"):
            raise UnsafeArchiveError(
                f"{archive}: member {m.name!r} is a symlink to {m.linkname!r}, outside "
                f"the target folder; refusing to extract"
            )
    for fold, windows in ((False, False), (True, False), (True, True)):
        tree = _Tree(archive, fold, windows)
        for m in members:
            tree.add(m)
        tree.check_final()


def _check_zip_member(archive: Path, info: zipfile.ZipInfo) -> None:
    _check_name(archive, info.filename)
    mode = info.external_attr >> 16  # the Unix mode, for archives made on Unix
    if stat.S_ISLNK(mode):
        raise UnsafeArchiveError(
            f"{archive}: member {info.filename!r} is a symlink; refusing to extract (zip links are not supported)"
        )
    if stat.S_IFMT(mode) and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise UnsafeArchiveError(f"{archive}: member {info.filename!r} is a device or fifo; refusing to extract")


def _tar_filter() -> dict[str, str]:
    """tarfile's own ``data`` filter (Python >= 3.12, backported to 3.10.12 / 3.11.4) as a second line
    of defence, where this Python has it; ``_check_tar_members`` alone suffices without it."""
    return {"filter": "data"} if hasattr(tarfile, "data_filter") else {}


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


def extract(
    archive: str | Path,
    dest: str | Path,
    members: Callable[[str], bool] | None = None,
    max_bytes: int | None = None,
    max_members: int | None = None,
) -> Path:
    """Extract ``archive`` into the folder ``dest`` and return it.

    ``members`` (optional) selects member names to extract (e.g. one task of LRA's 7 GB tar).
    All selected members are checked before anything is written (``UnsafeArchiveError`` names the
    archive and the first bad one); a corrupt or truncated archive raises ``CorruptFileError``
    naming it. Extraction goes to ``<dest>.partial`` and is renamed into place, replacing an
    older ``dest``, so an interrupted extraction never looks complete. A plain .gz becomes
    ``dest/<name without .gz>``.

    Bounds, checked on the members' declared sizes before anything is written (zip and tar write
    no more than a member declares; a plain .gz is counted as it streams): at most ``max_bytes``
    uncompressed in all (default ``DEFAULT_RATIO`` times the archive's size) and ``max_members``
    members (default ``DEFAULT_MAX_MEMBERS``), and no more than the free disk space
    (``ArchiveTooLargeError``). A failed write raises ``ExtractionError`` naming the archive and
    the member.
    """
    archive, dest = Path(archive), Path(dest)
    kind = archive_kind(archive)
    if max_bytes is None:
        max_bytes = DEFAULT_RATIO * max(archive.stat().st_size, 1 << 20)
    if max_members is None:
        max_members = DEFAULT_MAX_MEMBERS
    tmp = dest.with_name(dest.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        if kind == "zip":
            with zipfile.ZipFile(archive) as zf:
                infos = [i for i in zf.infolist() if members is None or members(i.filename)]
                for i in infos:
                    _check_zip_member(archive, i)
                _check_budget(archive, [(i.filename, i.file_size) for i in infos], max_bytes, max_members, tmp)
                total = sum(i.file_size for i in infos)
                for i in tqdm(infos, desc=f"extract {archive.name}", unit="file", mininterval=1.0):
                    try:
                        zf.extract(i, tmp)
                    except (zipfile.BadZipFile, zlib.error, EOFError) as e:
                        raise CorruptFileError(
                            f"cannot extract {archive}: member {i.filename!r}: {e}. The archive is "
                            f"corrupt or truncated; delete it (and any {archive.name}.sha256 / "
                            f".verified beside it) and rerun the download stage"
                        ) from e
                    except OSError as e:
                        raise _write_error(archive, i.filename, i.file_size, total, tmp, e) from e
        elif kind == "tar":
            with tarfile.open(archive, "r:*") as tf:
                chosen = [m for m in tf.getmembers() if members is None or members(m.name)]
                # tarfile takes a header cut short for the end of the archive; reading the little that
                # follows the last header checks a compressed stream's end marker (EOFError if truncated).
                tf.fileobj.seek(tf.offset)
                while tf.fileobj.read(CHUNK):
                    pass
                _check_tar_members(archive, chosen)
                sizes = [(m.name, m.size if m.isfile() else 0) for m in chosen]
                _check_budget(archive, sizes, max_bytes, max_members, tmp)
                total = sum(n for _, n in sizes)
                kw = _tar_filter()
                for m in tqdm(chosen, desc=f"extract {archive.name}", unit="file", mininterval=1.0):
                    try:
                        tf.extract(m, tmp, **kw)
                    except getattr(tarfile, "FilterError", ()) as e:
                        raise UnsafeArchiveError(f"{archive}: member {m.name!r}: {e}; refusing to extract") from e
                    except (tarfile.ReadError, tarfile.CompressionError, EOFError, zlib.error) as e:
                        raise CorruptFileError(
                            f"cannot extract {archive}: member {m.name!r}: {e}. The archive is "
                            f"corrupt or truncated; delete it (and any {archive.name}.sha256 / "
                            f".verified beside it) and rerun the download stage"
                        ) from e
                    except OSError as e:
                        raise _write_error(archive, m.name, m.size, total, tmp, e) from e
        else:
            out = tmp / (archive.name[:-3] if archive.name.endswith(".gz") else archive.name + ".out")
            written = 0
            with gzip.open(archive, "rb") as src, open(out, "wb") as dst:
                while chunk := src.read(CHUNK):  # a .gz declares no trustworthy size: count as it streams
                    written += len(chunk)
                    if written > max_bytes:
                        raise ArchiveTooLargeError(
                            f"{archive}: member {out.name!r} expands past the limit of {_mb(max_bytes)}; refusing to "
                            f"extract further, nothing was kept. If the archive is genuine, raise the limit "
                            f"(extract(max_bytes=); in the pipeline the dataset's max_extract_mb param)"
                        )
                    try:
                        dst.write(chunk)
                    except OSError as e:
                        raise _write_error(archive, out.name, written, written, tmp, e) from e
    except (
        tarfile.ReadError,
        tarfile.CompressionError,
        zipfile.BadZipFile,
        EOFError,
        zlib.error,
        gzip.BadGzipFile,
    ) as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise CorruptFileError(
            f"cannot extract {archive}: {e}. The archive is corrupt or truncated; delete it (and any "
            f"{archive.name}.sha256 / .verified beside it) and rerun the download stage"
        ) from e
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
