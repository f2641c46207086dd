"""docstore.ir_datasets against ir_datasets itself, on datasets registered from local files
(nothing is downloaded): the same documents, types and errors through every API."""

import datetime
import enum
import logging
import pickle
import random
import subprocess
import sys
import textwrap
import typing
from typing import Any, Dict, List, NamedTuple, Optional, Tuple, Union

import pytest

import docstore
import docstore.cli

ir_datasets = pytest.importorskip("ir_datasets")
from ir_datasets.formats import BaseDocs, TrecQrels, TrecQuery, TsvDocs, TsvQueries  # noqa: E402
from ir_datasets.indices import PickleLz4FullStore  # noqa: E402
from ir_datasets.util import LocalDownload  # noqa: E402

import docstore.ir_datasets as dsi  # noqa: E402 - after the skip

logging.getLogger("ir_datasets").setLevel(logging.WARNING)

N_DOCS = 300
TSV = "docstore-test/tsv"
RICH = "docstore-test/rich"


def _doc_id(i: int) -> str:
    return ["doc", "D-", "msmarco_passage_", "é"][i % 4] + str(i * 7919 % 10_000)


def _register(name: str, dataset: Any) -> None:
    try:
        ir_datasets.load(name)
    except KeyError:
        ir_datasets.registry.register(name, dataset)


@pytest.fixture(scope="module")
def tsv_dir(tmp_path_factory):
    """A corpus, queries (TREC-style: title, description, narrative) and qrels in local files,
    registered as ``docstore-test/tsv`` with ir_datasets' own TSV / TREC handlers."""
    root = tmp_path_factory.mktemp("irds")
    rng = random.Random(7)
    words = ["ünïcode", "passage", "ranker", "the", "of", "retrieval", '"quoted"', "über", "日本"]
    with open(root / "docs.tsv", "w", encoding="utf-8") as f:
        for i in range(N_DOCS):
            text = " ".join(rng.choice(words) for _ in range(rng.randrange(1, 40)))
            f.write(f"{_doc_id(i)}\t{text}\n")
    with open(root / "queries.tsv", "w", encoding="utf-8") as f, open(root / "qrels", "w") as g:
        for q in range(40):
            f.write(f"q{q}\twhat about {q}\tdescription {q}\tnarrative {q}\n")
            for k in range(3):
                g.write(f"q{q} 0 {_doc_id((q * 7 + k * 31) % N_DOCS)} {(q + k) % 3}\n")
    dataset = ir_datasets.Dataset(
        TsvDocs(LocalDownload(root / "docs.tsv"), lang="en"),
        TsvQueries(LocalDownload(root / "queries.tsv"), query_cls=TrecQuery),
        TrecQrels(LocalDownload(root / "qrels"), {0: "not", 1: "relevant", 2: "highly"}),
    )
    _register(TSV, dataset)
    return root


@pytest.fixture(scope="module")
def tsv_store(tsv_dir):
    return dsi.build(TSV, tsv_dir / "docs.docstore", progress=False)


@pytest.fixture()
def pair(tsv_store):
    """The real ir_datasets dataset (its lz4 docstore built) and docstore's."""
    real = ir_datasets.load(TSV)
    real.docs_store().build()
    return real, dsi.load(TSV, store=tsv_store.path)


# ---------------------------------------------------------------------------------------------
# A dataset with every kind of field ir_datasets' document classes have.


class Mode(enum.Enum):
    TEXT = 1
    IMAGE = 2


class Span(NamedTuple):
    start: int
    end: int
    label: Optional[str]


class Anchor(NamedTuple):  # as KILT's KiltDocAnchor
    text: str
    href: str
    paragraph_id: int


class RichDoc(NamedTuple):
    doc_id: str
    text: str
    year: int
    score: float
    png: bytes
    clicked: bool
    authors: List[str]
    spans: Tuple[Span, ...]
    pairs: Tuple[Tuple[int, int], ...]
    title: Optional[str]
    counts: Optional[Dict[str, int]]
    by_year: Dict[int, List[float]]
    when: datetime.datetime
    mode: Optional[Mode]
    blobs: List[bytes]
    pieces: Tuple[str, ...]
    tokens: List[int]
    weights: Tuple[float, ...]
    years: Optional[List[int]]
    tags: Optional[Tuple[str, ...]]
    views: Optional[int]
    quality: Optional[float]
    seen: Optional[bool]
    raw: Optional[bytes]
    anchors: Tuple[Anchor, ...]
    boxes: Optional[List[Tuple[float, float, float]]]

    def default_text(self) -> str:
        return self.text


def _rich_docs(n: int) -> list[RichDoc]:
    rng = random.Random(3)
    docs = []
    for i in range(n):
        docs.append(
            RichDoc(
                doc_id=f"r{i}",
                text=f"rich text {i} ünï",
                year=1990 + i % 30,
                score=rng.random() * 10 ** rng.randrange(-5, 5),
                png=bytes(rng.randrange(256) for _ in range(i % 9)),
                clicked=i % 3 == 0,
                authors=[f"author {j}" for j in range(i % 4)],
                spans=tuple(Span(j, j + 3, None if j % 2 else f"l{j}") for j in range(i % 3)),
                pairs=tuple((j, -j) for j in range(i % 5)),
                title=None if i % 4 == 0 else f"title {i}",
                counts=None if i % 5 == 0 else {"a": i, "b": -i},
                by_year={2000 + j: [j / 3, float(i)] for j in range(i % 3)},
                when=datetime.datetime(2020, 1, 1 + i % 28, i % 24, tzinfo=datetime.timezone.utc),
                mode=[None, Mode.TEXT, Mode.IMAGE][i % 3],
                blobs=[b"\x00\xff", bytes([i % 256])],
                pieces=tuple(f"piece {j}" for j in range(i % 3)),
                tokens=[rng.randrange(-(2**40), 2**40) for _ in range(i % 6)],
                weights=tuple(rng.random() for _ in range(i % 4)),
                years=None if i % 3 == 1 else [2000 + j for j in range(i % 4)],
                tags=None if i % 2 else tuple(f"t{j}" for j in range(i % 5)),
                views=None if i % 7 == 0 else i * 1000,
                quality=None if i % 6 == 0 else i / 7,
                seen=[None, True, False][i % 3],
                raw=None if i % 2 else bytes([i % 256]) * (i % 4),
                anchors=tuple(Anchor(f"a{j}", f"https://x/{j}", j) for j in range(i % 3)),
                boxes=None if i % 5 == 2 else [(j / 2, -1.5, rng.random()) for j in range(i % 3)],
            )
        )
    return docs


class ListDocs(BaseDocs):
    """Documents held in a list, with ir_datasets' lz4 docstore beside them (as its datasets set
    one up), so that ``docs[i]`` and ``lookup`` work on the real side too."""

    def __init__(self, docs: list, cls: type, path: str) -> None:
        self._docs, self._cls, self._path = docs, cls, path

    def docs_iter(self):
        return iter(self.docs_store())

    def docs_cls(self):
        return self._cls

    def docs_count(self):
        return len(self._docs)

    def docs_store(self, field="doc_id", options=None):
        return PickleLz4FullStore(
            path=self._path,
            init_iter_fn=lambda: iter(self._docs),
            data_cls=self._cls,
            lookup_field=field,
            index_fields=[field],
        )


@pytest.fixture(scope="module")
def rich(tmp_path_factory):
    root = tmp_path_factory.mktemp("rich")
    _register(RICH, ir_datasets.Dataset(ListDocs(_rich_docs(200), RichDoc, str(root / "rich.pklz4"))))
    store = dsi.build(RICH, root / "rich.docstore", progress=False)
    return ir_datasets.load(RICH), dsi.load(RICH, store=store)


def same(a: Any, b: Any) -> bool:
    """Equal values of the same types, all the way down."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def same_dict(a: dict, b: dict) -> bool:
    """Same keys and values; the order may differ (ir_datasets' lz4 store gives file order)."""
    return sorted(a) == sorted(b) and all(same(a[k], b[k]) for k in a)


# ---------------------------------------------------------------------------------------------
# build


def test_build_takes_fields_ids_and_order_from_the_dataset(tsv_store):
    real = ir_datasets.load(TSV)
    assert tsv_store.fields == {"text": "str"}
    assert len(tsv_store) == N_DOCS
    assert [(d.doc_id, d.text) for d in tsv_store.values()] == [tuple(d) for d in real.docs_iter()]


def test_build_maps_annotations_to_field_types(rich):
    _, ours = rich
    assert ours.docstore.fields == {
        "text": "str",
        "year": "int64",
        "score": "float64",
        "png": "bytes",
        "clicked": "bool",
        "authors": "list[str]",
        "title": "str?",
        "mode": "str",
        "blobs": "list[bytes]",
        "pieces": "list[str]",
        "tokens": "int64[]",
        "weights": "float64[]",
        "years": "int64[]?",
        "tags": "list[str]?",
        "views": "int64?",
        "quality": "float64?",
        "seen": "bool?",
        "raw": "bytes?",
        "pairs": "int64[]",  # flat: (0, 0), (1, -1) as [0, 0, 1, -1]
        "boxes": "float64[]?",
        # no store type holds these: JSON
        **dict.fromkeys(["spans", "counts", "by_year", "when", "anchors"], "str"),
    }
    raw = ours.docstore.at(1)  # what the store holds
    assert raw.spans == '[[0,3,"l0"]]' and raw.title == "title 1" and raw.mode == "1"
    assert raw.anchors == '[["a0","https://x/0",0]]' and raw.authors == ["author 0"]
    assert raw.tokens.dtype == "int64" and raw.years is None and raw.clicked is False
    assert ours.docstore.at(0).title is None and ours.docstore.at(2).pairs.tolist() == [0, 0, 1, -1]


def test_stores_of_the_importer_before_native_types_load_as_before(tmp_path, rich):
    """bool as int64, lists and Optional as JSON in str fields: the layout of stores built before
    version 4 types; load decodes them to the same documents."""
    real, _ = rich
    hints = typing.get_type_hints(RichDoc)
    old = {str: "str", int: "int64", float: "float64", bytes: "bytes", bool: "int64"}
    fields = {name: old.get(hints[name], "str") for name in RichDoc._fields[1:]}
    with docstore.Writer(tmp_path / "old.docstore", fields, format_version=3) as writer:
        for doc in _rich_docs(200):
            values = {
                name: dsi._dumps(value) if kind == "str" and hints[name] is not str else value
                for (name, kind), value in zip(fields.items(), doc[1:])
            }
            writer.add(doc.doc_id, **values)
    store = docstore.open(tmp_path / "old.docstore")
    assert store.info()["format_version"] == 3 and store.fields["clicked"] == "int64"
    assert store.fields["authors"] == store.fields["title"] == "str"
    loaded = dsi.load(RICH, store=store)
    assert same(list(loaded.docs_iter()), list(real.docs_iter()))
    assert loaded.docs_store().get("r6", "clicked") is True and loaded.docs_store().get("r4", "title") is None


def test_build_shows_progress_sized_by_docs_count(tmp_path, rich, capsys):
    dsi.build(RICH, tmp_path / "p.docstore", progress=True)
    assert "200/200" in capsys.readouterr().err


def test_build_with_progress_and_no_stderr_draws_nothing(tmp_path, rich, monkeypatch):
    monkeypatch.setattr(sys, "stderr", None)  # pythonw, some services: tqdm would raise
    assert len(dsi.build(RICH, tmp_path / "p.docstore", progress=True)) == 200


def test_build_accepts_a_dataset_object_and_writer_options(tmp_path, tsv_dir):
    store = dsi.build(ir_datasets.load(TSV), tmp_path / "s", level=-1)
    assert store.info()["codec"] == "none" and len(store) == N_DOCS
    with pytest.raises(docstore.StoreExistsError):
        dsi.build(TSV, tmp_path / "s")
    assert len(dsi.build(TSV, tmp_path / "s", overwrite=True, level=0)) == N_DOCS


def test_build_refuses_what_it_cannot_store_faithfully(tmp_path):
    from collections import namedtuple

    class AnyDoc(NamedTuple):
        doc_id: str
        meta: Any

    class UnionDoc(NamedTuple):
        doc_id: str
        value: Optional[Tuple[int, ...]]
        other: List[Tuple[int, bytes]]  # fine
        mixed: Union[Tuple[bytes, ...], List[datetime.date]]

    class NoIdDoc(NamedTuple):
        id: str
        text: str

    class KeyDoc(NamedTuple):
        doc_id: str
        table: Dict[Tuple[int, int], str]

    untyped = namedtuple("Untyped", ["doc_id", "text"])
    cases = [(AnyDoc, "'meta'"), (UnionDoc, "'mixed'"), (NoIdDoc, "doc_id"), (KeyDoc, "'table'")]
    cases.append((untyped, "'text'"))
    for cls, named in cases:
        dataset = ir_datasets.Dataset(ListDocs([], cls, str(tmp_path / "x.pklz4")))
        with pytest.raises(docstore.SchemaError, match=named):
            dsi.build(dataset, tmp_path / "never")
        assert not (tmp_path / "never").exists()


@pytest.mark.skipif(sys.version_info < (3, 10), reason="X | Y annotations")
def test_pep_604_unions_and_builtin_generics(tmp_path):
    namespace: dict = {}
    exec(
        "from typing import NamedTuple\n"
        "class Doc(NamedTuple):\n"
        "    doc_id: str\n"
        "    n: int | None\n"
        "    spans: tuple[tuple[int, int], ...] | None\n"
        "    tags: list[str]\n",
        namespace,
    )
    cls = namespace["Doc"]
    docs = [cls("a", None, ((1, 2),), ["x"]), cls("b", 3, None, [])]
    dataset = ir_datasets.Dataset(ListDocs(docs, cls, str(tmp_path / "p.pklz4")))
    store = dsi.build(dataset, tmp_path / "p")
    assert store.fields == {"n": "int64?", "spans": "int64[]?", "tags": "list[str]"}
    assert same(list(dsi.load(dataset, store=store).docs_iter()), docs)


class Scidoc(NamedTuple):
    doc_id: str
    year: int
    flag: bool


def test_json_fields_store_values_the_annotation_does_not_allow(tmp_path, tsv_dir):
    docs = [Scidoc("a", 2001, True), Scidoc("b", None, False), Scidoc("c", "n/a", True)]  # type: ignore[arg-type]
    dataset = ir_datasets.Dataset(ListDocs(docs, Scidoc, str(tmp_path / "s.pklz4")))
    with pytest.raises(docstore.FieldTypeError, match=r"json_fields=\['year'\]"):
        dsi.build(dataset, tmp_path / "plain")
    assert not (tmp_path / "plain").exists()
    store = dsi.build(dataset, tmp_path / "json", json_fields=["year"])
    assert store.fields == {"year": "str", "flag": "bool"}
    loaded = dsi.load(dataset, store=store)
    assert same(list(loaded.docs_iter()), docs)
    with pytest.raises(docstore.SchemaError, match="annotated str"):
        dsi.build(ir_datasets.load(TSV), tmp_path / "t", json_fields=["text"])
    with pytest.raises(docstore.SchemaError, match="'nope'"):
        dsi.build(dataset, tmp_path / "t", json_fields=["nope"])


class SpanDoc(NamedTuple):
    doc_id: str
    spans: Tuple[Tuple[int, int], ...]


def test_tuples_of_numbers_that_do_not_fit_their_annotation(tmp_path):
    for k, bad in enumerate((((1, 2), (3,)), ((1, 2.5),), ((1, 2), 3))):
        docs = [SpanDoc("a", ((0, 1),)), SpanDoc("b", bad)]
        dataset = ir_datasets.Dataset(ListDocs(docs, SpanDoc, str(tmp_path / f"s{k}.pklz4")))
        with pytest.raises(docstore.FieldTypeError, match=r"doc 'b': field 'spans'.*json_fields=\['spans'\]"):
            dsi.build(dataset, tmp_path / "never")
        assert not (tmp_path / "never").exists()
        if k == 2:  # a bare 3 where the annotation says a tuple: JSON keeps it, load cannot
            continue
        store = dsi.build(dataset, tmp_path / "json", json_fields=["spans"], overwrite=True)
        assert store.fields == {"spans": "str"}
        assert same(list(dsi.load(dataset, store=store).docs_iter()), docs)


def test_build_fails_on_a_repeated_doc_id(tmp_path):
    docs = [Scidoc("a", 1, True), Scidoc("b", 2, True), Scidoc("a", 3, False)]
    dataset = ir_datasets.Dataset(ListDocs(docs, Scidoc, str(tmp_path / "d.pklz4")))
    with pytest.raises(docstore.DuplicateKeyError):
        dsi.build(dataset, tmp_path / "dup")


def test_unknown_dataset_id():
    with pytest.raises(KeyError, match="not an ir_datasets dataset"):
        dsi.build("docstore-test/no-such-dataset", "never")
    with pytest.raises(KeyError):
        dsi.load("docstore-test/no-such-dataset", store="never")


# ---------------------------------------------------------------------------------------------
# load: every API against the real dataset


def test_load_is_an_ir_datasets_dataset_with_everything_else_passed_through(pair):
    real, ours = pair
    assert isinstance(ours, ir_datasets.Dataset)
    assert ours.dataset_id() == real.dataset_id() == TSV
    assert ours.has_docs() and ours.has_queries() and ours.has_qrels() and not ours.has_scoreddocs()
    assert ours.docs_cls() is real.docs_cls() and ours.docs.type is real.docs.type
    assert ours.docs_lang() == real.docs_lang() == "en" and ours.docs.lang == "en"
    assert ours.docs_count() == real.docs_count() == len(ours.docs) == len(real.docs) == N_DOCS
    assert list(ours.queries_iter()) == list(real.queries_iter())
    assert list(ours.qrels_iter()) == list(real.qrels_iter()) and ours.qrels_defs() == real.qrels_defs()
    assert ours.qrels.asdict() == real.qrels_dict() and ours.queries.lookup("q3") == real.queries.lookup("q3")
    assert ours.docstore is ours.docs_handler()._store and ours.source.dataset_id() == TSV
    assert "docstore=" in repr(ours) and "provides=['docs', 'queries', 'qrels']" in repr(ours)


def test_lookup_and_docs_store_mirror_ir_datasets(pair, rich):
    for real, ours in (pair, rich):
        ids = [d.doc_id for d in real.docs_iter()]
        picked = [ids[5], "missing", ids[0], ids[5], ids[-1]]
        for doc_id in (ids[0], ids[17], ids[-1]):
            a, b = real.docs.lookup(doc_id), ours.docs.lookup(doc_id)
            assert same(a, b) and type(b) is real.docs_cls()
            assert same(real.docs_store().get(doc_id), ours.docs_store().get(doc_id))
            assert same(real.docs_store().get(doc_id, "text"), ours.docs_store().get(doc_id, "text"))
        assert same_dict(real.docs.lookup(picked), ours.docs.lookup(picked))
        assert list(ours.docs.lookup(picked)) == [ids[5], ids[0], ids[-1]]  # request order
        assert same_dict(real.docs_store().get_many(picked), ours.docs_store().get_many(picked))
        for field in real.docs_cls()._fields:
            assert same_dict(
                real.docs_store().get_many(picked, field), ours.docs_store().get_many(picked, field)
            )
            assert same(real.docs_store().get(ids[3], field), ours.docs_store().get(ids[3], field))
        key = ids.index
        for a, b in (
            (real.docs_store().get_many_iter(picked), ours.docs_store().get_many_iter(picked)),
            (real.docs.lookup_iter(picked), ours.docs.lookup_iter(picked)),
        ):
            assert same(sorted(a, key=lambda d: key(d.doc_id)), sorted(b, key=lambda d: key(d.doc_id)))
        assert ours.docs.lookup([]) == real.docs.lookup([]) == {}
        assert ours.docs.lookup(["missing"]) == real.docs.lookup(["missing"]) == {}
        assert same(ours.docs_store().get_many(ids[2]), real.docs_store().get_many(ids[2]))  # one str id
        for lookup in (lambda d: d.docs.lookup("missing"), lambda d: d.docs_store().get("missing", "text")):
            with pytest.raises(KeyError) as theirs:
                lookup(real)
            with pytest.raises(KeyError) as mine:
                lookup(ours)
            assert str(mine.value) == str(theirs.value) == "'doc_id=missing not found'"
        with pytest.raises(ValueError):
            real.docs_store().get(ids[0], "nope")
        with pytest.raises(ValueError, match="no field 'nope'"):
            ours.docs_store().get(ids[0], "nope")
        store = ours.docs_store()
        assert store is ours.docs_store() and store.built() and store.count() == len(ids)
        assert isinstance(store, ir_datasets.indices.Docstore)


def test_positions_slices_and_iteration_mirror_ir_datasets(pair, rich):
    for real, ours in (pair, rich):
        n = len(real.docs)
        assert same(list(ours.docs), list(real.docs)) and same(list(ours.docs_iter()), list(real.docs_iter()))
        for i in (0, 1, 17, n - 1, -1, -2, -n):
            assert same(ours.docs[i], real.docs[i]), i
        for key in (
            slice(10, 20),
            slice(None, 5),
            slice(-5, None),
            slice(None, -3),
            slice(3, None, 7),
            slice(n - 2, n + 10),
            slice(20, 10),
            slice(0.25, 0.5),
            slice(None, 0.1),
        ):
            a, b = real.docs[key], ours.docs[key]
            assert same(list(b), list(a)), key
        assert same(list(ours.docs_iter()[10:50][5:10]), list(real.docs_iter()[10:50][5:10]))
        assert same(ours.docs_iter()[10:50][-1], real.docs_iter()[10:50][-1])
        for it_real, it_ours in ((real.docs_iter(), ours.docs_iter()), (real.docs[4:40], ours.docs[4:40])):
            for _ in range(3):
                assert same(next(it_ours), next(it_real))
            assert same(it_ours[0], it_real[0]) and same(list(it_ours[2:5]), list(it_real[2:5]))
            assert same(list(it_ours), list(it_real))
        for bad in (n, n + 5):
            with pytest.raises(IndexError):
                real.docs[bad]
            with pytest.raises(IndexError):
                ours.docs[bad]
        with pytest.raises(IndexError):  # ir_datasets reads past the start here
            ours.docs[-n - 1]
        for bad_key in ("a", 1.5):
            with pytest.raises(TypeError):
                ours.docs[bad_key]
        with pytest.raises(ValueError):
            ours.docs[::-1]


def test_rich_documents_come_back_with_their_types(rich):
    _, ours = rich
    docs = _rich_docs(200)
    assert same(list(ours.docs_iter()), docs)
    doc = ours.docs.lookup("r7")
    assert isinstance(doc.spans[0], Span) and isinstance(doc.pairs, tuple) and isinstance(doc.pairs[0], tuple)
    assert doc.mode is Mode.TEXT and doc.when.tzinfo is not None and doc.clicked is False
    assert ours.docs_store().get("r6", "clicked") is True and ours.docs_store().get("r6", "mode") is None


def _real_classes_docs(n: int) -> dict:
    """Documents of ir_datasets' own classes with native field types, as their parsers give."""
    from ir_datasets.datasets.beir import BeirSciDoc
    from ir_datasets.datasets.kilt import KiltDoc, KiltDocAnchor
    from ir_datasets.datasets.msmarco_passage_v2 import MsMarcoV2Passage
    from ir_datasets.datasets.trec_fair import FairTrec2022Doc

    rng = random.Random(11)

    def words(k: int) -> list[str]:
        return [f"w{rng.randrange(100)} ü" for _ in range(k)]

    def fair(i: int) -> Any:
        # the *_category fields and the like: Optional[str]
        values = [None if (i + j) % 3 == 0 else f"v{j}" for j in range(len(FairTrec2022Doc._fields))]
        return FairTrec2022Doc._make(values)._replace(
            doc_id=f"f{i}", title=f"t{i}", text=f"x{i}", url="u",
            pred_qual=None if i % 2 else i / 3, page_countries=None if i % 3 else words(i % 4),
            source_countries=None if i % 4 else {"FR": i}, years=None if i % 5 == 1 else [1900 + i, 2000],
            num_sitelinks=None if i % 2 else i, relative_pageviews=None if i % 3 == 1 else 0.5 * i,
            gender=words(1), occupations=[], source_subcont_regions=None,
            page_subcont_regions=None if i % 2 else ["Europe"],
        )  # fmt: skip

    return {
        BeirSciDoc: [BeirSciDoc(f"b{i}", "t", "ti", words(i % 3), 2000 + i, words(2), []) for i in range(n)],
        KiltDoc: [
            KiltDoc(
                f"k{i}",
                "title",
                "text",
                tuple(words(i % 4)),
                tuple(KiltDocAnchor("a", "https://h", j, j, j + 4) for j in range(i % 3)),
                tuple(words(1)),
                "Q1",
                "1",
                "2020",
                "0",
                "3",
                "https://k",
            )
            for i in range(n)
        ],
        MsMarcoV2Passage: [
            MsMarcoV2Passage(f"m{i}", "text", tuple((j * 9, j * 9 + 8) for j in range(i % 4)), f"doc_{i}")
            for i in range(n)
        ],
        FairTrec2022Doc: [fair(i) for i in range(n)],
    }


def test_ir_datasets_own_document_classes_round_trip(tmp_path):
    """BEIR SciDocs, KILT, MS MARCO v2 passages and TREC Fair 2022 documents: native fields, and
    the same documents as ir_datasets' own docstore gives."""
    kinds = {
        "BeirSciDoc": {"authors": "list[str]", "year": "int64", "cited_by": "list[str]"},
        "KiltDoc": {"text_pieces": "list[str]", "anchors": "str", "categories": "list[str]"},
        "MsMarcoV2Passage": {"spans": "int64[]"},
        "FairTrec2022Doc": {
            "pred_qual": "float64?",
            "qual_cat": "str?",
            "page_countries": "list[str]?",
            "source_countries": "str",
            "years": "int64[]?",
            "num_sitelinks": "int64?",
        },
    }
    for cls, docs in _real_classes_docs(40).items():
        real = ir_datasets.Dataset(ListDocs(docs, cls, str(tmp_path / f"{cls.__name__}.pklz4")))
        store = dsi.build(real, tmp_path / f"{cls.__name__}.docstore")
        assert kinds[cls.__name__].items() <= store.fields.items(), (cls, store.fields)
        ours = dsi.load(real, store=store)
        assert same(list(ours.docs_iter()), list(real.docs_iter()))
        ids = [d.doc_id for d in docs]
        assert same_dict(ours.docs_store().get_many(ids[::3]), real.docs_store().get_many(ids[::3]))
        for field in cls._fields:
            assert same(ours.docs_store().get(ids[7], field), real.docs_store().get(ids[7], field)), field


def test_load_takes_a_dataset_object_and_an_open_store(tsv_store):
    real = ir_datasets.load(TSV)
    ours = dsi.load(real, tsv_store)
    assert ours.docstore is tsv_store and ours.source is real
    assert ours.docs.lookup(_doc_id(3)).text == tsv_store[_doc_id(3)].text
    again = dsi.load(ours, store=tsv_store.path)  # the docstore one stands for its source
    assert again.source is real
    copy = dsi.build(ours, f"{tsv_store.path}.copy", overwrite=True)  # read from the store
    assert list(copy.values()) == list(tsv_store.values())
    with pytest.raises(TypeError):
        dsi.load(TSV, store=42)
    with pytest.raises(docstore.StoreNotFoundError):
        dsi.load(TSV, store="/nonexistent.docstore")


def test_load_refuses_a_store_of_other_documents(tmp_path, tsv_dir):
    other = docstore.build(tmp_path / "other", [{"doc_id": "a", "body": "x"}])
    with pytest.raises(docstore.SchemaError, match="not built from this dataset"):
        dsi.load(TSV, store=other)
    mistyped = docstore.build(tmp_path / "mistyped", [{"doc_id": "a", "text": b"x"}])
    with pytest.raises(docstore.SchemaError, match="'text' is bytes"):
        dsi.load(TSV, store=mistyped)


def test_loaded_dataset_pickles_as_its_id_and_store(pair):
    _, ours = pair
    back = pickle.loads(pickle.dumps(ours))
    assert back.docstore.path == ours.docstore.path and back.dataset_id() == TSV
    assert back.docs[3] == ours.docs[3] and back.docs.lookup(_doc_id(9)) == ours.docs.lookup(_doc_id(9))


def test_importing_docstore_does_not_import_ir_datasets():
    code = "import sys, docstore, docstore.cli; assert 'ir_datasets' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0


# ---------------------------------------------------------------------------------------------
# A ranker loader written the way the published study wrote it (ir_datasets API only).


class StudyTriples:
    """(query, positive, negative) texts as the study's ranker loader built them: queries and
    qrels from the dataset, positives by ``docs.lookup(doc_id)``, random negatives by
    ``docs[i]``, a batch of candidates by ``docs.lookup([ids])``."""

    def __init__(self, dataset: Any, seed: int = 0) -> None:
        self.docs = dataset.docs
        self.queries = {q.query_id: q.default_text() for q in dataset.queries_iter()}
        self.pairs = [(r.query_id, r.doc_id) for r in dataset.qrels_iter() if r.relevance > 0]
        self.rng = random.Random(seed)

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> tuple[str, str, str]:
        query_id, doc_id = self.pairs[index]
        positive = self.docs.lookup(doc_id)
        negative = self.docs[self.rng.randrange(len(self.docs))]
        return self.queries[query_id], positive.text, negative.text

    def rerank_candidates(self, doc_ids: list[str]) -> list[tuple[str, str]]:
        found = self.docs.lookup(doc_ids)
        return [(doc_id, found[doc_id].text) for doc_id in doc_ids if doc_id in found]


def test_a_loader_written_for_ir_datasets_gets_the_same_documents_from_docstore(pair):
    outputs = []
    for dataset in pair:
        loader = StudyTriples(dataset, seed=5)
        triples = [loader[i] for i in range(len(loader))] + [loader[i] for i in range(10)]
        candidates = loader.rerank_candidates([_doc_id(i) for i in range(0, N_DOCS, 7)] + ["nope"])
        outputs.append((triples, candidates))
    assert outputs[0] == outputs[1]
    assert len(outputs[0][0]) > 10 and len(outputs[0][1]) == len(range(0, N_DOCS, 7))


# ---------------------------------------------------------------------------------------------
# TripletDataset from a dataset


def test_triplet_dataset_takes_queries_and_qrels_from_a_dataset(pair, tsv_store):
    pytest.importorskip("torch")
    from docstore.torch import TripletDataset

    real, ours = pair
    queries = {q.query_id: q.title for q in real.queries_iter()}
    reference = TripletDataset(tsv_store.path, queries, real.qrels_dict(), seed=3)
    expected = reference.__getitems__(list(range(len(reference))))
    for dataset in (
        TripletDataset(ours, ours, ours, seed=3),
        TripletDataset(tsv_store.path, real, real, seed=3),
        TripletDataset(tsv_store, real.queries_iter(), real.qrels_iter(), seed=3),
        TripletDataset(ours, real.queries, ours.qrels, seed=3),
        TripletDataset(tsv_store.path, ours, real, query_field="title", seed=3),
    ):
        assert dataset.__getitems__(list(range(len(dataset)))) == expected
        assert dataset.path == reference.path
    described = TripletDataset(ours, ours, ours, query_field="description", seed=3)
    assert described[0][0].startswith("description ")
    with pytest.raises(docstore.SchemaError, match="no field 'nope'"):
        TripletDataset(ours, ours, ours, query_field="nope")
    with pytest.raises(TypeError, match=r"docstore\.ir_datasets\.build"):
        TripletDataset(real, real, real)
    with pytest.raises(TypeError, match="queries must be"):
        TripletDataset(ours, 42, ours)


def test_docs_and_pairs_datasets_take_the_loaded_dataset_as_their_store(pair):
    pytest.importorskip("torch")
    from docstore.torch import DocDataset

    real, ours = pair
    texts = DocDataset(ours, field="text")
    assert len(texts) == N_DOCS and texts[4] == real.docs[4].text
    assert pickle.loads(pickle.dumps(texts))[4] == texts[4]


# ---------------------------------------------------------------------------------------------
# CLI


def test_cli_builds_from_ir_datasets(tmp_path, tsv_store, capsys):
    out = tmp_path / "cli.docstore"
    assert docstore.cli.main(["build", "--from-ir-datasets", TSV, "-o", str(out), "-q"]) == 0
    assert f"built {out}: {N_DOCS} docs" in capsys.readouterr().out
    assert list(docstore.open(out).values()) == list(tsv_store.values())
    assert docstore.cli.main(["build", "--from-ir-datasets", TSV, "-o", str(out), "-q"]) == 1
    assert "already exists" in capsys.readouterr().err
    argv = ["build", "--from-ir-datasets", TSV, "-o", str(out), "-q", "--overwrite", "--level", "-1"]
    assert docstore.cli.main(argv) == 0
    assert docstore.open(out).info()["codec"] == "none"


def test_cli_json_fields(tmp_path, capsys):
    docs = [Scidoc("a", None, True), Scidoc("b", 3, False)]  # type: ignore[arg-type]
    _register("docstore-test/scidocs", ir_datasets.Dataset(ListDocs(docs, Scidoc, str(tmp_path / "s.pklz4"))))
    out = str(tmp_path / "s.docstore")
    assert docstore.cli.main(["build", "--from-ir-datasets", "docstore-test/scidocs", "-o", out, "-q"]) == 1
    assert "json_fields=['year']" in capsys.readouterr().err
    argv = ["build", "--from-ir-datasets", "docstore-test/scidocs", "-o", out, "-q", "--json-fields", "year"]
    assert docstore.cli.main(argv) == 0
    assert list(dsi.load("docstore-test/scidocs", store=out).docs_iter()) == docs


def run_cli(*args: str, register: str = "") -> subprocess.CompletedProcess:
    code = textwrap.dedent(f"""
        import sys, ir_datasets
        {register}
        from docstore.cli import main
        sys.exit(main(sys.argv[1:]))
    """)
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)


def test_cli_in_its_own_process(tmp_path, tsv_dir):
    path = str(tsv_dir / "docs.tsv")
    register = (
        "from ir_datasets.formats import TsvDocs; from ir_datasets.util import LocalDownload; "
        f"ir_datasets.registry.register('local/docs', ir_datasets.Dataset(TsvDocs(LocalDownload({path!r}))))"
    )
    out = run_cli("build", "--from-ir-datasets", "local/docs", "-o", str(tmp_path / "s"), register=register)
    assert out.returncode == 0, out.stderr
    assert len(docstore.open(tmp_path / "s")) == N_DOCS
    missing = run_cli("build", "--from-ir-datasets", "no/such/dataset", "-o", str(tmp_path / "x"))
    assert missing.returncode == 1 and "no ir_datasets dataset 'no/such/dataset'" in missing.stderr
    for args, message in (
        (["build", "-o", "x"], "give INPUT files, or --from-ir-datasets"),
        (["build", "in.jsonl", "--from-ir-datasets", "a", "-o", "x"], "INPUT is not allowed with"),
        (["build", "--from-ir-datasets", "a", "--fields", "text:str", "-o", "x"], "--fields is not allowed"),
        (["build", "in.jsonl", "--json-fields", "a", "-o", "x"], "--json-fields goes with"),
    ):
        out = run_cli(*args)
        assert out.returncode == 2 and message in out.stderr and "usage:" in out.stderr, (args, out.stderr)
