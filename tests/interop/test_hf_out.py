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
