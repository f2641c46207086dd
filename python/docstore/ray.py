"""Writing a docstore collection from a Ray Dataset: one shard per write task, then sealed;
reading one as a Ray Dataset (``read``), and attaching documents to a Dataset of ids (``lookup``).

>>> import ray, docstore, docstore.ray
>>> ds = ray.data.read_parquet("corpus/")
>>> store = docstore.ray.write(ds, "corpus.docstore", id_field="doc_id")

``pip install "docstore[ray]"``. Built on Ray Data's ``Datasink`` (``DocstoreDatasink``, also for
``ds.write_datasink(...)``): every write task attempt writes its blocks, as Arrow, into its own
shard in a staging directory beside the target; on the driver, ``on_write_complete`` seals the
shards of the successful attempts in task order into one collection, and removes the staging
directory. The driver holds a lock on the staging directory while the job runs: one left by a
killed driver is removed by the next write to the same path. Positions follow the dataset's
order when ``DataContext.execution_options.preserve_order`` is set. See docs/engines.md.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import ray
from ray.data import Datasink
from ray.data.block import BlockAccessor

from ._arrow import schema_fields
from ._docstore import Staging
from ._engines import (
    DICTIONARY_SAMPLE_ROWS,
    appended_fields,
    check_mode,
    check_target,
    in_order_of,
    make_staging,
    remove_staging,
    seal_shards,
    shared_dictionary,
    write_shard,
    writer_kwargs,
)
from ._store import DocStore
from .errors import DocstoreError, SchemaError

__all__ = ["DEFAULT_RAY_REMOTE_ARGS", "DEFAULT_SHARD_BYTES", "DocstoreDatasink", "write"]

# The Arrow bytes Ray Data gathers for one write task (one shard): blocks as they come made 200
# shards of 75 KB for 5,000 rows from ray.data.from_items (23.6 s, against 1.6 s for 4 shards).
DEFAULT_SHARD_BYTES = 128 << 20

# Write tasks that fail are retried (an exception or a lost worker), up to 3 times: Ray Data
# itself retries only system failures. A retried attempt writes a new shard; only the attempt
# that succeeds is sealed.
DEFAULT_RAY_REMOTE_ARGS: dict[str, Any] = {"max_retries": 3, "retry_exceptions": True}


class DocstoreDatasink(Datasink[Any]):
    """A Ray Data ``Datasink`` writing a docstore collection at ``path``.

    ``id_field`` names the column of doc ids (strings); ``fields`` maps the columns to store to
    their types (default: every other column, typed from its Arrow type: string ``str``,
    binary ``bytes``, integers ``int64``, floats ``float64``, lists of numbers ``float32[]``
    etc.). ``mode``: ``"errorifexists"`` (the default: ``StoreExistsError`` if something is at
    ``path``), ``"overwrite"`` (replace it atomically) or ``"append"`` (seal the existing
    collection's shards and the new ones into a new collection that replaces it atomically; ids
    stay unique). ``writer_options`` go to each shard's ``docstore.Writer`` (``level``,
    ``dict_size``, ...). After the write, ``store`` is the collection, opened.

    ``on_duplicate``: what an id that several rows hold does: ``"error"`` (the default,
    ``DuplicateKeyError``), or keep the ``"first"`` or ``"last"`` row in the dataset's order
    (within a task by its ``Writer``, across tasks when the shards are sealed).
    ``shard_bytes``: the Arrow bytes Ray Data gathers into one write task, so one shard
    (default ``DEFAULT_SHARD_BYTES``, 128 MiB; ``None``: one task per block as Ray makes them).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        id_field: str = "doc_id",
        fields: Mapping[str, str] | None = None,
        mode: str = "errorifexists",
        on_duplicate: str = "error",
        shard_bytes: int | None = DEFAULT_SHARD_BYTES,
        **writer_options: Any,
    ) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self.id_field = id_field
        self.fields = dict(fields) if fields is not None else None
        self.mode = check_mode(mode)
        self.writer_options = writer_kwargs(self.mode, writer_options, on_duplicate)
        if shard_bytes is not None and (isinstance(shard_bytes, bool) or int(shard_bytes) < 1):
            raise ValueError(f"shard_bytes must be a positive number of bytes or None, got {shard_bytes!r}")
        self.shard_bytes = None if shard_bytes is None else int(shard_bytes)
        self.store: DocStore | None = None
        self._staging: str | None = None  # its path, which the tasks get
        self._staging_lock: Staging | None = None  # driver only: held for the job's life
        self._fallback_schema: Any = None  # driver only: a callable giving the dataset's schema
        self._order: dict[str, str] | None = None  # an append's collection's fields, in order

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_fallback_schema"] = state["store"] = None  # neither goes to the tasks
        state["_staging_lock"] = None
        return state

    def get_name(self) -> str:
        return "Docstore"

    @property
    def min_bytes_per_write(self) -> int | None:
        """Ray Data gathers blocks of about this many bytes into one write task (Ray >= 2.50)."""
        return self.shard_bytes

    def on_write_start(self, schema: Any = None) -> None:
        """On the driver, before the first write task: checks the target and the options, and
        makes the staging directory (a fresh one for each write), locked by this process until
        the write ends; removes those that killed drivers left for the same path."""
        check_target(self.path, self.mode)
        self._order = appended_fields(self.path, self.mode)
        if self.fields is not None:
            self.fields = in_order_of(self.fields, self._order)
        # ``schema`` is not used: it is the first input bundle's, which, where Ray fuses the
        # write with the operators before it (a read, a map), is not the data's (a file list).
        # Each task takes the fields from its own blocks, unless ``fields`` gives them.
        self.store = None
        self._release_staging()  # a sink written twice: the first write's, if still there
        self._staging_lock = make_staging(self.path, self.fields, self.writer_options)
        self._staging = self._staging_lock.path

    def write(self, blocks: Iterable[Any], ctx: Any) -> dict[str, Any]:
        """One task attempt: its blocks, as Arrow tables, into one new shard named after the
        task index and a uuid (two attempts of one task never share a file)."""
        if self._staging is None:
            raise RuntimeError("DocstoreDatasink.write before on_write_start: this Ray is too old")
        task = int(ctx.task_idx)
        with _user_errors():
            path, count, fields = write_shard(
                self._staging,
                f"part-{task:05d}-{uuid.uuid4().hex}.docstore",
                (BlockAccessor.for_block(block).to_arrow() for block in blocks),
                self.id_field,
                self.fields,
                self.writer_options,
                where=f"write task {task}",
                order=self._order,
            )
        return {"task_idx": task, "path": path, "count": count, "fields": fields}

    def on_write_complete(self, write_result: Any) -> None:
        """On the driver once every task succeeded: seals the shards the tasks returned, in task
        order, then removes the staging directory (and the failed attempts' files in it)."""
        if self._staging is None:  # no input at all: on_write_start was never called
            self.on_write_start(None)
        assert self._staging is not None
        try:
            returns = [r for r in write_result.write_returns if r is not None]
            returns.sort(key=lambda r: r["task_idx"])  # stable: ties keep Ray's order
            fields = self.fields or next((r["fields"] for r in returns if r["fields"]), None)
            if fields is None and self._fallback_schema is not None:
                schema = self._fallback_schema()
                if schema is not None and len(schema.names):
                    fields = schema_fields(_arrow_schema(schema), self.id_field)
            shards = {r["path"]: f"write task {r['task_idx']}" for r in returns if r["path"] is not None}
            with _user_errors():
                self.store = seal_shards(
                    self.path, shards, self.mode, self._staging, fields, self.writer_options
                )
        finally:
            self._release_staging()

    def on_write_failed(self, error: Exception) -> None:
        """On the driver when the job failed: removes the staging directory; the target is as
        it was."""
        self._release_staging()

    def _release_staging(self) -> None:
        """Removes the staging directory, then lets its lock go."""
        remove_staging(self.path, self._staging_lock or self._staging)
        self._staging = self._staging_lock = None


@contextlib.contextmanager
def _user_errors() -> Iterator[None]:
    """Raises a docstore error as one of the user's (a repeated id, a bad value), which Ray Data
    reports as such, not as "Exception occurred in Ray Data or Ray Core internal code" with a
    request to file a Ray bug: its class becomes a subclass that is also Ray's
    ``UserCodeException`` (still caught as the docstore class it was)."""
    try:
        yield
    except DocstoreError as error:
        error.__class__ = _user_class(type(error))
        raise


_USER_CLASSES: dict[type, type] = {}


def _user_class(cls: type) -> type:
    from ray.exceptions import UserCodeException

    if issubclass(cls, UserCodeException):
        return cls
    if cls not in _USER_CLASSES:
        # Named as the docstore class, so that the report reads "DuplicateKeyError: ...".
        _USER_CLASSES[cls] = type(cls.__name__, (cls, UserCodeException), {"__module__": cls.__module__})
    return _USER_CLASSES[cls]


def _first_rows(ds: ray.data.Dataset) -> Any:
    """The first rows of ``ds`` as one Arrow table, None if it has none: what the shards' one
    dictionary is trained on."""
    import pyarrow as pa

    tables = [t for t in ray.get(ds.limit(DICTIONARY_SAMPLE_ROWS).to_arrow_refs()) if t.num_rows]
    return pa.concat_tables(tables, promote_options="permissive") if tables else None


def _arrow_schema(schema: Any) -> Any:
    """A ``ray.data.Schema`` (or already a pyarrow schema) as a pyarrow schema."""
    base = getattr(schema, "base_schema", schema)
    import pyarrow as pa

    if isinstance(base, pa.Schema):
        return base
    raise SchemaError(f"the dataset's schema is not an Arrow schema ({schema}); pass fields={{...}}")


def write(
    ds: ray.data.Dataset,
    path: str | os.PathLike[str],
    *,
    id_field: str = "doc_id",
    fields: Mapping[str, str] | None = None,
    overwrite: bool = False,
    append: bool = False,
    ray_remote_args: Mapping[str, Any] | None = None,
    concurrency: int | None = None,
    on_duplicate: str = "error",
    shard_bytes: int | None = DEFAULT_SHARD_BYTES,
    **writer_options: Any,
) -> DocStore:
    """Writes the Ray Dataset ``ds`` as a docstore collection at ``path``; returns it opened.

    One shard per write task, sealed in task order: with
    ``ray.data.DataContext.get_current().execution_options.preserve_order = True``, ``store.at(i)``
    is the i-th row of ``ds``. ``overwrite=True`` replaces what is at ``path`` atomically,
    ``append=True`` adds the documents to the collection there (ids stay unique). Write tasks are
    retried as ``ray_remote_args`` say (default ``DEFAULT_RAY_REMOTE_ARGS``: 3 retries, on any
    exception); a retried task never duplicates documents. See ``DocstoreDatasink`` for
    ``fields``, ``on_duplicate`` (``"error"``, ``"first"``, ``"last"``), ``shard_bytes`` (the
    Arrow bytes of one shard: 128 MiB unless given) and ``writer_options``.

    Every shard is compressed with one dictionary, so that readers keep one copy of it: the
    ``dictionary`` writer option, else (unless ``level=-1``) one trained on the driver on the
    dataset's first 10,000 rows (running the dataset's pipeline for those rows once more), or
    for an append the existing collection's.
    """
    if overwrite and append:
        raise ValueError("overwrite and append exclude each other")
    mode = "overwrite" if overwrite else "append" if append else "errorifexists"
    sink = DocstoreDatasink(
        path,
        id_field=id_field,
        fields=fields,
        mode=mode,
        on_duplicate=on_duplicate,
        shard_bytes=shard_bytes,
        **writer_options,
    )
    check_target(sink.path, sink.mode)  # before any work: a dataset's own tasks may be costly
    dictionary = shared_dictionary(
        sink.path,
        sink.mode,
        lambda: _first_rows(ds),
        id_field,
        sink.fields,
        sink.writer_options,
    )
    if dictionary is not None:
        sink.writer_options["dictionary"] = dictionary
    sink._fallback_schema = ds.schema  # an empty dataset's fields, asked for only then
    remote_args = dict(DEFAULT_RAY_REMOTE_ARGS if ray_remote_args is None else ray_remote_args)
    if concurrency is None:  # older Rays have no such argument
        ds.write_datasink(sink, ray_remote_args=remote_args)
    else:
        ds.write_datasink(sink, ray_remote_args=remote_args, concurrency=concurrency)
    assert sink.store is not None
    return sink.store


# ---------------------------------------------------------------------------------------------
# Reading: docstore.ray.read (a Datasource with read tasks by shard and position range) and
# docstore.ray.lookup (the lookup join on an actor pool); in docstore._ray_read, apart from the
# write side above.
from ._ray_read import DEFAULT_READ_REMOTE_ARGS, DocstoreDatasource, lookup, read  # noqa: E402

__all__ += ["DEFAULT_READ_REMOTE_ARGS", "DocstoreDatasource", "lookup", "read"]
