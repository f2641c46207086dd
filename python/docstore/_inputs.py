"""Every input ``build`` and ``Writer.add_many`` take, as Arrow batches: Hugging Face datasets
(map-style and streams), pandas DataFrames, pyarrow tables and batches, their id columns, and the
field type of an Arrow column. The one place that decides what an input is."""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence
from typing import Any, cast

import numpy as np

from ._arrow import field_type, nullable, unsupported
from .errors import SchemaError

# Rows per Arrow batch read from a Hugging Face dataset or a pyarrow table.
ARROW_BATCH_ROWS = 8192


# The id column of a table whose rows are numbered (a name no field may have).
ROW_ID = "\x00row"


def hf_kind(obj: Any) -> str | None:
    """``"dataset"`` or ``"iterable"`` for a Hugging Face ``datasets.Dataset`` or
    ``IterableDataset`` (told by the module of its class, so that ``datasets`` is imported by
    nothing else), else None; a ``DatasetDict`` is refused with the way out."""
    for cls in type(obj).__mro__:
        module = cls.__module__ or ""
        if module != "datasets" and not module.startswith("datasets."):
            continue
        if cls.__name__ == "Dataset":
            return "dataset"
        if cls.__name__ == "IterableDataset":
            return "iterable"
        if cls.__name__ in ("DatasetDict", "IterableDatasetDict"):
            splits = ", ".join(map(str, obj))
            raise TypeError(f"a {cls.__name__} holds several splits ({splits}); pass one: dataset['train']")
    return None


def hf_batches(dataset: Any, wanted: Sequence[str] | None, batch_size: int) -> Iterator[Any]:
    """pyarrow tables of ``batch_size`` rows of a Hugging Face dataset, in its order: its Arrow
    data sliced for a ``Dataset``, batches of its stream for an ``IterableDataset``. Only the
    ``wanted`` columns (those present) are kept, when given."""
    import pyarrow as pa

    batch_size = operator.index(batch_size)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    names = dataset.column_names  # None for a stream of unknown features
    if wanted is not None and names is not None:
        keep = [n for n in names if n in set(wanted)]
        if keep != list(names):
            dataset = dataset.select_columns(keep)
    try:
        arrow = dataset.with_format("arrow") if _arrow_native(dataset) else None
    except ValueError:  # a datasets release without Arrow formatting for streams
        arrow = None
    if arrow is not None:
        for batch in arrow.iter(batch_size=batch_size):
            yield batch if wanted is None or names is not None else select(batch, wanted)
        return
    # A stream of Python rows (a generator, a .map()): datasets would turn each run of rows into
    # Arrow on its own types, and fail where a later run holds only None (its type "null", not
    # the first run's). Its rows are typed here instead: by its features where it has them, else
    # by the type a column had in the batches before.
    features = dataset.features
    seen: dict[str, Any] = {}
    for columns in dataset.with_format(None).iter(batch_size=batch_size):
        batch = pa.table(columns)
        if features is not None:
            from datasets.table import table_cast

            batch = table_cast(batch, features.arrow_schema)
        else:
            batch = _typed_as_before(batch, seen)
        yield batch if wanted is None else select(batch, wanted)


def _arrow_native(dataset: Any) -> bool:
    """Whether Hugging Face ``dataset`` holds Arrow data that its Arrow batches slice (a
    ``Dataset``, a stream of Arrow or Parquet files), rather than Python rows that datasets
    would convert run by run (``IterableDataset.from_generator``, a ``.map()``)."""
    examples = getattr(dataset, "_ex_iterable", None)
    return examples is None or getattr(examples, "iter_arrow", None) is not None


def _typed_as_before(batch: Any, seen: dict[str, Any]) -> Any:
    """``batch`` with its columns of nothing but None (type "null") given the type the same
    column had in a batch before; ``seen`` keeps those types."""
    import pyarrow as pa

    for i, field in enumerate(batch.schema):
        if not pa.types.is_null(field.type):
            seen.setdefault(field.name, field.type)
        elif field.name in seen:
            batch = batch.set_column(i, field.name, pa.nulls(batch.num_rows, seen[field.name]))
    return batch


def hf_schema(dataset: Any) -> Any:
    """The Arrow schema of a Hugging Face dataset's features, or None when unknown."""
    features = getattr(dataset, "features", None)
    return None if features is None else features.arrow_schema


def arrow_batches(
    source: Any, kind: str | None, wanted: Sequence[str] | None, batch_size: int
) -> Iterator[Any]:
    """Arrow batches of ``batch_size`` rows of a Hugging Face dataset (``kind``, as ``hf_kind``
    tells it) or a pyarrow table or batch, in order, with only the ``wanted`` columns (those
    present) when given."""
    if kind is not None:
        return hf_batches(source, wanted, batch_size)
    import pyarrow as pa

    table = source if isinstance(source, pa.Table) else pa.Table.from_batches([source])
    table = table if wanted is None else select(table, wanted)
    return iter(table.to_batches(max_chunksize=operator.index(batch_size)))


def select(table: Any, wanted: Sequence[str]) -> Any:
    keep = set(wanted)
    return table.select([n for n in table.schema.names if n in keep])


def with_column(table: Any, name: str, column: Any) -> Any:
    if name in table.schema.names:
        return table.set_column(table.schema.get_field_index(name), name, column)
    return table.append_column(name, column)


def row_numbers(start: int, count: int) -> Any:
    """Decimal strings of ``start .. start + count - 1`` as an Arrow string array."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.cast(pa.array(np.arange(start, start + count, dtype=np.int64)), pa.string())


def is_integer_column(column: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_integer(column.type))


def string_ids(column: Any, id_field: str) -> Any:
    """An id column as Arrow strings: strings as they are, integers as decimal strings."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = column.type
    if pa.types.is_dictionary(kind):
        column, kind = column.cast(kind.value_type), kind.value_type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return column
    if pa.types.is_integer(kind):
        return pc.cast(column, pa.string())
    raise SchemaError(f"the id column {id_field!r} is {kind}; ids must be strings or integers")


def arrow_field_type(name: str, arrow_type: Any, column: Any = None) -> str:
    """The field type for a column of ``arrow_type`` (``build`` from a table or dataset): the
    mapping of ``_arrow.field_type``, nullable when ``column`` (its rows in the first batch)
    holds a null."""
    kind = field_type(arrow_type)
    if kind is None:
        raise SchemaError(
            f"{unsupported(name, arrow_type)}; pass fields={{...}} naming the columns to keep (and "
            "their types), or drop it first"
        )
    return nullable(kind, column)


def is_arrow_table(obj: Any) -> bool:
    return type(obj).__module__.startswith("pyarrow") and hasattr(obj, "schema") and hasattr(obj, "column")


def all_rows(source: Any, kind: str | None) -> Any:
    """All of an Arrow source's data when it is at hand (a pyarrow table or batch, a map-style
    Hugging Face dataset), None for a stream: so that a column with a null anywhere is nullable
    from the start, not refused when its first null comes."""
    import pyarrow as pa

    if kind == "dataset":
        return getattr(getattr(source, "data", None), "table", None)
    if kind is None:
        return source if isinstance(source, pa.Table) else pa.Table.from_batches([source])
    return None


def from_pandas(obj: Any, id_field: str | None) -> Any:
    """A pandas DataFrame as the pyarrow Table that docstore reads, its missing values (NaN,
    None, ``pd.NA``, ``NaT``) as Arrow nulls, which a nullable field (``str?``) keeps as None;
    its index is the id column when it is named ``id_field``. Anything else as it is."""
    if not (type(obj).__module__.startswith("pandas") and type(obj).__name__ == "DataFrame"):
        return obj
    try:
        import pyarrow as pa
    except ImportError:
        raise SchemaError(
            "a pandas DataFrame is read through pyarrow: pip install 'docstore[arrow]'"
        ) from None
    index_is_id = id_field is not None and obj.index.name == id_field and id_field not in obj.columns
    return pa.Table.from_pandas(obj, preserve_index=index_is_id)


def as_list(column: Any) -> list[Any]:
    if isinstance(column, list):
        return column
    if isinstance(column, np.ndarray):
        return list(column) if column.ndim > 1 or column.dtype == object else column.tolist()
    if type(column).__module__.startswith("pyarrow"):
        import pyarrow as pa

        inner = getattr(column.type, "value_type", None)  # an extension type's may be a str (HF's)
        # Lists of lists (a fixed shape's rows) as Python lists: numpy makes each row an array
        # of arrays, which reads as a 1-D array of objects.
        nested = isinstance(inner, pa.DataType) and (
            pa.types.is_fixed_size_list(inner) or pa.types.is_list(inner) or pa.types.is_large_list(inner)
        )
        if (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)) and not nested:
            import pyarrow.compute as pc

            # One numpy array per row instead of lists of Python ints; but numpy turns null
            # elements into NaN, so a column holding any goes as Python lists, and its rows with
            # a None are refused by name like any other bad value.
            if pc.list_flatten(column).null_count == 0:
                return list(column.to_numpy(zero_copy_only=False))
        return cast("list[Any]", column.to_pylist())
    return list(column)
