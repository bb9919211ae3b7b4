"""nac.data.download: checksummed atomic fetches, safe extraction, user-supplied files."""

from __future__ import annotations

import hashlib
import io
import urllib.request
import zipfile

import pytest
from archives import link, make_gz, make_tar

from nac.data import download as dl
from nac.data.download import (
    ChecksumError,
    DownloadError,
    UnsafeArchiveError,
    UserDataRequired,
    extract,
    fetch,
    prefix_filter,
    require_files,
    verify,
)

PAYLOAD = b"nac-repro " * 5000


@pytest.fixture
def served(tmp_path):
    src = tmp_path / "server" / "data.bin"
    src.parent.mkdir()
    src.write_bytes(PAYLOAD)
    return src


def md5(b: bytes) -> str:
    return hashlib.md5(b).hexdigest()


def test_sources_table_has_reference_facts():
    assert dl.SOURCES["tiny_imagenet"].md5 == "90528d7ca1a48142e341f4ef8d21d0de"
    assert dl.SOURCES["imdb"].sha256.startswith("c40f74a18d3b")
    assert any("huggingface.co/datasets/Msun/modelnet40" in u for u in dl.SOURCES["modelnet40"].urls)
    assert dl.SOURCES["imagenet_train"].user_supplied and not dl.SOURCES["imagenet_train"].urls


def test_fetch_file_url_verifies_and_skips_second_time(served, tmp_path, monkeypatch):
    dest = tmp_path / "raw" / "data.bin"
    assert fetch(served.as_uri(), dest, md5=md5(PAYLOAD)) == dest
    assert dest.read_bytes() == PAYLOAD and not dest.with_name("data.bin.part").exists()
    monkeypatch.setattr(dl, "_stream", lambda *a, **k: pytest.fail("re-downloaded a verified file"))
    fetch(served.as_uri(), dest, md5=md5(PAYLOAD))
    dest.with_name("data.bin.verified").unlink()  # without the stamp, the file is re-hashed, still not fetched
    fetch(served.as_uri(), dest, sha256=hashlib.sha256(PAYLOAD).hexdigest())


def test_checksum_mismatch_removes_file_and_names_hashes(served, tmp_path):
    dest = tmp_path / "raw" / "data.bin"
    with pytest.raises(ChecksumError) as err:
        fetch(served.as_uri(), dest, md5="0" * 32)
    msg = str(err.value)
    assert str(dest) in msg and "0" * 32 in msg and md5(PAYLOAD) in msg and "rerun" in msg
    assert not dest.exists() and not dest.with_name("data.bin.part").exists()


def test_corrupt_existing_file_is_fetched_again(served, tmp_path):
    dest = tmp_path / "data.bin"
    dest.write_bytes(b"truncated")
    fetch(served.as_uri(), dest, md5=md5(PAYLOAD))
    assert dest.read_bytes() == PAYLOAD


def test_leftover_part_file_is_not_taken_for_complete(served, tmp_path):
    dest = tmp_path / "data.bin"
    dest.with_name("data.bin.part").write_bytes(PAYLOAD[:100])  # a killed earlier download
    assert not dest.exists()
    fetch(served.as_uri(), dest, md5=md5(PAYLOAD))
    assert dest.read_bytes() == PAYLOAD and not dest.with_name("data.bin.part").exists()


def test_interrupted_download_leaves_no_file(served, tmp_path, monkeypatch):
    real = urllib.request.urlopen

    class Dying(io.RawIOBase):
        def __init__(self, resp):
            self.resp, self.headers, self.n = resp, resp.headers, 0

        def read(self, size=-1):
            self.n += 1
            if self.n > 1:
                raise KeyboardInterrupt  # Ctrl-C mid-stream
            return self.resp.read(100)

        def __exit__(self, *exc):
            self.resp.close()

    monkeypatch.setattr(urllib.request, "urlopen", lambda req, timeout=None: Dying(real(req)))
    dest = tmp_path / "data.bin"
    with pytest.raises(KeyboardInterrupt):
        fetch(served.as_uri(), dest, md5=md5(PAYLOAD))
    assert not dest.exists() and not dest.with_name("data.bin.part").exists()


def test_mirrors_tried_in_order_and_all_failing_is_named(served, tmp_path):
    missing = (tmp_path / "nowhere.bin").as_uri()
    dest = fetch([missing, served.as_uri()], tmp_path / "a.bin", md5=md5(PAYLOAD))
    assert dest.read_bytes() == PAYLOAD
    with pytest.raises(DownloadError, match="nowhere.bin.*\n.*nowhere2.bin"):
        fetch([missing, (tmp_path / "nowhere2.bin").as_uri()], tmp_path / "b.bin")


def test_verify_helper(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"abc")
    assert verify(p, md5=md5(b"abc")) == md5(b"abc")
    assert verify(p) is None
    with pytest.raises(ChecksumError, match="expected sha256 ffff"):
        verify(p, sha256="ffff")


def test_extract_formats_and_member_filter(tmp_path):
    tgz = make_tar(tmp_path / "a.tgz", [("top/keep/x.txt", b"x"), ("top/skip/y.txt", b"y")], "w:gz")
    out = extract(tgz, tmp_path / "out", members=prefix_filter(["top/keep"]))
    assert (out / "top/keep/x.txt").read_bytes() == b"x" and not (out / "top/skip").exists()
    zpath = tmp_path / "a.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.writestr("d/z.txt", "z")
    assert (extract(zpath, tmp_path / "zout") / "d/z.txt").read_text() == "z"
    gz = make_gz(tmp_path / "notes.txt.gz", b"plain")
    assert (extract(gz, tmp_path / "gout") / "notes.txt").read_bytes() == b"plain"
    # A link that stays inside the target folder is fine.
    ok = make_tar(tmp_path / "ok.tar", [("d/f", b"f"), link("d/l", "f"), link("d/h", "d/f", hard=True)])
    assert (extract(ok, tmp_path / "okout") / "d/l").read_bytes() == b"f"


@pytest.mark.parametrize(
    "member,why",
    [
        (("../evil", b"x"), "'..'"),
        (("top/../../evil", b"x"), "'..'"),
        (("/tmp/nac_evil_abs", b"x"), "absolute"),
        (link("top/sym", "../../outside"), "symlink"),
        (link("top/sym", "/etc/passwd"), "symlink"),
        (link("top/hard", "../outside", hard=True), "hard link"),
    ],
)
def test_unsafe_tar_members_refused_before_anything_is_written(tmp_path, member, why):
    archive = make_tar(tmp_path / "bad.tar", [("top/fine.txt", b"ok"), member])
    dest = tmp_path / "sub" / "out"
    with pytest.raises(UnsafeArchiveError) as err:
        extract(archive, dest)
    name = member[0] if isinstance(member, tuple) else member.name
    assert name in str(err.value) and why in str(err.value)
    assert not dest.exists() and not dest.with_name("out.partial").exists()
    assert not (tmp_path / "evil").exists() and not (tmp_path / "sub" / "evil").exists()


@pytest.mark.parametrize("name", ["../evil", "/abs/evil"])
def test_unsafe_zip_members_refused(tmp_path, name):
    zpath = tmp_path / "bad.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.writestr("ok.txt", "ok")
        zf.writestr(name, "x")
    with pytest.raises(UnsafeArchiveError, match=name):
        extract(zpath, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not (tmp_path / "evil").exists()


def test_require_files_says_where(tmp_path):
    (tmp_path / "have.tar").write_bytes(b"")
    with pytest.raises(UserDataRequired) as err:
        require_files(tmp_path, {"have.tar": None, "need.tar": "abc123"}, "imagenet", "Get it from X.")
    msg = str(err.value)
    assert str(tmp_path.resolve() / "need.tar") in msg and "abc123" in msg and "Get it from X." in msg
    assert "have.tar" not in msg and err.value.exit_code != 0
