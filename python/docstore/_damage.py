"""``on_corrupt``: what a training read does with a document that fails its check.

``"raise"`` (the default) lets the ``CorruptStoreError`` through, as every read does. ``"skip"``
leaves the damaged documents out: a batch read is tried whole first (the common case costs
nothing more), and only when it fails is each of its documents read alone, to find the ones that
fail, before the batch is read again without them. What is skipped depends only on the bytes
of the store, never on how the reads were batched, so a resumed run skips the same documents.

Damage outside the documents (a header, an index, a dictionary) fails the store's open or every
read alike, and is raised whatever the policy: there is nothing sound left to skip to.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any, Callable

import numpy as np

from .errors import CorruptStoreError, InvalidArgumentError

ON_CORRUPT = ("raise", "skip")


class DamagedDocumentWarning(UserWarning):
    """Documents that failed their check were left out of a read (``on_corrupt="skip"``)."""


def check_on_corrupt(on_corrupt: Any) -> str:
    if on_corrupt not in ON_CORRUPT:
        raise InvalidArgumentError(f"on_corrupt must be one of {', '.join(ON_CORRUPT)}, got {on_corrupt!r}")
    return str(on_corrupt)


def read_skipping(
    read: Callable[[np.ndarray], Any], positions: Any, on_corrupt: str
) -> tuple[Any, np.ndarray]:
    """``read(positions)``, and the positions of the documents it left out: none with
    ``on_corrupt="raise"`` (an error goes through), the damaged ones with ``"skip"``, in which
    case what is returned is ``read`` of the others, in their order."""
    positions = np.asarray(positions, dtype=np.int64)
    try:
        return read(positions), positions[:0]
    except CorruptStoreError:
        if on_corrupt != "skip":
            raise
    damaged = []
    for position in np.unique(positions).tolist():
        try:
            read(np.array([position], dtype=np.int64))
        except CorruptStoreError:
            damaged.append(position)
    damaged_array = np.asarray(damaged, dtype=np.int64)
    kept = positions[~np.isin(positions, damaged_array)]
    return read(kept), damaged_array


def positions_skipping(store: Any, doc_ids: list[str], on_corrupt: str) -> tuple[np.ndarray, list[str]]:
    """``store.positions(doc_ids)``, and the ids whose documents it found damaged: a
    collection checks the document an id names when it finds it, so a damaged one fails the
    search. With ``on_corrupt="skip"`` those ids get position -1 (not found)."""
    try:
        return store.positions(doc_ids), []
    except CorruptStoreError:
        if on_corrupt != "skip":
            raise
    positions = np.empty(len(doc_ids), dtype=np.int64)
    damaged = []
    for i, doc_id in enumerate(doc_ids):
        try:
            positions[i] = store.positions([doc_id])[0]
        except CorruptStoreError:
            positions[i] = -1
            damaged.append(doc_id)
    return positions, damaged


def described(items: Sequence[Any], kind: str) -> str:
    """``3 damaged document(s) at position(s) 1, 5, 9``: the first ten named."""
    shown = ", ".join(map(str, items[:10])) + (" ..." if len(items) > 10 else "")
    return f"{len(items)} damaged document(s) at {kind} {shown}"


def warn_once(seen: set[str], where: str, what: str) -> None:
    """One warning per process and store (``seen`` holds the stores warned of already)."""
    if where in seen:
        return
    seen.add(where)
    warnings.warn(
        f"{where}: left out {what} (on_corrupt='skip'); further ones in this process are counted, "
        "not warned of",
        DamagedDocumentWarning,
        stacklevel=3,
    )
