"""This checkout's docstore against another build of it (an older commit, a branch), side by side
on the same documents: each builds its own store of the same msmarco-like passages, then the two
take turns, a fresh process for each op, and the best round of each counts.

    python -m benches.versus OTHER_PYTHON_DIR [--docs 1000000] [--rounds 5] [--ops get,get_many,...]

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
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from . import corpora

OPS = ("get", "get_many", "take", "get_many_t1", "take_t1")

# One process per turn: builds the store on first use, times each op, prints JSON.
CHILD = r"""
import json, os, random, sys, time
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
n = len(s)
rng = random.Random(11)
single = [s.at(rng.randrange(n), field="doc_id") for _ in range(256)]
positions = [rng.sample(range(n), 1024) for _ in range(8)]
batches = [[s.at(p, field="doc_id") for p in b] for b in positions]


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
for op in ops:
    docstore.set_num_threads(1 if op.endswith("_t1") else 0)
    if op == "get":
        def run():
            for k in single:
                s[k].text
        out[op] = timed(run, len(single))
    elif op.startswith("get_many"):
        out[op] = timed(lambda: [s.get_many(b, field="text") for b in batches], 8 * 1024)
    elif op.startswith("take"):
        out[op] = timed(lambda: [s.take(p, field="text") for p in positions], 8 * 1024)
print(json.dumps(out))
"""


def turn(python_dir: str | None, store: Path, arrow: Path, version: int, ops, seconds: float) -> dict:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    if python_dir:
        env["PYTHONPATH"] = python_dir
    args = [sys.executable, "-c", CHILD, str(store), str(arrow), str(version), ",".join(ops), str(seconds)]
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
