"""The exceptions docstore raises: one hierarchy rooted at :class:`DocstoreError`.

Each class also derives from the built-in exception a Python user would expect in its place
(``ValueError``, ``TypeError``, ``FileExistsError`` ...), so both kinds of ``except`` work.
Missing doc ids raise ``KeyError`` and out-of-range positions ``IndexError``, as in any mapping.
"""

from __future__ import annotations


class DocstoreError(Exception):
    """Base class of every docstore error."""


class CorruptStoreError(DocstoreError):
    """The file is not a docstore store, is truncated, or fails a checksum."""


class UnsupportedVersionError(DocstoreError):
    """The store was written in a newer format version than this docstore reads."""


class SchemaError(DocstoreError, ValueError):
    """A document does not match the store's fields (missing, extra or unknown field)."""


class FieldTypeError(SchemaError, TypeError):
    """A field value has the wrong type for its field."""


class InvalidKeyError(DocstoreError, ValueError):
    """A doc id is empty or not a string."""


class InvalidArgumentError(DocstoreError, ValueError):
    """An argument is out of range or of the wrong kind (an empty list of shards to seal, ...)."""


class DuplicateKeyError(DocstoreError, ValueError):
    """Two documents share a doc id. ``doc_id`` holds the culprit; ``positions``, when a writer
    refused it as it was added, the positions (in the store being written) of the document
    that has it and of the one refused."""

    def __init__(
        self, message: str, doc_id: str | None = None, positions: tuple[int, int] | None = None
    ) -> None:
        super().__init__(message)
        self.doc_id = doc_id
        self.positions = positions


class StoreExistsError(DocstoreError, FileExistsError):
    """The target path already holds a file and ``overwrite=True`` was not given, or holds
    something that an overwrite never replaces (anything but a docstore store or collection)."""


class StoreNotFoundError(DocstoreError, FileNotFoundError):
    """No store at the given path."""


class StoreIOError(DocstoreError, OSError):
    """An operating-system error while reading or writing a store."""


class ClosedError(DocstoreError, ValueError):
    """The store or writer was closed (or the writer already finished or failed)."""


class StoreChangedError(DocstoreError):
    """The store changed under its reader: the file at a dataset's path is no longer the store
    the dataset was created from (it was rebuilt or replaced), or a remote object was replaced
    since it was opened (its ETag no longer matches). Its positions would point at other
    documents: open it again."""


class NotAnIdError(DocstoreError, KeyError):
    """``store[key]`` with a key that cannot be a doc id: an int (a position?) or a slice. A
    ``KeyError`` like any missing id (``args == (key,)``), whose message says how to read by
    position: ``store.at(i)``, ``store.take(range(a, b))``."""

    def __str__(self) -> str:
        key = self.args[0] if self.args else None
        if isinstance(key, slice):
            start = 0 if key.start is None else key.start
            stop = "len(store)" if key.stop is None else key.stop
            step = "" if key.step is None else f", {key.step}"
            return (
                f"{key!r}: ids are strings, and a store is not sliced; for the documents at those "
                f"positions, use store.take(range({start}, {stop}{step}))"
            )
        return f"{key!r}: ids are strings; for the document at position {key}, use store.at({key})"


class InternalError(DocstoreError):
    """A bug inside docstore (a Rust panic caught at the boundary). Please report it."""


__all__ = [
    "ClosedError",
    "CorruptStoreError",
    "DocstoreError",
    "DuplicateKeyError",
    "FieldTypeError",
    "InternalError",
    "InvalidArgumentError",
    "InvalidKeyError",
    "NotAnIdError",
    "SchemaError",
    "StoreChangedError",
    "StoreExistsError",
    "StoreIOError",
    "StoreNotFoundError",
    "UnsupportedVersionError",
]
