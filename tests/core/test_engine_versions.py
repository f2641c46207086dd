"""The engines' cache of open stores (``_engine_read.StoreSpec``) is keyed by version, not by
path: a job planned after a rebuild reads the new store; a task of a job planned before it fails
with ``StoreChangedError`` naming the path, and never reads the new store's documents."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

import docstore
from docstore import _engine_read as engine_read

pa = pytest.importorskip("pyarrow")


def build(path, texts: list[str], overwrite: bool = True) -> None:
    docstore.build(path, [{"doc_id": f"d{i}", "text": t} for i, t in enumerate(texts)], overwrite=overwrite)


def read_all(spec: engine_read.StoreSpec) -> list[str]:
    bounds = engine_read.shards_of(spec.open())
    out: list[str] = []
    for split in engine_read.plan(bounds, 2):
        for batch in engine_read.read_split(spec, split, ["text"], 3):
            out += batch.column("text").to_pylist()
    return out


def test_a_job_planned_after_a_rebuild_reads_the_new_store(tmp_path):
    path = tmp_path / "s.docstore"
    build(path, ["old"] * 10)
    old, _ = engine_read.StoreSpec.of(path).plan()
    assert read_all(old) == ["old"] * 10  # the old store is now in this process's cache
    build(path, ["new"] * 12)
    new, store = engine_read.StoreSpec.of(path).plan()
    assert len(store) == 12 and new.fingerprint != old.fingerprint
    assert read_all(new) == ["new"] * 12
    # A task of the job planned before the rebuild refuses the new store, naming the path.
    with pytest.raises(
        docstore.StoreChangedError, match=re.escape(f"store {path}") + ".*changed since the job was planned"
    ):
        read_all(old)
    assert read_all(new) == ["new"] * 12  # the next job succeeds


def test_a_store_replaced_during_a_job_fails_its_later_tasks_never_mixing(tmp_path):
    path = tmp_path / "s.docstore"
    build(path, [f"old {i}" for i in range(20)])
    spec, store = engine_read.StoreSpec.of(path).plan()
    splits = engine_read.plan(engine_read.shards_of(store), 4)
    first = [b.column("text").to_pylist() for b in engine_read.read_split(spec, splits[0], ["text"], 5)]
    build(path, [f"new {i}" for i in range(20)])
    engine_read.StoreSpec.forget(spec)  # as a fresh worker process: nothing cached
    with pytest.raises(docstore.StoreChangedError, match=re.escape(str(path))):
        list(engine_read.read_split(spec, splits[1], ["text"], 5))
    assert all(t.startswith("old") for part in first for t in part)


def test_an_unchanged_store_is_opened_once_per_process(tmp_path):
    path = tmp_path / "s.docstore"
    build(path, ["a", "b"])
    spec, store = engine_read.StoreSpec.of(path).plan()
    assert spec.open() is store and spec.open() is store
    os.utime(path)  # touched, same bytes: reopened (another identity), the same fingerprint
    again = spec.open()
    assert again.fingerprint == spec.fingerprint and again["d1"].text == "b"


def test_a_collection_appended_to_is_a_new_version(tmp_path):
    parts = []
    for i in range(3):
        parts.append(tmp_path / f"p{i}.docstore")
        docstore.build(parts[-1], [{"doc_id": f"p{i}", "text": str(i)}])
    target = tmp_path / "c"
    docstore.seal(target, parts[:2])
    old, store = engine_read.StoreSpec.of(target).plan()
    assert len(store) == 2
    docstore.seal(target, parts[2:], append=True)
    new, store = engine_read.StoreSpec.of(target).plan()
    assert len(store) == 3 and new.fingerprint != old.fingerprint
    with pytest.raises(docstore.StoreChangedError):
        old.open()


def test_the_cache_keeps_one_version_a_path(tmp_path):
    path = tmp_path / "s.docstore"
    for n in range(1, 6):
        build(path, ["x"] * n)
        engine_read.StoreSpec.of(path).plan()
    assert sum(1 for key in engine_read._OPEN if key[0] == os.fspath(path)) == 1


def test_the_spec_repr_shows_no_credentials():
    spec = engine_read.StoreSpec.of(
        "https://user:s3cr3tpw@example.com/c.docstore?X-Amz-Signature=sigvalue",
        {"storage_options": {"aws_secret_access_key": "AKIAVALUE"}, "read": "pread"},
    )
    text = repr(spec)
    assert "s3cr3tpw" not in text and "sigvalue" not in text and "AKIAVALUE" not in text
    assert "example.com" in text and "aws_secret_access_key" in text and "pread" in text


def test_lookup_takes_dictionary_encoded_ids(tmp_path):
    path = tmp_path / "s.docstore"
    build(path, ["zero", "one", "two"])
    spec, store = engine_read.StoreSpec.of(path).plan()
    ids = pa.array(["d2", "d0", "d2", None]).dictionary_encode()
    table = engine_read.lookup_table(store, pa.table({"doc_id": ids}), "doc_id", ["text"], "null", spec)
    assert table.column("text").to_pylist() == ["two", "zero", "two", None]
    assert np.array_equal(table.column("doc_id").to_pylist(), ["d2", "d0", "d2", None])
