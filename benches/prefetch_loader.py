"""A DataLoader that reads ahead of its sampler (``docstore.torch.PrefetchSampler``) over cold
local documents, against the same DataLoader without it and against fio's IOPS in the same run.

A store of ``--docs`` passages (benches/remote_peers.py's corpus) is built once. Each round evicts
its documents from the page cache and reads the key index and the rest back (the steady state of a
corpus larger than RAM, ``benches/cold_reads.py --keep-index``), then runs a DataLoader of
``--workers`` workers, batches of ``--batch`` in a seeded random order, for ``--batches`` batches,
with and without the prefetch (alternating which goes first). Reported: documents/s after the
first batch, the device reads completed per document (``/sys/dev/block/.../stat``: run it on a
quiet machine), and the ratio of docs/s to fio's random 4 KiB O_DIRECT reads at depth 1, 32 and
128 on the same file system, measured in the same run.

    python -m benches.prefetch_loader --docs 1000000
    python -m benches.prefetch_loader --docs 200000 --rounds 2 --ahead 8 32
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from .cold_reads import device_reads, evict_documents
from .compare import fio_randread
from .remote import build


def run_loader(path: Path, workers: int, batch: int, batches: int, ahead: int, seed: int) -> dict:
    import torch
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler

    from docstore.torch import DocDataset, PrefetchSampler

    dataset = DocDataset(str(path), field="text")
    sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(seed))
    batch_sampler: object = BatchSampler(sampler, batch, drop_last=False)
    if ahead:
        batch_sampler = PrefetchSampler(batch_sampler, dataset, batches=ahead)  # type: ignore[arg-type]
    loader = DataLoader(
        dataset,
        batch_sampler=batch_sampler,
        num_workers=workers,
        collate_fn=list,
        multiprocessing_context="fork",
    )
    it = iter(loader)
    next(it)  # workers started: start-up is not throughput
    reads, t, n = device_reads(path), time.perf_counter(), 0
    for i, got in enumerate(it, 1):
        n += len(got)
        if i + 1 == batches:
            break
    seconds = time.perf_counter() - t
    out = {"docs": n, "docs_per_s": n / seconds, "reads_per_doc": (device_reads(path) - reads) / n}
    del it, loader
    if ahead:
        out["stats"] = dict(batch_sampler.stats)  # type: ignore[attr-defined]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--ahead", type=int, nargs="+", default=[8, 32], help="PrefetchSampler batches")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--fio-seconds", type=int, default=5)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    directory = Path(args.dir or tempfile.mkdtemp(prefix="docstore-prefetch-"))
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"passages-{args.docs}.docstore"
    if not path.exists():
        t = time.perf_counter()
        build(str(path), args.docs)
        print(f"built {path} in {time.perf_counter() - t:.1f}s", file=sys.stderr)
    results: dict = {"docs": args.docs, "stored_bytes": path.stat().st_size, "fio": {}, "runs": []}
    for depth in (1, 32, 128):
        results["fio"][depth] = fio_randread(directory / "fio", depth, size="1G", seconds=args.fio_seconds)
        print(f"fio QD{depth}: {results['fio'][depth]['iops']:,.0f} IOPS", file=sys.stderr)
    (directory / "fio" / "fio.test").unlink(missing_ok=True)
    modes = [0, *args.ahead]
    # The ceiling that is not the device's: the same loader with every page cached (the CPU).
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass
    for r in range(args.rounds):
        run = {"round": r, "ahead": "warm", **run_loader(path, args.workers, args.batch, args.batches, 0, r)}
        print(json.dumps(run), file=sys.stderr)
        results["runs"].append(run)
    for r in range(args.rounds):
        for ahead in modes[r % len(modes) :] + modes[: r % len(modes)]:
            evict_documents(path)
            measured = run_loader(path, args.workers, args.batch, args.batches, ahead, r)
            run = {"round": r, "ahead": ahead, **measured}
            print(json.dumps(run), file=sys.stderr)
            results["runs"].append(run)
    print(table(results))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


def table(results: dict) -> str:
    fio = {int(k): v["iops"] for k, v in results["fio"].items()}
    peak = max(fio.values())
    lines = [
        f"{results['docs']:,} passages, documents cold, key index cached; fio 4 KiB random reads: "
        + ", ".join(f"QD{d} {iops:,.0f}" for d, iops in sorted(fio.items())),
        "",
        "| DataLoader | docs/s (median, min-max) | device reads/doc | of fio QD32 | of fio's peak |",
        "|---|--:|--:|--:|--:|",
    ]
    modes = sorted({r["ahead"] for r in results["runs"]}, key=lambda a: (a == "warm", str(a).zfill(4)))
    for ahead in modes:
        runs = [r for r in results["runs"] if r["ahead"] == ahead]
        rates = [r["docs_per_s"] for r in runs]
        med = statistics.median(rates)
        name = {0: "without prefetch", "warm": "every page cached (no device read)"}.get(
            ahead, f"PrefetchSampler(batches={ahead})"
        )
        reads = statistics.median(r["reads_per_doc"] for r in runs)
        lines.append(
            f"| {name} | {med:,.0f} ({min(rates):,.0f}-{max(rates):,.0f}) | {reads:.2f} "
            f"| {med / fio[32]:.2f} | {med / peak:.2f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
