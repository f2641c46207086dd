"""What building a collection costs with each engine, side by side on the same rows: the
single-file ``docstore build``, ``docstore build --shards 8``, ``docstore.ray.write`` on a local
Ray cluster of 1 and of 2 worker processes, and ``docstore.spark.write`` on ``local[2]``; then
what sealing costs against the number of shards and of documents (the serial part of a build on
many machines).

    python -m benches.engine_build --docs 1000000 --out docs/engine_build.json

Each build runs in a fresh process inside a cgroup of its own (cgroup v2, ``cpu.stat``
``usage_usec``): its CPU-seconds are those of every process of the run (Ray's GCS, raylet and
workers, Spark's JVM and Python workers), whatever their parent. Without a writable cgroup v2
the run is its own child subreaper, and its CPU is its own, its reaped descendants' and the
``/proc/PID/stat`` times of the live ones (the JSON says which). The engines' start-up
(``ray.init``, the ``SparkSession``, a first trivial job) and shut-down are measured and
reported apart from the build; the build includes the seal. The rows are MS MARCO-like passages
(``corpora.msmarco_like``), written once, untimed, as JSON lines for the CLI and as 8 Parquet
files for Ray and Spark. Every engine worker compresses on one thread (``DOCSTORE_NUM_THREADS=1``,
as ``--shards`` does for its processes); the single-file build uses every core.

Not a pytest-benchmark: one run of 1M documents takes minutes and needs Ray and PySpark (a
missing one is skipped). docs/collections.md ("Build costs with engines") has the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
KINDS = ("single", "shards8", "ray1", "ray2", "spark")
PARQUET_FILES = 8

# -- CPU of every process of a run ---------------------------------------------------------------


def cgroup2_root() -> Path | None:
    """A cgroup v2 hierarchy where this process may make a child cgroup (root, usually)."""
    for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        if not (root / "cgroup.controllers").exists():  # only cgroup v2 has this file
            continue
        probe = root / f"docstore-bench-probe-{os.getpid()}"
        try:
            probe.mkdir()
            ok = (probe / "cpu.stat").exists()
            probe.rmdir()
        except OSError:
            continue
        if ok:
            return root
    return None


def cgroup_cpu(path: str) -> float:
    with open(os.path.join(path, "cpu.stat")) as f:
        for line in f:
            key, value = line.split()
            if key == "usage_usec":
                return int(value) / 1e6
    raise RuntimeError(f"no usage_usec in {path}/cpu.stat")


_TICK = os.sysconf("SC_CLK_TCK")


def _descendants(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
    out, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        kids = [p for p, pp in parents.items() if pp == pid]
        out += kids
        frontier += kids
    return out


def proc_cpu() -> float:
    """This process, its reaped descendants and its live ones (their reaped children included)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    for pid in _descendants(os.getpid()):
        with contextlib.suppress(OSError, IndexError):
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15]) / _TICK  # utime stime cutime cstime
    return total


def cpu_now() -> float:
    path = os.environ.get("DOCSTORE_BENCH_CGROUP")
    return cgroup_cpu(path) if path else proc_cpu()


# -- the runs (each in a child process: python engine_build.py --child KIND) ---------------------


class Marks:
    def __init__(self) -> None:
        self.marks: list[tuple[str, float, float]] = []

    def __call__(self, label: str) -> None:
        self.marks.append((label, time.time(), cpu_now()))


def child(kind: str, work: Path, n: int) -> dict:
    if not os.environ.get("DOCSTORE_BENCH_CGROUP"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphaned descendants come to us
    mark = Marks()
    mark("begin")
    out = work / f"out-{kind}.docstore"
    info: dict = {}
    if kind in ("single", "shards8"):
        cmd = [sys.executable, "-m", "docstore.cli", "build", str(work / "in.jsonl"), "-o", str(out)]
        cmd += ["-q", "--overwrite"] + (["--shards", "8"] if kind == "shards8" else [])
        mark("ready")
        subprocess.run(cmd, check=True)
        mark("built")
    elif kind.startswith("ray"):
        cpus = int(kind[3:])
        os.environ["DOCSTORE_NUM_THREADS"] = "1"  # the raylet and its workers inherit it
        import ray

        import docstore.ray

        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
        del os.environ["DOCSTORE_NUM_THREADS"]  # the driver's seal: every core (it uses one)
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False
        # Ray's V2 Parquet reader packs small files into one read task (one shard, one worker);
        # the V1 reader makes one task per file, fused with its write task
        context.use_datasource_v2 = False
        ray.data.range(cpus, override_num_blocks=cpus).map_batches(lambda b: b).materialize()
        mark("ready")
        ds = ray.data.read_parquet(str(work / "parquet"), override_num_blocks=PARQUET_FILES)
        store = docstore.ray.write(ds, out, overwrite=True)
        mark("built")
        info.update(count=len(store), shards=len(store.info()["shards"]))
        store.close()
        ray.shutdown()
    elif kind == "spark":
        os.environ["DOCSTORE_NUM_THREADS"] = "1"  # the JVM and its Python workers inherit it
        from pyspark.sql import SparkSession

        import docstore.spark

        largest = max(p.stat().st_size for p in (work / "parquet").iterdir())
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("docstore-engine-build")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            # one partition per Parquet file, as Ray reads them: no two files fit in one split
            .config("spark.sql.files.maxPartitionBytes", str(largest + (1 << 20)))
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        del os.environ["DOCSTORE_NUM_THREADS"]
        spark.range(4, numPartitions=2).mapInArrow(lambda it: it, "id long").count()  # Python workers
        mark("ready")
        df = spark.read.parquet(str(work / "parquet"))
        store = docstore.spark.write(df, out, mode="overwrite")
        mark("built")
        assert store is not None
        info.update(count=len(store), shards=len(store.info()["shards"]))
        info["partitions"] = df.rdd.getNumPartitions()
        store.close()
        spark.stop()
    else:
        raise ValueError(kind)
    mark("end")
    if not os.environ.get("DOCSTORE_BENCH_CGROUP"):
        _reap(mark)
    if "count" not in info:
        import docstore

        with docstore.open(out) as store:
            info.update(count=len(store), shards=len(store.info().get("shards") or [None]))
    if info["count"] != n:
        raise RuntimeError(f"{kind}: {info['count']} documents, not {n}")
    if out.is_dir():
        shutil.rmtree(out, ignore_errors=True)
    else:
        out.unlink(missing_ok=True)
    return {"marks": mark.marks, **info}


def _reap(mark: Marks) -> None:
    """Without a cgroup: waits (30 s at most) for the descendants that outlive the run, so that
    their CPU is counted, and takes the last mark again."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            time.sleep(0.05)
    mark.marks[-1] = ("end", mark.marks[-1][1], cpu_now())


def run(kind: str, work: Path, n: int, cgroups: Path | None) -> dict:
    """One build in a fresh process (and cgroup): wall and CPU-seconds by phase."""
    env = dict(os.environ)
    group = None
    if cgroups is not None:
        group = cgroups / f"docstore-bench-{os.getpid()}-{kind}"
        group.mkdir()
        env["DOCSTORE_BENCH_CGROUP"] = str(group)
    else:
        env.pop("DOCSTORE_BENCH_CGROUP", None)

    def enter() -> None:  # in the child, before exec: it and all it starts are in the cgroup
        if group is not None:
            (group / "cgroup.procs").write_text(str(os.getpid()))

    cmd = [
        sys.executable,
        "-m",
        "benches.engine_build",
        "--child",
        kind,
        "--dir",
        str(work),
        "--docs",
        str(n),
    ]
    start = time.time()
    try:
        proc = subprocess.run(cmd, env=env, preexec_fn=enter, capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"{kind} failed:\n{proc.stderr[-4000:]}")
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        total = None
        if group is not None:
            _empty(group)
            total = cgroup_cpu(str(group))
    finally:
        if group is not None:
            _empty(group)
            _rmdir(group)
    marks = {label: (wall, cpu) for label, wall, cpu in result.pop("marks")}
    phases = {}
    for phase, a, b in (
        ("startup", "begin", "ready"),
        ("build", "ready", "built"),
        ("shutdown", "built", "end"),
    ):
        phases[phase] = {"wall_s": marks[b][0] - marks[a][0], "cpu_s": marks[b][1] - marks[a][1]}
    # the interpreter's start and imports (before the first mark) are start-up too
    phases["startup"]["wall_s"] += marks["begin"][0] - start
    phases["startup"]["cpu_s"] += marks["begin"][1]
    if total is not None:  # what ran after the last mark (processes that outlived the run)
        phases["shutdown"]["cpu_s"] += total - marks["end"][1]
    return {
        "kind": kind,
        "docs": n,
        "cpu_meter": "cgroup v2 cpu.stat" if group is not None else "subreaper + /proc",
        **phases["build"],
        "cpu_us_per_doc": phases["build"]["cpu_s"] / n * 1e6,
        "startup": phases["startup"],
        "shutdown": phases["shutdown"],
        **result,
    }


def _empty(group: Path) -> None:
    """Kills what is left of the run in its cgroup (processes the run started), one by one."""
    deadline = time.monotonic() + 20
    while pids := [int(p) for p in (group / "cgroup.procs").read_text().split()]:
        if time.monotonic() > deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def _rmdir(group: Path) -> None:
    """A cgroup whose last process has just exited is busy until the kernel has released it."""
    for _ in range(100):
        try:
            group.rmdir()
            return
        except OSError:
            time.sleep(0.1)
    group.rmdir()


# -- the rows, written once -----------------------------------------------------------------------


def prepare(work: Path, n: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from . import corpora

    marker = work / f"rows-{n}"
    if marker.exists():
        return
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    with pa.memory_map(str(corpora.msmarco_path(n)), "r") as source:
        table = pa.ipc.open_file(source).read_all()
    table = table.cast(pa.schema([("doc_id", pa.string()), ("text", pa.string())]))
    with open(work / "in.jsonl", "w", encoding="utf-8") as f:
        for batch in table.to_batches(100_000):
            ids, texts = batch.column(0).to_pylist(), batch.column(1).to_pylist()
            f.writelines(json.dumps({"doc_id": i, "text": t}) + "\n" for i, t in zip(ids, texts))
    (work / "parquet").mkdir()
    for k in range(PARQUET_FILES):
        a, b = n * k // PARQUET_FILES, n * (k + 1) // PARQUET_FILES
        pq.write_table(table.slice(a, b - a), work / "parquet" / f"part-{k}.parquet")
    marker.touch()


# -- sealing: its cost against shards and documents ----------------------------------------------


def seal_study(work: Path, configs: list[tuple[int, int]]) -> list[dict]:
    """Builds ``docs`` tiny documents (collection_scale.py's) into ``shards`` shards, then times
    ``docstore.seal`` of them (wall, and this process's CPU: the seal runs on one thread)."""
    import concurrent.futures
    import multiprocessing

    import docstore

    from . import collection_scale

    results = []
    for docs, shards in configs:
        root = work / f"seal-{docs}-{shards}"
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        bounds = [docs * k // shards for k in range(shards + 1)]
        paths = [str(root / f"part-{k:05d}.docstore") for k in range(shards)]
        with concurrent.futures.ProcessPoolExecutor(
            2, mp_context=multiprocessing.get_context("fork")
        ) as pool:
            list(pool.map(collection_scale.build_shard, paths, bounds[:-1], bounds[1:]))
        best = None
        for _ in range(3):
            shutil.rmtree(root / "c.docstore", ignore_errors=True)
            before = resource.getrusage(resource.RUSAGE_SELF)
            t = time.perf_counter()
            docstore.seal(root / "c.docstore", paths).close()
            wall = time.perf_counter() - t
            after = resource.getrusage(resource.RUSAGE_SELF)
            cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
            if best is None or wall < best[0]:
                best = (wall, cpu)
        assert best is not None
        results.append(
            {
                "docs": docs,
                "shards": shards,
                "seal_wall_s": best[0],
                "seal_cpu_s": best[1],
                "us_per_doc": best[0] / docs * 1e6,
            }
        )
        print(json.dumps(results[-1]), file=sys.stderr)
        shutil.rmtree(root, ignore_errors=True)
    return results


# -- the report ----------------------------------------------------------------------------------


def table(builds: list[dict]) -> str:
    base = next((b for b in builds if b["kind"] == "single"), None)
    lines = [
        "| build | wall s | CPU-s | CPU µs/doc | vs single: wall, CPU | start-up wall s, CPU-s | shards |",
        "|---|--:|--:|--:|--:|--:|--:|",
    ]
    for b in builds:
        ratio = f"{b['wall_s'] / base['wall_s']:.2f}x, {b['cpu_s'] / base['cpu_s']:.2f}x" if base else ""
        start = f"{b['startup']['wall_s']:.1f}, {b['startup']['cpu_s']:.1f}"
        figures = f"{b['wall_s']:.1f} | {b['cpu_s']:.1f} | {b['cpu_us_per_doc']:.1f}"
        lines.append(f"| {b['kind']} | {figures} | {ratio} | {start} | {b['shards']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=lambda s: int(float(s)), default=1_000_000)
    parser.add_argument("--dir", default=str(HERE / ".data" / "engine_build"), help="scratch (~1 KB/doc)")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"which builds, of {','.join(KINDS)}")
    parser.add_argument(
        "--rounds", type=int, default=1, help="each build this many times; the fastest is kept"
    )
    parser.add_argument(
        "--seal", default="1e6:8,1e6:64,1e6:256,4e6:64", help="DOCS:SHARDS seals to time ('' for none)"
    )
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    work = Path(args.dir)
    if args.child:
        print(json.dumps(child(args.child, work, args.docs)))
        return
    cgroups = cgroup2_root()
    print(
        f"CPU meter: {'cgroup v2 under ' + str(cgroups) if cgroups else 'subreaper + /proc'}", file=sys.stderr
    )
    prepare(work, args.docs)
    builds = []
    for kind in args.kinds.split(","):
        rounds = []
        for _ in range(args.rounds):
            try:
                rounds.append(run(kind, work, args.docs, cgroups))
            except RuntimeError as error:
                if "ModuleNotFoundError" not in str(error):
                    raise
                print(f"{kind}: skipped ({str(error).strip().splitlines()[-1]})", file=sys.stderr)
                break
            print(json.dumps(rounds[-1]), file=sys.stderr)
        if rounds:
            builds.append(min(rounds, key=lambda r: r["wall_s"]))
    seals = []
    if args.seal:
        configs = [(int(float(d)), int(s)) for d, s in (x.split(":") for x in args.seal.split(","))]
        seals = seal_study(work, configs)
    print(table(builds))
    for s in seals:
        rate = f"{s['seal_wall_s']:.2f} s ({s['us_per_doc']:.2f} µs/id, {s['seal_cpu_s']:.2f} CPU-s)"
        print(f"seal of {s['shards']} shards, {s['docs']:,} ids: {rate}")
    if args.out:
        meta = {"cpu_count": os.cpu_count(), "loadavg_at_end": os.getloadavg(), "command": " ".join(sys.argv)}
        Path(args.out).write_text(json.dumps({"builds": builds, "seals": seals, **meta}, indent=2) + "\n")


if __name__ == "__main__":
    main()
