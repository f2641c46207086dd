"""``Writer`` and ``build``: creating stores."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import operator
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from . import _docstore, _progress
from ._arrow import field_type, nullable, prepare, unsupported
from ._arrow import writer_columns as _arrow_columns
from ._docstore import ARRAY_DTYPES, FORMAT_VERSION, check_replaceable
from ._docstore import Writer as _Writer
from ._staging import Staging
from ._store import DocStore
from ._store import open as open_store
from .errors import (
    DocstoreError,
    InvalidArgumentError,
    InvalidKeyError,
    SchemaError,
    StoreExistsError,
    StoreIOError,
)

# A "last" writer's stand-in id as an error message shows it (the core writes NUL as \0, Python's
# repr as \x00): {hex} is the writer's, the number the position the stand-in is renamed at.
_STAND_IN = r"(?:\\0|\\x00|\x00)docstore-last-{hex}(?:\\0|\\x00|\x00)(\d+)"

# Rows per Arrow batch read from a Hugging Face dataset or a pyarrow table.
ARROW_BATCH_ROWS = 8192


class Writer(_Writer):
    """Builds a store at ``path``; nothing appears there until the writer finishes.

    >>> with docstore.Writer("corpus.docstore", fields={"text": "str"}) as w:
    ...     w.add("d1", text="hello")

    ``fields`` maps names to types: ``str``, ``bytes``, ``int64``, ``float64``, ``bool``,
    ``list[str]``, ``list[bytes]`` or a 1-D array ``int8[]`` ... ``uint64[]``, ``float16[]``,
    ``bfloat16[]``, ``float32[]``, ``float64[]``, or of a fixed N-D shape: ``float32[2,3]``;
    ``str?`` (any type and ``?``) is nullable: it takes and gives back ``None`` (docs/format.md
    §5.3). Options: ``overwrite`` (replace an
    existing store), ``level`` (0 = lz4 fast, 1-12 = lz4 HC; default 3; -1 = no compression: the
    largest file, and lookups that decode nothing), ``dict_size`` (bytes of shared dictionary,
    0 = none, default and most 64 KiB), ``batch_bytes`` (raw bytes per compression batch),
    ``key_buffer_bytes`` (memory for ids before sorted runs spill to disk), ``format_version``
    (3, the default: every read checks that it returns the document asked for, and a lookup by
    id reads its document's location from the key index; 2 or 1 only for readers older than
    docstore 0.3 or 0.2, which cannot open the newer versions), ``dictionary`` (bytes: use this
    dictionary instead of training one, e.g. ``other_store.dictionary``, so that the shards of
    one collection share one).
    Leaving the ``with`` block by an exception, or calling ``abort()``, leaves no store behind.

    ``on_duplicate`` says what a document whose id was added before does: ``"error"`` (the
    default) raises ``DuplicateKeyError`` at once, naming the id and the positions of both
    documents (``.positions``), and leaves the writer as it was; ``"first"`` keeps the earlier
    document and drops the repeat; ``"last"`` keeps the repeat, at its own position, and drops
    the earlier one (the store is then written twice: once as given, then without the dropped
    documents). ``duplicates`` counts the repeats met, ``repeated_ids`` holds the first few.
    With "first" or "last" the writer holds every id's 128-bit hash (about 30-60 bytes of
    memory an id); with "error", those of the first ``key_buffer_bytes / 128`` documents (512Ki
    by default), and a repeat of a later one is found when the ids are sorted (as each 64 MiB
    run of them is spilled, or at ``finish``), then without the positions.
    """

    def __new__(
        cls,
        path: str | os.PathLike[str],
        fields: Mapping[str, str] | Sequence[tuple[str, str]],
        *,
        on_duplicate: Literal["error", "first", "last"] = "error",
        **options: Any,
    ) -> Writer:
        check_on_duplicate(on_duplicate)
        staging = None
        if on_duplicate == "last":
            # Written beside the target first; finish() writes the target without the documents
            # a repeat replaced (or moves the file there when none was).
            if not options.get("overwrite") and os.path.lexists(path):
                raise StoreExistsError(
                    f"{os.fspath(path)} already exists (pass overwrite=True to replace it)"
                )
            if os.path.isdir(path):  # refused now, as the core's writer refuses it
                raise StoreIOError(f"{os.fspath(path)} is a directory")
            check_replaceable(path)
            target = os.path.abspath(path)
            name = hashlib.sha1(os.fsencode(os.path.basename(target))).hexdigest()[:12]
            staging = Staging(os.path.dirname(target), f".docstore-last-{name}-")
            inner = os.path.join(staging.path, "store.docstore")
            try:
                self = super().__new__(cls, inner, fields, **{**options, "overwrite": False}, _every_id=True)
            except BaseException:
                staging.remove()
                raise
            self._target = path
            self._options = options
        else:
            self = super().__new__(cls, path, fields, **options, _every_id=on_duplicate != "error")
        self.on_duplicate = on_duplicate
        self._staging = staging
        self.duplicates = 0
        self.repeated_ids: list[str] = []
        if on_duplicate != "error":
            # Instance attributes: the default path keeps the core's methods, with no Python call
            # per document.
            self._latest: dict[str, int] = {}  # "last": the position a repeated id lives at now
            self._dropped: set[int] = set()  # "last": positions a repeat replaced
            self._renamed: dict[int, str] = {}  # "last": position -> id written under a stand-in
            self._stand_in = f"\x00docstore-last-{os.urandom(8).hex()}\x00"
            self.add = self._add_resolved
            self.add_record = self._add_record_resolved
            self._add_columns = self._add_columns_resolved
        return self

    @property
    def path(self) -> Any:
        from pathlib import Path

        target = getattr(self, "_target", None)
        return super().path if target is None else Path(target)

    def _resolve(self, doc_ids: Sequence[Any]) -> tuple[list[int], list[Any], dict[str, Any]]:
        """The rows of ``doc_ids`` to add, the id to add each under, by ``on_duplicate``, and
        what adding them changes in the writer's state (applied by ``_resolved`` once they are
        added): "first" leaves out a repeat; "last" adds it under a stand-in id (renamed at
        finish) and drops the document it repeats."""
        count = self.count
        rows: list[int] = []
        out: list[Any] = []
        here: dict[Any, int] = {}  # ids of this batch: the position of their live document
        last = self.on_duplicate == "last"
        change: dict[str, Any] = {"repeated": [], "dropped": set(), "latest": {}, "renamed": {}}
        for row, doc_id in enumerate(doc_ids):
            position = count + len(out)
            earlier = here.get(doc_id)
            if earlier is None:
                earlier = self._latest.get(doc_id) if last else None
                if earlier is None:
                    earlier = super().position_of(doc_id)
            if earlier is None:
                here[doc_id] = position
                rows.append(row)
                out.append(doc_id)
                continue
            change["repeated"].append(doc_id)
            if last:
                change["dropped"].add(earlier)
                change["latest"][doc_id] = here[doc_id] = position
                change["renamed"][position] = doc_id
                rows.append(row)
                out.append(f"{self._stand_in}{position}")
        return rows, out, change

    @contextlib.contextmanager
    def _resolved(self, doc_ids: Sequence[Any]) -> Iterator[tuple[list[int], list[Any]]]:
        """``_resolve``'s rows and ids, to add in the ``with`` block: its changes to the writer's
        state are made only when the block adds them, so that a refused call leaves the writer
        as it was (no earlier document dropped, no later one renamed); its error names the id
        given, not the stand-in."""
        rows, ids, change = self._resolve(doc_ids)
        try:
            yield rows, ids
        except DocstoreError as exc:
            renamed = change["renamed"]
            if renamed and exc.args and isinstance(exc.args[0], str):
                pattern = _STAND_IN.format(hex=self._stand_in[15:31])
                real = lambda m: renamed.get(int(m[1]), m[0])  # noqa: E731
                exc.args = (re.sub(pattern, real, exc.args[0]), *exc.args[1:])
            raise
        self.duplicates += len(change["repeated"])
        self.repeated_ids += change["repeated"][: max(0, 5 - len(self.repeated_ids))]
        self._dropped |= change["dropped"]
        self._latest.update(change["latest"])
        self._renamed.update(change["renamed"])

    def _add_resolved(self, doc_id: Any, fields: Any = None, /, **kwargs: Any) -> None:
        with self._resolved([doc_id]) as (rows, ids):
            if rows:
                if fields is None:
                    super().add(ids[0], **kwargs)
                else:
                    super().add(ids[0], fields, **kwargs)

    def _add_record_resolved(self, record: dict[str, Any], id_field: str) -> None:
        if id_field not in record:
            super().add_record(record, id_field)  # the core's error
        with self._resolved([record[id_field]]) as (rows, ids):
            if rows:
                super().add_record(
                    {**record, id_field: ids[0]} if ids[0] is not record[id_field] else record, id_field
                )

    def _add_columns_resolved(self, doc_ids: list[Any], columns: list[list[Any]]) -> None:
        with self._resolved(doc_ids) as (rows, ids):
            if len(rows) < len(doc_ids):
                columns = [[column[r] for r in rows] for column in columns]
            super()._add_columns(ids, columns)

    def finish(self) -> dict[str, int]:
        summary = super().finish()
        summary["duplicates"] = self.duplicates
        if self._staging is None:
            return summary
        try:
            inner = os.path.join(self._staging.path, "store.docstore")
            overwrite = bool(self._options.get("overwrite"))
            if not self._dropped:
                # Nothing to drop: the file as written, published as every writer publishes
                # (under the target's lock; over nothing without overwrite, and over nothing
                # but a store with it).
                _docstore.publish_file(inner, self._target, overwrite=overwrite)
            else:
                with open_store(inner) as store:
                    options = {k: v for k, v in self._options.items() if k != "overwrite"}
                    _rewrite(
                        store, self._target, {**options, "overwrite": overwrite}, self._dropped, self._renamed
                    )
                summary["count"] -= len(self._dropped)
        finally:
            self._staging.remove()
        return summary

    def abort(self) -> None:
        super().abort()
        staging = getattr(self, "_staging", None)
        if staging is not None:
            staging.remove()

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

    def add_many(
        self,
        doc_ids: Any,
        columns: Any = None,
        *,
        id_field: str | None = "doc_id",
        batch_size: int = ARROW_BATCH_ROWS,
    ) -> None:
        """Adds documents column by column.

        ``add_many(ids, {"text": [...], "label": [...]})``; columns may be lists, numpy arrays
        (a 2-D array for an array field gives one row per document) or pyarrow arrays. A pyarrow
        ``RecordBatch`` or ``Table`` works as ``columns``, or alone with its ids in ``id_field``
        (integer ids are written as their decimal strings, as ``build`` writes them).
        Arrow ids and columns go to the writer as their buffers, with no Python object per value
        (numbers converted to the field's type at once, by the rules ``add`` applies to one
        value); a batch holding a null, or a value its field cannot hold, is refused as ``add``
        refuses its first bad row.

        A pandas ``DataFrame`` works as a table does (through pyarrow, its missing values as
        nulls, its index as the ids when it is named ``id_field``).

        A Hugging Face ``datasets.Dataset`` or streaming ``datasets.IterableDataset`` works alone
        too: it is read as Arrow batches of ``batch_size`` rows, each added as a table (every
        column straight from Arrow's buffers), so a streamed dataset of any size goes through
        bounded memory. Its ids are the ``id_field`` column (integer ids are written as their
        decimal strings); ``id_field=None`` numbers the rows by their position in the store.
        Columns the writer has no field for are not read. Each batch is checked before any of
        it is added; a bad row stops the call with the batches before it added (leaving the
        ``with`` block by that exception writes nothing).
        """
        if isinstance(doc_ids, (str, bytes)):
            raise TypeError("add_many takes a collection of doc ids, got one str; use add() for one document")
        doc_ids = _from_pandas(doc_ids, id_field) if columns is None else doc_ids
        columns = _from_pandas(columns, None)
        if _hf_kind(columns) is not None:
            raise SchemaError(
                "pass a Hugging Face dataset alone, with its ids in the column named by id_field "
                "(or id_field=None to number the rows): add_many(dataset, id_field='id')"
            )
        if columns is None and _hf_kind(doc_ids) is not None:
            batches = _hf_batches(doc_ids, [n for n in (id_field, *self.fields) if n], batch_size)
            for batch in batches:
                self._add_arrow_batch(batch, id_field)
            return
        if id_field is None:
            if columns is not None or not _is_arrow_table(doc_ids):
                raise SchemaError("id_field=None (rows numbered by position) is for a table or a dataset")
            self._add_arrow_batch(doc_ids, None)
            return
        if columns is None:
            if not _is_arrow_table(doc_ids):
                raise SchemaError("add_many needs columns, or a pyarrow Table/RecordBatch with an id column")
            table = doc_ids
            if id_field not in table.schema.names:
                raise SchemaError(f"the table has no id column {id_field!r} (columns: {table.schema.names})")
            doc_ids, columns = table.column(id_field), table
            if _is_integer_column(doc_ids):
                doc_ids = _string_ids(doc_ids, id_field)  # the id 7 is "7", as build(table) takes it
        names = list(self.fields)
        if _is_arrow_table(columns):
            missing = [n for n in names if n not in columns.schema.names]
            if missing:
                raise SchemaError(f"the table has no column for field(s) {missing}")
            data = [columns.column(n) for n in names]
        elif isinstance(columns, Mapping):
            extra = [k for k in columns if k not in self.fields]
            missing = [n for n in names if n not in columns]
            if extra or missing:
                raise SchemaError(
                    f"add_many columns must match the fields {names}: missing {missing}, unknown {extra}"
                )
            data = [columns[n] for n in names]
        else:
            raise SchemaError("columns must be a dict of field name -> sequence, or a pyarrow Table")
        if self.on_duplicate != "error":  # the rows to add, and their ids, in Python
            with self._resolved(_as_list(doc_ids)) as (rows, ids):
                data = [_take(column, rows) for column in data] if len(rows) < len(doc_ids) else data
                self._add_columns_as_given(_like(doc_ids, ids), data)
            return
        self._add_columns_as_given(doc_ids, data)

    def _add_columns_as_given(self, doc_ids: Any, data: list[Any]) -> None:
        """Adds ``data`` (a column per field) under ``doc_ids`` as they are (resolved already)."""
        arrow = _arrow_columns(doc_ids, data, self.fields)
        if arrow is not None:  # straight from Arrow's buffers, no Python object per value
            self._add_arrow_columns(*arrow)
            return
        # The core's method: the ids are resolved already.
        _Writer._add_columns(self, _as_list(doc_ids), [_as_list(c) for c in data])

    def _add_arrow_batch(self, table: Any, id_field: str | None) -> None:
        """Adds a pyarrow table whose ids are the ``id_field`` column (strings, or integers
        written as decimal strings), or positions in the store when ``id_field`` is None."""
        if not hasattr(table, "set_column"):  # a RecordBatch of an older pyarrow
            import pyarrow as pa

            table = pa.Table.from_batches([table])
        if id_field is None:
            ids = _row_numbers(self.count, table.num_rows)
            table = _with_column(table, _ROW_ID, ids)
            id_field = _ROW_ID
        elif id_field in table.schema.names:
            table = _with_column(table, id_field, _string_ids(table.column(id_field), id_field))
        else:
            raise SchemaError(
                f"no id column {id_field!r} (columns: {table.schema.names}); pass id_field= naming "
                "the column of ids, or id_field=None to number the rows by position"
            )
        missing = [n for n in self.fields if n not in table.schema.names]
        if missing:
            names = table.schema.names
            raise SchemaError(f"the data has no column for field(s) {missing} (columns: {names})")
        # Only the id and the fields, with dictionaries, views and fixed-size lists made plain.
        self.add_many(prepare(table, id_field, self.fields), id_field=id_field)


ON_DUPLICATE = ("error", "first", "last")


def check_on_duplicate(on_duplicate: str) -> None:
    if on_duplicate not in ON_DUPLICATE:
        raise InvalidArgumentError(f"on_duplicate must be one of {ON_DUPLICATE}, got {on_duplicate!r}")


def _take(column: Any, rows: list[int]) -> Any:
    """The values of ``column`` (a list, numpy or pyarrow array) at ``rows``."""
    picked = np.asarray(rows, dtype=np.int64)  # typed: [] is no null-typed array
    if isinstance(column, np.ndarray):
        return column.take(picked, axis=0)  # rows, not elements: a 2-D column gives its rows
    if hasattr(column, "take"):
        return column.take(picked)
    return [column[r] for r in rows]


def _like(doc_ids: Any, ids: list[Any]) -> Any:
    """``ids`` as the kind of array ``doc_ids`` is, so that Arrow input stays on Arrow's path."""
    if hasattr(doc_ids, "type") and hasattr(doc_ids, "to_pylist"):
        import pyarrow as pa

        return pa.array(ids, pa.string())
    return ids


# The id column of a table whose rows are numbered (a name no field may have).
_ROW_ID = "\x00row"


def _hf_kind(obj: Any) -> str | None:
    """``"dataset"`` or ``"iterable"`` for a Hugging Face ``datasets.Dataset`` or
    ``IterableDataset`` (told by the module of its class, so that ``datasets`` is imported by
    nothing else), else None; a ``DatasetDict`` is refused with the way out."""
    for cls in type(obj).__mro__:
        module = cls.__module__ or ""
        if module != "datasets" and not module.startswith("datasets."):
            continue
        if cls.__name__ == "Dataset":
            return "dataset"
        if cls.__name__ == "IterableDataset":
            return "iterable"
        if cls.__name__ in ("DatasetDict", "IterableDatasetDict"):
            splits = ", ".join(map(str, obj))
            raise TypeError(f"a {cls.__name__} holds several splits ({splits}); pass one: dataset['train']")
    return None


def _hf_batches(dataset: Any, wanted: Sequence[str] | None, batch_size: int) -> Iterator[Any]:
    """pyarrow tables of ``batch_size`` rows of a Hugging Face dataset, in its order: its Arrow
    data sliced for a ``Dataset``, batches of its stream for an ``IterableDataset``. Only the
    ``wanted`` columns (those present) are kept, when given."""
    import pyarrow as pa

    batch_size = operator.index(batch_size)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    names = dataset.column_names  # None for a stream of unknown features
    if wanted is not None and names is not None:
        keep = [n for n in names if n in set(wanted)]
        if keep != list(names):
            dataset = dataset.select_columns(keep)
    try:
        arrow = dataset.with_format("arrow")
    except ValueError:  # a datasets release without Arrow formatting for streams
        arrow = None
    if arrow is not None:
        for batch in arrow.iter(batch_size=batch_size):
            yield batch if wanted is None or names is not None else _select(batch, wanted)
        return
    for columns in dataset.with_format(None).iter(batch_size=batch_size):
        batch = pa.table(columns)
        yield batch if wanted is None else _select(batch, wanted)


def _select(table: Any, wanted: Sequence[str]) -> Any:
    keep = set(wanted)
    return table.select([n for n in table.schema.names if n in keep])


def _with_column(table: Any, name: str, column: Any) -> Any:
    if name in table.schema.names:
        return table.set_column(table.schema.get_field_index(name), name, column)
    return table.append_column(name, column)


def _row_numbers(start: int, count: int) -> Any:
    """Decimal strings of ``start .. start + count - 1`` as an Arrow string array."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.cast(pa.array(np.arange(start, start + count, dtype=np.int64)), pa.string())


def _is_integer_column(column: Any) -> bool:
    import pyarrow as pa

    return pa.types.is_integer(column.type)


def _string_ids(column: Any, id_field: str) -> Any:
    """An id column as Arrow strings: strings as they are, integers as decimal strings."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = column.type
    if pa.types.is_dictionary(kind):
        column, kind = column.cast(kind.value_type), kind.value_type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return column
    if pa.types.is_integer(kind):
        return pc.cast(column, pa.string())
    raise SchemaError(f"the id column {id_field!r} is {kind}; ids must be strings or integers")


def arrow_field_type(name: str, arrow_type: Any, column: Any = None) -> str:
    """The field type for a column of ``arrow_type`` (``build`` from a table or dataset): the
    mapping of ``_arrow.field_type``, nullable when ``column`` (its rows in the first batch)
    holds a null."""
    kind = field_type(arrow_type)
    if kind is None:
        raise SchemaError(
            f"{unsupported(name, arrow_type)}; pass fields={{...}} naming the columns to keep (and "
            "their types), or drop it first"
        )
    return nullable(kind, column)


def _is_arrow_table(obj: Any) -> bool:
    return type(obj).__module__.startswith("pyarrow") and hasattr(obj, "schema") and hasattr(obj, "column")


def _from_pandas(obj: Any, id_field: str | None) -> Any:
    """A pandas DataFrame as the pyarrow Table that docstore reads, its missing values (NaN,
    None, ``pd.NA``, ``NaT``) as Arrow nulls, which a nullable field (``str?``) keeps as None;
    its index is the id column when it is named ``id_field``. Anything else as it is."""
    if not (type(obj).__module__.startswith("pandas") and type(obj).__name__ == "DataFrame"):
        return obj
    try:
        import pyarrow as pa
    except ImportError:
        raise SchemaError(
            "a pandas DataFrame is read through pyarrow: pip install 'docstore[arrow]'"
        ) from None
    index_is_id = id_field is not None and obj.index.name == id_field and id_field not in obj.columns
    return pa.Table.from_pandas(obj, preserve_index=index_is_id)


def _as_list(column: Any) -> list[Any]:
    if isinstance(column, list):
        return column
    if isinstance(column, np.ndarray):
        return list(column) if column.ndim > 1 or column.dtype == object else column.tolist()
    if type(column).__module__.startswith("pyarrow"):
        import pyarrow as pa

        inner = getattr(column.type, "value_type", None)  # an extension type's may be a str (HF's)
        # Lists of lists (a fixed shape's rows) as Python lists: numpy makes each row an array
        # of arrays, which reads as a 1-D array of objects.
        nested = isinstance(inner, pa.DataType) and (
            pa.types.is_fixed_size_list(inner) or pa.types.is_list(inner) or pa.types.is_large_list(inner)
        )
        if (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)) and not nested:
            import pyarrow.compute as pc

            # One numpy array per row instead of lists of Python ints; but numpy turns null
            # elements into NaN, so a column holding any goes as Python lists, and its rows with
            # a None are refused by name like any other bad value.
            if pc.list_flatten(column).null_count == 0:
                return list(column.to_numpy(zero_copy_only=False))
        return column.to_pylist()
    return list(column)


#: Records read ahead to infer the fields' types when none are given (``build``, the CLI): a field
#: null in any of them is nullable (``str?``), and one null in the first takes its type from a
#: later one.
INFER_RECORDS = 1000


def _null_hint(name: str) -> str:
    return f"pass fields={{...}} naming its type, nullable: {{{name!r}: 'str?'}}"


def infer_fields(
    sample: Sequence[Mapping[str, Any]], id_field: str, hint: Any = _null_hint
) -> dict[str, str]:
    """The fields of the first record of ``sample``, each typed by its first value that is not
    None nor an empty list (which has no element type) and nullable when any is None.
    ``hint(name)`` says what to do about a field that is None throughout (``SchemaError``)."""
    fields = {}
    for name in sample[0]:
        if name == id_field:
            continue
        values = [record[name] for record in sample if name in record]
        known = next((v for v in values if v is not None and not _empty_list(v)), None)
        where = "the one record" if len(sample) == 1 else f"all of the first {len(sample):,} records"
        if known is None and any(v is not None for v in values):
            raise SchemaError(
                f"field {name!r} is an empty list in {where}, so its element type cannot be inferred; "
                f"pass fields={{...}} naming it, e.g. {{{name!r}: 'list[str]'}}"
            )
        if known is None:
            raise SchemaError(
                f"field {name!r} is None in {where}, so its type cannot be inferred; {hint(name)}"
            )
        fields[name] = infer_type(name, known) + ("?" if any(v is None for v in values) else "")
    return fields


def _empty_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and not value


def infer_type(name: str, value: Any) -> str:
    """The field type for a Python value (used by ``build`` when ``fields`` is not given)."""
    if isinstance(value, str):
        return "str"
    if isinstance(value, (bytes, bytearray)):
        return "bytes"
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, (int, np.integer)):
        return "int64"
    if isinstance(value, (float, np.floating)):
        return "float64"
    if isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype.name in ARRAY_DTYPES:
        return f"{value.dtype.name}[]"
    if isinstance(value, np.ndarray) and value.ndim > 1 and value.size and value.dtype.name in ARRAY_DTYPES:
        return f"{value.dtype.name}[{','.join(map(str, value.shape))}]"  # a fixed shape
    if isinstance(value, (list, tuple)) and value:
        if all(isinstance(v, str) for v in value):
            return "list[str]"
        if all(isinstance(v, (bytes, bytearray)) for v in value):
            return "list[bytes]"
        if all(isinstance(v, (bool, int, np.integer)) for v in value):
            return "int64[]"
        if all(isinstance(v, (bool, int, float, np.integer, np.floating)) for v in value):
            return "float64[]"
    if value is None:
        raise SchemaError(
            f"cannot infer the type of field {name!r} from None; pass fields={{...}} naming its type, "
            f"nullable: {{{name!r}: 'str?'}}"
        )
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
    id_field: str | None = "doc_id",
    fields: Mapping[str, str] | Sequence[tuple[str, str]] | None = None,
    *,
    batch_size: int = ARROW_BATCH_ROWS,
    progress: bool | None = None,
    overwrite: bool = False,
    level: int | None = None,
    dict_size: int | None = None,
    batch_bytes: int | None = None,
    key_buffer_bytes: int | None = None,
    format_version: int | None = None,
    dictionary: bytes | None = None,
    on_duplicate: Literal["error", "first", "last"] = "error",
) -> DocStore:
    """Builds a store from an iterable of dicts, namedtuples or dataclasses; returns it opened.

    When ``fields`` is not given, the fields are the first record's, typed from the first 1,000
    records: a field None in any of them is nullable (``str?``). ``overwrite``, ``level``,
    ``dict_size``, ``batch_bytes``, ``key_buffer_bytes``, ``format_version``, ``dictionary``
    and ``on_duplicate`` go to :class:`Writer` (None: its default). An integer id is stored as its
    decimal text (the id ``7`` is ``"7"``), from records as from every other input.

    ``records`` may also be a Hugging Face ``datasets.Dataset``, a streaming
    ``datasets.IterableDataset``, a pyarrow ``Table``/``RecordBatch`` or a pandas ``DataFrame``
    (through pyarrow: its missing values, NaN or None, are nulls, and its index is the id column
    when it is named ``id_field``): they are read as Arrow
    batches of ``batch_size`` rows (no Python object per row; a stream is read
    once, in bounded memory), field types come from the Arrow schema (string -> ``str``, binary
    -> ``bytes``, integers and bools -> ``int64``, floats -> ``float64``, lists of numbers ->
    arrays such as ``int32[]``), every column but the ids becomes a field unless ``fields``
    names the ones to keep, and ``id_field`` names the id column (integer ids become decimal
    strings; ``None`` numbers the rows 0, 1, 2 ...).

    ``on_duplicate`` (``"error"``, ``"first"``, ``"last"``) goes to the ``Writer``. A progress
    bar with the total and an ETA goes to stderr when the input has a length (a list, a table,
    a ``datasets.Dataset``) and stderr is a terminal; ``progress=False`` hides it, ``True``
    shows it always.
    """
    given = {
        "overwrite": overwrite,
        "level": level,
        "dict_size": dict_size,
        "batch_bytes": batch_bytes,
        "key_buffer_bytes": key_buffer_bytes,
        "format_version": format_version,
        "dictionary": dictionary,
        "on_duplicate": on_duplicate,
    }
    options = {name: value for name, value in given.items() if value is not None}
    records = _from_pandas(records, id_field)
    total = _length(records)
    shown = _progress.bar(total, "docs", progress if total is not None or progress else False, desc="build")
    with shown:
        return _build(path, records, id_field, fields, batch_size, options, shown)


def _length(records: Any) -> int | None:
    """The number of records, when the input knows it."""
    try:
        return int(records.num_rows) if _is_arrow_table(records) else len(records)
    except TypeError:
        return None


def _build(
    path: str | os.PathLike[str],
    records: Iterable[Any],
    id_field: str | None,
    fields: Mapping[str, str] | Sequence[tuple[str, str]] | None,
    batch_size: int,
    options: dict[str, Any],
    shown: Any,
) -> DocStore:
    kind = _hf_kind(records)
    if isinstance(records, Mapping):
        raise TypeError("build() takes an iterable of records, not a mapping; pass its .values()")
    if kind is not None or _is_arrow_table(records):
        return _build_from_arrow(path, records, kind, id_field, fields, batch_size, options, shown)
    if id_field is None:
        raise SchemaError("id_field=None (rows numbered by position) is for a table or a dataset")
    iterator = iter(records)
    ahead = list(itertools.islice(iterator, INFER_RECORDS if fields is None else 1))
    iterator = itertools.chain(ahead, iterator)
    first = ahead[0] if ahead else _NONE
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
        fields = infer_fields([sample, *map(_as_dict, ahead[1:])], id_field)
    with Writer(path, dict(fields), **options) as writer:
        if first is not _NONE:
            add = writer.add_record
            n = 0
            for n, record in enumerate(iterator, 1):
                record = record if type(record) is dict else _as_dict(record)
                try:
                    add(record, id_field)
                except InvalidKeyError:
                    doc_id = record.get(id_field)
                    if not isinstance(doc_id, (int, np.integer)) or isinstance(doc_id, bool):
                        raise
                    add({**record, id_field: str(int(doc_id))}, id_field)  # the id 7 is "7"
                if n % 8192 == 0:
                    shown.update(8192)
            shown.update(n - shown.n)
    return open_store(path)


_NONE = object()  # no first record (None is a record, if a bad one)


def _build_from_arrow(
    path: str | os.PathLike[str],
    source: Any,
    kind: str | None,
    id_field: str | None,
    fields: Mapping[str, str] | Sequence[tuple[str, str]] | None,
    batch_size: int,
    options: dict[str, Any],
    shown: Any,
) -> DocStore:
    """``build`` from a Hugging Face dataset (``kind``) or a pyarrow table."""
    if fields is not None:
        fields = dict(fields)
        wanted: list[str] | None = [n for n in (id_field, *fields) if n]
    else:
        wanted = None
    if kind is not None:
        batches = _hf_batches(source, wanted, batch_size)
    else:
        import pyarrow as pa

        table = source if isinstance(source, pa.Table) else pa.Table.from_batches([source])
        table = table if wanted is None else _select(table, wanted)
        batches = iter(table.to_batches(max_chunksize=operator.index(batch_size)))
    first = next(batches, None)
    if fields is None:
        schema = first.schema if first is not None else _hf_schema(source)
        if schema is None:
            raise SchemaError("no rows and no features to infer fields from; pass fields={...}")
        if id_field is not None and id_field not in schema.names:
            raise SchemaError(
                f"no id column {id_field!r} (columns: {schema.names}); pass id_field= naming the "
                "column of ids, or id_field=None to number the rows by position"
            )
        if id_field != "doc_id" and "doc_id" in schema.names:
            raise SchemaError(
                f"the data has a 'doc_id' column beside the id column {id_field!r}; 'doc_id' is the "
                "name docstore gives the key, so rename or drop that column, or use it as id_field"
            )
        whole = _all_rows(source, kind)
        fields = {f.name: _inferred(f, first, whole) for f in schema if f.name != id_field}
    with Writer(path, fields, **options) as writer:
        if first is not None:
            for batch in itertools.chain([first], batches):
                writer._add_arrow_batch(batch, id_field)
                shown.update(batch.num_rows)
    return open_store(path)


def train_dictionary(
    records: Iterable[Any],
    id_field: str | None = "doc_id",
    fields: Mapping[str, str] | Sequence[tuple[str, str]] | None = None,
    *,
    size: int = 65536,
) -> bytes:
    """The compression dictionary docstore trains on ``records`` (a sample of the corpus, a few
    MiB, taken as ``docstore.build`` takes them: dicts, namedtuples or dataclasses, a pyarrow
    table or a Hugging Face dataset), for ``Writer(..., dictionary=...)``: shards written by many
    tasks with one dictionary compress alike and read faster together (a reader keeps one copy
    of it, not one per shard: docs/collections.md). It is the dictionary that a ``Writer`` with
    ``dict_size=size`` trains on these records (on their first 8 MiB), by the same code; empty
    when they are too few to train on.

    >>> d = docstore.train_dictionary(ds.take(20_000))          # on the driver
    >>> docstore.ray.write(ds, "corpus.docstore", dictionary=d)   # every task's shard uses it
    """
    if isinstance(records, Mapping):
        raise TypeError("train_dictionary() takes an iterable of records, not a mapping; pass its .values()")
    kind = _hf_kind(records)
    if kind is not None or _is_arrow_table(records):
        fields, rows = _arrow_rows(records, kind, id_field, fields)
    else:
        iterator = iter(records)
        first = next(iterator, _NONE)
        if fields is None:
            if first is _NONE:
                raise SchemaError("cannot infer fields from no records; pass fields={...}")
            sample = _as_dict(first)
            fields = {k: infer_type(k, v) for k, v in sample.items() if k != id_field}
        fields = dict(fields)
        names = list(fields)
        records = iterator if first is _NONE else itertools.chain([first], iterator)
        rows = (_values(_as_dict(record), names) for record in records)
    return _docstore.train_dictionary(rows, size, fields=fields)


def _values(record: dict[str, Any], names: list[str]) -> list[Any]:
    missing = [n for n in names if n not in record]
    if missing:
        raise SchemaError(f"a record is missing field(s) {missing}: {record!r:.200}")
    return [record[n] for n in names]


def _arrow_rows(
    source: Any,
    kind: str | None,
    id_field: str | None,
    fields: Mapping[str, str] | Sequence[tuple[str, str]] | None,
) -> tuple[dict[str, str], Iterator[list[Any]]]:
    """The fields of a Hugging Face dataset (``kind``) or a pyarrow table as ``build`` infers
    them, and its rows' values in their order, read batch by batch."""
    wanted = None if fields is None else [n for n in (id_field, *dict(fields)) if n]
    if kind is not None:
        batches = _hf_batches(source, wanted, ARROW_BATCH_ROWS)
    else:
        import pyarrow as pa

        table = source if isinstance(source, pa.Table) else pa.Table.from_batches([source])
        batches = iter(table.to_batches(max_chunksize=ARROW_BATCH_ROWS))
    first = next(batches, None)
    if fields is None:
        schema = first.schema if first is not None else _hf_schema(source)
        if schema is None:
            raise SchemaError("no rows and no features to infer fields from; pass fields={...}")
        whole = _all_rows(source, kind)
        fields = {f.name: _inferred(f, first, whole) for f in schema if f.name != id_field}
    fields = dict(fields)

    def rows() -> Iterator[list[Any]]:
        for batch in itertools.chain([] if first is None else [first], batches):
            missing = [n for n in fields if n not in batch.schema.names]
            if missing:
                raise SchemaError(
                    f"the data has no column for field(s) {missing} (columns: {batch.schema.names})"
                )
            yield from map(list, zip(*(batch.column(n).to_pylist() for n in fields)))

    return fields, rows()


def _all_rows(source: Any, kind: str | None) -> Any:
    """All of an Arrow source's data when it is at hand (a pyarrow table or batch, a map-style
    Hugging Face dataset), None for a stream: so that a column with a null anywhere is nullable
    from the start, not refused when its first null comes."""
    import pyarrow as pa

    if kind == "dataset":
        return getattr(getattr(source, "data", None), "table", None)
    if kind is None:
        return source if isinstance(source, pa.Table) else pa.Table.from_batches([source])
    return None


def _inferred(field: Any, first: Any, whole: Any = None) -> str:
    """The type ``build`` infers for Arrow ``field``: nullable when its column holds a null in
    ``whole`` (all the data, when it is at hand) or else in the first batch (a stream's later
    null in a field that is not is refused, naming it: pass ``fields={name: "type?"}`` for a
    column whose nulls come later)."""
    rows = whole if whole is not None and field.name in whole.column_names else first
    column = None if rows is None else rows.column(field.name)
    return arrow_field_type(field.name, field.type, column)


def _hf_schema(dataset: Any) -> Any:
    """The Arrow schema of a Hugging Face dataset's features, or None when unknown."""
    features = getattr(dataset, "features", None)
    return None if features is None else features.arrow_schema


# Positions decoded per `take` while rewriting a store.
_UPGRADE_CHUNK = 4096


def upgrade(
    source: str | os.PathLike[str],
    target: str | os.PathLike[str] | None = None,
    *,
    progress: bool | None = None,
    **options: Any,
) -> DocStore:
    """Rewrites the store or collection at ``source`` in the current format (version 3: checked
    reads, and lookups by id located by the key index) at ``target``, or in place when ``target``
    is None; returns the new store opened.

    ``source`` is verified first (every checksum and document), so that damage is never sealed
    in under fresh checks. Documents keep their ids, positions and values; the compression level
    and dictionary are the source's unless ``options`` (passed to :class:`Writer`) say
    otherwise. A collection's shards of an older format are rewritten and every shard is sealed
    again with a new global id index; shards already current are linked, not copied. In place,
    the new store replaces the old one atomically when complete: a process that has the old one
    open keeps reading it. ``progress``: bars of the check and the rewrite on stderr (default:
    when it is a terminal).
    """
    store = open_store(source)
    if target is None:
        target = source
        options["overwrite"] = True
    # Refused before anything is read or written: a target that is a URL, or that exists.
    if store.url is not None and os.fspath(target) in (store.url, store._reopen_url(True)):
        store.close()
        raise InvalidArgumentError(f"{store.url}: upgrade writes a local file; give a local target")
    if not options.get("overwrite") and os.path.lexists(target):
        store.close()
        raise StoreExistsError(f"{os.fspath(target)} already exists (pass overwrite=True to replace it)")
    try:
        check_replaceable(target)  # a directory or file of the user's: refused now
    except BaseException:
        store.close()
        raise
    info = store._info()
    if "shards" in info and store.url is not None:
        store.close()
        raise InvalidArgumentError(
            f"{store.url}: upgrade a collection where its files are (download it, upgrade it, upload it)"
        )
    _progress.verify(store, progress)
    if "shards" not in info:
        _rewrite(store, target, options, progress=progress)
        store.close()
        return open_store(target)
    store.close()
    # Beside the target, locked while this upgrade lives: the seal hard-links the shards
    # rewritten here, and an upgrade killed midway leaves a directory the next one sweeps.
    parent = os.path.dirname(os.path.abspath(target))
    name = os.path.basename(os.path.abspath(target))
    prefix = f".docstore-upgrade-{hashlib.sha1(os.fsencode(name)).hexdigest()[:12]}-"
    with Staging(parent, prefix) as scratch:
        shards = []
        for i, shard in enumerate(info["shards"]):
            if shard["format_version"] >= FORMAT_VERSION:
                shards.append(shard["path"])
                continue
            new = os.path.join(scratch.path, f"part-{i:05d}.docstore")
            with open_store(shard["path"]) as old:
                _rewrite(old, new, {k: v for k, v in options.items() if k != "overwrite"}, progress=progress)
            shards.append(new)
        _docstore.seal(target, shards, overwrite=options.get("overwrite", False), append=False)
        return open_store(target)


def seal_without_repeats(
    target: str,
    shards: list[str],
    on_duplicate: str,
    *,
    overwrite: bool,
    append: bool,
    progress: bool | None = False,
) -> int:
    """``seal(target, shards, on_duplicate=...)`` for "first" and "last": the shards that hold a
    document another keeps are rewritten without it (in a staging directory beside ``target``),
    then sealed. Returns the number of documents dropped."""
    check_on_duplicate(on_duplicate)
    if append and on_duplicate == "last":
        raise InvalidArgumentError(
            "on_duplicate='last' with append=True would drop documents of the shards sealed before; "
            "use 'first' (new repeats are dropped) or seal all shards again"
        )
    if append and overwrite:  # as the core's seal says it
        raise InvalidArgumentError(
            "overwrite and append exclude each other: append replaces the collection with its "
            "shards and the new ones"
        )
    if not append:
        return _seal_without_repeats(target, shards, on_duplicate, None, overwrite, progress)
    # The ids of the collection appended to are read under the target's lock, held to the
    # append's end: an append that published meanwhile would otherwise hold the ids this one
    # drops as repeats, and the seal would find them twice.
    with _docstore.lock_target(target) as held:
        return _seal_without_repeats(target, shards, on_duplicate, held, overwrite, progress)


def _seal_without_repeats(
    target: str,
    shards: list[str],
    on_duplicate: str,
    held: _docstore.HeldTarget | None,
    overwrite: bool,
    progress: bool | None,
) -> int:
    """``seal_without_repeats``; an append (``held``: the target's lock, held) seals under it."""
    winner: dict[str, tuple[int, int]] = {}  # id -> (shard, position) of the document kept
    dropped: list[set[int]] = [set() for _ in shards]
    if held is not None and os.path.exists(target):
        with open_store(target) as existing:
            for position, doc_id in enumerate(existing):
                winner[doc_id] = (-1, position)
    with _progress.bar(len(shards), "shards", progress, desc="read ids") as shown:
        for k, path in enumerate(shards):
            shown.update(1)
            _note_repeats(path, k, on_duplicate, winner, dropped)
    del winner
    count = sum(map(len, dropped))

    def seal(kept: list[str]) -> None:
        if held is None:
            _progress.seal(target, kept, progress, overwrite=overwrite, append=False)
        elif kept:  # every new document a repeat: the collection holds them all already
            _append_held(held, kept, progress)

    if not count:
        seal(shards)
        return 0
    name = hashlib.sha1(os.fsencode(os.path.basename(os.path.abspath(target)))).hexdigest()[:12]
    with Staging(os.path.dirname(os.path.abspath(target)), f".docstore-dedup-{name}-") as scratch:
        kept = []
        for k, path in enumerate(shards):
            if not dropped[k]:
                kept.append(path)
                continue
            new = os.path.join(scratch.path, f"part-{k:05d}.docstore")
            with open_store(path) as store:
                if len(store) > len(dropped[k]):
                    _rewrite(store, new, {}, dropped[k], progress=progress)
                    kept.append(new)
        seal(kept)
    return count


def _append_held(held: _docstore.HeldTarget, shards: list[str], progress: bool | None) -> None:
    """``held.append(shards)`` (the target's lock, held) with ``_progress.seal``'s bar."""
    with _progress.bar(None, "steps", progress, desc="seal") as shown:
        if shown.disable:
            held.append(shards)
            return

        def report(done: int, total: int) -> None:
            shown.total = total
            shown.update(done - shown.n)

        held.append(shards, progress=report)


def _note_repeats(
    path: str, k: int, on_duplicate: str, winner: dict[str, tuple[int, int]], dropped: list[set[int]]
) -> None:
    """Reads the ids of shard ``k`` (at ``path``) into ``winner`` (id -> the shard and position
    of the document kept), adding the positions of those that lose to ``dropped``."""
    with open_store(path) as store:
        for position, doc_id in enumerate(store):
            earlier = winner.get(doc_id)
            if earlier is None:
                winner[doc_id] = (k, position)
            elif on_duplicate == "first":
                dropped[k].add(position)
            else:
                dropped[earlier[0]].add(earlier[1])
                winner[doc_id] = (k, position)


def _rewrite(
    store: DocStore,
    target: str | os.PathLike[str],
    options: dict[str, Any],
    dropped: set[int] | None = None,
    renamed: Mapping[int, str] | None = None,
    progress: bool | None = False,
) -> None:
    """Writes the documents of ``store`` (verified) to a new store at ``target``, with its level and
    dictionary unless ``options`` say otherwise; without the positions ``dropped``, and with the
    ids ``renamed`` gives by position."""
    options = dict(options)
    options.setdefault("level", store._info()["level"])
    if store.dictionary and "dict_size" not in options:
        options.setdefault("dictionary", store.dictionary)
    with (
        Writer(target, store.fields, **options) as writer,
        _progress.bar(len(store), "docs", progress, desc="rewrite") as shown,
    ):
        names = list(store.fields)
        for start in range(0, len(store), _UPGRADE_CHUNK):
            shown.update(min(_UPGRADE_CHUNK, len(store) - start))
            positions = range(start, min(start + _UPGRADE_CHUNK, len(store)))
            if dropped:
                positions = [p for p in positions if p not in dropped]
            chunk = store.take(positions)
            ids = [doc.doc_id for doc in chunk]
            if renamed:
                ids = [renamed.get(p, i) for p, i in zip(positions, ids)]
            writer._add_columns(ids, [[getattr(doc, n) for doc in chunk] for n in names])
