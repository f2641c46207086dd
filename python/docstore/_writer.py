"""``Writer``: creating a store, document by document or column by column, with
``on_duplicate`` and the rewrite that drops the documents a repeat replaced (``rewrite``, which
``upgrade`` and the collection's seal share)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from . import _docstore, _progress
from ._arrow import prepare
from ._arrow import writer_columns as _arrow_columns
from ._docstore import Writer as _Writer
from ._docstore import check_replaceable
from ._inputs import (
    ARROW_BATCH_ROWS,
    ROW_ID,
    as_list,
    from_pandas,
    hf_batches,
    hf_kind,
    is_arrow_table,
    is_integer_column,
    row_numbers,
    string_ids,
    with_column,
)
from ._store import DocStore
from ._store import open as open_store
from .errors import DocstoreError, InvalidArgumentError, SchemaError, StoreExistsError, StoreIOError

# A "last" writer's stand-in id as an error message shows it (the core writes NUL as \0, Python's
# repr as \x00): {hex} is the writer's, the number the position the stand-in is renamed at.
_STAND_IN = r"(?:\\0|\\x00|\x00)docstore-last-{hex}(?:\\0|\\x00|\x00)(\d+)"


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
    one collection share one), ``metadata`` (a dict that JSON holds: str keys, lists, str, int,
    float, bool and None; kept in the store, read back as ``DocStore.metadata``: the store is
    then format version 5, which docstore before it cannot open; ``{}`` or None keeps none, and
    the store as before. The key ``"huggingface"`` is ``docstore.hf``'s).
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

    on_duplicate: Literal["error", "first", "last"]
    duplicates: int
    repeated_ids: list[str]
    _staging: _docstore.Staging | None
    _target: str | os.PathLike[str]  # "last": where the store is published
    _options: dict[str, Any]  # "last": the options of the rewrite that drops the replaced
    _latest: dict[str, int]  # "last": the position a repeated id lives at now
    _dropped: set[int]  # "last": positions a repeat replaced
    _renamed: dict[int, str]  # "last": position -> id written under a stand-in
    _stand_in: str

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
            staging = _docstore.Staging(path)  # the core's: named, locked and swept as every writer's
            inner = os.path.join(staging.path, "store.docstore")
            try:
                core = {**encoded(options), "overwrite": False}
                self = super().__new__(cls, inner, fields, **core, _every_id=True)
            except BaseException:
                staging.release()
                raise
            self._target = path
            self._options = options
        else:
            self = super().__new__(cls, path, fields, **encoded(options), _every_id=on_duplicate != "error")
        self.on_duplicate = on_duplicate
        self._staging = staging
        self.duplicates = 0
        self.repeated_ids = []
        if on_duplicate != "error":
            # Instance attributes: the default path keeps the core's methods, with no Python call
            # per document.
            self._latest = {}
            self._dropped = set()
            self._renamed = {}
            self._stand_in = f"\x00docstore-last-{os.urandom(8).hex()}\x00"
            self.add = self._add_resolved  # type: ignore[method-assign]
            self.add_record = self._add_record_resolved  # type: ignore[method-assign]
            self._add_columns = self._add_columns_resolved  # type: ignore[method-assign]
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
                self._staging.publish(inner, overwrite=overwrite)
            else:
                with open_store(inner) as store:
                    options = {k: v for k, v in self._options.items() if k != "overwrite"}
                    rewrite(
                        store, self._target, {**options, "overwrite": overwrite}, self._dropped, self._renamed
                    )
                summary["count"] -= len(self._dropped)
        finally:
            self._staging.release()
        return summary

    def abort(self) -> None:
        super().abort()
        staging = getattr(self, "_staging", None)
        if staging is not None:
            staging.release()

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
        doc_ids = from_pandas(doc_ids, id_field) if columns is None else doc_ids
        columns = from_pandas(columns, None)
        if hf_kind(columns) is not None:
            raise SchemaError(
                "pass a Hugging Face dataset alone, with its ids in the column named by id_field "
                "(or id_field=None to number the rows): add_many(dataset, id_field='id')"
            )
        if columns is None and hf_kind(doc_ids) is not None:
            batches = hf_batches(doc_ids, [n for n in (id_field, *self.fields) if n], batch_size)
            for batch in batches:
                self._add_arrow_batch(batch, id_field)
            return
        if id_field is None:
            if columns is not None or not is_arrow_table(doc_ids):
                raise SchemaError("id_field=None (rows numbered by position) is for a table or a dataset")
            self._add_arrow_batch(doc_ids, None)
            return
        if columns is None:
            if not is_arrow_table(doc_ids):
                raise SchemaError("add_many needs columns, or a pyarrow Table/RecordBatch with an id column")
            table = doc_ids
            if id_field not in table.schema.names:
                raise SchemaError(f"the table has no id column {id_field!r} (columns: {table.schema.names})")
            doc_ids, columns = table.column(id_field), table
            if is_integer_column(doc_ids):
                doc_ids = string_ids(doc_ids, id_field)  # the id 7 is "7", as build(table) takes it
        names = list(self.fields)
        if is_arrow_table(columns):
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
            with self._resolved(as_list(doc_ids)) as (rows, ids):
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
        _Writer._add_columns(self, as_list(doc_ids), [as_list(c) for c in data])

    def _add_arrow_batch(self, table: Any, id_field: str | None) -> None:
        """Adds a pyarrow table whose ids are the ``id_field`` column (strings, or integers
        written as decimal strings), or positions in the store when ``id_field`` is None."""
        if not hasattr(table, "set_column"):  # a RecordBatch of an older pyarrow
            import pyarrow as pa

            table = pa.Table.from_batches([table])
        if id_field is None:
            ids = row_numbers(self.count, table.num_rows)
            table = with_column(table, ROW_ID, ids)
            id_field = ROW_ID
        elif id_field in table.schema.names:
            table = with_column(table, id_field, string_ids(table.column(id_field), id_field))
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


def encoded(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` as the core's writer takes them: ``metadata`` (a dict) as its JSON text, or
    left out when empty."""
    options = dict(options)
    metadata = options.pop("metadata", None)
    text = metadata_json(metadata)
    if text is not None:
        options["metadata"] = text
    return options


def metadata_json(metadata: Any) -> str | None:
    """The JSON text of ``metadata`` (a dict), None for None or ``{}``; a value JSON does not
    hold exactly is refused, naming where it is (``metadata['a'][0]``)."""
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping):
        raise TypeError(f"metadata must be a dict (a JSON object), got {type(metadata).__name__}")
    if not metadata:
        return None
    _check_json(metadata, "metadata", 1)
    return json.dumps(metadata, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


#: How deep a store's metadata nests, the outer dict counting (docs/format.md §4.10).
_METADATA_DEPTH = 127


def _check_json(value: Any, where: str, depth: int) -> None:
    if isinstance(value, (Mapping, list, tuple)) and depth > _METADATA_DEPTH:
        raise ValueError(
            f"{where} is nested {depth} deep, deeper than a store's metadata ({_METADATA_DEPTH})"
        )
    if value is None or isinstance(value, (str, bool, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where} is {value}, which JSON cannot hold")
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(
                    f"{where} has the key {key!r} ({type(key).__name__}): JSON object keys are str"
                )
            _check_json(item, f"{where}[{key!r}]", depth + 1)
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_json(item, f"{where}[{i}]", depth + 1)
        return
    raise TypeError(
        f"{where} is a {type(value).__name__}, which JSON cannot hold (it holds dicts with str keys, "
        "lists, str, int, float, bool and None)"
    )


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


# Positions decoded per `take` while rewriting a store.
_REWRITE_CHUNK = 4096


def rewrite(
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
    options.setdefault("metadata", store.metadata)
    if store.dictionary and "dict_size" not in options:
        options.setdefault("dictionary", store.dictionary)
    with Writer(target, store.fields, **options) as writer:
        copy_documents(store, writer, dropped, renamed, progress)


def copy_documents(
    store: DocStore,
    writer: Writer,
    dropped: set[int] | None = None,
    renamed: Mapping[int, str] | None = None,
    progress: bool | None = False,
) -> None:
    """Adds the documents of ``store`` to ``writer`` (whose fields have the store's names, in its
    order; their types may be wider), in position order: without the positions ``dropped``, and
    with the ids ``renamed`` gives by position."""
    names = list(store.fields)
    with _progress.bar(len(store), "docs", progress, desc="rewrite") as shown:
        for start in range(0, len(store), _REWRITE_CHUNK):
            shown.update(min(_REWRITE_CHUNK, len(store) - start))
            positions: Sequence[int] = range(start, min(start + _REWRITE_CHUNK, len(store)))
            if dropped:
                positions = [p for p in positions if p not in dropped]
            chunk = store.take(positions)
            ids = [doc.doc_id for doc in chunk]
            if renamed:
                ids = [renamed.get(p, i) for p, i in zip(positions, ids)]
            writer._add_columns(ids, [[getattr(doc, n) for doc in chunk] for n in names])
