"""RocksDB through ``rocksdict`` (raw mode), keyed by doc id."""

from __future__ import annotations

from pathlib import Path

from .base import Handle, Ops, Peer, chunks, decoder, encode, read_ids, write_ids


class RocksdictStore(Peer):
    """RocksDB through ``rocksdict`` in raw mode (``Options(raw_mode=True)``: bytes keys and
    values, no pickling), default options otherwise; written in ``WriteBatch``es of 10k, read
    through a read-only ``Rdict``; ``db[list_of_keys]`` is its multi-get. Positions go through the
    list of ids (``ids.txt``)."""

    name = "rocksdict"
    kept_in_memory = ("ids",)  # the insertion-order id list, for lookups by position
    requires = "rocksdict"
    kinds = ("text", "tokens")
    how = "raw mode, key = doc_id; `db[key]`, multi-get `db[[keys]]`; positions via the id list"

    def build(self, path, records, field="text"):
        from rocksdict import Options, Rdict, WriteBatch

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        db = Rdict(str(path / "db"), Options(raw_mode=True))
        ids: list[str] = []
        try:
            for chunk in chunks(records, 10_000):
                wb = WriteBatch(raw_mode=True)
                for r in chunk:
                    wb.put(r["doc_id"].encode("utf-8"), encode(r[field]))
                    ids.append(r["doc_id"])
                db.write(wb)
            db.flush()
        finally:
            db.close()
        write_ids(path, ids)
        return self.open(path)

    def open(self, path):
        from rocksdict import AccessType, Options, Rdict

        db = Rdict(str(Path(path) / "db"), Options(raw_mode=True), access_type=AccessType.read_only())
        return Handle(db=db, path=Path(path), ids=None)

    def ops(self, h, field):
        dec = decoder(field)
        db = h.db
        if h.ids is None:
            h.ids = read_ids(h.path)
        ids = h.ids

        def get_many(keys):
            return [dec(v) for v in db[[i.encode("utf-8") for i in keys]]]

        return Ops(
            get=lambda i: dec(db[i.encode("utf-8")]),
            at=lambda p: dec(db[ids[p].encode("utf-8")]),
            get_many=get_many,
            take=lambda ps: get_many([ids[p] for p in ps]),
        )

    def close(self, h):
        if h.db is not None:
            h.db.close()
            h.db = None
