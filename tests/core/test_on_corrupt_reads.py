"""``on_corrupt`` in the engines' shared read path (``_engine_read``), without an engine: a split
read and a lookup join over a collection with bytes flipped inside chosen documents."""

from __future__ import annotations

import re
import warnings

import pytest

import docstore
from docstore import _engine_read as engine_read
from docstore._damage import DamagedDocumentWarning

from ..support.damage import damaged_store, text_of

pa = pytest.importorskip("pyarrow")

N, DAMAGED = 90, [0, 44, 45, 89]


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    store = damaged_store(tmp_path_factory.mktemp("c") / "c", N, DAMAGED, shards=3)
    return engine_read.StoreSpec.of(store.path).plan()


def read(spec, on_corrupt):
    out = []
    for split in engine_read.plan(engine_read.shards_of(spec.open()), 4):
        for batch in engine_read.read_split(spec, split, ["text", "n"], 8, on_corrupt):
            out += batch.to_pylist()
    return out


def test_a_split_read_leaves_out_exactly_the_damaged_documents(collection, monkeypatch):
    spec, _ = collection
    with pytest.raises(docstore.CorruptStoreError, match="shard 0 .* positions 0\\.\\."):
        read(spec, "raise")
    monkeypatch.setattr(engine_read, "_WARNED", set())
    monkeypatch.setattr(engine_read, "SKIPPED", {})
    with pytest.warns(DamagedDocumentWarning, match=re.escape(spec.label()) + ".*position\\(s\\) 0"):
        rows = read(spec, "skip")
    good = [i for i in range(N) if i not in DAMAGED]
    assert rows == [{"doc_id": f"d{i}", "text": text_of(i), "n": i} for i in good]
    assert {spec.label(): len(DAMAGED)} == engine_read.SKIPPED


@pytest.mark.parametrize("missing", ["null", "drop", "error"])
def test_a_lookup_reads_a_damaged_document_as_missing(collection, missing):
    spec, store = collection
    ids = pa.table({"doc_id": ["d1", "d44", "d2", "absent", "d89"]})
    with pytest.raises(docstore.CorruptStoreError):
        engine_read.lookup_table(store, ids, "doc_id", ["n"], missing, spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DamagedDocumentWarning)
        if missing == "error":
            with pytest.raises(KeyError, match=r"3 id\(s\).*\(2 of them damaged, skipped\)"):
                engine_read.lookup_table(store, ids, "doc_id", ["n"], missing, spec, on_corrupt="skip")
            return
        table = engine_read.lookup_table(store, ids, "doc_id", ["n"], missing, spec, on_corrupt="skip")
    if missing == "null":
        assert table.column("n").to_pylist() == [1, None, 2, None, None]
    else:
        assert table.to_pydict() == {"doc_id": ["d1", "d2"], "n": [1, 2]}
