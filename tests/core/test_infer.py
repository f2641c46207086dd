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
