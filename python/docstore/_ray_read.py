"""Reading a docstore store or collection from Ray Data, and the lookup join (``docstore.ray``
re-exports ``read``, ``lookup`` and ``DocstoreDatasource``; the planning and the Arrow batches
are ``_engine_read``'s, shared with Spark). See docs/engines.md."""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import ray
from ray.data import Datasource, ReadTask
from ray.data.block import BlockMetadata

from ._arrow_read import arrow_schema
from ._engine_read import (
    DEFAULT_BLOCK_ROWS,
    DEFAULT_LOOKUP_BATCH,
    EngineLookup,
    EngineReader,
    Split,
    StoreSpec,
    check_parallelism,
)
from .errors import InvalidArgumentError

__all__ = ["DEFAULT_READ_REMOTE_ARGS", "DocstoreDatasource", "lookup", "read"]

# A read task that fails (an exception, a lost worker) is tried again, up to 3 times: it reads
# its range again from the start, and only the blocks of the attempt that succeeds are kept.
DEFAULT_READ_REMOTE_ARGS: dict[str, Any] = {"max_retries": 3, "retry_exceptions": True}


class DocstoreDatasource(Datasource):
    """A Ray Data ``Datasource`` over a docstore store or collection (a path or a URL).

    Opened once on the driver, which checks ``columns`` (``None``: every field; ``doc_id`` is
    always read) and takes the shards' sizes; ``get_read_tasks`` splits the documents by shard
    and position range (``_engine_read.plan``). Each task yields Arrow tables of ``block_rows``
    documents, in position order, with columns ``doc_id`` then ``columns``. ``open_options`` go
    to ``docstore.open`` in every task (``read``, ``cache_dir``, ``cache_bytes``,
    ``storage_options``: remote stores read through each node's cache). ``on_corrupt="skip"``
    leaves damaged documents out (each worker warns once, naming the store and positions).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        columns: Sequence[str] | None = None,
        *,
        block_rows: int = DEFAULT_BLOCK_ROWS,
        on_corrupt: str = "raise",
        **open_options: Any,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Ray's is not annotated
        self.reader, store = EngineReader.plan(
            StoreSpec.of(path, open_options), columns, block_rows, on_corrupt
        )
        self.schema = arrow_schema(self.reader.fields, self.reader.columns)
        info = store.info()
        share = (len(self.reader.columns) + 1) / (len(self.reader.fields) + 1)  # a rough share of the bytes
        self._size: int = int(info["raw_bytes"] * share) + 16 * info["count"]

    def get_name(self) -> str:
        return "Docstore"

    def estimate_inmemory_data_size(self) -> int | None:
        return self._size

    def get_read_tasks(
        self,
        parallelism: int,
        per_task_row_limit: int | None = None,
        data_context: Any = None,
    ) -> list[ReadTask]:
        total = self.reader.count
        tasks = []
        for split in self.reader.splits(parallelism):
            size = self._size * split.count // max(1, total)
            metadata = BlockMetadata(num_rows=split.count, size_bytes=size, input_files=None, exec_stats=None)
            read = functools.partial(_read_task, self.reader, split)
            tasks.append(ReadTask(read, metadata, schema=self.schema, per_task_row_limit=per_task_row_limit))
        if not tasks:  # an empty store: one task giving an empty block, so the schema is known
            empty = functools.partial(_empty_task, self.schema)
            metadata = BlockMetadata(num_rows=0, size_bytes=0, input_files=None, exec_stats=None)
            tasks.append(ReadTask(empty, metadata, schema=self.schema))
        return tasks


def _empty_task(schema: Any) -> Iterator[Any]:
    yield schema.empty_table()


def _read_task(reader: EngineReader, split: Split) -> Iterator[Any]:
    """One read task: its split's documents, as Arrow tables (Ray's blocks)."""
    import pyarrow as pa

    for batch in reader.read(split):
        yield pa.Table.from_batches([batch])


def read(
    path_or_url: str | os.PathLike[str],
    columns: Sequence[str] | None = None,
    *,
    parallelism: int | None = None,
    block_rows: int = DEFAULT_BLOCK_ROWS,
    ray_remote_args: Mapping[str, Any] | None = None,
    concurrency: int | None = None,
    on_corrupt: str = "raise",
    **open_options: Any,
) -> ray.data.Dataset:
    """A Ray Dataset of the documents of the store or collection at ``path_or_url``: columns
    ``doc_id`` and ``columns`` (default: every field), Arrow typed (``str`` is
    ``large_string``, ``bytes`` ``large_binary``, ``T[]`` ``large_list<T>``).

    ``parallelism``: the number of read tasks to aim at (default: Ray's choice for the cluster);
    each task reads a position range of one shard, in order, ``block_rows`` documents per block.
    With ``DataContext.execution_options.preserve_order`` the dataset's order is the store's.
    Read tasks are retried as ``ray_remote_args`` say (default ``DEFAULT_READ_REMOTE_ARGS``);
    ``open_options`` go to ``docstore.open`` (``cache_dir``, ``storage_options`` ...). Bad
    options fail here, before the job: an unknown column (``SchemaError``), a parallelism or
    block size below 1 (``InvalidArgumentError``). ``on_corrupt``: ``"raise"`` (a damaged
    document fails the job) or ``"skip"`` (it is left out; docs/engines.md)."""
    parallelism = check_parallelism(parallelism)
    if concurrency is not None:
        check_parallelism(concurrency, "concurrency")
    source = DocstoreDatasource(
        path_or_url, columns, block_rows=block_rows, on_corrupt=on_corrupt, **open_options
    )
    kwargs: dict[str, Any] = {
        "ray_remote_args": dict(DEFAULT_READ_REMOTE_ARGS if ray_remote_args is None else ray_remote_args)
    }
    if parallelism is not None:
        kwargs["override_num_blocks"] = parallelism
    if concurrency is not None:
        kwargs["concurrency"] = concurrency
    with warnings.catch_warnings():
        # Ray 2.5x deprecates ray_remote_args for reads, but has no named max_retries yet.
        warnings.filterwarnings("ignore", message=".*ray_remote_args.*deprecated")
        dataset: ray.data.Dataset = ray.data.read_datasource(source, **kwargs)
        return dataset


class _Lookup:
    """The map_batches callable of ``lookup``: one per actor, which opens the store once."""

    def __init__(self, lookup: EngineLookup) -> None:
        self.lookup = lookup
        self.store = lookup.open()

    def __call__(self, batch: Any) -> Any:
        return self.lookup.table(self.store, batch)


def lookup(
    ds: ray.data.Dataset,
    store: Any,
    *,
    id_column: str = "doc_id",
    columns: Sequence[str] | None = None,
    missing: str = "error",
    concurrency: int | tuple[int, int] = 2,
    batch_size: int = DEFAULT_LOOKUP_BATCH,
    ray_remote_args: Mapping[str, Any] | None = None,
    on_corrupt: str = "raise",
    **open_options: Any,
) -> ray.data.Dataset:
    """``ds`` with the fields ``columns`` (default: all) of the document that each row's
    ``id_column`` names appended: ranker triples, qrels and mined negatives meet their texts.

    ``store``: a path, a URL or an open ``DocStore`` (reopened by path in the workers). Runs as
    ``map_batches`` on a pool of ``concurrency`` actors (an int, or ``(min, max)``), each of
    which opens the store once; each batch of ``batch_size`` rows is looked up at once
    (``positions``, then the documents read as Arrow). ``missing``: ``"error"`` (a ``KeyError``
    naming the first missing ids fails the job), ``"null"`` (the row is kept, the store columns
    null) or ``"drop"`` (the row is dropped). Fails before the job for an unknown column, a
    missing id column, or an input column a store column would overwrite. With
    ``on_corrupt="skip"`` a damaged document reads as missing."""
    if isinstance(store, str | os.PathLike):
        spec = StoreSpec.of(store, open_options)
    else:  # an open DocStore: its path or URL, as it was opened
        from ._store import _remote_kwargs

        url = store.url
        options = {
            **(_remote_kwargs(store, for_pickle=False) if url else {"read": store.read}),
            **open_options,
        }
        spec = StoreSpec.of(url or os.fspath(store.path), options)
    names = ds.schema().names if ds.schema() is not None else []
    planned = EngineLookup.plan(spec, names, id_column, columns, missing, batch_size, on_corrupt)
    if isinstance(concurrency, tuple):
        lo, hi = concurrency
        compute = ray.data.ActorPoolStrategy(
            min_size=check_parallelism(lo, "concurrency"), max_size=check_parallelism(hi, "concurrency")
        )
    else:
        size = check_parallelism(concurrency, "concurrency")
        if size is None:
            raise InvalidArgumentError("concurrency must be an int or (min, max)")
        compute = ray.data.ActorPoolStrategy(size=size)
    return ds.map_batches(
        _Lookup,
        fn_constructor_args=(planned,),
        batch_size=batch_size,
        batch_format="pyarrow",
        compute=compute,
        **dict(ray_remote_args or {}),
    )
