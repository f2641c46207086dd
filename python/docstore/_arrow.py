"""Arrow types to docstore field types: the one mapping the CLI's Parquet input and the engines
(``docstore.ray``, ``docstore.spark``) share, and the preparation of Arrow batches for a writer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ._docstore import ARRAY_DTYPES
from .errors import InvalidKeyError, SchemaError


def field_type(arrow_type: Any) -> str | None:
    """The docstore field type that holds values of ``arrow_type``, or None if there is none.

    Strings are ``str``, binary ``bytes``, every integer type ``int64`` (a ``uint64`` beyond the
    int64 range is refused by value), every float type ``float64``, and a list of numbers the
    array of its element type (``list<float32>`` is ``float32[]``; ``float16`` elements go to
    ``float32[]``, the narrowest float field). A dictionary-encoded column has its values' type.
    """
    import pyarrow as pa

    t = arrow_type.value_type if pa.types.is_dictionary(arrow_type) else arrow_type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or _is_view(t, "string"):
        return "str"
    if (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or _is_view(t, "binary")
    ):
        return "bytes"
    if pa.types.is_integer(t):
        return "int64"
    if pa.types.is_floating(t):
        return "float64"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        element = t.value_type
        if pa.types.is_integer(element) or pa.types.is_floating(element):
            dtype = np.dtype(element.to_pandas_dtype()).name
            if dtype in ARRAY_DTYPES:
                return f"{dtype}[]"
            if dtype == "float16":  # the narrowest float field, as build() infers
                return "float32[]"
    return None


def unsupported(name: str, arrow_type: Any) -> str:
    """Why column ``name`` of ``arrow_type`` has no field type (``field_type`` gave None)."""
    import pyarrow as pa

    if pa.types.is_boolean(arrow_type):
        return f"column {name!r} is bool, which docstore has no type for"
    return f"column {name!r} has Arrow type {arrow_type}, which docstore has no field type for"


def _is_view(arrow_type: Any, kind: str) -> bool:
    """string_view / binary_view (pyarrow >= 16), tested without needing that pyarrow."""
    import pyarrow as pa

    test = getattr(pa.types, f"is_{kind}_view", None)
    return bool(test and test(arrow_type))


def schema_fields(schema: Any, id_field: str, fields: Mapping[str, str] | None = None) -> dict[str, str]:
    """The writer's fields for an Arrow ``schema`` whose ids are in column ``id_field``: ``fields``
    when given (checked against the schema), else every other column's type by ``field_type``."""
    names = list(schema.names)
    if id_field not in names:
        raise SchemaError(f"the data has no id column {id_field!r} (columns: {names})")
    id_type = schema.field(id_field).type
    if field_type(id_type) != "str":
        raise InvalidKeyError(
            f"id column {id_field!r} has Arrow type {id_type}; doc ids must be strings: cast the column"
        )
    if fields is not None:
        fields = dict(fields)
        missing = [name for name in fields if name not in names]
        if missing:
            raise SchemaError(f"the data has no column for field(s) {missing} (columns: {names})")
        return fields
    if id_field != "doc_id" and "doc_id" in names:
        raise SchemaError(
            f"the data has a 'doc_id' column beside the id column {id_field!r}; 'doc_id' is the name "
            "docstore gives the key, so rename or drop that column, or use it as id_field"
        )
    result = {}
    for field in schema:
        if field.name == id_field:
            continue
        kind = field_type(field.type)
        if kind is None:
            raise SchemaError(
                f"{unsupported(field.name, field.type)}; cast or drop the column, or pass fields={{...}} "
                "naming the columns to keep"
            )
        result[field.name] = kind
    return result


def prepare(batch: Any, id_field: str, fields: Mapping[str, str]) -> Any:
    """``batch`` (a pyarrow Table or RecordBatch) cut to the id column and ``fields``, with the
    column encodings the writer does not read directly (dictionaries, string/binary views,
    fixed-size lists and binaries) cast to plain ones; its id column checked for nulls."""
    import pyarrow as pa

    names = [id_field, *fields]
    columns = []
    for name in names:
        column = batch.column(name)
        if pa.types.is_dictionary(column.type):
            column = (
                pa.chunked_array([c.dictionary_decode() for c in column.chunks], column.type.value_type)
                if isinstance(column, pa.ChunkedArray)
                else column.dictionary_decode()
            )
        kind = column.type
        if _is_view(kind, "string"):
            column = column.cast(pa.large_string())
        elif _is_view(kind, "binary") or pa.types.is_fixed_size_binary(kind):
            column = column.cast(pa.large_binary())
        elif pa.types.is_fixed_size_list(kind):
            column = column.cast(pa.list_(kind.value_type))
        columns.append(column)
    nulls = columns[0].null_count
    if nulls:
        raise InvalidKeyError(f"id column {id_field!r} has {nulls} null(s); every document needs a string id")
    if isinstance(batch, pa.RecordBatch) and all(isinstance(c, pa.Array) for c in columns):
        return pa.RecordBatch.from_arrays(columns, names=names)
    return pa.table(columns, names=names)
