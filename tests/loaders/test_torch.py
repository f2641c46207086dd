"""docstore.torch: datasets checked against an in-memory oracle, in real DataLoader workers."""

from __future__ import annotations

import copy
import multiprocessing
import pickle
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import docstore

from ..conftest import assert_doc_equal, run_python

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader  # noqa: E402

from docstore.torch import (  # noqa: E402
    ArrayDataset,
    DocDataset,
    PairDataset,
    TokenDataset,
    TripletDataset,
    distributed_sampler,
    pad_collate,
    set_epoch,
)

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create 4 worker processes")

# Module-level, so that spawn and forkserver workers can unpickle them.


def list_collate(batch):
    return batch


def _mapping_of(array) -> str:
    """The /proc/self/maps line of the memory holding ``array``'s first byte."""
    address = array.__array_interface__["data"][0]
    with open("/proc/self/maps") as maps:
        for line in maps:
            start, end = (int(x, 16) for x in line.split()[0].split("-"))
            if start <= address < end:
                return line
    raise AssertionError("no mapping holds the array")


def report_shared_arrays(dataset, names, queue):
    """In a started process: whether each array lives in a shared mapping, and two items."""
    shared = {name: _mapping_of(getattr(dataset, name)).split()[1][3] == "s" for name in names}
    queue.put((shared, _plain(dataset.__getitems__([0, 1]))))


def _plain(items):
    """Items with tensors as lists: a tensor sent through a queue would go as shared memory of
    the worker, gone once it exits."""
    return [tuple(t.tolist() if isinstance(t, torch.Tensor) else t for t in item) for item in items]


def upper_text(value):
    return value.upper()


def loader_kwargs(num_workers: int, start_method: str | None, **extra) -> dict:
    kwargs = {"num_workers": num_workers, **extra}
    if num_workers:
        kwargs["multiprocessing_context"] = start_method
        kwargs["persistent_workers"] = True
    return kwargs


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, tuple) and not hasattr(a, "_fields"):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _available(method: str) -> bool:
    return method in multiprocessing.get_all_start_methods()


WORKER_CONFIGS = [
    pytest.param(0, None, id="main-process"),
    pytest.param(2, "fork", id="fork-2"),
    pytest.param(4, "fork", id="fork-4"),
    pytest.param(2, "spawn", id="spawn-2"),
    pytest.param(4, "spawn", id="spawn-4"),
    pytest.param(2, "forkserver", id="forkserver-2"),
]


# --------------------------------------------------------------------------------------------
# Import hygiene and pickling


def test_importing_docstore_does_not_import_torch():
    result = run_python(
        """
        import sys
        import docstore
        store_modules = [m for m in sys.modules if m == "torch" or m.startswith("torch.")]
        assert not store_modules, store_modules
        import docstore.torch
        assert "torch" in sys.modules
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_datasets_pickle_as_path_and_options(store_path, oracle):
    store = docstore.open(store_path)
    datasets = [
        DocDataset(store, field="text"),
        DocDataset(store_path, fields=("text", "label")),
        TokenDataset(store_path, seq_len=4, partial=True),
        ArrayDataset(store_path, "tokens"),
        PairDataset(store_path, fields=("text", "raw"), label_field="score", input_example=False),
    ]
    for dataset in datasets:
        data = pickle.dumps(dataset)
        # The store holds ~400 KB of documents; a pickle is the path, options, and (TokenDataset)
        # 8 bytes of window index per document.
        assert len(data) < 1_000 + 8 * len(oracle) + 200, (type(dataset).__name__, len(data))
        clone = pickle.loads(data)
        assert clone._handle._store is None  # reopened lazily, on first use
        assert len(clone) == len(dataset)
        assert _same(clone[5], dataset[5])
        assert clone.store is not store and clone.store.path == store.path


def test_lazy_reopen_after_pid_change(store_path):
    dataset = DocDataset(store_path, field="text")
    first = dataset.store
    assert dataset.store is first
    dataset._handle._pid = -1  # as if this object had been inherited by a forked child
    assert dataset.store is not first
    assert dataset[0] == first.at(0, field="text")


def test_rejects_unknown_fields_and_bad_arguments(store_path):
    with pytest.raises(docstore.SchemaError):
        DocDataset(store_path, field="nope")
    with pytest.raises(ValueError):
        DocDataset(store_path, field="text", fields=("label",))
    with pytest.raises(TypeError):
        DocDataset(store_path, fields="text")
    with pytest.raises(docstore.SchemaError):
        TokenDataset(store_path, field="text")
    with pytest.raises(docstore.SchemaError):
        ArrayDataset(store_path, "raw")
    with pytest.raises(docstore.StoreNotFoundError):
        DocDataset(store_path + ".missing")
    with pytest.raises(TypeError):
        DocDataset(42)
    with pytest.raises(TypeError):
        PairDataset(store_path, fields="text")
    assert DocDataset(store_path, field="doc_id")[1] == docstore.open(store_path).at(1).doc_id


# --------------------------------------------------------------------------------------------
# DocDataset


def test_doc_dataset_items_match_the_oracle(store_path, oracle):
    ids = list(oracle)
    docs = DocDataset(store_path)
    texts = DocDataset(store_path, field="text", transform=upper_text)
    pairs = DocDataset(store_path, fields=("label", "text"))
    with_id = DocDataset(store_path, fields=("doc_id", "label"))
    single = DocDataset(store_path, fields=("score",))
    assert len(docs) == len(ids)
    for i in (0, 1, 1234, len(ids) - 1, -1, -len(ids)):
        doc_id = ids[i]
        assert_doc_equal(docs[i], doc_id, oracle[doc_id])
        assert texts[i] == oracle[doc_id]["text"].upper()
        assert pairs[i] == (oracle[doc_id]["label"], oracle[doc_id]["text"])
        assert single[i] == (oracle[doc_id]["score"],)
        assert with_id[i] == (doc_id, oracle[doc_id]["label"])
        assert docs.doc_id(i) == doc_id
    positions = [5, 3, 5, -2, 2999, 0]
    batch = docs.__getitems__(positions)
    for doc, p in zip(batch, positions):
        assert_doc_equal(doc, ids[p], oracle[ids[p]])
    assert pairs.__getitems__(np.array(positions)) == [pairs[p] for p in positions]
    assert texts.__getitems__(torch.tensor(positions)) == [texts[p] for p in positions]
    with pytest.raises(IndexError):
        docs[len(ids)]
    with pytest.raises(IndexError):
        docs.__getitems__([0, len(ids)])


def test_doc_dataset_default_collate_of_field_tuples(store_path, oracle):
    ids = list(oracle)
    loader = DataLoader(DocDataset(store_path, fields=("text", "label")), batch_size=7)
    texts, labels = next(iter(loader))
    assert list(texts) == [oracle[i]["text"] for i in ids[:7]]
    assert labels.dtype == torch.int64 and labels.tolist() == [oracle[i]["label"] for i in ids[:7]]


@pytest.mark.parametrize(("num_workers", "start_method"), WORKER_CONFIGS)
def test_dataloader_workers_read_every_doc_once_in_sampler_order(
    store_path, oracle, num_workers, start_method
):
    if start_method and not _available(start_method):
        pytest.skip(f"{start_method} is not available")
    ids = list(oracle)
    dataset = DocDataset(store_path)
    sampler = distributed_sampler(dataset, seed=7)
    loader = DataLoader(
        dataset,
        batch_size=64,
        sampler=sampler,
        collate_fn=list_collate,
        **loader_kwargs(num_workers, start_method),
    )
    orders = []
    for epoch in range(2):  # two epochs: with persistent workers, the second reuses them
        set_epoch(loader, epoch)
        expected = [ids[p] for p in sampler]
        got = [doc for batch in loader for doc in batch]
        assert [doc.doc_id for doc in got] == expected
        assert sorted(expected) == sorted(ids)  # nothing duplicated or lost
        for doc in got:
            assert_doc_equal(doc, doc.doc_id, oracle[doc.doc_id])
        orders.append(expected)
    assert orders[0] != orders[1]


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_transform_and_field_tuples_in_workers(store_path, oracle, start_method):
    ids = list(oracle)
    texts = DocDataset(store_path, field="text", transform=upper_text)
    loader = DataLoader(texts, batch_size=100, num_workers=2, multiprocessing_context=start_method)
    assert [t for batch in loader for t in batch] == [oracle[i]["text"].upper() for i in ids]


def test_parent_that_used_batch_lookups_does_not_hang_forked_workers(store_path):
    # Batch lookups start docstore's thread pool in the parent; forked workers have none of its
    # threads and must build their own. A hang is caught by the subprocess timeout.
    result = run_python(
        f"""
        import docstore
        from docstore.torch import DocDataset
        from torch.utils.data import DataLoader
        store = docstore.open({store_path!r})
        assert len(store.take(range(len(store)), field="text")) == len(store)  # parallel decode
        dataset = DocDataset(store, field="text")
        for epoch in range(2):
            loader = DataLoader(dataset, batch_size=256, num_workers=2, multiprocessing_context="fork")
            texts = [t for batch in loader for t in batch]
            assert texts == store.take(range(len(store)), field="text")
        print("ok")
        """,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_worker_threads_are_shared_between_workers(store_path, tmp_path, start_method):
    """Under every start method (3.14 starts workers with forkserver by default, 3.11 with fork):
    the script is a file, whose functions a spawned or forkserver worker can import."""
    script = tmp_path / "workers.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os
            os.environ.pop("DOCSTORE_NUM_THREADS", None)
            import docstore
            from docstore.torch import DocDataset
            from torch.utils.data import DataLoader

            def threads(batch):
                return docstore.get_num_threads()

            if __name__ == "__main__":
                dataset = DocDataset({str(store_path)!r}, field="text")
                loader = DataLoader(
                    dataset, batch_size=500, num_workers=2, collate_fn=threads,
                    multiprocessing_context={start_method!r},
                )
                cpus = len(os.sched_getaffinity(0))
                assert set(loader) == {{max(1, cpus // 2)}}, (set(loader), cpus)
                assert docstore.get_num_threads() == cpus  # the parent is left alone
                print("ok")
            """
        )
    )
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


# --------------------------------------------------------------------------------------------
# TripletDataset


@pytest.fixture(scope="module")
def triplet_data(oracle):
    ids = list(oracle)
    rng = np.random.default_rng(3)
    queries = {f"q{i}": f"query number {i}" for i in range(40)}
    qrels: dict[str, object] = {}
    for i, qid in enumerate(queries):
        chosen = [ids[int(p)] for p in rng.choice(len(ids), size=1 + i % 3, replace=False)]
        if i % 2:
            qrels[qid] = chosen
        else:  # TREC-style: relevance grades, 0 is not a positive
            qrels[qid] = {**{d: 1 + i % 2 for d in chosen}, ids[i]: 0}
    hard = {
        qid: [ids[int(p)] for p in rng.choice(len(ids), size=4, replace=False)] for qid in list(queries)[:30]
    }
    return queries, qrels, hard


def _expected_pairs(qrels):
    pairs = []
    for qid, docs in qrels.items():
        if isinstance(docs, dict):
            pairs.extend((qid, d) for d, rel in docs.items() if rel > 0)
        else:
            pairs.extend((qid, d) for d in docs)
    return pairs


def test_triplets_match_the_oracle_and_never_use_a_positive(store_path, oracle, triplet_data):
    queries, qrels, _ = triplet_data
    ids = list(oracle)
    pairs = _expected_pairs(qrels)
    positives = {}
    for qid, did in pairs:
        positives.setdefault(qid, set()).add(did)
    dataset = TripletDataset(store_path, queries, qrels, seed=11)
    assert len(dataset) == len(pairs)
    seen_negatives = set()
    for epoch in range(5):
        dataset.set_epoch(epoch)
        items = dataset.__getitems__(list(range(len(dataset))))
        pos, neg = dataset.positions(range(len(dataset)))
        for i, ((qid, did), (q, p, n)) in enumerate(zip(pairs, items)):
            assert q == queries[qid]
            assert p == oracle[did]["text"] and ids[pos[i]] == did
            assert n == oracle[ids[neg[i]]]["text"]
            assert ids[neg[i]] not in positives[qid]
            seen_negatives.add(int(neg[i]))
        assert dataset[3] == items[3] and dataset[-1] == items[-1]
    # Uniform over the whole store: many distinct documents, spread over all positions.
    assert len(seen_negatives) > 0.8 * 5 * len(pairs)
    assert min(seen_negatives) < len(ids) * 0.1 and max(seen_negatives) > len(ids) * 0.9


def test_triplet_sampling_depends_on_seed_epoch_and_index_only(store_path, triplet_data):
    queries, qrels, _ = triplet_data
    a = TripletDataset(store_path, queries, qrels, seed=1)
    b = TripletDataset(store_path, queries, qrels, seed=1)
    c = TripletDataset(store_path, queries, qrels, seed=2)
    everything = list(range(len(a)))
    _, neg_a = a.positions(everything)
    assert np.array_equal(neg_a, b.positions(everything)[1])
    # Batching, order and duplicates do not matter: each index has its own draw.
    assert np.array_equal(b.positions(everything[::-1])[1], neg_a[::-1])
    assert np.array_equal(b.positions([4, 4, 9])[1], neg_a[[4, 4, 9]])
    assert (c.positions(everything)[1] != neg_a).mean() > 0.9
    b.set_epoch(1)
    assert b.epoch == 1
    assert (b.positions(everything)[1] != neg_a).mean() > 0.9
    b.set_epoch(0)
    assert np.array_equal(b.positions(everything)[1], neg_a)
    # The epoch travels with pickles and copies; a copy's epoch is its own.
    b.set_epoch(5)
    clone = pickle.loads(pickle.dumps(b))
    assert clone.epoch == 5 and np.array_equal(clone.positions(everything)[1], b.positions(everything)[1])
    twin = copy.deepcopy(b)
    twin.set_epoch(6)
    assert b.epoch == 5


def test_random_draws_are_splitmix64_of_seed_epoch_attempt_and_index():
    """The draws are part of what a user reproduces across versions: pinned to splitmix64's
    finaliser written out on Python ints (key = mix(mix(mix(seed) ^ epoch) ^ attempt), then
    mix(index ^ key), top 53 bits)."""
    from docstore.torch._random import uniform as _uniform

    m64 = (1 << 64) - 1

    def mix(x: int) -> int:
        x = (x + 0x9E3779B97F4A7C15) & m64
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m64
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & m64
        return x ^ (x >> 31)

    indices = np.array([-3, 0, 1, 7919, 2**40, 2**62], dtype=np.int64)
    for seed, epoch, attempt in [(0, 0, 0), (1, 5, 3), (2**70, 2**65, 31), (-1, 7, 1)]:
        key = mix(mix(mix(seed & m64) ^ (epoch & m64)) ^ attempt)
        expected = [(mix((int(i) & m64) ^ key) >> 11) / (1 << 53) for i in indices]
        assert _uniform(seed, epoch, indices, attempt).tolist() == expected


def test_hard_negatives(store_path, oracle, triplet_data):
    queries, qrels, hard = triplet_data
    ids = list(oracle)
    pairs = _expected_pairs(qrels)
    dataset = TripletDataset(store_path, queries, qrels, negatives=hard, seed=3)
    for epoch in range(3):
        dataset.set_epoch(epoch)
        _, neg = dataset.positions(range(len(dataset)))
        for (qid, _), n in zip(pairs, neg):
            positives = {d for q, d in pairs if q == qid}
            assert ids[n] not in positives
            if qid in hard and set(hard[qid]) - positives:
                assert ids[n] in hard[qid]
            else:  # no hard negative left: a random one
                assert 0 <= n < len(ids)
    items = dataset.__getitems__([0, 1, 2])
    assert [n for _, _, n in items] == [oracle[ids[p]]["text"] for p in dataset.positions([0, 1, 2])[1]]
    # One hard negative may be given as a str, as one positive may in qrels.
    qid = next(q for q, docs in hard.items() if set(docs) - {d for p, d in pairs if p == q})
    one = next(d for d in hard[qid] if d not in {d for p, d in pairs if p == qid})
    single = TripletDataset(store_path, queries, qrels, negatives={qid: one}, seed=3)
    for (q, _), n in zip(pairs, single.positions(range(len(single)))[1]):
        if q == qid:
            assert ids[n] == one


def test_triplets_from_a_query_store_and_qrel_records(store_path, oracle, tmp_path, triplet_data):
    queries, qrels, _ = triplet_data
    query_store = docstore.build(
        tmp_path / "queries.docstore", [{"doc_id": q, "text": t} for q, t in queries.items()]
    )
    # Relevance as text, as a TREC qrels file gives it.
    records = [(qid, did, "1") for qid, did in _expected_pairs(qrels)] + [("q0", next(iter(oracle)), "0")]
    from_records = TripletDataset(store_path, query_store, records, seed=4)
    from_mapping = TripletDataset(store_path, queries, qrels, seed=4)
    assert len(from_records) == len(from_mapping)
    everything = list(range(len(from_mapping)))
    assert from_records.__getitems__(everything) == from_mapping.__getitems__(everything)
    assert len(pickle.dumps(from_records)) < 8_000
    # The dataset lets go of the stores it resolved ids in, but never closes one it was given.
    assert not query_store.closed
    user_store = docstore.open(store_path)
    from_user_store = TripletDataset(user_store, queries, qrels, seed=4)
    assert not user_store.closed
    assert from_user_store.__getitems__(everything) == from_mapping.__getitems__(everything)


@pytest.mark.parametrize("size", [2, 10, 100])
def test_a_query_positive_on_all_but_one_document_always_gets_that_one(tmp_path, size):
    store = docstore.build(tmp_path / "s", [{"doc_id": f"d{i}", "text": f"doc {i}"} for i in range(size)])
    others = [f"d{i}" for i in range(size) if i != size // 2]
    for negatives in ("random", {"q": others[:1]}):  # the hard negative is a positive: random
        dataset = TripletDataset(store, {"q": "query"}, {"q": others}, negatives=negatives)
        for epoch in range(20):
            dataset.set_epoch(epoch)
            negative = dataset.positions(range(len(dataset)))[1]
            assert (negative == size // 2).all(), (epoch, negative)


def test_qrels_given_as_sets_mean_the_same_items_in_every_process(tmp_path):
    # Iterating a set of str follows PYTHONHASHSEED, which differs between DDP ranks: two ranks
    # would give index i different pairs.
    store = docstore.build(tmp_path / "s", [{"doc_id": f"d{i}", "text": f"doc {i}"} for i in range(50)])
    positives = {f"d{i}" for i in range(0, 50, 3)}
    hard = {f"d{i}" for i in range(1, 50, 3)}
    dataset = TripletDataset(store, {"q": "query"}, {"q": positives}, negatives={"q": hard})
    assert [store.keys_range(int(p), int(p) + 1)[0] for p in dataset._pair_pos] == sorted(positives)
    assert [store.keys_range(int(p), int(p) + 1)[0] for p in dataset._hard_pos] == sorted(hard)
    records = {("q", doc_id, 1) for doc_id in positives}  # a set of (query, doc, relevance) records
    from_records = TripletDataset(store, {"q": "query"}, records)
    assert np.array_equal(from_records._pair_pos, dataset._pair_pos)
    code = f"""
import docstore
from docstore.torch import TripletDataset
store = docstore.open({str(tmp_path / "s")!r})
positives = {{f"d{{i}}" for i in range(0, 50, 3)}}
print(TripletDataset(store, {{"q": "query"}}, {{"q": positives}}).__getitems__(list(range(17))))
"""
    runs = [run_python(code, env_extra={"PYTHONHASHSEED": seed}) for seed in ("1", "2")]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr
    assert runs[0].stdout == runs[1].stdout and "doc 0" in runs[0].stdout


def test_datasets_refuse_a_store_replaced_at_their_path(tmp_path, token_docs):
    path = tmp_path / "s.docstore"
    docs = [{"doc_id": f"d{i}", "text": f"doc {i}"} for i in range(10)]
    docstore.build(path, docs).close()
    triplets = TripletDataset(path, {"q": "query"}, {"q": ["d0"]})  # unread: the store is let go
    documents = DocDataset(path, field="text")
    copy_made_before = pickle.loads(pickle.dumps(documents))
    assert documents[0] == "doc 0"
    # Rebuilt in another order and renamed over the old one, as README says to replace a store.
    docstore.build(path, docs[::-1], overwrite=True).close()
    with pytest.raises(docstore.StoreChangedError, match="was replaced after this dataset was created"):
        triplets[0]  # its positions were resolved in the old store
    assert documents[0] == "doc 0"  # a store already open here is the old file, still readable
    with pytest.raises(docstore.StoreChangedError):
        copy_made_before[0]  # a worker must not read another store than its parent
    with pytest.raises(docstore.StoreChangedError):
        pickle.loads(pickle.dumps(documents))[0]
    assert DocDataset(path, field="text")[0] == "doc 9"  # a new dataset reads the new store
    closed = docstore.open(path)
    closed.close()
    assert DocDataset(closed, field="text")[0] == "doc 9"  # a closed store: reopened by its path


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"], indirect=True)  # no pickling under fork
def test_started_workers_share_the_derived_arrays_instead_of_copying_them(
    store_path, token_store, triplet_data, start_method
):
    queries, qrels, hard = triplet_data
    datasets = {
        TripletDataset(store_path, queries, qrels, negatives=hard): TripletDataset._shared_arrays,
        TokenDataset(token_store, seq_len=4): TokenDataset._shared_arrays,
    }
    context = multiprocessing.get_context(start_method)
    for dataset, names in datasets.items():
        names = [n for n in names if getattr(dataset, n, None) is not None and getattr(dataset, n).nbytes]
        expected = dataset.__getitems__([0, 1])
        standalone = pickle.loads(pickle.dumps(dataset))  # a plain pickle carries the arrays
        for _ in range(2):  # moved to shared memory once; the second worker maps the same block
            queue = context.Queue()
            worker = context.Process(target=report_shared_arrays, args=(dataset, names, queue))
            worker.start()
            shared, items = queue.get(timeout=60)
            worker.join(timeout=60)
            assert shared == dict.fromkeys(names, True)
            assert items == _plain(expected)
        # the starting process reads the shared copy too (its own is gone), and still right
        assert all(_mapping_of(getattr(dataset, n)).split()[1][3] == "s" for n in names)
        assert _plain(dataset.__getitems__([0, 1])) == _plain(expected)
        assert _plain(standalone.__getitems__([0, 1])) == _plain(expected)


def test_triplet_errors(store_path, triplet_data):
    queries, qrels, _ = triplet_data
    with pytest.raises(KeyError, match="positive doc ids"):
        TripletDataset(store_path, queries, {"q1": ["no such doc"]})
    with pytest.raises(KeyError, match="no text"):
        TripletDataset(store_path, {}, qrels)
    with pytest.raises(KeyError, match="hard negatives"):
        TripletDataset(store_path, queries, qrels, negatives={"q1": ["no such doc"]})
    with pytest.raises(ValueError):
        TripletDataset(store_path, queries, qrels, negatives="bm25")
    with pytest.raises(ValueError):
        TripletDataset(store_path, queries, {})
    one = docstore.build(
        Path(store_path).parent / "one-doc", [{"doc_id": "d", "text": "x"}], overwrite=True
    )  # the only negative would be the positive
    for negatives in ("random", {"q": ["d"]}):  # a hard negative that is the positive is dropped
        with pytest.raises(ValueError, match="every document of the store is a positive of query 'q'"):
            TripletDataset(one.path, {"q": "x"}, {"q": ["d"]}, negatives=negatives)
    with pytest.raises(TypeError, match="indices must be .* ints, got float64"):
        TripletDataset(store_path, queries, qrels).__getitems__(np.array([1.5]))
    with pytest.raises(IndexError):
        TripletDataset(store_path, queries, qrels).positions([10_000])


@pytest.mark.parametrize("start_method", ["fork", "spawn", "forkserver"])
def test_set_epoch_reaches_persistent_workers(store_path, triplet_data, start_method):
    if not _available(start_method):
        pytest.skip(f"{start_method} is not available")
    queries, qrels, _ = triplet_data
    dataset = TripletDataset(store_path, queries, qrels, seed=9)
    loader = DataLoader(
        dataset,
        batch_size=8,
        collate_fn=list_collate,
        num_workers=2,
        persistent_workers=True,
        multiprocessing_context=start_method,
    )
    everything = list(range(len(dataset)))
    per_epoch = []
    for epoch in (0, 1, 2, 1):
        set_epoch(loader, epoch)
        got = [item for batch in loader for item in batch]
        assert got == dataset.__getitems__(everything), epoch
        per_epoch.append(got)
    assert per_epoch[0] != per_epoch[1] != per_epoch[2]
    assert per_epoch[1] == per_epoch[3]


def test_set_epoch_reaches_workers_started_before_it_in_a_copy(store_path, triplet_data, start_method):
    """A copy (as a DDP rank receives the dataset) whose persistent workers start before its first
    set_epoch: every later epoch must still reach them, and the copy's epochs are its own."""
    queries, qrels, _ = triplet_data
    original = TripletDataset(store_path, queries, qrels, seed=9)
    original.set_epoch(2)
    dataset = pickle.loads(pickle.dumps(original))
    loader = DataLoader(
        torch.utils.data.Subset(dataset, range(len(dataset))),  # set_epoch finds it inside
        batch_size=8,
        collate_fn=list_collate,
        num_workers=2,
        persistent_workers=True,
        multiprocessing_context=start_method,
    )
    next(iter(loader))  # the workers start now, before any set_epoch in this process
    reference = TripletDataset(store_path, queries, qrels, seed=9)
    everything = list(range(len(dataset)))
    for epoch in (0, 1):
        set_epoch(loader, epoch)
        reference.set_epoch(epoch)
        assert [item for batch in loader for item in batch] == reference.__getitems__(everything), epoch
    assert original.epoch == 2


# --------------------------------------------------------------------------------------------
# PairDataset (the end-to-end SentenceTransformers run is in test_torch_sentence_transformers.py)


def test_pair_dataset_fields(store_path, oracle):
    ids = list(oracle)
    with_ids = PairDataset(store_path, fields=("doc_id", "text"), label_field="score", input_example=False)
    assert with_ids[5] == (ids[5], oracle[ids[5]]["text"], oracle[ids[5]]["score"])
    with pytest.raises(ValueError, match="at least one text field"):
        PairDataset(store_path, fields=(), input_example=False)


def test_a_batch_sampler_as_sampler_fetches_whole_batches(store_path, oracle):
    ids = list(oracle)
    dataset = DocDataset(store_path, field="text")
    sampler = torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(range(10)), 4, False)
    got = list(DataLoader(dataset, sampler=sampler, batch_size=None))
    assert got == [[oracle[i]["text"] for i in ids[a:b]] for a, b in ((0, 4), (4, 8), (8, 10))]
    assert dataset[np.array([2, 0])] == [oracle[ids[2]]["text"], oracle[ids[0]]["text"]]
    assert dataset[torch.tensor(3)] == oracle[ids[3]]["text"]  # a 0-d tensor is one index
    with pytest.raises(TypeError):
        dataset[1.0]
    with pytest.raises(TypeError, match="ints, got bool"):
        dataset[np.array([True, False])]


def test_pair_dataset_tuples(store_path, oracle):
    ids = list(oracle)
    pairs = PairDataset(store_path, fields=("text", "raw"), label_field="score", input_example=False)
    unlabelled = PairDataset(store_path, fields=("text", "raw"), label_field=None, input_example=False)
    for i in (0, 17, -1):
        doc = oracle[ids[i]]
        assert pairs[i] == (doc["text"], doc["raw"], doc["score"])
        assert unlabelled[i] == (doc["text"], doc["raw"])
    loader = DataLoader(pairs, batch_size=4, num_workers=2, multiprocessing_context="spawn")
    first, _, labels = next(iter(loader))
    assert list(first) == [oracle[i]["text"] for i in ids[:4]]
    assert labels.dtype == torch.float64


# --------------------------------------------------------------------------------------------
# TokenDataset and pad_collate


@pytest.fixture(scope="module")
def token_docs():
    rng = np.random.default_rng(5)
    lengths = [0, 1, 2, 9, 10, 11, 17, 33, 3, 64] + [int(x) for x in rng.integers(0, 50, size=190)]
    return [rng.integers(0, 50_000, size=n).astype(np.uint16) for n in lengths]


@pytest.fixture(scope="module")
def token_store(tmp_path_factory, token_docs) -> str:
    path = str(tmp_path_factory.mktemp("tokens") / "tokens.docstore")
    with docstore.Writer(path, fields={"tokens": "uint16[]", "emb": "float32[]"}, batch_bytes=2_000) as w:
        for i, tokens in enumerate(token_docs):
            w.add(f"t{i}", tokens=tokens, emb=np.arange(4, dtype=np.float32) * i)
    return path


def _windows_oracle(docs, k, stride, partial):
    """Windows by the documented rule, enumerated the slow way."""
    out = []
    for d, t in enumerate(docs):
        o = 0
        while o + k + 1 <= len(t):
            out.append((d, t[o : o + k + 1]))
            o += stride
        if partial and _tail_needed(o, k, stride, len(t)):
            out.append((d, t[o:]))
    return out


def _tail_needed(o, k, stride, length):
    """A tail window at offset ``o`` (after the full ones) when a target token is left over: the
    last full window's targets end at its offset + k."""
    reached = o - stride + k if o > 0 else 0
    return reached < length - 1 and o < length - 1


def _packed_oracle(docs, k, stride, partial, sep):
    parts = []
    for t in docs:
        parts.append(t.astype(np.int64))
        if sep is not None:
            parts.append(np.array([sep]))
    stream = np.concatenate(parts)
    out = []
    o = 0
    while o + k + 1 <= len(stream):
        out.append(stream[o : o + k + 1])
        o += stride
    if partial and _tail_needed(o, k, stride, len(stream)):
        out.append(stream[o:])
    return out


@pytest.mark.parametrize(
    ("k", "stride", "partial"),
    [
        (8, None, False),
        (8, None, True),
        (5, 3, True),
        (4, 1, True),
        (6, 2, True),
        (4, 7, False),
        (3, 5, True),
    ],
)
def test_token_windows_within_documents(token_store, token_docs, k, stride, partial):
    dataset = TokenDataset(token_store, seq_len=k, stride=stride, partial=partial)
    expected = _windows_oracle(token_docs, k, stride or k, partial)
    assert len(dataset) == len(expected)
    got = dataset.__getitems__(list(range(len(dataset))))
    for w, ((d, chunk), (x, y)) in enumerate(zip(expected, got)):
        assert x.dtype == torch.int64 and y.dtype == torch.int64
        assert x.tolist() == chunk[:-1].tolist() and y.tolist() == chunk[1:].tolist()
        assert dataset.window(w)[0] == d
        if not partial:
            assert len(x) == k
    assert [t.tolist() for t in dataset[-1]] == [t.tolist() for t in got[-1]]


@pytest.mark.parametrize(
    ("k", "stride", "partial", "sep"), [(16, None, False, None), (7, 5, True, 65535), (6, 1, True, None)]
)
def test_token_windows_packed_across_documents(token_store, token_docs, k, stride, partial, sep):
    dataset = TokenDataset(token_store, seq_len=k, stride=stride, partial=partial, pack=True, sep=sep)
    expected = _packed_oracle(token_docs, k, stride or k, partial, sep)
    assert len(dataset) == len(expected)
    order = np.random.default_rng(0).permutation(len(dataset)).tolist()
    got = dataset.__getitems__(order)
    for w, (x, y) in zip(order, got):
        assert x.tolist() == expected[w][:-1].tolist() and y.tolist() == expected[w][1:].tolist()


@pytest.mark.parametrize("pack", [False, True])
def test_token_windows_own_their_memory(token_store, token_docs, pack):
    # Masking x in place (as MLM-style training does) must not change y, another window of the
    # same document, or the next batch.
    for dtype in (torch.long, None):  # converted, and kept as stored (uint16)
        dataset = TokenDataset(token_store, seq_len=4, stride=1, pack=pack, dtype=dtype)
        batch = dataset.__getitems__([0, 1, 2])
        before = [(x.clone(), y.clone()) for x, y in batch]
        for x, _ in batch:
            x.fill_(0)
        for (_, y), (_, y_before) in zip(batch, before):
            assert torch.equal(y, y_before)
        again = dataset.__getitems__([0, 1, 2])
        assert all(torch.equal(x, b[0]) for (x, _), b in zip(again, before))


def test_token_dataset_refuses_float_indices_and_warns_of_no_window(token_store, tmp_path):
    dataset = TokenDataset(token_store, seq_len=4)
    with pytest.raises(TypeError, match="ints, got float64"):
        dataset.__getitems__(np.array([1.5]))
    with pytest.raises(TypeError):
        dataset.__getitems__([1.5])
    short = docstore.build(tmp_path / "short", [{"doc_id": "a", "tokens": np.arange(3, dtype=np.int32)}])
    with pytest.warns(UserWarning, match=r"every document holds fewer than seq_len \+ 1 = 4 .*partial=True"):
        assert len(TokenDataset(short, seq_len=3)) == 0
    with pytest.warns(UserWarning, match=r"the documents hold fewer .* \(partial=True keeps shorter ones\)$"):
        assert len(TokenDataset(short, seq_len=3, pack=True)) == 0  # no hint to pass pack=True
    with pytest.raises(IndexError, match="out of range"):
        dataset.__getitems__([2**64])  # beyond 64 bits: out of range, as for any index
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(TokenDataset(short, seq_len=2)) == 1


def test_token_dataset_arguments(token_store):
    with pytest.raises(ValueError, match="does not fit"):
        TokenDataset(token_store, seq_len=4, pack=True, sep=-1)  # uint16 tokens
    with pytest.raises(ValueError, match="pack=True"):
        TokenDataset(token_store, seq_len=4, sep=0)
    with pytest.raises(TypeError, match="got a bool"):
        TokenDataset(token_store, seq_len=4, pack=True, sep=True)
    with pytest.raises(ValueError, match="need seq_len"):
        TokenDataset(token_store, stride=2)
    with pytest.raises(ValueError):
        TokenDataset(token_store, seq_len=0)
    for bad in ({"seq_len": 4.5}, {"seq_len": 4, "stride": 2.5}):  # at construction, not in a worker
        with pytest.raises(TypeError):
            TokenDataset(token_store, **bad)
    with pytest.raises(TypeError, match="no numpy equivalent"):
        TokenDataset(token_store, dtype=torch.bfloat16)
    packed = TokenDataset(token_store, seq_len=4, pack=True, sep=65535)
    assert packed.__getitems__([]) == []
    with pytest.raises(IndexError):
        packed.__getitems__([len(packed)])
    with pytest.raises(IndexError):
        packed.window(len(packed))


def test_whole_documents_and_pad_collate(token_store, token_docs):
    dataset = TokenDataset(token_store)
    kept = TokenDataset(token_store, dtype=None)
    assert len(dataset) == len(token_docs)
    assert kept[7].dtype == torch.uint16 and kept[7].tolist() == token_docs[7].tolist()
    batch = pad_collate(dataset.__getitems__([0, 1, 7, 9]))
    lengths = [len(token_docs[i]) for i in (0, 1, 7, 9)]
    assert batch["input_ids"].shape == (4, max(lengths))
    assert batch["attention_mask"].dtype == torch.int64
    assert batch["attention_mask"].sum(1).tolist() == lengths
    for row, i in enumerate((0, 1, 7, 9)):
        n = lengths[row]
        assert batch["input_ids"][row, :n].tolist() == token_docs[i].tolist()
        assert (batch["input_ids"][row, n:] == 0).all()
    windows = TokenDataset(token_store, seq_len=8, partial=True)
    batch = pad_collate(windows.__getitems__(list(range(len(windows)))), pad_id=3)
    mask = batch["attention_mask"].bool()
    assert (batch["labels"][~mask] == -100).all() and (batch["input_ids"][~mask] == 3).all()
    assert (batch["labels"][mask] != -100).all()
    # Stored uint16 tokens (dtype=None) cannot hold -100: the labels come as int64.
    unsigned = TokenDataset(token_store, seq_len=8, partial=True, dtype=None)
    batch = pad_collate(unsigned.__getitems__(list(range(len(unsigned)))))
    assert batch["input_ids"].dtype == torch.uint16 and batch["labels"].dtype == torch.int64
    assert (batch["labels"][~batch["attention_mask"].bool()] == -100).all()


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_token_loader_with_workers_and_pin_memory(token_store, token_docs, start_method):
    windows = TokenDataset(token_store, seq_len=6, partial=True)
    expected = _windows_oracle(token_docs, 6, 6, True)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*pin_memory.*")
        loader = DataLoader(
            windows,
            batch_size=16,
            collate_fn=pad_collate,
            num_workers=2,
            multiprocessing_context=start_method,
            pin_memory=True,
        )
        batches = list(loader)
    rows = [
        (x[m.bool()].tolist(), y[m.bool()].tolist())
        for b in batches
        for x, y, m in zip(b["input_ids"], b["labels"], b["attention_mask"])
    ]
    assert rows == [(c[:-1].tolist(), c[1:].tolist()) for _, c in expected]
    if torch.cuda.is_available():
        assert all(b["input_ids"].is_pinned() and b["attention_mask"].is_pinned() for b in batches)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinning needs a CUDA device")
def test_fixed_windows_are_pinned_with_default_collate(token_store):
    loader = DataLoader(TokenDataset(token_store, seq_len=8), batch_size=4, num_workers=2, pin_memory=True)
    x, y = next(iter(loader))
    assert x.shape == (4, 8) and x.is_pinned() and y.is_pinned()


def _typed_store(tmp_path, values):
    """A store with one array field per element type, named after it: ``{type: list}``."""
    path = str(tmp_path / "typed.docstore")
    with docstore.Writer(path, fields={t: f"{t}[]" for t in values}) as w:
        w.add("a", **{t: np.array(v, dtype=t) for t, v in values.items()})
    return path


def test_token_dataset_refuses_a_dtype_that_cannot_hold_the_stored_ids(tmp_path):
    # The default int64 on uint64 tokens would read 2**64-1 as -1: refused at construction,
    # naming the field, both types and what to pass instead.
    top = np.iinfo(np.uint64).max
    path = _typed_store(
        tmp_path,
        {"uint64": [1, top], "int64": [1, 2**40], "uint32": [1, 2**32 - 1], "float32": [1.5, 2.0]},
    )
    with pytest.raises(
        TypeError, match=r"field 'uint64' is uint64\[\], and dtype=torch.int64 cannot .* dtype=None"
    ):
        TokenDataset(path, "uint64")
    with pytest.raises(TypeError, match="'uint64'.*dtype=None"):
        TokenDataset(path, "uint64", seq_len=1, pack=True)
    for field, dtype, instead in [
        ("int64", torch.int32, "dtype=torch.int64"),
        ("uint32", torch.int32, "dtype=torch.int64"),
        ("float32", torch.long, "dtype=None"),
        ("int64", torch.float64, "dtype=None"),  # exact only up to 2**53
        ("uint32", torch.float32, "dtype=torch.float64"),
    ]:
        with pytest.raises(TypeError, match=f"field '{field}' is {field}.*dtype={dtype} .*pass {instead}"):
            TokenDataset(path, field, dtype=dtype)
    # What fits is taken, and exact.
    assert TokenDataset(path, "uint64", dtype=None)[0].tolist() == [1, top]
    assert TokenDataset(path, "uint32")[0].tolist() == [1, 2**32 - 1]
    assert TokenDataset(path, "uint32", dtype=torch.float64)[0].tolist() == [1.0, 2.0**32 - 1]
    assert TokenDataset(path, "int64", seq_len=1)[0][1].tolist() == [2**40]
    # Kept as uint64, ids past int64's range cannot become int64 labels padded with -100.
    windows = TokenDataset(path, "uint64", seq_len=1, dtype=None)
    with pytest.raises(ValueError, match="above 2\\*\\*63 - 1"):
        pad_collate(windows.__getitems__([0]))
    assert pad_collate(windows.__getitems__([0]), label_pad_id=0)["labels"].tolist() == [[top]]


def test_array_dataset_refuses_an_integer_dtype_that_would_wrap_or_truncate(tmp_path):
    path = _typed_store(tmp_path, {"int64": [1, 2**40], "uint64": [2**64 - 1], "float64": [0.5, 2.5]})
    for field, dtype in [("int64", torch.int32), ("uint64", torch.long), ("float64", torch.long)]:
        with pytest.raises(TypeError, match=f"ArrayDataset: field '{field}' is {field}.*dtype={dtype}"):
            ArrayDataset(path, field, dtype=dtype)
    # Float dtypes round (the dataset's purpose); an integer dtype that fits, or None, is exact.
    assert ArrayDataset(path, "int64")[0].tolist() == [1.0, 2.0**40]
    assert ArrayDataset(path, "int64", dtype=torch.long)[0].tolist() == [1, 2**40]
    assert ArrayDataset(path, "float64", dtype=None)[0].tolist() == [0.5, 2.5]


# --------------------------------------------------------------------------------------------
# ArrayDataset


def test_array_dataset_values(token_store, token_docs, store_path, oracle):
    rows = ArrayDataset(token_store, "emb")
    assert rows[3].dtype == torch.float32 and rows[3].tolist() == [0.0, 3.0, 6.0, 9.0]
    counts = ArrayDataset(token_store, "tokens", dtype=torch.float64)
    assert counts[9].dtype == torch.float64 and counts[9].tolist() == token_docs[9].astype(float).tolist()
    loader = DataLoader(rows, batch_size=10, num_workers=2, multiprocessing_context="fork")
    stacked = torch.cat(list(loader))
    assert stacked.shape == (len(token_docs), 4)
    assert torch.equal(stacked, torch.arange(len(token_docs), dtype=torch.float32)[:, None] * torch.arange(4))
    ids = list(oracle)
    scores = ArrayDataset(store_path, "score", label_field="label")
    x, label = scores[11]
    assert x.shape == () and x.item() == pytest.approx(oracle[ids[11]]["score"], rel=1e-6)
    assert label == oracle[ids[11]]["label"]
    xs, labels = next(iter(DataLoader(scores, batch_size=5)))
    assert xs.dtype == torch.float32 and labels.tolist() == [oracle[i]["label"] for i in ids[:5]]


# --------------------------------------------------------------------------------------------
# Samplers


def test_distributed_sampler_without_a_process_group(store_path):
    dataset = DocDataset(store_path, field="text")
    sampler = distributed_sampler(dataset, seed=1)
    assert sampler.num_replicas == 1 and sampler.rank == 0
    first = list(sampler)
    assert sorted(first) == list(range(len(dataset)))
    sampler.set_epoch(1)
    assert list(sampler) != first
    assert list(distributed_sampler(dataset, shuffle=False)) == list(range(len(dataset)))
