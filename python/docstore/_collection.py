"""``docstore.seal``: shard files written by any engine, sealed into one collection.

A collection is a directory that ``docstore.open`` reads as one store (docs/collections.md).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from . import _docstore
from ._store import DocStore, open
from ._writer import build


def seal(
    target: str | os.PathLike[str],
    shards: Iterable[str | os.PathLike[str]],
    *,
    overwrite: bool = False,
    append: bool = False,
    read: str = "mmap",
) -> DocStore:
    """Seals ``shards`` (store files written by ``docstore.Writer``, one schema, format 2 or 3) into a
    collection at ``target``, and opens it.

    Positions follow the order of ``shards``, then each shard's own order. Ids must be unique
    across all shards: a repeated id raises ``DuplicateKeyError`` naming it and both shards.
    Shards with other fields raise ``SchemaError``. The shard files are hard-linked into the
    collection (copied across file systems) and left as they are; delete them when you like. A
    shard given as a symbolic link is resolved: the collection holds the file it names.
    Nothing appears at ``target`` unless the whole collection is sealed; with ``overwrite=True``
    a store or collection already there is replaced in one step (readers that have it open keep
    reading it; an ``open`` meanwhile gets the old collection or the new one, whole). Anything
    else there (a directory of other files, a collection holding files of yours, a file that is
    not a store) is refused with ``StoreExistsError`` naming it.

    ``append=True`` adds ``shards`` after those of the collection (or store file) at ``target``,
    sealing both into a collection that replaces it in one step, or seals them alone where
    nothing is there. Appends (and other docstore writers) to one target run one after the
    other: none loses another's documents.
    """
    if isinstance(shards, (str, bytes, os.PathLike)):
        raise TypeError("shards must be a list of paths, not one path")
    paths = [os.fsdecode(s) if isinstance(s, bytes) else os.fspath(s) for s in shards]
    target = os.fsdecode(target) if isinstance(target, bytes) else os.fspath(target)
    _docstore.seal(target, paths, overwrite=overwrite, append=append)
    return open(target, read=read)


def train_dictionary(
    records: Iterable[Any],
    id_field: str = "doc_id",
    fields: Mapping[str, str] | Sequence[tuple[str, str]] | None = None,
    *,
    size: int = 65536,
) -> bytes:
    """The compression dictionary docstore trains on ``records`` (dicts, namedtuples or
    dataclasses, as ``docstore.build`` takes them; a sample of the corpus, a few MiB), for
    ``Writer(..., dictionary=...)``: shards written by many tasks with one dictionary compress
    alike and read faster together (a reader keeps one copy of it, not one per shard:
    docs/collections.md).

    >>> d = docstore.train_dictionary(ds.take(20_000))          # on the driver
    >>> docstore.ray.write(ds, "corpus.docstore", dictionary=d)   # every task's shard uses it
    """
    with tempfile.TemporaryDirectory(prefix=".docstore-dictionary-") as scratch:
        # One batch holds the whole sample: the dictionary is trained on the first batch.
        sample = build(
            os.path.join(scratch, "sample.docstore"),
            records,
            id_field,
            fields,
            dict_size=size,
            batch_bytes=64 << 20,
        )
        try:
            return sample.dictionary
        finally:
            sample.close()
