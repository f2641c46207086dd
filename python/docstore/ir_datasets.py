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

import base64
import datetime
import enum
import functools
import itertools
import json
import operator
import os
import types
import typing
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Callable

try:
    import ir_datasets
    from ir_datasets.formats import BaseDocs
    from ir_datasets.indices import Docstore as _IrdsDocstore
    from ir_datasets.util import apply_sub_slice, slice_idx
except ImportError as exc:  # pragma: no cover - exercised only without ir_datasets
    raise ImportError(
        "docstore.ir_datasets needs ir_datasets: pip install ir_datasets (or 'docstore[ir_datasets]')"
    ) from exc

from . import _progress
from ._store import DocStore
from ._store import open as open_store
from ._writer import Writer
from .errors import FieldTypeError, SchemaError

__all__ = ["DocstoreDataset", "DocstoreDocs", "DocstoreDocsIter", "DocstoreDocstore", "build", "load"]

# Documents per Writer batch while building.
_BATCH = 4096
# Documents decoded per `take` while iterating: small first (one `next()` or `docs[i]` decodes
# little), growing to _CHUNK.
_FIRST_CHUNK = 16
_CHUNK = 4096
# Annotations a store type holds: scalars, and the items of a list or a tuple of any length.
_NATIVE = {str: "str", int: "int64", float: "float64", bytes: "bytes", bool: "bool"}
_ITEMS = {str: "list[str]", bytes: "list[bytes]", int: "int64[]", float: "float64[]"}

Decoder = Callable[[Any], Any]
# Optional[X] / Union[X, Y], and X | Y (Python 3.10+)
_UNIONS = (typing.Union, getattr(types, "UnionType", typing.Union))


# ---------------------------------------------------------------------------------------------
# Field types: annotations -> store types, and JSON converters for the rest.


def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # a forward reference that does not resolve: the raw annotations
        return dict(getattr(cls, "__annotations__", {}))


def _unannotated(where: str, cls: type) -> SchemaError:
    return SchemaError(
        f"field {where!r} of {cls.__name__} has no type annotation: docstore takes the field types "
        "from the docs class's annotations"
    )


def _is_namedtuple(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, tuple) and hasattr(tp, "_fields")


def _refuse(where: str, tp: Any, why: str) -> SchemaError:
    return SchemaError(f"field {where!r} is annotated {_type_name(tp)}: {why}")


def _type_name(tp: Any) -> str:
    return tp.__name__ if isinstance(tp, type) else str(tp).replace("typing.", "")


def _converter(tp: Any, where: str) -> Decoder | None:
    """What turns the JSON form of a value annotated ``tp`` back into the value; None when the
    JSON value is the value (str, int, float, bool, None and lists / dicts of them)."""
    if tp in (str, int, float, bool, type(None), list, dict):
        return None
    if tp is tuple:
        return tuple
    if tp is bytes:
        return base64.b64decode
    if tp is datetime.datetime:
        return datetime.datetime.fromisoformat
    if tp is datetime.date:
        return datetime.date.fromisoformat
    if tp is datetime.time:
        return datetime.time.fromisoformat
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp
    if _is_namedtuple(tp):
        hints = _hints(tp)
        missing = [f for f in tp._fields if f not in hints]
        if missing:
            raise _unannotated(f"{where}.{missing[0]}", tp)
        convs = [_converter(hints[f], f"{where}.{f}") for f in tp._fields]
        make = tp._make
        if not any(convs):
            return make
        return lambda v: make([x if c is None else c(x) for c, x in zip(convs, v)])
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in _UNIONS:
        options = [a for a in args if a is not type(None)]
        convs = [_converter(a, where) for a in options]
        if not any(convs):
            return None
        if len(options) > 1:
            raise _refuse(where, tp, "a union of types that JSON does not tell apart")
        conv = convs[0]
        assert conv is not None
        return _optional(conv)
    if origin in (list, set, frozenset) or (origin is tuple and (not args or args[-1] is Ellipsis)):
        conv = _converter(args[0], f"{where}[]") if args else None
        return _elements(conv, origin)
    if origin is tuple:  # Tuple[X, Y, Z]
        convs = [_converter(a, f"{where}[{i}]") for i, a in enumerate(args)]
        return lambda v: tuple(x if c is None else c(x) for c, x in zip(convs, v))
    if origin is dict:
        key = args[0] if args else str
        if key not in (str, int, float):
            raise _refuse(where, tp, "JSON object keys can only be str, int or float")
        conv = _converter(args[1], f"{where}[]") if args else None
        if key is str and conv is None:
            return None
        to_key: Callable[[str], Any] = key
        return lambda v: {to_key(k): (x if conv is None else conv(x)) for k, x in v.items()}
    raise _refuse(where, tp, "docstore stores str, int, float, bytes and bool fields, and as JSON "
                  "lists, tuples, dicts, Optional, NamedTuples, enums and datetimes of those")  # fmt: skip


Encoder = Callable[[Sequence[Any], list[Any]], list[Any]]


class _Native(typing.NamedTuple):
    """How a store type holds the values of an annotation."""

    kind: str  # the store type
    decode: Decoder | None  # stored value -> annotated value (None: the same)
    encode: Encoder | None = None  # (column, its ids) -> column the Writer takes (None: as given)


def _native(tp: Any, name: str) -> _Native | None:
    """How a store type holds values annotated ``tp`` (of field ``name``) as they are; None when
    none does (the value is then stored as JSON)."""
    inner = _without_none(tp)
    optional, tp = inner is not tp, inner
    if tp in _NATIVE:
        kind, decode = _NATIVE[tp], None
    else:
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin is list and len(args) == 1:
            item, make = args[0], None
        elif origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            item, make = args[0], tuple
        else:
            return None
        arity = _arity(item)
        if arity:  # Tuple[int, int] items (MS MARCO v2's spans): flat, regrouped on read
            return _grouped(arity, typing.get_args(item)[0], make, optional, name)
        if item not in _ITEMS:
            return None
        kind = _ITEMS[item]
        if kind.endswith("[]"):  # numpy arrays back to the Python numbers docs_iter() gave
            to_list = operator.methodcaller("tolist")
            decode = to_list if make is None else (lambda a: make(a.tolist()))
        else:
            decode = make
    if optional:
        return _Native(f"{kind}?", None if decode is None else _optional(decode))
    return _Native(kind, decode)


def _without_none(tp: Any) -> Any:
    """X for ``Optional[X]``, else ``tp``."""
    if typing.get_origin(tp) in _UNIONS:
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(options) == 1:
            return options[0]
    return tp


def _arity(tp: Any) -> int:
    """k for ``Tuple[X, ..., X]`` (k times) of one numeric X, else 0."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) is not tuple or not args or len(set(args)) != 1:
        return 0
    return len(args) if args[0] in (int, float) else 0


def _grouped(arity: int, item: type, make: Any, optional: bool, name: str) -> _Native:
    """The store type and decoder of a sequence of ``arity``-tuples of ``item``: their elements in
    one flat array, cut back into tuples on read."""
    kind = _ITEMS[item]

    def decode(array: Any) -> Any:
        flat = array.tolist()
        groups = [tuple(flat[i : i + arity]) for i in range(0, len(flat), arity)]
        return groups if make is None else make(groups)

    encode = _flattener(arity, name)
    return _Native(f"{kind}?", _optional(decode), encode) if optional else _Native(kind, decode, encode)


def _flattener(arity: int, name: str) -> Encoder:
    """What turns a column of sequences of ``arity``-tuples into a column of flat lists,
    refusing a tuple of another length (its document could not be cut back as it was)."""

    def flatten(column: Sequence[Any], ids: list[Any]) -> list[Any]:
        out: list[Any] = []
        for doc_id, value in zip(ids, column):
            if value is None:
                out.append(None)
                continue
            try:
                fits = all(len(group) == arity for group in value)
            except TypeError:  # an item without a length
                fits = False
            if not fits:
                raise FieldTypeError(
                    f"doc {doc_id!r}: field {name!r} holds a tuple that is not of {arity} numbers: "
                    f"{value!r:.200} (pass json_fields=[{name!r}] to store it as JSON)"
                )
            out.append([x for group in value for x in group])
        return out

    return flatten


def _optional(conv: Decoder) -> Decoder:
    return lambda v: None if v is None else conv(v)


def _elements(conv: Decoder | None, kind: Callable[[Any], Any]) -> Decoder | None:
    """The converter of a list, tuple, set or frozenset (``kind``) of elements ``conv`` converts."""
    if conv is None:
        return None if kind is list else kind
    return lambda v: kind(map(conv, v))


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, (datetime.date, datetime.time)):  # datetime is a date
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (set, frozenset)):
        try:
            return sorted(value)
        except TypeError:
            return list(value)
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON-encodable")


_dumps = functools.partial(json.dumps, ensure_ascii=False, separators=(",", ":"), default=_json_default)


def _json_decoder(conv: Decoder | None) -> Decoder:
    loads = json.loads
    return loads if conv is None else (lambda s: conv(loads(s)))


class _Schema:
    """How a docs class maps to a store: the store's fields, which of them hold JSON, and the
    functions that turn stored values back into the class's values."""

    def __init__(
        self,
        cls: type,
        store_fields: dict[str, str],
        decoders: dict[str, Decoder],
        encoders: dict[str, Encoder] | None = None,
    ) -> None:
        self.cls = cls
        self.hints = _hints(cls)
        self.names: tuple[str, ...] = tuple(cls._fields)  # type: ignore[attr-defined]
        self.id_index = self.names.index("doc_id")
        self.store_fields = store_fields
        self.json = [n for n, t in store_fields.items() if t == "str" and n in decoders]
        self.decoders = decoders  # field -> stored value -> class value
        self.encoders = encoders or {}  # field -> (column, ids) -> column the Writer takes
        self.row_decoders = [(self.names.index(n), d) for n, d in decoders.items()]

    @staticmethod
    def _check_class(cls: Any) -> dict[str, Any]:
        if not _is_namedtuple(cls):
            raise SchemaError(f"docs_cls() must be a NamedTuple class, got {cls!r}")
        if "doc_id" not in cls._fields:
            raise SchemaError(f"the docs class {cls.__name__} has no doc_id field: {cls._fields}")
        hints = _hints(cls)
        for name in cls._fields:
            if name != "doc_id" and name not in hints:
                raise _unannotated(name, cls)
        return hints

    @classmethod
    def for_build(cls, docs_cls: Any, json_fields: Iterable[str] = ()) -> _Schema:
        hints = cls._check_class(docs_cls)
        json_fields = [json_fields] if isinstance(json_fields, str) else list(json_fields)
        for name in json_fields:
            if name not in docs_cls._fields or name == "doc_id":
                raise SchemaError(f"json_fields names {name!r}, not a field of {docs_cls.__name__}")
            if hints[name] is str:
                # load() could not tell a JSON str field from a plain one
                raise SchemaError(f"field {name!r} is annotated str: it cannot be stored as JSON")
        fields: dict[str, str] = {}
        decoders: dict[str, Decoder] = {}
        encoders: dict[str, Encoder] = {}
        for name in docs_cls._fields:
            if name == "doc_id":
                continue
            tp = hints[name]
            native = _native(tp, name)
            if native is not None and name not in json_fields:
                fields[name] = native.kind
                if native.decode is not None:
                    decoders[name] = native.decode
                if native.encode is not None:
                    encoders[name] = native.encode
            else:
                fields[name] = "str"
                decoders[name] = _json_decoder(_converter(tp, name))
        return cls(docs_cls, fields, decoders, encoders)

    @classmethod
    def for_store(cls, docs_cls: Any, store: DocStore) -> _Schema:
        hints = cls._check_class(docs_cls)
        have = dict(store.fields)
        want = [n for n in docs_cls._fields if n != "doc_id"]
        if sorted(have) != sorted(want):
            raise SchemaError(
                f"the store {os.fspath(store.path)!r} has fields {list(have)}, but {docs_cls.__name__} has "
                f"{want}: it was not built from this dataset's documents"
            )
        decoders: dict[str, Decoder] = {}
        for name in want:
            tp, stored = hints[name], have[name]
            native = _native(tp, name)
            if native is not None and stored == native.kind:
                if native.decode is not None:
                    decoders[name] = native.decode
            elif tp is bool and stored == "int64":  # how stores before version 4 held bool
                decoders[name] = bool
            elif stored == "str" and tp is not str:  # JSON (the annotation's choice or json_fields)
                decoders[name] = _json_decoder(_converter(tp, name))
            else:
                raise SchemaError(
                    f"the store's field {name!r} is {stored}, which does not hold the "
                    f"{_type_name(tp)} values of {docs_cls.__name__}.{name}"
                )
        return cls(docs_cls, have, decoders)

    def make(self, rows: list[Any]) -> list[Any]:
        """Instances of the docs class from tuples of stored values in its field order."""
        new = functools.partial(tuple.__new__, self.cls)
        if not self.row_decoders:
            return list(map(new, rows))
        out: list[Any] = []
        decoders = self.row_decoders
        for row in rows:
            values = list(row)
            for i, decode in decoders:
                values[i] = decode(values[i])
            out.append(new(values))
        return out


# ---------------------------------------------------------------------------------------------
# Building.


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


# ---------------------------------------------------------------------------------------------
# Serving: the docs handler, its docstore and its docs_iter().


class DocstoreDocsIter:
    """What ``docs_iter()`` returns: an iterator over the documents that also takes
    ``[index]`` and ``[start:stop:step]`` as ir_datasets' own docs iterators do (slices give
    another such iterator, floats in a slice are fractions of the collection), decoding a chunk
    of documents at a time. Indexing is relative to what is left: after ``next()``, ``[0]`` is the
    next document."""

    def __init__(self, docs: DocstoreDocs, where: slice) -> None:
        self._docs = docs
        self._slice = where
        self._buffer: list[Any] = []
        self._next = 0
        self._chunk = _FIRST_CHUNK

    def __iter__(self) -> DocstoreDocsIter:
        return self

    def __next__(self) -> Any:
        if self._next >= len(self._buffer):
            start, stop, step = self._slice.start, self._slice.stop, self._slice.step or 1
            if start >= stop:
                raise StopIteration
            positions = range(start, min(stop, start + step * self._chunk), step)
            self._chunk = min(self._chunk * 2, _CHUNK)
            self._buffer = self._docs._take(positions)
            self._next = 0
        doc = self._buffer[self._next]
        self._next += 1
        s = self._slice
        self._slice = slice(s.start + (s.step or 1), s.stop, s.step)
        return doc

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            new = apply_sub_slice(self._slice, key)  # ir_datasets' own slice arithmetic
            # ...kept within this iterator (ir_datasets would read before its start)
            start = max(new.start, self._slice.start)
            return DocstoreDocsIter(self._docs, slice(start, min(new.stop, self._slice.stop), new.step))
        if isinstance(key, bool) or not hasattr(key, "__index__"):
            raise TypeError("key must be int or slice")
        one = slice_idx(self._slice, operator.index(key))
        if not (self._slice.start <= one.start < one.stop):
            raise IndexError(f"document index {key} out of range")
        return self._docs._take(range(one.start, one.start + 1))[0]

    def __repr__(self) -> str:
        s = self._slice
        return f"<DocstoreDocsIter {os.fspath(self._docs._store.path)!r} [{s.start}:{s.stop}:{s.step or 1}]>"


class DocstoreDocstore(_IrdsDocstore):
    """What ``docs_store()`` returns: ir_datasets' docstore API over a docstore store.

    ``get(doc_id, field=None)`` raises ``KeyError('doc_id=... not found')`` for a missing id, as
    ir_datasets does; ``get_many(doc_ids, field=None)`` returns a dict without the missing ids,
    in request order (ir_datasets' lz4 store gives file order; the dicts compare equal);
    ``get_many_iter(doc_ids)`` yields one document per id found, repeats too. One str given as
    ``doc_ids`` is one id, as in ir_datasets' lz4 store. Lookups of many ids are one batched,
    parallel read.
    """

    def __init__(self, docs: DocstoreDocs) -> None:
        super().__init__(docs._schema.cls, "doc_id")
        self._docs = docs
        self._store = docs._store
        self.path = os.fspath(docs._store.path)

    def _field(self, field: str) -> Decoder | None:
        if field not in self._docs._schema.names:
            raise ValueError(f"{self._docs._schema.cls.__name__} has no field {field!r}")
        return self._docs._schema.decoders.get(field)

    def get(self, doc_id: str, field: str | None = None) -> Any:
        if field is not None:
            decode = self._field(field)
            value = self._store.get(doc_id, _MISSING, field=field)
            if value is _MISSING:
                raise KeyError(f"doc_id={doc_id} not found")
            return value if decode is None else decode(value)
        row = self._store.get(doc_id, None, fields=self._docs._schema.names)
        if row is None:
            raise KeyError(f"doc_id={doc_id} not found")
        return self._docs._schema.make([row])[0]

    def get_many(self, doc_ids: Iterable[str], field: str | None = None) -> dict[str, Any]:
        ids = [doc_ids] if isinstance(doc_ids, str) else doc_ids
        if field is not None:
            decode = self._field(field)
            found = self._store.get_many(ids, field=field)
            return found if decode is None else {k: decode(v) for k, v in found.items()}
        found = self._store.get_many(ids, fields=self._docs._schema.names)
        return dict(zip(found, self._docs._schema.make(list(found.values()))))

    def get_many_iter(self, doc_ids: Iterable[str]) -> Iterator[Any]:
        ids = [doc_ids] if isinstance(doc_ids, str) else doc_ids
        rows = self._store.get_many_iter(ids, fields=self._docs._schema.names)
        make = self._docs._schema.make
        while True:
            chunk = list(itertools.islice(rows, _CHUNK))
            if not chunk:
                return
            yield from make(chunk)

    def __iter__(self) -> DocstoreDocsIter:
        return self._docs.docs_iter()

    def __len__(self) -> int:
        return len(self._store)

    def count(self) -> int:
        return len(self._store)

    def built(self) -> bool:
        return True

    def build(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"<DocstoreDocstore {self.path!r}: {len(self._store)} {self._docs._schema.cls.__name__}>"


_MISSING = object()


class DocstoreDocs(BaseDocs):
    """The docs handler of a :class:`DocstoreDataset`: ``docs_iter()``, ``docs_store()``,
    ``docs_count()``, ``docs_cls()`` over a store; language and namespace are the dataset's."""

    def __init__(self, store: DocStore, dataset: Any) -> None:
        self._store = store
        self._dataset = dataset
        self._schema = _Schema.for_store(dataset.docs_cls(), store)
        self._docstore: DocstoreDocstore | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (DocstoreDocs, (self._store, self._dataset))

    def _take(self, positions: range) -> list[Any]:
        return self._schema.make(self._store.take(positions, fields=self._schema.names))

    def docs_iter(self) -> DocstoreDocsIter:
        return DocstoreDocsIter(self, slice(0, len(self._store), 1))

    def docs_count(self) -> int:
        return len(self._store)

    def docs_cls(self) -> type:
        return self._schema.cls

    def docs_store(self, field: str = "doc_id", options: Any = None) -> DocstoreDocstore:
        if field != "doc_id":
            raise ValueError(f"a docstore store is looked up by doc_id, not by {field!r}")
        if self._docstore is None:
            self._docstore = DocstoreDocstore(self)
        return self._docstore

    def docs_handler(self) -> DocstoreDocs:
        return self

    def docs_lang(self) -> Any:
        lang = getattr(self._dataset, "docs_lang", None)
        return lang() if lang is not None else None

    def docs_namespace(self) -> Any:
        namespace = getattr(self._dataset, "docs_namespace", None)
        return namespace() if namespace is not None else None


class DocstoreDataset(ir_datasets.Dataset):
    """``ir_datasets.load(dataset_id)`` with its documents served from a store: an
    ``ir_datasets.Dataset`` whose docs handler is a :class:`DocstoreDocs` and whose every other
    attribute (queries, qrels, scoreddocs, docpairs, metadata, dataset_id ...) is the real
    dataset's. ``.docstore`` is the open :class:`docstore.DocStore`, ``.source`` the real dataset.
    """

    def __init__(self, docs: DocstoreDocs, dataset: Any, dataset_id: str | None = None) -> None:
        super().__init__(docs, dataset)
        self._dataset_id = dataset_id

    def __reduce_ex__(self, protocol: Any) -> Any:
        # Loaded by id: pickles as the id and the store (which pickles as its path), so that
        # DataLoader workers can receive it (ir_datasets' registered datasets do not pickle).
        if self._dataset_id is not None:
            return (load, (self._dataset_id, self.docstore))
        return super().__reduce_ex__(protocol)

    def __setstate__(self, state: Any) -> None:
        super().__setstate__(state)
        self._beta_apis: dict[str, Any] = {}  # which ir_datasets' own __setstate__ leaves out
        self._dataset_id = None

    @property
    def docstore(self) -> DocStore:
        return self._constituents[0]._store  # type: ignore[no-any-return]

    @property
    def source(self) -> Any:
        return self._constituents[1]

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]}, docstore={os.fspath(self.docstore.path)!r})"


def load(dataset_or_id: Any, store: Any, *, read: str = "mmap") -> DocstoreDataset:
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
