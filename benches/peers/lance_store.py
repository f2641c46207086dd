"""Lance (``pylance``): ``take`` by row."""

from __future__ import annotations

from pathlib import Path

from .arrow_rows import arrow_batches, arrow_schema, list_values, scalar_value
from .base import Handle, PositionMapped


class LanceStore(PositionMapped):
    """Lance (``pylance``): ``lance.write_dataset`` from a stream of record batches (defaults),
    ``lance.dataset(path).take(rows, columns=[field])``."""

    name = "lance"
    requires = "lance"
    dist = "pylance"
    how = "`lance.write_dataset`; `ds.take(rows, columns=[field])`; doc_id -> row dict"

    def build(self, path, records, field="text"):
        import lance
        import pyarrow as pa

        schema = arrow_schema(field)
        reader = pa.RecordBatchReader.from_batches(schema, arrow_batches(records, field, 8192))
        lance.write_dataset(reader, str(Path(path) / "ds.lance"))
        return self.open(path)

    def open(self, path):
        import lance

        return Handle(ds=lance.dataset(str(Path(path) / "ds.lance")), rows=None)

    def _id_list(self, h):
        return h.ds.to_table(columns=["doc_id"]).column(0).to_pylist()

    def ops(self, h, field):
        ds, rows = h.ds, self._rows(h)
        cols = [field]

        def take(ps):
            return list_values(ds.take(ps, columns=cols).column(0))

        def at(p):
            return scalar_value(ds.take([p], columns=cols).column(0), 0)

        return self._ops(rows, at, take)

    def close(self, h):
        h.ds = None
