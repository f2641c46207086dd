"""Reading ahead of the sampler: ``DocStore.prefetch`` (local pages into the page cache, remote
bytes into the node cache), each dataset's ``store_positions``, and ``PrefetchSampler``: the same
batches as the sampler it wraps, loaded ahead within its bounds, stopped when its iterator ends or
is dropped, and resumed exactly under torchdata's ``StatefulDataLoader``."""

from __future__ import annotations

import ctypes
import gc
import mmap
import os
import pickle
import random
import string
import sys
import threading

import numpy as np
import pytest

import docstore

from ..support.remote_servers import RangeHTTPServer

torch = pytest.importorskip("torch")
stateful = pytest.importorskip("torchdata.stateful_dataloader")

from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, RandomSampler  # noqa: E402

from docstore.torch import DocDataset, PrefetchSampler, TokenDataset, distributed_sampler, set_epoch  # noqa: E402

from ..core.test_reader import evict_from_page_cache  # noqa: E402
from .test_torch_resume import list_collate, make_dataset, plain  # noqa: E402

PAGE = mmap.PAGESIZE


def random_store(path, n: int, size: int = 2000) -> dict[str, str]:
    """A store of ``n`` incompressible texts of ``size`` bytes: its documents span pages."""
    rng = random.Random(1)
    docs = {f"d{i:05}": "".join(rng.choices(string.ascii_letters, k=size)) for i in range(n)}
    with docstore.Writer(path, fields={"text": "str"}) as writer:
        for doc_id, text in docs.items():
            writer.add(doc_id, text=text)
    return docs


def resident(path, start: float, stop: float) -> float:
    """The share of the pages between fractions ``start`` and ``stop`` of the file ``path`` that
    are in the page cache (``mincore`` over a map of it, which itself reads nothing)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    size = os.path.getsize(path)
    first, last = int(size * start) // PAGE, int(size * stop) // PAGE
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        view = np.frombuffer(m, dtype=np.uint8)
        pages = (ctypes.c_ubyte * (last - first))()
        if libc.mincore(ctypes.c_void_p(view.ctypes.data + first * PAGE), (last - first) * PAGE, pages):
            raise OSError(ctypes.get_errno(), "mincore")
        del view
    return sum(p & 1 for p in pages) / max(1, last - first)


evict = evict_from_page_cache


def wait_for(predicate, seconds: float = 60) -> bool:
    """Polls ``predicate`` until it holds (a page cache filling: no event to wait on), bounded."""
    tick = threading.Event()
    for _ in range(int(seconds / 0.05)):
        if predicate():
            return True
        tick.wait(0.05)
    return predicate()


linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="mincore and posix_fadvise(DONTNEED) as Linux has them"
)

FAST = {"timeout": "5s", "connect_timeout": "2s", "init_backoff": "10ms", "max_backoff": "200ms"}


def open_remote(url, cache):
    return docstore.open(url, cache_dir=str(cache), storage_options=FAST)


# -- DocStore.prefetch --


@linux_only
@pytest.mark.parametrize("read", ["mmap", "pread"])
def test_prefetch_loads_the_pages_of_its_positions_and_no_others(tmp_path, read):
    path = str(tmp_path / "s.docstore")
    docs = random_store(path, 4000)  # 8 MB of documents, in position order
    store = docstore.open(path, read=read)
    evict(path)
    if resident(path, 0.05, 0.95) > 0.2:
        pytest.skip("posix_fadvise(DONTNEED) evicted nothing here (the page cache keeps the file)")
    asked = store.prefetch(range(2000))  # the first half of the documents
    assert asked >= 2000 * 1500  # their blobs, barely compressible
    assert wait_for(lambda: resident(path, 0.05, 0.45) >= 0.95)  # loaded without a read
    assert resident(path, 0.6, 0.85) < 0.5  # ... and only those
    ids = list(docs)
    assert store.take(range(2000), field="text") == [docs[i] for i in ids[:2000]]


def test_prefetch_checks_its_positions_as_take_does(store_path):
    store = docstore.open(store_path)
    n = len(store)
    assert store.prefetch([]) == 0
    assert store.prefetch([0, -1, n - 1]) > 0
    with pytest.raises(IndexError, match="out of range"):
        store.prefetch([n])
    with pytest.raises(TypeError):
        store.prefetch([1.5])
    store.close()
    with pytest.raises(docstore.DocstoreError):
        store.prefetch([0])


@pytest.mark.network
def test_prefetch_of_a_remote_store_fills_the_node_cache(tmp_path):
    root = tmp_path / "served"
    root.mkdir()
    docs = random_store(str(root / "s.docstore"), 2000, size=500)
    server = RangeHTTPServer(str(root))
    try:
        store = open_remote(f"{server.url}/s.docstore", tmp_path / "cache")
        positions = list(range(0, 2000, 3))
        assert store.prefetch(positions) >= len(positions) * 400
        before = server.requests
        ids = list(docs)
        assert store.take(positions, field="text") == [docs[ids[p]] for p in positions]
        assert server.requests == before  # every byte the reads needed was in the node cache
        assert store.prefetch(positions) == 0  # nothing left to fetch
    finally:
        server.stop()


# -- load_index: a cold lookup then waits on one read --


@linux_only
@pytest.mark.parametrize("read", ["mmap", "pread"])
def test_load_index_reads_the_index_whole_and_no_document(tmp_path, read):
    path = str(tmp_path / "s.docstore")
    docs = random_store(path, 4000)  # the documents first, the index in the last ~3% of the file
    evict(path)
    if resident(path, 0.05, 0.95) > 0.2:
        pytest.skip("posix_fadvise(DONTNEED) evicted nothing here (the page cache keeps the file)")
    store = docstore.open(path, read=read, load_index=True)
    assert resident(path, 0.985, 1.0) == 1.0  # read by the time open returns
    assert resident(path, 0.05, 0.9) < 0.2
    index = store.load_index()  # again: nothing left to wait for, the same bytes
    assert 4000 * 20 < index < os.path.getsize(path) * 0.05
    assert store["d00017"].text == docs["d00017"]


def test_load_index_of_a_collection_reads_every_file(tmp_path, oracle):
    ids = list(oracle)
    shards = []
    for k in range(3):
        shards.append(str(tmp_path / f"shard{k}.docstore"))
        rows = [{"doc_id": i, "text": oracle[i]["text"]} for i in ids[k * 300 : k * 300 + 300]]
        docstore.build(shards[-1], rows)
    each = sum(docstore.open(shard).load_index() for shard in shards)
    docstore.seal(tmp_path / "c", shards).close()
    with docstore.open(tmp_path / "c", load_index=True) as store:
        assert store.load_index() > each  # the shards' and the global id index's
        assert store[ids[500]].text == oracle[ids[500]]["text"]


@pytest.mark.network
def test_load_index_of_a_remote_store_leaves_one_request_a_lookup(tmp_path):
    root = tmp_path / "served"
    root.mkdir()
    docs = random_store(str(root / "s.docstore"), 20000, size=300)  # not fetched whole
    # With an ETag, requests are conditional: no read of the header beside each (docs/remote.md).
    server = RangeHTTPServer(str(root), etag="strong")
    try:
        url = f"{server.url}/s.docstore"
        store = docstore.open(url, cache_dir=str(tmp_path / "cache"), storage_options=FAST, load_index=True)
        assert store.load_index() == 0  # all fetched at open
        for doc_id in ("d05000", "d09999", "d15000"):  # none near the cached head or index
            before = server.requests
            assert store[doc_id].text == docs[doc_id]
            assert server.requests - before == 1  # the document's blob, nothing of the index
    finally:
        server.stop()


# -- each dataset's store_positions: what its __getitems__ reads --


def taken_positions(dataset, indices) -> set[int]:
    seen: list[int] = []
    take = dataset._take

    def recording(positions, store=None, **options):
        if store is None:  # the documents, not a query store
            seen.extend(int(p) for p in np.asarray(positions))
        return take(positions, store=store, **options)

    dataset._take = recording
    try:
        dataset.__getitems__(indices)
    finally:
        del dataset._take
    return set(seen)


@pytest.mark.parametrize("kind", ["doc", "pair", "array", "tokens", "packed", "triplet"])
def test_store_positions_are_the_documents_a_batch_reads(store_path, oracle, kind):
    ids = list(oracle)
    if kind == "packed":
        dataset = TokenDataset(store_path, "tokens", seq_len=5, stride=3, pack=True, sep=0)
    else:
        dataset = make_dataset(kind, store_path, ids)
    indices = np.random.default_rng(2).choice(len(dataset), size=min(64, len(dataset)), replace=False)
    indices[-1] = -1  # counted from the end, as __getitems__ takes it
    assert set(dataset.store_positions(indices).tolist()) == taken_positions(dataset, indices)
    assert dataset.prefetch(indices) >= 0


# -- PrefetchSampler --


class Recorder(DocDataset):
    """A DocDataset whose prefetch records what it was asked and when."""

    def __init__(self, path):
        super().__init__(path, field="doc_id")
        self.calls: list[list[int]] = []
        self.called = threading.Event()

    def prefetch(self, indices):
        self.calls.append([int(i) for i in indices])
        loaded = super().prefetch(indices)
        self.called.set()
        return loaded


class CountingBatches:
    """A batch sampler of ``n`` batches ``[i]`` that counts the batches drawn from it."""

    def __init__(self, n: int) -> None:
        self.n, self.drawn = n, 0

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        for i in range(self.n):
            self.drawn += 1
            yield [i]


def prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "docstore-prefetch"]


def test_the_sampler_yields_the_wrapped_batches_and_loads_them_ahead(store_path):
    dataset = Recorder(store_path)

    def inner():
        return BatchSampler(RandomSampler(dataset, generator=torch.Generator().manual_seed(1)), 64, False)

    expected = [list(b) for b in inner()]
    sampler = PrefetchSampler(inner(), dataset, batches=4)
    assert len(sampler) == len(expected)
    it = iter(sampler)
    got = [list(next(it))]
    # With one batch yielded, the next four are loaded: ahead of their turn.
    ahead = {i for b in expected[1:5] for i in b}
    assert wait_for(lambda: ahead <= {i for call in dataset.calls for i in call})
    got += [list(b) for b in it]
    assert got == expected
    loaded = [i for call in dataset.calls for i in call]
    # Each batch was loaded once, before it was yielded: none was left when the epoch ended.
    assert sorted(loaded) == sorted(i for b in expected for i in b)
    stats = sampler.stats
    assert (stats["batches"], stats["cancelled"], stats["errors"]) == (len(expected), 0, 0)
    assert stats["bytes"] > 0 and stats["waited"] >= 1  # the first batch waits for its load


def test_the_sampler_draws_at_most_its_batches_ahead(store_path):
    dataset = Recorder(store_path)
    inner = CountingBatches(40)
    for batches in (1, 3):
        inner.drawn = 0
        for yielded, batch in enumerate(PrefetchSampler(inner, dataset, batches=batches), 1):
            assert batch == [yielded - 1]
            assert inner.drawn <= yielded + batches  # the one yielded and `batches` ahead


def test_no_more_is_loaded_while_the_loads_ahead_hold_max_bytes(store_path):
    from docstore.torch._prefetch import _Loads

    loads = _Loads(PrefetchSampler(CountingBatches(10), Recorder(store_path), max_bytes=1000))
    assert not loads.ready()  # nothing queued
    loads.submit(0, [0])
    loads.submit(1, [1])
    assert loads.ready()
    loads.ended_load([0, 1], 600)  # batches 0 and 1 loaded: 600 bytes held until 1 is yielded
    loads.queue.clear()
    loads.submit(2, [2])
    assert loads.ready()  # 600 < 1000
    loads.ended_load([2], 600)
    loads.queue.clear()
    loads.submit(3, [3])
    assert not loads.ready()  # 1200 held
    loads.yielding(0)
    assert not loads.ready()  # batch 1 of the first load is not yielded yet
    loads.yielding(1)
    assert loads.ready()  # the first load's 600 bytes are free
    loads.stop()
    assert loads.ready() and loads.stats["cancelled"] == 1  # stopping wakes the thread


class Gated(Recorder):
    """A Recorder whose loads wait for ``release``, and which logs when each load ends."""

    def __init__(self, path, log, fails=False):
        super().__init__(path)
        self.release, self.log, self.fails = threading.Event(), log, fails

    def prefetch(self, indices):
        self.called.set()
        assert self.release.wait(60)
        loaded = super().prefetch(indices)
        self.log.append(("loaded", [int(i) for i in indices]))
        if self.fails:
            raise OSError("injected")  # a failed load ends too: the read reports it
        return loaded


@pytest.mark.parametrize("fails", [False, True])
def test_a_batch_is_yielded_only_once_its_load_has_ended(store_path, fails):
    # Without this, a worker would fetch a remote document that the load is still fetching.
    log: list = []
    dataset = Gated(store_path, log, fails)
    sampler = PrefetchSampler(CountingBatches(3), dataset, batches=2)
    it = iter(sampler)

    def consume():
        for batch in it:
            log.append(("yielded", batch))

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    try:
        assert dataset.called.wait(60)  # the first load has started, and waits
        consumer.join(0.5)  # the batch must not come before its load ends, however long this waits
        dataset.release.set()
        consumer.join(60)
        assert not consumer.is_alive()
    finally:
        dataset.release.set()
        it.close()
    yielded = [entry[1] for entry in log if entry[0] == "yielded"]
    assert yielded == [[0], [1], [2]]
    for batch in yielded:
        loaded_at = next(k for k, (what, got) in enumerate(log) if what == "loaded" and batch[0] in got)
        assert loaded_at < log.index(("yielded", batch))
    assert sampler.stats["waited"] >= 1
    assert (sampler.stats["errors"] >= 1) == fails


class Raising(Recorder):
    """A dataset whose own prefetch fails with something no store raises."""

    def prefetch(self, indices):
        self.calls.append([int(i) for i in indices])
        raise RuntimeError("a dataset's own bug")


def test_loads_that_raise_anything_leave_every_batch_to_be_yielded(store_path, caplog):
    dataset = Raising(store_path)
    sampler = PrefetchSampler(CountingBatches(40), dataset, batches=4)
    with caplog.at_level("WARNING", logger="docstore.torch"):
        assert list(sampler) == [[i] for i in range(40)]  # threads that kept loading, or none
    assert sampler.stats["errors"] == len(dataset.calls) >= 1 and sampler.stats["batches"] == 0
    assert "a dataset's own bug" in caplog.text


def test_loading_stops_at_the_end_of_the_epoch_and_when_the_iterator_is_dropped(store_path):
    dataset = Recorder(store_path)
    sampler = PrefetchSampler(BatchSampler(range(len(dataset)), 32, False), dataset, batches=4)
    baseline = len(prefetch_threads())
    list(sampler)
    for t in prefetch_threads()[baseline:]:
        t.join(60)
    assert len(prefetch_threads()) == baseline

    it = iter(sampler)
    next(it)
    assert dataset.called.wait(60)
    threads = prefetch_threads()[baseline:]
    assert threads  # loading
    del it
    gc.collect()
    for thread in threads:
        thread.join(60)
        assert not thread.is_alive()


def test_ranks_prefetch_their_own_batches(store_path):
    dataset = Recorder(store_path)
    seen = []
    for rank in range(2):
        dataset.calls.clear()
        inner = BatchSampler(DistributedSampler(dataset, num_replicas=2, rank=rank, seed=3), 50, False)
        batches = [list(b) for b in PrefetchSampler(inner, dataset, batches=3)]
        assert batches == [list(b) for b in inner]
        assert {i for call in dataset.calls for i in call} <= {i for b in batches for i in b}
        seen += [i for b in batches for i in b]
    assert sorted(seen) == list(range(len(dataset)))


def test_set_epoch_reaches_the_wrapped_sampler(store_path):
    dataset = DocDataset(store_path, field="doc_id")
    elastic = distributed_sampler(dataset, seed=5)
    sampler = PrefetchSampler(BatchSampler(elastic, 100, False), dataset)
    loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=list_collate)
    set_epoch(loader, 3)
    assert elastic.epoch == 3


def test_bad_arguments_are_refused(store_path):
    dataset = DocDataset(store_path, field="doc_id")
    inner = BatchSampler(range(10), 2, False)
    with pytest.raises(TypeError, match="prefetch"):
        PrefetchSampler(inner, list(range(10)))
    with pytest.raises(ValueError, match="batches"):
        PrefetchSampler(inner, dataset, batches=0)
    with pytest.raises(ValueError, match="max_bytes"):
        PrefetchSampler(inner, dataset, max_bytes=0)


@pytest.mark.network
def test_a_loader_over_a_remote_store_reads_every_document(tmp_path):
    root = tmp_path / "served"
    root.mkdir()
    docs = random_store(str(root / "s.docstore"), 1500, size=300)
    server = RangeHTTPServer(str(root))
    try:
        store = open_remote(f"{server.url}/s.docstore", tmp_path / "cache")
        dataset = DocDataset(store, field="text")
        sampler = PrefetchSampler(BatchSampler(distributed_sampler(dataset, seed=1), 100, False), dataset)
        loader = DataLoader(dataset, batch_sampler=sampler, num_workers=2, collate_fn=list_collate)
        read = sorted(text for batch in loader for text in batch)
        assert read == sorted(docs.values())
        assert sampler.stats["bytes"] > 0 and sampler.stats["errors"] == 0
    finally:
        server.stop()


# -- resuming --

BATCH = 50
K = 3


def prefetch_loader(kind: str, dataset, sampler_kind: str, workers: int):
    from torchdata.stateful_dataloader.sampler import BatchSampler as StatefulBatchSampler
    from torchdata.stateful_dataloader.sampler import RandomSampler as StatefulRandomSampler

    batch = {"tokens": 400, "triplet": 8}.get(kind, BATCH)
    if sampler_kind == "distributed":  # the wrapped sampler has state
        inner = BatchSampler(distributed_sampler(dataset, seed=4), batch, False)
    elif sampler_kind == "stateful":  # torchdata's: its iterator has state
        sampler = StatefulRandomSampler(dataset, generator=torch.Generator().manual_seed(4))
        inner = StatefulBatchSampler(sampler, batch, False)
    else:  # torch's, seeded: no state, fast-forwarded
        inner = BatchSampler(RandomSampler(dataset, generator=torch.Generator().manual_seed(4)), batch, False)
    collate = None if kind == "tokens" else list_collate
    batches = PrefetchSampler(inner, dataset, batches=3)
    loader = stateful.StatefulDataLoader(
        dataset, batch_sampler=batches, num_workers=workers, collate_fn=collate
    )
    set_epoch(loader, 1)
    return loader


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("sampler_kind", ["distributed", "stateful", "plain"])
@pytest.mark.parametrize("kind", ["doc", "tokens", "triplet"])
def test_a_resumed_prefetching_loader_yields_the_uninterrupted_batches(
    store_path, oracle, kind, sampler_kind, workers
):
    ids = list(oracle)

    def loader():
        return prefetch_loader(kind, make_dataset(kind, store_path, ids), sampler_kind, workers)

    full = [plain(b) for b in loader()]
    assert len(full) > K + 2
    interrupted = loader()
    it = iter(interrupted)
    head = [plain(next(it)) for _ in range(K)]
    state = pickle.loads(pickle.dumps(interrupted.state_dict()))
    del it, interrupted

    resumed = loader()
    resumed.load_state_dict(state)
    set_epoch(resumed, 1)
    assert head == full[:K]
    assert [plain(b) for b in resumed] == full[K:]
