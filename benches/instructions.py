"""Instructions per document of each read (and of a build), and where they go: the load-independent
companion of the timed report, for a shared machine where timings are noise.

Each operation runs twice under callgrind (valgrind) on the real interpreter, N times and 0 times
after the same set-up; the difference over N is its cost per document, split by function. The
floor's components are read from the same profile: liblz4 decoding (`LZ4_decompress_*`), the key
search, the per-read check (xxh3) and the `str` (`PyUnicode_New` and its copy). Decoding runs on
the calling thread (`docstore.set_num_threads(1)`), so every instruction is counted once.

    python -m benches.instructions STORE [--ops get,get_many,take,loop] [--n 20000] [--top 25]

`loop` is the same Python loop over a dict of the same Docs: what Python itself costs per lookup.
`glibc`'s large copies run as `rep movsb`, which callgrind counts per byte moved: long documents'
`memcpy` rows overstate their time. Needs `valgrind` (apt-get install valgrind).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

# The timed part: `main(store, op, n)` in a fresh interpreter; n = 0 gives the set-up alone.
CHILD = r"""
import random, sys
import docstore

docstore.set_num_threads(1)


def main(path, op, n):
    s = docstore.open(path)
    count = len(s)
    rng = random.Random(0)
    ids = s.keys_range(0, count)
    sample = [ids[rng.randrange(count)] for _ in range(4096)]
    positions = [rng.randrange(count) for _ in range(1024)]
    batch = sample[:1024]
    for k in sample[:256]:
        s[k].text
    s.get_many(batch, field="text")
    s.take(positions, field="text")
    docs = {k: s[k] for k in sample}
    if op == "get":
        for i in range(n):
            s[sample[i & 4095]].text
    elif op == "loop":
        for i in range(n):
            docs[sample[i & 4095]].text
    elif op == "get_many":
        for _ in range(n):
            s.get_many(batch, field="text")
    elif op == "take":
        for _ in range(n):
            s.take(positions, field="text")


main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
"""

# Documents per call of each operation.
PER_CALL = {"get": 1, "loop": 1, "get_many": 1024, "take": 1024}

# Floor components, as function-name patterns of the profile.
FLOOR = {
    "lz4 decode": r"LZ4_decompress",
    "key search": r"store::search::|KeyEntry::at|varint::get",
    "check (xxh3)": r"xxh3|check::checked_body",
    "str creation": r"PyUnicode_New|__memcpy",
}


def profile(store: str, op: str, n: int, out: Path) -> Path:
    script = out / "child.py"
    script.write_text(CHILD)
    file = out / f"{op}.{n}.out"
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    valgrind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={file}"]
    child = [sys.executable, str(script), store, op, str(n)]
    subprocess.run([*valgrind, *child], check=True, env=env, capture_output=True)
    return file


# The key under which `functions` gives the run's total (the profile's `summary:` line): the
# functions that callgrind_annotate lists add up to ~1% less.
TOTAL = "(total)"


def functions(file: Path) -> collections.Counter:
    annotate = ["callgrind_annotate", "--threshold=100", str(file)]
    text = subprocess.run(annotate, capture_output=True, text=True, check=True)
    costs: collections.Counter = collections.Counter()
    for line in file.read_text(errors="replace").splitlines():
        if line.startswith(("summary:", "totals:")):
            costs[TOTAL] = int(line.split()[1])
    for line in text.stdout.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(.*)$", line)
        if m and "PROGRAM TOTALS" not in line:
            name = re.sub(r" \[[^\]]*\]$", "", m.group(2))
            name = re.sub(r"^.*Python-3\.\d+\.\d+/|^\?\?\?:", "", name)
            costs[name] += int(m.group(1).replace(",", ""))
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store")
    parser.add_argument("--ops", default="get,get_many,take,loop")
    parser.add_argument("--n", type=int, default=20000, help="documents per operation (whole calls)")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        for op in args.ops.split(","):
            calls = max(1, args.n // PER_CALL[op])
            base = functions(profile(args.store, op, 0, out))
            run = functions(profile(args.store, op, calls, out))
            docs = calls * PER_CALL[op]
            per_doc = {k: (run[k] - base[k]) / docs for k in set(run) | set(base)}
            total = (run[TOTAL] - base[TOTAL]) / docs
            per_doc.pop(TOTAL, None)
            print(f"\n{op}: {total:,.0f} instructions a document ({docs} documents)")
            for part, pattern in FLOOR.items():
                cost = sum(v for k, v in per_doc.items() if re.search(pattern, k))
                print(f"  {part:<14} {cost:9,.0f}  ({cost / total:.0%})")
            for name, cost in sorted(per_doc.items(), key=lambda kv: -kv[1])[: args.top]:
                print(f"  {cost:9,.1f}  {name[:110]}")


if __name__ == "__main__":
    main()
