"""LMDB (``lmdb``), keyed by doc id."""

from __future__ import annotations

from pathlib import Path

from .base import Handle, Ops, Peer, batch_values, chunks, decoder, encode, read_ids, write_ids


class LmdbStore(Peer):
    """LMDB (``lmdb``): key = doc_id (UTF-8), value = the raw bytes (UTF-8 text or the int32
    array's bytes), one write transaction per 10k docs; read-only env (``lock=False``,
    ``readahead=False`` as its docs advise for random reads), one read transaction per thread,
    ``Cursor.getmulti`` for batches. LMDB keys are sorted, so positions go through the list of
    ids (``ids.txt``, loaded on open)."""

    name = "lmdb"
    kept_in_memory = ("ids",)  # the insertion-order id list, for lookups by position
    requires = "lmdb"
    kinds = ("text", "tokens")
    thread_safe = False
    thread_note = "one read transaction per thread (transactions are not thread-safe)"
    how = "key = doc_id; `txn.get`, `cursor.getmulti`; positions via the id list (ids.txt)"
    MAP_SIZE = 1 << 40  # address space only: the file grows as written

    def build(self, path, records, field="text"):
        import lmdb

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        env = lmdb.open(str(path), map_size=self.MAP_SIZE, subdir=True)
        ids: list[str] = []
        try:
            for chunk in chunks(records, 10_000):
                with env.begin(write=True) as txn:
                    for r in chunk:
                        txn.put(r["doc_id"].encode("utf-8"), encode(r[field]))
                        ids.append(r["doc_id"])
            env.sync(True)
        finally:
            env.close()
        write_ids(path, ids)
        return self.open(path)

    def open(self, path):
        import lmdb

        env = lmdb.open(str(path), readonly=True, lock=False, readahead=False, subdir=True)
        return Handle(env=env, txn=env.begin(buffers=False), path=Path(path), ids=None)

    def _ids(self, h):
        if h.ids is None:
            h.ids = read_ids(h.path)
        return h.ids

    def ops(self, h, field):
        dec = decoder(field)
        txn = h.txn
        ids = self._ids(h)

        def get(i):
            v = txn.get(i.encode("utf-8"))
            if v is None:
                raise KeyError(i)
            return dec(v)

        def get_many(keys):
            return {k.decode("utf-8"): dec(v) for k, v in txn.cursor().getmulti([i.encode() for i in keys])}

        return Ops(
            get=get,
            at=lambda p: get(ids[p]),
            get_many=get_many,
            take=lambda ps: batch_values(get_many([ids[p] for p in ps]), [ids[p] for p in ps]),
        )

    def close(self, h):
        if h.env is not None:
            if h.txn is not None:
                h.txn.abort()
            if getattr(h, "owns_env", True):
                h.env.close()
            h.env = h.txn = None

    def for_thread(self, h, path):
        return Handle(env=h.env, txn=h.env.begin(buffers=False), path=h.path, ids=h.ids, owns_env=False)
