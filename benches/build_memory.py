"""Peak memory of a streaming build: N short documents written through ``docstore.Writer``.

    python -m benches.build_memory --docs 20000000            # the issue's 20M short documents
    python -m benches.build_memory --docs 2000000 --level 0

Documents are generated on the fly in chunks, so the input never holds the corpus either; the
writer's own memory is bounded by its batch (4 MiB raw) and key buffer (64 MiB) settings. Prints
one JSON line: docs, seconds, docs/s, peak RSS of this process (ru_maxrss), store size.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time

import docstore


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--docs", type=int, default=20_000_000)
    parser.add_argument("--level", type=int, default=None, help="compression level (default: docstore's)")
    parser.add_argument("--dir", default=None, help="where to write the store (default: a temp dir)")
    args = parser.parse_args()
    directory = args.dir or tempfile.mkdtemp(prefix="docstore-build-memory-")
    path = os.path.join(directory, "short.docstore")
    words = [
        "the",
        "of",
        "and",
        "to",
        "in",
        "is",
        "for",
        "on",
        "that",
        "by",
        "with",
        "as",
        "at",
        "from",
        "this",
        "are",
        "was",
        "be",
        "or",
        "an",
        "it",
    ]
    start = time.perf_counter()
    options = {} if args.level is None else {"level": args.level}
    with docstore.Writer(path, fields={"text": "str"}, overwrite=True, **options) as writer:
        chunk = 100_000
        for first in range(0, args.docs, chunk):
            ids = [
                f"msmarco_passage_{(i * 2654435761) % 4294967291}"
                for i in range(first, min(args.docs, first + chunk))
            ]
            texts = [
                " ".join(words[(i + k) % len(words)] for k in range(8 + i % 24)) for i in range(len(ids))
            ]
            writer.add_many(ids, {"text": texts})
    seconds = time.perf_counter() - start
    store = docstore.open(path)
    assert len(store) == args.docs
    print(
        json.dumps(
            {
                "docs": args.docs,
                "seconds": round(seconds, 1),
                "docs_per_s": round(args.docs / seconds),
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "store_mb": round(os.path.getsize(path) / 1e6, 1),
                "level": store.info()["codec"],
            }
        )
    )
    if args.dir is None:
        os.remove(path)
        os.rmdir(directory)


if __name__ == "__main__":
    main()
