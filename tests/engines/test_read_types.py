"""The engines' Arrow read path (``docstore._arrow_read.take_batch``, which Ray's read tasks and
Spark's partitions both run) on every field type, nulls included: each column equals what the
store's own ``take`` gives, and Spark's conversion keeps the values."""

from __future__ import annotations

import numpy as np
import pytest

import docstore
from docstore._arrow_read import arrow_type, take_batch

pa = pytest.importorskip("pyarrow")
ml_dtypes = pytest.importorskip("ml_dtypes")

FIELDS = {
    "text": "str?",
    "raw": "bytes",
    "n": "int64?",
    "x": "float64",
    "flag": "bool?",
    "tags": "list[str]?",
    "blobs": "list[bytes]",
    "half": "float16[]",
    "brain": "bfloat16[]?",
    "grid": "float32[2,3]?",
    "ids": "uint16[]",
}


def _doc(i: int) -> dict:
    null = i % 3 == 0
    return {
        "text": None if null else f"doc {i} é",
        "raw": bytes([i % 256]) * (i % 4),
        "n": None if null else i * 7,
        "x": i / 3,
        "flag": None if null else i % 2 == 0,
        "tags": None if null else [f"t{j}" for j in range(i % 4)],
        "blobs": [b"\x00" * j for j in range(i % 3)],
        "half": np.arange(i % 5, dtype=np.float16) / 4,
        "brain": None if null else (np.arange(i % 4, dtype=np.float32) * 1.5).astype(ml_dtypes.bfloat16),
        "grid": None if null else np.arange(6, dtype=np.float32).reshape(2, 3) + i,
        "ids": np.arange(i % 6, dtype=np.uint16),
    }


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("types") / "s.docstore"
    with docstore.Writer(path, fields=FIELDS) as w:
        for i in range(300):
            w.add(f"d{i}", **_doc(i))
    return docstore.open(path)


def _plain(kind: str, value):
    """A value of ``take`` as Arrow's ``to_pylist`` gives it."""
    if value is None:
        return None
    if kind.startswith("grid"):
        return np.asarray(value, dtype=np.float32).ravel().tolist()
    if isinstance(value, np.ndarray):
        return value.astype(np.float32 if value.dtype.kind in "fV" else value.dtype).tolist()
    return value


def test_every_type_reads_as_take_gives_it(store):
    positions = np.array([5, 0, 299, 3, 4, 3, 150], dtype=np.int64)
    columns = list(FIELDS)
    batch = take_batch(store, positions, store.fields, columns)
    assert batch.schema.field("grid").type == arrow_type("float32[2,3]?")
    assert batch.column("doc_id").to_pylist() == [f"d{p}" for p in positions]
    docs = store.take(positions.tolist())
    for name in columns:
        column = batch.column(name)
        if name == "grid":
            column = column.storage
        got = column.to_pylist()
        want = [_plain(name, getattr(d, name)) for d in docs]
        if name in ("half", "brain"):
            got = [None if g is None else [float(v) for v in g] for g in got]
            want = [None if w is None else [float(v) for v in w] for w in want]
        assert got == want, name
        assert column.null_count == sum(w is None for w in want), name


def test_fixed_shapes_read_as_tensors(store):
    batch = take_batch(store, np.array([1, 2], dtype=np.int64), store.fields, ["grid"])
    tensors = batch.column("grid").to_numpy_ndarray()
    assert tensors.shape == (2, 2, 3)
    np.testing.assert_array_equal(tensors[1], store.at(2).grid)


def test_spark_batches_keep_every_type(store):
    pytest.importorskip("pyspark")
    from docstore._spark_read import spark_schema, to_spark_batch

    columns = list(FIELDS)
    schema = spark_schema(store.fields, columns)
    batch = to_spark_batch(take_batch(store, np.arange(12, dtype=np.int64), store.fields, columns), schema)
    assert batch.column("flag").to_pylist()[:3] == [None, False, True]
    assert batch.column("tags").to_pylist()[:3] == [None, [f"t{j}" for j in range(1)], ["t0", "t1"]]
    assert batch.column("grid").to_pylist()[1] == list(np.arange(6, dtype=np.float32) + 1)
    assert batch.column("half").to_pylist()[4] == [0.0, 0.25, 0.5, 0.75]
