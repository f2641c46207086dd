"""Attacks on the field types of format version 4 and integer ids: inputs a real user meets
(an all-null column, a bool column with nulls, numpy integer ids, a table of integer ids given
to ``add_many``) and ones made to mislead (a ``fixed_shape_tensor`` of another shape or with a
permutation). Each gives the right value back or a ``DocstoreError`` naming field and doc, and
the Arrow buffer path and the row path agree byte for byte."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import docstore


def _both_paths(tmp_path, monkeypatch, fields, table):
    """The store's bytes and values written from ``table`` by the Arrow buffer path, and by the
    row path (``_arrow_columns`` off); both must agree."""
    from docstore import _writer

    (tmp_path / "arrow").unlink(missing_ok=True)
    with docstore.Writer(tmp_path / "arrow", fields, dict_size=0) as w:
        w.add_many(table)
    with monkeypatch.context() as m:
        m.setattr(_writer, "_arrow_columns", lambda *args: None)
        with docstore.Writer(tmp_path / "rows", fields, dict_size=0, overwrite=True) as w:
            w.add_many(table)
    assert (tmp_path / "arrow").read_bytes() == (tmp_path / "rows").read_bytes()
    return [tuple(doc)[1:] for doc in docstore.open(tmp_path / "arrow").values()]


@pytest.mark.parametrize(
    ("kind", "column", "expected"),
    [
        # pandas/Arrow give an all-None column the type null
        ("bool?", pa.nulls(3), [None, None, None]),
        ("int64?", pa.nulls(3), [None, None, None]),
        ("float64?", pa.nulls(3), [None, None, None]),
        # a bool column with nulls for a number field: add() takes True as 1
        ("int64?", pa.array([True, None, False]), [1, None, 0]),
        ("float64?", pa.array([True, None, False]), [1.0, None, 0.0]),
    ],
)
def test_nullable_columns_of_another_arrow_type(tmp_path, monkeypatch, kind, column, expected):
    table = pa.table({"doc_id": ["a", "b", "c"], "x": column})
    assert _both_paths(tmp_path, monkeypatch, {"x": kind}, table) == [(v,) for v in expected]


def test_numpy_integer_ids_are_decimal_text_as_python_ints(tmp_path):
    records = [{"doc_id": np.int64(5), "t": "a"}, {"doc_id": np.uint8(6), "t": "b"}]
    assert list(docstore.build(tmp_path / "np", records)) == ["5", "6"]
    with pytest.raises(docstore.DuplicateKeyError, match='"5"'):
        docstore.build(tmp_path / "dup", [*records, {"doc_id": "5", "t": "c"}])
    with pytest.raises(docstore.InvalidKeyError, match="bool"):
        docstore.build(tmp_path / "bool", [{"doc_id": np.bool_(True), "t": "a"}])
