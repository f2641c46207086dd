"""The number of requests in flight adapts to the server (docs/remote.md, "How many requests are
in flight"): it starts at 32, grows while the server keeps up, and backs off from one that slows
down, answers 503 or drops connections. Real servers on 127.0.0.1 that count their own load
(load.py); every figure asserted is a count, none a time."""

from __future__ import annotations

import random

import pytest

import docstore

from ..conftest import assert_doc_equal, make_docs, write_store
from ..support.remote_servers import environment
from .conftest import FAST
from .load import LoadedProxy, LoadedServer


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A store of 12,000 documents in a directory to serve: 300 random ids are ~300 requests
    for their blobs, after those for their key index blocks."""
    docs = make_docs(12_000, seed=5)
    root = tmp_path_factory.mktemp("limit")
    write_store(root / "corpus.docstore", docs).close()
    return root, docs


def read_batch(url, cache, docs, **options) -> dict:
    """A cold ``get_many`` of 300 random ids, checked; the store's counters."""
    store = docstore.open(url, cache_dir=str(cache), storage_options={**FAST, **options})
    ids = random.Random(0).sample(sorted(docs), 300)
    got = store.get_many(ids)
    assert list(got) == ids
    for doc_id in ids:
        assert_doc_equal(got[doc_id], doc_id, docs[doc_id])
    return store.remote_stats()


def test_the_limit_grows_to_the_allowed_depth_while_the_server_keeps_up(served, tmp_path):
    root, docs = served
    server = LoadedServer(str(root), latency=0.1)
    try:
        stats = read_batch(f"{server.url}/corpus.docstore", tmp_path / "cache", docs, max_in_flight="64")
    finally:
        server.stop()
    # From 32, two more for each answer while the latency holds: the bound within the batch.
    assert stats["peak_in_flight"] == 64, stats
    # Where the limit stands: within the bound (a loaded machine's latency may have pulled it
    # down since the peak).
    assert 1 <= stats["limit"] <= 64, stats
    assert server.load.peak > 32, server.load.peak


def test_a_server_that_slows_with_its_load_is_not_swamped(served, tmp_path):
    root, docs = served
    # Four workers, 50 ms a request: the latency grows with the requests waiting for them. They
    # answer 80 a second, far fewer than a client sends even on a loaded machine, so that a
    # fixed 256 queues past 100 there (at 10 ms a request, 400 a second, a loaded machine's
    # client and server threads kept the queue at 62-92).
    server = LoadedServer(str(root), latency=0.05, workers=4)
    try:
        read_batch(f"{server.url}/corpus.docstore", tmp_path / "a", docs)
        adaptive = server.load.peak
        server.load.reset()
        # Starting at 256, as every batch did before the limit adapted.
        read_batch(f"{server.url}/corpus.docstore", tmp_path / "b", docs, initial_in_flight="256")
        fixed = server.load.peak
    finally:
        server.stop()
    assert adaptive <= 48, adaptive
    assert fixed > 100, fixed


def test_a_server_that_drops_connections_past_its_capacity_is_backed_off_from(served, tmp_path):
    root, docs = served
    # Room for 16 at once: past that a connection is closed without an answer, as a server out
    # of threads or listen backlog drops it.
    server = LoadedServer(str(root), latency=0.01, capacity=16, refuse="drop")
    try:
        stats = read_batch(f"{server.url}/corpus.docstore", tmp_path / "cache", docs)
    finally:
        server.stop()
    load = server.load
    # The first 32 met the capacity (they and object_store's retries of them, until the 16 it
    # took were answered); after, only the limit's probes past it (an eighth of a request more
    # per answer) are dropped, and retried.
    assert load.peak <= 48, load.peak
    assert load.refused <= 64 + load.requests // 10, (load.refused, load.requests, stats)


def test_s3_answering_503_past_its_capacity_is_backed_off_from(s3, served, tmp_path):
    root, docs = served
    url = s3.upload(str(root / "corpus.docstore"), "limit/corpus.docstore")
    # S3 answers 503 SlowDown to more than it takes: here, past 16 requests at once.
    proxy = LoadedProxy("127.0.0.1", s3.port, capacity=16, refuse="503")
    try:
        with environment({"AWS_ENDPOINT_URL": proxy.url}):
            stats = read_batch(url, tmp_path / "cache", docs)
    finally:
        proxy.stop()
    load = proxy.load
    assert 0 < load.refused <= 64 + load.requests // 10, (load.refused, load.requests, stats)
    assert load.peak <= 48, load.peak
    assert stats["backoffs"] > 0, stats  # the 503 answers cut the limit
