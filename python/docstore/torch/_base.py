"""The base of every dataset: a store opened lazily in each process, batch fetches, cheap pickles."""

from __future__ import annotations

import operator
import os
from collections.abc import Sequence
from typing import Any, Union, cast

import numpy as np
import torch
from torch.utils.data import Dataset

import docstore

from .._damage import check_on_corrupt, described, read_skipping, warn_once
from .._docstore import _redact_urls
from .._store import DocStore, _pickled_url, _remote_kwargs, is_url
from ._epoch import DamageTally

NUMERIC_ARRAY: tuple[str, ...] = ("int8[]", "uint8[]", "int16[]", "uint16[]", "int32[]", "uint32[]")
NUMERIC_ARRAY += ("int64[]", "uint64[]", "float16[]", "bfloat16[]", "float32[]", "float64[]")
NUMERIC_SCALAR = ("int64", "float64", "bool")
NUMERIC_ARRAY_OR_SCALAR = NUMERIC_ARRAY + NUMERIC_SCALAR  # ArrayDataset's, fixed shapes too


def bfloat16_tensor(value: Any) -> torch.Tensor:
    """``value`` as a ``torch.bfloat16`` tensor: a stored ``bfloat16[]`` array (ml_dtypes'
    bfloat16) as its very bits, without a copy; anything else rounded from float32."""
    array = np.asarray(value)
    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.asarray(array, dtype=np.float32)).to(torch.bfloat16)


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

    __slots__ = ("_fingerprint", "_open_kwargs", "_owned", "_pid", "_store", "_url", "path")

    def __init__(self, store_or_path: Any) -> None:
        self._owned = False  # whether _store was opened here (and may be closed here)
        self._fingerprint: int | None = None
        # A remote store's options (cache, storage_options): reopened with them.
        self._open_kwargs: dict[str, Any] = {}
        # A remote store's URL as given (credentials included, in memory only); `path` shows it
        # redacted.
        self._url: str | None = None
        # docstore.ir_datasets.load(...)'s dataset stands for its store
        store = getattr(store_or_path, "docstore", None) if hasattr(store_or_path, "docs_iter") else None
        if isinstance(store, DocStore):
            store_or_path = store
        if isinstance(store_or_path, DocStore) and store_or_path.url is not None:
            self.path = store_or_path.url
            self._url = store_or_path._reopen_url(True)
            self._open_kwargs = _remote_kwargs(store_or_path, for_pickle=False)
            open_here = not store_or_path.closed
            self._store: DocStore | None = store_or_path if open_here else None
            self._pid: int | None = os.getpid() if open_here else None
            self._fingerprint = store_or_path.fingerprint if open_here else None
        elif isinstance(store_or_path, DocStore):
            self.path = os.path.abspath(os.fspath(store_or_path.path))
            open_here = not store_or_path.closed  # a closed one is reopened from its path
            self._store = store_or_path if open_here else None
            self._pid = os.getpid() if open_here else None
            self._fingerprint = store_or_path.fingerprint if open_here else None
        elif is_url(store_or_path):
            self.path = _redact_urls(store_or_path)
            self._url = store_or_path
            self._store = None
            self._pid = None
        elif isinstance(store_or_path, (str, os.PathLike)):
            self.path = os.path.abspath(os.fspath(store_or_path))
            self._store = None
            self._pid = None
        elif hasattr(store_or_path, "docs_iter"):  # an ir_datasets dataset
            raise TypeError(
                "an ir_datasets dataset is not a store: build one with docstore.ir_datasets.build("
                "dataset, path) and pass the path, or docstore.ir_datasets.load(dataset_id, store=path)"
            )
        else:
            raise TypeError(f"expected a DocStore or a path, got {type(store_or_path).__name__}")

    def get(self) -> DocStore:
        store = self._store
        if store is None or self._pid != os.getpid() or store.closed:
            _configure_worker_threads()
            # A store inherited through fork() would work too; reopening costs a few syscalls
            # and keeps the parent's object out of the child's way.
            store = docstore.open(self._url or self.path, read="pread", **self._open_kwargs)
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
        state: dict[str, Any] = {"path": self.path, "fingerprint": self._fingerprint}
        if self._open_kwargs:  # a remote store: its options, secrets as `docstore.open` says
            holder = _Options()
            holder._remote = self._open_kwargs
            state["open_kwargs"] = _remote_kwargs(holder, for_pickle=True)  # type: ignore[arg-type]
        if self._url is not None:  # its URL, credentials as `docstore.open` says
            credentials = self._open_kwargs.get("pickle_credentials", False)
            state["url"] = _pickled_url(self._url, credentials)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = state["path"]
        self._url = state.get("url")
        self._fingerprint = state["fingerprint"]
        self._open_kwargs = state.get("open_kwargs", {})
        self._store = None
        self._pid = None
        self._owned = False

    def __repr__(self) -> str:
        return f"<store {self.path!r}>"


class _Options:
    """Holds a remote store's options where ``_remote_kwargs`` looks for them."""

    _remote: dict[str, Any]


# What ``StoreDataset._take`` gives in place of a damaged document it left out.
DAMAGED: Any = type("Damaged", (), {"__repr__": lambda self: "<damaged document>"})()

# The stores this process has warned of damaged documents (one warning per process and store).
_WARNED: set[str] = set()


class StoreDataset(Dataset[Any]):
    """Base: a lazily (re)opened store, batch fetches, cheap pickling, and the policy for
    damaged documents.

    ``on_corrupt="raise"`` (the default): a document that fails its check raises
    ``CorruptStoreError`` and stops the DataLoader. ``"skip"``: a batch leaves out every item
    that needs a damaged document (it comes back shorter; nothing takes its place), each process
    warns once, naming the store and the positions, and ``skipped`` / ``damaged_positions``
    count them over this process and its DataLoader workers."""

    def __init__(self, store_or_path: Any, on_corrupt: str = "raise") -> None:
        self.on_corrupt = check_on_corrupt(on_corrupt)
        self._damage = DamageTally()
        self._handle = StoreHandle(store_or_path)
        self._handle.get()  # open now: a missing or corrupt file fails here, not in a worker

    @property
    def skipped(self) -> int:
        """Items left out because a document they need is damaged (``on_corrupt="skip"``), in
        this process and the DataLoader workers it started."""
        return self._damage.skipped

    @property
    def damaged_positions(self) -> list[int]:
        """The store positions of the damaged documents met (the first 256, sorted)."""
        return self._damage.positions

    def _take(self, positions: Any, store: DocStore | None = None, **options: Any) -> list[Any]:
        """``store.take(positions, **options)`` (this dataset's store by default); with
        ``on_corrupt="skip"``, each damaged document is ``DAMAGED`` in the list, recorded."""
        store = self.store if store is None else store
        if self.on_corrupt == "raise":
            taken: list[Any] = store.take(positions, **options)
            return taken
        positions = np.asarray(positions, dtype=np.int64)
        values, damaged = read_skipping(lambda p: store.take(p, **options), positions, self.on_corrupt)
        if not len(damaged):
            return cast("list[Any]", values)
        damaged = np.where(damaged < 0, damaged + len(store), damaged)
        normal = np.where(positions < 0, positions + len(store), positions)
        out: list[Any] = [DAMAGED] * len(positions)
        for i, value in zip(np.flatnonzero(~np.isin(normal, damaged)).tolist(), values):
            out[i] = value
        self._damage.add(damaged.tolist(), 0)
        where = f"store {_redact_urls(os.fspath(store.path))}"
        warn_once(_WARNED, where, described(damaged.tolist(), "position(s)"))
        return out

    def _kept(self, items: list[Any], needs: Any = None) -> list[Any]:
        """``items`` without those that need a damaged document: ``needs(item)`` gives the values
        an item was made of (by default the item itself)."""
        if self.on_corrupt == "raise":
            return items
        parts = (lambda item: (item,)) if needs is None else needs
        kept = [item for item in items if not any(part is DAMAGED for part in parts(item))]
        if len(kept) < len(items):
            self._damage.add((), len(items) - len(kept))
        return kept

    @property
    def store(self) -> DocStore:
        """This process's open store (opened on first use after a fork or an unpickle)."""
        return self._handle.get()

    @property
    def path(self) -> str:
        return self._handle.path

    def store_positions(self, indices: Positions) -> np.ndarray:
        """The positions in this dataset's store of the documents that items ``indices`` read."""
        return as_positions(indices)

    def prefetch(self, indices: Positions) -> int:
        """Loads the documents that items ``indices`` read, without decoding them
        (``DocStore.prefetch``): a local store's pages into the page cache, a remote store's bytes
        into the node cache. Returns the bytes loaded or asked for. What
        :class:`PrefetchSampler` calls ahead of the batches it yields."""
        positions = self.store_positions(indices)
        return self.store.prefetch(positions) if len(positions) else 0

    def _check_field(self, name: str, allowed: Sequence[str] | None = None) -> str:
        fields = self.store.fields
        if name not in fields:
            raise docstore.SchemaError(f"no field {name!r}; the store's fields are {list(fields)}")
        kind = fields[name]
        if allowed is NUMERIC_ARRAY_OR_SCALAR and kind.endswith("]") and kind.split("[")[0] + "[]" in allowed:
            return name  # a fixed shape: N-D tensors
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


def _fits(stored: np.dtype, wanted: np.dtype) -> bool:
    """Whether every value of ``stored`` is exactly a value of ``wanted``."""
    if wanted.kind in "iu":
        return stored.kind in "iu" and bool(np.can_cast(stored, wanted, "safe"))
    if wanted.kind in "fc":
        if stored.kind in "iu":  # integers are exact up to 2**(mantissa bits + 1)
            return stored.itemsize * 8 - (stored.kind == "i") <= np.finfo(wanted).nmant + 1
        return bool(np.can_cast(stored, wanted, "safe"))
    return stored == wanted  # bool: keeps only zero / nonzero


def _why_not(stored: np.dtype, wanted: np.dtype) -> str:
    if wanted.kind == "b":
        return f"{wanted} keeps only zero or not"
    if stored.kind == "f" and wanted.kind in "iu":
        return f"{stored} values need not be whole numbers"
    if stored.kind in "iu" and wanted.kind in "iu":
        have, can = np.iinfo(stored), np.iinfo(wanted)
        return f"{stored} goes from {have.min} to {have.max}, {wanted} from {can.min} to {can.max}"
    if stored.kind in "iu":
        exact = np.finfo(wanted).nmant + 1
        return f"{wanted} holds integers exactly only up to 2**{exact}, {stored} up to {np.iinfo(stored).max}"
    return f"{wanted} is narrower than {stored}"


def check_dtype_fits(
    owner: str, field: str, field_type: str, dtype: torch.dtype | None, *, float_rounds: bool = False
) -> None:
    """Refuses a ``dtype`` that cannot hold every value of the field's stored element type:
    numpy's ``astype`` would wrap (uint64 2**64-1 to int64 -1) or truncate without a word, in a
    worker, batches into training. Checked once, at construction, from the field's type, so a
    store that happens to hold only small values today fails as one that does not would.
    ``float_rounds``: a float ``dtype`` is taken whatever the stored type (rounding, not
    wrapping: a dataset whose documented purpose is float tensors)."""
    if dtype is torch.bfloat16 and float_rounds:
        return
    wanted = numpy_dtype(dtype)
    if wanted is None:
        return
    # Every bfloat16 is a float32 (its top 16 bits): what holds one holds the other.
    stored = np.dtype(field_type.split("[")[0].replace("bfloat16", "float32"))  # T[] or T[d1,...]
    if _fits(stored, wanted) or (float_rounds and wanted.kind == "f"):
        return
    ints, floats = (torch.int64, torch.int32, torch.int16), (torch.float32, torch.float64)
    family = floats if wanted.kind in "fc" else ints[::-1]
    wider = [d for d in family if _fits(stored, numpy_dtype(d))]  # type: ignore[arg-type]
    options = [f"dtype={wider[0]}"] if wider else []
    if float_rounds:
        options.append("a float dtype (rounded)")
    options.append(f"dtype=None to keep {stored} (torch.{stored})")
    rewrite = (
        f", or store the field as a type that {wanted} holds" if not wider and wanted.kind in "iu" else ""
    )
    raise TypeError(
        f"{owner}: field {field!r} is {field_type}, and dtype={dtype} cannot hold every {stored} value "
        f"({_why_not(stored, wanted)}); pass {' or '.join(options)}{rewrite}"
    )
