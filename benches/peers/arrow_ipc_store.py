"""A pyarrow IPC file read through ``pa.memory_map`` (uncompressed or lz4)."""

from __future__ import annotations

from pathlib import Path

from .arrow_rows import arrow_batches, arrow_schema, list_values, scalar_value
from .base import Handle, PositionMapped


class ArrowIpcStore(PositionMapped):
    """An Arrow IPC file read through ``pa.memory_map`` + ``pa.ipc.open_file``. Uncompressed: one
    record batch, ``read_all()`` is zero-copy over the mapping, lookups are ``column[row]`` and
    ``column.take(rows)``. With ``compression="lz4"`` (LZ4 frame per buffer) a record batch must
    be decompressed to read one row of it: lookups read the batches they need with
    ``get_batch(b)`` (batches of ``ROWS`` rows; a batch is decompressed once per call)."""

    requires = "pyarrow"
    ROWS = 1024

    def __init__(self, compression: str | None = None) -> None:
        self.compression = compression
        self.name = "arrow-ipc" if compression is None else f"arrow-ipc:{compression}"
        self.how = (
            "IPC file, `pa.memory_map` + `read_all()` (zero-copy); `col[row]`, `col.take(rows)`; "
            "doc_id -> row dict"
            if compression is None
            else f"IPC file, {compression} buffers, {self.ROWS}-row batches; `get_batch(b)` per lookup; "
            "doc_id -> row dict"
        )

    def build(self, path, records, field="text"):
        import pyarrow as pa

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        opts = pa.ipc.IpcWriteOptions(compression=self.compression)
        # uncompressed: one record batch, so that read_all() is a single zero-copy chunk (take on
        # a column of many chunks concatenates them first: a copy of the column per call)
        rows = self.ROWS if self.compression else 1 << 62
        with pa.OSFile(str(path / "data.arrow"), "wb") as sink:
            with pa.ipc.new_file(sink, arrow_schema(field), options=opts) as w:
                for b in arrow_batches(records, field, rows):
                    w.write_batch(b)
        return self.open(path)

    def open(self, path):
        import pyarrow as pa

        source = pa.memory_map(str(Path(path) / "data.arrow"), "r")
        reader = pa.ipc.open_file(source)
        h = Handle(source=source, reader=reader, rows=None, table=None)
        if self.compression is None:
            h.table = reader.read_all()
        return h

    def _id_list(self, h):
        if h.table is not None:
            return h.table.column("doc_id").to_pylist()
        ids: list[str] = []
        for b in range(h.reader.num_record_batches):
            ids += h.reader.get_batch(b).column(0).to_pylist()
        return ids

    def ops(self, h, field):
        rows = self._rows(h)
        if h.table is not None:
            col = h.table.column(field)

            def at(p):
                return scalar_value(col, p)

            def take(ps):
                return list_values(col.take(ps))

        else:
            reader, n = h.reader, self.ROWS

            def at(p):
                return scalar_value(reader.get_batch(p // n).column(1), p % n)

            def take(ps):
                import pyarrow as pa

                out: list = [None] * len(ps)
                by_batch: dict[int, list[int]] = {}
                for k, p in enumerate(ps):
                    by_batch.setdefault(p // n, []).append(k)
                for b, ks in by_batch.items():
                    vals = list_values(reader.get_batch(b).column(1).take(pa.array([ps[k] % n for k in ks])))
                    for k, v in zip(ks, vals):
                        out[k] = v
                return out

        return self._ops(rows, at, take)

    def close(self, h):
        h.table = h.reader = None
        if h.source is not None:
            h.source.close()
            h.source = None
