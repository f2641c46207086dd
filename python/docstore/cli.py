"""The ``docstore`` command line: build, info, get, verify, export, demo."""

from __future__ import annotations

import argparse
import base64
import csv
import gzip
import io
import json
import math
import os
import sys
import time
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from . import DocstoreError, Writer
from . import open as open_store
from ._docstore import DEFAULT_LEVEL
from ._writer import infer_type
from .errors import SchemaError

FORMATS = ("jsonl", "tsv", "csv", "parquet")


class UsageError(Exception):
    """A mistake on the command line or in the input: reported in one line, exit status 1."""


def _detect_format(path: str) -> str:
    if path == "-":
        return "jsonl"
    name = path[:-3] if path.endswith(".gz") else path
    ext = os.path.splitext(name)[1].lower().lstrip(".")
    if ext in ("jsonl", "json", "ndjson"):
        return "jsonl"
    if ext in FORMATS:
        return ext
    raise UsageError(f"cannot tell the format of {path!r} from its extension; pass --format")


_GZIP_MAGIC = b"\x1f\x8b"


def _open_text(path: str) -> io.TextIOBase:
    """The file (stdin for ``-``) as text, gunzipped when it starts as gzip does, whatever its name."""
    # utf-8-sig: a byte-order mark (Excel, many exporters) is not part of the first column's name
    if path == "-":
        raw: Any = sys.stdin.buffer
        if raw.peek(2)[:2] == _GZIP_MAGIC:
            raw = gzip.GzipFile(fileobj=raw, mode="rb")
        return io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")
    with open(path, "rb") as f:
        gzipped = f.read(2) == _GZIP_MAGIC
    if gzipped:
        return gzip.open(path, "rt", encoding="utf-8-sig", newline="")  # type: ignore[return-value]
    return open(path, encoding="utf-8-sig", newline="")


def _read_records(path: str, fmt: str, columns: list[str] | None) -> Iterator[dict[str, Any]]:
    if fmt == "parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise UsageError("reading parquet needs pyarrow: pip install pyarrow") from None
        for batch in pq.ParquetFile(path).iter_batches(batch_size=65536):
            yield from batch.to_pylist()
        return
    with _open_text(path) as f:
        if fmt == "jsonl":
            for line_no, line in enumerate(f, 1):
                if line.strip():
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise UsageError(f"{path}:{line_no}: invalid JSON: {exc}") from None
                    if not isinstance(record, dict):
                        got = "null" if record is None else type(record).__name__
                        raise UsageError(f"{path}:{line_no}: a record must be a JSON object, got {got}")
                    yield record
            return
        delimiter = "\t" if fmt == "tsv" else ","
        # MS MARCO-style TSV has no quoting: quotes are part of the text.
        quoting = csv.QUOTE_NONE if fmt == "tsv" else csv.QUOTE_MINIMAL
        csv.field_size_limit(1 << 30)
        reader = csv.reader(f, delimiter=delimiter, quoting=quoting)
        header = columns or next(reader, None)
        if header is None:
            return
        for line_no, row in enumerate(reader, 1 if columns else 2):
            if len(row) != len(header):
                raise UsageError(f"{path}:{line_no}: {len(row)} columns where the header has {len(header)}")
            yield dict(zip(header, row))


def _parse_fields(spec: str | None) -> dict[str, str] | None:
    if not spec:
        return None
    fields = {}
    for item in spec.split(","):
        name, sep, ty = item.partition(":")
        if not sep:
            raise UsageError(f"--fields wants name:type pairs, got {item!r}")
        fields[name.strip()] = ty.strip()
    return fields


def _coerce(value: Any, ty: str) -> Any:
    """Values from text formats (and from JSON: base64 bytes, non-finite floats written as
    strings by ``export``) into their field's type."""
    if isinstance(value, list) and ty in ("float32[]", "float64[]"):
        return [float(v) if isinstance(v, str) else v for v in value]
    if not isinstance(value, str) or ty == "str":
        return value
    if ty == "bytes":
        return base64.b64decode(value)
    if ty in ("int64", "int"):
        return int(value)
    if ty in ("float64", "float"):
        return float(value)
    if ty.endswith("[]"):
        return json.loads(value)
    return value


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return str(n)


def cmd_build(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    columns = args.columns.split(",") if args.columns else None
    fields = _parse_fields(args.fields)
    if args.inputs.count("-") > 1:
        raise UsageError("'-' (stdin) is given more than once; it can be read only once")
    if "-" in args.inputs and args.format == "parquet":
        raise UsageError("parquet cannot be read from stdin ('-'): give its path")
    if os.path.exists(args.output):
        for path in args.inputs:
            if path != "-" and os.path.exists(path) and os.path.samefile(path, args.output):
                raise UsageError(f"{args.output} is also an input: the store would replace it")
    start = time.perf_counter()

    def records() -> Iterator[tuple[dict[str, Any], str]]:
        for path in args.inputs:
            fmt = args.format or _detect_format(path)
            try:
                for record in _read_records(path, fmt, columns):
                    yield record, fmt
            except (EOFError, zlib.error, csv.Error, UnicodeDecodeError) as exc:  # a broken file
                raise UsageError(f"{path}: cannot read it as {fmt}: {exc}") from None

    iterator = records()
    first = next(iterator, None)
    if first is None and fields is None:
        raise UsageError("the input holds no records (pass --fields to build an empty store)")
    if fields is None:
        sample = first[0]
        if args.id_field not in sample:
            raise UsageError(
                f"records have no id field {args.id_field!r} (fields: {list(sample)}); use --id-field"
            )
        try:
            fields = {k: infer_type(k, v) for k, v in sample.items() if k != args.id_field}
        except SchemaError as exc:
            what = str(exc).split("; ")[0]
            raise UsageError(f"{what}; pass --fields, e.g. --fields text:str,n:int64") from None
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
        for record, fmt in _chain(first, iterator):
            if coerce[fmt]:
                try:
                    for name, ty in coerce[fmt].items():
                        if name in record:
                            record[name] = _coerce(record[name], ty)
                except ValueError as exc:
                    raise SchemaError(f"doc {record.get(args.id_field)!r}: {exc}") from None
            add(record, args.id_field)
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
    width = max(len(k) for k in info)
    for key, value in info.items():
        if key in ("raw_bytes", "stored_bytes"):
            value = f"{value:,} ({_human(value)})"
        elif key == "ratio" and value is not None:
            value = f"{value:.3f}"
        elif key == "count":
            value = f"{value:,}"
        print(f"{key:<{width}}  {value}")
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
    from .demo import run

    run(docs=args.docs, directory=args.dir)
    return 0


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="docstore", description="Build and read docstore document stores.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("build", help="build a store from JSONL, TSV, CSV or Parquet files")
    p.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help="input files ('-' reads stdin: JSON lines unless --format says otherwise; .gz is fine)",
    )
    p.add_argument("-o", "--output", required=True, metavar="STORE", help="the store to create")
    p.add_argument("--id-field", default="doc_id", help="field holding the doc id (default: doc_id)")
    p.add_argument("--format", choices=FORMATS, help="input format (default: from the extension)")
    p.add_argument("--fields", help="field types, e.g. text:str,label:int64 (default: inferred)")
    p.add_argument("--columns", help="column names of header-less TSV/CSV, e.g. doc_id,text")
    p.add_argument(
        "--level", type=int, help=f"0 = lz4 fast, 1-12 = lz4 HC, -1 = none (default {DEFAULT_LEVEL})"
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing store")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("info", help="count, fields, sizes and codec of a store")
    p.add_argument("store")
    shape = p.add_mutually_exclusive_group()
    shape.add_argument("--json", action="store_true", help="print JSON")
    shape.add_argument(
        "--fields",
        action="store_true",
        help="print only the field types, as `build --fields` takes them (to rebuild an export)",
    )
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("get", help="print documents by id as JSON lines")
    p.add_argument("store")
    p.add_argument("ids", nargs="+", metavar="ID")
    p.set_defaults(func=cmd_get)

    p = sub.add_parser("verify", help="check every checksum and every document")
    p.add_argument("store")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser(
        "export",
        help="print every document as JSON lines, in insertion order (bytes as base64, "
        "NaN and infinities as strings)",
    )
    p.add_argument("store")
    p.add_argument("-o", "--output", help="write to a file instead of stdout")
    p.add_argument("--id-field", default="doc_id", help="name of the id in each record (default: doc_id)")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("demo", help="build a sample corpus and compare lookups with a dict and ir_datasets")
    p.add_argument("--docs", type=_positive, default=200_000, help="documents in the sample corpus")
    p.add_argument("--dir", help="where to put the files (default: a temporary directory)")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:
        return 0
    except (DocstoreError, UsageError, OSError, ValueError, KeyError) as exc:
        message = str(exc) if not isinstance(exc, KeyError) else f"not found: {exc}"
        print(f"docstore {args.command}: error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
