"""How ``docstore.ir_datasets`` stores a docs class: its annotations as field types, the
converters that turn stored values back into the annotated types, and the JSON codecs of the
fields no store type holds (``_Schema`` puts them together)."""

from __future__ import annotations

import base64
import datetime
import enum
import functools
import json
import operator
import os
import types
import typing
from collections.abc import Iterable, Sequence
from typing import Any, Callable

from .._store import DocStore
from ..errors import FieldTypeError, SchemaError

# Annotations a store type holds: scalars, and the items of a list or a tuple of any length.
_NATIVE = {str: "str", int: "int64", float: "float64", bytes: "bytes", bool: "bool"}
_ITEMS = {str: "list[str]", bytes: "list[bytes]", int: "int64[]", float: "float64[]"}

Decoder = Callable[[Any], Any]
# Optional[X] / Union[X, Y], and X | Y (Python 3.10+)
_UNIONS = (typing.Union, getattr(types, "UnionType", typing.Union))


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
        make: Decoder = tp._make
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
