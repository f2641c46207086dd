"""Shared fixtures: small stores built from an in-memory oracle."""

from __future__ import annotations

import fnmatch
import multiprocessing
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import docstore

# The repository root: this file stays at tests/conftest.py, whatever folder a test moves to.
ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"

# The slow rooms, by path under tests/ (a folder, or files): marked here so that a new test in one
# of them is marked too.
AREAS = {
    "engines": ("engines/*",),
    "training": (
        "loaders/test_torch_ddp.py",
        "loaders/test_torch_sentence_transformers.py",
        "loaders/test_torch_memory.py",
    ),
    "network": ("remote/*",),
}


def pytest_sessionstart(session: pytest.Session) -> None:
    # A moved file or folder must not drop its marker silently, and a folder without __init__.py
    # would make pytest put tests/ on sys.path, where a folder could shadow a module of that name
    # (a folder left with only __pycache__ after a move holds no tests: not a concern).
    stale = [pattern for patterns in AREAS.values() for pattern in patterns if not any(TESTS.glob(pattern))]
    loose = [d.name for d in TESTS.iterdir() if any(d.glob("*.py")) and not (d / "__init__.py").exists()]
    if stale or loose:
        raise pytest.UsageError(
            f"tests/conftest.py: AREAS patterns that match nothing under tests/: {stale}; "
            f"folders of tests/ without an __init__.py: {loose}"
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.path)).resolve()
        if not path.is_relative_to(TESTS):
            continue
        name = path.relative_to(TESTS).as_posix()
        for marker, patterns in AREAS.items():
            if any(fnmatch.fnmatch(name, pattern) for pattern in patterns):
                item.add_marker(getattr(pytest.mark, marker))


# docs/format.md §3: the section table starts at byte 64, 24 bytes an entry (offset, length,
# checksum), in this order.
SECTIONS = (
    "schema",
    "dictionary",
    "data",
    "doc offsets",
    "keys",
    "key offsets",
    "key index",
    "key fences",
    "key ranks",
)


def sections(path) -> dict[str, tuple[int, int]]:
    """Each section's (offset, length) in the store file at ``path``, from its header's table."""
    with open(path, "rb") as f:
        header = f.read(64 + 24 * len(SECTIONS))
    return {name: struct.unpack_from("<QQ", header, 64 + 24 * i) for i, name in enumerate(SECTIONS)}


FIELDS = {"text": "str", "label": "int64", "score": "float64", "tokens": "int32[]", "raw": "bytes"}


def make_docs(n: int, seed: int = 0) -> dict[str, dict]:
    """``n`` documents with every common field type, keyed by unique, varied ids."""
    rng = np.random.default_rng(seed)
    docs = {}
    for i in range(n):
        doc_id = f"{['doc', 'D', 'msmarco_passage_', 'é'][i % 4]}{i * 7919 % (n * 10)}"
        docs[doc_id] = {
            "text": f"passage {i} "
            + " ".join(f"w{int(x)}" for x in rng.zipf(1.3, size=int(rng.integers(0, 60)))),
            "label": int(rng.integers(-(2**40), 2**40)),
            "score": float(rng.standard_normal()),
            "tokens": rng.integers(-(2**31), 2**31, size=int(rng.integers(0, 20)), dtype=np.int32),
            "raw": rng.bytes(int(rng.integers(0, 30))),
        }
    return docs


def write_store(path, docs: dict[str, dict], fields=FIELDS, **options) -> docstore.DocStore:
    with docstore.Writer(path, fields=fields, **options) as writer:
        for doc_id, doc in docs.items():
            writer.add(doc_id, doc)
    return docstore.open(path)


def assert_doc_equal(doc, doc_id: str, expected: dict) -> None:
    assert doc.doc_id == doc_id
    for name, value in expected.items():
        got = getattr(doc, name)
        if isinstance(value, np.ndarray):
            assert isinstance(got, np.ndarray) and got.dtype == value.dtype
            np.testing.assert_array_equal(got, value)
        elif isinstance(value, float):
            assert got == value or (np.isnan(got) and np.isnan(value))
        else:
            assert got == value and type(got) is type(value), (name, got, value)


@pytest.fixture(scope="session")
def oracle() -> dict[str, dict]:
    return make_docs(3000)


@pytest.fixture(scope="session")
def store_path(tmp_path_factory, oracle) -> str:
    path = str(tmp_path_factory.mktemp("stores") / "oracle.docstore")
    write_store(path, oracle, batch_bytes=20_000)  # several batches, so order across them is tested
    return path


@pytest.fixture
def store(store_path) -> docstore.DocStore:
    with docstore.open(store_path) as s:
        yield s


def run_python(
    code: str, timeout: float = 120, env_extra: dict[str, str] | None = None, **kwargs
) -> subprocess.CompletedProcess:
    """Runs ``code`` in a fresh interpreter: a crash there is a failed assertion here, not ours."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONFAULTHANDLER": "1", **(env_extra or {})},
        **kwargs,
    )


@pytest.fixture(params=["fork", "spawn", "forkserver"])
def start_method(request) -> str:
    if request.param not in multiprocessing.get_all_start_methods():
        pytest.skip(f"{request.param} is not available on this platform")
    return request.param


# -- what the engine tests (Ray, Spark) share ------------------------------------------------------


def named(n: int, prefix: str) -> dict[str, dict]:
    return {f"{prefix}{doc_id}": doc for doc_id, doc in make_docs(n).items()}


def dictionaries(store) -> set[bytes]:
    """The distinct compression dictionaries of a collection's shards."""
    return {docstore.open(s["path"]).dictionary for s in store.info()["shards"]}


def only(directory, *names):
    """Nothing but ``names`` in ``directory``: no staging directory, no attempt files."""
    assert sorted(os.listdir(directory)) == sorted(names)


# -- what writers leave beside a target: one naming scheme (docs/format.md §11) -------------------


def scratch_prefix(target_name: str) -> str:
    """The start of every name docstore makes beside the target ``target_name``:
    ``.{head}.{hash}.`` (``rust/core/src/publish/mod.rs``, ``scratch_prefix``)."""
    import xxhash

    raw = target_name.encode()
    return f".{raw[:32].decode(errors='ignore')}.{xxhash.xxh3_64_hexdigest(raw)}."


def scratch_dirs(directory, target_name: str) -> list[str]:
    """The scratch directories of the target ``target_name`` in ``directory``, by that scheme."""
    import re

    pattern = re.compile(re.escape(scratch_prefix(target_name)) + r"[0-9A-Za-z]{6}\.docstore-tmp")
    return sorted(n for n in os.listdir(directory) if pattern.fullmatch(n))


def holds_lock(scratch) -> bool:
    """Whether some process holds the lock of the scratch directory ``scratch``."""
    import fcntl

    try:
        with open(os.path.join(scratch, "lock")) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False
