"""Reading a docstore store or collection from PySpark 4 (the ``"docstore"`` format's reader),
and the lookup join as a ``mapInArrow`` helper. ``docstore.spark`` re-exports ``read``,
``lookup`` and ``DocstoreReader``; its ``DocstoreDataSource`` delegates ``schema()`` and
``reader()`` here. The planning and the Arrow batches are ``_engine_read``'s, shared with Ray.

Options of ``spark.read.format("docstore")`` (case-insensitive, all strings): ``path`` (what
``load`` takes: a file, a collection, a URL), ``columns`` (``"text,label"``: the fields to read;
default all), ``parallelism`` (partitions to aim at; default the planner's CPU count),
``block_rows`` (documents per Arrow batch), ``read`` (``mmap`` / ``pread``), ``cache_dir``,
``cache_bytes``, and ``storage.NAME`` for each of ``docstore.open``'s ``storage_options``.

Column pruning: Spark 4.3 hands a Python data source no pruned column list (it has no
``pruneColumns``; only filters are pushed, through ``pushFilters``), so ``df.select("text")``
reads every field, then drops the others. The fields read are the ``columns`` option's, or
those of a schema given with ``spark.read.schema("doc_id string, text string")``: the reader is
handed that schema and reads only its fields.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from ._arrow_read import parse_kind
from ._engine_read import (
    DEFAULT_BLOCK_ROWS,
    DEFAULT_LOOKUP_BATCH,
    EngineLookup,
    EngineReader,
    Split,
    StoreSpec,
    check_parallelism,
)
from ._store import DocStore
from .errors import InvalidArgumentError, SchemaError

READ_OPTIONS = (
    "path",
    "columns",
    "parallelism",
    "block_rows",
    "read",
    "cache_dir",
    "cache_bytes",
    "on_corrupt",
)

# Spark's types for docstore's fields (Spark has no unsigned integers: each unsigned element
# goes to the next wider signed type; uint64 to long, refused by value beyond its range).
_ELEMENTS = {
    "int8": "Byte",
    "uint8": "Short",
    "int16": "Short",
    "uint16": "Integer",
    "int32": "Integer",
    "uint32": "Long",
    "int64": "Long",
    "uint64": "Long",
    "float16": "Float",  # Spark has no half floats: widened exactly
    "bfloat16": "Float",
    "float32": "Float",
    "float64": "Double",
}
_SCALARS = {"str": "String", "bytes": "Binary", "int64": "Long", "float64": "Double", "bool": "Boolean"}
_LISTS = {"list[str]": "String", "list[bytes]": "Binary"}


def spark_type(kind: str) -> Any:
    """The Spark type a field of docstore type ``kind`` is read as."""
    from pyspark.sql import types

    base, _, _ = parse_kind(kind)  # a fixed shape reads flat, in row-major order
    if base in _SCALARS:
        return getattr(types, f"{_SCALARS[base]}Type")()
    if base in _LISTS:
        return types.ArrayType(getattr(types, f"{_LISTS[base]}Type")())
    return types.ArrayType(getattr(types, f"{_ELEMENTS[base[:-2]]}Type")())


def spark_schema(fields: Mapping[str, str], columns: Sequence[str]) -> Any:
    """The schema of a read: ``doc_id`` (a string) then each column's Spark type."""
    from pyspark.sql.types import StringType, StructField, StructType

    return StructType(
        [StructField("doc_id", StringType(), nullable=False)]
        + [StructField(c, spark_type(fields[c])) for c in columns]
    )


@dataclass(frozen=True)
class ReadOptions:
    spec: StoreSpec
    columns: list[str] | None
    parallelism: int
    block_rows: int
    on_corrupt: str = "raise"

    def plan(self, columns: Sequence[str] | None = None) -> tuple[EngineReader, DocStore]:
        """The reader of these options (of ``columns`` when given, else the option's), and the
        store open, checked on the driver."""
        wanted = self.columns if columns is None else columns
        return EngineReader.plan(self.spec, wanted, self.block_rows, self.on_corrupt)


def parse_options(options: Mapping[str, str]) -> ReadOptions:
    """The read options, checked: an unknown option, a bad number, a missing path are refused
    on the driver before any task runs."""
    options = {k.lower(): v for k, v in options.items()}
    unknown = sorted(k for k in options if k not in READ_OPTIONS and not k.startswith("storage."))
    if unknown:
        raise InvalidArgumentError(
            f"unknown docstore read option(s) {unknown}; the reader takes {list(READ_OPTIONS)}, storage.NAME"
        )
    path = options.get("path")
    if not path:
        raise InvalidArgumentError('no path: spark.read.format("docstore").load(path_or_url)')
    open_options: dict[str, Any] = {}
    if "read" in options:
        open_options["read"] = options["read"]
    if "cache_dir" in options:
        open_options["cache_dir"] = options["cache_dir"]
    if "cache_bytes" in options:
        open_options["cache_bytes"] = _int(options, "cache_bytes")
    storage = {k[len("storage.") :]: v for k, v in options.items() if k.startswith("storage.")}
    if storage:
        open_options["storage_options"] = storage
    columns = None
    if options.get("columns"):
        columns = [c.strip() for c in options["columns"].split(",") if c.strip()]
    parallelism = check_parallelism(_int(options, "parallelism") if "parallelism" in options else None)
    block_rows = _int(options, "block_rows") if "block_rows" in options else DEFAULT_BLOCK_ROWS
    return ReadOptions(
        StoreSpec.of(path, open_options),
        columns,
        parallelism or (os.cpu_count() or 1),
        block_rows,
        options.get("on_corrupt", "raise"),
    )


def _int(options: Mapping[str, str], name: str) -> int:
    try:
        return int(options[name])
    except ValueError:
        raise InvalidArgumentError(
            f"docstore option {name} must be an integer, got {options[name]!r}"
        ) from None


def schema(options: Mapping[str, str]) -> Any:
    """``DocstoreDataSource.schema()``: the store's fields (or the ``columns`` option's)."""
    reader, _ = parse_options(options).plan()
    return spark_schema(reader.fields, reader.columns)


@dataclass
class SplitPartition(InputPartition):
    """A partition: one split (a position range of one shard)."""

    split: Split


class DocstoreReader(DataSourceReader):
    """Made on the driver for the schema Spark resolved (the store's, or the user's own: only
    its fields are read); pickled to the tasks, each of which reads one partition's split as
    Arrow record batches."""

    def __init__(self, options: Mapping[str, str], schema: Any) -> None:
        parsed = parse_options(options)
        names = [f.name for f in schema.fields]
        if "doc_id" not in names:
            raise SchemaError(
                f"the schema {schema.simpleString()} has no doc_id column; docstore reads always give doc_id"
            )
        self.reader, _ = parsed.plan([n for n in names if n != "doc_id"])
        self.schema = schema  # what the batches must match, in its column order
        self.parallelism = parsed.parallelism
        expected = {f.name: f.dataType for f in spark_schema(self.reader.fields, self.reader.columns).fields}
        for f in schema.fields:
            if f.dataType != expected[f.name]:
                raise SchemaError(
                    f"column {f.name!r} is {f.dataType.simpleString()} in the schema given, but "
                    f"{self.reader.spec.label()} reads it as {expected[f.name].simpleString()}"
                )

    def partitions(self) -> list[SplitPartition]:
        return [SplitPartition(split) for split in self.reader.splits(self.parallelism)]

    def read(self, partition: SplitPartition) -> Iterator[Any]:  # type: ignore[override]
        if getattr(partition, "split", None) is None:  # an empty store: Spark's one partition
            return
        for batch in self.reader.read(partition.split):
            yield to_spark_batch(batch, self.schema)


def to_spark_batch(batch: Any, schema: Any) -> Any:
    """A batch as Spark takes it for its ``schema`` (a StructType): the Arrow schema Spark
    expects (32-bit offsets, lists' child named ``element``, signed element types), columns in
    its order."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    target = to_arrow_schema(schema)
    # A fixed-shape tensor goes as its flat storage (Spark has no tensor type).
    columns = [batch.column(f.name) for f in target]
    columns = [c.storage if isinstance(c, pa.ExtensionArray) else c for c in columns]
    arrays = [c.cast(f.type) for c, f in zip(columns, target)]
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def lookup(
    df: Any,
    store: str | os.PathLike[str],
    *,
    id_column: str = "doc_id",
    columns: Sequence[str] | None = None,
    missing: str = "error",
    batch_size: int = DEFAULT_LOOKUP_BATCH,
    on_corrupt: str = "raise",
    **open_options: Any,
) -> Any:
    """``df`` with the fields ``columns`` (default: all) of the document that each row's
    ``id_column`` names appended, through ``df.mapInArrow``: each task opens the store once (per
    Python worker) and looks up its Arrow batches ``batch_size`` ids at a time. ``missing`` as
    for ``docstore.ray.lookup``: ``"error"``, ``"null"`` or ``"drop"``. Checked before the job:
    an unknown column, a missing id column, an input column a store column would overwrite.
    With ``on_corrupt="skip"`` a damaged document reads as missing."""
    from pyspark.sql.types import StructType

    spec = StoreSpec.of(store, open_options)
    planned = EngineLookup.plan(spec, df.columns, id_column, columns, missing, batch_size, on_corrupt)
    added = spark_schema(planned.fields, planned.columns).fields[1:]
    out = StructType(df.schema.fields + added)

    def join(batches: Iterator[Any]) -> Iterator[Any]:
        handle = planned.open()
        for batch in batches:
            table = planned.table(handle, batch)
            for part in table.to_batches() if hasattr(table, "to_batches") else [table]:
                yield to_spark_batch(part, out)

    return df.mapInArrow(join, out)
