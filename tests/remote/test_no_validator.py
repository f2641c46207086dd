"""Servers that give no validator to tell versions apart (issue 36 §4, docs/remote.md): no ETag
(or one reused across versions) and a Last-Modified that a replacement keeps. The store's header
fingerprint, fetched at every open, still tells a rebuilt store from the old one, and a cache
entry made for one fingerprint never serves another: each process below opens the URL afresh
through one shared cache_dir, and reads the version the server holds at its open.

A local HTTP server on 127.0.0.1 (tests/support/remote_servers.py); the two versions have the
same ids, sizes and layout (every text's case swapped), so a range of one reads as valid bytes of
the other: only the fingerprint tells them apart.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import docstore

from ..conftest import make_docs
from ..support.remote_servers import RangeHTTPServer
from .conftest import FAST, PYTHONPATH
from .test_cache_trust import NAME, _put, _versions, open_remote

MTIME = 1_600_000_000

# Reads every document by id and by position through the shared cache; prints their texts.
READER = """
import json, docstore
store = docstore.open({url!r}, cache_dir={cache!r}, storage_options={options!r})
ids = sorted(store)
got = store.get_many(ids)
print(json.dumps({{
    "by_id": [got[i].text for i in ids],
    "by_position": [d.text for d in store.take(list(range(len(store))))],
    "fingerprint": store.fingerprint,
    "stats": store.remote_stats(),
}}))
"""


@pytest.fixture(scope="module")
def docs():
    return make_docs(1500, seed=17)


def _read(url: str, cache: str) -> dict:
    code = READER.format(url=url, cache=cache, options=FAST)
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


@pytest.mark.parametrize("etag", [None, "reused"])
def test_a_replacement_that_keeps_every_validator_is_read_as_the_new_store(etag, docs, tmp_path):
    v1, v2 = _versions(tmp_path, docs)
    root = tmp_path / "srv"
    root.mkdir()
    _put(v1, root / NAME, MTIME)
    server = RangeHTTPServer(str(root), etag=etag)
    url, cache = f"{server.url}/{NAME}", str(tmp_path / "cache")
    ids = sorted(docs)
    by_position = {i: d["text"] for i, d in docs.items()}
    old = [docs[i]["text"] for i in ids]
    new = [t.swapcase() for t in old]
    try:
        first = _read(url, cache)
        assert first["by_id"] == old and sorted(first["by_position"]) == sorted(by_position.values())
        assert first["stats"]["requests"] > 1
        # The same size and mtime, so the same Last-Modified; no ETag, or the same one.
        _put(v2, root / NAME, MTIME)
        assert os.stat(root / NAME).st_mtime == MTIME
        second = _read(url, cache)
        assert second["fingerprint"] != first["fingerprint"]
        assert second["by_id"] == new, "the new store's documents"
        assert sorted(second["by_position"]) == sorted(t.swapcase() for t in by_position.values())
        # And back: the first version again, its own entry's bytes or fetched anew, never the second's.
        _put(v1, root / NAME, MTIME)
        third = _read(url, cache)
        assert third["by_id"] == old
        fourth = _read(url, cache)
        assert fourth["by_id"] == old and fourth["stats"]["requests"] == 1, "warm: the open's request only"
    finally:
        server.stop()


@pytest.mark.parametrize("etag", [None, "weak"])
def test_bytes_of_a_replacement_read_while_open_never_reach_the_shared_cache(etag, docs, tmp_path):
    """The store replaced under an open one, keeping its Last-Modified (and weak ETag): the open
    store's next fetch got the other version's bytes, gave its documents (their checks pass: same
    ids at the same positions) and wrote them into the cache entry of the version it had opened,
    so that every later process opening that version read them from the shared cache. Now the
    header is fetched again after such a fetch: the open store raises StoreChangedError, and
    nothing of the other version is cached."""
    v1, v2 = _versions(tmp_path, docs)
    root = tmp_path / "srv"
    root.mkdir()
    _put(v1, root / NAME, MTIME)
    server = RangeHTTPServer(str(root), etag=etag)
    url, cache = f"{server.url}/{NAME}", str(tmp_path / "cache")
    ids = sorted(docs)
    try:
        store = open_remote(url, cache)
        half = len(ids) // 2
        got = store.get_many(ids[:half])
        assert [got[i].text for i in ids[:half]] == [docs[i]["text"] for i in ids[:half]]
        _put(v2, root / NAME, MTIME)
        changed = 0
        for chunk in range(half, len(ids), 50):
            try:
                got = store.get_many(ids[chunk : chunk + 50])
            except docstore.StoreChangedError as e:
                assert NAME in str(e) and "replaced since it was opened" in str(e)
                changed += 1
            else:
                assert [d.text for d in got.values()] == [docs[i]["text"] for i in got], "the other version"
        assert changed > 0
        _put(v1, root / NAME, MTIME)  # the version the entry was made for, back
        later = _read(url, cache)
        assert later["by_id"] == [docs[i]["text"] for i in ids], "another version's bytes in its entry"
    finally:
        server.stop()
