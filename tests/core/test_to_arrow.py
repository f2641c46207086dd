"""``DocStore.to_arrow`` and ``to_pandas``: every field type, slices, ranges and positions."""

from __future__ import annotations

import numpy as np
import pytest

import docstore

pa = pytest.importorskip("pyarrow")
pd = pytest.importorskip("pandas")

FIELDS = {
    "text": "str",
    "raw": "bytes?",
    "n": "int64",
    "x": "float64?",
    "ok": "bool",
    "tags": "list[str]",
    "ids": "int32[]",
    "half": "float16[]",
    "grid": "float32[2,3]?",
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("arrow") / "s.docstore"
    rng = np.random.default_rng(3)
    with docstore.Writer(path, fields=FIELDS) as writer:
        for i in range(20):
            writer.add(
                f"d{i}",
                text=f"text {i}",
                raw=None if i % 3 == 0 else bytes([i]) * i,
                n=i - 10,
                x=None if i % 4 == 0 else i / 3,
                ok=i % 2 == 0,
                tags=[f"t{j}" for j in range(i % 3)],
                ids=np.arange(i, dtype=np.int32),
                half=rng.standard_normal(i % 5).astype(np.float16),
                grid=None if i % 5 == 0 else rng.standard_normal((2, 3)).astype(np.float32),
            )
    return docstore.open(path)


def same(got, want) -> bool:
    if want is None or got is None:
        return got is None and want is None
    if isinstance(want, (np.ndarray, list)):  # pandas gives lists as numpy arrays
        return np.asarray(got).tolist() == np.asarray(want).tolist()
    return got == want


@pytest.mark.parametrize(
    "rows, positions",
    [
        (None, list(range(20))),
        (slice(2, 9, 3), [2, 5, 8]),
        (range(19, 15, -1), [19, 18, 17, 16]),
        ([-1, 0, 7], [19, 0, 7]),
    ],
)
def test_to_pandas_gives_what_take_gives(store, rows, positions):
    frame = store.to_pandas(rows=rows)
    assert list(frame.columns) == ["doc_id", *FIELDS]
    docs = store.take(positions)
    assert frame["doc_id"].tolist() == [d.doc_id for d in docs]
    for name in FIELDS:
        for got, doc in zip(frame[name].tolist(), docs):
            want = getattr(doc, name)
            if name == "grid" and want is not None:
                assert got.shape == (2, 3)
            got = None if isinstance(got, float) and np.isnan(got) and want is None else got
            assert same(got, want), (name, got, want)


def test_to_arrow_types_and_columns(store):
    table = store.to_arrow(["n", "grid"], rows=slice(0, 5))
    assert table.column_names == ["doc_id", "n", "grid"]
    assert table.schema.field("n").type == pa.int64()
    assert isinstance(table.schema.field("grid").type, pa.FixedShapeTensorType)
    assert table.column("grid").null_count == 1
    assert store.to_arrow(rows=[]).num_rows == 0


def test_bad_rows_and_columns_are_refused(store):
    with pytest.raises(IndexError, match="position 20 out of range for 20 documents"):
        store.to_arrow(rows=[0, 20])
    with pytest.raises(TypeError, match="rows must be"):
        store.to_arrow(rows="d1")
    with pytest.raises(docstore.SchemaError, match=r"no field\(s\) \['nope'\]"):
        store.to_arrow(["nope"])
