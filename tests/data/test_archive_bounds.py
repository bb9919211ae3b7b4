"""Issue 23, defect 6: extraction bounds the total uncompressed size and the member count before
writing anything (a limit derived from the dataset's known size, overridable), and every
extraction error names the archive and the member."""

import gzip
import io
import shutil
import tarfile
import zipfile
from collections import namedtuple

import pytest

from nac.data import archives
from nac.data.archives import ArchiveTooLargeError, ExtractionError, extract
from nac.data.download import SOURCES

ZEROS = 64 << 20  # 64 MB of zeros: a few dozen KB compressed, over 50 x the 1 MB floor of the default limit


def _zeros_zip(path, size=ZEROS):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf, zf.open("data/zeros.bin", "w") as f:
        chunk = bytes(1 << 20)
        for _ in range(size >> 20):
            f.write(chunk)
    return path


def _zeros_targz(path, size=ZEROS):
    with tarfile.open(path, "w:gz") as tf:
        info = tarfile.TarInfo("data/zeros.bin")
        info.size = size

        class Zeros(io.RawIOBase):
            def readable(self):
                return True

            def readinto(self, b):
                b[:] = bytes(len(b))
                return len(b)

        tf.addfile(info, io.BufferedReader(Zeros()))
    return path


def _nothing_written(dest):
    assert not dest.exists() and not dest.with_name(dest.name + ".partial").exists()


@pytest.mark.parametrize("make", [_zeros_zip, _zeros_targz], ids=["zip", "tar.gz"])
def test_a_compression_bomb_is_refused_before_writing(tmp_path, make):
    archive = make(tmp_path / ("bomb.zip" if make is _zeros_zip else "bomb.tar.gz"))
    assert archive.stat().st_size < 1 << 20
    dest = tmp_path / "out"
    with pytest.raises(ArchiveTooLargeError) as err:
        extract(archive, dest)
    msg = str(err.value)
    assert str(archive) in msg and "'data/zeros.bin'" in msg and "64.0 MB" in msg and "max_extract_mb" in msg
    _nothing_written(dest)
    assert extract(archive, dest, max_bytes=ZEROS).joinpath("data/zeros.bin").stat().st_size == ZEROS  # overridable


def test_too_many_members_are_refused_before_writing(tmp_path):
    archive = tmp_path / "many.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for i in range(20):
            zf.writestr(f"f{i:02d}.txt", b"x")
    dest = tmp_path / "out"
    with pytest.raises(
        ArchiveTooLargeError,
        match=r"many\.zip: 20 members selected, over the limit of 10 "
        r"\(first over it: 'f10\.txt'\)",
    ):
        extract(archive, dest, max_members=10)
    _nothing_written(dest)


def test_a_plain_gz_is_bounded_as_it_streams(tmp_path):
    archive = tmp_path / "big.txt.gz"
    with gzip.open(archive, "wb") as f:
        f.write(b"a" * (4 << 20))
    with pytest.raises(
        ArchiveTooLargeError, match=r"big\.txt\.gz: member 'big\.txt' expands past the limit of 1\.0 MB"
    ):
        extract(archive, tmp_path / "out", max_bytes=1 << 20)
    _nothing_written(tmp_path / "out")


def test_not_enough_free_space_is_named_before_writing(tmp_path, monkeypatch):
    archive = _zeros_zip(tmp_path / "a.zip", size=8 << 20)
    Usage = namedtuple("Usage", "total used free")
    monkeypatch.setattr(archives.shutil, "disk_usage", lambda p: Usage(1 << 30, 1 << 30, 1 << 20))
    with pytest.raises(
        ArchiveTooLargeError,
        match=r"a\.zip: extracting needs 8\.0 MB \(largest member "
        r"'data/zeros\.bin', 8\.0 MB\) but only 1\.0 MB is free",
    ):
        extract(archive, tmp_path / "out")
    _nothing_written(tmp_path / "out")


@pytest.mark.parametrize("kind", ["zip", "tar"])
def test_a_failed_write_names_the_archive_and_the_member(tmp_path, monkeypatch, kind):
    """The disk filling up mid-extraction: not a raw ``OSError: [Errno 28]``."""
    if kind == "zip":
        archive = _zeros_zip(tmp_path / "a.zip", size=2 << 20)
        target = (zipfile.ZipFile, "extract")
    else:
        archive = _zeros_targz(tmp_path / "a.tar.gz", size=2 << 20)
        target = (tarfile.TarFile, "extract")

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(*target, full)
    with pytest.raises(ExtractionError) as err:
        extract(archive, tmp_path / "out")
    msg = str(err.value)
    assert str(archive) in msg and "member 'data/zeros.bin' (2.0 MB" in msg and "No space left on device" in msg
    assert err.value.errno == 28
    _nothing_written(tmp_path / "out")


def test_a_builder_bounds_extraction_by_its_known_size_overridable_by_param(tmp_path):
    """Every archive a builder extracts has a limit from its known size; the dataset's params
    ``max_extract_mb`` / ``max_extract_files`` override it (and do not invalidate the cache)."""
    from nac.data.real._common import DOWNLOAD_KEYS, source_defaults
    from nac.data.registry import get_builder

    for key in ("tiny_imagenet", "imagenet_r", "cub", "cifar10", "cifar100", "modelnet40", "lra", "imdb"):
        assert SOURCES[key].max_extract_mb and SOURCES[key].max_extract_files, key
        assert source_defaults(key)["max_extract_mb"] == SOURCES[key].max_extract_mb
    assert {"max_extract_mb", "max_extract_files"} <= DOWNLOAD_KEYS
    archive = _zeros_zip(tmp_path / "c.zip", size=3 << 20)
    b = get_builder("modelnet40", tmp_path / "data", {"url": archive.as_uri(), "md5": None, "max_extract_mb": 2})
    b.raw_dir.mkdir(parents=True)
    shutil.copy(archive, b.archive)
    with pytest.raises(ArchiveTooLargeError, match=r"over the limit of 2\.0 MB"):
        b.download()
