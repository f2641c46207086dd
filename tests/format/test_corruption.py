"""Damaged files: every flipped byte and every truncation gives DocstoreError, never a crash.

Each sweep runs in a fresh interpreter, so a segfault or an abort is a test failure here
instead of the end of the test run.
"""

from __future__ import annotations

import json

import pytest

from ..conftest import run_python, write_store

SWEEP = """
import json, sys, docstore
good = open({path!r}, "rb").read()
expected = json.loads({expected!r})
mode = {mode!r}
read = {read!r}
bad_path = {bad_path!r}
report = {{"undetected": [], "wrong": [], "cases": 0}}

def exercise(data, where):
    with open(bad_path, "wb") as f:
        f.write(data)
    report["cases"] += 1
    try:
        store = docstore.open(bad_path, read=read)
    except docstore.DocstoreError:
        return
    results = {{}}
    try:
        for doc_id, text in expected.items():
            try:
                got = store.get(doc_id)
            except docstore.DocstoreError:
                continue
            if got is not None and got.text != text:
                results[doc_id] = got.text
        try:
            store.get_many(list(expected))
            store.take(range(len(store)))
            list(store)
        except docstore.DocstoreError:
            pass
    finally:
        pass
    try:
        store.verify()
    except docstore.DocstoreError:
        return
    # verify() passed: then every document must have read back exactly.
    report["undetected"].append(where)
    if results:
        report["wrong"].append(where)

if mode == "flip":
    for i in range(len(good)):
        data = bytearray(good)
        data[i] ^= 0x55
        exercise(bytes(data), i)
else:
    for n in range(0, len(good), 3):
        exercise(good[:n], n)
print(json.dumps(report))
"""


# A version 5 store's metadata section (docs/format.md §4.10), swept as every other section.
METADATA = {"huggingface": {"features": {"n": {"dtype": "int32", "_type": "Value"}}}, "note": "é" * 40}


@pytest.fixture(scope="module", params=["v3", "v5"])
def small_store(tmp_path_factory, request):
    path = tmp_path_factory.mktemp("corrupt") / "small.docstore"
    docs = {f"doc-{i}": {"text": f"text number {i} " * (i % 5 + 1), "n": i} for i in range(12)}
    metadata = METADATA if request.param == "v5" else None
    write_store(path, docs, fields={"text": "str", "n": "int64"}, dict_size=256, metadata=metadata)
    return path, {k: v["text"] for k, v in docs.items()}


@pytest.mark.parametrize("read", ["mmap", "pread"])
@pytest.mark.parametrize("mode", ["flip", "truncate"])
def test_damage_anywhere_is_detected_without_crashing(small_store, tmp_path, mode, read):
    path, expected = small_store
    code = SWEEP.format(
        path=str(path),
        expected=json.dumps(expected),
        mode=mode,
        read=read,
        bad_path=str(tmp_path / "bad"),
    )
    proc = run_python(code, timeout=600)
    assert proc.returncode == 0, f"the interpreter died: {proc.returncode}\n{proc.stderr[-3000:]}"
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["cases"] > 100
    assert report["undetected"] == [], f"damage at these offsets passed verify(): {report['undetected']}"
    assert report["wrong"] == []


def test_every_section_is_covered_by_the_sweep(small_store):
    # The flip sweep walks every byte, so every section and the padding between them is hit;
    # this checks the store really has all its sections non-empty where they can be.
    import docstore

    path, expected = small_store
    store = docstore.open(path)
    info = store.info()
    assert info["count"] == len(expected)
    assert info["stored_bytes"] == path.stat().st_size
    assert store.metadata in ({}, METADATA)
    # The v5 store ends with its metadata section, which the sweep walks too.
    if store.metadata:
        text = json.dumps(METADATA, ensure_ascii=False, separators=(",", ":")).encode()
        assert info["format_version"] == 5 and path.read_bytes().endswith(text)
