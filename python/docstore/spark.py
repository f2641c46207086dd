"""Writing a docstore collection from a PySpark DataFrame: one shard per partition, then sealed;
reading one (``spark.read.format("docstore")``, ``read``) and joining documents to ids (``lookup``).

>>> import docstore, docstore.spark
>>> store = docstore.spark.write(df, "corpus.docstore", id_field="doc_id")

``pip install "docstore[spark]"`` (PySpark 4, which needs Java 17 or newer). Built on PySpark's
Python Data Source API: ``DocstoreDataSource`` (format ``"docstore"``) writes through a
``DataSourceArrowWriter``, which receives each partition as ``pyarrow.RecordBatch``es; every
task attempt writes its own shard in a staging directory beside the target, and ``commit`` on
the driver seals the shards of the committed attempts in partition order (``abort`` removes
them). ``write`` makes the staging directory in the calling process and holds a lock on it for
the job's life, so that one left by a killed driver is removed by the next write to the same
path. ``write`` registers the source in the DataFrame's session, after which
``df.write.format("docstore").mode("overwrite").option("id_field", "pid").save(path)`` works too.
See docs/engines.md.
"""

from __future__ import annotations

import base64
import contextlib
import glob
import inspect
import json
import os
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

from ._arrow import schema_fields
from ._docstore import Staging
from ._engines import (
    DICTIONARY_SAMPLE_ROWS,
    POLICY_OPTION,
    WRITER_OPTIONS,
    appended_fields,
    check_mode,
    check_staging,
    check_target,
    check_writer,
    in_order_of,
    make_unlocked_staging,
    remove_staging,
    report_error,
    reported_error,
    seal_shards,
    shared_dictionary,
    write_shard,
    writer_kwargs,
)
from ._store import DocStore
from ._store import open as open_store
from ._writer import metadata_json
from .errors import InternalError, InvalidArgumentError, SchemaError

__all__ = ["DocstoreDataSource", "DocstoreWriter", "ShardMessage", "register", "write"]

# The data source's options (case-insensitive, as Spark passes them): Spark's "path", then
# docstore's own. "mode" is docstore's save mode, as Spark tells a Python data source only
# whether it overwrites (see DocstoreWriter); "report" and "staging" are internal to write().
OPTIONS = ("path", "id_field", "fields", "mode", "report", "staging", POLICY_OPTION, *WRITER_OPTIONS)


@dataclass
class ShardMessage(WriterCommitMessage):
    """What one successful task attempt hands the driver: its shard (None if its partition was
    empty) and the shard's document count."""

    partition_id: int
    attempt: int
    path: str | None
    count: int


class DocstoreDataSource(DataSource):
    """The ``"docstore"`` format: ``df.write.format("docstore")`` writes a collection,
    ``spark.read.format("docstore").load(path_or_url)`` reads a store or collection (its schema
    from the store's fields; the reader is ``docstore._spark_read``'s)."""

    @classmethod
    def name(cls) -> str:
        return "docstore"

    def schema(self) -> Any:  # a StructType
        from ._spark_read import schema

        return schema(dict(self.options))

    def reader(self, schema: Any) -> Any:
        from ._spark_read import DocstoreReader

        return DocstoreReader(dict(self.options), schema)

    def writer(self, schema: Any, overwrite: bool) -> DocstoreWriter:
        return DocstoreWriter(dict(self.options), schema, overwrite)


class DocstoreWriter(DataSourceArrowWriter):
    """Made once on the driver (it checks the target and makes the staging directory), then
    pickled to every task and to the commit.

    Modes: Spark hands a Python data source the save modes ``overwrite`` (``overwrite=True``)
    and ``append`` only (it refuses ``errorifexists`` and ``ignore`` before asking the source),
    so the option ``mode`` carries docstore's own: ``errorifexists``, ``overwrite`` or
    ``append``. Without it, Spark's ``overwrite`` replaces the target and ``append`` appends.
    ``docstore.spark.write`` always sets it.
    """

    def __init__(self, options: Mapping[str, str], schema: Any, overwrite: bool) -> None:
        options = {k.lower(): v for k, v in options.items()}
        self.report = options.get("report")
        try:
            unknown = sorted(k for k in options if k not in OPTIONS)
            if unknown:
                raise ValueError(
                    f"unknown docstore option(s) {unknown}; the options are {list(OPTIONS[1:4])} "
                    f"and the Writer's {list(WRITER_OPTIONS)}"
                )
            if not options.get("path"):
                raise ValueError("no path: df.write.format('docstore').save(PATH)")
            self.path = os.path.abspath(options["path"])
            self.mode = check_mode(options.get("mode") or ("overwrite" if overwrite else "append"))
            if overwrite != (self.mode == "overwrite"):
                raise ValueError(
                    f"the docstore option mode={self.mode!r} contradicts Spark's save mode "
                    f"({'overwrite' if overwrite else 'append'})"
                )
            self.id_field = options.get("id_field") or "doc_id"
            given_options = {k: _writer_option(k, options[k]) for k in WRITER_OPTIONS if k in options}
            on_duplicate = options.get(POLICY_OPTION, "error")
            self.writer_options = writer_kwargs(self.mode, given_options, on_duplicate)
            given = parse_fields(options["fields"]) if options.get("fields") else None
            needed = None if given is None else {self.id_field, *given}
            fields = schema_fields(_arrow_schema(schema, needed), self.id_field, given)
            check_target(self.path, self.mode)
            # An append takes the collection's order for the same fields in another order.
            self.fields = in_order_of(fields, appended_fields(self.path, self.mode))
            check_writer(self.fields, self.writer_options)
            if options.get("staging"):  # made and locked by write() in the user's process
                self.staging = options["staging"]
                check_staging(self.path, self.staging)
            else:  # this process ends before the job: nothing can hold a lock for its life
                self.staging = make_unlocked_staging(self.path)
        except Exception as error:
            report_error(self.report, error)
            raise

    def write(self, iterator: Iterator[Any]) -> ShardMessage:
        """One task attempt: its partition's record batches into one new shard, named after the
        partition, the attempt and a uuid."""
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        attempt = context.attemptNumber() if context is not None else 0
        name = f"part-{partition:05d}-{attempt}-{uuid.uuid4().hex}"
        try:
            path, count, _ = write_shard(
                self.staging,
                f"{name}.docstore",
                iterator,
                self.id_field,
                self.fields,
                self.writer_options,
                where=f"partition {partition}",
            )
        except Exception as error:
            # The staging directory is shared with the driver: abort() hands this on to write().
            report_error(os.path.join(self.staging, f"{name}.error.json"), error)
            raise
        return ShardMessage(partition, attempt, path, count)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """On the driver when every partition has committed: seals exactly the shards of the
        committed attempts, in partition order, then removes the staging directory."""
        try:
            if any(m is None for m in messages):
                raise InternalError("commit with a failed task's message")
            by_partition: dict[int, ShardMessage] = {}
            for message in messages:
                assert isinstance(message, ShardMessage)
                by_partition.setdefault(message.partition_id, message)  # Spark commits one per partition
            shards = {m.path: f"partition {p}" for p, m in sorted(by_partition.items()) if m.path is not None}
            seal_shards(self.path, shards, self.mode, self.staging, self.fields, self.writer_options).close()
        except Exception as error:
            report_error(self.report, error)
            raise
        finally:
            remove_staging(self.path, self.staging)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """On the driver when the job failed: removes the staging directory (every attempt's
        shard); the target is as it was. A task's docstore error goes on to ``write``."""
        for error_file in sorted(glob.glob(os.path.join(glob.escape(self.staging), "*.error.json"))):
            error = reported_error(error_file)
            if error is not None:
                report_error(self.report, error)
                break
        remove_staging(self.path, self.staging)


def _writer_option(name: str, value: str) -> Any:
    """A Writer option from its Spark option's text: the dictionary in base64, the metadata as
    JSON text, the others integers."""
    if name == "dictionary":
        return base64.b64decode(value)
    if name == "metadata":
        try:
            return json.loads(value)
        except ValueError as err:
            raise ValueError(f"docstore option metadata must be a JSON object: {err}") from None
    return _int_option(name, value)


def _int_option(name: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"docstore option {name} must be an integer, got {value!r}") from None


def _arrow_schema(schema: Any, needed: set[str] | None) -> Any:
    """The Arrow schema of the batches a task receives for the Spark ``schema``; a column that
    Arrow cannot hold is refused if it is ``needed`` (None: every column is)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_type

    parameters = inspect.signature(to_arrow_type).parameters
    options: dict[str, Any] = {"timezone": "UTC"} if "timezone" in parameters else {}
    fields = []
    for field in schema.fields:
        try:
            arrow_type = to_arrow_type(field.dataType, **options)
        except Exception:
            if needed is not None and field.name not in needed:
                arrow_type = pa.null()
            else:
                raise SchemaError(
                    f"column {field.name!r} has Spark type {field.dataType.simpleString()}, which "
                    "docstore has no field type for; cast or drop the column, or pass fields={...}"
                ) from None
        fields.append(pa.field(field.name, arrow_type))
    return pa.schema(fields)


def format_fields(fields: Mapping[str, str]) -> str:
    """``{"text": "str", "n": "int64"}`` as the option ``"text:str,n:int64"``."""
    for name in fields:
        if not name or any(c in name for c in ",:"):
            raise ValueError(f"field name {name!r} cannot go in the fields option (empty, or has ',' or ':')")
    return ",".join(f"{name}:{kind}" for name, kind in fields.items())


def parse_fields(option: str) -> dict[str, str]:
    fields = {}
    for item in option.split(","):
        name, sep, kind = item.partition(":")
        if not sep or not name.strip():
            raise ValueError(f"the fields option wants name:type pairs separated by ',', got {item!r}")
        fields[name.strip()] = kind.strip()
    return fields


def register(spark: Any) -> None:
    """Registers the ``"docstore"`` format in the SparkSession ``spark``.

    Its tasks run the driver's Python (``sys.executable``) unless ``PYSPARK_PYTHON`` or
    ``spark.pyspark.python`` names one: Spark's default, ``python3`` on the ``PATH``, is another
    interpreter when the driver runs from a virtual environment that is not activated, and
    fails with "No module named 'docstore'"."""
    import sys

    context = spark.sparkContext
    chosen = os.environ.get("PYSPARK_PYTHON") or context.getConf().get("spark.pyspark.python")
    if chosen or not sys.executable:
        spark.dataSource.register(DocstoreDataSource)
        return
    # The data source's workers run the interpreter its wrapped function names, taken from the
    # context when registered: set for this registration only, the user's UDFs keep theirs.
    saved = context.pythonExec
    context.pythonExec = sys.executable
    try:
        spark.dataSource.register(DocstoreDataSource)
    finally:
        context.pythonExec = saved


def write(
    df: Any,
    path: str | os.PathLike[str],
    *,
    id_field: str = "doc_id",
    fields: Mapping[str, str] | None = None,
    mode: str = "errorifexists",
    on_duplicate: str = "error",
    **writer_options: Any,
) -> DocStore | None:
    """Writes the PySpark DataFrame ``df`` as a docstore collection at ``path``; returns it opened
    (None when ``mode="ignore"`` found something there and wrote nothing).

    One shard per partition, sealed in partition order: ``store.at(i)`` is the i-th row of
    ``df.collect()``. ``mode``: ``"errorifexists"`` (``StoreExistsError`` if something is at
    ``path``), ``"overwrite"`` (replace it atomically), ``"append"`` (seal the collection there
    and the new shards into a new one that replaces it atomically; ids stay unique) or
    ``"ignore"`` (write nothing if something is there). ``fields`` maps the columns to store to
    their types (default: every column but the ids, typed from its Spark type);
    ``writer_options`` (``level``, ``dict_size``, ...) go to each shard's ``docstore.Writer``.
    Every shard is compressed with one dictionary, so that readers keep one copy of it: the
    ``dictionary`` writer option, else (unless ``level=-1``) one trained on the driver on the
    DataFrame's first 10,000 rows (one more Spark job), or for an append the existing
    collection's.
    ``on_duplicate``: what an id that several rows hold does: ``"error"`` (the default,
    ``DuplicateKeyError``), or keep the ``"first"`` or ``"last"`` row in partition order
    (within a partition by its ``Writer``, across partitions when the shards are sealed).
    A docstore error of the job (``DuplicateKeyError`` across partitions, ``SchemaError`` ...)
    is raised as itself, from Spark's exception. The tasks run the driver's Python unless
    ``PYSPARK_PYTHON`` or ``spark.pyspark.python`` says otherwise (``register``). One shard is
    written per partition: ``df.repartition(n)`` or ``df.coalesce(n)`` sets their number
    (tens to hundreds of MB each read well; docs/engines.md).
    """
    path = os.path.abspath(os.fspath(path))
    if mode.lower() == "ignore":
        if os.path.lexists(path):
            return None
        mode = "errorifexists"
    mode = check_mode(mode)
    check_target(path, mode)
    register(df.sparkSession)
    writer = df.write.format("docstore").mode("overwrite" if mode == "overwrite" else "append")
    writer = writer.option("id_field", id_field).option("mode", mode)
    writer_options = writer_kwargs(mode, writer_options, on_duplicate)
    if POLICY_OPTION in writer_options:  # a string: the others are numbers and bytes
        writer = writer.option(POLICY_OPTION, writer_options.pop(POLICY_OPTION))
    if fields is not None:
        writer = writer.option("fields", format_fields(fields))
    columns = None if fields is None else [id_field, *(name for name in fields if name != id_field)]
    dictionary = shared_dictionary(
        path,
        mode,
        lambda: (df.select(*columns) if columns else df).limit(DICTIONARY_SAMPLE_ROWS).toArrow(),
        id_field,
        fields,
        writer_options,
    )
    if dictionary is not None:
        writer_options = {**writer_options, "dictionary": dictionary}
    for name, value in writer_options.items():
        if name == "dictionary":  # Spark options are strings
            writer = writer.option(name, base64.b64encode(bytes(value)).decode("ascii"))
        elif name == "metadata":  # its JSON text (None or {}: none)
            writer = writer.option(name, metadata_json(value) or "{}")
        else:
            writer = writer.option(name, str(int(value)))
    report = os.path.join(tempfile.gettempdir(), f"docstore-spark-{uuid.uuid4().hex}.json")
    # The staging directory, locked by this process until the job has ended (the planner and
    # commit run in Spark's Python workers, which do not live as long as the job); the trial
    # writer runs in the planner, once the fields are known.
    staging = Staging(path)
    try:
        writer.option("report", report).option("staging", staging.path).save(path)
    except Exception as spark_error:
        error = reported_error(report)
        if error is not None:
            raise error from spark_error
        raise
    finally:
        staging.release()
        with contextlib.suppress(OSError):
            os.remove(report)
    return open_store(path)


# ---------------------------------------------------------------------------------------------
# Reading: spark.read.format("docstore") (DocstoreDataSource.reader above), docstore.spark.read
# and docstore.spark.lookup (a mapInArrow join); in docstore._spark_read, apart from the write
# side above.
from . import _spark_read  # noqa: E402
from ._spark_read import DocstoreReader, lookup  # noqa: E402


def read(
    spark: Any, path_or_url: str | os.PathLike[str], columns: Sequence[str] | None = None, **options: Any
) -> Any:
    """``spark.read.format("docstore")`` with the options given (``parallelism``,
    ``block_rows``, ``read``, ``cache_dir``, ``storage_options={...}`` ...) and the ``columns``
    to read, after registering the format in ``spark``; the options are checked here, before
    Spark plans anything."""
    register(spark)
    strings: dict[str, str] = {}
    for name, value in options.items():
        if name == "storage_options":
            strings.update({f"storage.{k}": str(v) for k, v in (value or {}).items()})
        else:
            strings[name] = str(value)
    path = os.fspath(path_or_url)
    if columns is not None:
        if isinstance(columns, str):
            raise InvalidArgumentError(f"columns must be a list of field names, got one str {columns!r}")
        strings["columns"] = ",".join(columns)
    _spark_read.parse_options({**strings, "path": path}).plan()  # a bad option or column: refused here
    return spark.read.format("docstore").options(**strings).load(path)


__all__ += ["DocstoreReader", "lookup", "read"]
