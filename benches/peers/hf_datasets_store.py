"""Hugging Face ``datasets`` (Arrow, memory-mapped)."""

from __future__ import annotations

from pathlib import Path

from .base import Handle, PositionMapped


class HfDatasetsStore(PositionMapped):
    """Hugging Face ``datasets``: ``Dataset.from_generator`` then ``save_to_disk``; read with
    ``load_from_disk`` (memory-mapped Arrow), ``ds[row][field]`` and ``ds[rows][field]``; the
    token corpus with ``with_format("numpy")``."""

    name = "hf-datasets"
    requires = "datasets"
    how = (
        "`save_to_disk`/`load_from_disk` (mmapped Arrow); `ds[row][field]`, `ds[rows][field]`; "
        "doc_id -> row dict"
    )

    def build(self, path, records, field="text"):
        import tempfile

        import datasets
        from datasets import Dataset, Features, Sequence, Value

        datasets.disable_progress_bars()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        it = iter(records)
        value = Value("large_string") if field == "text" else Sequence(Value("int32"))
        features = Features({"doc_id": Value("string"), field: value})

        def gen():
            for r in it:
                yield {"doc_id": r["doc_id"], field: r[field]}

        with tempfile.TemporaryDirectory(dir=path) as cache:
            ds = Dataset.from_generator(gen, features=features, cache_dir=cache)
            ds.save_to_disk(str(path / "ds"))
            del ds
        return self.open(path)

    def open(self, path):
        import datasets

        datasets.disable_progress_bars()
        ds = datasets.load_from_disk(str(Path(path) / "ds"))
        if "tokens" in ds.column_names:
            ds = ds.with_format("numpy", dtype="int32")  # stored as int32; numpy's default is int64
        return Handle(ds=ds, rows=None)

    def _id_list(self, h):
        return h.ds.data.column("doc_id").to_pylist()

    def ops(self, h, field):
        ds, rows = h.ds, self._rows(h)

        def take(ps):
            return list(ds[ps][field])

        def at(p):
            return ds[p][field]

        return self._ops(rows, at, take)

    def close(self, h):
        h.ds = None
