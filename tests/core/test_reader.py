"""The read API against an oracle dict."""

from __future__ import annotations

import os
import pickle
import random
import sys
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

import docstore

from ..conftest import FIELDS, assert_doc_equal, run_python, write_store


def test_len_contains_and_getitem_match_the_oracle(store, oracle):
    assert len(store) == len(oracle)
    for doc_id, doc in oracle.items():
        assert doc_id in store
        assert_doc_equal(store[doc_id], doc_id, doc)
    assert "nope" not in store
    assert 42 not in store
    assert None not in store


def test_missing_ids_raise_keyerror_or_return_the_default(store):
    with pytest.raises(KeyError) as info:
        store["missing-id"]
    assert info.value.args == ("missing-id",)
    for key in (123, None, ("a", "b")):  # the exception carries the key as given
        with pytest.raises(KeyError) as info:
            store[key]
        assert info.value.args == (key,)
    assert store.get("missing-id") is None
    assert store.get("missing-id", "fallback") == "fallback"
    assert store.get("missing-id", field="text") is None


def test_doc_has_attribute_item_and_dict_access(store, oracle):
    doc_id = next(iter(oracle))
    doc = store[doc_id]
    assert isinstance(doc, docstore.Doc) and isinstance(doc, tuple)
    assert doc._fields == ("doc_id", *FIELDS)
    assert doc["text"] == doc.text == doc[1]
    assert doc["doc_id"] == doc_id
    assert list(doc._asdict()) == ["doc_id", *FIELDS]
    with pytest.raises(KeyError):
        doc["nope"]
    same = pickle.loads(pickle.dumps(doc))
    assert same.doc_id == doc.doc_id and same.text == doc.text and type(same) is type(doc)
    doc_id2, text, *_ = doc
    assert doc_id2 == doc_id and text == doc.text


def test_field_selection_returns_plain_values(store, oracle):
    doc_id, doc = next(iter(oracle.items()))
    assert store.get(doc_id, field="text") == doc["text"]
    assert store.get(doc_id, field="label") == doc["label"]
    np.testing.assert_array_equal(store.get(doc_id, field="tokens"), doc["tokens"])
    assert store.at(0, field="raw") == doc["raw"]
    ids = list(oracle)[:50]
    assert store.get_many(ids, field="text") == {i: oracle[i]["text"] for i in ids}
    assert store.take([3, 1], field="score") == [oracle[ids[3]]["score"], oracle[ids[1]]["score"]]
    with pytest.raises(docstore.SchemaError, match="no field .nope."):
        store.get(doc_id, field="nope")
    assert store.get(doc_id, field="doc_id") == doc_id and store.at(1, field="doc_id") == ids[1]
    assert store.take([2, 0], field="doc_id") == [ids[2], ids[0]]


def test_several_fields_come_back_as_tuples(store, oracle):
    ids = list(oracle)
    doc = oracle[ids[3]]
    assert store.get(ids[3], fields=["label", "text"]) == (doc["label"], doc["text"])
    assert store.at(3, fields=("text",)) == (doc["text"],)
    assert store.at(3, fields=("doc_id", "label", "doc_id")) == (ids[3], doc["label"], ids[3])
    got = store.take([3, 4], fields=["score", "label"])
    assert got == [(oracle[i]["score"], oracle[i]["label"]) for i in ids[3:5]]
    assert store.get_many(ids[:40], fields=["text"]) == {i: (oracle[i]["text"],) for i in ids[:40]}
    with pytest.raises(docstore.SchemaError, match="not both"):
        store.get(ids[0], field="text", fields=["text"])
    with pytest.raises(docstore.SchemaError, match="no field"):
        store.take([0], fields=["text", "nope"])
    # One name is not a sequence of names (it would be one-letter names).
    for call, arg in [(store.get, ids[0]), (store.get_many, ids[:2]), (store.at, 0), (store.take, [0])]:
        with pytest.raises(TypeError, match="got the str 'text'; use field= for one field"):
            call(arg, fields="text")
        with pytest.raises(TypeError, match="got the bytes b'text'"):
            call(arg, fields=b"text")
    # Lazy readers check their arguments when called, not when (or if) first iterated.
    with pytest.raises(TypeError, match="got the str 'text'"):
        store.values(fields="text")
    with pytest.raises(docstore.SchemaError, match="no field .nope."):
        store.get_many_iter([], field="nope")
    with pytest.raises(TypeError, match="one str"):
        store.get_many_iter(ids[0])


def test_ids_of_a_str_subclass_come_back_as_str(store, oracle):
    """numpy's str_ (ids read from an array) is found, and comes back as a plain str."""
    ids = list(oracle)[:3]
    asked = [np.str_(i) for i in ids]
    assert type(store[asked[0]].doc_id) is str and store[asked[0]].doc_id == ids[0]
    assert type(store.get(asked[1], field="doc_id")) is str
    got = store.get_many(asked)
    assert list(got) == ids and all(type(k) is str and type(d.doc_id) is str for k, d in got.items())


def test_positions_of_many_ids(store, oracle):
    ids = list(oracle)
    request = [ids[5], "missing", ids[0], 42, ids[-1], *ids[100:1100]]
    got = store.positions(request)
    assert got.dtype == np.int64
    assert got.tolist() == [5, -1, 0, -1, len(ids) - 1, *range(100, 1100)]
    assert store.positions([]).tolist() == []


def test_one_str_where_ids_are_expected_is_refused(store, oracle):
    """A str is an iterable of characters: read as ids, it would silently find nothing."""
    doc_id = next(iter(oracle))
    for call in (store.get_many, store.positions, lambda i: list(store.get_many_iter(i))):
        with pytest.raises(TypeError, match="one str"):
            call(doc_id)
    assert list(store.get_many_iter([doc_id], fields=["doc_id", "label"])) == [
        (doc_id, oracle[doc_id]["label"])
    ]
    assert next(iter(store.values(fields=["doc_id"]))) == (doc_id,)


def test_get_many_keeps_request_order_and_omits_missing(store, oracle):
    ids = list(oracle)
    rng = random.Random(0)
    for size in (0, 1, 5, 31, 32, 1000):
        request = rng.sample(ids, size)
        request.insert(size // 2, "missing")
        got = store.get_many(request)
        assert list(got) == [i for i in request if i != "missing"]
        for doc_id, doc in got.items():
            assert_doc_equal(doc, doc_id, oracle[doc_id])
    assert list(store.get_many(iter(ids[:3]))) == ids[:3]
    assert list(store.get_many([ids[0], ids[0], 5, None])) == [ids[0]]
    # A missing id, repeated, before and between found ones; ids that are no UTF-8.
    request = ["missing", ids[1], "missing", ids[0], "\ud800", ids[1], "\ud800", ids[2]]
    assert list(store.get_many(request * 200, field="doc_id")) == [ids[1], ids[0], ids[2]]
    got = [d.doc_id for d in store.get_many_iter([*ids[:10], "missing"])]
    assert got == ids[:10]
    # One document per id asked, duplicates included, wherever the hidden chunks split the ids.
    from docstore._store import _CHUNK

    for gap in (_CHUNK - 2, _CHUNK - 1, _CHUNK):
        request = [ids[0], *(["missing"] * gap), ids[0], 5]
        assert store.get_many_iter(request, field="doc_id").__next__() == ids[0]
        assert list(store.get_many_iter(request, field="doc_id")) == [ids[0], ids[0]]


def test_decode_buffers_reused_across_calls_never_leak_earlier_records(store, oracle):
    # A thread reuses its decode buffers from call to call: a small call after a large one (or a
    # single lookup after a batch) must see only its own records.
    ids = list(oracle)
    rng = random.Random(1)
    for size in (2000, 300, 10, 1, 700, 0, 3):
        positions = [rng.randrange(len(ids)) for _ in range(size)]
        assert [d.doc_id for d in store.take(positions)] == [ids[p] for p in positions]
        request = [ids[p] for p in positions]
        got = store.get_many(request, field="text")
        assert got == {i: oracle[i]["text"] for i in request}
        if positions:
            assert_doc_equal(store.at(positions[0]), ids[positions[0]], oracle[ids[positions[0]]])
            assert store.get(request[-1], field="text") == oracle[request[-1]]["text"]


# Text of every width CPython stores a str in (1 byte ASCII / Latin-1, 2 bytes, 4 bytes), with the
# widest character at the start, in the middle, at the end and across 16-byte blocks.
TEXTS = [
    "",
    "plain ascii",
    "é",
    "ÿ at the Latin-1 edge",
    "price: £5 and 10 € later" + "x" * 40,
    "Ā just past Latin-1",
    "κείμενο στα ελληνικά",
    "\uffff at the end of the BMP",
    "日本語のテキスト",
    "astral 😀 emoji",
    "\U0001d518\U0001d52b astral letters",
    "a" * 15 + "£" + "b" * 31 + "£",
    "£" * 40,
]


def test_str_fields_of_every_width_come_back_equal_and_compact(tmp_path):
    # Batch lookups make their str fields in the decoding threads; each must be the very str
    # written (equal, same hash) in CPython's most compact form (same size in memory).
    docs = {
        f"id-{i}": {"title": TEXTS[i % len(TEXTS)], "n": i, "text": TEXTS[(i * 5) % len(TEXTS)] * (i % 4)}
        for i in range(700)
    }
    store = write_store(
        tmp_path / "widths.docstore", docs, fields={"title": "str", "n": "int64", "text": "str"}
    )
    ids = list(docs)
    rng = random.Random(3)
    request = rng.sample(ids, 600)  # large enough to decode in parallel

    def check(got: str, want: str) -> None:
        assert got == want and hash(got) == hash(want)
        # Against a fresh copy: `want` itself may carry the UTF-8 copy that writing it cached
        # (strings of one character are shared singletons: no fresh copy to compare with).
        if len(want) > 1:
            assert sys.getsizeof(got) == sys.getsizeof(want.encode().decode()), (got, want)

    for doc_id in ids[:50]:
        check(store[doc_id].title, docs[doc_id]["title"])
        check(store.get(doc_id, field="text"), docs[doc_id]["text"])
        title, text = store.get(doc_id, fields=["title", "text"])
        check(title, docs[doc_id]["title"])
        check(text, docs[doc_id]["text"])
    for field in ("title", "text"):
        got = store.get_many(request, field=field)
        assert list(got) == request
        for doc_id, value in got.items():
            check(value, docs[doc_id][field])
    for doc_id, doc in store.get_many(request).items():
        check(doc.title, docs[doc_id]["title"])
        check(doc.text, docs[doc_id]["text"])
        assert doc.n == docs[doc_id]["n"]
    positions = [store.position(i) for i in request]
    for doc_id, (key, text) in zip(request, store.take(positions, fields=["doc_id", "text"])):
        check(key, doc_id)
        check(text, docs[doc_id]["text"])
    for pos in positions[:50]:
        check(store.at(pos, field="title"), docs[ids[pos]]["title"])
    assert store.take(positions, field="n") == [docs[i]["n"] for i in request]


def test_str_with_its_widest_character_anywhere_comes_back_equal(tmp_path):
    # The widest character decides the str's width: put one of each width at every offset across
    # two 16-byte blocks, and next to the characters on either side of each width's edge.
    wide = ["é", "ÿ", "Ā", "\u07ff", "\u0800", "€", "\uffff", "\U00010000", "😀"]
    texts = [("a" * k) + w + ("b" * (40 - k)) for w in wide for k in range(41)]
    texts += ["ÿĀ", "\u07ff\u0800", "\uffff\U00010000", "é€😀", "a" * 200 + "😀", "a" * 200 + "é"]
    docs = {f"t{i}": {"text": t} for i, t in enumerate(texts)}
    store = write_store(tmp_path / "wide.docstore", docs, fields={"text": "str"})
    ids = list(docs)
    assert store.get_many(ids, field="text") == {i: docs[i]["text"] for i in ids}
    assert store.take(range(len(ids)), field="text") == texts
    assert [store[i].text for i in ids] == texts


def test_single_lookups_make_strs_of_every_width_short_and_long(tmp_path):
    # A single lookup makes the strs of a short record with Python held (an ASCII check 64 bytes
    # at a time, else CPython's decoder) and prepares those of a long one (4 KiB and more) while
    # Python is released: each must be the very str written, compact, whichever way it took.
    wide = ["é", "Ā", "€", "😀"]
    texts = ["a" * k + w + "b" * (140 - k) for w in wide for k in range(141)]
    texts += ["c" * k for k in (0, 1, 63, 64, 65, 127, 128, 129)]
    texts += ["x" * k + w + "y" * (9000 - k) for w in wide for k in (0, 4095, 4096, 8192, 9000)]
    texts += ["z" * 4000, "z" * 4090 + "é", "z" * 4100, "z" * 4095 + "é", "z" * 9000]
    docs = {f"w{i}": {"text": t, "n": i} for i, t in enumerate(texts)}
    store = write_store(tmp_path / "single.docstore", docs, fields={"text": "str", "n": "int64"})

    def check(got: str, want: str) -> None:
        assert got == want and hash(got) == hash(want)
        if len(want) > 1:
            assert sys.getsizeof(got) == sys.getsizeof(want.encode().decode()), want[:20]

    for pos, (doc_id, doc) in enumerate(docs.items()):
        check(store[doc_id].text, doc["text"])
        check(store.get(doc_id, field="text"), doc["text"])
        text, n = store.get(doc_id, fields=["text", "n"])
        check(text, doc["text"])
        assert n == doc["n"]
        check(store.at(pos).text, doc["text"])


@pytest.mark.parametrize(
    ("format_version", "caught_by"), [(1, "not UTF-8"), (2, "fails its check"), (3, "fails its check")]
)
def test_str_field_that_is_not_utf8_raises_corrupt_store_error_on_every_read(
    tmp_path, format_version, caught_by
):
    # Damage inside a document must surface as CorruptStoreError, never as a wrong or malformed
    # str: in format 2 the document's check catches it first, in format 1 (no checks) the UTF-8
    # validation of the record does.
    docs = {f"d{i}": {"text": f"doc{i}-" + "é" * (i % 2) + "Zq9xK" * (i == 7)} for i in range(300)}
    path = tmp_path / "damaged.docstore"
    write_store(path, docs, fields={"text": "str"}, dict_size=0, format_version=format_version).close()
    data = bytearray(path.read_bytes())
    at = data.find(b"Zq9xK")  # stored as is: too short to compress without a dictionary
    assert at > 0 and data.count(b"Zq9xK") == 1
    data[at] = 0xFF  # never valid in UTF-8
    path.write_bytes(bytes(data))
    with docstore.open(path) as store:
        for read in (
            lambda: store["d7"],
            lambda: store.get("d7", field="text"),
            lambda: store.get_many(list(docs), field="text"),  # parallel: 300 ids
            lambda: store.take([7]),
            lambda: store.at(7, field="text"),
        ):
            with pytest.raises(docstore.CorruptStoreError, match=caught_by):
                read()
        assert store.get("d6", field="text") == docs["d6"]["text"]
        with pytest.raises(docstore.CorruptStoreError):
            store.verify()


def test_position_access(store, oracle):
    ids = list(oracle)
    assert store.at(0).doc_id == ids[0]
    assert store.at(-1).doc_id == ids[-1]
    for pos in (0, 1, len(ids) // 2, len(ids) - 1):
        assert store.position(ids[pos]) == pos
        assert_doc_equal(store.at(pos), ids[pos], oracle[ids[pos]])
    positions = [5, 0, 5, len(ids) - 1, -2]
    assert [d.doc_id for d in store.take(positions)] == [ids[p] for p in positions]
    assert [d.doc_id for d in store.take(np.arange(40, 140))] == ids[40:140]
    assert store.take((p for p in (3, 1)), field="doc_id") == [ids[3], ids[1]]  # any iterable
    with pytest.raises(IndexError):
        store.at(len(ids))
    with pytest.raises(IndexError):
        store.take([0, -len(ids) - 1])
    # Beyond 64 bits is out of range too, as for a list (not an OverflowError).
    for huge in (2**63, -(2**63) - 1, 2**100):
        with pytest.raises(IndexError):
            store.at(huge)
        with pytest.raises(IndexError):
            store.take([0, huge])
        with pytest.raises(IndexError):
            store.take(iter([huge]))
    with pytest.raises(TypeError):
        store.at("0")
    # Integer arrays of any width are positions; a boolean array is a mask, not positions, and
    # floats are not positions either.
    expected = [ids[p] for p in (5, 0, len(ids) - 1)]
    for positions in (
        np.array([5, 0, -1], dtype=np.int32),
        np.array([5, 0, len(ids) - 1], dtype=np.uint16),
        np.array([9, 5, 7, 0, 3, -1])[1::2],
    ):
        assert store.take(positions, field="doc_id") == expected
    with pytest.raises(TypeError, match="boolean array"):
        store.take(np.array([True, False]))
    for bad in (np.array([1.0]), np.array([[1, 2]])):
        with pytest.raises(TypeError, match="1-D sequence of ints"):
            store.take(bad)
    with pytest.raises(IndexError):
        store.take(np.array([2**64 - 1], dtype=np.uint64))
    with pytest.raises(KeyError):
        store.position("missing")


def test_torch_tensors_are_positions_read_as_arrays(store, oracle):
    torch = pytest.importorskip("torch")
    ids = list(oracle)
    assert store.take(torch.tensor([5, 0, -1]), field="doc_id") == [ids[5], ids[0], ids[-1]]
    with pytest.raises(TypeError, match="boolean array"):
        store.take(torch.tensor([True, False]))
    with pytest.raises(TypeError, match="1-D sequence of ints"):
        store.take(torch.tensor([1.5]))


def test_single_lookups_alone_and_beside_another_thread_read_the_same_untracked_docs(store_path):
    """Alone in its process a lookup keeps the GIL and builds the Doc where the record was decoded;
    beside another thread it releases the GIL around a read into a buffer: the same documents,
    never tracked by the garbage collector (they hold no container that could make a cycle)."""
    code = f"""
    import gc, threading
    import docstore

    store = docstore.open({str(store_path)!r}, read=READ)
    ids = list(store.keys())[::97]

    def lookups():
        docs = [store[i] for i in ids] + [store.get(i) for i in ids]
        docs += [store.at(p) for p in (0, 5, -1)]
        assert not any(gc.is_tracked(d) for d in docs)
        assert len(store.get_many(ids[:3])) == 3 and not gc.is_tracked(store.take([1])[0])
        values = [store.get(i, field="text") for i in ids] + [store.at(3, field="tokens")]
        values += [store.get(i, fields=["doc_id", "label"]) for i in ids]
        assert store.get("missing") is None and store.get("missing", 7) == 7
        try:
            store["missing"]
            raise AssertionError("no KeyError")
        except KeyError:
            pass
        return repr(docs + values)

    assert threading.active_count() == 1
    alone = lookups()
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    beside = lookups()
    stop.set()
    other.join()
    assert alone == beside
    print("ok", len(ids))
    """
    for read in ("mmap", "pread"):
        run = run_python(code.replace("READ", repr(read)))
        assert run.returncode == 0 and run.stdout.startswith("ok"), run.stderr


def test_iteration_keys_values_items_in_insertion_order(store, oracle):
    assert list(store) == list(oracle)
    keys = store.keys()
    assert len(keys) == len(oracle) and list(keys) == list(oracle) and next(iter(oracle)) in keys
    assert [d.doc_id for d in store.values()] == list(oracle)
    assert [k for k, _ in store.items()] == list(oracle)
    assert list(store.values(field="label")) == [d["label"] for d in oracle.values()]
    assert isinstance(store, Mapping)
    assert list(reversed(store)) == list(oracle)[::-1]
    # values() and items() are views, as a Mapping's are: len, in, and iteration as often as wanted.
    labels = store.values(field="label")
    assert len(labels) == len(oracle) and list(labels) == list(labels)
    assert next(iter(oracle.values()))["label"] in labels and "not a label" not in labels
    items = store.items()
    first_id = next(iter(oracle))
    assert len(items) == len(oracle) and (first_id, store[first_id]) in items and ("missing", 1) not in items
    assert [k for k, _ in items] == [k for k, _ in items] == list(oracle)
    ids = list(oracle)
    for start, stop in [(0, 5), (-3, len(ids) + 10), (-len(ids) - 5, 2), (5, 2), (-1, -3), (10, -10)]:
        assert store.keys_range(start, stop) == ids[start:stop], (start, stop)


def test_fields_info_and_repr(store, oracle):
    assert store.fields == FIELDS
    info = store.info()
    assert info["count"] == len(oracle)
    assert info["fields"] == FIELDS
    assert info["stored_bytes"] > 0 and info["raw_bytes"] > 0
    assert info["ratio"] == pytest.approx(info["stored_bytes"] / info["raw_bytes"])
    assert info["codec"].startswith(f"lz4-hc level {docstore._docstore.DEFAULT_LEVEL} + ")
    assert info["format_version"] == docstore.FORMAT_VERSION == 3
    assert info["checked_reads"] is True
    assert str(len(oracle)) in repr(store)
    store.verify()


def test_pread_reads_the_same_documents_and_pickles_its_mode(store_path, oracle):
    ids = list(oracle)
    with docstore.open(store_path, read="pread") as s:
        assert s.read == "pread" and s.info()["read"] == "pread"
        for doc_id in ids[:50]:
            assert_doc_equal(s[doc_id], doc_id, oracle[doc_id])
        got = s.get_many(ids, field="text")
        assert got == {i: oracle[i]["text"] for i in ids}
        again = pickle.loads(pickle.dumps(s))
        assert again.read == "pread" and again[ids[7]].text == oracle[ids[7]]["text"]
    assert docstore.open(store_path).read == "mmap"
    with pytest.raises(ValueError, match="pread"):
        docstore.open(store_path, read="direct")


def evict_from_page_cache(path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


@pytest.mark.parametrize("read", ["mmap", "pread"])
def test_batches_in_a_cold_cache_read_the_same_documents(store_path, oracle, read):
    # A batch that finds its pages uncached asks for all of them at once before reading them
    # (madvise / posix_fadvise WILLNEED); what it returns must not change.
    ids = list(oracle)
    random.Random(3).shuffle(ids)
    positions = {doc_id: p for p, doc_id in enumerate(oracle)}
    for round_ in range(3):
        evict_from_page_cache(store_path)
        with docstore.open(store_path, read=read) as s:
            batch = [*ids[round_ * 700 : round_ * 700 + 700], "absent", ids[0]]
            got = s.get_many(batch, field="text")
            assert got == {i: oracle[i]["text"] for i in batch if i in oracle}
            evict_from_page_cache(store_path)
            picks = [positions[i] for i in batch[:300]]
            assert s.take(picks, field="text") == [oracle[i]["text"] for i in batch[:300]]
            evict_from_page_cache(store_path)
            assert s.positions(batch[:500]).tolist() == picks + [positions[i] for i in batch[300:500]]


def test_close_and_context_manager(store_path):
    with docstore.open(store_path) as s:
        assert len(s) > 0
    assert s.closed
    assert "closed" in repr(s)
    with pytest.raises(docstore.ClosedError):
        len(s)
    with pytest.raises(docstore.ClosedError):
        s.get_many(["x"])
    s.close()  # twice is fine
    with pytest.raises(docstore.ClosedError, match="is closed"):
        with s:
            pass
    with docstore.open(os.fsencode(store_path)) as by_bytes:  # a path as os.listdir(b".") gives it
        assert len(by_bytes) > 0


def test_fingerprint_identifies_the_contents(store_path, oracle, tmp_path):
    with docstore.open(store_path) as a, docstore.open(store_path, read="pread") as b:
        assert a.fingerprint == b.fingerprint and isinstance(a.fingerprint, int)
        with open(store_path, "rb") as f:  # the header checksum, docs/format.md section 3
            assert a.fingerprint == int.from_bytes(f.read(512)[504:], "little")
    docs = {f"d{i}": {"text": f"doc {i}"} for i in range(5)}
    fields = {"text": "str"}
    stores = [write_store(tmp_path / "a", docs, fields), write_store(tmp_path / "b", docs, fields)]
    stores.append(write_store(tmp_path / "c", dict(reversed(docs.items())), fields))
    prints = [s.fingerprint for s in stores]  # written again, the same; in another order, not
    assert prints[0] == prints[1] != prints[2]
    closed = stores[0]
    closed.close()
    with pytest.raises(docstore.ClosedError):
        _ = closed.fingerprint


def test_pickles_as_its_path_before_and_after_use(store_path, oracle):
    store = docstore.open(store_path)
    fresh = pickle.loads(pickle.dumps(store))
    assert len(fresh) == len(oracle)
    doc_id = next(iter(oracle))
    store[doc_id]
    store.get_many(list(oracle)[:100])
    data = pickle.dumps(store)
    assert len(data) < 300, "a store pickles as its path, never its data"
    again = pickle.loads(data)
    assert again[doc_id].text == oracle[doc_id]["text"]


def test_a_store_opened_by_a_relative_path_unpickles_from_any_directory(
    store_path, oracle, monkeypatch, tmp_path
):
    store_path = Path(store_path)
    monkeypatch.chdir(store_path.parent)
    store = docstore.open(store_path.name)
    assert store.path == store_path
    monkeypatch.chdir(tmp_path)  # e.g. a training script that moves to its output directory
    again = pickle.loads(pickle.dumps(store))
    assert len(again) == len(oracle) and again.path == store_path


def test_open_errors_are_clear(tmp_path):
    with pytest.raises(docstore.StoreNotFoundError):
        docstore.open(tmp_path / "nothing-here")
    with pytest.raises(FileNotFoundError):
        docstore.open(tmp_path / "nothing-here")
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"this is not a store" * 100)
    with pytest.raises(docstore.CorruptStoreError, match="not a docstore file"):
        docstore.open(garbage)
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    with pytest.raises(docstore.CorruptStoreError):
        docstore.open(empty)
    with pytest.raises(docstore.DocstoreError):
        docstore.open(tmp_path)


def test_newer_format_version_is_rejected_with_a_clear_error(tmp_path, store_path):
    data = bytearray(Path(store_path).read_bytes())
    data[8] = 6
    newer = tmp_path / "newer"
    newer.write_bytes(bytes(data))
    with pytest.raises(docstore.UnsupportedVersionError, match="version 6 is not supported .* 1 to 5"):
        docstore.open(newer)
    data[8] = 0
    newer.write_bytes(bytes(data))
    with pytest.raises(docstore.UnsupportedVersionError, match="version 0 is older .* rebuild the store"):
        docstore.open(newer)


def test_thread_count_is_configurable():
    before = docstore.get_num_threads()
    try:
        docstore.set_num_threads(3)
        assert docstore.get_num_threads() == 3
    finally:
        docstore.set_num_threads(0)
    assert docstore.get_num_threads() == before
    with pytest.raises(TypeError, match="must be an int, got bool"):
        docstore.set_num_threads(True)
    for bad in (-1, 10**6):  # one exception family for every refusal (and a ValueError)
        with pytest.raises(docstore.InvalidArgumentError, match=f"0 \\(all cores\\) to .*, got {bad}"):
            docstore.set_num_threads(bad)
    assert docstore.get_num_threads() == before


@pytest.mark.parametrize(
    ("value", "warns"),
    [("3", False), ("+3", False), ("0", False), ("abc", True), ("-2", True), ("9" * 25, True)],
)
def test_thread_count_from_the_environment(value, warns):
    code = "import docstore; print(docstore.get_num_threads())"
    run = run_python(code, env_extra={"DOCSTORE_NUM_THREADS": value})
    assert run.returncode == 0, run.stderr
    assert ("is not a number of threads" in run.stderr) == warns
    if value in ("3", "+3"):  # read as the core reads it
        assert run.stdout.strip() == "3"


def test_repeated_ids_and_positions_are_decoded_once_and_shared(store, oracle):
    ids = list(oracle)[:50]
    many = [ids[i % 7] for i in range(300_000)] + ids  # the parallel path, mostly repeats
    got = store.get_many(many, field="text")
    assert list(got) == ids[:7] + ids[7:]  # first-seen order, as a dict of the repeats keeps
    assert got == {i: oracle[i]["text"] for i in ids}
    positions = [i % 5 for i in range(200_000)] + [9, 3]
    docs = store.take(positions)
    assert len(docs) == len(positions)
    # One Doc per distinct position: each repeat is the same object, not another decode.
    assert docs[0] is docs[5] is docs[199_995] and docs[-1] is docs[3]
    assert len({id(d) for d in docs}) == 6
    expected = store.take([0, 1, 2, 3, 4, 9])
    assert [d.doc_id for d in docs[:5]] + [docs[-2].doc_id] == [d.doc_id for d in expected]
    assert store.take([2, 2], field="text") == [oracle[store.keys_range(2, 3)[0]]["text"]] * 2
