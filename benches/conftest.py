"""Fixtures of the benchmark suite (pytest-benchmark): the corpora, the stores built from them and
the run's description in the JSON. Settings (sizes, systems, round times) are environment
variables read by ``compare.py``; see ``benches/README.md``.

``pytest benches`` (or ``python -m benches.report``) runs the suite; ``benches`` is a package, so
pytest imports these modules as ``benches.NAME`` and they import each other relatively. The
README's test command does not collect this directory (``testpaths = ["tests"]``).
"""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from . import compare as C

_LOAD_AT_START: tuple[float, float, float] | None = None
#: skip reasons worth naming in the report (a package or corpus missing, a system not selected)
_SKIPS: list[str] = []


def _loadavg() -> tuple[float, float, float] | None:
    return os.getloadavg() if hasattr(os, "getloadavg") else None


def pytest_configure(config: pytest.Config) -> None:
    global _LOAD_AT_START
    _LOAD_AT_START = _loadavg()


def pytest_benchmark_update_machine_info(config, machine_info):
    # other load on the machine skews timings (the threads group most): keep a record
    machine_info["docstore_bench"] = {
        "quick": C.QUICK,
        "sizes": C.SIZES,
        "corpora": C.CORPORA,
        "systems": C.SYSTEMS,
        "loadavg_at_start": _LOAD_AT_START,
        "loadavg_at_end": _loadavg(),
        "cpu_count": os.cpu_count(),
        "cores": C.cores(),
        "versions": C.versions(),
        "machine": C.machine_info(),
        "skipped": sorted(set(_SKIPS)),
    }


def pytest_runtest_logreport(report) -> None:
    if report.skipped and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2]).removeprefix("Skipped: ")
        if "not installed" in reason or "unavailable" in reason or "not selected" in reason:
            _SKIPS.append(reason)


def pytest_report_header(config: pytest.Config) -> list[str]:
    sizes = ", ".join(f"{c} {C.SIZES[c] or 'all'}" for c in C.CORPORA)
    return [f"docstore benches: {sizes}; {len(C.SYSTEMS)} systems; quick={C.QUICK}"]


# -- corpora and stores --------------------------------------------------------------------------

_CORPORA: dict[str, C.Corpus] = {}


@pytest.fixture(scope="session", params=C.CORPORA)
def corpus(request, stores) -> C.Corpus:
    """One corpus in memory and on disk at a time: pytest orders the tests by it."""
    name = request.param
    if name not in C.CORPORA:  # a test that names its corpus (indirect) outside the selection
        pytest.skip(f"corpus {name} not selected (DOCSTORE_BENCH_CORPORA)")
    if name not in _CORPORA:
        for old in list(_CORPORA):
            stores.drop_corpus(old)
            del _CORPORA[old]
        gc.collect()
        try:
            _CORPORA[name] = C.load_corpus(name)
        except ImportError as e:
            pytest.skip(f"corpus {name} unavailable: {e}")
    return _CORPORA[name]


@pytest.fixture(scope="session")
def stores(tmp_path_factory):
    """Stores built once per session (each in a subprocess: timed, peak RSS) and opened here;
    under ``DOCSTORE_BENCH_STORES`` if set (fio's test file goes there too)."""
    root = os.environ.get("DOCSTORE_BENCH_STORES")
    if root:
        Path(root).mkdir(parents=True, exist_ok=True)
        root_path = Path(tempfile.mkdtemp(prefix="bench-", dir=root))
    else:
        root_path = tmp_path_factory.mktemp("bench")
    s = C.Stores(root_path)
    yield s
    s.close_all()
    shutil.rmtree(root_path, ignore_errors=True)


@pytest.fixture(scope="session")
def pool():
    """Two pool threads for the ``threads`` group (the caller only waits)."""
    with ThreadPoolExecutor(max_workers=2) as ex:
        yield ex
