"""``DocStore``: a read-only, mapping-style view of a store file."""

from __future__ import annotations

import functools
import json
import multiprocessing.context
import os
import re
from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, Sequence, ValuesView
from typing import Any, Literal, cast

import numpy as np

from ._docstore import Reader, _redact_urls, _strip_url
from ._docstore import is_url as _is_url
from .errors import ClosedError

_CHUNK = 4096
# The header's level byte of a store written with ``level=-1`` (no compression).


class DocStore(Reader):
    """An open store: ``store[doc_id]``, ``store.get_many(ids)``, ``store.take(positions)`` ...

    Lookups release the GIL and batch lookups decode in parallel. A DocStore is safe to share
    between threads, survives ``fork()``, and pickles as its path (it reopens where unpickled),
    so it can go to DataLoader workers under any start method. A remote store pickles as its URL
    and options (credentials: see ``docstore.open``); ``path``, ``url``, ``repr`` and ``info()``
    show its URL with the credentials it may hold redacted.
    """

    _remote: dict[str, Any]  # a remote store's open options (not its URL), for pickling

    def __reduce__(self) -> tuple[Any, ...]:
        if self.url is not None:
            kwargs = _remote_kwargs(self, for_pickle=True)
            url = _pickled_url(self._reopen_url(True) or self.url, kwargs.get("pickle_credentials", False))
            return (functools.partial(open, **kwargs), (url,))
        return (functools.partial(open, read=self.read), (os.fspath(self.path),))

    def remote_stats(self) -> dict[str, int] | None:
        """For a remote store: requests sent, bytes received (``data_bytes``: of them, those
        requested for documents, the rest being the index), round trips (waits on the network,
        each with its requests at once: fetches of several files or threads under way together
        count once), retries, ``heals`` (reads and opens that found cached bytes damaged and
        passed once they were fetched again from the server), the peak of requests in flight,
        the ``limit`` of requests in flight it has adapted to (docs/remote.md) and the
        ``backoffs`` that cut it, and the bytes its cache and the whole cache directory hold;
        ``None`` for a local store."""
        return self._remote_stats()

    def __enter__(self) -> DocStore:
        if self.closed:
            raise ClosedError(f"the store {os.fspath(self.path)!r} is closed")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return f"<DocStore {os.fspath(self.path)!r} (closed)>"
        return f"<DocStore {os.fspath(self.path)!r}: {len(self)} docs, fields {self.fields}>"

    def __iter__(self) -> Iterator[str]:
        """Doc ids in insertion order."""
        for start in range(0, len(self), _CHUNK):
            yield from self.keys_range(start, start + _CHUNK)

    def __reversed__(self) -> Iterator[str]:
        """Doc ids in reverse insertion order (as ``reversed`` gives a dict's keys)."""
        for stop in range(len(self), 0, -_CHUNK):
            yield from reversed(self.keys_range(max(0, stop - _CHUNK), stop))

    def keys(self) -> KeysView[str]:
        """Doc ids in insertion order (a live view: ``len``, ``in`` and iteration)."""
        return KeysView(self)

    def values(self, *, field: str | None = None, fields: Sequence[str] | None = None) -> ValuesView[Any]:
        """Documents (or one field's values, or tuples of fields) in insertion order, decoded in
        parallel chunks (a view: ``len`` and iteration, as many times as wanted)."""
        self.take((), field=field, fields=fields)  # a bad field= or fields= fails here, not later
        return _Values(self, field, fields)

    def items(self) -> ItemsView[str, Any]:
        """``(doc_id, doc)`` pairs in insertion order (a view: ``len``, ``in`` and iteration)."""
        return _Items(self)

    def _chunks(self, field: str | None, fields: Sequence[str] | None) -> Iterator[Any]:
        for start in range(0, len(self), _CHUNK):
            yield from self.take(range(start, min(start + _CHUNK, len(self))), field=field, fields=fields)

    def get_many_iter(
        self, doc_ids: Iterable[str], *, field: str | None = None, fields: Sequence[str] | None = None
    ) -> Iterator[Any]:
        """Documents of ``doc_ids`` in request order, one per id found (an id asked twice comes
        twice; missing ids are skipped), read ``_CHUNK`` ids at a time (ir_datasets-style)."""
        if isinstance(doc_ids, str):
            raise TypeError("expected a collection of doc ids, got one str (for one id, use get() or [])")
        self.take((), field=field, fields=fields)  # a bad field= or fields= fails here, not later
        return self._found_iter(iter(doc_ids), field, fields)

    def _found_iter(
        self, doc_ids: Iterator[str], field: str | None, fields: Sequence[str] | None
    ) -> Iterator[Any]:
        batch: list[str] = []
        for doc_id in doc_ids:
            batch.append(doc_id)
            if len(batch) == _CHUNK:
                yield from self._found(batch, field, fields)
                batch = []
        if batch:
            yield from self._found(batch, field, fields)

    def _found(self, doc_ids: list[str], field: str | None, fields: Sequence[str] | None) -> list[Any]:
        positions = self.positions(doc_ids)
        return self.take(positions[positions >= 0], field=field, fields=fields)

    def to_arrow(self, columns: Sequence[str] | None = None, *, rows: Any = None) -> Any:
        """The documents as a ``pyarrow.Table``: ``doc_id``, then ``columns`` (default: every
        field), typed as the engines read them (``str`` as ``large_string``, arrays as
        ``large_list``, fixed shapes as ``fixed_shape_tensor``, nullable fields with nulls;
        docs/format.md §5.3). ``rows`` picks the documents: a slice, a ``range`` or positions
        (negative ones count from the end), in that order; default every document. Read
        ``_CHUNK`` documents at a time, as Arrow buffers with no Python object per document."""
        import pyarrow as pa

        from ._arrow_read import arrow_schema, check_columns, take_batch

        names = check_columns(self.fields, columns, f"store {os.fspath(self.path)}")
        positions = _rows(rows, len(self))
        fields = self.fields
        chunks = (positions[i : i + _CHUNK] for i in range(0, len(positions), _CHUNK))
        batches = [take_batch(self, chunk, fields, names) for chunk in chunks]
        return pa.Table.from_batches(batches, schema=arrow_schema(fields, names))

    def to_pandas(self, columns: Sequence[str] | None = None, *, rows: Any = None, **options: Any) -> Any:
        """``to_arrow(columns, rows=rows).to_pandas(**options)``: a ``pandas.DataFrame`` with a
        ``doc_id`` column (``options`` go to pyarrow's ``to_pandas``); a fixed-shape field's
        cells are numpy arrays of its shape (None for a null), as ``store[id]`` gives them."""
        import pyarrow as pa

        table = self.to_arrow(columns, rows=rows)
        frame = table.to_pandas(**options)
        for name, column in zip(table.column_names, table.columns):
            if isinstance(column.type, pa.FixedShapeTensorType):
                storage = column.combine_chunks().storage  # fixed-size lists: a slot per row, nulls too
                values = storage.values.to_numpy(zero_copy_only=False)
                cells = list(values.reshape(len(storage), *column.type.shape))
                frame[name] = [None if null else c for c, null in zip(cells, storage.is_null().to_pylist())]
        return frame

    @property
    def dictionary(self) -> bytes:
        """The store's compression dictionary (a collection's: its first shard's), as
        ``Writer(..., dictionary=...)`` takes it, so that more shards can share it."""
        return self._dictionary()

    @property
    def metadata(self) -> dict[str, Any]:
        """The metadata the store was written with (``Writer(..., metadata={...})``: a JSON
        object, format version 5), a new dict each time; ``{}`` for a store without. A
        collection's is its shards', which all hold the same. The key ``"huggingface"`` holds
        what a store built from a Hugging Face dataset keeps of its features, for
        ``docstore.hf.to_dataset``."""
        text = self._metadata()
        return {} if text is None else cast("dict[str, Any]", json.loads(text))

    def info(self) -> dict[str, Any]:
        """Count, fields, raw and stored bytes, compression ratio, codec and format version."""
        info = self._info()
        level = info.pop("level")
        dict_bytes = info.pop("dictionary_bytes")
        codec = {0: "lz4", -1: "none", None: "per shard"}.get(level, f"lz4-hc level {level}")
        if dict_bytes >= 1024:
            codec += f" + {dict_bytes // 1024} KiB dictionary"
        elif dict_bytes:
            codec += f" + {dict_bytes} B dictionary"
        raw = info["raw_bytes"]
        out = {
            "path": os.fspath(self.path),
            "count": info["count"],
            "fields": self.fields,
            "raw_bytes": raw,
            "stored_bytes": info["stored_bytes"],
            "ratio": info["stored_bytes"] / raw if raw else None,
            "codec": codec,
            "read": self.read,
            "format_version": info["format_version"],
            # Format 1 has no per-document checks: a damaged index can return another document
            # without an error. `docstore upgrade` rewrites such a store as format 3.
            "checked_reads": info["checked_reads"],
        }
        if "shards" in info:  # a collection: each shard described as a store is, with its path
            out["shards"] = [{**s, "path": os.fspath(s["path"])} for s in info["shards"]]
        return out


Mapping.register(DocStore)


def _rows(rows: Any, count: int) -> np.ndarray:
    """``to_arrow``'s ``rows`` as int64 positions in ``0..count``: None (all), a slice, a range or
    integers; a position out of range is an ``IndexError`` naming it."""
    if rows is None:
        return np.arange(count, dtype=np.int64)
    if isinstance(rows, slice):
        return np.arange(*rows.indices(count), dtype=np.int64)
    if isinstance(rows, (str, bytes)) or not isinstance(rows, Iterable):
        raise TypeError(f"rows must be a slice, a range or positions, got {type(rows).__name__}")
    positions = np.asarray(rows if isinstance(rows, (range, np.ndarray)) else list(rows))
    if positions.size == 0:
        return np.zeros(0, dtype=np.int64)
    if positions.ndim != 1 or positions.dtype.kind not in "iu":
        raise TypeError(f"rows must be integer positions, got {positions.dtype} with shape {positions.shape}")
    positions = positions.astype(np.int64)
    bad = (positions < -count) | (positions >= count)
    if bad.any():
        raise IndexError(f"position {int(positions[np.argmax(bad)])} out of range for {count} documents")
    return np.where(positions < 0, positions + count, positions)


def open(
    path: str | bytes | os.PathLike[str],
    *,
    read: Literal["mmap", "pread"] = "mmap",
    cache_dir: str | os.PathLike[str] | None = None,
    cache_bytes: float | None = None,
    storage_options: Mapping[str, Any] | None = None,
    pickle_credentials: bool = False,
    load_index: bool = False,
) -> DocStore:
    """Opens the store or collection at ``path`` (a file, a directory, or a URL: ``s3://``,
    ``gs://``, ``az://``, ``http(s)://``). Constant time: nothing proportional to its size is read.

    A remote store (docs/remote.md) reads only the bytes its lookups need, through a cache on
    local disk that every process of the node shares:

    * ``cache_dir``: where (default ``$DOCSTORE_CACHE_DIR``, else ``~/.cache/docstore``);
    * ``cache_bytes``: how much, all stores together (default ``$DOCSTORE_CACHE_BYTES``, else
      10 GiB); ``0`` keeps nothing beyond this process;
    * ``storage_options``: object_store's options (``aws_endpoint``, ``aws_region``,
      ``allow_http``, ``timeout`` ...), after the cloud's environment variables, plus docstore's
      own (``max_in_flight``, ``merge_gap``, ``max_retries``, ``retry_timeout``, ``cache_lease`` ...);
    * ``pickle_credentials``: whether a pickle of the store carries the secrets given in
      ``storage_options`` (keys, tokens, passwords) and in the URL (its userinfo and query
      string). By default it does not, except to the processes that multiprocessing starts
      (DataLoader workers), which get them through a pipe; elsewhere the unpickled store takes
      its credentials from the environment.

    The store's ``path``, ``url``, ``repr``, ``info()`` and error messages show the URL with its
    userinfo and query values redacted (``https://***@host/corpus?X-Amz-Signature=***``).

    ``read`` says how documents are read; the index is always memory-mapped:

    * ``"mmap"`` (default): through the memory map, no system call per document. Pages a process
      has read stay mapped into it (and the kernel maps their cached neighbours), so its RSS and
      PSS grow towards the file's size as it reads, although the pages are shared, clean page
      cache.
    * ``"pread"``: one ``pread`` system call per document, through the same shared page cache.
      A process's memory then grows only with the index pages it touches: the choice for many
      long-lived reader processes (``docstore.torch`` datasets use it).

    ``load_index=True`` reads every section but the documents at open (``store.load_index()``):
    the key index, the keys and the offsets, each read whole and in order, into the page cache
    and this process's map (a remote store's into the node cache). A lookup in a cold cache then
    waits on one read, its document's, instead of two or more; the price is the index's size in
    memory, about 30 bytes a document plus its id, shared by the node's processes, and the time
    to read it sequentially (docs/performance.md).
    """
    if isinstance(path, bytes):  # a path as os.listdir(b".") gives it
        path = os.fsdecode(path)
    if isinstance(path, str) and is_url(path) and not path.startswith("file://"):
        options = {str(k): _option_text(v) for k, v in (storage_options or {}).items()}
        store = DocStore(
            path,
            read=read,
            cache_dir=None if cache_dir is None else os.fspath(cache_dir),
            cache_bytes=None if cache_bytes is None else _byte_count(cache_bytes),
            storage_options=options,
        )
        store._remote = {
            "cache_dir": None if cache_dir is None else os.fspath(cache_dir),
            "cache_bytes": None if cache_bytes is None else _byte_count(cache_bytes),
            "storage_options": dict(storage_options or {}),
            "pickle_credentials": bool(pickle_credentials),
        }
    else:
        if cache_dir is not None or cache_bytes is not None or storage_options:
            raise ValueError("cache_dir, cache_bytes and storage_options apply to remote stores (URLs) only")
        store = DocStore(path, read=read)
    if load_index:
        store.load_index()
    return store


# Option names that hold secrets: not written into pickles in clear (see `open`).
_SECRET = re.compile(
    r"secret|token|password|passwd|credential|sas|signature|private|(^|_)key$|access_key", re.I
)


def is_url(path: Any) -> bool:
    """Whether ``path`` is a URL (``scheme://...``) rather than a file system path: the core's
    answer, the one ``Reader`` opens by (False for what is not a ``str``)."""
    return _is_url(path)


def _option_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _byte_count(value: float) -> int:
    n = int(value)
    if n < 0 or n != value:
        raise ValueError(f"cache_bytes must be a whole number of bytes >= 0, got {value!r}")
    return n


def _pickled_url(url: str, pickle_credentials: bool) -> str:
    """The URL a pickle carries: as given where credentials may go (``_remote_kwargs``), else
    without its userinfo, query string and fragment (which docstore never sends: object_store
    builds each request from the host and the path)."""
    if pickle_credentials or multiprocessing.context.get_spawning_popen() is not None:
        return url
    stripped = _strip_url(url)
    return stripped if stripped is not None else _redact_urls(url)


def _remote_kwargs(store: DocStore, for_pickle: bool) -> dict[str, Any]:
    """The keyword arguments that reopen a remote store as it was opened. For a pickle, the
    secrets of ``storage_options`` are left out unless the user asked for them or the pickle goes
    to a process multiprocessing is starting (a DataLoader worker)."""
    remote = dict(store.__dict__.get("_remote") or {})
    pickle_credentials = remote.pop("pickle_credentials", False)
    options = dict(remote.get("storage_options") or {})
    spawning = multiprocessing.context.get_spawning_popen() is not None
    if for_pickle and not pickle_credentials and not spawning:
        options = {k: v for k, v in options.items() if not _SECRET.search(str(k))}
    remote["storage_options"] = options
    if pickle_credentials:
        remote["pickle_credentials"] = True
    return remote


class _Values(ValuesView[Any]):
    """``store.values(field=..., fields=...)``: decodes a chunk at a time on each iteration."""

    _mapping: DocStore  # set by MappingView

    def __init__(self, store: DocStore, field: str | None, fields: Sequence[str] | None) -> None:
        super().__init__(store)
        self._field, self._fields = field, fields

    def __iter__(self) -> Iterator[Any]:
        return self._mapping._chunks(self._field, self._fields)

    def __contains__(self, value: object) -> bool:
        return any(_same(v, value) for v in self)


class _Items(ItemsView[str, Any]):
    """``store.items()``: ``(doc_id, doc)`` pairs, a chunk of documents decoded at a time."""

    _mapping: DocStore  # set by MappingView

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        for doc in self._mapping._chunks(None, None):
            yield doc.doc_id, doc

    def __contains__(self, item: object) -> bool:
        if not isinstance(item, tuple) or len(item) != 2:
            return False
        doc = self._mapping.get(item[0])
        return doc is not None and _same(doc, item[1])


def _same(a: Any, b: Any) -> bool:
    """``a == b`` for values that may be or hold numpy arrays (which compare element-wise)."""
    if a is b:
        return True
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and np.array_equal(a, b)
    if isinstance(a, tuple) and isinstance(b, tuple):  # Docs and tuples of fields
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)
