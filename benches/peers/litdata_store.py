"""litdata: ``optimize`` into a local directory, read with ``StreamingDataset``."""

from __future__ import annotations

import os
from pathlib import Path

from .base import Handle, Ops, PositionMapped, read_ids, write_ids


def _litdata_items(span):
    """litdata ``optimize`` fn: yields the records of one input span (fork start method, so
    the worker processes inherit ``_LITDATA_RECORDS``)."""
    lo, hi = span
    field = _LITDATA_FIELD[0]
    for r in _LITDATA_RECORDS[lo:hi]:
        yield {"doc_id": r["doc_id"], field: r[field]}


_LITDATA_RECORDS: list = []


_LITDATA_FIELD: list = ["text"]


class LitdataStore(PositionMapped):
    """litdata: ``optimize(fn, inputs, output_dir=<local dir>, chunk_bytes="64MB")`` (2 workers,
    ``keep_data_ordered=True`` so rows keep insertion order), read with
    ``StreamingDataset(<local dir>, batch_decode=0)[row][field]`` (per-item decoding: its default
    decodes a window of neighbours, for streaming); no batch read, so batches loop. The ids are kept
    in ``ids.txt`` for the doc_id -> row map (reading them back through the dataset would decode
    every item)."""

    name = "litdata"
    requires = "litdata"
    how = (
        "`optimize(...)` to a local dir; `StreamingDataset(dir, batch_decode=0)[row][field]`; "
        "doc_id -> row dict"
    )

    def build(self, path, records, field="text"):
        import litdata

        global _LITDATA_RECORDS
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        recs = records if isinstance(records, list) else list(records)
        _LITDATA_RECORDS = recs
        _LITDATA_FIELD[0] = field
        span = max(1, len(recs) // 64)
        try:
            litdata.optimize(
                fn=_litdata_items,
                inputs=[(lo, min(lo + span, len(recs))) for lo in range(0, len(recs), span)],
                output_dir=str((path / "ds").resolve()),
                chunk_bytes="64MB",
                num_workers=min(2, os.cpu_count() or 1),
                keep_data_ordered=True,
                start_method="fork",
                verbose=False,
            )
        finally:
            _LITDATA_RECORDS = []
        write_ids(path, [r["doc_id"] for r in recs])
        return self.open(path)

    def open(self, path):
        import litdata

        # batch_decode=0: decode the item asked for; the default ("auto") deserialises a window of
        # ~256 neighbours per access, right for streaming, ~30x slower for random access
        ds = litdata.StreamingDataset(str((Path(path) / "ds").resolve()), batch_decode=0)
        return Handle(ds=ds, path=Path(path), rows=None)

    def _id_list(self, h):
        return read_ids(h.path)

    def ops(self, h, field):
        ds, rows = h.ds, self._rows(h)

        def at(p):
            return ds[p][field]

        return Ops(
            get=lambda i: ds[rows[i]][field],
            at=at,
            get_many=lambda ids: [ds[rows[i]][field] for i in ids],
            take=lambda ps: [ds[p][field] for p in ps],
        )

    def close(self, h):
        h.ds = None

    def for_thread(self, h, path):
        return Handle(ds=self.open(path).ds, path=h.path, rows=h.rows)

    thread_safe = False
    thread_note = "one StreamingDataset per thread"
