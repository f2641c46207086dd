"""Documents larger than the memory at hand, genuine or claimed by a crafted file.

Every buffer a read sizes from the file is bounded by what the file can hold (a compressed
record's claimed length by what lz4 can make of its payload, docs/format.md §6.1) and allocated
fallibly: a claim the payload cannot back is a ``CorruptStoreError``, a genuine document that does
not fit under the process's memory limit a ``MemoryError``, and the process lives on either way.
Reads run in a fresh interpreter under ``RLIMIT_AS`` (an abort there fails the test, not the run).
"""

from __future__ import annotations

import json
import struct
import sys

import pytest
import xxhash

import docstore

from ..conftest import run_python

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS and /proc are Linux's")

MAX_INPUT = 0x7E000000  # lz4's LZ4_MAX_INPUT_SIZE: the most a compressed record may claim

# Runs `reads` (name -> expression over `store`) in a fresh interpreter, each under an address
# space limit of the process's size then plus `headroom` bytes (lifted after each), after reading
# "small" once (the decoding threads and their buffers exist by then). Prints the outcome of each
# read: "ok", or the exception's class and message.
UNDER_LIMIT = """
import json, resource, sys, docstore

store = docstore.open({path!r}, read={read!r})
assert store["small"].b == b"x"

def vm_size():
    for line in open("/proc/self/status"):
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024

outcomes = {{}}
for name, expression in {reads!r}.items():
    resource.setrlimit(resource.RLIMIT_AS, (vm_size() + {headroom}, resource.RLIM_INFINITY))
    try:
        outcomes[name] = "ok" if eval(expression) is not False else "false"
    except Exception as e:
        outcomes[name] = f"{{type(e).__name__}}: {{e}}"
    # The process goes on: a small document still reads, under the limit too.
    assert store["small"].b == b"x" and store.at(0).b == b"x"
    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
print(json.dumps(outcomes))
"""

CLI_UNDER_LIMIT = """
import resource, sys, docstore.cli

for line in open("/proc/self/status"):
    if line.startswith("VmSize:"):
        limit = int(line.split()[1]) * 1024 + {headroom}
resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
sys.exit(docstore.cli.main(["get", {path!r}, "big"]))
"""

READS = {
    "get": 'store["big"]',
    "at": "store.at(1)",
    "take": "store.take([0, 1])",
    "get_many": 'store.get_many(["small", "big"])',
    "field": 'store.get("big", field="b")',
    "verify": "store.verify()",
}


def read_under_limit(path, headroom: int, read: str = "mmap", reads: dict[str, str] = READS) -> dict:
    code = UNDER_LIMIT.format(path=str(path), read=read, reads=reads, headroom=headroom)
    proc = run_python(code, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def blob_at(buf: bytes, position: int) -> tuple[int, int]:
    """Where blob `position` lies in the file (docs/format.md §4.3, §4.4)."""
    (data_at,) = struct.unpack_from("<Q", buf, 64 + 24 * 2)
    (offsets_at,) = struct.unpack_from("<Q", buf, 64 + 24 * 3)
    start, end = struct.unpack_from("<QQ", buf, offsets_at + 8 * position)
    return data_at + start, data_at + end


def reseal(buf: bytearray) -> None:
    for i in range(9):
        at = 64 + 24 * i
        offset, length = struct.unpack_from("<QQ", buf, at)
        struct.pack_into("<Q", buf, at + 16, xxhash.xxh3_64_intdigest(bytes(buf[offset : offset + length])))
    struct.pack_into("<Q", buf, 504, xxhash.xxh3_64_intdigest(bytes(buf[:504])))


def varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


def test_a_crafted_claim_of_2_gb_is_corrupt_not_an_abort(tmp_path):
    """A compressed record claiming lz4's largest length (2,113,929,216 bytes) behind a payload
    long enough for lz4 to reach it (8.3 MB): the reader allocated the claim before decoding and,
    under a memory limit, aborted. Now the claim must match what the payload's lz4 sequences add
    up to before anything is allocated."""
    path = tmp_path / "crafted.docstore"
    payload_len = MAX_INPUT // 255 + 100_000
    with docstore.Writer(path, {"b": "bytes"}, level=-1) as w:  # stored as is: bytes we can rewrite
        w.add("small", b=b"x")
        w.add("big", b=bytes(payload_len))
    buf = bytearray(path.read_bytes())
    start, end = blob_at(buf, 1)
    body_len = end - start - 4
    header = varint(MAX_INPUT << 1 | 1)
    for filler in (b"\x00", b"\xff", b"\x1f\x01\x00"):  # matches of 4 bytes; lengths of 255s; ...
        payload = (filler * body_len)[: body_len - len(header)]
        assert 255 * len(payload) >= MAX_INPUT
        body = header + payload
        position = xxhash.xxh3_64_intdigest(struct.pack("<Q", 1))  # format 3 binds it (§6.3)
        check = (xxhash.xxh3_64_intdigest(b"big") ^ xxhash.xxh3_64_intdigest(body) ^ position) & 0xFFFFFFFF
        buf[start:end] = struct.pack("<I", check) + body
        reseal(buf)
        path.write_bytes(buf)
        for read in ("mmap", "pread"):
            outcomes = read_under_limit(path, 1 << 30, read)
            for name, outcome in outcomes.items():
                assert outcome.startswith("CorruptStoreError"), (read, name, outcome)
                assert "2113929216" in outcome, (read, name, outcome)


def test_a_genuine_document_too_large_for_the_memory_limit_raises_memory_error(tmp_path):
    """A genuine 256 MiB document (1 MB on disk) read under limits that leave it 128 MiB (its
    decoding fails) and 384 MiB (it decodes, then its copy into the batch or, for a single lookup
    alone in its process, which builds its value from the decoded record, CPython making the
    `bytes` fails: a MemoryError of CPython's own, without a message): MemoryError, not an
    abort, and without the limit it reads."""
    size = 256 << 20
    path = tmp_path / "big.docstore"
    with docstore.Writer(path, {"b": "bytes"}, level=0) as w:
        w.add("small", b=b"x")
        w.add("big", b=b"0123456789abcdef" * (size // 16))
    assert path.stat().st_size < 4 << 20
    # verify() only decodes (on the pool's threads), so it is asked only where decoding fails.
    batched = {name: read for name, read in READS.items() if name != "verify"}
    for headroom, reads in ((128 << 20, READS), (384 << 20, batched)):
        for read in ("mmap", "pread"):
            outcomes = read_under_limit(path, headroom, read, reads)
            assert outcomes.keys() == reads.keys()
            for name, outcome in outcomes.items():
                ours = outcome.startswith("MemoryError: out of memory")
                cpythons = headroom > size and outcome == "MemoryError: "
                assert ours or cpythons, (headroom, read, name, outcome)
    cli = run_python(CLI_UNDER_LIMIT.format(path=str(path), headroom=128 << 20))
    assert cli.returncode == 1 and "docstore get: error: out of memory" in cli.stderr, cli.stderr
    ok = read_under_limit(path, 1 << 40, reads={"get": 'store["big"].b == b"0123456789abcdef" * (256 << 16)'})
    assert ok == {"get": "ok"}
