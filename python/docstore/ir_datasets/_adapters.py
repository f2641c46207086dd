"""The ir_datasets side of ``docstore.ir_datasets.load``: a docs handler, its docstore and its
``docs_iter()`` over a store, and the ``ir_datasets.Dataset`` that serves them beside the real
dataset's queries, qrels and the rest."""

from __future__ import annotations

import itertools
import operator
import os
from collections.abc import Iterable, Iterator
from typing import Any

import ir_datasets
from ir_datasets.formats import BaseDocs
from ir_datasets.indices import Docstore as _IrdsDocstore
from ir_datasets.util import apply_sub_slice, slice_idx

from .._store import DocStore
from ._types import Decoder, _Schema

# Documents decoded per `take` while iterating: small first (one `next()` or `docs[i]` decodes
# little), growing to _CHUNK.
_FIRST_CHUNK = 16
_CHUNK = 4096


class DocstoreDocsIter:
    """What ``docs_iter()`` returns: an iterator over the documents that also takes
    ``[index]`` and ``[start:stop:step]`` as ir_datasets' own docs iterators do (slices give
    another such iterator, floats in a slice are fractions of the collection), decoding a chunk
    of documents at a time. Indexing is relative to what is left: after ``next()``, ``[0]`` is the
    next document."""

    def __init__(self, docs: DocstoreDocs, where: slice) -> None:
        self._docs = docs
        self._slice = where
        self._buffer: list[Any] = []
        self._next = 0
        self._chunk = _FIRST_CHUNK

    def __iter__(self) -> DocstoreDocsIter:
        return self

    def __next__(self) -> Any:
        if self._next >= len(self._buffer):
            start, stop, step = self._slice.start, self._slice.stop, self._slice.step or 1
            if start >= stop:
                raise StopIteration
            positions = range(start, min(stop, start + step * self._chunk), step)
            self._chunk = min(self._chunk * 2, _CHUNK)
            self._buffer = self._docs._take(positions)
            self._next = 0
        doc = self._buffer[self._next]
        self._next += 1
        s = self._slice
        self._slice = slice(s.start + (s.step or 1), s.stop, s.step)
        return doc

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            new = apply_sub_slice(self._slice, key)  # ir_datasets' own slice arithmetic
            # ...kept within this iterator (ir_datasets would read before its start)
            start = max(new.start, self._slice.start)
            return DocstoreDocsIter(self._docs, slice(start, min(new.stop, self._slice.stop), new.step))
        if isinstance(key, bool) or not hasattr(key, "__index__"):
            raise TypeError("key must be int or slice")
        one = slice_idx(self._slice, operator.index(key))
        if not (self._slice.start <= one.start < one.stop):
            raise IndexError(f"document index {key} out of range")
        return self._docs._take(range(one.start, one.start + 1))[0]

    def __repr__(self) -> str:
        s = self._slice
        return f"<DocstoreDocsIter {os.fspath(self._docs._store.path)!r} [{s.start}:{s.stop}:{s.step or 1}]>"


class DocstoreDocstore(_IrdsDocstore):  # type: ignore[misc]  # ir_datasets has no types
    """What ``docs_store()`` returns: ir_datasets' docstore API over a docstore store.

    ``get(doc_id, field=None)`` raises ``KeyError('doc_id=... not found')`` for a missing id, as
    ir_datasets does; ``get_many(doc_ids, field=None)`` returns a dict without the missing ids,
    in request order (ir_datasets' lz4 store gives file order; the dicts compare equal);
    ``get_many_iter(doc_ids)`` yields one document per id found, repeats too. One str given as
    ``doc_ids`` is one id, as in ir_datasets' lz4 store. Lookups of many ids are one batched,
    parallel read.
    """

    def __init__(self, docs: DocstoreDocs) -> None:
        super().__init__(docs._schema.cls, "doc_id")
        self._docs = docs
        self._store = docs._store
        self.path = os.fspath(docs._store.path)

    def _field(self, field: str) -> Decoder | None:
        if field not in self._docs._schema.names:
            raise ValueError(f"{self._docs._schema.cls.__name__} has no field {field!r}")
        return self._docs._schema.decoders.get(field)

    def get(self, doc_id: str, field: str | None = None) -> Any:
        if field is not None:
            decode = self._field(field)
            value = self._store.get(doc_id, _MISSING, field=field)
            if value is _MISSING:
                raise KeyError(f"doc_id={doc_id} not found")
            return value if decode is None else decode(value)
        row = self._store.get(doc_id, None, fields=self._docs._schema.names)
        if row is None:
            raise KeyError(f"doc_id={doc_id} not found")
        return self._docs._schema.make([row])[0]

    def get_many(self, doc_ids: Iterable[str], field: str | None = None) -> dict[str, Any]:
        ids = [doc_ids] if isinstance(doc_ids, str) else doc_ids
        if field is not None:
            decode = self._field(field)
            found = self._store.get_many(ids, field=field)
            return found if decode is None else {k: decode(v) for k, v in found.items()}
        found = self._store.get_many(ids, fields=self._docs._schema.names)
        return dict(zip(found, self._docs._schema.make(list(found.values()))))

    def get_many_iter(self, doc_ids: Iterable[str]) -> Iterator[Any]:
        ids = [doc_ids] if isinstance(doc_ids, str) else doc_ids
        rows = self._store.get_many_iter(ids, fields=self._docs._schema.names)
        make = self._docs._schema.make
        while True:
            chunk = list(itertools.islice(rows, _CHUNK))
            if not chunk:
                return
            yield from make(chunk)

    def __iter__(self) -> DocstoreDocsIter:
        return self._docs.docs_iter()

    def __len__(self) -> int:
        return len(self._store)

    def count(self) -> int:
        return len(self._store)

    def built(self) -> bool:
        return True

    def build(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"<DocstoreDocstore {self.path!r}: {len(self._store)} {self._docs._schema.cls.__name__}>"


_MISSING = object()


class DocstoreDocs(BaseDocs):  # type: ignore[misc]  # ir_datasets has no types
    """The docs handler of a :class:`DocstoreDataset`: ``docs_iter()``, ``docs_store()``,
    ``docs_count()``, ``docs_cls()`` over a store; language and namespace are the dataset's."""

    def __init__(self, store: DocStore, dataset: Any) -> None:
        self._store = store
        self._dataset = dataset
        self._schema = _Schema.for_store(dataset.docs_cls(), store)
        self._docstore: DocstoreDocstore | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (DocstoreDocs, (self._store, self._dataset))

    def _take(self, positions: range) -> list[Any]:
        return self._schema.make(self._store.take(positions, fields=self._schema.names))

    def docs_iter(self) -> DocstoreDocsIter:
        return DocstoreDocsIter(self, slice(0, len(self._store), 1))

    def docs_count(self) -> int:
        return len(self._store)

    def docs_cls(self) -> type:
        return self._schema.cls

    def docs_store(self, field: str = "doc_id", options: Any = None) -> DocstoreDocstore:
        if field != "doc_id":
            raise ValueError(f"a docstore store is looked up by doc_id, not by {field!r}")
        if self._docstore is None:
            self._docstore = DocstoreDocstore(self)
        return self._docstore

    def docs_handler(self) -> DocstoreDocs:
        return self

    def docs_lang(self) -> Any:
        lang = getattr(self._dataset, "docs_lang", None)
        return lang() if lang is not None else None

    def docs_namespace(self) -> Any:
        namespace = getattr(self._dataset, "docs_namespace", None)
        return namespace() if namespace is not None else None


class DocstoreDataset(ir_datasets.Dataset):  # type: ignore[misc]  # ir_datasets has no types
    """``ir_datasets.load(dataset_id)`` with its documents served from a store: an
    ``ir_datasets.Dataset`` whose docs handler is a :class:`DocstoreDocs` and whose every other
    attribute (queries, qrels, scoreddocs, docpairs, metadata, dataset_id ...) is the real
    dataset's. ``.docstore`` is the open :class:`docstore.DocStore`, ``.source`` the real dataset.
    """

    def __init__(self, docs: DocstoreDocs, dataset: Any, dataset_id: str | None = None) -> None:
        super().__init__(docs, dataset)
        self._dataset_id = dataset_id

    def __reduce_ex__(self, protocol: Any) -> Any:
        # Loaded by id: pickles as the id and the store (which pickles as its path), so that
        # DataLoader workers can receive it (ir_datasets' registered datasets do not pickle).
        if self._dataset_id is not None:
            from . import load  # the package's: it imports this module

            return (load, (self._dataset_id, self.docstore))
        return super().__reduce_ex__(protocol)

    def __setstate__(self, state: Any) -> None:
        super().__setstate__(state)
        self._beta_apis: dict[str, Any] = {}  # which ir_datasets' own __setstate__ leaves out
        self._dataset_id = None

    @property
    def docstore(self) -> DocStore:
        return self._constituents[0]._store  # type: ignore[no-any-return]

    @property
    def source(self) -> Any:
        return self._constituents[1]

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]}, docstore={os.fspath(self.docstore.path)!r})"
