"""The ``docstore`` command line: build, info, get, verify, export, upgrade, demo."""

from __future__ import annotations

import argparse
import base64
import binascii
import csv
import gzip
import io
import itertools
import json
import math
import os
import sys
import time
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from . import DocstoreError, Writer, upgrade
from . import open as open_store
from ._docstore import DEFAULT_LEVEL, FORMAT_VERSION
from ._writer import ARRAY_DTYPES, infer_type
from .errors import FieldTypeError, InvalidKeyError, SchemaError

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


def _read_records(
    path: str, fmt: str, columns: list[str] | None, keep: list[str] | None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(position, record) pairs: the line a record starts on, or for parquet its row (from 1).
    ``keep``: the parquet columns to read (those ``--fields`` names, and the id), None for all."""
    if fmt == "parquet":
        yield from _read_parquet(path, keep)
        return
    with _open_text(path) as f:
        if fmt == "jsonl":
            yield from _read_jsonl(path, f)
        else:
            yield from _read_delimited(path, f, fmt, columns)


def _read_jsonl(path: str, f: io.TextIOBase) -> Iterator[tuple[int, dict[str, Any]]]:
    for line_no, line in enumerate(f, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}:{line_no}: invalid JSON: {exc}") from None
        except RecursionError:
            raise UsageError(f"{path}:{line_no}: JSON nested too deeply to read") from None
        if not isinstance(record, dict):
            got = "null" if record is None else type(record).__name__
            raise UsageError(f"{path}:{line_no}: a record must be a JSON object, got {got}")
        yield line_no, record


def _read_delimited(
    path: str, f: io.TextIOBase, fmt: str, columns: list[str] | None
) -> Iterator[tuple[int, dict[str, Any]]]:
    csv.field_size_limit(1 << 30)
    if fmt == "tsv":
        # MS MARCO-style TSV has no quoting: quotes are part of the text.
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
    else:
        # strict: an unterminated quote is an error, not the rest of the file swallowed by one field
        reader = csv.reader(f, strict=True)
    rows = _rows(path, fmt, reader)
    header = columns
    if header is None:
        first = next(rows, None)
        if first is None:
            return
        line_no, header = first
        repeated = _repeated(header)
        if repeated is not None:
            raise UsageError(f"{path}:{line_no}: the header names column {repeated!r} more than once")
    for line_no, row in rows:
        if len(row) != len(header):
            raise UsageError(f"{path}:{line_no}: {len(row)} columns where the header has {len(header)}")
        yield line_no, dict(zip(header, row))


def _rows(path: str, fmt: str, reader: Any) -> Iterator[tuple[int, list[str]]]:
    """The non-blank rows (blank lines are skipped, as csv.DictReader does), each with the
    physical line it starts on: a quoted field may span lines, so count them as the reader does."""
    start = 1
    try:
        for row in reader:
            if row:
                yield start, row
            start = reader.line_num + 1
    except csv.Error as exc:
        raise UsageError(f"{path}:{start}: cannot read it as {fmt}: {exc}") from None


def _repeated(names: list[str]) -> str | None:
    """The first name given more than once: as dict keys, the later value would silently win."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return None


def _parquet_file(path: str) -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise UsageError("reading parquet needs pyarrow: pip install pyarrow") from None
    return pq.ParquetFile(path)


def _read_parquet(path: str, keep: list[str] | None) -> Iterator[tuple[int, dict[str, Any]]]:
    file = _parquet_file(path)
    names = file.schema_arrow.names
    repeated = _repeated(names)
    if repeated is not None:
        raise UsageError(f"{path}: column {repeated!r} appears more than once")
    missing = [name for name in keep or () if name not in names]
    if missing:
        raise UsageError(f"{path} has no column {missing[0]!r} (columns: {names})")
    batches = file.iter_batches(batch_size=65536, columns=keep)
    yield from enumerate(itertools.chain.from_iterable(b.to_pylist() for b in batches), 1)


def _parquet_fields(path: str, id_field: str) -> dict[str, str]:
    """Field types from the file's Arrow schema: the first row's Python values cannot tell
    float32 from float64, nor an empty list's element type, and an empty file has no row."""
    schema = _parquet_file(path).schema_arrow
    if id_field not in schema.names:
        raise UsageError(f"{path} has no id column {id_field!r} (columns: {schema.names}); use --id-field")
    return {f.name: _arrow_field_type(path, f.name, f.type) for f in schema if f.name != id_field}


def _arrow_field_type(path: str, name: str, arrow_type: Any) -> str:
    import pyarrow as pa

    t = arrow_type.value_type if pa.types.is_dictionary(arrow_type) else arrow_type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "str"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "bytes"
    if pa.types.is_integer(t):  # signed or unsigned, up to 64 bits; a uint64 beyond int64 is refused by row
        return "int64"
    if pa.types.is_floating(t):
        return "float64"
    if pa.types.is_boolean(t):
        raise UsageError(
            f"{path}: column {name!r} is bool, which docstore has no type for; "
            f"pass --fields to store it as 0/1, e.g. --fields {name}:int64"
        )
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        element = t.value_type
        if pa.types.is_integer(element) or pa.types.is_floating(element):
            dtype = np.dtype(element.to_pandas_dtype()).name
            if dtype in ARRAY_DTYPES:
                return f"{dtype}[]"
            if dtype == "float16":  # the narrowest float field, as build() infers
                return "float32[]"
    raise UsageError(
        f"{path}: column {name!r} has Arrow type {arrow_type}, which docstore has no field type for; "
        "drop the column, or pass --fields naming the columns to keep"
    )


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


def _coerce_record(record: dict[str, Any], types: dict[str, str], id_field: str) -> None:
    for name, ty in types.items():
        if name in record:
            try:
                record[name] = _coerce(record[name], ty)
            except ValueError as exc:
                raise FieldTypeError(
                    f"doc {record.get(id_field)!r}: field {name!r} is {ty}, got {_clip(record[name])} ({exc})"
                ) from None


def _coerce(value: Any, ty: str) -> Any:
    """Values from text formats (and from JSON: base64 bytes, non-finite floats written as
    strings by ``export``) into their field's type. A ValueError says briefly what is wrong."""
    if isinstance(value, list) and ty in ("float32[]", "float64[]"):
        return [_float(v) if isinstance(v, str) else v for v in value]
    if not isinstance(value, str) or ty == "str":
        return value
    if ty == "bytes":
        try:  # validate: without it, characters outside the alphabet are dropped, not refused
            return base64.b64decode(value, validate=True)
        except binascii.Error as exc:
            raise ValueError(f"not base64: {exc}") from None
    if ty in ("int64", "int"):
        try:
            return int(value)
        except ValueError:
            raise ValueError("not an integer") from None
    if ty in ("float64", "float"):
        return _float(value)
    if ty.endswith("[]"):
        try:
            items = json.loads(value)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise ValueError(f"not a JSON array: {exc}") from None
        if not isinstance(items, list):
            raise ValueError("not a JSON array")
        return _coerce(items, ty)
    return value


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError("not a number") from None


def _clip(value: Any, width: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _where(path: str, fmt: str, position: int) -> str:
    return f"{path}: row {position}" if fmt == "parquet" else f"{path}:{position}"


# What a damaged gzip stream raises partway through a file: a bad CRC or length, or data after
# the last member (BadGzipFile, an OSError, which would otherwise reach the user without the
# file's name), undecodable deflate data (zlib.error), an end before the end (EOFError).
_GZIP_ERRORS = (gzip.BadGzipFile, zlib.error, EOFError)


def _unreadable(path: str, fmt: str, position: int, exc: BaseException) -> str:
    """The message for an input that breaks off while being read: the records up to line
    ``position`` were read (text is read ahead in chunks: the damage lies somewhere after)."""
    where = f"after line {position}" if position else "before its first record"
    what = "damaged gzip data: " if isinstance(exc, _GZIP_ERRORS) else ""
    return f"{path}: cannot read it as {fmt} {where}: {what}{exc}"


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
    formats = [args.format or _detect_format(path) for path in args.inputs]
    _check_build_args(args, columns, formats)
    # --fields names the parquet columns to read: the way to leave out one docstore cannot hold
    keep = [args.id_field, *fields] if fields is not None else None
    if fields is None and formats[0] == "parquet":
        fields = _parquet_fields(args.inputs[0], args.id_field)
    start = time.perf_counter()

    def records() -> Iterator[tuple[int, dict[str, Any], str, str]]:
        for path, fmt in zip(args.inputs, formats):
            position = 0  # the line the last record read starts on
            try:
                for position, record in _read_records(path, fmt, columns, keep):
                    yield position, record, path, fmt
            except (*_GZIP_ERRORS, csv.Error, UnicodeDecodeError) as exc:  # a broken file
                raise UsageError(_unreadable(path, fmt, position, exc)) from None

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
                    _coerce_record(record, coerce[fmt], args.id_field)
                add(record, args.id_field)
            except (SchemaError, InvalidKeyError) as exc:  # a bad record: say where it is
                raise UsageError(f"{_where(path, fmt, position)}: {exc}") from None
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
        repeated = _repeated(columns)
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

    p = sub.add_parser(
        "upgrade",
        help="rewrite a store in the current format (version 2: every read checked), after verifying it",
    )
    p.add_argument("store")
    p.add_argument("output", nargs="?", help="where to write it (default: replace STORE atomically)")
    p.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it exists")
    p.set_defaults(func=cmd_upgrade)

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
