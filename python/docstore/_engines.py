"""What ``docstore.ray`` and ``docstore.spark`` share: the staging directory beside the target,
one shard per task attempt, and the commit that seals exactly the shards the engine reports.

A write job goes like this (docs/engines.md):

1. the driver checks the target and the writer options, then makes a staging directory beside
   the target, on the same file system (so sealing hard-links): a scratch directory of the
   target, named and locked as every docstore writer's (``_docstore.Staging``, docs/format.md
   §11), held for the job's life; on the way the core removes those that killed drivers left;
2. every task attempt writes its documents into one uniquely named shard there (a single-file
   store, through ``docstore.Writer``) and reports its path; a failed attempt reports nothing;
3. the driver seals the shards reported by the successful attempts, in task order, into the
   target, then removes the staging directory with every other attempt's files in it; if the job
   fails, it only removes the staging directory. Nothing appears at the target in any other way.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from . import _docstore, errors
from ._arrow import prepare, schema_fields
from ._docstore import Staging
from ._store import DocStore
from ._store import open as open_store
from ._writer import Writer, check_on_duplicate, encoded
from .errors import DocstoreError, InvalidArgumentError, SchemaError, StoreExistsError, StoreNotFoundError

# What a job does when something is at the target already: refuse, replace it, add to it.
MODES = ("errorifexists", "overwrite", "append")

# The Writer's options an engine job passes through (all integers).
# `dictionary` (bytes, e.g. from docstore.train_dictionary on the driver): every shard compresses
# with it, and readers of the collection keep one copy (docs/collections.md).
WRITER_OPTIONS = (
    "level",
    "dict_size",
    "batch_bytes",
    "key_buffer_bytes",
    "format_version",
    "dictionary",
    "metadata",
)
# What a repeated id does (`Writer(on_duplicate=...)`, then `seal(on_duplicate=...)` across shards).
POLICY_OPTION = "on_duplicate"


def check_mode(mode: str) -> str:
    mode = {"error": "errorifexists", "default": "errorifexists"}.get(mode.lower(), mode.lower())
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    return mode


def check_writer_options(options: Mapping[str, Any]) -> dict[str, Any]:
    unknown = [k for k in options if k not in WRITER_OPTIONS]
    if unknown:
        raise TypeError(f"unknown writer option(s) {unknown}; docstore.Writer takes {list(WRITER_OPTIONS)}")
    return dict(options)


def check_target(target: str, mode: str) -> None:
    """Fails early (before any task runs) where the commit would fail at the end."""
    if mode == "errorifexists" and os.path.lexists(target):
        raise StoreExistsError(
            f"{target} already exists; write with overwrite=True / mode 'overwrite' to replace it, "
            "or mode 'append' to add to it"
        )
    parent = os.path.dirname(target)
    if not os.path.isdir(parent):
        raise StoreNotFoundError(f"directory {parent} does not exist")
    if mode != "errorifexists":  # what the commit would replace must be a store or collection
        _docstore.check_replaceable(target)


def appended_fields(target: str, mode: str) -> dict[str, str] | None:
    """The fields, in their order, of the collection an append adds to (None for another mode
    or nothing there): a job's fields are put in that order when they are the same by name and
    type (``in_order_of``), so that data whose columns come in another order appends."""
    if mode != "append" or not os.path.lexists(target):
        return None
    with open_store(target) as existing:
        return dict(existing.fields)


def in_order_of(fields: Mapping[str, str], order: Mapping[str, str] | None) -> dict[str, str]:
    """``fields`` in the order of ``order`` when both have the same names with the same types;
    else as they are (the seal then refuses fields that differ, naming them)."""
    if order is not None and set(fields) == set(order) and all(fields[n] == order[n] for n in order):
        return {name: fields[name] for name in order}
    return dict(fields)


def make_staging(target: str, fields: Mapping[str, str] | None, options: Mapping[str, Any]) -> Staging:
    """Checks that a writer accepts ``fields`` (when known) and ``options``, so that a bad option
    fails the job on the driver, not in every task; then creates the job's staging directory
    beside ``target``, locked by this process until its ``remove()`` (the driver's, for the
    job's life), after removing those of killed jobs of the same target."""
    check_writer(fields, options)
    return Staging(target)


def make_unlocked_staging(target: str) -> str:
    """A staging directory that no process can hold a lock on for the job's life (the planner of
    a bare Spark ``df.write.format("docstore")`` job is a short-lived worker): its lock file says
    so, and no sweep removes it; a killed job's stays until removed by hand."""
    return Staging.unheld(target)


def check_staging(target: str, staging: str) -> None:
    """``staging`` (given to a Spark job by its driver) is a staging directory of ``target``:
    ``InvalidArgumentError`` if not, ``StoreNotFoundError`` if it is gone."""
    Staging.attach(target, staging)  # left as it is: an attached directory goes by release()


def writer_kwargs(mode: str, options: Mapping[str, Any], on_duplicate: str) -> dict[str, Any]:
    """The keyword arguments of every shard's ``Writer``: the ``options`` a job was given (names
    in ``WRITER_OPTIONS``) and ``on_duplicate`` when it is not the default; refused on the
    driver, before the job, where a ``Writer`` or the commit would refuse them."""
    kwargs = check_writer_options(options)
    if on_duplicate != "error":
        kwargs[POLICY_OPTION] = on_duplicate
    check_policy(mode, kwargs)
    return kwargs


def check_writer(fields: Mapping[str, str] | None, options: Mapping[str, Any]) -> None:
    """Raises what ``Writer(path, fields, **options)`` would raise for them, creating nothing."""
    options = dict(options)
    check_on_duplicate(options.pop("on_duplicate", "error"))
    _docstore.check_writer(dict(fields or {"text": "str"}), **encoded(options))


def check_policy(mode: str, options: Mapping[str, Any]) -> None:
    """Refuses, before the job, an ``on_duplicate`` that the commit would refuse."""
    check_writer(None, options)
    if mode == "append" and options.get("on_duplicate") == "last":
        raise InvalidArgumentError(
            "on_duplicate='last' cannot be used to append: it would drop documents of the shards "
            "sealed before; use 'first' (new repeats are dropped) or write everything again"
        )


def remove_staging(target: str, staging: Staging | str | None) -> None:
    """Removes a staging directory of ``target`` (and lets its lock go, where it is this
    process's): one this process holds, or one made elsewhere, given by its path."""
    if isinstance(staging, Staging):
        staging.release()
    elif staging:
        with contextlib.suppress(StoreNotFoundError):  # removed already
            Staging.attach(target, staging).release()


# Rows of the data that the engines' write() trains the shards' one dictionary on before the
# job: about what `docstore build --shards` trains on (its first 4 MiB of text).
DICTIONARY_SAMPLE_ROWS = 10_000


def shared_dictionary(
    target: str,
    mode: str,
    sample: Callable[[], Any],
    id_field: str,
    fields: Mapping[str, str] | None,
    options: Mapping[str, Any],
) -> bytes | None:
    """The dictionary every task writes its shard with, unless ``options`` gives one: a
    collection's readers then keep one copy of it, not one per shard (64 shards with their own
    read batches at 0.65x of one file's speed, with one at 1.0x: docs/collections.md). For an
    append, the existing collection's; else one trained on ``sample()``, an Arrow table of the
    data's first rows. None when the options turn compression off, there are no rows, the
    existing store has no dictionary, or the sample holds a value the job will refuse."""
    if "dictionary" in options or options.get("level") == -1:
        return None
    if mode == "append" and os.path.lexists(target):  # a collection, or a store file
        with open_store(target) as existing:
            return existing.dictionary or None
    table = sample()
    if table is None or not table.num_rows:
        return None
    if fields is None:
        fields = schema_fields(table.schema, id_field)
    # The dictionary learns from the values, as the writer encodes them; the sample's ids are
    # not needed, so that ids the job will refuse (repeated, null) are refused by it, naming the
    # tasks, not here.
    rows = zip(*(table.column(name).to_pylist() for name in fields))
    try:
        return _docstore.train_dictionary(rows, options.get("dict_size"), fields=dict(fields)) or None
    except DocstoreError:
        # A value the job will refuse: let the task that meets it say so, naming its real id,
        # rather than a row number here; its shards then train their own dictionaries.
        return None


def write_shard(
    staging: str,
    name: str,
    batches: Iterable[Any],
    id_field: str,
    fields: Mapping[str, str] | None,
    options: Mapping[str, Any],
    where: str | None = None,
    order: Mapping[str, str] | None = None,
) -> tuple[str | None, int, dict[str, str] | None]:
    """Writes the Arrow ``batches`` (Tables or RecordBatches) of one task attempt into the shard
    ``staging/name``; returns its path (None when the batches held no rows: no shard), its count
    and the fields (inferred from the first batch with a schema when not given).

    The staging directory is never created here: an attempt that outlives its job (a straggler
    after the commit or abort removed the directory) fails instead of leaving files behind, and
    a worker that does not share the driver's file system says so. A repeated id is named with
    ``where`` the shard's rows come from ("write task 3", "partition 3"). Fields inferred from
    the batches are put in the order of ``order`` (an append's collection) when they match it."""
    if not os.path.isdir(staging):
        raise StoreNotFoundError(
            f"staging directory {staging} does not exist: the target must be on a file system that "
            "the driver and every worker share (or the job has already ended)"
        )
    path = os.path.join(staging, name)
    writer = None
    try:
        for batch in batches:
            if fields is None and batch.num_columns:
                fields = in_order_of(schema_fields(batch.schema, id_field), order)
            if not batch.num_rows:
                continue
            assert fields is not None
            if writer is None:
                writer = Writer(path, dict(fields), **options)
            writer.add_many(prepare(batch, id_field, fields), id_field=id_field)
        if writer is None:
            return None, 0, dict(fields) if fields is not None else None
        count = writer.finish()["count"]
        return path, count, dict(fields) if fields is not None else None
    except BaseException as error:
        if writer is not None and not writer.closed:
            writer.abort()
        if where is not None and isinstance(error, errors.DuplicateKeyError):
            within = f" (positions within {where})" if error.positions else ""
            error.args = (f"{where}: {error}{within}",)
        raise


def seal_shards(
    target: str,
    shards: Mapping[str, str],
    mode: str,
    staging: str,
    fields: Mapping[str, str] | None,
    options: Mapping[str, Any],
) -> DocStore:
    """Seals ``shards`` (paths, in this order, to what the user knows them as: "partition 3")
    at ``target`` by ``mode``: ``append`` puts the shards of what is at the target first. A job
    that wrote no shard seals one empty shard, so that the collection exists (and is empty).
    An error naming a shard names it as the user knows it, not by its staging path, which is
    gone once the job has ended."""
    try:
        return _seal(target, list(shards), mode, staging, fields, options)
    except DocstoreError as error:
        message = str(error)
        for path, label in shards.items():
            message = message.replace(path, label)
        if message == str(error):
            raise
        renamed = copy.copy(error)  # keeps the class and its attributes (doc_id)
        renamed.args = (message,)
        raise renamed from error


def _seal(
    target: str,
    shards: list[str],
    mode: str,
    staging: str,
    fields: Mapping[str, str] | None,
    options: Mapping[str, Any],
) -> DocStore:
    from ._collection import seal

    if not shards:
        if fields is None:
            raise SchemaError(
                "the data is empty and has no schema to take the fields from; pass fields={...} "
                "to write an empty collection"
            )
        empty = os.path.join(staging, "empty.docstore")
        Writer(empty, dict(fields), **options).finish()
        shards = [empty]
    # Ids that several shards hold meet here: each task's writer kept one within its shard.
    policy = options.get("on_duplicate", "error")
    if mode == "append":  # what is there is read under the lock that publishes the result
        return seal(target, shards, append=True, on_duplicate=policy, progress=None)
    return seal(target, shards, overwrite=mode == "overwrite", on_duplicate=policy, progress=None)


def report_error(report: str | None, error: BaseException) -> None:
    """Records a docstore error for the driver process that started the job, where the engine
    would hand back only its own wrapper of it (a Spark ``AnalysisException``)."""
    if not report or not isinstance(error, DocstoreError):
        return
    content: dict[str, str | None] = {"type": type(error).__name__, "message": str(error)}
    if isinstance(error, errors.DuplicateKeyError):
        content["doc_id"] = error.doc_id
    with contextlib.suppress(OSError), open(report, "x", encoding="utf-8") as file:
        json.dump(content, file)  # the first error recorded wins: the one that failed the job


def reported_error(report: str) -> DocstoreError | None:
    try:
        with open(report, encoding="utf-8") as file:
            content = json.load(file)
    except (OSError, ValueError):
        return None
    cls = getattr(errors, str(content.get("type")), None)
    if not (isinstance(cls, type) and issubclass(cls, DocstoreError)):
        return None
    if cls is errors.DuplicateKeyError:
        return cls(content["message"], content.get("doc_id"))
    return cls(content["message"])
