"""A store's documents as Arrow: the Arrow type of each docstore field type, and a batch of
documents read by position as an Arrow RecordBatch made over the buffers the core fills
(``Reader._take_columns``), with no Python object per document. ``DocStore.to_arrow`` and the
engines' reads (``_engine_read``) use it; it imports nothing of the package but the errors, so
both can."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ._docstore import Reader
from .errors import InvalidArgumentError, SchemaError


def check_columns(fields: Mapping[str, str], columns: Sequence[str] | str | None, where: str) -> list[str]:
    """The fields to read for ``columns`` (None: all; ``doc_id`` is always read, and may be
    named); an unknown or repeated column is refused naming ``where`` (the store) and its
    fields."""
    if columns is None:
        return list(fields)
    if isinstance(columns, str):
        raise InvalidArgumentError(
            f"columns must be a list of field names, got one str {columns!r}: use [{columns!r}]"
        )
    names = [str(c) for c in columns]
    unknown = [c for c in names if c != "doc_id" and c not in fields]
    if unknown:
        raise SchemaError(f"{where} has no field(s) {unknown}; its fields are {list(fields)} (and doc_id)")
    repeated = sorted({c for c in names if names.count(c) > 1})
    if repeated:
        raise InvalidArgumentError(f"columns names {repeated} more than once")
    return [c for c in names if c != "doc_id"]


def parse_kind(kind: str) -> tuple[str, bool, tuple[int, ...] | None]:
    """A field type as ``(base, nullable, shape)``: ``"float32[2,3]?"`` is
    ``("float32[]", True, (2, 3))``; a 1-D array ``"float32[]"`` has no shape."""
    nullable = kind.endswith("?")
    kind = kind.removesuffix("?")
    if kind.endswith("]") and not kind.endswith("[]") and "[" in kind and not kind.startswith("list["):
        element, dims = kind[:-1].split("[", 1)
        return element + "[]", nullable, tuple(int(d) for d in dims.split(","))
    return kind, nullable, None


def _element_type(element: str) -> Any:
    import pyarrow as pa

    # Arrow has no bfloat16: its values widen exactly to float32, as docstore.hf gives them.
    return pa.float32() if element == "bfloat16" else pa.from_numpy_dtype(np.dtype(element))


def arrow_type(kind: str) -> Any:
    """The Arrow type a field of docstore type ``kind`` is read as: ``large_string``,
    ``large_binary``, ``int64``, ``float64``, ``bool``, ``large_list`` of strings, binaries or
    numbers (``bfloat16`` widened to ``float32``), ``fixed_shape_tensor`` for a fixed shape."""
    import pyarrow as pa

    base, _, shape = parse_kind(kind)
    scalars = {
        "str": pa.large_string(),
        "bytes": pa.large_binary(),
        "int64": pa.int64(),
        "float64": pa.float64(),
        "bool": pa.bool_(),
        "list[str]": pa.large_list(pa.large_string()),
        "list[bytes]": pa.large_list(pa.large_binary()),
    }
    if base in scalars:
        return scalars[base]
    if base.endswith("[]"):
        element = _element_type(base[:-2])
        return pa.fixed_shape_tensor(element, list(shape)) if shape else pa.large_list(element)
    raise SchemaError(f"field type {kind!r} has no Arrow type")


def arrow_schema(fields: Mapping[str, str], columns: Sequence[str]) -> Any:
    """The schema of what a read yields: ``doc_id`` first, then ``columns`` in that order."""
    import pyarrow as pa

    return pa.schema(
        [pa.field("doc_id", pa.large_string(), nullable=False)]
        + [pa.field(c, arrow_type(fields[c])) for c in columns]
    )


def _array(kind: str, n: int, offsets: Any, data: np.ndarray, items: Any = None, valid: Any = None) -> Any:
    """An Arrow array over the buffers ``_take_columns`` made (no copy where Arrow's layout is
    docstore's: the numpy arrays stay alive as the Arrow buffers' owners)."""
    import pyarrow as pa

    t = arrow_type(kind)
    base, _, shape = parse_kind(kind)
    mask = None if valid is None else pa.py_buffer(np.packbits(valid.astype(bool), bitorder="little"))
    values = pa.py_buffer(data)
    if base in ("str", "bytes"):
        return pa.Array.from_buffers(t, n, [mask, pa.py_buffer(offsets), values])
    if base in ("int64", "float64"):
        return pa.Array.from_buffers(t, n, [mask, values])
    if base == "bool":
        bits = pa.py_buffer(np.packbits(data.astype(bool), bitorder="little"))
        return pa.Array.from_buffers(t, n, [mask, bits])
    if base.startswith("list["):
        child = pa.Array.from_buffers(t.value_type, len(items) - 1, [None, pa.py_buffer(items), values])
        return pa.Array.from_buffers(t, n, [mask, pa.py_buffer(offsets)], children=[child])
    element = base[:-2]
    if element == "bfloat16":  # its bits are float32's upper half
        values = pa.py_buffer((data.view(np.uint16).astype(np.uint32) << 16).view(np.float32))
    count = n * int(np.prod(shape)) if shape else int(offsets[-1])
    child = pa.Array.from_buffers(_element_type(element), count, [None, values])
    if shape:
        storage_type = t.storage_type
        storage = pa.Array.from_buffers(storage_type, n, [mask], children=[child])
        return pa.ExtensionArray.from_storage(t, storage)
    return pa.Array.from_buffers(t, n, [mask, pa.py_buffer(offsets)], children=[child])


def take_batch(store: Reader, positions: Any, fields: Mapping[str, str], columns: Sequence[str]) -> Any:
    """The documents at ``positions`` as an Arrow RecordBatch (``doc_id`` then ``columns``)."""
    import pyarrow as pa

    (id_offsets, id_data, _, _), parts = store._take_columns(positions, list(columns))
    n = len(id_offsets) - 1
    arrays = [_array("str", n, id_offsets, id_data)]
    arrays += [_array(fields[c], n, *part) for c, part in zip(columns, parts)]
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(fields, columns))
