"""docstore side by side with every store a user would pick instead.

Systems: ``peers.COMPARE_PEERS`` (docstore, docstore with one decode thread, dict, indexed TSV,
ir_datasets file/mmap, LMDB, Lance, HF datasets, Arrow IPC plain/lz4, RocksDB via rocksdict,
litdata, numpy). A system whose package is missing, or that cannot store a corpus's values,
is skipped with the reason. Groups (``cmp:*``), each with ``extra_info`` that
``report.py`` turns into tables:

* ``cmp:build``   build in a subprocess from the same records: time, peak RSS, size on disk
* ``cmp:get_id``, ``cmp:get_pos``                       single lookups, hot cache
* ``cmp:batch64_id``, ``cmp:batch1024_id``, ``cmp:batch64_pos``, ``cmp:batch1024_pos``
                                                         batches of random ids / positions
* ``cmp:threads`` batches of 1024 ids on 1 and 2 threads (docstore: default pool and
  ``set_num_threads(1)``)
* ``cmp:open``    open + first lookup in a fresh process, at n/10 and n docs (msmarco_like)
* ``cmp:cold``    random lookups by id with the store's files evicted from the page cache
* ``cmp:fio``     the device: random 4 KiB O_DIRECT reads at queue depth 1 and 32
* ``cmp:decode``  memcpy and lz4 decompression of the corpus in memory vs docstore's decode
* ``cmp:loader``  torch DataLoader with 0-4 workers: samples/s, total PSS (main + workers)

Fixtures (``corpus``, ``stores``, ``pool``): ``conftest.py``; sizes and selections: ``compare.py``.
``DOCSTORE_BENCH_QUICK=1`` runs small corpora and short rounds (the whole ``pytest benches`` in a
few minutes). The floors of docstore's figures are ``test_floors.py``; the cost of format 2's
checked reads is ``test_integrity.py``; collections against one file, ``test_collections.py``;
``report.py`` renders them all.
"""

from __future__ import annotations

import json
import random
import struct
import time

import pytest

from . import compare as C
from .peers import COMPARE_PEERS, batch_values, values_equal

ALL_SYSTEMS = list(COMPARE_PEERS)
WORKLOADS = ["get_id", "get_pos", "batch64_id", "batch1024_id", "batch64_pos", "batch1024_pos"]


def _require(system: str, corpus: C.Corpus | None = None):
    peer = COMPARE_PEERS[system]
    if system not in C.SYSTEMS:
        pytest.skip(f"{system} not selected (DOCSTORE_BENCH_PEERS)")
    if corpus is not None and corpus.kind not in peer.kinds:
        pytest.skip(f"{system} stores {'/'.join(peer.kinds)} only, not {corpus.kind}")
    if peer.requires:
        dist = peer.dist or peer.requires
        pytest.importorskip(peer.requires, reason=f"{dist} is not installed (pip install {dist})")
    return peer


def _quick_subset(system: str, what: str) -> None:
    if C.QUICK and system not in C.QUICK_SUBSET:
        pytest.skip(f"quick mode: {what} for {', '.join(C.QUICK_SUBSET)} only (the full mode runs all)")


def _built(stores, system, corpus):
    """Path of the store (built in a subprocess on first use); skip if that build failed."""
    try:
        return stores.build(system, corpus.name)
    except RuntimeError as e:
        pytest.fail(f"{system}: build failed: {e}")


def _info(benchmark, system, corpus, **extra):
    benchmark.extra_info.update(
        system=system, corpus=corpus.name, n_docs=corpus.n, how=COMPARE_PEERS[system].how, **extra
    )


def _docstore_threads(system: str) -> dict:
    if not system.startswith("docstore"):
        return {}
    import docstore

    return {"docstore_num_threads": docstore.get_num_threads()}


def _check(system, corpus, got, want_keys, by_pos: bool):
    """Results must be right before they are timed: ``got`` (list or dict) against the corpus."""
    values = batch_values(got, want_keys)
    assert len(values) == len(want_keys), f"{system}: {len(values)} results for {len(want_keys)} keys"
    for v, k in zip(values, want_keys):
        want = C.expected(system, corpus.values[k] if by_pos else corpus.by_id[k])
        assert values_equal(v, want), f"{system}: wrong value for {k!r}"


# -- build -------------------------------------------------------------------------------------


@pytest.mark.benchmark(group="cmp:build")
@pytest.mark.parametrize("system", [s for s in ALL_SYSTEMS if s != "docstore:t1"])
def test_build(benchmark, stores, corpus, system):
    peer = _require(system, corpus)
    path, info = _built(stores, system, corpus)
    if not peer.in_memory:  # the build is complete and right
        h = peer.open(path)
        ops = peer.ops(h, corpus.field)
        ids = corpus.distinct_ids(20, seed=3)
        _check(system, corpus, [ops.get(i) for i in ids], ids, by_pos=False)
        peer.close(h)
    size = info.get("size_bytes")
    _info(
        benchmark,
        system,
        corpus,
        ops=corpus.n,
        unit="docs",
        raw_bytes=corpus.raw_bytes,
        size_bytes=size,
        x_raw=None if size is None else size / corpus.raw_bytes,
        build_s=info["build_s"],
        docs_per_s=corpus.n / info["build_s"],
        peak_rss=info["peak_rss"],
        rss_before=info["rss_before"],
        peak_rss_children=info["peak_rss_children"],
        workers_peak_rss=info.get("workers_peak_rss"),
    )
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)


# -- hot lookups -------------------------------------------------------------------------------


@pytest.mark.parametrize("workload", WORKLOADS)
@pytest.mark.parametrize("system", ALL_SYSTEMS)
def test_lookup(benchmark, stores, corpus, system, workload):
    peer = _require(system, corpus)
    if system == "docstore:t1" and workload.startswith("get_"):
        pytest.skip("single lookups decode in the calling thread anyway: same as docstore")
    benchmark.group = f"cmp:{workload}"
    if not peer.in_memory:
        _built(stores, system, corpus)
    h = stores.open(system, corpus)
    ops = peer.ops(h, corpus.field)
    by_pos = workload.endswith("_pos")
    draws = C.lookup_draws(corpus, workload)
    if workload.startswith("get_"):
        one, keys = (ops.at if by_pos else ops.get), draws[0]
        _check(system, corpus, [one(k) for k in keys[:20]], keys[:20], by_pos=by_pos)
        ops_n, batch = len(keys), 1
    else:
        many = ops.take if by_pos else ops.get_many
        for d in draws[:2]:
            _check(system, corpus, batch_values(many(d), d), d, by_pos=by_pos)
        ops_n, batch = sum(len(d) for d in draws), len(draws[0])
    run = C.lookup_round(ops, workload, draws)
    with COMPARE_PEERS[system].lookup_threads():
        rounds = C.timed_rounds(run)
        _info(
            benchmark,
            system,
            corpus,
            workload=workload,
            ops=ops_n,
            batch=batch,
            unit="docs",
            position_map=peer.position_map,
            **_docstore_threads(system),
        )
        benchmark.pedantic(run, rounds=rounds, iterations=1)


# -- threads -----------------------------------------------------------------------------------


@pytest.mark.benchmark(group="cmp:threads")
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("system", ALL_SYSTEMS)
def test_threads(benchmark, stores, corpus, pool, system, threads):
    peer = _require(system, corpus)
    if C.QUICK and corpus.name != C.MAIN_CORPUS:
        pytest.skip(f"quick mode: threads on {C.MAIN_CORPUS} only")
    path = None if peer.in_memory else _built(stores, system, corpus)[0]
    h = stores.open(system, corpus)
    handles = [h] + [peer.for_thread(h, path) for _ in range(threads - 1)]
    all_ops = [peer.ops(x, corpus.field) for x in handles]
    batches = C.thread_batches(corpus)
    _check(system, corpus, batch_values(all_ops[-1].get_many(batches[0]), batches[0]), batches[0], False)
    run = C.threads_round(pool, [o.get_many for o in all_ops], batches)

    try:
        with COMPARE_PEERS[system].lookup_threads():
            rounds = C.timed_rounds(run)
            paired = {}
            if threads == 2:  # the same batches on one thread, timed beside two in pairs
                one = C.threads_round(pool, [all_ops[0].get_many], batches)
                paired = {"paired_scaling": C.paired_scaling(one, run)}
            _info(
                benchmark,
                system,
                corpus,
                ops=C.BATCH_DOCS * C.THREAD_BATCHES,
                unit="docs",
                threads=threads,
                note=peer.thread_note,
                **paired,
                **_docstore_threads(system),
            )
            benchmark.pedantic(run, rounds=rounds, iterations=1)
    finally:
        for x in handles[1:]:
            peer.close_thread_handle(x, h)


# -- open time as the corpus grows -------------------------------------------------------------


@pytest.mark.benchmark(group="cmp:open")
@pytest.mark.parametrize("corpus", [C.MAIN_CORPUS], indirect=True)
@pytest.mark.parametrize("system", [s for s in ALL_SYSTEMS if s not in ("docstore:t1", "dict")])
def test_open(benchmark, stores, corpus, system):
    _require(system, corpus)
    _quick_subset(system, "open time")
    n_large = corpus.n
    n_small = max(1, n_large // 10)
    try:
        small, small_info = stores.build(system, corpus.name, n_small)
    except RuntimeError as e:
        pytest.fail(f"{system}: build of {n_small} docs failed: {e}")
    large, _ = _built(stores, system, corpus)
    doc_id = corpus.ids[0]  # the first ids of the generator are in both sizes
    res = C.run_worker(["open", system, corpus.field, doc_id, str(small), str(large)])
    _info(
        benchmark,
        system,
        corpus,
        n_small=n_small,
        n_large=n_large,
        open_s_small=res["open_s"][str(small)],
        open_s_large=res["open_s"][str(large)],
        build_small=small_info,
    )
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)


# -- cold cache --------------------------------------------------------------------------------

_COLD: dict[tuple[str, str], dict] = {}


@pytest.mark.benchmark(group="cmp:cold")
@pytest.mark.parametrize("corpus", [C.MAIN_CORPUS], indirect=True)
@pytest.mark.parametrize("workload", ["get_id", "batch1024_id"])
@pytest.mark.parametrize("system", ALL_SYSTEMS)
def test_cold(benchmark, stores, corpus, system, workload):
    """Lookups by id after the store's files were dropped from the page cache, in a subprocess
    (``worker.py cold``: no other handle of this process maps the files); both workloads in one
    subprocess per system."""
    peer = _require(system, corpus)
    if peer.in_memory:
        pytest.skip(f"{system} lives in process memory: no page cache to drop")
    _quick_subset(system, "cold cache")
    path, _ = _built(stores, system, corpus)
    key = (system, corpus.name)
    if key not in _COLD:
        rng = random.Random(7)
        rounds = C.COLD_ROUNDS + 1  # round 0 is checked, not timed
        single = [[corpus.ids[rng.randrange(corpus.n)] for _ in range(C.COLD_LOOKUPS)] for _ in range(rounds)]
        batch = [rng.sample(corpus.ids, min(C.COLD_BATCH, corpus.n)) for _ in range(rounds)]
        if system == "docstore:t1":
            single = []  # single lookups decode in the calling thread anyway: same as docstore

        def want(keys):
            return {k: _jsonable(C.expected(system, corpus.by_id[k])) for k in keys}

        spec = {"rounds": {"batch1024_id": batch}, "expected": {"batch1024_id": want(batch[0])}}
        if single:
            spec["rounds"]["get_id"] = single
            spec["expected"]["get_id"] = want(single[0])
        spec_file = stores.root / f"cold-{system.replace(':', '_')}.json"
        spec_file.write_text(json.dumps(spec))
        for k in list(stores.handles):  # no mapping of ours may keep the files' pages (docstore:t1
            stores.close(k)  # and docstore share one file)
        _COLD[key] = C.run_worker(["cold", system, corpus.field, str(path), str(spec_file)])
    res = _COLD[key]
    if workload not in res:
        pytest.skip("single lookups decode in the calling thread anyway: same as docstore")
    r = res[workload]
    resident = r["resident_after_evict"]
    _info(
        benchmark,
        system,
        corpus,
        workload=workload,
        ops=r["ops"],
        unit="docs",
        docs_per_s=r["docs_per_s"],
        round_times=r["times"],
        resident_after_evict_max=max(resident) if resident else None,
        store_bytes=res["store_bytes"],
        files=res["files"],
    )
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)


def _jsonable(v):
    return v if isinstance(v, str) else v.tolist()


# -- the hardware limit ------------------------------------------------------------------------


@pytest.mark.benchmark(group="cmp:fio")
@pytest.mark.parametrize("corpus", [C.MAIN_CORPUS], indirect=True)  # beside its stores
@pytest.mark.parametrize("iodepth", [1, 32])
def test_fio(benchmark, stores, corpus, iodepth):
    try:
        res = C.fio_randread(stores.root / "fio", iodepth)
    except FileNotFoundError as e:
        pytest.skip(str(e))
    finally:
        if iodepth == 32:
            (stores.root / "fio" / "fio.test").unlink(missing_ok=True)
    benchmark.extra_info.update(system="fio", corpus="-", **res, machine=C.machine_info(stores.root))
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)


def _store_level_and_dictionary(path) -> tuple[int, bytes]:
    """The compression level a store was written at (header byte 36) and its dictionary
    (section 1, whose offset and length are the second entry of the section table at byte 64;
    docs/format.md §3)."""
    with open(path, "rb") as f:
        header = f.read(512)
        (offset, length) = struct.unpack_from("<QQ", header, 64 + 24)
        f.seek(offset)
        return header[36], f.read(length)


@pytest.mark.benchmark(group="cmp:decode")
def test_decode(benchmark, stores, corpus):
    """In-memory limits for the corpus's bytes, single thread: memcpy (numpy copy into a touched
    buffer), lz4 block decompression with python-lz4 of the documents as docstore stores them
    (arrays as byte planes, HC at docstore's default level against the store's own dictionary),
    and docstore's own decode of every document (``take`` over all positions) with 1 and the
    default number of threads."""
    lz4_block = pytest.importorskip("lz4.block", reason="lz4 is not installed (pip install lz4)")
    _require("docstore", corpus)
    import numpy as np

    import docstore

    def stored_bytes(v) -> bytes:  # str as UTF-8, arrays as byte planes (docs/format.md §5)
        if isinstance(v, str):
            return v.encode("utf-8")
        return np.ascontiguousarray(v.view(np.uint8).reshape(-1, v.itemsize).T).tobytes()

    blobs = [stored_bytes(v) for v in corpus.values]
    total = sum(len(b) for b in blobs)
    src = np.frombuffer(b"".join(blobs), dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # first touch of the destination, not timed
    t = time.perf_counter()
    for _ in range(3):
        np.copyto(dst, src)
    memcpy_bps = 3 * total / (time.perf_counter() - t)
    del src, dst
    sample = blobs[: min(len(blobs), 200_000)]
    path, _ = _built(stores, "docstore", corpus)
    level, dictionary = _store_level_and_dictionary(path / "store.docstore")
    comp = [
        lz4_block.compress(b, mode="high_compression", compression=level, dict=dictionary) for b in sample
    ]
    dec = lz4_block.decompress
    t = time.perf_counter()
    for c in comp:
        dec(c, dict=dictionary)
    dt = time.perf_counter() - t
    lz4_docs = len(sample) / dt
    lz4_bps = sum(len(b) for b in sample) / dt
    ratio = (sum(len(c) for c in comp) + len(dictionary)) / sum(len(b) for b in sample)

    store = docstore.open(path / "store.docstore")
    field = corpus.field
    positions = list(range(corpus.n))
    for lo in range(0, corpus.n, 4096):  # every page in the page cache first (a cold-cache test
        store.take(positions[lo : lo + 4096], field=field)  # may have evicted the file)
    res: dict[str, float] = {}
    for _ in range(2):  # best of two, alternating
        for label, nt in (("t1", 1), ("default", None)):
            old = docstore.get_num_threads()
            if nt:
                docstore.set_num_threads(nt)
            try:
                t = time.perf_counter()
                for lo in range(0, corpus.n, 4096):
                    store.take(positions[lo : lo + 4096], field=field)
                res[label] = max(res.get(label, 0.0), corpus.n / (time.perf_counter() - t))
            finally:
                docstore.set_num_threads(old)
    store.close()
    _info(
        benchmark,
        "docstore",
        corpus,
        raw_bytes=total,
        memcpy_bytes_per_s=memcpy_bps,
        lz4_docs_per_s=lz4_docs,
        lz4_bytes_per_s=lz4_bps,
        lz4_ratio=ratio,
        lz4_sample_docs=len(sample),
        docstore_decode_all_t1_docs_per_s=res["t1"],
        docstore_decode_all_docs_per_s=res["default"],
        docstore_decode_all_t1_bytes_per_s=res["t1"] * total / corpus.n,
    )
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)


# -- DataLoader ----------------------------------------------------------------------------------

#: "baseline": the same DataLoader over a dataset of empty strings (torch + workers alone)
LOADER_SYSTEMS = ["baseline"] + [s for s in ALL_SYSTEMS if s not in ("docstore:t1", "numpy")]


@pytest.mark.benchmark(group="cmp:loader")
@pytest.mark.parametrize("corpus", [C.MAIN_CORPUS], indirect=True)
@pytest.mark.parametrize("workers", C.LOADER_WORKERS)
@pytest.mark.parametrize("system", LOADER_SYSTEMS)
def test_loader(benchmark, stores, corpus, system, workers):
    pytest.importorskip("torch", reason="torch is not installed")
    _quick_subset(system, "DataLoader")
    if system == "baseline":
        path = "-"
    else:
        peer = _require(system, corpus)
        path = "-" if peer.in_memory else str(_built(stores, system, corpus)[0])
        stores.close((system, corpus.name))  # this process holds nothing of it
    res = C.run_worker(
        [
            "loader",
            system,
            corpus.name,
            C.size_arg(corpus.name),
            str(corpus.n),
            path,
            str(workers),
            str(C.LOADER_SAMPLES),
            str(C.LOADER_BATCH),
        ]
    )
    res["dataset"] = res.pop("how")
    benchmark.extra_info.update(
        system=system, corpus=corpus.name, n_docs=corpus.n, workers=workers, batch=C.LOADER_BATCH, **res
    )
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
