"""Rows as Arrow record batches, and values back out of Arrow columns (Lance, HF datasets, Arrow IPC)."""

from __future__ import annotations

from collections.abc import Iterable

from .base import Record, chunks


def arrow_schema(field: str):
    import pyarrow as pa

    value = pa.large_string() if field == "text" else pa.list_(pa.int32())
    return pa.schema([("doc_id", pa.string()), (field, value)])


def arrow_batches(records: Iterable[Record], field: str, rows: int):
    """Record batches of ``rows`` rows (``doc_id``, ``field``) from the records."""
    import numpy as np
    import pyarrow as pa

    schema = arrow_schema(field)
    for chunk in chunks(records, rows):
        ids = pa.array([r["doc_id"] for r in chunk], pa.string())
        if field == "text":
            col = pa.array([r[field] for r in chunk], pa.large_string())
        else:
            vals = [r[field] for r in chunk]
            off = np.zeros(len(vals) + 1, dtype=np.int32)
            np.cumsum([len(v) for v in vals], out=off[1:])
            col = pa.ListArray.from_arrays(pa.array(off), pa.array(np.concatenate(vals), pa.int32()))
        yield pa.record_batch([ids, col], schema=schema)


def list_values(col) -> list:
    """An Arrow column of text or int32 lists as Python values (str / int32 numpy arrays)."""
    import numpy as np
    import pyarrow as pa

    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
        values = col.values.to_numpy()
        off = col.offsets.to_numpy()
        return [np.array(values[off[j] : off[j + 1]]) for j in range(len(col))]
    return col.to_pylist()


def scalar_value(col, j: int):
    import numpy as np
    import pyarrow as pa

    s = col[j]
    if isinstance(s, (pa.ListScalar, pa.LargeListScalar)):
        return np.array(s.values.to_numpy(zero_copy_only=False), dtype=np.int32)
    return s.as_py()
