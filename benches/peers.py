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

The comparison suite (``test_compare.py``) uses a wider interface on top, implemented by every
peer in :data:`COMPARE_PEERS`::

    build(path, records, field="text")  # records: {"doc_id": str, field: str | int32 array}
    ops(obj, field) -> Ops               # fast bound callables: get(id), at(pos),
                                         #   get_many(ids) (dict or list), take(positions) (list)
    files(path) -> [Path]                # every file of the store (evicted for cold-cache runs)
    reopen(obj, path)                    # close and open again, keeping what a user keeps in
                                         #   memory (an id -> row map); used after eviction

Values are ``str`` for text corpora and int32 numpy arrays for ``token_arrays``. Systems with
no lookup by id get the one their users build: a Python dict doc_id -> row, made from the id
column when the store is opened (``position_map`` = True).
"""

from __future__ import annotations

import contextlib
import operator
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Callable, NamedTuple

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


class Ops(NamedTuple):
    """One store's lookups, bound to an open handle and a field (see ``Peer.ops``)."""

    get: Callable[[str], Any]  # value of one doc by id
    at: Callable[[int], Any]  # value of one doc by position (insertion order)
    get_many: Callable[[list[str]], Any]  # {id: value} or [value] in request order
    take: Callable[[list[int]], Any]  # [value] in request order


def batch_values(result: Any, ids: list) -> list:
    """A ``get_many``/``take`` result as a list in request order (dicts are keyed by id)."""
    if isinstance(result, Mapping):
        return [result[i] for i in ids]
    return list(result)


def _values_equal(a: Any, b: Any) -> bool:
    if isinstance(b, str):
        return a == b
    import numpy as np

    return isinstance(a, np.ndarray) and a.dtype == np.int32 and np.array_equal(a, b)


def _decoder(field: str) -> Callable[[bytes], Any]:
    """bytes -> value, for the key-value stores that keep raw bytes."""
    if field == "tokens":
        import numpy as np

        return lambda b: np.frombuffer(b, dtype=np.int32)
    return lambda b: b.decode("utf-8")


def _encode(value: Any) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else value.tobytes()


def _write_ids(path: Path, ids: list[str]) -> None:
    """The ids in insertion order, one per line: the position map of stores keyed by id only."""
    with open(Path(path) / IDS_FILE, "w", encoding="utf-8") as f:
        for i in ids:
            f.write(i + "\n")


def _read_ids(path: Path) -> list[str]:
    with open(Path(path) / IDS_FILE, encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


IDS_FILE = "ids.txt"


class Peer:
    name: str = "?"
    requires: str | None = None
    #: value kinds the system can store: "text" (str) and/or "tokens" (int32 arrays)
    kinds: tuple[str, ...] = ("text",)
    #: doc_id -> row lookups go through a Python dict built on open (the system has none)
    position_map: bool = False
    #: one line on how the system is used here (for the report)
    how: str = ""
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

    def lookup_threads(self) -> contextlib.AbstractContextManager:
        """Context in which this system's lookups are measured (docstore's decode threads)."""
        return contextlib.nullcontext()

    def close_thread_handle(self, handle: Any, obj: Any) -> None:
        if handle is not obj:
            self.close(handle)

    # -- comparison-suite interface --------------------------------------------------------

    def ops(self, obj: Any, field: str) -> Ops:
        raise NotImplementedError

    def files(self, path: Path) -> list[Path]:
        p = Path(path)
        if p.is_file():
            return [p]
        return sorted(q for q in p.rglob("*") if q.is_file() and not q.is_symlink())

    def reopen(self, obj: Any, path: Path, between: Callable[[], Any] | None = None) -> Any:
        """Close, call ``between()`` (the cache eviction), open again; what a user would keep in
        memory across (an id -> row map, an offsets dict) is kept."""
        self.close(obj)
        if between is not None:
            between()
        return self.open(path)

    def version(self) -> str:
        if not self.requires:
            return "-"
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as v

        try:
            return v(self.dist or self.requires)
        except PackageNotFoundError:
            return "?"

    #: the PyPI distribution name, when it differs from ``requires``
    dist: str | None = None


class _PosDict(dict):
    """A dict that also keeps its values in a list, for lookups by position."""

    by_pos: list


class DictStore(Peer):
    """Everything in a Python dict: the in-memory ceiling (nothing on disk, nothing to open)."""

    name = "dict"
    in_memory = True
    kinds = ("text", "tokens")
    how = "`d[doc_id]`; by position a list of the same values"

    def build(self, path, records, field="text"):
        d = _PosDict((r["doc_id"], r[field]) for r in records)
        d.by_pos = list(d.values())
        return d

    def ops(self, obj, field):
        by_pos = obj.by_pos
        return Ops(
            get=obj.__getitem__,
            at=by_pos.__getitem__,
            get_many=lambda ids: {i: obj[i] for i in ids},
            take=lambda ps: [by_pos[p] for p in ps],
        )

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
    how = "TSV + dict doc_id -> byte offset built by a scan on open; seek + readline"
    TSV = "docs.tsv"

    def build(self, path, records, field="text"):
        from corpora import tsv_clean

        if field != "text":
            raise ValueError("the TSV loader stores text only")
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        with open(path / self.TSV, "w", encoding="utf-8", newline="\n") as f:
            for r in records:
                f.write(f"{r['doc_id']}\t{tsv_clean(r['text'])}\n")
        return self.open(path)

    def ops(self, obj, field):
        f, offsets = obj
        by_pos = list(offsets.values())  # the dict keeps file order = insertion order

        def at(p):
            f.seek(by_pos[p])
            return f.readline().rstrip(b"\n").split(b"\t", 1)[1].decode("utf-8")

        return Ops(
            get=lambda i: self.get(obj, i),
            at=at,
            get_many=lambda ids: self.get_many(obj, ids),
            take=lambda ps: [at(p) for p in ps],
        )

    def reopen(self, obj, path, between=None):
        obj[0].close()
        if between is not None:
            between()
        return open(Path(path) / self.TSV, "rb"), obj[1]  # the offsets dict stays in memory

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


class TokenDoc(NamedTuple):
    """ir_datasets record for the token corpus (its stores pickle whatever tuple they get)."""

    doc_id: str
    tokens: Any


def _chunks(records: Iterable[Record], size: int):
    chunk: list = []
    for r in records:
        chunk.append(r)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _arrow_schema(field: str):
    import pyarrow as pa

    value = pa.large_string() if field == "text" else pa.list_(pa.int32())
    return pa.schema([("doc_id", pa.string()), (field, value)])


def _arrow_batches(records: Iterable[Record], field: str, rows: int):
    """Record batches of ``rows`` rows (``doc_id``, ``field``) from the records."""
    import numpy as np
    import pyarrow as pa

    schema = _arrow_schema(field)
    for chunk in _chunks(records, rows):
        ids = pa.array([r["doc_id"] for r in chunk], pa.string())
        if field == "text":
            col = pa.array([r[field] for r in chunk], pa.large_string())
        else:
            vals = [r[field] for r in chunk]
            off = np.zeros(len(vals) + 1, dtype=np.int32)
            np.cumsum([len(v) for v in vals], out=off[1:])
            col = pa.ListArray.from_arrays(pa.array(off), pa.array(np.concatenate(vals), pa.int32()))
        yield pa.record_batch([ids, col], schema=schema)


def _list_values(col) -> list:
    """An Arrow column of text or int32 lists as Python values (str / int32 numpy arrays)."""
    import numpy as np
    import pyarrow as pa

    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
        values = col.values.to_numpy()
        off = col.offsets.to_numpy()
        return [np.array(values[off[j] : off[j + 1]]) for j in range(len(col))]
    return col.to_pylist()


def _scalar_value(col, j: int):
    import numpy as np
    import pyarrow as pa

    s = col[j]
    if isinstance(s, (pa.ListScalar, pa.LargeListScalar)):
        return np.array(s.values.to_numpy(zero_copy_only=False), dtype=np.int32)
    return s.as_py()


class _Handle:
    """A small attribute bag: what ``open`` returns for the systems below."""

    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


class LmdbStore(Peer):
    """LMDB (``lmdb``): key = doc_id (UTF-8), value = the raw bytes (UTF-8 text or the int32
    array's bytes), one write transaction per 10k docs; read-only env (``lock=False``,
    ``readahead=False`` as its docs advise for random reads), one read transaction per thread,
    ``Cursor.getmulti`` for batches. LMDB keys are sorted, so positions go through the list of
    ids (``ids.txt``, loaded on open)."""

    name = "lmdb"
    requires = "lmdb"
    kinds = ("text", "tokens")
    thread_safe = False
    thread_note = "one read transaction per thread (transactions are not thread-safe)"
    how = "key = doc_id; `txn.get`, `cursor.getmulti`; positions via the id list (ids.txt)"
    MAP_SIZE = 1 << 40  # address space only: the file grows as written

    def build(self, path, records, field="text"):
        import lmdb

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        env = lmdb.open(str(path), map_size=self.MAP_SIZE, subdir=True)
        ids: list[str] = []
        try:
            for chunk in _chunks(records, 10_000):
                with env.begin(write=True) as txn:
                    for r in chunk:
                        txn.put(r["doc_id"].encode("utf-8"), _encode(r[field]))
                        ids.append(r["doc_id"])
            env.sync(True)
        finally:
            env.close()
        _write_ids(path, ids)
        return self.open(path)

    def open(self, path):
        import lmdb

        env = lmdb.open(str(path), readonly=True, lock=False, readahead=False, subdir=True)
        return _Handle(env=env, txn=env.begin(buffers=False), path=Path(path), ids=None)

    def _ids(self, h):
        if h.ids is None:
            h.ids = _read_ids(h.path)
        return h.ids

    def ops(self, h, field):
        dec = _decoder(field)
        txn = h.txn
        ids = self._ids(h)

        def get(i):
            v = txn.get(i.encode("utf-8"))
            if v is None:
                raise KeyError(i)
            return dec(v)

        def get_many(keys):
            return {k.decode("utf-8"): dec(v) for k, v in txn.cursor().getmulti([i.encode() for i in keys])}

        return Ops(
            get=get,
            at=lambda p: get(ids[p]),
            get_many=get_many,
            take=lambda ps: batch_values(get_many([ids[p] for p in ps]), [ids[p] for p in ps]),
        )

    def close(self, h):
        if h.env is not None:
            if h.txn is not None:
                h.txn.abort()
            if getattr(h, "owns_env", True):
                h.env.close()
            h.env = h.txn = None

    def for_thread(self, h, path):
        return _Handle(env=h.env, txn=h.env.begin(buffers=False), path=h.path, ids=h.ids, owns_env=False)

    def reopen(self, h, path, between=None):
        ids = h.ids
        self.close(h)
        if between is not None:
            between()
        h2 = self.open(path)
        h2.ids = ids
        return h2


class RocksdictStore(Peer):
    """RocksDB through ``rocksdict`` in raw mode (``Options(raw_mode=True)``: bytes keys and
    values, no pickling), default options otherwise; written in ``WriteBatch``es of 10k, read
    through a read-only ``Rdict``; ``db[list_of_keys]`` is its multi-get. Positions go through the
    list of ids (``ids.txt``)."""

    name = "rocksdict"
    requires = "rocksdict"
    kinds = ("text", "tokens")
    how = "raw mode, key = doc_id; `db[key]`, multi-get `db[[keys]]`; positions via the id list"

    def build(self, path, records, field="text"):
        from rocksdict import Options, Rdict, WriteBatch

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        db = Rdict(str(path / "db"), Options(raw_mode=True))
        ids: list[str] = []
        try:
            for chunk in _chunks(records, 10_000):
                wb = WriteBatch(raw_mode=True)
                for r in chunk:
                    wb.put(r["doc_id"].encode("utf-8"), _encode(r[field]))
                    ids.append(r["doc_id"])
                db.write(wb)
            db.flush()
        finally:
            db.close()
        _write_ids(path, ids)
        return self.open(path)

    def open(self, path):
        from rocksdict import AccessType, Options, Rdict

        db = Rdict(str(Path(path) / "db"), Options(raw_mode=True), access_type=AccessType.read_only())
        return _Handle(db=db, path=Path(path), ids=None)

    def ops(self, h, field):
        dec = _decoder(field)
        db = h.db
        if h.ids is None:
            h.ids = _read_ids(h.path)
        ids = h.ids

        def get_many(keys):
            return [dec(v) for v in db[[i.encode("utf-8") for i in keys]]]

        return Ops(
            get=lambda i: dec(db[i.encode("utf-8")]),
            at=lambda p: dec(db[ids[p].encode("utf-8")]),
            get_many=get_many,
            take=lambda ps: get_many([ids[p] for p in ps]),
        )

    def close(self, h):
        if h.db is not None:
            h.db.close()
            h.db = None

    def reopen(self, h, path, between=None):
        ids = h.ids
        self.close(h)
        if between is not None:
            between()
        h2 = self.open(path)
        h2.ids = ids
        return h2


class _PositionMapped(Peer):
    """Systems addressed by row number: a dict doc_id -> row is built on open from the id column."""

    position_map = True
    kinds = ("text", "tokens")

    def _id_list(self, h) -> list[str]:
        raise NotImplementedError

    def _rows(self, h) -> dict[str, int]:
        if h.rows is None:
            h.rows = {doc_id: j for j, doc_id in enumerate(self._id_list(h))}
        return h.rows

    @staticmethod
    def _ops(rows: dict[str, int], at, take) -> Ops:
        """Lookups by id through the id -> row map, by position directly."""
        return Ops(
            get=lambda i: at(rows[i]),
            at=at,
            get_many=lambda ids: take([rows[i] for i in ids]),
            take=take,
        )

    def reopen(self, h, path, between=None):
        rows = h.rows
        self.close(h)
        if between is not None:
            between()
        h2 = self.open(path)
        h2.rows = rows
        return h2


class LanceStore(_PositionMapped):
    """Lance (``pylance``): ``lance.write_dataset`` from a stream of record batches (defaults),
    ``lance.dataset(path).take(rows, columns=[field])``."""

    name = "lance"
    requires = "lance"
    dist = "pylance"
    how = "`lance.write_dataset`; `ds.take(rows, columns=[field])`; doc_id -> row dict"

    def build(self, path, records, field="text"):
        import lance
        import pyarrow as pa

        schema = _arrow_schema(field)
        reader = pa.RecordBatchReader.from_batches(schema, _arrow_batches(records, field, 8192))
        lance.write_dataset(reader, str(Path(path) / "ds.lance"))
        return self.open(path)

    def open(self, path):
        import lance

        return _Handle(ds=lance.dataset(str(Path(path) / "ds.lance")), rows=None)

    def _id_list(self, h):
        return h.ds.to_table(columns=["doc_id"]).column(0).to_pylist()

    def ops(self, h, field):
        ds, rows = h.ds, self._rows(h)
        cols = [field]

        def take(ps):
            return _list_values(ds.take(ps, columns=cols).column(0))

        def at(p):
            return _scalar_value(ds.take([p], columns=cols).column(0), 0)

        return self._ops(rows, at, take)

    def close(self, h):
        h.ds = None


class HfDatasetsStore(_PositionMapped):
    """Hugging Face ``datasets``: ``Dataset.from_generator`` then ``save_to_disk``; read with
    ``load_from_disk`` (memory-mapped Arrow), ``ds[row][field]`` and ``ds[rows][field]``; the
    token corpus with ``with_format("numpy")``."""

    name = "hf-datasets"
    requires = "datasets"
    how = (
        "`save_to_disk`/`load_from_disk` (mmapped Arrow); `ds[row][field]`, `ds[rows][field]`; "
        "doc_id -> row dict"
    )

    def build(self, path, records, field="text"):
        import tempfile

        import datasets
        from datasets import Dataset, Features, Sequence, Value

        datasets.disable_progress_bars()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        it = iter(records)
        value = Value("large_string") if field == "text" else Sequence(Value("int32"))
        features = Features({"doc_id": Value("string"), field: value})

        def gen():
            for r in it:
                yield {"doc_id": r["doc_id"], field: r[field]}

        with tempfile.TemporaryDirectory(dir=path) as cache:
            ds = Dataset.from_generator(gen, features=features, cache_dir=cache)
            ds.save_to_disk(str(path / "ds"))
            del ds
        return self.open(path)

    def open(self, path):
        import datasets

        datasets.disable_progress_bars()
        ds = datasets.load_from_disk(str(Path(path) / "ds"))
        if "tokens" in ds.column_names:
            ds = ds.with_format("numpy", dtype="int32")  # stored as int32; numpy's default is int64
        return _Handle(ds=ds, rows=None)

    def _id_list(self, h):
        return h.ds.data.column("doc_id").to_pylist()

    def ops(self, h, field):
        ds, rows = h.ds, self._rows(h)

        def take(ps):
            return list(ds[ps][field])

        def at(p):
            return ds[p][field]

        return self._ops(rows, at, take)

    def close(self, h):
        h.ds = None


class ArrowIpcStore(_PositionMapped):
    """An Arrow IPC file read through ``pa.memory_map`` + ``pa.ipc.open_file``. Uncompressed: one
    record batch, ``read_all()`` is zero-copy over the mapping, lookups are ``column[row]`` and
    ``column.take(rows)``. With ``compression="lz4"`` (LZ4 frame per buffer) a record batch must
    be decompressed to read one row of it: lookups read the batches they need with
    ``get_batch(b)`` (batches of ``ROWS`` rows; a batch is decompressed once per call)."""

    requires = "pyarrow"
    ROWS = 1024

    def __init__(self, compression: str | None = None) -> None:
        self.compression = compression
        self.name = "arrow-ipc" if compression is None else f"arrow-ipc:{compression}"
        self.how = (
            "IPC file, `pa.memory_map` + `read_all()` (zero-copy); `col[row]`, `col.take(rows)`; "
            "doc_id -> row dict"
            if compression is None
            else f"IPC file, {compression} buffers, {self.ROWS}-row batches; `get_batch(b)` per lookup; "
            "doc_id -> row dict"
        )

    def build(self, path, records, field="text"):
        import pyarrow as pa

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        opts = pa.ipc.IpcWriteOptions(compression=self.compression)
        # uncompressed: one record batch, so that read_all() is a single zero-copy chunk (take on
        # a column of many chunks concatenates them first: a copy of the column per call)
        rows = self.ROWS if self.compression else 1 << 62
        with pa.OSFile(str(path / "data.arrow"), "wb") as sink:
            with pa.ipc.new_file(sink, _arrow_schema(field), options=opts) as w:
                for b in _arrow_batches(records, field, rows):
                    w.write_batch(b)
        return self.open(path)

    def open(self, path):
        import pyarrow as pa

        source = pa.memory_map(str(Path(path) / "data.arrow"), "r")
        reader = pa.ipc.open_file(source)
        h = _Handle(source=source, reader=reader, rows=None, table=None)
        if self.compression is None:
            h.table = reader.read_all()
        return h

    def _id_list(self, h):
        if h.table is not None:
            return h.table.column("doc_id").to_pylist()
        ids: list[str] = []
        for b in range(h.reader.num_record_batches):
            ids += h.reader.get_batch(b).column(0).to_pylist()
        return ids

    def ops(self, h, field):
        rows = self._rows(h)
        if h.table is not None:
            col = h.table.column(field)

            def at(p):
                return _scalar_value(col, p)

            def take(ps):
                return _list_values(col.take(ps))

        else:
            reader, n = h.reader, self.ROWS

            def at(p):
                return _scalar_value(reader.get_batch(p // n).column(1), p % n)

            def take(ps):
                import pyarrow as pa

                out: list = [None] * len(ps)
                by_batch: dict[int, list[int]] = {}
                for k, p in enumerate(ps):
                    by_batch.setdefault(p // n, []).append(k)
                for b, ks in by_batch.items():
                    vals = _list_values(reader.get_batch(b).column(1).take(pa.array([ps[k] % n for k in ks])))
                    for k, v in zip(ks, vals):
                        out[k] = v
                return out

        return self._ops(rows, at, take)

    def close(self, h):
        h.table = h.reader = None
        if h.source is not None:
            h.source.close()
            h.source = None


def _litdata_items(span):
    """litdata ``optimize`` fn: yields the records of one input span (fork start method, so
    the worker processes inherit ``_LITDATA_RECORDS``)."""
    lo, hi = span
    field = _LITDATA_FIELD[0]
    for r in _LITDATA_RECORDS[lo:hi]:
        yield {"doc_id": r["doc_id"], field: r[field]}


_LITDATA_RECORDS: list = []
_LITDATA_FIELD: list = ["text"]


class LitdataStore(_PositionMapped):
    """litdata: ``optimize(fn, inputs, output_dir=<local dir>, chunk_bytes="64MB")`` (2 workers,
    ``keep_data_ordered=True`` so rows keep insertion order), read with
    ``StreamingDataset(<local dir>, batch_decode=0)[row][field]`` (per-item decoding: its default
    decodes a window of neighbours, for streaming); no batch read, so batches loop. The ids are kept
    in ``ids.txt`` for the doc_id -> row map (reading them back through the dataset would decode
    every item)."""

    name = "litdata"
    requires = "litdata"
    how = (
        "`optimize(...)` to a local dir; `StreamingDataset(dir, batch_decode=0)[row][field]`; "
        "doc_id -> row dict"
    )

    def build(self, path, records, field="text"):
        import litdata

        global _LITDATA_RECORDS
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        recs = records if isinstance(records, list) else list(records)
        _LITDATA_RECORDS = recs
        _LITDATA_FIELD[0] = field
        span = max(1, len(recs) // 64)
        try:
            litdata.optimize(
                fn=_litdata_items,
                inputs=[(lo, min(lo + span, len(recs))) for lo in range(0, len(recs), span)],
                output_dir=str((path / "ds").resolve()),
                chunk_bytes="64MB",
                num_workers=min(2, os.cpu_count() or 1),
                keep_data_ordered=True,
                start_method="fork",
                verbose=False,
            )
        finally:
            _LITDATA_RECORDS = []
        _write_ids(path, [r["doc_id"] for r in recs])
        return self.open(path)

    def open(self, path):
        import litdata

        # batch_decode=0: decode the item asked for; the default ("auto") deserialises a window of
        # ~256 neighbours per access, right for streaming, ~30x slower for random access
        ds = litdata.StreamingDataset(str((Path(path) / "ds").resolve()), batch_decode=0)
        return _Handle(ds=ds, path=Path(path), rows=None)

    def _id_list(self, h):
        return _read_ids(h.path)

    def ops(self, h, field):
        ds, rows = h.ds, self._rows(h)

        def at(p):
            return ds[p][field]

        return Ops(
            get=lambda i: ds[rows[i]][field],
            at=at,
            get_many=lambda ids: [ds[rows[i]][field] for i in ids],
            take=lambda ps: [ds[p][field] for p in ps],
        )

    def close(self, h):
        h.ds = None

    def for_thread(self, h, path):
        return _Handle(ds=self.open(path).ds, path=h.path, rows=h.rows)

    thread_safe = False
    thread_note = "one StreamingDataset per thread"


class NumpyStore(_PositionMapped):
    """numpy: all tokens in one flat ``tokens.npy`` (int32) plus ``offsets.npy`` (int64, n+1),
    both ``np.load(mmap_mode="r")`` -- the layout of fixed-size token windows generalised to
    ragged documents; a lookup copies ``tokens[offsets[i]:offsets[i+1]]`` out of the mapping."""

    name = "numpy"
    requires = "numpy"
    kinds = ("tokens",)
    how = "flat `tokens.npy` + `offsets.npy`, `np.load(mmap_mode='r')`; slice copy; doc_id -> row dict"

    def build(self, path, records, field="text"):
        import numpy as np

        if field != "tokens":
            raise ValueError("the numpy layout is for token arrays")
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        ids: list[str] = []
        lens: list[int] = []
        with open(path / "tokens.raw", "wb") as f:
            for r in records:
                a = np.ascontiguousarray(r[field], dtype=np.int32)
                f.write(a.tobytes())
                ids.append(r["doc_id"])
                lens.append(len(a))
        offsets = np.zeros(len(lens) + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        # wrap the raw bytes as a .npy: header, then the data (one streaming copy)
        n = int(offsets[-1])
        with open(path / "tokens.npy", "wb") as out, open(path / "tokens.raw", "rb") as raw:
            np.lib.format.write_array_header_1_0(out, {"descr": "<i4", "fortran_order": False, "shape": (n,)})
            while block := raw.read(1 << 24):
                out.write(block)
        os.remove(path / "tokens.raw")
        np.save(path / "offsets.npy", offsets)
        _write_ids(path, ids)
        return self.open(path)

    def open(self, path):
        import numpy as np

        path = Path(path)
        return _Handle(
            tokens=np.load(path / "tokens.npy", mmap_mode="r"),
            offsets=np.load(path / "offsets.npy", mmap_mode="r"),
            path=path,
            rows=None,
        )

    def _id_list(self, h):
        return _read_ids(h.path)

    def ops(self, h, field):
        import numpy as np

        tokens, offsets, rows = h.tokens, h.offsets, self._rows(h)

        def at(p):
            return np.array(tokens[offsets[p] : offsets[p + 1]])

        return Ops(
            get=lambda i: at(rows[i]),
            at=at,
            get_many=lambda ids: [at(rows[i]) for i in ids],
            take=lambda ps: [at(p) for p in ps],
        )

    def close(self, h):
        h.tokens = h.offsets = None


PEERS: dict[str, Peer] = {
    p.name: p
    for p in (
        DocstoreStore(),
        DocstoreStore(num_threads=1),
        DocstoreStore(level=0),
        DocstoreStore(level=-1),
        IrDatasetsStore(),
        IndexedStore(),
        DictStore(),
    )
}

#: every system of the comparison suite, in report order
COMPARE_PEERS: dict[str, Peer] = {
    p.name: p
    for p in (
        DocstoreStore(),
        DocstoreStore(num_threads=1),
        DocstoreStore(level=-1),
        DictStore(),
        IndexedStore(),
        IrDatasetsStore(),
        IrDatasetsStore("MMAP"),
        LmdbStore(),
        LanceStore(),
        HfDatasetsStore(),
        ArrowIpcStore(),
        ArrowIpcStore("lz4"),
        RocksdictStore(),
        LitdataStore(),
        NumpyStore(),
    )
}
