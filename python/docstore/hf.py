"""Hugging Face ``datasets`` over a store: a streaming ``datasets.IterableDataset`` that reads the
store in parallel chunks, for ``SentenceTransformerTrainer`` and anything else that takes one
(``to_iterable_dataset``), and a map-style ``datasets.Dataset`` of its documents, with their ids
and types (``to_dataset``).

>>> import docstore.hf
>>> train = docstore.hf.to_iterable_dataset("pairs.docstore", {"anchor": "query", "positive": "text"},
...                                         epochs=None)            # endless: stop by max_steps
>>> trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=train, loss=loss)

(``pip install "docstore[hf]"``.) Building a store *from* a Hugging Face dataset needs nothing
from here: ``docstore.build(path, dataset)`` and ``Writer.add_many(dataset)`` take a
``datasets.Dataset`` or a streaming ``IterableDataset``.

**What it reads.** The dataset is ``datasets.IterableDataset.from_generator`` over a list of
``num_shards`` shard numbers (``gen_kwargs``), so ``datasets`` splits the shards between
DataLoader workers, and ``datasets.distributed.split_dataset_by_node`` (or Accelerate, with
``dispatch_batches=False``) between DDP ranks. Each epoch's order of the store's ``n`` items is a
pseudo-random permutation that depends on ``(seed, epoch)`` only (``range(n)`` without
``shuffle``), computed item by item (never ``n`` at once); shard ``s`` is its ``s``-th block of
``n / num_shards`` items. A shard's items are read ``chunk_size`` at a time with one
``store.take`` each (decoded in parallel from 256 items, the GIL released), so a process holds
one chunk of the corpus, never the corpus; the shards of all processes together read each item
once per epoch.
"""

from __future__ import annotations

import copy
import operator
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

import numpy as np

from ._store import DocStore
from .torch._random import permute


def to_iterable_dataset(
    source: Any,
    columns: Sequence[str] | Mapping[str, str] | None = None,
    *,
    shuffle: bool = True,
    seed: int = 0,
    epochs: int | None = 1,
    chunk_size: int = 1024,
    num_shards: int | None = None,
) -> Any:
    """A streaming ``datasets.IterableDataset`` of a store's items, with features.

    ``source`` is a store (a path or a :class:`docstore.DocStore`), whose rows are its
    ``columns``: a sequence of field names (``"doc_id"`` may be one), or a mapping of column name
    -> field name to rename them (``{"anchor": "sentence1", "positive": "sentence2",
    "score": "label"}``); all the fields, in order, by default. Or it is a ``docstore.torch``
    dataset, whose items become rows: a ``TripletDataset`` gives ``anchor``, ``positive``,
    ``negative`` (its random negatives drawn anew each epoch), a ``PairDataset`` its text fields
    and label, a ``DocDataset`` its ``fields``; ``columns`` (a sequence) renames them. Sentence
    Transformers' losses take the columns in order, a ``label`` or ``score`` column as the label.

    ``epochs``: passes over the store, each in a new order (``dataset.repeat(epochs)``);
    ``None`` never ends: training with ``max_steps``, which a trainer needs for an iterable
    dataset anyway. A shard read again in the same process (another pass, or another iteration
    of the dataset in the process that made it) reads its block of the next epoch; DataLoader
    workers start again from epoch 0 each time they are started.
    Items are read ``chunk_size`` at a time. ``num_shards`` (default: blocks of about 256 items
    or more, 12 to 5040 shards, a highly composite number) should divide by the DataLoader
    workers and by the ranks that share the dataset.
    """
    import datasets

    from .torch._base import StoreDataset

    if epochs is not None and operator.index(epochs) < 1:
        raise ValueError(f"epochs must be >= 1 or None (endless), got {epochs}")
    if isinstance(source, (str, os.PathLike, DocStore)):
        source, names = _store_source(source, columns)
    elif isinstance(source, StoreDataset):
        names = _dataset_names(source, columns)
    else:
        what = type(source).__name__
        raise TypeError(f"expected a store, its path or a docstore.torch dataset, got {what}")
    chunk_size = operator.index(chunk_size)
    num_shards = default_shards(len(source)) if num_shards is None else operator.index(num_shards)
    if chunk_size < 1 or num_shards < 1:
        raise ValueError("chunk_size and num_shards must be >= 1")
    reader = _Reader(source, tuple(names), bool(shuffle), operator.index(seed), chunk_size, num_shards)
    features = datasets.Features(dict(zip(names, _features(source))))
    reader.plain = any(t.startswith("bfloat16") for t in _types(source))
    dataset = datasets.IterableDataset.from_generator(
        reader, features=features, gen_kwargs={"shards": list(range(num_shards))}
    )
    if epochs == 1:
        return dataset
    if not hasattr(dataset, "repeat"):
        raise ImportError(f"epochs={epochs} needs IterableDataset.repeat: pip install 'datasets>=3.4'")
    return dataset.repeat(epochs)


def to_dataset(
    store: DocStore | str | os.PathLike[str], columns: Sequence[str] | None = None, *, rows: Any = None
) -> Any:
    """A map-style ``datasets.Dataset`` of the store's documents (or those of ``rows``: a slice,
    a ``range`` or positions), in the store's order: ``doc_id``, then ``columns`` (default:
    every field).

    A store built from a Hugging Face dataset (``docstore.build(path, dataset)``) keeps its
    features in its metadata (``store.metadata["huggingface"]["features"]``), and its columns get
    them back: ClassLabel names, ``float32`` and ``int32`` values (stored as float64 and int64),
    sequence lengths, ``Array2D`` shapes. Other columns' features come from the store's field
    types: ``str`` and ``bytes`` as large strings and binaries, float32 and float16 arrays as
    ``List(Value("float32"))`` ... (not widened), a fixed shape ``float32[2,3]`` as nested lists
    of those lengths (``List(List(Value("float32"), length=3), length=2)``), a nullable field
    with ``None`` where it is null; ``bfloat16[]`` becomes float32 (exactly: Arrow has no
    bfloat16).

    The table is built in memory, ``store.to_arrow(columns, rows=rows)`` with its fixed shapes
    nested: for a corpus larger than memory, take ``rows`` in parts, or stream it with
    ``to_iterable_dataset``."""
    import datasets
    import pyarrow as pa

    if not isinstance(store, DocStore):
        from ._store import open as open_store

        store = open_store(store)
    table = store.to_arrow(columns, rows=rows)
    arrays = []
    for column in table.columns:
        column = column.combine_chunks()
        if isinstance(column.type, pa.FixedShapeTensorType):
            # datasets has no tensor type: lists of fixed lengths, one level a dimension.
            shape, storage = list(column.type.shape), column.storage
            nested = storage.values
            for length in reversed(shape[1:]):
                nested = pa.FixedSizeListArray.from_arrays(nested, length)
            column = pa.FixedSizeListArray.from_arrays(nested, shape[0], mask=storage.is_null())
        arrays.append(column)
    table = pa.table(arrays, names=table.column_names)
    kept = hf_features(store)
    if not kept:
        return datasets.Dataset(table)
    from datasets.table import table_cast

    features = datasets.Features.from_arrow_schema(table.schema)
    for i, name in enumerate(table.column_names):
        if name not in kept or name == "doc_id":
            continue
        one = datasets.Features({name: kept[name]})
        try:  # a feature the field cannot take back (fields= declared another type): its own
            column = table_cast(table.select([i]), one.arrow_schema).column(0)
        except (ValueError, TypeError, NotImplementedError, pa.ArrowException):
            continue
        table = table.set_column(i, name, column)
        features[name] = kept[name]
    return datasets.Dataset(table, info=datasets.DatasetInfo(features=features))


def hf_features(store: DocStore) -> dict[str, Any]:
    """The Hugging Face features a store keeps of the dataset it was built from, by column
    (``datasets.Features``); empty for a store without."""
    import datasets

    kept = store.metadata.get("huggingface", {})
    features = kept.get("features") if isinstance(kept, dict) else None
    if not isinstance(features, dict) or not features:
        return {}
    return dict(datasets.Features.from_dict(features))


def _store_source(store: Any, columns: Sequence[str] | Mapping[str, str] | None) -> tuple[Any, list[str]]:
    from .torch import DocDataset

    fields = DocDataset(store).store.fields
    if columns is None:
        columns = list(fields)
    if isinstance(columns, str):
        raise TypeError("columns must be a sequence of field names or a mapping, not one str")
    mapping = dict(columns) if isinstance(columns, Mapping) else {name: name for name in columns}
    if not mapping:
        raise ValueError("columns names no field")
    return DocDataset(store, fields=tuple(mapping.values())), list(mapping)


def _item_names(dataset: Any) -> list[str]:
    from .torch import DocDataset, PairDataset, TripletDataset

    if isinstance(dataset, TripletDataset):
        return ["anchor", "positive", "negative"]
    if isinstance(dataset, PairDataset):
        return [*dataset.fields, *([dataset.label_field] if dataset.label_field else [])]
    if isinstance(dataset, DocDataset):
        if dataset.transform is not None:
            raise TypeError("a DocDataset's transform is not applied here: map the iterable dataset instead")
        if dataset.fields is not None:
            return list(dataset.fields)
        if dataset.field is not None:
            return [dataset.field]
        return ["doc_id", *dataset.store.fields]
    raise TypeError(
        f"{type(dataset).__name__} items are tensors: feed it to a torch DataLoader; an iterable dataset "
        "of text comes from a store, a DocDataset, a PairDataset or a TripletDataset"
    )


def _dataset_names(dataset: Any, columns: Sequence[str] | Mapping[str, str] | None) -> list[str]:
    names = _item_names(dataset)
    if columns is None:
        return names
    if isinstance(columns, (str, Mapping)):
        raise TypeError("for a dataset, columns is a sequence of names for its items' parts")
    columns = list(columns)
    if len(columns) != len(names):
        what = type(dataset).__name__
        raise ValueError(f"{what} items have {len(names)} parts {names}, columns names {columns}")
    return columns


def _rows(dataset: Any, positions: np.ndarray) -> list[tuple[Any, ...]]:
    """The items at ``positions`` as tuples, with only the fields the rows hold decoded."""
    from .torch import DocDataset, PairDataset

    if isinstance(dataset, PairDataset):
        wanted = (*dataset.fields, *([dataset.label_field] if dataset.label_field else []))
        return dataset.store.take(positions, fields=wanted)
    if isinstance(dataset, DocDataset):
        if dataset.fields is not None:
            return dataset.store.take(positions, fields=dataset.fields)
        if dataset.field is not None:
            return [(v,) for v in dataset.store.take(positions, field=dataset.field)]
        return [tuple(doc) for doc in dataset.store.take(positions)]
    # A TripletDataset: (query, positive, negative).
    return cast("list[tuple[Any, ...]]", dataset.__getitems__(positions))


def _feature(field_type: str) -> Any:
    """The HF feature of a field type. Every HF feature may hold None, so a nullable field's is
    its type's. ``bfloat16[]``, which HF has no value type for, is ``float32`` (rows carry it so,
    exactly: ``_plain``)."""
    import datasets

    field_type = field_type.removesuffix("?")
    if field_type.endswith("]") and field_type.partition("[")[2][:1].isdigit():
        element, dims = field_type[:-1].split("[")  # a fixed shape: Array2D ... Array5D
        shape = tuple(int(d) for d in dims.split(","))
        element = element.replace("bfloat16", "float32")
        if 2 <= len(shape) <= 5:
            return getattr(datasets, f"Array{len(shape)}D")(shape, element)
        value = datasets.Value(element)
        for size in reversed(shape):  # 1-D, or more than 5: fixed-length lists
            value = (
                datasets.List(value, length=size)
                if hasattr(datasets, "List")
                else datasets.Sequence(value, size)
            )
        return value
    if field_type.endswith("[]") or field_type.startswith("list["):
        element = field_type[:-2] if field_type.endswith("[]") else field_type[5:-1]
        value = _feature(element.replace("bfloat16", "float32"))
        return datasets.List(value) if hasattr(datasets, "List") else datasets.Sequence(value)
    return datasets.Value({"str": "string", "bytes": "binary"}.get(field_type, field_type))


def _plain(value: Any) -> Any:
    """A value as ``datasets`` encodes it: a bfloat16 array (ml_dtypes', which Arrow cannot
    take) as float32, exactly; any other as it is."""
    if isinstance(value, np.ndarray) and value.dtype.name == "bfloat16":
        return value.astype(np.float32)
    return value


def _features(dataset: Any) -> list[Any]:
    return [_feature(t) for t in _types(dataset)]


def _types(dataset: Any) -> list[str]:
    """The field types of the items' parts."""
    from .torch import DocDataset, PairDataset, TripletDataset

    fields = {**dataset.store.fields, "doc_id": "str"}
    if isinstance(dataset, TripletDataset):
        query = "str"
        if dataset._query_store is not None and dataset.query_field is not None:
            query = dataset._query_store.get().fields[dataset.query_field]
        return [query, fields[dataset.field], fields[dataset.field]]
    assert isinstance(dataset, (PairDataset, DocDataset))
    return [fields[f] for f in _item_names(dataset)]


class _Reader:
    """The generator function of the iterable dataset (a picklable object: DataLoader workers
    receive it with the dataset, which pickles as its path and options).

    ``datasets`` calls it once per shard. The ``k``-th time a shard is read by this object (in
    this process) it reads its block of epoch ``k``: ``repeat`` passes, and further iterations
    in the process that made the dataset, go on to new orders (and new random negatives).
    """

    def __init__(
        self, dataset: Any, names: tuple[str, ...], shuffle: bool, seed: int, chunk_size: int, num_shards: int
    ) -> None:
        self.dataset = dataset
        self.names = names
        self.shuffle = shuffle
        self.seed = seed
        self.chunk_size = chunk_size
        self.num_shards = num_shards
        self.count = len(dataset)
        self.plain = False  # whether rows hold bfloat16 arrays, for `_plain`
        self.passes: dict[int, int] = {}  # shard -> times read here

    def positions(self, shard: int, epoch: int) -> np.ndarray:
        """Item numbers of ``shard`` in ``epoch``: its block of the epoch's order."""
        n, total = self.count, self.num_shards
        ranks = np.arange(shard * n // total, (shard + 1) * n // total, dtype=np.int64)
        return permute(ranks, n, self.seed, epoch) if self.shuffle else ranks

    def __call__(self, shards: list[int]) -> Iterator[dict[str, Any]]:
        names = self.names
        for shard in shards:  # one at a time, as datasets calls it
            epoch = self.passes.get(shard, 0)
            self.passes[shard] = epoch + 1
            dataset = _at_epoch(self.dataset, epoch)
            positions = self.positions(shard, epoch)
            for start in range(0, len(positions), self.chunk_size):
                for row in _rows(dataset, positions[start : start + self.chunk_size]):
                    yield dict(zip(names, map(_plain, row) if self.plain else row))


# Shard counts that divide among many numbers of workers x ranks (highly composite numbers).
_SHARD_COUNTS = (1, 2, 4, 6, 12, 24, 36, 48, 60, 120, 180, 240, 360, 720, 840, 1260, 1680, 2520, 5040)


def default_shards(count: int) -> int:
    """Shards for ``count`` items: blocks of at least 256 items (one parallel ``take``), 12 to
    5040 of them, a number that divides among many numbers of workers and ranks."""
    target = min(max(count // 256, 12), _SHARD_COUNTS[-1])
    return max(c for c in _SHARD_COUNTS if c <= target)


def _at_epoch(dataset: Any, epoch: int) -> Any:
    """The dataset as of ``epoch`` (a TripletDataset's negatives), leaving ``dataset`` alone."""
    if not hasattr(dataset, "set_epoch"):
        return dataset
    from .torch._epoch import EpochCounter

    view = copy.copy(dataset)  # shares the store handle and arrays; its own epoch
    view._epoch = EpochCounter(epoch)
    return view
