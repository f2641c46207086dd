"""ir_datasets' ``PickleLz4FullStore``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from .base import Ops, Peer


class TokenDoc(NamedTuple):
    """ir_datasets record for the token corpus (its stores pickle whatever tuple they get)."""

    doc_id: str
    tokens: Any


class IrDatasetsStore(Peer):
    """ir_datasets' ``PickleLz4FullStore``, set up the way its dataset definitions do
    (e.g. ``msmarco_passage``): ``GenericDoc`` records, ``lookup_field='doc_id'``,
    ``index_fields=['doc_id']``, default options (``FileAccess.FILE``). Build = its
    ``build()`` draining ``init_iter_fn``; lookups = ``docs_store.get`` / ``get_many``."""

    name = "ir_datasets"
    requires = "ir_datasets"
    kinds = ("text", "tokens")
    thread_safe = False
    thread_note = "one docs_store per thread: a store reads through one shared file object"
    how = "`PickleLz4FullStore`, `FileAccess.FILE` (default): `docs_store.get`/`get_many`, `docs_iter()[i]`"

    def __init__(self, file_access: str = "FILE") -> None:
        self.file_access = file_access
        if file_access != "FILE":
            self.name = f"ir_datasets:{file_access.lower()}"
            self.how = (
                f"`PickleLz4FullStore`, `DocstoreOptions(file_access=FileAccess.{file_access})`: "
                "`docs_store.get`/`get_many`, `docs_iter()[i]`"
            )

    def _store(self, path, init_iter_fn, count_hint=None, field="text"):
        import logging

        from ir_datasets.formats import GenericDoc
        from ir_datasets.indices import DocstoreOptions, FileAccess, PickleLz4FullStore

        logging.getLogger("ir_datasets").setLevel(logging.WARNING)
        return PickleLz4FullStore(
            path=str(path),
            init_iter_fn=init_iter_fn,
            data_cls=GenericDoc if field == "text" else TokenDoc,
            lookup_field="doc_id",
            index_fields=["doc_id"],
            count_hint=count_hint,
            options=DocstoreOptions(file_access=getattr(FileAccess, self.file_access)),
        )

    def build(self, path, records, field="text"):
        from ir_datasets.formats import GenericDoc

        cls = GenericDoc if field == "text" else TokenDoc

        def docs_iter():
            for r in records:
                yield cls(r["doc_id"], r[field])

        count = len(records) if hasattr(records, "__len__") else None
        store = self._store(path, docs_iter, count, field)
        store.build()
        return store

    def open(self, path):
        def not_built():
            raise RuntimeError(f"no ir_datasets store at {path}")

        meta = Path(path) / "bin.meta"  # ir_datasets' own record of the record fields
        field = meta.read_text().split()[1] if meta.exists() else "text"
        store = self._store(path, not_built, field=field)
        if not store.built():
            not_built()
        return store

    def ops(self, obj, field):
        def at(p):
            return iter(obj)[p][1]  # what ``dataset.docs_iter()[p]`` does

        return Ops(
            get=lambda i: obj.get(i)[1],
            at=at,
            get_many=lambda ids: obj.get_many(ids, field=field),
            take=lambda ps: [at(p) for p in ps],
        )

    def get(self, obj, doc_id):
        return obj.get(doc_id).text

    def get_many(self, obj, doc_ids):
        return obj.get_many(doc_ids, field="text")

    def close(self, obj):
        obj.lookup.close()

    def for_thread(self, obj, path):
        return self.open(path)
