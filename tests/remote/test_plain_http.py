"""A store served by Python's own ``http.server`` (issue 39 section 2), which ignores ``Range``: a
ranged GET gets the whole file. docstore then reads the whole object into the node cache once,
bounded by ``cache_bytes``, says so in one ``UserWarning``, and serves every later read from the
cache; a second process sharing the cache directory reuses the whole object; an object that
cannot fit is refused with an error that names its size, the budget and how to raise it.

The server is ``http.server.SimpleHTTPRequestHandler`` itself, on 127.0.0.1: in a thread
(tests/support/remote_servers.py's ``PlainHTTPServer``, which only records the requests), and
once as ``python -m http.server`` in a subprocess. Every subprocess has a timeout.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import docstore

from ..conftest import assert_doc_equal, make_docs, write_store
from ..support.remote_servers import PlainHTTPServer
from .conftest import FAST, PYTHONPATH

N = 2000  # ~600 KB: past the open's first 128 KiB, so that the rest of the object is a fetch


@pytest.fixture(scope="module")
def docs():
    return make_docs(N, seed=11)


@pytest.fixture(scope="module")
def served(tmp_path_factory, docs):
    """A store file and a collection directory (two shards) of the same documents, served by
    http.server."""
    root = tmp_path_factory.mktemp("plain")
    write_store(root / "corpus.docstore", docs).close()
    ids = list(docs)
    parts = []
    for i, chunk in enumerate(np.array_split(np.arange(len(ids)), 2)):
        part = tmp_path_factory.mktemp("parts") / f"part{i}.docstore"
        write_store(part, {ids[j]: docs[ids[j]] for j in chunk}).close()
        parts.append(str(part))
    docstore.seal(root / "coll.docstore", parts).close()
    server = PlainHTTPServer(str(root))
    yield server, root
    server.stop()


def store_files(path) -> list[str]:
    """The store files of a store (itself) or of a collection directory (its index and shards)."""
    if os.path.isfile(path):
        return [str(path)]
    return [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if f.endswith(".docstore")]


def open_plain(url: str, cache, **kwargs):
    """``docstore.open(url)``, and the one warning it gave (it must give exactly one)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store = docstore.open(url, cache_dir=str(cache), storage_options=FAST, **kwargs)
    assert [w.category for w in caught] == [UserWarning], [str(w.message) for w in caught]
    message = str(caught[0].message)
    assert message.startswith(f"{url}: the server ignores HTTP Range requests"), message
    assert caught[0].filename == __file__, "the warning points at the caller of docstore.open"
    return store, message


def check_reads(store, docs) -> None:
    """Lookups by id and by position, get_many and take answer as the documents were written."""
    ids = list(docs)
    assert len(store) == len(ids)
    for doc_id in ids[:50] + ids[-50:]:
        assert_doc_equal(store[doc_id], doc_id, docs[doc_id])
    for position in (0, 1, len(ids) // 2, len(ids) - 1):
        doc = store.at(position)
        assert_doc_equal(doc, doc.doc_id, docs[doc.doc_id])
    got = store.get_many(ids[::-3])
    assert list(got) == ids[::-3]
    for doc_id, doc in got.items():
        assert_doc_equal(doc, doc_id, docs[doc_id])
    positions = np.random.default_rng(0).permutation(len(ids))[:500]
    taken = store.take(positions)
    assert sorted(d.doc_id for d in taken) == sorted(store.at(int(p)).doc_id for p in positions)
    for doc in taken:
        assert_doc_equal(doc, doc.doc_id, docs[doc.doc_id])
    assert "nope" not in store and store.get("nope") is None


@pytest.mark.parametrize("name", ["corpus.docstore", "coll.docstore"])
def test_http_server_serves_a_store_and_a_collection(served, docs, tmp_path, name):
    """The whole object (each file of a collection) comes into the cache once, at open; every
    read after is served from the cache: the server gets no request more."""
    server, root = served
    url = f"{server.url}/{name}"
    store, message = open_plain(url, tmp_path / "cache")
    size = sum(os.path.getsize(f) for f in store_files(root / name))
    assert "read into the node cache once" in message
    assert ("each of its 3 files whole" in message) == (name == "coll.docstore"), message
    stats = store.remote_stats()
    assert stats["bytes"] >= size
    assert stats["cache_bytes_held"] >= size - 4096
    asked = len(server.log)
    check_reads(store, docs)
    assert len(server.log) == asked, server.log[asked:]
    assert store.remote_stats()["requests"] == stats["requests"]
    # The server was asked for a range, ignored it, and the object then came without one.
    assert any(had_range and status == 200 for _, _, status, had_range in server.log)
    store.close()


def test_a_second_process_reuses_the_whole_object(served, docs, tmp_path):
    """A process sharing the cache directory finds the whole object there: it fetches only the
    open's first bytes (to check which version the server holds), then reads from the cache."""
    server, root = served
    url = f"{server.url}/corpus.docstore"
    cache = tmp_path / "shared"
    first, _ = open_plain(url, cache)
    size = os.path.getsize(root / "corpus.docstore")
    assert first.remote_stats()["bytes"] >= size
    ids = list(docs)
    code = f"""
        import json, warnings
        import docstore
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            store = docstore.open({url!r}, cache_dir={str(cache)!r}, storage_options={FAST!r})
        docs = store.get_many({ids[::7]!r})
        positions = [d.doc_id for d in store.take(list(range(0, {N}, 13)))]
        print(json.dumps({{
            "warnings": [str(w.message) for w in caught],
            "stats": store.remote_stats(),
            "ids": list(docs),
            "texts": [d.text for d in docs.values()],
            "positions": positions,
        }}))
    """
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": PYTHONPATH},
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert len(out["warnings"]) == 1 and "found whole in the node cache" in out["warnings"][0]
    # The open's first 128 KiB (the header names the cache entry); nothing else.
    assert out["stats"]["bytes"] <= 128 << 10 < size, out["stats"]
    assert out["ids"] == ids[::7]
    assert out["texts"] == [docs[i]["text"] for i in ids[::7]]
    assert out["positions"] == [first.at(p).doc_id for p in range(0, N, 13)]


def test_an_object_larger_than_the_cache_is_refused(served, tmp_path):
    """Refused before its body is read, with its size, the budget and how to raise it; for a
    collection, the files' total is what must fit."""
    server, root = served
    size = os.path.getsize(root / "corpus.docstore")
    budget = size // 2
    url = f"{server.url}/corpus.docstore"
    with pytest.raises(docstore.InvalidArgumentError) as refused:
        docstore.open(url, cache_dir=str(tmp_path / "c1"), cache_bytes=budget, storage_options=FAST)
    message = str(refused.value)
    assert message.startswith(f"{url}: the server ignores HTTP Range requests"), message
    for part in (f"{size} bytes", f"{budget} bytes", f"cache_bytes={size}", "DOCSTORE_CACHE_BYTES"):
        assert part in message, (part, message)
    # Each file of the collection fits alone, not all of them together.
    sizes = [os.path.getsize(f) for f in store_files(root / "coll.docstore")]
    budget = max(sizes) + 1024
    assert budget < sum(sizes)
    with pytest.raises(docstore.InvalidArgumentError, match="other file") as refused:
        docstore.open(
            f"{server.url}/coll.docstore",
            cache_dir=str(tmp_path / "c2"),
            cache_bytes=budget,
            storage_options=FAST,
        )
    assert f"{budget} bytes" in str(refused.value)
    # With a budget that holds it, the same store opens.
    store, _ = open_plain(url, tmp_path / "c3", cache_bytes=size * 2)
    assert len(store) == N


def test_a_private_cache_holds_a_small_store_whole(served, docs, tmp_path):
    """``cache_bytes=0``: the process's own cache (64 MiB) holds the store; reads come from it."""
    server, _ = served
    store, _ = open_plain(f"{server.url}/corpus.docstore", tmp_path / "unused", cache_bytes=0)
    asked = len(server.log)
    check_reads(store, docs)
    assert len(server.log) == asked
    assert not (tmp_path / "unused").exists()


def test_verify_downloads_from_a_server_that_ignores_ranges(served, tmp_path):
    """``verify`` downloads every file (requests of ``max_request_bytes``): here one GET each,
    streamed past all of its pieces."""
    server, _ = served
    for name in ("corpus.docstore", "coll.docstore"):
        store, _ = open_plain(f"{server.url}/{name}", tmp_path / name)
        store.verify()
        store.close()


def test_python_m_http_server(served, docs, tmp_path):
    """What docs/remote.md says works: ``python -m http.server``, as a user starts it."""
    _, root = served
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory", str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        # "Serving HTTP on 127.0.0.1 port 41234 (http://127.0.0.1:41234/) ...": it listens.
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "python -m http.server said nothing in 60 s"
        line = proc.stdout.readline()
        assert "port" in line, line
        base = line.split("(")[1].split(")")[0].rstrip("/")
        store, _ = open_plain(f"{base}/corpus.docstore", tmp_path / "cache")
        check_reads(store, docs)
        store.close()
    finally:
        proc.kill()
        proc.wait(timeout=30)
