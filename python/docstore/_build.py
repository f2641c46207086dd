"""``docstore.build`` and ``docstore.train_dictionary``: a store from records (dicts,
namedtuples, dataclasses) or from any input ``_inputs`` reads as Arrow batches, with the fields
inferred when none are given."""

from __future__ import annotations

import dataclasses
import itertools
import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, cast

import numpy as np

from . import _docstore, _progress
from ._arrow import check_no_doc_id_beside
from ._docstore import ARRAY_DTYPES, check_replaceable
from ._inputs import (
    ARROW_BATCH_ROWS,
    all_rows,
    arrow_batches,
    arrow_field_type,
    from_pandas,
    hf_kind,
    hf_schema,
    is_arrow_table,
)
from ._store import DocStore
from ._store import open as open_store
from ._writer import Writer, copy_documents
from .errors import FieldTypeError, InvalidKeyError, SchemaError, StoreExistsError, StoreIOError

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
        return cast("dict[str, Any]", record._asdict())
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
    if hasattr(record, "__dict__"):
        return cast("dict[str, Any]", vars(record))
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
    metadata: Mapping[str, Any] | None = None,
) -> DocStore:
    """Builds a store from an iterable of dicts, namedtuples or dataclasses; returns it opened.

    When ``fields`` is not given, the fields are the first record's, typed from the first 1,000
    records: a field None in any of them is nullable (``str?``), and one None later widens its
    field to nullable (with a warning; the documents written before are copied once, so nothing
    is lost). ``overwrite``, ``level``, ``dict_size``, ``batch_bytes``, ``key_buffer_bytes``,
    ``format_version``, ``dictionary``, ``on_duplicate`` and ``metadata`` go to
    :class:`Writer` (None: its default). An integer id is stored as its decimal text (the id
    ``7`` is ``"7"``), from records as from every other input.

    ``records`` may also be a Hugging Face ``datasets.Dataset``, a streaming
    ``datasets.IterableDataset``, a pyarrow ``Table``/``RecordBatch`` or a pandas ``DataFrame``
    (through pyarrow: its missing values, NaN or None, are nulls, and its index is the id column
    when it is named ``id_field``): they are read as Arrow
    batches of ``batch_size`` rows (no Python object per row; a stream is read
    once, in bounded memory), field types come from the Arrow schema (string -> ``str``, binary
    -> ``bytes``, integers and bools -> ``int64``, floats -> ``float64``, lists of numbers ->
    arrays such as ``int32[]``), every column but the ids becomes a field unless ``fields``
    names the ones to keep, and ``id_field`` names the id column (integer ids become decimal
    strings; ``None`` numbers the rows 0, 1, 2 ...). A Hugging Face dataset's features (of the
    fields kept) go to the store's metadata as ``{"huggingface": {"features": ...}}``
    (``Features.to_dict()``), beside the ``metadata`` given, so that ``docstore.hf.to_dataset``
    gives back its ClassLabel names, float32 values and sequence lengths.

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
        "metadata": None if metadata is None else dict(metadata),
    }
    options = {name: value for name, value in given.items() if value is not None}
    records = from_pandas(records, id_field)
    total = _length(records)
    shown = _progress.bar(total, "docs", progress if total is not None or progress else False, desc="build")
    with shown:
        job = _Job(path, id_field, None if fields is None else dict(fields), batch_size, options, shown)
        return _build(job, records)


def _length(records: Any) -> int | None:
    """The number of records, when the input knows it."""
    try:
        return int(records.num_rows) if is_arrow_table(records) else len(records)
    except TypeError:
        return None


@dataclasses.dataclass
class _Job:
    """What ``build`` was asked for, beside the input: where, the id field, the fields (None:
    inferred), the rows per Arrow batch, the ``Writer``'s options, and the progress bar."""

    path: str | os.PathLike[str]
    id_field: str | None
    fields: dict[str, str] | None
    batch_size: int
    options: dict[str, Any]
    shown: Any

    def writer(self, fields: Mapping[str, str]) -> Writer:
        return Writer(self.path, dict(fields), **self.options)


def _build(job: _Job, records: Iterable[Any]) -> DocStore:
    kind = hf_kind(records)  # first: a DatasetDict (a mapping) is refused with its own way out
    if isinstance(records, Mapping):
        raise TypeError("build() takes an iterable of records, not a mapping; pass its .values()")
    if kind is not None or is_arrow_table(records):
        _build_from_arrow(job, records, kind)
    else:
        _build_from_rows(job, records)
    return open_store(job.path)


def _build_from_rows(job: _Job, records: Iterable[Any]) -> None:
    """``build`` from Python records: dicts, namedtuples or dataclasses."""
    id_field, fields = job.id_field, job.fields
    if id_field is None:
        raise SchemaError("id_field=None (rows numbered by position) is for a table or a dataset")
    iterator = iter(records)
    ahead = list(itertools.islice(iterator, INFER_RECORDS if fields is None else 1))
    iterator = itertools.chain(ahead, iterator)
    first = ahead[0] if ahead else _NONE
    inferred = fields is None
    if fields is None:
        if first is _NONE:
            raise SchemaError("cannot infer fields from no records; pass fields={...}")
        sample = _as_dict(first)
        if id_field not in sample:
            raise SchemaError(f"record has no id field {id_field!r}: {sample!r:.200}")
        check_no_doc_id_beside(id_field, sample, what="field")
        fields = infer_fields([sample, *map(_as_dict, ahead[1:])], id_field)
    with _Widening(job, fields) if inferred else job.writer(fields) as writer:
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
                    job.shown.update(8192)
            job.shown.update(n - job.shown.n)


_NONE = object()  # no first record (None is a record, if a bad one)


def _build_from_arrow(job: _Job, source: Any, kind: str | None) -> None:
    """``build`` from a Hugging Face dataset (``kind``) or a pyarrow table."""
    id_field, fields = job.id_field, job.fields
    wanted = None if fields is None else [n for n in (id_field, *fields) if n]
    batches = arrow_batches(source, kind, wanted, job.batch_size)
    first = next(batches, None)
    # A stream of unknown features is typed from its first batch: a null later widens its field.
    widen = fields is None and kind == "iterable" and hf_schema(source) is None
    if fields is None:
        fields = _arrow_fields(source, kind, first, id_field, check_ids=True)
    if kind is not None:
        job = dataclasses.replace(job, options=with_hf_features(job.options, source, fields))
    with _Widening(job, fields) if widen else job.writer(fields) as writer:
        if first is not None:
            for batch in itertools.chain([first], batches):
                writer._add_arrow_batch(batch, id_field)
                job.shown.update(batch.num_rows)


#: The key of the store metadata that ``docstore.hf`` writes and reads.
HF_METADATA = "huggingface"


def with_hf_features(options: Mapping[str, Any], dataset: Any, fields: Mapping[str, str]) -> dict[str, Any]:
    """``options`` with the features of Hugging Face ``dataset`` (those of ``fields``) in their
    ``metadata``, under ``"huggingface"`` (a key the user's metadata holds already is left as it
    is); as they are for a dataset of unknown features (a stream after ``.map()``)."""
    features = getattr(dataset, "features", None)
    metadata = dict(options.get("metadata") or {})
    if features is None or HF_METADATA in metadata:
        return dict(options)
    kept = {name: feature for name, feature in features.to_dict().items() if name in fields}
    if not kept:
        return dict(options)
    metadata[HF_METADATA] = {"features": kept}
    return {**options, "metadata": metadata}


def _arrow_fields(
    source: Any, kind: str | None, first: Any, id_field: str | None, check_ids: bool
) -> dict[str, str]:
    """The fields ``build`` infers for a Hugging Face dataset (``kind``) or a pyarrow table whose
    first batch is ``first`` (None: it has no rows): every column but ``id_field``, typed by
    ``_inferred``. ``check_ids``: refuse data without its id column, or with a ``doc_id``
    column beside it."""
    features = hf_schema(source) if kind == "iterable" else None  # a stream's, when known
    schema = features if features is not None else first.schema if first is not None else hf_schema(source)
    if schema is None:
        raise SchemaError("no rows and no features to infer fields from; pass fields={...}")
    if check_ids:
        if id_field is not None and id_field not in schema.names:
            raise SchemaError(
                f"no id column {id_field!r} (columns: {schema.names}); pass id_field= naming the "
                "column of ids, or id_field=None to number the rows by position"
            )
        check_no_doc_id_beside(id_field, schema.names)
    if features is not None:  # a stream: its later batches are not at hand, its features are
        return {f.name: _declared(f) for f in schema if f.name != id_field}
    whole = all_rows(source, kind)
    return {f.name: _inferred(f, first, whole) for f in schema if f.name != id_field}


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
    kind = hf_kind(records)
    if kind is not None or is_arrow_table(records):
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
    batches = arrow_batches(source, kind, wanted, ARROW_BATCH_ROWS)
    first = next(batches, None)
    if fields is None:
        fields = _arrow_fields(source, kind, first, id_field, check_ids=False)
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


def _inferred(field: Any, first: Any, whole: Any = None) -> str:
    """The type ``build`` infers for Arrow ``field``: nullable when its column holds a null in
    ``whole`` (all the data, when it is at hand) or else in the first batch (a stream of unknown
    features: a later null widens the field, ``_Widening``)."""
    rows = whole if whole is not None and field.name in whole.column_names else first
    column = None if rows is None else rows.column(field.name)
    return arrow_field_type(field.name, field.type, column)


def _declared(field: Any) -> str:
    """The type ``build`` gives Arrow ``field`` of a stream's features: nullable as the field
    says (a Hugging Face feature always is: any row may hold None), since the rows that will
    come are not at hand."""
    kind = arrow_field_type(field.name, field.type)
    return f"{kind}?" if field.nullable else kind


class _Widening:
    """The writer of a build whose fields were inferred from its first rows (Python records, or
    a stream of unknown features): a field inferred non-nullable that meets None (a null)
    later is made nullable (``str`` becomes ``str?``) instead of failing the build, with a
    warning. Nothing is lost: the store is written in a staging directory beside the target, a
    widening finishes what is written so far there and copies it into a writer with the wider
    fields, which goes on; the store is published at the target when it is whole, as a
    ``Writer`` publishes it. Each field widens at most once, so the documents before are copied
    at most once a field (declare ``fields={"x": "str?"}`` to copy nothing)."""

    def __init__(self, job: _Job, fields: Mapping[str, str]) -> None:
        self._overwrite = bool(job.options.get("overwrite"))
        self._options = {k: v for k, v in job.options.items() if k != "overwrite"}
        # Refused now, as a Writer refuses them, not once every record is written.
        if not self._overwrite and os.path.lexists(job.path):
            path = os.fspath(job.path)
            raise StoreExistsError(f"{path} already exists (pass overwrite=True to replace it)")
        if os.path.isdir(job.path):
            raise StoreIOError(f"{os.fspath(job.path)} is a directory")
        check_replaceable(job.path)
        # The core's: named, locked and swept as every writer's, and published by it.
        self._staging = _docstore.Staging(job.path)
        self._copies = 0  # the stores written so far: the current one is store-{copies}
        self._duplicates = 0  # repeats met by the writers before the current one
        try:
            self.writer = Writer(self._inner(), fields, **self._options)
        except BaseException:
            self._staging.release()
            raise

    def _inner(self) -> str:
        return os.path.join(self._staging.path, f"store-{self._copies}.docstore")

    @property
    def duplicates(self) -> int:
        return self._duplicates + self.writer.duplicates

    def add_record(self, record: dict[str, Any], id_field: str) -> None:
        try:
            self.writer.add_record(record, id_field)
        except FieldTypeError:
            names = self._strict(lambda n: n in record and record[n] is None)
            if not names:
                raise
            self._widen(names)
            self.writer.add_record(record, id_field)

    def _add_arrow_batch(self, batch: Any, id_field: str | None) -> None:
        try:
            self.writer._add_arrow_batch(batch, id_field)
        except FieldTypeError:
            columns = batch.schema.names
            names = self._strict(lambda n: n in columns and batch.column(n).null_count > 0)
            if not names:
                raise
            self._widen(names)
            self.writer._add_arrow_batch(batch, id_field)

    def _strict(self, holds_none: Callable[[str], bool]) -> list[str]:
        """The fields that are not nullable and for which ``holds_none`` is true."""
        return [n for n, t in self.writer.fields.items() if not t.endswith("?") and holds_none(n)]

    def _widen(self, names: list[str]) -> None:
        """Makes the fields ``names`` nullable: finishes the store written so far, and copies it
        into a new writer (the same options, and the dictionary it trained) with those fields
        nullable."""
        old = self.writer
        fields = {n: f"{t}?" if n in names else t for n, t in old.fields.items()}
        self._duplicates += old.duplicates
        old.finish()
        done = self._inner()
        self._copies += 1
        with open_store(done) as store:
            options = dict(self._options)
            if store.dictionary and "dict_size" not in options:
                options.setdefault("dictionary", store.dictionary)
            self.writer = Writer(self._inner(), fields, **options)
            copy_documents(store, self.writer)
            count = len(store)
        os.remove(done)
        widened = ", ".join(f"{n!r} to {fields[n]!r}" for n in names)
        declared = ", ".join(f"{n!r}: {fields[n]!r}" for n in names)
        warnings.warn(
            f"None in a field typed from the first rows: widened {widened} and copied the {count:,} "
            f"documents written before (declare fields={{{declared}, ...}} to copy none)",
            stacklevel=6,  # build()'s caller
        )

    def finish(self) -> None:
        try:
            self.writer.finish()
            self._staging.publish(self._inner(), overwrite=self._overwrite)
        finally:
            self._staging.release()

    def abort(self) -> None:
        try:
            self.writer.abort()
        finally:
            self._staging.release()

    def __enter__(self) -> _Widening:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.finish()
