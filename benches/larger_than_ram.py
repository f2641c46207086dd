"""A corpus several times larger than the memory its readers may use: a torch DataLoader's
throughput and memory for docstore and the stores a user would pick instead, under a memory cgroup.

Each system builds the same documents (``--corpus``: MS MARCO-like passages, or ``long_docs``, ~6 KB
each, so that each peer's per-process table of ids is small next to the documents it reads;
``benches.worker build``, once, kept in ``--dir``). Then, for each, its files are evicted from the
page cache and a DataLoader (``--workers`` workers, batches of ``--batch``, random order;
``benches.worker loader``) reads ``--samples`` documents inside a memory cgroup whose limit is
``--limit`` bytes (cgroup v2 ``memory.max``, or v1 ``memory.limit_in_bytes``; you must be root). The
page cache the readers fill counts against the limit, so a corpus larger than the limit is read as
one larger than RAM would be: whatever the process's memory does not hold comes from the device.
Reported per system: documents/s after the first batch, the processes' total PSS at its peak, the
cgroup's peak usage, and the device reads per document; beside them, fio's random 4 KiB reads at
depth 1, 32 and 128 on the same file system, in the same run (the floor: a document needs at least
one read).

    python -m benches.larger_than_ram --docs 4000000 --limit 700M    # as root
    python -m benches.larger_than_ram --docs 100000 --limit 700M --samples 20000 --systems docstore,lmdb
    python -m benches.larger_than_ram --corpus long_docs --docs 600000 --limit 1G
    python -m benches.larger_than_ram --corpus long_docs --docs 600000 --warm    # the loader's own ceiling
    python -m benches.larger_than_ram --json results.json --plot docs/img/larger_than_ram.png

``--warm`` reads each system's files into the page cache instead of evicting them and runs the loader
with no limit: what the same loader reads when the device costs nothing, its own (CPU) ceiling, the
reference that says whether a cold run is bound by the device or by the loader.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from .cold_reads import device_reads
from .compare import evict, fio_randread, run_worker
from .peers import COMPARE_PEERS

SYSTEMS = ("docstore", "docstore:prefetch", "ir_datasets", "lmdb", "hf-datasets", "lance")
CORPORA = {"msmarco_like": "MS MARCO-like passages", "long_docs": "~6 KB documents"}


def size(text: str) -> int:
    """``1.5G``, ``600M``, ``4096``: bytes."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("B")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


class MemoryLimit:
    """A memory cgroup limited to ``limit`` bytes; ``enter()`` is a ``preexec_fn`` that moves the
    child process (and so its DataLoader workers) into it."""

    made = itertools.count()

    def __init__(self, limit: int) -> None:
        # One group per system: the last one's may outlive it a moment (below).
        name = f"docstore-bench-{os.getpid()}-{next(self.made)}"
        v2 = Path("/sys/fs/cgroup")
        controllers = v2 / "cgroup.controllers"
        if controllers.exists() and "memory" in controllers.read_text().split():
            self.path, self.limit_file, self.peak_file = v2 / name, "memory.max", "memory.peak"
        else:
            self.path = Path("/sys/fs/cgroup/memory") / name
            self.limit_file, self.peak_file = "memory.limit_in_bytes", "memory.max_usage_in_bytes"
        self.path.mkdir()
        (self.path / self.limit_file).write_text(str(limit))
        self.limit = limit

    def enter(self) -> None:
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def peak(self) -> int | None:
        try:
            return int((self.path / self.peak_file).read_text())
        except (OSError, ValueError):
            return None

    def oom_kills(self) -> int:
        """Processes of the group its OOM killer killed (v2 ``memory.events``, v1
        ``memory.oom_control``)."""
        for name in ("memory.events", "memory.oom_control"):
            with contextlib.suppress(OSError):
                for line in (self.path / name).read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        return 0

    def reset_peak(self) -> None:
        with contextlib.suppress(OSError):
            (self.path / self.peak_file).write_text("0")

    def remove(self) -> None:
        """Kills what is left in the group (the workers of a loader that timed out), then
        removes it once its processes are gone, waiting at most a minute."""
        with contextlib.suppress(OSError, ValueError):
            for pid in (self.path / "cgroup.procs").read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
        for _ in range(600):
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)


@contextlib.contextmanager
def memory_limit(limit: int | None) -> Iterator[MemoryLimit | None]:
    """A cgroup of ``limit`` bytes for the loader's processes; none for ``None``."""
    if limit is None:
        yield None
        return
    group = MemoryLimit(limit)
    try:
        yield group
    finally:
        group.remove()


def worker(args: list[str], group: MemoryLimit | None = None, timeout: float = 7200) -> dict:
    return run_worker(args, timeout=timeout, preexec_fn=group.enter if group is not None else None)


def cache(files: list[Path]) -> None:
    """Read the files whole, so that the loader finds every page cached."""
    for f in files:
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass


def store_dir(root: Path, system: str, corpus: str, docs: int) -> Path:
    base = "docstore" if system.startswith("docstore") else system
    return root / (f"{base}-{docs}" if corpus == "msmarco_like" else f"{base}-{corpus}-{docs}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--corpus", choices=list(CORPORA), default="msmarco_like")
    parser.add_argument("--docs", type=int, default=4_000_000)
    parser.add_argument("--limit", type=size, default=size("700M"), help="the cgroup's memory limit")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--samples", type=int, default=100_000, help="documents each loader reads")
    parser.add_argument("--dir", default=None, help="where the stores are built and kept")
    parser.add_argument("--fio-seconds", type=int, default=10)
    parser.add_argument(
        "--warm", action="store_true", help="files cached, no limit: the loader's own ceiling"
    )
    parser.add_argument("--out", default=None)
    parser.add_argument("--json", default=None, help="tabulate (and --plot) an earlier --out instead")
    parser.add_argument("--plot", default=None)
    args = parser.parse_args()
    if args.json:
        results = json.loads(Path(args.json).read_text())
    else:
        results = run(args)
        if args.out:
            Path(args.out).write_text(json.dumps(results, indent=1))
    print(table(results))
    if args.plot:
        plot(results, args.plot)


def run(args: argparse.Namespace) -> dict:
    root = Path(args.dir or tempfile.mkdtemp(prefix="docstore-larger-than-ram-"))
    root.mkdir(parents=True, exist_ok=True)
    systems = args.systems.split(",")
    results: dict = {
        "corpus": args.corpus,
        "docs": args.docs,
        "limit": None if args.warm else args.limit,
        "workers": args.workers,
        "batch": args.batch,
        "fio": {},
        "systems": {},
    }
    for system in systems:
        base = "docstore" if system.startswith("docstore") else system
        peer = COMPARE_PEERS[base]
        if peer.requires:
            try:
                __import__(peer.requires)
            except ImportError as e:
                results["systems"][system] = {"skipped": str(e)}
                print(f"{system}: skipped ({e})", file=sys.stderr)
                continue
        path = store_dir(root, system, args.corpus, args.docs)
        if not (path / ".built").exists():
            path.mkdir(parents=True, exist_ok=True)
            built = worker(["build", base, args.corpus, str(args.docs), str(path)])
            (path / ".built").write_text(json.dumps(built))
        built = json.loads((path / ".built").read_text())
        results["systems"][system] = {"bytes": built["size_bytes"], "build_s": built["build_s"]}
        print(f"{system}: {built['size_bytes'] / 2**20:,.0f} MiB", file=sys.stderr)
    for depth in (1, 32, 128):
        results["fio"][depth] = fio_randread(root / "fio", depth, size="2G", seconds=args.fio_seconds)
        print(f"fio QD{depth}: {results['fio'][depth]['iops']:,.0f} IOPS", file=sys.stderr)
    (root / "fio" / "fio.test").unlink(missing_ok=True)
    for system, r in results["systems"].items():
        if "skipped" in r:
            continue
        base = "docstore" if system.startswith("docstore") else system
        path = store_dir(root, system, args.corpus, args.docs)
        files = COMPARE_PEERS[base].files(path)
        if args.warm:
            cache(files)
        else:
            evict(files)
        reads = device_reads(files[0])
        with memory_limit(None if args.warm else args.limit) as group:
            t = time.perf_counter()
            try:
                sizes = [str(args.docs), str(args.docs), str(path)]
                loop = [str(args.workers), str(args.samples), str(args.batch)]
                # A loader whose worker the limit killed may wait for it forever: bounded.
                loaded = worker(["loader", system, args.corpus, *sizes, *loop], group, timeout=1800)
            except (RuntimeError, subprocess.TimeoutExpired) as e:  # reported, the others go on
                kills = group.oom_kills() if group else 0
                killed = f"{kills} processes killed by the cgroup's OOM killer"
                r["error"] = killed if kills else str(e)[-500:]
                print(f"{system}: {r['error']}", file=sys.stderr)
                continue
            peak = group.peak() if group else None
            r.update(loaded, seconds_total=time.perf_counter() - t, cgroup_peak=peak)
        r["reads_per_doc"] = (device_reads(files[0]) - reads) / max(1, loaded["samples"])
        print(system, json.dumps({k: v for k, v in r.items() if k != "how"}), file=sys.stderr)
    return results


def table(results: dict) -> str:
    fio = {int(k): v["iops"] for k, v in results["fio"].items()}
    peak = max(fio.values()) if fio else float("nan")
    corpus = CORPORA[results.get("corpus", "msmarco_like")]
    limit = results["limit"]
    where = (
        "its files cached and no limit (the loader's own ceiling)"
        if limit is None
        else f"its processes limited to {limit / 2**20:,.0f} MiB (page cache included)"
    )
    lines = [
        f"{results['docs']:,} {corpus}, a DataLoader of {results['workers']} workers, "
        f"batches of {results['batch']} in random order, {where}; fio 4 KiB random reads: "
        + ", ".join(f"QD{d} {iops:,.0f}/s" for d, iops in sorted(fio.items())),
        "",
        "| system | on disk | x the limit | docs/s | of fio's peak | device reads/doc "
        "| PSS, all processes | cgroup peak |",
        "|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for system, r in results["systems"].items():
        if "skipped" in r or "error" in r:
            why = (r.get("skipped") or r.get("error", "")).splitlines()
            lines.append(f"| {system} | {why[0][:80] if why else ''} | | | | | | |")
            continue
        rate = r["samples_per_s"]
        times = f"{r['bytes'] / limit:.1f}" if limit else "-"
        cgroup = f"{r['cgroup_peak'] / 2**20:,.0f} MiB" if r["cgroup_peak"] else "-"
        lines.append(
            f"| {system} | {r['bytes'] / 2**20:,.0f} MiB | {times} | {rate:,.0f} "
            f"| {rate / peak:.2f} | {r['reads_per_doc']:.2f} | {r['pss_total'] / 2**20:,.0f} MiB "
            f"| {cgroup} |"
        )
    return "\n".join(lines)


def plot(results: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [s for s, r in results["systems"].items() if "samples_per_s" in r]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    left.barh(names, [results["systems"][s]["samples_per_s"] for s in names], color="tab:blue")
    for depth, style in ((1, ":"), (32, "--")):
        if str(depth) in results["fio"] or depth in results["fio"]:
            iops = (results["fio"].get(str(depth)) or results["fio"][depth])["iops"]
            left.axvline(iops, color="grey", linestyle=style, label=f"fio QD{depth}")
    left.set(xlabel="documents / s", title="DataLoader throughput")
    left.legend(loc="lower right")
    right.barh(names, [results["systems"][s]["pss_total"] / 2**20 for s in names], color="tab:orange")
    if results["limit"]:
        right.axvline(results["limit"] / 2**20, color="grey", linestyle="--", label="the limit")
    right.set(xlabel="MiB", title="PSS of the loader's processes")
    right.legend(loc="lower right")
    right.set_yticklabels([])
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
