"""The interface every peer implements, and the helpers several of them share."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Callable, NamedTuple

Record = Mapping[str, Any]


def dir_size(path: str | os.PathLike) -> int:
    """Total bytes of the regular files under ``path`` (or of ``path`` itself if a file)."""
    p = Path(path)
    if p.is_file():
        return p.stat().st_size
    total = 0
    for root, _dirs, files in os.walk(p):
        for f in files:
            fp = os.path.join(root, f)
            if not os.path.islink(fp):
                total += os.path.getsize(fp)
    return total


class Ops(NamedTuple):
    """One store's lookups, bound to an open handle and a field (see ``Peer.ops``)."""

    get: Callable[[str], Any]  # value of one doc by id
    at: Callable[[int], Any]  # value of one doc by position (insertion order)
    get_many: Callable[[list[str]], Any]  # {id: value} or [value] in request order
    take: Callable[[list[int]], Any]  # [value] in request order


def batch_values(result: Any, ids: list) -> list:
    """A ``get_many``/``take`` result as a list in request order (dicts are keyed by id)."""
    if isinstance(result, Mapping):
        return [result[i] for i in ids]
    return list(result)


def values_equal(a: Any, b: Any) -> bool:
    if isinstance(b, str):
        return a == b
    import numpy as np

    return isinstance(a, np.ndarray) and a.dtype == np.int32 and np.array_equal(a, b)


def decoder(field: str) -> Callable[[bytes], Any]:
    """bytes -> value, for the key-value stores that keep raw bytes."""
    if field == "tokens":
        import numpy as np

        return lambda b: np.frombuffer(b, dtype=np.int32)
    return lambda b: b.decode("utf-8")


def encode(value: Any) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else value.tobytes()


def write_ids(path: Path, ids: list[str]) -> None:
    """The ids in insertion order, one per line: the position map of stores keyed by id only."""
    with open(Path(path) / IDS_FILE, "w", encoding="utf-8") as f:
        for i in ids:
            f.write(i + "\n")


def read_ids(path: Path) -> list[str]:
    with open(Path(path) / IDS_FILE, encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


IDS_FILE = "ids.txt"


class Peer:
    name: str = "?"
    requires: str | None = None
    #: value kinds the system can store: "text" (str) and/or "tokens" (int32 arrays)
    kinds: tuple[str, ...] = ("text",)
    #: doc_id -> row lookups go through a Python dict built on open (the system has none)
    position_map: bool = False
    #: one line on how the system is used here (for the report)
    how: str = ""
    #: nothing on disk: build() returns the store itself and there is nothing to open()
    in_memory: bool = False
    #: can one object serve lookups from several threads at once? If not, each thread gets
    #: its own handle from ``for_thread`` (what a user of that system would have to do).
    thread_safe: bool = True
    thread_note: str = ""
    #: attributes of an open handle that a user keeps in memory across a reopen (an id list,
    #: an id -> row map), carried over by ``reopen``
    kept_in_memory: tuple[str, ...] = ()

    def build(self, path: Path, records: Iterable[Record]) -> Any:
        raise NotImplementedError

    def open(self, path: Path) -> Any:
        raise NotImplementedError

    def get(self, obj: Any, doc_id: str) -> str:
        raise NotImplementedError

    def get_many(self, obj: Any, doc_ids: list[str]) -> dict[str, str]:
        raise NotImplementedError

    def size_on_disk(self, path: Path) -> int | None:
        return dir_size(path)

    def close(self, obj: Any) -> None:
        pass

    def for_thread(self, obj: Any, path: Path) -> Any:
        """A handle for another thread: ``obj`` itself if thread-safe, else a new one
        (closed by the caller with ``close_thread_handle``)."""
        return obj

    def lookup_threads(self) -> contextlib.AbstractContextManager:
        """Context in which this system's lookups are measured (docstore's decode threads)."""
        return contextlib.nullcontext()

    def close_thread_handle(self, handle: Any, obj: Any) -> None:
        if handle is not obj:
            self.close(handle)

    # -- comparison-suite interface --------------------------------------------------------

    def ops(self, obj: Any, field: str) -> Ops:
        raise NotImplementedError

    def files(self, path: Path) -> list[Path]:
        p = Path(path)
        if p.is_file():
            return [p]
        return sorted(q for q in p.rglob("*") if q.is_file() and not q.is_symlink())

    def reopen(self, obj: Any, path: Path, between: Callable[[], Any] | None = None) -> Any:
        """Close, call ``between()`` (the cache eviction), open again; what a user would keep in
        memory across (``kept_in_memory``: an id -> row map, an id list) is kept."""
        kept = {name: getattr(obj, name) for name in self.kept_in_memory}
        self.close(obj)
        if between is not None:
            between()
        reopened = self.open(path)
        for name, value in kept.items():
            setattr(reopened, name, value)
        return reopened

    def version(self) -> str:
        if not self.requires:
            return "-"
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as v

        try:
            return v(self.dist or self.requires)
        except PackageNotFoundError:
            return "?"

    #: the PyPI distribution name, when it differs from ``requires``
    dist: str | None = None


def chunks(records: Iterable[Record], size: int):
    chunk: list = []
    for r in records:
        chunk.append(r)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class Handle:
    """A small attribute bag: what ``open`` returns for the systems below."""

    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


class PositionMapped(Peer):
    """Systems addressed by row number: a dict doc_id -> row is built on open from the id column."""

    position_map = True
    kinds = ("text", "tokens")
    kept_in_memory = ("rows",)

    def _id_list(self, h) -> list[str]:
        raise NotImplementedError

    def _rows(self, h) -> dict[str, int]:
        if h.rows is None:
            h.rows = {doc_id: j for j, doc_id in enumerate(self._id_list(h))}
        return h.rows

    @staticmethod
    def _ops(rows: dict[str, int], at, take) -> Ops:
        """Lookups by id through the id -> row map, by position directly."""
        return Ops(
            get=lambda i: at(rows[i]),
            at=at,
            get_many=lambda ids: take([rows[i] for i in ids]),
            take=take,
        )
