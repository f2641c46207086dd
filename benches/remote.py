"""Remote stores against the same store on local disk (docs/remote.md, "Measured").

    python benches/remote.py --docs 1000000 --latency 0 5 25 --out benches/results/remote.json

A store of ``--docs`` short documents is served by a plain HTTP server with range support on
127.0.0.1 (tests/remote_servers.py) that waits ``latency`` before each response, as a far server
would. For each latency: the server's own floor (one request; 1024 requests at 256 in flight
from a Python client), then docstore's open, a single lookup, and ``get_many(1024)`` of random
ids with an empty cache, with the index cached, and with everything cached, beside the local
file; and a DataLoader (4 workers, batch 64) over the remote store, cold and warm, beside the
local file. Requests, bytes, round trips and the peak of requests in flight come from the
store's own counters (``DocStore.remote_stats``).

The server is Python: at 25 ms per request it answers 256 requests at once, but its own CPU
(one GIL) adds up under load, which is what its floor line shows.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import docstore
from tests.remote_servers import RangeHTTPServer


def build(path: str, n: int) -> None:
    rng = random.Random(0)
    words = [f"w{i}" for i in range(5000)]
    with docstore.Writer(path, fields={"text": "str", "label": "int64"}) as writer:
        for i in range(n):
            text = " ".join(rng.choice(words) for _ in range(rng.randint(20, 80)))
            writer.add(f"{i:08d}", {"text": text, "label": i % 7})


def floor(server: RangeHTTPServer, name: str) -> dict[str, float]:
    """One small range request, then 1024 at 256 in flight (keep-alive connections)."""

    def get(conn: http.client.HTTPConnection, start: int) -> None:
        conn.request("GET", f"/{name}", headers={"Range": f"bytes={start}-{start + 511}"})
        conn.getresponse().read()

    conn = http.client.HTTPConnection("127.0.0.1", server.port)
    get(conn, 0)
    t = time.perf_counter()
    for _ in range(5):
        get(conn, 0)
    one = (time.perf_counter() - t) / 5
    conns = [http.client.HTTPConnection("127.0.0.1", server.port) for _ in range(256)]
    with ThreadPoolExecutor(256) as pool:
        list(pool.map(lambda c: get(c, 0), conns))  # connect
        t = time.perf_counter()
        # Each connection carries 4 requests in turn: 1024 requests, 256 in flight.
        list(pool.map(lambda i: [get(conns[i], (i * 4 + k) * 512) for k in range(4)], range(256)))
        many = time.perf_counter() - t
    return {"one_request_s": one, "requests_1024_at_256_s": many}


def stats_delta(after: dict, before: dict) -> dict:
    return {k: after[k] - before.get(k, 0) for k in after if k != "peak_in_flight"} | {
        "peak_in_flight": after["peak_in_flight"]
    }


def measure(url: str, local: str, ids: list[str], latency: float, workers: int) -> dict:
    out: dict = {"latency_ms": latency * 1000}
    cache = tempfile.mkdtemp(prefix="docstore-bench-cache-")
    rng = random.Random(1)
    try:
        t = time.perf_counter()
        store = docstore.open(url, cache_dir=cache)
        out["open_s"] = time.perf_counter() - t
        out["open"] = store.remote_stats()
        before = store.remote_stats()
        t = time.perf_counter()
        store[rng.choice(ids)]
        out["lookup_s"] = time.perf_counter() - t
        out["lookup"] = stats_delta(store.remote_stats(), before)

        batch = rng.sample(ids, 1024)
        before = store.remote_stats()
        t = time.perf_counter()
        got = store.get_many(batch)
        out["get_many_cold_s"] = time.perf_counter() - t
        out["get_many_cold"] = stats_delta(store.remote_stats(), before)
        assert len(got) == 1024

        # Bytes fetched for the documents alone (the round that fetches blobs; the index rounds
        # are counted apart): what a batch costs once the index is cached.
        batch2 = batch
        data = out["get_many_cold"]["data_bytes"]
        local_store = docstore.open(local)
        blob_bytes = _blob_bytes(local, local_store, batch2)
        out["data_bytes_per_doc"] = data / 1024
        out["stored_bytes_per_doc"] = blob_bytes / 1024
        out["data_ratio"] = data / blob_bytes

        # Warm: everything of a batch cached, against the local file.
        t = time.perf_counter()
        for _ in range(20):
            store.get_many(batch)
        warm = (time.perf_counter() - t) / 20
        t = time.perf_counter()
        for _ in range(20):
            local_store.get_many(batch)
        local_s = (time.perf_counter() - t) / 20
        out["get_many_warm_s"], out["get_many_local_s"] = warm, local_s
        out["warm_vs_local"] = warm / local_s

        if workers:
            out["loader"] = loader(url, local, cache, workers)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return out


def _blob_bytes(path: str, store: docstore.DocStore, ids: list[str]) -> int:
    """Stored bytes of the blobs of ``ids`` (doc offsets read from the local file)."""
    import struct

    with open(path, "rb") as f:
        header = f.read(512)
        offsets_off = struct.unpack_from("<Q", header, 64 + 24 * 3)[0]
        total = 0
        for pos in store.positions(ids).tolist():
            f.seek(offsets_off + 8 * pos)
            a, b = struct.unpack("<QQ", f.read(16))
            total += b - a
    return total


def loader(url: str, local: str, cache: str, workers: int) -> dict:
    import torch

    from docstore.torch import DocDataset

    def run(store_or_url: str, batches: int, **kwargs: object) -> float:
        store = docstore.open(store_or_url, **kwargs)
        ds = DocDataset(store, field="text")
        sampler = torch.utils.data.RandomSampler(ds, generator=torch.Generator().manual_seed(0))
        dl = torch.utils.data.DataLoader(
            ds,
            batch_size=64,
            sampler=sampler,
            num_workers=workers,
            collate_fn=lambda b: b,
            multiprocessing_context="fork",
            persistent_workers=False,
        )
        t = time.perf_counter()
        n = 0
        for i, batch in enumerate(dl):
            n += len(batch)
            if i + 1 == batches:
                break
        return n / (time.perf_counter() - t)

    return {
        "remote_cold_docs_per_s": run(url, 100, cache_dir=cache),
        "remote_warm_docs_per_s": run(url, 100, cache_dir=cache),
        "local_docs_per_s": run(local, 100),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--latency", type=float, nargs="+", default=[0, 5, 25], help="ms")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    directory = args.dir or tempfile.mkdtemp(prefix="docstore-bench-")
    local = os.path.join(directory, f"bench-{args.docs}.docstore")
    if not os.path.exists(local):
        t = time.perf_counter()
        build(local, args.docs)
        print(f"built {local} in {time.perf_counter() - t:.1f}s", file=sys.stderr)
    ids = list(docstore.open(local))
    server = RangeHTTPServer(directory)
    url = f"{server.url}/{os.path.basename(local)}"
    results = {"docs": args.docs, "stored_bytes": os.path.getsize(local), "runs": []}
    try:
        for ms in args.latency:
            server.latency = ms / 1000
            run = {"floor": floor(server, os.path.basename(local))}
            run.update(measure(url, local, ids, ms / 1000, args.workers))
            results["runs"].append(run)
            print(json.dumps(run, indent=1), file=sys.stderr)
    finally:
        server.stop()
    print(table(results))
    if args.out:
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


def table(results: dict) -> str:
    rows = [
        "| latency | floor: 1 request | floor: 1024 at 256 | open | lookup (cold) | get_many(1024) cold "
        "| requests / doc | peak in flight | data bytes / stored | get_many warm / local "
        "| DataLoader cold / warm / local (docs/s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["runs"]:
        lat = r["latency_ms"]
        unit = f" ({r['get_many_cold_s'] / (lat / 1000):.1f} RTT)" if lat else ""
        cold = r["get_many_cold"]
        loader = r.get("loader", {})
        rows.append(
            f"| {lat:g} ms | {r['floor']['one_request_s'] * 1000:.1f} ms "
            f"| {r['floor']['requests_1024_at_256_s'] * 1000:.0f} ms "
            f"| {r['open_s'] * 1000:.1f} ms, {r['open']['requests']} req, {r['open']['round_trips']} RT "
            f"| {r['lookup_s'] * 1000:.1f} ms, {r['lookup']['round_trips']} RT "
            f"| {r['get_many_cold_s'] * 1000:.0f} ms{unit}, {cold['round_trips']} RT "
            f"| {cold['requests'] / 1024:.2f} | {cold['peak_in_flight']} "
            f"| {r['data_ratio']:.2f} ({r['data_bytes_per_doc']:.0f} / {r['stored_bytes_per_doc']:.0f} B) "
            f"| {r['get_many_warm_s'] * 1000:.2f} / {r['get_many_local_s'] * 1000:.2f} ms "
            f"({r['warm_vs_local']:.2f}x) "
            f"| {loader.get('remote_cold_docs_per_s', 0):,.0f}"
            f" / {loader.get('remote_warm_docs_per_s', 0):,.0f}"
            f" / {loader.get('local_docs_per_s', 0):,.0f} |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    main()
