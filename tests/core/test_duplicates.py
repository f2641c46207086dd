"""Repeated ids: refused when added (``on_duplicate="error"``), or one document of each kept
(``"first"``, ``"last"``), by every way into a writer, and across the shards of a collection."""

from __future__ import annotations

import os

import numpy as np
import pytest

import docstore

pa = pytest.importorskip("pyarrow")

FIELDS = {"text": "str", "n": "int64"}


def contents(path) -> list[tuple[str, str, int]]:
    return [(d.doc_id, d.text, d.n) for d in docstore.open(path).values()]


def test_a_repeat_is_refused_when_added_naming_both_positions(tmp_path):
    with docstore.Writer(tmp_path / "s", FIELDS) as w:
        w.add("a", text="1", n=1)
        w.add("b", text="2", n=2)
        with pytest.raises(docstore.DuplicateKeyError) as error:
            w.add("a", text="3", n=3)
        assert error.value.doc_id == "a" and error.value.positions == (0, 2)
        assert "at position 2 (first at position 0)" in str(error.value)
        # A batch with a repeat of an earlier document is refused whole, not half added.
        with pytest.raises(docstore.DuplicateKeyError, match='"b"'):
            w.add_many(["c", "b"], {"text": ["4", "5"], "n": [4, 5]})
        table = pa.table({"doc_id": ["d", "a"], "text": ["6", "7"], "n": [6, 7]})
        with pytest.raises(docstore.DuplicateKeyError, match='"a"'):
            w.add_many(table)
        assert w.count == 2  # the writer is as it was: it goes on
        w.add("c", text="8", n=8)
    assert contents(tmp_path / "s") == [("a", "1", 1), ("b", "2", 2), ("c", "8", 8)]


def add_every_way(w: docstore.Writer) -> None:
    """Repeats by add, add_record, add_many of lists and numpy, and of an Arrow table, within a
    batch and across batches."""
    w.add("a", text="1", n=1)
    w.add("b", {"text": "2", "n": 2})
    w.add("a", text="3", n=3)
    w.add_record({"doc_id": "c", "text": "4", "n": 4}, "doc_id")
    w.add_record({"doc_id": "b", "text": "5", "n": 5}, "doc_id")
    w.add_many(["d", "d", "a"], {"text": ["6", "7", "8"], "n": np.array([6, 7, 8])})
    w.add_many(pa.table({"doc_id": ["e", "c", "e"], "text": ["9", "10", "11"], "n": [9, 10, 11]}))


@pytest.mark.parametrize(
    ("policy", "kept"),
    [
        ("first", [("a", "1", 1), ("b", "2", 2), ("c", "4", 4), ("d", "6", 6), ("e", "9", 9)]),
        ("last", [("b", "5", 5), ("d", "7", 7), ("a", "8", 8), ("c", "10", 10), ("e", "11", 11)]),
    ],
)
def test_first_and_last_keep_one_of_each_id_every_way_in(tmp_path, policy, kept):
    with docstore.Writer(tmp_path / "s", FIELDS, on_duplicate=policy) as w:
        add_every_way(w)
        assert w.duplicates == 6 and w.repeated_ids == ["a", "b", "d", "a", "c"]
    assert w.path == tmp_path / "s"
    assert contents(tmp_path / "s") == kept
    store = docstore.open(tmp_path / "s")
    assert [store[k].text for k, *_ in kept] == [t for _, t, _ in kept]
    store.verify()
    assert sorted(os.listdir(tmp_path)) == ["s"]  # no staging left


def test_last_without_repeats_and_overwrite_and_abort(tmp_path):
    docstore.build(tmp_path / "s", [{"doc_id": "x", "text": "old", "n": 0}])
    with pytest.raises(docstore.StoreExistsError):
        docstore.Writer(tmp_path / "s", FIELDS, on_duplicate="last")
    with docstore.Writer(tmp_path / "s", FIELDS, on_duplicate="last", overwrite=True) as w:
        w.add("a", text="1", n=1)
    assert contents(tmp_path / "s") == [("a", "1", 1)]
    with pytest.raises(RuntimeError), docstore.Writer(tmp_path / "t", FIELDS, on_duplicate="last") as w:
        w.add("a", text="1", n=1)
        w.add("a", text="2", n=2)
        raise RuntimeError
    assert sorted(os.listdir(tmp_path)) == ["s"]
    with pytest.raises(docstore.InvalidArgumentError, match="on_duplicate"):
        docstore.Writer(tmp_path / "u", FIELDS, on_duplicate="keep")


@pytest.mark.parametrize("policy", ["error", "first", "last"])
def test_build_takes_the_policy_for_records_and_tables(tmp_path, policy):
    rows = [{"doc_id": i, "text": t, "n": k} for k, (i, t) in enumerate([("a", "1"), ("b", "2"), ("a", "3")])]
    for name, source in (("rows", rows), ("table", pa.Table.from_pylist(rows))):
        if policy == "error":
            with pytest.raises(docstore.DuplicateKeyError):
                docstore.build(tmp_path / name, source)
            continue
        store = docstore.build(tmp_path / name, source, on_duplicate=policy)
        expected = ["1", "2"] if policy == "first" else ["2", "3"]
        assert [d.text for d in store.values()] == expected


@pytest.mark.parametrize("policy", ["first", "last"])
def test_seal_keeps_one_document_of_an_id_across_shards(tmp_path, policy):
    shards = []
    for name, ids in (("x", "ab"), ("y", "bc"), ("z", "a")):
        docstore.build(tmp_path / name, [{"doc_id": i, "text": name, "n": 0} for i in ids])
        shards.append(tmp_path / name)
    with pytest.raises(docstore.DuplicateKeyError):
        docstore.seal(tmp_path / "e", shards)
    store = docstore.seal(tmp_path / "c", shards, on_duplicate=policy)
    got = [(d.doc_id, d.text) for d in store.values()]
    if policy == "first":
        assert got == [("a", "x"), ("b", "x"), ("c", "y")]
    else:
        assert got == [("b", "y"), ("c", "y"), ("a", "z")]
    store.verify()
    # The shards given are left as they are.
    assert [len(docstore.open(s)) for s in shards] == [2, 2, 1]
    # Appending: "first" drops new repeats of what the collection holds; "last" is refused.
    docstore.build(tmp_path / "w", [{"doc_id": i, "text": "w", "n": 0} for i in "ad"])
    appended = docstore.seal(tmp_path / "c", [tmp_path / "w"], append=True, on_duplicate="first")
    assert [d.doc_id for d in appended.values()][-1] == "d" and len(appended) == 4
    with pytest.raises(docstore.InvalidArgumentError, match="append"):
        docstore.seal(tmp_path / "c", [tmp_path / "w"], append=True, on_duplicate="last")


def test_an_int_key_points_to_positions(tmp_path):
    store = docstore.build(tmp_path / "s", [{"doc_id": "a", "text": "x", "n": 1}])
    with pytest.raises(KeyError) as error:
        store[0]
    assert error.value.args == (0,)  # the key as given, as for any missing id
    assert isinstance(error.value, docstore.NotAnIdError)
    assert str(error.value) == "0: ids are strings; for the document at position 0, use store.at(0)"
    with pytest.raises(KeyError, match=r"not sliced.*use store\.take\(range\(0, 3\)\)") as error:
        store[0:3]
    assert error.value.args == (slice(0, 3),)
    with pytest.raises(KeyError) as error:
        store["zz"]
    assert error.value.args == ("zz",) and not isinstance(error.value, docstore.NotAnIdError)


def test_the_table_of_ids_is_bounded_unless_one_of_each_is_kept(tmp_path):
    """With "error" the writer holds the first key_buffer_bytes / 128 ids (bounded memory): a
    repeat of a later one is still refused, by the key sort at finish; "first" holds them all."""
    w = docstore.Writer(tmp_path / "s", FIELDS, key_buffer_bytes=256)  # 2 ids held
    for doc_id in "abc":
        w.add(doc_id, text="x", n=0)
    with pytest.raises(docstore.DuplicateKeyError) as error:
        w.add("a", text="y", n=1)  # held: refused at once
    assert error.value.positions == (0, 3)
    w.add("c", text="y", n=1)  # not held: taken, then refused at finish
    with pytest.raises(docstore.DuplicateKeyError, match='"c"'):
        w.finish()
    assert not (tmp_path / "s").exists()
    with docstore.Writer(tmp_path / "f", FIELDS, key_buffer_bytes=256, on_duplicate="first") as w:
        for doc_id, text in zip("abcc", "1234"):
            w.add(doc_id, text=text, n=0)
    assert [d.text for d in docstore.open(tmp_path / "f").values()] == ["1", "2", "3"]


@pytest.mark.parametrize(("policy", "kept"), [("first", [0, 1, 3]), ("last", [1, 2, 3])])
def test_a_2d_numpy_column_keeps_its_rows_under_a_policy(tmp_path, policy, kept):
    """A repeat dropped from a 2-D numpy column drops its row, not elements of the flat array."""
    vectors = np.arange(8, dtype=np.float32).reshape(4, 2)
    with docstore.Writer(tmp_path / "s", {"v": "float32[]", "m": "float32[2]"}, on_duplicate=policy) as w:
        w.add_many(["a", "b", "a", "c"], {"v": vectors, "m": vectors})
        assert w.duplicates == 1
    store = docstore.open(tmp_path / "s")
    assert [d.doc_id for d in store.values()] == (["a", "b", "c"] if policy == "first" else ["b", "a", "c"])
    for doc, row in zip(store.values(), kept):
        np.testing.assert_array_equal(doc.v, vectors[row])
        np.testing.assert_array_equal(doc.m, vectors[row])
