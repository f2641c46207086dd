"""What reading and building a collection costs against one store file of the same documents,
side by side in one run.

Groups:

* ``collection:get`` -- random single lookups by id (``store[id].<field>``): one file, and a
  collection of 64 shards (one search in its global id index, then the shard's document). The
  question: at least 0.8x the single file's throughput?
* ``collection:get_many`` -- one ``get_many`` of 1024 random distinct ids: the ids span every
  shard; the batch is read shard by shard and put back in request order.
* ``collection:take`` -- one ``take`` of 1024 random positions.
* ``collection:open`` -- ``docstore.open`` of the 64-shard collection and of one built from a
  tenth of the documents: open reads the manifest and each file's header, schema and dictionary,
  so its cost follows the number of shards, not of documents.
* ``collection:build`` -- ``docstore build`` of the corpus as JSON lines (text corpora): one
  file, and ``--shards 8`` (8 processes, sealed). ``extra_info`` holds the CPU-seconds of every
  process (``cpu_s``): does sharding waste work?
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys

import pytest

from . import compare as C
from .peers import DocstoreStore, batch_values, values_equal

SHARDS = 64
KINDS = ["one file", f"{SHARDS} shards", f"{SHARDS} shards, one dictionary"]


def _split(records: list, k: int) -> list[list]:
    step = -(-len(records) // k)
    return [records[i : i + step] for i in range(0, len(records), step)]


@pytest.fixture(scope="module")
def built(corpus, tmp_path_factory):
    """{kind: (open store or collection, Ops)} for the current corpus, built in this process."""
    docstore = pytest.importorskip("docstore", reason="docstore is not installed")
    if "docstore" not in C.SYSTEMS:
        pytest.skip("docstore not selected (DOCSTORE_BENCH_PEERS)")
    root = tmp_path_factory.mktemp("collections")
    peer = DocstoreStore()
    records = corpus.records()

    def build(name: str, part: list, **options):
        store = DocstoreStore(**options).build(root / name, part, corpus.field)
        store.close()
        return root / name / peer.FILE

    single = docstore.open(build("one", records))
    shards = [build(f"part-{k}", part) for k, part in enumerate(_split(records, SHARDS))]
    collection = docstore.seal(root / "c.docstore", shards)
    # The same shards written with one dictionary, as `docstore build --shards` writes them.
    dictionary = single.dictionary
    shared = [
        build(f"shared-{k}", part, dictionary=dictionary) for k, part in enumerate(_split(records, SHARDS))
    ]
    one_dictionary = docstore.seal(root / "shared.docstore", shared)
    tenth = _split(records[: max(SHARDS, len(records) // 10)], SHARDS)
    small = docstore.seal(root / "small.docstore", [build(f"s-{k}", part) for k, part in enumerate(tenth)])
    del records
    built = {
        "one file": single,
        f"{SHARDS} shards": collection,
        f"{SHARDS} shards, one dictionary": one_dictionary,
        "small": small,
    }
    yield {kind: (store, peer.ops(store, corpus.field)) for kind, store in built.items()}
    for store in built.values():
        store.close()


def _run(benchmark, corpus, kind, workload, keys, run):
    benchmark.extra_info.update(
        system=f"docstore:{kind}", corpus=corpus.name, n_docs=corpus.n, workload=workload, ops=len(keys)
    )
    benchmark.pedantic(run, rounds=C.timed_rounds(run), iterations=1)


def _same(got, want) -> bool:
    return len(got) == len(want) and all(values_equal(a, b) for a, b in zip(got, want))


@pytest.mark.benchmark(group="collection:get")
@pytest.mark.parametrize("kind", KINDS)
def test_get(benchmark, built, corpus, kind):
    get = built[kind][1].get
    ids = corpus.sample_ids(C.SINGLE_LOOKUPS, 11)
    assert _same([get(i) for i in ids[:20]], [corpus.by_id[i] for i in ids[:20]])

    def run():
        for i in ids:
            get(i)

    _run(benchmark, corpus, kind, "get", ids, run)


@pytest.mark.benchmark(group="collection:get_many")
@pytest.mark.parametrize("kind", KINDS)
def test_get_many(benchmark, built, corpus, kind):
    get_many = built[kind][1].get_many
    ids = corpus.distinct_ids(C.BATCH_DOCS, 20)
    assert _same(batch_values(get_many(ids), ids), [corpus.by_id[i] for i in ids])
    _run(benchmark, corpus, kind, "get_many", ids, lambda: get_many(ids))


@pytest.mark.benchmark(group="collection:take")
@pytest.mark.parametrize("kind", KINDS)
def test_take(benchmark, built, corpus, kind):
    take = built[kind][1].take
    positions = corpus.distinct_positions(C.BATCH_DOCS, 3)
    assert _same(take(positions), [corpus.values[p] for p in positions])
    _run(benchmark, corpus, kind, "take", positions, lambda: take(positions))


@pytest.mark.benchmark(group="collection:open")
@pytest.mark.parametrize("kind", [f"{SHARDS} shards", "small"])
def test_open(benchmark, built, corpus, kind):
    import docstore

    store = built[kind][0]
    path = store.path
    benchmark.extra_info.update(
        system=f"docstore:{kind}", corpus=corpus.name, n_docs=len(store), ops=1, shards=SHARDS
    )
    benchmark(lambda: docstore.open(path).close())


@pytest.mark.benchmark(group="collection:build")
@pytest.mark.parametrize("shards", [1, 8])
def test_build(benchmark, corpus, tmp_path_factory, shards):
    """The CLI as a user runs it, in a child process: wall time, and the CPU-seconds of the
    build and its workers (``RUSAGE_CHILDREN``)."""
    pytest.importorskip("docstore", reason="docstore is not installed")
    if corpus.kind != "text":
        pytest.skip("JSON lines carry text; token arrays would be inferred as another type")
    root = tmp_path_factory.mktemp(f"build-{shards}")
    source = root / "in.jsonl"
    with open(source, "w", encoding="utf-8") as f:
        for record in corpus.records():
            f.write(json.dumps(record) + "\n")
    cpu: list[float] = []

    def run():
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        cmd = [sys.executable, "-m", "docstore.cli", "build", str(source), "-o", str(root / "out"), "-q"]
        subprocess.run([*cmd, "--overwrite", "--shards", str(shards)], check=True, capture_output=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)

    benchmark.extra_info.update(
        system=f"docstore build --shards {shards}",
        corpus=corpus.name,
        n_docs=corpus.n,
        ops=corpus.n,
        shards=shards,
        cores=C.cores(),
    )
    benchmark.pedantic(run, rounds=1 if C.QUICK else 3, iterations=1)
    benchmark.extra_info["cpu_s"] = min(cpu)
