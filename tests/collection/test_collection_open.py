"""Collections opened while they are replaced, sealed from symbolic links, and verified whole
(issue 25: an open sees one version, a shard is the file a link names, verify names every damaged
file)."""

from __future__ import annotations

import json
import os
import stat
import struct
import threading

import pytest
import xxhash

import docstore
from docstore.cli import main as cli

from ..conftest import assert_doc_equal, make_docs, write_store


@pytest.fixture(scope="module")
def docs():
    return make_docs(600, seed=25)


def _shards(directory, docs: dict[str, dict], sizes: list[int]) -> list[str]:
    """Store files in ``directory`` holding ``docs`` in order, ``sizes[k]`` documents in shard ``k``."""
    directory.mkdir(exist_ok=True)
    items, paths, start = list(docs.items()), [], 0
    for k, size in enumerate(sizes):
        path = directory / f"part-{k}.docstore"
        write_store(path, dict(items[start : start + size])).close()
        paths.append(str(path))
        start += size
    return paths


def _flip(path, section: int, at: int) -> None:
    """Flips one bit of byte ``at`` of section ``section`` of the store file at ``path``, in place:
    the header, which the manifest pins, stays as it was."""
    with open(path, "r+b") as f:
        f.seek(64 + 24 * section)
        offset, length = struct.unpack("<QQ", f.read(16))
        assert at < length
        f.seek(offset + at)
        byte = f.read(1)[0]
        f.seek(offset + at)
        f.write(bytes([byte ^ 0x10]))


def _rewrite_manifest(root, change) -> None:
    """The manifest after ``change(manifest)``, with its checksum made right again."""
    path = root / "docstore-collection.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    manifest["checksum"] = ""
    body = json.dumps(manifest, separators=(",", ":"), ensure_ascii=False).encode()
    manifest["checksum"] = f"{xxhash.xxh3_64_intdigest(body):016x}"
    path.write_text(json.dumps(manifest))


def test_opens_during_overwrites_see_the_old_or_the_new_collection_whole(tmp_path, docs):
    """A seal with overwrite=True exchanges the directory, then removes the old one: an open that
    read the old manifest found the new shards (refused as "not the file that was sealed there"),
    or its files gone (about 1 open in 150 failed). Opens run all through 150 seals alternating two
    collections of different ids: every open succeeds and holds one of them, whole."""
    items = list(docs.values())
    old = {f"old-{i:04d}": doc for i, doc in enumerate(items[:500])}
    new = {f"new-{i:04d}": doc for i, doc in enumerate(items[100:])}
    versions = [
        _shards(tmp_path / "old", old, [200, 100, 150, 50]),
        _shards(tmp_path / "new", new, [100, 200, 200]),
    ]
    expected = {"old-": sorted(old), "new-": sorted(new)}
    target = tmp_path / "c"
    docstore.seal(target, versions[0]).close()
    sealer_errors: list[BaseException] = []

    def sealer() -> None:
        try:
            for k in range(150):
                docstore.seal(target, versions[(k + 1) % 2], overwrite=True).close()
        except BaseException as e:  # reported by the test below
            sealer_errors.append(e)

    thread = threading.Thread(target=sealer)
    thread.start()
    errors, seen = [], {"old-": 0, "new-": 0}
    try:
        while thread.is_alive():
            try:
                store = docstore.open(target)
            except docstore.DocstoreError as e:
                errors.append(repr(e))
                continue
            keys = list(store.keys())
            version = keys[0][:4]
            assert sorted(keys) == expected[version]  # ids of one version only, all of them
            assert store[keys[-1]].doc_id == keys[-1]
            seen[version] += 1
            store.close()
    finally:
        thread.join()
    assert sealer_errors == []
    opens = len(errors) + sum(seen.values())
    assert errors == [], f"{len(errors)} of {opens} opens failed, the first: {errors[0]}"
    assert seen["old-"] > 10 and seen["new-"] > 10  # they did overlap
    docstore.open(target).verify()


def test_a_damaged_collection_still_fails_to_open(tmp_path, docs):
    """The retry that a replaced directory explains never hides damage to one left in place."""
    root = docstore.seal(tmp_path / "c", _shards(tmp_path / "s", docs, [300, 300])).path
    manifest = json.loads((root / "docstore-collection.json").read_text())
    shard = root / manifest["shards"][1]["file"]
    saved = shard.read_bytes()
    with open(shard, "r+b") as f:  # a flipped byte in the header's section table
        f.seek(64 + 24 * 2 + 3)
        byte = f.read(1)[0]
        f.seek(64 + 24 * 2 + 3)
        f.write(bytes([byte ^ 0x01]))
    with pytest.raises(docstore.CorruptStoreError):
        docstore.open(root)
    shard.write_bytes(saved)
    assert len(docstore.open(root)) == len(docs)
    _rewrite_manifest(root, lambda m: m["shards"][0].update(fingerprint="0123456789abcdef"))
    with pytest.raises(docstore.CorruptStoreError, match="not the file that was sealed there"):
        docstore.open(root)
    _rewrite_manifest(
        root, lambda m: m.update(shards=[{**m["shards"][0], "file": "shards/gone"}, m["shards"][1]])
    )
    with pytest.raises(docstore.StoreNotFoundError, match="shards/gone"):
        docstore.open(root)


def test_symlinked_shards_are_sealed_as_the_files_they_name(tmp_path, docs):
    """link(2) links a symbolic link itself: the collection held links to the original files (a
    relative one dangling from its new place). It holds the files they name, which outlive the
    links and the originals' names."""
    shards = _shards(tmp_path / "s", docs, [250, 350])
    links = tmp_path / "links"
    links.mkdir()
    os.symlink(os.path.abspath(shards[0]), links / "absolute.docstore")
    os.symlink(os.path.relpath(shards[1], links), links / "relative.docstore")
    store = docstore.seal(tmp_path / "c", [links / "absolute.docstore", links / "relative.docstore"])
    for shard in store.info()["shards"]:
        assert stat.S_ISREG(os.lstat(shard["path"]).st_mode)  # not a link
    store.close()
    for path in [links / "absolute.docstore", links / "relative.docstore", *shards]:
        os.remove(path)
    store = docstore.open(tmp_path / "c")
    store.verify()
    ids = list(docs)
    assert [d.doc_id for d in store.take(range(len(store)))] == ids
    assert_doc_equal(store[ids[400]], ids[400], docs[ids[400]])


def test_a_dangling_symlink_shard_is_a_clear_error(tmp_path, docs):
    good = _shards(tmp_path / "s", dict(list(docs.items())[:10]), [10])[0]
    os.symlink("nowhere.docstore", tmp_path / "dangling.docstore")
    with pytest.raises(
        docstore.StoreNotFoundError,
        match=r"shard .*dangling\.docstore is a symbolic link to nowhere\.docstore, which cannot be opened",
    ):
        docstore.seal(tmp_path / "c", [good, tmp_path / "dangling.docstore"])
    assert sorted(os.listdir(tmp_path)) == ["dangling.docstore", "s"]  # no target, no scratch


def test_verify_names_every_damaged_file_and_the_global_index(tmp_path, docs, capsys):
    """verify() stopped at the first damaged file, and never named the global index."""
    root = docstore.seal(tmp_path / "c", _shards(tmp_path / "s", docs, [200, 200, 200])).path
    manifest = json.loads((root / "docstore-collection.json").read_text())
    first, last = (manifest["shards"][k]["file"] for k in (0, 2))
    _flip(root / first, section=2, at=40)  # data
    _flip(root / last, section=4, at=5)  # keys
    _flip(root / "index.docstore", section=4, at=7)  # keys
    store = docstore.open(root)  # the headers are intact: damage is found by reading
    with pytest.raises(docstore.CorruptStoreError) as caught:
        store.verify()
    message = str(caught.value)
    assert "3 damaged files" in message
    for name in [first, last, "index.docstore"]:
        assert str(root / name) in message
    assert manifest["shards"][1]["file"] not in message
    capsys.readouterr()
    assert cli(["verify", str(root)]) != 0
    err = capsys.readouterr().err
    for name in [first, last, "index.docstore"]:
        assert name in err
