"""Hugging Face datasets in and out: ``build`` / ``add_many`` from a ``datasets.Dataset`` or a
streaming ``IterableDataset`` (made here, nothing downloaded), and ``docstore.hf``'s iterable
dataset over a store."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import docstore

from ..conftest import run_python

datasets = pytest.importorskip("datasets")
pa = pytest.importorskip("pyarrow")

N = 1000


def rows(n: int = N) -> dict[str, list]:
    return {
        "id": [f"p{i}" for i in range(n)],
        "text": [f"passage {i} é" * (1 + i % 3) for i in range(n)],
        "label": [i % 5 for i in range(n)],
        "score": [i / 4 for i in range(n)],
        "tokens": [list(range(i % 7)) for i in range(n)],
    }


def stream(n: int = N, counter: list[int] | None = None):
    def generate(start: int, stop: int):
        for i in range(start, stop):
            if counter is not None:
                counter[0] += 1
            yield {"pid": i, "text": f"passage {i}", "score": i / 4}

    return datasets.IterableDataset.from_generator(generate, gen_kwargs={"start": 0, "stop": n})


def test_build_from_a_dataset_takes_types_from_its_features(tmp_path):
    features = datasets.Features(
        {
            "id": datasets.Value("string"),
            "text": datasets.Value("large_string"),
            "label": datasets.ClassLabel(names=list("abcde")),
            "score": datasets.Value("float32"),
            "tokens": datasets.Sequence(datasets.Value("int32")),
        }
    )
    ds = datasets.Dataset.from_dict(rows(), features=features)
    store = docstore.build(tmp_path / "s", ds, id_field="id", batch_size=128)
    assert store.fields == {"text": "str", "label": "int64", "score": "float64", "tokens": "int32[]"}
    expected = rows()
    assert list(store) == expected["id"]
    assert store.take(range(N), field="text") == expected["text"]
    assert store.take(range(N), field="label") == expected["label"]
    assert [t.tolist() for t in store.take(range(N), field="tokens")] == expected["tokens"]
    assert store.at(7).tokens.dtype == np.int32


def test_build_from_a_shuffled_selection_follows_its_order(tmp_path):
    ds = datasets.Dataset.from_dict(rows()).shuffle(seed=3).select(range(100))
    store = docstore.build(tmp_path / "s", ds, id_field="id", fields={"text": "str"}, batch_size=30)
    assert store.fields == {"text": "str"}  # only the fields asked for
    assert list(store) == ds["id"]
    assert store.take(range(100), field="text") == ds["text"]


def test_build_from_a_stream_is_bounded_and_numbers_integer_ids(tmp_path, monkeypatch):
    counter = [0]
    seen_at_batch: list[int] = []
    add = docstore.Writer._add_arrow_batch

    def spy(self, table, id_field):
        seen_at_batch.append(counter[0])
        return add(self, table, id_field)

    monkeypatch.setattr(docstore.Writer, "_add_arrow_batch", spy)
    store = docstore.build(tmp_path / "s", stream(counter=counter), id_field="pid", batch_size=100)
    assert store.fields == {"text": "str", "score": "float64"}
    assert list(store) == [str(i) for i in range(N)]  # integer ids as decimal strings
    assert store["999"].text == "passage 999" and store["10"].score == 2.5
    # The stream is read a batch at a time as the store is written, never whole.
    assert len(seen_at_batch) == 10 and seen_at_batch[0] < 300 and seen_at_batch == sorted(seen_at_batch)


def test_a_mapped_stream_of_unknown_features_and_row_numbers(tmp_path):
    mapped = stream().map(lambda row: {"upper": row["text"].upper()})
    assert mapped.column_names is None
    store = docstore.build(tmp_path / "s", mapped, id_field=None, fields={"upper": "str"}, batch_size=64)
    assert len(store) == N and store["0"].upper == "PASSAGE 0" and store.at(N - 1).doc_id == str(N - 1)


def late_nulls(n: int = 20_000, first_null: int = 17_000):
    """Rows whose ``text`` is None only from row ``first_null`` on: past the first batches."""
    for i in range(n):
        yield {"pid": f"p{i}", "text": None if i >= first_null else f"passage {i}", "n": i}


@pytest.mark.parametrize("how", ["features", "unknown", "mapped"])
def test_a_null_first_seen_late_in_a_stream_does_not_fail_the_build(tmp_path, how):
    """A stream of Python rows (a generator, a ``.map()``) whose column holds None only in a later
    batch: typed by its features where it has them (every HF feature may hold None: nullable
    from the start), else widened when the None comes, keeping every row. It failed late, inside
    datasets ("Schema at index N was different ... text: null"), whatever the features said."""
    features = datasets.Features(
        {"pid": datasets.Value("string"), "text": datasets.Value("string"), "n": datasets.Value("int32")}
    )
    if how == "features":
        ds = datasets.IterableDataset.from_generator(late_nulls, features=features)
    elif how == "unknown":
        ds = datasets.IterableDataset.from_generator(late_nulls)
    else:
        ds = datasets.IterableDataset.from_generator(late_nulls, features=features).map(lambda row: row)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store = docstore.build(tmp_path / "s", ds, id_field="pid")
    assert store.fields == {"text": "str?", "n": "int64?" if how == "features" else "int64"}
    widened = [w for w in caught if "widened" in str(w.message)]
    assert len(widened) == (0 if how == "features" else 1)
    assert len(store) == 20_000 and store["p16999"].text == "passage 16999" and store["p17000"].text is None
    assert store["p19999"].n == 19_999
    if how == "features":  # and their features kept for to_dataset
        assert store.metadata["huggingface"]["features"]["n"] == {"dtype": "int32", "_type": "Value"}


def test_add_many_takes_datasets_and_streams(tmp_path):
    with docstore.Writer(tmp_path / "s", {"text": "str"}) as writer:
        writer.add_many(datasets.Dataset.from_dict(rows(10)), id_field="id", batch_size=3)
        writer.add_many(stream(5), id_field=None)  # numbered by position in the store: 10 .. 14
        writer.add_many(pa.table({"text": ["x", "y"]}), id_field=None)
    store = docstore.open(tmp_path / "s")
    assert list(store) == [f"p{i}" for i in range(10)] + [str(i) for i in range(10, 17)]
    assert store["12"].text == "passage 2" and store["16"].text == "y"


def test_build_from_a_pyarrow_table_of_other_encodings(tmp_path):
    table = pa.table(
        {
            "id": pa.array([3, 1, 2], pa.int32()),
            "text": pa.array(["x", "y", "x"]).dictionary_encode(),
            "v": pa.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], pa.list_(pa.float16(), 2)),
            "ok": [True, False, True],
        }
    )
    store = docstore.build(tmp_path / "s", table, id_field="id", batch_size=2)
    assert store.fields == {"text": "str", "v": "float16[]", "ok": "bool"}
    assert list(store) == ["3", "1", "2"] and store["2"].text == "x" and store["1"].ok is False
    assert store["1"].v.tolist() == [3.0, 4.0]


def test_errors_name_the_way_out(tmp_path):
    ds = datasets.Dataset.from_dict(rows(10))
    with pytest.raises(docstore.SchemaError, match="no id column 'doc_id'.*id_field"):
        docstore.build(tmp_path / "a", ds)
    nested = datasets.Dataset.from_dict({"id": ["a"], "meta": [{"k": 1}]})
    with pytest.raises(docstore.SchemaError, match="column 'meta' has Arrow type struct"):
        docstore.build(tmp_path / "b", nested, id_field="id")
    with pytest.raises(TypeError, match="pass one: dataset\\['train'\\]"):
        docstore.build(tmp_path / "c", datasets.DatasetDict({"train": ds}), id_field="id")
    with docstore.Writer(tmp_path / "d", {"text": "str"}) as writer:
        with pytest.raises(docstore.SchemaError, match="alone"):
            writer.add_many(["a"], ds)
        with pytest.raises(docstore.SchemaError, match="no id column 'doc_id'"):
            writer.add_many(ds)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    repeated = datasets.Dataset.from_dict({"id": ["a", "b", "a"], "text": ["1", "2", "3"]})
    with pytest.raises(docstore.DuplicateKeyError):
        docstore.build(tmp_path / "e", repeated, id_field="id", batch_size=2)
    assert not (tmp_path / "e").exists()


def test_building_from_records_never_imports_datasets(tmp_path):
    result = run_python(
        f"""
        import sys, docstore
        docstore.build({str(tmp_path / "s")!r}, [{{"doc_id": "a", "text": "x"}}])
        with docstore.Writer({str(tmp_path / "t")!r}, {{"text": "str"}}) as w:
            w.add_many(["a"], {{"text": ["x"]}})
        assert "datasets" not in sys.modules, "datasets was imported"
        """
    )
    assert result.returncode == 0, result.stderr


# --------------------------------------------------------------------------------------------
# docstore.hf.to_iterable_dataset: a store as a streaming datasets.IterableDataset

torch = pytest.importorskip("torch")

import docstore.hf  # noqa: E402
from docstore.torch import DocDataset, PairDataset, TokenDataset, TripletDataset  # noqa: E402

PAIRS = 3000


@pytest.fixture(scope="module")
def pairs_path(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("hf") / "pairs.docstore")
    docstore.build(
        path,
        (
            {"doc_id": f"p{i}", "sentence1": f"a{i}", "sentence2": f"b{i}", "label": i % 3 / 2, "t": [i, i]}
            for i in range(PAIRS)
        ),
        fields={"sentence1": "str", "sentence2": "str", "label": "float64", "t": "int32[]"},
    )
    return path


def test_a_store_streams_as_renamed_columns_with_features(pairs_path):
    ds = docstore.hf.to_iterable_dataset(
        pairs_path, {"anchor": "sentence1", "positive": "sentence2", "score": "label"}
    )
    assert isinstance(ds, datasets.IterableDataset)
    assert ds.features == datasets.Features(
        {
            "anchor": datasets.Value("string"),
            "positive": datasets.Value("string"),
            "score": datasets.Value("float64"),
        }
    )
    assert ds.num_shards == 12  # 3000 items: blocks of 256 or more
    rows = list(ds)
    assert sorted(r["anchor"] for r in rows) == sorted(f"a{i}" for i in range(PAIRS))  # each once
    assert all(
        r["positive"] == "b" + r["anchor"][1:] and r["score"] == int(r["anchor"][1:]) % 3 / 2 for r in rows
    )
    assert [r["anchor"] for r in rows[:100]] != [f"a{i}" for i in range(100)]  # shuffled
    in_order = docstore.hf.to_iterable_dataset(pairs_path, ["doc_id", "t"], shuffle=False)
    assert in_order.features["t"].feature == datasets.Value("int32")
    assert [(r["doc_id"], r["t"]) for r in in_order] == [(f"p{i}", [i, i]) for i in range(PAIRS)]


def test_epochs_are_new_orders_of_every_item(pairs_path):
    ds = docstore.hf.to_iterable_dataset(pairs_path, ["sentence1"], epochs=3, seed=5)
    rows = [r["sentence1"] for r in ds]
    epochs = [rows[i * PAIRS : (i + 1) * PAIRS] for i in range(3)]
    assert all(sorted(e) == sorted(epochs[0]) for e in epochs) and len(set(epochs[0])) == PAIRS
    assert epochs[0] != epochs[1] != epochs[2]
    # A pure function of the seed: another dataset, same seed, same orders.
    again = [
        r["sentence1"] for r in docstore.hf.to_iterable_dataset(pairs_path, ["sentence1"], epochs=3, seed=5)
    ]
    assert again == rows
    endless = docstore.hf.to_iterable_dataset(pairs_path, ["sentence1"], epochs=None, seed=5)
    more = [r["sentence1"] for _, r in zip(range(len(rows) + PAIRS), endless)]
    assert more[: len(rows)] == rows and sorted(more[len(rows) :]) == sorted(epochs[0])  # a 4th epoch


def list_rows(batch):
    return batch


@pytest.mark.parametrize("workers", [0, 2])
def test_workers_and_ranks_split_the_shards(pairs_path, workers):
    from datasets.distributed import split_dataset_by_node

    ds = docstore.hf.to_iterable_dataset(pairs_path, ["sentence1"])
    seen = []
    for rank in range(2):
        shard = split_dataset_by_node(ds, rank=rank, world_size=2)
        assert shard.num_shards == 6
        loader = torch.utils.data.DataLoader(shard, batch_size=64, num_workers=workers, collate_fn=list_rows)
        mine = [row["sentence1"] for batch in loader for row in batch]
        assert len(mine) == PAIRS // 2
        seen.append(mine)
    assert not set(seen[0]) & set(seen[1])  # the ranks' items are disjoint
    assert sorted(seen[0] + seen[1]) == sorted(f"a{i}" for i in range(PAIRS))  # each once


def test_torch_datasets_as_rows(pairs_path):
    ids = [f"p{i}" for i in range(PAIRS)]
    queries = {f"q{i}": f"query {i}" for i in range(50)}
    qrels = {f"q{i}": [ids[i * 7], ids[i * 13 + 1]] for i in range(50)}
    triplets = TripletDataset(pairs_path, queries, qrels, field="sentence1", seed=2)
    ds = docstore.hf.to_iterable_dataset(triplets, shuffle=False, epochs=2)
    assert list(ds.features) == ["anchor", "positive", "negative"]
    rows = [tuple(r.values()) for r in ds]
    for epoch in range(2):  # each epoch's own random negatives, the dataset's own epoch untouched
        triplets.set_epoch(epoch)
        assert rows[epoch * 100 : (epoch + 1) * 100] == triplets.__getitems__(list(range(100)))
    assert rows[:100] != rows[100:] and triplets.epoch == 1

    pairs = PairDataset(pairs_path, fields=("sentence1", "sentence2"), label_field="label")
    first = next(iter(docstore.hf.to_iterable_dataset(pairs, shuffle=False)))
    assert first == {"sentence1": "a0", "sentence2": "b0", "label": 0.0}
    renamed = docstore.hf.to_iterable_dataset(
        DocDataset(pairs_path, fields=("sentence2", "doc_id")), ["text", "id"], shuffle=False
    )
    assert next(iter(renamed)) == {"text": "b0", "id": "p0"}
    with pytest.raises(TypeError, match="tensors"):
        docstore.hf.to_iterable_dataset(TokenDataset(pairs_path, "t"))
    with pytest.raises(ValueError, match="3 parts"):
        docstore.hf.to_iterable_dataset(triplets, ["a", "b"])
    with pytest.raises(docstore.SchemaError, match="no field 'nope'"):
        docstore.hf.to_iterable_dataset(pairs_path, ["nope"])
