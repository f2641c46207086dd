"""What reading and building a collection costs against one store file of the same documents,
side by side in one run.

Groups:

* ``collection:get`` -- 1000 random ``store[id].text`` per round: one file, and a collection of
  64 shards (one search in its global id index, then the shard's document). The bar: at least
  0.8x the single file's throughput.
* ``collection:get_many`` -- one ``get_many`` of 1000 random distinct ids (``field="text"``): the
  ids span every shard; the batch is read shard by shard and put back in request order.
* ``collection:take`` -- one ``take`` of 1000 random positions.
* ``collection:open`` -- ``docstore.open`` of the 64-shard collection and of one built from a
  tenth of the documents: open reads the manifest and each file's header, schema and dictionary,
  so its cost follows the number of shards, not of documents.
* ``collection:build`` -- ``docstore build`` of the corpus as JSON lines: one file, and
  ``--shards 8`` (8 processes, sealed). ``extra_info`` holds the CPU-seconds of every process
  (``cpu_s``): sharding must not waste work (at most 1.1x the single build's CPU and wall time
  on 2 cores, where the single build already keeps ~1.8 cores busy).

Run: ``DOCSTORE_BENCH_CORPORA=msmarco_like pytest benches/test_collections.py`` (1M passages; add
``DOCSTORE_BENCH_QUICK=1`` for 100k).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

import pytest

SHARDS = 64


def _split(records: list, k: int) -> list[list]:
    step = -(-len(records) // k)
    return [records[i : i + step] for i in range(0, len(records), step)]


@pytest.fixture(scope="module")
def stores(corpus, tmp_path_factory):
    docstore = pytest.importorskip("docstore")
    root = tmp_path_factory.mktemp("collections")
    records = corpus.records
    single = docstore.build(root / "one.docstore", records)
    shards = []
    for k, part in enumerate(_split(records, SHARDS)):
        shards.append(root / f"part-{k}.docstore")
        docstore.build(shards[-1], part).close()
    collection = docstore.seal(root / "c.docstore", shards)
    tenth = _split(records[: len(records) // 10], SHARDS)
    small_shards = [docstore.build(root / f"s-{k}.docstore", part).path for k, part in enumerate(tenth)]
    small = docstore.seal(root / "small.docstore", small_shards)
    yield {"one file": single, f"{SHARDS} shards": collection, "small": small}
    for store in (single, collection, small):
        store.close()


KINDS = ["one file", f"{SHARDS} shards"]


def _info(benchmark, corpus, kind, ops):
    benchmark.extra_info.update(
        system=f"docstore:{kind}", corpus=corpus.name, n_docs=corpus.n, ops_per_round=ops
    )


@pytest.mark.benchmark(group="collection:get")
@pytest.mark.parametrize("kind", KINDS)
def test_get(benchmark, stores, corpus, kind):
    store = stores[kind]
    ids = corpus.sample_ids(1000, seed=1, unique=False)
    assert [store[i].text for i in ids[:20]] == [corpus.by_id[i] for i in ids[:20]]
    _info(benchmark, corpus, kind, len(ids))

    def run():
        for i in ids:
            store[i].text  # noqa: B018 - the lookup is what is timed

    benchmark(run)


@pytest.mark.benchmark(group="collection:get_many")
@pytest.mark.parametrize("kind", KINDS)
def test_get_many(benchmark, stores, corpus, kind):
    store = stores[kind]
    ids = corpus.sample_ids(1000, seed=2)
    assert store.get_many(ids, field="text") == {i: corpus.by_id[i] for i in ids}
    _info(benchmark, corpus, kind, len(ids))
    benchmark(store.get_many, ids, field="text")


@pytest.mark.benchmark(group="collection:take")
@pytest.mark.parametrize("kind", KINDS)
def test_take(benchmark, stores, corpus, kind):
    import random

    store = stores[kind]
    positions = random.Random(3).sample(range(len(store)), min(1000, len(store)))
    _info(benchmark, corpus, kind, len(positions))
    benchmark(store.take, positions, field="text")


@pytest.mark.benchmark(group="collection:open")
@pytest.mark.parametrize("kind", [f"{SHARDS} shards", "small"])
def test_open(benchmark, stores, corpus, kind):
    import docstore

    path = stores[kind].path
    benchmark.extra_info.update(system=f"docstore:{kind}", corpus=corpus.name, n_docs=len(stores[kind]))
    benchmark(lambda: docstore.open(path).close())


@pytest.mark.benchmark(group="collection:build")
@pytest.mark.parametrize("shards", [1, 8])
def test_build(benchmark, corpus, tmp_path_factory, shards):
    """The CLI as a user runs it, in a child process: wall time, and the CPU-seconds of the
    build and its workers (``RUSAGE_CHILDREN``)."""
    root = tmp_path_factory.mktemp(f"build-{shards}")
    source = root / "in.jsonl"
    with open(source, "w", encoding="utf-8") as f:
        for record in corpus.records:
            f.write(json.dumps(record) + "\n")
    cpu: list[float] = []

    def run():
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        cmd = [sys.executable, "-m", "docstore.cli", "build", str(source), "-o", str(root / "out"), "-q"]
        subprocess.run([*cmd, "--overwrite", "--shards", str(shards)], check=True, capture_output=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)

    benchmark.pedantic(run, rounds=3, iterations=1)
    benchmark.extra_info.update(
        system=f"docstore build --shards {shards}",
        corpus=corpus.name,
        n_docs=corpus.n,
        cpu_s=min(cpu),
        cores=len(os.sched_getaffinity(0)),
    )
