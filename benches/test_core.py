"""Core store benchmarks: docstore side by side with the systems a user would pick instead.

Groups (``--benchmark-group-by=group,param:corpus`` is the default here):

* ``get``      1000 random single lookups by id per round (``conftest.GET_LOOKUPS``)
* ``get_many`` one ``get_many`` of 1000 random distinct ids per round (``BATCH``)
* ``build``    build from the same Python list of records (docstore also from a pyarrow
  Table via ``Writer.add_many`` and from columns); one fresh directory per round
* ``size``     bytes on disk (in ``extra_info``; the timing is a meaningless stat call)
* ``threads``  16 get_many batches of 1000 ids per round (``THREAD_BATCHES``), done by one
  pool thread vs split over two; systems that are not thread-safe get a handle per thread

Run: ``DOCSTORE_BENCH_QUICK=1 pytest benches`` (100k passages) or see ``benches/report.py``;
``pytest benches --benchmark-disable`` runs every case once, as a smoke test.
Every benchmark stores ``extra_info`` (system, corpus, n_docs, ops per round, ...) that
``report.py`` turns into throughputs and ratios.
"""

from __future__ import annotations

import itertools
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

# docstore:level-1 (documents stored uncompressed) shows what decoding costs a lookup
GET_SYSTEMS = ["docstore", "docstore:field", "docstore:level-1", "ir_datasets", "indexed-tsv", "dict"]
GET_MANY_SYSTEMS = ["docstore", "docstore:docs", "docstore:level-1", "ir_datasets", "indexed-tsv", "dict"]
# docstore:level0 and level-1 show the other end of the build speed / size trade-off (lz4 fast
# mode; no compression)
BUILD_SYSTEMS = [
    "docstore",
    "docstore:level0",
    "docstore:level-1",
    "docstore:arrow",
    "docstore:columns",
    "ir_datasets",
    "indexed-tsv",
    "dict",
]
SIZE_SYSTEMS = ["docstore", "docstore:level0", "docstore:level-1", "ir_datasets", "indexed-tsv", "dict"]
# docstore:t1 decodes each batch in its calling thread (`set_num_threads(1)`): with the default
# pool one calling thread already keeps every core busy, so only t1 shows what the GIL release
# gives threads of a user's own.
THREAD_SYSTEMS = ["docstore", "docstore:t1", "ir_datasets", "indexed-tsv", "dict"]


def _info(benchmark, system, corpus, **extra):
    benchmark.extra_info.update(system=system, corpus=corpus.name, n_docs=corpus.n, **extra)


def _docstore_threads(system: str) -> dict:
    """docstore's own decode pool size, recorded with each docstore benchmark."""
    if not system.startswith("docstore"):
        return {}
    import docstore

    return {"docstore_num_threads": docstore.get_num_threads()}


def _check(bench, system, corpus, got: dict, ids):
    """Results must be right before they are timed."""
    for i in ids:
        want = bench.expected_text(system, corpus.by_id[i])
        assert got[i] == want, f"{system}: wrong text for {i!r}"


@pytest.mark.benchmark(group="get")
@pytest.mark.parametrize("system", GET_SYSTEMS)
def test_get(benchmark, bench, built, corpus, system):
    peer = bench.require_peer(system)
    store = built.open(peer, corpus)
    ids = corpus.sample_ids(bench.get_lookups, seed=1, unique=False)
    get = peer.get_field if system == "docstore:field" else peer.get
    _check(bench, system, corpus, {i: get(store, i) for i in ids[:20]}, ids[:20])

    def run():
        for i in ids:
            get(store, i)

    _info(benchmark, system, corpus, ops=len(ids), unit="lookups", **_docstore_threads(system))
    benchmark(run)


@pytest.mark.benchmark(group="get_many")
@pytest.mark.parametrize("system", GET_MANY_SYSTEMS)
def test_get_many(benchmark, bench, built, corpus, system):
    peer = bench.require_peer(system)
    store = built.open(peer, corpus)
    ids = corpus.sample_ids(bench.batch, seed=2)
    if system == "docstore:docs":
        got = peer.get_many_docs(store, ids)
        assert len(got) == len(ids)
        _check(bench, system, corpus, {i: d.text for i, d in got.items()}, ids)
        fn = peer.get_many_docs
    else:
        got = peer.get_many(store, ids)
        assert len(got) == len(ids), f"{system}: get_many returned {len(got)} of {len(ids)}"
        _check(bench, system, corpus, got, ids)
        fn = peer.get_many

    _info(benchmark, system, corpus, ops=len(ids), unit="docs", **_docstore_threads(system))
    benchmark(fn, store, ids)


_round = itertools.count()


@pytest.mark.benchmark(group="build")
@pytest.mark.parametrize("system", BUILD_SYSTEMS)
def test_build(benchmark, bench, tmp_path, corpus, system):
    peer = bench.require_peer(system)
    records = corpus.records
    if system == "docstore:arrow":
        table = corpus.arrow_table()

        def target(path):
            peer.close(peer.build_arrow(path, table))
    elif system == "docstore:columns":
        ids = corpus.ids
        texts = [r["text"] for r in records]

        def target(path):
            peer.close(peer.build_columns(path, ids, texts))
    else:

        def target(path):
            peer.close(peer.build(path, records))

    dirs = []

    def setup():
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)
        d = tmp_path / f"build{next(_round)}"
        dirs.append(d)
        return (d,), {}

    rounds = 1 if corpus.n >= 200_000 else 3
    _info(
        benchmark,
        system,
        corpus,
        ops=corpus.n,
        unit="docs",
        raw_text_bytes=corpus.raw_text_bytes,
        **_docstore_threads(system),
    )
    try:
        benchmark.pedantic(target, setup=setup, rounds=rounds, iterations=1)
        if not peer.in_memory:
            # the build must be readable and complete
            store = peer.open(dirs[-1])
            some = corpus.sample_ids(5, seed=3)
            _check(bench, system, corpus, {i: peer.get(store, i) for i in some}, some)
            peer.close(store)
    finally:
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)


@pytest.mark.benchmark(group="size")
@pytest.mark.parametrize("system", SIZE_SYSTEMS)
def test_size(benchmark, bench, built, corpus, system):
    peer = bench.require_peer(system)
    if peer.in_memory:
        pytest.skip(f"{system} keeps everything in memory: nothing on disk")
    path = built.path(peer, corpus)
    size = peer.size_on_disk(path)
    extra = {}
    if system == "docstore":
        store = built.open(peer, corpus)
        info = getattr(store, "info", None)
        if info is not None:
            extra["store_info"] = {k: v for k, v in info().items() if isinstance(v, (int, float, str, bool))}
    _info(
        benchmark,
        system,
        corpus,
        size_bytes=size,
        raw_text_bytes=corpus.raw_text_bytes,
        raw_id_bytes=corpus.raw_id_bytes,
        x_raw=size / corpus.raw_text_bytes,
        **extra,
    )
    benchmark.pedantic(peer.size_on_disk, args=(path,), rounds=1, iterations=1)


@pytest.fixture(scope="module")
def pool():
    with ThreadPoolExecutor(max_workers=2) as ex:
        yield ex


@pytest.mark.benchmark(group="threads")
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("system", THREAD_SYSTEMS)
def test_threads(benchmark, bench, built, corpus, pool, system, threads):
    peer = bench.require_peer(system)
    store = built.open(peer, corpus)
    path = built.path(peer, corpus)
    # systems that are not thread-safe get one handle per thread, as their users must do
    handles = [store] + [peer.for_thread(store, path) for _ in range(threads - 1)]
    batches = [corpus.sample_ids(bench.batch, seed=100 + b) for b in range(bench.thread_batches)]
    get_many = peer.get_many
    errors: list[BaseException] = []
    lock = threading.Lock()

    def work(handle, my_batches):
        try:
            for b in my_batches:
                if len(get_many(handle, b)) != len(b):
                    raise AssertionError(f"{system}: short get_many result")
        except BaseException as e:  # surfaced below, not swallowed by the pool
            with lock:
                errors.append(e)

    # the same total work either way, always on pool threads; the caller only waits
    parts = [(handles[t], batches[t::threads]) for t in range(threads)]

    def run():
        for f in [pool.submit(work, *p) for p in parts]:
            f.result()

    try:
        with peer.lookup_threads():
            run()  # warm-up
            assert not errors, errors[0]
            _info(
                benchmark,
                system,
                corpus,
                ops=bench.batch * bench.thread_batches,
                unit="docs",
                threads=threads,
                note=peer.thread_note,
                **_docstore_threads(system),
            )
            benchmark(run)
            assert not errors, errors[0]
    finally:
        for h in handles[1:]:
            peer.close_thread_handle(h, store)
