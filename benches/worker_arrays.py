"""Memory of spawn DataLoader workers around a TripletDataset with many queries: the pairs and
query texts it derives go to the workers as shared memory, or (``--copy``) pickled into each.

    python -m benches.worker_arrays                 # shared (what docstore.torch does)
    python -m benches.worker_arrays --copy          # the same arrays pickled into every worker

Builds a store of 200k short documents in a temporary directory, makes a TripletDataset of
``--queries`` (query, positive) pairs, starts ``--workers`` persistent spawn workers, fetches 50
batches, and prints one JSON line: the arrays' size and the workers' summed ``Pss``,
``Private_Dirty`` and ``Pss_Shmem`` from ``/proc/<pid>/smaps_rollup`` (Linux).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import warnings

import docstore
from docstore.torch import TripletDataset

ROLLUP = ("Pss", "Private_Dirty", "Pss_Shmem")


def rollup_mb(pid: int) -> dict[str, float]:
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            name, value, *_ = line.split()
            if name.rstrip(":") in ROLLUP:
                out[name.rstrip(":")] = int(value) / 1024
    return out


def as_list(batch):
    return batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=500_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--copy", action="store_true", help="pickle the arrays into every worker")
    args = parser.parse_args()

    import torch.utils.data

    if args.copy:
        TripletDataset._shared_arrays = ()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "docs.docstore")
        docs = 200_000
        docstore.build(path, ({"doc_id": f"d{i}", "text": f"document number {i} " * 5} for i in range(docs)))
        queries = {f"q{i}": f"what is the meaning of query {i} in this corpus" for i in range(args.queries)}
        qrels = {f"q{i}": [f"d{i % docs}"] for i in range(args.queries)}
        dataset = TripletDataset(path, queries, qrels)
        del queries, qrels
        names = ("_pair_query", "_pair_pos", "_positive_keys", "_query_keys", "_query_offsets")
        arrays = sum(getattr(dataset, n).nbytes for n in names)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # more workers than cores: intended here
            loader = torch.utils.data.DataLoader(
                dataset,
                batch_size=16,
                shuffle=True,
                num_workers=args.workers,
                multiprocessing_context="spawn",
                persistent_workers=True,
                collate_fn=as_list,
            )
            batches = iter(loader)
            for _ in range(50):
                next(batches)
        stats = [rollup_mb(w.pid) for w in batches._workers]
        total = {name: round(sum(s.get(name, 0.0) for s in stats), 1) for name in ROLLUP}
        print(
            json.dumps(
                {
                    "mode": "copied" if args.copy else "shared",
                    "queries": args.queries,
                    "workers": args.workers,
                    "arrays_mb": round(arrays / 1e6, 1),
                    "workers_mb": total,
                }
            )
        )
        del batches, loader


if __name__ == "__main__":
    main()
