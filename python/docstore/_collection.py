"""``docstore.seal``: shard files written by any engine, sealed into one collection, and
``seal_without_repeats``, the seal that keeps one document of an id several shards hold (which
the CLI's ``seal`` and ``build --shards`` call too).

A collection is a directory that ``docstore.open`` reads as one store (docs/collections.md).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Literal

from . import _docstore, _progress
from ._store import DocStore
from ._store import open as open_store
from ._writer import check_on_duplicate, rewrite
from .errors import InvalidArgumentError


def seal(
    target: str | os.PathLike[str],
    shards: Iterable[str | os.PathLike[str]],
    *,
    overwrite: bool = False,
    append: bool = False,
    read: Literal["mmap", "pread"] = "mmap",
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
        return open_store(target, read=read)
    seal_without_repeats(target, paths, on_duplicate, overwrite=overwrite, append=append, progress=progress)
    return open_store(target, read=read)


def seal_without_repeats(
    target: str,
    shards: list[str],
    on_duplicate: str,
    *,
    overwrite: bool,
    append: bool,
    progress: bool | None = False,
) -> int:
    """``seal(target, shards, on_duplicate=...)`` for "first" and "last": the shards that hold a
    document another keeps are rewritten without it (in a staging directory beside ``target``),
    then sealed. Returns the number of documents dropped."""
    check_on_duplicate(on_duplicate)
    if append and on_duplicate == "last":
        raise InvalidArgumentError(
            "on_duplicate='last' with append=True would drop documents of the shards sealed before; "
            "use 'first' (new repeats are dropped) or seal all shards again"
        )
    if append and overwrite:  # as the core's seal says it
        raise InvalidArgumentError(
            "overwrite and append exclude each other: append replaces the collection with its "
            "shards and the new ones"
        )
    if not append:
        return _seal_without_repeats(target, shards, on_duplicate, None, overwrite, progress)
    # The ids of the collection appended to are read under the target's lock, held to the
    # append's end: an append that published meanwhile would otherwise hold the ids this one
    # drops as repeats, and the seal would find them twice.
    with _docstore.lock_target(target) as held:
        return _seal_without_repeats(target, shards, on_duplicate, held, overwrite, progress)


def _seal_without_repeats(
    target: str,
    shards: list[str],
    on_duplicate: str,
    held: _docstore.HeldTarget | None,
    overwrite: bool,
    progress: bool | None,
) -> int:
    """``seal_without_repeats``; an append (``held``: the target's lock, held) seals under it."""
    winner: dict[str, tuple[int, int]] = {}  # id -> (shard, position) of the document kept
    dropped: list[set[int]] = [set() for _ in shards]
    if held is not None and os.path.exists(target):
        with open_store(target) as existing:
            for position, doc_id in enumerate(existing):
                winner[doc_id] = (-1, position)
    with _progress.bar(len(shards), "shards", progress, desc="read ids") as shown:
        for k, path in enumerate(shards):
            shown.update(1)
            _note_repeats(path, k, on_duplicate, winner, dropped)
    del winner
    count = sum(map(len, dropped))

    def seal(kept: list[str]) -> None:
        if held is None:
            _progress.seal(target, kept, progress, overwrite=overwrite, append=False)
        elif kept:  # every new document a repeat: the collection holds them all already
            _append_held(held, kept, progress)

    if not count:
        seal(shards)
        return 0
    # Made under the append's lock when it holds it (taking it again would wait for itself).
    with _docstore.Staging(target, held=held) as scratch:
        kept = []
        for k, path in enumerate(shards):
            if not dropped[k]:
                kept.append(path)
                continue
            new = os.path.join(scratch.path, f"part-{k:05d}.docstore")
            with open_store(path) as store:
                if len(store) > len(dropped[k]):
                    rewrite(store, new, {}, dropped[k], progress=progress)
                    kept.append(new)
        seal(kept)
    return count


def _append_held(held: _docstore.HeldTarget, shards: list[str], progress: bool | None) -> None:
    """``held.append(shards)`` (the target's lock, held) with ``_progress.seal``'s bar."""
    with _progress.bar(None, "steps", progress, desc="seal") as shown:
        if shown.disable:
            held.append(shards)
            return

        def report(done: int, total: int) -> None:
            shown.total = total
            shown.update(done - shown.n)

        held.append(shards, progress=report)


def _note_repeats(
    path: str, k: int, on_duplicate: str, winner: dict[str, tuple[int, int]], dropped: list[set[int]]
) -> None:
    """Reads the ids of shard ``k`` (at ``path``) into ``winner`` (id -> the shard and position
    of the document kept), adding the positions of those that lose to ``dropped``."""
    with open_store(path) as store:
        for position, doc_id in enumerate(store):
            earlier = winner.get(doc_id)
            if earlier is None:
                winner[doc_id] = (k, position)
            elif on_duplicate == "first":
                dropped[k].add(position)
            else:
                dropped[earlier[0]].add(earlier[1])
                winner[doc_id] = (k, position)
