"""The commands of the ``docstore`` command line, one function each (``cmd_NAME``)."""

from __future__ import annotations

import argparse
import base64
import csv
import json
import math
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import Writer, seal, upgrade
from .. import open as open_store
from .._docstore import FORMAT_VERSION
from .._writer import infer_type
from ..errors import InvalidKeyError, SchemaError
from .inputs import (
    GZIP_ERRORS,
    UsageError,
    coerce_record,
    detect_format,
    first_repeated,
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
    from tqdm import tqdm

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

    iterator = records()
    first = next(iterator, None)
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
            fields = {k: infer_type(k, v) for k, v in sample.items() if k != args.id_field}
        except SchemaError as exc:
            what = str(exc).split("; ")[0]
            raise UsageError(f"{what}; pass --fields, e.g. --fields text:str,n:int64") from None
    _check_no_doc_id_beside(args.id_field, fields, sample)
    # Text formats carry every value as a string; JSON carries bytes as base64 strings.
    coerce = {
        "tsv": {n: t for n, t in fields.items() if t != "str"},
        "csv": {n: t for n, t in fields.items() if t != "str"},
        "jsonl": {n: t for n, t in fields.items() if t in ("bytes", "float64", "float32[]", "float64[]")},
        "parquet": {},
    }
    count = 0
    if not args.overwrite and os.path.lexists(args.output):
        raise UsageError(f"{args.output} already exists (pass --overwrite to replace it)")
    with Writer(args.output, fields, overwrite=args.overwrite, level=args.level) as writer:
        bar = tqdm(unit=" docs", unit_scale=True, disable=args.quiet or None, file=sys.stderr)
        add = writer.add_record
        for position, record, path, fmt in _chain(first, iterator):
            try:
                if coerce[fmt]:
                    coerce_record(record, coerce[fmt], args.id_field)
                add(record, args.id_field)
            except (SchemaError, InvalidKeyError) as exc:  # a bad record: say where it is
                raise UsageError(f"{where(path, fmt, position)}: {exc}") from None
            count += 1
            if count % 8192 == 0:
                bar.update(8192)
        bar.update(count % 8192)
        bar.close()
    elapsed = time.perf_counter() - start
    info = open_store(args.output).info()
    ratio = f"{info['ratio']:.3f}x" if info["ratio"] else "-"
    print(
        f"built {args.output}: {info['count']:,} docs, raw {_human(info['raw_bytes'])}, "
        f"stored {_human(info['stored_bytes'])} ({ratio} raw), {info['count'] / elapsed:,.0f} docs/s"
    )
    return 0


def _check_build_args(args: argparse.Namespace, columns: list[str] | None, formats: list[str]) -> None:
    """Refusals that need no input read."""
    if args.inputs.count("-") > 1:
        raise UsageError("'-' (stdin) is given more than once; it can be read only once")
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
    store = seal(args.output, args.shards, overwrite=args.overwrite)
    print(
        f"sealed {args.output}: {len(store):,} docs in {len(args.shards)} shards "
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
    store.verify()
    print(f"OK: {args.store} ({len(store):,} docs, every byte checked in {time.perf_counter() - start:.2f}s)")
    return 0


def cmd_upgrade(args: argparse.Namespace) -> int:
    store = open_store(args.store)
    version = store.info()["format_version"]
    store.close()
    if version >= FORMAT_VERSION and args.output is None:
        print(f"{args.store} is already format {version}: nothing to do")
        return 0
    start = time.perf_counter()
    new = upgrade(args.store, args.output, overwrite=args.overwrite) if args.output else upgrade(args.store)
    print(
        f"{args.output or args.store}: format {version} -> {new.info()['format_version']} "
        f"({len(new):,} docs, verified and rewritten in {time.perf_counter() - start:.2f}s)"
    )
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    store = open_store(args.store)
    # Every check before the output is opened: opening it truncates it.
    if args.id_field in store.fields:
        raise UsageError(f"--id-field {args.id_field!r} is already a field of the store")
    if not args.output:
        _write_docs(store, sys.stdout, args.id_field)
        return 0
    if os.path.exists(args.output) and os.path.samefile(args.output, args.store):
        raise UsageError(f"{args.output} is the store being exported: export to another file")
    with open(args.output, "w", encoding="utf-8") as out:
        _write_docs(store, out, args.id_field)
    return 0


def _write_docs(store: Any, out: Any, id_field: str) -> None:
    for doc in store.values():
        out.write(_doc_json(doc, id_field))
        out.write("\n")


def cmd_demo(args: argparse.Namespace) -> int:
    from ..demo import run

    run(docs=args.docs, directory=args.dir)
    return 0
