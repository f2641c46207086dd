"""The in-memory Python dict: the loader docstore replaces."""

from __future__ import annotations

from .base import Ops, Peer


class _PosDict(dict):
    """A dict that also keeps its values in a list, for lookups by position."""

    by_pos: list


class DictStore(Peer):
    """Everything in a Python dict: the in-memory ceiling (nothing on disk, nothing to open)."""

    name = "dict"
    in_memory = True
    kinds = ("text", "tokens")
    how = "`d[doc_id]`; by position a list of the same values"

    def build(self, path, records, field="text"):
        d = _PosDict((r["doc_id"], r[field]) for r in records)
        d.by_pos = list(d.values())
        return d

    def ops(self, obj, field):
        by_pos = obj.by_pos
        return Ops(
            get=obj.__getitem__,
            at=by_pos.__getitem__,
            get_many=lambda ids: {i: obj[i] for i in ids},
            take=lambda ps: [by_pos[p] for p in ps],
        )

    def open(self, path):
        raise NotImplementedError("DictStore lives in memory only")

    def get(self, obj, doc_id):
        return obj[doc_id]

    def get_many(self, obj, doc_ids):
        return {i: obj[i] for i in doc_ids}

    def size_on_disk(self, path):
        return None
