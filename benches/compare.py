"""Settings and helpers of the benchmark suite (``test_compare.py``, ``test_floors.py``,
``test_integrity.py``): corpora, subprocess builds, page-cache eviction, fio, PSS and the machine
description. Imports without pytest.

Environment:

* ``DOCSTORE_BENCH_QUICK=1``      quick mode (below)
* ``DOCSTORE_BENCH_DOCS``         msmarco_like passages (default 1,000,000; quick 30,000)
* ``DOCSTORE_BENCH_LONG_DOCS``    long_docs size (default 100,000; quick 3,000)
* ``DOCSTORE_BENCH_TOKEN_DOCS``   token_arrays size (default 200,000; quick 5,000)
* ``DOCSTORE_BENCH_CORPORA``      comma-separated subset of msmarco_like, english_news,
  long_docs, token_arrays (default: all four; quick: msmarco_like and token_arrays)
* ``DOCSTORE_BENCH_PEERS``        comma-separated subset of the systems (``peers.COMPARE_PEERS``)
* ``DOCSTORE_BENCH_TIME``         seconds of timed rounds per benchmark (default 1.0; quick 0.15)
* ``DOCSTORE_BENCH_LOADER_WORKERS`` DataLoader worker counts (default 0,1,2,4; quick 4)
* ``DOCSTORE_BENCH_LOADER_SAMPLES`` samples per DataLoader run (default 50,000; quick 2,048)
* ``DOCSTORE_BENCH_STORES``       where stores are built (default: pytest's tmp dir); fio's test
  file goes there too, so both measure the same file system
* ``DOCSTORE_BENCH_DATA``         cache of generated corpora (default ``benches/.data``)

Quick mode: msmarco_like 30k and token_arrays 5k docs, 0.15 s of rounds per benchmark, threads on
msmarco_like only, and the measurements that start a process per system (open time, cold cache,
DataLoader) for ``QUICK_SUBSET`` only: a few minutes on 2 cores. The full mode (no variable set):
1M / 2,225 / 100k / 200k documents, every system everywhere, DataLoader with 0, 1, 2 and 4
workers; about an hour on 2 cores.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import corpora
from .peers import COMPARE_PEERS

HERE = Path(__file__).resolve().parent


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def _env_int(name: str, default: int) -> int:
    v = os.environ.get(name, "").replace("_", "").strip()
    return int(v) if v else default


QUICK = _env_flag("DOCSTORE_BENCH_QUICK")
SIZES: dict[str, int | None] = {
    "msmarco_like": _env_int("DOCSTORE_BENCH_DOCS", 30_000 if QUICK else 1_000_000),
    "english_news": None,
    "long_docs": _env_int("DOCSTORE_BENCH_LONG_DOCS", 3_000 if QUICK else 100_000),
    "token_arrays": _env_int("DOCSTORE_BENCH_TOKEN_DOCS", 5_000 if QUICK else 200_000),
}
_DEFAULT_CORPORA = ("msmarco_like", "token_arrays") if QUICK else corpora.ALL_CORPORA
CORPORA = [
    c.strip()
    for c in os.environ.get("DOCSTORE_BENCH_CORPORA", ",".join(_DEFAULT_CORPORA)).split(",")
    if c.strip()
]
for _c in CORPORA:
    if _c not in corpora.ALL_CORPORA:
        raise ValueError(f"DOCSTORE_BENCH_CORPORA: unknown corpus {_c!r} (known: {corpora.ALL_CORPORA})")
SYSTEMS = [
    s.strip() for s in os.environ.get("DOCSTORE_BENCH_PEERS", ",".join(COMPARE_PEERS)).split(",") if s.strip()
]
for _s in SYSTEMS:
    if _s not in COMPARE_PEERS:
        raise ValueError(f"DOCSTORE_BENCH_PEERS: unknown system {_s!r} (known: {list(COMPARE_PEERS)})")
BENCH_TIME = float(os.environ.get("DOCSTORE_BENCH_TIME", "0.15" if QUICK else "1.0"))

#: quick mode runs the measurements that need a subprocess per system (open time, cold cache,
#: DataLoader) for these systems only; the full mode runs every system
QUICK_SUBSET = ("baseline", "docstore", "docstore:t1", "dict", "ir_datasets", "lmdb", "arrow-ipc")
#: the corpus of the open-time, cold-cache and DataLoader measurements
MAIN_CORPUS = "msmarco_like"
#: single lookups per timed round
SINGLE_LOOKUPS = 100 if QUICK else 256
#: batch sizes (ids or positions per call); a round does BATCH_DOCS docs in all
BATCHES = (64, 1024)
BATCH_DOCS = 1024
#: batches per round in the threads measurement (split across the threads)
THREAD_BATCHES = 8 if QUICK else 16
#: cold cache: rounds, single lookups per round, batch size
COLD_ROUNDS = 3 if QUICK else 5
COLD_LOOKUPS = 100 if QUICK else 200
COLD_BATCH = 1024
#: fio: test file size and seconds per run
FIO_SIZE = "256M" if QUICK else "2G"
FIO_SECONDS = 1 if QUICK else 10
#: DataLoader: worker counts and samples per run
LOADER_WORKERS = tuple(
    int(w) for w in os.environ.get("DOCSTORE_BENCH_LOADER_WORKERS", "4" if QUICK else "0,1,2,4").split(",")
)
LOADER_SAMPLES = _env_int("DOCSTORE_BENCH_LOADER_SAMPLES", 2048 if QUICK else 50_000)
LOADER_BATCH = 64


@dataclass
class Corpus:
    name: str
    n: int
    field: str
    ids: list[str]
    values: list[Any]
    raw_bytes: int
    _by_id: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def kind(self) -> str:
        return "tokens" if self.field == "tokens" else "text"

    @property
    def by_id(self) -> dict[str, Any]:
        if self._by_id is None:
            self._by_id = dict(zip(self.ids, self.values))
        return self._by_id

    def records(self) -> list[dict[str, Any]]:
        return [{"doc_id": i, self.field: v} for i, v in zip(self.ids, self.values)]

    def sample_ids(self, k: int, seed: int) -> list[str]:
        rng = random.Random(seed)
        return [self.ids[rng.randrange(self.n)] for _ in range(k)]

    def sample_positions(self, k: int, seed: int) -> list[int]:
        rng = random.Random(seed)
        return [rng.randrange(self.n) for _ in range(k)]

    def distinct_ids(self, k: int, seed: int) -> list[str]:
        return random.Random(seed).sample(self.ids, min(k, self.n))

    def distinct_positions(self, k: int, seed: int) -> list[int]:
        return random.Random(seed).sample(range(self.n), min(k, self.n))


def size_arg(name: str, n: int | None = None) -> str:
    n = SIZES[name] if n is None else n
    return "-" if n is None else str(n)


def load_corpus(name: str) -> Corpus:
    field_name = corpora.VALUE_FIELD[name]
    pairs = list(corpora.iter_corpus(name, SIZES[name]))
    ids = [i for i, _ in pairs]
    values = [v for _, v in pairs]
    raw = sum(len(v.encode("utf-8")) if isinstance(v, str) else v.nbytes for v in values)
    return Corpus(name=name, n=len(ids), field=field_name, ids=ids, values=values, raw_bytes=raw)


def expected(system: str, value: Any) -> Any:
    return corpora.tsv_clean(value) if system == "indexed-tsv" else value


# -- subprocesses ----------------------------------------------------------------------------


def run_worker(args: list[str], timeout: float = 3600, preexec_fn: Any = None) -> dict:
    """``python -m benches.worker ARGS`` in a fresh process (``preexec_fn`` runs in it first:
    ``larger_than_ram`` moves it into a memory cgroup); the JSON it prints last."""
    env = dict(os.environ)
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env.setdefault("TQDM_DISABLE", "1")
    p = subprocess.run(
        [sys.executable, "-m", "benches.worker", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=str(HERE.parent),
        preexec_fn=preexec_fn,
    )
    if p.returncode != 0:
        tail = (p.stderr or p.stdout)[-3000:]
        raise RuntimeError(f"worker {' '.join(args[:3])} failed (exit {p.returncode}):\n{tail}")
    last = [line for line in p.stdout.splitlines() if line.startswith("{")]
    if not last:
        raise RuntimeError(f"worker {' '.join(args[:3])} printed no result:\n{p.stdout[-2000:]}")
    return json.loads(last[-1])


class Stores:
    """Stores built once per session, each in a subprocess (timed, peak RSS), then opened here."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.builds: dict[tuple[str, str, int | None], dict] = {}
        self.paths: dict[tuple[str, str, int | None], Path] = {}
        self.handles: dict[tuple[str, str], Any] = {}
        self.errors: dict[tuple[str, str, int | None], str] = {}

    def build(self, system: str, corpus: str, n: int | None = None) -> tuple[Path, dict]:
        n = SIZES[corpus] if n is None else n
        key = (system, corpus, n)
        if key in self.errors:
            raise RuntimeError(self.errors[key])
        if key not in self.builds:
            # docstore:t1 reads docstore's files: one build serves both
            base = getattr(COMPARE_PEERS[system], "shares_files_with", None) or system
            if base != system:
                path, info = self.build(base, corpus, n)
                self.paths[key], self.builds[key] = path, info
                return path, info
            path = self.root / f"{system.replace(':', '_')}-{corpus}-{n}"
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir(parents=True)
            try:
                info = run_worker(["build", system, corpus, size_arg(corpus, n), str(path)])
            except Exception as e:
                self.errors[key] = str(e)
                raise
            self.builds[key], self.paths[key] = info, path
        return self.paths[key], self.builds[key]

    def open(self, system: str, corpus: Corpus) -> Any:
        """An open handle (dict: the dict itself, built here from the corpus)."""
        key = (system, corpus.name)
        if key not in self.handles:
            for k in [k for k in self.handles if k[1] != corpus.name]:
                self.close(k)  # one corpus open at a time
            peer = COMPARE_PEERS[system]
            if peer.in_memory:
                self.handles[key] = peer.build(None, corpus.records(), corpus.field)
            else:
                path, _ = self.build(system, corpus.name)
                self.handles[key] = peer.open(path)
        return self.handles[key]

    def replace(self, system: str, corpus: Corpus, handle: Any) -> None:
        self.handles[(system, corpus.name)] = handle

    def close(self, key: tuple[str, str]) -> None:
        h = self.handles.pop(key, None)
        if h is not None:
            COMPARE_PEERS[key[0]].close(h)
        gc.collect()

    def drop_corpus(self, corpus: str) -> None:
        for k in [k for k in self.handles if k[1] == corpus]:
            self.close(k)
        for k in [k for k in self.paths if k[1] == corpus]:
            shutil.rmtree(self.paths.pop(k), ignore_errors=True)

    def close_all(self) -> None:
        for k in list(self.handles):
            self.close(k)


# -- page cache ------------------------------------------------------------------------------


def evict(files: list[Path]) -> None:
    """Drop the files' pages from the page cache (pages still mapped somewhere stay)."""
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def resident_bytes(files: list[Path]) -> int | None:
    """Bytes of the files in the page cache, by ``fincore`` (util-linux); None without it."""
    if not files or shutil.which("fincore") is None:
        return None
    total = 0
    for lo in range(0, len(files), 200):
        p = subprocess.run(
            [
                "fincore",
                "--bytes",
                "--noheadings",
                "--raw",
                "--output",
                "RES",
                *map(str, files[lo : lo + 200]),
            ],
            capture_output=True,
            text=True,
        )
        if p.returncode != 0:
            return None
        total += sum(int(x) for x in p.stdout.split())
    return total


# -- fio -------------------------------------------------------------------------------------


def fio_randread(
    directory: Path,
    iodepth: int,
    size: str = FIO_SIZE,
    seconds: int = FIO_SECONDS,
    *,
    engine: str = "libaio",
    direct: bool = True,
    file: Path | None = None,
) -> dict:
    """Random 4 KiB reads of one file at ``iodepth``: IOPS and mean latency.

    By default O_DIRECT through libaio on a test file fio writes in ``directory``: the device's
    own rate. ``engine="psync", direct=False`` reads through the page cache with ``pread`` and
    ``engine="mmap"`` faults the pages of a mapping in (``madvise(MADV_RANDOM)``, as a store's
    map): what each of a store's read paths can reach. ``file`` reads an existing file instead,
    read-only and whole (evict it first: fio reads each block once a pass, so a cold file stays
    cold).
    """
    exe = shutil.which("fio")
    if exe is None:
        raise FileNotFoundError("fio is not installed (apt-get install -y fio)")
    if file is None:
        directory.mkdir(parents=True, exist_ok=True)
        target = [f"--filename={directory / 'fio.test'}", f"--size={size}"]
    else:
        # one pass at most (not time-based): a block read twice would come from the page cache
        target = [f"--filename={file}", "--readonly"]
        size = f"{file.stat().st_size}"
    cmd = [
        exe,
        "--name=randread",
        *target,
        "--rw=randread",
        "--bs=4k",
        f"--direct={int(direct)}",
        f"--ioengine={engine}",
        f"--iodepth={iodepth}",
        "--numjobs=1",
        *(["--time_based"] if file is None else []),
        f"--runtime={seconds}",
        f"--ramp_time={0 if QUICK else 1}",
        "--group_reporting",
        "--output-format=json",
    ]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"fio failed: {p.stderr[-2000:]}")
    job = json.loads(p.stdout[p.stdout.index("{") :])["jobs"][0]["read"]
    return {
        "iops": job["iops"],
        "lat_us": job["lat_ns"]["mean"] / 1000,
        "bw_bytes": job["bw_bytes"],
        "iodepth": iodepth,
        "engine": engine,
        "direct": direct,
        "size": size,
        "seconds": seconds,
    }


# -- machine ---------------------------------------------------------------------------------


def _cmd(args: list[str]) -> str:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine_info(directory: Path | None = None) -> dict:
    lscpu = {}
    for line in _cmd(["lscpu"]).splitlines():
        k, _, v = line.partition(":")
        lscpu[k.strip()] = v.strip()
    mem = 0
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) * 1024
    except OSError:
        pass
    fs = ""
    if directory is not None:
        fs = _cmd(["findmnt", "-n", "-o", "FSTYPE,SOURCE,OPTIONS", "--target", str(directory)])
    return {
        "cpu_model": lscpu.get("Model name", platform.processor()),
        "cpus": os.cpu_count(),
        "threads_per_core": lscpu.get("Thread(s) per core"),
        "ram_bytes": mem,
        "kernel": platform.release(),
        "os": _cmd(["sh", "-c", ". /etc/os-release && echo $PRETTY_NAME"]),
        "python": platform.python_version(),
        "filesystem": fs,
        "loadavg": os.getloadavg(),
    }


def cores() -> int:
    """The CPUs this process may run on: what a batch's decoding and a build can use at most."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def versions() -> dict[str, str]:
    out = {}
    for name, peer in COMPARE_PEERS.items():
        out[name] = peer.version()
    for extra in ("torch", "numpy", "lz4", "pytest-benchmark"):
        try:
            from importlib.metadata import version

            out[extra] = version(extra)
        except Exception:
            out[extra] = "-"
    out["fio"] = _cmd(["fio", "--version"]) or "-"
    return out


def paired_scaling(one, two, target_s: float = BENCH_TIME, min_pairs: int = 9) -> float:
    """How much faster ``two`` (the work on two threads) runs than ``one`` (the same work on one):
    the median, over pairs of rounds timed back to back, of one's time over two's. A shared host
    gives this machine's cores unevenly for seconds at a time; timed apart, the one-thread and
    two-thread figures each caught a different share (2.2x one run, 1.3x the next, measured),
    where a pair shares it."""
    ratios = []
    deadline = time.perf_counter() + target_s
    while len(ratios) < min_pairs or time.perf_counter() < deadline:
        t0 = time.perf_counter()
        one()
        t1 = time.perf_counter()
        two()
        ratios.append((t1 - t0) / max(time.perf_counter() - t1, 1e-9))
    return statistics.median(ratios)


def timed_rounds(fn, target_s: float = BENCH_TIME, min_rounds: int = 3, max_rounds: int = 500) -> int:
    """Rounds so that the timed part takes about ``target_s`` (one untimed call to measure); a
    call slower than ``target_s`` gets one round (slow systems are not slow by noise)."""
    t = time.perf_counter()
    fn()
    dt = time.perf_counter() - t
    if dt > target_s:
        return 1
    return int(min(max_rounds, max(min_rounds, target_s / max(dt, 1e-7))))


def lookup_draws(corpus: Corpus, workload: str) -> list[list]:
    """The keys of one round of ``cmp:<workload>``: ``[keys]`` for single lookups, else the
    batches (ids or positions, seeded: every system and the floors look up the same ones)."""
    by_pos = workload.endswith("_pos")
    if workload.startswith("get_"):
        n = SINGLE_LOOKUPS
        return [corpus.sample_positions(n, 11) if by_pos else corpus.sample_ids(n, 11)]
    batch = int(workload[5:].split("_")[0])
    return [
        corpus.distinct_positions(batch, 20 + b) if by_pos else corpus.distinct_ids(batch, 20 + b)
        for b in range(max(1, BATCH_DOCS // batch))
    ]


def lookup_round(ops: Any, workload: str, draws: list[list]) -> Callable[[], None]:
    """One round of ``cmp:<workload>`` over ``draws`` (``lookup_draws``) through a system's ``ops``."""
    by_pos = workload.endswith("_pos")
    if workload.startswith("get_"):
        one, keys = (ops.at if by_pos else ops.get), draws[0]

        def run() -> None:
            for k in keys:
                one(k)

        return run
    many = ops.take if by_pos else ops.get_many

    def run() -> None:
        for d in draws:
            many(d)

    return run


def best_rate(run: Callable[[], None], docs: int, target_s: float = BENCH_TIME / 2) -> float:
    """Docs/s of ``run``'s fastest round in about ``target_s`` (at least 5 rounds, after one
    untimed): a best case, as the floors are, for ratios timed beside them."""
    run()
    best, rounds = float("inf"), 0
    deadline = time.perf_counter() + target_s
    while rounds < 5 or time.perf_counter() < deadline:
        t = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t)
        rounds += 1
    return docs / best


def thread_batches(corpus: Corpus) -> list[list]:
    """The batches of one round of ``cmp:threads`` (split across the threads)."""
    return [corpus.distinct_ids(BATCH_DOCS, 100 + b) for b in range(THREAD_BATCHES)]


def threads_round(pool: Any, many: list[Callable], batches: list[list]) -> Callable[[], None]:
    """One round of ``cmp:threads``: thread t of ``len(many)`` looks up every len(many)-th batch
    with its own ``get_many``, on ``pool``'s threads (the caller only waits)."""
    n = len(many)
    parts = [(many[t], batches[t::n]) for t in range(n)]

    def work(get_many: Callable, bs: list[list]) -> None:
        for b in bs:
            get_many(b)

    def run() -> None:
        for f in [pool.submit(work, *p) for p in parts]:
            f.result()

    return run
