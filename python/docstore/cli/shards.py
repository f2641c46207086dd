"""The ``--shards`` engine of ``docstore build``: the input cut into pieces of about equal bytes,
built into shards by one worker process per core at most, against one dictionary trained once,
then sealed in order into a collection (``build_in_shards``). The workers stop early when an
earlier group fails, die with the build, and report the bytes they have read for its bar.

Beside it, the other engines that build a collection in parallel: ``docstore/_engines.py`` (the
shared writer side of Ray Data and Spark) and ``docstore/ray.py``, ``docstore/spark.py``.
"""

from __future__ import annotations

import csv
import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, Literal, Optional

from .. import Writer, _progress, seal, set_num_threads
from .._collection import seal_without_repeats
from .._docstore import Staging, train_dictionary
from ..errors import DocstoreError, InvalidKeyError, SchemaError
from .inputs import GZIP_ERRORS, UsageError, coerce_record, is_gzip, read_records, unreadable, where

Piece = tuple[str, str, Optional[tuple[int, int]]]  # path, format, byte range (None: all of it)


def shard_plan(inputs: list[str], formats: list[str], n: int) -> list[list[Piece]]:
    """The inputs cut into ``n`` runs of about equal bytes, in input order: uncompressed JSON
    lines split between lines (a piece holds the lines that start in its byte range), any other
    file whole, in the run where it starts. Runs can be empty (fewer files than shards)."""
    sizes = [os.path.getsize(p) for p in inputs]
    total = max(sum(sizes), 1)

    def run_end(k: int) -> int:  # the byte where run k ends, rounded up
        return -(-(k + 1) * total // n)

    def run_of(at: int) -> int:  # the run holding byte `at`
        return min(n - 1, at * n // total)

    plan: list[list[Piece]] = [[] for _ in range(n)]
    offset = 0  # where each input begins
    for path, fmt, size in zip(inputs, formats, sizes):
        if fmt == "jsonl" and not is_gzip(path):
            at = offset
            while at < offset + size:
                k = run_of(at)
                end = min(offset + size, max(run_end(k), at + 1))
                plan[k].append((path, fmt, (at - offset, end - offset)))
                at = end
        else:
            plan[run_of(offset)].append((path, fmt, None))
        offset += size
    return plan


def balanced_groups(n: int, workers: int) -> list[range]:
    """Runs ``0 .. n-1`` in ``workers`` consecutive groups whose sizes differ by one at most."""
    groups, at = [], 0
    for w in range(min(n, workers)):
        size = n // workers + (w < n % workers)
        groups.append(range(at, at + size))
        at += size
    return groups


def build_in_shards(
    output: str,
    inputs: list[str],
    formats: list[str],
    n: int,
    shard_args: tuple[Any, ...],
    overwrite: bool,
    progress: bool,
) -> int:
    """Builds the input into ``n`` shards in worker processes (one per core at most), then seals
    them in order into the collection ``output``; returns the number of repeats dropped (by
    ``--on-duplicate first`` or ``last``). A failure leaves nothing (the shards are scratch
    files)."""
    import concurrent.futures
    import multiprocessing

    # A scratch directory of the output, locked (by this process and the workers it forks) until
    # the build ends: one whose lock can be taken was left by a killed build, and the next writer
    # of the output removes it.
    locked = Staging(os.path.abspath(output))
    staging = locked.path
    try:
        # One dictionary for every shard, trained once, on the input's first 4 MiB of text (about
        # a single-file build's first batch, which it trains on): shards compress alike, and
        # readers keep one copy of it. The first shard's worker reads those records again (a few
        # hundredths of a second), so that every shard holds about equal bytes.
        fields, id_field, columns, keep, level, coerce, on_duplicate = shard_args
        first = (inputs[0], formats[0], None)
        head = read_pieces([first], columns, keep, coerce, id_field, limit_bytes=4 << 20)
        dictionary = _shared_dictionary([record for record, _ in head], fields, level)
        dropped = 0
        # N shards of about equal bytes, built by one worker process per core at most: each
        # builds a consecutive group of shards in turn, compressing on its share of the cores.
        # More processes than cores only contend for them (8 workers on 2 cores cost 1.2x the
        # single build's CPU, measured); N not a multiple of the cores leaves some workers a
        # shard more to build than others.
        cores = len(os.sched_getaffinity(0))
        workers = max(1, min(n, cores))
        threads = max(1, cores // workers)
        plan = shard_plan(inputs, formats, n)
        paths = [os.path.join(staging, f"part-{k:05d}.docstore") for k in range(len(plan))]
        groups = balanced_groups(len(plan), workers)
        # fork: the workers need nothing but their arguments, and spawn or forkserver would first
        # run the main module again (which a script read from stdin does not have); docstore is
        # fork-safe, and the writers are created in the children
        context = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
        # The first group that failed (len(groups): none yet), lowered by a failing worker: the
        # workers of later groups stop at their next look rather than build shards to throw
        # away; earlier ones go on, so that the failure reported is the first in shard order.
        # A shared word, not an Event: a worker killed while holding an Event's lock would
        # leave everyone else waiting on it.
        failed = context.RawValue("q", len(groups))
        done = context.RawArray("q", max(1, len(groups)))  # bytes of input each worker has read
        sizes = sum(os.path.getsize(p) for p in inputs)
        with (
            concurrent.futures.ProcessPoolExecutor(
                max(1, len(groups)),
                mp_context=context,
                initializer=_watch,
                initargs=(failed, os.getpid(), done),
            ) as pool,
            _progress.bar(sizes, "B", None if progress else False, desc="build") as shown,
        ):
            jobs = [
                pool.submit(
                    build_shards, g, [(paths[k], plan[k]) for k in group], *shard_args, dictionary, threads
                )
                for g, group in enumerate(groups)
            ]
            waiting = set(jobs)
            while True:
                shown.update(min(sizes, sum(done)) - shown.n)
                if not waiting:
                    break
                _, waiting = concurrent.futures.wait(waiting, timeout=0.2)
            failures = [job.exception() for job in jobs]
        for failure in failures:
            if failure is not None and not isinstance(failure, _Stopped):
                raise failure
        dropped += sum(job.result() for job in jobs)
        if on_duplicate == "error":
            seal(output, paths, overwrite=overwrite)
        else:  # ids that several shards hold meet here
            dropped += seal_without_repeats(output, paths, on_duplicate, overwrite=overwrite, append=False)
        return dropped
    finally:
        locked.release()


def _piece_bytes(piece: Piece) -> int:
    """The bytes of input a piece of a ``--shards`` build reads."""
    path, _, byte_range = piece
    return os.path.getsize(path) if byte_range is None else byte_range[1] - byte_range[0]


class _Stopped(Exception):
    """A worker of a ``--shards`` build stopped because an earlier group failed."""


# In a worker of a ``--shards`` build: the first group that failed, this worker's group, the
# bytes of input the workers have read (shared), and the repeats this worker's shards dropped.
_FAILED: Any = None
_GROUP = 0
_DONE: Any = None
_DROPPED = 0

# Records between two looks at _FAILED.
_LOOK_EVERY = 1024


def _watch(failed: Any, parent: int, done: Any = None) -> None:
    """Initialises a worker of a ``--shards`` build (see `build_in_shards`); ``parent`` is the
    build's pid. The worker dies with the build: a build killed (``kill -9``) would otherwise
    leave its workers blocked forever, holding the staging directory's lock (inherited), so that
    no later build could sweep it."""
    global _FAILED, _DONE
    _FAILED, _DONE = failed, done
    _die_with(parent)


def _die_with(parent: int) -> None:
    """Kills this process when ``parent`` dies: ``PR_SET_PDEATHSIG`` on Linux (the build's main
    thread forks the workers, and the signal comes when that thread ends, with the process),
    elsewhere a thread that watches the parent pid."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        pr_set_pdeathsig = 1
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0) == 0:
            # The parent may have died before the call: then no signal comes.
            if os.getppid() != parent:
                os.kill(os.getpid(), signal.SIGKILL)
            return
    import threading

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="docstore-watch-parent", daemon=True).start()


def _look() -> None:
    """Raises `_Stopped` in a worker whose group comes after one that failed."""
    if _FAILED is not None and _FAILED.value < _GROUP:
        raise _Stopped


def build_shards(group: int, shards: list[tuple[str, list[Piece]]], *args: Any) -> int:
    """Shards built in turn by one worker process, for group ``group``: ``build_shard(path,
    pieces, *args)`` each, where the last of ``args`` is the number of threads. A failure lowers
    the shared first failed group to ``group`` (a race between two failing workers may leave
    the later one's: then fewer workers stop, which costs time, not the report). Returns the
    number of repeated ids its shards dropped (``on_duplicate`` "first" or "last")."""
    global _GROUP, _DROPPED
    # A worker process may run several groups (the pool hands a free worker the next group):
    # each returns its own shards' repeats only.
    _GROUP, _DROPPED = group, 0
    *rest, threads = args
    try:
        for path, pieces in shards:
            _look()
            build_shard(path, pieces, *rest, threads=threads)  # type: ignore[misc]  # rest stops before it
        return _DROPPED
    except _Stopped:
        raise
    except BaseException:
        if _FAILED is not None and group < _FAILED.value:
            _FAILED.value = group
        raise


def build_shard(
    path: str,
    pieces: list[Piece],
    fields: dict[str, str],
    id_field: str,
    columns: list[str] | None,
    keep: list[str] | None,
    level: int | None,
    coerce: dict[str, dict[str, str]],
    on_duplicate: Literal["error", "first", "last"] = "error",
    dictionary: bytes | None = None,
    threads: int | None = None,
) -> int:
    """One shard of a ``--shards`` build (runs in a worker process): the records of ``pieces``;
    returns their count (repeats dropped by ``on_duplicate`` are added to ``_DROPPED``)."""
    global _DROPPED
    if threads is not None:
        set_num_threads(threads)
    with Writer(path, fields, level=level, dictionary=dictionary, on_duplicate=on_duplicate) as writer:
        count = add_all(writer, read_pieces(pieces, columns, keep, coerce, id_field), id_field)
    _DROPPED += writer.duplicates
    return count


# Where a record is: its input, format, position, and whether it was read from a byte range.
Place = tuple[str, str, int, bool]


def read_pieces(
    pieces: list[Piece],
    columns: list[str] | None,
    keep: list[str] | None,
    coerce: dict[str, dict[str, str]],
    id_field: str,
    *,
    limit_bytes: int | None = None,
) -> Iterator[tuple[dict[str, Any], Place]]:
    """The records of ``pieces`` (coerced to their fields' types) and where each is; an unreadable
    input or a bad value raises ``UsageError`` naming the place. With ``limit_bytes``, only the
    first records of about that many bytes of text."""
    seen = 0  # bytes of the text and bytes values read, for limit_bytes
    for source, fmt, byte_range in pieces:
        position = 0
        reported = 0  # bytes of this piece added to _DONE
        try:
            for n, (position, record) in enumerate(read_records(source, fmt, columns, keep, byte_range)):
                if _DONE is not None and byte_range is not None and n % _LOOK_EVERY == 0:
                    now = position - byte_range[0]
                    _DONE[_GROUP] += now - reported  # one word per worker: no race
                    reported = now
                if limit_bytes is not None and seen >= limit_bytes:
                    return
                place = (source, fmt, position, byte_range is not None)
                if coerce[fmt]:
                    try:
                        coerce_record(record, coerce[fmt], id_field)
                    except (SchemaError, InvalidKeyError) as exc:
                        raise UsageError(f"{where(*place)}: {exc}") from None
                yield record, place
                if limit_bytes is not None:
                    seen += sum(len(v) for v in record.values() if isinstance(v, (str, bytes)))
        except (*GZIP_ERRORS, csv.Error, UnicodeDecodeError) as exc:
            raise UsageError(unreadable(source, fmt, position, exc)) from None
        if _DONE is not None:
            _DONE[_GROUP] += _piece_bytes((source, fmt, byte_range)) - reported


def add_all(writer: Writer, records: Iterable[tuple[dict[str, Any], Place]], id_field: str) -> int:
    """Adds ``records`` (from ``read_pieces``) to ``writer``, a bad one raising ``UsageError``
    naming its place; returns their count. Looks at ``_FAILED`` now and then (``_look``)."""
    count = 0
    for record, place in records:
        try:
            writer.add_record(record, id_field)
        except (SchemaError, InvalidKeyError) as exc:
            raise UsageError(f"{where(*place)}: {exc}") from None
        count += 1
        if count % _LOOK_EVERY == 0:
            _look()
    return count


def _shared_dictionary(
    records: list[dict[str, Any]], fields: dict[str, str], level: int | None
) -> bytes | None:
    """The dictionary that the shards share, trained on ``records``; None where there is none to
    train (no compression, no records) or a record holds a value the build will refuse: then
    the shard that holds it names it, and every shard trains its own."""
    if level == -1:
        return None
    try:
        rows = ([record.get(name) for name in fields] for record in records)
        return train_dictionary(rows, fields=fields) or None
    except DocstoreError:
        return None
