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
    python -m benches.cold_reads --keep-index --fio 5   # and fio's QD1 reads of the same file
    python -m benches.cold_reads --keep-index --paired 500   # each lookup beside raw reads

``--paired N`` (with ``--keep-index``) times N single lookups a round, each beside three raw
reads of other cold pages of the same documents section, in the same loop (this virtual disk's
latency drifts by 1.5x within minutes, so only reads timed side by side compare): with
``O_DIRECT`` (the device), with ``pread`` through the page cache (``POSIX_FADV_RANDOM``, as fio
reads), and by a fault of a ``MADV_RANDOM`` map; each raw page is dropped from the page cache
again after its read. Then the same lookup once more, its document now cached, right after those
reads: the lookup's own CPU on a core that has just waited for the device.
"""

from __future__ import annotations

import argparse
import mmap
import os
import random
import statistics
import struct
import time
from pathlib import Path

import docstore

from . import corpora
from .compare import evict, fio_randread


def device_reads(path: Path) -> int:
    """Reads completed by the block device (or partition) holding ``path``."""
    dev = os.stat(path).st_dev
    stat = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/stat")
    return int(stat.read_text().split()[0])


DATA_SECTION = 2  # docs/format.md: the section table at byte 64, 24 bytes per section


def data_section(path: Path) -> tuple[int, int]:
    """Where the documents lie in the store file: (offset, length), from its section table."""
    with open(path, "rb") as f:
        return struct.unpack_from("<QQ", f.read(512), 64 + 24 * DATA_SECTION)


def evict_documents(path: Path) -> None:
    """Evicts the whole store, then reads everything but the documents back into the page cache."""
    evict([path])
    data_start, data_len = data_section(path)
    with open(path, "rb") as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        for start, end in ((0, data_start), (data_start + data_len, size)):
            for at in range(start, end, 1 << 20):
                os.pread(fd, min(1 << 20, end - at), at)


def paired_floors(path: Path, ids: list, read: str, pairs: int, rounds: int, rng) -> dict[str, float]:
    """Median microseconds of a cold lookup and of the raw reads timed beside it (``--paired``)."""
    data_start, data_len = data_section(path)
    page = mmap.PAGESIZE
    pages = range(-(-data_start // page), (data_start + data_len) // page)
    direct = os.open(path, os.O_RDONLY | os.O_DIRECT)
    buffered = os.open(path, os.O_RDONLY)
    os.posix_fadvise(buffered, 0, 0, os.POSIX_FADV_RANDOM)
    aligned = mmap.mmap(-1, page)  # O_DIRECT reads into page-aligned memory
    times: dict[str, list[float]] = {k: [] for k in ("lookup", "direct", "pread", "fault", "again")}
    clock = time.perf_counter
    try:
        for _ in range(rounds):
            sample = rng.sample(ids[1:], pairs)  # ids[0] warms the store up
            floor_pages = iter(rng.sample(pages, 3 * pairs))
            evict_documents(path)
            with open(path, "rb") as f, docstore.open(path, read=read) as s:
                mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                mapped.madvise(mmap.MADV_RANDOM)
                s[ids[0]].text  # noqa: B018
                for doc_id in sample:
                    t0 = clock()
                    s[doc_id].text  # noqa: B018
                    t1 = clock()
                    os.preadv(direct, [aligned], next(floor_pages) * page)
                    t2 = clock()
                    os.pread(buffered, page, at_pread := next(floor_pages) * page)
                    t3 = clock()
                    mapped[at_fault := next(floor_pages) * page]
                    t4 = clock()
                    s[doc_id].text  # noqa: B018
                    t5 = clock()
                    for k, dt in zip(times, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
                        times[k].append(dt)
                    # the raw reads' pages go again, so that later lookups find them cold
                    mapped.madvise(mmap.MADV_DONTNEED, at_fault, page)
                    for at in (at_pread, at_fault):
                        os.posix_fadvise(buffered, at, page, os.POSIX_FADV_DONTNEED)
                mapped.close()
    finally:
        os.close(direct)
        os.close(buffered)
        aligned.close()
    return {k: statistics.median(v) * 1e6 for k, v in times.items()}


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
    parser.add_argument(
        "--fio",
        type=int,
        default=0,
        metavar="SECONDS",
        help="then fio's QD1 4 KiB random reads of the store file, evicted: O_DIRECT, pread, mmap",
    )
    parser.add_argument(
        "--paired",
        type=int,
        default=0,
        metavar="N",
        help="then N single lookups a round, each beside raw reads of cold pages (O_DIRECT, pread, fault)",
    )
    args = parser.parse_args()
    if args.paired and not args.keep_index:
        parser.error("--paired measures the steady state: give --keep-index too")
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
    if args.fio:
        # One device read at queue depth 1, on the same file: the device's own (O_DIRECT), and
        # each of the two ways a store reads through the page cache. Timed apart from the lookups
        # above (see --paired for a ratio).
        print(f"  fio, QD1 4 KiB random reads of the store file (evicted), at most {args.fio} s each:")
        for engine, direct, what in (
            ("psync", True, "O_DIRECT pread (the device)"),
            ("psync", False, "pread through the page cache"),
            ("mmap", False, "page faults of a mapping"),
        ):
            evict([path])
            f = fio_randread(path.parent, 1, seconds=args.fio, engine=engine, direct=direct, file=path)
            print(f"    {what:31s} {f['iops']:8,.0f} IOPS, {1e6 / f['iops']:5.1f} us a read")
    if args.paired:
        med = paired_floors(path, ids, args.read, args.paired, args.rounds, rng)
        print(f"  {args.paired} x {args.rounds} single lookups beside raw reads of cold pages (medians):")
        print(f"    a lookup {med['lookup']:5.1f} us; again, its document cached: {med['again']:4.1f} us")
        for k, what in (("direct", "O_DIRECT pread"), ("pread", "pread, page cache"), ("fault", "a fault")):
            print(f"    {what:18s} {med[k]:5.1f} us: docstore at {med[k] / med['lookup']:.2f} of its IOPS")
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
