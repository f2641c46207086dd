"""``docstore.seal``: shard files written by any engine, sealed into one collection.

A collection is a directory that ``docstore.open`` reads as one store (docs/collections.md).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from . import _progress
from ._store import DocStore, open


def seal(
    target: str | os.PathLike[str],
    shards: Iterable[str | os.PathLike[str]],
    *,
    overwrite: bool = False,
    append: bool = False,
    read: str = "mmap",
    on_duplicate: str = "error",
    progress: bool | None = False,
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

    ``on_duplicate="first"`` or ``"last"`` keeps one document of an id that several shards hold
    (the first or the last in position order) instead of raising: the shards that lose some are
    rewritten without them first, beside ``target`` (the files given are left as they are);
    this reads every id of every shard, and holds them in memory (about 100 bytes an id).
    With ``append=True``, ``"first"`` also drops new documents whose id the collection already
    holds; ``"last"`` is refused there (it would rewrite the shards sealed before).

    ``progress=True`` draws a bar of the work on stderr (``None``: when stderr is a terminal).
    """
    if isinstance(shards, (str, bytes, os.PathLike)):
        raise TypeError("shards must be a list of paths, not one path")
    paths = [os.fsdecode(s) if isinstance(s, bytes) else os.fspath(s) for s in shards]
    target = os.fsdecode(target) if isinstance(target, bytes) else os.fspath(target)
    if on_duplicate == "error":
        _progress.seal(target, paths, progress, overwrite=overwrite, append=append)
        return open(target, read=read)
    from ._writer import seal_without_repeats

    seal_without_repeats(target, paths, on_duplicate, overwrite=overwrite, append=append, progress=progress)
    return open(target, read=read)
