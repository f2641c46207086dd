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


@pytest.mark.parametrize("on_duplicate", ["error", "first", "last"])
def test_add_many_takes_a_table_of_integer_ids(tmp_path, on_duplicate):
    """``add_many(table)`` takes integer ids as ``build(table)`` and ``add_many(dataset)`` do;
    the id 7 and the id "7" are one id, and the policy decides between them."""
    path = tmp_path / "s"
    with docstore.Writer(path, {"t": "str"}, on_duplicate=on_duplicate) as w:
        w.add_many(pa.table({"doc_id": pa.array([7, 8], pa.int32()), "t": ["a", "b"]}))
        if on_duplicate == "error":
            with pytest.raises(docstore.DuplicateKeyError, match='"7"'):
                w.add_many(pa.table({"doc_id": ["7"], "t": ["c"]}))
        else:
            w.add_many(pa.table({"doc_id": ["7"], "t": ["c"]}))
    store = docstore.open(path)
    expected = {"error": {"7": "a", "8": "b"}, "first": {"7": "a", "8": "b"}, "last": {"8": "b", "7": "c"}}
    assert {k: store[k].t for k in store} == expected[on_duplicate]
    with docstore.Writer(tmp_path / "bad", {"t": "str"}) as w:
        with pytest.raises(docstore.InvalidKeyError, match="doc ids must be str, got bool"):
            w.add_many(pa.table({"doc_id": [True], "t": ["a"]}))
        assert w.count == 0


@pytest.mark.parametrize("on_duplicate", ["first", "last"])
@pytest.mark.parametrize("kind", ["arrow", "numpy", "list"])
def test_a_batch_of_repeats_only(tmp_path, on_duplicate, kind):
    """A batch whose every id was added before: "first" adds none of it, "last" all of it."""

    def batch(ids, texts):
        if kind == "arrow":
            return (pa.table({"doc_id": ids, "t": texts}),)
        if kind == "numpy":
            return np.array(ids, dtype=object), {"t": np.array(texts, dtype=object)}
        return ids, {"t": texts}

    with docstore.Writer(tmp_path / "s", {"t": "str"}, on_duplicate=on_duplicate, batch_bytes=8) as w:
        w.add_many(*batch(["a", "b"], ["x", "y"]))
        w.add_many(*batch(["b", "a", "b"], ["1", "2", "3"]))
        assert w.duplicates == 3
    store = docstore.open(tmp_path / "s")
    expected = {"first": {"a": "x", "b": "y"}, "last": {"a": "2", "b": "3"}}[on_duplicate]
    assert {k: store[k].t for k in store} == expected


def test_a_tensor_of_another_shape_is_refused_not_reshaped(tmp_path):
    """A ``fixed_shape_tensor`` column says its shape: one that is not the field's is refused
    by name (its flat storage would otherwise pass for any shape of as many elements), from a
    table, with ids of another kind, and by ``build``."""
    storage = pa.array([[1, 2, 3, 4]] * 2, pa.list_(pa.float32(), 4))
    column = pa.ExtensionArray.from_storage(pa.fixed_shape_tensor(pa.float32(), [4, 1]), storage)
    table = pa.table({"doc_id": ["a", "b"], "m": column})
    message = r"doc 'a': field 'm' is float32\[2,2\]\??, got .*shape \(4, 1\)"
    with docstore.Writer(tmp_path / "s", {"m": "float32[2,2]?"}) as w:
        with pytest.raises(docstore.FieldTypeError, match=message):
            w.add_many(table)
        with pytest.raises(docstore.FieldTypeError, match=message):
            w.add_many(["a", "b"], {"m": column})
        assert w.count == 0
    with pytest.raises(docstore.FieldTypeError, match=message):
        docstore.build(tmp_path / "b", table, fields={"m": "float32[2,2]"})
    assert docstore.build(tmp_path / "ok", table, fields={"m": "float32[4,1]"})["b"].m.shape == (4, 1)


def test_a_permuted_tensor_is_refused(tmp_path):
    """Arrow's ``fixed_shape_tensor`` with a permutation stores its elements in another order
    than C order; taken as they lie, they would come back transposed."""
    kind = pa.fixed_shape_tensor(pa.float32(), [2, 3], permutation=[1, 0])
    column = pa.ExtensionArray.from_storage(kind, pa.array([list(range(6))], pa.list_(pa.float32(), 6)))
    table = pa.table({"doc_id": ["a"], "m": column})
    with pytest.raises(docstore.SchemaError, match="permutation"):
        docstore.build(tmp_path / "inferred", table)
    with docstore.Writer(tmp_path / "given", {"m": "float32[2,3]"}) as w:
        with pytest.raises(docstore.FieldTypeError, match="doc 'a': field 'm' .*permutation"):
            w.add_many(table)


@pytest.mark.parametrize("on_duplicate", ["first", "last"])
def test_a_policy_writes_the_same_bytes_by_every_path(tmp_path, on_duplicate):
    """Repeats inside one ``add_many`` batch and across flushes, with nulls, lists and half
    floats: ``add`` row by row, Arrow tables and lists of values give one store, holding the
    first (or last) document of each id, where that document stands."""
    fields = {"t": "str?", "l": "list[str]", "h": "float16[]?", "m": "uint8[2]?"}
    ids = [f"k{(i * 7919) % 23}" for i in range(120)]
    rows = [
        {
            "t": None if i % 3 == 0 else f"v{i}",
            "l": [str(i)] * (i % 3),
            "h": None if i % 4 == 0 else np.arange(i % 5, dtype=np.float16),
            "m": None if i % 5 == 0 else np.array([i % 256, 1], np.uint8),
        }
        for i in range(120)
    ]
    options = {"on_duplicate": on_duplicate, "batch_bytes": 64, "dict_size": 0}
    with docstore.Writer(tmp_path / "rows", fields, **options) as w:
        for doc_id, row in zip(ids, rows):
            w.add(doc_id, row)
    with docstore.Writer(tmp_path / "arrow", fields, **options) as w:
        for a in range(0, 120, 37):
            part = rows[a : a + 37]
            m = [None if r["m"] is None else r["m"].tolist() for r in part]
            w.add_many(
                pa.table(
                    {
                        "doc_id": ids[a : a + 37],
                        "t": [r["t"] for r in part],
                        "l": pa.array([r["l"] for r in part], pa.list_(pa.string())),
                        "h": pa.array([r["h"] for r in part], pa.list_(pa.float16())),
                        "m": pa.array(m, pa.list_(pa.uint8(), 2)),
                    }
                )
            )
    with docstore.Writer(tmp_path / "lists", fields, **options) as w:
        for a in range(0, 120, 53):
            w.add_many(ids[a : a + 53], {k: [r[k] for r in rows[a : a + 53]] for k in fields})
    data = (tmp_path / "rows").read_bytes()
    assert data == (tmp_path / "arrow").read_bytes() == (tmp_path / "lists").read_bytes()
    kept: dict[str, int] = {}
    for i, doc_id in enumerate(ids):
        if on_duplicate == "last":
            kept.pop(doc_id, None)
        kept.setdefault(doc_id, i)
    store = docstore.open(tmp_path / "rows")
    assert list(store) == list(kept)
    for doc_id, i in kept.items():
        doc = store[doc_id]
        assert (doc.t, doc.l) == (rows[i]["t"], rows[i]["l"])
        assert (doc.h is None) == (rows[i]["h"] is None)


@pytest.mark.parametrize("kind", ["bfloat16[]", "float16[]", "float32[2]"])
def test_a_tensor_that_requires_grad(tmp_path, kind):
    """A model's output (a tensor that requires grad) is stored by its values, as numpy would
    refuse it with torch's own RuntimeError."""
    torch = pytest.importorskip("torch")
    value = torch.tensor([1.5, -2.0], requires_grad=True) * 2
    with docstore.Writer(tmp_path / "s", {"f": kind}) as w:
        w.add("a", f=value)
    assert docstore.open(tmp_path / "s")["a"].f.astype(np.float32).tolist() == [3.0, -4.0]


@pytest.mark.parametrize(
    ("kind", "value", "message"),
    [
        ("uint8[2]", [-1, 300], r"is uint8\[2\], got elements outside \[0, 255\]"),
        ("int16[1,2]", [[1.5, 2.0]], r"is int16\[1,2\], got floating-point elements"),
        ("float16[2]", [1e6, 0], r"is float16\[2\], got elements too large for float16"),
        ("float16[2]?", ["a", "b"], r"is float16\[2\], got elements of type <U1"),
    ],
)
def test_a_fixed_shape_element_error_names_the_fixed_shape(tmp_path, kind, value, message):
    with docstore.Writer(tmp_path / "s", {"f": kind}) as w:
        with pytest.raises(docstore.FieldTypeError, match=f"doc 'a': field 'f' {message}"):
            w.add("a", f=value)
        assert w.count == 0


@pytest.mark.parametrize(
    ("on_duplicate", "how"),
    # ("first", "add") is left out: "first" drops a repeat unread, so there is nothing to refuse
    [("last", "add"), ("first", "lists"), ("last", "lists"), ("first", "arrow"), ("last", "arrow")],
)
def test_a_refused_repeat_changes_nothing(tmp_path, on_duplicate, how):
    """A repeated id in a call that is refused (a value its field cannot hold) leaves the writer
    as it was: the earlier document stays, no later document takes the repeat's place or id,
    nothing is counted, and the error names the id given, not the writer's stand-in."""
    with docstore.Writer(tmp_path / "s", {"t": "str"}, on_duplicate=on_duplicate) as w:
        w.add("a", t="x")
        with pytest.raises(docstore.FieldTypeError, match='doc "(a|b)": field "t" is str') as raised:
            if how == "add":
                w.add("a", t=5)
            elif how == "lists":
                w.add_many(["a", "b"], {"t": ["y", 5]})
            else:
                w.add_many(pa.table({"doc_id": ["a", "b"], "t": pa.array(["y", None])}))
        assert "docstore-last" not in str(raised.value)
        w.add("c", t="z")
        assert (w.duplicates, w.repeated_ids) == (0, [])
    store = docstore.open(tmp_path / "s")
    assert {k: store[k].t for k in store} == {"a": "x", "c": "z"}


def test_a_lookup_by_integer_ids(tmp_path):
    """The engines' lookup join (``docstore.ray`` and ``docstore.spark`` run ``lookup_table``)
    takes an integer id column as the writers do: the id 7 is the document "7"."""
    from docstore._engine_read import StoreSpec, lookup_table

    store = docstore.build(tmp_path / "s", pa.table({"id": [7, 8], "t": ["a", None]}), id_field="id")
    table = pa.table({"q": pa.array([8, 9, 7], pa.int32())})
    joined = lookup_table(store, table, "q", ["t"], "null", StoreSpec.of(tmp_path / "s"))
    assert joined.column("t").to_pylist() == [None, None, "a"]
    assert joined.column("q").to_pylist() == [8, 9, 7]  # the input's column as it was
    with pytest.raises(docstore.SchemaError, match="id column 'q' has Arrow type double"):
        lookup_table(store, pa.table({"q": [7.0]}), "q", ["t"], "null", StoreSpec.of(tmp_path / "s"))


def test_a_hugging_face_array_of_a_dynamic_dimension_into_a_fixed_shape(tmp_path):
    """HF's ``Array2D((None, 3))`` says no fixed shape: its rows are taken by their own shapes
    (before, its extension type's str ``value_type`` raised AttributeError)."""
    datasets = pytest.importorskip("datasets")

    img = datasets.Array2D((None, 3), "float32")
    features = datasets.Features({"id": datasets.Value("string"), "img": img})
    rows = [np.arange(6, dtype=np.float32).reshape(2, 3), np.zeros((1, 3), np.float32)]
    ds = datasets.Dataset.from_dict({"id": ["a", "b"], "img": rows}, features=features)
    store = docstore.build(tmp_path / "ok", ds.select([0]), id_field="id", fields={"img": "float32[2,3]"})
    assert store["a"].img.tolist() == rows[0].tolist()
    with pytest.raises(docstore.FieldTypeError, match=r"doc 'b': field 'img' is float32\[2,3\], got .*shape"):
        docstore.build(tmp_path / "bad", ds, id_field="id", fields={"img": "float32[2,3]"})
