"""The systems compared with docstore, behind one small interface.

Every system implements::

    build(path, records) -> obj        # records: iterable of {"doc_id": str, "text": str}
    open(path) -> obj                  # reopen what build() wrote (fresh handles, no caches)
    get(obj, doc_id) -> str            # one document's text by id
    get_many(obj, doc_ids) -> dict     # {doc_id: text}
    size_on_disk(path) -> int | None   # bytes of every file build() wrote; None if in memory
    close(obj)

``path`` is a directory owned by the system (created if missing). Imports of optional
packages happen lazily, so this module imports without them; ``requires`` names the module
a benchmark should ``pytest.importorskip`` first.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

Record = Mapping[str, Any]


def dir_size(path: str | os.PathLike) -> int:
    """Total bytes of the regular files under ``path`` (or of ``path`` itself if a file)."""
    p = Path(path)
    if p.is_file():
        return p.stat().st_size
    total = 0
    for root, _dirs, files in os.walk(p):
        for f in files:
            fp = os.path.join(root, f)
            if not os.path.islink(fp):
                total += os.path.getsize(fp)
    return total


class Peer:
    name: str = "?"
    requires: str | None = None
    #: nothing on disk: build() returns the store itself and there is nothing to open()
    in_memory: bool = False
    #: can one object serve lookups from several threads at once? If not, each thread gets
    #: its own handle from ``for_thread`` (what a user of that system would have to do).
    thread_safe: bool = True
    thread_note: str = ""

    def build(self, path: Path, records: Iterable[Record]) -> Any:
        raise NotImplementedError

    def open(self, path: Path) -> Any:
        raise NotImplementedError

    def get(self, obj: Any, doc_id: str) -> str:
        raise NotImplementedError

    def get_many(self, obj: Any, doc_ids: list[str]) -> dict[str, str]:
        raise NotImplementedError

    def size_on_disk(self, path: Path) -> int | None:
        return dir_size(path)

    def close(self, obj: Any) -> None:
        pass

    def for_thread(self, obj: Any, path: Path) -> Any:
        """A handle for another thread: ``obj`` itself if thread-safe, else a new one
        (closed by the caller with ``close_thread_handle``)."""
        return obj

    def close_thread_handle(self, handle: Any, obj: Any) -> None:
        if handle is not obj:
            self.close(handle)


class DictStore(Peer):
    """Everything in a Python dict: the in-memory ceiling (nothing on disk, nothing to open)."""

    name = "dict"
    in_memory = True

    def build(self, path, records):
        return {r["doc_id"]: r["text"] for r in records}

    def open(self, path):
        raise NotImplementedError("DictStore lives in memory only")

    def get(self, obj, doc_id):
        return obj[doc_id]

    def get_many(self, obj, doc_ids):
        return {i: obj[i] for i in doc_ids}

    def size_on_disk(self, path):
        return None


class IndexedStore(Peer):
    """The "indexed" loader: a TSV file (``doc_id\\ttext`` per line) plus a dict of
    doc_id -> byte offset built by scanning it once; lookup = seek + readline + split."""

    name = "indexed-tsv"
    thread_safe = False
    thread_note = "one file object per thread (shared offsets dict): seek+readline share a position"
    TSV = "docs.tsv"

    def build(self, path, records):
        from corpora import tsv_clean

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        with open(path / self.TSV, "w", encoding="utf-8", newline="\n") as f:
            for r in records:
                f.write(f"{r['doc_id']}\t{tsv_clean(r['text'])}\n")
        return self.open(path)

    @classmethod
    def index_tsv(cls, tsv: str | os.PathLike) -> dict[str, int]:
        offsets: dict[str, int] = {}
        pos = 0
        with open(tsv, "rb") as f:
            for line in f:
                offsets[line[: line.index(b"\t")].decode("utf-8")] = pos
                pos += len(line)
        return offsets

    def open(self, path):
        tsv = Path(path) / self.TSV
        offsets = self.index_tsv(tsv)
        return open(tsv, "rb"), offsets

    def get(self, obj, doc_id):
        f, offsets = obj
        f.seek(offsets[doc_id])
        return f.readline().rstrip(b"\n").split(b"\t", 1)[1].decode("utf-8")

    def get_many(self, obj, doc_ids):
        f, offsets = obj
        out = {}
        for i in doc_ids:
            f.seek(offsets[i])
            out[i] = f.readline().rstrip(b"\n").split(b"\t", 1)[1].decode("utf-8")
        return out

    def close(self, obj):
        obj[0].close()

    def for_thread(self, obj, path):
        return open(Path(path) / self.TSV, "rb"), obj[1]


class IrDatasetsStore(Peer):
    """ir_datasets' ``PickleLz4FullStore``, set up the way its dataset definitions do
    (e.g. ``msmarco_passage``): ``GenericDoc`` records, ``lookup_field='doc_id'``,
    ``index_fields=['doc_id']``, default options (``FileAccess.FILE``). Build = its
    ``build()`` draining ``init_iter_fn``; lookups = ``docs_store.get`` / ``get_many``."""

    name = "ir_datasets"
    requires = "ir_datasets"
    thread_safe = False
    thread_note = "one docs_store per thread: a store reads through one shared file object"

    @staticmethod
    def _store(path, init_iter_fn, count_hint=None):
        import logging

        from ir_datasets.formats import GenericDoc
        from ir_datasets.indices import PickleLz4FullStore

        logging.getLogger("ir_datasets").setLevel(logging.WARNING)
        return PickleLz4FullStore(
            path=str(path),
            init_iter_fn=init_iter_fn,
            data_cls=GenericDoc,
            lookup_field="doc_id",
            index_fields=["doc_id"],
            count_hint=count_hint,
        )

    def build(self, path, records):
        from ir_datasets.formats import GenericDoc

        def docs_iter():
            for r in records:
                yield GenericDoc(r["doc_id"], r["text"])

        count = len(records) if hasattr(records, "__len__") else None
        store = self._store(path, docs_iter, count)
        store.build()
        return store

    def open(self, path):
        def not_built():
            raise RuntimeError(f"no ir_datasets store at {path}")

        store = self._store(path, not_built)
        if not store.built():
            not_built()
        return store

    def get(self, obj, doc_id):
        return obj.get(doc_id).text

    def get_many(self, obj, doc_ids):
        return obj.get_many(doc_ids, field="text")

    def close(self, obj):
        obj.lookup.close()

    def for_thread(self, obj, path):
        return self.open(path)


class DocstoreStore(Peer):
    """docstore: ``docstore.build`` from the records, ``store[doc_id].text`` and
    ``store.get_many(ids, field="text")``."""

    name = "docstore"
    requires = "docstore"
    FILE = "store.docstore"

    def __init__(self, **writer_options: Any) -> None:
        self.writer_options = writer_options

    def _file(self, path) -> Path:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        return path / self.FILE

    def build(self, path, records):
        import docstore

        if self.writer_options:  # non-default level etc.: go through the Writer
            with docstore.Writer(self._file(path), fields={"text": "str"}, **self.writer_options) as w:
                for r in records:
                    w.add(r["doc_id"], text=r["text"])
            return self.open(path)
        return docstore.build(self._file(path), records, id_field="doc_id")

    def build_arrow(self, path, table) -> Any:
        """Build from a pyarrow Table/RecordBatch with columns ``doc_id``, ``text``."""
        import docstore

        with docstore.Writer(self._file(path), fields={"text": "str"}, **self.writer_options) as w:
            if hasattr(table, "to_batches"):
                for batch in table.to_batches():
                    w.add_many(batch)
            else:
                w.add_many(table)
        return self.open(path)

    def build_columns(self, path, doc_ids: list[str], texts: list[str]) -> Any:
        """Build with the columnar ``Writer.add_many(ids, {"text": [...]})``."""
        import docstore

        with docstore.Writer(self._file(path), fields={"text": "str"}, **self.writer_options) as w:
            w.add_many(doc_ids, {"text": texts})
        return self.open(path)

    def open(self, path):
        import docstore

        return docstore.open(self._file(path))

    def get(self, obj, doc_id):
        return obj[doc_id].text

    def get_field(self, obj, doc_id):
        return obj.get(doc_id, field="text")

    def get_many(self, obj, doc_ids):
        return obj.get_many(doc_ids, field="text")

    def get_many_docs(self, obj, doc_ids):
        return obj.get_many(doc_ids)

    def size_on_disk(self, path):
        return dir_size(self._file(path))

    def close(self, obj):
        close = getattr(obj, "close", None)
        if close is not None:
            close()


PEERS: dict[str, Peer] = {
    p.name: p for p in (DocstoreStore(), IrDatasetsStore(), IndexedStore(), DictStore())
}
