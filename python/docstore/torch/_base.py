"""The base of every dataset: a store opened lazily in each process, batch fetches, cheap pickles."""

from __future__ import annotations

import operator
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

import docstore

from .._store import DocStore

NUMERIC_ARRAY: tuple[str, ...] = ("int8[]", "uint8[]", "int16[]", "uint16[]", "int32[]", "uint32[]")
NUMERIC_ARRAY += ("int64[]", "uint64[]", "float32[]", "float64[]")
NUMERIC_SCALAR = ("int64", "float64")


_threads_configured_pid: int | None = None


def _configure_worker_threads() -> None:
    """In a DataLoader worker, shares the cores between workers (once per process)."""
    global _threads_configured_pid
    pid = os.getpid()
    if _threads_configured_pid == pid:
        return
    _threads_configured_pid = pid
    info = torch.utils.data.get_worker_info()
    if info is None or os.environ.get("DOCSTORE_NUM_THREADS"):
        return
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    docstore.set_num_threads(max(1, cpus // max(1, info.num_workers)))


class StoreHandle:
    """A store's path, opened on first use in each process; pickles as the path alone.

    Stores the handle opens itself read documents with ``pread`` (``docstore.open(...,
    read="pread")``): a DataLoader worker reads through the shared page cache without mapping
    every page it has read, so its memory stays flat however much of the corpus it reads.
    """

    __slots__ = ("_owned", "_pid", "_store", "path")

    def __init__(self, store_or_path: Any) -> None:
        self._owned = False  # whether _store was opened here (and may be closed here)
        if isinstance(store_or_path, DocStore):
            self.path = os.path.abspath(os.fspath(store_or_path.path))
            self._store: DocStore | None = store_or_path
            self._pid: int | None = os.getpid()
        elif isinstance(store_or_path, (str, os.PathLike)):
            self.path = os.path.abspath(os.fspath(store_or_path))
            self._store = None
            self._pid = None
        else:
            raise TypeError(f"expected a DocStore or a path, got {type(store_or_path).__name__}")

    def get(self) -> DocStore:
        store = self._store
        if store is None or self._pid != os.getpid() or store.closed:
            _configure_worker_threads()
            # A store inherited through fork() would work too; reopening costs a few syscalls
            # and keeps the parent's object out of the child's way.
            store = self._store = docstore.open(self.path, read="pread")
            self._pid = os.getpid()
            self._owned = True
        return store

    def release(self) -> None:
        """Lets go of the store until the next ``get``: closes it if the handle opened it, so
        the index pages that resolving ids touched are unmapped (the store is reopened lazily,
        in microseconds). A store the user passed in is left open, merely forgotten."""
        store, self._store = self._store, None
        if store is not None and self._owned and self._pid == os.getpid():
            store.close()

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = state["path"]
        self._store = None
        self._pid = None
        self._owned = False

    def __repr__(self) -> str:
        return f"<store {self.path!r}>"


class StoreDataset(Dataset):
    """Base: a lazily (re)opened store, batch fetches, cheap pickling."""

    def __init__(self, store_or_path: Any) -> None:
        self._handle = StoreHandle(store_or_path)
        self._handle.get()  # open now: a missing or corrupt file fails here, not in a worker

    @property
    def store(self) -> DocStore:
        """This process's open store (opened on first use after a fork or an unpickle)."""
        return self._handle.get()

    @property
    def path(self) -> str:
        return self._handle.path

    def _check_field(self, name: str, allowed: Sequence[str] | None = None) -> str:
        fields = self.store.fields
        if name not in fields:
            raise docstore.SchemaError(f"no field {name!r}; the store's fields are {list(fields)}")
        if allowed is not None and fields[name] not in allowed:
            raise docstore.SchemaError(
                f"field {name!r} is {fields[name]}; {type(self).__name__} needs one of {list(allowed)}"
            )
        return name

    def __len__(self) -> int:
        return len(self.store)

    def __getitem__(self, index: int) -> Any:
        return self.__getitems__([operator.index(index)])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r}, {len(self)} items)"


def as_positions(indices: Any) -> list[int]:
    if isinstance(indices, list):
        return indices
    if isinstance(indices, (np.ndarray, torch.Tensor)):
        return indices.tolist()
    return [operator.index(i) for i in indices]


def numpy_dtype(dtype: torch.dtype | None) -> np.dtype | None:
    if dtype is None:
        return None
    try:
        return torch.empty(0, dtype=dtype).numpy().dtype
    except TypeError:  # bfloat16, complex32 ...
        raise TypeError(f"dtype={dtype} has no numpy equivalent; use an integer or float dtype") from None
