"""``docstore demo``: builds a sample corpus and compares docstore with the usual alternatives.

Nothing is downloaded: the corpus is generated (MS MARCO passage-like: numeric ids, 30-120 words
drawn from a Zipfian vocabulary). Compared: docstore at its default level and uncompressed
(``level=-1``), a Python dict (the usual in-memory loader) and, when it is installed, ir_datasets'
lz4 docstore (``PickleLz4FullStore``) built from the same records.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import Any, Callable

import numpy as np

import docstore


def sample_corpus(n: int, seed: int = 0) -> Iterator[tuple[str, str]]:
    """``n`` (doc_id, text) pairs shaped like MS MARCO passages, deterministic in ``seed``."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("etaoinshrdlcumwfgypbvkjxqz"))
    freq = np.array([12.7, 9.1, 8.2, 7.5, 7.0, 6.7, 6.3, 6.1, 6.0, 4.3, 4.0, 2.8, 2.8, 2.4, 2.4,
                     2.2, 2.0, 2.0, 1.9, 1.5, 1.0, 0.8, 0.2, 0.2, 0.1, 0.1])  # fmt: skip
    vocab_size = 40_000
    lengths = np.clip(rng.poisson(5, vocab_size) + 1, 1, 14)
    chars = rng.choice(letters, size=int(lengths.sum()), p=freq / freq.sum())
    ends = np.cumsum(lengths)
    vocab = np.array(["".join(chars[e - k : e]) for e, k in zip(ends, lengths)], dtype=object)
    weights = 1.0 / np.arange(1, vocab_size + 1) ** 1.1
    ids = rng.choice(9 * n, size=n, replace=False)
    for start in range(0, n, 10_000):
        count = min(10_000, n - start)
        doc_lengths = rng.integers(30, 121, size=count)
        words = vocab[rng.choice(vocab_size, size=int(doc_lengths.sum()), p=weights / weights.sum())]
        offset = 0
        for i, length in enumerate(doc_lengths):
            text = " ".join(words[offset : offset + length]).capitalize() + "."
            offset += length
            yield str(ids[start + i]), text


def _rate(fn: Callable[[], Any], items: int, seconds: float = 1.0) -> float:
    """Items per second of ``fn`` (which handles ``items`` items), repeated for ``seconds``."""
    fn()
    rounds, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        fn()
        rounds += 1
    return rounds * items / elapsed


def _dir_size(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def run(docs: int = 200_000, directory: str | None = None) -> dict[str, dict[str, float]]:
    workdir = directory or tempfile.mkdtemp(prefix="docstore-demo-")
    os.makedirs(workdir, exist_ok=True)
    print(f"docstore demo: {docs:,} MS MARCO-like passages in {workdir}")
    start = time.perf_counter()
    corpus = list(sample_corpus(docs))
    raw = sum(len(text.encode()) for _, text in corpus)
    print(f"  generated the corpus in {time.perf_counter() - start:.1f}s: {raw / 1e6:.1f} MB of text")

    results: dict[str, dict[str, float]] = {}
    rng = random.Random(0)
    queries = [rng.choice(corpus)[0] for _ in range(20_000)]
    batches = [queries[i : i + 1000] for i in range(0, 10_000, 1000)]

    # docstore at its default level, and uncompressed (faster, larger)
    results["docstore"] = _docstore_row(workdir, corpus, queries, batches, level=None)
    results["docstore level=-1"] = _docstore_row(workdir, corpus, queries, batches, level=-1)

    # dict
    start = time.perf_counter()
    table = dict(corpus)
    build = time.perf_counter() - start
    results["dict"] = {
        "build docs/s": docs / build,
        "size MB": float("nan"),
        "lookups/s": _rate(lambda: [table[q] for q in queries], len(queries)),
        "get_many(1000)/s": _rate(lambda: [{q: table[q] for q in b} for b in batches], 10),
    }

    try:
        from ir_datasets.formats import GenericDoc
        from ir_datasets.indices import PickleLz4FullStore
    except ImportError:
        print("  (ir_datasets is not installed: pip install ir_datasets to compare with it)")
    else:
        logging.disable(logging.INFO)  # ir_datasets' INFO lines
        ird_path = os.path.join(workdir, "corpus.ir_datasets")
        shutil.rmtree(ird_path, ignore_errors=True)
        ird = PickleLz4FullStore(
            ird_path, lambda: (GenericDoc(i, t) for i, t in corpus), GenericDoc, "doc_id", ["doc_id"]
        )
        start = time.perf_counter()
        with open(os.devnull, "w") as quiet, contextlib.redirect_stderr(quiet):  # its progress bar
            ird.build()
        build = time.perf_counter() - start
        few = queries[:2000]
        results["ir_datasets"] = {
            "build docs/s": docs / build,
            "size MB": _dir_size(ird_path) / 1e6,
            "lookups/s": _rate(lambda: [ird.get(q) for q in few], len(few)),
            "get_many(1000)/s": _rate(lambda: [ird.get_many(b) for b in batches[:2]], 2),
        }

    logging.disable(logging.NOTSET)
    _print_table(results, raw)
    if directory is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return results


def _docstore_row(
    workdir: str,
    corpus: list[tuple[str, str]],
    queries: list[str],
    batches: list[list[str]],
    level: int | None,
) -> dict[str, float]:
    """Builds the corpus at ``level`` (None: the default) and measures it."""
    path = os.path.join(workdir, f"corpus-level{level}.docstore")
    start = time.perf_counter()
    with docstore.Writer(path, fields={"text": "str"}, overwrite=True, level=level) as writer:
        for doc_id, text in corpus:
            writer.add(doc_id, text=text)
    build = time.perf_counter() - start
    store = docstore.open(path)
    assert store[queries[0]].text == dict(corpus)[queries[0]]
    return {
        "build docs/s": len(corpus) / build,
        "size MB": _dir_size(path) / 1e6,
        "lookups/s": _rate(lambda: [store[q] for q in queries], len(queries)),
        "get_many(1000)/s": _rate(lambda: [store.get_many(b) for b in batches], 10),
    }


def _print_table(results: dict[str, dict[str, float]], raw: int) -> None:
    columns = ["build docs/s", "size MB", "lookups/s", "get_many(1000)/s"]
    print()
    print(f"  {'':18}" + "".join(f"{c:>18}" for c in columns))
    for name, row in results.items():
        cells = []
        for c in columns:
            value = row[c]
            cells.append(f"{'in RAM':>18}" if value != value else f"{value:>18,.1f}")
        print(f"  {name:18}" + "".join(cells))
    ds = results["docstore"]
    print(f"\n  raw text {raw / 1e6:.1f} MB; docstore stores it in {ds['size MB']:.1f} MB "
          f"({ds['size MB'] * 1e6 / raw:.2f}x raw) and reads it from one shared page cache.")  # fmt: skip
    if "ir_datasets" in results:
        ird = results["ir_datasets"]
        print(f"  docstore vs ir_datasets: {ds['lookups/s'] / ird['lookups/s']:.0f}x single lookups, "
              f"{ds['get_many(1000)/s'] / ird['get_many(1000)/s']:.0f}x get_many(1000), "
              f"{ds['build docs/s'] / ird['build docs/s']:.1f}x build, "
              f"{ds['size MB'] / ird['size MB']:.2f}x size")  # fmt: skip
