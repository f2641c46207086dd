"""The four triple loaders of the loader study (see ``loader_study.py``), its no-corpus baseline and
its collate function.

Each dataset yields ``(query text, positive doc text, random negative doc text)`` for item ``i`` of
the (query, positive) pairs; the negative is drawn uniformly from the whole corpus by position,
from ``(seed, epoch, i)`` only.

* ``DictTriples`` -- the published in-memory loader: the rank reads the whole corpus (TSV) into a
  Python dict ``doc_id -> text`` when the dataset is created; DataLoader workers fork from it.
* ``IndexedTriples`` -- ``doc_id -> byte offset`` dict (built by one scan of the TSV and cached as a
  pickle, loaded by each rank), ``seek`` + ``readline`` on a file opened once per process.
* ``IrdsTriples`` -- ir_datasets ``PickleLz4FullStore``: ``docs_store.get(doc_id).text`` for the
  positive and the negative, one item at a time (a plain map-style ``__getitem__``).
* docstore -- ``docstore.torch.TripletDataset`` (made by ``make_dataset``), fetched a batch at a time
  through ``__getitems__`` by the DataLoader; it opens the store with ``read="pread"``.
* baseline -- no corpus (the same short text for every document): the pipeline's own cost.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

LOADERS = ("dict", "indexed", "ir_datasets", "docstore")
#: run at a few configurations only: no corpus at all (the floor of the pipeline)
EXTRA = ("baseline",)
_MASK = (1 << 64) - 1


def negative_position(seed: int, epoch: int, index: int, n: int) -> int:
    """A cheap deterministic hash of ``(seed, epoch, index)`` onto ``0..n-1`` (splitmix64)."""
    z = (index + 1 + (seed << 20) + (epoch << 40)) * 0x9E3779B97F4A7C15 & _MASK
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB & _MASK
    return (z ^ (z >> 31)) % n


class _Triples(Dataset):
    """Shared part: the pairs (query text, positive doc id) and the doc ids by position."""

    def __init__(self, data_dir: str | os.PathLike, seed: int = 0) -> None:
        self.data_dir = Path(data_dir)
        with open(self.data_dir / "pairs.pkl", "rb") as f:
            pairs = pickle.load(f)
        self.queries: list[str] = pairs["queries"]
        self.pos_ids: list[str] = pairs["pos_ids"]
        # int64 doc ids by position, memory-mapped: shared by every process through the page cache.
        # Pickled (to a spawned DataLoader worker) as the path alone and mapped again there: a
        # pickled np.memmap arrives as a private in-memory copy (50 MB for 6.6M ids per worker).
        self.ids = self._map_ids()
        self.seed = seed
        self.epoch = 0

    def _map_ids(self) -> np.ndarray:
        return np.load(self.data_dir / "ids.npy", mmap_mode="r")

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "ids": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.ids = self._map_ids()

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.pos_ids)

    def _negative_id(self, index: int) -> str:
        return str(int(self.ids[negative_position(self.seed, self.epoch, index, len(self.ids))]))

    def _text(self, doc_id: str) -> str:
        raise NotImplementedError

    def __getitem__(self, index: int) -> tuple[str, str, str]:
        return (
            self.queries[index],
            self._text(self.pos_ids[index]),
            self._text(self._negative_id(index)),
        )


def load_dict(tsv: str | os.PathLike) -> dict[str, str]:
    """The whole TSV as a dict doc_id -> text (what the published in-memory loader did)."""
    docs: dict[str, str] = {}
    with open(tsv, encoding="utf-8") as f:
        for line in f:
            doc_id, _, text = line.partition("\t")
            docs[doc_id] = text[:-1]
    return docs


class DictTriples(_Triples):
    def __init__(self, data_dir: str | os.PathLike, seed: int = 0) -> None:
        super().__init__(data_dir, seed)
        self.docs = load_dict(self.data_dir / "docs.tsv")

    def _text(self, doc_id: str) -> str:
        return self.docs[doc_id]


class IndexedTriples(_Triples):
    def __init__(self, data_dir: str | os.PathLike, seed: int = 0) -> None:
        super().__init__(data_dir, seed)
        with open(self.data_dir / "offsets.pkl", "rb") as f:
            self.offsets: dict[str, int] = pickle.load(f)
        self._file: Any = None
        self._pid = -1

    def _text(self, doc_id: str) -> str:
        if self._pid != os.getpid():  # one file object per process (forked workers included)
            self._file = open(self.data_dir / "docs.tsv", "rb")  # noqa: SIM115
            self._pid = os.getpid()
        f = self._file
        f.seek(self.offsets[doc_id])
        return f.readline().rstrip(b"\n").split(b"\t", 1)[1].decode("utf-8")

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_file": None, "_pid": -1}


def open_irds(path: str | os.PathLike) -> Any:
    """ir_datasets' ``PickleLz4FullStore`` as its dataset definitions set it up (msmarco_passage)."""
    import logging

    from ir_datasets.formats import GenericDoc
    from ir_datasets.indices import PickleLz4FullStore

    logging.getLogger("ir_datasets").setLevel(logging.WARNING)

    def not_built():
        raise RuntimeError(f"no ir_datasets store at {path}")

    store = PickleLz4FullStore(
        path=str(path),
        init_iter_fn=not_built,
        data_cls=GenericDoc,
        lookup_field="doc_id",
        index_fields=["doc_id"],
    )
    if not store.built():
        not_built()
    return store


class IrdsTriples(_Triples):
    def __init__(self, data_dir: str | os.PathLike, seed: int = 0) -> None:
        super().__init__(data_dir, seed)
        self._store: Any = None
        self._pid = -1

    def _text(self, doc_id: str) -> str:
        if self._pid != os.getpid():
            self._store = open_irds(self.data_dir / "irds")
            self._pid = os.getpid()
        return self._store.get(doc_id).text

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_store": None, "_pid": -1}


class BaselineTriples(_Triples):
    """No corpus: every document is the same ~350-byte passage. The memory and speed floor of
    the pipeline (torch, tokenizer, DDP, workers, the pairs) that every loader pays."""

    TEXT = ("lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor " * 5)[:350]

    def _text(self, doc_id: str) -> str:
        return self.TEXT


def make_dataset(loader: str, data_dir: str | os.PathLike, seed: int = 0) -> Dataset:
    data_dir = Path(data_dir)
    if loader == "dict":
        return DictTriples(data_dir, seed)
    if loader == "indexed":
        return IndexedTriples(data_dir, seed)
    if loader == "ir_datasets":
        return IrdsTriples(data_dir, seed)
    if loader == "docstore":
        from docstore.torch import TripletDataset

        with open(data_dir / "pairs.pkl", "rb") as f:
            pairs = pickle.load(f)
        qids = [f"q{i}" for i in range(len(pairs["queries"]))]
        queries = dict(zip(qids, pairs["queries"]))
        qrels = {q: [d] for q, d in zip(qids, pairs["pos_ids"])}
        return TripletDataset(str(data_dir / "store.docstore"), queries, qrels, seed=seed)
    if loader == "baseline":
        return BaselineTriples(data_dir, seed)
    raise ValueError(f"unknown loader {loader!r}; one of {LOADERS + EXTRA}")


class TokenizeCollate:
    """Tokenises a batch of triples as cross-encoder inputs: ``[CLS] q [SEP] pos [SEP]`` and
    ``[CLS] q [SEP] neg [SEP]`` with a WordPiece fast tokenizer, truncated to ``max_length`` and
    padded to the longest; returns ``input_ids``, ``token_type_ids``, ``attention_mask`` tensors of
    shape ``(2 * batch, length)``. The tokenizer is loaded once per process."""

    def __init__(self, tokenizer_json: str | os.PathLike, max_length: int = 256) -> None:
        self.path = str(tokenizer_json)
        self.max_length = max_length
        self._tok: Any = None
        self._pid = -1

    def tokenizer(self) -> Any:
        if self._pid != os.getpid():
            from tokenizers import Tokenizer

            tok = Tokenizer.from_file(self.path)
            tok.enable_truncation(self.max_length)
            tok.enable_padding()
            self._tok, self._pid = tok, os.getpid()
        return self._tok

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_tok": None, "_pid": -1}

    def __call__(self, batch: list[tuple[str, str, str]]) -> dict[str, torch.Tensor]:
        pairs = [(q, p) for q, p, _ in batch] + [(q, n) for q, _, n in batch]
        enc = self.tokenizer().encode_batch(pairs)
        return {
            "input_ids": torch.tensor([e.ids for e in enc], dtype=torch.long),
            "token_type_ids": torch.tensor([e.type_ids for e in enc], dtype=torch.long),
            "attention_mask": torch.tensor([e.attention_mask for e in enc], dtype=torch.long),
        }


def list_collate(batch: list[Any]) -> list[Any]:
    """No collation (the fetch-only measurement)."""
    return batch
