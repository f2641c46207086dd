"""What the checked reads cost: the same corpus built as format 1 (no per-document checks), format 2
(checked) and format 3 (the default: checked, and each key index entry locates its document), hot
lookups side by side in one run.

Groups: ``integrity:get`` (random single lookups by id, ``store[id].<field>``),
``integrity:get_many`` (one ``get_many`` of 1024 random distinct ids), ``integrity:take`` (one
``take`` of 1024 random positions), ``integrity:miss`` (lookups of absent ids: formats 2 and 3
confirm each absence, docs/format.md §7.4). The question: are the checked formats within 5% of
format 1 on hits?
"""

from __future__ import annotations

import pytest

from . import compare as C
from .peers import DocstoreStore, batch_values, values_equal

VERSIONS = [3, 2, 1]


@pytest.fixture(scope="module")
def versions(corpus, tmp_path_factory):
    """{format version: (open store, Ops)} for the current corpus, built in this process."""
    pytest.importorskip("docstore", reason="docstore is not installed")
    if "docstore" not in C.SYSTEMS:
        pytest.skip("docstore not selected (DOCSTORE_BENCH_PEERS)")
    root = tmp_path_factory.mktemp("integrity")
    records = corpus.records()
    built = {}
    for version in VERSIONS:
        peer = DocstoreStore(format_version=version)
        store = peer.build(root / f"{corpus.name}-v{version}", records, corpus.field)
        built[version] = (store, peer.ops(store, corpus.field))
    del records
    yield built
    for store, _ in built.values():
        store.close()


def _run(benchmark, corpus, version, workload, keys, run):
    benchmark.extra_info.update(
        system=f"docstore:format{version}",
        corpus=corpus.name,
        n_docs=corpus.n,
        workload=workload,
        ops=len(keys),
        unit="docs",
    )
    benchmark.pedantic(run, rounds=C.timed_rounds(run), iterations=1)


def _same(got, want) -> bool:
    return len(got) == len(want) and all(values_equal(a, b) for a, b in zip(got, want))


@pytest.mark.benchmark(group="integrity:get")
@pytest.mark.parametrize("version", VERSIONS)
def test_get(benchmark, versions, corpus, version):
    ops = versions[version][1]
    ids = corpus.sample_ids(C.SINGLE_LOOKUPS, 11)
    assert _same([ops.get(i) for i in ids[:20]], [corpus.by_id[i] for i in ids[:20]])
    get = ops.get

    def run():
        for i in ids:
            get(i)

    _run(benchmark, corpus, version, "get", ids, run)


@pytest.mark.benchmark(group="integrity:get_many")
@pytest.mark.parametrize("version", VERSIONS)
def test_get_many(benchmark, versions, corpus, version):
    ops = versions[version][1]
    ids = corpus.distinct_ids(C.BATCH_DOCS, 20)
    assert _same(batch_values(ops.get_many(ids), ids), [corpus.by_id[i] for i in ids])
    _run(benchmark, corpus, version, "get_many", ids, lambda: ops.get_many(ids))


@pytest.mark.benchmark(group="integrity:take")
@pytest.mark.parametrize("version", VERSIONS)
def test_take(benchmark, versions, corpus, version):
    ops = versions[version][1]
    positions = corpus.distinct_positions(C.BATCH_DOCS, 3)
    assert _same(ops.take(positions), [corpus.values[p] for p in positions])
    _run(benchmark, corpus, version, "take", positions, lambda: ops.take(positions))


@pytest.mark.benchmark(group="integrity:miss")
@pytest.mark.parametrize("version", VERSIONS)
def test_miss(benchmark, versions, corpus, version):
    store = versions[version][0]
    absent = [i + "-absent" for i in corpus.sample_ids(C.SINGLE_LOOKUPS, 4)]
    assert all(store.get(i) is None for i in absent[:20])
    get = store.get

    def run():
        for i in absent:
            get(i)

    _run(benchmark, corpus, version, "miss", absent, run)
