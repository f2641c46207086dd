"""Rent or buy (docs/remote.md): what each batch of random reads fetches from a remote store, with
index sections never fetched whole (``request_cost_bytes=0``) and as by default.

    python -m benches.remote_rent --dir /tmp/rb    # the store benches/remote.py built there

Serves ``DIR/bench/bench-N.docstore`` (built by ``python -m benches.remote --dir DIR``) with
rust/core/benches/range_server.rs at ``--latency`` ms, then per setting: ``--take`` batches of
``take`` of 64 random positions, then ``--get`` batches of ``get_many`` of 1024 random ids, each
on the same cache, printing the round trips, requests and bytes of every batch
(``DocStore.remote_stats``).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile

import docstore

from .remote import BUCKET, RustServer


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", required=True)
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--latency", type=float, default=0.0, help="ms")
    parser.add_argument("--take", type=int, default=12)
    parser.add_argument("--get", type=int, default=6)
    args = parser.parse_args()
    name = f"{BUCKET}/bench-{args.docs}.docstore"
    ids = list(docstore.open(os.path.join(args.dir, name)).keys())
    server = RustServer(args.dir)
    server.start(args.latency / 1000)
    try:
        for cost in ("0", str(32 << 10)):
            cache = tempfile.mkdtemp(prefix="docstore-rent-")
            try:
                store = docstore.open(
                    f"{server.url}/{name}", cache_dir=cache, storage_options={"request_cost_bytes": cost}
                )
                rng = random.Random(0)
                print(f"request_cost_bytes={cost}")
                for i in range(args.take + args.get):
                    before = store.remote_stats()
                    if i < args.take:
                        what = "take 64"
                        store.take([rng.randrange(len(ids)) for _ in range(64)])
                    else:
                        what = "get_many 1024"
                        store.get_many(rng.sample(ids, 1024))
                    after = store.remote_stats()
                    delta = {k: after[k] - before[k] for k in ("round_trips", "requests", "bytes")}
                    print(
                        f"  {i:2d} {what}: {delta['round_trips']} rounds, {delta['requests']} requests, "
                        f"{delta['bytes']:,} bytes"
                    )
            finally:
                shutil.rmtree(cache, ignore_errors=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
