"""The commands of the ``docstore`` command line, one function each (``cmd_NAME``)."""

from __future__ import annotations

import argparse
import base64
import csv
import itertools
import json
import math
import os
import re
import struct
import sys
import time
from collections.abc import Generator, Iterator
from typing import Any

import numpy as np

from .. import Writer, _progress, seal, upgrade
from .. import open as open_store
from .._arrow import check_no_doc_id_beside
from .._build import INFER_RECORDS, infer_fields
from .._collection import seal_without_repeats
from .._docstore import FORMAT_VERSION, _redact_urls, check_replaceable
from .._store import is_url
from ..errors import DuplicateKeyError, InvalidKeyError, SchemaError
from .inputs import (
    FLOAT_SIZES,
    GZIP_ERRORS,
    UsageError,
    bytes_read,
    coerce_record,
    detect_format,
    first_repeated,
    ids_as_text,
    nan_text,
    needs_coercion_from_json,
    parquet_fields,
    parse_fields,
    read_records,
    unreadable,
    where,
)
from .shards import build_in_shards


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

    def records() -> Generator[tuple[int, dict[str, Any], str, str], None, None]:
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
        if all(fmt in ("csv", "tsv") for _, _, _, fmt in ahead):
            fields = _numbers_in_text(fields, [record for _, record, _, _ in ahead], args.id_field)
    try:
        names = {*fields, *(sample or ())}
        check_no_doc_id_beside(args.id_field, names, what="field", use="use it as the key: --id-field doc_id")
    except SchemaError as exc:
        raise UsageError(str(exc)) from None
    # Text formats carry every value as a string; JSON carries bytes as base64 strings.
    coerce = {
        "tsv": {n: t for n, t in fields.items() if t != "str"},
        "csv": {n: t for n, t in fields.items() if t != "str"},
        "jsonl": {n: t for n, t in fields.items() if needs_coercion_from_json(t)},
        "json": {n: t for n, t in fields.items() if needs_coercion_from_json(t)},
        "parquet": {},
    }
    ids_as_text(coerce, args.id_field)
    # What --overwrite would not replace either (a directory, a file of the user's) is refused
    # first, so that the hint to pass --overwrite is given only where it helps.
    check_replaceable(args.output)  # refused now, not once every shard is built
    if not args.overwrite and os.path.lexists(args.output):
        raise UsageError(f"{args.output} already exists (pass --overwrite to replace it)")
    try:
        if args.shards > 1:
            source.close()  # the first records told the fields; each shard reads its own piece
            shard_args = (fields, args.id_field, columns, keep, args.level, coerce, args.on_duplicate)
            dropped = build_in_shards(
                args.output, args.inputs, formats, args.shards, shard_args, args.overwrite, not args.quiet
            )
            examples: list[str] = []
        else:
            dropped, examples = _build_one(args, fields, coerce, first, iterator, formats)
    except DuplicateKeyError as exc:
        raise _repeats_found(args, formats, columns, keep, exc) from None
    _report_build(args.output, start)
    if dropped:
        shown = f": {', '.join(examples)}{' ...' if dropped > len(examples) else ''}" if examples else ""
        if args.on_duplicate == "first":
            print(f"dropped {dropped:,} documents whose id came again (--on-duplicate first){shown}")
        else:  # the places named are those of the repeats, which were kept
            what = f"replaced {dropped:,} documents by a later one with the same id"
            print(f"{what} (--on-duplicate last){shown}")
    return 0


def _build_one(
    args: argparse.Namespace,
    fields: dict[str, str],
    coerce: dict[str, dict[str, str]],
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
                if not hint and args.fields is None and fmt in ("csv", "tsv"):
                    hint = f" (the fields were typed from the first {INFER_RECORDS:,} records: pass --fields)"
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
                assert total is not None  # stdin has none: the branch above
                shown.update(min(total, before + within) - shown.n)
        if total is not None:
            shown.update(total - shown.n)
    return writer.duplicates, examples


# A CSV/TSV cell that is a number, written as numbers are: no leading zero (a code such as
# "007" stays text), an optional fraction and exponent.
_INT = re.compile(r"-?(?:0|[1-9][0-9]*)")
_FLOAT = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")


def _numbers_in_text(fields: dict[str, str], sample: list[dict[str, Any]], id_field: str) -> dict[str, str]:
    """CSV and TSV carry every value as text: a column whose sampled cells are all integers
    (within int64) is ``int64``, all numbers ``float64``; an empty cell among them makes it
    nullable. Other columns, and the id, stay as inferred."""
    out = dict(fields)
    for name, ty in fields.items():
        if name == id_field or ty not in ("str", "str?"):
            continue
        cells = [r[name] for r in sample if isinstance(r.get(name), str)]
        numbers = [c for c in cells if c != ""]
        if not numbers:
            continue
        nullable = "?" if len(numbers) < len(cells) or ty == "str?" else ""
        if all(_INT.fullmatch(c) and -(2**63) <= int(c) < 2**63 for c in numbers):
            out[name] = "int64" + nullable
        elif all(_FLOAT.fullmatch(c) for c in numbers):
            out[name] = "float64" + nullable
    return out


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
    count, shown = 0, list[str]()
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
        import ir_datasets

        from .. import ir_datasets as irds
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    if not args.overwrite and os.path.lexists(args.output):
        raise UsageError(f"{args.output} already exists (pass --overwrite to replace it)")
    json_fields = [f for f in (args.json_fields or "").split(",") if f]
    start = time.perf_counter()
    try:
        dataset = ir_datasets.load(args.from_ir_datasets)
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
        named = [p for p, fmt in zip(args.inputs, formats) if fmt in ("jsonl", "json", "parquet")]
        if named:  # their records name their own fields
            raise UsageError(f"--columns names the columns of header-less csv/tsv input, not of {named[0]}")
        repeated = first_repeated(columns)
        if repeated is not None:
            raise UsageError(f"--columns names {repeated!r} more than once")
    if os.path.exists(args.output):
        for path in args.inputs:
            if path != "-" and os.path.exists(path) and os.path.samefile(path, args.output):
                raise UsageError(f"{args.output} is also an input: the store would replace it")


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    if first is not None:
        yield first
    yield from rest


def _finite(x: float) -> float | str:
    """JSON has no NaN or infinities: they go out as strings (``"inf"``, ``"-inf"``, and for a
    NaN ``"nan"`` or its bits, `nan_text`) that ``build`` reads back exactly."""
    if math.isfinite(x):
        return x
    if math.isnan(x):
        return nan_text(struct.unpack("<Q", struct.pack("<d", x))[0], "float64")
    return str(x)


def _floats_json(value: np.ndarray) -> Any:
    """A float array (any shape, ``bfloat16`` included) as nested lists of JSON numbers, every
    NaN and infinity as the string `_finite` gives it, each NaN from its own bits: converting
    it to a Python float could change them (float16 payloads, float32's signalling NaNs)."""
    with np.errstate(invalid="ignore"):  # a signalling NaN: its bits are read below
        numbers = value.astype(np.float64)  # exact for every finite value, bfloat16's too
    finite = np.isfinite(numbers)
    if finite.all():
        return numbers.tolist()
    items = numbers.astype(object)  # Python floats, to be replaced where not finite
    bits = value.view(f"<u{value.dtype.itemsize}")
    elem = value.dtype.name
    for i in np.flatnonzero(~finite):
        x = items.flat[i]
        items.flat[i] = nan_text(int(bits.flat[i]), elem) if math.isnan(x) else str(x)
    return items.tolist()


def _jsonable(value: Any) -> Any:
    if isinstance(value, list):  # list[str], list[bytes]
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _floats_json(value) if value.dtype.name in FLOAT_SIZES else value.tolist()
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
    return _done("OK: {store}", args.store, len(store), "every byte checked", start)


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
    line = f"{{store}}: format {version} -> {new.info()['format_version']}"
    return _done(line, args.output or args.store, len(new), "verified and rewritten", start)


def _done(line: str, store: str, docs: int, what: str, start: float) -> int:
    """Prints the line a command on ``store`` ends with: ``line``, ``{store}`` in it standing for
    the path or URL (without the secrets a URL may carry), then the documents and what was done
    to them, in how long; returns the command's exit status."""
    took = time.perf_counter() - start
    print(f"{line.format(store=_redact_urls(store))} ({docs:,} docs, {what} in {took:.2f}s)")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    store = open_store(args.store)
    # Every check before the output is opened: opening it truncates it.
    if args.id_field in store.fields:
        raise UsageError(f"--id-field {args.id_field!r} is already a field of the store")
    progress = False if args.quiet else None
    fmt = args.format or ("parquet" if (args.output or "").endswith(".parquet") else "jsonl")
    if fmt == "parquet" and not args.output:
        raise UsageError("--format parquet writes a file: give it with -o OUTPUT")
    if not args.output:
        _write_docs(store, sys.stdout, args.id_field, progress)
        return 0
    if not is_url(args.store) and os.path.exists(args.output) and os.path.samefile(args.output, args.store):
        raise UsageError(f"{args.output} is the store being exported: export to another file")
    write = _write_parquet if fmt == "parquet" else _write_docs
    _export_to(args.output, lambda out: write(store, out, args.id_field, progress), fmt == "parquet")
    return 0


def _write_parquet(store: Any, out: Any, id_field: str, progress: bool | None = False) -> None:
    """The documents as one Parquet file, typed as ``store.to_arrow`` gives them (fixed shapes
    as Arrow's fixed_shape_tensor, ``bfloat16[]`` widened exactly to float32), in row groups of
    ``_PARQUET_ROWS``: the store is never held in memory whole."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise UsageError("writing parquet needs pyarrow: pip install pyarrow") from None
    names = [id_field, *store.fields]
    schema = store.to_arrow(rows=[]).rename_columns(names).schema
    if store.metadata:  # the store's metadata (docs/format.md §4.10), as its JSON text
        schema = schema.with_metadata(
            {**(schema.metadata or {}), b"docstore.metadata": json.dumps(store.metadata)}
        )
    with (
        pq.ParquetWriter(out, schema) as writer,
        _progress.bar(len(store), "docs", progress, desc="export") as shown,
    ):
        for start in range(0, len(store), _PARQUET_ROWS):
            table = store.to_arrow(rows=slice(start, start + _PARQUET_ROWS)).rename_columns(names)
            writer.write_table(table)
            shown.update(table.num_rows)


# Documents per Parquet row group that export writes (and reads from the store at a time).
_PARQUET_ROWS = 65536


def _export_to(output: str, write: Any, binary: bool = False) -> None:
    """Writes the file ``output`` (``write(file)``, the file opened ``binary`` or as text) in
    one step: into a staging directory beside it, then published over it by the core only once
    every document is written, so that a failure (a damaged store, a full disk) leaves the file
    as it was. Through a symbolic link, the file it names is replaced; what is not a regular
    file (``/dev/stdout``, a FIFO) is written as is."""
    from .._docstore import Staging

    real = os.path.realpath(output)
    how, encoding = ("wb", None) if binary else ("w", "utf-8")
    if os.path.exists(real) and not os.path.isfile(real):
        with open(real, how, encoding=encoding) as out:
            write(out)
        return
    if os.path.exists(real):
        mode = os.stat(real).st_mode & 0o7777
    else:  # what open() would have created
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    with Staging(real) as staging:
        temp = os.path.join(staging.path, "export")
        with open(temp, how, encoding=encoding) as out:
            write(out)
            out.flush()
            os.fchmod(out.fileno(), mode)
            os.fsync(out.fileno())
        staging.publish(temp, export=True)


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
