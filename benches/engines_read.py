"""What reading a collection costs from Ray Data and Spark, side by side on the same rows: rows/s
and CPU-seconds per million rows of ``docstore.ray.read`` on 1 and 2 Ray workers against the
store's own ``take`` loop in one process (and its Arrow twin, ``_take_columns``), Ray's
``read_parquet`` of the same rows (and ``read_lance`` where pylance is installed), Spark's
docstore reader against ``spark.read.parquet``; then the lookup join (``docstore.ray.lookup``)
against a Python-dict join of the same pairs and against Ray's own ``Dataset.join``.

    python -m benches.engines_read --docs 200000 --pairs 100000 --out docs/engines_read.json

Each engine's start-up (``ray.init`` and a first trivial job, the ``SparkSession`` and a first
job) is measured apart from the reads. CPU is that of this process and its live descendants
(Ray's raylet and workers, Spark's JVM and Python workers: ``engine_build.proc_cpu``), so it
holds every process of the run. Every read is forced the same way: Ray's datasets are
``materialize()``d (blocks in the object store), Spark's written to the ``noop`` sink (no
``count()``, which Parquet answers from its footers). The rows are MS MARCO-like passages
(``corpora.msmarco_like``): ``doc_id`` and ``text``; the store is a collection of 8 shards
(as an 8-task ``docstore.ray.write`` makes), the Parquet the same rows in 8 files.

Not a pytest-benchmark: each engine is started once, and a run takes minutes. docs/engines.md
has the figures and the plot (``--plot``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import corpora
from .engine_build import proc_cpu

SHARDS = 8


def measure(label: str, rows: int, fn: Callable[[], Any], results: list[dict], **extra: Any) -> Any:
    wall, cpu = time.perf_counter(), proc_cpu()
    out = fn()
    wall, cpu = time.perf_counter() - wall, proc_cpu() - cpu
    results.append(
        {
            "case": label,
            "rows": rows,
            "wall_s": wall,
            "cpu_s": cpu,
            "rows_per_s": rows / wall if wall else None,
            "cpu_s_per_million": cpu / rows * 1e6 if rows else None,
            **extra,
        }
    )
    print(f"{label:32s} {rows:>9d} rows {wall:8.2f} s {cpu:8.2f} CPU-s", flush=True)
    return out


def prepare(work: Path, n: int) -> tuple[str, str]:
    """The collection (8 shards) and the Parquet files (8) of the same ``n`` rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import docstore

    ids, texts = zip(*corpora.msmarco_like(n))
    table = pa.table({"doc_id": list(ids), "text": list(texts)})
    parquet = work / "parquet"
    parquet.mkdir(parents=True, exist_ok=True)
    step = -(-n // SHARDS)
    shards = []
    for i in range(SHARDS):
        part = table.slice(i * step, step)
        pq.write_table(part, parquet / f"part-{i}.parquet")
        path = work / f"shard-{i}.docstore"
        with docstore.Writer(path, {"text": "str"}, level=0) as writer:
            writer.add_many(part, id_field="doc_id")
        shards.append(str(path))
    store = work / "corpus.docstore"
    docstore.seal(store, shards, overwrite=True)
    return str(store), str(parquet)


def local_reads(store_path: str, n: int, results: list[dict]) -> None:
    import numpy as np

    import docstore
    from docstore import _engine_read

    docstore.set_num_threads(1)  # one core, as one Ray worker has
    store = docstore.open(store_path)

    def take_loop() -> int:
        got = 0
        for start in range(0, n, 8192):
            got += len(store.take(range(start, min(start + 8192, n)), fields=["doc_id", "text"]))
        return got

    def arrow_loop() -> int:
        got = 0
        for start in range(0, n, 8192):
            positions = np.arange(start, min(start + 8192, n))
            got += _engine_read.take_batch(store, positions, store.fields, ["text"]).num_rows
        return got

    measure("take loop (1 process, 1 thread)", n, take_loop, results)
    measure("Arrow take loop (1 process)", n, arrow_loop, results)
    docstore.set_num_threads(0)


def ray_reads(store_path: str, parquet: str, n: int, pairs: int, results: list[dict], workers: int) -> None:
    import ray

    import docstore.ray

    def start() -> None:
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, configure_logging=False)
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False
        ray.data.range(workers, override_num_blocks=workers).map_batches(lambda b: b).materialize()

    measure(f"ray start-up ({workers} workers)", 0, start, results, startup=True)
    try:
        ds = measure(
            f"docstore.ray.read ({workers} workers)",
            n,
            lambda: docstore.ray.read(store_path, parallelism=2 * workers).materialize(),
            results,
        )
        assert ds.count() == n
        del ds
        ds = measure(
            f"ray read_parquet ({workers} workers)",
            n,
            lambda: ray.data.read_parquet(parquet, override_num_blocks=2 * workers).materialize(),
            results,
        )
        assert ds.count() == n
        del ds
        try:
            import lance  # noqa: F401
        except ImportError:
            results.append(
                {"case": f"ray read_lance ({workers} workers)", "skipped": "pylance not installed"}
            )
        if workers == 2 and pairs:
            lookups(store_path, parquet, n, pairs, results)
    finally:
        ray.shutdown()


def lookups(store_path: str, parquet: str, n: int, pairs: int, results: list[dict]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    import ray

    import docstore
    import docstore.ray

    store = docstore.open(store_path)
    rng = random.Random(1)
    ids = list(store)
    wanted = [ids[rng.randrange(n)] for _ in range(pairs)]
    table = pa.table({"qid": list(range(pairs)), "doc_id": wanted})
    blocks = [table.slice(i, -(-pairs // 4)) for i in range(0, pairs, -(-pairs // 4))]

    ds = measure(
        "docstore.ray.lookup (2 actors)",
        pairs,
        lambda: docstore.ray.lookup(ray.data.from_arrow(blocks), store, columns=["text"]).materialize(),
        results,
    )
    assert ds.count() == pairs
    del ds
    corpus = ray.data.read_parquet(parquet)
    try:
        import polars  # noqa: F401  (Ray's join runs on it)
    except ImportError:
        results.append({"case": "ray Dataset.join (2 workers)", "skipped": "Ray's join needs polars"})
    else:
        ds = measure(
            "ray Dataset.join (2 workers)",
            pairs,
            lambda: (
                ray.data.from_arrow(blocks)
                .join(corpus, join_type="inner", num_partitions=4, on=("doc_id",))
                .materialize()
            ),
            results,
        )
        assert ds.count() == pairs
        del ds
    texts: dict[str, str] = {}

    def build_dict() -> None:
        corpus_table = pq.read_table(parquet)
        texts.update(zip(corpus_table.column("doc_id").to_pylist(), corpus_table.column("text").to_pylist()))

    measure("dict join: build the dict", n, build_dict, results, startup=True)
    measure("dict join (1 process)", pairs, lambda: [texts[d] for d in wanted], results)


def spark_reads(store_path: str, parquet: str, n: int, results: list[dict]) -> None:
    from pyspark.sql import SparkSession

    import docstore.spark

    holder: dict[str, Any] = {}

    def start() -> None:
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("docstore-engines-read")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        docstore.spark.register(spark)
        spark.range(4, numPartitions=2).mapInArrow(lambda it: it, "id long").count()  # Python workers
        holder["spark"] = spark

    measure("spark start-up (local[2])", 0, start, results, startup=True)
    spark = holder["spark"]
    try:
        reader = docstore.spark.read(spark, store_path, parallelism=4)
        measure(
            "spark docstore reader (local[2])",
            n,
            lambda: reader.write.format("noop").mode("overwrite").save(),
            results,
        )
        frame = spark.read.parquet(parquet)
        measure(
            "spark.read.parquet (local[2])",
            n,
            lambda: frame.write.format("noop").mode("overwrite").save(),
            results,
        )
    finally:
        spark.stop()


def table(results: list[dict]) -> str:
    lines = [
        "| case | rows | wall s | rows/s | CPU-s per 1M rows |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in results:
        if "skipped" in r:
            lines.append(f"| {r['case']} | | | skipped: {r['skipped']} | |")
        elif r.get("startup"):
            lines.append(f"| {r['case']} (start-up) | | {r['wall_s']:.1f} | | {r['cpu_s']:.1f} CPU-s |")
        else:
            rate, cpu = f"{r['rows_per_s']:,.0f}", f"{r['cpu_s_per_million']:.1f}"
            lines.append(f"| {r['case']} | {r['rows']:,} | {r['wall_s']:.2f} | {rate} | {cpu} |")
    return "\n".join(lines)


def plot(results: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in results if "skipped" not in r and not r.get("startup")]
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.45 * len(rows) + 1.5), sharey=True)
    labels = [r["case"] for r in rows]
    axes[0].barh(labels, [r["rows_per_s"] for r in rows], color="tab:blue")
    axes[0].set_xlabel("rows/s (higher is better)")
    axes[1].barh(labels, [r["cpu_s_per_million"] for r in rows], color="tab:orange")
    axes[1].set_xlabel("CPU-seconds per million rows (lower is better)")
    axes[0].invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--pairs", type=int, default=100_000, help="(query, doc_id) pairs of the lookup join")
    parser.add_argument("--dir", default=None, help="work directory (default: benches/.data/engines_read)")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument("--plot", default=None, help="write the plot (PNG) here")
    parser.add_argument("--skip", default="", help="comma-separated: ray1, ray2, spark, local")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    work = Path(args.dir or Path(__file__).resolve().parent / ".data" / "engines_read")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    load = os.getloadavg()
    store_path, parquet = prepare(work, args.docs)
    results: list[dict] = []
    if "local" not in skip:
        local_reads(store_path, args.docs, results)
    for workers in (1, 2):
        if f"ray{workers}" not in skip:
            ray_reads(store_path, parquet, args.docs, args.pairs, results, workers)
    if "spark" not in skip:
        spark_reads(store_path, parquet, args.docs, results)
    report = {
        "docs": args.docs,
        "pairs": args.pairs,
        "cpus": os.cpu_count(),
        "loadavg_before": load,
        "results": results,
    }
    print(table(results))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    if args.plot:
        plot(results, args.plot)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
