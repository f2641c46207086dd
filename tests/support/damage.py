"""Stores with chosen documents damaged: for the ``on_corrupt`` tests (torch, Ray, Spark)."""

from __future__ import annotations

import os

import docstore


def text_of(i: int) -> str:
    # A marker no other document's bytes contain, so that its place in the file is found.
    return f"document {i} <<mark-{i:06d}>> " + "words " * (i % 7)


def damaged_store(
    path: os.PathLike[str] | str, n: int, damaged: list[int], shards: int = 1
) -> docstore.DocStore:
    """A store of ``n`` documents (ids ``d0`` ..., fields text and n), stored uncompressed, with
    one byte flipped inside the text of each document at a position in ``damaged``; with
    ``shards`` > 1, a collection of that many shards (damage in any of them)."""
    path = os.fspath(path)
    bounds = [n * s // shards for s in range(shards + 1)]
    files = []
    for s in range(shards):
        file = path if shards == 1 else f"{path}.part{s}"
        with docstore.Writer(file, fields={"text": "str", "n": "int64"}, level=-1) as writer:
            for i in range(bounds[s], bounds[s + 1]):
                writer.add(f"d{i}", text=text_of(i), n=i)
        files.append(file)
    store = docstore.open(path) if shards == 1 else docstore.seal(path, files)
    files = [os.fspath(s["path"]) for s in store.info().get("shards", [{"path": path}])]
    store.close()
    for i in damaged:
        for file in files:  # the shard that holds it: the one its marker is in
            with open(file, "r+b") as f:
                data = f.read()
                marker = f"<<mark-{i:06d}>>".encode()
                at = data.find(marker)
                if at < 0:
                    continue
                assert data.find(marker, at + 1) < 0, "the marker is found once"
                f.seek(at + 3)
                f.write(bytes([data[at + 3] ^ 0x20]))
                break
        else:
            raise AssertionError(f"document {i}'s marker is in no file")
    return docstore.open(path)
