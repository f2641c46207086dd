"""This checkout's docstore against another build of it (an older commit, a branch), side by side
on the same documents: each builds its own store of the same msmarco-like passages, then the two
take turns, a fresh process for each op, and the best round of each counts.

    python -m benches.versus OTHER_PYTHON_DIR [--docs 1000000] [--rounds 5] [--ops get,get_many,...]
    python -m benches.versus OTHER_PYTHON_DIR --paired --seconds 20 [--dir DIR] [--format-version 1]

``OTHER_PYTHON_DIR`` holds the other build's ``docstore`` package with its extension built in (for
a commit: ``git worktree add /tmp/old COMMIT && cd /tmp/old && cargo build --release --lib``, then
copy ``target/release/lib_docstore.so`` to ``python/docstore/_docstore.<abi>.so`` and pass
``/tmp/old/python``). This checkout's package is the one ``import docstore`` finds. The operations,
in nanoseconds per document (lower is better): ``get`` (``store[id].text`` in a loop), ``get_many``
and ``take`` (1024 random distinct ids or positions, ``field="text"``) with the pool, and the same
on one thread (``get_many_t1``, ``take_t1``: ``set_num_threads(1)``). ``--format-version N`` builds
this checkout's store in an older format too, to tell a format's cost from the code's.

Turns alternate so that a machine's load drifts over both alike, each op of each side in a fresh
process; the best of ``--rounds`` is the figure (a floor-like best case, as the floors are).
Needs nothing but the two builds.

``--paired`` instead loads both builds into one process (the other's package copied under the
name ``docstore_other``; its modules import each other relatively) and times their rounds in
turns, one round of each side back to back, for ``--seconds`` per op in a fresh process per op:
the figure is the median over the pairs of this build's time over the other's. A host that gives
its cores unevenly for seconds at a time moves both rounds of a pair alike, where turns seconds
apart each caught another share (the same round varied 1.5x from minute to minute here).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from . import corpora

OPS = ("get", "get_many", "take", "get_many_t1", "take_t1")

# What both children time: the documents looked up (drawn from store `s`, the same in every
# build's store of the same passages) and one round of an op over them.
WORK = r"""
import random


def draws(s):
    n = len(s)
    rng = random.Random(11)
    single = [s.at(rng.randrange(n), field="doc_id") for _ in range(256)]
    positions = [rng.sample(range(n), 1024) for _ in range(8)]
    batches = [[s.at(p, field="doc_id") for p in b] for b in positions]
    return single, positions, batches


def work(s, op, single, positions, batches):  # one round of `op` on `s`, the documents it reads
    if op == "get":
        def run():
            for k in single:
                s[k].text
        return run, len(single)
    if op.startswith("get_many"):
        return (lambda: [s.get_many(b, field="text") for b in batches]), 8 * 1024
    return (lambda: [s.take(p, field="text") for p in positions]), 8 * 1024
"""

# One process per turn (after WORK): builds the store on first use, times each op, prints JSON.
CHILD = r"""
import json, os, sys, time
import docstore

path, arrow, version = sys.argv[1], sys.argv[2], int(sys.argv[3])
ops, seconds = sys.argv[4].split(","), float(sys.argv[5])
if not os.path.exists(path):
    import pyarrow.ipc as ipc
    table = ipc.open_file(arrow).read_all()
    ids, texts = table.column(0).to_pylist(), table.column(1).to_pylist()
    options = {"format_version": version} if version else {}
    with docstore.Writer(path, fields={"text": "str"}, **options) as w:
        for k, v in zip(ids, texts):
            w.add(k, text=v)
s = docstore.open(path)
keys = draws(s)


def timed(run, docs):
    run()  # warm
    best, spent = float("inf"), 0.0
    while spent < seconds:
        t = time.perf_counter()
        run()
        dt = time.perf_counter() - t
        best, spent = min(best, dt), spent + dt
    return best / docs * 1e9


out = {}
for op in filter(None, ops):
    docstore.set_num_threads(1 if op.endswith("_t1") else 0)
    out[op] = timed(*work(s, op, *keys))
print(json.dumps(out))
"""


# One process per op (after WORK): both builds, their rounds in turns; prints JSON.
PAIRED_CHILD = r"""
import importlib, json, statistics, sys, time

sides = json.loads(sys.argv[1])  # [[name, module, store path], ...]: "this" first
op, seconds = sys.argv[2], float(sys.argv[3])
opened = []
for name, module, path in sides:
    m = importlib.import_module(module)
    m.set_num_threads(1 if op.endswith("_t1") else 0)
    opened.append((name, m.open(path)))
keys = draws(opened[0][1])
runs = [(name, *work(s, op, *keys)) for name, s in opened]
for _, run, _ in runs:
    run()  # warm
times = {name: [] for name, _, _ in runs}
deadline, pairs = time.perf_counter() + seconds, 0
while pairs < 20 or time.perf_counter() < deadline:
    order = runs if pairs % 2 == 0 else runs[::-1]  # neither side always first
    for name, run, docs in order:
        t = time.perf_counter()
        run()
        times[name].append((time.perf_counter() - t) / docs * 1e9)
    pairs += 1
out = {
    name: {
        "median_ns": statistics.median(t),
        "best_ns": min(t),
        # this side's time over each other side's, the median over the pairs
        "over": {o: statistics.median(a / b for a, b in zip(t, u)) for o, u in times.items()},
    }
    for name, t in times.items()
}
print(json.dumps({"pairs": pairs, "sides": out}))
"""


def paired(other_dir: str, sides: dict, ops: list[str], seconds: float) -> None:
    """``--paired``: both builds in one process per op, their rounds in turns (see the module doc)."""
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(Path(other_dir) / "docstore", Path(tmp) / "docstore_other")
        # The other build beside whatever finds this checkout's package (an install or a path).
        path = os.pathsep.join(filter(None, [tmp, os.environ.get("PYTHONPATH")]))
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONPATH=path)
        spec = [
            [name, "docstore_other" if python_dir else "docstore", str(store)]
            for name, (python_dir, store, _) in sides.items()
        ]
        spec.sort(key=lambda side: side[0] != "this")
        print(f"ns per document, median round; rounds of each side in turns, {seconds:g} s per op")
        names = [side[0] for side in spec]
        mine = [n for n in names if n != "other"]
        print("| op | pairs | " + " | ".join(names) + " | " + " | ".join(f"{n} / other" for n in mine) + " |")
        print("|---|--:|" + "--:|" * (len(names) + len(mine)))
        for op in ops:
            args = [sys.executable, "-c", WORK + PAIRED_CHILD, json.dumps(spec), op, str(seconds)]
            out = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
            if out.returncode != 0:
                raise SystemExit(f"{op}: {out.stderr.strip()[-2000:]}")
            got = json.loads(out.stdout.strip().splitlines()[-1])
            s = got["sides"]
            cells = [f"{s[n]['median_ns']:,.0f}" for n in names]
            ratios = [f"{s[n]['over']['other']:.2f}" for n in mine]
            print(f"| {op} | {got['pairs']} | " + " | ".join(cells + ratios) + " |")


def turn(python_dir: str | None, store: Path, arrow: Path, version: int, ops, seconds: float) -> dict:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    if python_dir:
        env["PYTHONPATH"] = python_dir
    argv = [str(store), str(arrow), str(version), ",".join(ops), str(seconds)]
    args = [sys.executable, "-c", WORK + CHILD, *argv]
    out = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{python_dir or 'this checkout'}: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("other", help="the other build's python/ directory (holding its docstore package)")
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=0.5, help="timed seconds per op and turn")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--format-version", type=int, default=0, help="also this checkout in this older format")
    ap.add_argument("--dir", type=Path, help="where the stores are kept (default: a temporary directory)")
    ap.add_argument("--paired", action="store_true", help="both builds in one process, rounds in turns")
    args = ap.parse_args(argv)
    ops = args.ops.split(",")
    arrow = corpora.msmarco_path(args.docs)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.dir or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        sides = {"other": (args.other, root / f"other-{args.docs}.docstore", 0)}
        sides["this"] = (None, root / f"this-{args.docs}.docstore", 0)
        if args.format_version:
            v = args.format_version
            sides[f"this, format {v}"] = (None, root / f"this-{args.docs}-v{v}.docstore", v)
        for python_dir, store, version in sides.values():
            if not store.exists():  # built by a turn of its own build
                turn(python_dir, store, arrow, version, [], 0.0)
        if args.paired:
            paired(args.other, sides, ops, args.seconds)
            return
        best: dict[str, dict[str, float]] = {name: {} for name in sides}
        for _ in range(args.rounds):
            # One process per side and op: an op timed after others in the same process ran
            # up to 1.3x faster or slower than alone (a pool's threads, the heap they left).
            for op in ops:
                for name, (python_dir, store, version) in sides.items():
                    got = turn(python_dir, store, arrow, version, [op], args.seconds)
                    best[name][op] = min(best[name].get(op, float("inf")), got[op])
    print(f"ns per document, best of {args.rounds} alternating turns, {args.docs:,} msmarco-like passages")
    names = list(sides)
    print("| op | " + " | ".join(names) + " | this / other |")
    print("|---|" + "--:|" * (len(names) + 1))
    for op in ops:
        cells = [f"{best[n][op]:,.0f}" for n in names]
        print(f"| {op} | " + " | ".join(cells) + f" | {best['this'][op] / best['other'][op]:.2f} |")


if __name__ == "__main__":
    main()
