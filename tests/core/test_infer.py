"""Field types inferred by ``build`` (and the CLI) from the first records: an empty list has no
element type, so the first non-empty one gives it."""

from __future__ import annotations

import numpy as np
import pytest

import docstore


def test_a_first_empty_list_takes_its_type_from_a_later_one(tmp_path):
    records = [{"doc_id": "a", "tags": [], "v": ()}, {"doc_id": "b", "tags": ["x", "y"], "v": (1.5, 2.0)}]
    store = docstore.build(tmp_path / "s", records)
    assert store.fields == {"tags": "list[str]", "v": "float64[]"}
    assert store["a"].tags == [] and store["b"].tags == ["x", "y"]
    assert np.array_equal(store["b"].v, [1.5, 2.0]) and len(store["a"].v) == 0


def test_only_empty_lists_say_which_type_to_give(tmp_path):
    with pytest.raises(docstore.SchemaError, match=r"'tags' is an empty list in.*\{'tags': 'list\[str\]'\}"):
        docstore.build(tmp_path / "s", [{"doc_id": "a", "tags": []}, {"doc_id": "b", "tags": []}])
    assert not (tmp_path / "s").exists()


def test_the_cli_infers_from_a_later_record(tmp_path):
    import subprocess
    import sys

    (tmp_path / "in.jsonl").write_text('{"doc_id": "a", "tags": []}\n{"doc_id": "b", "tags": ["x"]}\n')
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "docstore.cli",
            "build",
            str(tmp_path / "in.jsonl"),
            "-o",
            str(tmp_path / "s"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert docstore.open(tmp_path / "s").fields == {"tags": "list[str]"}


def test_a_null_late_in_a_table_makes_its_field_nullable_from_the_start(tmp_path):
    """A table, a DataFrame or a map-style HF dataset is all at hand: a column with a null
    anywhere is nullable, not refused when the batch holding the null comes (past 8,192 rows)."""
    pa = pytest.importorskip("pyarrow")
    n = 20_000
    table = pa.table(
        {
            "doc_id": [f"d{i}" for i in range(n)],
            "t": ["x" if i != 15_000 else None for i in range(n)],
            "u": ["y"] * n,
        }
    )
    sources = {"table": table, "frame": table.to_pandas()}
    datasets = pytest.importorskip("datasets")
    sources["hf"] = datasets.Dataset(table)
    for name, source in sources.items():
        store = docstore.build(tmp_path / name, source, batch_size=4096)
        assert store.fields == {"t": "str?", "u": "str"}, name
        assert store["d15000"].t is None and store["d14999"].t == "x"
