"""Type stubs of the extension module ``docstore._docstore`` (the pyo3 layer over docstore-core)."""

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, SupportsIndex, TypeVar, final, overload

import numpy as np
import numpy.typing as npt
from typing_extensions import Self, disjoint_base

from ._doc import Doc

_T = TypeVar("_T")
# How documents are read: through the memory map, or one pread(2) each (docstore.open's doc).
_ReadMode = Literal["mmap", "pread"]

__all__ = [
    "ARRAY_DTYPES",
    "DEFAULT_LEVEL",
    "EXCEPTION_CLASSES",
    "FORMAT_VERSION",
    "HeldTarget",
    "Reader",
    "Staging",
    "Writer",
    "_redact_urls",
    "_strip_url",
    "check_replaceable",
    "check_writer",
    "get_num_threads",
    "is_url",
    "lock_target",
    "publish_file",
    "seal",
    "set_num_threads",
    "train_dictionary",
]

FORMAT_VERSION: int
ARRAY_DTYPES: tuple[str, ...]
DEFAULT_LEVEL: int
EXCEPTION_CLASSES: tuple[str, ...]

def seal(
    target: str | os.PathLike[str],
    shards: Sequence[str | os.PathLike[str]],
    *,
    overwrite: bool = False,
    append: bool = False,
    progress: Callable[[int, int], object] | None = None,
) -> int: ...
def check_replaceable(target: str | os.PathLike[str]) -> None: ...
def publish_file(
    finished: str | os.PathLike[str], target: str | os.PathLike[str], *, overwrite: bool = False
) -> None: ...
def lock_target(target: str | os.PathLike[str]) -> HeldTarget: ...

@final
class HeldTarget:
    def append(
        self,
        shards: Sequence[str | os.PathLike[str]],
        *,
        progress: Callable[[int, int], object] | None = None,
    ) -> int: ...
    def release(self) -> None: ...
    def __enter__(self) -> HeldTarget: ...
    def __exit__(self, exc_type: object, exc: object, tb: object, /) -> None: ...

@final
class Staging:
    def __new__(cls, target: str | os.PathLike[str], *, held: HeldTarget | None = None) -> Staging: ...
    @staticmethod
    def unheld(target: str | os.PathLike[str]) -> str: ...
    @staticmethod
    def attach(target: str | os.PathLike[str], path: str | os.PathLike[str]) -> Staging: ...
    @staticmethod
    def sweep(target: str | os.PathLike[str]) -> list[str]: ...
    @property
    def path(self) -> str: ...
    @property
    def target(self) -> str: ...
    @property
    def released(self) -> bool: ...
    def publish(
        self, path: str | os.PathLike[str], *, overwrite: bool = False, export: bool = False
    ) -> None: ...
    def release(self) -> None: ...
    def __enter__(self) -> Staging: ...
    def __exit__(self, exc_type: object, exc: object, tb: object, /) -> None: ...

def check_writer(
    fields: Mapping[str, str] | Sequence[tuple[str, str]],
    *,
    overwrite: bool = False,
    level: int | None = None,
    dict_size: int | None = None,
    batch_bytes: int | None = None,
    key_buffer_bytes: int | None = None,
    format_version: int | None = None,
    dictionary: bytes | None = None,
    metadata: str | None = None,
) -> None: ...
def train_dictionary(
    samples: Iterable[Any],
    size: int | None = None,
    *,
    fields: Mapping[str, str] | Sequence[tuple[str, str]] | None = None,
) -> bytes: ...
def set_num_threads(n: int) -> None: ...
def get_num_threads() -> int: ...
def _redact_urls(text: str) -> str: ...
def _strip_url(url: str) -> str | None: ...
def is_url(path: object) -> bool: ...

@disjoint_base
class Reader:
    def __new__(
        cls,
        path: str | os.PathLike[str],
        *,
        read: _ReadMode = "mmap",
        cache_dir: str | os.PathLike[str] | None = None,
        cache_bytes: int | None = None,
        storage_options: Mapping[str, str] | None = None,
    ) -> Self: ...
    @property
    def path(self) -> Path | str: ...
    @property
    def url(self) -> str | None: ...
    def _reopen_url(self, credentials: bool) -> str | None: ...
    def _remote_stats(self) -> dict[str, int] | None: ...
    @property
    def read(self) -> _ReadMode: ...
    @property
    def fields(self) -> dict[str, str]: ...
    @property
    def doc_class(self) -> type[Doc]: ...
    @property
    def closed(self) -> bool: ...
    @property
    def fingerprint(self) -> int: ...
    def close(self) -> None: ...
    def __len__(self) -> int: ...
    def __contains__(self, key: object, /) -> bool: ...
    def __getitem__(self, key: str, /) -> Doc: ...
    # Without field= or fields=: Doc objects; with field=: that field's values; with fields=:
    # tuples of the fields asked for.
    @overload
    def get(
        self, doc_id: str, default: None = None, *, field: None = None, fields: None = None
    ) -> Doc | None: ...
    @overload
    def get(self, doc_id: str, default: _T, *, field: None = None, fields: None = None) -> Doc | _T: ...
    @overload
    def get(self, doc_id: str, default: Any = None, *, field: str, fields: None = None) -> Any: ...
    @overload
    def get(
        self, doc_id: str, default: _T = ..., *, field: None = None, fields: Sequence[str]
    ) -> tuple[Any, ...] | _T: ...
    def position(self, doc_id: str) -> int: ...
    def positions(self, doc_ids: Iterable[str]) -> npt.NDArray[np.int64]: ...
    @overload
    def get_many(
        self, doc_ids: Iterable[str], *, field: None = None, fields: None = None
    ) -> dict[str, Doc]: ...
    @overload
    def get_many(self, doc_ids: Iterable[str], *, field: str, fields: None = None) -> dict[str, Any]: ...
    @overload
    def get_many(
        self, doc_ids: Iterable[str], *, field: None = None, fields: Sequence[str]
    ) -> dict[str, tuple[Any, ...]]: ...
    @overload
    def at(self, index: SupportsIndex, *, field: None = None, fields: None = None) -> Doc: ...
    @overload
    def at(self, index: SupportsIndex, *, field: str, fields: None = None) -> Any: ...
    @overload
    def at(self, index: SupportsIndex, *, field: None = None, fields: Sequence[str]) -> tuple[Any, ...]: ...
    @overload
    def take(
        self, positions: Iterable[SupportsIndex], *, field: None = None, fields: None = None
    ) -> list[Doc]: ...
    @overload
    def take(self, positions: Iterable[SupportsIndex], *, field: str, fields: None = None) -> list[Any]: ...
    @overload
    def take(
        self, positions: Iterable[SupportsIndex], *, field: None = None, fields: Sequence[str]
    ) -> list[tuple[Any, ...]]: ...
    @overload
    def take(
        self,
        positions: Iterable[SupportsIndex],
        *,
        field: str | None = None,
        fields: Sequence[str] | None = None,
    ) -> list[Any]: ...
    def prefetch(self, positions: Iterable[SupportsIndex]) -> int: ...
    def load_index(self) -> int: ...
    def keys_range(self, start: int, stop: int) -> list[str]: ...
    def _take_columns(
        self, positions: Iterable[SupportsIndex], fields: Sequence[str]
    ) -> tuple[
        tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8], None, None],
        list[
            tuple[
                npt.NDArray[np.int64] | None,
                npt.NDArray[np.uint8],
                npt.NDArray[np.int64] | None,
                npt.NDArray[np.uint8] | None,
            ]
        ],
    ]: ...
    def _info(self) -> dict[str, Any]: ...
    def _dictionary(self) -> bytes: ...
    def _metadata(self) -> str | None: ...
    def verify(self, progress: Callable[[int, int], object] | None = None) -> None: ...

@disjoint_base
class Writer:
    def __new__(
        cls,
        path: str | os.PathLike[str],
        fields: Mapping[str, str] | Sequence[tuple[str, str]],
        *,
        overwrite: bool = False,
        level: int | None = None,
        dict_size: int | None = None,
        batch_bytes: int | None = None,
        key_buffer_bytes: int | None = None,
        format_version: int | None = None,
        dictionary: bytes | None = None,
        metadata: str | None = None,
        _every_id: bool = False,
    ) -> Self: ...
    @property
    def path(self) -> Path: ...
    @property
    def fields(self) -> dict[str, str]: ...
    @property
    def count(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def add(self, doc_id: str, fields: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None: ...
    def add_record(self, record: dict[str, Any], id_field: str) -> None: ...
    def _add_columns(self, doc_ids: list[Any], columns: list[list[Any]]) -> None: ...
    def _add_arrow_columns(
        self,
        doc_ids: tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8]],
        columns: Sequence[
            tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8]]
            | npt.NDArray[np.int64]
            | npt.NDArray[np.float64]
            | tuple[npt.NDArray[np.int64], npt.NDArray[Any]]
        ],
    ) -> None: ...
    def position_of(self, doc_id: str) -> int | None: ...
    def finish(self) -> dict[str, int]: ...
    def abort(self) -> None: ...
