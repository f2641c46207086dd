"""The commands of the ``docstore`` command line, one function each (``cmd_NAME``)."""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import itertools
import json
import math
import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, Optional

import numpy as np

from .. import Writer, _progress, seal, set_num_threads, upgrade
from .. import open as open_store
from .._docstore import FORMAT_VERSION, _redact_urls, check_replaceable, train_dictionary
from .._staging import Staging
from .._store import is_url
from .._writer import INFER_RECORDS, infer_fields, seal_without_repeats
from ..errors import DocstoreError, DuplicateKeyError, InvalidKeyError, SchemaError
from .inputs import (
    GZIP_ERRORS,
    UsageError,
    bytes_read,
    coerce_record,
    detect_format,
    first_repeated,
    ids_as_text,
    is_gzip,
    needs_coercion_from_json,
    parquet_fields,
    parse_fields,
    read_records,
    unreadable,
    where,
)


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return str(n)


def cmd_build(args: argparse.Namespace) -> int:
    if args.from_ir_datasets is not None:
        return _build_from_ir_datasets(args)
    columns = args.columns.split(",") if args.columns else None
    fields = parse_fields(args.fields)
    formats = [args.format or detect_format(path) for path in args.inputs]
    _check_build_args(args, columns, formats)
    # --fields names the parquet columns to read: the way to leave out one docstore cannot hold
    keep = [args.id_field, *fields] if fields is not None else None
    if fields is None and formats[0] == "parquet":
        fields = parquet_fields(args.inputs[0], args.id_field)
    start = time.perf_counter()

    def records() -> Iterator[tuple[int, dict[str, Any], str, str]]:
        for path, fmt in zip(args.inputs, formats):
            position = 0  # the line the last record read starts on
            try:
                for position, record in read_records(path, fmt, columns, keep):
                    yield position, record, path, fmt
            except (*GZIP_ERRORS, csv.Error, UnicodeDecodeError) as exc:  # a broken file
                raise UsageError(unreadable(path, fmt, position, exc)) from None

    source = records()
    ahead = list(itertools.islice(source, 1 if fields is not None else INFER_RECORDS))
    iterator = itertools.chain(ahead[1:], source)  # the records after the first
    first = ahead[0] if ahead else None
    if first is None and fields is None:
        raise UsageError("the input holds no records (pass --fields to build an empty store)")
    sample = first[1] if first is not None else None
    if fields is None:
        assert sample is not None
        if args.id_field not in sample:
            raise UsageError(
                f"records have no id field {args.id_field!r} (fields: {list(sample)}); use --id-field"
            )
        try:
            fields = infer_fields([record for _, record, _, _ in ahead], args.id_field, _null_hint)
        except SchemaError as exc:
            if "is None in" in str(exc):
                raise UsageError(str(exc).replace("is None in", "is null in")) from None
            what = str(exc).split("; ")[0]
            raise UsageError(f"{what}; pass --fields, e.g. --fields text:str,n:int64") from None
    _check_no_doc_id_beside(args.id_field, fields, sample)
    # Text formats carry every value as a string; JSON carries bytes as base64 strings.
    coerce = {
        "tsv": {n: t for n, t in fields.items() if t != "str"},
        "csv": {n: t for n, t in fields.items() if t != "str"},
        "jsonl": {n: t for n, t in fields.items() if needs_coercion_from_json(t)},
        "parquet": {},
    }
    ids_as_text(coerce, args.id_field)
    if not args.overwrite and os.path.lexists(args.output):
        raise UsageError(f"{args.output} already exists (pass --overwrite to replace it)")
    check_replaceable(args.output)  # refused now, not once every shard is built
    try:
        if args.shards > 1:
            source.close()  # the first records told the fields; each shard reads its own piece
            shard_args = (fields, args.id_field, columns, keep, args.level, coerce, args.on_duplicate)
            dropped = _build_shards(
                args.output, args.inputs, formats, args.shards, shard_args, args.overwrite, not args.quiet
            )
            examples: list[str] = []
        else:
            dropped, examples = _build_one(args, fields, coerce, first, iterator, formats)
    except DuplicateKeyError as exc:
        raise _repeats_found(args, formats, columns, keep, exc) from None
    _report_build(args.output, start)
    if dropped:
        kept = "first" if args.on_duplicate == "first" else "last"
        shown = f": {', '.join(examples)}{' ...' if dropped > len(examples) else ''}" if examples else ""
        print(f"dropped {dropped:,} documents whose id came again (--on-duplicate {kept}){shown}")
    return 0


def _build_one(
    args: argparse.Namespace,
    fields: dict[str, str],
    coerce: dict,
    first: Any,
    iterator: Any,
    formats: list[str],
) -> tuple[int, list[str]]:
    """Builds the single store; returns the number of repeats dropped (by ``--on-duplicate
    first`` or ``last``) and where the first few were."""
    sizes = {path: os.path.getsize(path) for path in args.inputs if path != "-"}
    total = None if "-" in args.inputs else sum(sizes[p] for p in args.inputs)
    unit = "B" if total is not None else "docs"  # stdin: a count of documents
    count = 0
    examples: list[str] = []
    with (
        Writer(
            args.output, fields, overwrite=args.overwrite, level=args.level, on_duplicate=args.on_duplicate
        ) as writer,
        _progress.bar(total, unit, False if args.quiet else None, desc="build") as shown,
    ):
        add = writer.add_record
        reading, before = None, 0  # the input being read, and the bytes of those before it
        parquet_rows = 0
        for position, record, path, fmt in _chain(first, iterator):
            try:
                if coerce[fmt]:
                    coerce_record(record, coerce[fmt], args.id_field)
                repeats = writer.duplicates
                add(record, args.id_field)
            except (SchemaError, InvalidKeyError) as exc:  # a bad record: say where it is
                hint = _nullable_hint(fields, record, args.id_field)
                raise UsageError(f"{where(path, fmt, position)}: {exc}{hint}") from None
            except DuplicateKeyError as exc:
                exc.place = where(path, fmt, position)  # type: ignore[attr-defined]
                raise
            if writer.duplicates != repeats and len(examples) < 5:
                examples.append(f"{record.get(args.id_field)!r} at {where(path, fmt, position)}")
            count += 1
            if count % 8192 == 0 and total is None:  # stdin: no size to count against
                shown.update(8192)
            elif count % 8192 == 0:
                if path != reading:
                    before += sizes.get(reading, 0) if reading is not None else 0
                    reading = path
                    parquet_rows = _parquet_rows(path) if fmt == "parquet" else 0
                within = sizes[path] * position // parquet_rows if parquet_rows else bytes_read()
                shown.update(min(total, before + within) - shown.n)
        if total is not None:
            shown.update(total - shown.n)
    return writer.duplicates, examples


def _null_hint(name: str) -> str:
    return f"pass --fields naming it, nullable: e.g. --fields {name}:str?"


def _nullable_hint(fields: dict[str, str], record: dict[str, Any], id_field: str) -> str:
    """For a record holding a null where its field is not nullable: the --fields that takes it."""
    null = [n for n, t in fields.items() if n in record and record[n] is None and not t.endswith("?")]
    if not null:
        return ""
    spec = ",".join(f"{n}:{t}{'?' if n in null else ''}" for n, t in fields.items() if n != id_field)
    return f" (pass --fields {spec})"


def _parquet_rows(path: str) -> int:
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(path).metadata.num_rows) or 1


# Repeated ids a failed build names, with where they are.
REPEATS_SHOWN = 5


def _repeats_found(
    args: argparse.Namespace,
    formats: list[str],
    columns: list[str] | None,
    keep: list[str] | None,
    exc: DuplicateKeyError,
) -> UsageError:
    """The error for a build that met a repeated id (``--on-duplicate error``): the build stops
    at the first, says so at once, then reads the ids of the inputs again (nothing else) to
    count them all and say where the first few are, so that they can be fixed in one go."""
    hint = "pass --on-duplicate first or --on-duplicate last to keep one document of each"
    place = getattr(exc, "place", None)
    first = f"{place}: duplicate doc id {exc.doc_id!r}" if place else str(exc)
    if "-" in args.inputs:  # stdin cannot be read again
        return UsageError(f"{first}; {hint}")
    if sys.stderr.isatty():  # at once, as a progress bar would (a log gets the one line below)
        print(f"docstore build: {first}; reading the ids again to count the repeats", file=sys.stderr)
    seen: dict[Any, str] = {}
    count, shown = 0, []
    keep_ids = [args.id_field] if keep is not None or "parquet" in formats else None
    for path, fmt in zip(args.inputs, formats):
        try:
            for position, record in read_records(path, fmt, columns, keep_ids):
                doc_id = record.get(args.id_field)
                if not isinstance(doc_id, str):
                    continue
                if doc_id in seen:
                    count += 1
                    if len(shown) < REPEATS_SHOWN:
                        shown.append(f"{doc_id!r} at {where(path, fmt, position)} (first at {seen[doc_id]})")
                else:
                    seen[doc_id] = where(path, fmt, position)
        except (*GZIP_ERRORS, csv.Error, UnicodeDecodeError) as error:
            raise UsageError(unreadable(path, fmt, 0, error)) from None
    if not count:  # found by the build alone (a --shards seal that the ids read here do not repeat)
        return UsageError(f"{first}; {hint}")
    more = f", and {count - len(shown):,} more" if count > len(shown) else ""
    # One line, as every mistake the command reports.
    return UsageError(
        f"{count:,} duplicate doc id{'s' if count > 1 else ''} (a document with the id of an earlier "
        "one), so nothing was written: "
        f"{', '.join(shown)}{more}; {hint}"
    )


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


def _build_shards(
    output: str,
    inputs: list[str],
    formats: list[str],
    n: int,
    shard_args: tuple,
    overwrite: bool,
    progress: bool,
) -> int:
    """Builds the input into ``n`` shards in worker processes (one per core at most), then seals
    them in order into the collection ``output``; returns the number of repeats dropped (by
    ``--on-duplicate first`` or ``last``). A failure leaves nothing (the shards are scratch
    files)."""
    import concurrent.futures
    import multiprocessing

    # Locked (by this process and the workers it forks) until the build ends: a staging
    # directory whose lock can be taken was left by a killed build, and the next build removes it.
    locked = Staging(os.path.dirname(os.path.abspath(output)), _staging_prefix(output))
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
        locked.remove()


def _piece_bytes(piece: Piece) -> int:
    """The bytes of input a piece of a ``--shards`` build reads."""
    path, _, byte_range = piece
    return os.path.getsize(path) if byte_range is None else byte_range[1] - byte_range[0]


def _staging_prefix(output: str) -> str:
    """Names of the staging directories of a ``--shards`` build of ``output``: short whatever the
    output's name (a file name is at most 255 bytes), and the same for every build of it."""
    name = os.path.basename(os.path.abspath(output))
    return f".docstore-shards-{hashlib.sha1(os.fsencode(name)).hexdigest()[:12]}-"


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
    """Initialises a worker of a ``--shards`` build (see `_build_shards`); ``parent`` is the
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
    global _GROUP
    _GROUP = group
    *rest, threads = args
    try:
        for path, pieces in shards:
            _look()
            build_shard(path, pieces, *rest, threads=threads)
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
    on_duplicate: str = "error",
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


def _report_build(output: str, start: float) -> None:
    elapsed = time.perf_counter() - start
    info = open_store(output).info()
    ratio = f"{info['ratio']:.3f}x" if info["ratio"] else "-"
    shards = f" in {len(info['shards'])} shards" if "shards" in info else ""
    print(
        f"built {output}: {info['count']:,} docs{shards}, raw {_human(info['raw_bytes'])}, "
        f"stored {_human(info['stored_bytes'])} ({ratio} raw), {info['count'] / elapsed:,.0f} docs/s"
    )


def _build_from_ir_datasets(args: argparse.Namespace) -> int:
    try:
        from .. import ir_datasets as irds
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    if not args.overwrite and os.path.lexists(args.output):
        raise UsageError(f"{args.output} already exists (pass --overwrite to replace it)")
    json_fields = [f for f in (args.json_fields or "").split(",") if f]
    start = time.perf_counter()
    try:
        dataset = irds.ir_datasets.load(args.from_ir_datasets)
    except KeyError:
        raise UsageError(f"no ir_datasets dataset {args.from_ir_datasets!r}") from None
    irds.build(
        dataset,
        args.output,
        json_fields=json_fields,
        progress=False if args.quiet else None,
        overwrite=args.overwrite,
        level=args.level,
    )
    _report_build(args.output, start)
    return 0


def _check_build_args(args: argparse.Namespace, columns: list[str] | None, formats: list[str]) -> None:
    """Refusals that need no input read."""
    if args.inputs.count("-") > 1:
        raise UsageError("'-' (stdin) is given more than once; it can be read only once")
    if "-" in args.inputs and args.shards > 1:
        raise UsageError("--shards reads its inputs in several processes: give files, not '-' (stdin)")
    if "-" in args.inputs and args.format == "parquet":
        raise UsageError("parquet cannot be read from stdin ('-'): give its path")
    if columns is not None:
        named = [p for p, fmt in zip(args.inputs, formats) if fmt in ("jsonl", "parquet")]
        if named:  # their records name their own fields
            raise UsageError(f"--columns names the columns of header-less csv/tsv input, not of {named[0]}")
        repeated = first_repeated(columns)
        if repeated is not None:
            raise UsageError(f"--columns names {repeated!r} more than once")
    if os.path.exists(args.output):
        for path in args.inputs:
            if path != "-" and os.path.exists(path) and os.path.samefile(path, args.output):
                raise UsageError(f"{args.output} is also an input: the store would replace it")


def _check_no_doc_id_beside(id_field: str, fields: dict[str, str], sample: dict[str, Any] | None) -> None:
    """The store calls every key 'doc_id', so no field may have that name; say so in the user's
    terms rather than the Writer's, which speaks of a name they never chose."""
    if id_field != "doc_id" and ("doc_id" in fields or (sample is not None and "doc_id" in sample)):
        raise UsageError(
            f"the records have a 'doc_id' field beside the id field {id_field!r}; 'doc_id' is the name "
            "docstore gives the key, so rename or drop that field (or use it as the key: --id-field doc_id)"
        )


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    if first is not None:
        yield first
    yield from rest


def _finite(x: float) -> float | str:
    """JSON has no NaN or infinities: they go out as the strings Python's ``float()`` reads."""
    return x if math.isfinite(x) else str(x)


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray) and value.dtype.name == "bfloat16":
        value = value.astype(np.float32)  # exact: JSON numbers, not ml_dtypes scalars
    if isinstance(value, list):  # list[str], list[bytes]
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            return [_finite(x) for x in value.tolist()]
        return value.tolist()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, float):
        return _finite(value)
    return value


def _doc_json(doc: Any, id_field: str = "doc_id") -> str:
    record = {k: _jsonable(v) for k, v in doc._asdict().items()}
    if id_field != "doc_id":
        record = {id_field: record.pop("doc_id"), **record}
    return json.dumps(record, ensure_ascii=False, allow_nan=False)


def cmd_info(args: argparse.Namespace) -> int:
    info = open_store(args.store).info()
    if args.fields:  # the form `build --fields` takes
        print(",".join(f"{name}:{ty}" for name, ty in info["fields"].items()))
        return 0
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    shards = info.pop("shards", None)
    width = max(len(k) for k in info)
    for key, value in info.items():
        if key in ("raw_bytes", "stored_bytes"):
            value = f"{value:,} ({_human(value)})"
        elif key == "ratio" and value is not None:
            value = f"{value:.3f}"
        elif key == "count":
            value = f"{value:,}"
        print(f"{key:<{width}}  {value}")
    if shards is not None:  # a collection: one line per shard, in position order
        print(f"{'shards':<{width}}  {len(shards):,}")
        for shard in shards:
            print(
                f"  {shard['path']}  {shard['count']:,} docs, stored {_human(shard['stored_bytes'])}, "
                f"format {shard['format_version']}"
            )
    return 0


def cmd_seal(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    progress = False if args.quiet else None
    if args.on_duplicate == "error":
        store = seal(
            args.output, args.shards, overwrite=args.overwrite, append=args.append, progress=progress
        )
        dropped = 0
    else:
        dropped = seal_without_repeats(
            args.output, args.shards, args.on_duplicate, overwrite=args.overwrite, append=args.append,
            progress=progress,
        )  # fmt: skip
        store = open_store(args.output)
    shards = len(store.info()["shards"])
    kept = f", {dropped:,} repeats dropped (--on-duplicate {args.on_duplicate})" if dropped else ""
    print(
        f"sealed {args.output}: {len(store):,} docs in {shards} shards{kept} "
        f"({time.perf_counter() - start:.2f}s)"
    )
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    store = open_store(args.store)
    missing = []
    for doc_id in args.ids:
        doc = store.get(doc_id)
        if doc is None:
            missing.append(doc_id)
        else:
            print(_doc_json(doc))
    if missing:
        raise UsageError(f"not found: {', '.join(map(repr, missing))}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    store = open_store(args.store)
    start = time.perf_counter()
    _progress.verify(store, False if args.quiet else None)
    took = time.perf_counter() - start
    print(f"OK: {_redact_urls(args.store)} ({len(store):,} docs, every byte checked in {took:.2f}s)")
    return 0


def cmd_upgrade(args: argparse.Namespace) -> int:
    store = open_store(args.store)
    version = store.info()["format_version"]
    store.close()
    if version >= FORMAT_VERSION and args.output is None:
        print(f"{_redact_urls(args.store)} is already format {version}: nothing to do")
        return 0
    start = time.perf_counter()
    progress = False if args.quiet else None
    if args.output:
        new = upgrade(args.store, args.output, overwrite=args.overwrite, progress=progress)
    else:
        new = upgrade(args.store, progress=progress)
    print(
        f"{_redact_urls(args.output or args.store)}: format {version} -> {new.info()['format_version']} "
        f"({len(new):,} docs, verified and rewritten in {time.perf_counter() - start:.2f}s)"
    )
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    store = open_store(args.store)
    # Every check before the output is opened: opening it truncates it.
    if args.id_field in store.fields:
        raise UsageError(f"--id-field {args.id_field!r} is already a field of the store")
    progress = False if args.quiet else None
    if not args.output:
        _write_docs(store, sys.stdout, args.id_field, progress)
        return 0
    if not is_url(args.store) and os.path.exists(args.output) and os.path.samefile(args.output, args.store):
        raise UsageError(f"{args.output} is the store being exported: export to another file")
    _export_to(store, args.output, args.id_field, progress)
    return 0


def _export_to(store: Any, output: str, id_field: str, progress: bool | None = False) -> None:
    """Writes ``store``'s documents to the file ``output`` in one step: into a temporary file
    beside it, renamed over it only once every document is written, so that a failure (a
    damaged store, a full disk) leaves the file as it was. Through a symbolic link, the file it
    names is replaced; what is not a regular file (``/dev/stdout``, a FIFO) is written as is."""
    import tempfile

    real = os.path.realpath(output)
    if os.path.exists(real) and not os.path.isfile(real):
        with open(real, "w", encoding="utf-8") as out:
            _write_docs(store, out, id_field, progress)
        return
    if os.path.exists(real):
        mode = os.stat(real).st_mode & 0o7777
    else:  # what open() would have created
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, temp = tempfile.mkstemp(
        prefix=f".{os.path.basename(real)}.", suffix=".export-tmp", dir=os.path.dirname(real)
    )
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            _write_docs(store, out, id_field, progress)
            out.flush()
            os.fchmod(out.fileno(), mode)
            os.fsync(out.fileno())
        os.replace(temp, real)
    except BaseException:
        os.unlink(temp)
        raise


def _write_docs(store: Any, out: Any, id_field: str, progress: bool | None = False) -> None:
    with _progress.bar(len(store), "docs", progress, desc="export") as shown:
        for n, doc in enumerate(store.values(), 1):
            out.write(_doc_json(doc, id_field))
            out.write("\n")
            if n % 4096 == 0:
                shown.update(4096)
        shown.update(len(store) - shown.n)


def cmd_demo(args: argparse.Namespace) -> int:
    from ..demo import run

    run(docs=args.docs, directory=args.dir)
    return 0
