"""Remote stores against the same store on local disk (docs/remote.md, "Measured").

    python -m benches.remote --docs 1000000 --latency 0 5 25 --out benches/results/remote.json

A store of ``--docs`` short documents is served by an HTTP server with range support on
127.0.0.1 that waits ``latency`` before each response, as a far server would: by default
rust/core/benches/range_server.rs (tokio: tens of thousands of requests per second, so that the
server is not what is measured), or with ``--server python`` tests/support/remote_servers.py's (a few
thousand per second on a 2-core VM: it becomes the bottleneck).

For each latency: the floor (one request; 1024 requests at 256 in flight, from a Python client),
then docstore's open, a single lookup and ``get_many(1024)`` of random ids on an empty cache, the
bytes its document round fetched against the documents' stored size, ``get_many(1024)`` with
everything cached beside the local file, and a DataLoader (4 workers, batch 64, random order)
over the remote store, cold and warm, beside the local file. Requests, bytes, round trips and
the peak of requests in flight come from the store's own counters (``DocStore.remote_stats``).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import docstore
from tests.support.remote_servers import RangeHTTPServer

from .remote_peers import BUCKET, PEERS, SYSTEMS, docs, set_endpoint


class RustServer:
    """rust/core/benches/range_server.rs, built with cargo and started per latency."""

    def __init__(self, root: str) -> None:
        repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        out = subprocess.run(
            ["cargo", "build", "--release", "-p", "docstore-core", "--bench", "range_server",
             "--message-format=json"],
            cwd=repo, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        self.binary = next(
            json.loads(line)["executable"]
            for line in out.splitlines()
            if '"executable"' in line and "range_server" in line and json.loads(line).get("executable")
        )
        self.root = root
        self.proc: subprocess.Popen | None = None
        self.latency = 0.0

    def start(self, latency: float) -> None:
        self.stop()
        self.latency = latency
        self.proc = subprocess.Popen(
            [self.binary, self.root, "0", str(latency * 1000)], stdout=subprocess.PIPE, text=True
        )
        self.port = int(self.proc.stdout.readline().split()[1])  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def build(path: str, n: int) -> None:
    with docstore.Writer(path, fields={"text": "str", "label": "int64"}) as writer:
        for i, text, label in docs(n):
            writer.add(i, {"text": text, "label": label})


def floor(server: RangeHTTPServer | RustServer, name: str) -> dict[str, float]:
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


def server_stats(port: int, reset: bool = True) -> dict:
    """The range server's counters (requests, body bytes, peak in flight) since the last reset."""
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.request("GET", "/__stats?reset" if reset else "/__stats")
    out = json.loads(conn.getresponse().read())
    conn.close()
    return out


def measure_peers(systems: list, port: int, local: str, n: int, batches: int) -> dict:
    """Every system over S3 from the same server, counted by the server: open, ``get_many(1024)``
    of random documents on an empty cache, another 1024 (what the first left cached: the index,
    the metadata, chunks), a third 1024 (what the first two left: docstore has fetched its index
    whole by then, see docs/remote.md "Rent or buy"), and a DataLoader on another empty cache."""
    rng = random.Random(2)
    first, second, third = (rng.sample(range(n), 1024) for _ in range(3))
    local_store = docstore.open(local)
    found = local_store.get_many([f"{i:08d}" for i in first + second + third])
    expected = {i: found[f"{i:08d}"]["text"] for i in first + second + third}
    out: dict = {}
    for system in systems:
        r: dict = {"stored_bytes": system.stored, "stored_bytes_per_doc": system.stored / n}
        cache = tempfile.mkdtemp(prefix=f"bench-{system.name}-")
        try:
            server_stats(port)
            t = time.perf_counter()
            handle = system.open(os.path.join(cache, "a"))
            r["open_s"], r["open"] = time.perf_counter() - t, server_stats(port)
            for name, idx in (("cold", first), ("cached", second), ("third", third)):
                t = time.perf_counter()
                texts = system.take(handle, idx)
                r[f"get_{name}_s"], r[f"get_{name}"] = time.perf_counter() - t, server_stats(port)
                assert texts == [expected[i] for i in idx], f"{system.name} read other documents"
            if system.name == "docstore":
                r["docstore_stats"] = handle.remote_stats()
            del handle
            r["loader"] = system.loader(os.path.join(cache, "b"), batches)
            r["loader"].update(server_stats(port))
        except Exception as e:  # one peer failing leaves the others measured
            r["error"] = f"{type(e).__name__}: {e}"
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        print(system.name, json.dumps(r), file=sys.stderr)
        out[system.name] = r
    return out


# remote_stats() values that are a state, not a count: reported as they are after (the cache's
# bytes, a state too, are given as what the operation added).
GAUGES = ("peak_in_flight", "limit")


def stats_delta(after: dict, before: dict) -> dict:
    return {k: after[k] if k in GAUGES else after[k] - before.get(k, 0) for k in after}


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

        # Warm: everything of a batch cached, against the local file (best of 5 x 10, after 5).
        def best(s: docstore.DocStore) -> float:
            for _ in range(5):
                s.get_many(batch)
            times = []
            for _ in range(5):
                t = time.perf_counter()
                for _ in range(10):
                    s.get_many(batch)
                times.append((time.perf_counter() - t) / 10)
            return min(times)

        warm, local_s = best(store), best(local_store)
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
        # The rate after the first batch (workers started, each with its own client and maps),
        # and the time to the first batch apart: start-up is not throughput.
        t = time.perf_counter()
        n = 0
        for i, batch in enumerate(dl):
            if i == 0:
                first, t = time.perf_counter() - t, time.perf_counter()
            else:
                n += len(batch)
            if i + 1 == batches:
                break
        return n / (time.perf_counter() - t), first

    out = {}
    for name, target, kwargs in (
        ("remote_cold", url, {"cache_dir": cache}),
        ("remote_warm", url, {"cache_dir": cache}),
        ("local", local, {}),
    ):
        out[f"{name}_docs_per_s"], out[f"{name}_first_batch_s"] = run(target, 100, **kwargs)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--latency", type=float, nargs="+", default=[0, 5, 25], help="ms")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--out", default=None)
    parser.add_argument("--server", choices=("rust", "python"), default="rust")
    parser.add_argument(
        "--peers",
        nargs="*",
        default=list(PEERS),
        help=f"systems read over S3 from the same server, counted by it ({' '.join(PEERS)}; none: skip)",
    )
    parser.add_argument("--loader-batches", type=int, default=100, help="batches of 64 per DataLoader run")
    parser.add_argument(
        "--docstore-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a storage option of the peers' docstore opens, e.g. max_in_flight=1024 (repeatable)",
    )
    parser.add_argument("--no-docstore-http", action="store_true", help="only the peers' comparison")
    parser.add_argument("--json", default=None, help="plot and tabulate an earlier --out instead of running")
    parser.add_argument("--plot", default=None, help="write a PNG of the figures (needs matplotlib)")
    parser.add_argument("--plot-peers", default=None, help="write a PNG of the peers' comparison")
    args = parser.parse_args()
    if args.json:
        with open(args.json) as f:
            results = json.load(f)
        print(table(results))
        print(table_peers(results))
        if args.plot:
            plot(results, args.plot)
        if args.plot_peers:
            plot_peers(results, args.plot_peers)
        return
    if bad := [o for o in args.docstore_option if "=" not in o]:
        parser.error(f"--docstore-option takes KEY=VALUE, got {bad[0]!r}")
    options = dict(o.split("=", 1) for o in args.docstore_option)
    os.environ["BENCH_DOCSTORE_OPTIONS"] = json.dumps(options)
    directory = args.dir or tempfile.mkdtemp(prefix="docstore-bench-")
    # The server's root: the bucket is a directory of it (s3://bench/... and http://host/bench/...).
    os.makedirs(os.path.join(directory, BUCKET), exist_ok=True)
    local = os.path.join(directory, BUCKET, f"bench-{args.docs}.docstore")
    if not os.path.exists(local):
        t = time.perf_counter()
        build(local, args.docs)
        print(f"built {local} in {time.perf_counter() - t:.1f}s", file=sys.stderr)
    ids = list(docstore.open(local))
    if args.peers and args.server != "rust":
        parser.error("the peers need the S3 of the rust server (--server rust)")
    systems = []
    for name in args.peers or ():
        t = time.perf_counter()
        try:
            systems.append(SYSTEMS[name](directory, args.docs, local))
        except ImportError as e:  # a peer not installed is skipped, as in the suite
            print(f"{name}: skipped ({e})", file=sys.stderr)
            continue
        print(
            f"{name}: {systems[-1].stored:,} bytes, ready in {time.perf_counter() - t:.1f}s", file=sys.stderr
        )
    server: RangeHTTPServer | RustServer
    server = RustServer(directory) if args.server == "rust" else RangeHTTPServer(directory)
    results = {"docs": args.docs, "server": args.server, "stored_bytes": os.path.getsize(local), "runs": []}
    name = f"{BUCKET}/{os.path.basename(local)}"
    try:
        for ms in args.latency:
            if isinstance(server, RustServer):
                server.start(ms / 1000)
            else:
                server.latency = ms / 1000
            run: dict = {"latency_ms": ms, "floor": floor(server, name)}
            if not args.no_docstore_http:
                run.update(measure(f"{server.url}/{name}", local, ids, ms / 1000, args.workers))
            if systems:
                set_endpoint(server.url)
                run["peers"] = measure_peers(systems, server.port, local, args.docs, args.loader_batches)
            results["runs"].append(run)
            print(json.dumps(run, indent=1), file=sys.stderr)
    finally:
        server.stop()
    print(table(results))
    print(table_peers(results))
    if args.plot:
        plot(results, args.plot)
    if args.plot_peers:
        plot_peers(results, args.plot_peers)
    if args.out:
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


def plot(results: dict, path: str) -> None:
    """Cold get_many(1024) against the floor, warm against local, and the DataLoader, by latency."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = results["runs"]
    lat = [r["latency_ms"] for r in runs]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    ax = axes[0]
    ax.plot(lat, [r["get_many_cold_s"] * 1000 for r in runs], "o-", label="docstore get_many(1024), cold")
    ax.plot(
        lat, [r["floor"]["requests_1024_at_256_s"] * 1000 for r in runs], "s--", label="floor: 1024 requests"
    )
    ax.plot(lat, [8 * x for x in lat], ":", color="grey", label="8 round trips")
    ax.set(xlabel="latency per request (ms)", ylabel="ms", title="Empty cache")
    ax.legend(fontsize=8)
    ax = axes[1]
    ax.bar(
        [x - 0.8 for x in lat],
        [r["get_many_warm_s"] * 1000 for r in runs],
        width=1.6,
        label="remote, warm cache",
    )
    ax.bar(
        [x + 0.8 for x in lat], [r["get_many_local_s"] * 1000 for r in runs], width=1.6, label="local file"
    )
    ax.set(xlabel="latency per request (ms)", ylabel="ms per get_many(1024)", title="Warm cache")
    ax.legend(fontsize=8)
    ax = axes[2]
    for key, label in (
        ("remote_cold_docs_per_s", "remote, cold"),
        ("remote_warm_docs_per_s", "remote, warm"),
        ("local_docs_per_s", "local file"),
    ):
        ax.plot(lat, [r.get("loader", {}).get(key, 0) for r in runs], "o-", label=label)
    ax.set(xlabel="latency per request (ms)", ylabel="documents / s", title="DataLoader, 4 workers")
    ax.legend(fontsize=8)
    fig.suptitle(
        f"docstore over HTTP: {results['docs']:,} documents ({results.get('server', 'rust')} server)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _per_doc(stats: dict, docs: int, stored_per_doc: float) -> str:
    per_doc = stats["bytes"] / docs
    return f"{per_doc:,.0f} B ({per_doc / stored_per_doc:,.1f}x)"


def table_peers(results: dict) -> str:
    """Each system over S3 from the same server, counted by the server."""
    rows = [
        "| latency | system | stored B/doc | open | get 1024 cold: docs/s | req/doc | bytes/doc (x stored) "
        "| peak in flight | next 1024: docs/s | req/doc | bytes/doc (x stored) "
        "| third 1024: docs/s | req/doc | bytes/doc (x stored) "
        "| DataLoader docs/s after batch 1 (batch 1) | req/doc | bytes/doc (x stored) | peak in flight |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in results["runs"]:
        for name, r in run.get("peers", {}).items():
            head = f"| {run['latency_ms']:g} ms | {name} | {r['stored_bytes_per_doc']:.0f} "
            error = r.get("error", "").strip().splitlines()[-1:] or ["failed"]
            if "get_cached" not in r:
                rows.append(head + f"| {error[0]} |" + " |" * 14)
                continue
            stored, cold, cached = r["stored_bytes_per_doc"], r["get_cold"], r["get_cached"]
            row = (
                head + f"| {r['open_s'] * 1000:.0f} ms, {r['open']['requests']} req "
                f"| {1024 / r['get_cold_s']:,.0f} | {cold['requests'] / 1024:.2f} "
                f"| {_per_doc(cold, 1024, stored)} "
                f"| {cold['peak_in_flight']} "
                f"| {1024 / r['get_cached_s']:,.0f} | {cached['requests'] / 1024:.2f} "
                f"| {_per_doc(cached, 1024, stored)} "
            )
            if "get_third" in r:  # runs before the third batch was measured have none
                third = r["get_third"]
                row += (
                    f"| {1024 / r['get_third_s']:,.0f} | {third['requests'] / 1024:.2f} "
                    f"| {_per_doc(third, 1024, stored)} "
                )
            else:
                row += "| | | "
            if "loader" not in r:
                rows.append(row + f"| DataLoader failed: {error[0]} | | | |")
                continue
            loader = r["loader"]
            rows.append(
                row + f"| {loader['after_first_docs_per_s']:,.0f} ({loader['first_batch_s']:.2f} s) "
                f"| {loader['requests'] / loader['docs']:.3f} | {_per_doc(loader, loader['docs'], stored)} "
                f"| {loader['peak_in_flight']} |"
            )
    return "\n".join(rows) if len(rows) > 2 else ""


def plot_peers(results: dict, path: str) -> None:
    """Docs/s of get 1024 (cold), bytes per document against stored, DataLoader docs/s, by latency."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [r for r in results["runs"] if r.get("peers")]
    names = list(runs[0]["peers"])
    lat = [r["latency_ms"] for r in runs]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for name in names:
        ok = [r for r in runs if "get_cached" in r["peers"][name]]
        x = [r["latency_ms"] for r in ok]
        p = [r["peers"][name] for r in ok]
        axes[0].plot(x, [1024 / q["get_cold_s"] for q in p], "o-", label=name)
        axes[1].plot(
            x,
            [q["get_cold"]["bytes"] / 1024 / q["stored_bytes_per_doc"] for q in p],
            "o-",
            label=f"{name}, cold" + (" (= litdata)" if name == "mosaic" else ""),
        )
        ok = [r for r in runs if "loader" in r["peers"][name]]
        x = [r["latency_ms"] for r in ok]
        axes[2].plot(x, [r["peers"][name]["loader"]["after_first_docs_per_s"] for r in ok], "o-", label=name)
    axes[0].set(
        xlabel="latency per request (ms)", ylabel="documents / s", title="1024 random documents, cold"
    )
    axes[0].set_yscale("log")
    axes[1].set(
        xlabel="latency per request (ms)",
        ylabel="bytes fetched / stored bytes",
        title="Bytes per random document",
    )
    axes[1].set_yscale("log")
    axes[2].set(
        xlabel="latency per request (ms)",
        ylabel="documents / s",
        title="DataLoader (4 workers, batch 64), after batch 1",
    )
    axes[2].set_yscale("log")
    for ax in axes:
        ax.set_xticks(lat)
        ax.legend(fontsize=8)
    fig.suptitle(f"Random reads over S3 from one server: {results['docs']:,} documents")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def table(results: dict) -> str:
    rows = [
        "| latency | floor: 1 request | floor: 1024 at 256 | open | lookup (cold) | get_many(1024) cold "
        "| requests / doc | peak in flight | data bytes / stored | get_many warm / local "
        "| DataLoader cold / warm / local (docs/s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["runs"]:
        if "get_many_cold" not in r:
            continue
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
