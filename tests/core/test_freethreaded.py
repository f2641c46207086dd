"""Threads at once on one store and its writers: what a free-threaded CPython (3.14t) runs in
parallel once docstore declares it needs no GIL (docs/wheels.md, "Free-threaded CPython": the
audit, and what the declaration waits for).

On a build with the GIL these run as a thread-stress test (in CI); scripts/test_freethreaded.sh
runs them on CPython 3.14t with the GIL off.
"""

from __future__ import annotations

import collections
import os
import random
import subprocess
import sys
import sysconfig
import threading

import numpy as np
import pytest

import docstore

from ..conftest import FIELDS, assert_doc_equal, make_docs, run_python

THREADS = 12


def run_together(work) -> None:
    """Runs ``work(i)`` for ``i`` in ``range(THREADS)``, each on its own thread, started together
    (a barrier); re-raises the first failure."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(THREADS)

    def run(i: int) -> None:
        try:
            barrier.wait()
            work(i)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def test_lookups_batches_and_builds_at_once_return_only_correct_documents(tmp_path, store, oracle):
    """Twelve threads on one shared store object: single lookups, batches (get_many, take, field
    selections) and builds (a writer each, and one writer shared by two threads), every document
    they get back compared whole with the oracle."""
    ids = list(oracle)
    position = {doc_id: i for i, doc_id in enumerate(ids)}
    built = {t: make_docs(400, seed=100 + t) for t in range(THREADS)}
    shared_path = tmp_path / "shared.docstore"
    shared = docstore.Writer(shared_path, fields={"text": "str", "tokens": "int32[]"}, batch_bytes=4096)

    def lookups(rng: random.Random) -> None:
        for doc_id in rng.sample(ids, 300):
            assert_doc_equal(store[doc_id], doc_id, oracle[doc_id])
            assert store.get(doc_id, field="text") == oracle[doc_id]["text"]

    def batches(rng: random.Random) -> None:
        for _ in range(4):
            batch = rng.sample(ids, 600)  # above the parallel threshold
            got = store.get_many(batch)
            assert list(got) == batch
            for doc_id, doc in got.items():
                assert_doc_equal(doc, doc_id, oracle[doc_id])
            positions = [position[doc_id] for doc_id in batch[:300]]
            for doc_id, doc in zip(batch, store.take(positions)):
                assert_doc_equal(doc, doc_id, oracle[doc_id])
            pairs = store.get_many(batch[:200], fields=["doc_id", "label"])
            assert pairs == {d: (d, oracle[d]["label"]) for d in batch[:200]}

    def build_own(t: int) -> None:
        docs = built[t]
        path = tmp_path / f"own-{t}.docstore"
        with docstore.Writer(path, fields=FIELDS, batch_bytes=8192) as writer:
            for doc_id, doc in docs.items():
                writer.add(doc_id, doc)
        with docstore.open(path) as own:
            got = own.get_many(list(docs))
            for doc_id, expected in docs.items():
                assert_doc_equal(got[doc_id], doc_id, expected)

    def feed_shared(t: int) -> None:
        for i in range(1500):
            shared.add(f"{t}-{i}", text=f"text {t} {i}", tokens=np.arange(i % 17, dtype=np.int32) + t)

    def work(i: int) -> None:
        rng = random.Random(i)
        role = i % 4
        if role == 0:
            lookups(rng)
        elif role == 1:
            batches(rng)
        elif role == 2:
            build_own(i)
        elif i < 8:  # two threads share one writer, the others look up
            feed_shared(i)
        else:
            lookups(rng)

    run_together(work)
    shared.finish()
    with docstore.open(shared_path) as got:
        feeders = [i for i in range(THREADS) if i % 4 == 3 and i < 8]
        assert len(got) == 1500 * len(feeders)
        for t in feeders:
            for i in range(1500):
                doc = got[f"{t}-{i}"]
                assert doc.text == f"text {t} {i}"
                np.testing.assert_array_equal(doc.tokens, np.arange(i % 17, dtype=np.int32) + t)


def test_threads_opening_and_closing_their_own_stores_while_others_share_one(store_path, oracle):
    """Opens and closes race with lookups on other objects of the same file (each open maps it
    anew; the shared one stays open)."""
    ids = list(oracle)
    shared = docstore.open(store_path)

    def work(i: int) -> None:
        rng = random.Random(i)
        for _ in range(6):
            if i % 2:
                with docstore.open(store_path) as own:
                    batch = rng.sample(ids, 100)
                    for doc_id, doc in own.get_many(batch).items():
                        assert_doc_equal(doc, doc_id, oracle[doc_id])
            else:
                for doc_id in rng.sample(ids, 100):
                    assert_doc_equal(shared[doc_id], doc_id, oracle[doc_id])

    run_together(work)
    shared.close()


def test_a_thread_asking_for_the_doc_class_being_made_gets_that_class(monkeypatch):
    """Stores of the same fields share one Doc class, also when a second thread opens one while
    the first thread is still making the class (functools.cache would make a second class)."""
    from docstore import _doc

    fields = ("made_once_text", "made_once_label")
    real = collections.namedtuple
    second: list[type] = []
    threads: list[threading.Thread] = []

    def make(*args, **kwargs):
        monkeypatch.setattr(collections, "namedtuple", real)  # the first class only
        thread = threading.Thread(target=lambda: second.append(_doc.doc_class(fields)))
        thread.start()
        threads.append(thread)
        # Unlocked, the second thread makes a class of its own meanwhile and is done well within
        # this; locked, it waits for this one (the timeout only bounds the wait for it).
        thread.join(timeout=1)
        return real(*args, **kwargs)

    monkeypatch.setattr(collections, "namedtuple", make)
    first = _doc.doc_class(fields)
    threads[0].join()
    assert second == [first]


def test_a_child_forked_while_a_doc_class_is_being_made_can_make_doc_classes():
    """The lock a thread of the parent held at the fork is not the child's to wait for."""
    proc = run_python(
        """
        import os, signal
        from docstore import _doc

        _doc._CLASSES_LOCK.acquire()  # as if a thread were making a class at the fork
        pid = os.fork()
        if pid == 0:
            signal.alarm(20)  # a child stuck on the lock ends, not orphaned
            _doc.doc_class(("made_in_the_child",))
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
        """,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0"]


@pytest.mark.skipif(
    not sysconfig.get_config_var("Py_GIL_DISABLED"),
    reason="a free-threaded CPython (3.14t) only: elsewhere there is no GIL to keep disabled",
)
def test_importing_docstore_leaves_the_gil_disabled():
    """The module declares ``gil_used = false``: a free-threaded CPython keeps the GIL off after
    importing it (for a module that does not, it turns the GIL back on with a RuntimeWarning)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}  # nothing forces it off
    code = "import sys, docstore; print(sys._is_gil_enabled())"
    proc = subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False"]
