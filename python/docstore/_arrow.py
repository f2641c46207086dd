"""Arrow types to docstore field types: the one mapping the CLI's Parquet input and the engines
(``docstore.ray``, ``docstore.spark``) share, and the preparation of Arrow batches for a writer."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from ._docstore import ARRAY_DTYPES
from .errors import FieldTypeError, InvalidKeyError, SchemaError


def field_type(arrow_type: Any) -> str | None:
    """The docstore field type that holds values of ``arrow_type``, or None if there is none.

    Strings are ``str``, binary ``bytes``, every integer type ``int64`` (a ``uint64`` beyond the
    int64 range is refused by value), every float type ``float64``, ``bool`` ``bool``, a list of
    strings ``list[str]``, of binaries ``list[bytes]``, and a list of numbers the array of its
    element type (``list<float32>`` is ``float32[]``, ``list<halffloat>`` ``float16[]``). A
    dictionary-encoded column has its values' type. Whether the field is nullable is not the
    type's: see ``nullable``.
    """
    import pyarrow as pa

    t = arrow_type.value_type if pa.types.is_dictionary(arrow_type) else arrow_type
    tensor = _tensor_type(t)
    if tensor is not None:
        return tensor
    if pa.types.is_string(t) or pa.types.is_large_string(t) or _is_view(t, "string"):
        return "str"
    if (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or _is_view(t, "binary")
    ):
        return "bytes"
    if pa.types.is_boolean(t):
        return "bool"
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
        inner = field_type(element) if not pa.types.is_dictionary(element) else None
        if inner in ("str", "bytes"):
            return f"list[{inner}]"
    return None


def _tensor_type(t: Any) -> str | None:
    """``T[d1,d2,...]`` for a fixed-shape array type: an extension type with a shape (Arrow's
    ``fixed_shape_tensor``, HF's ``Array2D`` ... of a fixed shape) around lists of numbers, or
    fixed-size lists nested at least twice around numbers."""
    import pyarrow as pa

    if isinstance(t, pa.BaseExtensionType) and list(getattr(t, "permutation", None) or []) != sorted(
        getattr(t, "permutation", None) or []
    ):
        return None  # elements not in C order (see unsupported)
    shape = list(getattr(t, "shape", None) or []) if isinstance(t, pa.BaseExtensionType) else []
    if any(not isinstance(d, int) or d < 1 for d in shape):
        return None  # a dimension of no fixed size (HF's None)
    storage = t.storage_type if isinstance(t, pa.BaseExtensionType) else t
    dims = []
    while pa.types.is_fixed_size_list(storage) or (shape and pa.types.is_list(storage)):
        dims.append(getattr(storage, "list_size", 0))
        storage = storage.value_type
    if not (pa.types.is_integer(storage) or pa.types.is_floating(storage)):
        return None
    if not shape and len(dims) < 2:  # one fixed-size list is a 1-D array field
        return None
    dtype = np.dtype(storage.to_pandas_dtype()).name
    shape = shape or dims
    return f"{dtype}[{','.join(map(str, shape))}]" if dtype in ARRAY_DTYPES and shape else None


def nullable(kind: str, column: Any) -> str:
    """``kind`` made nullable (``str?``) when the Arrow ``column`` (the rows a schema is inferred
    from) holds a null: a store's fields are nullable only where the data asks for it, since a
    nullable field costs a byte a document and makes the store format version 4, which older
    docstore releases do not read."""
    return f"{kind}?" if column is not None and column.null_count else kind


def unsupported(name: str, arrow_type: Any) -> str:
    """Why column ``name`` of ``arrow_type`` has no field type (``field_type`` gave None)."""

    permutation = getattr(arrow_type, "permutation", None)
    if permutation and list(permutation) != sorted(permutation):
        return (
            f"column {name!r} is a tensor with permutation {list(permutation)}, its elements not "
            "in C order, which docstore has no field type for"
        )
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
    if field_type(id_type) not in ("str", "int64"):
        raise InvalidKeyError(
            f"id column {id_field!r} has Arrow type {id_type}; doc ids must be strings (or integers, "
            "stored as their decimal text): cast the column"
        )
    if fields is not None:
        fields = dict(fields)
        missing = [name for name in fields if name not in names]
        if missing:
            raise SchemaError(f"the data has no column for field(s) {missing} (columns: {names})")
        return fields
    check_no_doc_id_beside(id_field, names)
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


def check_no_doc_id_beside(
    id_field: str | None, names: Collection[str], *, what: str = "column", use: str = "use it as id_field"
) -> None:
    """Refuses data with a ``doc_id`` column (``what``: or field) that is not its id column:
    the store calls every key ``doc_id``, so no field may have that name. Said in the user's
    terms (``use``: how they name the id column), not the Writer's, which would speak of a
    field name the user never chose. The one check of ``build``, the engines and the CLI."""
    if id_field == "doc_id" or "doc_id" not in names:
        return
    data = "the records have" if what == "field" else "the data has"
    beside = f"the id {what} {id_field!r}" if id_field is not None else "its rows numbered (id_field=None)"
    raise SchemaError(
        f"{data} a 'doc_id' {what} beside {beside}; 'doc_id' is the name docstore gives the key, "
        f"so rename or drop that {what}, or {use}"
    )


def prepare(batch: Any, id_field: str, fields: Mapping[str, str]) -> Any:
    """``batch`` (a pyarrow Table or RecordBatch) cut to the id column and ``fields``, with
    dictionaries, string/binary views, fixed-size lists and binaries cast to plain encodings
    (one layout for every shard of an engine's write); its id column checked for nulls, and
    integer ids made their decimal text."""
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
        elif pa.types.is_fixed_size_list(kind) and _tensor_type(kind) is None:
            column = column.cast(pa.list_(kind.value_type))
        if name == id_field and pa.types.is_integer(column.type):
            column = column.cast(pa.string())  # the id 7 is "7", as every input takes it
        columns.append(column)
    nulls = columns[0].null_count
    if nulls:
        raise InvalidKeyError(f"id column {id_field!r} has {nulls} null(s); every document needs a string id")
    if isinstance(batch, pa.RecordBatch) and all(isinstance(c, pa.Array) for c in columns):
        return pa.RecordBatch.from_arrays(columns, names=names)
    return pa.table(columns, names=names)


def writer_columns(doc_ids: Any, columns: Sequence[Any], fields: Mapping[str, str]) -> tuple[Any, ...] | None:
    """The arguments of ``Writer._add_arrow_columns`` for Arrow ``doc_ids`` and ``columns`` (one
    per field of ``fields``, in order): numpy views of their buffers, made without a Python
    object per value. None when any column cannot go that way, which leaves the value-by-value
    path to refuse it row by row, by name, as ``add`` does: a null, a column whose Arrow type
    does not hold the field's values (a float column for an ``int64`` field), a value the field
    cannot hold (a ``uint64`` beyond the int64 range), an element an array field's dtype cannot
    hold (``docstore._convert.as_array`` decides, as it does for each row's array). Columns that
    are not Arrow's (lists, numpy arrays) also give None."""
    for (name, kind), column in zip(fields.items(), columns):
        _check_tensor_type(column, name, kind, doc_ids)
        _check_shape_rows(column, name, kind, doc_ids)
    if not _is_arrow(doc_ids) or not all(_is_arrow(c) for c in columns):
        return None
    ids = _buffers(doc_ids, "str")
    if ids is None:
        return None
    parts = []
    for column, kind in zip(columns, fields.values()):
        part = _buffers(column, kind)
        if part is None:
            return None
        parts.append(part)
    return ids, parts


def _check_tensor_type(column: Any, name: str, kind: str, doc_ids: Any) -> None:
    """Refuses an Arrow column whose type says a shape (``fixed_shape_tensor``, HF's ``Array2D``)
    that is not field ``name``'s, or a permuted layout: its flat storage, read row by row, would
    pass for any shape of as many elements."""
    import pyarrow as pa

    t = getattr(column, "type", None)
    if not isinstance(t, pa.BaseExtensionType) or getattr(t, "shape", None) is None:
        return
    first = doc_ids[0] if len(doc_ids) else None
    doc = f"doc {getattr(first, 'as_py', lambda: first)()!r}: field {name!r} is {kind}, got"
    permutation = getattr(t, "permutation", None)
    if permutation and list(permutation) != sorted(permutation):
        raise FieldTypeError(
            f"{doc} a {t.extension_name} with permutation {list(permutation)} (elements not in C "
            "order); write its to_numpy_ndarray() values, or a tensor without a permutation"
        )
    base, said = kind.removesuffix("?"), _tensor_type(t)  # None: a dimension of no fixed size
    if base.endswith("]") and base.partition("[")[2][:1].isdigit() and said not in (None, base):
        raise FieldTypeError(f"{doc} an array of shape {tuple(t.shape)} ({t})")


def _check_shape_rows(column: Any, name: str, kind: str, doc_ids: Any) -> None:
    """Refuses an Arrow column of a fixed-shape field ``kind`` (``float32[2,3]``) that has a row
    of another shape, naming its document: the flat elements of rows ``[1, 2, 3], [4]`` would
    pass for two rows of ``float32[2]``, ``[1, 2], [3, 4]``. A row is, as in ``add``, nested
    lists of the field's shape or one flat list of all its elements. Checked on the offsets of
    every list level at once, with numpy; null rows (a nullable field's) are left out."""
    import pyarrow as pa

    base = kind.removesuffix("?")
    if not (base.endswith("]") and base.partition("[")[2][:1].isdigit()) or not _is_arrow(column):
        return
    dims = [int(d) for d in base[:-1].partition("[")[2].split(",")]
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    start = 0
    for chunk in chunks:
        if isinstance(chunk, pa.Array):
            _check_chunk_shape(chunk, start, name, base, dims, doc_ids)
        start += len(chunk)


def _check_chunk_shape(array: Any, start: int, name: str, kind: str, dims: list[int], doc_ids: Any) -> None:
    """``_check_shape_rows`` for one chunk, whose first row is row ``start`` of ``doc_ids``."""
    import pyarrow as pa

    def doc(row: int) -> str:
        doc_id = doc_ids[start + row] if start + row < len(doc_ids) else None
        return f"doc {getattr(doc_id, 'as_py', lambda: doc_id)()!r}: field {name!r} is {kind}"

    if isinstance(array.type, pa.BaseExtensionType):
        array = array.storage
    depth, t = 0, array.type
    while _is_list(t):
        depth, t = depth + 1, t.value_type
    if depth == 0 or not len(array):
        return  # not lists (the row path names the row), or no rows
    if depth == 1:
        wanted = [int(np.prod(dims))]  # a flat row of every element
    elif depth == len(dims):
        wanted = dims
    else:
        first = int(np.argmax(_valid(array)))
        flat = f"one flat list of its {int(np.prod(dims))} elements"
        form = flat if len(dims) == 1 else f"{len(dims)} nested lists of its shape, or {flat}"
        raise FieldTypeError(
            f"{doc(first)}, got rows of lists nested {depth} deep (Arrow type {array.type}): a row is {form}"
        )
    level = array
    live = _valid(level)  # the elements of this level that belong to a row that is not null
    ups: list[np.ndarray] = []  # each level's offsets into the next: a bad element's row
    for d, size in enumerate(wanted):
        if d and level.null_count and (live & ~_valid(level)).any():
            bad = _row(int(np.argmax(live & ~_valid(level))), ups)
            raise FieldTypeError(f"{doc(bad)}, got a row holding a null list (shape {tuple(dims)})")
        if pa.types.is_fixed_size_list(level.type):
            width = level.type.list_size
            offsets = np.arange(len(level) + 1, dtype=np.int64) * width
            child = level.values.slice(level.offset * width, len(level) * width)
        else:
            offsets = level.offsets.to_numpy().astype(np.int64)  # this slice's, into .values
            child = level.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
            offsets -= offsets[0]
        lengths = np.diff(offsets)
        wrong = live & (lengths != size)
        if wrong.any():
            bad = int(np.argmax(wrong))
            row = _row(bad, ups)
            raise FieldTypeError(f"{doc(row)}, {_row_shape(array, row, d, int(lengths[bad]))}")
        if d + 1 < len(wanted):
            live = np.repeat(live, lengths)
            ups.append(offsets)
            level = child


def _row_shape(array: Any, row: int, level: int, length: int) -> str:
    """What row ``row`` of ``array`` is, for the error that refuses it: the shape of its array
    (as ``add`` says it), or where it is ragged (a list of ``length`` at ``level``)."""
    value = array.slice(row, 1).to_pylist()[0]
    try:
        return f"got an array of shape {np.asarray(value, dtype=np.float64).shape}"
    except (ValueError, TypeError):  # ragged: numpy cannot read it as one array
        return f"got ragged lists (one of {length} elements in dimension {level + 1})"


def _is_list(arrow_type: Any) -> bool:
    """Whether ``arrow_type`` is a list, large list or fixed-size list."""
    import pyarrow as pa

    t = arrow_type
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t))


def _valid(array: Any) -> np.ndarray:
    """Whether each element of ``array`` is not null, as a numpy bool array."""
    if not array.null_count:
        return np.ones(len(array), dtype=bool)
    valid: np.ndarray = array.is_valid().to_numpy(zero_copy_only=False)
    return valid


def _row(index: int, ups: list[np.ndarray]) -> int:
    """The top-level row of element ``index`` of the level below the levels whose offsets
    ``ups`` holds (top first)."""
    for offsets in reversed(ups):
        index = int(np.searchsorted(offsets, index, side="right")) - 1
    return index


def _is_arrow(obj: Any) -> bool:
    return type(obj).__module__.split(".")[0] == "pyarrow"


def _buffers(column: Any, kind: str, nulls: bool = False) -> Any:
    """One column's argument of ``Writer._add_arrow_columns`` for a field of type ``kind`` (see
    ``writer_columns``), or None. ``nulls``: the column's nulls are told apart by a validity
    given beside it (the slots they leave in text and list buffers are skipped)."""
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if not isinstance(column, pa.Array):
        return None
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    if kind.endswith("?"):  # a nullable field: (validity or None, the values' buffers)
        valid = None
        if column.null_count:
            valid = column.is_valid().to_numpy(zero_copy_only=False).astype(np.uint8)
            if kind in ("int64?", "float64?", "bool?"):  # values in the slots of nulls
                try:  # the zero of the column's own type (a bool column for int64? too)
                    column = column.fill_null(False if pa.types.is_boolean(column.type) else 0)
                except (pa.ArrowException, TypeError):
                    return None  # no zero in its type (an all-null column): the row path
        part = _buffers(column, kind[:-1], nulls=True)
        return None if part is None else (valid, part)
    if column.null_count and not nulls:  # a field that is not nullable: the row path names the row
        return None
    if kind in ("str", "bytes"):
        return _text(column, kind)
    if kind == "int64":
        return _integers(column)
    if kind == "float64":
        return _floats(column)
    if kind.endswith("[]"):
        return _arrays(column, kind[:-2])
    if kind.endswith("]") and kind.partition("[")[2][:1].isdigit():  # a fixed shape: T[2,3]
        return _tensors(column, kind)
    if kind == "bool":
        return _bools(column)
    if kind in ("list[str]", "list[bytes]"):
        return _lists(column, kind[5:-1])
    return None


def _tensors(column: Any, kind: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(int64 offsets, values) of a fixed-shape array field ``kind`` (``float32[2,3]``) from a
    column of its type (``_tensor_type``): its elements flat, every row holding as many."""
    import pyarrow as pa

    from ._convert import as_array

    dtype, dims = kind[:-1].split("[")
    size = int(np.prod([int(d) for d in dims.split(",")]))
    if isinstance(column.type, pa.BaseExtensionType) and _tensor_type(column.type) != kind:
        return None
    if isinstance(column.type, pa.BaseExtensionType):
        column = column.storage
    flat = column
    # Every row's shape is checked already (_check_shape_rows): the flat elements are the rows'.
    while _is_list(flat.type):
        if pa.types.is_fixed_size_list(flat.type):  # the slots of null rows too
            width = flat.type.list_size
            flat = flat.values.slice(flat.offset * width, len(flat) * width)
        else:
            flat = flat.flatten()  # this slice's elements
    if flat.null_count or len(flat) != len(column) * size:
        return None  # the row path names the row
    try:
        values = as_array(flat.to_numpy(zero_copy_only=False), dtype, "", "")
    except FieldTypeError:
        return None
    return np.arange(len(column) + 1, dtype=np.int64) * size, values


def _bools(column: Any) -> np.ndarray | None:
    """A ``bool`` field's values (uint8 0 and 1) from a bool column, or an integer one holding
    only 0 and 1 (as ``add`` takes them)."""
    import pyarrow as pa

    t = column.type
    if pa.types.is_boolean(t):
        bools: np.ndarray = column.to_numpy(zero_copy_only=False)
        return bools.astype(np.uint8)
    if pa.types.is_integer(t):
        values: np.ndarray = column.to_numpy()
        if values.size and (values.min() < 0 or values.max() > 1):
            return None  # the row path names the row
        return values.astype(np.uint8)
    return None


def _lists(column: Any, item: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(int64 offsets counting items, int64 item offsets, uint8 data) of a list column of
    strings (for ``list[str]``) or binaries (``list[bytes]``); None for one holding a null
    item, which the row path refuses by name."""
    import pyarrow as pa

    t = column.type
    if pa.types.is_fixed_size_list(t):
        column = column.cast(pa.list_(t.value_type))
    elif not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        return None
    if len(column) == 0:
        return np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(0, np.uint8)
    offsets = column.offsets.to_numpy().astype(np.int64)  # this slice's, into .values
    items = column.values
    start, stop = int(offsets[0]), int(offsets[-1])
    if items.null_count and items.slice(start, stop - start).null_count:
        return None
    text = _text(items, item)
    if text is None:
        return None
    item_offsets, data = text
    return offsets, item_offsets, data


def _text(column: Any, kind: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(int64 offsets, uint8 data) of a string column for ``str``, a binary one for ``bytes``:
    a column of the other kind is refused by name on the row path, as ``add`` refuses it."""
    import pyarrow as pa

    t = column.type
    if kind == "str" and _is_view(t, "string"):
        column = column.cast(pa.large_string())
    elif kind == "bytes" and (_is_view(t, "binary") or pa.types.is_fixed_size_binary(t)):
        column = column.cast(pa.large_binary())
    t = column.type
    if kind == "str":
        small, large = pa.types.is_string(t), pa.types.is_large_string(t)
    else:
        small, large = pa.types.is_binary(t), pa.types.is_large_binary(t)
    if not (small or large):
        return None
    if len(column) == 0:
        return np.zeros(1, np.int64), np.zeros(0, np.uint8)
    _, offsets, data = column.buffers()
    width = np.int32 if small else np.int64
    offsets = np.frombuffer(offsets, dtype=width)[column.offset : column.offset + len(column) + 1]
    data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    return offsets.astype(np.int64), data


def _integers(column: Any) -> np.ndarray | None:
    """An ``int64`` field's values from an integer column of any width (a ``uint64`` one only
    when every value fits int64) or a bool column (0 and 1, as ``add`` takes a bool)."""
    import pyarrow as pa

    t = column.type
    if pa.types.is_boolean(t):
        bools: np.ndarray = column.to_numpy(zero_copy_only=False)
        return bools.astype(np.int64)
    if not pa.types.is_integer(t):
        return None  # floats included: an int64 field takes no float
    values: np.ndarray = column.to_numpy()
    if values.dtype == np.uint64 and values.size and values.max() > np.iinfo(np.int64).max:
        return None
    return values.astype(np.int64, copy=False)


def _floats(column: Any) -> np.ndarray | None:
    """A ``float64`` field's values from a float column of any width, a bool column, or an
    integer column whose every value float64 holds exactly (as ``add`` requires of an int)."""
    import pyarrow as pa

    t = column.type
    if pa.types.is_floating(t):
        values: np.ndarray = column.to_numpy()
        return values.astype(np.float64, copy=False)
    if pa.types.is_boolean(t):
        bools: np.ndarray = column.to_numpy(zero_copy_only=False)
        return bools.astype(np.float64)
    if not pa.types.is_integer(t):
        return None
    ints: np.ndarray = column.to_numpy()
    floats = ints.astype(np.float64)
    if ints.dtype.itemsize == 8 and ints.size:  # narrower integers are all exact in float64
        limit = 2.0**64 if ints.dtype.kind == "u" else 2.0**63
        fits = floats < limit  # the one float at or past the limit: a cast back would overflow
        if not fits.all() or not np.array_equal(floats.astype(ints.dtype), ints):
            return None
    return floats


def _arrays(column: Any, dtype: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(int64 offsets, values of ``dtype``) of a list, large list or fixed-size list column of
    numbers (or bools). Its elements become ``dtype`` by ``as_array``, all at once: each of its
    rules (integers in range, exact in a float field, no float into an integer field, no
    float32 overflow) holds of every element alone, so the whole is refused exactly when some
    row would be."""
    import pyarrow as pa

    from ._convert import as_array

    t = column.type
    if pa.types.is_fixed_size_list(t):
        size = t.list_size
        offsets = np.arange(column.offset, column.offset + len(column) + 1, dtype=np.int64) * size
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        offsets = column.offsets.to_numpy().astype(np.int64)  # this slice's, into .values
    else:
        return None
    element = t.value_type
    if not (pa.types.is_integer(element) or pa.types.is_floating(element) or pa.types.is_boolean(element)):
        return None
    start, stop = int(offsets[0]), int(offsets[-1])
    flat = column.values.slice(start, stop - start)
    if flat.null_count:
        return None
    try:
        values = as_array(flat.to_numpy(zero_copy_only=False), dtype, "", "")
    except FieldTypeError:
        return None
    return offsets - start, values
