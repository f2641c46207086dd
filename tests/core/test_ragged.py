"""Arrow rows into a fixed-shape field (``float32[2]``, ``float32[2,3]``): every row's length is
checked, on every way in, so that ragged rows are refused by name, never re-cut into the shape
(rows ``[1, 2, 3], [4], [5, 6]`` hold as many elements as three rows of two)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import docstore

pa = pytest.importorskip("pyarrow")

RAGGED = [[1, 2, 3], [4], [5, 6]]  # six elements: three rows of float32[2], if re-cut


def refused(tmp_path, fields, add, *match: str) -> None:
    """``add(writer)`` raises FieldTypeError naming each of ``match``; nothing is written."""
    with pytest.raises(docstore.FieldTypeError) as error, docstore.Writer(tmp_path / "s", fields) as w:
        add(w)
    for part in match:
        assert part in str(error.value), (part, str(error.value))
    assert not os.path.exists(tmp_path / "s")


@pytest.mark.parametrize("list_type", [pa.list_, pa.large_list])
def test_ragged_rows_of_a_table_are_refused_naming_the_row(tmp_path, list_type):
    table = pa.table({"doc_id": ["a", "b", "c"], "v": pa.array(RAGGED, list_type(pa.float32()))})
    message = ("doc 'a'", "'v'", "float32[2]", "shape (3,)")
    refused(tmp_path, {"v": "float32[2]"}, lambda w: w.add_many(table), *message)
    with pytest.raises(docstore.FieldTypeError, match="doc 'a'"):
        docstore.build(tmp_path / "b", table, fields={"v": "float32[2]"})
    assert not os.path.exists(tmp_path / "b")
    # The first bad row is named, in a slice and in a later chunk too.
    column = pa.array([[1, 2], [3, 4], [5]], list_type(pa.float32()))
    later = pa.table({"doc_id": ["x", "y", "z"], "v": column})
    refused(tmp_path, {"v": "float32[2]"}, lambda w: w.add_many(later), "doc 'z'", "shape (1,)")
    chunked = pa.concat_tables([later.slice(0, 1), later.slice(1)])
    refused(tmp_path, {"v": "float32[2]"}, lambda w: w.add_many(chunked), "doc 'z'", "shape (1,)")
    refused(tmp_path, {"v": "float32[2]"}, lambda w: w.add_many(later.slice(1)), "doc 'z'")


def test_rows_of_the_shape_still_go_in(tmp_path):
    """Nested lists of the shape, or flat rows of all its elements (as ``add`` takes them), and
    the null rows of a nullable field."""
    nested = [[[1, 2, 3], [4, 5, 6]], [[7, 8, 9], [10, 11, 12]]]
    with docstore.Writer(tmp_path / "s", {"m": "float32[2,3]", "v": "float32[2]?"}) as w:
        w.add_many(pa.table({"doc_id": ["a", "b"], "m": nested, "v": [[1, 2], None]}))
        flat = pa.array([list(range(6)), list(range(6, 12))], pa.large_list(pa.float32()))
        w.add_many(pa.table({"doc_id": ["c", "d"], "m": flat, "v": pa.array([None, [3, 4]])}))
    store = docstore.open(tmp_path / "s")
    np.testing.assert_array_equal(store["b"].m, np.array(nested[1], np.float32))
    np.testing.assert_array_equal(store["d"].m, np.arange(6, 12, dtype=np.float32).reshape(2, 3))
    assert store["b"].v is None and store["c"].v is None and store["d"].v.tolist() == [3, 4]


def test_ragged_nested_rows_are_refused_at_every_level(tmp_path):
    fields = {"m": "float32[2,3]"}
    good = [[1, 2, 3], [4, 5, 6]]
    # Six elements in each row: the old check (the column's total) let both through.
    inner = pa.table({"doc_id": ["a", "b"], "m": [good, [[1, 2], [3, 4, 5, 6]]]})
    message = ("doc 'b'", "'m'", "float32[2,3]", "ragged lists (one of 2 elements in dimension 2)")
    refused(tmp_path, fields, lambda w: w.add_many(inner), *message)
    outer = pa.table({"doc_id": ["a", "b"], "m": [good, [[1, 2, 3], [4, 5, 6], []]]})
    refused(
        tmp_path,
        fields,
        lambda w: w.add_many(outer),
        "doc 'b'",
        "ragged lists (one of 3 elements in dimension 1)",
    )
    # Fixed-size lists of the transposed shape (3 of 2) hold as many elements too.
    transposed = pa.array([[[1, 2], [3, 4], [5, 6]]], pa.list_(pa.list_(pa.float32(), 2), 3))
    table = pa.table({"doc_id": ["t"], "m": transposed})
    refused(tmp_path, fields, lambda w: w.add_many(table), "doc 't'", "got an array of shape (3, 2)")
    # A null inner list, and lists nested deeper than the shape.
    holed = pa.table({"doc_id": ["a", "b"], "m": [good, [[1, 2, 3], None]]})
    refused(tmp_path, fields, lambda w: w.add_many(holed), "doc 'b'", "null list")
    deep = pa.table({"doc_id": ["a"], "v": [[[1], [2]]]})
    refused(tmp_path, {"v": "float32[2]"}, lambda w: w.add_many(deep), "doc 'a'", "nested 2 deep")


def test_a_dataframe_and_add_many_columns_are_checked_too(tmp_path):
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"doc_id": ["a", "b", "c"], "v": RAGGED})
    refused(tmp_path, {"v": "float32[2]"}, lambda w: w.add_many(frame), "doc 'a'", "shape (3,)")
    with pytest.raises(docstore.FieldTypeError, match="doc 'a'"):
        docstore.build(tmp_path / "b", frame, fields={"v": "float32[2]"})
    ids, column = pa.array(["a", "b", "c"]), pa.array(RAGGED, pa.list_(pa.float32()))
    refused(tmp_path, {"v": "float32[2]"}, lambda w: w.add_many(ids, {"v": column}), "doc 'a'")
    # Ids given as a list (the row path) and a policy that resolves repeats first.
    refused(tmp_path, {"v": "float32[2]"}, lambda w: w.add_many(["a", "b", "c"], {"v": column}), "doc 'a'")
    for policy in ("first", "last"):
        with pytest.raises(docstore.FieldTypeError, match="doc 'a'"):
            with docstore.Writer(tmp_path / policy, {"v": "float32[2]"}, on_duplicate=policy) as w:
                w.add_many(ids, {"v": column})
    assert sorted(os.listdir(tmp_path)) == []
