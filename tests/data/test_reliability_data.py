"""Reliability of the data plumbing: no silent wrong numbers.

1. Extraction is safe on its own, without tarfile's ``data`` filter (absent before 3.10.12 /
   3.11.4): members written through the archive's own links, links redirected by later links,
   hard links through links and zip symlinks are refused, naming the archive and the member.
2. Downloads without a published checksum are checked against ``Content-Length``, recorded in
   ``<file>.sha256`` and verified against that record later.
3. Cache loads check every array file against the manifest (size, shape, dtype, sha256).

Every escape these archives attempt lands in ``tmp_path/sub`` (the target is ``tmp_path/sub/out``),
so nothing leaves pytest's tmp_path even on code that lets it through. Servers bind 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import stat
import tarfile
import threading
import zipfile

import numpy as np
import pytest
from archives import link, make_lra, make_tar

from nac.data import cache, get_builder
from nac.data.cache import load_arrays, read_manifest, write_cache
from nac.data.download import CorruptFileError, DownloadError, UnsafeArchiveError, extract, fetch

PAYLOAD = bytes(range(256)) * 200  # 51200 bytes


# ------------------------------------------------------------------------------- 1. extraction
def _disable_tar_filter(monkeypatch):
    """Extract as a Python without tarfile's ``data`` filter does: no filter, everything trusted."""
    monkeypatch.delattr(tarfile, "data_filter", raising=False)
    if hasattr(tarfile, "fully_trusted_filter"):  # 3.14 defaults to "data"; be the old Python on every version
        monkeypatch.setattr(
            tarfile.TarFile, "extraction_filter", staticmethod(tarfile.fully_trusted_filter), raising=False
        )


@pytest.fixture
def no_tar_filter(monkeypatch):
    _disable_tar_filter(monkeypatch)


LINK_TRICKS = {
    # a -> ".", then a/b -> ".." is lexically "a/.." (inside) but the OS resolves it to the parent.
    "symlink_through_symlink": ([link("a", "."), link("a/b", ".."), ("a/b/evil", b"x")], "a/b", "symlink"),
    # b -> ".", so "b/c/../.." is the parent, though it normalises to ".".
    "dotdot_after_linked_folder": (
        [("c/keep", b"k"), link("b", "."), link("a", "b/c/../.."), ("a/evil", b"x")],
        "a",
        "symlink",
    ),
    # l points inside when created; b -> "." added afterwards makes it point outside, and the regular
    # file "l" is then written through it.
    "file_written_through_redirected_link": (
        [("c/keep", b"k"), link("l", "b/c/../../evil"), link("b", "."), ("l", b"x")],
        "l",
        "written outside",
    ),
    # a hard link to a file outside (reached through b -> "."), then overwritten by a member of that name.
    "hard_link_through_symlink": (
        [("c/keep", b"k"), link("b", "."), link("h", "b/c/../../victim", hard=True), ("h", b"overwritten")],
        "h",
        "hard link",
    ),
    # on Linux "x\\y" is one name: a link to ".." at the top, though "x/.." looks inside.
    "backslash_in_link_name": ([link("x\\y", ".."), ("x\\y/evil", b"x")], "x\\y", "symlink"),
    "symlink_loop": ([link("a", "b"), link("b", "a"), ("a/x", b"x")], "a/x", "loop of symlinks"),
    # nothing is written through it, but the extracted tree would keep a link leading outside.
    "link_redirected_after_creation": (
        [("c/keep", b"k"), link("a", "b/c/../.."), link("b", ".")],
        "a",
        "leads outside",
    ),
}


@pytest.mark.parametrize("case", sorted(LINK_TRICKS))
def test_link_tricks_refused_without_tarfile_filter(tmp_path, no_tar_filter, case):
    members, offender, why = LINK_TRICKS[case]
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "victim").write_bytes(b"orig")
    archive = make_tar(tmp_path / "tricks.tar", members)
    dest = sub / "out"
    with pytest.raises(UnsafeArchiveError) as err:
        extract(archive, dest)
    msg = str(err.value)
    assert str(archive) in msg and repr(offender) in msg and why in msg
    assert sorted(p.name for p in sub.iterdir()) == ["victim"]  # no out, no out.partial, no evil
    assert (sub / "victim").read_bytes() == b"orig"


@pytest.mark.parametrize("with_filter", [True, False])
def test_links_inside_the_target_still_work(tmp_path, monkeypatch, with_filter):
    if not with_filter:
        _disable_tar_filter(monkeypatch)
    archive = make_tar(
        tmp_path / "ok.tar",
        [("real/x", b"x"), link("d", "real"), ("d/y", b"y"), link("real/l", "../d/x"), link("h", "d/x", hard=True)],
    )
    out = extract(archive, tmp_path / "sub" / "out")
    assert (out / "real" / "y").read_bytes() == b"y" and (out / "real" / "l").read_bytes() == b"x"
    assert (out / "h").read_bytes() == b"x" and (out / "d").is_symlink()


def test_zip_symlink_refused(tmp_path):
    zpath = tmp_path / "links.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.writestr("top/ok.txt", "ok")
        info = zipfile.ZipInfo("top/link")
        info.create_system = 3  # Unix
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, "../../outside")
    dest = tmp_path / "sub" / "out"
    with pytest.raises(UnsafeArchiveError) as err:
        extract(zpath, dest)
    assert str(zpath) in str(err.value) and "'top/link'" in str(err.value) and "symlink" in str(err.value)
    assert not dest.exists() and not dest.with_name("out.partial").exists()


# -------------------------------------------------------------------------------- 2. downloads
class _Handler(http.server.BaseHTTPRequestHandler):
    """Serves ``server.files[path]``, announcing ``server.announce.get(path, len(body))`` bytes."""

    def do_GET(self):
        self._serve(body=True)

    def do_HEAD(self):
        self._serve(body=False)

    def _serve(self, body: bool):
        self.server.requests.append((self.command, self.path))
        data = self.server.files.get(self.path)
        if data is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(self.server.announce.get(self.path, len(data))))
        self.end_headers()
        if body:
            self.wfile.write(data)  # HTTP/1.0: the connection closes after, cutting a short body off

    def log_message(self, *args):
        pass


@pytest.fixture
def server(monkeypatch):
    """A 127.0.0.1 HTTP server; ``server.url(path)``, ``server.files``, ``server.announce``, ``server.gets()``."""
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.files, srv.announce, srv.requests = {}, {}, []
    srv.url = lambda path: f"http://127.0.0.1:{srv.server_address[1]}{path}"
    srv.gets = lambda: sum(1 for method, _ in srv.requests if method == "GET")
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join()


def test_short_read_is_an_error_and_leaves_nothing(tmp_path, server):
    server.files["/data.bin"] = PAYLOAD[:20000]
    server.announce["/data.bin"] = len(PAYLOAD)
    dest = tmp_path / "raw" / "data.bin"
    with pytest.raises(DownloadError) as err:
        fetch(server.url("/data.bin"), dest)  # no published checksum
    msg = str(err.value)
    assert "data.bin" in msg and f"received 20000 of the {len(PAYLOAD)} bytes" in msg
    assert sorted(p.name for p in dest.parent.iterdir()) == []  # no file, no .part, no record


def test_unchecksummed_download_is_recorded_then_verified(tmp_path, server, capsys):
    server.files["/data.bin"] = PAYLOAD
    dest = tmp_path / "data.bin"
    fetch(server.url("/data.bin"), dest)
    sha = hashlib.sha256(PAYLOAD).hexdigest()
    record = tmp_path / "data.bin.sha256"
    assert record.read_text() == f"{sha}  data.bin\n" and dest.read_bytes() == PAYLOAD
    fetch(server.url("/data.bin"), dest)
    assert server.gets() == 1  # verified against the record, not fetched again
    dest.write_bytes(PAYLOAD[:1000])  # truncated (or damaged) since
    capsys.readouterr()
    fetch(server.url("/data.bin"), dest)
    err = capsys.readouterr().err
    assert str(dest) in err and str(record) in err and "removing it and downloading again" in err
    assert server.gets() == 2 and dest.read_bytes() == PAYLOAD and record.read_text().startswith(sha)


def test_existing_unrecorded_file_is_checked_against_the_server_size(tmp_path, server, capsys):
    server.files["/data.bin"] = PAYLOAD
    dest = tmp_path / "data.bin"
    dest.write_bytes(PAYLOAD[:1000])  # left by a version that did not check completeness
    fetch(server.url("/data.bin"), dest)
    assert "incomplete earlier download" in capsys.readouterr().err
    assert dest.read_bytes() == PAYLOAD and server.gets() == 1
    other = tmp_path / "other.bin"
    other.write_bytes(PAYLOAD)  # complete, placed by hand: adopted and recorded, not downloaded
    fetch(server.url("/data.bin"), other)
    assert server.gets() == 1 and (tmp_path / "other.bin.sha256").exists()


def test_truncated_lra_archive_is_refused_at_download(tmp_path, server):
    fake = make_lra(tmp_path / "srv")
    data = fake.path.read_bytes()
    server.files["/lra_release.gz"] = data[: len(data) // 2]
    server.announce["/lra_release.gz"] = len(data)
    b = get_builder("lra_listops", tmp_path / "data", {"url": server.url("/lra_release.gz"), "max_length": 8})
    with pytest.raises(DownloadError, match="lra_release.gz"):
        b.download()
    assert not b.archive.exists() and not b.extracted.exists()
    server.files["/lra_release.gz"] = data  # the server recovers: a rerun downloads the whole archive
    b.download()
    assert b.archive.with_name("lra_release.gz.sha256").read_text().split()[0] == hashlib.sha256(data).hexdigest()


def test_corrupt_archive_named_at_extraction(tmp_path):
    fake = make_lra(tmp_path / "srv")
    cut = tmp_path / "lra_release.gz"
    data = fake.path.read_bytes()
    cut.write_bytes(data[: len(data) - 20])  # the gzip trailer and the last compressed bytes are lost
    with pytest.raises(CorruptFileError) as err:
        extract(cut, tmp_path / "out")
    assert str(cut) in str(err.value) and "rerun the download" in str(err.value)
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


# ------------------------------------------------------------------------------------ 3. cache
def _toy_cache(tmp_path):
    rng = np.random.default_rng(0)
    cache_dir = tmp_path / "cache" / "toy"
    write_cache(
        cache_dir,
        "toy",
        {"n": 40},
        {
            "train": {
                "images": rng.integers(0, 256, (40, 3, 8, 8), dtype=np.uint8),
                "labels": np.arange(40, dtype=np.int64) % 10,
            }
        },
    )
    return cache_dir


def _load(cache_dir, split="train"):
    return load_arrays(cache_dir, read_manifest(cache_dir, "toy", {"n": 40}), split)


def _assert_names_file_and_fix(err, path, cache_dir):
    msg = str(err.value)
    assert str(path) in msg and f"Delete {cache_dir}" in msg and "dvc repro" in msg


def test_same_size_corruption_of_labels_is_refused(tmp_path):
    cache_dir = _toy_cache(tmp_path)
    labels = cache_dir / "train" / "labels.npy"
    size = labels.stat().st_size
    np.save(labels, np.full(40, 7, dtype=np.int64))  # same shape, dtype and size; other numbers
    assert labels.stat().st_size == size
    with pytest.raises(cache.CacheCorruptError) as err:
        _load(cache_dir)
    _assert_names_file_and_fix(err, labels, cache_dir)
    assert "sha256" in str(err.value)


def test_same_size_corruption_refused_by_a_builder(tmp_path):
    """The reported case: a real dataset's cached labels corrupted in place, then a stage loads it."""
    fake = make_lra(tmp_path / "srv")
    b = get_builder("lra_listops", tmp_path / "data", {"url": fake.url, "max_length": 16})
    b.download()
    b.prepare()
    labels = b.cache_dir / "test" / "labels.npy"
    arr = np.load(labels)
    np.save(labels, (arr + 1) % 10)
    with pytest.raises(cache.CacheCorruptError) as err:
        b.load("test")
    _assert_names_file_and_fix(err, labels, b.cache_dir)
    assert len(b.load("train")) == 3  # the intact splits still load


def test_truncated_npy_names_the_file(tmp_path):
    cache_dir = _toy_cache(tmp_path)
    images = cache_dir / "train" / "images.npy"
    images.write_bytes(images.read_bytes()[:-100])
    with pytest.raises(cache.CacheCorruptError) as err:
        _load(cache_dir)
    _assert_names_file_and_fix(err, images, cache_dir)
    assert "truncated" in str(err.value)


@pytest.mark.parametrize("layout,why", [([[39, 3, 8, 8], "uint8"], "shape"), ([[40, 3, 8, 8], "int8"], "int8")])
def test_manifest_disagreeing_with_the_file_is_refused(tmp_path, layout, why):
    cache_dir = _toy_cache(tmp_path)
    path = cache_dir / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["splits"]["train"]["images"] = layout
    path.write_text(json.dumps(manifest))
    with pytest.raises(cache.CacheCorruptError, match=why) as err:
        _load(cache_dir)
    _assert_names_file_and_fix(err, cache_dir / "train" / "images.npy", cache_dir)


def test_missing_array_file_and_unreadable_manifest(tmp_path):
    cache_dir = _toy_cache(tmp_path)
    (cache_dir / "train" / "labels.npy").unlink()
    with pytest.raises(cache.CacheCorruptError, match="is missing") as err:
        _load(cache_dir)
    _assert_names_file_and_fix(err, cache_dir / "train" / "labels.npy", cache_dir)
    (cache_dir / "manifest.json").write_text('{"dataset": "toy", "par')
    with pytest.raises(cache.CacheCorruptError) as err:
        _load(cache_dir)
    _assert_names_file_and_fix(err, cache_dir / "manifest.json", cache_dir)


def test_old_manifest_without_checksums_asks_to_reprepare(tmp_path):
    cache_dir = _toy_cache(tmp_path)
    path = cache_dir / "manifest.json"
    manifest = json.loads(path.read_text())
    del manifest["files"]
    path.write_text(json.dumps(manifest))
    with pytest.raises(cache.CacheCorruptError, match="older version") as err:
        _load(cache_dir)
    _assert_names_file_and_fix(err, path, cache_dir)


def test_content_hashed_once_per_process_and_again_after_a_change(tmp_path, monkeypatch):
    cache_dir = _toy_cache(tmp_path)
    monkeypatch.setattr(cache, "_VERIFIED", set())
    hashed = []
    real = cache._digest
    monkeypatch.setattr(cache, "_digest", lambda p: hashed.append(p.name) or real(p))
    arrays = _load(cache_dir)
    assert sorted(hashed) == ["images.npy", "labels.npy"] and int(arrays["labels"][13]) == 3
    _load(cache_dir)
    assert len(hashed) == 2  # verified already in this process
    labels = cache_dir / "train" / "labels.npy"
    st = labels.stat()
    np.save(labels, np.zeros(40, dtype=np.int64))
    os.utime(labels, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with pytest.raises(cache.CacheCorruptError, match="sha256"):
        _load(cache_dir)
