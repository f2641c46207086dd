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


def _late_none(n: int = 3000) -> list[dict]:
    """Records whose fields are None only past the 1,000 that types are inferred from."""
    records = [{"doc_id": f"d{i}", "t": f"x{i}", "n": i, "u": "y"} for i in range(n)]
    records[2500] = {"doc_id": "d2500", "t": None, "n": None, "u": "y"}
    return records


def test_a_none_late_in_records_widens_its_field_and_loses_nothing(tmp_path):
    """Past the first 1,000 records, a None in a field typed non-nullable widens it (``str?``):
    the documents written before are copied once into the wider store, with a warning that
    names the fields to declare; nothing else is left beside the store."""
    with pytest.warns(UserWarning, match=r"widened 't' to 'str\?', 'n' to 'int64\?'.*2,500 documents"):
        store = docstore.build(tmp_path / "s", iter(_late_none()), progress=False)
    assert store.fields == {"t": "str?", "n": "int64?", "u": "str"}
    assert len(store) == 3000 and list(store) == [f"d{i}" for i in range(3000)]
    assert store["d2500"].t is None and store["d2500"].n is None
    assert store["d2499"] == ("d2499", "x2499", 2499, "y") and store["d2999"].t == "x2999"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]
    # Declared nullable: nothing to widen, nothing copied.
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fields = {"t": "str?", "n": "int64?", "u": "str"}
        assert docstore.build(tmp_path / "d", _late_none(), fields=fields).fields == fields


@pytest.mark.parametrize("on_duplicate", ["error", "first", "last"])
def test_a_widened_build_keeps_its_duplicate_rule_across_the_copy(tmp_path, on_duplicate):
    records = [*_late_none(), {"doc_id": "d7", "t": "again", "n": 7, "u": "z"}]
    with pytest.warns(UserWarning, match="widened"):
        if on_duplicate == "error":
            with pytest.raises(docstore.DuplicateKeyError, match="d7"):
                docstore.build(tmp_path / "s", records, on_duplicate=on_duplicate)
            assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing at the target, no staging
            return
        store = docstore.build(tmp_path / "s", records, on_duplicate=on_duplicate)
    assert len(store) == 3000 and store.fields["t"] == "str?"
    assert store["d7"].t == ("x7" if on_duplicate == "first" else "again")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]


def test_a_widening_build_refuses_what_a_writer_refuses_before_reading(tmp_path):
    (tmp_path / "s").write_bytes(b"")
    with pytest.raises(docstore.StoreExistsError, match="overwrite=True"):
        docstore.build(tmp_path / "s", _late_none())
    docstore.build(tmp_path / "t", [{"doc_id": "a", "t": "x"}])
    with pytest.warns(UserWarning, match="widened"):
        store = docstore.build(tmp_path / "t", _late_none(), overwrite=True)
    assert len(store) == 3000


def test_a_bad_value_late_is_still_refused_by_name(tmp_path):
    records = _late_none()
    records[2000] = {"doc_id": "d2000", "t": 5, "n": 1, "u": "y"}
    with pytest.raises(docstore.FieldTypeError, match='doc "d2000": field "t"'):
        docstore.build(tmp_path / "s", records)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_arrow_batches_of_a_stream_widen_a_field_typed_from_the_first(tmp_path):
    """A stream of unknown features is typed from its first batch; a null in a later batch
    widens the field as a None in records does (driven here with pyarrow batches, as
    ``build`` hands them on)."""
    pa = pytest.importorskip("pyarrow")
    from docstore._build import _Job, _Widening

    job = _Job(tmp_path / "s", "id", None, 100, {}, None)
    with _Widening(job, {"t": "str"}) as writer:
        writer._add_arrow_batch(pa.table({"id": ["a", "b"], "t": ["x", "y"]}), "id")
        with pytest.warns(UserWarning, match=r"widened 't' to 'str\?'.*2 documents"):
            writer._add_arrow_batch(pa.table({"id": ["c", "d"], "t": [None, "z"]}), "id")
    store = docstore.open(tmp_path / "s")
    assert store.fields == {"t": "str?"} and [d.t for d in store.take(range(4))] == ["x", "y", None, "z"]


def test_a_stream_with_features_takes_nullability_from_them(tmp_path):
    """A stream's later rows are not at hand: its features say what they may hold, and a
    Hugging Face feature may always hold None, so its fields are nullable and a null in a
    late batch is stored, not refused."""
    datasets = pytest.importorskip("datasets")
    n = 20_000
    table = {"id": [f"d{i}" for i in range(n)], "t": ["x" if i != 15_000 else None for i in range(n)]}
    stream = datasets.Dataset.from_dict(table).to_iterable_dataset()
    assert stream.features is not None
    store = docstore.build(tmp_path / "s", stream, id_field="id", batch_size=4096)
    assert store.fields == {"t": "str?"}
    assert store["d15000"].t is None and store["d14999"].t == "x"
