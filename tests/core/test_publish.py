"""Every store is published by the one protocol (the core's ``publish_file``): under the target's
lock, over nothing without ``overwrite``, and over nothing but a store with it; whatever the
writer's ``on_duplicate`` policy, and whatever appeared at the target while the writer wrote. An
append that drops repeats reads the ids it appends to under that lock."""

from __future__ import annotations

import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import docstore
from docstore import _docstore
from docstore._docstore import Staging

from ..conftest import holds_lock, scratch_dirs, scratch_prefix

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


# -- the one protocol, as every writer uses it (the core's publish/; _docstore.Staging) ---------


def _is_scratch_of(name: str, target_name: str) -> bool:
    """Whether ``name`` is a scratch directory of ``target_name`` by the one naming scheme."""
    return (
        re.fullmatch(re.escape(scratch_prefix(target_name)) + r"[0-9A-Za-z]{6}\.docstore-tmp", name)
        is not None
    )


def _race(target: str, k: int, barrier: object, outcomes: object) -> None:
    """A writer of ``target`` in a forked process: finishes once both writers are ready."""
    writer = docstore.Writer(target, FIELDS)
    for i in range(1000):
        writer.add(f"d{i}", text=f"writer {k}")
    barrier.wait(60)  # type: ignore[attr-defined]
    try:
        writer.finish()
        outcomes[k] = 1  # type: ignore[index]
    except docstore.StoreExistsError:
        outcomes[k] = 2  # type: ignore[index]


def test_two_writers_racing_for_one_target_one_publishes(tmp_path):
    """Two processes write one target and finish at once (a barrier): one publishes, the other
    gets StoreExistsError, and the store there is the winner's, whole."""
    ctx = multiprocessing.get_context("fork")
    barrier, outcomes = ctx.Barrier(2), ctx.Array("i", 2)
    target = tmp_path / "s"
    writers = [ctx.Process(target=_race, args=(str(target), k, barrier, outcomes)) for k in range(2)]
    for process in writers:
        process.start()
    for process in writers:
        process.join(120)
        assert process.exitcode == 0
    assert sorted(outcomes) == [1, 2]
    store = docstore.open(target)
    store.verify()
    assert {d.text for d in store.values()} == {f"writer {list(outcomes).index(1)}"} and len(store) == 1000
    assert sorted(os.listdir(tmp_path)) == ["s"]


KILLED = """
import os, sys
import docstore
from docstore._docstore import Staging

target, how = sys.argv[1], sys.argv[2]
if how == "writer":
    writer = docstore.Writer(target, {"text": "str"})
    for i in range(20_000):
        writer.add(f"d{i}", text="some words " * 10)
else:  # a Python writer's staging (build --shards, upgrade, the engines)
    staging = Staging(target)
    docstore.build(os.path.join(staging.path, "part-00000.docstore"), [{"doc_id": "a", "text": "1"}])
print("writing", flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("how", ["writer", "staging"])
def test_a_writer_killed_mid_write_leaves_scratch_that_the_next_writer_sweeps(tmp_path, how):
    target = tmp_path / "s"
    killed = subprocess.Popen(
        [sys.executable, "-c", KILLED, str(target), how],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert killed.stdout.readline() == "writing\n"
        (scratch,) = scratch_dirs(tmp_path, "s")
        assert holds_lock(tmp_path / scratch)
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=60)
    finally:
        if killed.poll() is None:
            killed.kill()
            killed.wait()
    assert not target.exists()
    assert scratch_dirs(tmp_path, "s") == [scratch] and not holds_lock(tmp_path / scratch)
    with docstore.Writer(target, FIELDS) as writer:
        writer.add("a", text="1")
    assert sorted(os.listdir(tmp_path)) == ["s"]
    assert ids_and_texts(target) == [("a", "1")]


def _store(path: Path) -> Path:
    docstore.build(path, [{"doc_id": "a", "text": "new"}])
    return path


@pytest.mark.parametrize("what", ["file", "directory"])
def test_a_users_file_or_directory_is_never_replaced_even_with_overwrite(tmp_path, what):
    target = tmp_path / "t"
    if what == "file":
        target.write_bytes(b"the user's notes")
    else:
        target.mkdir()
        (target / "chapter1.tex").write_text("mine")
    source = _store(tmp_path / "src")
    with Staging(target) as staging:
        shutil.copy(source, os.path.join(staging.path, "s"))
        with pytest.raises(docstore.StoreExistsError, match="left as it is"):
            staging.publish("s", overwrite=True)
        if what == "directory":  # an export replaces a file, never a directory
            with pytest.raises(docstore.StoreExistsError, match="not a regular file"):
                staging.publish("s", export=True)
    refused = (docstore.StoreExistsError, docstore.StoreIOError)
    with pytest.raises(refused):
        docstore.Writer(target, FIELDS, overwrite=True)
    with pytest.raises(docstore.StoreExistsError):
        docstore.seal(target, [source], overwrite=True)
    with pytest.raises(docstore.StoreExistsError):
        docstore.upgrade(source, target, overwrite=True)
    with pytest.raises(refused):
        docstore.build(target, [{"doc_id": "a", "text": "1"}], overwrite=True)
    if what == "file":
        assert target.read_bytes() == b"the user's notes"
    else:
        assert os.listdir(target) == ["chapter1.tex"] and (target / "chapter1.tex").read_text() == "mine"
    assert sorted(os.listdir(tmp_path)) == ["src", "t"]


def test_staging_publishes_only_a_store_of_its_own_directory(tmp_path):
    target = tmp_path / "s"
    with Staging(target) as staging:
        assert _is_scratch_of(os.path.basename(staging.path), "s") and staging.target == str(target)
        assert holds_lock(staging.path)
        with open(os.path.join(staging.path, "notes"), "w") as notes:
            notes.write("not a store")
        with pytest.raises(docstore.InvalidArgumentError, match="not a docstore store file"):
            staging.publish("notes")
        with pytest.raises(docstore.InvalidArgumentError, match="not a file of the staging directory"):
            staging.publish(_store(tmp_path / "elsewhere"))
        docstore.build(os.path.join(staging.path, "store"), [{"doc_id": "a", "text": "1"}])
        staging.publish("store")
        with pytest.raises(docstore.StoreExistsError):
            staging.publish("store")  # over nothing without overwrite
        staging.publish("store", overwrite=True)  # over a store with it
    assert staging.released and not os.path.exists(staging.path)
    with pytest.raises(docstore.ClosedError):
        staging.publish("store")
    assert ids_and_texts(target) == [("a", "1")]
    assert sorted(os.listdir(tmp_path)) == ["elsewhere", "s"]


def test_staging_under_a_held_lock_and_one_no_process_holds(tmp_path):
    target = tmp_path / "c"
    with _docstore.lock_target(target) as held, Staging(target, held=held) as staging:
        assert _is_scratch_of(os.path.basename(staging.path), "c")
    with _docstore.lock_target(tmp_path / "other") as held, pytest.raises(docstore.InvalidArgumentError):
        Staging(target, held=held)
    unheld = Staging.unheld(target)
    assert _is_scratch_of(os.path.basename(unheld), "c") and not holds_lock(unheld)
    assert Staging.sweep(target) == []  # no process holds it, and none ever will: kept
    with pytest.raises(docstore.InvalidArgumentError, match="not a scratch directory"):
        Staging.attach(tmp_path / "other", unheld)
    Staging.attach(target, unheld)  # attached, not released: still there
    assert os.path.isdir(unheld)
    Staging.attach(target, unheld).release()
    assert sorted(os.listdir(tmp_path)) == []


class _Recorded:
    """``_docstore.Staging`` that records the name of every staging directory made, by target."""

    made: list[tuple[str, str]] = []
    real = _docstore.Staging

    def __init__(self, target: object, **kwargs: object) -> None:
        self._staging = self.real(target, **kwargs)
        self.made.append((os.path.basename(self._staging.target), os.path.basename(self._staging.path)))

    def __getattr__(self, name: str) -> object:
        return getattr(self._staging, name)

    def __enter__(self) -> _Recorded:
        return self

    def __exit__(self, *exc: object) -> None:
        self._staging.release()

    @classmethod
    def unheld(cls, target: str) -> str:
        path = cls.real.unheld(target)
        cls.made.append((os.path.basename(target), os.path.basename(path)))
        return path

    attach = staticmethod(_docstore.Staging.attach)
    sweep = staticmethod(_docstore.Staging.sweep)


def test_every_writer_stages_by_the_one_naming_scheme(tmp_path, monkeypatch):
    """What every writer makes beside its target is named by the one scheme: the core's writer
    (Writer, build) and its seal, seen while they run; the Python writers' staging directories
    (on_duplicate="last", upgrade, the dedup of a seal, export, build --shards, the engines'),
    recorded as they are made."""
    import docstore.cli
    from docstore import _engines

    monkeypatch.setattr(_Recorded, "made", [])
    monkeypatch.setattr(_docstore, "Staging", _Recorded)
    for module in list(sys.modules.values()):
        if (
            getattr(module, "__name__", "").startswith("docstore")
            and getattr(module, "Staging", None) is _Recorded.real
        ):
            monkeypatch.setattr(module, "Staging", _Recorded)
    seen: list[tuple[str, list[str]]] = []

    def beside(target_name: str) -> None:
        seen.append((target_name, [n for n in os.listdir(tmp_path) if n.startswith(".")]))

    with docstore.Writer(tmp_path / "w", FIELDS) as writer:
        writer.add("a", text="1")
        beside("w")

    def docs():
        yield {"doc_id": "a", "text": "1"}
        beside("b")
        yield {"doc_id": "b", "text": "2"}

    docstore.build(tmp_path / "b", docs(), fields=FIELDS)
    # Fields inferred from the first 1,000 records, one None later: build() widens in a staging
    # directory.
    late = [{"doc_id": f"d{i}", "text": None if i == 1500 else "t"} for i in range(2000)]
    with pytest.warns(UserWarning, match="widened"):
        docstore.build(tmp_path / "wide", late)
    with docstore.Writer(tmp_path / "last", FIELDS, on_duplicate="last") as writer:
        writer.add("a", text="1")
        writer.add("a", text="2")
    old = [tmp_path / f"old{k}" for k in range(2)]
    for k, path in enumerate(old):
        with docstore.Writer(path, FIELDS, format_version=2) as writer:
            writer.add(f"o{k}", text="old")
    docstore.seal(tmp_path / "oldc", old).close()
    docstore.upgrade(tmp_path / "oldc").close()
    docstore.seal(tmp_path / "dedup", [tmp_path / "w", tmp_path / "b"], on_duplicate="first").close()
    assert docstore.cli.main(["export", str(tmp_path / "b"), "-o", str(tmp_path / "out.jsonl"), "-q"]) == 0
    (tmp_path / "in.jsonl").write_text("".join(f'{{"doc_id": "d{i}", "text": "t"}}\n' for i in range(100)))
    shards = ["build", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "sh"), "--shards", "2", "-q"]
    assert docstore.cli.main(shards) == 0
    _engines.make_staging(str(tmp_path / "ray"), None, {}).release()
    _engines.remove_staging(str(tmp_path / "spark"), _engines.make_unlocked_staging(str(tmp_path / "spark")))

    assert [(t, len(names)) for t, names in seen] == [("w", 1), ("b", 1)]
    assert all(_is_scratch_of(name, t) for t, names in seen for name in names), seen
    made = _Recorded.made
    assert sorted({t for t, _ in made}) == [
        "dedup",
        "last",
        "oldc",
        "out.jsonl",
        "ray",
        "sh",
        "spark",
        "wide",
    ], made
    assert all(_is_scratch_of(name, t) for t, name in made), made
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]  # nothing left beside any


# What python/docstore/_staging.py made before the one protocol (its callers' prefixes): a
# directory PREFIX + uuid4().hex holding the file "lock", flock'ed by its maker for its life.
def _old_names(target_name: str) -> list[str]:
    import hashlib
    import uuid

    sha = hashlib.sha1(os.fsencode(target_name)).hexdigest()[:12]
    kinds = ["build", "dedup", "last", "shards", "upgrade"]
    prefixes = [f".docstore-{kind}-{sha}-" for kind in kinds] + [f".{target_name}.staging-"]
    return [f"{prefix}{uuid.uuid4().hex}" for prefix in prefixes]


OLD_HOLDER = """
import fcntl, os, sys
lock = open(os.path.join(sys.argv[1], "lock.tmp"), "w")
fcntl.flock(lock, fcntl.LOCK_EX)
lock.write(f"{os.getpid()}\\n")
lock.flush()
os.rename(os.path.join(sys.argv[1], "lock.tmp"), os.path.join(sys.argv[1], "lock"))
print("locked", flush=True)
sys.stdin.read()
"""


@pytest.mark.skipif(sys.platform == "win32", reason="_staging.py used fcntl: there were none on Windows")
def test_the_old_staging_directories_are_swept_when_dead(tmp_path):
    """The staging directories of the Python package before the one protocol (_staging.py's:
    .docstore-{build,dedup,last,shards,upgrade}-SHA-UUID and the engines' .NAME.staging-UUID)
    are swept by the next writer of their target when dead: their lock free (a killed job's), or
    without a lock file and older than the writer (Linux). A live one, one without a lock file
    made since the writer started, and another target's are kept."""
    target = tmp_path / "corpus"

    def made(name: str) -> Path:
        (tmp_path / name).mkdir()
        (tmp_path / name / "part-00000.docstore").write_bytes(b"x")
        return tmp_path / name

    killed = [made(n) for n in _old_names("corpus")]
    holders = [
        subprocess.Popen(
            [sys.executable, "-c", OLD_HOLDER, str(d)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for d in killed
    ]
    for holder in holders:
        assert holder.stdout.readline() == "locked\n"
    live_holder = killed.pop()  # the engines' .corpus.staging-UUID: alive to the end
    live, holder = live_holder, holders.pop()
    for dead in holders:
        dead.send_signal(signal.SIGKILL)
        dead.wait(timeout=60)
    assert all(holds_lock(d) is False for d in killed) and holds_lock(live)
    # Without a lock file (a bare Spark job's, or one killed while being made): older than the
    # writer, and made just now.
    older, recent = made(_old_names("corpus")[0]), made(_old_names("corpus")[5])
    os.utime(older, (1_000_000_000, 1_000_000_000))
    others = [made(n) for n in _old_names("corpus.v2")]
    for other in others:
        (other / "lock").write_text("1\n")  # free, but another target's
    try:
        with docstore.Writer(target, FIELDS) as writer:
            writer.add("a", text="1")
        gone = [*killed, older] if sys.platform.startswith("linux") else killed
        for path in [*killed, older, live, recent, *others]:
            assert path.exists() == (path not in gone), path
        assert sorted(map(str, Staging.sweep(target))) == []
    finally:
        holder.kill()
        holder.wait()
    assert sorted(map(str, Staging.sweep(target))) == [str(live)]  # its holder is gone now
    assert ids_and_texts(target) == [("a", "1")]
