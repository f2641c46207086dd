"""Remote stores (docs/remote.md): a store or collection read where it lies, S3 (moto's server)
or plain HTTP, through the node cache; every read checked against the local file.

Real servers on 127.0.0.1 (tests/support/remote_servers.py), nothing mocked inside docstore. Every read
runs under short client timeouts, and whatever runs in another process has a subprocess timeout,
so no test can hang.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import docstore
from docstore._store import _same

from ..conftest import assert_doc_equal, make_docs, write_store
from ..support.remote_servers import BUCKET, FaultProxy, RangeHTTPServer, environment
from .conftest import FAST, PYTHONPATH


@pytest.fixture(scope="module")
def docs():
    return make_docs(1500, seed=3)


@pytest.fixture(scope="module")
def local(tmp_path_factory, docs):
    path = tmp_path_factory.mktemp("remote") / "corpus.docstore"
    write_store(path, docs).close()
    return str(path)


@pytest.fixture(scope="module")
def url(s3, local):
    return s3.upload(local, "corpus.docstore")


@pytest.fixture(scope="module")
def collection(tmp_path_factory, docs):
    base = tmp_path_factory.mktemp("remote-coll")
    ids = list(docs)
    parts = []
    for i, chunk in enumerate(np.array_split(np.arange(len(ids)), 3)):
        part = base / f"part{i}.docstore"
        write_store(part, {ids[j]: docs[ids[j]] for j in chunk}).close()
        parts.append(str(part))
    target = base / "coll.docstore"
    docstore.seal(target, parts).close()
    return str(target)


def open_remote(url, cache, **options):
    return docstore.open(url, cache_dir=str(cache), storage_options={**FAST, **options})


def check_same(remote, local_path, docs):
    """Every read of ``remote`` answers as the local file does."""
    local = docstore.open(local_path)
    ids = list(docs)
    assert len(remote) == len(local) == len(ids)
    assert remote.fields == local.fields
    assert remote.fingerprint == local.fingerprint
    assert list(remote) == list(local)
    for doc_id in ids[:200]:
        assert_doc_equal(remote[doc_id], doc_id, docs[doc_id])
    got = remote.get_many(ids[::-1])
    assert list(got) == ids[::-1]
    for doc_id, doc in got.items():
        assert_doc_equal(doc, doc_id, docs[doc_id])
    positions = np.random.default_rng(0).permutation(len(ids))
    for doc, want in zip(remote.take(positions), local.take(positions)):
        assert doc.doc_id == want.doc_id
        assert_doc_equal(doc, want.doc_id, docs[want.doc_id])
    assert remote.positions([*ids[:50], "nope"]).tolist() == local.positions([*ids[:50], "nope"]).tolist()
    # A batch large enough to be searched on the pool's threads, absent ids among the present
    # (ids with a byte changed, without the common prefix, shorter than it), as the local file
    # finds them (the ids above are cached by now: warm; the first run of the test: partly cold).
    mixed = [i + "x" if n % 3 == 0 else ("~" + i if n % 7 == 0 else i) for n, i in enumerate(ids[:400])]
    mixed += ["", ids[0][:1]]
    assert remote.positions(mixed).tolist() == local.positions(mixed).tolist()
    assert list(remote.get_many(mixed)) == list(local.get_many(mixed))
    assert "nope" not in remote and ids[7] in remote
    assert remote.get("nope", 5) == 5
    with pytest.raises(KeyError):
        remote["nope"]
    assert _same(remote.at(-1), local.at(-1))
    assert remote.get(ids[3], field="text") == docs[ids[3]]["text"]
    assert [d.doc_id for d in remote.values()] == [d.doc_id for d in local.values()]
    local.close()


def test_store_on_s3_reads_as_the_local_file(url, local, docs, tmp_path):
    store = open_remote(url, tmp_path / "cache")
    assert store.url == url and store.path == url
    check_same(store, local, docs)
    info = store.info()
    assert info["path"] == url and info["count"] == len(docs)
    assert info["stored_bytes"] == os.path.getsize(local)


def test_open_costs_two_requests_and_a_lookup_two_rounds(url, docs, big, tmp_path):
    # The header, schema and dictionary in the first request; the key fences in the second
    # (docs/format.md §14), whatever the store's size.
    local, big_url = big
    for n, at in enumerate([url, big_url]):
        stats = open_remote(at, tmp_path / f"cache{n}").remote_stats()
        assert stats["requests"] == stats["round_trips"] == 2, stats
    # The first lookup fetches the common prefix with the key index block: still two rounds,
    # and ids without the prefix, or shorter than it, are absent all the same.
    store = open_remote(big_url, tmp_path / "first")
    ids = list(docstore.open(local))
    assert ids[0].startswith("big0")
    assert store[ids[77]].n == 77
    assert store.remote_stats()["round_trips"] == 4, store.remote_stats()
    for miss in ["b", "big", "zig00001", "aaaaaaaaaaaaaaaaaaaaaaa", "big0999999"]:
        fresh = open_remote(big_url, tmp_path / f"miss-{miss}")
        assert miss not in fresh and fresh.get(miss) is None
        assert fresh.get_many([miss, ids[5]]).keys() == {ids[5]}
    store = open_remote(url, tmp_path / "cache")
    stats = store.remote_stats()
    doc_id = list(docs)[123]
    assert len(doc_id.encode()) <= 8  # a short id: told apart by the key index alone
    store[doc_id]
    after = store.remote_stats()
    # Key index block, then the blob it locates (docs/format.md §14: what a lookup costs; fewer
    # here, where the first request of the open covered part of this small store).
    assert after["round_trips"] - stats["round_trips"] <= 2, after
    before = after
    store[doc_id]
    assert store.remote_stats()["requests"] == before["requests"], "a cached lookup asks nothing"


def _with_common_prefix(path, out, common):
    """A copy of the store at ``path`` whose header says ``common`` (byte 40), resealed."""
    import struct

    import xxhash

    buf = bytearray(Path(path).read_bytes())
    struct.pack_into("<I", buf, 40, common)
    struct.pack_into("<Q", buf, 504, xxhash.xxh3_64_intdigest(bytes(buf[:504])))
    Path(out).write_bytes(buf)
    return str(out)


def test_a_common_prefix_longer_than_the_keys_is_refused_at_open(s3, tmp_path):
    # The remote open no longer reads the first key (docs/format.md §8): the header's common
    # prefix is checked against the keys section's length instead, empty stores included.
    empty = tmp_path / "empty.docstore"
    write_store(empty, {}, fields={"text": "str"}).close()
    one = tmp_path / "one.docstore"
    write_store(one, {"abc": {"text": "x"}}, fields={"text": "str"}).close()
    for path, common in [(empty, 1), (one, 4), (one, 1 << 20)]:
        crafted = _with_common_prefix(path, tmp_path / f"c-{path.name}-{common}", common)
        url = s3.upload(crafted, f"crafted-{path.name}-{common}")
        with pytest.raises(docstore.CorruptStoreError, match="common key prefix longer than"):
            open_remote(url, tmp_path / "cache")
    # The same store with its true prefix (3: every key is "abc") opens and reads.
    url = s3.upload(_with_common_prefix(one, tmp_path / "c3", 3), "crafted-one-3")
    store = open_remote(url, tmp_path / "cache")
    assert store["abc"].text == "x" and "abd" not in store and "ab" not in store


def test_batches_fetch_concurrently_in_a_few_rounds(url, docs, tmp_path):
    store = open_remote(url, tmp_path / "cache", max_in_flight="64")
    ids = list(docs)
    opened = store.remote_stats()
    store.get_many(ids[::3])
    stats = store.remote_stats()
    rounds = stats["round_trips"] - opened["round_trips"]
    # Key index blocks, the blocks a run of ids sharing 8 bytes goes over (a quarter of these ids
    # start with "msmarco_", one run of ~375 keys over three blocks, and two more rounds), their
    # keys, blobs.
    assert rounds <= 5, stats
    assert 1 < stats["peak_in_flight"] <= 64, stats
    positions = np.arange(0, len(ids), 5)
    before = store.remote_stats()["round_trips"]
    store.take(positions)
    # Doc offsets and key ranks, blobs and key offsets, keys.
    assert store.remote_stats()["round_trips"] - before <= 3


def test_a_lookup_by_short_ids_costs_two_rounds(big, tmp_path):
    local, url = big
    store = open_remote(url, tmp_path / "cache")
    ids = list(docstore.open(local))
    opened = store.remote_stats()["round_trips"]
    assert store[ids[1234]].n == 1234
    # The key index block, then the blob it locates (docs/format.md §14).
    assert store.remote_stats()["round_trips"] - opened == 2, store.remote_stats()
    opened = store.remote_stats()["round_trips"]
    got = store.get_many(ids[::7])
    assert len(got) == len(ids[::7])
    # The same two rounds whatever the batch's size.
    assert store.remote_stats()["round_trips"] - opened == 2, store.remote_stats()


def test_index_sections_come_whole_once_their_pieces_cost_as_much(big, tmp_path):
    # Rent or buy (docs/remote.md): each missing piece of an index section costs a request,
    # worth `request_cost_bytes`; once they add up to the section's size it comes whole.
    local, url = big
    ids = list(docstore.open(local))
    rng = np.random.default_rng(11)

    def batches(store, n):
        """Round trips and requests of `n` batches of 40 random positions."""
        out = []
        for _ in range(n):
            before = store.remote_stats()
            positions = rng.choice(len(ids), 40, replace=False)
            assert [d.doc_id for d in store.take(positions)] == [ids[p] for p in positions]
            after = store.remote_stats()
            out.append((after["round_trips"] - before["round_trips"], after["requests"] - before["requests"]))
        return out

    # Never: later batches still fetch pieces of the index, in more rounds than their documents'.
    never = open_remote(url, tmp_path / "never", request_cost_bytes="0")
    first, *later = batches(never, 3)
    assert first[0] == 3 and any(rounds > 1 and requests > 40 for rounds, requests in later), later
    # At once (a request worth a terabyte): the first batch buys what it touches, whole and
    # checked against the section's checksum; later batches fetch their documents alone.
    at_once = open_remote(url, tmp_path / "at-once", request_cost_bytes=str(1 << 40))
    first, *later = batches(at_once, 3)
    assert first[0] == 3
    assert all(rounds == 1 and requests <= 40 for rounds, requests in later), later
    before = at_once.remote_stats()
    got = at_once.get_many(ids[::50])  # buys the key index: its round, then the documents
    assert [d.n for d in got.values()] == list(range(0, 4000, 50))
    assert at_once.remote_stats()["round_trips"] - before["round_trips"] == 2
    before = at_once.remote_stats()
    assert len(at_once.get_many(ids[7::50])) == 80
    assert at_once.remote_stats()["round_trips"] - before["round_trips"] == 1
    # The default: a few lookups download no section; a run of random reads soon does.
    default = open_remote(url, tmp_path / "default")
    assert default[ids[5]].n == 5
    assert default.remote_stats()["bytes"] < 200_000
    rounds = [r for r, _ in batches(default, 12)]
    # Two rounds, not three: the lookup asked for the keys' common prefix, and the keys (32 KB,
    # less than one request's cost) came whole.
    assert rounds[0] == 2 and rounds[-1] == 1, rounds


def test_rent_counts_requests_not_pieces(big, tmp_path):
    # Consecutive positions are one request per section: they earn no purchase (counted piece by
    # piece, 1000 positions bought every section they touched).
    _, url = big
    fetched = []
    for cost in ("0", "1024"):
        store = open_remote(url, tmp_path / f"cost-{cost}", request_cost_bytes=cost)
        before = store.remote_stats()["bytes"]
        assert [d.n for d in store.take(range(1000, 2000))] == list(range(1000, 2000))
        fetched.append(store.remote_stats()["bytes"] - before)
    assert fetched[1] == fetched[0], fetched


def test_upgrade_refuses_remote_collections_and_urls_before_writing(s3, collection, url, tmp_path):
    coll = s3.upload(collection, "coll-upgrade.docstore")
    with pytest.raises(docstore.InvalidArgumentError, match="upgrade a collection where its files are"):
        docstore.upgrade(coll, tmp_path / "local")
    with pytest.raises(docstore.InvalidArgumentError, match="give a local target"):
        docstore.upgrade(url)
    assert os.listdir(tmp_path) == []


def test_a_collection_lookup_costs_two_rounds(s3, big, tmp_path):
    # The global index locates each blob in its shard (format 3): its block, then the blob.
    local = docstore.open(big[0])
    ids = list(local)
    parts = []
    for i, chunk in enumerate(np.array_split(np.arange(len(ids)), 3)):
        part = tmp_path / f"part{i}.docstore"
        with docstore.Writer(part, local.fields, level=-1) as w:
            for doc in local.take(chunk):
                w.add(doc.doc_id, raw=doc.raw, n=doc.n)
        parts.append(part)
    docstore.seal(tmp_path / "coll.docstore", parts).close()
    url = s3.upload(str(tmp_path / "coll.docstore"), "big-coll.docstore")
    store = open_remote(url, tmp_path / "cache")
    opened = store.remote_stats()["round_trips"]
    assert store[ids[2345]].n == 2345
    assert store.remote_stats()["round_trips"] - opened == 2, store.remote_stats()
    opened = store.remote_stats()["round_trips"]
    got = store.get_many(ids[::7])
    assert [d.n for d in got.values()] == list(range(0, 4000, 7))
    assert store.remote_stats()["round_trips"] - opened == 2, store.remote_stats()


def test_long_ids_cost_two_rounds_too(s3, tmp_path):
    # Ids longer than the common prefix + 8 bytes are told apart by their keys: the run's keys
    # come in the second round, with the blobs of its entries as long as the id (format 3).
    rng = np.random.default_rng(9)
    docs = {rng.bytes(16).hex(): {"raw": rng.bytes(int(rng.integers(500, 1500)))} for _ in range(3000)}
    path = tmp_path / "long.docstore"
    write_store(path, docs, fields={"raw": "bytes"}, level=-1).close()
    store = open_remote(s3.upload(str(path), "long.docstore"), tmp_path / "cache")
    ids = list(docs)
    opened = store.remote_stats()["round_trips"]
    assert store[ids[1234]].raw == docs[ids[1234]]["raw"]
    assert store.remote_stats()["round_trips"] - opened == 2, store.remote_stats()
    opened = store.remote_stats()["round_trips"]
    got = store.get_many(ids[::11])
    assert list(got) == ids[::11] and all(d.raw == docs[i]["raw"] for i, d in got.items())
    assert store.remote_stats()["round_trips"] - opened == 2, store.remote_stats()
    # A miss is proved by a binary search over the whole keys (docs/format.md §7.4): more rounds.
    absent = [i[:-1] + "x" for i in ids[:5]]
    assert list(store.get_many(absent + ids[:3])) == ids[:3]
    assert store.get(absent[0]) is None


def test_a_version_2_store_reads_remotely_in_three_rounds(s3, tmp_path):
    # Before format 3 the key index gave a position only: its doc offsets come between.
    path = tmp_path / "v2.docstore"
    rng = np.random.default_rng(5)
    docs = {f"v{i:05d}": {"raw": rng.bytes(int(rng.integers(500, 3500)))} for i in range(2000)}
    write_store(path, docs, fields={"raw": "bytes"}, level=-1, format_version=2).close()
    store = open_remote(s3.upload(str(path), "v2.docstore"), tmp_path / "cache")
    assert store.info()["format_version"] == 2
    opened = store.remote_stats()["round_trips"]
    assert store["v01234"].raw == docs["v01234"]["raw"]
    assert store.remote_stats()["round_trips"] - opened == 3, store.remote_stats()
    ids = list(docs)
    got = store.get_many(ids[::-3])
    assert list(got) == ids[::-3] and all(doc.raw == docs[i]["raw"] for i, doc in got.items())
    assert [d.doc_id for d in store.take(range(0, 2000, 7))] == ids[::7]


def test_warm_cache_is_shared_and_keyed_by_fingerprint(url, s3, local, docs, tmp_path):
    cache = tmp_path / "cache"
    first = open_remote(url, cache)
    first.get_many(list(docs))
    first.take(range(len(docs)))
    second = open_remote(url, cache)
    opened = second.remote_stats()["requests"]
    assert opened == 1, "a warm open asks for the header only (it names the cache entry)"
    second.get_many(list(docs))
    second.take(range(len(docs)))
    assert second.remote_stats()["requests"] == 1
    # The object replaced by another store: another fingerprint, another cache entry.
    other = {k: {**v, "text": v["text"] + " (new)"} for k, v in list(docs.items())[:50]}
    path = tmp_path / "other.docstore"
    write_store(path, other).close()
    s3.upload(str(path), "replaced.docstore")
    replaced = open_remote(f"s3://{BUCKET}/replaced.docstore", cache)
    s3.upload(local, "replaced.docstore")
    again = open_remote(f"s3://{BUCKET}/replaced.docstore", cache)
    assert again.fingerprint != replaced.fingerprint
    doc_id = next(iter(docs))
    assert again[doc_id].text == docs[doc_id]["text"]
    assert len(os.listdir(cache)) >= 3  # usage + two entries


def test_object_replaced_while_open_is_a_changed_store_not_its_documents(s3, local, docs, tmp_path):
    """Every range asks for the object opened (If-Match its ETag): bytes of an object replaced
    since are refused as StoreChangedError, never read as documents, even where the new object
    has the same ids, sizes and layout (its texts differ in one letter)."""
    s3.upload(local, "swapped.docstore")
    store = open_remote(f"s3://{BUCKET}/swapped.docstore", tmp_path / "cache")
    ids = list(docs)
    assert_doc_equal(store[ids[0]], ids[0], docs[ids[0]])
    swapped = {k: {**v, "text": v["text"].swapcase()} for k, v in docs.items()}
    path = tmp_path / "swapped.docstore"
    write_store(path, swapped).close()
    s3.upload(str(path), "swapped.docstore")
    with pytest.raises(docstore.StoreChangedError, match="swapped.docstore was replaced since it was opened"):
        store.get_many(ids[1:])
    with pytest.raises(docstore.StoreChangedError):
        store.take(range(1, len(ids)))
    again = open_remote(f"s3://{BUCKET}/swapped.docstore", tmp_path / "cache")
    found = again.get_many(ids[1:4])
    assert [found[i].text for i in ids[1:4]] == [swapped[i]["text"] for i in ids[1:4]]


def test_no_cache_keeps_nothing_on_disk(url, docs, tmp_path):
    cache = tmp_path / "cache"
    store = docstore.open(url, cache_dir=str(cache), cache_bytes=0, storage_options=FAST)
    doc_id = list(docs)[5]
    assert_doc_equal(store[doc_id], doc_id, docs[doc_id])
    assert not cache.exists()


def test_collection_on_s3_reads_as_the_local_collection(s3, collection, docs, tmp_path):
    url = s3.upload(collection, "coll.docstore")
    for form in (url, url + "/"):
        store = open_remote(form, tmp_path / "cache")
        check_same(store, collection, docs)
        info = store.info()
        assert [s["path"] for s in info["shards"]] == [
            f"{url}/shards/{os.path.basename(s['path'])}" for s in info["shards"]
        ]
    stats = store.remote_stats()
    assert stats["round_trips"] > 0
    store.close()
    single = open_remote(url, tmp_path / "cache2")
    doc_id = list(docs)[700]
    before = single.remote_stats()["round_trips"]
    assert_doc_equal(single[doc_id], doc_id, docs[doc_id])
    # The index's key block, then the blob it locates in the shard (at most).
    assert single.remote_stats()["round_trips"] - before <= 2


def test_plain_http_server_with_ranges(local, collection, docs, tmp_path):
    root = os.path.dirname(local)
    server = RangeHTTPServer(root)
    try:
        store = open_remote(f"{server.url}/{os.path.basename(local)}", tmp_path / "cache")
        check_same(store, local, docs)
    finally:
        server.stop()
    server = RangeHTTPServer(os.path.dirname(collection))
    try:
        store = open_remote(f"{server.url}/{os.path.basename(collection)}", tmp_path / "cache")
        check_same(store, collection, docs)
    finally:
        server.stop()


def test_missing_object_and_bad_options(s3, tmp_path):
    with pytest.raises(docstore.StoreNotFoundError, match="nothing-here"):
        open_remote(f"s3://{BUCKET}/nothing-here.docstore", tmp_path / "c")
    with pytest.raises(docstore.InvalidArgumentError, match="no_such_option"):
        open_remote(f"s3://{BUCKET}/x.docstore", tmp_path / "c", no_such_option="1")
    with pytest.raises(ValueError, match="remote"):
        docstore.open(str(tmp_path / "x.docstore"), cache_bytes=10)


def test_faults_are_retried_and_nothing_wrong_is_returned(s3, url, local, docs, tmp_path):
    proxy = FaultProxy("127.0.0.1", s3.port, seed=1)
    try:
        with environment({"AWS_ENDPOINT_URL": proxy.url}):
            proxy.faults = ["503", "drop", "truncate"]
            # Piece by piece (no section fetched whole: many small requests to fail), then as
            # by default (whole sections: long responses cut short).
            store = open_remote(url, tmp_path / "cache", max_retries="8", request_cost_bytes="0")
            proxy.rate = 0.3
            check_same(store, local, docs)
            check_same(open_remote(url, tmp_path / "cache2", max_retries="8"), local, docs)
            assert sum(proxy.injected.values()) > 10, proxy.injected
            assert set(proxy.injected) == {"503", "drop", "truncate"}

            # A server that keeps failing: a bounded wait, then StoreIOError naming the URL.
            proxy.rate, proxy.kinds = 0.0, ("503",)
            dead = open_remote(url, tmp_path / "cache3", max_retries="2", retry_timeout="3s")
            proxy.rate = 1.0
            started = time.monotonic()
            with pytest.raises(docstore.StoreIOError, match=r"corpus\.docstore"):
                dead[list(docs)[1]]
            assert time.monotonic() - started < 30
    finally:
        proxy.stop()


def test_a_delayed_server_times_out(s3, url, docs, tmp_path):
    proxy = FaultProxy("127.0.0.1", s3.port)
    try:
        with environment({"AWS_ENDPOINT_URL": proxy.url}):
            store = open_remote(url, tmp_path / "cache", timeout="500ms", max_retries="1", retry_timeout="2s")
            proxy.delay = 3.0
            proxy.faults = ["delay"] * 100
            started = time.monotonic()
            with pytest.raises(docstore.StoreIOError):
                store[list(docs)[9]]
            assert time.monotonic() - started < 20
    finally:
        proxy.stop()


def test_pickle_carries_url_and_options_not_secrets(url, docs, tmp_path):
    store = docstore.open(
        url,
        cache_dir=str(tmp_path / "cache"),
        storage_options={**FAST, "aws_secret_access_key": "testing", "aws_access_key_id": "testing"},
    )
    blob = pickle.dumps(store)
    assert b"aws_secret_access_key" not in blob and url.encode() in blob
    again = pickle.loads(blob)  # credentials from the environment
    doc_id = list(docs)[11]
    assert_doc_equal(again[doc_id], doc_id, docs[doc_id])
    assert again.fingerprint == store.fingerprint
    explicit = docstore.open(
        url,
        cache_dir=str(tmp_path / "cache"),
        storage_options={"aws_secret_access_key": "testing"},
        pickle_credentials=True,
    )
    assert b"aws_secret_access_key" in pickle.dumps(explicit)


def run_python(code: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **env, "PYTHONPATH": PYTHONPATH},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.fixture(scope="module")
def big(s3, tmp_path_factory):
    """A store of ~8 MB (incompressible documents): eight cache segments and more."""
    rng = np.random.default_rng(7)
    path = tmp_path_factory.mktemp("big") / "big.docstore"
    with docstore.Writer(path, fields={"raw": "bytes", "n": "int64"}, level=-1) as writer:
        for i in range(4000):
            writer.add(f"big{i:05d}", {"raw": rng.bytes(int(rng.integers(500, 3500))), "n": i})
    return str(path), s3.upload(str(path), "big.docstore")


def test_processes_share_one_cache_while_it_evicts(big, tmp_path):
    local, url = big
    cache = tmp_path / "cache"
    code = f"""
        import sys, time, numpy as np, docstore
        from docstore._store import _same
        remote = docstore.open({url!r}, cache_dir={str(cache)!r}, cache_bytes=1 << 20,
                               storage_options={{**{FAST!r}, "cache_lease": "0s"}})
        local = docstore.open({local!r})
        rng = np.random.default_rng(int(sys.argv[1]))
        ids = list(local)
        # A window that sweeps the store: what it left behind ages past the lease and goes.
        for step in range(60):
            window = (step * 80 + int(sys.argv[1]) * 20) % (len(ids) - 100)
            batch = [ids[i] for i in window + rng.integers(0, 100, 40)]
            time.sleep(0.05)
            got = remote.get_many(batch)
            want = local.get_many(batch)
            assert list(got) == list(want)
            assert all(_same(got[k], want[k]) for k in want)
            for p in window + rng.integers(0, 100, 5):
                assert _same(remote.at(int(p)), local.at(int(p)))
        print(remote.remote_stats())
    """
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code), str(seed)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": PYTHONPATH},
        )
        for seed in range(4)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, out + err
    entry = next(p for p in cache.iterdir() if p.is_dir())
    stored = os.path.getsize(local)
    held = os.stat(entry / "data").st_blocks * 512
    assert held < stored / 2, (held, stored)  # evicted: holes where segments were


def test_budget_bounds_the_directory_not_only_the_stores_being_read(big, url, local, docs, tmp_path):
    """A store no process reads any more gives its bytes back when another store needs room:
    the budget is the directory's."""
    big_local, big_url = big
    cache = tmp_path / "cache"
    # Its reader's lease is the shortest (2 s): a sweep from another entry honours the longest
    # lease that any reader of an entry asked for.
    first = docstore.open(
        big_url, cache_dir=str(cache), cache_bytes=1 << 30, storage_options={**FAST, "cache_lease": "0s"}
    )
    first.take(range(len(first)))
    entry = next(p for p in cache.iterdir() if p.is_dir())
    held = os.stat(entry / "data").st_blocks * 512
    assert held >= os.path.getsize(big_local) * 0.9
    first.close()
    # Its segments must age past the shortest lease (2 s) before a sweep may take them: the
    # lease, not a synchronisation, is what is waited for.
    time.sleep(3)
    second = docstore.open(
        url, cache_dir=str(cache), cache_bytes=1 << 20, storage_options={**FAST, "cache_lease": "0s"}
    )
    check_same(second, local, docs)
    left = os.stat(entry / "data").st_blocks * 512
    assert left < held / 4, (left, held)  # the idle entry was swept: holes where its segments were
    assert second.remote_stats()["requests"] > 0


def test_forked_dataloader_worker_reads_after_its_parent(url, docs, tmp_path):
    pytest.importorskip("torch")
    code = f"""
        import multiprocessing, docstore, torch
        from docstore.torch import DocDataset
        store = docstore.open({url!r}, cache_dir={str(tmp_path / "cache")!r},
                              storage_options={FAST!r})
        first = store.at(0)  # the parent has read: its runtime and client exist
        ds = DocDataset(store, field="text")
        loader = torch.utils.data.DataLoader(
            ds, batch_size=16, num_workers=2, multiprocessing_context="fork",
            collate_fn=lambda b: b, timeout=60)
        texts = [t for batch in loader for t in batch]
        assert texts == store.take(range(len(store)), field="text")
        # And a store inherited as such, read in a forked child.
        pid = __import__("os").fork()
        if pid == 0:
            ok = store.at(len(store) - 1).doc_id == store.at(-1).doc_id
            __import__("os")._exit(0 if ok else 3)
        _, status = __import__("os").waitpid(pid, 0)
        assert __import__("os").WEXITSTATUS(status) == 0
        print("ok")
    """
    assert "ok" in run_python(code, {}, timeout=180).stdout


def test_cli_on_a_remote_store(url, local, docs, tmp_path):
    env = {"DOCSTORE_CACHE_DIR": str(tmp_path / "cache")}
    cli = [sys.executable, "-m", "docstore.cli"]

    def run(*args: str) -> str:
        proc = subprocess.run(
            [*cli, *args],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, **env, "PYTHONPATH": PYTHONPATH},
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    info = json.loads(run("info", url, "--json"))
    assert info["count"] == len(docs) and info["path"] == url
    doc_id = list(docs)[4]
    assert json.loads(run("get", url, doc_id))["doc_id"] == doc_id
    assert "OK" in run("verify", url)
    out = tmp_path / "out.jsonl"
    run("export", url, "-o", str(out))
    local_out = tmp_path / "local.jsonl"
    run("export", local, "-o", str(local_out))
    assert out.read_text() == local_out.read_text()


def test_threads_share_a_remote_store(url, docs, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    store = open_remote(url, tmp_path / "cache")
    ids = list(docs)

    def read(i: int) -> bool:
        batch = ids[i::8]
        got = store.get_many(batch)
        return all(got[k].doc_id == k for k in batch) and len(got) == len(batch)

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(read, range(8)))


def test_threads_that_start_together_fetch_each_byte_once(tmp_path):
    # Threads that lack the same index pieces at once (a PrefetchSampler's loading threads) merge
    # them into requests over most of each section: four of them fetched every section four
    # times. A thread now waits for what another's requests are bringing (storage/remote/flight).
    from concurrent.futures import ThreadPoolExecutor
    from threading import Barrier

    docs = make_docs(6000, seed=5)
    write_store(tmp_path / "s.docstore", docs).close()
    server = RangeHTTPServer(str(tmp_path), latency=0.05, etag="strong")  # rounds overlap
    try:
        store = open_remote(f"{server.url}/s.docstore", tmp_path / "cache")
        rng = np.random.default_rng(4)
        batches = [rng.choice(len(docs), 300, replace=False) for _ in range(4)]
        together = Barrier(len(batches))

        def load(positions) -> int:
            together.wait()
            return store.prefetch(positions)

        with ThreadPoolExecutor(len(batches)) as pool:
            assert all(n > 0 for n in pool.map(load, batches))
        stats = store.remote_stats()
        assert stats["bytes"] <= stats["cache_bytes_held"], stats  # nothing fetched twice
        ids = list(docs)
        before = stats["requests"]
        for positions in batches:
            assert [d.doc_id for d in store.take(positions)] == [ids[p] for p in positions]
        assert store.remote_stats()["requests"] == before  # all of it was loaded
    finally:
        server.stop()


def test_torch_dataset_pickles_a_remote_store(url, docs, tmp_path):
    pytest.importorskip("torch")
    from docstore.torch import DocDataset

    store = open_remote(url, tmp_path / "cache")
    ds = DocDataset(store, field="text")
    again = pickle.loads(pickle.dumps(ds))
    assert again[3] == ds[3] == store.at(3, field="text")
    assert again.path == url
