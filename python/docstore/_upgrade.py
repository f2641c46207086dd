"""``docstore.upgrade``: a store or collection of an older format rewritten in the current one."""

from __future__ import annotations

import os
from typing import Any

from . import _docstore, _progress
from ._docstore import FORMAT_VERSION, check_replaceable
from ._store import DocStore
from ._store import open as open_store
from ._writer import rewrite
from .errors import InvalidArgumentError, StoreExistsError


def upgrade(
    source: str | os.PathLike[str],
    target: str | os.PathLike[str] | None = None,
    *,
    progress: bool | None = None,
    **options: Any,
) -> DocStore:
    """Rewrites the store or collection at ``source`` in the current format (version 3: checked
    reads, and lookups by id located by the key index) at ``target``, or in place when ``target``
    is None; returns the new store opened.

    ``source`` is verified first (every checksum and document), so that damage is never sealed
    in under fresh checks. Documents keep their ids, positions and values; the compression level
    and dictionary are the source's unless ``options`` (passed to :class:`Writer`) say
    otherwise. A collection's shards of an older format are rewritten and every shard is sealed
    again with a new global id index; shards already current are linked, not copied. In place,
    the new store replaces the old one atomically when complete: a process that has the old one
    open keeps reading it. ``progress``: bars of the check and the rewrite on stderr (default:
    when it is a terminal).
    """
    store = open_store(source)
    if target is None:
        target = source
        options["overwrite"] = True
    # Refused before anything is read or written: a target that is a URL, or that exists.
    if store.url is not None and os.fspath(target) in (store.url, store._reopen_url(True)):
        store.close()
        raise InvalidArgumentError(f"{store.url}: upgrade writes a local file; give a local target")
    if not options.get("overwrite") and os.path.lexists(target):
        store.close()
        raise StoreExistsError(f"{os.fspath(target)} already exists (pass overwrite=True to replace it)")
    try:
        check_replaceable(target)  # a directory or file of the user's: refused now
    except BaseException:
        store.close()
        raise
    info = store._info()
    if "shards" in info and store.url is not None:
        store.close()
        raise InvalidArgumentError(
            f"{store.url}: upgrade a collection where its files are (download it, upgrade it, upload it)"
        )
    _progress.verify(store, progress)
    if "shards" not in info:
        rewrite(store, target, options, progress=progress)
        store.close()
        return open_store(target)
    store.close()
    # Beside the target, locked while this upgrade lives: the seal hard-links the shards
    # rewritten here, and an upgrade killed midway leaves a directory the next one sweeps.
    with _docstore.Staging(target) as scratch:
        shards = []
        for i, shard in enumerate(info["shards"]):
            if shard["format_version"] >= FORMAT_VERSION:
                shards.append(shard["path"])
                continue
            new = os.path.join(scratch.path, f"part-{i:05d}.docstore")
            with open_store(shard["path"]) as old:
                rewrite(old, new, {k: v for k, v in options.items() if k != "overwrite"}, progress=progress)
            shards.append(new)
        _docstore.seal(target, shards, overwrite=options.get("overwrite", False), append=False)
        return open_store(target)
