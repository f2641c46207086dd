"""An independent reader of the docstore file format, written from docs/format.md alone.

It parses stores that docstore writes and checks every document, key and position against what
docstore itself returns, so these tests prove that the format document is true. Section numbers
(§) refer to docs/format.md.
"""

from __future__ import annotations

import bisect
import json
import keyword
import math
import random
import re
import struct
import time
import typing
from collections.abc import Iterator
from pathlib import Path

import lz4.block
import numpy as np
import pytest
import xxhash  # xxh3-64 (§1): checksums and, from version 2, the document checks (§6.3)

import docstore

from ..conftest import ROOT

FORMAT_MD = ROOT / "docs" / "format.md"

# §3 header: magic, version, header size, count, raw bytes, section count, level, flags (version
# 3; reserved before), 2 reserved, common prefix, 20 reserved. The section table follows at 64, the
# checksum is at 504.
HEADER = struct.Struct("<8sIIQQIBB2xI20x")
TABLE_AT, ENTRY, CHECKSUM_AT, HEADER_SIZE = 64, struct.Struct("<QQQ"), 504, 512
FLAGS_AT = 37
# §3: flag bit 0 of version 3, set in a collection's global id index only (§13.2).
FLAG_SHARD_LOCATIONS = 0x01
SECTIONS = (
    "schema",
    "dictionary",
    "data",
    "doc offsets",
    "keys",
    "key offsets",
    "key index",
    "key fences",
    "key ranks",
    "metadata",  # §4.10: version 5 only, the tenth entry
)
# §4.7 key index entries: prefix, position, key length, and in version 3 the blob offset and
# length; a block of entries (one fence, §4.8) is one 4 KiB page.
KEY_ENTRIES = {1: struct.Struct("<QII"), 2: struct.Struct("<QII"), 3: struct.Struct("<QIIQQ")}
KEY_ENTRIES[4] = KEY_ENTRIES[3]  # §10: version 4 is version 3 with more field types
KEY_ENTRIES[5] = KEY_ENTRIES[4]  # §10: version 5 is version 4 with the metadata section
MAX_METADATA, MAX_METADATA_DEPTH = 4 * 1024 * 1024, 127  # §4.10
KEY_INDEX_ALIGN = PAGE = 4096
# §4.1 type codes.
SCALAR_TYPES = {1: "str", 2: "bytes", 3: "int64", 4: "float64"}
ARRAY_TYPES = {
    16: ("int8", "<i1"),
    17: ("uint8", "<u1"),
    18: ("int16", "<i2"),
    19: ("uint16", "<u2"),
    20: ("int32", "<i4"),
    21: ("uint32", "<u4"),
    22: ("int64", "<i8"),
    23: ("uint64", "<u8"),
    24: ("float32", "<f4"),
    25: ("float64", "<f8"),
}
# §4.1: the types version 4 added, and bit 7 of a type code (nullable, a presence byte first).
V4_SCALAR_TYPES = {5: "bool", 6: "list[str]", 7: "list[bytes]"}
V4_ARRAY_TYPES = {26: ("float16", "<f2"), 27: ("bfloat16", "<u2")}  # bfloat16: the high half of a binary32
NULLABLE = 0x80
FIXED_SHAPE = 0x40  # bit 6 of an array code: a fixed shape, its u8 ndim and u32 dims after the name
MAX_COMPRESSED_RAW_LEN = 0x7E000000
# §4.1 and §9: the most fields a schema has, its longest name, its longest section; §4.2: the
# longest dictionary.
MAX_FIELDS, MAX_NAME_LEN, MAX_DICTIONARY = 1024, 255, 65536
MAX_SCHEMA_BYTES = 2 + MAX_FIELDS * (3 + MAX_NAME_LEN + 1 + 4 * 8)


class SpecError(Exception):
    """The file breaks a rule of docs/format.md."""


class SpecUnsupportedVersion(SpecError):
    pass


def xxh3(data: bytes) -> int:
    return xxhash.xxh3_64_intdigest(data)


def document_check(key: bytes, body: bytes, position: int | None = None) -> int:
    """§6.3: the low 32 bits of xxh3-64 of the key XOR xxh3-64 of the body, XOR (version 3, a
    `position` given) xxh3-64 of the position as 8 little-endian bytes."""
    bound = 0 if position is None else xxh3(struct.pack("<Q", position))
    return (xxh3(key) ^ xxh3(body) ^ bound) & 0xFFFFFFFF


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """§5.1: unsigned LEB128, at most 10 bytes, the 10th at most 1."""
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise SpecError("truncated varint")
        byte = buf[pos]
        pos += 1
        if shift == 63 and byte > 1:
            raise SpecError("varint overflows 64 bits")
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise SpecError("varint overflows 64 bits")


def unzigzag(u: int) -> int:
    """§5.2."""
    return (u >> 1) ^ -(u & 1)


def key_prefix(tail: bytes) -> int:
    """§4.7: the first 8 bytes of `tail`, zero-padded, as a big-endian number."""
    return int.from_bytes(tail[:8].ljust(8, b"\0"), "big")


def lz4_block_decode(payload: bytes, raw_len: int, dictionary: bytes) -> bytes:
    """§6.2, the self-contained description of an lz4 block with the dictionary as history."""
    out = bytearray(dictionary)
    i, n = 0, len(payload)

    def next_byte() -> int:
        nonlocal i
        if i >= n:
            raise SpecError("lz4 block ends inside a sequence")
        i += 1
        return payload[i - 1]

    def length(value: int) -> int:
        if value == 15:
            while True:
                byte = next_byte()
                value += byte
                if byte != 255:
                    break
        return value

    while True:
        token = next_byte()
        literals = length(token >> 4)
        if i + literals > n:
            raise SpecError("literals run past the block")
        out += payload[i : i + literals]
        i += literals
        if i == n:
            break
        offset = next_byte() | next_byte() << 8
        if offset == 0 or offset > len(out):
            raise SpecError("bad match offset")
        match = length(token & 15) + 4
        if len(out) + match - len(dictionary) > raw_len:
            raise SpecError("lz4 block decodes to more than its raw length")
        start = len(out) - offset
        if offset >= match:
            out += out[start : start + match]
        else:
            for k in range(match):
                out.append(out[start + k])
    result = bytes(out[len(dictionary) :])
    if len(result) != raw_len:
        raise SpecError("lz4 block decodes to the wrong length")
    return result


class SpecStore:
    """A reader of format versions 1, 2 and 3 built only from docs/format.md.

    Every rule it applies raises SpecError when broken (SpecUnsupportedVersion for a version other
    than 1, 2 and 3, §10), whatever the bytes: it is also run on damaged stores.
    """

    def __init__(self, buf: bytes, *, check_checksums: bool = True) -> None:
        self.buf = buf
        # §8 open() checks, in the documented order.
        if len(buf) < 12 or buf[:8] != b"DOCSTORE":
            raise SpecError("bad magic")
        (self.version,) = struct.unpack_from("<I", buf, 8)
        if self.version not in (1, 2, 3, 4, 5):  # §10: before the length, the checksum and the layout
            raise SpecUnsupportedVersion(self.version)
        if len(buf) < HEADER_SIZE:
            raise SpecError("truncated header")
        (
            _magic,
            _version,
            header_size,
            self.count,
            self.raw_bytes,
            section_count,
            self.level,
            flags,
            self.common_prefix,
        ) = HEADER.unpack_from(buf, 0)
        (self.header_checksum,) = struct.unpack_from("<Q", buf, CHECKSUM_AT)
        if check_checksums and xxh3(buf[:CHECKSUM_AT]) != self.header_checksum:
            raise SpecError("header checksum mismatch")
        # §3: nine sections, ten from version 5 (the metadata section, §4.10).
        present = 10 if self.version >= 5 else 9
        if header_size != HEADER_SIZE or section_count != present:
            raise SpecError("unexpected header layout")
        # §3 byte 37 and §8 check 5b: flags in version 3, a reserved byte (not read) before.
        self.flags = flags if self.version >= 3 else 0
        if self.flags & ~FLAG_SHARD_LOCATIONS:
            raise SpecError(f"unknown header flags {self.flags:#04x}")
        # §2, §4.7: E bytes an entry, B entries a block (one page of the key index).
        self.key_entry = KEY_ENTRIES[self.version]
        self.entry_size = self.key_entry.size
        self.block = PAGE // self.entry_size
        self.entries = [ENTRY.unpack_from(buf, TABLE_AT + 24 * i) for i in range(present)]
        end = HEADER_SIZE
        for name, (offset, length, _) in zip(SECTIONS, self.entries):
            align = KEY_INDEX_ALIGN if name == "key index" else 8
            if offset < end or offset % align or offset + length > len(buf):
                raise SpecError(f"{name} section lies outside the file")
            end = offset + length
        self.sections = {
            name: buf[offset : offset + length] for name, (offset, length, _) in zip(SECTIONS, self.entries)
        }
        read_whole = [("schema", MAX_SCHEMA_BYTES), ("dictionary", MAX_DICTIONARY)]
        read_whole += [("metadata", MAX_METADATA)] if "metadata" in self.sections else []
        for name, most in read_whole:
            if len(self.sections[name]) > most:
                raise SpecError(f"{name} section is longer than any store has")
        if check_checksums:
            for name, _ in read_whole:
                if xxh3(self.sections[name]) != self.checksum(name):
                    raise SpecError(f"{name} checksum mismatch")
        # §4.10: one JSON object, UTF-8, no member name repeated in any object.
        self.metadata: dict[str, object] = {}
        if "metadata" in self.sections:
            self.metadata = self._parse_metadata(self.sections["metadata"])
        self.shapes: dict[str, tuple[int, ...]] = {}  # §4.1: the fixed shapes, by field
        self.fields = self._parse_schema(self.sections["schema"], self.shapes)
        # §4.1, §8 check 9: the version 4 types only in a version 4 store.
        if self.version < 4 and any(
            code & (NULLABLE | FIXED_SHAPE) or code in V4_SCALAR_TYPES or code in V4_ARRAY_TYPES
            for _, code in self.fields
        ):
            raise SpecError(
                f"bad schema: a version {self.version} store with a field of a type version 4 added"
            )
        # §8 check 9b: flag bit 0 belongs to a collection's global id index, which has no fields.
        if self.flags & FLAG_SHARD_LOCATIONS and self.fields:
            raise SpecError("header flag 0x01 (a collection's global index) on a store with fields")
        n = self.count
        if n >= 2**32 - 1:
            raise SpecError("document count out of range")
        expected = {
            "doc offsets": (n + 1) * 8,
            "key offsets": (n + 1) * 8,
            "key index": n * self.entry_size,
            "key fences": -(-n // self.block) * 8,
            "key ranks": n * 4,
        }
        for name, size in expected.items():
            if len(self.sections[name]) != size:
                raise SpecError(f"{name} section has the wrong size")
        self.doc_offsets = struct.unpack(f"<{n + 1}Q", self.sections["doc offsets"])
        self.key_offsets = struct.unpack(f"<{n + 1}Q", self.sections["key offsets"])
        index = list(self.key_entry.iter_unpack(self.sections["key index"]))
        self.prefixes = tuple(e[0] for e in index)
        self.key_positions = tuple(e[1] for e in index)
        self.key_lens = tuple(e[2] for e in index)
        # §4.7, version 3: where each rank's document's blob lies (in this file's data section,
        # or, flag bit 0, in a collection's shard, §13.2). Versions 1 and 2 do not hold it.
        self.blob_locations = tuple((e[3], e[4]) for e in index) if self.version >= 3 else None
        self.fences = struct.unpack(f"<{len(self.sections['key fences']) // 8}Q", self.sections["key fences"])
        self.key_ranks = struct.unpack(f"<{n}I", self.sections["key ranks"])
        if self.doc_offsets[n] != len(self.sections["data"]) or self.key_offsets[n] != len(
            self.sections["keys"]
        ):
            raise SpecError("index does not match its data")
        if n > 0 and len(self.key_of_rank(0)) < self.common_prefix:  # bounds-checked by key_of_rank
            raise SpecError("common key prefix longer than the first key")
        self.dictionary = self.sections["dictionary"]

    @property
    def checked(self) -> bool:
        """Version 2 and 3 blobs carry document checks (§6.3) that every lookup verifies (§7.4)."""
        return self.version >= 2

    @property
    def binds_position(self) -> bool:
        """Version 3 checks bind the document's position too (§6.3)."""
        return self.version >= 3

    @property
    def locates_blobs(self) -> bool:
        """§4.7, §7.1: version 3 entries locate their blobs in this file's data section, except
        in a collection's global id index (flag bit 0, §13.2)."""
        return self.version >= 3 and not self.flags & FLAG_SHARD_LOCATIONS

    def checksum(self, name: str) -> int:
        return self.entries[SECTIONS.index(name)][2]

    @staticmethod
    def _parse_metadata(buf: bytes) -> dict[str, object]:
        def unique(pairs: list[tuple[str, object]]) -> dict[str, object]:
            names = [name for name, _ in pairs]
            if len(set(names)) != len(names):
                raise SpecError("bad metadata: member name repeated in an object")
            return dict(pairs)

        try:
            text = buf.decode("utf-8")
        except UnicodeDecodeError:
            raise SpecError("bad metadata: not UTF-8") from None

        def no_constant(name: str) -> object:
            raise SpecError(f"bad metadata: {name} is not JSON")

        try:
            value = json.loads(text, object_pairs_hook=unique, parse_constant=no_constant)
        except ValueError as err:
            raise SpecError(f"bad metadata: {err}") from None
        if not isinstance(value, dict):
            raise SpecError("bad metadata: not a JSON object")

        def depth(v: object) -> int:
            inner = v.values() if isinstance(v, dict) else v if isinstance(v, list) else None
            return 0 if inner is None else 1 + max(map(depth, inner), default=0)

        if depth(value) > MAX_METADATA_DEPTH:
            raise SpecError("bad metadata: nested deeper than 127")

        def texts(v: object) -> Iterator[str]:
            if isinstance(v, str):
                yield v
            elif isinstance(v, dict):
                for name, item in v.items():
                    yield name
                    yield from texts(item)
            elif isinstance(v, list):
                for item in v:
                    yield from texts(item)

        if any(re.search("[\ud800-\udfff]", text) for text in texts(value)):
            raise SpecError("bad metadata: a lone surrogate")
        return value

    @staticmethod
    def _parse_schema(buf: bytes, shapes: dict[str, tuple[int, ...]]) -> list[tuple[str, int]]:
        """§4.1, with the field name rules; the fixed shapes go to ``shapes``."""
        try:
            (count,) = struct.unpack_from("<H", buf, 0)
            if count > MAX_FIELDS:
                raise SpecError(f"bad schema: {count} fields")
            pos, fields = 2, []
            for _ in range(count):
                code, name_len = struct.unpack_from("<BH", buf, pos)
                pos += 3
                base = code & ~(NULLABLE | FIXED_SHAPE)
                arrays = ARRAY_TYPES | V4_ARRAY_TYPES
                if all(base not in types for types in (SCALAR_TYPES, arrays, V4_SCALAR_TYPES)) or (
                    code & FIXED_SHAPE and base not in arrays
                ):
                    raise SpecError(f"unknown field type code {code}")
                if pos + name_len > len(buf):
                    raise SpecError("truncated schema")
                name = buf[pos : pos + name_len].decode("ascii")
                pos += name_len
                if (
                    not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,254}", name)
                    or keyword.iskeyword(name)
                    or name == "doc_id"
                    or name in dict(fields)
                ):
                    raise SpecError(f"bad schema: field name {name!r}")
                if code & FIXED_SHAPE:  # u8 ndim (1 to 8), then each dimension (>= 1) as u32
                    (ndim,) = struct.unpack_from("<B", buf, pos)
                    shape = struct.unpack_from(f"<{ndim}I", buf, pos + 1)
                    pos += 1 + 4 * ndim
                    if not 1 <= ndim <= 8 or 0 in shape or math.prod(shape) * 8 > 2**32 - 1:
                        raise SpecError(f"bad schema: field {name!r}: shape {shape}")
                    shapes[name] = shape
                fields.append((name, code))
        except (struct.error, UnicodeDecodeError) as e:
            raise SpecError(f"truncated schema or bad field name: {e}") from None
        if pos != len(buf):
            raise SpecError("trailing bytes after schema")
        return fields

    def type_names(self) -> dict[str, str]:
        scalars, arrays = SCALAR_TYPES | V4_SCALAR_TYPES, ARRAY_TYPES | V4_ARRAY_TYPES
        names = {}
        for name, code in self.fields:
            base = code & ~(NULLABLE | FIXED_SHAPE)
            shape = ",".join(map(str, self.shapes.get(name, ())))
            names[name] = scalars[base] if base in scalars else f"{arrays[base][0]}[{shape}]"
            names[name] += "?" if code & NULLABLE else ""
        return names

    # §7.2 by position; every slice bounds-checked (§8 "Each lookup")
    def key_of_rank(self, rank: int) -> bytes:
        if not 0 <= rank < self.count:
            raise SpecError("key rank out of range")
        start, end = self.key_offsets[rank], self.key_offsets[rank + 1]
        if not start <= end <= len(self.sections["keys"]):
            raise SpecError("key offsets out of bounds")
        return self.sections["keys"][start:end]

    def position_of_rank(self, rank: int) -> int:
        """§4.7: the position held by key index entry `rank`."""
        pos = self.key_positions[rank]
        if pos >= self.count:
            raise SpecError("key index position out of range")
        return pos

    def key_bytes_at(self, pos: int) -> bytes:
        if not 0 <= pos < self.count:
            raise IndexError(pos)
        rank = self.key_ranks[pos]
        if rank >= self.count:
            raise SpecError("key rank out of range")
        return self.key_of_rank(rank)

    def key_at(self, pos: int) -> str:
        try:
            return self.key_bytes_at(pos).decode("utf-8")
        except UnicodeDecodeError:
            raise SpecError("non-UTF-8 key") from None

    def blob(self, pos: int) -> bytes:
        """§4.4: the whole blob of position `pos` by its doc offsets, its check included."""
        if not 0 <= pos < self.count:
            raise IndexError(pos)
        start, end = self.doc_offsets[pos], self.doc_offsets[pos + 1]
        if not start <= end <= len(self.sections["data"]):
            raise SpecError("doc offsets out of bounds")
        return self.sections["data"][start:end]

    def located_blob(self, location: tuple[int, int]) -> bytes:
        """§7.1, §8: the blob at a version 3 entry's (offset, length), within the data section."""
        offset, length = location
        if offset + length > len(self.sections["data"]):
            raise SpecError("key index blob location out of bounds")
        return self.sections["data"][offset : offset + length]

    def blob_of_rank(self, rank: int) -> bytes:
        """§7.1, the document of a rank found: in version 3 (flag bit 0 clear) the blob where its
        entry locates it; otherwise blob `position[rank]` through the doc offsets (§7.2)."""
        if self.locates_blobs:
            return self.located_blob(self.blob_locations[rank])
        return self.blob(self.position_of_rank(rank))

    def checked_body(self, blob: bytes, key: bytes, pos: int) -> bytes:
        """§6.1 and §6.3: the blob after its check, once the check holds for `key` (and, version
        3, position `pos`); the whole blob in version 1."""
        if not self.checked:
            return blob
        if len(blob) < 5:
            raise SpecError("blob shorter than a check and a header")
        (check,) = struct.unpack_from("<I", blob, 0)
        if document_check(key, blob[4:], pos if self.binds_position else None) != check:
            raise SpecError("document check mismatch")
        return blob[4:]

    def body(self, pos: int, key: bytes | None = None) -> bytes:
        """The body of the document at `pos` (§7.2), its check verified against `key` (§7.4: by
        position, the key of that position, the default)."""
        blob = self.blob(pos)
        if self.checked and key is None:
            key = self.key_bytes_at(pos)
        return self.checked_body(blob, key, pos)

    def body_of_rank(self, rank: int, q: bytes) -> bytes:
        """§7.1 and §7.4: the body of the document the key index entry `rank` finds for `q`, its
        check verified with `q` as the key and (version 3) the entry's position."""
        pos = self.position_of_rank(rank)
        return self.checked_body(self.blob_of_rank(rank), q, pos)

    @staticmethod
    def parse_body(body: bytes) -> tuple[int, bool, bytes]:
        """§6.1: (raw_len, compressed, payload) of a body."""
        header, start = read_varint(body, 0)
        return header >> 1, bool(header & 1), body[start:]

    def blob_header(self, pos: int, key: bytes | None = None) -> tuple[int, bool, bytes]:
        return self.parse_body(self.body(pos, key))

    def decode_body(self, body: bytes) -> bytes:
        """§6.1, §6.2: the raw record of a body."""
        raw_len, compressed, payload = self.parse_body(body)
        if not compressed:
            if len(payload) != raw_len:
                raise SpecError("stored record length does not match its header")
            return payload
        if raw_len > MAX_COMPRESSED_RAW_LEN or raw_len > len(payload) * 255:
            raise SpecError("compressed record claims an impossible length")
        try:
            raw = lz4.block.decompress(payload, uncompressed_size=raw_len, dict=self.dictionary)
        except lz4.block.LZ4BlockError:
            raise SpecError("lz4 block does not decode") from None
        if len(raw) != raw_len:
            raise SpecError("lz4 block decodes to the wrong length")
        # The hand-written decoder of §6.2 must agree with liblz4.
        assert lz4_block_decode(payload, raw_len, self.dictionary) == raw
        return raw

    def raw_record(self, pos: int, key: bytes | None = None) -> bytes:
        return self.decode_body(self.body(pos, key))

    def parse_record(self, raw: bytes) -> dict[str, object]:
        """§5: the fields of a raw record."""
        at, values = 0, {}

        def take(n: int) -> bytes:
            nonlocal at
            if at + n > len(raw):
                raise SpecError("field runs past the end of its record")
            at += n
            return raw[at - n : at]

        for name, code in self.fields:
            if code & NULLABLE:  # §5: a presence byte, 00 (None) or 01 (a value follows)
                present = take(1)[0]
                if present > 1:
                    raise SpecError(f"the presence byte of nullable field {name!r} is neither 0 nor 1")
                if not present:
                    values[name] = None
                    continue
                code &= ~NULLABLE
            if code == 5:
                flag = take(1)[0]
                if flag > 1:
                    raise SpecError("bool field is neither 0 nor 1")
                values[name] = bool(flag)
            elif code in (6, 7):
                count, at = read_varint(raw, at)
                items = []
                for _ in range(count):
                    n, at = read_varint(raw, at)
                    items.append(take(n))
                try:
                    values[name] = [item.decode("utf-8") for item in items] if code == 6 else items
                except UnicodeDecodeError:
                    raise SpecError("list[str] item is not UTF-8") from None
            elif code in (1, 2):
                n, at = read_varint(raw, at)
                data = take(n)
                try:
                    values[name] = data.decode("utf-8") if code == 1 else data
                except UnicodeDecodeError:
                    raise SpecError("non-UTF-8 str field") from None
            elif code == 3:
                u, at = read_varint(raw, at)
                values[name] = unzigzag(u)
            elif code == 4:
                (values[name],) = struct.unpack("<d", take(8))
            else:
                dtype = np.dtype((ARRAY_TYPES | V4_ARRAY_TYPES)[code & ~FIXED_SHAPE][1])
                shape = self.shapes.get(name)
                if shape is None:
                    n, at = read_varint(raw, at)
                else:  # §5: a fixed shape's elements, no count
                    n = math.prod(shape)
                # Byte planes: byte b of element i is at b * n + i.
                planes = np.frombuffer(take(n * dtype.itemsize), dtype=np.uint8)
                values[name] = planes.reshape(dtype.itemsize, n).T.copy().view(dtype).reshape(n)
                if code & ~FIXED_SHAPE == 27:  # bfloat16 bits as the float32 they are the high half of
                    values[name] = (values[name].astype(np.uint32) << 16).view(np.float32)
                if shape is not None:
                    values[name] = values[name].reshape(shape)
        if at != len(raw):
            raise SpecError("trailing bytes after the last field of a record")
        return values

    def record(self, pos: int, key: bytes | None = None) -> dict[str, object]:
        """§7.2: the fields of the document at `pos` (its check verified against `key`, §7.4)."""
        return self.parse_record(self.raw_record(pos, key))

    def at(self, pos: int) -> tuple[str, dict[str, object]]:
        """§7.2 and §7.4: the key and the fields of the document at `pos`."""
        key = self.key_at(pos)
        return key, self.record(pos, key.encode("utf-8"))

    # §7.1 by key
    def find_rank(self, q: bytes) -> int | None:
        """§7.1 steps 1-7: the rank of `q` as the key index finds it, or None ("absent")."""
        n, c, block_size = self.count, self.common_prefix, self.block
        if n == 0:
            return None
        if len(q) < c or q[:c] != self.key_of_rank(0)[:c]:
            return None
        target = key_prefix(q[c:])
        # The block before the first fence >= target; the first candidate is in it or is the
        # first entry of the next block.
        block = max(bisect.bisect_left(self.fences, target) - 1, 0)
        start = block * block_size
        lo = bisect.bisect_left(self.prefixes, target, start, min(start + block_size, n))
        # Keys of at most c + 8 bytes come first in the run, shortest first: prefix and length
        # are the whole key.
        while lo < n and self.prefixes[lo] == target and self.key_lens[lo] <= c + 8:
            if self.key_lens[lo] == len(q):
                return lo
            lo += 1
        if len(q) <= c + 8:
            return None
        hi = lo
        while hi < n and self.prefixes[hi] == target:
            hi += 1
        rank, found = self.search_keys(q, lo, hi)
        return rank if found else None

    def search_keys(self, q: bytes, lo: int = 0, hi: int | None = None) -> tuple[int, bool]:
        """Binary search over whole keys (§4.5, §4.6) of ranks lo..hi-1, stopping at the first key
        equal to `q`: (its rank, True), or (the rank where `q` would be, False)."""
        hi = self.count if hi is None else hi
        while lo < hi:
            mid = (lo + hi) // 2
            key = self.key_of_rank(mid)
            if key < q:
                lo = mid + 1
            elif key > q:
                hi = mid
            else:
                return mid, True
        return lo, False

    def confirm_absent(self, q: bytes) -> None:
        """§7.4, an "absent" answer: the whole keys miss `q` too, and its neighbours are intact,
        each read from its key index entry as §7.1 reads a found one."""
        if not self.checked or self.count == 0:
            return
        rank, found = self.search_keys(q)
        if found:
            raise SpecError("the key index misses a key the keys hold")
        for r in (rank - 1, rank):
            if 0 <= r < self.count:
                self.body_of_rank(r, self.key_of_rank(r))

    def position(self, key: str) -> int | None:
        """§7.1 (and the checks of §7.4 from version 2): the position of `key`, or None."""
        q = key.encode("utf-8")
        rank = self.find_rank(q)
        if rank is None:
            self.confirm_absent(q)
            return None
        pos = self.position_of_rank(rank)
        if self.checked:
            self.body_of_rank(rank, q)  # the document found passes its check with `q` (and pos)
        return pos

    def get(self, key: str) -> dict[str, object] | None:
        """§7.1 (and the checks of §7.4 from version 2): the fields of `key`, or None."""
        q = key.encode("utf-8")
        rank = self.find_rank(q)
        if rank is None:
            self.confirm_absent(q)
            return None
        return self.parse_record(self.decode_body(self.body_of_rank(rank, q)))

    # §8 verify()
    def verify(self) -> None:
        covered = HEADER_SIZE
        for offset, length, _ in self.entries:
            if any(self.buf[covered:offset]):
                raise SpecError("non-zero padding between sections")
            covered = offset + length
        if covered != len(self.buf):
            raise SpecError("trailing bytes after the last section")
        for name in self.sections:
            if xxh3(self.sections[name]) != self.checksum(name):
                raise SpecError(f"{name} checksum mismatch")
        keys = [self.key_of_rank(r) for r in range(self.count)]
        c = self.common_prefix
        for r, key in enumerate(keys):
            if not key:
                raise SpecError("empty key")
            try:
                key.decode("utf-8")
            except UnicodeDecodeError:
                raise SpecError("non-UTF-8 key") from None
            if r + 1 < len(keys) and key >= keys[r + 1]:
                raise SpecError("keys are not sorted and unique")
            if (
                len(key) < c
                or key[:c] != keys[0][:c]
                or self.prefixes[r] != key_prefix(key[c:])
                or self.key_lens[r] != len(key)
            ):
                raise SpecError("key index does not match the keys")
            if r % self.block == 0 and self.fences[r // self.block] != self.prefixes[r]:
                raise SpecError("key fences do not match the key index")
            pos = self.key_positions[r]
            if pos >= self.count or self.key_ranks[pos] != r:
                raise SpecError("key positions and ranks disagree")
            if self.locates_blobs:
                start, end = self.doc_offsets[pos], self.doc_offsets[pos + 1]
                if self.blob_locations[r] != (start, end - start):
                    raise SpecError("key index blob locations do not match the doc offsets")
        for pos in range(self.count):
            # Versions 2 and 3: each blob passes its check with the key of its position (and, 3,
            # the position); every blob and record decodes.
            self.record(pos)


# ---------------------------------------------------------------------------------------------
# Helpers


def longest_common_prefix(keys: list[bytes]) -> int:
    if not keys:
        return 0
    lo, hi = min(keys), max(keys)
    n = 0
    while n < min(len(lo), len(hi)) and lo[n] == hi[n]:
        n += 1
    return n


def same_value(a: object, b: object) -> bool:
    # docstore reads bfloat16[] as ml_dtypes' bfloat16, the spec reader as float32: same values.
    a, b = (
        v.astype(np.float32) if isinstance(v, np.ndarray) and v.dtype.name == "bfloat16" else v
        for v in (a, b)
    )
    if isinstance(a, list) or isinstance(b, list):
        return type(a) is type(b) and len(a) == len(b) and all(map(same_value, a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and a.tobytes() == b.tobytes()
        )
    if isinstance(a, float) or isinstance(b, float):
        return type(a) is type(b) and struct.pack("<d", a) == struct.pack("<d", b)  # NaN, -0.0
    return type(a) is type(b) and a == b


def check_against_docstore(path: Path, *, level: int | None = None, version: int | None = None) -> SpecStore:
    """Parses `path` with the spec reader and compares everything with docstore's answers."""
    buf = path.read_bytes()
    spec = SpecStore(buf)
    spec.verify()
    store = docstore.open(path)
    store.verify()

    # Header (§3) and schema (§4.1).
    assert spec.count == len(store)
    info = store.info()
    assert spec.version == info["format_version"] == (docstore.FORMAT_VERSION if version is None else version)
    assert info["checked_reads"] == spec.checked == (spec.version >= 2)  # §7.4
    assert spec.flags == 0  # §3: a store, not a collection's global id index
    assert (spec.entry_size, spec.block) == ((32, 128) if spec.version >= 3 else (16, 256))  # §2
    assert spec.raw_bytes == info["raw_bytes"]
    assert len(buf) == info["stored_bytes"]
    assert spec.header_checksum == store.fingerprint  # §3
    if level is not None:
        assert spec.level == level
    assert spec.type_names() == store.fields
    assert list(spec.type_names()) == list(store.fields)
    assert spec.metadata == store.metadata  # §4.10: {} without the section
    assert len(spec.dictionary) <= 65536

    # §11: the writer puts the schema at 512 and pads minimally.
    assert spec.entries[0][0] == HEADER_SIZE
    end = HEADER_SIZE
    for name, (offset, length, _) in zip(SECTIONS, spec.entries):
        align = KEY_INDEX_ALIGN if name == "key index" else 8
        assert offset == end + (-end % align)
        end = offset + length

    # Keys (§4.5-4.9).
    keys = [spec.key_of_rank(r) for r in range(spec.count)]
    assert keys == sorted(keys)
    assert spec.common_prefix == longest_common_prefix(keys)
    assert spec.key_offsets[0] == 0 and spec.doc_offsets[0] == 0
    assert sorted(spec.key_positions) == list(range(spec.count))
    assert spec.fences == spec.prefixes[:: spec.block]  # §4.8
    if spec.version >= 3:  # §4.7: each entry locates the blob of its position
        assert spec.blob_locations == tuple(
            (spec.doc_offsets[p], spec.doc_offsets[p + 1] - spec.doc_offsets[p]) for p in spec.key_positions
        )

    # By position (§7.2): key, record, and the raw record lengths summing to raw bytes.
    assert [spec.key_at(p) for p in range(spec.count)] == list(store)
    raw_total = 0
    for pos in range(spec.count):
        blob = spec.blob(pos)
        if spec.checked:  # §6.1, §6.3: a u32 check in front of the body, for the key of the position
            key = spec.key_bytes_at(pos)
            check = document_check(key, blob[4:], pos if spec.version >= 3 else None)
            assert len(blob) >= 5 and blob[:4] == struct.pack("<I", check)
            assert spec.body(pos) == blob[4:]
            if spec.version >= 3:  # the position is in the check: not the check of another position
                assert blob[:4] != struct.pack("<I", document_check(key, blob[4:], pos + 1))
        else:
            assert spec.body(pos) == blob
        raw_total += spec.blob_header(pos)[0]
        doc = store.at(pos)
        key, values = spec.at(pos)
        assert doc.doc_id == key
        assert list(values) == list(doc._fields[1:])
        for name, value in values.items():
            assert same_value(value, getattr(doc, name)), (pos, name, value, getattr(doc, name))
    assert raw_total == spec.raw_bytes

    # By key (§7.1), for every key: the index search, and a binary search over whole keys, which
    # §7.1 says gives the same answer (the fences and prefixes are only an accelerator).
    for pos in range(spec.count):
        key = spec.key_at(pos)
        q = key.encode("utf-8")
        rank = spec.key_ranks[pos]
        assert spec.find_rank(q) == rank and spec.search_keys(q) == (rank, True)
        assert spec.blob_of_rank(rank) == spec.blob(pos)  # version 3: the entry's location, §7.1
        assert spec.position(key) == pos == store.position(key)
        doc, values = store[key], spec.get(key)
        assert doc.doc_id == key and list(values) == list(doc._fields[1:])
        assert all(same_value(v, getattr(doc, name)) for name, v in values.items())
    store.close()
    return spec


def probe_missing(spec: SpecStore, store: docstore.DocStore, candidates: list[str]) -> None:
    """Keys near the stored ones: the spec lookup and docstore must agree on all of them."""
    for q in candidates:
        expected = store.position(q) if q in store else None
        assert spec.position(q) == expected, q
        b = q.encode("utf-8")
        rank, found = spec.search_keys(b)
        assert spec.find_rank(b) == (rank if found else None), q
        if expected is None:
            assert spec.get(q) is None and store.get(q) is None, q


def write(path: Path, fields: dict[str, str], docs: list[tuple[str, dict]], **options) -> Path:
    """Writes a store; `format_version=1` or `2` writes that version, the default is 3 (§10)."""
    with docstore.Writer(path, fields, **options) as writer:
        for key, values in docs:
            writer.add(key, values)
    return path


# ---------------------------------------------------------------------------------------------
# Tests


VERSIONS = [3, 2, 1]
VERSION_IDS = ["v3", "v2", "v1"]


@pytest.fixture(params=VERSIONS, ids=VERSION_IDS)
def version(request: pytest.FixtureRequest) -> int:
    """The format version to write (§10): docstore writes 3 by default and still writes 1 and 2."""
    return request.param


ALL_FIELDS = {
    "text": "str",
    "blob": "bytes",
    "n": "int64",
    "x": "float64",
    **{f"a_{name}": f"{name}[]" for name, _ in ARRAY_TYPES.values()},
}


def all_types_docs(count: int, seed: int) -> list[tuple[str, dict]]:
    rng = random.Random(seed)
    special_ints = [0, -1, 1, 63, -64, 64, 300, -300, 2**63 - 1, -(2**63)]
    special_floats = [0.0, -0.0, 1.5, -2.25, math.inf, -math.inf, math.nan, 1e-310, 1.7976931348623157e308]
    docs = []
    for i in range(count):
        values: dict[str, object] = {
            "text": rng.choice(["", "hello", "héllo wörld ✓", "long text " * rng.randint(1, 40)]) + str(i),
            "blob": bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 7, 200]))),
            "n": rng.choice(special_ints) if i % 2 else rng.randint(-(2**40), 2**40),
            "x": rng.choice(special_floats) if i % 2 else rng.uniform(-1e6, 1e6),
        }
        for name, _ in ARRAY_TYPES.values():
            length = rng.choice([0, 1, 5, 130])
            if name.startswith("float"):
                info = np.finfo(name)
                arr = np.array([rng.uniform(-1e3, 1e3) for _ in range(length)], dtype=name)
                if length:
                    arr[0] = rng.choice([info.max, info.min, np.nan, -0.0])
            else:
                info = np.iinfo(name)
                arr = np.array([rng.randint(int(info.min), int(info.max)) for _ in range(length)], dtype=name)
                if length:
                    arr[-1] = info.min if i % 2 else info.max
            values[f"a_{name}"] = arr
        docs.append((f"doc-{rng.randrange(10**9):09d}-{i}", values))
    docs += [("ключ", docs[0][1]), ("键", docs[1][1]), ("é", docs[2][1]), ("è", docs[3][1])]
    rng.shuffle(docs)
    return docs


@pytest.mark.parametrize("level", [0, 9, -1])
def test_every_field_type(tmp_path: Path, level: int, version: int) -> None:
    docs = all_types_docs(40, seed=level)
    path = write(tmp_path / "all.docstore", ALL_FIELDS, docs, level=level, format_version=version)
    spec = check_against_docstore(path, level=level & 0xFF, version=version)  # -1 (none) is 0xFF
    # §4.1: the schema section byte for byte.
    expected = struct.pack("<H", len(ALL_FIELDS))
    codes = {v: k for k, v in SCALAR_TYPES.items()} | {f"{n}[]": c for c, (n, _) in ARRAY_TYPES.items()}
    for name, type_name in ALL_FIELDS.items():
        expected += struct.pack("<BH", codes[type_name], len(name)) + name.encode()
    assert spec.sections["schema"] == expected
    # Insertion order is position order.
    assert [spec.key_at(p) for p in range(spec.count)] == [k for k, _ in docs]
    with docstore.open(path) as store:
        probe_missing(spec, store, ["", "doc", "doc-", "zzz", "ключ\x00", "e", "éé", docs[0][0] + "x"])


V4_FIELDS = {
    "title": "str?",
    "flag": "bool",
    "maybe": "bool?",
    "tags": "list[str]",
    "parts": "list[bytes]?",
    "half": "float16[]",
    "brain": "bfloat16[]?",
    "n": "int64?",
    "tokens": "int32[]?",
    "m": "float32[2,3]",
    "img": "uint8[2,2,2]?",
}


@pytest.mark.parametrize("level", [0, 9, -1])
def test_version_4_types(tmp_path: Path, level: int) -> None:
    """§4.1, §5 and §10: nullable fields and the types version 4 added, read by the rules of the
    document alone, and the schema section byte for byte."""
    rng = random.Random(level)
    docs = []
    for i in range(60):
        null = i % 3 == 1
        halves = np.array(
            [rng.uniform(-100, 100) for _ in range(i % 4)] + [np.inf, np.nan][: i % 3], np.float16
        )
        docs.append(
            (
                f"doc-{i:03d}-{'é' * (i % 2)}",
                {
                    "title": None if null else rng.choice(["", "héllo", "long title " * 30]),
                    "flag": i % 2 == 0,
                    "maybe": None if null else i % 4 == 0,
                    "tags": [rng.choice(["a", "ключ", ""]) for _ in range(i % 5)],
                    "parts": None if null else [bytes([j]) * j for j in range(i % 4)],
                    "half": halves,
                    "brain": None
                    if null
                    else np.array([rng.uniform(-1e30, 1e30) for _ in range(i % 3)], np.float32),
                    "n": None if null else rng.randint(-(2**63), 2**63 - 1),
                    "tokens": None if null else np.arange(i % 7, dtype=np.int32) * 70000,
                    "m": np.arange(6, dtype=np.float32).reshape(2, 3) * i,
                    "img": None if null else np.full((2, 2, 2), i, np.uint8),
                },
            )
        )
    path = write(tmp_path / "v4.docstore", V4_FIELDS, docs, level=level)
    spec = check_against_docstore(path, level=level & 0xFF, version=4)
    codes = {v: k for k, v in (SCALAR_TYPES | V4_SCALAR_TYPES).items()}
    codes |= {f"{n}[]": c for c, (n, _) in (ARRAY_TYPES | V4_ARRAY_TYPES).items()}
    expected = struct.pack("<H", len(V4_FIELDS))
    for name, type_name in V4_FIELDS.items():
        nullable = NULLABLE if type_name.endswith("?") else 0
        base, _, dims = type_name.rstrip("?").rstrip("]").partition("[")
        shape = [int(d) for d in dims.split(",")] if dims[:1].isdigit() else []
        code = codes[f"{base}[]" if shape else type_name.rstrip("?")] | (FIXED_SHAPE if shape else 0)
        expected += struct.pack("<BH", code | nullable, len(name)) + name.encode()
        if shape:
            expected += struct.pack(f"<B{len(shape)}I", len(shape), *shape)
    assert spec.sections["schema"] == expected


def test_version_4_record_bytes(tmp_path: Path) -> None:
    """§5: the example records of the document, byte for byte, and a store of version 3 types
    only written as version 3."""
    fields = {"title": "str?", "flag": "bool", "tags": "list[str]", "n": "int64?"}
    doc = {"title": None, "flag": True, "tags": ["ab", "c"], "n": 3}
    path = write(tmp_path / "r.docstore", fields, [("k", doc)], dict_size=0)
    spec = SpecStore(path.read_bytes())
    assert spec.version == 4 and spec.raw_record(0) == bytes.fromhex("00 01 02 02 61 62 01 63 01 06")
    arrays = {"h": "float16[]", "b": "bfloat16[]"}
    values = {"h": np.array([1.0, -2.0], np.float16), "b": np.array([1.0], np.float32)}
    spec = SpecStore(write(tmp_path / "a.docstore", arrays, [("k", values)], dict_size=0).read_bytes())
    assert spec.raw_record(0) == bytes.fromhex("02 00 00 3c c0 01 80 3f")
    assert same_value(spec.record(0)["b"], np.array([1.0], np.float32))
    old = write(tmp_path / "old.docstore", {"t": "str"}, [("k", {"t": "x"})])
    assert SpecStore(old.read_bytes()).version == 3
    # A version 3 header over a version 4 schema breaks §4.1 (and a reader of versions 1 to 3
    # refuses the version 4 file by its version before reading anything else, §10).
    buf = bytearray(path.read_bytes())
    buf[8:12] = struct.pack("<I", 3)
    buf[504:512] = struct.pack("<Q", xxh3(bytes(buf[:504])))
    with pytest.raises(SpecError, match="a version 3 store with a field of a type version 4 added"):
        SpecStore(bytes(buf))
    with pytest.raises(docstore.CorruptStoreError, match="version 4 added"):
        (tmp_path / "bad.docstore").write_bytes(bytes(buf))
        docstore.open(tmp_path / "bad.docstore")


METADATA = {
    "huggingface": {"features": {"label": {"names": ["neg", "pos"], "_type": "ClassLabel"}}},
    "é": [1, 2.5, None],
}


def test_version_5_metadata_section(tmp_path: Path) -> None:
    """§3, §4.10, §8 and §10: metadata makes a version 5 store, whose tenth section, after the
    key ranks, is the metadata's JSON text; every byte before it is the store without metadata's
    (but the header's version, section count, tenth entry and checksum)."""
    fields = {"text": "str", "n": "int64"}
    docs = [(f"doc-{i}", {"text": f"text {i} " * (i % 5), "n": i - 3}) for i in range(21)]
    plain = write(tmp_path / "plain.docstore", fields, docs)
    path = write(tmp_path / "meta.docstore", fields, docs, metadata=METADATA)
    spec = check_against_docstore(path, version=5)
    assert spec.metadata == METADATA and docstore.open(path).metadata == METADATA
    a, b = plain.read_bytes(), path.read_bytes()
    offset, length, _ = spec.entries[SECTIONS.index("metadata")]
    assert struct.unpack_from("<I", b, 32) == (10,) and SpecStore(a).metadata == {}
    assert json.loads(b[offset : offset + length]) == METADATA and offset + length == len(b)
    assert a[512:] == b[512 : len(a)] and not any(b[len(a) : offset]) and offset % 8 == 0
    assert a[:8] == b[:8] and a[12:32] == b[12:32] and a[36:280] == b[36:280]
    assert not any(a[280:504]) and not any(b[304:504])
    # §4.10 rules, checksums recomputed: docstore and the spec reader refuse the same contents.
    for contents, why in [
        (b"[1]", "not a JSON object"),
        (b'{"a": 1, "a": 2}', "repeated"),
        (b'{"a": {"b": 1, "b": 1}}', "repeated"),
        (b'{"a": 1} x', ""),
        (b'{"a": "\xff"}', "UTF-8"),
        (b'{"a": NaN}', ""),
        (b'{"a": "\\ud800"}', ""),
        (b'{"\\udc00": 1}', ""),
        (b'{"a": ' + b"[" * 127 + b"]" * 127 + b"}", "recursion limit"),
        (b"", ""),
    ]:
        buf = bytearray(b[:offset] + contents)
        struct.pack_into("<QQ", buf, TABLE_AT + 24 * 9 + 8, len(contents), xxh3(contents))
        buf[504:512] = struct.pack("<Q", xxh3(bytes(buf[:504])))
        with pytest.raises(SpecError, match="bad metadata"):
            SpecStore(bytes(buf))
        bad = tmp_path / "bad.docstore"
        bad.write_bytes(bytes(buf))
        with pytest.raises(docstore.CorruptStoreError, match=f"bad metadata.*{why}"):
            docstore.open(bad)
    # A flipped bit anywhere in the section: both refuse it (its checksum).
    for at in range(offset, len(b)):
        buf = bytearray(b)
        buf[at] ^= 0x20
        with pytest.raises(SpecError, match="metadata checksum mismatch"):
            SpecStore(bytes(buf))
        (tmp_path / "bad.docstore").write_bytes(bytes(buf))
        with pytest.raises(docstore.CorruptStoreError, match="metadata checksum mismatch"):
            docstore.open(tmp_path / "bad.docstore")
    # A reader of versions 1 to 4 refuses the store by its version (§10), and docstore refuses
    # metadata given with an older format_version.
    buf = bytearray(b)
    buf[8:12] = struct.pack("<I", 4)
    buf[504:512] = struct.pack("<Q", xxh3(bytes(buf[:504])))
    with pytest.raises(SpecError, match="unexpected header layout"):
        SpecStore(bytes(buf))
    with pytest.raises(docstore.errors.InvalidArgumentError, match="format version 5"):
        write(tmp_path / "v4.docstore", fields, docs, metadata=METADATA, format_version=4)


def test_varint_and_zigzag_bytes(tmp_path: Path, version: int) -> None:
    """§5: the exact raw record bytes of one document."""
    values = {"n": -3, "m": 300, "big": -(2**63), "x": -0.0, "t": "é", "a": np.array([1, -2], dtype=np.int16)}
    fields = {"n": "int64", "m": "int64", "big": "int64", "x": "float64", "t": "str", "a": "int16[]"}
    path = write(tmp_path / "v.docstore", fields, [("k", values)], dict_size=0, format_version=version)
    spec = check_against_docstore(path, version=version)
    expected = (
        b"\x05"  # zigzag(-3) = 5
        + b"\xd8\x04"  # zigzag(300) = 600
        + b"\xff" * 9
        + b"\x01"  # zigzag(i64::MIN) = 2**64 - 1
        + struct.pack("<d", -0.0)
        + b"\x02\xc3\xa9"  # "é" is 2 UTF-8 bytes
        + b"\x02\x01\xfe\x00\xff"  # 2 elements (1, -2 = 0x0001, 0xfffe): low bytes, then high bytes
    )
    assert spec.raw_record(0) == expected
    raw_len, compressed, payload = spec.blob_header(0)
    assert raw_len == len(expected) and compressed == (len(payload) < raw_len)
    assert spec.dictionary == b""


def test_empty_store(tmp_path: Path, version: int) -> None:
    path = write(tmp_path / "empty.docstore", {"text": "str"}, [], format_version=version)
    spec = check_against_docstore(path, version=version)
    assert spec.count == 0 and spec.raw_bytes == 0 and spec.common_prefix == 0
    assert spec.dictionary == b"" and spec.sections["data"] == b""
    assert spec.doc_offsets == (0,) and spec.key_offsets == (0,)
    assert spec.fences == ()
    for name in ("keys", "key index", "key fences", "key ranks"):
        assert spec.sections[name] == b""
        assert spec.checksum(name) == 0x2D06800538D394C2  # xxh3-64 of b""
    with docstore.open(path) as store:
        probe_missing(spec, store, ["", "a"])


def test_zero_fields_give_empty_records(tmp_path: Path, version: int) -> None:
    path = write(
        tmp_path / "nofields.docstore", {}, [("b", {}), ("a", {}), ("c", {})], format_version=version
    )
    spec = check_against_docstore(path, version=version)
    assert spec.sections["schema"] == b"\x00\x00"
    assert [spec.body(p) for p in range(3)] == [b"\x00"] * 3  # §6.1: empty records are stored raw
    bound = (0, 1, 2) if version == 3 else (None,) * 3  # §6.3: version 3 binds the position
    checks = [struct.pack("<I", document_check(k, b"\x00", p)) for k, p in zip((b"b", b"a", b"c"), bound)]
    assert [spec.blob(p) for p in range(3)] == [c + b"\x00" if version >= 2 else b"\x00" for c in checks]
    assert spec.key_positions == (1, 0, 2) and spec.key_ranks == (1, 0, 2)


KEY_BASE = "https://example.org/collections/documents/2024/"


@pytest.mark.parametrize(
    "keys",
    [
        # Long common prefix; many keys identical in the 8 bytes after it (ties on the prefix value).
        [KEY_BASE + f"part-000{i % 3}/item-{i:05d}" for i in range(120)],
        # Keys that are prefixes of others, and keys padded with NUL bytes (equal prefix values).
        [KEY_BASE + s for s in ["a", "a\x00", "a\x00\x00", "ab", "abcdefgh", "abcdefghi", "abcdefgh\x00"]]
        + [KEY_BASE + "b" * n for n in range(1, 20)],
        # Common prefix ending inside a UTF-8 character: é = c3 a9, è = c3 a8.
        ["é1", "è2", "é", "è", "éèéèéèéèéè", "èéèéèéèéèé"],
        # One key: the common prefix is the whole key.
        ["only-one-key-in-this-store"],
        # No common prefix at all.
        ["a", "b", "\x01", "\U0001f600", "zz" * 50],
        # Several blocks of the key index, with runs of equal prefixes across block boundaries.
        [f"{i % 5}" * (1 + i % 11) + f"/{i}" for i in range(1500)],
    ],
    ids=["ties", "prefixes-of-others", "split-utf8", "single", "no-common-prefix", "blocks"],
)
def test_keys_sharing_long_prefixes(tmp_path: Path, keys: list[str], version: int) -> None:
    rng = random.Random(len(keys))
    keys = list(keys)
    rng.shuffle(keys)
    docs = [(k, {"i": i}) for i, k in enumerate(keys)]
    path = write(
        tmp_path / "keys.docstore", {"i": "int64"}, docs, key_buffer_bytes=300, format_version=version
    )
    spec = check_against_docstore(path, version=version)
    encoded = sorted(k.encode() for k in keys)
    assert spec.common_prefix == longest_common_prefix(encoded)
    if len(keys) == 1:
        assert spec.common_prefix == len(encoded[0]) and spec.prefixes == (0,)
    size = spec.entry_size
    for r, key in enumerate(encoded):
        tail = key[spec.common_prefix :][:8]
        entry = spec.sections["key index"][size * r : size * r + size]
        assert entry[:8] == tail.ljust(8, b"\0")[::-1]
        pos = spec.key_positions[r]
        assert entry[8:16] == struct.pack("<II", pos, len(key))
        if version == 3:  # §4.7: the blob's offset and length, as the doc offsets say
            start, end = spec.doc_offsets[pos : pos + 2]
            assert entry[16:] == struct.pack("<QQ", start, end - start)
    assert spec.fences == spec.prefixes[:: spec.block]
    if len(keys) > 1000:  # several blocks: 12 fences of 128 entries in version 3, 6 of 256 before
        assert len(spec.fences) == -(-len(keys) // (128 if version == 3 else 256))
    candidates = ["", KEY_BASE, KEY_BASE[:-1], "é", "è", "\U0001f600\x00"]
    for k in keys:
        candidates += [k + "x", k + "\x00", k[:-1], k[:-1] + "\uffff", k + "a" * 10]
    with docstore.open(path) as store:
        probe_missing(spec, store, candidates)


def test_incompressible_document_is_stored_raw(tmp_path: Path, version: int) -> None:
    rng = random.Random(7)
    noise = rng.randbytes(4000)
    docs = [("noise", {"data": noise}), ("zeros", {"data": bytes(4000)}), ("empty", {"data": b""})]
    path = write(tmp_path / "raw.docstore", {"data": "bytes"}, docs, dict_size=0, format_version=version)
    spec = check_against_docstore(path, version=version)
    headers = {spec.key_at(p): spec.blob_header(p) for p in range(spec.count)}
    raw_len, compressed, payload = headers["noise"]
    assert not compressed and raw_len == len(payload) == 4000 + 2  # varint(4000) is 2 bytes
    assert payload[2:] == noise
    raw_len, compressed, payload = headers["zeros"]
    assert compressed and raw_len == 4002 and len(payload) < raw_len
    assert headers["empty"] == (1, False, b"\x00")  # the record is varint 0


def test_dictionary_is_history_across_batches_and_spilled_keys(tmp_path: Path, version: int) -> None:
    words = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "river", "old", "mill"]
    rng = random.Random(3)
    docs = [
        (f"k{rng.randrange(10**6):06d}-{i}", {"text": " ".join(rng.choice(words) for _ in range(30)), "i": i})
        for i in range(300)
    ]
    path = write(
        tmp_path / "dict.docstore",
        {"text": "str", "i": "int64"},
        docs,
        batch_bytes=4096,
        key_buffer_bytes=512,
        level=12,
        format_version=version,
    )
    spec = check_against_docstore(path, level=12, version=version)
    assert 0 < len(spec.dictionary) <= 4096 // 4 + 1024
    flags = [spec.blob_header(p)[1] for p in range(spec.count)]
    assert sum(flags) > spec.count // 2
    # Decoding without the dictionary must fail for some blobs: they do reach into it.
    failures = 0
    for p in range(spec.count):
        raw_len, _, payload = spec.blob_header(p)
        try:
            lz4_block_decode(payload, raw_len, b"")
        except (SpecError, IndexError):
            failures += 1
    assert failures > 0


def xxd_bytes(block: str) -> bytes:
    """Bytes of an `xxd -a` dump (a `*` line stands for repeated zero lines)."""
    out = bytearray()
    pending_zeros = False
    for line in block.splitlines():
        if line.strip() == "*":
            pending_zeros = True
            continue
        m = re.match(r"^([0-9a-f]{8}): ((?:[0-9a-f]{2,4} ?)+)", line)
        if not m:
            continue
        offset = int(m.group(1), 16)
        if pending_zeros:
            out += bytes(offset - len(out))
            pending_zeros = False
        assert offset == len(out), line
        out += bytes.fromhex(m.group(2).replace(" ", ""))
    return bytes(out)


def test_worked_example_in_the_document(tmp_path: Path) -> None:
    """§12: the dump in docs/format.md is exactly what docstore writes, and parses as annotated."""
    text = FORMAT_MD.read_text(encoding="utf-8")
    dump = re.search(r"`xxd -a tiny\.docstore`.*?```\n(.*?)```", text, re.S).group(1)
    path = tmp_path / "tiny.docstore"
    with docstore.Writer(path, {"text": "str", "n": "int64"}, level=9) as w:
        w.add("doc-b", text="hello", n=-3)
        w.add("doc-a", text="hello world", n=300)
    assert path.read_bytes() == xxd_bytes(dump)
    spec = check_against_docstore(path, level=9)
    assert (spec.version, spec.count, spec.raw_bytes, spec.common_prefix, spec.level) == (3, 2, 21, 4, 9)
    assert spec.flags == 0 and path.read_bytes()[FLAGS_AT] == 0  # §12.1: byte 0x25
    assert len(path.read_bytes()) == 4176
    # §12.1: the header checksum as the document gives it.
    (header_checksum,) = re.findall(
        r"^\| 0x1f8-0x1ff \| .* \| header checksum \| `(0x[0-9a-f]{16})`", text, re.M
    )
    assert spec.header_checksum == int(header_checksum, 16) == xxh3(path.read_bytes()[:CHECKSUM_AT])
    # §12.1: the section table as the document tabulates it.
    rows = re.findall(
        r"^\| 0x[0-9a-f]{3} \| ([a-z ]+) \| (0x[0-9a-f]+) \| ([0-9]+) \| `(0x[0-9a-f]{16})` \|", text, re.M
    )
    assert [(name, int(o, 16), int(n), int(c, 16)) for name, o, n, c in rows] == [
        (name, *entry) for name, entry in zip(SECTIONS, spec.entries)
    ]
    assert [e[:2] for e in spec.entries] == [
        (0x200, 13),
        (0x210, 5),
        (0x218, 31),
        (0x238, 24),
        (0x250, 10),
        (0x260, 24),
        (0x1000, 64),  # two 32-byte entries (§4.7, version 3)
        (0x1040, 8),
        (0x1048, 8),
    ]
    assert spec.dictionary == b"\x05hell"
    assert spec.key_positions == (1, 0) and spec.key_ranks == (1, 0) and spec.key_lens == (5, 5)
    assert spec.prefixes == (0x61 << 56, 0x62 << 56) and spec.fences == (0x61 << 56,)
    # §12.2: the blobs, each a check (§6.3) and a stored body; the checks and the hashes the
    # document quotes for them (the key's, the body's, the position's).
    assert spec.doc_offsets == (0, 12, 31)
    assert spec.blob_locations == ((12, 19), (0, 12))  # rank 0 (`doc-a`) is blob 1, rank 1 blob 0
    assert spec.body(0) == bytes.fromhex("0e 05 68656c6c6f 05")
    assert spec.body(1) == b"\x1c\x0bhello world\xd8\x04"
    rows = re.findall(r"^\| (?:data )?0x2(?:18|24) \| `([0-9a-f ]{11})` \| blob [01] check[^\n]*", text, re.M)
    assert len(rows) == 2
    for pos, key, row in zip((0, 1), (b"doc-b", b"doc-a"), rows):
        check = document_check(key, spec.body(pos), pos)
        assert spec.blob(pos)[:4] == bytes.fromhex(row) == struct.pack("<I", check)
        line = re.search(rf"^\| [^|]+ \| `{row}` \|[^\n]*", text, re.M).group(0)
        assert f"0x{check:08x}" in line
        quoted = {int(h, 16) for h in re.findall(r"0x[0-9a-f]{16}", line)}
        assert quoted == {xxh3(key), xxh3(spec.body(pos)), xxh3(struct.pack("<Q", pos))}, line

    # §12.2: the key index entries as the document spells them (`00..00` fills a field with zeros).
    def spelled(field: str, width: int) -> bytes:
        tokens = field.split()
        fill = bytes(width - sum(".." not in t for t in tokens))
        return b"".join(fill if ".." in t else bytes.fromhex(t) for t in tokens)

    entries = re.findall(r"^\| (?:key index )?0x10[02]0 \| ((?:`[0-9a-f .]+` ?)+) \|", text, re.M)
    assert len(entries) == 2
    for rank, row in enumerate(entries):
        fields = re.findall(r"`([0-9a-f .]+)`", row)
        widths = (8, 4, 4, 8, 8)  # prefix, position, key length, blob offset, blob length (§4.7)
        assert len(fields) == len(widths)
        spelled_entry = b"".join(spelled(f, w) for f, w in zip(fields, widths))
        assert spelled_entry == spec.sections["key index"][32 * rank : 32 * rank + 32], row
    # The lookup of `doc-a` as narrated: rank 0 from the key index, position 1, its blob at the
    # entry's location data[12:31] (no doc offsets), the check of `doc-a` at position 1, the record.
    assert spec.find_rank(b"doc-a") == 0 and spec.position("doc-a") == 1
    assert spec.blob_of_rank(0) == spec.sections["data"][12:31]
    assert spec.get("doc-a") == {"text": "hello world", "n": 300}
    with pytest.raises(SpecError, match="document check"):
        spec.record(1, b"doc-b")  # blob 1 is not the blob of `doc-b`
    with pytest.raises(SpecError, match="document check"):
        spec.checked_body(spec.blob(1), b"doc-a", 0)  # nor of `doc-a` at position 0 (§6.3)

    # §12.3: the compressed blob. It is the body: from version 2 a check is in front of it.
    blob_line = re.search(r"```\n(43 \| [^\n]*)\n```", text).group(1)
    body = bytes.fromhex(blob_line.replace("|", ""))
    for version in VERSIONS:
        path = write(
            tmp_path / f"z{version}.docstore",
            {"text": "str"},
            [("x", {"text": "ab" * 16})],
            dict_size=0,
            format_version=version,
        )
        spec = check_against_docstore(path, version=version)
        check = document_check(b"x", body, 0 if version == 3 else None)
        assert spec.blob(0) == (struct.pack("<I", check) if version >= 2 else b"") + body
        assert spec.body(0) == body and spec.record(0) == {"text": "ab" * 16}


def corrupt(buf: bytes, at: int, value: bytes) -> bytes:
    return buf[:at] + value + buf[at + len(value) :]


def with_header_checksum(buf: bytes) -> bytes:
    return corrupt(buf, CHECKSUM_AT, struct.pack("<Q", xxh3(buf[:CHECKSUM_AT])))


def resealed(buf: bytes) -> bytes:
    """`buf` with every section checksum and the header checksum recomputed (§3): damage that only
    the checks of §7.4 can see."""
    out = bytearray(buf)
    for i in range(len(SECTIONS)):
        offset, length, _ = ENTRY.unpack_from(out, TABLE_AT + 24 * i)
        struct.pack_into("<Q", out, TABLE_AT + 24 * i + 16, xxh3(bytes(out[offset : offset + length])))
    return with_header_checksum(bytes(out))


def test_documented_rejections(tmp_path: Path, version: int) -> None:
    """§8 and §10: what open() and verify() reject, for docstore and for the spec reader alike."""
    docs = [(f"d{i}", {"t": "x" * i}) for i in range(5)]
    good = write(tmp_path / "good.docstore", {"t": "str"}, docs, format_version=version).read_bytes()
    spec = SpecStore(good)
    assert spec.version == version
    schema_end = spec.entries[0][0] + spec.entries[0][1]
    assert schema_end % 8, "the test needs padding after the schema"

    def check(name: str, buf: bytes, *, at_open: bool, error: type) -> None:
        path = tmp_path / f"{name}.docstore"
        path.write_bytes(buf)
        if at_open:
            with pytest.raises(error):
                docstore.open(path)
            with pytest.raises(SpecError) as raised:
                SpecStore(buf)
        else:
            with docstore.open(path) as store, pytest.raises(error):
                store.verify()
            with pytest.raises(SpecError) as raised:
                SpecStore(buf).verify()
        unsupported = error is docstore.UnsupportedVersionError
        assert isinstance(raised.value, SpecUnsupportedVersion) == unsupported

    # §10: versions 1 to 5 are read, any other is refused, and the version is checked before the
    # checksum: a bad version is not reported as corruption.
    for bad_version in (0, 6, 999):
        bad = corrupt(good, 8, struct.pack("<I", bad_version))
        check(f"v{bad_version}", bad, at_open=True, error=docstore.UnsupportedVersionError)
        check(f"v{bad_version}-short", bad[:100], at_open=True, error=docstore.UnsupportedVersionError)
        with pytest.raises(docstore.UnsupportedVersionError, match=f"version {bad_version} .*1 to 5"):
            docstore.open(tmp_path / f"v{bad_version}.docstore")
    check("magic", corrupt(good, 0, b"X"), at_open=True, error=docstore.CorruptStoreError)
    check("reserved", corrupt(good, 300, b"\x01"), at_open=True, error=docstore.CorruptStoreError)
    check("truncated", good[:-1], at_open=True, error=docstore.CorruptStoreError)
    check("short", good[:511], at_open=True, error=docstore.CorruptStoreError)
    misaligned = corrupt(good, TABLE_AT + 24 * 1, struct.pack("<Q", spec.entries[1][0] + 4))
    check("misaligned", with_header_checksum(misaligned), at_open=True, error=docstore.CorruptStoreError)
    bad_count = corrupt(good, 16, struct.pack("<Q", 4))
    check("count", with_header_checksum(bad_count), at_open=True, error=docstore.CorruptStoreError)
    check("schema", corrupt(good, 514, b"\x07"), at_open=True, error=docstore.CorruptStoreError)
    # §8 check 13: the first key shorter than the common prefix.
    long_prefix = corrupt(good, 40, struct.pack("<I", 3))
    check("common-prefix", with_header_checksum(long_prefix), at_open=True, error=docstore.CorruptStoreError)
    # Only verify() reads padding, trailing bytes and the checksums of the large sections.
    check("padding", corrupt(good, schema_end, b"\x01"), at_open=False, error=docstore.CorruptStoreError)
    check("trailing", good + b"\x00", at_open=False, error=docstore.CorruptStoreError)
    keys_at = spec.entries[4][0]
    check("keys", corrupt(good, keys_at, b"e"), at_open=False, error=docstore.CorruptStoreError)
    # Another version number on the same bytes (header checksum rewritten): a version 1 store
    # read as version 2 has no checks in front of its blobs, a version 2 store read as version 1
    # has 4 extra bytes in front of each body: verify() finds them damaged. Between version 3 and
    # the others the key index entries differ in size (§4.7): open() finds the section the wrong
    # size (§8 check 11). Damaged stores all, not misread documents.
    for other_version in {1, 2, 3} - {version}:
        other = with_header_checksum(corrupt(good, 8, struct.pack("<I", other_version)))
        at_open = (version == 3) != (other_version == 3)
        check(f"v{other_version}-bytes", other, at_open=at_open, error=docstore.CorruptStoreError)
        if at_open:
            with pytest.raises(docstore.CorruptStoreError, match="key index section has the wrong size"):
                docstore.open(tmp_path / f"v{other_version}-bytes.docstore")
    # §3 byte 37, §8 check 5b: version 3 refuses a flag other than bit 0; before version 3 the byte
    # is reserved and not read (a set one, under a valid header checksum, is not an error).
    for flags in (0x02, 0x80, 0x03):
        flagged = with_header_checksum(corrupt(good, FLAGS_AT, bytes([flags])))
        if version == 3:
            check(f"flags-{flags}", flagged, at_open=True, error=docstore.CorruptStoreError)
            with pytest.raises(docstore.CorruptStoreError, match=f"unknown header flags {flags:#04x}"):
                docstore.open(tmp_path / f"flags-{flags}.docstore")
        else:
            path = tmp_path / f"flags-{flags}.docstore"
            path.write_bytes(flagged)
            with docstore.open(path) as store:
                store.verify()
                assert [store.position(k) for k, _ in docs] == list(range(5))
            spec = SpecStore(flagged)
            spec.verify()
            assert spec.flags == 0 and [spec.position(k) for k, _ in docs] == list(range(5))


def relaid(buf: bytes, replaced: dict[str, bytes]) -> bytes:
    """`buf` with the sections named in `replaced` given new contents, every section laid out again
    as the writer lays them out (§2) and every checksum recomputed (§3)."""
    spec = SpecStore(buf)
    out = bytearray(buf[:HEADER_SIZE])
    for i, name in enumerate(spec.sections):
        content = replaced.get(name, spec.sections[name])
        out += bytes(-len(out) % (KEY_INDEX_ALIGN if name == "key index" else 8))
        ENTRY.pack_into(out, TABLE_AT + 24 * i, len(out), len(content), xxh3(content))
        out += content
    return with_header_checksum(bytes(out))


def schema_of(names: list[str], code: int = 3) -> bytes:
    """§4.1: a schema section of fields `names`, all of type `code` (3: int64)."""
    fields = (struct.pack("<BH", code, len(name)) + name.encode() for name in names)
    return struct.pack("<H", len(names)) + b"".join(fields)


def long_names(count: int, length: int) -> list[str]:
    return [f"f{i}_".ljust(length, "x") for i in range(count)]


def test_schema_and_dictionary_limits(tmp_path: Path) -> None:
    """§4.1, §8 check 7 and 9, §9: open() reads the schema and the dictionary whole, so both are
    bounded and it costs the same for any file: a crafted schema of 65,535 fields with 201-byte
    names took 5.5 s to open. The writer refuses what open() would."""
    empty = write(tmp_path / "empty.docstore", {"n": "int64"}, []).read_bytes()

    def rejected(name: str, buf: bytes, message: str) -> float:
        path = tmp_path / f"{name}.docstore"
        path.write_bytes(buf)
        start = time.perf_counter()
        with pytest.raises(docstore.CorruptStoreError, match=message):
            docstore.open(path)
        took = time.perf_counter() - start
        with pytest.raises(SpecError):
            SpecStore(buf)
        return took

    crafted = relaid(empty, {"schema": schema_of(long_names(65535, 201))})
    assert rejected("wide", crafted, "schema section is longer than any store has") < 0.5
    rejected("1025", relaid(empty, {"schema": schema_of(long_names(1025, 8))}), "1025 fields")
    rejected("name", relaid(empty, {"schema": schema_of(["n" * 256])}), "name of 256 bytes")
    rejected("dictionary", relaid(empty, {"dictionary": bytes(65537)}), "dictionary section is longer")

    # The largest schema allowed, written by docstore: read by both readers, opened fast.
    names = long_names(1024, 255)
    assert len(schema_of(names)) == MAX_SCHEMA_BYTES - 1024 * 33  # no shapes: 33 bytes a field less
    doc = dict.fromkeys(names, 7)
    path = write(tmp_path / "widest.docstore", dict.fromkeys(names, "int64"), [("a", doc)])
    start = time.perf_counter()
    store = docstore.open(path)
    assert time.perf_counter() - start < 0.5
    assert list(store.fields) == names and store["a"][names[-1]] == 7
    assert SpecStore(path.read_bytes()).record(0) == doc
    # Beyond it, the writer refuses, naming the limit.
    with pytest.raises(docstore.SchemaError, match="at most 1024"):
        docstore.Writer(tmp_path / "w1", dict.fromkeys(long_names(1025, 8), "int64"))
    with pytest.raises(docstore.SchemaError, match="at most 255"):
        docstore.Writer(tmp_path / "w2", {"n" * 256: "int64"})
    with pytest.raises(docstore.SchemaError, match="at most 1024"):
        docstore.build(tmp_path / "w3", [dict.fromkeys(["doc_id", *long_names(1025, 8)], 1)])
    assert not [p.name for p in tmp_path.iterdir() if p.name in ("w1", "w2", "w3")]


def lookups(
    store: SpecStore | SpecCollection | docstore.DocStore | None, keys: list[str], count: int
) -> list[object]:
    """Every answer a reader gives for `keys` (by id: the document, the position, whether it is in
    the store) and for positions 0..count-1: a document as (key, field values), a position, a bool,
    None for absent, or "error" (a store that does not open, None, gives only errors)."""
    if store is None:
        return ["error"] * (3 * len(keys) + count)
    spec = isinstance(store, (SpecStore, SpecCollection))
    errors = (SpecError,) if spec else (docstore.CorruptStoreError,)

    def answer(lookup: typing.Callable[[], object]) -> object:
        try:
            return lookup()
        except errors:
            return "error"
        except KeyError:  # docstore's position() of an absent key
            assert not spec
            return None

    def plain(values: typing.Iterable[object]) -> tuple[object, ...]:
        """Field values comparable with ==: arrays and floats (NaN, -0.0) by their bytes."""
        return tuple(
            (v.dtype.str, v.tobytes())
            if isinstance(v, np.ndarray)
            else struct.pack("<d", v)
            if isinstance(v, float)
            else v
            for v in values
        )

    def by_id(key: str) -> object:
        doc = store.get(key)
        if doc is None:
            return None
        return (key, plain(doc.values())) if spec else (doc.doc_id, plain(doc[1:]))

    def by_position(pos: int) -> object:
        if spec:
            key, values = store.at(pos)
            return key, plain(values.values())
        doc = store.at(pos)
        return doc.doc_id, plain(doc[1:])

    out = []
    for key in keys:
        out.append(answer(lambda key=key: by_id(key)))
        out.append(answer(lambda key=key: store.position(key)))
        if spec:  # §7.4: `in` is a lookup of the position without the document
            out.append(answer(lambda key=key: store.position(key) is not None))
        else:
            out.append(answer(lambda key=key: key in store))
    out += [answer(lambda pos=pos: by_position(pos)) for pos in range(count)]
    return out


def test_checked_lookups_check_their_answers(tmp_path: Path) -> None:
    """§7.4 on damage that passes every checksum: each lookup errors where the document says, in
    docstore and in the spec reader; a version 1 store returns another document instead. Version 3
    reads a found key's blob where its key index entry says (§7.1): damage to the doc offsets does
    not reach it, damage to the location or the position fails its check (§6.3)."""
    docs = [(f"d{i}", {"t": "x" * i}) for i in range(6)]
    keys = [k for k, _ in docs] + ["c", "d25", "e"]
    expected = [a for k, v in docs for a in ((k, tuple(v.values())), int(k[1:]), True)]
    expected += [None, None, False] * 3
    expected += [(k, tuple(v.values())) for k, v in docs]
    results = {}
    for version in VERSIONS:
        path = write(tmp_path / f"v{version}.docstore", {"t": "str"}, docs, format_version=version)
        good = path.read_bytes()
        spec = SpecStore(good)
        data, doc_offsets, key_index, key_ranks = (
            spec.entries[SECTIONS.index(n)][0] for n in ("data", "doc offsets", "key index", "key ranks")
        )
        size = spec.entry_size
        with docstore.open(path) as store:
            assert lookups(spec, keys, 6) == lookups(store, keys, 6) == expected
        damages = {
            # a flipped bit in the first byte of blob 2 (its check from version 2)
            "blob": corrupt(good, data + spec.doc_offsets[2], bytes([good[data + spec.doc_offsets[2]] ^ 1])),
            # the positions of ranks 0 and 1 swapped in the key index
            "positions": corrupt(
                corrupt(good, key_index + 8, b"\1\0\0\0"), key_index + size + 8, b"\0\0\0\0"
            ),
            # the ranks of positions 3 and 4 swapped
            "ranks": corrupt(good, key_ranks + 12, struct.pack("<II", 4, 3)),
            # the prefix of rank 5 (`d5`) made that of `d6`: the index search misses `d5`
            "prefix": corrupt(good, key_index + size * 5, struct.pack("<Q", key_prefix(b"6"))),
            # the doc offset of position 2 one byte further: blobs 1 and 2 read wrong by position
            "offsets": corrupt(good, doc_offsets + 16, struct.pack("<Q", spec.doc_offsets[2] + 1)),
        }
        if version == 3:
            blob_3 = (spec.doc_offsets[3], spec.doc_offsets[4] - spec.doc_offsets[3])
            # rank 2 (`d2`) locating blob 3, or a blob past the end of the data section
            location = key_index + size * 2 + 16
            damages["location"] = corrupt(good, location, struct.pack("<QQ", *blob_3))
            damages["location-out"] = corrupt(
                good, location, struct.pack("<QQ", len(spec.sections["data"]), 5)
            )
        for name, damaged in damages.items():
            path = tmp_path / f"v{version}-{name}.docstore"
            path.write_bytes(resealed(damaged))
            with docstore.open(path) as store:
                spec = SpecStore(path.read_bytes())
                ours, theirs = lookups(spec, keys, 6), lookups(store, keys, 6)
                assert ours == theirs, (version, name)
                results[version, name] = ours
                message = (
                    "key index blob locations do not match the doc offsets" if name == "location" else None
                )
                with pytest.raises(docstore.CorruptStoreError, match=message):
                    store.verify()
                with pytest.raises(SpecError, match=message):
                    spec.verify()

    def changed(version: int, name: str) -> dict[str, object]:
        labels = [f"{how} {k}" for k in keys for how in ("get", "position", "in")]
        labels += [f"at {p}" for p in range(6)]
        return {label: a for label, a, e in zip(labels, results[version, name], expected) if a != e}

    def errors(*labels: str) -> dict[str, object]:
        return dict.fromkeys(labels, "error")

    lookups_of = {k: (f"get {k}", f"position {k}", f"in {k}") for k in keys}
    # Versions 2 and 3: errors, never another answer (§7.4), for the lookups the table names.
    for version in (2, 3):
        assert changed(version, "blob") == errors(
            *lookups_of["d2"],  # a position is confirmed by its document's check too
            "at 2",
            *lookups_of["d25"],  # absent, and its neighbour `d2` fails its check
        )
        # Version 2 reads the blob of the other position, which fails the check of `q`; version 3
        # reads the right blob, which fails the check of the position the entry gives.
        assert changed(version, "positions") == errors(
            *lookups_of["d0"],
            *lookups_of["d1"],
            *lookups_of["c"],  # absent, and its neighbour `d0` (rank 0) fails its check
        )
        assert changed(version, "ranks") == errors("at 3", "at 4")
        assert changed(version, "prefix") == errors(*lookups_of["d5"])
    # By key, version 2 reads blobs through the doc offsets, version 3 where the entry says.
    assert changed(2, "offsets") == errors(
        *lookups_of["d1"], *lookups_of["d2"], *lookups_of["d25"], "at 1", "at 2"
    )
    assert changed(3, "offsets") == errors("at 1", "at 2")
    for name in ("location", "location-out"):
        assert changed(3, name) == errors(*lookups_of["d2"], *lookups_of["d25"])
    # Version 1 has no checks (§7.4): the same damage returns other documents and positions.
    assert changed(1, "blob") == {"get d2": "error", "at 2": "error"}  # the header flag: compressed
    assert changed(1, "positions") == {
        "get d0": ("d0", ("x",)),  # the query's id, the fields of `d1`
        "position d0": 1,
        "get d1": ("d1", ("",)),
        "position d1": 0,
    }
    assert changed(1, "ranks") == {"at 3": ("d4", ("xxx",)), "at 4": ("d3", ("xxxx",))}
    assert changed(1, "prefix") == {"get d5": None, "position d5": None, "in d5": False}
    assert changed(1, "offsets") == errors("get d1", "get d2", "at 1", "at 2")


def test_version3_flag_bit_0_takes_the_locations_out_of_the_file(tmp_path: Path) -> None:
    """§3, §4.7, §7.1, §8: with header flag bit 0 (a collection's global id index, §13.2) the key
    index entries locate blobs elsewhere; the store's own lookups by key read its blobs through the
    doc offsets, and verify() does not compare the locations with them. The flag is refused on a
    store with fields (§8 check 9b), whose locations verify() would then leave unchecked."""
    with_fields = write(tmp_path / "fields.docstore", {"t": "str"}, [("d0", {"t": "x"})]).read_bytes()
    flagged = tmp_path / "flagged.docstore"
    flagged.write_bytes(resealed(corrupt(with_fields, FLAGS_AT, bytes([FLAG_SHARD_LOCATIONS]))))
    with pytest.raises(SpecError, match="on a store with fields"):
        SpecStore(flagged.read_bytes())
    with pytest.raises(docstore.CorruptStoreError, match="on a store with fields"):
        docstore.open(flagged)
    docs = [(f"d{i}", {}) for i in range(6)]
    good = write(tmp_path / "good.docstore", {}, docs).read_bytes()
    spec = SpecStore(good)
    key_index = spec.entries[SECTIONS.index("key index")][0]
    moved = bytearray(good)
    for r in range(spec.count):  # every location made another one (the blob of the next rank)
        struct.pack_into("<QQ", moved, key_index + 32 * r + 16, *spec.blob_locations[(r + 1) % spec.count])
    keys = [k for k, _ in docs] + ["c", "d25", "e"]
    expected = lookups(spec, keys, 6)
    for flags in (0, FLAG_SHARD_LOCATIONS):
        path = tmp_path / f"flags-{flags}.docstore"
        path.write_bytes(resealed(corrupt(bytes(moved), FLAGS_AT, bytes([flags]))))
        spec = SpecStore(path.read_bytes())
        assert spec.flags == flags and spec.locates_blobs == (not flags)
        with docstore.open(path) as store:
            ours, theirs = lookups(spec, keys, 6), lookups(store, keys, 6)
            assert ours == theirs
            if flags:
                assert ours == expected
                store.verify()
                spec.verify()
            else:
                assert ours != expected and "error" in ours
                with pytest.raises(docstore.CorruptStoreError, match="blob locations do not match"):
                    store.verify()
                with pytest.raises(SpecError, match="blob locations do not match"):
                    spec.verify()


FUZZ_LONG_KEY = "doc-a long key, more than eight bytes after the prefix"
FUZZ_DOCS = [
    ("doc-b", {"text": "hello hello hello", "n": -3}),
    (FUZZ_LONG_KEY, {"text": "hello world " * 3, "n": 300}),
    ("doc-a", {"text": "world", "n": 2**40}),
    ("doc-c", {"text": "", "n": 0}),
    ("doc-é", {"text": "héllo hello", "n": -1}),
]
FUZZ_ABSENT = ["", "doc-", "doc-a\x00", "doc-bb", "doc-d", "zzz", FUZZ_LONG_KEY[:-1], FUZZ_LONG_KEY + "x"]


@pytest.mark.parametrize("version", VERSIONS, ids=VERSION_IDS)
def test_every_damaged_byte(tmp_path: Path, version: int) -> None:
    """A small store with one bit flipped, for every byte and three bit positions (one in version 1):
    docstore and the spec reader give the same answer to every lookup by id and by position. In
    versions 2 and 3 neither returns a document other than the one written (§7.4); in version 1
    (no checks) they agree on the wrong answers too."""
    path = write(
        tmp_path / "good.docstore", {"text": "str", "n": "int64"}, FUZZ_DOCS, level=9, format_version=version
    )
    spec = check_against_docstore(path, level=9, version=version)
    assert any(spec.blob_header(p)[1] for p in range(spec.count)), "the test needs compressed blobs"
    assert spec.dictionary, "the test needs a dictionary"
    assert any(len(k) > spec.common_prefix + 8 for k, _ in FUZZ_DOCS), "the test needs a long key (§7.1)"
    keys, count = [k for k, _ in FUZZ_DOCS] + FUZZ_ABSENT, len(FUZZ_DOCS)
    good = path.read_bytes()
    expected = lookups(spec, keys, count)
    with docstore.open(path) as store:
        assert expected == lookups(store, keys, count)
    long_rank = spec.find_rank(FUZZ_LONG_KEY.encode())
    long_end_at = spec.entries[SECTIONS.index("key offsets")][0] + 8 * (long_rank + 1)
    assert spec.key_offsets[long_rank + 1] % 2, "flipping bit 0 of the long key's end must shorten it"
    # The sweep below flips that bit: the damage that made a key long read as an absent `q`, whose
    # position() once answered the long key's position (now its document check fails with `q`).
    assert long_end_at < len(good)
    labels = [f"{how} {k!r}" for k in keys for how in ("get", "position", "in")]
    labels += [f"at {p}" for p in range(count)]
    damaged, wrong = tmp_path / "damaged.docstore", {}
    for at in range(len(good)):
        for bit in (0, 4, 7) if version >= 2 else (0,):
            buf = bytearray(good)
            buf[at] ^= 1 << bit
            damaged.write_bytes(buf)
            try:
                spec = SpecStore(bytes(buf))
            except SpecUnsupportedVersion:
                with pytest.raises(docstore.UnsupportedVersionError):
                    docstore.open(damaged)
                continue
            except SpecError:
                spec = None
            try:
                store = docstore.open(damaged)
            except docstore.CorruptStoreError:
                store = None
            assert (spec is None) == (store is None), (at, bit)
            ours = lookups(spec, keys, count)
            if store is not None:
                with store:
                    theirs = lookups(store, keys, count)
                assert ours == theirs, (at, bit)
            for label, answer, right in zip(labels, ours, expected):
                if answer not in ("error", right):
                    wrong.setdefault(label, []).append((at, bit, answer))
    if version == 1:
        assert any(label.startswith("get") for label in wrong)
        return
    # Versions 2 and 3: no wrong document, position or absence, by id or by position.
    assert wrong == {}


# ---------------------------------------------------------------------------------------------
# §13 Collections, read from the document alone


class SpecCollection:
    """A collection directory read as §13 says: the manifest (§13.1), the global id index
    (§13.2) and the shards, lookups and verify() as §13.3 says."""

    MEMBERS = ("format", "version", "count", "index", "shards", "checksum")
    ENTRY = ("file", "count", "fingerprint")

    def __init__(self, root: Path) -> None:
        text = (root / "docstore-collection.json").read_bytes().decode("utf-8")
        manifest = json.loads(text, object_pairs_hook=dict)
        if tuple(manifest) != self.MEMBERS or manifest["format"] != "docstore-collection":
            raise SpecError("not a collection manifest")
        if manifest["version"] != 1:
            raise SpecUnsupportedVersion(manifest["version"])
        body = json.dumps(dict(manifest, checksum=""), separators=(",", ":"), ensure_ascii=False)
        if manifest["checksum"] != f"{xxh3(body.encode('utf-8')):016x}":
            raise SpecError("manifest checksum mismatch")

        def load(entry: dict) -> SpecStore:
            if tuple(entry) != self.ENTRY or any(
                part in ("", ".", "..") for part in entry["file"].split("/")
            ):
                raise SpecError("bad file entry")
            buf = (root / entry["file"]).read_bytes()
            store = SpecStore(buf)
            fingerprint = int.from_bytes(buf[504:512], "little")
            if f"{fingerprint:016x}" != entry["fingerprint"] or store.count != entry["count"]:
                raise SpecError(f"{entry['file']} is not the file that was sealed")
            return store

        self.index = load(manifest["index"])
        if self.index.fields != [] or not self.index.checked:
            raise SpecError("the index is not a checked store without fields")
        self.shards = [load(entry) for entry in manifest["shards"]]
        if not self.shards or any(shard.version not in (2, 3) for shard in self.shards):
            raise SpecError("the shards are not version 2 or 3 stores")  # §13
        self.starts = [0]
        for shard in self.shards:
            self.starts.append(self.starts[-1] + shard.count)
        if self.starts[-1] != manifest["count"] or self.index.count != manifest["count"]:
            raise SpecError("counts do not add up")

    @property
    def locates_shard_blobs(self) -> bool:
        """§13.2: the index's entries locate blobs in the shards (version 3, header flag bit 0)."""
        return self.index.version >= 3 and bool(self.index.flags & FLAG_SHARD_LOCATIONS)

    def locate(self, p: int) -> tuple[SpecStore, int]:
        """§13.2: the last shard whose first global position is <= p (empty shards hold none)."""
        s = max(i for i, start in enumerate(self.starts[:-1]) if start <= p and self.shards[i].count)
        return self.shards[s], p - self.starts[s]

    def found_body(self, q: bytes) -> tuple[int, bytes] | None:
        """§13.3 by id: the global position of `q` and the body of its document, its check passed
        with `q` as the key (and, version 3 shard, the position in the shard); None if absent."""
        rank = self.index.find_rank(q)
        if rank is None:
            self.index.confirm_absent(q)  # §7.4 in the index
            return None
        p = self.index.position_of_rank(rank)
        shard, local = self.locate(p)
        if self.locates_shard_blobs and shard.version >= 3:
            blob = shard.located_blob(self.index.blob_locations[rank])  # bounds: the shard's data
        else:
            blob = shard.blob(local)
        return p, shard.checked_body(blob, q, local)

    def get(self, key: str) -> dict[str, object] | None:
        found = self.found_body(key.encode("utf-8"))
        if found is None:
            return None
        p, body = found
        shard, _ = self.locate(p)
        return shard.parse_record(shard.decode_body(body))

    def position(self, key: str) -> int | None:
        """§13.3: as by id, the blob checked without decoding it."""
        found = self.found_body(key.encode("utf-8"))
        return None if found is None else found[0]

    def at(self, p: int) -> tuple[str, dict[str, object]]:
        """§13.3 by position: the shard's document, checked with its key in the shard."""
        shard, local = self.locate(p)
        return shard.at(local)

    def verify(self) -> None:
        """§13.3 verify(): the index and every shard (§8), the index's key of every global position
        is the shard's, and (flag bit 0) every index entry locates its position's blob."""
        self.index.verify()
        for shard in self.shards:
            shard.verify()
        for p in range(self.index.count):
            shard, local = self.locate(p)
            if self.index.key_bytes_at(p) != shard.key_bytes_at(local):
                raise SpecError(f"the global id index and the shards disagree at position {p}")
        if self.locates_shard_blobs:
            for rank, location in enumerate(self.index.blob_locations):
                shard, local = self.locate(self.index.position_of_rank(rank))
                start, end = shard.doc_offsets[local : local + 2]
                if location != (start, end - start):
                    raise SpecError("the global id index locates a blob elsewhere than its shard holds it")


def reseal_collection_file(root: Path, name: str, buf: bytes) -> None:
    """Writes `buf` (checksums recomputed) as the collection's file `name`, and the manifest with
    its new fingerprint and checksum (§13.1, written compactly: only the parsed values count)."""
    buf = resealed(buf)
    (root / name).write_bytes(buf)
    manifest_path = root / "docstore-collection.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    fingerprint = f"{int.from_bytes(buf[504:512], 'little'):016x}"
    for entry in [manifest["index"], *manifest["shards"]]:
        if entry["file"] == name:
            entry["fingerprint"] = fingerprint
    body = json.dumps(dict(manifest, checksum=""), separators=(",", ":"), ensure_ascii=False)
    manifest["checksum"] = f"{xxh3(body.encode('utf-8')):016x}"
    manifest_path.write_text(
        json.dumps(manifest, separators=(",", ":"), ensure_ascii=False), encoding="utf-8"
    )


def test_a_collection_reads_as_section_13_says(tmp_path: Path):
    docs = all_types_docs(90, seed=13)
    parts = [docs[:30], [], docs[30:31], docs[31:60], docs[60:]]
    versions = [3, 3, 2, 2, 3]  # §10: a collection may hold shards of versions 2 and 3
    shards = [
        write(tmp_path / f"p{k}.docstore", ALL_FIELDS, part, format_version=v)
        for k, (part, v) in enumerate(zip(parts, versions))
    ]
    root = tmp_path / "c.docstore"
    store = docstore.seal(root, shards)
    spec = SpecCollection(root)
    assert len(spec.shards) == 5 and spec.starts == [0, 30, 30, 31, 60, len(docs)]
    assert [s.version for s in spec.shards] == versions
    # §13.2: the global id index.
    index = spec.index
    assert (index.version, index.flags, index.level, index.fields, index.dictionary) == (3, 1, 0xFF, [], b"")
    assert spec.locates_shard_blobs and not index.locates_blobs
    for p in range(index.count):
        assert index.blob(p) == struct.pack("<I", document_check(index.key_bytes_at(p), b"\0", p)) + b"\0"
    for p, (key, _) in enumerate(docs):
        assert spec.at(p)[0] == key
        assert spec.position(key) == p == store.position(key)
        ours = spec.get(key)
        assert ours is not None and all(same_value(ours[n], getattr(store[key], n)) for n in ALL_FIELDS)
    for missing in ("", "zz", docs[0][0] + "x"):
        assert spec.get(missing) is None and spec.position(missing) is None and missing not in store
    spec.verify()
    store.verify()
    store.close()

    # An index entry locating another blob of the same shard, or one past the end of its data
    # section (every checksum and the manifest recomputed): in a version 3 shard, the lookup reads
    # it and fails its check or its bounds; in a version 2 shard, the lookup goes through the
    # shard's doc offsets. verify() refuses all.
    good_index = (root / "index.docstore").read_bytes()
    key_index = index.entries[SECTIONS.index("key index")][0]
    keys = [k for k, _ in docs] + ["", "zz"]
    for shard_no, beyond in ((0, False), (0, True), (3, False)):
        first, second = docs[spec.starts[shard_no]][0], docs[spec.starts[shard_no] + 1][0]
        rank, other = index.find_rank(first.encode()), index.find_rank(second.encode())
        location = index.blob_locations[other]
        if beyond:
            location = (len(spec.shards[shard_no].sections["data"]) - 4, 5)
        damaged = corrupt(good_index, key_index + 32 * rank + 16, struct.pack("<QQ", *location))
        reseal_collection_file(root, "index.docstore", damaged)
        spec = SpecCollection(root)
        with docstore.open(root) as store:
            ours, theirs = lookups(spec, keys, len(docs)), lookups(store, keys, len(docs))
            assert ours == theirs
            errors = [key for i, key in enumerate(keys) if "error" in ours[3 * i : 3 * i + 3]]
            if versions[shard_no] == 3:  # get, position and `in` of `first` read the other blob
                assert (
                    errors == [first]
                    and ours[3 * keys.index(first) : 3 * keys.index(first) + 3] == ["error"] * 3
                )
            else:
                assert errors == [] and "error" not in ours
            with pytest.raises(docstore.CorruptStoreError, match="locates the blob of position"):
                store.verify()
            with pytest.raises(SpecError, match="locates a blob elsewhere"):
                spec.verify()
    reseal_collection_file(root, "index.docstore", good_index)
    SpecCollection(root).verify()

    # What docstore refuses, the spec reader refuses too: an edited manifest.
    manifest = root / "docstore-collection.json"
    manifest.write_text(manifest.read_text().replace(f'"count":{len(docs)}', f'"count":{len(docs) + 1}', 1))
    with pytest.raises(SpecError):
        SpecCollection(root)
    with pytest.raises(docstore.CorruptStoreError):
        docstore.open(root)
