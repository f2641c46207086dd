"""``docstore.hf.to_dataset``: a map-style ``datasets.Dataset`` with the ids, in the store's order,
its features typed from the fields (float32 stays float32, fixed shapes keep their lengths)."""

from __future__ import annotations

import numpy as np
import pytest

import docstore

datasets = pytest.importorskip("datasets")
pytest.importorskip("torch")  # docstore.hf's streaming half uses docstore.torch's permutation
import docstore.hf  # noqa: E402


def test_to_dataset_keeps_ids_order_and_types(tmp_path):
    fields = {"text": "str", "emb": "float32[]", "half": "float16[]", "grid": "float32[2,3]?", "n": "int64?"}
    rng = np.random.default_rng(0)
    with docstore.Writer(tmp_path / "s", fields=fields) as writer:
        for i in range(50):
            writer.add(
                f"d{i}",
                text=f"t{i}",
                emb=rng.standard_normal(4).astype(np.float32),
                half=rng.standard_normal(i % 3).astype(np.float16),
                grid=None if i % 7 == 0 else rng.standard_normal((2, 3)).astype(np.float32),
                n=None if i % 5 == 0 else i,
            )
    store = docstore.open(tmp_path / "s")
    ds = docstore.hf.to_dataset(tmp_path / "s")
    assert isinstance(ds, datasets.Dataset) and len(ds) == 50 and ds["doc_id"] == list(store)
    features = ds.features
    assert features["emb"].feature.dtype == "float32" and features["half"].feature.dtype == "float16"
    assert features["grid"].length == 2 and features["grid"].feature.length == 3
    as_numpy = ds.with_format("numpy")
    for i, doc in enumerate(store.values()):
        assert ds[i]["text"] == doc.text and ds[i]["n"] == doc.n
        assert np.array_equal(as_numpy[i]["emb"], doc.emb) and as_numpy[i]["emb"].dtype == np.float32
        if doc.grid is None:
            assert ds[i]["grid"] is None
        else:
            assert np.array_equal(as_numpy[i]["grid"], doc.grid)
    part = docstore.hf.to_dataset(store, ["n"], rows=slice(10, 13))
    assert part.column_names == ["doc_id", "n"] and part["doc_id"] == ["d10", "d11", "d12"]
    # and back: building from it gives the same fields and documents
    again = docstore.build(tmp_path / "t", ds, fields=fields)
    assert list(again) == list(store) and again["d3"].text == "t3"
    assert np.array_equal(again["d8"].grid, store["d8"].grid)


def test_to_dataset_gives_back_the_features_a_store_was_built_from(tmp_path):
    """A store built from a ``datasets.Dataset`` keeps its features in its metadata (docs/format.md
    §4.10), and ``to_dataset`` gives them back: ClassLabel names, float32 and int32 scalars (stored
    as float64 and int64), sequence lengths, Array2D shapes, nested lists of strings."""
    features = datasets.Features(
        {
            "pid": datasets.Value("string"),
            "text": datasets.Value("string"),
            "label": datasets.ClassLabel(names=["neg", "neutral", "pos"]),
            "score": datasets.Value("float32"),
            "count": datasets.Value("int32"),
            "emb": datasets.Sequence(datasets.Value("float32"), length=3),
            "grid": datasets.Array2D((2, 2), "float32"),
            "tags": datasets.Sequence(datasets.Value("string")),
        }
    )
    rows = {
        "pid": ["p1", "p2", "p3"],
        "text": ["one", "two", "three"],
        "label": [0, 2, 1],
        "score": [0.1, 0.25, 1e-3],
        "count": [1, -2, 3],
        "emb": [[0.1, 0.2, 0.3], [1.0, 2.0, 3.0], [0.5, 0.5, 0.5]],
        "grid": [[[1, 2], [3, 4]], [[5, 6], [7, 8]], [[0, 0], [0, 1]]],
        "tags": [["a"], [], ["b", "c"]],
    }
    source = datasets.Dataset.from_dict(rows, features=features)
    store = docstore.build(tmp_path / "s", source, id_field="pid")
    assert store.metadata["huggingface"]["features"]["label"]["names"] == ["neg", "neutral", "pos"]
    back = docstore.hf.to_dataset(store)
    assert back.column_names == ["doc_id", *(n for n in features if n != "pid")]
    for name in back.column_names[1:]:
        assert back.features[name] == features[name], name
    assert back.features["label"].int2str(back[1]["label"]) == "pos"
    original = source.to_list()
    for row, want in zip(back.to_list(), original):
        assert row.pop("doc_id") == want.pop("pid")
        assert row == want  # float32 values exactly as the source holds them
    part = docstore.hf.to_dataset(store, ["label"], rows=slice(1, 3))
    assert part.features["label"] == features["label"] and part["label"] == [2, 1]
    # A user's own metadata stays beside it; a store without any gives the fields' own features.
    mine = docstore.build(tmp_path / "m", source, id_field="pid", metadata={"mine": 1})
    assert mine.metadata["mine"] == 1 and "huggingface" in mine.metadata
    plain = docstore.build(tmp_path / "p", [{"pid": "p1", "score": 0.5}], id_field="pid")
    assert plain.metadata == {} and docstore.hf.to_dataset(plain).features["score"] == datasets.Value(
        "float64"
    )
