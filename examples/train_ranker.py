"""Train a tiny ranker on (query, positive, negative) triplets read from a docstore.

    python examples/train_ranker.py                              # one process
    torchrun --nproc-per-node 2 examples/train_ranker.py         # DDP on CPU (gloo)

The same script runs alone and under ``torchrun``: ``distributed_sampler`` finds the process
group when there is one, and each rank's DataLoader workers open the store themselves (they read
it through the OS page cache, whose pages every worker and rank on the machine share). Negatives are
drawn uniformly from the whole store, reproducibly from (seed, epoch, index); ``set_epoch``
gives every epoch new ones, in persistent workers too.

The corpus, queries and relevance judgements are made up here; with ir_datasets, build the store
with ``docstore.ir_datasets.build(name, path)`` and pass the dataset as ``queries`` and ``qrels``
(``TripletDataset(path, dataset, dataset)``: its ``queries_iter()`` and ``qrels_iter()``). The
model, a bag of hashed words, stands in for a real encoder.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import zlib

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader

import docstore
from docstore.torch import TripletDataset, distributed_sampler, set_epoch

BUCKETS = 1 << 14
TOPICS = ["apple", "river", "guitar", "planet", "bread", "engine", "garden", "winter"]
FILLER = ["the", "of", "and", "a", "to", "in", "is", "it", "that", "for", "on", "with", "as", "was"]


def say(line: str) -> None:
    """Prints a whole line in one write: ranks under torchrun share one stdout, and print()
    writes the line and its end apart."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def make_data(docs: int = 2000, seed: int = 0):
    """Documents about topics, queries naming a topic, and which documents are relevant."""
    rng = random.Random(seed)
    records, qrels = [], {}
    for i in range(docs):
        topic = TOPICS[i % len(TOPICS)]
        words = [topic] * 3 + rng.choices(FILLER, k=20) + [f"w{rng.randrange(500)}" for _ in range(5)]
        rng.shuffle(words)
        records.append({"doc_id": f"d{i}", "text": " ".join(words)})
        if i < 40 * len(TOPICS):  # the first docs of each topic are judged relevant
            qrels.setdefault(f"q{i % 40}-{topic}", []).append(f"d{i}")
    queries = {qid: f"tell me about {qid.split('-')[1]}" for qid in qrels}
    return records, queries, qrels


def hashed(texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Word ids (crc32, the same in every process) and offsets for nn.EmbeddingBag."""
    ids, offsets = [], []
    for text in texts:
        offsets.append(len(ids))
        ids.extend(zlib.crc32(w.encode()) % BUCKETS for w in text.split())
    return torch.tensor(ids), torch.tensor(offsets)


def collate(batch: list[tuple[str, str, str]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Queries, then positives, then negatives, as one EmbeddingBag input."""
    queries, positives, negatives = zip(*batch)
    return hashed([*queries, *positives, *negatives])


class BagOfWords(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.EmbeddingBag(BUCKETS, 32, mode="mean")

    def forward(self, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return nn.functional.normalize(self.embed(ids, offsets), dim=-1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", help="where to write the made-up corpus (a temporary file by default)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)

    distributed = "WORLD_SIZE" in os.environ  # set by torchrun
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    torch.manual_seed(0)  # the same initial weights on every rank

    records, queries, qrels = make_data()  # the same on every rank
    tmp = tempfile.mkdtemp() if rank == 0 and not args.store else None
    path = (args.store or os.path.join(tmp, "corpus.docstore")) if rank == 0 else None
    if rank == 0:
        docstore.build(path, records, overwrite=True)
    if distributed:  # rank 0 wrote the store; torchrun's ranks share this machine's disk
        shared = [path]
        dist.broadcast_object_list(shared, src=0)
        path = shared[0]

    dataset = TripletDataset(path, queries, qrels, negatives="random", seed=1)
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        sampler=distributed_sampler(dataset, seed=1),
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
        collate_fn=collate,
    )
    model = BagOfWords()
    trained = nn.parallel.DistributedDataParallel(model) if distributed else model
    optimiser = torch.optim.Adam(trained.parameters(), lr=0.05)
    seen = 0
    for epoch in range(args.epochs):
        set_epoch(loader, epoch)  # a new order and new negatives
        total = 0.0
        for ids, offsets in loader:
            q, p, n = trained(ids, offsets).view(3, -1, 32)  # one forward call per step
            scores = torch.stack([(q * p).sum(-1), (q * n).sum(-1)], 1) * 10
            loss = nn.functional.cross_entropy(scores, torch.zeros(len(scores), dtype=torch.long))
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            total += loss.item() * len(scores)
            seen += len(scores)
        say(f"rank {rank} epoch {epoch}: mean loss {total / len(loader.sampler):.4f}")
    say(f"rank {rank} trained on {seen} triplets of {len(dataset)} per epoch")
    del loader  # stops the persistent workers
    if distributed:
        dist.barrier()
    if tmp is not None:
        shutil.rmtree(tmp)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
