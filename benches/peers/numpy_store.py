"""numpy: token arrays flattened into one ``.npy`` with an offsets array, read memory-mapped."""

from __future__ import annotations

import os
from pathlib import Path

from .base import Handle, Ops, PositionMapped, read_ids, write_ids


class NumpyStore(PositionMapped):
    """numpy: all tokens in one flat ``tokens.npy`` (int32) plus ``offsets.npy`` (int64, n+1),
    both ``np.load(mmap_mode="r")`` -- the layout of fixed-size token windows generalised to
    ragged documents; a lookup copies ``tokens[offsets[i]:offsets[i+1]]`` out of the mapping."""

    name = "numpy"
    requires = "numpy"
    kinds = ("tokens",)
    how = "flat `tokens.npy` + `offsets.npy`, `np.load(mmap_mode='r')`; slice copy; doc_id -> row dict"

    def build(self, path, records, field="text"):
        import numpy as np

        if field != "tokens":
            raise ValueError("the numpy layout is for token arrays")
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        ids: list[str] = []
        lens: list[int] = []
        with open(path / "tokens.raw", "wb") as f:
            for r in records:
                a = np.ascontiguousarray(r[field], dtype=np.int32)
                f.write(a.tobytes())
                ids.append(r["doc_id"])
                lens.append(len(a))
        offsets = np.zeros(len(lens) + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        # wrap the raw bytes as a .npy: header, then the data (one streaming copy)
        n = int(offsets[-1])
        with open(path / "tokens.npy", "wb") as out, open(path / "tokens.raw", "rb") as raw:
            np.lib.format.write_array_header_1_0(out, {"descr": "<i4", "fortran_order": False, "shape": (n,)})
            while block := raw.read(1 << 24):
                out.write(block)
        os.remove(path / "tokens.raw")
        np.save(path / "offsets.npy", offsets)
        write_ids(path, ids)
        return self.open(path)

    def open(self, path):
        import numpy as np

        path = Path(path)
        return Handle(
            tokens=np.load(path / "tokens.npy", mmap_mode="r"),
            offsets=np.load(path / "offsets.npy", mmap_mode="r"),
            path=path,
            rows=None,
        )

    def _id_list(self, h):
        return read_ids(h.path)

    def ops(self, h, field):
        import numpy as np

        tokens, offsets, rows = h.tokens, h.offsets, self._rows(h)

        def at(p):
            return np.array(tokens[offsets[p] : offsets[p + 1]])

        return Ops(
            get=lambda i: at(rows[i]),
            at=at,
            get_many=lambda ids: [at(rows[i]) for i in ids],
            take=lambda ps: [at(p) for p in ps],
        )

    def close(self, h):
        h.tokens = h.offsets = None
