"""The base of every dataset: a store opened lazily in each process, batch fetches, cheap pickles."""

from __future__ import annotations

import operator
import os
from collections.abc import Sequence
from typing import Any, Union

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
    """A store's path, opened on first use in each process; pickles as the path and the store's
    fingerprint.

    Stores the handle opens itself read documents with ``pread`` (``docstore.open(...,
    read="pread")``): a DataLoader worker reads through the shared page cache without mapping
    every page it has read, so its memory stays flat however much of the corpus it reads.

    Every (re)open checks that the file is still the store the handle first saw: datasets keep
    positions resolved from it (a rebuilt store puts other documents there), and a worker must
    not read another store than its parent. A replaced store raises ``StoreChangedError``.
    """

    __slots__ = ("_fingerprint", "_owned", "_pid", "_store", "path")

    def __init__(self, store_or_path: Any) -> None:
        self._owned = False  # whether _store was opened here (and may be closed here)
        self._fingerprint: int | None = None
        if isinstance(store_or_path, DocStore):
            self.path = os.path.abspath(os.fspath(store_or_path.path))
            open_here = not store_or_path.closed  # a closed one is reopened from its path
            self._store: DocStore | None = store_or_path if open_here else None
            self._pid: int | None = os.getpid() if open_here else None
            self._fingerprint = store_or_path.fingerprint if open_here else None
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
            store = docstore.open(self.path, read="pread")
            if self._fingerprint is None:
                self._fingerprint = store.fingerprint
            elif store.fingerprint != self._fingerprint:
                store.close()
                raise docstore.StoreChangedError(
                    f"the store at {self.path} was replaced after this dataset was created; "
                    "create the dataset again to read the new one"
                )
            self._store, self._pid, self._owned = store, os.getpid(), True
        return store

    def release(self) -> None:
        """Lets go of the store until the next ``get``: closes it if the handle opened it, so
        the index pages that resolving ids touched are unmapped (the store is reopened lazily,
        in microseconds). A store the user passed in is left open, merely forgotten."""
        store, self._store = self._store, None
        if store is not None and self._owned and self._pid == os.getpid():
            store.close()

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "fingerprint": self._fingerprint}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = state["path"]
        self._fingerprint = state["fingerprint"]
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

    def __getitem__(self, index: Any) -> Any:
        try:
            position = operator.index(index)
        except TypeError:
            # A list of indices: what a BatchSampler passed as `sampler=` hands the DataLoader.
            if isinstance(index, (list, tuple, range, np.ndarray, torch.Tensor)):
                return self.__getitems__(index)
            raise
        return self.__getitems__([position])[0]

    def __getitems__(self, indices: Positions) -> list[Any]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r}, {len(self)} items)"


# What `__getitems__` takes: a DataLoader gives a list; users also pass arrays and tensors.
Positions = Union[Sequence[int], np.ndarray, torch.Tensor]


def as_positions(indices: Any) -> np.ndarray:
    """Indices as an int64 array, refusing what is not integers: a float would be truncated
    and a bool array is a mask, not indices."""
    if isinstance(indices, torch.Tensor):
        indices = indices.numpy(force=True)
    array = np.asarray(indices) if isinstance(indices, (list, tuple, range, np.ndarray)) else None
    if array is None:
        array = np.fromiter((operator.index(i) for i in indices), dtype=np.int64)
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    if array.dtype.kind == "O" and array.ndim == 1 and all(isinstance(i, int) for i in array.tolist()):
        raise IndexError(f"index {max(array.tolist(), key=abs)} out of range")  # beyond 64 bits
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise TypeError(f"indices must be a 1-D sequence of ints, got {array.dtype} with shape {array.shape}")
    if array.dtype == np.uint64 and array.max() > np.iinfo(np.int64).max:
        raise IndexError(f"index {array.max()} out of range")
    return array.astype(np.int64, copy=False)


def numpy_dtype(dtype: torch.dtype | None) -> np.dtype | None:
    if dtype is None:
        return None
    try:
        return torch.empty(0, dtype=dtype).numpy().dtype
    except TypeError:  # bfloat16, complex32 ...
        raise TypeError(f"dtype={dtype} has no numpy equivalent; use an integer or float dtype") from None
