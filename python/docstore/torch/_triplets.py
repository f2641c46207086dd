"""``TripletDataset``: (query, positive document, negative document) texts for ranker training."""

from __future__ import annotations

import operator
import os
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from typing import Any

import numpy as np

import docstore

from .._store import DocStore
from ._base import Positions, StoreDataset, StoreHandle, as_positions
from ._epoch import EpochCounter
from ._random import below, uniform
from ._shared import SharesArrays


def _is_dataset(obj: Any, what: str) -> bool:
    """An ir_datasets dataset (or docstore.ir_datasets.load's) that has ``what``: not a mapping,
    not a store, and has ``{what}_iter``."""
    return (
        not isinstance(obj, (Mapping, DocStore, str, os.PathLike))
        and hasattr(obj, f"{what}_iter")
        and hasattr(obj, f"{what}_cls")
    )


def _query_texts(queries: Any, query_field: str) -> Mapping[str, Any]:
    """query id -> text of an ir_datasets dataset (``queries_iter()``) or of an iterable of query
    records (``queries_iter()`` itself, ``dataset.queries``): the ``query_field`` of each; with
    the default ``"text"`` and a query class that has no such field (TREC's title / description /
    narrative), its ``default_text()``."""
    if _is_dataset(queries, "queries"):
        queries = queries.queries_iter()
    texts: dict[str, Any] = {}
    text_of: Any = None
    for query in queries:
        if text_of is None:
            fields = getattr(query, "_fields", None)
            if fields is None or "query_id" not in fields:
                raise TypeError(
                    "queries must be a mapping of query id -> text, a store of queries, an ir_datasets "
                    f"dataset or its queries (records with a query_id), got {type(query).__name__} items"
                )
            if query_field in fields:
                text_of = operator.attrgetter(query_field)
            elif query_field == "text" and hasattr(query, "default_text"):
                text_of = type(query).default_text
            else:
                raise docstore.SchemaError(
                    f"the queries ({type(query).__name__}) have no field {query_field!r}: {fields}; "
                    "pass query_field="
                )
        texts[query.query_id] = text_of(query)
    return texts


def _positive_pairs(qrels: Any) -> list[tuple[str, str]]:
    """(query id, doc id) pairs with positive relevance, in the order given."""
    pairs: list[tuple[str, str]] = []
    if _is_dataset(qrels, "qrels"):
        qrels = qrels.qrels_iter()
    if isinstance(qrels, Mapping):
        for qid, docs in qrels.items():
            if isinstance(docs, str):
                pairs.append((qid, docs))
            elif isinstance(docs, Mapping):
                pairs.extend((qid, did) for did, rel in docs.items() if _relevance(rel, qid, did) > 0)
            else:
                pairs.extend((qid, did) for did in _in_order(docs))
        return pairs
    for record in qrels:  # ir_datasets qrels: namedtuples (query_id, doc_id, relevance, ...)
        if hasattr(record, "query_id"):
            qid, did, rel = record.query_id, record.doc_id, getattr(record, "relevance", 1)
        else:
            qid, did, *rest = record
            rel = rest[0] if rest else 1
        if _relevance(rel, qid, did) > 0:
            pairs.append((qid, did))
    if isinstance(qrels, AbstractSet):  # no order of its own: see _in_order
        pairs.sort()
    return pairs


def _in_order(doc_ids: Iterable[str]) -> Iterable[str]:
    """A set's ids sorted: iterating a set of str follows the process's hash seed, which differs
    between DDP ranks and runs, so items would not mean the same pair everywhere."""
    return sorted(doc_ids) if isinstance(doc_ids, AbstractSet) else doc_ids


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
    found: np.ndarray = keys[at] == values
    return found


def _positions(store: DocStore, doc_ids: Iterable[str], what: str) -> np.ndarray:
    doc_ids = list(doc_ids)
    out = store.positions(doc_ids)  # one parallel, GIL-free search for all of them
    if (out < 0).any():
        missing = [doc_ids[i] for i in np.flatnonzero(out < 0)[:5]]
        raise KeyError(f"{int((out < 0).sum())} {what} not in the store {store.path}, e.g. {missing}")
    return out


class TripletDataset(SharesArrays, StoreDataset):
    """(query text, positive document text, negative document text) for ranker training.

    ``queries`` maps query id -> text (or is a store of queries, read from its ``query_field``);
    ``qrels`` maps query id -> positive doc ids (a list, or a dict doc id -> relevance where
    relevance > 0 counts), or is an iterable of ``(query_id, doc_id, relevance)`` records such as
    ir_datasets' ``qrels_iter()``. There is one item per (query, positive document) pair, in the
    order of ``qrels``.

    Both may be an ir_datasets dataset (``ir_datasets.load(...)`` or
    ``docstore.ir_datasets.load(...)``): ``queries=dataset`` means its ``queries_iter()`` (each
    query's ``query_field``, or its ``default_text()`` when the default ``"text"`` is not a field
    of the query class), ``qrels=dataset`` its ``qrels_iter()``. ``store_or_path`` may be the
    dataset ``docstore.ir_datasets.load`` returns (its store): ``TripletDataset(ds, ds, ds,
    field="text")``.

    ``negatives="random"`` draws each negative uniformly from the documents of the store that
    are not positives of the query. ``negatives`` may instead map query id -> hard-negative doc
    ids (positives are removed from them; sets are sorted so that every process agrees on their
    order); an item whose query has none gets a random negative. A negative is never a positive
    of its query. The draw depends on ``(seed, epoch, index)`` only, not on
    workers, batching or order; ``set_epoch`` gives every epoch new negatives.
    ``positions(indices)`` returns the (positive, negative) positions that items will use.
    The pairs and query texts are numpy arrays that spawn and forkserver workers map from shared
    memory (see ``_shared``) and forked ones inherit, so no worker copies them.
    """

    _MAX_DRAWS = 32
    _shared_arrays = (
        "_pair_query",
        "_pair_pos",
        "_positive_keys",
        "_hard_offsets",
        "_hard_pos",
        "_query_keys",
        "_query_offsets",
    )

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
        on_corrupt: str = "raise",
    ) -> None:
        super().__init__(store_or_path, on_corrupt)
        store = self.store
        self.field = self._check_field(field)
        self.seed = operator.index(seed)
        self._epoch = EpochCounter(0)

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
            self._query_store: StoreHandle | None = StoreHandle(queries)
            qstore = self._query_store.get()
            if query_field not in qstore.fields:
                raise docstore.SchemaError(f"the query store has no field {query_field!r}: {qstore.fields}")
            self._query_keys: Any = _positions(qstore, qids, "query ids")
            self.query_field: str | None = query_field
        else:
            if not isinstance(queries, Mapping):
                iterable = _is_dataset(queries, "queries") or isinstance(queries, Iterable)
                if isinstance(queries, (bytes, str)) or not iterable:
                    raise TypeError(
                        "queries must be a mapping of query id -> text, a store of queries, or an "
                        "ir_datasets dataset (or its queries_iter())"
                    )
                queries = _query_texts(queries, query_field)
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

        self._pair_query = pair_query
        self._pair_pos = _positions(store, (did for _, did in pairs), "positive doc ids")
        # Sorted (query, position) keys of every positive, to reject a negative that is one.
        n = max(len(store), 1)
        self._positive_keys = np.unique(pair_query * n + self._pair_pos)

        if isinstance(negatives, str):
            if negatives != "random":
                raise ValueError(f"negatives must be 'random' or a mapping, got {negatives!r}")
            self.negatives = "random"
            self._hard_offsets: np.ndarray | None = None
            self._hard_pos = np.zeros(0, dtype=np.int64)
        elif isinstance(negatives, Mapping):
            self.negatives = "hard"
            counts = np.zeros(len(qids), dtype=np.int64)
            chunks = []
            for q, qid in enumerate(qids):
                hard = negatives.get(qid, ())
                hard = (hard,) if isinstance(hard, str) else _in_order(hard)  # one id, as qrels may give
                found = _positions(store, hard, f"hard negatives of query {qid!r}")
                if len(found):
                    found = found[~_in_sorted(q * n + found, self._positive_keys)]
                counts[q] = len(found)
                chunks.append(found)
            self._hard_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
            self._hard_pos = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)
        else:
            raise TypeError("negatives must be 'random' or a mapping of query id -> doc ids")
        # A query whose positives are the whole store has no negative to draw.
        queries_seen, positive_counts = np.unique(self._positive_keys // n, return_counts=True)
        full = queries_seen[positive_counts >= len(store)]
        if len(full):
            raise ValueError(
                f"every document of the store is a positive of query {qids[int(full[0])]!r}: "
                "it has no negative to draw"
            )
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

    def positions(self, indices: Positions) -> tuple[np.ndarray, np.ndarray]:
        """Store positions of the positive and negative documents of items ``indices``."""
        index = np.asarray(as_positions(indices), dtype=np.int64)
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
                u = uniform(self.seed, epoch, index[hard], 0)
                negative[hard] = self._hard_pos[start[hard] + below(u, have[hard])]
                todo &= ~hard
        for attempt in range(self._MAX_DRAWS):
            if not todo.any():
                break
            u = uniform(self.seed, epoch, index[todo], attempt + 1)
            negative[todo] = below(u, n)
            clash = _in_sorted(query * n + negative, self._positive_keys)
            todo &= clash
        # A query whose positives fill most of the store (rare): one exact draw among the others.
        for i in np.flatnonzero(todo).tolist():
            u = uniform(self.seed, epoch, index[i : i + 1], self._MAX_DRAWS + 1)
            negative[i] = self._non_positive(int(query[i]), u, n)
        return self._pair_pos[index], negative

    def _non_positive(self, query: int, u: np.ndarray, n: int) -> int:
        """A uniform draw (from ``u``) among the documents that are not positives of ``query``."""
        keys = self._positive_keys
        lo, hi = np.searchsorted(keys, [query * n, (query + 1) * n])
        positives = (keys[lo:hi] - query * n).tolist()  # sorted positions
        rank = int(below(u, n - len(positives))[0])
        # The document with `rank` non-positives before it: step past every positive at or
        # below the candidate, in order.
        p = rank
        for q in positives:
            if q > p:
                break
            p += 1
        return p

    def store_positions(self, indices: Positions) -> np.ndarray:
        """The positive and negative documents of items ``indices`` (the queries come from
        the query store or memory)."""
        return np.concatenate(self.positions(indices))

    def __getitems__(self, indices: Positions) -> list[tuple[str, Any, Any]]:
        index = np.asarray(as_positions(indices), dtype=np.int64)
        positive, negative = self.positions(index)
        texts = self._take(np.concatenate([positive, negative]), field=self.field)
        query = self._pair_query[np.where(index < 0, index + len(self), index)]
        if self._query_store is not None:
            keys = self._query_keys[query].tolist()
            query_texts = self._take(keys, store=self._query_store.get(), field=self.query_field)
        else:
            starts = self._query_offsets[query].tolist()
            ends = self._query_offsets[query + 1].tolist()
            blob = memoryview(self._query_keys)
            query_texts = [str(blob[a:b], "utf-8") for a, b in zip(starts, ends)]
        m = len(index)
        return self._kept(list(zip(query_texts, texts[:m], texts[m:])), lambda item: item)
