"""Do threads of lookups scale once the GIL is gone? One and two threads of ``store[id]`` and of
``get_many`` (64 and 1024 ids) on the same store, under each interpreter given, in one run:

    python -m benches.freethreaded [--docs 100000] [--seconds 1.5] [--rounds 3] \\
        [--python PY ...] [--json out.json]

With ``--python`` (each a CPython: a free-threaded one, a build of the same version with the GIL,
...) the measurement runs once per interpreter and round, in a fresh process, rounds interleaved
so that other jobs on a shared machine move every interpreter alike; without it, in this
interpreter only. A free-threaded interpreter runs twice: with the GIL disabled (``PYTHON_GIL=0``,
which holds whatever the modules declare) and enabled (``PYTHON_GIL=1``).
scripts/test_freethreaded.sh runs it on CPython 3.14t against 3.14 built from the same source.

Each thread does the same fixed work; the figure is the work of all threads over the wall time
from their common start to the last one's end, and ``2 threads / 1 thread`` is the scaling (2.0 at
best). ``cores`` is what the two threads got (the process's CPU time over that wall time), and
``python x2 cores`` the same for two threads of a pure-Python loop: on a loaded machine it says how
much of a second core there was to scale onto at all. ``DOCSTORE_NUM_THREADS=1``: a batch decodes
on its calling thread, so the threads measured are the only ones working.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path

os.environ["DOCSTORE_NUM_THREADS"] = "1"  # before docstore starts its pool

OPS = ("store[id]", "get_many(64)", "get_many(1024)")
THREADS = (1, 2)


def measure(path: str, ids: list[str], op: str, threads: int, seconds: float) -> tuple[float, float]:
    """Documents per second of ``threads`` threads each doing the same fixed work of ``op``, and
    the cores they got (the process's CPU time over the wall time: at most ``threads``)."""
    import docstore

    store = docstore.open(path)
    rng = random.Random(0)
    size = {"store[id]": 1, "get_many(64)": 64, "get_many(1024)": 1024}[op]
    batches = [rng.sample(ids, size) for _ in range(64)]

    def work(calls: int) -> None:
        if size == 1:
            for i in range(calls):
                store[batches[i % 64][0]]
        else:
            for i in range(calls):
                store.get_many(batches[i % 64])

    calls = _calls_for(work, seconds, first=1, probe=seconds / 4)
    barrier = threading.Barrier(threads + 1)

    def run() -> None:
        barrier.wait()
        work(calls)

    pool = [threading.Thread(target=run) for _ in range(threads)]
    for t in pool:
        t.start()
    barrier.wait()
    start, cpu = time.perf_counter(), time.process_time()
    for t in pool:
        t.join()
    wall = time.perf_counter() - start
    cores = (time.process_time() - cpu) / wall
    store.close()
    return threads * calls * size / wall, cores


def _calls_for(work, seconds: float, first: int, probe: float) -> int:
    """Calibrated on one thread: how many calls of ``work`` take about ``seconds`` (doubling from
    ``first`` until a run takes ``probe`` seconds)."""
    calls, took = first, 0.0
    while took < probe:
        calls *= 2
        start = time.perf_counter()
        work(calls)
        took = time.perf_counter() - start
    return max(1, int(calls * seconds / took))


def measure_python(seconds: float) -> tuple[float, float]:
    """Iterations per second, and cores, of two threads each running the same pure-Python loop."""

    def work(n: int) -> None:
        total = 0
        for i in range(n):
            total += i

    calls = _calls_for(work, seconds / 4, first=1024, probe=seconds / 8)
    pool = [threading.Thread(target=work, args=(calls,)) for _ in range(2)]
    start, cpu = time.perf_counter(), time.process_time()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    wall = time.perf_counter() - start
    return 2 * calls / wall, (time.process_time() - cpu) / wall


def interpreter() -> str:
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    free = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    build = "free-threaded" if free else "with the GIL"
    return f"CPython {sys.version.split()[0]} {build}" + (f", GIL {'on' if gil else 'off'}" if free else "")


def child(path: str, seconds: float) -> None:
    """One round in this process: every op and thread count, printed as one JSON line."""
    import docstore

    with docstore.open(path) as store:
        ids = list(store.keys())
    rates = {f"{op} x{n}": measure(path, ids, op, n, args.seconds) for op in OPS for n in THREADS}
    # A pure-Python loop on two threads: the cores this machine gives two threads of this
    # interpreter at all (on a build with the GIL, at most 1; a loaded machine, fewer).
    rates["python x2"] = measure_python(args.seconds)
    print(json.dumps({"interpreter": interpreter(), "rates": rates}))


def build(path: Path, n: int) -> None:
    import docstore

    from . import corpora

    records = list(corpora.msmarco_like(n))
    with docstore.Writer(path, {"text": "str"}) as writer:
        writer.add_many([r[0] for r in records], {"text": [r[1] for r in records]})


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.docstore"
        build(path, args.docs)
        runs: list[tuple[str, dict[str, str]]] = []
        for python in args.python or [sys.executable]:
            free = subprocess.run(
                [python, "-c", "import sysconfig; print(bool(sysconfig.get_config_var('Py_GIL_DISABLED')))"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            # A free-threaded build with the GIL forced off (whatever the modules declare), and on.
            gils = [{"PYTHON_GIL": "0"}, {"PYTHON_GIL": "1"}] if free == "True" else [{}]
            runs += [(python, env) for env in gils]
        results: dict[str, dict[str, list[float]]] = {}
        for _ in range(args.rounds):
            for python, env in runs:
                command = [python, "-m", "benches.freethreaded", "--child", str(path)]
                out = subprocess.run(
                    [*command, "--seconds", str(args.seconds)],
                    capture_output=True,
                    text=True,
                    check=True,
                    env={**os.environ, **env},
                ).stdout
                line = json.loads(out.strip().splitlines()[-1])
                for key, rate in line["rates"].items():
                    results.setdefault(line["interpreter"], {}).setdefault(key, []).append(tuple(rate))
        load = os.getloadavg()
        print(
            f"{args.docs} docs, {args.rounds} rounds of {args.seconds} s, median docs/s; "
            f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} CPUs"
        )
        # cores: what the 2 threads got (CPU time / wall); `python x2`: the same for a pure-Python
        # loop, the most two threads could get here (2.0 on two idle cores without a GIL).
        print(
            f"{'interpreter':44} {'op':16} {'1 thread':>11} {'2 threads':>11} {'2/1':>6} "
            f"{'cores':>6} {'python x2 cores':>16}"
        )
        table = []
        for name, rates in results.items():
            control = statistics.median(c for _, c in rates["python x2"])
            for op in OPS:
                one = statistics.median(r for r, _ in rates[f"{op} x1"])
                two = statistics.median(r for r, _ in rates[f"{op} x2"])
                cores = statistics.median(c for _, c in rates[f"{op} x2"])
                row = {"interpreter": name, "op": op, "1": one, "2": two, "scaling": two / one}
                table.append({**row, "cores": cores, "python_x2_cores": control})
                print(
                    f"{name:44} {op:16} {one:11,.0f} {two:11,.0f} {two / one:6.2f} "
                    f"{cores:6.2f} {control:16.2f}"
                )
        if args.json:
            Path(args.json).write_text(json.dumps({"load": load, "rows": table}, indent=1))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=1.5, help="per thread count and op")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--python", action="append", help="an interpreter to measure (repeatable)")
    parser.add_argument("--json", help="also write the table here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.seconds)
    else:
        main()
