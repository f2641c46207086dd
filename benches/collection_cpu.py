"""What a collection's lookups cost in CPU against one file of the same documents: thread CPU
time, one decoding thread, rounds interleaved (one file, 64 shards with their own dictionaries,
64 shards sharing one), so that other jobs on a shared machine move the three alike.

    python -m benches.collection_cpu [--docs 200000] [--rounds 60]

Wall-clock throughput is in ``test_collections.py`` (pytest-benchmark); this is its steadier
companion on a loaded machine: with ``DOCSTORE_NUM_THREADS=1`` the CPU a batch takes is its work.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

os.environ["DOCSTORE_NUM_THREADS"] = "1"  # before docstore starts its pool

import docstore

from . import corpora

SHARDS = 64


def build(root: Path, n: int) -> tuple[dict[str, docstore.DocStore], list[str]]:
    records = list(corpora.msmarco_like(n))
    ids, texts = [r[0] for r in records], [r[1] for r in records]

    def write(path: Path, lo: int, hi: int, **options) -> Path:
        with docstore.Writer(path, {"text": "str"}, **options) as writer:
            writer.add_many(ids[lo:hi], {"text": texts[lo:hi]})
        return path

    one = docstore.open(write(root / "one.docstore", 0, n))
    step = -(-n // SHARDS)
    stores = {"one file": one}
    for kind, options in (
        (f"{SHARDS} shards", {}),
        (f"{SHARDS} shards, one dictionary", {"dictionary": one.dictionary}),
    ):
        parts = [
            write(root / f"{len(stores)}-{k}.docstore", k * step, min(n, (k + 1) * step), **options)
            for k in range(SHARDS)
        ]
        stores[kind] = docstore.seal(root / f"{len(stores)}.docstore", parts)
    return stores, ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="collection-cpu-") as scratch:
        stores, ids = build(Path(scratch), args.docs)
        rng = random.Random(0)
        n = len(ids)
        work = {
            "store[id] (x1024)": lambda s, r: [s[i].text for i in r["ids"][:256]],
            "get_many(1024)": lambda s, r: s.get_many(r["ids"]),
            "take(1024)": lambda s, r: s.take(r["positions"]),
        }
        rounds = [
            {"ids": rng.sample(ids, 1024), "positions": rng.sample(range(n), 1024)}
            for _ in range(args.rounds)
        ]
        for store in stores.values():  # warm the page cache and the decoders
            store.get_many(ids[:5000])
        took = {(kind, w): [] for kind in stores for w in work}
        for r in rounds:
            for kind, store in stores.items():
                for w, run in work.items():
                    start = time.thread_time()
                    run(store, r)
                    spent = time.thread_time() - start
                    took[kind, w].append(spent * 4 if w.startswith("store[id]") else spent)
        print(
            f"{args.docs:,} MS MARCO-like passages: median thread CPU per 1024 documents, "
            f"{args.rounds} rounds"
        )
        print("| | " + " | ".join(stores) + " |\n|---|" + "--:|" * len(stores))
        for w in work:
            base = statistics.median(took["one file", w])
            cells = []
            for kind in stores:
                t = statistics.median(took[kind, w])
                cells.append(f"{t * 1e3:.2f} ms ({base / t:.2f}x)")
            print(f"| `{w}` | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
