"""PyTorch datasets over docstore stores: ``DocDataset``, ``TripletDataset``, ``PairDataset``,
``TokenDataset``, ``ArrayDataset``, plus ``pad_collate``, ``distributed_sampler`` and ``set_epoch``.

>>> from torch.utils.data import DataLoader
>>> from docstore.torch import DocDataset, distributed_sampler
>>> dataset = DocDataset("corpus.docstore", field="text")
>>> loader = DataLoader(dataset, batch_size=256, num_workers=4, sampler=distributed_sampler(dataset))

Importing ``docstore`` never imports torch; this module does.

**Batch fetches.** Every dataset implements ``__getitems__``: a DataLoader (or worker) fetches a
whole batch with one ``store.take`` call, which decodes the documents in parallel with the GIL
released, instead of one Python call per sample.

**Workers and pickling.** A dataset holds the store's path and its options, never documents. It
opens the store on first use in each process and notices a pid change (lance's torch Dataset
style), so it works under the fork, spawn and forkserver start methods and with
``persistent_workers``; workers map the same file, so its pages live once in the page cache, shared
by every worker, instead of once per worker. In a DataLoader worker, docstore's decoding threads
are set to ``max(1, cpus // num_workers)`` so that workers do not oversubscribe the cores (as
torch sets its own threads to 1 there); set ``DOCSTORE_NUM_THREADS`` to choose another number.

**Distributed training.** Sharding is the sampler's job, not the dataset's: ``distributed_sampler``
returns a ``DistributedSampler`` that takes rank and world size from the initialised process group
(or a single-replica one when ``torch.distributed`` is not initialised, so the same code runs
alone and under DDP, and shuffles by ``(seed, epoch)`` either way). A dataset stays a view of the
whole store: the same object and ``len`` on every rank, random access that reshuffles globally each
epoch, nothing to decide when the dataset is pickled, and the usual ``set_epoch`` contract. A
dataset that sharded itself would have to know its rank when created or unpickled and could only
shuffle within its shard. ``DistributedSampler`` pads the last round with repeated samples unless
``len(dataset)`` divides by the world size (or ``drop_last=True``).

**Epochs.** ``set_epoch(loader, epoch)`` calls ``set_epoch`` on the loader's sampler and dataset.
A ``TripletDataset``'s epoch lives in a small shared-memory counter that its DataLoader workers
read on every batch, so ``set_epoch`` reaches ``persistent_workers`` too (call it before iterating
the epoch, as ``DistributedSampler`` requires).
"""

from __future__ import annotations

import bisect
import importlib.util
import multiprocessing
import multiprocessing.context
import multiprocessing.reduction
import multiprocessing.sharedctypes
import operator
import os
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Callable

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import Dataset, DistributedSampler

import docstore

from ._store import DocStore

__all__ = [
    "ArrayDataset",
    "DocDataset",
    "PairDataset",
    "TokenDataset",
    "TripletDataset",
    "distributed_sampler",
    "pad_collate",
    "set_epoch",
]

_NUMERIC_ARRAY: tuple[str, ...] = ("int8[]", "uint8[]", "int16[]", "uint16[]", "int32[]", "uint32[]")
_NUMERIC_ARRAY += ("int64[]", "uint64[]", "float32[]", "float64[]")
_NUMERIC_SCALAR = ("int64", "float64")
# Rows decoded per ``take`` while scanning a whole store (TokenDataset's index).
_SCAN_CHUNK = 8192


# --------------------------------------------------------------------------------------------
# Per-process store handles and worker set-up


_threads_configured_pid: int | None = None


def _configure_worker_threads() -> None:
    """In a DataLoader worker, shares the cores between workers (once per process)."""
    global _threads_configured_pid
    pid = os.getpid()
    if _threads_configured_pid == pid:
        return
    _threads_configured_pid = pid
    info = torch.utils.data.get_worker_info()
    if info is None or os.environ.get("DOCSTORE_NUM_THREADS"):
        return
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    docstore.set_num_threads(max(1, cpus // max(1, info.num_workers)))


class _StoreHandle:
    """A store's path, opened on first use in each process; pickles as the path alone.

    Stores the handle opens itself read documents with ``pread`` (``docstore.open(...,
    read="pread")``): a DataLoader worker reads through the shared page cache without mapping
    every page it has read, so its memory stays flat however much of the corpus it reads.
    """

    __slots__ = ("_owned", "_pid", "_store", "path")

    def __init__(self, store_or_path: Any) -> None:
        self._owned = False  # whether _store was opened here (and may be closed here)
        if isinstance(store_or_path, DocStore):
            self.path = os.path.abspath(os.fspath(store_or_path.path))
            self._store: DocStore | None = store_or_path
            self._pid: int | None = os.getpid()
        elif isinstance(store_or_path, (str, os.PathLike)):
            self.path = os.path.abspath(os.fspath(store_or_path))
            self._store = None
            self._pid = None
        else:
            raise TypeError(f"expected a DocStore or a path, got {type(store_or_path).__name__}")

    def get(self) -> DocStore:
        store = self._store
        if store is None or self._pid != os.getpid() or store.closed:
            _configure_worker_threads()
            # A store inherited through fork() would work too; reopening costs a few syscalls
            # and keeps the parent's object out of the child's way.
            store = self._store = docstore.open(self.path, read="pread")
            self._pid = os.getpid()
            self._owned = True
        return store

    def release(self) -> None:
        """Lets go of the store until the next ``get``: closes it if the handle opened it, so
        the index pages that resolving ids touched are unmapped (the store is reopened lazily,
        in microseconds). A store the user passed in is left open, merely forgotten."""
        store, self._store = self._store, None
        if store is not None and self._owned and self._pid == os.getpid():
            store.close()

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = state["path"]
        self._store = None
        self._pid = None
        self._owned = False

    def __repr__(self) -> str:
        return f"<store {self.path!r}>"


class _StoreDataset(Dataset):
    """Base: a lazily (re)opened store, batch fetches, cheap pickling."""

    def __init__(self, store_or_path: Any) -> None:
        self._handle = _StoreHandle(store_or_path)
        self._handle.get()  # open now: a missing or corrupt file fails here, not in a worker

    @property
    def store(self) -> DocStore:
        """This process's open store (opened on first use after a fork or an unpickle)."""
        return self._handle.get()

    @property
    def path(self) -> str:
        return self._handle.path

    def _check_field(self, name: str, allowed: Sequence[str] | None = None) -> str:
        fields = self.store.fields
        if name not in fields:
            raise docstore.SchemaError(f"no field {name!r}; the store's fields are {list(fields)}")
        if allowed is not None and fields[name] not in allowed:
            raise docstore.SchemaError(
                f"field {name!r} is {fields[name]}; {type(self).__name__} needs one of {list(allowed)}"
            )
        return name

    def __len__(self) -> int:
        return len(self.store)

    def __getitem__(self, index: int) -> Any:
        return self.__getitems__([operator.index(index)])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r}, {len(self)} items)"


def _as_positions(indices: Any) -> list[int]:
    if isinstance(indices, list):
        return indices
    if isinstance(indices, (np.ndarray, torch.Tensor)):
        return indices.tolist()
    return [operator.index(i) for i in indices]


# --------------------------------------------------------------------------------------------
# DocDataset


class DocDataset(_StoreDataset):
    """A map-style dataset of a store's documents, indexed by position (insertion order).

    Items are the :class:`docstore.Doc` (``field`` and ``fields`` unset), one field's value
    (``field="text"``) or a tuple of fields (``fields=("text", "label")``; ``"doc_id"`` may be
    one of them), passed through ``transform`` when given. ``dataset.doc_id(i)`` is the id at
    position ``i``. A batch is one ``store.take`` call (``__getitems__``).
    """

    def __init__(
        self,
        store_or_path: Any,
        field: str | None = None,
        fields: Sequence[str] | None = None,
        transform: Callable[[Any], Any] | None = None,
    ) -> None:
        super().__init__(store_or_path)
        if field is not None and fields is not None:
            raise ValueError("give field= or fields=, not both")
        if isinstance(fields, str):
            raise TypeError("fields must be a sequence of names; use field= for one field")
        self.field = field if field in (None, "doc_id") else self._check_field(field)
        if fields is not None:
            fields = tuple(f if f == "doc_id" else self._check_field(f) for f in fields)
        self.fields = fields
        self.transform = transform

    def doc_id(self, index: int) -> str:
        """The id of the document at position ``index``."""
        index = operator.index(index)
        n = len(self.store)
        if not -n <= index < n:
            raise IndexError(f"position {index} out of range for a store of {n} documents")
        return self.store.keys_range(index % n, index % n + 1)[0]

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        values = self.store.take(_as_positions(indices), field=self.field, fields=self.fields)
        if self.transform is not None:
            values = [self.transform(value) for value in values]
        return values


# --------------------------------------------------------------------------------------------
# Epoch counter shared with DataLoader workers


class _EpochCounter:
    """An epoch number that the process calling ``set`` shares with the DataLoader workers it starts.

    It lives in a ``multiprocessing`` shared-memory value: forked workers inherit the mapping,
    and spawn/forkserver workers receive it while they are being started. A process owns the
    value its workers follow from the moment it sets an epoch or starts workers (a fork, or a
    pickle for a spawn), whichever comes first; a copy (``copy.deepcopy``, ``pickle``, a DDP rank
    that received the dataset) makes its own then, so ranks never see each other's epochs and
    workers started before the first ``set`` still see every later one. DataLoader workers never
    make their own: they follow the process that started them.
    """

    def __init__(self, epoch: int = 0) -> None:
        self._value = operator.index(epoch)
        self._shared: Any = None
        self._owner: int | None = None
        _COUNTERS.add(self)

    def get(self) -> int:
        return int(self._shared.value) if self._shared is not None else self._value

    def set(self, epoch: int) -> None:
        epoch = operator.index(epoch)
        self._value = epoch
        self._own(force=True)
        self._shared.value = epoch

    def _own(self, force: bool = False) -> None:
        """Makes the shared value this process's own, unless it is already, or this process is a
        DataLoader worker (which follows its parent) and ``force`` is not given."""
        if self._owner == os.getpid() and self._shared is not None:
            return
        if not force and torch.utils.data.get_worker_info() is not None:
            return
        self._shared = multiprocessing.RawValue("q", self.get())
        self._owner = os.getpid()

    def __getstate__(self) -> dict[str, Any]:
        spawning = multiprocessing.context.get_spawning_popen() is not None
        if spawning:
            self._own()  # the workers being started follow this process from now on
        shared = self._shared if spawning else None
        return {"_value": self.get(), "_shared": shared, "_owner": self._owner if spawning else None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        _COUNTERS.add(self)


# A shared value pickles as shared memory only once its ctypes type is registered with the
# pickler, which multiprocessing does when it makes the first one of that type. A counter makes
# its value while the first spawn worker is being pickled, too late for that pickler: register
# the type now.
multiprocessing.reduction.ForkingPickler.register(
    multiprocessing.sharedctypes.typecode_to_type["q"], multiprocessing.sharedctypes.reduce_ctype
)

# Every counter of this process, so that a fork gives the children one their parent owns.
_COUNTERS: weakref.WeakSet[_EpochCounter] = weakref.WeakSet()


def _own_counters_before_fork() -> None:
    for counter in list(_COUNTERS):
        counter._own()


os.register_at_fork(before=_own_counters_before_fork)


# --------------------------------------------------------------------------------------------
# Counter-based random numbers: reproducible from (seed, epoch, index, attempt) alone


_M64 = (1 << 64) - 1


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, vectorised (a bijection of uint64)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _mix_int(x: int) -> int:
    """``_mix`` of one number, in Python ints (numpy's per-call overhead dwarfs the work here)."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _uniform(seed: int, epoch: int, indices: np.ndarray, attempt: int) -> np.ndarray:
    """Floats in [0, 1) that depend on (seed, epoch, index, attempt) only."""
    key = _mix_int(_mix_int(_mix_int(seed & _M64) ^ (epoch & _M64)) ^ attempt)
    x = _mix(indices.astype(np.uint64) ^ np.uint64(key))
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def _below(u: np.ndarray, n: np.ndarray | int) -> np.ndarray:
    return np.minimum((u * n).astype(np.int64), np.asarray(n, dtype=np.int64) - 1)


# --------------------------------------------------------------------------------------------
# TripletDataset


def _positive_pairs(qrels: Any) -> list[tuple[str, str]]:
    """(query id, doc id) pairs with positive relevance, in the order given."""
    pairs: list[tuple[str, str]] = []
    if isinstance(qrels, Mapping):
        for qid, docs in qrels.items():
            if isinstance(docs, str):
                pairs.append((qid, docs))
            elif isinstance(docs, Mapping):
                pairs.extend((qid, did) for did, rel in docs.items() if _relevance(rel, qid, did) > 0)
            else:
                pairs.extend((qid, did) for did in docs)
        return pairs
    for record in qrels:  # ir_datasets qrels: namedtuples (query_id, doc_id, relevance, ...)
        if hasattr(record, "query_id"):
            qid, did, rel = record.query_id, record.doc_id, getattr(record, "relevance", 1)
        else:
            qid, did, *rest = record
            rel = rest[0] if rest else 1
        if _relevance(rel, qid, did) > 0:
            pairs.append((qid, did))
    return pairs


def _relevance(rel: Any, qid: str, did: str) -> float:
    """A relevance grade as a number: TREC qrels files give them as text ("1")."""
    try:
        return float(rel)
    except (TypeError, ValueError):
        raise ValueError(f"query {qid!r}, doc {did!r}: relevance must be a number, got {rel!r}") from None


def _utf8(text: Any, qid: str) -> bytes:
    if not isinstance(text, str):
        raise TypeError(f"query {qid!r}: expected text (str), got {type(text).__name__}")
    return text.encode()


def _in_sorted(values: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """``np.isin(values, keys)`` for sorted, unique ``keys``: a binary search per value, instead
    of the sort of ``keys`` that ``np.isin`` repeats on every call (O(batch log keys), not O(keys))."""
    if len(keys) == 0:
        return np.zeros(values.shape, dtype=bool)
    at = np.minimum(np.searchsorted(keys, values), len(keys) - 1)
    return keys[at] == values


def _positions(store: DocStore, doc_ids: Iterable[str], what: str) -> np.ndarray:
    doc_ids = list(doc_ids)
    out = store.positions(doc_ids)  # one parallel, GIL-free search for all of them
    if (out < 0).any():
        missing = [doc_ids[i] for i in np.flatnonzero(out < 0)[:5]]
        raise KeyError(f"{int((out < 0).sum())} {what} not in the store {store.path}, e.g. {missing}")
    return out


class TripletDataset(_StoreDataset):
    """(query text, positive document text, negative document text) for ranker training.

    ``queries`` maps query id -> text (or is a store of queries, read from its ``query_field``);
    ``qrels`` maps query id -> positive doc ids (a list, or a dict doc id -> relevance where
    relevance > 0 counts), or is an iterable of ``(query_id, doc_id, relevance)`` records such as
    ir_datasets' ``qrels_iter()``. There is one item per (query, positive document) pair, in the
    order of ``qrels``.

    ``negatives="random"`` draws each negative uniformly from the whole store by position,
    redrawing one that is a positive of the query (up to 32 draws). ``negatives`` may instead map
    query id -> hard-negative doc ids (positives are removed from them); an item whose query has
    none gets a random negative. The draw depends on ``(seed, epoch, index)`` only, not on
    workers, batching or order; ``set_epoch`` gives every epoch new negatives.
    ``positions(indices)`` returns the (positive, negative) positions that items will use.
    """

    _MAX_DRAWS = 32

    def __init__(
        self,
        store_or_path: Any,
        queries: Any,
        qrels: Any,
        negatives: str | Mapping[str, Iterable[str]] = "random",
        field: str = "text",
        seed: int = 0,
        *,
        query_field: str = "text",
    ) -> None:
        super().__init__(store_or_path)
        store = self.store
        self.field = self._check_field(field)
        self.seed = operator.index(seed)
        self._epoch = _EpochCounter(0)

        pairs = _positive_pairs(qrels)
        if not pairs:
            raise ValueError("qrels hold no (query, positive document) pair")
        # Queries that have a positive, numbered in order of first appearance.
        query_index: dict[str, int] = {}
        pair_query = np.fromiter(
            (query_index.setdefault(qid, len(query_index)) for qid, _ in pairs),
            dtype=np.int64,
            count=len(pairs),
        )
        qids = list(query_index)
        if isinstance(queries, (DocStore, str, os.PathLike)):
            self._query_store: _StoreHandle | None = _StoreHandle(queries)
            qstore = self._query_store.get()
            if query_field not in qstore.fields:
                raise docstore.SchemaError(f"the query store has no field {query_field!r}: {qstore.fields}")
            self._query_keys: Any = _positions(qstore, qids, "query ids")
            self.query_field: str | None = query_field
        elif isinstance(queries, Mapping):
            missing = [q for q in qids if q not in queries]
            if missing:
                raise KeyError(
                    f"{len(missing)} query ids of qrels have no text in queries, e.g. {missing[:5]}"
                )
            self._query_store = None
            # One UTF-8 buffer and its offsets, not a list of strings: forked workers reading a
            # list would copy it page by page (reference counts), and it pickles compactly.
            encoded = [_utf8(queries[q], q) for q in qids]
            self._query_keys = np.frombuffer(b"".join(encoded), dtype=np.uint8)
            self._query_offsets = np.concatenate([[0], np.cumsum([len(e) for e in encoded])]).astype(np.int64)
            self.query_field = None
        else:
            raise TypeError("queries must be a mapping of query id -> text, or a store of queries")

        self._pair_query = pair_query
        self._pair_pos = _positions(store, (did for _, did in pairs), "positive doc ids")
        # Sorted (query, position) keys of every positive, to reject a negative that is one.
        n = max(len(store), 1)
        self._positive_keys = np.unique(pair_query * n + self._pair_pos)

        if isinstance(negatives, str):
            if negatives != "random":
                raise ValueError(f"negatives must be 'random' or a mapping, got {negatives!r}")
            if len(self._pair_pos) and len(store) < 2:
                raise ValueError("random negatives need a store of at least 2 documents")
            self.negatives = "random"
            self._hard_offsets: np.ndarray | None = None
            self._hard_pos = np.zeros(0, dtype=np.int64)
        elif isinstance(negatives, Mapping):
            self.negatives = "hard"
            counts = np.zeros(len(qids), dtype=np.int64)
            chunks = []
            for q, qid in enumerate(qids):
                hard = negatives.get(qid, ())
                hard = (hard,) if isinstance(hard, str) else hard  # one id, as qrels may give
                found = _positions(store, hard, f"hard negatives of query {qid!r}")
                if len(found):
                    found = found[~_in_sorted(q * n + found, self._positive_keys)]
                counts[q] = len(found)
                chunks.append(found)
            self._hard_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
            self._hard_pos = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)
        else:
            raise TypeError("negatives must be 'random' or a mapping of query id -> doc ids")
        # Resolving every id touched index pages all over the file: unmap them rather than keep
        # them counted against this process (and every rank) for the whole training run.
        self._handle.release()
        if self._query_store is not None:
            self._query_store.release()

    @property
    def epoch(self) -> int:
        return self._epoch.get()

    def set_epoch(self, epoch: int) -> None:
        """Uses the negatives of epoch ``epoch`` from now on (in workers too)."""
        self._epoch.set(epoch)

    def __len__(self) -> int:
        return len(self._pair_pos)

    def positions(self, indices: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Store positions of the positive and negative documents of items ``indices``."""
        index = np.asarray(_as_positions(indices), dtype=np.int64)
        count = len(self._pair_pos)
        if index.size and (index.min() < -count or index.max() >= count):
            raise IndexError(f"index out of range for a dataset of {count} items")
        index = np.where(index < 0, index + count, index)
        query = self._pair_query[index]
        n = len(self.store)
        epoch = self.epoch
        negative = np.empty(len(index), dtype=np.int64)
        todo = np.ones(len(index), dtype=bool)
        if self._hard_offsets is not None:
            start = self._hard_offsets[query]
            have = self._hard_offsets[query + 1] - start
            hard = have > 0
            if hard.any():
                u = _uniform(self.seed, epoch, index[hard], 0)
                negative[hard] = self._hard_pos[start[hard] + _below(u, have[hard])]
                todo &= ~hard
        for attempt in range(self._MAX_DRAWS):
            if not todo.any():
                break
            u = _uniform(self.seed, epoch, index[todo], attempt + 1)
            negative[todo] = _below(u, n)
            clash = _in_sorted(query * n + negative, self._positive_keys)
            todo &= clash
        return self._pair_pos[index], negative

    def __getitems__(self, indices: Sequence[int]) -> list[tuple[str, str, str]]:
        index = np.asarray(_as_positions(indices), dtype=np.int64)
        positive, negative = self.positions(index)
        texts = self.store.take(np.concatenate([positive, negative]).tolist(), field=self.field)
        query = self._pair_query[np.where(index < 0, index + len(self), index)]
        if self._query_store is not None:
            keys = self._query_keys[query].tolist()
            query_texts = self._query_store.get().take(keys, field=self.query_field)
        else:
            starts = self._query_offsets[query].tolist()
            ends = self._query_offsets[query + 1].tolist()
            blob = memoryview(self._query_keys)
            query_texts = [str(blob[a:b], "utf-8") for a, b in zip(starts, ends)]
        m = len(index)
        return list(zip(query_texts, texts[:m], texts[m:]))


# --------------------------------------------------------------------------------------------
# PairDataset


class PairDataset(_StoreDataset):
    """Sentence pairs (with a label) for sentence-embedding training, indexed by position.

    Items are ``sentence_transformers.InputExample(guid=doc_id, texts=[...], label=...)`` when
    ``sentence_transformers`` is importable (``input_example=None``) or asked for
    (``input_example=True``), else tuples ``(*texts, label)``; without ``label_field``,
    ``(*texts,)`` and InputExample's default label. Labels are the stored values: use a float64
    field for similarity losses (``CosineSimilarityLoss``), an int64 one for classification.
    """

    def __init__(
        self,
        store_or_path: Any,
        fields: Sequence[str] = ("sentence1", "sentence2"),
        label_field: str | None = "label",
        *,
        input_example: bool | None = None,
    ) -> None:
        super().__init__(store_or_path)
        if isinstance(fields, str):
            raise TypeError("fields must be a sequence of names, e.g. ('sentence1', 'sentence2')")
        self.fields = tuple(self._check_field(f) for f in fields)
        self.label_field = None if label_field is None else self._check_field(label_field)
        installed = importlib.util.find_spec("sentence_transformers") is not None
        if input_example and not installed:
            raise ImportError(
                "input_example=True needs sentence_transformers: pip install sentence-transformers"
            )
        self.input_example = installed if input_example is None else bool(input_example)

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        docs = self.store.take(_as_positions(indices))
        get = operator.attrgetter(*self.fields)
        texts: Callable[[Any], tuple[Any, ...]] = get if len(self.fields) > 1 else lambda doc: (get(doc),)
        label = operator.attrgetter(self.label_field) if self.label_field else None
        if self.input_example:
            from sentence_transformers import InputExample

            if label is None:
                return [InputExample(guid=doc.doc_id, texts=list(texts(doc))) for doc in docs]
            return [InputExample(guid=doc.doc_id, texts=list(texts(doc)), label=label(doc)) for doc in docs]
        if label is None:
            return [tuple(texts(doc)) for doc in docs]
        return [(*texts(doc), label(doc)) for doc in docs]


# --------------------------------------------------------------------------------------------
# TokenDataset and pad_collate


def _numpy_dtype(dtype: torch.dtype | None) -> np.dtype | None:
    if dtype is None:
        return None
    try:
        return torch.empty(0, dtype=dtype).numpy().dtype
    except TypeError:  # bfloat16, complex32 ...
        raise TypeError(f"dtype={dtype} has no numpy equivalent; use an integer or float dtype") from None


def _scan_lengths(store: DocStore, field: str) -> np.ndarray:
    """Length of every document's array in ``field`` (decodes the whole store once)."""
    n = len(store)
    lengths = np.empty(n, dtype=np.int64)
    for start in range(0, n, _SCAN_CHUNK):
        stop = min(start + _SCAN_CHUNK, n)
        lengths[start:stop] = [len(a) for a in store.take(range(start, stop), field=field)]
    return lengths


def _window_count(length: np.ndarray | int, seq_len: int, stride: int, partial: bool) -> np.ndarray:
    """Windows over ``length`` tokens: full ones at 0, stride, ..., then the tail if ``partial``."""
    length = np.asarray(length, dtype=np.int64)
    full = np.where(length >= seq_len + 1, (length - seq_len - 1) // stride + 1, 0)
    if partial:
        # A tail window when some target token (1 .. length-1) lies past the last full window's
        # (whose targets end at (full-1)*stride + seq_len), and the tail has one to predict.
        reached = np.where(full > 0, (full - 1) * stride + seq_len, 0)
        full = full + ((reached < length - 1) & (full * stride < length - 1))
    return full


class TokenDataset(_StoreDataset):
    """Token-id arrays (an integer array field) as tensors, whole or in training windows.

    Without ``seq_len``, item ``i`` is document ``i``'s tokens as a 1-D tensor (use
    :func:`pad_collate` to batch them). With ``seq_len=k``, items are ``(x, y)`` with
    ``x = t[o:o+k]`` and ``y = t[o+1:o+k+1]``, windows at offsets ``o = 0, stride, 2*stride, ...``
    (``stride`` defaults to ``k``: non-overlapping windows).

    Window numbering, deterministic: documents in position order, and within a document windows
    in offset order; window ``w`` is window ``w - first[d]`` of the document ``d`` whose windows
    include it. Only full windows by default (fixed shapes, plain ``default_collate``); with
    ``partial=True`` a document's tail that no full window reaches is one more, shorter window
    (batch those with :func:`pad_collate`). Documents of fewer than ``k + 1`` tokens give no full
    window. With ``pack=True`` the documents are instead read as one stream, in position order,
    each followed by ``sep`` when given (an end-of-text id), and windows cross document
    boundaries (GPT-style packing): window ``w`` starts at stream offset ``w * stride``.

    Windowing needs every document's length: the constructor decodes the store once to count
    them, and keeps 8 bytes per document (pickled to spawn workers).
    Tensors have ``dtype`` (int64 by default, what ``nn.Embedding`` and losses take; ``None``
    keeps the stored type).
    """

    def __init__(
        self,
        store_or_path: Any,
        field: str = "tokens",
        seq_len: int | None = None,
        *,
        stride: int | None = None,
        partial: bool = False,
        pack: bool = False,
        sep: int | None = None,
        dtype: torch.dtype | None = torch.long,
    ) -> None:
        super().__init__(store_or_path)
        self.field = self._check_field(field, _NUMERIC_ARRAY)
        self.dtype = dtype
        self._np_dtype = _numpy_dtype(dtype)
        # Checked here, not in a DataLoader worker at the first batch.
        seq_len = None if seq_len is None else operator.index(seq_len)
        stride = None if stride is None else operator.index(stride)
        if isinstance(sep, bool):
            raise TypeError("sep is a token id (an int), got a bool")
        sep = None if sep is None else operator.index(sep)
        self.seq_len = seq_len
        self.partial = partial
        self.pack = pack
        self.sep = sep
        self.stride = 0
        self._starts = np.zeros(1, dtype=np.int64)
        self._count = 0
        if seq_len is None:
            if stride is not None or pack or partial or sep is not None:
                raise ValueError("stride, partial, pack and sep need seq_len")
            return
        if seq_len < 1:
            raise ValueError(f"seq_len must be >= 1, got {seq_len}")
        self.stride = seq_len if stride is None else stride
        if self.stride < 1:
            raise ValueError(f"stride must be >= 1, got {self.stride}")
        if sep is not None:
            if not pack:
                raise ValueError("sep is for pack=True")
            stored = np.dtype(self.store.fields[self.field][:-2])
            if not np.can_cast(np.min_scalar_type(sep), stored):
                raise ValueError(f"sep={sep} does not fit the field's type {stored}")
        lengths = _scan_lengths(self.store, self.field)
        if pack:
            if sep is not None:
                lengths += 1
            # Stream offset of each document, and the end of the stream.
            self._starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            self._count = int(_window_count(int(self._starts[-1]), seq_len, self.stride, partial))
        else:
            # Index of each document's first window, and the number of windows.
            counts = _window_count(lengths, seq_len, self.stride, partial)
            self._starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
            self._count = int(self._starts[-1])

    def __len__(self) -> int:
        return len(self.store) if self.seq_len is None else self._count

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        if self._np_dtype is not None and array.dtype != self._np_dtype:
            array = array.astype(self._np_dtype)
        return torch.from_numpy(array)

    def window(self, index: int) -> tuple[int, int]:
        """``(document position, token offset)`` of window ``index`` (stream offset if ``pack``)."""
        if self.seq_len is None:
            raise ValueError("windows need seq_len")
        index = operator.index(index)
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"window {index} out of range for {len(self)} windows")
        if self.pack:
            offset = index * self.stride
            return bisect.bisect_right(self._starts, offset) - 1, offset
        doc = bisect.bisect_right(self._starts, index) - 1
        return doc, (index - int(self._starts[doc])) * self.stride

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        positions = _as_positions(indices)
        if self.seq_len is None:
            return [self._tensor(a) for a in self.store.take(positions, field=self.field)]
        if not positions:
            return []
        count = len(self)
        index = np.asarray(positions, dtype=np.int64)
        if index.size and (index.min() < -count or index.max() >= count):
            raise IndexError(f"index out of range for {count} windows")
        index = np.where(index < 0, index + count, index)
        k = int(self.seq_len)
        if not self.pack:
            docs = np.searchsorted(self._starts, index, side="right") - 1
            offsets = (index - self._starts[docs]) * self.stride
            arrays = self.store.take(docs.tolist(), field=self.field)
            out = []
            for array, o in zip(arrays, offsets.tolist()):
                chunk = self._tensor(array[o : o + k + 1])
                out.append((chunk[:-1], chunk[1:]))
            return out
        # Packed stream: fetch every document that any window of the batch touches, in one call.
        total = int(self._starts[-1])
        begin = index * self.stride
        end = np.minimum(begin + k + 1, total)
        first = np.searchsorted(self._starts, begin, side="right") - 1
        last = np.searchsorted(self._starts, end - 1, side="right") - 1
        needed = np.unique(np.concatenate([np.arange(a, b + 1) for a, b in zip(first, last)]))
        fetched = dict(zip(needed.tolist(), self.store.take(needed.tolist(), field=self.field)))
        sep = None if self.sep is None else np.array([self.sep], dtype=next(iter(fetched.values())).dtype)
        out = []
        for a, b, s, e in zip(first.tolist(), last.tolist(), begin.tolist(), end.tolist()):
            parts = []
            for d in range(a, b + 1):
                parts.append(fetched[d])
                if sep is not None:
                    parts.append(sep)
            base = int(self._starts[a])
            chunk = self._tensor(np.concatenate(parts)[s - base : e - base])
            out.append((chunk[:-1], chunk[1:]))
        return out


def pad_collate(batch: Sequence[Any], pad_id: int = 0, label_pad_id: int = -100) -> dict[str, torch.Tensor]:
    """Pads a batch of 1-D tensors, or of ``(x, y)`` pairs, to the longest (right padding).

    Returns ``{"input_ids", "attention_mask"}`` (plus ``"labels"`` for pairs, padded with
    ``label_pad_id``, the value ``cross_entropy`` ignores); the mask is 1 on tokens, 0 on
    padding, int64 as Hugging Face models expect. Use ``functools.partial`` for other pad ids.
    """
    if not batch:
        raise ValueError("pad_collate got an empty batch")
    pad = torch.nn.utils.rnn.pad_sequence
    pairs = isinstance(batch[0], (tuple, list))
    inputs = [item[0] for item in batch] if pairs else list(batch)
    lengths = torch.tensor([len(t) for t in inputs])
    width = int(lengths.max()) if len(lengths) else 0
    mask = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).long()
    out = {"input_ids": pad(inputs, batch_first=True, padding_value=pad_id), "attention_mask": mask}
    if pairs:
        labels = [item[1] for item in batch]
        if label_pad_id < 0 and not labels[0].dtype.is_signed:  # uint16 tokens cannot hold -100
            labels = [t.long() for t in labels]
        out["labels"] = pad(labels, batch_first=True, padding_value=label_pad_id)
    return out


# --------------------------------------------------------------------------------------------
# ArrayDataset


class ArrayDataset(_StoreDataset):
    """Numeric rows (bag-of-words counts, embeddings) as float tensors, indexed by position.

    ``field`` is an array field (one 1-D tensor per document) or an int64/float64 one (a 0-d
    tensor). Items are tensors of ``dtype`` (float32 by default), or ``(tensor, label)`` with
    ``label_field`` (the stored value; ``default_collate`` makes a tensor of a batch of them).
    """

    def __init__(
        self,
        store_or_path: Any,
        field: str,
        *,
        label_field: str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__(store_or_path)
        self.field = self._check_field(field, _NUMERIC_ARRAY + _NUMERIC_SCALAR)
        self.label_field = None if label_field is None else self._check_field(label_field)
        self.dtype = dtype
        self._np_dtype = _numpy_dtype(dtype)

    def _tensor(self, value: Any) -> torch.Tensor:
        return torch.from_numpy(np.asarray(value, dtype=self._np_dtype))

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        positions = _as_positions(indices)
        if self.label_field is None:
            return [self._tensor(v) for v in self.store.take(positions, field=self.field)]
        rows = self.store.take(positions, fields=(self.field, self.label_field))
        return [(self._tensor(value), label) for value, label in rows]


# --------------------------------------------------------------------------------------------
# Samplers and epochs


def distributed_sampler(
    dataset: Dataset, shuffle: bool = True, seed: int = 0, drop_last: bool = False
) -> DistributedSampler:
    """A ``DistributedSampler`` for the initialised process group, or a one-replica one.

    Under ``torch.distributed`` (initialised), rank and world size come from the default group;
    otherwise the sampler covers the whole dataset in this process. Either way the order depends
    on ``(seed, epoch)``: call ``set_epoch`` (or :func:`set_epoch` on the loader) every epoch.
    """
    if dist.is_available() and dist.is_initialized():
        return DistributedSampler(dataset, shuffle=shuffle, seed=seed, drop_last=drop_last)
    return DistributedSampler(
        dataset, num_replicas=1, rank=0, shuffle=shuffle, seed=seed, drop_last=drop_last
    )


def set_epoch(loader: Any, epoch: int) -> None:
    """Calls ``set_epoch(epoch)`` on a DataLoader's sampler, batch sampler and dataset that have it.

    Call it before iterating the epoch. Accepts a DataLoader, a sampler or a dataset.
    """
    seen: list[Any] = []
    candidates = [
        loader,
        getattr(loader, "sampler", None),
        getattr(loader, "batch_sampler", None),
        getattr(getattr(loader, "batch_sampler", None), "sampler", None),
        *_wrapped(getattr(loader, "dataset", None)),
    ]
    for obj in candidates:
        if obj is None or any(obj is s for s in seen):
            continue
        seen.append(obj)
        method = getattr(obj, "set_epoch", None)
        if callable(method):
            method(epoch)


def _wrapped(dataset: Any, depth: int = 0) -> Iterable[Any]:
    """``dataset`` and the datasets it wraps (``Subset``, ``random_split``, ``ConcatDataset``)."""
    if dataset is None or depth > 16:
        return
    yield dataset
    yield from _wrapped(getattr(dataset, "dataset", None), depth + 1)
    for inner in getattr(dataset, "datasets", None) or ():
        yield from _wrapped(inner, depth + 1)
