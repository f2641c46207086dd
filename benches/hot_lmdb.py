"""A hot ``store[id].text`` against LMDB's ``txn.get`` on the same passages, in pairs.

The suite's hot table (``test_compare.py``, ``cmp:get_id``) times each store in its own rounds, so
on a shared machine two runs minutes apart can differ by 1.5x. Here both stores are open in one
process and take turns: each round is 256 random ids looked up in docstore and then in LMDB (or
LMDB first, alternately), and the ratio of each pair is kept. Reported: the median of each side and
the median and quartiles of the pairs' ratios, against LMDB's ``txn.get`` returning bytes and
against ``txn.get(...).decode()`` (the same ``str`` that ``store[id].text`` returns, what the
suite's LMDB peer does).

    python -m benches.hot_lmdb --docs 1000000 --dir /tmp/hot
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.ipc as ipc

import docstore

from .corpora import corpus_arrow_path
from .peers import COMPARE_PEERS

ROUND = 256  # lookups a side per round


def per_lookup_ns(get: Callable[[str], object], keys: list[str]) -> float:
    start = time.perf_counter_ns()
    for key in keys:
        get(key)
    return (time.perf_counter_ns() - start) / len(keys)


def paired(
    ours: Callable[[str], object], theirs: Callable[[str], object], rounds: list[list[str]], n: int
) -> dict:
    """``n`` rounds in turns; the first of each pair alternates."""
    a, b, ratios = [], [], []
    for r in range(n):
        keys = rounds[r % len(rounds)]
        if r % 2:
            x = per_lookup_ns(ours, keys)
            y = per_lookup_ns(theirs, keys)
        else:
            y = per_lookup_ns(theirs, keys)
            x = per_lookup_ns(ours, keys)
        a.append(x)
        b.append(y)
        ratios.append(y / x)
    q = statistics.quantiles(ratios, n=4)
    return {
        "docstore_ns": statistics.median(a),
        "lmdb_ns": statistics.median(b),
        "ratio": statistics.median(ratios),
        "q1": q[0],
        "q3": q[2],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=400, help="pairs (at least 4)")
    parser.add_argument("--dir", default=None, help="where the two stores are built and kept")
    args = parser.parse_args()
    if args.rounds < 4:
        parser.error("--rounds must be at least 4 (the quartiles of the pairs)")

    root = Path(args.dir or tempfile.mkdtemp(prefix="hot-lmdb-"))
    root.mkdir(parents=True, exist_ok=True)
    table = ipc.open_file(str(corpus_arrow_path("msmarco_like", args.docs))).read_all()
    ids = table.column("doc_id").to_pylist()
    ours, lmdb = COMPARE_PEERS["docstore"], COMPARE_PEERS["lmdb"]
    done = root / f"built-{args.docs}"
    if not done.exists():
        texts = table.column("text").to_pylist()
        for peer, name in ((ours, "docstore"), (lmdb, "lmdb")):
            peer.close(
                peer.build(root / name, ({"doc_id": i, "text": t} for i, t in zip(ids, texts, strict=True)))
            )
        done.touch()
    del table

    store = docstore.open(str(ours._file(root / "docstore")))
    handle = lmdb.open(root / "lmdb")
    txn = handle.txn
    rng = random.Random(0)
    # An odd number of key sets, so that each is timed first on either side in turn.
    rounds = [rng.sample(ids, ROUND) for _ in range(63)]
    for keys in rounds:  # the same documents on both sides; and every page touched once
        for key in keys:
            assert store[key].text == txn.get(key.encode()).decode()

    print(f"{args.docs:,} passages, hot, {args.rounds} pairs of {ROUND} random lookups by id, in turns")
    print("| LMDB side | store[id].text, ns | LMDB, ns | LMDB time / docstore time: median (quartiles) |")
    print("|---|--:|--:|--:|")
    sides = {
        "`txn.get(id)` (bytes)": lambda k: txn.get(k.encode()),
        "`txn.get(id).decode()` (str, as the suite's peer)": lambda k: txn.get(k.encode()).decode(),
    }
    for name, theirs in sides.items():
        r = paired(lambda k: store[k].text, theirs, rounds, args.rounds)
        ns = f"{r['docstore_ns']:,.0f} | {r['lmdb_ns']:,.0f}"
        print(f"| {name} | {ns} | {r['ratio']:.2f} ({r['q1']:.2f}-{r['q3']:.2f}) |")
    lmdb.close(handle)


if __name__ == "__main__":
    main()
