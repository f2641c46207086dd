"""Memory sharing, measured: DataLoader workers reading a 500 MB store copy nothing of it.

Each worker reads ``Private_Dirty`` from ``/proc/self/smaps_rollup`` when it starts (in
``worker_init_fn``) and after every batch (in ``collate_fn``, which runs in the worker). A store's
pages are clean, shared page cache: workers read documents with ``pread`` and map only the
index, so reading raises neither a worker's private dirty memory nor (much) its ``Rss``. The
same texts held in a dict built by the parent before forking are copied page by page into every
worker that reads them, because reference counting writes to each object it touches; the test
checks that it can see that.
"""

from __future__ import annotations

import gc
import os
import sys

import numpy as np
import pytest

import docstore

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader, Dataset  # noqa: E402

from docstore.torch import DocDataset  # noqa: E402

pytestmark = [
    pytest.mark.skipif(not os.path.exists("/proc/self/smaps_rollup"), reason="needs Linux smaps_rollup"),
    pytest.mark.filterwarnings("ignore:This DataLoader will create 4 worker processes"),
]

MB = 1 << 20
STORE_BYTES = 520 * MB  # at least 500 MB on disk: random letters do not compress
DOC_BYTES = 1024  # ~1 KB documents: every page of the dict's strings gets touched
WORKERS = 4
LIMIT = 32 * MB


def _doc_count() -> int:
    return STORE_BYTES // DOC_BYTES


def _texts(start: int, stop: int, pool: np.ndarray) -> list[str]:
    """Documents ``start..stop``: slices of a random-letter pool at pseudo-random offsets."""
    offsets = (np.arange(start, stop, dtype=np.int64) * 2_654_435_761) % (len(pool) - DOC_BYTES)
    return [
        f"doc {i} " + pool[o : o + DOC_BYTES].tobytes().decode("ascii")
        for i, o in zip(range(start, stop), offsets)
    ]


def _pool() -> np.ndarray:
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz     ", dtype=np.uint8)
    return letters[np.random.default_rng(0).integers(0, len(letters), size=64 * MB)]


@pytest.fixture(scope="module")
def big_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("big") / "big.docstore"
    pool = _pool()
    n = _doc_count()
    with docstore.Writer(path, fields={"text": "str"}, level=0, dict_size=0) as writer:
        for start in range(0, n, 20_000):
            stop = min(start + 20_000, n)
            writer.add_many([f"d{i}" for i in range(start, stop)], {"text": _texts(start, stop, pool)})
    assert os.path.getsize(path) >= 500 * MB
    yield str(path)
    os.unlink(path)  # 500 MB: not left behind for pytest's tmp retention


def private_dirty_and_rss() -> tuple[int, int]:
    values = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name in ("Private_Dirty", "Rss"):
                values[name] = int(rest.split()[0]) * 1024
    return values["Private_Dirty"], values["Rss"]


_baseline: tuple[int, int] | None = None


def record_baseline(worker_id: int) -> None:
    global _baseline
    _baseline = private_dirty_and_rss()


def measure(batch: list[str]) -> tuple[int, tuple[int, int], tuple[int, int], int, int]:
    """Runs in the worker: (pid, baseline, now, documents, characters) instead of the texts."""
    return os.getpid(), _baseline, private_dirty_and_rss(), len(batch), sum(map(len, batch))


class DictDataset(Dataset):
    """The same texts held in a dict in the parent's memory: what a docstore replaces."""

    def __init__(self, docs: dict[str, str]) -> None:
        self.docs = docs
        self.ids = list(docs)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> str:
        return self.docs[self.ids[index]]

    def __getitems__(self, indices: list[int]) -> list[str]:
        return [self.docs[self.ids[i]] for i in indices]


def read_everything(dataset: Dataset, start_method: str) -> dict[int, dict[str, int]]:
    """Reads the whole dataset with 4 workers; per worker pid, growth of dirty memory and RSS."""
    loader = DataLoader(
        dataset,
        batch_size=2048,
        num_workers=WORKERS,
        multiprocessing_context=start_method,
        worker_init_fn=record_baseline,
        collate_fn=measure,
        prefetch_factor=2,
    )
    # gc.freeze() before forking, as Python advises for pre-fork servers: a full collection in a
    # forked child writes to every tracked object it inherited (the test process holds torch's
    # and pytest's), which is no part of either dataset. Reference counts still dirty the dict's
    # strings. Without it, docstore workers measured ~5 MB here instead of ~2 MB.
    gc.collect()
    if not os.environ.get("NOFREEZE"):
        gc.freeze()
    try:
        per_worker: dict[int, dict[str, int]] = {}
        docs = chars = 0
        for pid, base, now, count, length in loader:
            docs += count
            chars += length
            w = per_worker.setdefault(pid, {"dirty": 0, "rss": 0})
            w["dirty"] = max(w["dirty"], now[0] - base[0])
            w["rss"] = max(w["rss"], now[1] - base[1])
    finally:
        gc.unfreeze()
    assert docs == len(dataset)
    assert chars > len(dataset) * DOC_BYTES
    assert len(per_worker) == WORKERS
    return per_worker


def _report(label: str, per_worker: dict[int, dict[str, int]]) -> str:
    rows = ", ".join(
        f"dirty +{w['dirty'] / MB:.1f} MB rss +{w['rss'] / MB:.1f} MB" for w in per_worker.values()
    )
    return f"{label}: {rows}"


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_store_pages_are_shared_not_copied(big_store, start_method, capsys):
    dataset = DocDataset(big_store, field="text")
    per_worker = read_everything(dataset, start_method)
    with capsys.disabled():
        print("\n" + _report(f"docstore, {start_method}", per_worker), file=sys.stderr)
    for w in per_worker.values():
        assert w["dirty"] < LIMIT, _report("docstore", per_worker)
        # Documents come through pread: a worker that read a quarter of 520 MB maps only the
        # index pages it touched.
        assert w["rss"] < LIMIT, _report("docstore", per_worker)


def mapped_bytes(path: str) -> int:
    """Resident bytes of this process's mappings of ``path`` (``/proc/self/smaps``)."""
    total, current = 0, None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                current = head[5] if len(head) >= 6 else None
            elif head[0] == "Rss:" and current == os.path.abspath(path):
                total += int(head[1]) * 1024
    return total


def test_pread_maps_only_the_index_while_mmap_maps_what_it_read(big_store):
    positions = list(range(0, _doc_count(), 7))  # a page or more apart: touches most pages
    size = os.path.getsize(big_store)
    mapped = {}
    for read in ("mmap", "pread"):
        with docstore.open(big_store, read=read) as store:
            assert store.read == read
            texts = store.take(positions, field="text")
            assert all(t.startswith(f"doc {p} ") for t, p in zip(texts[:100], positions))
            mapped[read] = mapped_bytes(big_store)
    assert mapped["mmap"] > size / 2, mapped
    assert mapped["pread"] < 16 * MB, mapped  # the doc offsets (8 bytes a document)


def test_a_dict_of_the_same_texts_is_copied_into_each_worker(big_store, capsys):
    pool = _pool()
    n = _doc_count()
    docs = {}
    for start in range(0, n, 50_000):
        stop = min(start + 50_000, n)
        docs.update(zip((f"d{i}" for i in range(start, stop)), _texts(start, stop, pool)))
    per_worker = read_everything(DictDataset(docs), "fork")
    with capsys.disabled():
        print("\n" + _report("dict, fork", per_worker), file=sys.stderr)
    for w in per_worker.values():
        # Each worker read a quarter of ~520 MB of strings and copied (nearly) all of it.
        assert w["dirty"] > 2 * LIMIT, _report("dict", per_worker)
