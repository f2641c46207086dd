"""``Writer`` and ``build``: creating stores."""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ._docstore import ARRAY_DTYPES
from ._docstore import Writer as _Writer
from ._store import DocStore
from ._store import open as open_store
from .errors import SchemaError


class Writer(_Writer):
    """Builds a store at ``path``; nothing appears there until the writer finishes.

    >>> with docstore.Writer("corpus.docstore", fields={"text": "str"}) as w:
    ...     w.add("d1", text="hello")

    ``fields`` maps names to types: ``str``, ``bytes``, ``int64``, ``float64`` or a 1-D array
    ``int8[]`` ... ``uint64[]``, ``float32[]``, ``float64[]``. Options: ``overwrite`` (replace an
    existing store), ``level`` (0 = lz4 fast, 1-12 = lz4 HC; default 3; -1 = no compression: the
    largest file, and lookups that decode nothing), ``dict_size`` (bytes of shared dictionary,
    0 = none, default and most 64 KiB), ``batch_bytes`` (raw bytes per compression batch),
    ``key_buffer_bytes`` (memory for ids before sorted runs spill to disk), ``format_version``
    (2, the default: every read checks that it returns the document asked for; 1 only for a
    reader older than docstore 0.2, which cannot open version 2), ``dictionary`` (bytes: use this
    dictionary instead of training one, e.g. ``other_store.dictionary``, so that the shards of
    one collection share one).
    Leaving the ``with`` block by an exception, or calling ``abort()``, leaves no store behind.
    """

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            self.abort()
        elif not self.closed:
            self.finish()

    def __repr__(self) -> str:
        state = "finished or aborted" if self.closed else f"{self.count} docs so far"
        return f"<docstore.Writer {os.fspath(self.path)!r}: {state}>"

    def close(self) -> dict[str, int]:
        """Same as ``finish()``."""
        return self.finish()

    def add_many(self, doc_ids: Any, columns: Any = None, *, id_field: str = "doc_id") -> None:
        """Adds documents column by column.

        ``add_many(ids, {"text": [...], "label": [...]})``; columns may be lists, numpy arrays
        (a 2-D array for an array field gives one row per document) or pyarrow arrays. A pyarrow
        ``RecordBatch`` or ``Table`` works as ``columns``, or alone with its ids in ``id_field``.
        """
        if isinstance(doc_ids, (str, bytes)):
            raise TypeError("add_many takes a collection of doc ids, got one str; use add() for one document")
        if columns is None:
            if not _is_arrow_table(doc_ids):
                raise SchemaError("add_many needs columns, or a pyarrow Table/RecordBatch with an id column")
            table = doc_ids
            if id_field not in table.schema.names:
                raise SchemaError(f"the table has no id column {id_field!r} (columns: {table.schema.names})")
            doc_ids, columns = table.column(id_field), table
        names = list(self.fields)
        if _is_arrow_table(columns):
            missing = [n for n in names if n not in columns.schema.names]
            if missing:
                raise SchemaError(f"the table has no column for field(s) {missing}")
            text = _arrow_text_columns(doc_ids, [columns.column(n) for n in names], self.fields)
            if text is not None:  # text straight from Arrow's buffers, no Python str per value
                self._add_text_columns(*text)
                return
            data = [_as_list(columns.column(n)) for n in names]
        elif isinstance(columns, Mapping):
            extra = [k for k in columns if k not in self.fields]
            missing = [n for n in names if n not in columns]
            if extra or missing:
                raise SchemaError(
                    f"add_many columns must match the fields {names}: missing {missing}, unknown {extra}"
                )
            data = [_as_list(columns[n]) for n in names]
        else:
            raise SchemaError("columns must be a dict of field name -> sequence, or a pyarrow Table")
        self._add_columns(_as_list(doc_ids), data)


def _is_arrow_table(obj: Any) -> bool:
    return type(obj).__module__.startswith("pyarrow") and hasattr(obj, "schema") and hasattr(obj, "column")


def _arrow_text(column: Any, field_type: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(int64 offsets, uint8 data) of a pyarrow column without nulls whose type is that of
    ``field_type`` (string for ``str``, binary for ``bytes``), else None: other columns take the
    value-by-value path, which refuses a mismatch by name as ``add`` does."""
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if not isinstance(column, pa.Array) or column.null_count:
        return None
    kind = column.type
    if field_type == "str":
        small, large = pa.types.is_string(kind), pa.types.is_large_string(kind)
    else:
        small, large = pa.types.is_binary(kind), pa.types.is_large_binary(kind)
    if small:
        width = np.int32
    elif large:
        width = np.int64
    else:
        return None
    _, offsets, data = column.buffers()
    offsets = np.frombuffer(offsets, dtype=width)[column.offset : column.offset + len(column) + 1]
    data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    return offsets.astype(np.int64), data


def _arrow_text_columns(doc_ids: Any, columns: list[Any], fields: Mapping[str, str]) -> tuple | None:
    """Arguments of ``_add_text_columns`` when the ids and every field are Arrow text, else None."""
    if type(doc_ids).__module__.split(".")[0] != "pyarrow" or any(
        t not in ("str", "bytes") for t in fields.values()
    ):
        return None
    types = ["str", *fields.values()]
    parts = [_arrow_text(c, t) for c, t in zip((doc_ids, *columns), types)]
    if any(p is None for p in parts):
        return None
    return parts[0], parts[1:]


def _as_list(column: Any) -> list[Any]:
    if isinstance(column, list):
        return column
    if isinstance(column, np.ndarray):
        return list(column) if column.ndim > 1 or column.dtype == object else column.tolist()
    if type(column).__module__.startswith("pyarrow"):
        import pyarrow as pa

        if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
            import pyarrow.compute as pc

            # One numpy array per row instead of lists of Python ints; but numpy turns null
            # elements into NaN, so a column holding any goes as Python lists, and its rows with
            # a None are refused by name like any other bad value.
            if pc.list_flatten(column).null_count == 0:
                return list(column.to_numpy(zero_copy_only=False))
        return column.to_pylist()
    return list(column)


def infer_type(name: str, value: Any) -> str:
    """The field type for a Python value (used by ``build`` when ``fields`` is not given)."""
    if isinstance(value, str):
        return "str"
    if isinstance(value, (bytes, bytearray)):
        return "bytes"
    if isinstance(value, (bool, int, np.integer)):
        return "int64"
    if isinstance(value, (float, np.floating)):
        return "float64"
    if isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype.name in ARRAY_DTYPES:
        return f"{value.dtype.name}[]"
    if isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype == np.float16:
        return "float32[]"  # the narrowest float field; every float16 converts exactly
    if isinstance(value, (list, tuple)) and value:
        if all(isinstance(v, (bool, int, np.integer)) for v in value):
            return "int64[]"
        if all(isinstance(v, (bool, int, float, np.integer, np.floating)) for v in value):
            return "float64[]"
    raise SchemaError(
        f"cannot infer the type of field {name!r} from {type(value).__name__} value {value!r:.60}; "
        "pass fields={...} explicitly"
    )


def _as_dict(record: Any) -> dict[str, Any]:
    if isinstance(record, dict):
        return record
    if isinstance(record, Mapping):
        return dict(record)
    if hasattr(record, "_asdict"):
        return record._asdict()
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
    if hasattr(record, "__dict__"):
        return vars(record)
    raise SchemaError(f"records must be dicts, namedtuples or dataclasses, got {type(record).__name__}")


def build(
    path: str | os.PathLike[str],
    records: Iterable[Any],
    id_field: str = "doc_id",
    fields: Mapping[str, str] | Sequence[tuple[str, str]] | None = None,
    **options: Any,
) -> DocStore:
    """Builds a store from an iterable of dicts, namedtuples or dataclasses; returns it opened.

    Field types are inferred from the first record when ``fields`` is not given. ``options`` go to
    :class:`Writer` (``overwrite``, ``level``, ``dict_size`` ...).
    """
    if isinstance(records, Mapping):
        raise TypeError("build() takes an iterable of records, not a mapping; pass its .values()")
    iterator = iter(records)
    first = next(iterator, _NONE)
    if fields is None:
        if first is _NONE:
            raise SchemaError("cannot infer fields from no records; pass fields={...}")
        sample = _as_dict(first)
        if id_field not in sample:
            raise SchemaError(f"record has no id field {id_field!r}: {sample!r:.200}")
        if id_field != "doc_id" and "doc_id" in sample:
            # The Writer would refuse a field named doc_id, a name this caller never chose.
            raise SchemaError(
                f"the records have a 'doc_id' field beside the id field {id_field!r}; 'doc_id' is "
                "the name docstore gives the key, so rename or drop that field, or use it as id_field"
            )
        fields = {k: infer_type(k, v) for k, v in sample.items() if k != id_field}
    with Writer(path, dict(fields), **options) as writer:
        if first is not _NONE:
            add = writer.add_record
            for record in itertools.chain([first], iterator):
                add(record if type(record) is dict else _as_dict(record), id_field)
    return open_store(path)


_NONE = object()  # no first record (None is a record, if a bad one)

# Positions decoded per `take` while rewriting a store.
_UPGRADE_CHUNK = 4096


def upgrade(
    source: str | os.PathLike[str], target: str | os.PathLike[str] | None = None, **options: Any
) -> DocStore:
    """Rewrites the store at ``source`` in the current format (version 2: checked reads) at
    ``target``, or in place when ``target`` is None; returns the new store opened.

    ``source`` is verified first (every checksum and document), so that damage is never sealed
    in under fresh checks. Documents keep their ids, positions and values; the compression level
    is the source's unless ``options`` (passed to :class:`Writer`) say otherwise. In place, the
    new store replaces the old one atomically when complete: a process that has the old one open
    keeps reading it.
    """
    store = open_store(source)
    store.verify()
    options.setdefault("level", store._info()["level"])
    if target is None:
        target = source
        options["overwrite"] = True
    with Writer(target, store.fields, **options) as writer:
        names = list(store.fields)
        for start in range(0, len(store), _UPGRADE_CHUNK):
            chunk = store.take(range(start, min(start + _UPGRADE_CHUNK, len(store))))
            writer._add_columns(
                [doc.doc_id for doc in chunk], [[getattr(doc, n) for doc in chunk] for n in names]
            )
    store.close()
    return open_store(target)
