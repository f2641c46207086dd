"""Compression level against build speed and size, on the benchmark corpora.

    python -m benches.levels                      # 200k MS MARCO-like passages + the BBC articles
    python -m benches.levels --docs 50000 --levels 0 4 9

Builds each corpus at each level with ``Writer.add_many`` (the fastest input path) and prints
docs/s, MB/s of raw text and the stored size as a fraction of the raw text, as a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import docstore

from .corpora import english_news, msmarco_like


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--docs", type=int, default=200_000, help="MS MARCO-like passages")
    parser.add_argument("--levels", type=int, nargs="+", default=[0, 2, 3, 4, 6, 9, 12])
    args = parser.parse_args()
    corpora = {
        f"msmarco_like ({args.docs:,})": list(msmarco_like(args.docs)),
        "english_news (BBC)": list(english_news()),
    }
    print("| corpus | level | docs/s | raw MB/s | size / raw |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, records in corpora.items():
            ids = [i for i, _ in records]
            texts = [t for _, t in records]
            raw = sum(len(t.encode()) for t in texts)
            for level in args.levels:
                path = os.path.join(tmp, f"l{level}")
                start = time.perf_counter()
                with docstore.Writer(path, fields={"text": "str"}, level=level, overwrite=True) as writer:
                    writer.add_many(ids, {"text": texts})
                seconds = time.perf_counter() - start
                size = os.path.getsize(path) / raw
                default = " (default)" if level == docstore._docstore.DEFAULT_LEVEL else ""
                row = f"| {name} | {level}{default} | {len(ids) / seconds:,.0f} | {raw / seconds / 1e6:,.1f}"
                print(f"{row} | {size:.3f} |")


if __name__ == "__main__":
    main()
