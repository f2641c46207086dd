"""Threads, fork, spawn and forkserver: the places a training job puts a store."""

from __future__ import annotations

import multiprocessing
import os
import random
import sys
import threading
import time

import pytest

import docstore

from ..conftest import assert_doc_equal, run_python, write_store


def test_eight_threads_hammering_lookups_match_the_oracle(store, oracle):
    ids = list(oracle)
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def hammer(seed: int) -> None:
        rng = random.Random(seed)
        try:
            barrier.wait()
            for round_ in range(60):
                if round_ % 3 == 0:
                    batch = rng.sample(ids, 300)  # above the parallel threshold
                    got = store.get_many(batch)
                    assert list(got) == batch
                    for doc_id in batch[:20]:
                        assert_doc_equal(got[doc_id], doc_id, oracle[doc_id])
                elif round_ % 3 == 1:
                    positions = [rng.randrange(len(ids)) for _ in range(300)]
                    assert [d.doc_id for d in store.take(positions)] == [ids[p] for p in positions]
                else:
                    for doc_id in rng.sample(ids, 50):
                        assert_doc_equal(store[doc_id], doc_id, oracle[doc_id])
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_close_while_other_threads_read_never_crashes(store_path, oracle):
    ids = list(oracle)
    store = docstore.open(store_path)
    outcomes: list[str] = []

    def read() -> None:
        try:
            for _ in range(200):
                store.get_many(ids[:500])
            outcomes.append("finished")
        except docstore.ClosedError:
            outcomes.append("closed")

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    store.close()
    for t in threads:
        t.join()
    assert len(outcomes) == 4 and set(outcomes) <= {"finished", "closed"}


def _child_reads(store, ids, queue) -> None:
    got = store.get_many(ids)  # large batch: the parallel pool runs in the child
    queue.put([(k, d.text) for k, d in got.items()] + [(ids[0], store[ids[0]].text)])


def test_child_processes_after_parent_used_the_parallel_pool(store_path, oracle, start_method):
    ids = list(oracle)[:1000]
    store = docstore.open(store_path)
    store.get_many(ids)  # the parent's pool now has live threads
    ctx = multiprocessing.get_context(start_method)
    queue = ctx.Queue()
    procs = [ctx.Process(target=_child_reads, args=(store, ids, queue)) for _ in range(2)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    expected = [(i, oracle[i]["text"]) for i in ids] + [(ids[0], oracle[ids[0]]["text"])]
    assert results == [expected, expected]


def test_fork_after_batch_lookups_does_not_hang(store_path):
    # Run in a fresh interpreter with a timeout: a hang is a failure, not a stuck test run.
    proc = run_python(
        f"""
        import os, docstore
        store = docstore.open({store_path!r})
        ids = list(store)
        for _ in range(20):
            store.get_many(ids)
        pids = []
        for _ in range(3):
            pid = os.fork()
            if pid == 0:
                ok = len(store.get_many(ids)) == len(ids) and len(store.take(range(len(ids)))) == len(ids)
                os._exit(0 if ok else 1)
            pids.append(pid)
        codes = [os.waitpid(pid, 0)[1] for pid in pids]
        print("codes", codes)
        assert codes == [0, 0, 0]
        """,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "codes [0, 0, 0]" in proc.stdout


def _square_len(args):
    path, doc_id = args
    return len(docstore.open(path)[doc_id].text)


def test_spawn_pool_workers_open_by_path(store_path, oracle):
    ids = list(oracle)[:50]
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        lengths = pool.map(_square_len, [(store_path, i) for i in ids])
    assert lengths == [len(oracle[i]["text"]) for i in ids]


def coverage(call, repeat: int = 3) -> float:
    """The share of ``call``'s duration (in 1 ms bins) in which another thread ran Python code.

    Python code needs the GIL, so a call that holds it throughout leaves the other thread only
    the moments around its edges, where the interpreter may switch threads.
    """
    stamps: list[float] = []
    done = threading.Event()

    def stamp() -> None:
        while not done.is_set():
            stamps.append(time.perf_counter())

    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    counter = threading.Thread(target=stamp)
    counter.start()
    covered = total = 0
    try:
        for _ in range(repeat):
            start = time.perf_counter()
            call()
            end = time.perf_counter()
            bins = int((end - start) * 1000)
            assert bins >= 20, "the call is too short to tell"
            seen = {int((t - start) * 1000) for t in stamps[-2_000_000:] if start < t < end}
            covered += len(seen & set(range(bins)))
            total += bins
    finally:
        done.set()
        counter.join()
        sys.setswitchinterval(interval)
    return covered / total


@pytest.mark.skipif(
    not getattr(sys, "_is_gil_enabled", lambda: True)(),
    reason="the GIL is disabled (free-threaded CPython): no call holds it, the control included",
)
def test_lookups_release_the_gil(tmp_path):
    # Large documents, so that decoding (done without the GIL) dominates each call.
    words = [f"w{i}" for i in range(5000)]
    rng = random.Random(0)
    docs = {f"d{i}": {"text": " ".join(rng.choices(words, k=100_000))} for i in range(80)}
    store = write_store(tmp_path / "big", docs, fields={"text": "str"})
    # Distinct ids and positions: batches decode a repeated one once, and would finish too soon.
    ids = list(docs)
    data = list(range(6_000_000))
    control = coverage(lambda: data.count(-1))  # a C call that never releases the GIL
    for call in (
        lambda: store.get_many(ids),  # the parallel path
        lambda: store.take(list(range(len(ids)))),
        lambda: [store[i] for i in ids * 2],  # single lookups: the serial one
    ):
        share = coverage(call)
        # The other thread gets a core only when the machine has one free: compare with the
        # control rather than with an absolute share.
        assert share > max(0.1, 3 * control), (share, control)


@pytest.mark.skipif(
    not getattr(sys, "_is_gil_enabled", lambda: True)(),
    reason="the GIL is disabled (free-threaded CPython): no call holds it, the control included",
)
def test_a_single_lookup_releases_the_gil_while_another_thread_exists(tmp_path):
    """A lookup alone in its process keeps the GIL (nothing waits for it); with another thread
    about, one long lookup lets it run while it reads (and decodes)."""
    words = [f"w{i}" for i in range(5000)]
    text = " ".join(random.Random(0).choices(words, k=4_000_000))
    store = write_store(tmp_path / "huge", {"big": {"text": text}}, fields={"text": "str"})
    assert store["big"].text == text  # alone: read with the GIL held
    data = list(range(6_000_000))
    control = coverage(lambda: data.count(-1))
    for call in (lambda: store["big"], lambda: store.get("big", field="text"), lambda: store.at(0)):
        share = coverage(call)
        assert share > max(0.1, 3 * control), (share, control)


def test_switching_thread_counts_reuses_pools(store):
    """One pool per thread count: switching back and forth starts no new threads."""

    def threads() -> int:
        return len(os.listdir("/proc/self/task"))

    positions = [i % len(store) for i in range(512)]  # enough for the pool to be used
    try:
        for n in (2, 3):
            docstore.set_num_threads(n)
            store.take(positions)
        before = threads()
        for i in range(20):
            docstore.set_num_threads(2 + i % 2)
            assert docstore.get_num_threads() == 2 + i % 2
            store.take(positions)
        assert threads() == before
    finally:
        docstore.set_num_threads(0)


@pytest.mark.parametrize(
    ("n", "error"), [(-1, ValueError), (10**6, ValueError), (True, TypeError), (2.0, TypeError)]
)
def test_bad_thread_counts_are_refused(n, error):
    before = docstore.get_num_threads()
    with pytest.raises(error):
        docstore.set_num_threads(n)
    assert docstore.get_num_threads() == before


def test_a_writer_shared_by_threads_takes_their_calls_in_turn(tmp_path):
    """Threads may feed one writer (say, each parsing its own files): calls take turns, and a
    thread waiting for its turn releases the GIL, so the one in turn can flush."""
    path = tmp_path / "s"
    w = docstore.Writer(path, fields={"text": "str"}, batch_bytes=4096)  # many flushes

    def feed(t: int) -> None:
        for i in range(3000):
            w.add(f"{t}-{i}", text=f"text {t} {i}")
        w.add_many([f"{t}-m{i}" for i in range(500)], {"text": ["many"] * 500})

    threads = [threading.Thread(target=feed, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w.finish()
    store = docstore.open(path)
    assert len(store) == 4 * 3500
    assert all(
        store[f"{t}-2999"].text == f"text {t} 2999" and store[f"{t}-m0"].text == "many" for t in range(4)
    )


def test_a_call_that_comes_back_into_its_writer_fails_instead_of_waiting_for_itself(tmp_path):
    """The error message of a bad id shows the id's repr; here that repr calls the writer."""
    proc = run_python(
        f"""
        import docstore

        w = docstore.Writer({str(tmp_path / "s")!r}, fields={{"text": "str"}})

        class Sneaky:
            def __repr__(self):
                return repr(w)  # re-enters the writer from inside w.add

        try:
            w.add(Sneaky(), text="x")
        except docstore.InvalidKeyError:
            pass
        w.add("a", text="x")
        w.finish()
        print(len(docstore.open({str(tmp_path / "s")!r})))
        """,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "1"
