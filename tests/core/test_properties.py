"""Property tests against a dict oracle: any ids, any values, any store size."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import docstore

# Any non-empty string that UTF-8 can encode (no lone surrogates), long ones included, and
# families of ids that share long prefixes, the hard case for a prefix-keyed index.
plain_ids = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=300)
prefixed_ids = st.builds(
    lambda p, s: p + s, st.sampled_from(["", "doc-", "clueweb22-en0000-00-", "é✓"]), plain_ids
)
ids = st.one_of(plain_ids, prefixed_ids)

ARRAY_TYPES = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float32", "float64"]
FIELD_TYPES = ["str", "bytes", "int64", "float64", *[f"{t}[]" for t in ARRAY_TYPES]]


def value_strategy(field_type: str) -> st.SearchStrategy:
    if field_type == "str":
        return st.text(st.characters(exclude_categories=("Cs",)), max_size=500)
    if field_type == "bytes":
        return st.binary(max_size=500)
    if field_type == "int64":
        return st.integers(-(2**63), 2**63 - 1)
    if field_type == "float64":
        return st.floats(allow_nan=True, allow_infinity=True)
    dtype = np.dtype(field_type[:-2])
    return hnp.arrays(dtype, st.integers(0, 50))


@st.composite
def corpora(draw):
    names = draw(st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True), max_size=4, unique=True))
    names = [
        n for n in names if n not in ("doc_id", "as", "if", "in", "is", "or", "and", "def", "del", "for")
    ]
    fields = {name: draw(st.sampled_from(FIELD_TYPES)) for name in names}
    doc_ids = draw(st.lists(ids, max_size=60, unique=True))
    docs = {doc_id: {name: draw(value_strategy(ty)) for name, ty in fields.items()} for doc_id in doc_ids}
    return fields, docs


def same(a, b) -> bool:
    if isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and a.dtype == b.dtype and a.tobytes() == b.tobytes()
    if isinstance(b, float):
        return np.float64(a).tobytes() == np.float64(b).tobytes()
    return type(a) is type(b) and a == b


counter = itertools.count()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(corpus=corpora(), level=st.sampled_from([0, 4, 9]), key_buffer=st.sampled_from([64, 1 << 20]))
def test_store_matches_the_dict_oracle(tmp_path, corpus, level, key_buffer):
    fields, docs = corpus
    path = tmp_path / f"s{next(counter)}"
    with docstore.Writer(
        path, fields=fields, level=level, key_buffer_bytes=key_buffer, batch_bytes=2000
    ) as w:
        for doc_id, doc in docs.items():
            w.add(doc_id, doc)
    store = docstore.open(path)
    assert len(store) == len(docs)
    assert list(store) == list(docs)
    for pos, (doc_id, doc) in enumerate(docs.items()):
        got = store[doc_id]
        assert got.doc_id == doc_id and store.position(doc_id) == pos
        assert all(same(got[name], value) for name, value in doc.items())
        assert store.at(pos).doc_id == doc_id
    assert list(store.get_many(list(docs)[::-1])) == list(docs)[::-1]
    for probe in ("", "\x00", "zzzz", *(d[:-1] for d in docs if len(d) > 1), *(d + "\x00" for d in docs)):
        assert (probe in store) == (probe in docs)
    store.verify()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc_ids=st.lists(ids, min_size=1, max_size=30, unique=True), data=st.data())
def test_duplicates_are_always_caught(tmp_path, doc_ids, data):
    duplicate = data.draw(st.sampled_from(doc_ids))
    order = [*doc_ids, duplicate]
    order = data.draw(st.permutations(order))
    path = tmp_path / f"d{next(counter)}"
    try:
        with docstore.Writer(
            path, fields={"n": "int64"}, key_buffer_bytes=data.draw(st.sampled_from([32, 1 << 20]))
        ) as w:
            for i, doc_id in enumerate(order):
                w.add(doc_id, n=i)
    except docstore.DuplicateKeyError as exc:
        assert exc.doc_id == duplicate
    else:
        raise AssertionError("duplicate not caught")
    assert not path.exists()
