"""``Doc``: the record type lookups return.

A Doc is a namedtuple ``(doc_id, *fields)``, as ir_datasets' documents are, so code written for
ir_datasets keeps working (``doc.text``, ``doc.doc_id``, ``doc._asdict()``, tuple unpacking).
It also allows ``doc["text"]``. One class exists per field list; it pickles by field names, so
documents cross DataLoader worker queues and process boundaries.
"""

from __future__ import annotations

import collections
import os
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any


class Doc:
    """Base of every store's document class; use it for ``isinstance`` checks."""

    __slots__ = ()
    _fields: tuple[str, ...]

    if TYPE_CHECKING:  # what every store's class has, for type checkers; the fields vary by store
        doc_id: str

        def __getattr__(self, name: str) -> Any: ...
        def _asdict(self) -> dict[str, Any]: ...
        def __iter__(self) -> Iterator[Any]: ...
        def __len__(self) -> int: ...

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            if key not in self._fields:
                raise KeyError(key)
            return tuple.__getitem__(self, self._fields.index(key))  # type: ignore[call-overload]
        return tuple.__getitem__(self, key)  # type: ignore[call-overload]

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self._fields, tuple(self)))


# One class per field list, made under a lock: threads opening stores of the same fields at once
# (free-threaded CPython runs them in parallel) must get the same class, which functools.cache
# does not promise (it may call the function twice and return both results).
_CLASSES: dict[tuple[str, ...], type] = {}
_CLASSES_LOCK = threading.Lock()


def _new_lock_in_child() -> None:
    # A thread of the parent may have held the lock at the fork; it does not exist in the child.
    global _CLASSES_LOCK
    _CLASSES_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):  # not on Windows
    os.register_at_fork(after_in_child=_new_lock_in_child)


def doc_class(fields: tuple[str, ...]) -> type:
    """The Doc class with fields ``("doc_id", *fields)``."""
    cls = _CLASSES.get(fields)
    if cls is None:
        with _CLASSES_LOCK:
            cls = _CLASSES.get(fields)
            if cls is None:
                base = collections.namedtuple("Doc", ("doc_id", *fields))  # type: ignore[misc]
                cls = type("Doc", (Doc, base), {"__slots__": (), "__module__": __name__})
                _CLASSES[fields] = cls
    return cls


def _rebuild(fields: tuple[str, ...], values: tuple[Any, ...]) -> Doc:
    return tuple.__new__(doc_class(fields[1:]), values)
