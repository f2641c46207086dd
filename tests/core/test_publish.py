"""Every store is published by the one protocol (the core's ``publish_file``): under the target's
lock, over nothing without ``overwrite``, and over nothing but a store with it; whatever the
writer's ``on_duplicate`` policy, and whatever appeared at the target while the writer wrote. An
append that drops repeats reads the ids it appends to under that lock."""

from __future__ import annotations

import multiprocessing
import os
import threading
from pathlib import Path

import pytest

import docstore
from docstore import _docstore

FIELDS = {"text": "str"}
POLICIES = ["error", "first", "last"]


def ids_and_texts(path) -> list[tuple[str, str]]:
    return [(d.doc_id, d.text) for d in docstore.open(path).values()]


@pytest.mark.parametrize("repeat", [False, True])
@pytest.mark.parametrize("policy", POLICIES)
def test_a_users_file_that_appears_meanwhile_is_never_replaced(tmp_path, policy, repeat):
    """overwrite=True replaces a store, never a file of the user's, even one written at the
    target after the writer was created (the "last" policy's move replaced it)."""
    target = tmp_path / "s"
    writer = docstore.Writer(target, FIELDS, on_duplicate=policy, overwrite=True)
    writer.add("a", text="1")
    if repeat and policy != "error":
        writer.add("a", text="2")  # a document to drop: the store is rewritten at finish
    target.write_bytes(b"the user's notes")
    with pytest.raises(docstore.StoreExistsError, match="not a docstore store"):
        writer.finish()
    assert target.read_bytes() == b"the user's notes"
    assert sorted(os.listdir(tmp_path)) == ["s"]  # no staging left
    # Found before any work when it is there already.
    with pytest.raises(docstore.StoreExistsError, match="not a docstore store"):
        docstore.Writer(target, FIELDS, on_duplicate=policy, overwrite=True)
    # A store there is replaced.
    target.unlink()
    docstore.build(target, [{"doc_id": "old", "text": "old"}])
    with docstore.Writer(target, FIELDS, on_duplicate=policy, overwrite=True) as w:
        w.add("a", text="1")
    assert ids_and_texts(target) == [("a", "1")]


@pytest.mark.parametrize("repeat", [False, True])
@pytest.mark.parametrize("policy", POLICIES)
def test_without_overwrite_a_store_published_meanwhile_is_kept(tmp_path, policy, repeat):
    target = tmp_path / "s"
    writer = docstore.Writer(target, FIELDS, on_duplicate=policy)
    writer.add("a", text="mine")
    if repeat and policy != "error":
        writer.add("a", text="mine again")
    docstore.build(target, [{"doc_id": "b", "text": "theirs"}])
    with pytest.raises(docstore.StoreExistsError):
        writer.finish()
    assert ids_and_texts(target) == [("b", "theirs")]
    assert sorted(os.listdir(tmp_path)) == ["s"]


@pytest.mark.parametrize("policy", ["last", "first"])
def test_concurrent_builds_of_one_target_publish_one_store(tmp_path, policy):
    """8 writers of one target, finished at once: one publishes, the others are refused, and the
    store there is one writer's, whole. Half of them drop a repeat (their store is rewritten at
    finish), half do not (their file is moved as written)."""
    target = tmp_path / "s"
    writers = []
    for k in range(8):
        w = docstore.Writer(target, FIELDS, on_duplicate=policy)
        for i in range(100):
            w.add(f"d{i}", text=f"writer {k}")
        if k % 2:
            w.add("d0", text=f"writer {k}")
        writers.append(w)
    start = threading.Barrier(len(writers))
    outcomes: list[object] = [None] * len(writers)

    def finish(k: int) -> None:
        start.wait()
        try:
            writers[k].finish()
            outcomes[k] = "published"
        except docstore.StoreExistsError as error:
            outcomes[k] = error

    threads = [threading.Thread(target=finish, args=(k,)) for k in range(len(writers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("published") == 1, outcomes
    assert all(isinstance(o, docstore.StoreExistsError) for o in outcomes if o != "published"), outcomes
    store = docstore.open(target)
    store.verify()
    texts = {d.text for d in store.values()}
    assert len(store) == 100 and texts == {f"writer {outcomes.index('published')}"}
    assert sorted(os.listdir(tmp_path)) == ["s"]


@pytest.mark.parametrize("policy", POLICIES)
def test_a_collection_at_the_target_is_refused_when_the_writer_is_made(tmp_path, policy):
    """A writer writes a store file: a directory there is refused at once, by every policy (the
    "last" policy found it only at finish, in a message that said a collection is replaceable)."""
    docstore.build(tmp_path / "s", [{"doc_id": "a", "text": "1"}])
    docstore.seal(tmp_path / "c", [tmp_path / "s"])
    with pytest.raises(docstore.StoreIOError, match="is a directory"):
        docstore.Writer(tmp_path / "c", FIELDS, on_duplicate=policy, overwrite=True)
    assert ids_and_texts(tmp_path / "c") == [("a", "1")]


def test_publish_file_publishes_only_a_store(tmp_path):
    notes = tmp_path / "notes"
    notes.write_bytes(b"not a store")
    with pytest.raises(docstore.InvalidArgumentError, match="not a docstore store file"):
        _docstore.publish_file(notes, tmp_path / "s")
    assert not (tmp_path / "s").exists()


# Two appends with on_duplicate="first" that share an id. Appender "a" waits, once it has read
# the ids it appends to, until "b" has either read them too (the race: both miss each other's
# documents) or is about to wait for the target's lock (read under it: "b" then reads a's).
def _append(target: str, shard: str, role: str, a_read: object, b_ready: object, result: str) -> None:
    from docstore import _collection

    note_repeats = _collection._note_repeats

    def after_reading_the_ids(*args: object) -> None:
        _collection._note_repeats = note_repeats  # once
        if role == "a":
            a_read.set()  # type: ignore[attr-defined]
            assert b_ready.wait(60)  # type: ignore[attr-defined]
        else:
            b_ready.set()  # type: ignore[attr-defined]
        note_repeats(*args)

    _collection._note_repeats = after_reading_the_ids
    lock_target = getattr(_collection._docstore, "lock_target", None)
    if role == "b" and lock_target is not None:

        def waiting_for_the_lock(path: str) -> object:
            b_ready.set()  # type: ignore[attr-defined]
            return lock_target(path)

        _collection._docstore.lock_target = waiting_for_the_lock
    try:
        docstore.seal(target, [shard], append=True, on_duplicate="first")
        outcome = "ok"
    except Exception as error:
        outcome = f"{type(error).__name__}: {error}"
    with open(result, "w") as out:
        out.write(outcome)


def test_racing_appends_that_share_an_id_keep_each_id_once(tmp_path):
    target = str(tmp_path / "c")
    docstore.build(tmp_path / "base", [{"doc_id": i, "text": "base"} for i in ("x", "y")])
    docstore.seal(target, [tmp_path / "base"])
    for role, ids in (("a", ("a1", "shared", "x")), ("b", ("b1", "shared", "b2"))):
        docstore.build(tmp_path / role, [{"doc_id": i, "text": role} for i in ids])
    ctx = multiprocessing.get_context("fork")
    a_read, b_ready = ctx.Event(), ctx.Event()
    results = {role: str(tmp_path / f"{role}.result") for role in "ab"}
    appenders = {
        role: ctx.Process(
            target=_append, args=(target, str(tmp_path / role), role, a_read, b_ready, results[role])
        )
        for role in "ab"
    }
    appenders["a"].start()
    assert a_read.wait(60)  # "a" holds the lock (or, racing, has read the ids without it)
    appenders["b"].start()
    for process in appenders.values():
        process.join(120)
        assert process.exitcode == 0
    outcomes = {role: Path(path).read_text() for role, path in results.items()}
    assert outcomes == {"a": "ok", "b": "ok"}
    store = docstore.open(target)
    got = [(d.doc_id, d.text) for d in store.values()]
    assert got == [("x", "base"), ("y", "base"), ("a1", "a"), ("shared", "a"), ("b1", "b"), ("b2", "b")]
    store.verify()
