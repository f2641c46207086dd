"""Input readers of ``docstore build``: JSONL, TSV, CSV and Parquet files (gzipped or not, stdin),
their records typed by ``--fields`` or inferred, every bad record reported with its place."""

from __future__ import annotations

import base64
import binascii
import csv
import gzip
import io
import itertools
import json
import os
import re
import struct
import sys
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from .._arrow import field_type, unsupported
from .._convert import as_array, bfloat16
from ..errors import FieldTypeError

# "json" is one JSON array of records (what many tools export as .json); "jsonl" one per line.
FORMATS = ("jsonl", "json", "tsv", "csv", "parquet")


class UsageError(Exception):
    """A mistake on the command line or in the input: reported in one line, exit status 1."""


def detect_format(path: str) -> str:
    if path == "-":
        return "jsonl"
    name = path[:-3] if path.endswith(".gz") else path
    ext = os.path.splitext(name)[1].lower().lstrip(".")
    if ext == "json" and os.path.isfile(path) and _first_char(path) == "[":
        return "json"  # an array of records; JSON lines also go by .json
    if ext in ("jsonl", "json", "ndjson"):
        return "jsonl"
    if ext in FORMATS:
        return ext
    raise UsageError(f"cannot tell the format of {path!r} from its extension; pass --format")


_GZIP_MAGIC = b"\x1f\x8b"


def _first_char(path: str) -> str:
    """The file's first character that is not white space ('' for none), gunzipped."""
    with _open_text(path) as f:
        while True:
            chunk = f.read(4096)
            if not chunk or chunk.strip():
                return chunk.strip()[:1]


def _open_text(path: str) -> io.TextIOBase:
    """The file (stdin for ``-``) as text, gunzipped when it starts as gzip does, whatever its name."""
    # utf-8-sig: a byte-order mark (Excel, many exporters) is not part of the first column's name
    if path == "-":
        raw: Any = sys.stdin.buffer
        if raw.peek(2)[:2] == _GZIP_MAGIC:
            raw = gzip.GzipFile(fileobj=raw, mode="rb")
        return io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")
    global _reading
    with open(path, "rb") as f:
        gzipped = f.read(2) == _GZIP_MAGIC
    if gzipped:
        text: Any = gzip.open(path, "rt", encoding="utf-8-sig", newline="")  # noqa: SIM115
        _reading = text.buffer.fileobj  # the compressed bytes, which the file's size counts
        return text  # type: ignore[no-any-return]
    text = open(path, encoding="utf-8-sig", newline="")  # noqa: SIM115 - the caller closes it
    _reading = text.buffer.raw
    return text  # type: ignore[no-any-return]


# The binary file under the text being read now, for a progress bar (`bytes_read`).
_reading: Any = None


def bytes_read() -> int:
    """Bytes of the file being read now that have been read (ahead of the records parsed by a
    buffer at most): a progress bar's position within the file."""
    try:
        return int(_reading.tell()) if _reading is not None and not _reading.closed else 0
    except (OSError, ValueError):
        return 0


def read_records(
    path: str,
    fmt: str,
    columns: list[str] | None,
    keep: list[str] | None,
    byte_range: tuple[int, int] | None = None,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(position, record) pairs: the line a record starts on, or for parquet its row (from 1).
    ``keep``: the parquet columns to read (those ``--fields`` names, and the id), None for all.
    ``byte_range``: for uncompressed JSON lines, only the lines that start in ``[start, end)``,
    their positions then byte offsets (a piece of a file split among processes)."""
    if byte_range is not None:
        yield from _read_jsonl_range(path, *byte_range)
        return
    if fmt == "parquet":
        yield from _read_parquet(path, keep)
        return
    with _open_text(path) as f:
        if fmt == "jsonl":
            yield from _read_jsonl(path, f)
        elif fmt == "json":
            yield from _read_json_array(path, f)
        else:
            yield from _read_delimited(path, f, fmt, columns)


def _read_jsonl(path: str, f: io.TextIOBase) -> Iterator[tuple[int, dict[str, Any]]]:
    for line_no, line in enumerate(f, 1):
        if line.strip():
            yield line_no, _json_record(line, path, line_no)


def _read_json_array(path: str, f: io.TextIOBase) -> Iterator[tuple[int, dict[str, Any]]]:
    """The records of a file holding one JSON array of objects (read whole: such files are
    made for tools that read them whole too), each with its index in the array from 1."""
    try:
        records = json.load(f)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: invalid JSON: {exc}") from None
    except RecursionError:
        raise UsageError(f"{path}: JSON nested too deeply to read") from None
    if not isinstance(records, list):
        raise UsageError(f"{path}: --format json wants an array of records, got a {type(records).__name__}")
    for i, record in enumerate(records, 1):
        if not isinstance(record, dict):
            got = "null" if record is None else type(record).__name__
            raise UsageError(f"{path}: record {i}: a record must be a JSON object, got {got}")
        yield i, record


def _json_record(line: str | bytes, path: str, at: int, by_byte: bool = False) -> dict[str, Any]:
    """One line of JSON lines as a record; ``path`` and ``at`` (its line number, or with
    ``by_byte`` its byte offset) say where it is in an error, formatted only then, not for
    every line read."""
    try:
        record = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{_place(path, at, by_byte)}: invalid JSON: {exc}") from None
    except RecursionError:
        raise UsageError(f"{_place(path, at, by_byte)}: JSON nested too deeply to read") from None
    if not isinstance(record, dict):
        got = "null" if record is None else type(record).__name__
        raise UsageError(f"{_place(path, at, by_byte)}: a record must be a JSON object, got {got}")
    return record


def _place(path: str, at: int, by_byte: bool) -> str:
    return f"{path}: the line at byte {at}" if by_byte else f"{path}:{at}"


def is_gzip(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == _GZIP_MAGIC


# Bytes a range reader takes at a time: it splits them into lines and, when they are ASCII,
# decodes them in one call (C speed, as the whole-file reader's TextIOWrapper does), rather than
# one readline() and one json.loads(bytes) decoding each line.
RANGE_BLOCK = 4 << 20


def _read_jsonl_range(path: str, start: int, end: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """The records of the lines of ``path`` that start at a byte offset in ``[start, end)``: the
    line running across ``start`` belongs to the piece before it."""
    with open(path, "rb") as f:
        if start > 0:
            f.seek(start - 1)
            f.readline()  # ends at or after start - 1: the next line starts at or after start
        at = f.tell()
        rest = b""
        while at < end:
            block = f.read(RANGE_BLOCK)
            data = rest + block
            cut = len(data) if not block else data.rfind(b"\n") + 1
            if not data or (block and not cut):  # the end, or no whole line yet
                if not block:
                    break
                rest = data
                continue
            rest = data[cut:]
            lines = data[:cut].split(b"\n")
            if lines[-1] == b"":
                lines.pop()  # what followed the last newline
            text: Sequence[str | bytes] = data[:cut].decode("ascii").split("\n") if data.isascii() else lines
            for line, raw in zip(text, lines):
                if at >= end:
                    return
                if at == 0 and raw.startswith(b"\xef\xbb\xbf"):  # as utf-8-sig
                    line = raw[3:]
                if not _blank(line):
                    yield at, _json_record(line, path, at, by_byte=True)
                at += len(raw) + 1


def _blank(line: str | bytes) -> bool:
    """Whether a line holds only whitespace as ``str.strip`` sees it (Unicode spaces too, which
    the whole-file reader, reading text, skips), without decoding the lines that start as JSON."""
    stripped = line.strip()
    if isinstance(stripped, bytes) and stripped and stripped[0] >= 0x80:
        return not stripped.decode("utf-8", "replace").strip()
    return not stripped


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
        repeated = first_repeated(header)
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


def first_repeated(names: list[str]) -> str | None:
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
    repeated = first_repeated(names)
    if repeated is not None:
        raise UsageError(f"{path}: column {repeated!r} appears more than once")
    missing = [name for name in keep or () if name not in names]
    if missing:
        raise UsageError(f"{path} has no column {missing[0]!r} (columns: {names})")
    batches = file.iter_batches(batch_size=65536, columns=keep)
    yield from enumerate(itertools.chain.from_iterable(b.to_pylist() for b in batches), 1)


def parquet_fields(path: str, id_field: str) -> dict[str, str]:
    """Field types from the file's Arrow schema: the first row's Python values cannot tell
    float32 from float64, nor an empty list's element type, and an empty file has no row. A
    field is nullable (``str?``) when its column holds a null anywhere in the file."""
    file = _parquet_file(path)
    schema = file.schema_arrow
    if id_field not in schema.names:
        raise UsageError(f"{path} has no id column {id_field!r} (columns: {schema.names}); use --id-field")
    fields = {}
    for f in schema:
        if f.name != id_field:
            kind = _arrow_field_type(path, f.name, f.type)
            fields[f.name] = f"{kind}?" if _has_nulls(file, f.name) else kind
    return fields


def _has_nulls(file: Any, name: str) -> bool:
    """Whether column ``name`` of a parquet file holds a null: from the row groups' statistics
    where every one has them, else by reading the column."""
    meta = file.metadata
    index = next((i for i in range(meta.num_columns) if meta.schema.column(i).path == name), None)
    if index is not None:  # a flat column: its statistics count its nulls
        stats = [meta.row_group(g).column(index).statistics for g in range(meta.num_row_groups)]
        if all(s is not None and s.has_null_count for s in stats):
            return any(s.null_count for s in stats)
    return bool(file.read(columns=[name]).column(0).null_count)


def _arrow_field_type(path: str, name: str, arrow_type: Any) -> str:
    kind = field_type(arrow_type)
    if kind is not None:
        return kind
    hint = "drop the column, or pass --fields naming the columns to keep"
    raise UsageError(f"{path}: {unsupported(name, arrow_type)}; {hint}")


def parse_fields(spec: str | None) -> dict[str, str] | None:
    if not spec:
        return None
    fields = {}
    # A comma inside brackets separates a fixed shape's dimensions (`emb:float32[2,3]`), not fields.
    for item in re.split(r",(?![^\[]*\])", spec):
        name, sep, ty = item.partition(":")
        if not sep:
            raise UsageError(f"--fields wants name:type pairs, got {item!r}")
        fields[name.strip()] = ty.strip()
    return fields


# The coercion of an id column (``ids_as_text``): integer ids as their decimal text.
ID = "\x00id"


def ids_as_text(coerce: dict[str, dict[str, str]], id_field: str) -> None:
    """Makes every format's coercion write integer ids (JSON numbers, Parquet integer columns)
    as their decimal text, the id a store holds (``7`` is the id ``"7"``)."""
    for types in coerce.values():
        types[id_field] = ID


def needs_coercion_from_json(ty: str) -> bool:
    """Whether JSON values of a field of type ``ty`` need ``_coerce``: bytes come as base64
    strings, floats may come as the strings ``export`` writes for NaN and infinities."""
    base = ty.removesuffix("?")
    return base in ("bytes", "list[bytes]", "float64") or float_array(base) is not None


# The element types of float arrays, and their element's size in bytes.
FLOAT_SIZES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}

_ARRAY_TYPE = re.compile(r"(\w+)\[([\d, ]*)\]")


def float_array(ty: str) -> tuple[str, tuple[int, ...] | None] | None:
    """The element type and shape (None: 1-D of any length) of a float array type such as
    ``float16[]`` or ``float32[2,3]``; None for any other type."""
    match = _ARRAY_TYPE.fullmatch(ty)
    if match is None or match[1] not in FLOAT_SIZES:
        return None
    dims = match[2].strip()
    return match[1], tuple(int(d) for d in dims.split(",")) if dims else None


def canonical_nan(elem: str) -> int:
    """The bits of the NaN that ``float("nan")`` becomes in element type ``elem``: ``export``
    writes it as ``"nan"``, and every other NaN with its bits (`nan_text`)."""
    target = bfloat16() if elem == "bfloat16" else np.dtype(elem)
    return int(np.array([float("nan")]).astype(target).view(f"<u{FLOAT_SIZES[elem]}")[0])


def nan_text(bits: int, elem: str) -> str:
    """How ``export`` writes a NaN of element type ``elem`` whose bits are ``bits``: ``"nan"``,
    or, to keep its sign and payload, ``"nan:0x"`` and its bits in hex (4, 8 or 16 digits)."""
    if bits == canonical_nan(elem):
        return "nan"
    return f"nan:0x{bits:0{2 * FLOAT_SIZES[elem]}x}"


def _nan_bits(text: str, elem: str) -> int | None:
    """The bits of a NaN written as ``"nan:0x..."`` (`nan_text`) for element type ``elem``;
    None for any other text."""
    if not text.startswith("nan:"):
        return None
    digits = 2 * FLOAT_SIZES[elem]
    hex_digits = text[len("nan:0x") :]
    if not text.startswith("nan:0x") or len(hex_digits) != digits or not _is_hex(hex_digits):
        raise ValueError(f"a NaN of {elem} is written nan:0x and {digits} hex digits")
    bits = int(hex_digits, 16)
    exponent = {"float16": 0x7C00, "bfloat16": 0x7F80, "float32": 0x7F80_0000, "float64": 0x7FF0 << 48}[elem]
    sign = 1 << (8 * FLOAT_SIZES[elem] - 1)
    if bits & exponent != exponent or not bits & ~(exponent | sign):
        raise ValueError(f"{text} is not the bits of a NaN of {elem}")
    return bits


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdefABCDEF" for c in text)


def coerce_record(record: dict[str, Any], types: dict[str, str], id_field: str) -> None:
    for name, ty in types.items():
        if name in record:
            try:
                record[name] = _coerce(record[name], ty, record.get(id_field), name)
            except FieldTypeError:
                raise  # the writer's own error for an array (`_float_items`), which names both
            except ValueError as exc:
                raise FieldTypeError(
                    f"doc {record.get(id_field)!r}: field {name!r} is {ty}, got {_clip(record[name])} ({exc})"
                ) from None


def _coerce(value: Any, ty: str, doc_id: Any = None, name: str = "") -> Any:
    """Values from text formats (and from JSON: base64 bytes, non-finite floats written as
    strings by ``export``) into their field's type. A ValueError says briefly what is wrong.
    A nullable field's JSON null is None, and so is its empty CSV/TSV cell unless it holds
    text (an empty ``str?`` or ``bytes?`` cell is the empty value). ``doc_id`` and ``name``
    name the document and field in the errors of a float array holding NaN bits."""
    if ty == ID:
        return str(value) if type(value) is int else value
    if ty.endswith("?"):
        if value is None or (value == "" and ty not in ("str?", "bytes?")):
            return None
        ty = ty[:-1]
    floats = float_array(ty)
    if isinstance(value, list) and floats is not None:
        return _float_items(value, *floats, doc_id, name)
    if isinstance(value, list) and ty == "list[bytes]":
        return [_coerce(v, "bytes") for v in value]
    if not isinstance(value, str) or ty == "str":
        return value
    if ty == "bool":
        flag = {"true": True, "false": False, "1": True, "0": False}.get(value.strip().lower())
        if flag is None:
            raise ValueError("not a bool (true, false, 1 or 0)")
        return flag
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
        bits = _nan_bits(value, "float64")
        return _float(value) if bits is None else struct.unpack("<d", struct.pack("<Q", bits))[0]
    if ty.endswith("]") or ty.startswith("list["):  # a list, or an array of any shape
        try:
            items = json.loads(value)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise ValueError(f"not a JSON array: {exc}") from None
        if not isinstance(items, list):
            raise ValueError("not a JSON array")
        return _coerce(items, ty, doc_id, name)
    return value


def _float_items(
    items: list[Any], elem: str, shape: tuple[int, ...] | None, doc_id: Any, name: str
) -> list[Any] | np.ndarray:
    """A float array's (nested) list with its strings read: ``"nan"``, ``"inf"``, ``"-inf"``
    (and whatever else ``float()`` reads) as floats, which the writer converts; when a NaN is
    given by its bits (``"nan:0x..."``), the array itself, of the field's type, holding them."""
    given: list[tuple[tuple[int, ...], int]] = []  # (where, bits) of each NaN given by its bits

    def read(value: Any, at: tuple[int, ...]) -> Any:
        if isinstance(value, list):
            return [read(v, (*at, i)) for i, v in enumerate(value)]
        if not isinstance(value, str):
            return value
        bits = _nan_bits(value, elem)
        if bits is None:
            return _float(value)
        given.append((at, bits))
        return float("nan")

    numbers = read(items, ())
    if not given:
        return numbers  # type: ignore[no-any-return]
    # The writer's own conversion (and its checks), then the NaNs' bits, which no float
    # conversion is sure to keep (float32's signalling NaNs become quiet in float64).
    array = as_array(numbers, elem, doc_id, name, shape)
    flat = array.reshape(-1).view(f"<u{FLOAT_SIZES[elem]}")
    for at, bits in given:
        flat[np.ravel_multi_index(at, array.shape) if len(at) == array.ndim else at[0]] = bits
    return array


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError("not a number") from None


def _clip(value: Any, width: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def where(path: str, fmt: str, position: int, by_byte: bool = False) -> str:
    if by_byte:
        return f"{path}: the line at byte {position}"
    if fmt == "json":
        return f"{path}: record {position}"
    return f"{path}: row {position}" if fmt == "parquet" else f"{path}:{position}"


# What a damaged gzip stream raises partway through a file: a bad CRC or length, or data after
# the last member (BadGzipFile, an OSError, which would otherwise reach the user without the
# file's name), undecodable deflate data (zlib.error), an end before the end (EOFError).
GZIP_ERRORS = (gzip.BadGzipFile, zlib.error, EOFError)


def unreadable(path: str, fmt: str, position: int, exc: BaseException) -> str:
    """The message for an input that breaks off while being read: the records up to line
    ``position`` were read (text is read ahead in chunks: the damage lies somewhere after)."""
    where = f"after line {position}" if position else "before its first record"
    what = "damaged gzip data: " if isinstance(exc, GZIP_ERRORS) else ""
    return f"{path}: cannot read it as {fmt} {where}: {what}{exc}"
