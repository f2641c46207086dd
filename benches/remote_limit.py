"""The limit of requests in flight, adapted to the server (docs/remote.md, "How many requests
are in flight"): a cold ``get_many`` against a fast server with injected latency, and against a
simple Python range server, with what each server saw (requests, the peak in flight).

    python -m benches.remote_limit --dir DIR --latency 0 5 25 --repeat 5
    python -m benches.remote_limit --dir DIR --server python --batch 715 --repeat 3
    python -m benches.remote_limit --dir DIR --server python-single --batch 715 --repeat 2
    python -m benches.remote_limit --dir DIR --option initial_in_flight=256   # as before: 256 at once

``--dir`` holds (or gets) ``benches/remote.py``'s store of ``--docs`` documents. Each repeat opens
the store on an empty cache, reads one id, then ``get_many`` of ``--batch`` random ids, timed;
the table gives the median and the best. Run it with ``PYTHONPATH`` naming another build of
docstore to compare two builds on the same machine, interleaved.
"""

from __future__ import annotations

import argparse
import http.client
import http.server
import json
import os
import random
import shutil
import statistics
import tempfile
import threading
import time

import docstore
from tests.remote.load import LoadedServer
from tests.support.remote_servers import _Files

from .remote import RustServer, build
from .remote_peers import BUCKET


class SingleThreadedServer:
    """A range server that answers one request at a time and closes each connection (HTTP/1.0),
    with Python's listen backlog (5): a simple server a user may start."""

    def __init__(self, root: str) -> None:
        class Handler(_Files):
            protocol_version = "HTTP/1.0"

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.server.root = os.path.realpath(root)  # type: ignore[attr-defined]
        self.server.requests = 0  # type: ignore[attr-defined]
        self.server.latency = 0.0  # type: ignore[attr-defined]
        self.server.etag = None  # type: ignore[attr-defined]
        self.server.last_modified = True  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def rust_stats(port: int) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.request("GET", "/__stats?reset")
    out = json.loads(conn.getresponse().read())
    conn.close()
    return out


def once(url: str, ids: list[str], batch: int, options: dict, seed: int) -> dict:
    cache = tempfile.mkdtemp(prefix="docstore-limit-cache-")
    try:
        store = docstore.open(url, cache_dir=cache, storage_options=options)
        rng = random.Random(seed)
        store[rng.choice(ids)]
        wanted = rng.sample(ids, batch)
        t = time.perf_counter()
        got = store.get_many(wanted)
        took = time.perf_counter() - t
        assert len(got) == batch
        return {"s": took, **store.remote_stats()}
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--latency", type=float, nargs="+", default=[0, 5, 25], help="ms (rust server)")
    parser.add_argument("--server", choices=("rust", "python", "python-single"), default="rust")
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--option", action="append", default=[], help="storage option key=value")
    parser.add_argument("--server-binary", default=None, help="range_server, built (else cargo builds it)")
    args = parser.parse_args()
    options = dict(o.split("=", 1) for o in args.option)
    os.makedirs(os.path.join(args.dir, BUCKET), exist_ok=True)
    local = os.path.join(args.dir, BUCKET, f"bench-{args.docs}.docstore")
    if not os.path.exists(local):
        build(local, args.docs)
    ids = list(docstore.open(local))
    name = f"{BUCKET}/{os.path.basename(local)}"
    print(f"docstore {docstore.__file__}, options {options}")
    print("| server | latency | get_many cold: median (best) | requests | peak in flight (client / server) |")
    print("|---|---|---|---|---|")
    latencies = args.latency if args.server == "rust" else [0.0]
    if args.server == "rust" and args.server_binary:
        rust = RustServer.__new__(RustServer)
        rust.binary, rust.root, rust.proc, rust.latency = args.server_binary, args.dir, None, 0.0
    elif args.server == "rust":
        rust = RustServer(args.dir)
    for ms in latencies:
        runs, seen = [], []
        if args.server == "rust":
            rust.start(ms / 1000)
            url, stop = f"{rust.url}/{name}", rust.stop
        elif args.server == "python":
            # As a new user starts one: Python's listen backlog (5), a thread a connection.
            python = LoadedServer(args.dir, backlog=5)
            url, stop = f"{python.url}/{name}", python.stop
        else:
            single = SingleThreadedServer(args.dir)
            url, stop = f"{single.url}/{name}", single.stop
        try:
            for k in range(args.repeat):
                if args.server == "rust":
                    rust_stats(rust.port)
                elif args.server == "python":
                    python.load.reset()
                t = time.perf_counter()
                try:
                    runs.append(once(url, ids, args.batch, options, seed=k))
                except docstore.StoreIOError as e:
                    print(f"failed after {time.perf_counter() - t:.1f} s: {str(e)[:200]}", flush=True)
                    continue
                if args.server == "rust":
                    seen.append(rust_stats(rust.port))
                else:
                    seen.append({"peak_in_flight": python.load.peak if args.server == "python" else 0})
        finally:
            stop()
        if not runs:
            continue
        times = [r["s"] * 1000 for r in runs]
        print(
            f"| {args.server} | {ms:g} ms | {statistics.median(times):.0f} ms ({min(times):.0f}) "
            f"| {statistics.median(r['requests'] for r in runs):.0f} "
            f"| {max(r['peak_in_flight'] for r in runs)} / {max(s['peak_in_flight'] for s in seen)} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
