"""Threads at once on one store and its writers: what a free-threaded CPython (3.14t) runs in
parallel once docstore declares it needs no GIL (docs/wheels.md, "Free-threaded CPython": the
audit, and what the declaration waits for).

On a build with the GIL these run as a thread-stress test (in CI); scripts/test_freethreaded.sh
runs them on CPython 3.14t with the GIL off.
"""

from __future__ import annotations

import random
import sys
import threading

import numpy as np

import docstore

from ..conftest import FIELDS, assert_doc_equal, make_docs, run_python

THREADS = 12


def gil_enabled() -> bool:
    """Whether this interpreter runs with the GIL now (always, before 3.13)."""
    return getattr(sys, "_is_gil_enabled", lambda: True)()


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


def test_importing_docstore_leaves_the_gil_as_it_was():
    """A module that does not declare itself free-threading safe makes a free-threaded CPython
    turn the GIL back on when it is imported (with a RuntimeWarning)."""
    proc = run_python(
        """
        import sys, warnings
        warnings.simplefilter("error", RuntimeWarning)
        enabled = getattr(sys, "_is_gil_enabled", lambda: True)
        before = enabled()
        import docstore, docstore._docstore
        print(before, enabled())
        """
    )
    assert proc.returncode == 0, proc.stderr
    before, after = proc.stdout.split()
    assert after == before


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


def test_threads_making_the_doc_class_of_new_fields_at_once_get_one_class():
    """Stores of the same fields share one Doc class, also when threads open them at once."""
    from docstore._doc import doc_class

    for round_ in range(20):
        fields = (f"text{round_}", f"label{round_}")
        got: list[type | None] = [None] * THREADS
        run_together(lambda i: got.__setitem__(i, doc_class(fields)))  # noqa: B023 - run at once
        assert all(cls is got[0] for cls in got)
