"""What format v2's checked reads cost: the same corpus built as format 1 (no per-document checks)
and format 2, hot lookups side by side in one run.

Groups: ``integrity:get`` (1000 random ``store[id].text`` per round), ``integrity:get_many``
(one ``get_many`` of 1000 random distinct ids, ``field="text"``), ``integrity:take`` (one
``take`` of 1000 random positions), ``integrity:miss`` (1000 lookups of absent ids: format 2
confirms each absence, §7.4 of docs/format.md). The target: format 2 within 5% of format 1 on
hits (``benches/README.md``).

Run: ``DOCSTORE_BENCH_CORPORA=msmarco_like pytest benches/test_integrity.py`` (1M passages; add
``DOCSTORE_BENCH_QUICK=1`` for 100k).
"""

from __future__ import annotations

import random

import pytest

VERSIONS = [2, 1]


@pytest.fixture(scope="module")
def stores(corpus, tmp_path_factory):
    docstore = pytest.importorskip("docstore")
    root = tmp_path_factory.mktemp("integrity")
    built = {}
    for version in VERSIONS:
        path = root / f"{corpus.name}-v{version}.docstore"
        built[version] = docstore.build(path, corpus.records, format_version=version)
    yield built
    for store in built.values():
        store.close()


def _info(benchmark, corpus, version, ops):
    benchmark.extra_info.update(
        system=f"docstore:format{version}", corpus=corpus.name, n_docs=corpus.n, ops_per_round=ops
    )


@pytest.mark.benchmark(group="integrity:get")
@pytest.mark.parametrize("version", VERSIONS)
def test_get(benchmark, stores, corpus, version):
    store = stores[version]
    ids = corpus.sample_ids(1000, seed=1, unique=False)
    assert [store[i].text for i in ids[:20]] == [corpus.by_id[i] for i in ids[:20]]
    _info(benchmark, corpus, version, len(ids))

    def run():
        for i in ids:
            store[i].text  # noqa: B018 - the lookup is what is timed

    benchmark(run)


@pytest.mark.benchmark(group="integrity:get_many")
@pytest.mark.parametrize("version", VERSIONS)
def test_get_many(benchmark, stores, corpus, version):
    store = stores[version]
    ids = corpus.sample_ids(1000, seed=2)
    assert store.get_many(ids[:20], field="text") == {i: corpus.by_id[i] for i in ids[:20]}
    _info(benchmark, corpus, version, len(ids))
    benchmark(store.get_many, ids, field="text")


@pytest.mark.benchmark(group="integrity:take")
@pytest.mark.parametrize("version", VERSIONS)
def test_take(benchmark, stores, corpus, version):
    store = stores[version]
    positions = random.Random(3).sample(range(corpus.n), 1000)
    assert store.take(positions[:5], field="text") == [corpus.records[p]["text"] for p in positions[:5]]
    _info(benchmark, corpus, version, len(positions))
    benchmark(store.take, positions, field="text")


@pytest.mark.benchmark(group="integrity:miss")
@pytest.mark.parametrize("version", VERSIONS)
def test_miss(benchmark, stores, corpus, version):
    store = stores[version]
    absent = [i + "-absent" for i in corpus.sample_ids(1000, seed=4)]
    assert all(store.get(i) is None for i in absent[:20])
    _info(benchmark, corpus, version, len(absent))

    def run():
        for i in absent:
            store.get(i)

    benchmark(run)
