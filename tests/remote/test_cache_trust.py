"""The node cache under attack (issue 25 §1, docs/remote.md "What a shared cache_dir protects
against"): a server cannot poison the cache for another URL, a replaced object is never read as
the other version, and the cache directory is this user's own, its files private, never written
through a link, and only this user's entries trusted.

Real servers on 127.0.0.1 (tests/support/remote_servers.py): a genuine HTTP server and a mirror that
serves the genuine header with one forged document (its check recomputed: the check is not a
secret), HTTP servers with no ETag, a weak one, one reused across versions, and S3 (moto) with a
versioned bucket. The tests run as any user; those that need another user's files chown them
and are skipped where that is not allowed (not root).
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys

import pytest

import docstore

from ..conftest import assert_doc_equal, make_docs, write_store
from ..format.test_format_spec import SpecStore, document_check
from ..support.remote_servers import RangeHTTPServer
from .conftest import FAST

NAME = "corpus.docstore"
OTHER_UID = 54321


def open_remote(url, cache, **options):
    return docstore.open(url, cache_dir=str(cache), storage_options={**FAST, **options})


def entries(cache) -> list[str]:
    if not cache.exists():
        return []
    return sorted(p.name for p in cache.iterdir() if p.is_dir() and not p.name.startswith("."))


@pytest.fixture(scope="module")
def docs():
    return make_docs(2500, seed=11)


@pytest.fixture(scope="module")
def genuine(tmp_path_factory, docs):
    """An uncompressed store (the forged text lies in clear in its blob)."""
    path = tmp_path_factory.mktemp("genuine") / NAME
    write_store(path, docs, level=-1).close()
    return path


def victim_of(docs) -> str:
    return next(i for i, d in docs.items() if d["text"].startswith("passage ") and len(d["text"]) > 20)


def forge(buf: bytes, doc_id: str) -> tuple[bytes, int, bytes]:
    """The store ``buf`` with the text of ``doc_id`` starting "FORGED!" instead of "passage",
    its document check recomputed (docs/format.md §6.3), the header and every other byte as they
    were; also where the blob lies in the file, and the forged blob."""
    spec = SpecStore(buf)
    pos = spec.position(doc_id)
    assert pos is not None
    blob = spec.blob(pos)
    at = buf.find(blob)
    assert at > 0 and buf.find(blob, at + 1) == -1
    body = blob[4:]
    assert body.count(b"passage ") == 1
    body = body.replace(b"passage ", b"FORGED! ")
    check = document_check(doc_id.encode(), body, pos if spec.binds_position else None)
    forged = struct.pack("<I", check) + body
    return buf[:at] + forged + buf[at + len(blob) :], at, forged


def test_a_mirror_cannot_poison_the_cache_for_the_genuine_store(genuine, docs, tmp_path):
    """A server opened once (a mirror, or plain HTTP on a hostile network) serves the genuine
    header with one forged document; the genuine store read later from its own server through
    the same cache_dir returns the genuine document: entries are keyed by the URL and the
    object's validators, not by the fingerprint the object states."""
    doc_id = victim_of(docs)
    forged, _, _ = forge(genuine.read_bytes(), doc_id)
    (tmp_path / "mirror").mkdir()
    (tmp_path / "mirror" / NAME).write_bytes(forged)
    local = docstore.open(tmp_path / "mirror" / NAME)
    assert local[doc_id].text.startswith("FORGED! "), "the forgery passes the document check"
    local.close()
    cache = tmp_path / "cache"
    real, mirror = RangeHTTPServer(str(genuine.parent)), RangeHTTPServer(str(tmp_path / "mirror"))
    try:
        poisoned = open_remote(f"{mirror.url}/{NAME}", cache)
        assert poisoned[doc_id].text.startswith("FORGED! ")
        store = open_remote(f"{real.url}/{NAME}", cache)
        assert store.fingerprint == poisoned.fingerprint  # the same header
        assert_doc_equal(store[doc_id], doc_id, docs[doc_id])
        assert store.get_many([doc_id])[doc_id].text == docs[doc_id]["text"]
        assert len(entries(cache)) == 2
    finally:
        real.stop()
        mirror.stop()


def _versions(tmp_path, docs):
    """Two versions of one store with the same ids, sizes and layout (every text's case
    swapped): a range of one reads as valid bytes of the other."""
    v1, v2 = tmp_path / "v1.docstore", tmp_path / "v2.docstore"
    write_store(v1, docs, level=-1).close()
    write_store(v2, {k: {**v, "text": v["text"].swapcase()} for k, v in docs.items()}, level=-1).close()
    assert v1.stat().st_size == v2.stat().st_size
    return v1, v2


def _put(source, target, mtime: int) -> None:
    shutil.copyfile(source, target)
    os.utime(target, (mtime, mtime))


@pytest.mark.parametrize("etag", [None, "weak", "reused", "strong"])
def test_a_replaced_object_is_never_read_as_the_other_version(etag, docs, tmp_path):
    """A server with no ETag (Last-Modified only), a weak one, or one it reuses across versions:
    the object replaced under an open store gives StoreChangedError or the first version's
    documents, never the second's; and the second's bytes are never cached, so never served
    once the first version is back."""
    v1, v2 = _versions(tmp_path, docs)
    root = tmp_path / "srv"
    root.mkdir()
    _put(v1, root / NAME, 1_600_000_000)
    server = RangeHTTPServer(str(root), etag=etag)
    cache = tmp_path / "cache"
    ids = list(docs)
    try:
        store = open_remote(f"{server.url}/{NAME}", cache)
        assert_doc_equal(store[ids[0]], ids[0], docs[ids[0]])
        _put(v2, root / NAME, 1_600_000_100)
        changed = 0
        for doc_id in ids[-120:]:  # past the first 128 KiB, which the open fetched
            try:
                doc = store[doc_id]
            except docstore.StoreChangedError as e:
                assert NAME in str(e) and "replaced since it was opened" in str(e)
                changed += 1
            else:
                assert doc.text == docs[doc_id]["text"], "a document of the other version"
        assert changed > 0
        _put(v1, root / NAME, 1_600_000_000)  # the first version back, as it was
        again = open_remote(f"{server.url}/{NAME}", cache)
        got = again.get_many(ids)
        assert [got[i].text for i in ids] == [docs[i]["text"] for i in ids]
    finally:
        server.stop()


def test_an_entry_whose_object_now_has_another_header_is_set_aside(docs, tmp_path):
    """A server that reuses its ETag, and a replacement that keeps the mtime and the size: the
    same key, another header. The entry keeps the fingerprint of the store it was made for, and
    an open whose header differs sets it aside rather than read the first version's bytes."""
    v1, v2 = _versions(tmp_path, docs)
    root = tmp_path / "srv"
    root.mkdir()
    _put(v1, root / NAME, 1_600_000_000)
    server = RangeHTTPServer(str(root), etag="reused")
    cache = tmp_path / "cache"
    ids = list(docs)
    try:
        first = open_remote(f"{server.url}/{NAME}", cache)
        got = first.get_many(ids)
        assert [got[i].text for i in ids] == [docs[i]["text"] for i in ids]
        first.close()
        _put(v2, root / NAME, 1_600_000_000)
        second = open_remote(f"{server.url}/{NAME}", cache)
        got = second.get_many(ids)
        assert [got[i].text for i in ids] == [docs[i]["text"].swapcase() for i in ids]
        assert len(entries(cache)) == 1
    finally:
        server.stop()


def test_an_object_nothing_pins_is_cached_for_its_process_only(docs, tmp_path):
    """No ETag, no Last-Modified, no version: the bytes cannot be tied to one version, so they
    are never put in the shared cache; every response's length is still checked."""
    v1, _ = _versions(tmp_path, docs)
    root = tmp_path / "srv"
    root.mkdir()
    _put(v1, root / NAME, 1_600_000_000)
    server = RangeHTTPServer(str(root), last_modified=False)
    cache = tmp_path / "cache"
    ids = list(docs)
    try:
        store = open_remote(f"{server.url}/{NAME}", cache)
        got = store.get_many(ids)
        assert [got[i].text for i in ids] == [docs[i]["text"] for i in ids]
        assert entries(cache) == [], "nothing in the shared cache"
        fresh = open_remote(f"{server.url}/{NAME}", cache)
        (root / NAME).write_bytes(v1.read_bytes() + b"longer now")
        with pytest.raises(docstore.StoreChangedError, match="size"):
            fresh.get_many(ids)
    finally:
        server.stop()


def test_a_versioned_bucket_serves_the_version_opened(s3, docs, tmp_path):
    """S3 gives a version id: every range asks for that version, which the bucket still serves
    after a replacement: the documents opened, not StoreChangedError."""
    v1, v2 = _versions(tmp_path, docs)
    bucket = "docstore-versioned"
    s3.client.create_bucket(Bucket=bucket)
    s3.client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    s3.client.upload_file(str(v1), bucket, NAME)
    ids = list(docs)
    store = open_remote(f"s3://{bucket}/{NAME}", tmp_path / "cache")
    assert_doc_equal(store[ids[0]], ids[0], docs[ids[0]])
    s3.client.upload_file(str(v2), bucket, NAME)
    got = store.get_many(ids[1:])
    assert [got[i].text for i in ids[1:]] == [docs[i]["text"] for i in ids[1:]]
    latest = open_remote(f"s3://{bucket}/{NAME}", tmp_path / "cache")
    assert latest[ids[5]].text == docs[ids[5]]["text"].swapcase()


# --- The cache directory ---------------------------------------------------------------------


@pytest.fixture
def served(genuine):
    server = RangeHTTPServer(str(genuine.parent))
    yield f"{server.url}/{NAME}"
    server.stop()


def test_the_cache_is_private_whatever_the_umask(served, docs, tmp_path):
    cache = tmp_path / "made" / "cache"
    old = os.umask(0)
    try:
        store = open_remote(served, cache)
        store[victim_of(docs)]
    finally:
        os.umask(old)
    assert cache.stat().st_mode & 0o777 == 0o700
    (entry,) = entries(cache)
    assert (cache / entry).stat().st_mode & 0o777 == 0o700
    for path in [cache / "usage", cache / entry / "data", cache / entry / "map"]:
        assert path.stat().st_mode & 0o777 == 0o600, path


def test_a_cache_dir_others_may_change_is_refused(served, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o777)
    with pytest.raises(docstore.InvalidArgumentError, match=f"cache_dir {cache}: writable by other users"):
        open_remote(served, cache)
    cache.chmod(0o1777)  # a shared, sticky directory (/tmp): nobody can replace another's entries
    open_remote(served, cache)
    if os.geteuid() != 0:
        return
    other = tmp_path / "other"
    other.mkdir(mode=0o755)
    os.chown(other, OTHER_UID, OTHER_UID)
    with pytest.raises(docstore.InvalidArgumentError, match=f"cache_dir {other}: owned by uid {OTHER_UID}"):
        open_remote(served, other)


def test_a_planted_usage_link_is_never_followed(served, docs, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious file of the user")
    (cache / "usage").symlink_to(victim)
    store = open_remote(served, cache)
    doc_id = victim_of(docs)
    assert_doc_equal(store[doc_id], doc_id, docs[doc_id])
    assert victim.read_bytes() == b"precious file of the user"
    assert not (cache / "usage").is_symlink() and (cache / "usage").is_file()


def _poison_entry(served, genuine, docs, cache):
    """Makes the store's entry (as its first reader would), then writes the forged blob into
    its data at the blob's place, its units marked present: an entry that answers the forged
    document to whoever trusts it."""
    doc_id = victim_of(docs)
    open_remote(served, cache)[doc_id]
    _, at, blob = forge(genuine.read_bytes(), doc_id)
    (entry,) = entries(cache)
    with open(cache / entry / "data", "r+b") as f:
        f.seek(at)
        f.write(blob)
    assert open_remote(served, cache)[doc_id].text.startswith("FORGED! "), "the entry is trusted"
    return doc_id, cache / entry


def test_an_entry_that_is_a_link_is_never_trusted(served, genuine, docs, tmp_path):
    cache = tmp_path / "cache"
    doc_id, entry = _poison_entry(served, genuine, docs, cache)
    planted = tmp_path / "planted"
    entry.rename(planted)
    entry.symlink_to(planted)
    store = open_remote(served, cache)
    assert_doc_equal(store[doc_id], doc_id, docs[doc_id])
    assert planted.is_dir() and (planted / "data").exists(), "what the link points at is left alone"


def test_a_file_of_an_entry_that_is_a_link_is_never_trusted(served, genuine, docs, tmp_path):
    cache = tmp_path / "cache"
    doc_id, entry = _poison_entry(served, genuine, docs, cache)
    (entry / "data").rename(tmp_path / "data")
    (entry / "data").symlink_to(tmp_path / "data")
    store = open_remote(served, cache)
    assert_doc_equal(store[doc_id], doc_id, docs[doc_id])


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs to chown to another user")
def test_an_entry_another_user_planted_is_never_trusted(served, genuine, docs, tmp_path):
    """In a shared sticky directory another user may make the entry first, under the name the
    victim's open will look for (it is not secret); it is not used."""
    cache = tmp_path / "cache"
    doc_id, entry = _poison_entry(served, genuine, docs, cache)
    for path in [entry / "data", entry / "map", entry]:
        os.chown(path, OTHER_UID, OTHER_UID)
    store = open_remote(served, cache)
    assert_doc_equal(store[doc_id], doc_id, docs[doc_id])


def test_an_entry_planted_under_the_fingerprint_is_never_read(served, genuine, docs, tmp_path):
    """Before, entries were named by the store's fingerprint, which anyone can read from its
    header: an entry planted under that name before the victim's first read was trusted."""
    cache = tmp_path / "cache"
    doc_id, entry = _poison_entry(served, genuine, docs, cache)
    fingerprint = docstore.open(genuine).fingerprint
    planted = cache / f"{fingerprint:016x}-{genuine.stat().st_size:x}"
    entry.rename(planted)
    store = open_remote(served, cache)
    assert_doc_equal(store[doc_id], doc_id, docs[doc_id])


def test_the_cli_refuses_a_cache_dir_others_may_change(served, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o777)
    env = {**os.environ, "DOCSTORE_CACHE_DIR": str(cache)}
    out = subprocess.run(
        [sys.executable, "-m", "docstore.cli", "info", served],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0 and "writable by other users" in out.stderr, out.stderr


def test_the_key_holds_no_credentials_nor_query(genuine, docs, tmp_path):
    """The entry's name is a hash of the normalised URL: credentials and a query string name the
    same object on the same server, so the same entry, and appear nowhere in the cache."""
    server = RangeHTTPServer(str(genuine.parent))
    cache = tmp_path / "cache"
    doc_id = victim_of(docs)
    try:
        host = server.url.removeprefix("http://")
        for url in [
            f"{server.url}/{NAME}",
            f"http://someone:s3cret@{host}/{NAME}",
            f"{server.url}/{NAME}?sig=s3cret",
        ]:
            assert_doc_equal(open_remote(url, cache)[doc_id], doc_id, docs[doc_id])
        assert len(entries(cache)) == 1
        for root, _, files in os.walk(cache):
            for name in files:
                assert b"s3cret" not in (cache / root / name).read_bytes()
            assert "s3cret" not in root
    finally:
        server.stop()
