"""Crafted files: arbitrary contents behind valid checksums, read through the Python API.

Checksums catch accidents, not a file made to pass them. Mutated stores are given valid checksums
again (docs/format.md: the section table at byte 64, the header's xxh3 at byte 504) and read every
way the API allows, in a fresh interpreter, so that a crash fails the test instead of ending the
run. Only ``DocstoreError`` (or ``KeyError``/``IndexError`` for what is not there) may come out,
and a store that passes ``verify()`` must read consistently. The Rust core has the same harness
under libFuzzer (``rust/core/fuzz``); this one covers the bindings' conversions too (``str``
layouts, numpy arrays, ``Doc`` objects).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from ..conftest import run_python, write_store

CRAFT = """
import json, random, struct, sys, traceback
import numpy as np, xxhash, docstore

seeds = [open(p, "rb").read() for p in json.loads({seeds!r})]
read, runs, bad_path = {read!r}, {runs}, {bad_path!r}
rng = random.Random(1234)
INTERESTING = [0, 1, 7, 8, 255, 4096, 2**32 - 1, 2**32, 2**63 - 1, 2**64 - 1]
report = {{"reached": {{"refused": 0, "opened": 0, "verified": 0}}, "escaped": [], "inconsistent": []}}

def reseal(buf):
    if len(buf) < 512:
        return
    for i in range(9):
        at = 64 + 24 * i
        offset, length = struct.unpack_from("<QQ", buf, at)
        if offset + length <= len(buf):
            struct.pack_into("<Q", buf, at + 16, xxhash.xxh3_64_intdigest(bytes(buf[offset:offset + length])))
    struct.pack_into("<Q", buf, 504, xxhash.xxh3_64_intdigest(bytes(buf[:504])))

def mutate(buf):
    at = rng.randrange(min(len(buf), 512)) if rng.random() < 0.4 else rng.randrange(len(buf))
    kind = rng.randrange(5)
    if kind == 0:
        buf[at] ^= 1 << rng.randrange(8)
    elif kind == 1:
        buf[at] = rng.randrange(256)
    elif kind == 2 and len(buf) >= 8:
        width = rng.choice((4, 8))
        at = min(at, len(buf) - width)
        value = rng.choice(INTERESTING) if rng.random() < 0.5 else rng.randrange(2 * len(buf))
        buf[at:at + width] = (value % 2 ** (8 * width)).to_bytes(width, "little")
    elif kind == 3:
        del buf[rng.randrange(len(buf) + 1):]
    else:
        src, dst, n = rng.randrange(len(buf)), rng.randrange(len(buf)), rng.randrange(64)
        chunk = buf[src:src + n]
        buf[dst:dst + len(chunk)] = chunk

def same(a, b):
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)
    if isinstance(a, float) and a != a:
        return isinstance(b, float) and b != b
    return a == b

def read_all(store):
    n = len(store)
    fields = list(store.fields)
    probe = list(range(min(n, 40))) + [n, -1, -n - 1, 2**63]
    docs = {{}}
    for i in probe:
        try:
            doc = store.at(i)
            docs[i] = (doc.doc_id, doc._asdict())
            for f in fields:
                store.at(i, field=f)
        except (docstore.DocstoreError, IndexError):
            pass
    keys = []
    try:
        keys = list(store.keys())
        assert list(store) == keys
        for doc_id, doc in store.items():
            doc._asdict()
        for doc in store.values():
            doc._asdict()
    except docstore.DocstoreError:
        pass
    misses = ["", "\\x00", "\\uffff"] + [k[: len(k) // 2] for k in keys[:10]] + [k + "!" for k in keys[:10]]
    for k in keys[:40] + misses:
        for call in (lambda: store[k], lambda: store.get(k), lambda: k in store, lambda: store.position(k)):
            try:
                call()
            except (docstore.DocstoreError, KeyError):
                pass
        for f in fields:
            try:
                store.get(k, field=f)
            except docstore.DocstoreError:
                pass
    for call in (
        lambda: store.get_many(keys[:40] + misses),
        lambda: list(store.get_many_iter(keys[:40] + misses)),
        lambda: store.take(probe[: min(n, 40)]),
        lambda: [store.take(list(range(min(n, 40))), field=f) for f in fields],
        lambda: [store.get_many(keys[:40], field=f) for f in fields],
        lambda: store.positions(keys[:40] + misses),
        lambda: list(store.keys_range(0, n)),
        lambda: store.info(),
    ):
        try:
            call()
        except (docstore.DocstoreError, KeyError, IndexError):
            pass
    try:
        store.verify()
    except docstore.DocstoreError:
        return "opened"
    # verify() passed: every read must agree with every other.
    for i, (doc_id, values) in docs.items():
        if 0 <= i < n:
            assert store.position(doc_id) == i, (doc_id, i)
            got = store[doc_id]._asdict()
            assert all(same(values[f], got[f]) for f in fields), doc_id
            batch = store.get_many([doc_id])[doc_id]._asdict()
            assert all(same(values[f], batch[f]) for f in fields), doc_id
    assert keys == [store.at(i).doc_id for i in range(n)]
    return "verified"

def run(buf, what):
    with open(bad_path, "wb") as f:
        f.write(buf)
    try:
        store = docstore.open(bad_path, read=read)
    except docstore.DocstoreError:
        report["reached"]["refused"] += 1
        return
    try:
        report["reached"][read_all(store)] += 1
    except AssertionError:
        report["inconsistent"].append([what, traceback.format_exc(limit=3)])
    except Exception:
        report["escaped"].append([what, traceback.format_exc(limit=3)])
    finally:
        store.close()

for seed in seeds:
    run(seed, "seed")
for r in range(runs):
    buf = bytearray(seeds[rng.randrange(len(seeds))])
    for _ in range(rng.randrange(1, 5)):
        if buf:
            mutate(buf)
    reseal(buf)
    run(bytes(buf), r)
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> list[str]:
    """Small stores of every field type, with and without a dictionary, one and no document."""
    root = tmp_path_factory.mktemp("crafted")
    every = {
        "text": "str",
        "blob": "bytes",
        "n": "int64",
        "x": "float64",
        "tokens": "int32[]",
        "weights": "float32[]",
        "ids": "uint16[]",
    }
    docs = {
        f"doc/{i:03d}": {
            "text": f"ünïcode {i} " * (i % 4 + 1) + "\U0001f600" * (i % 2),
            "blob": bytes([i]) * (i % 5),
            "n": i - 5,
            "x": i / 3,
            "tokens": np.arange(i % 6, dtype=np.int32) * 1000,
            "weights": np.full(i % 3, 0.5, dtype=np.float32),
            "ids": np.arange(i % 4, dtype=np.uint16),
        }
        for i in range(16)
    }
    texts = {f"t{i}": {"text": "plain ascii text " * (i % 3 + 1)} for i in range(20)}
    paths = []
    for name, fields, records, options in [
        ("every", every, docs, {"dict_size": 256}),
        ("every_fast", every, docs, {"level": 0, "dict_size": 0}),
        ("text", {"text": "str"}, texts, {"dict_size": 256}),
        ("one", {"text": "str"}, dict(list(texts.items())[:1]), {}),
        ("empty", every, {}, {}),
    ]:
        write_store(root / name, records, fields=fields, **options).close()
        paths.append(str(root / name))
    return paths


@pytest.mark.parametrize("read", ["mmap", "pread"])
def test_crafted_stores_raise_docstore_errors_or_read_consistently(seeds, tmp_path, read):
    runs = 1500
    code = CRAFT.format(seeds=json.dumps(seeds), read=read, runs=runs, bad_path=str(tmp_path / "crafted"))
    proc = run_python(code, timeout=600)
    assert proc.returncode == 0, f"the interpreter died: {proc.returncode}\n{proc.stderr[-3000:]}"
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["escaped"] == [], "exceptions other than DocstoreError:\n" + "\n".join(
        f"{what}: {tb}" for what, tb in report["escaped"][:5]
    )
    assert report["inconsistent"] == [], "stores that verify but read inconsistently:\n" + "\n".join(
        f"{what}: {tb}" for what, tb in report["inconsistent"][:5]
    )
    reached = report["reached"]
    # The mutations must get past open() and some must leave stores that still verify, or the
    # test would only be exercising the first checks of open().
    assert reached["opened"] > runs // 5 and reached["verified"] > runs // 100, reached
