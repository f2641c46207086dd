"""Building stores: the writer, build(), input validation and crash safety."""

from __future__ import annotations

import collections
import dataclasses
import os
import signal
import subprocess
import sys
import threading
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

import docstore

from ..conftest import FIELDS, assert_doc_equal, make_docs, run_python, write_store


def leftovers(directory) -> list[str]:
    return sorted(os.listdir(directory))


def test_add_takes_keywords_or_a_dict(tmp_path):
    path = tmp_path / "s"
    with docstore.Writer(path, fields={"text": "str", "n": "int64"}) as w:
        w.add("a", text="x", n=1)
        w.add("b", {"text": "y", "n": 2})
        assert w.count == 2 and not w.closed
        assert "2 docs" in repr(w)
    assert w.closed
    store = docstore.open(path)
    assert [tuple(d) for d in store.values()] == [("a", "x", 1), ("b", "y", 2)]


def test_every_field_type_round_trips(tmp_path):
    fields = {"s": "str", "b": "bytes", "i": "int64", "f": "float64"}
    dtypes = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float32", "float64"]
    fields.update({f"a_{d}": f"{d}[]" for d in dtypes})
    rng = np.random.default_rng(1)
    doc = {"s": "ünïcode ✓ \x00 nul", "b": b"\x00\xff" * 5, "i": -(2**63), "f": float("inf")}
    for d in dtypes:
        info = np.iinfo(d) if d[0] in "iu" else None
        values = [info.min, info.max, 0] if info else [np.nan, -0.0, 1e300 if d == "float64" else 3.4e38]
        doc[f"a_{d}"] = np.concatenate([np.array(values, dtype=d), rng.random(5).astype(d)])
    empty = {k: (v[:0] if isinstance(v, np.ndarray) else type(v)()) for k, v in doc.items()}
    store = write_store(tmp_path / "s", {"full": doc, "empty": empty}, fields=fields)
    for doc_id, expected in (("full", doc), ("empty", empty)):
        got = store[doc_id]
        for name, value in expected.items():
            if isinstance(value, np.ndarray):
                assert got[name].dtype == value.dtype
                np.testing.assert_array_equal(got[name], value)
            else:
                assert got[name] == value
    store.verify()


def test_arrays_accept_lists_and_other_dtypes_when_lossless(tmp_path):
    with docstore.Writer(tmp_path / "s", fields={"t": "uint16[]", "x": "float32[]"}) as w:
        w.add("a", t=[1, 2, 65535], x=[1, 2.5])
        w.add("b", t=np.array([7], dtype=np.int64), x=np.array([1.5], dtype=np.float64))
        w.add("c", t=np.arange(10, dtype=np.uint16)[::2], x=())  # strided, empty tuple
        w.add("d", t=[True, False], x=np.float32([3]))
    store = docstore.open(tmp_path / "s")
    assert store["a"].t.tolist() == [1, 2, 65535] and store["a"].t.dtype == np.uint16
    assert store["b"].x.tolist() == [1.5]
    assert store["c"].t.tolist() == [0, 2, 4, 6, 8] and store["c"].x.size == 0
    assert store["d"].t.tolist() == [1, 0]


def test_object_float16_and_masked_arrays(tmp_path):
    with docstore.Writer(tmp_path / "s", fields={"t": "int16[]"}) as w:
        w.add("objects", t=np.array([1, 2, 300], dtype=object))  # as the same values in a list
        with pytest.raises(docstore.FieldTypeError, match="elements of type object"):
            w.add("mixed", t=np.array([1, "z"], dtype=object))
        with pytest.raises(docstore.FieldTypeError, match="outside"):
            w.add("big", t=np.array([1, 2**40], dtype=object))
        w.add("unmasked", t=np.ma.array([4, 5], mask=[False, False]))
        for masked in (np.ma.array([4, 5], mask=[False, True]), np.ma.array(np.int16([4, 5]), mask=[0, 1])):
            with pytest.raises(docstore.FieldTypeError, match="masked elements; fill them first"):
                w.add("masked", t=masked)  # converted, or of the field's own dtype
        np.save(tmp_path / "t.npy", np.arange(6, dtype=np.int16))
        mapped = np.load(tmp_path / "t.npy", mmap_mode="r")
        w.add("memmap", t=mapped[1:5:2])  # an ndarray subclass, strided: stored as its values
    store = docstore.open(tmp_path / "s")
    assert store["objects"].t.tolist() == [1, 2, 300] and store["unmasked"].t.tolist() == [4, 5]
    assert store["memmap"].t.tolist() == [1, 3]
    assert list(store) == ["objects", "unmasked", "memmap"]
    # build() infers float16[] for float16 arrays, a field of their own type
    halves = docstore.build(tmp_path / "h", [{"doc_id": "a", "h": np.array([0.5, 65504], np.float16)}])
    assert halves.fields == {"h": "float16[]"} and halves["a"].h.tolist() == [0.5, 65504.0]
    with pytest.raises(docstore.FieldTypeError, match="masked elements"):
        docstore.build(tmp_path / "m", [{"doc_id": "a", "v": np.ma.array(np.float32([1, 2]), mask=[0, 1])}])


def test_float_fields_take_any_number_they_hold_exactly(tmp_path):
    values = [2**53, True, np.float32(0.1), np.int64(7), Decimal("0.5"), Fraction(1, 2), -0.0, float("inf")]
    with docstore.Writer(tmp_path / "s", fields={"x": "float64"}) as w:
        for i, value in enumerate(values):
            w.add(f"d{i}", x=value)
        w.add("nan", x=np.float64("nan"))
    store = docstore.open(tmp_path / "s")
    assert [store[f"d{i}"].x for i in range(len(values))] == [float(v) for v in values]
    assert np.isnan(store["nan"].x)


def test_lists_of_ints_beyond_int64_keep_every_digit(tmp_path):
    # numpy reads such lists as floats (or objects): they must not be rounded, nor refused as floats.
    big = [2**64 - 1, 1, 2**63]
    with docstore.Writer(tmp_path / "s", fields={"u": "uint64[]", "f": "float64[]"}) as w:
        w.add("a", u=big, f=[2**64, 3])
    store = docstore.open(tmp_path / "s")
    assert store["a"].u.tolist() == big and store["a"].u.dtype == np.uint64
    assert store["a"].f.tolist() == [2.0**64, 3.0]


@pytest.mark.parametrize(
    ("fields", "value", "message"),
    [
        ({"t": "str"}, 3, "field 't' is str, got int|field \"t\" is str, got int"),
        ({"t": "str"}, b"x", "is str, got bytes"),
        ({"t": "bytes"}, "x", "is bytes, got str"),
        ({"t": "int64"}, 1.5, "is int64, got float"),
        ({"t": "int64"}, "1", "is int64, got str"),
        ({"t": "int64"}, 2**64, "is int64, got 18446744073709551616: outside its range"),
        ({"t": "float64"}, 2**53 + 1, "cannot hold exactly"),
        ({"t": "float64"}, np.int64(2**53 + 1), "cannot hold exactly"),
        ({"t": "float64"}, Decimal("0.1"), "cannot hold exactly"),
        ({"t": "float64"}, "1.0", "is float64, got str"),
        ({"t": "int32[]"}, [1.5], "floating-point"),
        ({"t": "int32[]"}, [2**40], "outside"),
        ({"t": "uint8[]"}, [-1], "outside"),
        ({"t": "int32[]"}, "abc", "got str"),
        ({"t": "int32[]"}, [[1, 2]], "one dimension"),
        ({"t": "int32[]"}, 5, "got int"),
        ({"t": "int32[]"}, ["a"], "elements of type"),
        ({"t": "int32[]"}, [[1], [1, 2]], "numpy cannot read"),
        ({"t": "float32[]"}, [1e300, 0.5], "too large for float32"),
        ({"t": "float64[]"}, [2**60 + 1], "cannot hold exactly"),
        ({"t": "float32[]"}, np.array([2**24 + 1]), "cannot hold exactly"),
        ({"t": "uint64[]"}, [-1, 2**64 - 1], "outside"),
        ({"t": "int64[]"}, [-1, 2**63], "outside"),
        ({"t": "float64[]"}, [2**64 + 1, 2**70], "cannot hold exactly"),
        ({"t": "float64[]"}, [1.5, None], "None"),
    ],
)
def test_wrong_types_are_field_type_errors_naming_doc_and_field(tmp_path, fields, value, message):
    path = tmp_path / "s"
    with pytest.raises(docstore.FieldTypeError, match=message) as info:
        with docstore.Writer(path, fields=fields) as w:
            w.add(
                "good", **{"t": {"str": "x", "bytes": b"x", "int64": 1, "float64": 1.0}.get(fields["t"], [1])}
            )
            w.add("the-culprit", t=value)
    assert "the-culprit" in str(info.value)
    assert isinstance(info.value, TypeError) and isinstance(info.value, docstore.DocstoreError)
    assert leftovers(tmp_path) == [], "a failed build leaves nothing behind"


def test_missing_and_extra_fields_and_bad_ids(tmp_path):
    w = docstore.Writer(tmp_path / "s", fields={"text": "str", "n": "int64"})
    with pytest.raises(docstore.SchemaError, match="missing field .n."):
        w.add("a", text="x")
    with pytest.raises(docstore.SchemaError, match="unknown field"):
        w.add("a", text="x", n=1, extra=2)
    # As many names as fields, one of them unknown: the unknown one is named, not the missing one.
    with pytest.raises(docstore.SchemaError, match='doc "a": unknown field "extra"'):
        w.add("a", text="x", extra=2)
    with pytest.raises(docstore.SchemaError, match='unknown field "extra"'):
        w.add_record({"doc_id": "a", "text": "x", "extra": 2}, "doc_id")
    with pytest.raises(docstore.SchemaError, match="either as a dict or as keywords"):
        w.add("a", {"text": "x"}, n=1)
    with pytest.raises(docstore.InvalidKeyError, match="non-empty"):
        w.add("", text="x", n=1)
    for bad in (5, None, b"bytes", ("t",)):
        with pytest.raises(docstore.InvalidKeyError, match="must be str"):
            w.add(bad, text="x", n=1)
    with pytest.raises(docstore.InvalidKeyError, match="not valid Unicode"):
        w.add("\ud800", text="x", n=1)
    # Rejected documents were not added; the writer is still usable.
    w.add("ok", text="x", n=1)
    assert w.count == 1
    w.finish()
    assert list(docstore.open(tmp_path / "s")) == ["ok"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"text": "string"}, "unknown field type"),
        ({"text": "float8[]"}, "unknown field type"),
        ({"text": "str??"}, "unknown field type"),
        ({"doc_id": "str"}, "reserved"),
        ({"_x": "str"}, "identifier"),
        ({"a b": "str"}, "identifier"),
        ({"class": "str"}, "keyword"),
        ({"a²": "str"}, "identifier"),
        ({"a" * 70_000: "str"}, "identifier"),
        ({"text": 5}, "fields must map"),
        ("text", "fields must map"),
    ],
)
def test_bad_schemas_fail_before_any_file_exists(tmp_path, fields, message):
    with pytest.raises(docstore.SchemaError, match=message):
        docstore.Writer(tmp_path / "s", fields=fields)
    assert leftovers(tmp_path) == []


def test_bad_options(tmp_path):
    with pytest.raises(docstore.InvalidArgumentError, match="compression level"):
        docstore.Writer(tmp_path / "s", fields={"t": "str"}, level=13)
    with pytest.raises(docstore.InvalidArgumentError, match="dict_size must be 0 .* to 65536 bytes"):
        docstore.Writer(tmp_path / "s", fields={"t": "str"}, dict_size=65537)
    with pytest.raises(FileNotFoundError, match="directory .*such/dir does not exist"):
        docstore.Writer(tmp_path / "no" / "such" / "dir" / "s", fields={"t": "str"})
    with pytest.raises(docstore.StoreIOError, match="is a directory"):
        docstore.Writer(tmp_path, fields={"t": "str"}, overwrite=True)
    (tmp_path / "a-file").write_text("")
    with pytest.raises(docstore.StoreIOError, match="a-file is not a directory"):
        docstore.Writer(tmp_path / "a-file" / "s", fields={"t": "str"})
    for no_name in ("", tmp_path / ".."):
        with pytest.raises(docstore.StoreIOError, match="does not name a file"):
            docstore.Writer(no_name, fields={"t": "str"})
    for option in ("level", "dict_size", "batch_bytes", "key_buffer_bytes"):
        for bad in (-2, 2**40) if option == "level" else (-1, 2**62):
            if option == "key_buffer_bytes" and bad > 0:
                continue  # a limit, not an allocation: any size is valid
            with pytest.raises(docstore.InvalidArgumentError, match=option):
                docstore.Writer(tmp_path / "s", fields={"t": "str"}, **{option: bad})
        with pytest.raises(docstore.InvalidArgumentError, match=f"{option}=.* is out of range"):
            docstore.Writer(tmp_path / "s", fields={"t": "str"}, **{option: 2**70})
        # bool is an int to Python, never a level or a size: level=True is not level 1
        with pytest.raises(TypeError, match=f"{option} must be an int, got bool"):
            docstore.Writer(tmp_path / "s", fields={"t": "str"}, **{option: True})
        with pytest.raises(TypeError):
            docstore.Writer(tmp_path / "s", fields={"t": "str"}, **{option: "3"})
    assert leftovers(tmp_path) == ["a-file"]


def test_check_writer_raises_what_the_writer_raises_and_creates_nothing(tmp_path):
    from docstore import _docstore

    cases = [
        ({"t": "str"}, {"level": 13}),
        ({"t": "str"}, {"dict_size": 65537}),
        ({"t": "str"}, {"batch_bytes": 2**62}),
        ({"t": "str"}, {"format_version": 9}),
        ({"t": "str"}, {"dictionary": bytes(65537)}),
        ({"t": "str"}, {"level": True}),
        ({"t": "str"}, {"dict_size": 2**70}),
        ({"t": "no-such-type"}, {}),
        ({"doc_id": "str"}, {}),
    ]
    for fields, options in cases:
        with pytest.raises(Exception) as by_writer:
            docstore.Writer(tmp_path / "s", fields=fields, **options)
        with pytest.raises(type(by_writer.value)) as by_check:
            _docstore.check_writer(fields, **options)
        assert str(by_check.value) == str(by_writer.value), (fields, options)
    _docstore.check_writer({"t": "str", "v": "float32[]"}, level=9, dict_size=0, format_version=2)
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("key_buffer_bytes", [64 << 20, 200])
def test_duplicate_ids_raise_naming_the_id_and_leave_no_store(tmp_path, key_buffer_bytes):
    path = tmp_path / "s"
    with pytest.raises(docstore.DuplicateKeyError, match="dup-7") as info:
        with docstore.Writer(path, fields={"t": "str"}, key_buffer_bytes=key_buffer_bytes) as w:
            for i in range(100):
                w.add(f"id-{i}", t="x")
            w.add("dup-7", t="x")
            w.add("dup-7", t="y")
    assert info.value.doc_id == "dup-7"
    assert isinstance(info.value, ValueError)
    assert leftovers(tmp_path) == []


def test_exception_inside_with_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError, match="boom"):
        with docstore.Writer(tmp_path / "s", fields={"t": "str"}) as w:
            for i in range(10_000):
                w.add(str(i), t="text " * 20)
            raise RuntimeError("boom")
    assert leftovers(tmp_path) == []
    with pytest.raises(docstore.ClosedError):
        w.add("x", t="y")


def test_existing_store_is_kept_unless_overwrite(tmp_path):
    path = tmp_path / "s"
    write_store(path, {"a": {"t": "old"}}, fields={"t": "str"})
    with pytest.raises(docstore.StoreExistsError, match="overwrite=True"):
        docstore.Writer(path, fields={"t": "str"})
    assert docstore.open(path)["a"].t == "old"
    # Created meanwhile by someone else: still not clobbered.
    w = docstore.Writer(tmp_path / "t", fields={"t": "str"})
    w.add("a", t="new")
    write_store(tmp_path / "t", {"a": {"t": "theirs"}}, fields={"t": "str"})
    with pytest.raises(FileExistsError):
        w.finish()
    assert docstore.open(tmp_path / "t")["a"].t == "theirs"
    write_store(path, {"a": {"t": "new"}}, fields={"t": "str"}, overwrite=True)
    assert docstore.open(path)["a"].t == "new"
    assert leftovers(tmp_path) == ["s", "t"]


def test_targets_with_the_longest_file_names_build_and_upgrade(tmp_path):
    """A target name may use all 255 bytes a file name can have: the scratch directory beside it
    has a bounded name, not the target's name plus a suffix."""
    names = ["s" * 255, "é" * 127 + "x", "t" * 234]
    for name in names:
        with docstore.Writer(tmp_path / name, fields={"t": "str"}) as w:
            w.add("a", t=name[:5])
        assert docstore.open(tmp_path / name)["a"].t == name[:5]
    # Written again in place (overwrite), as version 1, and upgraded beside it and in place.
    old, new = tmp_path / ("o" * 255), tmp_path / ("n" * 255)
    write_store(old, {"a": {"t": "x"}}, fields={"t": "str"}, format_version=1)
    write_store(old, {"a": {"t": "y"}}, fields={"t": "str"}, format_version=1, overwrite=True)
    assert docstore.upgrade(old, new)["a"].t == "y"
    assert docstore.upgrade(old).info()["format_version"] == 3
    # A collection sealed into a directory of such a name (its scratch directory is the same kind).
    sealed = tmp_path / ("c" * 255)
    docstore.seal(sealed, [new])
    assert docstore.open(sealed)["a"].t == "y"
    assert leftovers(tmp_path) == sorted([*names, old.name, new.name, sealed.name])


def test_a_killed_build_leaves_no_store_at_the_target(tmp_path):
    path = tmp_path / "killed.docstore"
    proc = run_python(
        f"""
        import os, signal, docstore
        with docstore.Writer({str(path)!r}, fields={{"t": "str"}}) as w:
            for i in range(200_000):
                w.add(str(i), t="some text " * 10)
                if i == 150_000:
                    os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    assert proc.returncode == -signal.SIGKILL
    assert not path.exists()
    # Only the hidden scratch directory may remain; it is never mistaken for a store.
    dead = leftovers(tmp_path)
    assert len(dead) == 1 and dead[0].startswith(".killed.docstore.")

    # The next writer of the same target removes it, but not the scratch of a live writer.
    live = subprocess.Popen(
        [sys.executable, "-c", WRITER_THAT_WAITS.format(path=str(path))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert live.stdout.readline().strip() == "ready"
        with docstore.Writer(path, fields={"t": "str"}) as w:
            w.add("a", t="x")
            scratch = [n for n in leftovers(tmp_path) if n.endswith(".docstore-tmp")]
            assert len(scratch) == 2 and dead[0] not in scratch  # its own and the live one's
    finally:
        live.communicate("", timeout=60)
    assert live.returncode == 0
    assert leftovers(tmp_path) == ["killed.docstore"]


WRITER_THAT_WAITS = """
import sys, docstore
w = docstore.Writer({path!r}, fields={{"t": "str"}}, overwrite=True)
print("ready", flush=True)
sys.stdin.read()  # until the test closes stdin
w.abort()
"""


def test_empty_store(tmp_path):
    with docstore.Writer(tmp_path / "s", fields={"t": "str"}):
        pass
    store = docstore.open(tmp_path / "s")
    assert len(store) == 0 and list(store) == [] and store.get_many(["a"]) == {}
    assert "a" not in store
    with pytest.raises(IndexError):
        store.at(0)
    store.verify()
    assert store.info()["ratio"] is None or store.info()["count"] == 0


def test_add_many_with_lists_numpy_and_pyarrow(tmp_path):
    pa = pytest.importorskip("pyarrow")
    ids = [f"d{i}" for i in range(1000)]
    texts = [f"text {i}" for i in range(1000)]
    labels = np.arange(1000)
    tokens = [np.arange(i % 7, dtype=np.int32) for i in range(1000)]
    fields = {"text": "str", "label": "int64", "tokens": "int32[]"}
    with docstore.Writer(tmp_path / "lists", fields=fields) as w:
        w.add_many(ids, {"text": texts, "label": labels, "tokens": tokens})
    table = pa.table(
        {
            "doc_id": ids,
            "text": texts,
            "label": labels,
            "tokens": pa.array([t.tolist() for t in tokens], type=pa.list_(pa.int32())),
        }
    )
    with docstore.Writer(tmp_path / "table", fields=fields) as w:
        w.add_many(table)
    with docstore.Writer(tmp_path / "batches", fields=fields) as w:
        for batch in table.to_batches(max_chunksize=300):
            w.add_many(batch.column("doc_id"), batch)
    with docstore.Writer(tmp_path / "matrix", fields={"v": "float32[]"}) as w:
        w.add_many(ids[:3], {"v": np.ones((3, 4), dtype=np.float32)})
    expected = docstore.open(tmp_path / "lists")
    for name in ("table", "batches"):
        got = docstore.open(tmp_path / name)
        assert list(got) == ids
        for a, b in zip(got.values(), expected.values()):
            assert a.text == b.text and a.label == b.label and a.tokens.tolist() == b.tokens.tolist()
    assert docstore.open(tmp_path / "matrix")["d2"].v.tolist() == [1, 1, 1, 1]

    w = docstore.Writer(tmp_path / "bad", fields=fields)
    with pytest.raises(docstore.SchemaError, match="missing"):
        w.add_many(ids, {"text": texts})
    with pytest.raises(docstore.SchemaError, match="values for"):
        w.add_many(ids, {"text": texts[:5], "label": labels, "tokens": tokens})
    with pytest.raises(docstore.SchemaError, match="id column"):
        w.add_many(table.drop_columns(["doc_id"]))
    # A null inside a list column is refused by name (numpy would have made it a NaN).
    for dtype, values in (("float32", [1.0, None]), ("int32", [1, None])):
        nulls = pa.table({"doc_id": ["n"], "v": pa.array([values], pa.list_(pa.type_for_alias(dtype)))})
        with docstore.Writer(tmp_path / "nulls", fields={"v": f"{dtype}[]"}) as w2:
            with pytest.raises(docstore.FieldTypeError, match="doc 'n'.*None"):
                w2.add_many(nulls)
            w2.abort()
    w.abort()


def test_arrow_text_columns_are_read_from_arrow_buffers(tmp_path):
    # Text-only tables take the path that reads Arrow's offsets and data directly: every string
    # layout, slices, several chunks and non-ASCII text must come back exactly.
    pa = pytest.importorskip("pyarrow")
    ids = [f"d{i}-é" * (1 + i % 3) for i in range(3000)]
    texts = ["" if i % 97 == 0 else f"text {i} ünïcode " * (i % 5) for i in range(3000)]
    raws = [bytes([i % 256]) * (i % 4) for i in range(3000)]
    fields = {"text": "str", "raw": "bytes"}
    table = pa.table(
        {
            "doc_id": pa.chunked_array([ids[:1000], ids[1000:]], pa.string()),
            "text": pa.chunked_array([texts[:1500], texts[1500:]], pa.large_string()),
            "raw": pa.array(raws, pa.binary()),
        }
    )
    with docstore.Writer(tmp_path / "table", fields=fields, batch_bytes=10_000) as w:
        w.add_many(table.slice(0, 10))
        for batch in table.slice(10).to_batches(max_chunksize=700):  # sliced, offset arrays
            w.add_many(batch)
    store = docstore.open(tmp_path / "table")
    assert list(store) == ids
    assert store.take(range(3000), fields=["text", "raw"]) == list(zip(texts, raws))

    w = docstore.Writer(tmp_path / "bad", fields=fields)
    # Arrow validates strings only when asked: one built from raw buffers is checked here.
    offsets = pa.py_buffer(np.array([0, 2, 3], dtype=np.int32).tobytes())
    unchecked = pa.Array.from_buffers(pa.string(), 2, [None, offsets, pa.py_buffer(b"ok\xff")])
    bad_utf8 = pa.table({"doc_id": ["a", "b"], "text": unchecked, "raw": [b"", b""]})
    with pytest.raises(docstore.DocstoreError, match="row 1 is not valid UTF-8"):
        w.add_many(bad_utf8)
    # A column's type must be the field's, as a value's must be for add(): binary is not text,
    # and a string column is not bytes (the bytes would otherwise be its UTF-8, silently).
    with pytest.raises(docstore.FieldTypeError, match='doc "a": field "text" is str, got bytes'):
        w.add_many(pa.table({"doc_id": ["a"], "text": pa.array([b"ok"], pa.binary()), "raw": [b""]}))
    with pytest.raises(docstore.FieldTypeError, match='doc "a": field "raw" is bytes, got str'):
        w.add_many(pa.table({"doc_id": ["a"], "text": ["ok"], "raw": pa.array(["x"], pa.large_string())}))
    with pytest.raises(docstore.InvalidKeyError):
        w.add_many(pa.table({"doc_id": [""], "text": ["x"], "raw": [b""]}))
    with pytest.raises(docstore.FieldTypeError):  # a null takes the per-value path and its checks
        w.add_many(pa.table({"doc_id": ["n"], "text": pa.array([None], pa.string()), "raw": [b""]}))
    w.abort()
    assert not (tmp_path / "bad").exists()


def _arrow_cases():
    """(field type, Arrow column of 7 rows) for every Arrow type the writer reads from buffers."""
    pa = pytest.importorskip("pyarrow")
    ints = [0, 1, -1, 7, 100, -100, 42]
    lists = [[1, 2, 3], [], [4], [5, 6], [], [7, 8, 9, 10], [11]]
    cases = [(f"int64<{t}", pa.array(ints, t)) for t in ("int8", "int16", "int32", "int64")]
    cases += [(f"int64<{t}", pa.array([abs(v) for v in ints], t)) for t in ("uint8", "uint16", "uint32")]
    cases += [
        ("int64<uint64", pa.array([0, 2**63 - 1, 1, 2, 3, 4, 5], pa.uint64())),
        ("int64<int64 extremes", pa.array([-(2**63), 2**63 - 1, 0, 1, -1, 2, 3], pa.int64())),
        ("int64<bool", pa.array([True, False, True, True, False, False, True])),
        ("int64<dictionary", pa.array(ints).dictionary_encode()),
        ("float64<float64", pa.array([0.5, -0.0, float("nan"), float("inf"), -1e300, 1e-300, 3.0])),
        ("float64<float32", pa.array([0.1, 2.5, float("-inf"), 1e38, -3.0, 0.0, 7.0], pa.float32())),
        ("float64<float16", pa.array(np.array([0.1, 2.5, 1, 65504, -3, 0, 7], np.float16))),
        ("float64<int32", pa.array(ints, pa.int32())),
        ("float64<int64 exact", pa.array([2**53, -(2**62), -(2**63), 0, 1, 2, 3], pa.int64())),
        ("float64<uint64 exact", pa.array([2**63, 2**64 - 2**11, 0, 1, 2, 3, 4], pa.uint64())),
        ("float64<bool", pa.array([True, False, True, True, False, False, True])),
        ("float32[]<list<float32>", pa.array(lists, pa.list_(pa.float32()))),
        (
            "float32[]<list<float16>",
            pa.array([np.array(v, np.float16) for v in lists], pa.list_(pa.float16())),
        ),
        ("float32[]<list<float64>", pa.array([[x / 3 for x in v] for v in lists], pa.list_(pa.float64()))),
        ("float64[]<list<int64>", pa.array(lists, pa.list_(pa.int64()))),
        ("int64[]<large_list<int64>", pa.array(lists, pa.large_list(pa.int64()))),
        ("int8[]<list<int32>", pa.array(lists, pa.list_(pa.int32()))),
        ("uint8[]<list<bool>", pa.array([[x % 2 == 0 for x in v] for v in lists], pa.list_(pa.bool_()))),
        ("uint64[]<list<uint64>", pa.array([[2**64 - x for x in v] for v in lists], pa.list_(pa.uint64()))),
        ("int16[]<fixed_size_list<int16>[2]", pa.array([[i, -i] for i in ints], pa.list_(pa.int16(), 2))),
        (
            "float32[]<fixed_size_list<float64>[3]",
            pa.array([[i / 7, i, -i] for i in ints], pa.list_(pa.float64(), 3)),
        ),
        ("str<string", pa.array(["a", "", "ünï", "x" * 50, "b", "c", "d"])),
        ("str<large_string", pa.array(["a", "", "ünï", "x" * 50, "b", "c", "d"], pa.large_string())),
        ("bytes<binary", pa.array([b"a", b"", b"\xff", b"x" * 50, b"b", b"c", b"d"])),
        ("bytes<fixed_size_binary", pa.array([bytes([i]) * 3 for i in range(7)], pa.binary(3))),
    ]
    if hasattr(pa, "string_view"):
        cases.append(
            ("str<string_view", pa.array(["a", "", "ünï", "x" * 50, "b", "c", "d"], pa.string_view()))
        )
    return cases


def _no_row_path(monkeypatch):
    """Makes the value-by-value path of add_many fail: what goes through passed as buffers."""
    from docstore import _writer

    def refuse(*args, **kwargs):
        raise AssertionError("an Arrow batch took the value-by-value path")

    monkeypatch.setattr(_writer, "as_list", refuse)
    monkeypatch.setattr(docstore.Writer, "_add_columns", refuse)


def _row_path(monkeypatch):
    """Makes add_many take the value-by-value path for every input (as before Arrow numeric
    columns were read from buffers)."""
    from docstore import _writer

    monkeypatch.setattr(_writer, "_arrow_columns", lambda *args: None)


def _write_arrow(path, fields, *tables):
    with docstore.Writer(path, fields=fields, batch_bytes=300, dict_size=0) as w:
        for table in tables:
            w.add_many(table)
    return docstore.open(path)


@pytest.mark.parametrize(("case", "column"), _arrow_cases(), ids=[c for c, _ in _arrow_cases()])
def test_arrow_columns_from_buffers_make_the_store_the_row_path_makes(tmp_path, monkeypatch, case, column):
    # Each supported Arrow type, whole, sliced (offset arrays), in several chunks and in batches,
    # against the same tables taken value by value: the same store, byte for byte.
    pa = pytest.importorskip("pyarrow")
    fields = {"c": case.split("<")[0]}
    n = len(column)
    ids = pa.array([f"d{i}" for i in range(n)])
    table = pa.table({"doc_id": ids, "c": column})
    chunked = pa.table({"doc_id": ids, "c": pa.chunked_array([column.slice(0, 3), column.slice(3)])})
    inputs = {
        "whole": [table],
        "sliced": [table.slice(0, 2), table.slice(2, 4), table.slice(6)],
        "chunked": [chunked],
        "batches": list(chunked.to_batches(max_chunksize=2)),
        "empty": [table.slice(0, 0), table.slice(n)],
    }
    with monkeypatch.context() as m:
        _no_row_path(m)
        got = {
            name: _write_arrow(tmp_path / f"buffers-{name}", fields, *tables)
            for name, tables in inputs.items()
        }
    with monkeypatch.context() as m:
        _row_path(m)
        want = _write_arrow(tmp_path / "rows", fields, table)
        empty = _write_arrow(tmp_path / "rows-empty", fields, *inputs["empty"])
    for name, store in got.items():
        expected = empty if name == "empty" else want
        assert store.fingerprint == expected.fingerprint, name
        assert (tmp_path / f"buffers-{name}").read_bytes() == (
            tmp_path / ("rows-empty" if name == "empty" else "rows")
        ).read_bytes()
    assert len(want) == n and len(empty) == 0


def test_a_table_of_every_field_type_goes_through_buffers_together(tmp_path, monkeypatch):
    pa = pytest.importorskip("pyarrow")
    cases = _arrow_cases()
    fields = {f"c{i}": case.split("<")[0] for i, (case, _) in enumerate(cases)}
    columns = {f"c{i}": column for i, (_, column) in enumerate(cases)}
    table = pa.table({"doc_id": [f"d{i}" for i in range(7)], **columns})
    with monkeypatch.context() as m:
        _no_row_path(m)
        got = _write_arrow(tmp_path / "buffers", fields, table.slice(0, 3), table.slice(3))
        # ids and columns given apart, as Arrow arrays in a dict, take the same way
        with docstore.Writer(tmp_path / "dict", fields=fields, batch_bytes=300, dict_size=0) as w:
            w.add_many(table.column("doc_id"), {name: table.column(name) for name in fields})
    with monkeypatch.context() as m:
        _row_path(m)
        want = _write_arrow(tmp_path / "rows", fields, table)
    assert got.fingerprint == want.fingerprint == docstore.open(tmp_path / "dict").fingerprint
    assert [tuple(map(str, d)) for d in got.values()] == [tuple(map(str, d)) for d in want.values()]


def _refusals():
    pa = pytest.importorskip("pyarrow")
    return [
        (
            "int64",
            pa.array([1, None, 3]),
            'doc "b": field "c" is int64, got None; declare the field int64\\? to store None',
        ),
        (
            "float64",
            pa.array([1.0, 2.0, None]),
            'doc "c": field "c" is float64, got None; declare the field float64\\? to store None',
        ),
        (
            "str",
            pa.array(["x", None, "z"]),
            'doc "b": field "c" is str, got None; declare the field str\\? to store None',
        ),
        (
            "int64",
            pa.array([1, 2**64 - 1, 3], pa.uint64()),
            "is int64, got 18446744073709551615: outside its range",
        ),
        ("int64", pa.array([1.0, 2.0, 3.0]), 'doc "a": field "c" is int64, got float'),
        ("int64", pa.array(["1", "2", "3"]), 'doc "a": field "c" is int64, got str'),
        ("float64", pa.array([1, 2**53 + 1, 3]), "got 9007199254740993, which float64 cannot hold exactly"),
        (
            "float64",
            pa.array([2**63 - 1, 1, 3]),
            "got 9223372036854775807, which float64 cannot hold exactly",
        ),
        ("float64", pa.array([1, 2**64 - 1, 3], pa.uint64()), "got 18446744073709551615, which float64"),
        ("bytes", pa.array(["x", "y", "z"]), 'doc "a": field "c" is bytes, got str'),
        (
            "float32[]",
            pa.array([[1.0], None, [2.0]], pa.list_(pa.float32())),
            "doc 'b': field 'c' is float32\\[\\], got None; declare the field float32\\[\\]\\? to store None",
        ),
        ("float32[]", pa.array([[1.0], [2.0, None], []], pa.list_(pa.float32())), "doc 'b'.*None"),
        ("int32[]", pa.array([[1], [], [2**40]], pa.list_(pa.int64())), "doc 'c'.*outside \\[-2147483648"),
        ("int32[]", pa.array([[], [1.5], []], pa.list_(pa.float64())), "doc 'b'.*floating-point elements"),
        ("float32[]", pa.array([[1.0], [1e300]], pa.list_(pa.float64())), "doc 'b'.*too large for float32"),
        ("float32[]", pa.array([[1], [2**24 + 1]], pa.list_(pa.int64())), "doc 'b'.*cannot hold exactly"),
        ("float32[]", pa.array([["x"], ["y"]], pa.list_(pa.string())), "doc 'a'.*float32"),
        ("int64[]", pa.array([1, 2, 3]), "doc 'a': field 'c' is int64\\[\\], got int"),
    ]


@pytest.mark.parametrize(
    ("kind", "column", "message"),
    _refusals(),
    ids=[f"{k}-{c.type}-{i}" for i, (k, c, _) in enumerate(_refusals())],
)
def test_arrow_columns_are_refused_as_the_row_path_refuses_them(tmp_path, monkeypatch, kind, column, message):
    # Nulls, values out of range and wrong element types: the same error, by row and name, as
    # each value taken by itself gives, and nothing added.
    pa = pytest.importorskip("pyarrow")
    table = pa.table({"doc_id": ["a", "b", "c"][: len(column)], "c": column})
    errors = []
    for path in ("default", "rows"):
        with monkeypatch.context() as m:
            if path == "rows":
                _row_path(m)
            with docstore.Writer(tmp_path / path, fields={"c": kind}) as w:
                with pytest.raises(docstore.FieldTypeError, match=message) as info:
                    w.add_many(table)
                assert w.count == 0
                w.abort()
        errors.append((type(info.value), str(info.value)))
    assert errors[0] == errors[1]


@pytest.mark.parametrize(
    ("ids", "error"),
    [
        (["c", "c", "e"], "DuplicateKeyError"),
        (["c", "", "e"], "InvalidKeyError"),
    ],
)
def test_an_arrow_batch_of_numbers_checks_its_ids_before_adding_any(tmp_path, monkeypatch, ids, error):
    pa = pytest.importorskip("pyarrow")
    _no_row_path(monkeypatch)
    fields = {"n": "int64", "x": "float64", "v": "float32[]"}
    table = pa.table(
        {
            "doc_id": ids,
            "n": [1, 2, 3],
            "x": [0.5, 1.5, 2.5],
            "v": pa.array([[1.0], [], [2.0, 3.0]], pa.list_(pa.float32())),
        }
    )
    with docstore.Writer(tmp_path / "s", fields=fields, batch_bytes=1) as w:
        with pytest.raises(getattr(docstore, error)):
            w.add_many(table)
        assert w.count == 0
        w.add_many(table.set_column(0, "doc_id", pa.array(["c", "d", "e"])))
    assert [d.n for d in docstore.open(tmp_path / "s").values()] == [1, 2, 3]


def test_add_arrow_columns_checks_its_buffers(tmp_path):
    ids = (np.array([0, 1, 2], np.int64), np.frombuffer(b"ab", np.uint8))
    offsets = np.array([0, 1, 3], np.int64)
    with docstore.Writer(tmp_path / "s", fields={"n": "int64", "v": "float32[]"}) as w:
        for columns, message in [
            ([np.array([1, 2], np.int64)], "one column per field"),
            (
                [np.array([1.0, 2.0]), (offsets, np.zeros(3, np.float32))],
                'field "n": expected an int64 array',
            ),
            ([np.array([1, 2]), (offsets, np.zeros(3, np.float64))], "contiguous, native float32 array"),
            (
                [np.array([1, 2]), (offsets, np.zeros(2, np.float32))],
                "offsets must be non-decreasing and within",
            ),
            ([np.array([1, 2]), (offsets[::-1].copy(), np.zeros(3, np.float32))], "non-decreasing"),
            ([np.array([1, 2, 3]), (offsets, np.zeros(3, np.float32))], "3 values for 2 doc ids"),
            ([np.arange(4)[::2], (offsets, np.zeros(3, np.float32))], "contiguous"),
        ]:
            with pytest.raises(docstore.SchemaError, match=message):
                w._add_arrow_columns(ids, columns)
        assert w.count == 0
        w._add_arrow_columns(ids, [np.array([5, 6]), (offsets, np.arange(3, dtype=np.float32))])
    store = docstore.open(tmp_path / "s")
    assert [(d.n, d.v.tolist()) for d in store.values()] == [(5, [0.0]), (6, [1.0, 2.0])]


def test_build_from_dicts_namedtuples_dataclasses(tmp_path):
    records = [{"doc_id": f"d{i}", "text": f"t{i}", "n": i, "x": i / 2, "v": [i, 1]} for i in range(50)]
    store = docstore.build(tmp_path / "dicts", records)
    assert store.fields == {"text": "str", "n": "int64", "x": "float64", "v": "int64[]"}
    assert store["d7"].x == 3.5 and store["d7"].v.tolist() == [7, 1]

    Rec = collections.namedtuple("Rec", "pid text")
    store = docstore.build(tmp_path / "nt", [Rec(f"p{i}", "x") for i in range(5)], id_field="pid")
    assert list(store) == [f"p{i}" for i in range(5)] and store.fields == {"text": "str"}

    @dataclasses.dataclass
    class Pair:
        doc_id: str
        sentence1: str
        label: float

    store = docstore.build(
        tmp_path / "dc", [Pair("a", "s", 1.0)], fields={"sentence1": "str", "label": "float64"}
    )
    assert store["a"].label == 1.0

    with pytest.raises(docstore.SchemaError, match="id field"):
        docstore.build(tmp_path / "noid", [{"text": "x"}])
    with pytest.raises(docstore.SchemaError, match="its type cannot be inferred"):
        docstore.build(tmp_path / "none", [{"doc_id": "a", "text": None}])
    with pytest.raises(docstore.SchemaError, match="no records"):
        docstore.build(tmp_path / "empty", [])
    with pytest.raises(docstore.FieldTypeError, match="d1"):
        docstore.build(tmp_path / "mixed", [{"doc_id": "d0", "n": 1}, {"doc_id": "d1", "n": "2"}])
    assert not (tmp_path / "mixed").exists() and not (tmp_path / "noid").exists()
    assert len(docstore.build(tmp_path / "empty", [], fields={"t": "str"})) == 0


def test_compression_options_change_size_not_content(tmp_path):
    docs = make_docs(2000, seed=3)
    sizes = {}
    for level, dict_size in [(-1, 65536), (0, 0), (0, 65536), (9, 65536), (12, 65536)]:
        store = write_store(tmp_path / f"l{level}-{dict_size}", docs, level=level, dict_size=dict_size)
        sizes[level, dict_size] = store.info()["stored_bytes"]
        for doc_id in list(docs)[::97]:
            assert_doc_equal(store[doc_id], doc_id, docs[doc_id])
        assert store.take(range(len(docs)), field="text") == [d["text"] for d in docs.values()]
    assert sizes[0, 65536] < sizes[0, 0] < sizes[-1, 65536]
    assert sizes[9, 65536] < sizes[0, 65536]


def test_level_minus_one_stores_documents_uncompressed(tmp_path):
    docs = make_docs(500, seed=4)
    store = write_store(tmp_path / "none", docs, level=-1)
    info = store.info()
    assert info["codec"] == "none"  # and no dictionary: there is nothing to compress against
    assert info["stored_bytes"] > info["raw_bytes"]
    store.verify()
    for doc_id, doc in zip(docs, store.take(range(500))):
        assert_doc_equal(doc, doc_id, docs[doc_id])
    with docstore.open(tmp_path / "none", read="pread") as by_pread:
        for doc_id in list(docs)[::7]:
            assert_doc_equal(by_pread[doc_id], doc_id, docs[doc_id])


def test_documents_larger_than_16_mib(tmp_path):
    big = "".join(f"{i % 997} " for i in range(5_000_000))
    assert len(big) > 16 << 20
    blob = os.urandom(17 << 20)
    store = write_store(
        tmp_path / "big",
        {"small": {"t": "x", "b": b""}, "big": {"t": big, "b": blob}},
        fields={"t": "str", "b": "bytes"},
    )
    assert store["big"].t == big and store["big"].b == blob and store["small"].t == "x"
    store.verify()


def test_fields_in_schema_order_are_reported(tmp_path):
    w = docstore.Writer(tmp_path / "s", fields=[("b", "str"), ("a", "int")])
    assert w.fields == {"b": "str", "a": "int64"}
    w.abort()
    assert FIELDS  # the shared schema is non-empty


@pytest.mark.parametrize("bad", ["type", "missing id", "duplicate", "bad id"])
def test_a_rejected_add_many_adds_nothing(tmp_path, bad):
    """A batch is checked whole before any row goes in, so the corrected batch can be retried."""
    path = tmp_path / "s"
    ids, text, n = ["c", "d", "e"], ["C", "D", "E"], [1, 2, 3]
    if bad == "type":
        n = [1, "x", 3]
    elif bad == "missing id":
        ids = ["c", None, "e"]
    elif bad == "duplicate":
        ids = ["c", "d", "c"]
    else:
        ids = ["c", "", "e"]
    error = {"type": docstore.FieldTypeError, "duplicate": docstore.DuplicateKeyError}.get(
        bad, docstore.InvalidKeyError
    )
    with docstore.Writer(path, fields={"text": "str", "n": "int64"}) as w:
        w.add_many(["a", "b"], {"text": ["A", "B"], "n": [1, 2]})
        with pytest.raises(error) as info:
            w.add_many(ids, {"text": text, "n": n})
        assert w.count == 2 and not w.closed
        w.add_many(["c", "d", "e"], {"text": ["C", "D", "E"], "n": [3, 4, 5]})
    if bad == "duplicate":
        assert info.value.doc_id == "c"
    assert list(docstore.open(path).keys()) == ["a", "b", "c", "d", "e"]


@pytest.mark.parametrize(
    ("ids", "n", "error"),
    [
        (["c", "c", "e"], [1, 2, "x"], "DuplicateKeyError"),  # repeat at row 1, bad value at 2
        (["c", "d", "c"], [1, 2, "x"], "DuplicateKeyError"),  # both at row 2: the id comes first
        (["c", "d", "e", "c"], [1, "x", 3, 4], "FieldTypeError"),  # bad value at 1, repeat at 3
        (["c", "d", "", "c"], [1, 2, 3, 4], "InvalidKeyError"),  # empty id at 2, repeat at 3
        (["c", "c", "", "e"], [1, 2, 3, 4], "DuplicateKeyError"),  # repeat at 1, empty id at 2
    ],
)
def test_a_batch_with_several_problems_reports_the_first_in_row_order(tmp_path, ids, n, error):
    with docstore.Writer(tmp_path / "s", fields={"n": "int64"}) as w:
        with pytest.raises(getattr(docstore, error)):
            w.add_many(ids, {"n": n})
        assert w.count == 0
        w.abort()


@pytest.mark.parametrize(
    ("ids", "error"),
    [
        (["c", "c", ""], "DuplicateKeyError"),
        (["c", "", "c"], "InvalidKeyError"),
    ],
)
def test_an_arrow_batch_with_several_problems_reports_the_first_in_row_order(tmp_path, ids, error):
    pa = pytest.importorskip("pyarrow")
    with docstore.Writer(tmp_path / "s", fields={"text": "str"}) as w:
        with pytest.raises(getattr(docstore, error)):
            w.add_many(pa.array(ids), pa.table({"text": ["A", "B", "C"]}))
        assert w.count == 0
        w.abort()


@pytest.mark.parametrize("bad", ["duplicate", "empty id", "invalid utf-8"])
def test_a_rejected_arrow_batch_adds_nothing(tmp_path, bad):
    pa = pytest.importorskip("pyarrow")
    path = tmp_path / "s"
    ids = pa.array(["c", "d", "c" if bad == "duplicate" else "e"])
    if bad == "empty id":
        ids = pa.array(["c", "", "e"])
    text = pa.array(["C", "D", "E"])
    if bad == "invalid utf-8":  # Arrow does not check the bytes of a string array built from buffers
        data = pa.py_buffer(b"CD\xffE")
        offsets = pa.py_buffer(np.array([0, 1, 3, 4], dtype=np.int32).tobytes())
        text = pa.Array.from_buffers(pa.string(), 3, [None, offsets, data])
    error = {
        "duplicate": docstore.DuplicateKeyError,
        "empty id": docstore.InvalidKeyError,
        "invalid utf-8": docstore.SchemaError,
    }[bad]
    with docstore.Writer(path, fields={"text": "str"}, batch_bytes=1) as w:
        w.add_many(pa.array(["a", "b"]), pa.table({"text": ["A", "B"]}))
        with pytest.raises(error):
            w.add_many(ids, pa.table({"text": text}))
        assert w.count == 2
        w.add_many(pa.array(["c", "d", "e"]), pa.table({"text": ["C", "D", "E"]}))
    assert [d.text for d in docstore.open(path).values()] == ["A", "B", "C", "D", "E"]


def test_a_forked_child_cannot_use_or_remove_its_parents_writer(tmp_path):
    """The child's copy of a writer has no compression thread and shares the parent's scratch
    directory: using it fails clearly, dropping it touches nothing, and the parent finishes."""
    path = tmp_path / "s"
    w = docstore.Writer(path, fields={"text": "str"})
    for i in range(1000):
        w.add(f"k{i}", text="x" * 100)
    pid = os.fork()
    if pid == 0:  # the child: report through the exit code, never return into pytest
        code = 1
        try:
            try:
                w.finish()
            except docstore.ClosedError as e:
                code = 0 if "forked child" in str(e) else 2
            w.abort()
            del w
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    w.add("last", text="y")
    w.finish()
    store = docstore.open(path)
    assert len(store) == 1001 and store["last"].text == "y"
    assert leftovers(tmp_path) == ["s"]


def test_build_rejects_none_records_and_mappings_instead_of_dropping_them(tmp_path):
    with pytest.raises(docstore.SchemaError, match="got NoneType"):
        docstore.build(tmp_path / "a", [None, {"doc_id": "a", "t": "x"}], fields={"t": "str"})
    with pytest.raises(TypeError, match="not a mapping"):
        docstore.build(tmp_path / "b", {"a": {"doc_id": "a", "t": "x"}})
    with pytest.raises(docstore.SchemaError, match="a 'doc_id' field beside the id field 'pid'"):
        docstore.build(tmp_path / "c", [{"pid": "p1", "doc_id": "d1", "t": "x"}], id_field="pid")
    assert leftovers(tmp_path) == []


def test_add_takes_any_mapping_and_add_many_refuses_one_str(tmp_path):
    import types

    with docstore.Writer(tmp_path / "s", fields={"t": "str"}) as w:
        w.add("a", types.MappingProxyType({"t": "x"}))
        with pytest.raises(TypeError, match="dict of field values"):
            w.add("b", 5)
        with pytest.raises(TypeError, match="one str"):
            w.add_many("rs", {"t": ["R", "S"]})
    assert list(docstore.open(tmp_path / "s").keys()) == ["a"]


def test_a_child_forked_while_a_thread_was_inside_the_writer_fails_instead_of_hanging(tmp_path):
    """The thread that held the writer's lock at the fork does not exist in the child, so the
    child's copy must refuse work without waiting for that lock."""
    inside, release = threading.Event(), threading.Event()

    class Blocking:  # an int64 value whose conversion parks the adding thread inside `add`
        def __index__(self) -> int:
            inside.set()
            release.wait()
            return 7

    w = docstore.Writer(tmp_path / "s", fields={"n": "int64"})
    adder = threading.Thread(target=w.add, args=("a",), kwargs={"n": Blocking()})
    adder.start()
    inside.wait()
    pid = os.fork()
    if pid == 0:  # the child: report through the exit code, never return into pytest
        code = 1
        try:
            signal.alarm(20)  # a hang kills the child, which fails the test
            try:
                w.add("b", n=1)
            except docstore.ClosedError as e:
                code = 0 if "forked child" in str(e) else 2
            if code == 0 and not (w.closed and "docstore.Writer" in repr(w)):
                code = 3
            w.abort()  # nothing to abandon here: the store is the parent's
        finally:
            os._exit(code)
    release.set()
    adder.join()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    w.add("b", n=2)
    w.finish()
    assert [d.n for d in docstore.open(tmp_path / "s").values()] == [7, 2]


def test_a_pandas_dataframe_builds_as_a_table_its_missing_values_none(tmp_path):
    """build(df) and add_many(df) read a DataFrame through pyarrow: NaN and None are nulls (a
    nullable field's None; a field that is not nullable refuses them, naming the document), the
    index is the id column when it is named id_field, integer ids are decimal text."""
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    df = pd.DataFrame(
        {"doc_id": ["a", "b", "c"], "title": ["x", np.nan, None], "n": [1.0, np.nan, 3.0], "k": [1, 2, 3]}
    )
    store = docstore.build(tmp_path / "a", df)
    assert store.fields == {"title": "str?", "n": "float64?", "k": "int64"}
    assert list(store.values()) == [("a", "x", 1.0, 1), ("b", None, None, 2), ("c", None, 3.0, 3)]
    by_index = docstore.build(tmp_path / "b", df.set_index("doc_id"))
    assert list(by_index.values()) == list(store.values())
    with pytest.raises(docstore.SchemaError, match=r'doc "b": field "title" is str, got None'):
        docstore.build(tmp_path / "c", df, fields={"title": "str", "k": "int64"})
    assert not (tmp_path / "c").exists()
    numbered = pd.DataFrame({"id": [7, 8], "t": ["p", "q"]})
    assert list(docstore.build(tmp_path / "d", numbered, id_field="id")) == ["7", "8"]
    with docstore.Writer(tmp_path / "e", {"title": "str?", "k": "int64"}) as writer:
        writer.add_many(df)
        writer.add_many(["z"], df[["title", "k"]].iloc[1:2])
    assert list(docstore.open(tmp_path / "e").values())[-2:] == [("c", None, 3), ("z", None, 2)]


def test_build_types_fields_from_the_first_records_a_none_making_them_nullable(tmp_path):
    """build(records) without fields: a field None in any of the first 1,000 records is nullable,
    one None later widens it (tests/core/test_infer.py), one None first takes its type from a
    later record, one None throughout names fields=."""
    records = [{"doc_id": "a", "t": None, "v": np.ones(2, np.float32)}, {"doc_id": "b", "t": "y", "v": None}]
    store = docstore.build(tmp_path / "a", records)
    assert store.fields == {"t": "str?", "v": "float32[]?"}
    assert store["a"].t is None and store["b"].v is None and store["b"].t == "y"
    late = [{"doc_id": str(i), "t": "x"} for i in range(1000)] + [{"doc_id": "late", "t": None}]
    with pytest.warns(UserWarning, match=r"widened 't' to 'str\?'"):
        assert docstore.build(tmp_path / "b", iter(late))["late"].t is None
    with pytest.raises(docstore.SchemaError, match=r"field 't' is None in the one record.*'t': 'str\?'"):
        docstore.build(tmp_path / "c", [{"doc_id": "a", "t": None}])
