"""How a collection scales with the number of documents: tiny generated documents (~40 bytes of
text each) built into a collection of shards (one process per shard), for 1M, 10M and 100M
documents: build time, the peak RSS of every process, open time, and lookups per second.

    python -m benches.collection_scale --docs 1e6,1e7,1e8 --shards 8 --dir /big/disk \
        --out docs/collection_scale.json
    python -m benches.collection_scale --docs 1e8 --cold 2000 --dir /big/disk

``--cold N`` then evicts every file of the collection from the page cache (the index too: the
device reads it counts are the index's and the documents') and makes N single lookups of random
ids; evicts again and reads N more in batches of 1,000; and runs fio's random 4 KiB reads at
depth 1 and 32 beside them (the floors).

Not a pytest-benchmark (one build of 100M documents takes minutes): it prints a table and writes
JSON for docs/collections.md.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import resource
import shutil
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

import docstore

from .cold_reads import device_reads
from .compare import evict, fio_randread

WORDS = np.array([f"w{i:03d}" for i in range(1000)])


def _ids(start: int, stop: int) -> pa.Array:
    return pa.array(np.char.add("doc", np.arange(start, stop).astype(str)))


def _texts(start: int, stop: int) -> pa.Array:
    """~40 bytes each: eight 4-letter words chosen by a hash of the position."""
    pos = np.arange(start, stop, dtype=np.uint64)
    parts = [
        WORDS[((pos * np.uint64(2654435761 + 97 * k)) >> np.uint64(7)) % np.uint64(1000)] for k in range(8)
    ]
    text = parts[0]
    for part in parts[1:]:
        text = np.char.add(np.char.add(text, " "), part)
    return pa.array(text)


def build_shard(path: str, start: int, stop: int) -> dict:
    t = time.perf_counter()
    with docstore.Writer(path, {"text": "str"}) as writer:
        for a in range(start, stop, 200_000):
            b = min(stop, a + 200_000)
            writer.add_many(_ids(a, b), {"text": _texts(a, b)})
    return {
        "seconds": time.perf_counter() - t,
        "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }


def run(n: int, shards: int, root: Path, reuse: bool = False) -> dict:
    """Builds and seals a collection of `n` documents and times it; with `reuse`, one an earlier
    run kept there is used as it is (and not timed)."""
    work = root / f"scale-{n}"
    if reuse and (work / "c.docstore").exists():
        return {"docs": n, "shards": shards, "reused": str(work)}
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    bounds = [n * k // shards for k in range(shards + 1)]
    paths = [str(work / f"part-{k}.docstore") for k in range(shards)]
    t = time.perf_counter()
    with concurrent.futures.ProcessPoolExecutor(
        shards, mp_context=multiprocessing.get_context("fork")
    ) as pool:
        parts = list(pool.map(build_shard, paths, bounds[:-1], bounds[1:]))
    built = time.perf_counter() - t
    t = time.perf_counter()
    docstore.seal(work / "c.docstore", paths).close()
    sealed = time.perf_counter() - t
    opens = []
    for _ in range(20):
        t = time.perf_counter()
        docstore.open(work / "c.docstore").close()
        opens.append(time.perf_counter() - t)
    store = docstore.open(work / "c.docstore")
    rng = np.random.default_rng(0)
    ids = [f"doc{i}" for i in rng.integers(0, n, 100_000)]
    t = time.perf_counter()
    for i in ids:
        store[i]
    get = len(ids) / (time.perf_counter() - t)
    batches = [ids[k : k + 1000] for k in range(0, len(ids), 1000)]
    t = time.perf_counter()
    for batch in batches:
        store.get_many(batch)
    get_many = len(ids) / (time.perf_counter() - t)
    info = store.info()
    store.close()
    return {
        "docs": n,
        "shards": shards,
        "build_s": built,
        "seal_s": sealed,
        "peak_rss_per_shard_process": max(p["peak_rss"] for p in parts),
        "peak_rss_sealing_process": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "open_ms_median": sorted(opens)[len(opens) // 2] * 1e3,
        "get_per_s": get,
        "get_many_docs_per_s": get_many,
        "stored_bytes": info["stored_bytes"],
        "raw_bytes": info["raw_bytes"],
    }


def cold(n: int, root: Path, lookups: int) -> dict:
    """Single lookups and batches of random ids, the whole collection evicted before each."""
    work = root / f"scale-{n}"
    # the sealed collection's own files (its index and its copies of the shards), not the parts
    files = sorted(f for f in (work / "c.docstore").rglob("*") if f.is_file())
    rng = np.random.default_rng(1)
    out: dict = {"cold_lookups": lookups}
    for kind in ("get", "get_many"):
        ids = [f"doc{i}" for i in rng.integers(0, n, lookups)]
        evict(files)
        reads = device_reads(files[0])
        t = time.perf_counter()
        with docstore.open(work / "c.docstore") as store:
            if kind == "get":
                for i in ids:
                    store[i]
            else:
                for k in range(0, len(ids), 1000):
                    store.get_many(ids[k : k + 1000])
        out[f"cold_{kind}_per_s"] = lookups / (time.perf_counter() - t)
        out[f"cold_{kind}_reads_per_doc"] = (device_reads(files[0]) - reads) / lookups
    for depth in (1, 32):
        out[f"fio_qd{depth}_iops"] = fio_randread(root / "fio", depth, size="2G", seconds=10)["iops"]
    shutil.rmtree(root / "fio", ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", default="1e6,1e7", help="comma-separated document counts")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument(
        "--dir", default="benches/.data", help="where to build (needs ~70 bytes per document)"
    )
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--keep", action="store_true", help="keep the built collections")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="use a collection an earlier --keep run left in --dir (then only --cold runs; it is kept)",
    )
    parser.add_argument(
        "--cold", type=int, default=0, metavar="N", help="then N lookups and N in batches, evicted"
    )
    args = parser.parse_args()
    results = []
    for n in (int(float(x)) for x in args.docs.split(",")):
        result = run(n, args.shards, Path(args.dir), args.reuse)
        if args.cold:
            result.update(cold(n, Path(args.dir), args.cold))
        results.append(result)
        print(json.dumps(result))
        if not (args.keep or args.reuse):
            shutil.rmtree(Path(args.dir) / f"scale-{n}", ignore_errors=True)
    columns = ("docs", "build_s", "seal_s", "peak_rss_per_shard_process", "open_ms_median", "get_per_s")
    print(" ".join(f"{c:>16}" for c in (*columns, "get_many_docs_per_s")))
    for r in results:
        if "reused" not in r:
            print(" ".join(f"{r[c]:>16,.2f}" for c in (*columns, "get_many_docs_per_s")))
    for r in results:
        if "cold_lookups" in r:
            print(
                f"{r['docs']:,} cold: {r['cold_get_per_s']:,.0f} lookups/s at "
                f"{r['cold_get_reads_per_doc']:.2f} "
                f"reads each, {r['cold_get_many_per_s']:,.0f} docs/s in batches of 1,000 at "
                f"{r['cold_get_many_reads_per_doc']:.2f}; fio QD1 {r['fio_qd1_iops']:,.0f}/s, "
                f"QD32 {r['fio_qd32_iops']:,.0f}/s"
            )
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
