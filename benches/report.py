"""Run the benchmark suite (or read its JSON) and write ``docs/benchmarks.md`` + ``docs/img/*.png``.

Usage (from the repository root)::

    python -m benches.report                      # full run: 1M / 100k / 200k docs (long: ~1 h)
    python -m benches.report --quick              # small corpora, short rounds (a few minutes)
    python -m benches.report --quick --runs 3     # three runs: each figure the median of three
    python -m benches.report --json run.json      # only render an earlier
                                                  #   pytest benches --benchmark-json=run.json
    python -m benches.report --json a.json b.json # figures measured in several runs: their median
    python -m benches.report --save-json run.json -- -k "not loader"   # args after -- go to pytest
    python -m benches.report --quick --readme docs/performance.md   # also refresh its table

Sizes and subsets come from the environment (``DOCSTORE_BENCH_DOCS``, ``..._LONG_DOCS``,
``..._TOKEN_DOCS``, ``..._CORPORA``, ``..._PEERS``: see ``compare.py``). pytest's output goes
to stderr. ``--out`` / ``--img`` choose where the Markdown and the plots go (default
``docs/benchmarks.md``, ``docs/img/``). ``--readme`` rewrites the part of that file between
``<!-- benchmarks:begin -->`` and ``<!-- benchmarks:end -->`` with the floors tables.

There are no targets to pass or fail: each of docstore's figures stands beside the peers' figures
and beside its physical floor, measured in the same run (``test_floors.py``), with how far from
the floor it is.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

CORPORA = ("msmarco_like", "english_news", "long_docs", "token_arrays")
SYSTEMS = [
    "baseline",
    "docstore",
    "docstore:t1",
    "docstore:level-1",
    "dict",
    "indexed-tsv",
    "ir_datasets",
    "ir_datasets:mmap",
    "lmdb",
    "lance",
    "hf-datasets",
    "arrow-ipc",
    "arrow-ipc:lz4",
    "rocksdict",
    "litdata",
    "numpy",
]
HOT = ["get_id", "get_pos", "batch64_id", "batch1024_id", "batch64_pos", "batch1024_pos"]
HOT_TITLES = {
    "get_id": "single by id",
    "get_pos": "single by position",
    "batch64_id": "batch 64 ids",
    "batch1024_id": "batch 1024 ids",
    "batch64_pos": "batch 64 positions",
    "batch1024_pos": "batch 1024 positions",
}
#: systems that keep everything in process memory (no random access "store" on disk)
IN_MEMORY = {"dict"}
#: peers that support random access to one document on disk (all of them here but dict)
RANDOM_ACCESS = set(SYSTEMS) - IN_MEMORY - {"docstore:t1", "docstore:level-1"}
#: docstore built with ``level=-1``: documents stored as they are, nothing to decode
UNCOMPRESSED = "docstore:level-1"

# Why a peer can beat docstore on a row, and what docstore would need to win it.
WHY = {
    "dict": (
        "A dict lookup hands back a str object that already exists: no index search, no "
        "decompression, no allocation (~50-100 ns). Nothing that decodes can match it hot; docstore "
        "wins what a dict costs instead: building it in every process, memory per DataLoader worker "
        "(copy-on-write pages dirtied by reference counts: see the PSS table), start-up, and corpora "
        "larger than RAM."
    ),
    "lmdb": (
        "LMDB keeps values uncompressed in a B+tree over its mapping: a hit is a tree walk and one "
        "copy into a bytes object. docstore's extra work is lz4 decoding, which grows with the "
        "document (long_docs: ~6 KB per lookup at ~1.2 GB/s single-threaded, see the decode table), "
        "for a file 2.5-3.6x smaller. Built with `level=-1` (no compression) docstore reads records "
        "in place as LMDB does, and the `docstore:level-1` row shows it ahead of LMDB, for a file "
        "1.7-2.5x larger than its default; the default build would need cheaper decoding of long "
        "documents to win these rows."
    ),
    "arrow-ipc": (
        "An uncompressed Arrow file is zero-copy: `take` gathers string slices of the mapping in C++ "
        "and `to_pylist` builds the str objects, with no decompression at all, for a file 1.5-2.1x "
        "larger than docstore's. docstore has to lz4-decode every document; its batch path (GIL "
        "released, Rust) is otherwise the same shape. Uncompressed (`level=-1`, the `docstore:level-1` "
        "row) docstore decodes nothing either; the default build would need a decode + str "
        "construction nearer memcpy speed (single-threaded it runs at ~0.1x of memcpy)."
    ),
    "numpy": (
        "The tokens lie uncompressed in one flat array: a lookup is two offset reads and a ~2 KB "
        "copy. docstore built with `level=-1` stores the arrays uncompressed too (the "
        "`docstore:level-1` row); a zero-copy view into the mapping would remove its last copy."
    ),
    "rocksdict": (
        "RocksDB serves hot reads from its block cache (decompressed blocks kept in memory), so a "
        "hit is a memcpy out of it, like LMDB; its file is larger than docstore's."
    ),
    "hf-datasets": "Memory-mapped uncompressed Arrow (as `arrow-ipc`) under datasets' formatting layer.",
    "lance": "Lance's `take` is vectorised in Rust, with a high fixed cost per call (~0.3 ms).",
    "indexed-tsv": "Plain text and one seek + readline: no decompression at all.",
}

#: why a peer can beat docstore on size on disk or on DataLoader memory
WHY_NOT_SMALLEST = {
    "size:lance": (
        "Lance (format 2.x) compresses pages of many rows together (FSST for strings plus a general "
        "codec on mini-blocks), which beats one lz4 block per document even with docstore's trained "
        "64 KiB dictionary on short passages and on long documents; its price is random access by "
        "the page (`take` of one row costs ~0.3 ms, hundreds of times docstore's hot lookup). On "
        "token ids docstore's byte planes beat it. To win on text docstore would need a stronger "
        "per-document codec (e.g. zstd with a trained dictionary: typically 20-35% smaller than lz4 "
        "on short texts, decoding ~3x slower)."
    ),
    "size:arrow-ipc:lz4": (
        "Arrow IPC with lz4 compresses each 1024-row buffer as one frame (more context than one "
        "document), and pays for it with a whole-batch decompression per lookup."
    ),
    "size:rocksdict": "RocksDB compresses 4 KiB blocks of many key/value pairs together.",
    "pss": (
        "ir_datasets (FILE mode), the TSV loader and RocksDB read with `read()`/`pread()`: the page "
        "cache they fill is not mapped into any process, so it is in nobody's PSS. docstore's "
        'DataLoader datasets read documents with `pread` too (`docstore.open(path, read="pread")`) '
        "but keep the key and offset index mapped, and each worker maps the pages of it that its "
        "lookups touched (the kernel maps cached neighbours with each one, ~100 KB per touch). To "
        "go lower, the offsets of a batch would have to be read with `pread` as well, trading one "
        "more system call per document for a few MB per worker."
    ),
}

# Not measured by the suite: the instruction profile of `benches/instructions.py` (load-independent),
# kept beside the timed figures it explains; re-measure it with that script when the hot paths change.
WHERE_TIME_GOES = """
## Where the time goes

Counted in instructions, which the machine's load does not move (`python -m benches.instructions
STORE`: each operation under callgrind on the real interpreter, N times against 0 times, one
decoding thread, split by function). Stores of the suite's `msmarco_like` (30,000 passages, ~330
bytes) and `long_docs` (3,000 documents, ~6 KB) built at the default level; format 2 is a build of
9483221 with its own store of the same passages. Measured at the `fix-perf` branch, 2026-11-27.

Instructions per document:

| operation | main (3a4f87d) | now | format 2 (9483221) | long_docs, now |
|---|--:|--:|--:|--:|
| `store[id].text` in a Python loop | 6,104 | 6,104 | 6,219 | 41,034 |
| the same loop over a dict of the Docs (Python alone) | 844 | 844 | - | - |
| `get_many(1024 ids, field="text")` | 5,450 | 5,110 | 4,787 | 34,459 |
| `take(1024 positions, field="text")` | 4,199 | 4,193 | 3,504 | 32,616 |
| build (`docstore.build` of the 30,000 passages, one thread) | 58,269 | 58,269 | - | - |

Single lookups since, on 1M msmarco-like passages (`python -m benches.instructions STORE --ops
get,loop`, the `fix-single` branch, 2026-11-27; the stores of one corpus written as format 3, 1
and, by 9483221, 2):

| `store[id].text` in a Python loop | format 3 | format 1 | format 2 (9483221) |
|---|--:|--:|--:|
| before (ef8fd51) | 6,157 | 5,864 | 5,717 |
| alone in its process, the GIL kept (`gil::others_may_wait`) | 5,839 | - | - |
| alone, the Doc built where the record was decoded (`Collection::with_one`) | 5,704 | - | - |
| the Doc never tracked by the garbage collector (`PyObject_GC_NewVar`) | 5,558-5,600 | 5,290 | - |
| beside another Python thread: the GIL released, the record copied (before / now) | 6,142 / 6,222 | - | - |

(The same code counts 5,558 or 5,600 in two incremental builds: codegen moves ~40.) The loop over a
dict of the same Docs is 844. A thread that waits on an `Event` is enough to take the second
path; it did not get faster (the Doc's saving is eaten by the moved code and the thread check).

What a single passage lookup alone in its process (5,600) is made of:

| part | instructions | share |
|---|--:|--:|
| liblz4 decoding (`LZ4_decompress_*`): floor | 1,640 | 29% |
| key search (`lower_bound`, `find`, fences, block, entry): floor | 760 | 14% |
| the `str` (`PyUnicode_New`, the copy): floor | 139 | 2% |
| the per-read check (xxh3 of key, position and body, `checked_body`) | 308 | 5.5% |
| releasing and retaking the GIL around the read | 0 (~450 beside another thread) | 0% |
| the Doc: field walk, `Reader::build`, allocation, its deallocation | ~576 | 10% |
| the call, decoder set-up, allocator, collection layers (by subtraction) | ~1,330 | 24% |
| Python's loop, the `.text` attribute | 844 | 15% |

- **Single lookups.** The floor's parts are ~2,540 of 4,756 instructions in docstore's call (0.53;
  0.60 with Python's loop on both sides; before: 0.47 and 0.54), so the 0.7 target is not reached.
  The GIL is released around the read whenever another Python thread or interpreter exists, or the
  store is remote: alone in its process a lookup that waits on the disk stops nobody, and
  CPython's mutex and condition variable cost ~320 instructions (more in time: the A/B below).
  The check (308, 5.5%; format 1 runs 5.1% fewer instructions, 5,290) is kept: what is left of it
  is xxh3 itself (~146 for a 129-240 byte body), fixed by the format.
  Wall clock, alternating the two builds 4 times (`store[id].text` over 256 random ids x 400, load
  6-7, so only the direction is worth reading): ef8fd51 1,455-2,430 ns a lookup (best 1,455), now
  1,201-1,793 ns (best 1,201, -17%), faster in every round. Against 9483221 on its format 2 store,
  3 rounds: 1,250-1,434 ns there, 1,012-1,362 ns now; fewer instructions too (5,600 against
  5,717), where before format 3 ran 8% more.
- **Batches.** Per document a `get_many(1024)` runs 0.84x the instructions of a single lookup in
  its loop (0.97x of the lookup's own 5,260), `take` 0.69x (0.80x): the 1.5x target is not reached
  on one thread. What a batch still does per document beyond the floor: the batch search (~810,
  more than the single search's 635 a key: 16 searches in lockstep trade instructions for
  overlapped cache misses; it was ~1,100 before `lower_bounds` shared one size per group),
  `Texts::prepare` (~400: the `str` layouts computed off the GIL, so that a second thread can make
  them in parallel), the id dedup (`Seen`, ~130; ~90 since `fix-batch`, below) and the result dict
  (~200). Against format 2, `get_many` runs 7% more instructions and `take` 20% more: the per-read
  check (~310-330, 6-7% of a batch's document, which format 2 did not do), `take`'s dedup of
  repeated positions (`distinct`, ~140; ~40 since `fix-batch`) and the checked read's key lookup.
- **Batches, code against format 2's on the same file** (`fix-batch`, 2026-11-27): 1M
  `msmarco_like` passages written as format 1 (no per-read check) and read by main's code and by
  9483221's (its own store of the same passages), both built with the release profile, one
  thread, `PYTHONHASHSEED=0`. `get_many(1024)`: 4,817 at main, 4,631 now, 4,545 at 9483221; the
  search, reads and objects (inside `guard`) are level with 9483221 (4,316 against 4,311); what is
  left is the id dedup (219 against 132 for a loop that did none): Python's cached `str` hash into
  an open-addressing `Seen`, where xxh3 into a `HashMap` cost 302. `take(1024)`: 3,540 at main,
  3,331 now, 3,177 at 9483221; what is left is the decoder's bookkeeping for many dictionaries
  (`codec::decompress_with` and its thread-local decoder, which keeps a copy of each shard's
  dictionary: ~250 against ~120) and `distinct` (~40, half of it callgrind counting the table's
  zeroing byte by byte). On the default format 3 store: `get_many` 5,090 to 4,908, `take` 4,131
  to 3,924. Wall-clock checks (`get_many(1024)` on one thread, the builds in turn) ran at load
  4-5 and told nothing either way.
- **Two threads of batches.** The decoding runs with the GIL released (`in_chunks_then`); the part
  of a `get_many(1024)` that holds it (making the values, the dict, the id dedup) is ~1,000 of
  5,110 instructions a document (those functions' own costs), ~20%: Amdahl's law caps two threads
  at ~1.7x one, short of the 1.8x target.
- **Build.** Of 58,269 instructions a passage: docstore's encoder 37,494 (64%; the floors
  program times it at 0.82x liblz4 HC's time on the same records and dictionary), dictionary
  training 11,768 (20%; trained on the first 8 MiB, nearly all of this 10 MB corpus, so it shrinks
  per document on larger ones), the round-trip decode of every compressed record 1,800 (3%),
  copies ~1,100, taking the records from Python ~2,000, sorting the keys ~280. Training and taking
  records run on one thread, before and beside the pool's compression: on two cores that serial
  ~15,000 a document stands against ~19,600 of compression per core, which bounds the build at
  ~0.6 of "cores x liblz4 HC" even on an idle machine.
"""

NOTES = """
## Notes on the method

- Every system is used as its documentation shows (see *used as*); where that leaves a choice,
  the one that suits random access was taken and is named: LMDB `readahead=False`, litdata
  `batch_decode=0`, HF datasets `with_format("numpy", dtype="int32")` for the token arrays, Arrow
  IPC in 1024-row record batches.
- Systems without lookup by id get a Python dict doc_id -> row (built when the store is opened:
  part of the open time; kept across cold-cache rounds). LMDB/RocksDB get the list of ids for
  lookups by position. This is what users of those systems write, and it costs memory per
  process (~100 bytes per document) that is not in the size-on-disk column.
- Batches of ids are distinct random ids; a batch result may be a dict (docstore, ir_datasets,
  LMDB) or a list in request order (the others): each system returns what its API returns.
- Cold cache: single lookups after eviction measure the device latency (QD1) times the reads
  per document. docstore reads three pages per lookup by id (one page-sized block of its key
  index, found through a small fence array that stays cached; the document's offset; the
  document), the systems with an in-memory id map one (the value), LMDB's B+tree one or two
  once its upper levels are cached again. Batches can overlap reads: docstore's batch calls,
  when a sampled page is not cached, ask the kernel for every page they need at once
  (`MADV_WILLNEED` / `POSIX_FADV_WILLNEED`), stage by stage, so the device works at a high
  queue depth.
- PSS counts mapped pages, so page cache read through `read()`/`pread()` (TSV, ir_datasets in
  FILE mode, RocksDB, and the documents of docstore's `docstore.torch` datasets) is in nobody's
  PSS: the memory is shared and reclaimable, like a mapping's pages. The *baseline* row is the
  same DataLoader with no store (empty strings): the difference is what each system adds.
- ir_datasets' store is written as its `PickleLz4FullStore` does for MS MARCO (pickled tuples, one
  lz4 block per document, no dictionary); `ir_datasets:mmap` is its `FileAccess.MMAP` option.
"""


def load(json_path: Path) -> tuple[dict, dict]:
    """-> (res[group][corpus][key] = bench, data); key = system or (system, extra...)."""
    data = json.loads(json_path.read_text())
    res: dict = defaultdict(lambda: defaultdict(dict))
    for b in data.get("benchmarks", []):
        info = b.get("extra_info", {})
        g = (b["group"] or "").removeprefix("cmp:")
        if "system" not in info and g != "fio":
            continue
        sysname = info.get("system")
        corpus = info.get("corpus", "-")
        if g == "threads":
            key = (sysname, info["threads"])
        elif g == "cold":
            key = (sysname, info["workload"])
        elif g == "loader":
            key = (sysname, info["workers"])
        elif g == "fio":
            key = info["iodepth"]
        elif g.startswith("integrity:"):
            key = info["system"]
        else:
            key = sysname
        res[g][corpus][key] = b
    return res, data


def merge(runs: list[dict], extra: tuple[str, ...] = ()) -> dict:
    """One result set (``res[group][corpus][key] = bench``) whose rounds' median is, per benchmark,
    the median over the ``runs`` that measured it; so are the ``extra`` figures of ``extra_info``."""
    merged: dict = defaultdict(lambda: defaultdict(dict))
    for group in {g for res in runs for g in res}:
        for corpus in {c for res in runs for c in res.get(group, {})}:
            keys = {k for res in runs for k in res.get(group, {}).get(corpus, {})}
            for key in keys:
                benches = [b for res in runs if (b := res.get(group, {}).get(corpus, {}).get(key))]
                first = benches[0]
                stats = dict(first["stats"], median=statistics.median(b["stats"]["median"] for b in benches))
                info = dict(first.get("extra_info", {}))
                for name in extra:
                    values = [v for b in benches if (v := b.get("extra_info", {}).get(name)) is not None]
                    if values:
                        info[name] = statistics.median(values)
                merged[group][corpus][key] = dict(first, stats=stats, extra_info=info, runs=len(benches))
    return merged


#: figures of ``extra_info`` that are medians over the runs when several are merged
MERGED_EXTRA = (
    "docs_per_s",
    "paired_scaling",
    "object_ns",
    "batch_object_ns",
    "batch_dict_ns",
    "search_ns",
    "decode_ns",
    "check_ns",
    "core_get_ns",
    "batch_search_ns",
    "batch_decode_ns",
    "hc_ns",
    "encoder_ns",
)


def thr(b: dict | None) -> float | None:
    if not b:
        return None
    med = b["stats"]["median"]
    return b["extra_info"]["ops"] / med if med > 0 else None


def cold_thr(b: dict | None) -> float | None:
    """Cold rounds are timed in a subprocess: docs/s from its median round."""
    if not b:
        return None
    return b["extra_info"].get("docs_per_s") or thr(b)


def fmt_rate(x: float | None, unit: str = "") -> str:
    if x is None:
        return "-"
    for div, suf in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= div:
            return f"{x / div:.2f}{suf}{unit}"
    return f"{x:.1f}{unit}" if x >= 10 else f"{x:.2f}{unit}"


def fmt_ratio(x: float | None) -> str:
    return "-" if x is None else (f"{x:.1f}x" if x >= 10 else f"{x:.2f}x")


def fmt_mib(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**20:,.1f} MiB"


def fmt_s(x: float | None) -> str:
    if x is None:
        return "-"
    if x < 1e-3:
        return f"{x * 1e6:.0f} µs"
    if x < 1:
        return f"{x * 1e3:.1f} ms"
    return f"{x:.2f} s"


def table(headers: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join(["---"] + ["--:"] * (len(headers) - 1)) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def ordered(systems) -> list[str]:
    return sorted(systems, key=lambda s: (SYSTEMS.index(s) if s in SYSTEMS else 99, str(s)))


def corpora_in(res) -> list[str]:
    seen = {c for g in res.values() for c in g if c != "-"}
    return [c for c in CORPORA if c in seen] + sorted(seen - set(CORPORA))


# -- sections ------------------------------------------------------------------------------------


def hot_tables(res, corpus: str) -> tuple[str, list[tuple]]:
    """Throughput table + ratio table for one corpus; -> (markdown, [(workload, peer, ratio)] where a
    peer beats docstore)."""
    systems = ordered({s for w in HOT for s in res[w].get(corpus, {})})
    best = {}
    for w in HOT:
        vals = {s: thr(res[w].get(corpus, {}).get(s)) for s in systems}
        vals = {s: v for s, v in vals.items() if v}
        best[w] = max(vals, key=vals.get) if vals else None
    rows, ratio_rows, lost = [], [], []
    for s in systems:
        row, rrow = [f"`{s}`"], [f"`{s}`"]
        for w in HOT:
            t = thr(res[w].get(corpus, {}).get(s))
            cell = fmt_rate(t)
            if t and best[w] == s:
                cell = f"**{cell}**"
            row.append(cell)
            d = _docstore_best(res, w, corpus)
            r = d / t if (t and d) else None
            rrow.append(fmt_ratio(r))
            if r is not None and r < 1 and not s.startswith("docstore"):
                lost.append((w, s, r))
        rows.append(row)
        ratio_rows.append(rrow)
    heads = ["system"] + [HOT_TITLES[w] for w in HOT]
    md = (
        "Documents per second (bold: fastest in the column).\n\n"
        + table(heads, rows)
        + "\n\ndocstore's throughput divided by each system's (> 1: docstore is faster; docstore's "
        "best of its default pool and one thread).\n\n" + table(heads, ratio_rows)
    )
    return md, lost


def _docstore_best(res, w, corpus):
    vals = [thr(res[w].get(corpus, {}).get(s)) for s in ("docstore", "docstore:t1")]
    vals = [v for v in vals if v]
    return max(vals) if vals else None


def threads_table(res, corpora) -> str:
    g = res["threads"]
    systems = ordered({k[0] for c in corpora for k in g.get(c, {})})
    heads = ["system"]
    for c in corpora:
        if g.get(c):
            heads += [f"{c}: 1 thread", "2 threads", "2t/1t"]
    rows = []
    for s in systems:
        row = [f"`{s}`"]
        for c in corpora:
            if not g.get(c):
                continue
            t1, t2 = thr(g[c].get((s, 1))), thr(g[c].get((s, 2)))
            paired = (g[c].get((s, 2)) or {}).get("extra_info", {}).get("paired_scaling")
            row += [fmt_rate(t1), fmt_rate(t2), fmt_ratio(paired or (t2 / t1 if (t1 and t2) else None))]
        rows.append(row)
    return table(heads, rows)


def build_table(res, corpus) -> str:
    g = res["build"].get(corpus, {})
    heads = [
        "system",
        "docs/s",
        "docstore x",
        "build time",
        "peak RSS",
        "RSS added by building",
        "size on disk",
        "x raw",
        "/ docstore size",
    ]
    d = g.get("docstore", {}).get("extra_info", {})
    rows = []
    for s in ordered(g):
        i = g[s]["extra_info"]
        size = i.get("size_bytes")
        rows.append(
            [
                f"`{s}`",
                fmt_rate(i["docs_per_s"]),
                fmt_ratio(d["docs_per_s"] / i["docs_per_s"]) if d else "-",
                fmt_s(i["build_s"]),
                fmt_mib(i["peak_rss"]),
                fmt_mib(max(0, i["peak_rss"] - i["rss_before"])),
                "in memory" if size is None else fmt_mib(size),
                "-" if size is None else f"{i['x_raw']:.3f}",
                "-" if (size is None or not d.get("size_bytes")) else f"{size / d['size_bytes']:.2f}",
            ]
        )
    raw = next(iter(g.values()))["extra_info"]["raw_bytes"] if g else None
    return f"Raw values: {fmt_mib(raw)}.\n\n" + table(heads, rows)


def open_table(res) -> str:
    g = res["open"].get("msmarco_like", {})
    if not g:
        return ""
    any_i = next(iter(g.values()))["extra_info"]
    ns, nl = any_i["n_small"], any_i["n_large"]
    heads = ["system", f"{ns:,} docs", f"{nl:,} docs", "growth", f"/ docstore at {nl:,}"]
    rows = []
    d = g.get("docstore", {}).get("extra_info", {}).get("open_s_large")
    for s in ordered(g):
        i = g[s]["extra_info"]
        a, b = i["open_s_small"], i["open_s_large"]
        rows.append(
            [f"`{s}`", fmt_s(a), fmt_s(b), fmt_ratio(b / a if a else None), fmt_ratio(b / d if d else None)]
        )
    return table(heads, rows)


def fio_results(res) -> dict:
    out = {}
    for c in res["fio"]:
        for qd, b in res["fio"][c].items():
            out[qd] = b["extra_info"]
    return out


def cold_table(res, fio: dict) -> str:
    g = res["cold"].get("msmarco_like", {})
    if not g:
        return ""
    systems = ordered({k[0] for k in g})
    iops1 = fio.get(1, {}).get("iops")
    iops32 = fio.get(32, {}).get("iops")
    heads = [
        "system",
        "cold single by id (docs/s)",
        "docstore x",
        "/ fio QD1 IOPS",
        "hot (docs/s)",
        "cold batch 1024 ids (docs/s)",
        "docstore x",
        "/ fio QD32 IOPS",
        "hot (docs/s)",
        "resident after evict",
    ]
    rows = []
    d1 = cold_thr(g.get(("docstore", "get_id")))
    dbs = [cold_thr(g.get((x, "batch1024_id"))) for x in ("docstore", "docstore:t1")]
    dbs = [x for x in dbs if x]
    db = max(dbs) if dbs else None
    for s in systems:
        c1 = cold_thr(g.get((s, "get_id")))
        cb = cold_thr(g.get((s, "batch1024_id")))
        h1 = thr(res["get_id"].get("msmarco_like", {}).get(s)) if s != "docstore:t1" else None
        hb = thr(res["batch1024_id"].get("msmarco_like", {}).get(s))
        resid = [
            b["extra_info"].get("resident_after_evict_max")
            for b in (g.get((s, "get_id")), g.get((s, "batch1024_id")))
            if b
        ]
        resid = [r for r in resid if r is not None]
        rows.append(
            [
                f"`{s}`",
                fmt_rate(c1),
                fmt_ratio(d1 / c1 if (c1 and d1) else None),
                f"{c1 / iops1:.2f}" if (c1 and iops1) else "-",
                fmt_rate(h1),
                fmt_rate(cb),
                fmt_ratio(db / cb if (cb and db) else None),
                f"{cb / iops32:.2f}" if (cb and iops32) else "-",
                fmt_rate(hb),
                fmt_mib(max(resid)) if resid else "-",
            ]
        )
    return table(heads, rows)


def decode_table(res, corpora) -> str:
    heads = [
        "corpus",
        "memcpy",
        "lz4 decompress (python-lz4, 1 thread)",
        "docstore decode all, 1 thread",
        "docstore decode all, default pool",
        "docstore hot batch 1024 positions",
        "hot batch / lz4",
    ]
    rows = []
    for c in corpora:
        b = res["decode"].get(c, {}).get("docstore")
        if not b:
            continue
        i = b["extra_info"]
        hot = _docstore_best(res, "batch1024_pos", c)
        n = i["n_docs"]
        per = i["raw_bytes"] / n
        rows.append(
            [
                c,
                f"{fmt_rate(i['memcpy_bytes_per_s'], 'B/s')}",
                f"{fmt_rate(i['lz4_docs_per_s'])} docs/s ({fmt_rate(i['lz4_bytes_per_s'], 'B/s')})",
                f"{fmt_rate(i['docstore_decode_all_t1_docs_per_s'])} docs/s "
                f"({fmt_rate(i['docstore_decode_all_t1_docs_per_s'] * per, 'B/s')})",
                f"{fmt_rate(i['docstore_decode_all_docs_per_s'])} docs/s",
                f"{fmt_rate(hot)} docs/s" if hot else "-",
                f"{hot / i['lz4_docs_per_s']:.2f}" if hot else "-",
            ]
        )
    return table(heads, rows)


def loader_table(res) -> str:
    g = res["loader"].get("msmarco_like", {})
    if not g:
        return ""
    workers = sorted({k[1] for k in g})
    systems = ordered({k[0] for k in g})
    heads = ["system"]
    for w in workers:
        heads += [f"{w} workers: samples/s", "total PSS", "above baseline"]
    rows = []
    for s in systems:
        row = [f"`{s}`"]
        for w in workers:
            b = g.get((s, w))
            if not b:
                row += ["-", "-", "-"]
                continue
            i = b["extra_info"]
            base = g.get(("baseline", w))
            above = i["pss_total"] - base["extra_info"]["pss_total"] if base else None
            row += [
                fmt_rate(i["samples_per_s"]),
                fmt_mib(i["pss_total"]),
                "-" if above is None or s == "baseline" else fmt_mib(above),
            ]
        rows.append(row)
    return table(heads, rows)


def summary(res, corpora) -> str:
    """A few lines: where docstore ranks on the hot rows, overall and among on-disk stores."""
    rows = first = first_disk = 0
    uncompressed_rows = uncompressed_first_disk = 0
    beaten_disk: dict[str, int] = {}
    for c in corpora:
        for w in HOT:
            g = res[w].get(c, {})
            d = _docstore_best(res, w, c)
            peers = {s: thr(b) for s, b in g.items() if not s.startswith("docstore") and thr(b)}
            if d is None or not peers:
                continue
            rows += 1
            first += all(t <= d for t in peers.values())
            disk = {s: t for s, t in peers.items() if s not in IN_MEMORY}
            ok = all(t <= d for t in disk.values())
            first_disk += ok
            for s, t in disk.items():
                if t > d:
                    beaten_disk[s] = beaten_disk.get(s, 0) + 1
            u = thr(g.get(UNCOMPRESSED))
            if u:
                uncompressed_rows += 1
                uncompressed_first_disk += all(t <= max(u, d) for t in disk.values())
    out = [
        f"- Hot-cache lookups ({rows} rows: {len(corpora)} corpora x single/batch x id/position): docstore "
        f"is first in {first}; first among the stores on disk (all but the in-memory dict) in "
        f"{first_disk}."
    ]
    if beaten_disk:
        out.append(
            "- On-disk stores faster than docstore on some hot row: "
            + ", ".join(
                f"`{s}` ({n} row{'s' if n != 1 else ''})"
                for s, n in sorted(beaten_disk.items(), key=lambda x: -x[1])
            )
            + " (values kept uncompressed, or served from a decompressed block cache; see *Where a "
            "peer wins*)."
        )
    if uncompressed_rows:
        out.append(
            f"- Built with `level=-1` (documents stored uncompressed; see the size table), docstore "
            f"is first among the stores on disk in {uncompressed_first_disk} of the "
            f"{uncompressed_rows} rows it was measured in (its best of the two builds per row)."
        )
    g = res["open"].get("msmarco_like", {})
    if g.get("docstore"):
        i = g["docstore"]["extra_info"]
        out.append(
            f"- Open + first lookup: docstore {fmt_s(i['open_s_small'])} at {i['n_small']:,} docs and "
            f"{fmt_s(i['open_s_large'])} at {i['n_large']:,}; every system that keeps an id map in "
            "memory grows ~10x."
        )
    return "\n".join(out)


# -- where docstore stands ------------------------------------------------------------------------


def standings(res, corpora) -> list[tuple[str, str, str, bool]]:
    """Facts, not targets: per hot row the stores faster than docstore (or, where it is fastest, the
    runner-up), the smallest store on disk and the lowest DataLoader PSS.
    -> [(question, corpus, answer, docstore leads)]."""
    out = []
    for c in corpora:
        for w in HOT:
            g = res[w].get(c, {})
            d = _docstore_best(res, w, c)
            if d is None:
                continue
            peers = {s: thr(b) for s, b in g.items() if not s.startswith("docstore") and thr(b)}
            if not peers:
                continue
            beaten = sorted(((s, d / t) for s, t in peers.items() if t > d), key=lambda x: x[1])
            question = f"faster than docstore: {HOT_TITLES[w]}"
            if beaten:
                detail = "; ".join(f"`{s}` (docstore at {r:.2f}x)" for s, r in beaten)
                out.append((question, c, detail, False))
            else:
                runner = max(peers, key=peers.get)
                out.append(
                    (question, c, f"none (next: `{runner}`, docstore {d / peers[runner]:.2f}x it)", True)
                )
        g = res["build"].get(c, {})
        sizes = {
            s: b["extra_info"]["size_bytes"]
            for s, b in g.items()
            if s in RANDOM_ACCESS and b["extra_info"].get("size_bytes")
        }
        if "docstore" in sizes and len(sizes) > 1:
            smaller = sorted((s, v / sizes["docstore"]) for s, v in sizes.items() if v < sizes["docstore"])
            others = {s: v for s, v in sizes.items() if s != "docstore"}
            nxt = min(others, key=others.get)
            question = "smaller on disk than docstore (random-access stores)"
            if smaller:
                detail = "; ".join(f"`{s}` ({r:.3f}x docstore)" for s, r in smaller)
                out.append((question, c, detail, False))
            else:
                out.append(
                    (
                        question,
                        c,
                        f"none (next: `{nxt}`, {others[nxt] / sizes['docstore']:.2f}x docstore)",
                        True,
                    )
                )
    g = res["loader"].get("msmarco_like", {})
    pss = {k[0]: b["extra_info"]["pss_total"] for k, b in g.items() if k[1] == 4 and k[0] != "baseline"}
    if "docstore" in pss and len(pss) > 1:
        lower = sorted((s, v) for s, v in pss.items() if v < pss["docstore"])
        question = "lower total PSS than docstore, 4 workers"
        if lower:
            detail = "; ".join(f"`{s}` {fmt_mib(v)}" for s, v in lower)
            out.append((question, "msmarco_like", f"{detail} (docstore {fmt_mib(pss['docstore'])})", False))
        else:
            others = {s: v for s, v in pss.items() if s != "docstore"}
            nxt = min(others, key=others.get)
            out.append(
                (
                    question,
                    "msmarco_like",
                    f"none (docstore {fmt_mib(pss['docstore'])}; next `{nxt}` {fmt_mib(others[nxt])})",
                    True,
                )
            )
    return out


# -- floors ----------------------------------------------------------------------------------------


def floor_parts(run: dict, corpus: str) -> dict | None:
    """The ``cmp:floors`` figures of one run (``test_floors.py``; nanoseconds per document)."""
    b = run.get("floors", {}).get(corpus, {}).get("docstore")
    return b["extra_info"] if b else None


def _objects_ns(f: dict) -> float:
    """Per document of a batch: its value and its entry in the result dict, built under the GIL."""
    return f["batch_object_ns"] + f["batch_dict_ns"]


def _parallel_floor(f: dict, cores: int) -> float:
    """Docs/s of a batch on ``cores`` cores when search and decoding spread over them and the
    objects are built by one thread at a time (the GIL)."""
    work = f["batch_search_ns"] + f["batch_decode_ns"] + _objects_ns(f)
    return 1e9 / max(work / cores, _objects_ns(f))


def _build_rate(b: dict | None) -> float | None:
    return b["extra_info"].get("docs_per_s") if b else None


#: (key, the figure, its floor): each row of the floors table
FLOOR_ROWS = [
    (
        "get_id",
        "`store[id]` single lookups by id, docs/s",
        "key search alone + liblz4 decoding the same stored bytes + creating the object, one thread",
    ),
    (
        "get_id:python",
        "the same lookups",
        "the floor above + Python's cheapest lookup through the same loop (the `dict` row's time)",
    ),
    (
        "batch1024_id",
        "`get_many` of 1024 ids, docs/s",
        "cores x liblz4's single-thread decode speed on the batch's documents",
    ),
    (
        "batch1024_id:objects",
        "the same batches",
        "cores x (search + decode), with the objects (values + the result dict) built by one thread",
    ),
    (
        "threads",
        "2 threads of `get_many(1024 ids)`, each decoding its own batches (`set_num_threads(1)`), docs/s",
        "the batch floor with objects, on min(2, cores) cores: what the GIL-held part lets through",
    ),
    (
        "build",
        "build from the same records, docs/s",
        "cores x liblz4 compressing the same records at the store's level with its dictionary",
    ),
]


def floor_rate(f: dict, what: str, dict_rate: float | None = None) -> float | None:
    """The floor of row ``what`` (docs/s) from floor parts ``f`` (``test_floors.py``);
    ``dict_rate``: the dict's single lookups, which ``get_id:python`` adds."""
    lookup_ns = f["search_ns"] + f["decode_ns"] + f["object_ns"]
    if what == "get_id":
        return 1e9 / lookup_ns
    if what == "get_id:python":
        return 1e9 / (lookup_ns + 1e9 / dict_rate) if dict_rate else None
    if what == "batch1024_id":
        return f["cores"] * 1e9 / f["batch_decode_ns"]
    if what == "batch1024_id:objects":
        return _parallel_floor(f, f["cores"])
    if what == "threads":
        return _parallel_floor(f, min(2, f["cores"]))
    return f["cores"] * 1e9 / f["hc_ns"] if f.get("hc_ns") else None


def figure_and_floor(run: dict, corpus: str, what: str) -> tuple[float | None, float | None]:
    """docstore's figure and its floor in one run (docs/s); None where the run lacks either."""
    f = floor_parts(run, corpus)
    g = run.get

    def hot(group, key="docstore"):
        return thr(g(group, {}).get(corpus, {}).get(key))

    if what.startswith("get_id"):
        fig = hot("get_id")
    elif what.startswith("batch1024_id"):
        fig = hot("batch1024_id")
    elif what == "threads":
        fig = hot("threads", ("docstore:t1", 2))
    else:
        fig = _build_rate(g("build", {}).get(corpus, {}).get("docstore"))
    if not f:
        return fig, None
    return fig, floor_rate(f, what, hot("get_id", "dict"))


def paired_ratios(run: dict, corpus: str, what: str) -> list[float]:
    """docstore / floor of row ``what`` in each pair of one run that timed the two back to back
    (``test_floors.py``: the best round of each); empty for the rows not timed in pairs."""
    figure = what.split(":")[0]
    out = []
    for pair in (floor_parts(run, corpus) or {}).get("pairs", []):
        if figure in pair and (flo := floor_rate(pair["floors"], what, pair.get("dict:get_id"))):
            out.append(pair[figure] / flo)
    return out


def of_floor(runs: list[dict], corpus: str, what: str) -> list[float]:
    """docstore's figure / its floor, one per run: the median over the run's pairs where it timed
    them back to back, else the figure over the floor, timed apart."""
    out = []
    for run in runs:
        if paired := paired_ratios(run, corpus, what):
            out.append(statistics.median(paired))
            continue
        fig, flo = figure_and_floor(run, corpus, what)
        if fig and flo:
            out.append(fig / flo)
    return out


def fmt_of_floor(values: list[float]) -> str:
    if not values:
        return "-"
    med = statistics.median(values)
    text = f"**{med:.2f}**"
    if med < 1:
        text += f" (floor {1 / med:.1f}x faster)"
    if len(values) > 1:
        text += "; runs " + " / ".join(f"{v:.2f}" for v in values)
    return text


def median_of(runs: list[dict], fn) -> float | None:
    values = [v for run in runs if (v := fn(run)) is not None]
    return statistics.median(values) if values else None


def _peer_figures(res: dict, corpus: str, what: str) -> dict[str, float]:
    """The other systems' figures on the row of ``what`` (docs/s)."""
    if what.startswith("get_id"):
        g = {s: thr(b) for s, b in res.get("get_id", {}).get(corpus, {}).items()}
    elif what.startswith("batch1024_id"):
        g = {s: thr(b) for s, b in res.get("batch1024_id", {}).get(corpus, {}).items()}
    elif what == "threads":
        g = {k[0]: thr(b) for k, b in res.get("threads", {}).get(corpus, {}).items() if k[1] == 2}
    else:
        g = {s: _build_rate(b) for s, b in res.get("build", {}).get(corpus, {}).items()}
    return {s: v for s, v in g.items() if v and not s.startswith("docstore")}


def _beside(fig: float | None, t: float | None) -> str:
    """A peer's figure and, in parentheses, docstore's divided by it."""
    if not t:
        return "-"
    return f"{fmt_rate(t)} ({fmt_ratio(fig / t)})" if fig else fmt_rate(t)


def floors_table(runs: list[dict], res: dict, corpus: str) -> str:
    heads = [
        "figure",
        "docstore",
        "floor",
        "docstore / floor",
        "ir_datasets",
        "fastest other store on disk",
        "dict (in RAM)",
        "the floor is",
    ]
    rows = []
    for what, title, floor_is in FLOOR_ROWS:
        fig = median_of(runs, lambda r, w=what: figure_and_floor(r, corpus, w)[0])
        flo = median_of(runs, lambda r, w=what: figure_and_floor(r, corpus, w)[1])
        if fig is None:  # not measured in this run (e.g. threads in quick mode, but on msmarco_like)
            continue
        peers = {} if ":" in what else _peer_figures(res, corpus, what)
        disk = {s: v for s, v in peers.items() if s not in IN_MEMORY and s != "ir_datasets"}
        best = max(disk, key=disk.get) if disk else None
        rows.append(
            [
                title,
                fmt_rate(fig),
                fmt_rate(flo),
                fmt_of_floor(of_floor(runs, corpus, what)),
                _beside(fig, peers.get("ir_datasets")),
                f"`{best}` {_beside(fig, disk[best])}" if best else "",
                _beside(fig, peers.get("dict")),
                floor_is,
            ]
        )
    g = res.get("build", {}).get(corpus, {})

    def x_raw(s: str) -> str:
        i = g.get(s, {}).get("extra_info", {})
        return f"{i['x_raw']:.3f}x" if i.get("x_raw") is not None else "-"

    sizes = {s: b["extra_info"]["x_raw"] for s, b in g.items() if b["extra_info"].get("x_raw") is not None}
    others = {s: v for s, v in sizes.items() if not s.startswith("docstore") and s != "ir_datasets"}
    smallest = min(others, key=others.get) if others else None
    if "docstore" in sizes:
        rows.append(
            [
                "size on disk, x raw values",
                x_raw("docstore"),
                "-",
                "-",
                x_raw("ir_datasets"),
                f"`{smallest}` (smallest) {x_raw(smallest)}" if smallest else "",
                "-",
                f"no floor (smaller is better); `level=-1`: {x_raw('docstore:level-1')}",
            ]
        )
    return table(heads, rows)


def components_table(runs: list[dict], res: dict, corpora: list[str]) -> str:
    """What the floors are made of (medians over the runs), beside docstore's own figures."""

    def parts(run, corpus) -> dict:
        return floor_parts(run, corpus) or {}

    def comp(corpus, name):
        return median_of(runs, lambda r: (floor_parts(r, corpus) or {}).get(name))

    def ns(x):
        return "-" if x is None else (f"{x:,.0f} ns" if x >= 100 else f"{x:.1f} ns")

    def ns_rate(x, nbytes):
        return "-" if (x is None or nbytes is None) else f"{ns(x)} ({nbytes / x:.2f} GB/s)"

    def per(a, b):
        return a / b if (a is not None and b) else None

    def total(*xs):
        return None if any(x is None for x in xs) else sum(xs)

    def inv(rate):
        return 1e9 / rate if rate else None

    def hot_ns(corpus, group):
        return inv(median_of(runs, lambda r: thr(r.get(group, {}).get(corpus, {}).get("docstore"))))

    spec = [
        ("documents in the store", lambda c: fmt_int(comp(c, "store_docs"))),
        (
            "cores (the floors' multiplier) / docstore's pool",
            lambda c: f"{fmt_int(comp(c, 'cores'))} / {fmt_int(comp(c, 'docstore_num_threads'))}",
        ),
        ("the Python object", lambda c: next((o for r in runs if (o := parts(r, c).get("object"))), "-")),
        (
            "raw bytes per looked-up document",
            lambda c: fmt_int(per(comp(c, "single_raw_bytes"), comp(c, "single_docs"))),
        ),
        ("key search alone (`Store::locate`), per lookup", lambda c: ns(comp(c, "search_ns"))),
        (
            "liblz4 decoding the same documents, per document",
            lambda c: ns_rate(comp(c, "decode_ns"), per(comp(c, "single_raw_bytes"), comp(c, "single_docs"))),
        ),
        ("CPython creating the object, per document", lambda c: ns(comp(c, "object_ns"))),
        (
            "**lookup floor** (the three above)",
            lambda c: ns(total(comp(c, "search_ns"), comp(c, "decode_ns"), comp(c, "object_ns"))),
        ),
        ("docstore `store[id]`, measured (`cmp:get_id`)", lambda c: ns(hot_ns(c, "get_id"))),
        (
            "docstore's core alone (Rust: search, check, decode), for reference",
            lambda c: ns(comp(c, "core_get_ns")),
        ),
        ("the format 2 check in it (not in the floor)", lambda c: ns(comp(c, "check_ns"))),
        (
            "batch: key search + liblz4 decoding, per document, one thread",
            lambda c: ns(total(comp(c, "batch_search_ns"), comp(c, "batch_decode_ns"))),
        ),
        (
            "batch: the object + the result dict's entry, per document (GIL held)",
            lambda c: ns(total(comp(c, "batch_object_ns"), comp(c, "batch_dict_ns"))),
        ),
        ("docstore `get_many(1024 ids)`, measured, per document", lambda c: ns(hot_ns(c, "batch1024_id"))),
        (
            "build: liblz4 compressing a record at the store's level with its dictionary, one thread",
            lambda c: ns_rate(comp(c, "hc_ns"), per(comp(c, "build_raw_bytes"), comp(c, "build_docs"))),
        ),
        (
            "build: docstore's own encoder on the same records, one thread (for reference)",
            lambda c: ns_rate(comp(c, "encoder_ns"), per(comp(c, "build_raw_bytes"), comp(c, "build_docs"))),
        ),
    ]
    rows = [[label] + [fn(c) for c in corpora] for label, fn in spec]
    return table(["component", *corpora], rows)


def fmt_int(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


FLOORS_INTRO = (
    "The floor is what a figure could be at best on this machine: the work no store can skip (find "
    "the document, lz4-decode its stored bytes, create the Python object), timed alone on docstore's "
    "own store file, on the same documents, in the same pytest run (`benches/test_floors.py`). "
    "*docstore / floor* is 1.00 at the floor (below 1: how far from it); for single lookups and "
    "batches it is the median over pairs of the floor and docstore's figure timed back to back, "
    "the best round of each (the *docstore* and *floor* columns are each timed apart, the figure "
    "as every peer's is: its median round). Each peer's column gives "
    "its figure and, in parentheses, docstore's divided by it (> 1: docstore is faster); the "
    "fastest other store on disk excludes docstore's own variants, ir_datasets (its own column) "
    "and the in-memory dict."
)

FLOORS_NOTES = """\
How the floors are measured:

- Key search, decoding and compression are timed by `rust/core/benches/floors.rs` (one thread,
  hot cache, no Python) on the documents the `get_id` and `batch1024_id` benchmarks look up: a
  floor timed from Python would carry a call's cost (~100 ns), as much as decoding a passage.
  It calls liblz4 itself (the copy docstore links, through `lz4-sys`), not docstore's codec, on
  the store's own stored bytes (the 4-byte check and the varint header skipped, docs/format.md)
  with the store's dictionary, decoding right behind a copy of the dictionary (liblz4's fastest
  mode) into a reused buffer.
- Creating a `str` is timed in CPython: slicing the same texts out of one joined string (an
  allocation and a copy, what is left for the thread holding the GIL once docstore has checked
  the UTF-8 in its decoding threads), less the same calls indexing one character, so that
  Python's call is not counted. A numpy array (token ids) is `ndarray.copy()`, call included. The
  batch's dict is `dict(zip(ids, values))`.
- The lookup floor leaves out what every `store[id]` from Python costs besides: the call, the
  `Doc` it returns, the attribute (a dict lookup, the cheapest Python lookup there is, is the
  `dict` column; the second row adds it), and the format 2 check (listed below).
- Each component is its fastest round (a floor is a best case; on a shared machine the fastest
  round is the one other work disturbed least), while docstore's and the peers' figures are
  their median rounds.
- The batch floors assume perfect parallelism over the cores this process may use; the machine's
  other load takes cores from docstore and not from the floor, which is timed on one thread.
- The build floor is liblz4 alone: docstore's own encoder may be faster than liblz4 on the same
  records (listed), so a build could pass this floor; what a build adds is taking the records
  from Python, training the dictionary, sorting the keys and writing the file.
"""


def integrity_table(res, corpus: str) -> str:
    rows = []
    for w in ("get", "get_many", "take", "miss"):
        g = res.get(f"integrity:{w}", {}).get(corpus, {})
        v = {n: thr(g.get(f"docstore:format{n}")) for n in (1, 2, 3)}
        if not any(v.values()):
            continue
        ratio = [f"{v[n] / v[1]:.3f}" if (v[n] and v[1]) else "-" for n in (2, 3)]
        rows.append([w, *(fmt_rate(v[n]) for n in (1, 2, 3)), *ratio])
    heads = [
        "lookups (docs/s)",
        "format 1 (no checks)",
        "format 2 (checked)",
        "format 3 (checked, located)",
        "format 2 / format 1",
        "format 3 / format 1",
    ]
    return table(heads, rows)


def collection_table(res, corpus: str, shards: int = 64) -> str:
    """One file against a collection of ``shards`` shards of the same documents."""
    one, many = "docstore:one file", f"docstore:{shards} shards"
    rows = []
    for w in ("get", "get_many", "take"):
        g = res.get(f"collection:{w}", {}).get(corpus, {})
        v1, vn = thr(g.get(one)), thr(g.get(many))
        if v1 or vn:
            rows.append(
                [f"{w} (docs/s)", fmt_rate(v1), fmt_rate(vn), fmt_ratio(vn / v1 if (v1 and vn) else None)]
            )
    g = res.get("collection:open", {}).get(corpus, {})
    big, small = g.get(many), g.get("docstore:small")
    if big:
        note = ""
        if small:
            note = f"; {fmt_s(small['stats']['median'])} with a tenth of the documents in as many shards"
        rows.append([f"open ({shards} shards){note}", "-", fmt_s(big["stats"]["median"]), "-"])
    g = res.get("collection:build", {}).get(corpus, {})
    b1, b8 = g.get("docstore build --shards 1"), g.get("docstore build --shards 8")
    if b1 and b8:
        w1, w8 = b1["stats"]["median"], b8["stats"]["median"]
        c1, c8 = b1["extra_info"].get("cpu_s"), b8["extra_info"].get("cpu_s")
        rows.append(
            [
                "`docstore build` wall time (`--shards 8` in the right column)",
                fmt_s(w1),
                fmt_s(w8),
                fmt_ratio(w8 / w1),
            ]
        )
        if c1 and c8:
            rows.append(
                ["`docstore build` CPU time, every process", fmt_s(c1), fmt_s(c8), fmt_ratio(c8 / c1)]
            )
    return table(["", "one file", f"{shards} shards", "shards / one file"], rows)


README_BEGIN = "<!-- benchmarks:begin -->"
README_END = "<!-- benchmarks:end -->"


#: the README's rows: (key of ``FLOOR_ROWS``, its short title)
README_ROWS = [
    ("get_id", "`store[id]`, one thread"),
    ("batch1024_id:objects", "`get_many(1024)`, objects built under the GIL"),
    ("threads", "2 threads of `get_many(1024)`"),
    ("threads:scaling", "2 threads / 1 thread (not a floor ratio: 2.00 is perfect)"),
    ("build", "build"),
]


def _scaling(res: dict, corpus: str) -> float | None:
    """Two threads' docs/s over one's, each thread decoding its own batches (`docstore:t1`): the
    rounds of both timed in pairs (`compare.paired_scaling`), else (an older run) the two
    benchmarks' figures."""
    g = res.get("threads", {}).get(corpus, {})
    two_b = g.get(("docstore:t1", 2))
    if two_b and (paired := two_b["extra_info"].get("paired_scaling")):
        return paired
    one, two = thr(g.get(("docstore:t1", 1))), thr(two_b)
    return two / one if one and two else None


def _readme_cell(runs: list[dict], res: dict, corpus: str, what: str) -> str:
    """docstore / floor, then docstore / ir_datasets and / the fastest other store on disk."""
    if what == "threads:scaling":
        x = _scaling(res, corpus)
        return f"{x:.2f}" if x else "-"
    ratios = of_floor(runs, corpus, what)
    if not ratios:
        return "-"
    fig = median_of(runs, lambda r: figure_and_floor(r, corpus, what)[0])
    peers = _peer_figures(res, corpus, what.split(":")[0])
    disk = {s: v for s, v in peers.items() if s not in IN_MEMORY and s != "ir_datasets"}
    text = f"**{statistics.median(ratios):.2f}**"
    if fig and peers.get("ir_datasets"):
        text += f"; {fmt_ratio(fig / peers['ir_datasets'])} ir_datasets"
    if fig and disk:
        best = max(disk, key=disk.get)
        text += f"; {fmt_ratio(fig / disk[best])} `{best}`"
    return text


def readme_block(runs: list[dict], res: dict, data: dict, cmd: str) -> str:
    """The README's part: one table of docstore's figures divided by their floors and by the
    peers', a column per corpus, and where it came from."""
    corpora = [c for c in corpora_in(res) if res.get("floors", {}).get(c)]
    meta = data.get("machine_info", {}).get("docstore_bench", {})
    ci = data.get("commit_info", {})
    n_docs = {c: b["extra_info"]["n_docs"] for c in corpora for b in res["floors"][c].values()}
    cores = {b["extra_info"]["cores"] for c in corpora for b in res["floors"][c].values()}
    heads = ["docstore / floor; docstore / a peer", *(f"{c} ({n_docs[c]:,} docs)" for c in corpora)]
    rows = [[title, *(_readme_cell(runs, res, c, what) for c in corpora)] for what, title in README_ROWS]
    out = [
        f"Measured by `{cmd}` at commit {str(ci.get('id', '?'))[:7]} on "
        f"{', '.join(map(str, sorted(cores)))} cores, load average {_load(meta.get('loadavg_at_start'))} "
        f"at the start and {_load(meta.get('loadavg_at_end'))} at the end. Each cell: docstore's "
        "figure divided by its floor (1.00 is the floor: the work no store can skip, timed alone in "
        "the same run; for lookups and batches, timed back to back with the figure in pairs, the "
        "median of the pairs), then by ir_datasets' and by the fastest other store on disk (above 1: "
        "docstore is faster). The figures, the floors and what they are made of: "
        "[benchmarks.md](benchmarks.md).",
        "",
        table(heads, rows),
    ]
    return "\n".join(out)


def update_readme(path: Path, block: str) -> None:
    text = path.read_text()
    pattern = re.compile(re.escape(README_BEGIN) + ".*?" + re.escape(README_END), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{path}: no {README_BEGIN} ... {README_END} block to replace")
    path.write_text(pattern.sub(lambda _: f"{README_BEGIN}\n{block}\n{README_END}", text, count=1))


# -- plots -----------------------------------------------------------------------------------------


def plots(res, corpora, img: Path) -> list[tuple[str, str]]:
    """-> [(title, relative path)] of the PNGs written."""
    fio = fio_results(res)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plots (pip install matplotlib)", file=sys.stderr)
        return []
    img.mkdir(parents=True, exist_ok=True)
    out = []
    for c in corpora:
        systems = ordered({s for w in HOT for s in res[w].get(c, {})})
        if not systems:
            continue
        fig, ax = plt.subplots(figsize=(12, 4.8))
        width = 0.8 / len(systems)
        for k, s in enumerate(systems):
            ys = [thr(res[w].get(c, {}).get(s)) or 0 for w in HOT]
            ax.bar(
                [x + k * width for x in range(len(HOT))],
                ys,
                width,
                label=s,
                color=_color(s),
                edgecolor="black" if s.startswith("docstore") else None,
            )
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(HOT))], [HOT_TITLES[w] for w in HOT])
        ax.set_yscale("log")
        ax.set_ylabel("documents / s (log)")
        ax.set_title(f"Hot-cache lookups, {c}")
        ax.legend(ncol=7, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.08))
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        p = img / f"hot_{c}.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        out.append((f"Hot lookups, {c}", p))

    g = res["cold"].get("msmarco_like", {})
    if g:
        systems = ordered({k[0] for k in g})
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
        for ax, (w, hot_w, title) in zip(
            axes, (("get_id", "get_id", "single by id"), ("batch1024_id", "batch1024_id", "batch 1024 ids"))
        ):
            names = [s for s in systems if (s, w) in g]
            cold = [cold_thr(g[(s, w)]) or 0 for s in names]
            hot = [thr(res[hot_w].get("msmarco_like", {}).get(s)) or 0 for s in names]
            xs = range(len(names))
            ax.bar([x - 0.2 for x in xs], hot, 0.4, label="hot cache", color="#4c72b0")
            ax.bar([x + 0.2 for x in xs], cold, 0.4, label="cold cache", color="#dd8452")
            ax.set_xticks(list(xs), names, rotation=40, ha="right", fontsize=8)
            qd = 1 if w == "get_id" else 32
            iops = fio.get(qd, {}).get("iops")
            if iops:
                ax.axhline(iops, color="black", ls="--", lw=1, label=f"fio 4 KiB random reads, QD{qd} (IOPS)")
            ax.set_yscale("log")
            ax.set_title(f"msmarco_like, {title}")
            ax.set_ylabel("documents / s (log)")
            ax.grid(axis="y", alpha=0.3)
            ax.legend(fontsize=8)
        fig.tight_layout()
        p = img / "cold_vs_hot.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        out.append(("Cold vs hot cache (msmarco_like)", p))

    g = res["loader"].get("msmarco_like", {})
    if g:
        systems = ordered({k[0] for k in g})
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
        for s in systems:
            ws = sorted(k[1] for k in g if k[0] == s)
            pss = [g[(s, w)]["extra_info"]["pss_total"] / 2**20 for w in ws]
            sps = [g[(s, w)]["extra_info"]["samples_per_s"] for w in ws]
            style = {"color": _color(s), "marker": "o", "lw": 2.5 if s.startswith("docstore") else 1.2}
            if len(ws) > 1:
                axes[0].plot(ws, pss, label=s, **style)
                axes[1].plot(ws, sps, label=s, **style)
            else:
                axes[0].bar(s, pss[0], color=_color(s))
                axes[1].bar(s, sps[0], color=_color(s))
        if any(len([k for k in g if k[0] == s]) > 1 for s in systems):
            counts = sorted({k[1] for k in g})
            for ax in axes:
                ax.set_xlabel("DataLoader workers")
                ax.set_xticks(counts)
            axes[0].legend(fontsize=7, ncol=2)
        else:
            for ax in axes:
                ax.tick_params(axis="x", rotation=40, labelsize=8)
        axes[0].set_ylabel("total PSS, main + workers (MiB)")
        axes[1].set_ylabel("samples / s")
        axes[1].set_yscale("log")
        axes[0].set_title("Memory per worker count (msmarco_like)")
        axes[1].set_title("DataLoader throughput")
        for ax in axes:
            ax.grid(alpha=0.3)
        fig.tight_layout()
        p = img / "loader_pss.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        out.append(("DataLoader: memory and throughput per worker count", p))

    g = res["build"]
    if g:
        fig, ax = plt.subplots(figsize=(12, 4))
        systems = ordered({s for c in corpora for s in g.get(c, {}) if s in RANDOM_ACCESS})
        width = 0.8 / max(1, len(corpora))
        for k, c in enumerate(corpora):
            ys = [
                (g.get(c, {}).get(s, {}).get("extra_info", {}).get("x_raw") or 0)
                if g.get(c, {}).get(s)
                else 0
                for s in systems
            ]
            ax.bar([x + k * width for x in range(len(systems))], ys, width, label=c)
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(systems))], systems, rotation=30, ha="right")
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_ylabel("size on disk / raw bytes")
        ax.set_title("Size on disk")
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        p = img / "size.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        out.append(("Size on disk relative to the raw values", p))
    return out


_PALETTE = [
    "#1f77b4",
    "#aec7e8",
    "#7f7f7f",
    "#bcbd22",
    "#ff7f0e",
    "#ffbb78",
    "#2ca02c",
    "#98df8a",
    "#d62728",
    "#ff9896",
    "#9467bd",
    "#c5b0d5",
    "#8c564b",
    "#e377c2",
]


def _color(s: str) -> str:
    if s == "baseline":
        return "#333333"
    return _PALETTE[(SYSTEMS.index(s) - 1) % len(_PALETTE)] if s in SYSTEMS else "#17becf"


# -- document --------------------------------------------------------------------------------------


FULL_SIZES = {"msmarco_like": 1_000_000, "english_news": None, "long_docs": 100_000, "token_arrays": 200_000}


def _mode(meta: dict) -> str:
    if meta.get("quick"):
        return "quick"
    sizes = meta.get("sizes") or {}
    if all(sizes.get(c) == n for c, n in FULL_SIZES.items()):
        return "full"
    return "custom sizes (full mode, smaller corpora)"


def _load(x) -> str:
    return f"{x[0]:.2f}" if x else "?"


def _n_docs(res) -> dict[str, int]:
    """Documents per corpus, as the benchmarks recorded them."""
    n_docs = {}
    for g in res.values():
        for c, d in g.items():
            for b in d.values():
                if "n_docs" in b["extra_info"]:
                    n_docs[c] = b["extra_info"]["n_docs"]
    return n_docs


def header_section(res, data: dict, meta: dict, corpora, n_docs: dict, cmd: str) -> list[str]:
    """The title, the command and commit that made the report, and how runs were merged."""
    ci = data.get("commit_info", {})
    L = ["# Benchmarks: docstore beside the stores a user would pick instead", ""]
    L.append(
        f"Generated by `{cmd}` on {data.get('datetime', '?')[:19]} (commit "
        f"{str(ci.get('id', '?'))[:10]}{', dirty tree' if ci.get('dirty') else ''}). "
        f"Mode: **{_mode(meta)}** "
        f"({', '.join(f'{c} {n_docs[c]:,} docs' for c in corpora if c in n_docs)}). "
        "Regenerate with `python -m benches.report` (full) or `--quick`; the suite alone is "
        "`pytest benches` (see `benches/README.md` for what each benchmark answers, and "
        "`benches/compare.py` for sizes and subsets)."
    )
    runs_per_group = {
        g: max((b.get("runs", 1) for d in res[g].values() for b in d.values()), default=1) for g in res
    }
    if any(n > 1 for n in runs_per_group.values()):
        merged = ", ".join(f"`{g}` {n}" for g, n in sorted(runs_per_group.items()) if n > 1)
        L += [
            "",
            f"Several runs merged (`--json`): each figure is the median of the runs that measured it "
            f"(runs per group: {merged}; every other group is from a single run). One run of this "
            "shared machine can move a system's figure up to 2x, so a row decided by one run is "
            "decided by chance.",
        ]
    return L


def machine_section(res, meta: dict) -> list[str]:
    machine = {}
    for c in res["fio"].values():
        for b in c.values():
            machine = b["extra_info"].get("machine", machine)
    machine = machine or meta.get("machine", {})
    L = ["", "## Machine", ""]
    if machine:
        L.append(
            table(
                ["", ""],
                [
                    ["CPU", f"{machine.get('cpu_model')}, {machine.get('cpus')} logical CPUs"],
                    ["RAM", fmt_mib(machine.get("ram_bytes"))],
                    ["kernel", f"{machine.get('kernel')} ({machine.get('os')})"],
                    ["file system of the stores", f"`{machine.get('filesystem')}`"],
                    ["Python", machine.get("python", "?")],
                    [
                        "load average during the run",
                        f"{_load(meta.get('loadavg_at_start'))} at start, "
                        f"{_load(meta.get('loadavg_at_end'))} at end (1-min)",
                    ],
                ],
            )
        )
        L.append(
            "\nThe machine is shared (2 cores, other jobs running): absolute figures move by ±20% "
            "between runs; ratios within one run are what the comparisons use."
        )
    return L


def systems_section(res, meta: dict) -> list[str]:
    L = []
    vers = meta.get("versions", {})
    if vers:
        L += ["", "## Systems and versions", ""]
        rows = []
        hows = {}
        for g in res.values():
            for d in g.values():
                for b in d.values():
                    i = b["extra_info"]
                    if i.get("system") and i.get("how"):
                        hows[i["system"]] = i["how"]
        for s in SYSTEMS:
            if s in vers or s in hows:
                rows.append([f"`{s}`", vers.get(s, "-"), hows.get(s, "")])
        L.append(table(["system", "version", "used as"], rows))
        extra = ", ".join(f"{k} {v}" for k, v in vers.items() if k not in SYSTEMS)
        L.append(f"\nAlso: {extra}.")
        skipped = meta.get("skipped", [])
        if skipped:
            L.append("\nSkipped in this run (reason): " + "; ".join(f"{s}" for s in skipped) + ".")
    L += [
        "",
        "Systems without lookup by id (Lance, HF datasets, Arrow IPC, litdata, numpy) use what their "
        "users build: a Python dict doc_id -> row, made from the id column on open (counted in open "
        "time, kept in memory for the cold-cache runs). LMDB and RocksDB are keyed by doc_id and "
        "keep the insertion-order id list for lookups by position. `docstore:t1` is docstore after "
        "`docstore.set_num_threads(1)`; `docstore:level-1` is docstore built with `level=-1` "
        "(documents stored uncompressed, no dictionary): not the default, it shows what decoding "
        "costs each row, and is kept out of *Where docstore stands*, which is about the default build.",
    ]
    return L


def floors_section(runs: list[dict], res, corpora, n_docs: dict) -> list[str]:
    L = []
    floor_corpora = [c for c in corpora if res.get("floors", {}).get(c)]
    if floor_corpora:
        L += ["", "## Each figure beside its peers and its floor", "", FLOORS_INTRO]
        for c in floor_corpora:
            L += ["", f"### {c} ({n_docs.get(c, 0):,} docs)", "", floors_table(runs, res, c)]
        L += [
            "",
            "### What the floors are made of",
            "",
            components_table(runs, res, floor_corpora),
            "",
            FLOORS_NOTES,
        ]
    return L


def integrity_section(res, corpora) -> list[str]:
    L = []
    integrity_corpora = [
        c for c in corpora if any(res.get(f"integrity:{w}", {}).get(c) for w in ("get", "miss"))
    ]
    if integrity_corpora:
        L += [
            "",
            "## What the checked reads cost",
            "",
            "The same corpus built as format 1 (no per-document checks), format 2 (every document a "
            "lookup returns is checked to be intact and the one asked for) and format 3 (the "
            "default: checked, and the key index entry that finds an id also locates its document), "
            "hot lookups side by side (`benches/test_integrity.py`); `miss` looks up absent ids, "
            "whose absence formats 2 and 3 confirm.",
        ]
        for c in integrity_corpora:
            L += ["", f"### {c}", "", integrity_table(res, c)]
    return L


def hot_section(res, corpora, n_docs: dict) -> tuple[list[str], list[tuple]]:
    """-> (lines, [(corpus, row, system, ratio)] of the hot rows a peer wins)."""
    all_lost = []
    L = ["", "## Hot cache: lookups", ""]
    L.append(
        "Random ids / positions (uniform), the store opened and warmed; single lookups are 256 calls per "
        "round, batches are 1024 documents per round (16 x 64 or 1 x 1024 distinct keys). Results were "
        "compared with the corpus before timing. Median round."
    )
    for c in corpora:
        if not any(res[w].get(c) for w in HOT):
            continue
        md, lost = hot_tables(res, c)
        all_lost += [(c, *x) for x in lost]
        L += ["", f"### {c} ({n_docs.get(c, 0):,} docs)", "", md]
    return L, all_lost


def threads_section(res, corpora) -> list[str]:
    if not res.get("threads"):
        return []
    return [
        "",
        "## Threads: batches of 1024 ids on 1 and 2 threads",
        "",
        "Same total work (8-16 batches) on one pool thread or split over two; systems that are not "
        "thread-safe get one handle per thread. docstore's default decodes each batch on its own "
        "2-thread pool; `docstore:t1` decodes in the calling thread with the GIL released. "
        "Scaling needs two idle cores: with other jobs on the machine (see the load average) "
        "no system can reach 2x, and the column mostly shows which ones lose throughput when a "
        "second thread competes (GIL-bound Python paths). `2t/1t` is the median over pairs of "
        "rounds, one thread then two, timed back to back (`compare.paired_scaling`): a shared "
        "host gives its cores unevenly for seconds at a time, which the two columns, timed "
        "apart, each catch differently.",
        "",
        threads_table(res, corpora),
    ]


def build_section(res, corpora) -> list[str]:
    if not res.get("build"):
        return []
    L = [
        "",
        "## Build",
        "",
        "Each build runs in a fresh subprocess from the same in-memory list of records (loaded "
        "before the clock starts). Peak RSS is the process's `VmHWM`, reset once the records are "
        'loaded (`/proc/self/clear_refs`), so it is the build\'s own peak; "added" subtracts the '
        "RSS with the records loaded. litdata's `optimize` writes in worker processes, whose "
        "memory is not in its row. Size on disk counts every file the system wrote.",
    ]
    for c in corpora:
        if res["build"].get(c):
            L += ["", f"### {c}", "", build_table(res, c)]
    return L


def open_section(res) -> list[str]:
    if not res.get("open"):
        return []
    return [
        "",
        "## Open time as the corpus grows 10x (msmarco_like)",
        "",
        "A fresh process imports the library, then opens the store and looks up one id (best of "
        "two). Systems with a doc_id -> row dict build it here.",
        "",
        open_table(res),
    ]


def cold_section(res) -> list[str]:
    fio = fio_results(res)
    if not (fio or res.get("cold")):
        return []
    L = ["", "## Cold cache and the device", ""]
    if fio:
        L.append(
            table(
                ["fio random 4 KiB reads (O_DIRECT, libaio)", "IOPS", "mean latency"],
                [
                    [f"queue depth {qd}", fmt_rate(v["iops"]), f"{v['lat_us']:.0f} µs"]
                    for qd, v in sorted(fio.items())
                ],
            )
        )
    if res.get("cold"):
        L += [
            "",
            "Before each round the store is closed, every file of it dropped from the page cache "
            "(`posix_fadvise(DONTNEED)`, checked with `fincore`: last column) and reopened; "
            "then random lookups by id (100-200 single, or one batch of 1024). In-memory maps "
            "(id -> row dicts, the TSV offsets) are kept, as a long-running user process would. "
            "A fraction of 1.0 means one device read per document at that queue depth.",
            "",
            cold_table(res, fio),
        ]
    return L


def decode_section(res, corpora) -> list[str]:
    if not res.get("decode"):
        return []
    return [
        "",
        "## In-memory limits: copy and decompression",
        "",
        "Single-threaded, the whole corpus in memory: memcpy (`numpy.copyto` into a touched "
        "buffer), python-lz4 block "
        "decompression of each document (compressed by liblz4 at the store's level against the "
        "store's dictionary, as docstore stores them; one Python call per document), docstore's `take` "
        "over every position, and docstore's hot batch of 1024 positions as a fraction of the "
        "lz4 rate.",
        "",
        decode_table(res, corpora),
    ]


def loader_section(res) -> list[str]:
    if not res.get("loader"):
        return []
    return [
        "",
        "## DataLoader: samples/s and total PSS (msmarco_like)",
        "",
        "`torch.utils.data.DataLoader(batch_size=64, shuffle=True, num_workers=N)`, fork start "
        "method, a map-style Dataset per system that opens lazily in each worker (docstore: "
        "`docstore.torch.DocDataset`, which reads documents with `pread` and maps only the "
        "index; the dict: built in the main process before the workers fork). PSS = sum of "
        "`Pss` in `/proc/<pid>/smaps_rollup` over the main process and the workers, the peak "
        "over the run. Page cache that is read through `read()`/`pread()` rather than mapped "
        "(TSV, ir_datasets FILE, RocksDB, docstore's documents; LMDB is mapped) is not in "
        "anyone's PSS: it is shared system memory, reclaimable.",
        "",
        loader_table(res),
    ]


def plots_section(res, corpora, img_dir: Path, md_path: Path) -> list[str]:
    """Writes the PNGs into ``img_dir`` and links them relative to ``md_path``."""
    L = []
    pics = plots(res, corpora, img_dir)
    if pics:
        L += ["", "## Plots", ""]
        for title, p in pics:
            rel = os.path.relpath(p, md_path.parent)
            L += [f"![{title}]({rel})", ""]
    return L


def collections_section(res, corpora) -> list[str]:
    L = []
    collection_corpora = [c for c in corpora if res.get("collection:get", {}).get(c)]
    if collection_corpora:
        L += [
            "",
            "## Collections: one file against 64 shards",
            "",
            "The same documents as one store file and as a collection of 64 shards sealed into one "
            "directory (`benches/test_collections.py`): lookups, open, and `docstore build` with and "
            "without `--shards 8` (CPU time summed over every process).",
        ]
        for c in collection_corpora:
            L += ["", f"### {c}", "", collection_table(res, c)]
    return L


def standings_section(res, corpora, all_lost: list[tuple]) -> list[str]:
    """Where docstore stands, and why a peer wins where one does (``all_lost``: from
    :func:`hot_section`)."""
    st = standings(res, corpora)
    L = [
        "",
        "## Where docstore stands",
        "",
        "Facts, not targets: which stores beat docstore on each hot row (docstore's figure as a fraction "
        "of theirs), on size and on DataLoader memory, or, where none does, the runner-up. How far each "
        "of docstore's own figures is from its physical floor (key search, lz4 decoding, building the "
        "Python objects, measured in the same run) is in *Each figure beside its peers and its floor*.",
        "",
        table(["question", "corpus", "answer"], [list(t[:3]) for t in st]),
        "",
    ]
    size_lost = [t for t in st if t[0].startswith("smaller on disk") and not t[3]]
    pss_lost = [t for t in st if t[0].startswith("lower total PSS") and not t[3]]
    if size_lost or pss_lost:
        L += ["### Where docstore is not smallest, and why", ""]
        winners = sorted(
            {w for t in size_lost for w in WHY_NOT_SMALLEST if w.startswith("size:") and f"`{w[5:]}`" in t[2]}
        )
        for w in winners:
            L.append(f"- **size, `{w[5:]}`**: {WHY_NOT_SMALLEST[w]}")
        if pss_lost:
            L.append(f"- **DataLoader PSS**: {WHY_NOT_SMALLEST['pss']}")
        L.append("")
    losers = sorted({s for _, _, s, _ in all_lost})
    if losers:
        L += ["### Where a peer wins, and why", ""]
        for s in losers:
            rows = [f"{c} {HOT_TITLES[w]} ({r:.2f}x)" for c, w, s2, r in all_lost if s2 == s]
            L.append(f"- **`{s}`** beats docstore on: {', '.join(rows)}. {WHY.get(s, '')}")
        L.append("")
    return L


def render(runs: list[dict], res: dict, data: dict, img_dir: Path, md_path: Path, cmd: str) -> str:
    """The report, one section after another; ``runs``: each run's results, ``res``: them merged."""
    corpora = corpora_in(res)
    meta = data.get("machine_info", {}).get("docstore_bench", {})
    n_docs = _n_docs(res)
    L = header_section(res, data, meta, corpora, n_docs, cmd)
    L += machine_section(res, meta)
    L += systems_section(res, meta)
    L += ["", "## Summary", "", summary(res, corpora)]
    L += floors_section(runs, res, corpora, n_docs)
    L += integrity_section(res, corpora)
    hot, all_lost = hot_section(res, corpora, n_docs)
    L += hot
    L += threads_section(res, corpora)
    L += build_section(res, corpora)
    L += open_section(res)
    L += cold_section(res)
    L += decode_section(res, corpora)
    L += loader_section(res)
    L += plots_section(res, corpora, img_dir, md_path)
    L += collections_section(res, corpora)
    L += standings_section(res, corpora, all_lost)
    L.append(WHERE_TIME_GOES)
    L.append(NOTES)
    return "\n".join(L)


def run_suite(json_path: Path, quick: bool, pytest_args: list[str]) -> int:
    env = dict(os.environ)
    # OpenBLAS threads spin on the cores after numpy work: measured at 5-20% of a lookup profile
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(var, "1")
    if quick:
        env["DOCSTORE_BENCH_QUICK"] = "1"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(HERE),
        "-p",
        "no:cacheprovider",
        f"--benchmark-json={json_path}",
        "--benchmark-sort=name",
        "-rs",
        *pytest_args,
    ]
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    return subprocess.call(cmd, env=env, stdout=sys.stderr, cwd=ROOT)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1 :]
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--json",
        type=Path,
        nargs="+",
        help="render these pytest-benchmark JSONs instead of running (the first names the run; each "
        "figure is the median of the runs that measured it)",
    )
    ap.add_argument("--quick", action="store_true", help="DOCSTORE_BENCH_QUICK=1")
    ap.add_argument("--runs", type=int, default=1, help="runs of the suite (default 1); medians are reported")
    ap.add_argument("--save-json", type=Path, help="keep the benchmark JSON here (run i > 1: NAME.i.json)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    ap.add_argument("--img", type=Path, default=ROOT / "docs" / "img")
    ap.add_argument(
        "--readme", type=Path, help="also replace the benchmarks block of this page (docs/performance.md)"
    )
    ap.add_argument("--cmd", help="the command line to name in the report (default: this one)")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    env = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("DOCSTORE_BENCH_"))
    shown = args.cmd or (
        (env + " " if env else "")
        + "python -m benches.report"
        + (" --quick" if args.quick else "")
        + (f" --runs {args.runs}" if args.runs > 1 else "")
    )
    if args.json:
        json_paths = args.json
    else:
        json_paths = []
        for run in range(1, args.runs + 1):
            if args.save_json:
                p = args.save_json
                json_path = p if run == 1 else p.with_name(f"{p.stem}.{run}{p.suffix}")
            else:
                json_path = Path(tempfile.mkstemp(prefix="docstore-bench-", suffix=".json")[1])
            rc = run_suite(json_path, args.quick, extra)
            if not json_path.exists() or json_path.stat().st_size == 0:
                print(f"pytest failed (exit {rc}) and wrote no results", file=sys.stderr)
                return rc or 1
            if rc != 0:
                print(f"warning: pytest exited {rc}; reporting what was measured", file=sys.stderr)
            json_paths.append(json_path)
    loaded = [load(p) for p in json_paths]
    runs = [r for r, _ in loaded]
    data = loaded[0][1]
    res = runs[0] if len(runs) == 1 else merge(runs, extra=MERGED_EXTRA)
    md = render(runs, res, data, args.img, args.out, shown)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(md)
    if args.readme:
        update_readme(args.readme, readme_block(runs, res, data, shown))
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
