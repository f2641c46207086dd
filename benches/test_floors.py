"""The physical floors of docstore's figures, measured in the same run, on the same store file and the
same documents as the figures they judge (``report.py`` sets each figure beside its floor):

* a lookup by id (``cmp:get_id``): the key search alone + liblz4 decoding the same document's
  stored bytes + CPython creating its object (the ``str``; for ``int32[]`` fields, the array);
* a batch of 1024 ids (``cmp:batch1024_id``): cores x liblz4's single-thread decode speed on the
  batch's documents; and, with the Python objects (each value and the result dict's entry, built
  by the one thread that holds the GIL), max((search + decode + objects) / cores, objects);
* two threads of batches (``cmp:threads``, ``docstore:t1``): the same, on min(2, cores) cores, so
  at most what the GIL-held part, the objects, lets through;
* a build (``cmp:build``): cores x liblz4 compressing the store's records at its level with its
  dictionary.

Key search, decoding and compression are timed by ``rust/core/benches/floors.rs`` (one thread, hot
cache, no Python: a floor timed from Python would carry a call's cost, ~100 ns, which is as much as
decoding a passage); it is built here with ``cargo bench --no-run`` (skipped without cargo). The
objects are timed in CPython. Group ``cmp:floors``, one benchmark per corpus, all figures in
``extra_info`` (nanoseconds per document); the timing pytest-benchmark records is meaningless.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from . import compare as C
from .peers import COMPARE_PEERS

ROOT = Path(__file__).resolve().parent.parent
#: raw bytes of records the build floor compresses per round (enough for a stable figure)
BUILD_BYTES = 4 << 20
_EXE: list[str] = []


def floors_program() -> str:
    """``rust/core/benches/floors.rs``, built once per session (release, ``CARGO_TARGET_DIR``
    respected)."""
    if not _EXE:
        cargo = shutil.which("cargo")
        if cargo is None:
            pytest.skip("cargo is not installed: the floors are timed by rust/core/benches/floors.rs")
        cmd = [cargo, "bench", "-p", "docstore-core", "--bench", "floors", "--no-run"]
        out = subprocess.run(
            [*cmd, "--message-format=json"], cwd=ROOT, capture_output=True, text=True, check=False
        )
        exes = [
            m["executable"]
            for line in out.stdout.splitlines()
            if line.startswith("{")
            and (m := json.loads(line)).get("reason") == "compiler-artifact"
            and m.get("target", {}).get("name") == "floors"
            and m.get("executable")
        ]
        if out.returncode != 0 or not exes:
            pytest.fail(f"`{' '.join(cmd)}` failed: {out.stderr.strip()[-2000:]}")
        _EXE.append(exes[-1])
    return _EXE[0]


def best_s(fn, repeat: int = 31) -> float:
    """Seconds of ``fn()`` in the fastest of ``repeat`` calls (after one untimed call): a floor is a
    best case, and on a shared machine the fastest call is the one other work disturbed least."""
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def str_creation_s(texts: list[str]) -> float:
    """Seconds CPython takes to create these ``str`` objects from their code units: an allocation
    and a copy each (docstore checks the UTF-8 while the GIL is released, so this is what is left
    for the thread that holds it). Timed as slices of the texts joined together
    (``PyUnicode_Substring``: allocate, copy), less the same calls indexing one character (no
    allocation), so that Python's call is not counted; texts are joined with others of the same
    width (ASCII, Latin-1, UCS-2, UCS-4) so that no slice changes width."""
    groups: dict[int, list[str]] = {}
    for t in texts:
        top = 0 if t.isascii() else ord(max(t))
        width = 0 if top == 0 else 1 if top <= 0xFF else 2 if top <= 0xFFFF else 4
        groups.setdefault(width, []).append(t)
    total = 0.0
    for group in groups.values():
        joined = "".join(group)
        starts = list(itertools.accumulate((len(t) for t in group), initial=0))
        slices = [slice(a, b) for a, b in zip(starts, starts[1:])]
        get = joined.__getitem__
        assert list(map(get, slices)) == group
        sliced = best_s(lambda get=get, slices=slices: list(map(get, slices)))
        indexed = best_s(lambda get=get, at=starts[:-1]: list(map(get, at)))
        total += max(0.0, sliced - indexed)
    return total


def array_creation_s(arrays: list) -> float:
    """Seconds numpy takes to create these arrays as copies (``ndarray.copy``: the array object, an
    allocation and a copy; Python's call to it is counted, ~30 ns)."""
    return best_s(lambda: list(map(type(arrays[0]).copy, arrays)))


def objects_s(values: list) -> float:
    return str_creation_s(values) if isinstance(values[0], str) else array_creation_s(values)


#: pairs of (the floors, docstore's figures), timed back to back
PAIRS = 3 if C.QUICK else 5
#: the figures timed in each pair, as ``test_compare.py`` times them (``cmp:<workload>``)
PAIRED = ("get_id", "batch1024_id")


def object_floors(single: list, batch: list, corpus) -> dict:
    """The floors' Python part, ns per document: the objects of the single lookups and of the
    batch, and the batch's result dict."""
    batch_values = [corpus.by_id[i] for i in batch]
    copies = [v if isinstance(v, str) else v.copy() for v in batch_values]
    return {
        "object_ns": objects_s([corpus.by_id[i] for i in single]) / len(single) * 1e9,
        "batch_object_ns": objects_s(batch_values) / len(batch) * 1e9,
        "batch_dict_ns": best_s(lambda: dict(zip(batch, copies))) / len(batch) * 1e9,
    }


@pytest.mark.benchmark(group="cmp:floors")
def test_floors(benchmark, stores, corpus, pool, tmp_path):
    """The floors, then ``PAIRS`` pairs of the floors and docstore's figures (single lookups,
    batches, two threads of batches; and the dict's single lookups) timed back to back, the best
    round of each: this host gives its cores unevenly for minutes at a time, and a figure timed
    minutes from its floor caught another share (the same build measured 0.17 and 0.56 of its
    floor in two runs that way). The report takes each row's ratio from the pairs."""
    pytest.importorskip("docstore", reason="docstore is not installed")
    if "docstore" not in C.SYSTEMS:
        pytest.skip("docstore not selected (DOCSTORE_BENCH_PEERS)")
    import docstore

    try:
        path, _ = stores.build("docstore", corpus.name)
    except RuntimeError as e:
        pytest.fail(f"docstore: build failed: {e}")
    # the documents test_compare.py's get_id and batch1024_id look up
    draws = {w: C.lookup_draws(corpus, w) for w in PAIRED}
    single, batch = draws["get_id"][0], draws["batch1024_id"][0]
    assert len(draws["batch1024_id"]) == 1, "the batch floor is timed over one batch"
    (tmp_path / "single").write_text("\n".join(single))
    (tmp_path / "batch").write_text("\n".join(batch))
    build_docs = max(1, min(corpus.n, BUILD_BYTES * corpus.n // max(1, corpus.raw_bytes)))
    cmd = [floors_program(), str(path / "store.docstore"), str(tmp_path / "single"), str(tmp_path / "batch")]

    def floors(build: int) -> dict:
        out = subprocess.run([*cmd, str(build)], capture_output=True, text=True, check=False)
        assert out.returncode == 0, out.stderr
        return {**json.loads(out.stdout), **object_floors(single, batch, corpus), "cores": C.cores()}

    first = floors(build_docs)
    ops = {
        system: COMPARE_PEERS[system].ops(stores.open(system, corpus), corpus.field)
        for system in ("docstore", "dict")
    }
    rounds = {w: C.lookup_round(ops["docstore"], w, draws[w]) for w in PAIRED}
    dict_round = C.lookup_round(ops["dict"], "get_id", draws["get_id"])
    # cmp:threads' docstore:t1: two threads, each decoding its own batches
    threads_round = C.threads_round(pool, [ops["docstore"].get_many] * 2, C.thread_batches(corpus))
    pairs = []
    for i in range(PAIRS):
        parts = first if i == 0 else floors(1)  # the build floor is timed once
        pair = {
            "floors": {k: parts[k] for k in PAIR_FLOORS},
            **{w: C.best_rate(rounds[w], sum(map(len, draws[w]))) for w in PAIRED},
            "dict:get_id": C.best_rate(dict_round, len(single)),
        }
        with COMPARE_PEERS["docstore:t1"].lookup_threads():
            pair["threads"] = C.best_rate(threads_round, C.BATCH_DOCS * C.THREAD_BATCHES)
        pairs.append(pair)
    benchmark.extra_info.update(
        system="docstore",
        corpus=corpus.name,
        n_docs=corpus.n,
        docstore_num_threads=docstore.get_num_threads(),
        object="str" if corpus.kind == "text" else "numpy array",
        pairs=pairs,
        **first,
    )
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)


#: what a pair keeps of its floors (the report's floor of each paired row is made of these)
PAIR_FLOORS = (
    "cores",
    "search_ns",
    "decode_ns",
    "object_ns",
    "batch_search_ns",
    "batch_decode_ns",
    "batch_object_ns",
    "batch_dict_ns",
)
