"""A remote store heals its node cache (issue 25): bytes damaged there, by a bad response or on
the cache's own disk, pinned or not, are fetched again from the server, and only bytes that the
server itself sends damaged raise ``CorruptStoreError``. Never a wrong document. Also: the
dictionary is read from a copy taken at open, a full disk or a truncated cache file is an error
rather than SIGBUS, a process that inherits a store with its maker's pid does not hang, and
options out of range are refused.

Real servers on 127.0.0.1 (tests/support/remote_servers.py): moto's S3 and a fault-injecting proxy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import docstore
from docstore._store import _same

from ..conftest import assert_doc_equal, make_docs, sections, write_store
from ..support.remote_servers import FaultProxy, environment
from .conftest import FAST, PYTHONPATH


@pytest.fixture(scope="module")
def docs():
    return make_docs(1500, seed=11)


@pytest.fixture(scope="module")
def small(s3, docs, tmp_path_factory):
    """A store smaller than a cache segment (1 MiB): every byte of it lies in the pinned segment
    that holds its header."""
    path = tmp_path_factory.mktemp("heal") / "small.docstore"
    write_store(path, docs).close()
    assert sections(path)["dictionary"][1] > 0, "compressed against a dictionary"
    return str(path), s3.upload(str(path), "heal/small.docstore")


@pytest.fixture(scope="module")
def big(s3, tmp_path_factory):
    """~8 MB of incompressible documents: most of its segments hold nothing pinned."""
    rng = np.random.default_rng(5)
    path = tmp_path_factory.mktemp("heal-big") / "big.docstore"
    with docstore.Writer(path, fields={"raw": "bytes", "n": "int64"}, level=-1) as writer:
        for i in range(4000):
            writer.add(f"big{i:05d}", {"raw": rng.bytes(int(rng.integers(500, 3500))), "n": i})
    return str(path), s3.upload(str(path), "heal/big.docstore")


def open_remote(url, cache, **options):
    return docstore.open(url, cache_dir=str(cache), storage_options={**FAST, **options})


def cache_data(cache) -> Path:
    """The data file of the one entry in ``cache``."""
    (data,) = [p for p in Path(cache).rglob("data") if p.is_file()]
    return data


def flip(path, offset: int, mask: int = 0x10) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ mask]))


def assert_all_right(store, local_path) -> None:
    """Every document of ``store`` read by id, in batches and by position, as the local file."""
    local = docstore.open(local_path)
    ids = list(local)
    for doc_id in ids:
        assert _same(store[doc_id], local[doc_id]), doc_id
    got = store.get_many(ids[::-1])
    assert list(got) == ids[::-1]
    assert all(_same(got[k], local[k]) for k in ids)
    assert same_list(store.take(range(len(ids))), local.take(range(len(ids))))
    local.close()


def same_list(a, b) -> bool:
    return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))


def damage_offset(local_path, region: str) -> int:
    if region == "header":
        return 100
    offset, length = sections(local_path)[region]
    return offset + length // 2


@pytest.mark.parametrize("region", ["header", "schema", "dictionary", "key fences", "key index", "data"])
def test_cache_damaged_between_opens_is_fetched_again(small, region, tmp_path):
    """A flipped bit in the cache file, found by the next open or read: what is pinned there too
    (all of a store smaller than a segment) is fetched again, and counted as a heal."""
    local, url = small
    cache = tmp_path / "cache"
    first = open_remote(url, cache)
    assert_all_right(first, local)
    first.close()
    flip(cache_data(cache), damage_offset(local, region))
    store = open_remote(url, cache)
    assert_all_right(store, local)
    assert store.remote_stats()["heals"] >= 1


@pytest.mark.parametrize(("which", "region"), [("small", "data"), ("small", "key fences"), ("big", "data")])
def test_cache_damaged_while_open_is_fetched_again(small, big, which, region, tmp_path):
    """The same, damaged under an open store: its reads heal, pinned bytes (key fences, read
    without a check per read) included."""
    local, url = {"small": small, "big": big}[which]
    cache = tmp_path / "cache"
    store = open_remote(url, cache)
    assert_all_right(store, local)
    flip(cache_data(cache), damage_offset(local, region))
    assert_all_right(store, local)
    assert store.remote_stats()["heals"] >= 1


@pytest.mark.parametrize("op", ["get_many", "positions"])
@pytest.mark.parametrize("region", ["key index", "data"])
def test_a_batch_meeting_damage_first_searches_again_and_heals(big, region, op, tmp_path):
    """A batch is searched once, then read from what the search found: damage that a batch meets
    before any single lookup does (in the index entries the search read, or in a document) is
    read again with a new search of the batch, over bytes fetched anew."""
    local, url = big
    cache = tmp_path / "cache"
    store = open_remote(url, cache)
    with docstore.open(local) as plain:
        ids = list(plain)
        want_docs, want_positions = plain.get_many(ids), plain.positions(ids)
    store.get_many(ids)
    flip(cache_data(cache), damage_offset(local, region))
    if op == "get_many":
        got = store.get_many(ids)
        assert list(got) == ids
        assert all(_same(got[k], want_docs[k]) for k in ids)
    else:
        assert list(store.positions(ids)) == list(want_positions)
    assert store.remote_stats()["heals"] >= 1


def test_a_server_sending_damaged_bytes_is_a_corrupt_store_and_nothing_stays_bad(s3, small, docs, tmp_path):
    local, url = small
    ids = list(docs)
    proxy = FaultProxy("127.0.0.1", s3.port)
    try:
        with environment({"AWS_ENDPOINT_URL": proxy.url}):
            store = open_remote(url, tmp_path / "cache")
            proxy.kinds, proxy.rate = ("garble",), 1.0
            for doc_id in ids[:5]:
                with pytest.raises(docstore.CorruptStoreError):
                    store[doc_id]
            with pytest.raises(docstore.CorruptStoreError):
                store.get_many(ids[100:200])
            assert proxy.injected["garble"] >= 18  # three attempts each
            # The server heals: so do the reads (the damaged responses were not kept).
            proxy.rate = 0.0
            for doc_id in ids[:5]:
                assert_doc_equal(store[doc_id], doc_id, docs[doc_id])
            assert_all_right(store, local)
            # Damaged in the cache and by the server: an error, never a document.
            store.close()
            flip(cache_data(tmp_path / "cache"), damage_offset(local, "data"))
            again = open_remote(url, tmp_path / "cache")
            proxy.rate = 1.0
            with pytest.raises(docstore.CorruptStoreError):
                for doc_id in ids:
                    assert_doc_equal(again[doc_id], doc_id, docs[doc_id])
            # A damaged pinned section (the key fences) as well.
            proxy.rate = 0.0
            assert_all_right(again, local)
            flip(cache_data(tmp_path / "cache"), damage_offset(local, "key fences"))
            proxy.rate = 1.0
            with pytest.raises(docstore.CorruptStoreError):
                for doc_id in ids:
                    assert_doc_equal(again[doc_id], doc_id, docs[doc_id])
    finally:
        proxy.stop()


def test_threads_reading_while_the_cache_is_damaged_recover(small, tmp_path):
    """16 threads read while another keeps flipping bytes of the cache file (a flip per 20 reads):
    no wrong document, and nearly every read recovers."""
    local_path, url = small
    local = docstore.open(local_path)
    ids = list(local)
    want = {doc_id: local[doc_id] for doc_id in ids}
    store = open_remote(url, tmp_path / "cache")
    assert_all_right(store, local_path)
    data = cache_data(tmp_path / "cache")
    size = os.path.getsize(data)
    done = threading.Event()
    reads = threading.Semaphore(0)
    counts = {"reads": 0, "errors": 0, "wrong": 0, "flips": 0}
    lock = threading.Lock()

    def reader(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for i in range(250):
            try:
                if i % 10 == 0:
                    batch = [ids[j] for j in rng.integers(0, len(ids), 16)]
                    wrong = not all(_same(doc, want[k]) for k, doc in store.get_many(batch).items())
                else:
                    doc_id = ids[int(rng.integers(0, len(ids)))]
                    wrong = not _same(store[doc_id], want[doc_id])
                error = False
            except docstore.CorruptStoreError:
                wrong, error = False, True
            with lock:
                counts["reads"] += 1
                counts["errors"] += error
                counts["wrong"] += wrong
            reads.release()

    def damager() -> None:
        rng = np.random.default_rng(99)
        fd = os.open(data, os.O_RDWR)
        try:
            while not done.is_set():
                at = int(rng.integers(0, size))
                byte = os.pread(fd, 1, at)
                os.pwrite(fd, bytes([byte[0] ^ (1 << int(rng.integers(0, 8)))]), at)
                counts["flips"] += 1
                for _ in range(20):  # paced by the reads, not by time
                    if not reads.acquire(timeout=5):
                        break
        finally:
            os.close(fd)

    threads = [threading.Thread(target=reader, args=(seed,)) for seed in range(16)]
    spoiler = threading.Thread(target=damager)
    spoiler.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    spoiler.join()
    assert counts["wrong"] == 0, counts
    assert counts["flips"] >= 150, counts
    assert counts["errors"] <= counts["reads"] // 100, counts
    assert store.remote_stats()["heals"] >= 10, (counts, store.remote_stats())
    local.close()


def test_a_dictionary_changed_in_the_cache_after_open_never_decodes_wrong_text(s3, tmp_path):
    """The dictionary is copied (and checked) at open: rewriting it in the cache file afterwards
    changes nothing that is decoded. (A store of its own: no thread of this process has decoded
    with its dictionary before.)"""
    docs = make_docs(800, seed=23)
    local_path = tmp_path / "dict.docstore"
    write_store(local_path, docs).close()
    url = s3.upload(str(local_path), "heal/dict.docstore")
    offset, length = sections(local_path)["dictionary"]
    assert length > 1000
    store = open_remote(url, tmp_path / "cache")
    data = cache_data(tmp_path / "cache")
    with open(data, "r+b") as f:
        f.seek(offset)
        dictionary = f.read(length)
        f.seek(offset)
        f.write(dictionary.replace(b"w", b"v"))  # another dictionary, as long, as plausible
    right = 0
    for doc_id, doc in docs.items():
        try:
            got = store[doc_id]
        except docstore.CorruptStoreError:
            continue
        assert_doc_equal(got, doc_id, doc)
        right += 1
    assert right == len(docs)
    for doc_id, doc in store.get_many(list(docs)[:100]).items():
        assert_doc_equal(doc, doc_id, docs[doc_id])


def run_python(code: str, *prefix: str, stdin: str | None = None, timeout: float = 120):
    return subprocess.run(
        [*prefix, sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": PYTHONPATH},
    )


root_only = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root (a mount or a pid namespace)"
)


@root_only
def test_a_full_disk_under_the_cache_is_an_error_not_sigbus(small, tmp_path):
    """A tmpfs of 1 MiB (in a mount namespace of its own) filled to the last page: making the
    cache's files is an error (their space is reserved before they are mapped); with room for the
    maps but not the documents, reads are errors too."""
    _, url = small
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    code = f"""
        import os, subprocess, docstore
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", {str(mount)!r}], check=True)
        filler = open({str(mount / "filler")!r}, "wb", buffering=0)
        try:
            while True:
                filler.write(b"x" * 4096)
        except OSError:
            pass
        try:
            docstore.open({url!r}, cache_dir={str(mount / "full")!r}, storage_options={FAST!r})
            print("full: opened")
        except docstore.StoreIOError as e:
            print("full: StoreIOError", e)
        # Room for the map and the usage counter, not for the documents.
        filler.truncate(os.path.getsize({str(mount / "filler")!r}) - 64 * 1024)
        try:
            store = docstore.open({url!r}, cache_dir={str(mount / "some")!r}, storage_options={FAST!r})
            store.take(range(len(store)))
            print("some: read")
        except docstore.StoreIOError as e:
            print("some: StoreIOError", e)
    """
    proc = run_python(code, "unshare", "--mount")
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    assert "full: StoreIOError" in proc.stdout and "No space left" in proc.stdout, proc.stdout
    assert "some: StoreIOError" in proc.stdout, proc.stdout


@pytest.mark.parametrize("keep", [0, 1000, 300_000])
def test_a_cache_file_truncated_under_a_reader_is_restored_not_sigbus(small, keep, tmp_path):
    local, url = small
    cache = tmp_path / "cache"
    code = f"""
        import sys, time, docstore
        from docstore._store import _same
        store = docstore.open({url!r}, cache_dir={str(cache)!r}, storage_options={FAST!r})
        local = docstore.open({local!r})
        ids = list(local)
        same = lambda a, b: len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
        assert same(store.take(range(len(ids))), local.take(range(len(ids))))
        print("ready", flush=True)
        sys.stdin.readline()  # the test truncates the cache's data file
        # A read checks the cache files' lengths at most once a millisecond: what is waited for
        # is that interval, not another process.
        time.sleep(0.01)
        assert all(_same(store[k], local[k]) for k in ids)
        assert same(store.take(range(len(ids))), local.take(range(len(ids))))
        print("heals", store.remote_stats()["heals"])
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": PYTHONPATH},
    )
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        os.truncate(cache_data(cache), keep)
        out, err = proc.communicate("go\n", timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, (proc.returncode, out, err)  # -7: SIGBUS
    assert "heals 1" in out, out


@root_only
def test_a_descendant_with_the_pid_of_the_stores_maker_does_not_hang(small, tmp_path):
    """In a pid namespace of its own, where pids are given in order and `ns_last_pid` can be set:
    A opens and reads a store (its runtime, client and decode pool are made for A's pid) and
    starts a writer, forks B and exits; B's child C gets A's pid. C's reads must make their own,
    not wait forever on threads that only A had, and the writer must stay A's."""
    local, url = small
    code = f"""
        import os, sys, time, docstore
        from docstore._store import _same
        same = lambda a, b: list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
        local = docstore.open({local!r})
        ids = list(local)
        reaped_r, reaped_w = os.pipe()
        a = os.fork()
        if a == 0:
            a = os.getpid()
            store = docstore.open({url!r}, cache_dir={str(tmp_path / "cache")!r},
                                  storage_options={FAST!r})
            assert same(store.get_many(ids[:64]), local.get_many(ids[:64]))
            writer = docstore.Writer({str(tmp_path / "out.docstore")!r}, fields={{"text": "str"}})
            writer.add("a", {{"text": "x"}})
            if os.fork() == 0:  # B: leaves the store alone, waits for A to be reaped
                os.read(reaped_r, 1)
                with open("/proc/sys/kernel/ns_last_pid", "w") as f:
                    f.write(str(a - 1))
                c = os.fork()
                if c == 0:  # C
                    if os.getpid() != a:
                        os._exit(5)
                    ok = _same(store[ids[-1]], local[ids[-1]])
                    ok = ok and same(store.get_many(ids[500:]), local.get_many(ids[500:]))
                    try:
                        writer.add("b", {{"text": "y"}})
                        os._exit(6)  # A's writer taken for C's own
                    except docstore.ClosedError:
                        pass
                    os._exit(0 if ok else 4)
                for _ in range(600):
                    pid, status = os.waitpid(c, os.WNOHANG)
                    if pid:
                        os._exit(os.waitstatus_to_exitcode(status))
                    time.sleep(0.05)
                os.kill(c, 9)
                os._exit(3)  # C hung
            os._exit(0)
        os.waitpid(a, 0)
        os.write(reaped_w, b"x")
        # B was A's child: this process (pid 1 here) inherits it.
        pid, status = os.wait()
        sys.exit(os.waitstatus_to_exitcode(status))
    """
    proc = run_python(code, "unshare", "--pid", "--fork", "--mount-proc")
    assert proc.returncode != 5, "C did not get A's pid: the test proves nothing"
    assert proc.returncode != 3, "a process with the pid of the store's maker hung"
    assert proc.returncode != 6, "a process with the pid of a writer's maker wrote with it"
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)


@pytest.mark.parametrize("key", ["retry_timeout", "init_backoff", "max_backoff", "cache_lease"])
@pytest.mark.parametrize(
    "value", ["1e300s", "1e300", "1e20m", "1" + "0" * 20 + "s", "1" + "0" * 300, "400000000s"]
)
def test_an_over_large_duration_is_an_invalid_argument(small, key, value, tmp_path):
    """Past u64 seconds, converting panicked (InternalError); past a year nothing is meant."""
    _, url = small
    with pytest.raises(docstore.InvalidArgumentError, match=f"{key}.*too long"):
        open_remote(url, tmp_path / "cache", **{key: value})
    # An exponent and a unit read as such.
    open_remote(url, tmp_path / "cache", **{key: "1e1ms" if key != "cache_lease" else "3e1s"}).close()
