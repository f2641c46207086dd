"""DistributedDataParallel-style loading: 2 gloo ranks, each with 2 DataLoader workers."""

from __future__ import annotations

import os
import pickle
import re
import socket
import subprocess
import sys

import pytest

from ..conftest import ROOT, assert_doc_equal

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from docstore.torch import DocDataset, TripletDataset, distributed_sampler, set_epoch  # noqa: E402

WORLD = 2
EPOCHS = 3

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")


def list_collate(batch):
    return batch


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(rank: int, port: int, store_path: str, triplets: TripletDataset, out_dir: str) -> None:
    """One rank: nothing rank-specific is passed to the datasets or the samplers."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        dataset = DocDataset(store_path)
        sampler = distributed_sampler(dataset, seed=3)
        loader = DataLoader(
            dataset,
            batch_size=50,
            sampler=sampler,
            num_workers=2,
            persistent_workers=True,
            collate_fn=list_collate,
        )
        triplet_loader = DataLoader(
            triplets,
            batch_size=4,
            sampler=distributed_sampler(triplets, seed=3),
            num_workers=2,
            persistent_workers=True,
            collate_fn=list_collate,
        )
        result = {"rank": dist.get_rank(), "epochs": [], "triplets_ok": []}
        for epoch in range(EPOCHS):
            set_epoch(loader, epoch)
            docs = [doc for batch in loader for doc in batch]
            # A collective: every rank saw its share, and the shares add up to the store.
            count = torch.tensor([len(docs)])
            dist.all_reduce(count)
            result["epochs"].append({"sampler": list(sampler), "docs": docs, "total": int(count)})
            set_epoch(triplet_loader, epoch)
            indices = list(triplet_loader.sampler)
            got = [t for batch in triplet_loader for t in batch]
            result["triplets_ok"].append(got == triplets.__getitems__(indices))
        dist.barrier()
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"rank{rank}.pkl"), "wb") as f:
        pickle.dump(result, f)


def test_two_ranks_see_every_sample_exactly_once_per_epoch(store_path, oracle, tmp_path):
    ids = list(oracle)
    assert len(ids) % WORLD == 0  # else DistributedSampler pads the last round with repeats
    queries = {f"q{i}": f"query {i}" for i in range(10)}
    qrels = {f"q{i}": [ids[i * 7], ids[i * 11 + 1]] for i in range(10)}
    # Built here and sent to the ranks, as a training script would.
    triplets = TripletDataset(store_path, queries, qrels, seed=5)
    mp.start_processes(
        rank_main,
        args=(free_port(), store_path, triplets, str(tmp_path)),
        nprocs=WORLD,
        join=True,
        start_method="spawn",
    )
    results = []
    for rank in range(WORLD):
        with open(tmp_path / f"rank{rank}.pkl", "rb") as f:
            results.append(pickle.load(f))
    assert [r["rank"] for r in results] == list(range(WORLD))
    orders = []
    for epoch in range(EPOCHS):
        seen = []
        for r in results:
            e = r["epochs"][epoch]
            assert e["total"] == len(ids)
            assert [doc.doc_id for doc in e["docs"]] == [ids[p] for p in e["sampler"]]
            for doc in e["docs"]:
                assert_doc_equal(doc, doc.doc_id, oracle[doc.doc_id])
            seen += [doc.doc_id for doc in e["docs"]]
        assert sorted(seen) == sorted(ids), "every sample exactly once per epoch, across ranks"
        orders.append([r["epochs"][epoch]["sampler"] for r in results])
        assert all(r["triplets_ok"][epoch] for r in results)
    assert orders[0] != orders[1] != orders[2], "set_epoch changes the order"
    # Ranks of one epoch got disjoint halves; the halves change between epochs.
    assert set(orders[0][0]) != set(orders[1][0])


def test_ranker_example_alone_and_under_torchrun(tmp_path):
    example = ROOT / "examples" / "train_ranker.py"
    runs = {
        "alone": [sys.executable, str(example)],
        "torchrun": [
            *(sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"),
            *("--master-addr", "127.0.0.1", "--master-port", str(free_port()), str(example)),
        ],
    }
    for name, command in runs.items():
        result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert result.returncode == 0, (name, result.stdout[-2000:], result.stderr[-4000:])
        # ranks share one stdout: find the lines wherever they land
        trained = sorted(re.findall(r"rank \d+ trained on \d+ triplets of \d+ per epoch", result.stdout))
        if name == "alone":
            assert trained == ["rank 0 trained on 640 triplets of 320 per epoch"]
        else:  # each rank half of the 320 triplets, for 2 epochs
            assert trained == [f"rank {r} trained on 320 triplets of 320 per epoch" for r in range(2)]
