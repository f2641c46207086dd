"""``on_corrupt="skip"`` on the torch datasets: a batch leaves out the items that need a damaged
document, never puts another in their place, names and counts what it left out (in DataLoader
workers too), and leaves out the same items however the reads are batched."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import docstore
from docstore._damage import DamagedDocumentWarning

from ..support.damage import damaged_store, text_of

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader  # noqa: E402

from docstore.torch import ArrayDataset, DocDataset, PairDataset, TokenDataset  # noqa: E402

N, DAMAGED = 120, [3, 4, 57, 119]
GOOD = [i for i in range(N) if i not in DAMAGED]


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("damaged") / "s.docstore"
    damaged_store(path, N, DAMAGED).close()
    return path


def as_list(batch):
    return batch


@pytest.mark.parametrize("workers, start", [(0, None), (2, "fork"), (2, "spawn")])
def test_a_dataloader_reads_exactly_the_undamaged_documents_in_order(store_path, workers, start):
    dataset = DocDataset(store_path, fields=("doc_id", "text"), on_corrupt="skip")
    loader = DataLoader(
        dataset, batch_size=16, num_workers=workers, collate_fn=as_list, multiprocessing_context=start
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DamagedDocumentWarning)  # the main process's (workers=0)
        rows = [row for batch in loader for row in batch]
    assert rows == [(f"d{i}", text_of(i)) for i in GOOD]
    # Counted and named over the process and its workers.
    assert dataset.skipped == len(DAMAGED) and dataset.damaged_positions == DAMAGED


def test_the_default_raises_naming_the_document(store_path):
    dataset = DocDataset(store_path, field="text")
    assert dataset.on_corrupt == "raise"
    with pytest.raises(docstore.CorruptStoreError):
        dataset.__getitems__(list(range(16)))
    with pytest.raises(docstore.InvalidArgumentError, match="on_corrupt must be one of raise, skip"):
        DocDataset(store_path, on_corrupt="ignore")


def test_a_warning_once_per_process_names_the_store_and_positions(store_path, monkeypatch):
    from docstore.torch import _base

    monkeypatch.setattr(_base, "_WARNED", set())
    dataset = DocDataset(store_path, field="n", on_corrupt="skip")
    with pytest.warns(DamagedDocumentWarning, match=rf"store {store_path}.*2 damaged.*position\(s\) 3, 4"):
        assert dataset.__getitems__([2, 3, 4, 5]) == [2, 5]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DamagedDocumentWarning)  # no second warning
        assert dataset.__getitems__([57, 58]) == [58]
    assert dataset.skipped == 3


def test_what_is_left_out_does_not_depend_on_the_batches(store_path):
    dataset = DocDataset(store_path, field="doc_id", on_corrupt="skip")
    order = np.random.default_rng(5).permutation(N)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DamagedDocumentWarning)
        by = {
            size: [d for i in range(0, N, size) for d in dataset.__getitems__(order[i : i + size])]
            for size in (1, 7, 64)
        }
        # a damaged position asked twice in one batch is left out twice
        assert dataset.__getitems__([3, 2, 3]) == ["d2"]
    assert by[1] == by[7] == by[64] == [f"d{i}" for i in order if i not in DAMAGED]


def test_every_dataset_kind_skips(store_path, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DamagedDocumentWarning)
        pairs = PairDataset(
            store_path, fields=("text",), label_field="n", input_example=False, on_corrupt="skip"
        )
        assert [row[1] for row in pairs.__getitems__([2, 3, 5])] == [2, 5]
        arrays = ArrayDataset(store_path, "n", on_corrupt="skip")
        assert [int(t) for t in arrays.__getitems__([4, 6, 57])] == [6]
    tokens_path = tmp_path / "tokens.docstore"
    with docstore.Writer(tokens_path, fields={"ids": "int32[]", "mark": "str"}, level=-1) as writer:
        for i in range(6):
            writer.add(f"t{i}", ids=np.arange(10 * i, 10 * i + 10, dtype=np.int32), mark=f"<<mark-{i:06d}>>")
    with open(tokens_path, "r+b") as f:
        data = f.read()
        at = data.find(b"<<mark-000002>>")
        f.seek(at + 3)
        f.write(b"X")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DamagedDocumentWarning)
        windows = TokenDataset(tokens_path, "ids", seq_len=4, stride=5, on_corrupt="skip")
        got = windows.__getitems__(list(range(len(windows))))
        # two windows a document, none in document 2 (found damaged as the windows are indexed)
        assert [int(x[0]) for x, _ in got] == [0, 5, 10, 15, 30, 35, 40, 45, 50, 55]
        packed = TokenDataset(tokens_path, "ids", seq_len=9, stride=10, pack=True, on_corrupt="skip")
        starts = [int(x[0]) for x, _ in packed.__getitems__(list(range(len(packed))))]
        assert starts == [0, 10, 30, 40, 50]  # the packed stream without document 2
        whole = TokenDataset(tokens_path, "ids", on_corrupt="skip")  # whole documents
        assert [int(t[0]) for t in whole.__getitems__([1, 2, 3])] == [10, 30]
    assert windows.skipped == 0 and windows.damaged_positions == [2]
    assert whole.skipped == 1
