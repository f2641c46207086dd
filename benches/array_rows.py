"""Numeric rows: a sparse bag-of-words count matrix in docstore vs a dense ``.npy`` memmap.

    python -m benches.array_rows                 # 20k rows x 10k vocabulary (a ~800 MB dense .npy)
    python -m benches.array_rows --rows 5000     # quicker

Topic models and linear probes read count or embedding rows at random. The usual file is a
dense float32 ``.npy`` read with ``np.load(mmap_mode="r")``: fixed size, so one row is one slice,
but every zero is stored. docstore stores each row as one lz4 block, where runs of zeros cost
almost nothing, and ``docstore.torch.ArrayDataset`` returns float tensors. Prints sizes and random
batch reads (rows/s), hot and cold page cache, as a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

import docstore

from .compare import evict


def counts(rows: int, vocab: int, seed: int = 0) -> np.ndarray:
    """Zipf-distributed word counts, ~80 distinct words per row."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, vocab + 1) ** 1.07
    weights /= weights.sum()
    dense = np.zeros((rows, vocab), dtype=np.float32)
    for r in range(rows):
        words = rng.choice(vocab, size=int(rng.poisson(120)), p=weights)
        np.add.at(dense[r], words, 1.0)
    return dense


def rate(read, batches) -> float:
    start = time.perf_counter()
    n = sum(len(read(b)) for b in batches)
    return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--vocab", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()
    from docstore.torch import ArrayDataset

    tmp = tempfile.mkdtemp(prefix="docstore-array-rows-")
    matrix = counts(args.rows, args.vocab)
    npy = os.path.join(tmp, "counts.npy")
    np.save(npy, matrix)
    stores = {}
    for dtype in ("float32", "uint16"):
        path = os.path.join(tmp, f"counts-{dtype}.docstore")
        with docstore.Writer(path, fields={"row": f"{dtype}[]"}) as writer:
            for start in range(0, args.rows, 1000):
                block = matrix[start : start + 1000].astype(dtype)
                writer.add_many([str(i) for i in range(start, start + len(block))], {"row": block})
        stores[dtype] = path
    rng = np.random.default_rng(1)
    batches = [np.sort(rng.choice(args.rows, args.batch, replace=False)) for _ in range(40)]
    mm = np.load(npy, mmap_mode="r")
    readers = {
        "dense .npy, np.load(mmap_mode='r')": (npy, lambda b: mm[b]),
        **{
            f"docstore {dtype}[] rows, ArrayDataset": (path, ArrayDataset(path, "row").__getitems__)
            for dtype, path in stores.items()
        },
    }
    for name, (_, read) in readers.items():  # correctness first
        got = np.stack([np.asarray(x, dtype=np.float32) for x in read(batches[0])])
        assert np.array_equal(got, matrix[batches[0]]), name
    dense_bytes = os.path.getsize(npy)
    distinct = int((matrix > 0).sum(1).mean())
    print(f"{args.rows:,} rows x {args.vocab:,} words, {distinct} distinct words per row\n")
    print(f"| layout | size on disk | x dense | random batches of {args.batch}, hot | cold |")
    print("|---|---|---|---|---|")
    for name, (path, read) in readers.items():
        size = os.path.getsize(path)
        rate(read, batches)  # maps the pages: the hot round then measures reads only
        hot = rate(read, batches)
        evict([path])
        cold = rate(read, batches[::-1])
        ratio = size / dense_bytes
        print(f"| {name} | {size / 1e6:,.1f} MB | {ratio:.3f}x | {hot:,.0f} rows/s | {cold:,.0f} rows/s |")
    for path in [npy, *stores.values()]:
        os.remove(path)
    os.rmdir(tmp)


if __name__ == "__main__":
    main()
