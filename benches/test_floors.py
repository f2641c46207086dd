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


@pytest.mark.benchmark(group="cmp:floors")
def test_floors(benchmark, stores, corpus, tmp_path):
    pytest.importorskip("docstore", reason="docstore is not installed")
    if "docstore" not in C.SYSTEMS:
        pytest.skip("docstore not selected (DOCSTORE_BENCH_PEERS)")
    import docstore

    try:
        path, _ = stores.build("docstore", corpus.name)
    except RuntimeError as e:
        pytest.fail(f"docstore: build failed: {e}")
    # the documents test_compare.py's get_id and batch1024_id look up
    single = corpus.sample_ids(C.SINGLE_LOOKUPS, 11)
    batch = corpus.distinct_ids(C.BATCH_DOCS, 20)
    (tmp_path / "single").write_text("\n".join(single))
    (tmp_path / "batch").write_text("\n".join(batch))
    build_docs = max(1, min(corpus.n, BUILD_BYTES * corpus.n // max(1, corpus.raw_bytes)))
    exe = floors_program()
    cmd = [exe, str(path / "store.docstore"), str(tmp_path / "single"), str(tmp_path / "batch")]
    out = subprocess.run([*cmd, str(build_docs)], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    floors = json.loads(out.stdout)
    batch_values = [corpus.by_id[i] for i in batch]
    copies = [v if isinstance(v, str) else v.copy() for v in batch_values]
    dict_s = best_s(lambda: dict(zip(batch, copies)))
    benchmark.extra_info.update(
        system="docstore",
        corpus=corpus.name,
        n_docs=corpus.n,
        cores=C.cores(),
        docstore_num_threads=docstore.get_num_threads(),
        object="str" if corpus.kind == "text" else "numpy array",
        object_ns=objects_s([corpus.by_id[i] for i in single]) / len(single) * 1e9,
        batch_object_ns=objects_s(batch_values) / len(batch) * 1e9,
        batch_dict_ns=dict_s / len(batch) * 1e9,
        **floors,
    )
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
