"""The field types of format version 4: nullable fields (``str?``), ``bool``, ``list[str]``,
``list[bytes]``, ``float16[]`` and ``bfloat16[]``; integer ids. Each is written the same, byte
for byte, by ``add`` (row by row) and by ``add_many`` from Arrow buffers, read back as Python
values, inferred by ``build``, and refused by name where a value does not fit."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pyarrow as pa
import pytest

import docstore

FIELDS = {
    "title": "str?",
    "flag": "bool",
    "maybe": "bool?",
    "tags": "list[str]",
    "parts": "list[bytes]?",
    "half": "float16[]",
    "brain": "bfloat16[]?",
    "n": "int64?",
    "x": "float64?",
    "v": "float32[]?",
}


def _rows(n: int = 40) -> list[dict]:
    rows = []
    for i in range(n):
        null = i % 3 == 1
        rows.append(
            {
                "doc_id": f"d{i}",
                "title": None if null else f"title {i} é",
                "flag": i % 2 == 0,
                "maybe": None if null else i % 4 == 0,
                "tags": [f"t{j}" for j in range(i % 4)],
                "parts": None if null else [bytes([j]) * j for j in range(i % 3)],
                "half": np.arange(i % 5, dtype=np.float16) / 4,
                "brain": None if null else (np.arange(i % 3) / 8).astype(ml_dtypes.bfloat16),
                "n": None if null else i - 20,
                "x": None if null else i / 3,
                "v": None if null else np.arange(i % 3, dtype=np.float32),
            }
        )
    return rows


def _table(rows: list[dict]) -> pa.Table:
    def floats(name, kind):
        return pa.array(
            [None if r[name] is None else r[name].astype(np.float32) for r in rows], pa.list_(kind)
        )

    return pa.table(
        {
            "doc_id": [r["doc_id"] for r in rows],
            "title": [r["title"] for r in rows],
            "flag": [r["flag"] for r in rows],
            "maybe": pa.array([r["maybe"] for r in rows], pa.bool_()),
            "tags": pa.array([r["tags"] for r in rows], pa.list_(pa.string())),
            "parts": pa.array([r["parts"] for r in rows], pa.list_(pa.binary())),
            "half": pa.array([r["half"] for r in rows], pa.list_(pa.float16())),
            "brain": floats("brain", pa.float32()),
            "n": pa.array([r["n"] for r in rows], pa.int64()),
            "x": pa.array([r["x"] for r in rows], pa.float64()),
            "v": floats("v", pa.float32()),
        }
    )


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return a is not None and b is not None and a.dtype == b.dtype and a.tolist() == b.tolist()
    return a == b and type(a) is type(b)


def test_rows_and_arrow_buffers_write_the_same_bytes_and_read_back(tmp_path):
    from docstore import _writer

    rows = _rows()
    table = _table(rows)
    assert (
        _writer._arrow_columns(table.column("doc_id"), [table.column(n) for n in FIELDS], FIELDS) is not None
    )
    with docstore.Writer(tmp_path / "rows", FIELDS, batch_bytes=300, dict_size=0) as w:
        for row in rows:
            w.add(row["doc_id"], {k: v for k, v in row.items() if k != "doc_id"})
    with docstore.Writer(tmp_path / "arrow", FIELDS, batch_bytes=300, dict_size=0) as w:
        w.add_many(table.slice(0, 17))
        w.add_many(table.slice(17))  # a slice: offsets and validity that do not start at 0
    assert (tmp_path / "rows").read_bytes() == (tmp_path / "arrow").read_bytes()
    store = docstore.open(tmp_path / "rows")
    assert store.info()["format_version"] == 4 and store.fields == FIELDS
    for row, doc in zip(rows, store.values()):
        for name in FIELDS:
            assert _same(getattr(doc, name), row[name]), (name, getattr(doc, name), row[name])
    assert store.take([1], field="brain") == [None]
    assert store["d0"].brain.dtype == ml_dtypes.bfloat16


def test_a_store_of_old_types_stays_version_3(tmp_path):
    store = docstore.build(tmp_path / "s", [{"doc_id": "a", "t": "x", "n": 1}])
    assert store.info()["format_version"] == 3 == docstore.FORMAT_VERSION
    with pytest.raises(docstore.InvalidArgumentError, match='field "f" is bool, which format version 3'):
        docstore.Writer(tmp_path / "v3", {"f": "bool"}, format_version=3)


def test_build_infers_the_new_types_and_nullable_from_arrow(tmp_path):
    store = docstore.build(tmp_path / "py", [{"doc_id": "a", "b": True, "l": ["x"], "lb": [b"y"]}])
    assert store.fields == {"b": "bool", "l": "list[str]", "lb": "list[bytes]"}
    assert store["a"] == ("a", True, ["x"], [b"y"])
    with pytest.raises(docstore.SchemaError, match="is None in the one record.*'t': 'str\\?'"):
        docstore.build(tmp_path / "none", [{"doc_id": "a", "t": None}])
    table = pa.table({"id": [1, 2], "t": ["x", None], "u": ["y", "z"], "b": [True, False]})
    store = docstore.build(tmp_path / "arrow", table, id_field="id")
    assert store.fields == {"t": "str?", "u": "str", "b": "bool"}
    assert list(store.values()) == [("1", "x", "y", True), ("2", None, "z", False)]


@pytest.mark.parametrize("path", ["rows", "arrow"])
@pytest.mark.parametrize(
    ("kind", "column", "message"),
    [
        (
            "bool",
            pa.array([True, None]),
            'doc "b": field "c" is bool, got None; declare the field bool\\? to store None',
        ),
        ("bool", pa.array([1, 2]), 'doc "b": field "c" is bool, got 2 \\(only 0 and 1 are bools\\)'),
        ("bool", pa.array([1.0, 0.0]), 'doc "a": field "c" is bool, got float'),
        (
            "list[str]",
            pa.array([["x"], ["y", None]]),
            'doc "b": field "c" is list\\[str\\], got a NoneType at item 1',
        ),
        ("list[str]", pa.array([[b"x"], []]), 'doc "a": field "c" is list\\[str\\], got a bytes at item 0'),
        ("list[bytes]", pa.array([["x"], []]), 'doc "a": field "c" is list\\[bytes\\], got a str at item 0'),
        ("list[str]", pa.array(["x", "y"]), 'doc "a": field "c" is list\\[str\\], got str'),
        (
            "float16[]",
            pa.array([[1.0], [1e6]]),
            "doc 'b': field 'c' is float16\\[\\], got elements too large",
        ),
    ],
)
def test_values_that_do_not_fit_are_refused_naming_field_and_doc(
    tmp_path, monkeypatch, path, kind, column, message
):
    from docstore import _writer

    if path == "rows":
        monkeypatch.setattr(_writer, "_arrow_columns", lambda *args: None)
    table = pa.table({"doc_id": ["a", "b"], "c": column})
    with docstore.Writer(tmp_path / "s", {"c": kind}) as w:
        with pytest.raises(docstore.FieldTypeError, match=message):
            w.add_many(table)
        assert w.count == 0


def test_integer_ids_become_their_decimal_text(tmp_path):
    import datasets

    from docstore._arrow import prepare, schema_fields

    ds = datasets.Dataset.from_dict({"id": [7, 10**15], "t": ["a", "b"]})
    store = docstore.build(tmp_path / "hf", ds, id_field="id")
    assert list(store) == ["7", "1000000000000000"] and store["7"].t == "a"
    store = docstore.build(tmp_path / "py", [{"doc_id": 7, "t": "a"}, {"doc_id": "x", "t": "b"}])
    assert list(store) == ["7", "x"]
    with pytest.raises(docstore.InvalidKeyError, match="doc ids must be str, got float"):
        docstore.build(tmp_path / "f", [{"doc_id": 7.0, "t": "a"}])
    # The engines' path (docstore.ray, docstore.spark): an integer id column is taken.
    table = pa.table({"id": pa.array([3, 4], pa.int32()), "t": ["a", "b"]})
    fields = schema_fields(table.schema, "id")
    assert prepare(table, "id", fields).column("id").to_pylist() == ["3", "4"]


def test_fixed_shape_arrays(tmp_path, monkeypatch):
    """``float32[2,3]``: N-D arrays of one shape, from numpy, nested lists, Arrow's nested
    fixed-size lists, its fixed_shape_tensor and HF's Array2D; rows and buffers byte-identical."""
    import datasets

    from docstore import _writer

    fields = {"m": "float32[2,3]", "i": "uint8[2,2,2]?"}
    values = [np.arange(6, dtype=np.float32).reshape(2, 3) + k for k in range(20)]
    images = [None if k % 3 == 1 else np.full((2, 2, 2), k, np.uint8) for k in range(20)]
    nested = pa.array([v.tolist() for v in values], pa.list_(pa.list_(pa.float32(), 3), 2))
    flat_images = [None if v is None else v.reshape(-1).tolist() for v in images]
    tensor = pa.ExtensionArray.from_storage(
        pa.fixed_shape_tensor(pa.uint8(), [2, 2, 2]), pa.array(flat_images, pa.list_(pa.uint8(), 8))
    )
    table = pa.table({"doc_id": [f"d{k}" for k in range(20)], "m": nested, "i": tensor})
    assert _writer._arrow_columns(table.column("doc_id"), [table.column("m")], {"m": fields["m"]})
    with docstore.Writer(tmp_path / "rows", fields, batch_bytes=100) as w:
        for k in range(20):
            w.add(f"d{k}", m=values[k].tolist() if k % 2 else values[k], i=images[k])
    docstore.build(tmp_path / "arrow", table, batch_bytes=100, fields=fields)
    assert (tmp_path / "rows").read_bytes() == (tmp_path / "arrow").read_bytes()
    store = docstore.open(tmp_path / "rows")
    assert store.fields == fields and store.info()["format_version"] == 4
    assert all(_same(d.m, values[k]) and _same(d.i, images[k]) for k, d in enumerate(store.values()))
    assert docstore.build(tmp_path / "inferred", table).fields == {"m": "float32[2,3]", "i": "uint8[2,2,2]?"}
    with docstore.Writer(tmp_path / "bad", fields) as w:
        with pytest.raises(
            docstore.FieldTypeError,
            match="doc 'x': field 'm' is float32\\[2,3\\], got an array of shape \\(3, 2\\)",
        ):
            w.add("x", m=np.zeros((3, 2)), i=None)
        bad = pa.table(
            {"doc_id": ["y"], "m": pa.array([[[1.0] * 3] * 3], pa.list_(pa.list_(pa.float32(), 3)))}
        )
        with pytest.raises(
            docstore.FieldTypeError,
            match="doc 'y': field 'm' is float32\\[2,3\\], got an array of shape \\(3, 3\\)",
        ):
            w.add_many(bad.append_column("i", pa.array([None], pa.list_(pa.uint8(), 8))))
    # Hugging Face's Array2D in, and out with its feature
    features = datasets.Features({"id": datasets.Value("string"), "img": datasets.Array2D((2, 3), "uint8")})
    ds = datasets.Dataset.from_dict(
        {"id": ["a", "b"], "img": [np.zeros((2, 3), np.uint8)] * 2}, features=features
    )
    store = docstore.build(tmp_path / "hf", ds, id_field="id")
    assert store.fields == {"img": "uint8[2,3]"} and store["b"].img.shape == (2, 3)
