"""docstore itself, and its variants (threads, levels)."""

from __future__ import annotations

import contextlib
import operator
from pathlib import Path
from typing import Any

from .base import Ops, Peer, dir_size


class DocstoreStore(Peer):
    """docstore: ``docstore.build`` from the records, ``store[doc_id].text`` and
    ``store.get_many(ids, field="text")``."""

    name = "docstore"
    requires = "docstore"
    kinds = ("text", "tokens")
    how = "`store[doc_id].text`, `store.at(i, field=)`, `get_many(ids, field=)`, `take(positions, field=)`"
    FILE = "store.docstore"

    def __init__(self, num_threads: int | None = None, **writer_options: Any) -> None:
        #: docstore.set_num_threads() for lookups (None: the default pool); the comparison suite
        #: sets it around each measurement
        self.num_threads = num_threads
        #: the system whose files this one reads (a lookup-only variant needs no build of its own)
        self.shares_files_with: str | None = None
        if num_threads is not None:
            self.name = f"docstore:t{num_threads}"
            self.how = (
                f"docstore with `docstore.set_num_threads({num_threads})` (decodes in the calling thread)"
            )
            if not writer_options:
                self.shares_files_with = "docstore"
        if writer_options:
            self.name += ":" + ",".join(f"{k}{v}" for k, v in sorted(writer_options.items()))
            options = ", ".join(f"{k}={v}" for k, v in writer_options.items())
            self.how = f"docstore built with `Writer(..., {options})`"
        self.writer_options = writer_options

    @contextlib.contextmanager
    def lookup_threads(self):
        """``docstore.set_num_threads(num_threads)`` inside, restored afterwards."""
        if self.num_threads is None:
            yield
            return
        import docstore

        old = docstore.get_num_threads()
        docstore.set_num_threads(self.num_threads)
        try:
            yield
        finally:
            docstore.set_num_threads(old)

    def _file(self, path) -> Path:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        return path / self.FILE

    def build(self, path, records, field="text"):
        import docstore

        if field != "text":  # arrays: declare the element type rather than infer it
            with docstore.Writer(self._file(path), fields={field: "int32[]"}, **self.writer_options) as w:
                chunk: list = []
                for r in records:
                    chunk.append(r)
                    if len(chunk) == 4096:
                        w.add_many([c["doc_id"] for c in chunk], {field: [c[field] for c in chunk]})
                        chunk = []
                if chunk:
                    w.add_many([c["doc_id"] for c in chunk], {field: [c[field] for c in chunk]})
            return self.open(path)
        return docstore.build(self._file(path), records, id_field="doc_id", **self.writer_options)

    def open(self, path):
        import docstore

        return docstore.open(self._file(path))

    def get(self, obj, doc_id):
        return obj[doc_id].text

    def get_many(self, obj, doc_ids):
        return obj.get_many(doc_ids, field="text")

    def size_on_disk(self, path):
        return dir_size(self._file(path))

    def files(self, path):
        return [self._file(path)]

    def close(self, obj):
        close = getattr(obj, "close", None)
        if close is not None:
            close()

    def ops(self, obj, field):
        attr = operator.attrgetter(field)
        get_many, take, at = obj.get_many, obj.take, obj.at
        return Ops(
            get=lambda i: attr(obj[i]),
            at=lambda p: at(p, field=field),
            get_many=lambda ids: get_many(ids, field=field),
            take=lambda ps: take(ps, field=field),
        )
