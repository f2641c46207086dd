"""What ``docstore.ray`` and ``docstore.spark`` share to READ a store or collection: the plan
that splits it into tasks by shard and position range, the Arrow types of its fields, the
reading of one split as Arrow record batches, and the lookup of ids' documents as Arrow.

A read job goes like this (docs/engines.md):

1. the driver opens the store (a file, a collection, a URL), checks the options (the columns,
   the parallelism) and plans the splits: each a position range inside one shard, about
   ``count / parallelism`` documents, so that every worker has one;
2. every task opens the store once per process (``StoreSpec.open``, a small cache: a worker
   running many tasks opens it once), checks that it is the store the driver planned
   (its fingerprint), and reads its range in order, ``block_rows`` documents a batch, each
   batch one ``Reader._take_columns`` call whose flat buffers become Arrow arrays as they are:
   no Python object per document;
3. an error inside a task names the store, the shard and the range, and keeps its class.
"""

from __future__ import annotations

import copy
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ._arrow_read import check_columns as _check_columns
from ._arrow_read import take_batch
from ._damage import check_on_corrupt, described, positions_skipping, read_skipping, warn_once
from ._store import DocStore, is_url
from ._store import open as open_store
from .errors import DocstoreError, InvalidArgumentError, SchemaError, StoreChangedError

# Documents per Arrow batch a read task yields: a few MiB of typical passages, few enough
# batches that their overhead does not show (docs/engines.md, "Options").
DEFAULT_BLOCK_ROWS = 8192

# Ids looked up per get_many-style call in a lookup join.
DEFAULT_LOOKUP_BATCH = 4096

MISSING = ("error", "null", "drop")

# A collection directory's manifest (rust/core/src/collection/manifest.rs): rewritten, under a new
# inode, by every append and rebuild.
MANIFEST = "docstore-collection.json"


@dataclass(frozen=True)
class StoreSpec:
    """How a task reopens the store the driver planned: its path or URL, the options of
    ``docstore.open``, and its fingerprint (a store replaced since is refused, not read)."""

    path: str
    open_options: Mapping[str, Any] = field(default_factory=dict)
    fingerprint: int | None = None

    @staticmethod
    def of(path_or_url: Any, open_options: Mapping[str, Any] | None = None) -> StoreSpec:
        path = path_or_url if is_url(path_or_url) else os.path.abspath(os.fspath(path_or_url))
        return StoreSpec(path, dict(open_options or {}))

    def plan(self) -> tuple[StoreSpec, DocStore]:
        """On the driver: the store at the path now, and this spec pinned to it (its
        fingerprint), which every task then checks. A store rebuilt since an earlier job is the
        new one here: a local file is known by its identity, and a URL is opened again."""
        store = self._open(fresh=True)
        return replace(self, fingerprint=store.fingerprint), store

    def open(self) -> DocStore:
        """In a task: the store the driver planned, opened once per process and version (tasks
        of one worker share it); ``StoreChangedError`` if another store is at the path now."""
        store = self._open(fresh=False)
        if self.fingerprint is not None and store.fingerprint != self.fingerprint:
            self.forget()  # the next job, planned anew, opens what is there then
            raise StoreChangedError(
                f"{self.label()} changed since the job was planned (another store is there now); "
                "start the job again"
            )
        return store

    def _open(self, fresh: bool) -> DocStore:
        """The store of this spec's path as it is now, from the process's cache of open stores.
        A local store's entry is keyed by its file's identity (a rebuilt store is a new file), a
        remote one's by the fingerprint the job planned; a remote store is opened afresh when
        ``fresh`` (planning: what is there now) or when no job pinned it."""
        options = tuple(sorted((k, repr(v)) for k, v in self.open_options.items()))
        remote = is_url(self.path)
        for _ in range(3):
            version = _file_identity(self.path) if not remote else None if fresh else self.fingerprint
            key = (self.path, options, version)
            with _OPEN_LOCK:
                store = _OPEN.get(key)
            if store is not None and not store.closed and (version is not None):
                return store
            store = open_store(self.path, **self.open_options)
            if remote:
                version = store.fingerprint
            elif _file_identity(self.path) != version:
                continue  # replaced while it was opened: which one is open is not known
            with _OPEN_LOCK:
                # Other versions of this path are dropped (closed when their last user lets go).
                for stale in [k for k in _OPEN if k[:2] == key[:2] and k[2] != version]:
                    del _OPEN[stale]
                return _OPEN.setdefault((self.path, options, version), store)
        raise StoreChangedError(f"{self.label()} was replaced three times while it was opened")

    def forget(self) -> None:
        """Drops this path's open stores from the process's cache (after StoreChangedError)."""
        with _OPEN_LOCK:
            for key in [k for k in _OPEN if k[0] == self.path]:
                del _OPEN[key]

    def label(self) -> str:
        return f"store {_redact(self.path)}"

    def __repr__(self) -> str:
        # No secrets in logs: the URL's userinfo and query redacted, storage options by name.
        options = {
            k: ({o: "***" for o in v} if k == "storage_options" and isinstance(v, Mapping) else v)
            for k, v in self.open_options.items()
        }
        return f"StoreSpec({_redact(self.path)!r}, {options!r}, fingerprint={self.fingerprint!r})"


# The stores this process has open, by path, options and version (see StoreSpec._open).
_OPEN: dict[Any, DocStore] = {}
_OPEN_LOCK = threading.Lock()


def _file_identity(path: str) -> tuple[int, ...] | None:
    """What tells one version of a local store from another without opening it: the file's
    device, inode, size and times; for a collection, the directory's and its manifest's (an
    append or a rebuild writes a new manifest). None where there is nothing (open says why)."""

    def stat(p: str) -> tuple[int, ...]:
        s = os.stat(p)
        return (s.st_dev, s.st_ino, s.st_size, s.st_mtime_ns, s.st_ctime_ns)

    try:
        if os.path.isdir(path):
            return stat(path)[:2] + stat(os.path.join(path, MANIFEST))
        return stat(path)
    except OSError:
        return None


def _redact(path: str) -> str:
    from ._docstore import _redact_urls

    return _redact_urls(path) if is_url(path) else path


@dataclass(frozen=True)
class Split:
    """One read task's part: positions ``start..stop`` of the whole store, all inside shard
    ``shard`` (named ``shard_name``: its path, or the store's for a single file)."""

    index: int
    shard: int
    shard_name: str
    start: int
    stop: int

    @property
    def count(self) -> int:
        return self.stop - self.start

    def label(self) -> str:
        return f"shard {self.shard} ({self.shard_name}), positions {self.start}..{self.stop}"


def shards_of(store: DocStore) -> list[tuple[str, int, int]]:
    """``(name, start, stop)`` of each shard in position order (one for a single file)."""
    info = store.info()
    shards = info.get("shards") or [{"path": info["path"], "count": info["count"]}]
    bounds, start = [], 0
    for shard in shards:
        bounds.append((_redact(os.fspath(shard["path"])), start, start + shard["count"]))
        start += shard["count"]
    return bounds


def check_parallelism(parallelism: Any, name: str = "parallelism") -> int | None:
    """None (the engine decides) or a whole number >= 1; anything else is refused here, on the
    driver, before the job starts."""
    if parallelism is None:
        return None
    if isinstance(parallelism, bool) or not isinstance(parallelism, (int, np.integer)) or parallelism < 1:
        raise InvalidArgumentError(
            f"{name} must be a whole number >= 1 (or None: the engine decides), got {parallelism!r}"
        )
    return int(parallelism)


def check_block_rows(block_rows: Any) -> int:
    if isinstance(block_rows, bool) or not isinstance(block_rows, (int, np.integer)) or block_rows < 1:
        raise InvalidArgumentError(f"block_rows must be a whole number >= 1, got {block_rows!r}")
    return int(block_rows)


def check_columns(store: DocStore, columns: Sequence[str] | str | None) -> list[str]:
    """The fields to read for ``columns`` (None: all; ``doc_id`` is always read, and may be
    named); an unknown or repeated column is refused naming the store's fields."""
    return _check_columns(store.fields, columns, StoreSpec.of(os.fspath(store.path)).label())


def plan(bounds: Sequence[tuple[str, int, int]], parallelism: int) -> list[Split]:
    """Splits of about ``total / parallelism`` documents each, never across a shard: a shard of
    ``n`` documents gives ``ceil(n * parallelism / total)`` equal ranges (at most ``n``), an
    empty one none. So there are at least ``parallelism`` splits when there are that many
    documents (every worker is busy), and at most ``parallelism`` plus the number of shards."""
    total = sum(stop - start for _, start, stop in bounds)
    splits: list[Split] = []
    for shard, (name, start, stop) in enumerate(bounds):
        n = stop - start
        if not n:
            continue
        pieces = min(n, -(-n * max(1, parallelism) // total))
        cuts = [start + (n * i) // pieces for i in range(pieces + 1)]
        for a, b in zip(cuts, cuts[1:]):
            splits.append(Split(len(splits), shard, name, a, b))
    return splits


def read_split(
    spec: StoreSpec, split: Split, columns: Sequence[str], block_rows: int, on_corrupt: str = "raise"
) -> Iterator[Any]:
    """The documents of ``split`` in position order, ``block_rows`` at a time, as Arrow
    RecordBatches; an error names the store, the shard and the range, and keeps its class.
    ``on_corrupt="skip"`` leaves damaged documents out of their batch (``_damage``)."""
    with named(spec, split):
        store = spec.open()
        fields = store.fields
        for start in range(split.start, split.stop, block_rows):
            positions = np.arange(start, min(start + block_rows, split.stop), dtype=np.int64)
            with named(spec, split):
                batch, damaged = read_skipping(
                    lambda p: take_batch(store, p, fields, columns), positions, on_corrupt
                )
            if len(damaged):
                _skipped(spec, len(damaged), described(damaged.tolist(), "position(s)"))
            yield batch


# The stores this process has warned of damaged documents, and how many it skipped in each.
_WARNED: set[str] = set()
SKIPPED: dict[str, int] = {}


def _skipped(spec: StoreSpec, count: int, what: str) -> None:
    """Counts and names the damaged documents a task left out: one warning per worker process
    and store (also logged, for engines that keep their workers' logs, not their warnings)."""
    import logging

    where = spec.label()
    SKIPPED[where] = SKIPPED.get(where, 0) + count
    if where not in _WARNED:
        logging.getLogger("docstore").warning("%s: left out %s (on_corrupt='skip')", where, what)
    warn_once(_WARNED, where, what)


class named:
    """Adds the store and the split to a docstore error's message, keeping its class (and its
    attributes), so that the driver's error says where the task failed."""

    def __init__(self, spec: StoreSpec, split: Split | None = None) -> None:
        self.spec = spec
        self.where = spec.label() + (f", {split.label()}" if split is not None else "")

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, error: BaseException | None, tb: Any) -> None:
        if isinstance(error, StoreChangedError):
            self.spec.forget()  # a remote store replaced under its reader: the next job reopens it
        if isinstance(error, DocstoreError) and self.where not in str(error):
            renamed = copy.copy(error)
            renamed.args = (f"{self.where}: {error}",)
            raise renamed from error


@dataclass(frozen=True)
class EngineReader:
    """A read job as its driver planned it, for the tasks: the store (pinned to the version
    planned), its fields, the columns to read, the documents per batch, what a damaged
    document does, and the shards the splits are cut from. What ``docstore.ray`` and
    ``docstore.spark`` read through: made on the driver by ``plan`` (every option checked
    there, before the job), pickled to the tasks, each of which ``read``s its split."""

    spec: StoreSpec
    fields: dict[str, str]
    columns: list[str]
    block_rows: int
    on_corrupt: str
    shards: list[tuple[str, int, int]]

    @staticmethod
    def plan(
        spec: StoreSpec,
        columns: Sequence[str] | str | None,
        block_rows: Any = DEFAULT_BLOCK_ROWS,
        on_corrupt: str = "raise",
    ) -> tuple[EngineReader, DocStore]:
        """On the driver: the reader of the store ``spec`` names as it is now (``columns``:
        None for every field), and that store, open."""
        spec, store = spec.plan()
        reader = EngineReader(
            spec,
            dict(store.fields),
            check_columns(store, columns),
            check_block_rows(block_rows),
            check_on_corrupt(on_corrupt),
            shards_of(store),
        )
        return reader, store

    @property
    def count(self) -> int:
        return sum(stop - start for _, start, stop in self.shards)

    def splits(self, parallelism: int) -> list[Split]:
        """The tasks' parts: about ``count / parallelism`` documents each (``plan``)."""
        return plan(self.shards, max(1, parallelism))

    def read(self, split: Split) -> Iterator[Any]:
        """In a task: ``split``'s documents as Arrow record batches (``read_split``)."""
        return read_split(self.spec, split, self.columns, self.block_rows, self.on_corrupt)


@dataclass(frozen=True)
class EngineLookup:
    """A lookup join as its driver planned it: the store (pinned), the id column of the input,
    the store columns to add, what a missing id does, the ids looked up at once, and what a
    damaged document does. Made by ``plan`` (every option checked before the job), pickled to
    the tasks, each of which ``open``s the store once and adds the columns to its batches."""

    spec: StoreSpec
    fields: dict[str, str]
    id_column: str
    columns: list[str]
    missing: str
    batch_ids: int
    on_corrupt: str

    @staticmethod
    def plan(
        spec: StoreSpec,
        input_names: Sequence[str],
        id_column: str,
        columns: Sequence[str] | str | None,
        missing: str,
        batch_ids: Any = DEFAULT_LOOKUP_BATCH,
        on_corrupt: str = "raise",
    ) -> EngineLookup:
        check_missing(missing)
        check_on_corrupt(on_corrupt)
        spec, store = spec.plan()
        names = check_columns(store, columns)
        check_lookup_names(input_names, id_column, names)
        batch_ids = check_block_rows(batch_ids)
        return EngineLookup(spec, dict(store.fields), id_column, names, missing, batch_ids, on_corrupt)

    def open(self) -> DocStore:
        """In a task: the store planned, opened once per process (``StoreSpec.open``)."""
        with named(self.spec):
            return self.spec.open()

    def table(self, store: DocStore, table: Any) -> Any:
        """``table`` with the columns added (``lookup_table``), from ``store`` (``open``'s)."""
        with named(self.spec):
            return lookup_table(
                store,
                table,
                self.id_column,
                self.columns,
                self.missing,
                self.spec,
                self.batch_ids,
                self.on_corrupt,
            )


def check_missing(missing: str) -> str:
    if missing not in MISSING:
        raise InvalidArgumentError(f"missing must be one of {', '.join(MISSING)}, got {missing!r}")
    return missing


def check_lookup_names(input_names: Sequence[str], id_column: str, columns: Sequence[str]) -> None:
    """The id column is there, and no store column would overwrite an input column."""
    if id_column not in input_names:
        raise SchemaError(f"the data has no id column {id_column!r} (columns: {list(input_names)})")
    clash = [c for c in columns if c in input_names]
    if clash:
        raise SchemaError(
            f"the data already has column(s) {clash}, which the lookup would add from the store; "
            "rename them, or pass columns=[...] without them"
        )


def lookup_table(
    store: DocStore,
    table: Any,
    id_column: str,
    columns: Sequence[str],
    missing: str,
    spec: StoreSpec,
    batch_ids: int = DEFAULT_LOOKUP_BATCH,
    on_corrupt: str = "raise",
) -> Any:
    """``table`` (a pyarrow Table or RecordBatch) with the store's ``columns`` of the document
    each row's ``id_column`` names appended, in row order: missing ids raise ``KeyError``
    (``missing="error"``), get nulls (``"null"``) or lose their row (``"drop"``). The ids are
    found with ``positions`` (batches of ``batch_ids``) and the documents read as Arrow. With
    ``on_corrupt="skip"`` a damaged document reads as missing (``missing`` says what follows)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    fields = store.fields
    ids = table.column(id_column)
    if isinstance(ids, pa.ChunkedArray):
        ids = ids.combine_chunks()
    if pa.types.is_dictionary(ids.type):  # as the writers take them: the values they stand for
        ids = ids.dictionary_decode()
    if pa.types.is_integer(ids.type):
        ids = ids.cast(pa.string())  # the id 7 is "7", as every writer stores it
    if not (pa.types.is_string(ids.type) or pa.types.is_large_string(ids.type)):
        if pa.types.is_null(ids.type) or len(ids) == 0:
            ids = pa.array([None] * len(ids), pa.string())
        else:
            raise SchemaError(
                f"id column {id_column!r} has Arrow type {ids.type}; doc ids are strings: cast it"
            )
    values = ids.to_pylist()  # one str per id (positions() takes strs); never one per document
    parts, damaged_ids = [np.zeros(0, np.int64)], []
    for i in range(0, len(values), batch_ids):
        batch = ["" if v is None else v for v in values[i : i + batch_ids]]
        found_here, damaged_here = positions_skipping(store, batch, on_corrupt)
        parts.append(found_here)
        damaged_ids += damaged_here
    positions = np.concatenate(parts)
    if ids.null_count:
        positions[np.asarray(ids.is_null())] = -1
    # The documents of the rows found, in row order (a damaged one left out, its row missing).
    docs, damaged = read_skipping(
        lambda p: take_batch(store, p, fields, columns), positions[positions >= 0], on_corrupt
    )
    if len(damaged):
        _skipped(spec, len(damaged), described(damaged.tolist(), "position(s)"))
        positions[np.isin(positions, damaged)] = -1
    if damaged_ids:
        _skipped(spec, len(damaged_ids), described(damaged_ids, "id(s)"))
    found = positions >= 0
    if missing == "error" and not found.all():
        absent = [values[i] for i in np.flatnonzero(~found)[:5]]
        skipped = len(damaged) + len(damaged_ids)
        also = f" ({skipped} of them damaged, skipped)" if skipped else ""
        raise KeyError(
            f"{spec.label()}: {int((~found).sum())} id(s) of column {id_column!r} not in the store{also}, "
            f"first {absent}; pass missing='null' or missing='drop' to keep going"
        )
    if missing == "drop" and not found.all():
        keep = np.flatnonzero(found)
        table = table.take(pa.array(keep))
        found = found[keep]
    if found.all():
        added = [docs.column(i + 1) for i in range(len(columns))]
    else:  # rows without a document: nulls, through a take with null indices
        index = np.full(len(found), 0, np.int64)
        index[found] = np.arange(int(found.sum()))
        take = pa.array(index, mask=~found)
        added = [pc.take(docs.column(i + 1), take) for i in range(len(columns))]
    for name, column in zip(columns, added):
        table = table.append_column(pa.field(name, column.type), column)
    return table
