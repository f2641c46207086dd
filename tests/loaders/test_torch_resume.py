"""Resumable loading: every docstore.torch dataset under torchdata's StatefulDataLoader (0 and 2
workers), ``distributed_sampler``'s state under DDP, and a state saved by 2 ranks resumed on 1,
2 or 4 ranks: the batches after batch k are the uninterrupted run's, skipped samples are not
read, and every remaining sample of the epoch is read once across the new ranks."""

from __future__ import annotations

import os
import pickle
import warnings

import numpy as np
import pytest

from .test_torch_ddp import free_port

torch = pytest.importorskip("torch")
stateful = pytest.importorskip("torchdata.stateful_dataloader")

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.utils.data import DistributedSampler  # noqa: E402

from docstore.torch import (  # noqa: E402
    ArrayDataset,
    DocDataset,
    ElasticSampler,
    PairDataset,
    TokenDataset,
    TripletDataset,
    distributed_sampler,
    set_epoch,
)
from docstore.torch._sampling import _find_state  # noqa: E402

StatefulDataLoader = stateful.StatefulDataLoader

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")

EPOCH = 1  # a later epoch than the first: set_epoch matters
BATCH = 50
K = 3  # batches before the interruption


def list_collate(batch):
    return batch


def plain(value):
    """Items with tensors as lists, for comparison."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value) if not hasattr(value, "_fields") else value
    return value


class IndexedTriplets(TripletDataset):
    """(index, query, positive, negative): tells which samples a loader read."""

    def __getitems__(self, indices):
        return [(int(i), *t) for i, t in zip(indices, super().__getitems__(indices))]


class LoggedDocs(DocDataset):
    """A DocDataset that appends every position it reads to a file of its process."""

    def __init__(self, path, log_dir):
        super().__init__(path, field="doc_id")
        self.log_dir = log_dir

    def __getitems__(self, indices):
        with open(os.path.join(self.log_dir, f"{os.getpid()}.log"), "a") as log:
            log.write("".join(f"{int(i)}\n" for i in indices))
        return super().__getitems__(indices)


def read_log(log_dir) -> list[int]:
    out = []
    for name in os.listdir(log_dir):
        with open(os.path.join(log_dir, name)) as log:
            out += [int(line) for line in log]
        os.remove(os.path.join(log_dir, name))
    return out


def queries_and_qrels(ids):
    queries = {f"q{i}": f"query {i}" for i in range(40)}
    qrels = {f"q{i}": [ids[(i * 7) % len(ids)], ids[(i * 11 + 1) % len(ids)]] for i in range(40)}
    return queries, qrels


def make_dataset(kind: str, store_path: str, ids: list[str]):
    if kind == "doc":
        return DocDataset(store_path, fields=("doc_id", "text"))
    if kind == "pair":
        return PairDataset(store_path, fields=("text", "doc_id"), label_field="label", input_example=False)
    if kind == "array":
        return ArrayDataset(store_path, "score", label_field="label")
    if kind == "tokens":
        return TokenDataset(store_path, "tokens", seq_len=3, stride=2)
    queries, qrels = queries_and_qrels(ids)
    return TripletDataset(store_path, queries, qrels, seed=9)  # random negatives


# Tensors are collated into one per batch (a worker sends each tensor as shared memory).
COLLATE = {"array": None, "tokens": None}
BATCHES = {"tokens": 400, "triplet": 8}


def make_loader(dataset, sampler_kind: str, workers: int, kind: str = "doc", **sampler_kwargs):
    collate = COLLATE.get(kind, list_collate)
    kwargs = {"batch_size": BATCHES.get(kind, BATCH), "num_workers": workers, "collate_fn": collate}
    if sampler_kind == "distributed":
        kwargs["sampler"] = distributed_sampler(dataset, seed=4, **sampler_kwargs)
    else:  # torchdata's own stateful RandomSampler
        kwargs["shuffle"] = True
        kwargs["generator"] = torch.Generator().manual_seed(4)
    loader = StatefulDataLoader(dataset, **kwargs)
    set_epoch(loader, EPOCH)
    return loader


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("sampler_kind", ["distributed", "shuffle"])
@pytest.mark.parametrize("kind", ["doc", "pair", "array", "tokens", "triplet"])
def test_a_resumed_loader_yields_the_uninterrupted_batches(store_path, oracle, kind, sampler_kind, workers):
    ids = list(oracle)
    full = [plain(b) for b in make_loader(make_dataset(kind, store_path, ids), sampler_kind, workers, kind)]
    assert len(full) > K + 2

    interrupted = make_loader(make_dataset(kind, store_path, ids), sampler_kind, workers, kind)
    it = iter(interrupted)
    head = [plain(next(it)) for _ in range(K)]
    state = pickle.loads(pickle.dumps(interrupted.state_dict()))  # as saved in a checkpoint
    del it, interrupted

    # A new process: fresh dataset and loader, the epoch set as every epoch, then the state.
    resumed = make_loader(make_dataset(kind, store_path, ids), sampler_kind, workers, kind)
    resumed.load_state_dict(state)
    set_epoch(resumed, EPOCH)
    rest = [plain(b) for b in resumed]
    assert head == full[:K]
    assert rest == full[K:]  # same order, same negatives, same windows
    # The loader goes on to the next epoch whole.
    set_epoch(resumed, EPOCH + 1)
    assert sum(len(b) for b in resumed) == sum(len(b) for b in full)


@pytest.mark.parametrize("workers", [0, 2])
def test_resuming_does_not_read_the_skipped_samples(store_path, oracle, tmp_path, workers):
    log_dir = str(tmp_path)
    loader = make_loader(LoggedDocs(store_path, log_dir), "distributed", workers)
    full = list(loader)
    loader = make_loader(LoggedDocs(store_path, log_dir), "distributed", workers)
    it = iter(loader)
    [next(it) for _ in range(K)]
    state = loader.state_dict()
    del it, loader
    read_log(log_dir)

    resumed = make_loader(LoggedDocs(store_path, log_dir), "distributed", workers)
    resumed.load_state_dict(state)
    rest = [doc_id for batch in resumed for doc_id in batch]
    assert rest == [doc_id for batch in full[K:] for doc_id in batch]
    positions = {doc_id: p for p, doc_id in enumerate(oracle)}
    assert sorted(read_log(log_dir)) == sorted(positions[d] for d in rest)  # nothing else read


def _sampler_state(loader_state: dict) -> dict:
    """The ElasticSampler's part of a StatefulDataLoader state (0 or more workers)."""
    return _find_state(loader_state)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("new_world", [1, 2, 4])
def test_a_state_of_2_ranks_resumes_on_1_2_or_4_ranks(store_path, oracle, new_world, workers):
    ids = list(oracle)
    assert (len(ids) - K * BATCH * 2) % 4 == 0  # the rest divides by every world: no padding
    dataset = DocDataset(store_path, field="doc_id")

    def loaders(world):
        return [
            make_loader(dataset, "distributed", workers, num_replicas=world, rank=r) for r in range(world)
        ]

    # The uninterrupted job of 2 ranks, and the interrupted one: ranks step in lockstep.
    uninterrupted = [[b for b in loader] for loader in loaders(2)]
    old = loaders(2)
    iterators = [iter(loader) for loader in old]
    consumed = [doc for _ in range(K) for it in iterators for doc in next(it)]
    states = [loader.state_dict() for loader in old]
    assert _sampler_state(states[0]) == _sampler_state(states[1])  # any rank's state will do
    assert _sampler_state(states[0])["consumed"] == K * BATCH * 2
    del iterators, old

    new = loaders(new_world)
    for loader in new:  # every rank of the resumed job loads the same state
        loader.load_state_dict(states[0])
    read = [[doc for batch in loader for doc in batch] for loader in new]
    together = [doc for rank in read for doc in rank]
    assert len(together) == len(set(together)) == len(ids) - len(consumed)  # none read twice
    assert sorted(together + consumed) == sorted(ids)  # none lost
    if new_world == 2:  # the same world: exactly the uninterrupted batches
        assert read == [[doc for batch in rank[K:] for doc in batch] for rank in uninterrupted]

    # Another number of workers: the loader refuses its state, its sampler takes it.
    other = [
        make_loader(dataset, "distributed", 2 - workers, num_replicas=new_world, rank=r)
        for r in range(new_world)
    ]
    for loader in other:
        loader.sampler.load_state_dict(states[0])
    assert [[doc for batch in loader for doc in batch] for loader in other] == read


# --------------------------------------------------------------------------------------------
# The sampler itself


@pytest.mark.parametrize("n", [1, 7, 100, 101])
@pytest.mark.parametrize("world", [1, 3, 4])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_uninterrupted_it_is_torchs_distributed_sampler(n, world, drop_last, shuffle):
    data = list(range(n))
    for rank in range(world):
        ours = distributed_sampler(data, world, rank, shuffle=shuffle, seed=2, drop_last=drop_last)
        theirs = DistributedSampler(data, world, rank, shuffle=shuffle, seed=2, drop_last=drop_last)
        for epoch in (0, 3):
            ours.set_epoch(epoch)
            theirs.set_epoch(epoch)
            assert list(ours) == list(theirs) and len(ours) == len(theirs)


@pytest.mark.parametrize("drop_last", [False, True])
def test_resuming_with_a_world_size_that_does_not_divide_the_rest(drop_last):
    data = list(range(103))
    old = [distributed_sampler(data, 2, r, seed=1, drop_last=drop_last) for r in range(2)]
    iterators = [iter(s) for s in old]
    consumed = [next(it) for _ in range(10) for it in iterators]
    state = old[0].state_dict()
    assert state["consumed"] == 20 and old[1].state_dict() == state
    new = [distributed_sampler(data, 3, r, seed=1, drop_last=drop_last) for r in range(3)]
    for sampler in new:
        sampler.load_state_dict(state)
    read = [list(s) for s in new]
    assert len({len(r) for r in read}) == 1  # every rank the same count: lockstep holds
    together = [i for r in read for i in r]
    if drop_last:  # 83 left: 81 read once, 2 dropped
        assert len(together) == len(set(together)) == 81 and not set(together) & set(consumed)
    else:  # 83 left: every one read, 1 padded with the epoch's first sample
        assert sorted(set(together) | set(consumed)) == data and len(together) == 84


def test_state_dict_tracks_the_epoch_and_its_end():
    data = list(range(10))
    sampler = distributed_sampler(data, seed=3)
    assert sampler.state_dict()["consumed"] == 0
    sampler.set_epoch(2)
    it = iter(sampler)
    first = [next(it) for _ in range(4)]
    assert sampler.state_dict() == {
        "epoch": 2,
        "consumed": 4,
        "num_samples": 10,
        "shuffle": True,
        "seed": 3,
        "num_replicas": 1,
    }
    rest = list(it)
    assert sampler.state_dict()["consumed"] == 10
    end = sampler.state_dict()

    resumed = distributed_sampler(data, seed=3)
    resumed.load_state_dict({**sampler.state_dict(), "consumed": 4})
    assert resumed.state_dict()["consumed"] == 4  # loaded, not yet iterated
    resumed.set_epoch(2)
    assert list(resumed) == rest and resumed.state_dict()["consumed"] == 10
    assert sorted(first + rest) == data

    # A state saved at an epoch's end resumes nothing of it; the next epoch is whole.
    finished = distributed_sampler(data, seed=3)
    finished.load_state_dict(end)
    finished.set_epoch(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sorted(finished) == data
    finished.load_state_dict(end)
    finished.set_epoch(2)
    assert list(finished) == []

    stale = distributed_sampler(data, seed=3)
    stale.load_state_dict({**end, "consumed": 4})  # of epoch 2, mid-way; the sampler is at 0
    with pytest.warns(UserWarning, match="set_epoch\\(loader, 2\\)"):
        assert sorted(stale) == data


def test_a_state_of_another_order_is_refused():
    state = distributed_sampler(list(range(10)), seed=3).state_dict()
    with pytest.raises(ValueError, match="10 samples"):
        distributed_sampler(list(range(11)), seed=3).load_state_dict(state)
    with pytest.raises(ValueError, match="seed=3"):
        distributed_sampler(list(range(10)), seed=4).load_state_dict(state)
    with pytest.raises(ValueError, match="shuffle"):
        distributed_sampler(list(range(10)), shuffle=False, seed=3).load_state_dict(state)
    with pytest.raises(ValueError, match="consumed"):
        distributed_sampler(list(range(10)), seed=3).load_state_dict({**state, "consumed": 11})
    with pytest.raises(ValueError, match="rank"):
        distributed_sampler(list(range(10)), num_replicas=2, rank=2)
    assert isinstance(distributed_sampler(list(range(10))), ElasticSampler)


# --------------------------------------------------------------------------------------------
# DDP: 2 gloo ranks save; 2 ranks resume exactly; 4 ranks share the rest


def ddp_rank(rank, world, port, triplets, out_dir, phase, workers):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        loader = StatefulDataLoader(
            triplets,
            batch_size=4,
            sampler=distributed_sampler(triplets, seed=3),  # rank and world from the group
            num_workers=workers,
            collate_fn=list_collate,
        )
        set_epoch(loader, EPOCH)
        result = {}
        if phase == "save":
            it = iter(loader)
            result["head"] = [next(it) for _ in range(K)]
            result["state"] = loader.state_dict()
            result["rest"] = list(it)
        else:
            with open(os.path.join(out_dir, "save0.pkl"), "rb") as f:
                state = pickle.load(f)["state"]  # rank 0's, on every rank
            if workers == 2:  # as saved: the loader's whole state
                loader.load_state_dict(state)
            else:  # another number of workers, which StatefulDataLoader refuses: the sampler's part
                loader.sampler.load_state_dict(state)
            result["rest"] = list(loader)
        count = torch.tensor([sum(len(b) for b in result["rest"])])
        dist.all_reduce(count)  # a collective: the ranks stayed in step
        result["total"] = int(count)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"{phase}{rank}.pkl"), "wb") as f:
        pickle.dump(result, f)


def run_ranks(world, triplets, tmp_path, phase, workers):
    mp.start_processes(
        ddp_rank,
        args=(world, free_port(), triplets, str(tmp_path), phase, workers),
        nprocs=world,
        join=True,
        start_method="spawn",
    )
    results = []
    for rank in range(world):
        with open(tmp_path / f"{phase}{rank}.pkl", "rb") as f:
            results.append(pickle.load(f))
    return results


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")
def test_ddp_ranks_resume_exactly_and_on_another_world_size(store_path, oracle, tmp_path):
    ids = list(oracle)
    queries, qrels = queries_and_qrels(ids)
    triplets = IndexedTriplets(store_path, queries, qrels, seed=9)
    n = len(triplets)
    assert n == 80 and (n - K * 4 * 2) % 4 == 0

    saved = run_ranks(2, triplets, tmp_path, "save", workers=2)
    assert all(_sampler_state(r["state"])["consumed"] == K * 4 * 2 for r in saved)
    consumed = [item[0] for r in saved for batch in r["head"] for item in batch]

    again = run_ranks(2, triplets, tmp_path, "resume2", workers=2)
    for old, new in zip(saved, again):
        assert new["rest"] == old["rest"]  # same batches, same random negatives

    wider = run_ranks(4, triplets, tmp_path, "resume4", workers=0)
    items = [item for r in wider for batch in r["rest"] for item in batch]
    indices = [item[0] for item in items]
    assert all(r["total"] == n - len(consumed) for r in wider)
    assert len(indices) == len(set(indices)) == n - len(consumed)
    assert sorted(indices + consumed) == list(range(n))
    # Each sample is the uninterrupted run's: its epoch's negative.
    triplets.set_epoch(EPOCH)
    assert items == triplets.__getitems__(np.array(indices))
