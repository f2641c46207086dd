"""Collections: shard files sealed into one directory that reads as one store."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import docstore
from docstore.cli import main as cli

from ..conftest import FIELDS, assert_doc_equal, make_docs, scratch_dirs, write_store


def _shards(tmp_path, docs: dict[str, dict], sizes: list[int], fields=FIELDS) -> list[str]:
    """Store files holding ``docs`` in order, ``sizes[k]`` documents in shard ``k``."""
    assert sum(sizes) == len(docs)
    items = list(docs.items())
    paths, start = [], 0
    for k, size in enumerate(sizes):
        path = tmp_path / f"part-{k}.docstore"
        write_store(path, dict(items[start : start + size]), fields=fields).close()
        paths.append(str(path))
        start += size
    return paths


@pytest.fixture(scope="module")
def docs():
    return make_docs(700, seed=3)


@pytest.fixture
def sealed(tmp_path, docs):
    shards = _shards(tmp_path, docs, [250, 0, 300, 1, 149])  # an empty shard and a 1-doc shard
    return docstore.seal(tmp_path / "corpus.docstore", shards), shards


def test_a_collection_reads_as_the_store_of_all_its_shards(tmp_path, docs, sealed):
    store, _ = sealed
    single = write_store(tmp_path / "single.docstore", docs)
    ids = list(docs)
    assert len(store) == len(docs) and list(store) == ids == list(single)
    for i, (doc_id, expected) in enumerate(docs.items()):
        assert_doc_equal(store[doc_id], doc_id, expected)
        assert store.position(doc_id) == i and doc_id in store
    assert [d.doc_id for d in store.take(range(len(docs)))] == ids
    # Batches span shards and keep request order; repeats and misses as for one file.
    rng = np.random.default_rng(0)
    order = rng.permutation(len(ids))
    picked = [ids[i] for i in order[:300]] + ["absent", ids[5], ids[5]]
    got = store.get_many(picked)
    assert list(got) == list(dict.fromkeys(i for i in picked if i != "absent"))
    for doc_id, doc in got.items():
        assert_doc_equal(doc, doc_id, docs[doc_id])
    assert [d.doc_id for d in store.take(order[:300])] == [ids[i] for i in order[:300]]
    assert store.take([-1, 0, 249, 250, 550])[0].doc_id == ids[-1]
    assert list(store.positions([ids[699], "nope", ids[250]])) == [699, -1, 250]
    assert store.get_many(picked[:50], field="label") == single.get_many(picked[:50], field="label")
    assert store.take(order[:40], fields=["doc_id", "text"]) == single.take(
        order[:40], fields=["doc_id", "text"]
    )
    assert store.get("absent") is None and "absent" not in store
    with pytest.raises(KeyError):
        store["absent"]
    with pytest.raises(IndexError):
        store.at(len(docs))
    assert list(store.keys()) == ids and store.fields == single.fields
    store.verify()


def test_info_lists_the_shards_and_the_fingerprint_is_the_contents(tmp_path, docs, sealed):
    store, shards = sealed
    info = store.info()
    assert info["count"] == len(docs) and info["checked_reads"] and info["format_version"] == 3
    assert [s["count"] for s in info["shards"]] == [250, 0, 300, 1, 149]
    assert all(os.path.isfile(s["path"]) for s in info["shards"])
    assert info["raw_bytes"] == sum(docstore.open(p).info()["raw_bytes"] for p in shards)
    assert docstore.open(store.path).fingerprint == store.fingerprint
    other = docstore.seal(tmp_path / "other.docstore", shards[::-1])
    assert other.fingerprint != store.fingerprint
    assert other.at(0).doc_id == list(docs)[-149]


def test_shards_are_left_as_they_were(tmp_path, docs):
    shards = _shards(tmp_path, docs, [400, 300])
    before = [Path(p).read_bytes() for p in shards]
    store = docstore.seal(tmp_path / "c", shards)
    assert [Path(p).read_bytes() for p in shards] == before
    for p in shards:
        os.remove(p)  # the collection holds its own links
    assert store.at(650).doc_id == list(docs)[650]
    assert docstore.open(tmp_path / "c")[list(docs)[3]].doc_id == list(docs)[3]


def _leftovers(directory) -> list[str]:
    return sorted(n for n in os.listdir(directory) if not n.startswith("part-"))


def test_a_repeated_id_names_it_and_both_shards_and_leaves_nothing(tmp_path, docs):
    items = list(docs.items())
    first = write_store(tmp_path / "part-a.docstore", dict(items[:100]))
    second = write_store(tmp_path / "part-b.docstore", dict(items[99:200]))  # shares items[99]
    with pytest.raises(docstore.DuplicateKeyError) as caught:
        docstore.seal(tmp_path / "c.docstore", [first.path, second.path])
    assert caught.value.doc_id == items[99][0]
    message = str(caught.value)
    assert "part-a.docstore" in message and "part-b.docstore" in message
    assert _leftovers(tmp_path) == []  # no target, no scratch directory


def test_bad_shard_lists_are_clear_errors_that_leave_nothing(tmp_path, docs):
    items = list(docs.items())
    good = write_store(tmp_path / "part-good.docstore", dict(items[:10])).path
    other_fields = write_store(
        tmp_path / "part-fields.docstore", {"x": {"text": "t"}}, fields={"text": "str"}
    )
    v1 = write_store(tmp_path / "part-v1.docstore", dict(items[10:20]), format_version=1).path
    target = tmp_path / "c.docstore"
    with pytest.raises(docstore.SchemaError, match="part-fields.docstore"):
        docstore.seal(target, [good, other_fields.path])
    with pytest.raises(docstore.InvalidArgumentError, match="upgrade"):
        docstore.seal(target, [good, v1])
    with pytest.raises(docstore.InvalidArgumentError, match="at least one"):
        docstore.seal(target, [])
    with pytest.raises(docstore.StoreNotFoundError, match="missing.docstore"):
        docstore.seal(target, [good, tmp_path / "missing.docstore"])
    with pytest.raises(docstore.CorruptStoreError, match="part-junk"):
        (tmp_path / "part-junk").write_bytes(b"not a store" * 100)
        docstore.seal(target, [good, tmp_path / "part-junk"])
    with pytest.raises(docstore.InvalidArgumentError, match="listed twice"):
        docstore.seal(target, [good, os.path.join(os.path.dirname(good), ".", "part-good.docstore")])
    docstore.seal(tmp_path / "coll", [good])
    with pytest.raises(docstore.InvalidArgumentError, match="a directory"):
        docstore.seal(target, [good, tmp_path / "coll"])
    shutil.rmtree(tmp_path / "coll")
    with pytest.raises(TypeError, match="list of paths"):
        docstore.seal(target, good)
    assert _leftovers(tmp_path) == []
    (tmp_path / "taken").write_bytes(b"mine")
    with pytest.raises(docstore.StoreExistsError):
        docstore.seal(tmp_path / "taken", [good])
    assert (tmp_path / "taken").read_bytes() == b"mine"


def test_overwrite_replaces_atomically_and_old_readers_keep_reading(tmp_path, docs):
    items = list(docs.items())
    for name in ("a", "b", "m"):
        (tmp_path / name).mkdir()
    a = _shards(tmp_path / "a", dict(items[:300]), [100, 200])
    b = _shards(tmp_path / "b", dict(items[300:]), [400])
    target = tmp_path / "c.docstore"
    old = docstore.seal(target, a)
    with pytest.raises(docstore.StoreExistsError):
        docstore.seal(target, b)
    new = docstore.seal(target, b, overwrite=True)
    assert new.at(0).doc_id == items[300][0] and len(new) == 400
    assert old.at(299).doc_id == items[299][0]  # the replaced collection, still mapped
    assert _leftovers(tmp_path) == ["a", "b", "c.docstore", "m"]
    # A single store file replaced by a collection, and appending: old shards then new ones.
    write_store(tmp_path / "file.docstore", dict(items[:5]))
    assert len(docstore.seal(tmp_path / "file.docstore", b, overwrite=True)) == 400
    shards_now = [s["path"] for s in new.info()["shards"]]
    more = _shards(tmp_path / "m", {"new-doc": items[0][1]}, [1])
    appended = docstore.seal(target, shards_now + more, overwrite=True)
    assert len(appended) == 401 and appended.at(400).doc_id == "new-doc"
    appended.verify()


def test_pickles_as_its_path_and_reads_after_fork(sealed, docs):
    store, _ = sealed
    again = pickle.loads(pickle.dumps(store))
    assert again.fingerprint == store.fingerprint and again.at(600).doc_id == list(docs)[600]
    store.get_many(list(docs)[:100])  # the decode pool exists before the fork
    code = f"""
import os, pickle, sys
import docstore
store = docstore.open({os.fspath(store.path)!r})
store.get_many(list(store.keys())[:200])
pid = os.fork()
if pid == 0:
    got = store.take(range(len(store)))
    os._exit(0 if [d.doc_id for d in got] == list(store.keys()) else 3)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""
    done = subprocess.run([sys.executable, "-c", code], timeout=120)
    assert done.returncode == 0


def test_threads_read_a_collection_concurrently(sealed, docs):
    store, _ = sealed
    ids = list(docs)
    errors = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(20):
            pick = rng.choice(len(ids), 64)
            got = store.take(pick)
            if [d.doc_id for d in got] != [ids[i] for i in pick]:
                errors.append(seed)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_a_changed_collection_is_refused_at_open(tmp_path, docs, sealed):
    store, _ = sealed
    root = store.path
    manifest = json.loads((root / "docstore-collection.json").read_text())
    # A shard replaced by another valid store of the same size.
    victim = root / manifest["shards"][4]["file"]
    items = list(docs.items())
    write_store(tmp_path / "imposter.docstore", {f"x{i}": d for i, (_, d) in enumerate(items[:149])})
    saved = victim.read_bytes()
    shutil.copyfile(tmp_path / "imposter.docstore", victim)
    with pytest.raises(docstore.CorruptStoreError, match="not the file that was sealed"):
        docstore.open(root)
    victim.write_bytes(saved)
    assert len(docstore.open(root)) == len(docs)
    for bad in [
        {**manifest, "count": 5},
        {**manifest, "shards": manifest["shards"][::-1]},  # each entry still names its own file
        {**manifest, "index": {**manifest["index"], "file": "../index.docstore"}},
    ]:
        (root / "docstore-collection.json").write_text(json.dumps(bad))
        with pytest.raises(docstore.CorruptStoreError, match="checksum mismatch"):
            docstore.open(root)
    text = json.dumps(manifest)
    for at in range(0, len(text), 7):  # a damaged character anywhere
        damaged = text[:at] + chr(ord(text[at]) ^ 1) + text[at + 1 :]
        (root / "docstore-collection.json").write_text(damaged)
        with pytest.raises((docstore.CorruptStoreError, docstore.UnsupportedVersionError)):
            docstore.open(root)
    (root / "docstore-collection.json").write_text(json.dumps({**manifest, "version": 9}))
    # the manifest's own version, not the stores' format version
    with pytest.raises(docstore.UnsupportedVersionError, match="collection manifest version 9 is not"):
        docstore.open(root)
    os.remove(root / "docstore-collection.json")
    with pytest.raises(docstore.StoreIOError, match="not a docstore collection"):
        docstore.open(root)


def test_every_flipped_byte_of_the_global_index_gives_the_right_answer_or_an_error(tmp_path):
    """The global index is trusted for nothing: a flip anywhere in it (after its header, which
    the manifest pins) either leaves every answer right or raises CorruptStoreError."""
    docs = {f"{p}{i}": {"text": f"text {p}{i}"} for i in range(24) for p in ("a", "bb-long-prefix-")}
    shards = _shards(tmp_path, docs, [20, 28], fields={"text": "str"})
    root = docstore.seal(tmp_path / "c", shards).path
    index = root / "index.docstore"
    pristine = index.read_bytes()
    ids = list(docs)
    absent = ["a", "a100", "bb-long-prefix-", "bb-long-prefix-5x", "zz"]
    expected = {
        "get": lambda: ids,
        "get_many": lambda: ids,
        "positions": lambda: list(range(len(ids))) + [-1] * len(absent),
        "in": lambda: [True] * len(ids) + [False] * len(absent),
    }
    asks = {  # each kind of lookup on its own: one raising must not hide another's answer
        "get": lambda s: [
            d.doc_id if d is not None and d.text == docs[d.doc_id]["text"] else None for d in map(s.get, ids)
        ],
        "get_many": lambda s: [
            d.doc_id for d in s.get_many(ids + absent).values() if d.text == docs[d.doc_id]["text"]
        ],
        "positions": lambda s: list(s.positions(ids + absent)),
        "in": lambda s: [i in s for i in ids + absent],
    }
    wrong, raised = [], 0
    for at in range(512, len(pristine)):
        damaged = bytearray(pristine)
        damaged[at] ^= 0x10
        index.write_bytes(damaged)
        try:
            store = docstore.open(root)
        except docstore.CorruptStoreError:
            raised += 1
            continue
        for kind, ask in asks.items():
            try:
                if ask(store) != expected[kind]():
                    wrong.append((at, kind))
            except docstore.CorruptStoreError:
                raised += 1
    index.write_bytes(pristine)
    assert wrong == []
    assert raised > 0


def test_torch_datasets_take_a_collection(tmp_path):
    torch = pytest.importorskip("torch")
    from docstore.torch import DocDataset, TokenDataset

    docs = {f"d{i}": {"tokens": np.arange(i % 7 + 2, dtype=np.int32)} for i in range(90)}
    shards = _shards(tmp_path, docs, [30, 30, 30], fields={"tokens": "int32[]"})
    store = docstore.seal(tmp_path / "c", shards)
    windows = TokenDataset(store, "tokens", seq_len=2, pack=True)
    single = TokenDataset(
        write_store(tmp_path / "one.docstore", docs, fields={"tokens": "int32[]"}), seq_len=2, pack=True
    )
    assert len(windows) == len(single)
    loader = torch.utils.data.DataLoader(windows, batch_size=8, num_workers=2)
    got = torch.cat([x for x, _ in loader])
    assert torch.equal(got, torch.stack([single[i][0] for i in range(len(single))]))
    dataset = DocDataset(tmp_path / "c", field="doc_id")
    assert [dataset[i] for i in range(len(dataset))] == list(docs)


def test_cli_seals_and_reads_a_collection(tmp_path, docs, capsys):
    shards = _shards(tmp_path, docs, [350, 350])
    target = str(tmp_path / "c.docstore")
    assert cli(["seal", target, *shards]) == 0
    assert "700" in capsys.readouterr().out
    assert cli(["seal", target, *shards]) == 1
    assert "already exists" in capsys.readouterr().err
    assert cli(["info", target]) == 0
    out = capsys.readouterr().out
    assert "shards" in out and "part-00001.docstore" in out
    assert cli(["info", "--json", target]) == 0
    assert len(json.loads(capsys.readouterr().out)["shards"]) == 2
    doc_id = list(docs)[500]
    assert cli(["get", target, doc_id]) == 0
    assert json.loads(capsys.readouterr().out)["doc_id"] == doc_id
    assert cli(["verify", target]) == 0
    assert "OK" in capsys.readouterr().out
    assert cli(["export", target, "-o", str(tmp_path / "all.jsonl")]) == 0
    lines = (tmp_path / "all.jsonl").read_text().splitlines()
    assert [json.loads(line)["doc_id"] for line in lines] == list(docs)


def test_cli_build_shards_splits_the_input_between_lines_and_keeps_its_order(tmp_path, capsys):
    lines = [json.dumps({"doc_id": f"d{i}", "text": "é" * (i % 13), "n": i}) for i in range(3000)]
    (tmp_path / "a.jsonl").write_text("\n".join(lines[:2000]) + "\n", encoding="utf-8")
    (tmp_path / "b.jsonl").write_text("\n".join(lines[2000:]), encoding="utf-8")  # no final newline
    target = str(tmp_path / "c.docstore")
    inputs = [str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]
    assert cli(["build", *inputs, "-o", target, "--shards", "3"]) == 0
    assert "in 3 shards" in capsys.readouterr().out
    store = docstore.open(target)
    assert list(store) == [f"d{i}" for i in range(3000)]
    assert [s["count"] for s in store.info()["shards"]] != [3000, 0, 0]
    assert store["d2999"].n == 2999 and store["d12"].text == "é" * 12
    assert sorted(os.listdir(tmp_path)) == ["a.jsonl", "b.jsonl", "c.docstore"]  # no staging left


def test_shard_plan_covers_every_byte_once_in_order(tmp_path):
    from docstore.cli.shards import shard_plan

    (tmp_path / "x.jsonl").write_bytes(b"{}\n" * 1000)
    (tmp_path / "y.csv").write_bytes(b"a\n" * 10)
    for n in (1, 2, 3, 7, 64, 5000):
        plan = shard_plan([str(tmp_path / "x.jsonl"), str(tmp_path / "y.csv")], ["jsonl", "csv"], n)
        assert len(plan) == n
        pieces = [p for run in plan for p in run]
        ranges = [p[2] for p in pieces if p[0].endswith("x.jsonl")]
        assert ranges[0][0] == 0 and ranges[-1][1] == 3000
        assert all(a[1] == b[0] and a[0] < a[1] for a, b in zip(ranges, ranges[1:]))
        assert [p[2] for p in pieces if p[0].endswith("y.csv")] == [None]


def test_shard_plan_gives_shards_about_equal_bytes(tmp_path):
    """One file of JSON lines in 4 shards held 4.2 / 39.3 / 39.7 / 80.4 MB (a first shard of the
    dictionary's sample, then equal bytes per worker): every shard now holds about 1/N of the
    bytes, whatever the number of cores."""
    from docstore.cli.shards import balanced_groups, shard_plan

    assert [list(g) for g in balanced_groups(7, 2)] == [[0, 1, 2, 3], [4, 5, 6]]
    assert [len(g) for g in balanced_groups(3, 5)] == [1, 1, 1]
    path = tmp_path / "a.jsonl"
    lines = [json.dumps({"doc_id": f"d{i}", "text": "w " * (i % 50)}) for i in range(20_000)]
    path.write_text("\n".join(lines) + "\n")
    size = path.stat().st_size
    for n in (2, 3, 4, 7):
        plan = shard_plan([str(path)], ["jsonl"], n)
        runs = [sum(p[2][1] - p[2][0] for p in run) for run in plan]
        assert sum(runs) == size and max(runs) - min(runs) <= 1, (n, runs)
    # Built: the shards' stored bytes within 10% of each other (lines are up to 150 bytes).
    target = str(tmp_path / "c")
    assert cli(["build", str(path), "-o", target, "--shards", "4", "-q"]) == 0
    shards = docstore.open(target).info()["shards"]
    counts = [s["count"] for s in shards]
    assert len(shards) == 4 and sum(counts) == 20_000
    stored = [s["stored_bytes"] for s in shards]
    assert max(stored) < 1.1 * min(stored), stored


def test_cli_build_shards_failures_name_the_place_and_leave_nothing(tmp_path, capsys):
    lines = [json.dumps({"doc_id": f"d{i}", "text": "t"}) for i in range(2000)]
    lines[1500] = '{"doc_id": "d1500", "text": 5'
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    target = str(tmp_path / "c.docstore")
    assert cli(["build", str(tmp_path / "a.jsonl"), "-o", target, "--shards", "2"]) == 1
    err = capsys.readouterr().err
    # Met by the parent, which reads the first 4 MiB for the dictionary: named by its line.
    assert "a.jsonl:1501: invalid JSON" in err
    lines[1500] = json.dumps({"doc_id": "d3", "text": "again"})
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    assert cli(["build", str(tmp_path / "a.jsonl"), "-o", target, "--shards", "2"]) == 1
    err = capsys.readouterr().err
    assert "1 duplicate doc id" in err and "'d3' at " in err
    assert "a.jsonl:1501 (first at " in err and err.rstrip().count("a.jsonl:4)") == 1
    assert cli(["build", "-", "-o", target, "--shards", "2"]) == 1
    assert "stdin" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["a.jsonl"]


def test_cli_build_shards_stops_the_workers_after_a_failed_one(tmp_path, capsys, monkeypatch):
    import multiprocessing

    from docstore.cli import shards

    lines = [json.dumps({"doc_id": f"d{i}", "text": "t"}) for i in range(3000)]
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    pieces = [(str(tmp_path / "a.jsonl"), "jsonl", None)]
    args = ({"text": "str"}, "doc_id", None, None, None, {"jsonl": {}})
    # Group 0 failed: group 0 goes on, group 1 stops at its next look (every 1024 records),
    # leaving no shard.
    monkeypatch.setattr(shards, "_FAILED", multiprocessing.RawValue("q", 0))
    assert shards.build_shard(str(tmp_path / "s1.docstore"), pieces, *args) == 3000
    monkeypatch.setattr(shards, "_GROUP", 1)
    with pytest.raises(shards._Stopped):
        shards.build_shard(str(tmp_path / "s2.docstore"), pieces, *args)
    assert not (tmp_path / "s2.docstore").exists()
    monkeypatch.undo()

    # A real build, each shard's outcome logged by the workers (forked: they see the patch).
    # Two workers whatever the cores: shards 0 and 1 built by the first (group 0), 2 and 3 by
    # the second (group 1). Which worker meets its bad line first is not left to the scheduler:
    # a worker waits, at the start of its first shard, until the shared failure word says the
    # other group failed (what a worker did, never how long it took).
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    log = tmp_path / "log"
    build_shard = shards.build_shard
    waits_for: dict[int, int] = {}  # group -> the group whose failure it waits for

    def logged(path, *a, **k):
        try:
            if shards._GROUP in waits_for and path.endswith(("part-00000.docstore", "part-00002.docstore")):
                other = waits_for[shards._GROUP]
                deadline = time.monotonic() + 120  # a hang would be a bug: fail, do not wait forever
                while shards._FAILED.value != other:
                    assert time.monotonic() < deadline, f"group {other} never failed"
                    time.sleep(0.01)
            return build_shard(path, *a, **k)
        except BaseException as exc:
            with open(log, "a") as f:
                f.write(f"{os.path.basename(path)} {type(exc).__name__}\n")
            raise

    monkeypatch.setattr(shards, "build_shard", logged)
    # 200,000 records in 4 shards of 50,000.
    lines = [json.dumps({"doc_id": f"d{i}", "text": "some words " * 10}) for i in range(200_000)]
    good = list(lines)
    bad = 37_000  # in the first worker's first shard
    lines[bad] = '{"doc_id": "x", "text": 5'
    (tmp_path / "b.jsonl").write_text("\n".join(lines) + "\n")
    target = str(tmp_path / "c.docstore")
    # The first worker fails; the second starts only then, and stops at its first look.
    waits_for[1] = 0
    assert cli(["build", str(tmp_path / "b.jsonl"), "-o", target, "--shards", "4"]) == 1
    offset = sum(len(line) + 1 for line in lines[:bad])
    assert f"b.jsonl: the line at byte {offset}: invalid JSON" in capsys.readouterr().err
    assert sorted(log.read_text().splitlines()) == [
        "part-00000.docstore UsageError",
        "part-00002.docstore _Stopped",
    ]
    # The second worker fails first, the first (which waits for that) later: the first one's
    # failure is reported (the first in the file), as it would be without any stop.
    log.unlink()
    waits_for.clear()
    waits_for[0] = 1
    lines = list(good)
    lines[45_000] = '{"doc_id": "y", "text": 5'
    lines[120_000] = '{"doc_id": "z", "text": 5'
    (tmp_path / "b.jsonl").write_text("\n".join(lines) + "\n")
    assert cli(["build", str(tmp_path / "b.jsonl"), "-o", target, "--shards", "4"]) == 1
    offset = sum(len(line) + 1 for line in lines[:45_000])
    assert f"b.jsonl: the line at byte {offset}: invalid JSON" in capsys.readouterr().err
    assert sorted(log.read_text().splitlines()) == [
        "part-00000.docstore UsageError",
        "part-00002.docstore UsageError",
    ]
    assert sorted(os.listdir(tmp_path)) == ["a.jsonl", "b.jsonl", "log", "s1.docstore"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ids=st.lists(
        st.text(st.sampled_from("ab\u00e9\U0001f600-0"), min_size=1, max_size=12), max_size=60, unique=True
    ),
    cuts=st.lists(st.integers(0, 60), max_size=6),
)
def test_any_split_into_shards_reads_as_a_dict(tmp_path_factory, ids, cuts):
    """Against a dict: ids that sort across shard boundaries, empty shards, one-document ones."""
    tmp = tmp_path_factory.mktemp("split")
    oracle = {doc_id: {"text": f"<{doc_id}>" * (i % 4)} for i, doc_id in enumerate(ids)}
    bounds = sorted(min(c, len(ids)) for c in cuts)
    sizes = [b - a for a, b in zip([0, *bounds], [*bounds, len(ids)])]
    shards = _shards(tmp, oracle, sizes, fields={"text": "str"})
    store = docstore.seal(tmp / "c", shards)
    assert len(store) == len(oracle) and list(store) == ids
    for doc_id, doc in oracle.items():
        assert store[doc_id].text == doc["text"]
    assert {k: d.text for k, d in store.get_many([*ids[::-1], "zz", "a" * 13]).items()} == {
        k: oracle[k]["text"] for k in ids[::-1]
    }
    assert [d.doc_id for d in store.take(list(range(len(ids)))[::-1])] == ids[::-1]
    assert all(i not in store for i in ("zz", "a" * 13, "\U0001f600" * 13))
    store.verify()


def test_kill_9_of_a_sharded_build_leaves_nothing_and_the_next_build_sweeps(tmp_path):
    lines = (json.dumps({"doc_id": f"d{i}", "text": "some words " * 20}) for i in range(300_000))
    (tmp_path / "in.jsonl").write_text("\n".join(lines))
    target = tmp_path / "c.docstore"
    cmd = [sys.executable, "-m", "docstore.cli", "build", str(tmp_path / "in.jsonl"), "-o", str(target)]
    build = subprocess.Popen([*cmd, "--shards", "2", "-q"], start_new_session=True)
    try:
        # Killed once a shard writer has started (its scratch directory exists).
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and build.poll() is None:
            staging = scratch_dirs(tmp_path, "c.docstore")  # the build's, by the one scheme
            if staging and any(n.endswith(".docstore-tmp") for n in os.listdir(tmp_path / staging[0])):
                break
        assert build.poll() is None, "the build ended before it could be killed"
        os.killpg(build.pid, signal.SIGKILL)
    finally:
        build.wait(timeout=60)
    assert not target.exists()
    assert subprocess.run([*cmd, "--shards", "2", "-q"], timeout=600).returncode == 0
    assert sorted(os.listdir(tmp_path)) == ["c.docstore", "in.jsonl"]
    assert len(docstore.open(target)) == 300_000


def test_verify_names_every_damaged_shard(tmp_path, docs):
    store = docstore.seal(tmp_path / "c", _shards(tmp_path, docs, [200, 300, 200]))
    for shard in store.info()["shards"]:
        path = shard["path"]
        with open(path, "r+b") as f:  # in place: the header, which the manifest pins, is intact
            f.seek(64 + 24 * 2)
            data_offset = int.from_bytes(f.read(8), "little")
            f.seek(data_offset + 40)
            byte = f.read(1)
            f.seek(data_offset + 40)
            f.write(bytes([byte[0] ^ 0x01]))
        with pytest.raises(docstore.CorruptStoreError, match=os.path.basename(path)):
            docstore.open(tmp_path / "c").verify()
        with open(path, "r+b") as f:
            f.seek(data_offset + 40)
            f.write(byte)
    docstore.open(tmp_path / "c").verify()


def test_shards_can_share_one_dictionary(tmp_path, docs):
    items = list(docs.items())
    first = write_store(tmp_path / "first.docstore", dict(items[:300]))
    dictionary = first.dictionary
    assert 0 < len(dictionary) <= 65536
    second = write_store(tmp_path / "second.docstore", dict(items[300:]), dictionary=dictionary)
    assert second.dictionary == dictionary
    store = docstore.seal(tmp_path / "c", [first.path, second.path])
    for doc_id, expected in items[::7]:
        assert_doc_equal(store[doc_id], doc_id, expected)
    with pytest.raises(docstore.InvalidArgumentError, match="at most 65536"):
        docstore.Writer(tmp_path / "x.docstore", FIELDS, dictionary=b"x" * 65537)
    assert not (tmp_path / "x.docstore").exists()
    # A sharded build trains once: every shard holds the same dictionary.
    lines = [json.dumps({"doc_id": f"d{i}", "text": f"words {i} " * 30}) for i in range(4000)]
    (tmp_path / "in.jsonl").write_text("\n".join(lines))
    assert cli(["build", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "b"), "--shards", "3", "-q"]) == 0
    shards = [docstore.open(s["path"]) for s in docstore.open(tmp_path / "b").info()["shards"]]
    assert len({s.dictionary for s in shards}) == 1 and shards[0].dictionary
    # The one a single-file build trains on the same records (all in its first batch), whether
    # the first records become a shard (JSON lines) or are read as a sample only (gzipped).
    assert cli(["build", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "one"), "-q"]) == 0
    assert docstore.open(tmp_path / "one").dictionary == shards[0].dictionary
    (tmp_path / "in.jsonl.gz").write_bytes(gzip.compress((tmp_path / "in.jsonl").read_bytes()))
    assert (
        cli(["build", str(tmp_path / "in.jsonl.gz"), "-o", str(tmp_path / "z"), "--shards", "3", "-q"]) == 0
    )
    assert docstore.open(tmp_path / "z").dictionary == shards[0].dictionary


def test_train_dictionary_gives_shards_one_dictionary(tmp_path, docs):
    items = list(docs.items())
    sample = [{"doc_id": k, **v} for k, v in items[:200]]
    dictionary = docstore.train_dictionary(sample, fields=FIELDS)
    assert 0 < len(dictionary) <= 65536
    assert len(docstore.train_dictionary(sample, fields=FIELDS, size=4096)) <= 4096
    shards = []
    for k, part in enumerate([items[:350], items[350:]]):
        shards.append(write_store(tmp_path / f"p{k}.docstore", dict(part), dictionary=dictionary).path)
    store = docstore.seal(tmp_path / "c", shards)
    assert store.dictionary == dictionary == docstore.open(shards[1]).dictionary
    for doc_id, expected in items[::11]:
        assert_doc_equal(store[doc_id], doc_id, expected)


def test_train_dictionary_is_the_one_the_writer_trains(tmp_path):
    """The trainer is the writer's own: on the records of a writer's first batch it gives the
    dictionary that writer trains, byte for byte, whatever the input, and a store written with it
    is the store the writer makes alone."""
    pa = pytest.importorskip("pyarrow")
    from docstore import _docstore
    from docstore._engines import shared_dictionary

    docs = make_docs(3000, seed=5)  # about 0.5 MiB: one batch
    records = [{"doc_id": k, **v} for k, v in docs.items()]
    alone = docstore.build(tmp_path / "alone.docstore", records, fields=FIELDS)
    assert alone.dictionary
    trained = docstore.train_dictionary(records, fields=FIELDS)
    assert trained == alone.dictionary
    assert docstore.train_dictionary(iter(records)) == trained  # fields inferred, as build infers them
    table = pa.table(
        {"doc_id": list(docs), **{n: [d[n] for d in docs.values()] for n in FIELDS}},
        schema=pa.schema(
            [
                ("doc_id", pa.string()),
                ("text", pa.string()),
                ("label", pa.int64()),
                ("score", pa.float64()),
                ("tokens", pa.list_(pa.int32())),
                ("raw", pa.binary()),
            ]
        ),
    )
    assert docstore.train_dictionary(table) == trained
    assert docstore.train_dictionary(table.to_batches(max_chunksize=7)[0]) == docstore.train_dictionary(
        records[:7], fields=FIELDS
    )
    assert (
        shared_dictionary(str(tmp_path / "new"), "errorifexists", lambda: table, "doc_id", None, {})
        == trained
    )
    for size in (4096, 0):
        small = docstore.build(tmp_path / f"d{size}.docstore", records, fields=FIELDS, dict_size=size)
        assert docstore.train_dictionary(records, fields=FIELDS, size=size) == small.dictionary
    shared = docstore.build(tmp_path / "shared.docstore", records, fields=FIELDS, dictionary=trained)
    assert shared.info()["stored_bytes"] == alone.info()["stored_bytes"]
    assert (tmp_path / "shared.docstore").read_bytes() == (tmp_path / "alone.docstore").read_bytes()
    # Records as bytes: trained as they are; the first 8 MiB only, the rest not even taken.
    taken = []

    def texts():
        for i in range(100_000):
            taken.append(i)
            yield b"%d some words of a record " % i * 10

    assert _docstore.train_dictionary(texts(), 4096) == _docstore.train_dictionary(
        [b"%d some words of a record " % i * 10 for i in range(len(taken))], 4096
    )
    assert 8 << 20 <= sum(len(b"%d some words of a record " % i * 10) for i in taken) < (8 << 20) + 400
    with pytest.raises(docstore.InvalidArgumentError, match="dict_size must be 0 .* to 65536 bytes"):
        docstore.train_dictionary(records, fields=FIELDS, size=65537)
    with pytest.raises(TypeError, match="samples must be bytes"):
        _docstore.train_dictionary(["text"])
    with pytest.raises(docstore.SchemaError, match="missing field"):
        docstore.train_dictionary([{"doc_id": "a", "text": "x"}, {"doc_id": "b"}])
    with pytest.raises(docstore.SchemaError, match="sample 1 has 1 values for 2 fields"):
        _docstore.train_dictionary([("a", 1), ("b",)], fields={"t": "str", "n": "int64"})


def test_cli_build_shards_of_a_file_with_a_byte_order_mark(tmp_path, capsys):
    # The mark is not part of the first record, but it is part of the file's byte offsets.
    lines = [json.dumps({"doc_id": f"d{i}", "text": "x" * (100 + i % 50)}) for i in range(60_000)]  # > 4 MiB
    (tmp_path / "a.jsonl").write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode())
    target = str(tmp_path / "c.docstore")
    assert cli(["build", str(tmp_path / "a.jsonl"), "-o", target, "--shards", "3", "-q"]) == 0
    assert list(docstore.open(target)) == [f"d{i}" for i in range(60_000)]
    good = list(lines)
    lines[1_000] = "{not json"  # in the dictionary's sample, read from the start of the file
    (tmp_path / "a.jsonl").write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode())
    assert cli(["build", str(tmp_path / "a.jsonl"), "-o", target, "--shards", "3", "--overwrite"]) == 1
    assert "a.jsonl:1001: invalid JSON" in capsys.readouterr().err
    lines = good
    lines[50_000] = "{not json"  # in the last shard, read from a byte offset
    (tmp_path / "a.jsonl").write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode())
    assert cli(["build", str(tmp_path / "a.jsonl"), "-o", target, "--shards", "3", "--overwrite"]) == 1
    offset = 3 + sum(len(line) + 1 for line in lines[:50_000])
    assert f"the line at byte {offset}: invalid JSON" in capsys.readouterr().err


@pytest.mark.parametrize("block", [7, 64, 1 << 20])
@pytest.mark.parametrize("tail", ["\n", ""], ids=["newline", "no-newline"])
def test_byte_ranges_of_json_lines_read_each_record_once(tmp_path, monkeypatch, block, tail):
    """The lines read by every byte range of a split are the file's lines, once each, at their
    byte offsets, whatever the reading block (ASCII and not, a byte-order mark, blank lines)."""
    from docstore.cli import inputs

    monkeypatch.setattr(inputs, "RANGE_BLOCK", block)
    rng = np.random.default_rng(block)
    words = ["a", "bé", "日本", "x" * 40, "\u2028", ""]
    records = [{"doc_id": f"d{i}", "text": " ".join(rng.choice(words, 5))} for i in range(300)]
    lines = [json.dumps(r, ensure_ascii=bool(i % 2)) for i, r in enumerate(records)]
    lines[10] = lines[20] = ""  # blank lines are skipped
    lines[30] = "\u3000 \u2003"  # so are lines of Unicode spaces, as the whole-file reader skips them
    body = ("\ufeff" + "\n".join(lines) + tail).encode()
    path = tmp_path / "x.jsonl"
    path.write_bytes(body)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line.encode()) + 1)
    # Where each line starts: the first at 0 (its byte-order mark read with it), the others 3
    # bytes after the offsets counted without the mark.
    want = [(offsets[i] + 3 if i else 0, json.loads(line)) for i, line in enumerate(lines) if line.strip()]
    for n in (1, 3, 17):
        cuts = sorted({0, len(body), *rng.integers(0, len(body), n - 1).tolist()})
        got = [r for a, b in zip(cuts, cuts[1:]) for r in inputs._read_jsonl_range(str(path), a, b)]
        assert got == want


def test_engines_shared_dictionary_leaves_bad_values_to_the_job(tmp_path):
    """The driver's dictionary sample never raises for a value the job will refuse (it would
    name a row number, not the real id): it trains nothing, and the task reports the error."""
    pa = pytest.importorskip("pyarrow")
    from docstore._engines import shared_dictionary

    def sample(values):
        return lambda: pa.table({"doc_id": [f"d{i}" for i in range(len(values))], "x": values})

    target = str(tmp_path / "c.docstore")
    texts = [f"some text number {i} " * 20 for i in range(500)]
    assert shared_dictionary(target, "errorifexists", sample(texts), "doc_id", {"x": "str"}, {})
    assert (
        shared_dictionary(target, "errorifexists", sample([1.5, 2.0]), "doc_id", {"x": "int64"}, {}) is None
    )
    assert shared_dictionary(target, "errorifexists", sample(["a", None]), "doc_id", {"x": "str"}, {}) is None
    assert (
        shared_dictionary(target, "errorifexists", sample(texts), "doc_id", {"x": "str"}, {"level": -1})
        is None
    )
    # An append takes the dictionary of what is there, a store file as well as a collection.
    store = write_store(tmp_path / "one.docstore", make_docs(300))
    mine = shared_dictionary(
        str(tmp_path / "one.docstore"), "append", sample(texts), "doc_id", {"x": "str"}, {}
    )
    assert mine == store.dictionary and mine


def test_upgrade_rewrites_older_shards_and_seals_them_again(tmp_path, docs):
    ids = list(docs)
    shards = []
    for k, (part, version) in enumerate([(ids[:300], 2), (ids[300:], 3)]):
        shards.append(tmp_path / f"v{k}.docstore")
        write_store(shards[-1], {i: docs[i] for i in part}, format_version=version).close()
    old = docstore.seal(tmp_path / "c", shards)
    assert old.info()["format_version"] == 2  # the oldest file's
    assert [s["format_version"] for s in old.info()["shards"]] == [2, 3]
    fingerprint = old.fingerprint
    new = docstore.upgrade(tmp_path / "c")
    assert new.info()["format_version"] == 3
    assert [s["format_version"] for s in new.info()["shards"]] == [3, 3]
    assert new.info()["shards"][1]["stored_bytes"] == old.info()["shards"][1]["stored_bytes"]
    assert list(new) == ids and new.fingerprint != fingerprint
    for doc_id, doc in new.get_many(ids).items():
        assert_doc_equal(doc, doc_id, docs[doc_id])
    new.verify()
    # The handle on the old collection keeps reading it; the shard files given are untouched.
    assert_doc_equal(old[ids[5]], ids[5], docs[ids[5]])
    assert docstore.open(shards[0]).info()["format_version"] == 2
    assert sorted(os.listdir(tmp_path)) == ["c", "v0.docstore", "v1.docstore"]  # no scratch left
    assert cli(["upgrade", str(tmp_path / "c")]) == 0


def test_verify_finds_a_global_index_that_locates_a_blob_elsewhere(tmp_path, docs):
    """A crafted collection whose index checksums and manifest are all consistent, but whose index
    locates one document's blob at another's: lookups fail its check, and verify() says where."""
    ids = list(docs)[:100]
    root = docstore.seal(tmp_path / "c", _shards(tmp_path, {i: docs[i] for i in ids}, [50, 50])).path
    index = bytearray((root / "index.docstore").read_bytes())
    key_index = struct.unpack_from("<Q", index, 64 + 24 * 6)[0]
    rank = sorted(i.encode() for i in ids).index(ids[70].encode())
    entry = key_index + 32 * rank
    offset, length = struct.unpack_from("<QQ", index, entry + 16)
    struct.pack_into("<QQ", index, entry + 16, 0, length)  # shard 1's first blob instead
    for s in range(9):
        at = 64 + 24 * s
        start, size = struct.unpack_from("<QQ", index, at)
        struct.pack_into("<Q", index, at + 16, xxhash.xxh3_64_intdigest(bytes(index[start : start + size])))
    struct.pack_into("<Q", index, 504, xxhash.xxh3_64_intdigest(bytes(index[:504])))
    (root / "index.docstore").write_bytes(index)
    manifest = json.loads((root / "docstore-collection.json").read_text())
    manifest["index"]["fingerprint"] = f"{struct.unpack_from('<Q', index, 504)[0]:016x}"
    manifest["checksum"] = ""
    body = json.dumps(manifest, separators=(",", ":"), ensure_ascii=False).encode()
    manifest["checksum"] = f"{xxhash.xxh3_64_intdigest(body):016x}"
    (root / "docstore-collection.json").write_text(json.dumps(manifest))
    store = docstore.open(root)
    assert offset != 0
    with pytest.raises(docstore.CorruptStoreError, match="fails its check"):
        store[ids[70]]
    assert_doc_equal(store[ids[71]], ids[71], docs[ids[71]])
    with pytest.raises(docstore.CorruptStoreError, match="locates the blob of position 70 elsewhere"):
        store.verify()
