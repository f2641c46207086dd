"""The peers of benches/remote.py: the same documents in litdata, MosaicML streaming and Lance.

Each peer writes the corpus with its own writer and recommended settings, into a directory that
the range server serves as an S3 bucket (rust/core/benches/range_server.rs: path-style GET with
ranges, HEAD, ListObjectsV2), and reads it back over S3 as its documentation says to: random
access by index (``dataset[i]``, Lance's ``take``) and a torch DataLoader (4 workers, batches of
64, random order). docstore is measured the same way through ``s3://`` so that every system is
counted by the server alike (requests, bytes, peak in flight: ``GET /__stats``).

Documents are ``{"id": "%08d" % i, "text": ..., "label": i % 7}`` in the order of
``docs(n)``: index i of every peer is docstore's id ``f"{i:08d}"`` (checked).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from collections.abc import Callable, Iterator
from typing import Any

BUCKET = "bench"
KEY = "bench"  # the server checks no signature; the clients want credentials to sign with
PEERS = ("docstore", "docstore-prefetch", "litdata", "mosaic", "lance")
BATCH, WORKERS = 64, 4


def docs(n: int) -> Iterator[tuple[str, str, int]]:
    """The corpus: ``n`` documents (id, text of 20-80 words, label), the same for every system
    (benches/remote.py builds docstore's store from it)."""
    rng = random.Random(0)
    words = [f"w{i}" for i in range(5000)]
    for i in range(n):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(20, 80)))
        yield f"{i:08d}", text, i % 7


def set_endpoint(endpoint: str) -> None:
    """Point every client of this process (and its DataLoader workers) at ``endpoint``."""
    os.environ.update(
        AWS_ACCESS_KEY_ID=KEY,
        AWS_SECRET_ACCESS_KEY=KEY,
        AWS_REGION="us-east-1",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL=endpoint,  # boto3, docstore (object_store)
        AWS_ALLOW_HTTP="true",
        S3_ENDPOINT_URL=endpoint,  # MosaicML streaming
    )


def dir_bytes(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def time_loader(make: Callable[[], Iterator], batches: int) -> dict:
    """Iterate ``batches`` batches: time to the first, docs/s over all and over the rest."""
    t = time.perf_counter()
    it = make()
    n = first = 0
    first_s = 0.0
    for i, batch in enumerate(it):
        n += len(batch["text"] if isinstance(batch, dict) else batch)
        if i == 0:
            first_s, first = time.perf_counter() - t, n
        if i + 1 == batches:
            break
    total = time.perf_counter() - t
    del it
    return {
        "docs": n,
        "first_batch_s": first_s,
        "docs_per_s": n / total,
        "after_first_docs_per_s": (n - first) / max(total - first_s, 1e-9),
    }


def _collate(batch: list) -> list:
    return batch


# -- docstore ------------------------------------------------------------------------------------


def _docstore_options() -> dict:
    """``benches.remote --docstore-option KEY=VALUE``: storage options of docstore's opens (its
    loaders' workers inherit them through the environment)."""
    return json.loads(os.environ.get("BENCH_DOCSTORE_OPTIONS", "{}"))


class Docstore:
    name = "docstore"

    def __init__(self, root: str, n: int, local: str) -> None:
        self.local, self.n = local, n
        self.url = f"s3://{BUCKET}/{os.path.basename(local)}"
        self.stored = dir_bytes(local)

    def open(self, cache: str) -> Any:
        import docstore

        return docstore.open(self.url, cache_dir=cache, storage_options=_docstore_options())

    def take(self, handle: Any, idx: list[int]) -> list[str]:
        ids = [f"{i:08d}" for i in idx]
        found = handle.get_many(ids)  # {id: {"text": ..., "label": ...}}
        return [found[i]["text"] for i in ids]

    def loader(self, cache: str, batches: int) -> dict:
        from docstore.torch import DocDataset

        ds = DocDataset(self.open(cache), field="text")
        return time_loader(lambda: _shuffled_batches(ds, "fork"), batches)


class DocstorePrefetch(Docstore):
    """docstore with ``docstore.torch.PrefetchSampler`` around the same batches: the next 32
    batches' documents fetched into the node cache while the current ones are read."""

    name = "docstore-prefetch"

    def loader(self, cache: str, batches: int) -> dict:
        from docstore.torch import DocDataset

        ds = DocDataset(self.open(cache), field="text")
        return time_loader(lambda: _shuffled_batches(ds, "fork", prefetch=32), batches)


# -- litdata -------------------------------------------------------------------------------------


def _litdata_docs(n: int) -> Iterator[dict]:
    for i, text, label in docs(n):
        yield {"id": i, "text": text, "label": label}


def _litdata_allow_http(worker: int = 0) -> None:
    """litdata fetches chunks with obstore, whose client options it sets itself: without
    allow_http, obstore refuses this server's http:// endpoint ("builder error"), where an S3
    endpoint would be https. The one option added, for the local server; also the DataLoader's
    ``worker_init_fn``, for workers that are spawned."""
    from litdata.streaming import downloader

    downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = "true"


class Litdata:
    """litdata ``optimize`` (chunk_bytes="64MB", the size its docs recommend), ``StreamingDataset``."""

    name = "litdata"

    def __init__(self, root: str, n: int, local: str) -> None:
        self.n = n
        self.path = os.path.join(root, BUCKET, f"litdata-{n}")
        self.url = f"s3://{BUCKET}/litdata-{n}"
        if not os.path.exists(os.path.join(self.path, "index.json")):
            from litdata import optimize

            shutil.rmtree(self.path, ignore_errors=True)
            # One input that yields every document in order: index i is document i.
            optimize(fn=_litdata_docs, inputs=[n], output_dir=self.path, chunk_bytes="64MB", num_workers=1)
        self.stored = dir_bytes(self.path)

    def _dataset(self, cache: str, **kwargs: Any) -> Any:
        from litdata import StreamingDataset

        _litdata_allow_http()

        return StreamingDataset(
            self.url,
            cache_dir=cache,
            storage_options={"endpoint_url": os.environ["AWS_ENDPOINT_URL"]},
            **kwargs,
        )

    def open(self, cache: str) -> Any:
        from litdata.utilities.env import _WorkerEnv

        ds = self._dataset(cache)
        # ``ds[i]`` would make this cache and read the item alone (``on_demand_bytes``: the
        # chunk's offsets, then the item, 2 range requests); litdata 0.2.76 writes these records
        # with an Arrow footer (its default for dicts of str/int) whose offsets are all equal,
        # and that path returns 0 bytes. Off, ``ds[i]`` downloads the chunk, as iterating does.
        ds.worker_env = _WorkerEnv.detect()
        ds.cache = ds._create_cache(worker_env=ds.worker_env)
        ds.shuffler = ds._create_shuffler(ds.cache)
        ds.on_demand_bytes = False
        len(ds)
        return ds

    def take(self, ds: Any, idx: list[int]) -> list[str]:
        return _texts_by_index(ds, idx)

    def loader(self, cache: str, batches: int) -> dict:
        from litdata import StreamingDataLoader

        ds = self._dataset(cache, shuffle=True)
        return time_loader(
            lambda: iter(
                StreamingDataLoader(
                    ds, batch_size=BATCH, num_workers=WORKERS, worker_init_fn=_litdata_allow_http
                )
            ),
            batches,
        )


# -- MosaicML streaming --------------------------------------------------------------------------


class Mosaic:
    """``MDSWriter`` (its defaults: 64 MiB shards, no compression), ``StreamingDataset``."""

    name = "mosaic"

    def __init__(self, root: str, n: int, local: str) -> None:
        self.n = n
        self.path = os.path.join(root, BUCKET, f"mds-{n}")
        self.url = f"s3://{BUCKET}/mds-{n}"
        if not os.path.exists(os.path.join(self.path, "index.json")):
            from streaming import MDSWriter

            shutil.rmtree(self.path, ignore_errors=True)
            columns = {"id": "str", "text": "str", "label": "int64"}
            with MDSWriter(out=self.path, columns=columns) as writer:
                for i, text, label in docs(n):
                    writer.write({"id": i, "text": text, "label": label})
        self.stored = dir_bytes(self.path)

    def _dataset(self, cache: str, **kwargs: Any) -> Any:
        from streaming import StreamingDataset
        from streaming.base.util import clean_stale_shared_memory

        clean_stale_shared_memory()
        return StreamingDataset(remote=self.url, local=cache, batch_size=BATCH, **kwargs)

    def open(self, cache: str) -> Any:
        return self._dataset(cache)

    def take(self, ds: Any, idx: list[int]) -> list[str]:
        return _texts_by_index(ds, idx)

    def loader(self, cache: str, batches: int) -> dict:
        import torch

        ds = self._dataset(cache, shuffle=True)
        return time_loader(
            lambda: iter(
                torch.utils.data.DataLoader(ds, batch_size=BATCH, num_workers=WORKERS, collate_fn=_collate)
            ),
            batches,
        )


# -- Lance ---------------------------------------------------------------------------------------


def _lance_options() -> dict:
    return {
        "aws_endpoint": os.environ["AWS_ENDPOINT_URL"],
        "allow_http": "true",
        "aws_access_key_id": KEY,
        "aws_secret_access_key": KEY,
        "aws_region": "us-east-1",
    }


class LanceDocs:
    """A map-style dataset over a Lance dataset: each batch of indices is one ``take``. Lance is
    not fork-safe (it says so at every fork), so its DataLoader workers are spawned and each
    opens the dataset on its first batch."""

    def __init__(self, url: str, n: int) -> None:
        self.url, self.n, self.ds = url, n, None

    def __len__(self) -> int:
        return self.n

    def __getitems__(self, idx: list[int]) -> list[str]:
        if self.ds is None:
            import lance

            self.ds = lance.dataset(self.url, storage_options=_lance_options())
        return self.ds.take(idx, columns=["text"]).column("text").to_pylist()

    def __getitem__(self, i: int) -> str:
        return self.__getitems__([i])[0]


class Lance:
    """``lance.write_dataset`` (defaults), ``take`` of the indices."""

    name = "lance"

    def __init__(self, root: str, n: int, local: str) -> None:
        self.n = n
        self.path = os.path.join(root, BUCKET, f"lance-{n}.lance")
        self.url = f"s3://{BUCKET}/lance-{n}.lance"
        if not os.path.exists(self.path):
            import lance
            import pyarrow as pa

            def batches() -> Iterator[pa.RecordBatch]:
                rows: list = []
                for row in docs(n):
                    rows.append(row)
                    if len(rows) == 65536:
                        yield pa.RecordBatch.from_arrays([pa.array(c) for c in zip(*rows)], schema=schema)
                        rows = []
                if rows:
                    yield pa.RecordBatch.from_arrays([pa.array(c) for c in zip(*rows)], schema=schema)

            schema = pa.schema([("id", pa.string()), ("text", pa.string()), ("label", pa.int64())])
            lance.write_dataset(pa.RecordBatchReader.from_batches(schema, batches()), self.path)
        self.stored = dir_bytes(self.path)

    def open(self, cache: str) -> Any:
        import lance

        return lance.dataset(self.url, storage_options=_lance_options())

    def take(self, ds: Any, idx: list[int]) -> list[str]:
        table = ds.take(idx, columns=["id", "text"])
        ids = table.column("id").to_pylist()
        assert ids == [f"{i:08d}" for i in idx], "take returned other rows or another order"
        return table.column("text").to_pylist()

    def loader(self, cache: str, batches: int) -> dict:

        ds = LanceDocs(self.url, self.n)

        return time_loader(lambda: _shuffled_batches(ds, "spawn"), batches)


def _shuffled_batches(ds: Any, context: str, prefetch: int = 0) -> Iterator:
    """Batches of ``ds`` in a seeded random order, from a DataLoader of ``WORKERS`` workers;
    with ``prefetch``, through a ``PrefetchSampler`` that loads that many batches ahead."""
    import torch

    sampler = torch.utils.data.RandomSampler(ds, generator=torch.Generator().manual_seed(0))
    batches: Any = torch.utils.data.BatchSampler(sampler, BATCH, drop_last=False)
    if prefetch:
        from docstore.torch import PrefetchSampler

        batches = PrefetchSampler(batches, ds, batches=prefetch)
    loader = torch.utils.data.DataLoader(
        ds,
        batch_sampler=batches,
        num_workers=WORKERS,
        collate_fn=_collate,
        multiprocessing_context=context,
    )
    return iter(loader)


def _texts_by_index(ds: Any, idx: list[int]) -> list[str]:
    """The texts of rows ``idx`` of a peer's dataset, one ``ds[i]`` each, checked by id."""
    out = []
    for i in idx:
        d = ds[i]
        assert d["id"] == f"{i:08d}", (d["id"], i)
        out.append(d["text"])
    return out


SYSTEMS = {
    "docstore": Docstore,
    "docstore-prefetch": DocstorePrefetch,
    "litdata": Litdata,
    "mosaic": Mosaic,
    "lance": Lance,
}
