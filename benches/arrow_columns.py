"""Arrow numeric columns through ``Writer.add_many(table)``: docs/s.

    python -m benches.arrow_columns                  # 1M rows: int64, float64, float32[16]
    python -m benches.arrow_columns --rows 200000 --repeat 5

One table of ``--rows`` rows (string ids, an int64, a float64 and a ``--dim``-element float32
list column), added whole with ``add_many(table)`` to a fresh store (level 0, so that encoding,
not compression, is what is timed as far as it can be); the best of ``--repeat`` runs, counting
``finish()``, in wall time and in CPU time of the process (every thread: steadier than wall
time on a shared machine). ``--level -1`` (no compression) leaves the writer nothing but the
encoding to do. ``--row-path`` times the value-by-value path the same table took before Arrow
numeric columns were read from their buffers, for the comparison.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

import docstore
from docstore import _writer


def table(rows: int, dim: int) -> pa.Table:
    rng = np.random.default_rng(0)
    ids = pa.array(np.arange(rows).astype(str).astype(object), pa.string())
    vectors = rng.standard_normal(rows * dim, dtype=np.float32)
    offsets = pa.array(np.arange(0, rows * dim + 1, dim, dtype=np.int32))
    return pa.table(
        {
            "doc_id": ids,
            "n": pa.array(rng.integers(-(10**12), 10**12, rows)),
            "x": pa.array(rng.standard_normal(rows)),
            "v": pa.ListArray.from_arrays(offsets, pa.array(vectors)),
        }
    )


def run(data: pa.Table, path: Path, level: int) -> tuple[float, float]:
    """Wall seconds and CPU seconds (every thread of the process, compression's included)."""
    fields = {"n": "int64", "x": "float64", "v": "float32[]"}
    start, cpu = time.perf_counter(), time.process_time()
    with docstore.Writer(path, fields=fields, level=level, overwrite=True) as w:
        w.add_many(data)
    return time.perf_counter() - start, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--level", type=int, default=0)
    parser.add_argument("--row-path", action="store_true", help="force the value-by-value path")
    args = parser.parse_args()
    data = table(args.rows, args.dim)
    if args.row_path:
        if not hasattr(_writer, "_arrow_columns"):
            raise SystemExit("this docstore has no buffer path to turn off: it takes the row path already")
        _writer._arrow_columns = lambda *a, **k: None  # type: ignore[attr-defined]
    with tempfile.TemporaryDirectory() as tmp:
        runs = [run(data, Path(tmp) / "s", args.level) for _ in range(args.repeat)]
        best, cpu = min(r[0] for r in runs), min(r[1] for r in runs)
        fingerprint = docstore.open(Path(tmp) / "s").fingerprint
    path = "row" if args.row_path or not hasattr(_writer, "_arrow_columns") else "buffers"
    print(
        f"{args.rows} rows (int64, float64, float32[{args.dim}]), level {args.level}, {path} path: "
        f"{best:.2f} s, {args.rows / best:,.0f} docs/s; {cpu:.2f} CPU s, {args.rows / cpu:,.0f} docs per "
        f"CPU second (fingerprint {fingerprint:#x})"
    )


if __name__ == "__main__":
    main()
