"""The "indexed" loader: a TSV and a dict of byte offsets (seek + readline)."""

from __future__ import annotations

import os
from pathlib import Path

from .base import Ops, Peer


class IndexedStore(Peer):
    """The "indexed" loader: a TSV file (``doc_id\\ttext`` per line) plus a dict of
    doc_id -> byte offset built by scanning it once; lookup = seek + readline + split."""

    name = "indexed-tsv"
    thread_safe = False
    thread_note = "one file object per thread (shared offsets dict): seek+readline share a position"
    how = "TSV + dict doc_id -> byte offset built by a scan on open; seek + readline"
    TSV = "docs.tsv"

    def build(self, path, records, field="text"):
        from ..corpora import tsv_clean

        if field != "text":
            raise ValueError("the TSV loader stores text only")
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        with open(path / self.TSV, "w", encoding="utf-8", newline="\n") as f:
            for r in records:
                f.write(f"{r['doc_id']}\t{tsv_clean(r['text'])}\n")
        return self.open(path)

    def ops(self, obj, field):
        f, offsets = obj
        by_pos = list(offsets.values())  # the dict keeps file order = insertion order

        def at(p):
            f.seek(by_pos[p])
            return f.readline().rstrip(b"\n").split(b"\t", 1)[1].decode("utf-8")

        return Ops(
            get=lambda i: self.get(obj, i),
            at=at,
            get_many=lambda ids: self.get_many(obj, ids),
            take=lambda ps: [at(p) for p in ps],
        )

    def reopen(self, obj, path, between=None):
        obj[0].close()
        if between is not None:
            between()
        return open(Path(path) / self.TSV, "rb"), obj[1]  # the offsets dict stays in memory

    @classmethod
    def index_tsv(cls, tsv: str | os.PathLike) -> dict[str, int]:
        offsets: dict[str, int] = {}
        pos = 0
        with open(tsv, "rb") as f:
            for line in f:
                offsets[line[: line.index(b"\t")].decode("utf-8")] = pos
                pos += len(line)
        return offsets

    def open(self, path):
        tsv = Path(path) / self.TSV
        offsets = self.index_tsv(tsv)
        return open(tsv, "rb"), offsets

    def get(self, obj, doc_id):
        f, offsets = obj
        f.seek(offsets[doc_id])
        return f.readline().rstrip(b"\n").split(b"\t", 1)[1].decode("utf-8")

    def get_many(self, obj, doc_ids):
        f, offsets = obj
        out = {}
        for i in doc_ids:
            f.seek(offsets[i])
            out[i] = f.readline().rstrip(b"\n").split(b"\t", 1)[1].decode("utf-8")
        return out

    def close(self, obj):
        obj[0].close()

    def for_thread(self, obj, path):
        return open(Path(path) / self.TSV, "rb"), obj[1]
