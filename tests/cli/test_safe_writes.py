"""Commands that replace or add to what is at a target never lose a user's data (issue 25, §2 and
§4): an overwrite replaces only a docstore store or collection, concurrent appends keep every
append's documents, a failed export leaves its output file as it was, and what killed seals and
sharded builds leave behind is swept by the next one."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time

import pytest
import xxhash

import docstore

from ..conftest import make_docs, write_store

FIELDS = {"text": "str"}


def _shard(path, ids) -> str:
    write_store(path, {i: {"text": f"text of {i}"} for i in ids}, fields=FIELDS).close()
    return str(path)


def _ids(target) -> list[str]:
    with docstore.open(target) as store:
        return list(store)


def _beside(directory) -> list[str]:
    """What is in ``directory``: scratch directories and lock files would show here."""
    return sorted(os.listdir(directory))


@pytest.fixture
def user_dir(tmp_path):
    """A directory of the user's that is not a collection."""
    target = tmp_path / "thesis"
    target.mkdir()
    (target / "chapter1.tex").write_text("It was a dark and stormy night.")
    return target


# -- overwrite replaces only a docstore store or collection ---------------------------------------


def test_seal_overwrite_refuses_a_directory_of_user_files(tmp_path, user_dir):
    shard = _shard(tmp_path / "a.docstore", ["a", "b"])
    with pytest.raises(docstore.StoreExistsError, match=r"thesis is a directory that is not .*chapter1\.tex"):
        docstore.seal(user_dir, [shard], overwrite=True)
    assert (user_dir / "chapter1.tex").read_text() == "It was a dark and stormy night."
    assert _beside(user_dir) == ["chapter1.tex"]
    assert _beside(tmp_path) == ["a.docstore", "thesis"]  # no scratch directory, no lock file
    (user_dir / "chapter1.tex").unlink()
    with pytest.raises(docstore.StoreExistsError, match="an empty directory"):
        docstore.seal(user_dir, [shard], overwrite=True)


def test_seal_overwrite_refuses_a_collection_holding_other_files(tmp_path):
    old = [_shard(tmp_path / "a.docstore", ["a", "b"])]
    target = tmp_path / "c.docstore"
    docstore.seal(target, old).close()
    new = [_shard(tmp_path / "n.docstore", ["x"])]
    for extra in ("notes.txt", "shards/notes.txt", "more/"):
        path = target / extra
        path.mkdir() if extra.endswith("/") else path.write_text("mine")
        with pytest.raises(docstore.StoreExistsError, match=f"also holds {extra}"):
            docstore.seal(target, new, overwrite=True)
        assert _ids(target) == ["a", "b"]
        with pytest.raises(docstore.StoreExistsError, match=f"also holds {extra}"):
            docstore.seal(target, new, append=True)
        path.rmdir() if extra.endswith("/") else path.unlink()
    # A file the manifest names that is not a store is not the collection's.
    shard_file = target / "shards" / "part-00000.docstore"
    kept = shard_file.read_bytes()
    shard_file.write_bytes(b"my own file")
    with pytest.raises(docstore.StoreExistsError, match=r"part-00000.docstore \(not a docstore store\)"):
        docstore.seal(target, new, overwrite=True)
    shard_file.unlink()
    shard_file.write_bytes(kept)
    # A damaged manifest: not replaced either (nothing says the directory is docstore's).
    manifest = target / "docstore-collection.json"
    good = manifest.read_bytes()
    manifest.write_bytes(good.replace(b'"count": 2', b'"count": 3', 1))
    with pytest.raises(docstore.StoreExistsError, match="not a valid collection manifest"):
        docstore.seal(target, new, overwrite=True)
    manifest.write_bytes(good)
    # The collection alone is replaced.
    with docstore.seal(target, new, overwrite=True) as store:
        assert list(store) == ["x"]
    assert _beside(tmp_path) == ["a.docstore", "c.docstore", "n.docstore"]


def test_overwrite_replaces_a_store_file_but_no_other_file(tmp_path):
    shard = _shard(tmp_path / "a.docstore", ["a", "b"])
    store_file = tmp_path / "s.docstore"
    _shard(store_file, ["old"])
    with docstore.seal(store_file, [shard], overwrite=True) as store:  # a store, replaced
        assert list(store) == ["a", "b"]
    paper = tmp_path / "chapter1.tex"
    paper.write_text("\\section{Intro}")
    link = tmp_path / "link.docstore"
    link.symlink_to(shard)
    for target, what in ((paper, "a file that is not a docstore store"), (link, "a symbolic link")):
        with pytest.raises(docstore.StoreExistsError, match=f"{target.name} is {what}"):
            docstore.seal(target, [shard], overwrite=True)
        with pytest.raises(docstore.StoreExistsError, match=f"{target.name} is {what}"):
            docstore.Writer(target, FIELDS, overwrite=True)
    assert paper.read_text() == "\\section{Intro}" and os.readlink(link) == shard
    # A store file, damaged or not, and an empty file are replaced by a writer.
    store_file = tmp_path / "s2.docstore"
    _shard(store_file, ["old"])
    damaged = tmp_path / "damaged.docstore"
    _shard(damaged, ["d"])
    damaged.write_bytes(damaged.read_bytes()[:100])
    empty = tmp_path / "empty.docstore"
    empty.write_bytes(b"")
    for target in (store_file, damaged, empty):
        with docstore.Writer(target, FIELDS, overwrite=True) as writer:
            writer.add("new", {"text": "t"})
        assert _ids(target) == ["new"]
    # A file put there while the writer worked is refused when it would replace it.
    late = tmp_path / "late.docstore"
    writer = docstore.Writer(late, FIELDS, overwrite=True)
    writer.add("w", {"text": "t"})
    late.write_text("written meanwhile")
    with pytest.raises(
        docstore.StoreExistsError, match="late.docstore is a file that is not a docstore store"
    ):
        writer.finish()
    assert late.read_text() == "written meanwhile"
    assert not [n for n in _beside(tmp_path) if n.startswith(".")]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "docstore.cli", *args], capture_output=True, text=True, timeout=300
    )


def test_cli_and_upgrade_overwrite_refuse_user_files(tmp_path, user_dir):
    shard = _shard(tmp_path / "a.docstore", ["a", "b"])
    lines = [json.dumps({"doc_id": f"d{i}", "text": f"words {i}"}) for i in range(50)]
    (tmp_path / "in.jsonl").write_text("\n".join(lines))
    paper = tmp_path / "paper.tex"
    paper.write_text("mine")
    runs = [
        ("seal", str(user_dir), shard, "--overwrite"),
        ("build", str(tmp_path / "in.jsonl"), "-o", str(user_dir), "--shards", "2", "--overwrite", "-q"),
        ("build", str(tmp_path / "in.jsonl"), "-o", str(paper), "--overwrite", "-q"),
        ("build", str(tmp_path / "in.jsonl"), "-o", str(paper), "--shards", "2", "--overwrite", "-q"),
    ]
    for args in runs:
        out = _cli(*args)
        assert out.returncode == 1, (args, out.stderr)
        named = (
            "chapter1.tex" if str(user_dir) in args else "paper.tex is a file that is not a docstore store"
        )
        assert named in out.stderr and "left as it is" in out.stderr, (args, out.stderr)
    # upgrade of a collection into a directory of the user's (the collection path seals)
    collection = tmp_path / "c.docstore"
    docstore.seal(collection, [shard]).close()
    with pytest.raises(docstore.StoreExistsError, match="chapter1.tex"):
        docstore.upgrade(collection, user_dir, overwrite=True)
    with pytest.raises(docstore.StoreExistsError, match="chapter1.tex"):
        docstore.upgrade(shard, user_dir, overwrite=True)  # a store file's upgrade writes one file
    with pytest.raises(docstore.StoreExistsError, match="paper.tex is a file that is not"):
        docstore.upgrade(collection, paper, overwrite=True)
    assert _beside(user_dir) == ["chapter1.tex"] and paper.read_text() == "mine"
    assert not [n for n in _beside(tmp_path) if n.startswith(".")]
    # What an overwrite may replace, it replaces: a collection, from the CLI and by upgrade.
    out = _cli(
        "build", str(tmp_path / "in.jsonl"), "-o", str(collection), "--shards", "2", "--overwrite", "-q"
    )
    assert out.returncode == 0, out.stderr
    assert len(_ids(collection)) == 50
    assert _cli("seal", str(collection), shard, "--overwrite").returncode == 0
    assert _ids(collection) == ["a", "b"]
    with docstore.upgrade(collection, tmp_path / "s.docstore") as upgraded:
        assert list(upgraded) == ["a", "b"]
    with docstore.upgrade(collection, tmp_path / "s.docstore", overwrite=True) as upgraded:
        assert list(upgraded) == ["a", "b"]


# -- appends -------------------------------------------------------------------------------------


def test_append_adds_to_a_collection_a_store_file_or_nothing(tmp_path):
    a = _shard(tmp_path / "a.docstore", ["a1", "a2"])
    b = _shard(tmp_path / "b.docstore", ["b1"])
    c = _shard(tmp_path / "c.docstore", ["c1"])
    target = tmp_path / "t.docstore"
    with docstore.seal(target, [a], append=True) as store:  # nothing there: sealed alone
        assert list(store) == ["a1", "a2"]
    with docstore.seal(target, [b], append=True) as store:
        assert list(store) == ["a1", "a2", "b1"] and len(store.info()["shards"]) == 2
    out = _cli("seal", str(target), c, "--append")
    assert out.returncode == 0 and "3 docs" not in out.stdout and "in 3 shards" in out.stdout, out.stdout
    assert _ids(target) == ["a1", "a2", "b1", "c1"]
    docstore.open(target).verify()
    # A single store file is its own first shard.
    single = tmp_path / "single.docstore"
    _shard(single, ["s1"])
    with docstore.seal(single, [b], append=True) as store:
        assert list(store) == ["s1", "b1"]
    with pytest.raises(docstore.InvalidArgumentError, match="b.docstore is listed twice .*part-00001"):
        docstore.seal(target, [b], append=True)  # the same file: linked into the collection
    with pytest.raises(docstore.DuplicateKeyError, match="b1"):
        docstore.seal(target, [_shard(tmp_path / "b2.docstore", ["b1"])], append=True)
    assert _ids(target) == ["a1", "a2", "b1", "c1"]
    with pytest.raises(docstore.InvalidArgumentError, match="exclude each other"):
        docstore.seal(target, [b], append=True, overwrite=True)
    # A shard of the collection replaced on disk: refused, not sealed in under a new manifest.
    part = target / "shards" / "part-00001.docstore"
    part.unlink()
    write_store(part, {"b1": {"text": "other text"}}, fields=FIELDS).close()  # same count, valid
    with pytest.raises(docstore.CorruptStoreError, match="changed after sealing"):
        docstore.seal(target, [_shard(tmp_path / "d.docstore", ["d1"])], append=True)


def _append_when_released(barrier, target: str, shard: str, via_engine: bool, results) -> None:
    try:
        barrier.wait()
        if via_engine:  # what docstore.ray.write and docstore.spark.write run to append
            from docstore._engines import seal_shards

            seal_shards(target, {shard: "task 0"}, "append", os.path.dirname(shard), FIELDS, {}).close()
        else:
            docstore.seal(target, [shard], append=True).close()
        results.put((shard, None))
    except Exception as error:  # reported to the test
        results.put((shard, f"{type(error).__name__}: {error}"))


def test_concurrent_appends_keep_every_appended_document(tmp_path):
    """Two processes append to one collection at the same moment (released by a barrier), each
    with enough documents that its seal takes a while: the result holds both appends' documents
    (or one raised a clear error, and the other's documents are all there). Never one lost."""
    context = multiprocessing.get_context("fork")
    target = str(tmp_path / "c.docstore")
    expected = _shard(tmp_path / "base.docstore", [f"base-{i}" for i in range(2000)])
    docstore.seal(target, [expected]).close()
    want = set(_ids(target))
    for r in range(4):
        shards = []
        for side in ("x", "y"):
            (tmp_path / f"{side}{r}").mkdir()
            shards.append(
                _shard(tmp_path / f"{side}{r}" / "s.docstore", [f"{side}{r}-{i}" for i in range(20_000)])
            )
        barrier, results = context.Barrier(2), context.Queue()
        workers = [
            context.Process(target=_append_when_released, args=(barrier, target, s, k == 1, results))
            for k, s in enumerate(shards)
        ]
        for w in workers:
            w.start()
        outcome = dict(results.get(timeout=300) for _ in workers)
        for w in workers:
            w.join(timeout=60)
            assert w.exitcode == 0
        got = set(_ids(target))
        for shard in shards:
            added = set(_ids(shard))
            if outcome[shard] is None:
                want |= added
            else:
                assert "changed" in outcome[shard], outcome[shard]
        assert got == want, f"round {r}: {len(want - got)} documents lost ({outcome})"
        assert any(error is None for error in outcome.values())
    docstore.open(target).verify()
    assert not [n for n in _beside(tmp_path) if n.startswith(".")]


# -- export --------------------------------------------------------------------------------------


def test_export_of_a_damaged_store_leaves_the_output_as_it_was(tmp_path):
    store = tmp_path / "s.docstore"
    docs = make_docs(3000, seed=5)
    write_store(store, {k: {"text": v["text"]} for k, v in docs.items()}, fields=FIELDS).close()
    with open(store, "r+b") as f:  # the last document's bytes: those before it export fine
        f.seek(64 + 24 * 2)
        data_offset = int.from_bytes(f.read(8), "little")
        data_len = int.from_bytes(f.read(8), "little")
        f.seek(data_offset + data_len - 3)
        byte = f.read(1)
        f.seek(data_offset + data_len - 3)
        f.write(bytes([byte[0] ^ 0x10]))
    out = tmp_path / "out.jsonl"
    out.write_text("previous export\n")
    os.chmod(out, 0o640)
    result = _cli("export", str(store), "-o", str(out))
    assert result.returncode == 1 and "corrupt" in result.stderr.lower(), result.stderr
    assert out.read_text() == "previous export\n"
    assert _beside(tmp_path) == ["out.jsonl", "s.docstore"]  # no temporary file left
    # A good export replaces it, keeping its permissions; through a link, the file it names.
    good = tmp_path / "good.docstore"
    write_store(good, {"a": {"text": "x"}}, fields=FIELDS).close()
    link = tmp_path / "link.jsonl"
    link.symlink_to(out)
    assert _cli("export", str(good), "-o", str(link)).returncode == 0
    assert json.loads(out.read_text()) == {"doc_id": "a", "text": "x"} and link.is_symlink()
    assert os.stat(out).st_mode & 0o777 == 0o640
    assert _cli("export", str(good), "-o", str(tmp_path / "new.jsonl")).returncode == 0
    assert (tmp_path / "new.jsonl").read_text().count("\n") == 1


# -- what killed seals and builds leave behind ---------------------------------------------------


def _scratch_name(target_name: str, random: str) -> str:
    """The name of a scratch directory of ``target_name`` (publish/mod.rs ``scratch_prefix``)."""
    head = target_name.encode()[:32].decode(errors="ignore")
    return f".{head}.{xxhash.xxh3_64_hexdigest(target_name.encode())}.{random}.docstore-tmp"


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.mark.parametrize("then", ["seal", "writer"])
def test_every_scratch_directory_a_killed_seal_leaves_is_swept(tmp_path, then):
    """A seal killed while it publishes leaves a scratch directory without its lock file (taken
    away before the rename, or the old collection exchanged to the scratch name, before its
    removal), one killed while creating it an empty lock file: the next seal or writer of the
    same target sweeps them all. A live writer's scratch directory stays."""
    shard = _shard(tmp_path / "a.docstore", ["a"])
    target = tmp_path / "c.docstore"

    def write_again():
        if then == "seal":
            docstore.seal(target, [shard], overwrite=True).close()
        else:
            with docstore.Writer(target, FIELDS, overwrite=True) as writer:
                writer.add("w", {"text": "t"})

    write_again()
    leftovers = {
        "NoLock": {"docstore-collection.json": b"{}", "shards/part-00000.docstore": b"DOCSTORE"},
        "OldOne": {"docstore-collection.json": b"{}", "index.docstore": b"DOCSTORE"},
        "Empty0": {"lock": b""},
        "Dead00": {"lock": str(_dead_pid()).encode(), "store": b"DOCSTORE"},
        "Live00": {"lock": b"", "store": b"DOCSTORE"},
    }
    for random, files in leftovers.items():
        for name, content in files.items():
            path = tmp_path / _scratch_name("c.docstore", random) / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
    # The live one: locked by another process that lives on, its pid written.
    live_lock = tmp_path / _scratch_name("c.docstore", "Live00") / "lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys; f = open(sys.argv[1], 'w'); fcntl.flock(f, fcntl.LOCK_EX); "
            "f.write(str(os.getpid())); f.flush(); print('locked', flush=True); sys.stdin.read()",
            str(live_lock),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "locked\n"
        write_again()
        assert [n for n in _beside(tmp_path) if n.startswith(".")] == [_scratch_name("c.docstore", "Live00")]
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    write_again()  # its holder dead, swept too
    assert _beside(tmp_path) == ["a.docstore", "c.docstore"]


def _children(pid: int) -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.add(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has died
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_kill_9_of_a_sharded_build_kills_its_workers(tmp_path):
    lines = (json.dumps({"doc_id": f"d{i}", "text": "some words " * 20}) for i in range(300_000))
    (tmp_path / "in.jsonl").write_text("\n".join(lines))
    target = tmp_path / "c.docstore"
    cmd = [sys.executable, "-m", "docstore.cli", "build", str(tmp_path / "in.jsonl"), "-o", str(target)]
    # Its own session, so that this test's kill reaches the build alone (not the workers).
    build = subprocess.Popen([*cmd, "--shards", "2", "-q"], start_new_session=True)
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        while not workers and time.monotonic() < deadline and build.poll() is None:
            workers = _children(build.pid)
            time.sleep(0.01)  # polling, bounded: the build forks its workers after its first batch
        assert workers and build.poll() is None, "the build ended before its workers could be seen"
        workers |= _children(build.pid)
        os.kill(build.pid, signal.SIGKILL)
    finally:
        build.wait(timeout=60)
    deadline = time.monotonic() + 10
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)  # polling, bounded: how long the kernel takes to deliver the signal
    alive = [w for w in workers if _alive(w)]
    for w in alive:  # not left running after a failure
        os.kill(w, signal.SIGKILL)
    assert not alive, "the workers outlived the build"
    assert not target.exists()
    assert subprocess.run([*cmd, "--shards", "2", "-q"], timeout=600).returncode == 0
    assert _beside(tmp_path) == ["c.docstore", "in.jsonl"]  # the killed build's staging swept
    assert len(docstore.open(target)) == 300_000
