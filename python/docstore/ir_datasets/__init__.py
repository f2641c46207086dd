"""ir_datasets drop-in: build a store from any ir_datasets corpus, and serve its documents.

>>> import docstore.ir_datasets
>>> docstore.ir_datasets.build("msmarco-passage", "msmarco-passage.docstore")
>>> dataset = docstore.ir_datasets.load("msmarco-passage/train", store="msmarco-passage.docstore")
>>> dataset.docs.lookup("0").text                 # as with ir_datasets.load("msmarco-passage/train")
>>> dataset.docs_store().get_many(["0", "1"])
>>> for query in dataset.queries_iter(): ...      # queries, qrels, scoreddocs ... are ir_datasets'

``load`` returns an ``ir_datasets.Dataset`` whose documents come from the store and whose everything
else (queries, qrels, scoreddocs, docpairs, metadata ...) is the real dataset's, so code written
against ir_datasets changes one line. Documents are instances of the dataset's own ``docs_cls()``,
with the values ir_datasets gives.

**Field types** come from the annotations of the docs class, stored natively where a store type
holds them: ``str``, ``int``, ``float``, ``bytes`` and ``bool`` as ``str``, ``int64``, ``float64``,
``bytes`` and ``bool``; ``List[str]`` / ``Tuple[str, ...]`` (and of ``bytes``) as ``list[str]``
(``list[bytes]``); ``List[int]`` / ``Tuple[int, ...]`` (and of ``float``) as ``int64[]``
(``float64[]``), read back as lists (tuples) of Python numbers; sequences of fixed-length tuples
of numbers (MS MARCO v2's ``Tuple[Tuple[int, int], ...]`` spans) as one flat array, cut back into
tuples on read; ``Optional[X]`` of any of these as the nullable type (``str?``). Any other
annotation (``Dict[str, ...]``, nested NamedTuples such as KILT's anchors, enums, ``datetime``)
becomes a ``str`` field holding the value as JSON, which ``load`` decodes back to the annotated
types (tuples as tuples, nested NamedTuples as their class, bytes from base64, datetimes from
ISO 8601, enums by value).
An annotation that JSON cannot carry faithfully (``Any``, a union of several types that need
decoding, an arbitrary class) or a field without one is refused with a ``SchemaError`` naming the
field, before anything is read. ``json_fields=`` stores chosen natively typed fields as JSON too,
for datasets whose documents hold values (``None``, a string) that their annotation does not
allow. Stores built before version 4 types existed (``bool`` as ``int64``, lists and ``Optional``
as JSON) load as before.

Importing ``docstore`` does not import this module or ir_datasets.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Sequence
from typing import Any, Literal

try:
    import ir_datasets
except ImportError as exc:  # pragma: no cover - exercised only without ir_datasets
    raise ImportError(
        "docstore.ir_datasets needs ir_datasets: pip install ir_datasets (or 'docstore[ir_datasets]')"
    ) from exc

from .. import _progress
from .._store import DocStore
from .._store import open as open_store
from .._writer import Writer
from ..errors import SchemaError
from ._adapters import DocstoreDataset, DocstoreDocs, DocstoreDocsIter, DocstoreDocstore
from ._types import _dumps, _Schema, _type_name

__all__ = ["DocstoreDataset", "DocstoreDocs", "DocstoreDocsIter", "DocstoreDocstore", "build", "load"]

# Documents per Writer batch while building.
_BATCH = 4096


def _dataset(dataset_or_id: Any, *, unwrap: bool = False) -> Any:
    if unwrap and isinstance(dataset_or_id, DocstoreDataset):  # load() serves the real one
        return dataset_or_id.source
    if isinstance(dataset_or_id, str):
        try:
            return ir_datasets.load(dataset_or_id)
        except KeyError:
            raise KeyError(f"{dataset_or_id!r} is not an ir_datasets dataset") from None
    if not hasattr(dataset_or_id, "docs_iter"):
        raise TypeError(f"expected an ir_datasets dataset or its id, got {type(dataset_or_id).__name__}")
    return dataset_or_id


def _docs_count(dataset: Any) -> int | None:
    """The dataset's document count when it knows it without reading the corpus, else None."""
    count = getattr(dataset, "docs_count", None)
    if count is None:
        return None
    try:
        n = count()
    except (NotImplementedError, RuntimeError, OSError):
        return None
    return n if isinstance(n, int) else None


def build(
    dataset_or_id: Any,
    path: str | os.PathLike[str],
    *,
    json_fields: Iterable[str] = (),
    progress: bool | None = None,
    **writer_options: Any,
) -> DocStore:
    """Builds a store at ``path`` from the documents of an ir_datasets dataset (an object or its
    id, as ``ir_datasets.load`` takes it); returns it opened.

    Fields and their types come from the dataset's ``docs_cls()`` (see the module's doc), the key
    from ``doc_id``, the documents from ``docs_iter()`` in its order (positions in the store are
    ``docs_iter()`` indices). ``json_fields`` stores chosen fields of other types than ``str`` as JSON
    (for documents whose values their annotation does not allow, such as ``None``). ``progress``
    shows a tqdm bar sized by ``docs_count()`` when known (default: on a terminal). Other options
    go to :class:`docstore.Writer` (``overwrite``, ``level`` ...). A repeated doc id fails the
    build with ``DuplicateKeyError``.
    """
    dataset = _dataset(dataset_or_id)
    if hasattr(dataset, "has_docs") and not dataset.has_docs():
        raise ValueError(f"{dataset!r} provides no documents")
    schema = _Schema.for_build(dataset.docs_cls(), json_fields)
    names, id_index = schema.names, schema.id_index
    stored = [(i, n) for i, n in enumerate(names) if i != id_index]
    json_names, encoders = set(schema.json), schema.encoders
    total = _docs_count(dataset)
    with Writer(path, schema.store_fields, **writer_options) as writer:
        with _progress.bar(total, "docs", progress) as bar:
            docs = iter(dataset.docs_iter())
            while True:
                batch = list(itertools.islice(docs, _BATCH))
                if not batch:
                    break
                columns = list(zip(*batch))
                if len(columns) != len(names) or any(len(d) != len(names) for d in batch):
                    bad = next(d for d in batch if len(d) != len(names))
                    raise SchemaError(f"docs_iter() gave {bad!r:.200}, not a {schema.cls.__name__}")
                ids = list(columns[id_index])
                data = []
                for i, name in stored:
                    column = columns[i]
                    if name in json_names:
                        data.append(_encode(column, ids, name))
                    elif name in encoders:
                        data.append(encoders[name](column, ids))
                    else:
                        data.append(list(column))
                try:
                    writer._add_columns(ids, data)
                except SchemaError as exc:
                    raise type(exc)(_hint(str(exc), schema)) from None
                bar.update(len(batch))
    return open_store(path)


def _encode(column: Sequence[Any], ids: list[Any], name: str) -> list[str]:
    try:
        return list(map(_dumps, column))
    except (TypeError, ValueError):
        for doc_id, value in zip(ids, column):
            try:
                _dumps(value)
            except (TypeError, ValueError) as exc:
                raise SchemaError(f"doc {doc_id!r}: field {name!r} cannot be stored as JSON: {exc}") from None
        raise


def _hint(message: str, schema: _Schema) -> str:
    """The Writer's message about a mistyped value, with the way around it."""
    for name, ty in schema.store_fields.items():
        # the core quotes names with ", the array conversions with '
        named = f'field "{name}" ' in message or f"field '{name}' " in message
        if named and name not in schema.json:
            annotated = f"{schema.cls.__name__} annotates {name!r} as {_type_name(schema.hints[name])}"
            if ty != "str":
                return (
                    f"{message} ({annotated}; if its documents hold other values, pass "
                    f"json_fields=[{name!r}] to store it as JSON)"
                )
            return f"{message} ({annotated}, but its documents hold other values)"
    return message


def load(dataset_or_id: Any, store: Any, *, read: Literal["mmap", "pread"] = "mmap") -> DocstoreDataset:
    """``ir_datasets.load(dataset_id)`` (or the dataset object given) with its documents read from
    ``store`` (a path, or an open :class:`docstore.DocStore`) built by :func:`build`.

    ``read`` is passed to :func:`docstore.open` when ``store`` is a path. The store must have the
    fields of the dataset's ``docs_cls()`` (``SchemaError`` otherwise).
    """
    dataset = _dataset(dataset_or_id, unwrap=True)
    if isinstance(store, DocStore):
        opened = store
    elif isinstance(store, (str, os.PathLike)):
        opened = open_store(store, read=read)
    else:
        raise TypeError(f"store must be a path or a DocStore, got {type(store).__name__}")
    dataset_id = dataset_or_id if isinstance(dataset_or_id, str) else None
    return DocstoreDataset(DocstoreDocs(opened, dataset), dataset, dataset_id)
