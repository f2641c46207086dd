"""Device reads per lookup in a cold page cache: what the key index layout costs a lookup.

Builds (once) a store of MS MARCO-like passages, then for each round evicts the store from the
page cache (``posix_fadvise(DONTNEED)``), opens it and makes N random lookups by id, counting the
reads the store's block device completed (``/sys/dev/block/MAJ:MIN/stat``, so other I/O on the
same device counts too: run it on a quiet machine). Then one ``get_many`` of 1024 ids, cold.

With ``--keep-index`` only the documents are evicted: the header, schema, dictionary and index
sections are read back into the page cache before each round. That is the steady state of a
corpus larger than RAM whose index (~30 bytes per document) stays cached because every lookup
uses it: a lookup then reads one page, the document's.

With ``--load-index`` the whole store is evicted and opened with ``docstore.open(...,
load_index=True)``, which reads the index whole at open: the open's time and reads are reported
apart, and the lookups after it should read one page each, as with ``--keep-index``.

    python -m benches.cold_reads                 # 1M passages, mmap
    python -m benches.cold_reads --docs 200000 --read pread
    python -m benches.cold_reads --keep-index
    python -m benches.cold_reads --load-index
    python -m benches.cold_reads --format-version 2   # before blob locations in the key index
"""

from __future__ import annotations

import argparse
import os
import random
import struct
import time
from pathlib import Path

import docstore

from . import corpora
from .compare import evict


def device_reads(path: Path) -> int:
    """Reads completed by the block device (or partition) holding ``path``."""
    dev = os.stat(path).st_dev
    stat = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/stat")
    return int(stat.read_text().split()[0])


DATA_SECTION = 2  # docs/format.md: the section table at byte 64, 24 bytes per section


def evict_documents(path: Path) -> None:
    """Evicts the whole store, then reads everything but the documents back into the page cache."""
    evict([path])
    with open(path, "rb") as f:
        header = f.read(512)
        data_start, data_len = struct.unpack_from("<QQ", header, 64 + 24 * DATA_SECTION)
        fd = f.fileno()
        size = os.fstat(fd).st_size
        for start, end in ((0, data_start), (data_start + data_len, size)):
            for at in range(start, end, 1 << 20):
                os.pread(fd, min(1 << 20, end - at), at)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--read", choices=["mmap", "pread"], default="mmap")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--keep-index", action="store_true", help="evict only the documents (the index stays cached)"
    )
    parser.add_argument(
        "--load-index", action="store_true", help="evict all, open with load_index=True (timed apart)"
    )
    parser.add_argument("--format-version", type=int, default=docstore.FORMAT_VERSION)
    args = parser.parse_args()
    if args.keep_index and args.load_index:
        parser.error("--keep-index and --load-index are two ways to the same state: pick one")
    evict_store = evict_documents if args.keep_index else lambda p: evict([p])

    path = corpora.DATA_DIR / f"cold_reads-n{args.docs}-v{args.format_version}.docstore"
    try:
        docstore.open(path).close()
    except (OSError, docstore.DocstoreError):
        path.parent.mkdir(parents=True, exist_ok=True)
        options = {"overwrite": True, "format_version": args.format_version}
        with docstore.Writer(path, fields={"text": "str"}, **options) as w:
            for doc_id, text in corpora.msmarco_like(args.docs):
                w.add(doc_id, text=text)
    with docstore.open(path) as s:
        ids = list(s.keys())
    rng = random.Random(0)
    evicted = "documents evicted, index cached" if args.keep_index else "whole store evicted"
    if args.load_index:
        evicted += ", opened with load_index=True"
    opens: list[tuple[float, int]] = []

    def opened():
        """The store, opened as the arguments say; a timed load of its index counted apart."""
        nonlocal r0, t0
        if not args.load_index:
            return docstore.open(path, read=args.read)
        store = docstore.open(path, read=args.read, load_index=True)
        opens.append((time.perf_counter() - t0, device_reads(path) - r0))
        r0, t0 = device_reads(path), time.perf_counter()
        return store

    size = path.stat().st_size / 2**20
    what = f"format {args.format_version}, {size:.0f} MiB, read={args.read}"
    print(f"{args.docs:,} passages, {what}, {evicted}")
    for n in (1, 10, 200):
        reads = seconds = 0.0
        for _ in range(args.rounds):
            sample = rng.sample(ids, n)
            evict_store(path)
            r0, t0 = device_reads(path), time.perf_counter()
            with opened() as s:
                for doc_id in sample:
                    s[doc_id].text  # noqa: B018
                seconds += time.perf_counter() - t0
                reads += device_reads(path) - r0
        print(
            f"  {n:4d} single lookups after open: {reads / args.rounds / n:5.2f} reads and "
            f"{seconds / args.rounds / n * 1e6:6.0f} us per lookup"
        )
    sample = rng.sample(ids, 1024)
    evict_store(path)
    r0, t0 = device_reads(path), time.perf_counter()
    with opened() as s:
        s.get_many(sample, field="text")
        seconds = time.perf_counter() - t0
        reads = device_reads(path) - r0
    print(f"  get_many of 1024 ids: {reads / 1024:.2f} reads per doc, {1024 / seconds:,.0f} docs/s")
    if opens:
        with docstore.open(path) as s:
            index = s.load_index()
        secs = sorted(o[0] for o in opens)[len(opens) // 2]
        reads = sorted(o[1] for o in opens)[len(opens) // 2]
        print(
            f"  open with load_index=True: {secs * 1e3:.0f} ms and {reads} device reads (median of "
            f"{len(opens)}) for {index / 2**20:.1f} MiB of index, {index / args.docs:.1f} bytes a document"
        )


if __name__ == "__main__":
    main()
