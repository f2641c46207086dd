"""The systems compared with docstore, behind one small interface.

Every system implements::

    build(path, records) -> obj        # records: iterable of {"doc_id": str, "text": str}
    open(path) -> obj                  # reopen what build() wrote (fresh handles, no caches)
    get(obj, doc_id) -> str            # one document's text by id
    get_many(obj, doc_ids) -> dict     # {doc_id: text}
    size_on_disk(path) -> int | None   # bytes of every file build() wrote; None if in memory
    close(obj)

``path`` is a directory owned by the system (created if missing). Imports of optional
packages happen lazily, so this module imports without them; ``requires`` names the module
a benchmark should ``pytest.importorskip`` first.

The comparison suite (``test_compare.py``) uses a wider interface on top, implemented by every
peer in :data:`COMPARE_PEERS`::

    build(path, records, field="text")  # records: {"doc_id": str, field: str | int32 array}
    ops(obj, field) -> Ops               # fast bound callables: get(id), at(pos),
                                         #   get_many(ids) (dict or list), take(positions) (list)
    files(path) -> [Path]                # every file of the store (evicted for cold-cache runs)
    reopen(obj, path)                    # close and open again, keeping what a user keeps in
                                         #   memory (an id -> row map); used after eviction

Values are ``str`` for text corpora and int32 numpy arrays for ``token_arrays``. Systems with
no lookup by id get the one their users build: a Python dict doc_id -> row, made from the id
column when the store is opened (``position_map`` = True).
"""

from __future__ import annotations

from .arrow_ipc_store import ArrowIpcStore
from .base import IDS_FILE, Ops, Peer, PositionMapped, batch_values, dir_size, values_equal
from .dict_store import DictStore
from .docstore_store import DocstoreStore
from .hf_datasets_store import HfDatasetsStore
from .indexed_store import IndexedStore
from .ir_datasets_store import IrDatasetsStore, TokenDoc
from .lance_store import LanceStore
from .litdata_store import LitdataStore
from .lmdb_store import LmdbStore
from .numpy_store import NumpyStore
from .rocksdict_store import RocksdictStore

__all__ = [
    "COMPARE_PEERS",
    "IDS_FILE",
    "ArrowIpcStore",
    "DictStore",
    "DocstoreStore",
    "HfDatasetsStore",
    "IndexedStore",
    "IrDatasetsStore",
    "LanceStore",
    "LitdataStore",
    "LmdbStore",
    "NumpyStore",
    "Ops",
    "Peer",
    "PositionMapped",
    "RocksdictStore",
    "TokenDoc",
    "batch_values",
    "dir_size",
    "values_equal",
]


#: every system of the comparison suite, in report order
COMPARE_PEERS: dict[str, Peer] = {
    p.name: p
    for p in (
        DocstoreStore(),
        DocstoreStore(num_threads=1),
        DocstoreStore(level=-1),
        DictStore(),
        IndexedStore(),
        IrDatasetsStore(),
        IrDatasetsStore("MMAP"),
        LmdbStore(),
        LanceStore(),
        HfDatasetsStore(),
        ArrowIpcStore(),
        ArrowIpcStore("lz4"),
        RocksdictStore(),
        LitdataStore(),
        NumpyStore(),
    )
}
