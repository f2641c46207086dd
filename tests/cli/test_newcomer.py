"""Rough edges a newcomer hit on the command line (issue 39): --version, a JSON array file,
numbers in CSV, an empty directory given as the output."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import docstore


def cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "docstore.cli", *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )


def test_version():
    result = cli("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"docstore {docstore.__version__}"


def test_a_json_array_file_builds(tmp_path):
    (tmp_path / "in.json").write_text(
        json.dumps([{"doc_id": "a", "n": 1}, {"doc_id": "b", "n": 2}], indent=1)
    )
    result = cli("build", str(tmp_path / "in.json"), "-o", str(tmp_path / "s"), "-q")
    assert result.returncode == 0, result.stderr
    store = docstore.open(tmp_path / "s")
    assert store.fields == {"n": "int64"} and [d.n for d in store.values()] == [1, 2]
    # JSON lines named .json read as before
    (tmp_path / "lines.json").write_text('{"doc_id": "a", "n": 1}\n{"doc_id": "b", "n": 2}\n')
    assert cli("build", str(tmp_path / "lines.json"), "-o", str(tmp_path / "t"), "-q").returncode == 0
    assert len(docstore.open(tmp_path / "t")) == 2


@pytest.mark.parametrize(
    "content, message",
    [("[1, 2]", "record 1: a record must be a JSON object, got int"), ('[{"doc_id": "a"},', "invalid JSON")],
)
def test_a_bad_json_array_names_the_record(tmp_path, content, message):
    (tmp_path / "in.json").write_text(content)
    result = cli("build", str(tmp_path / "in.json"), "-o", str(tmp_path / "s"))
    assert result.returncode == 1 and message in result.stderr
    assert not (tmp_path / "s").exists()


def test_csv_numbers_are_numbers(tmp_path):
    (tmp_path / "in.csv").write_text("doc_id,n,x,code,text\n1,1,1.5,007,hi\n2,,2e3,010,\n3,-3,0,1,x\n")
    result = cli("build", str(tmp_path / "in.csv"), "-o", str(tmp_path / "s"), "-q")
    assert result.returncode == 0, result.stderr
    store = docstore.open(tmp_path / "s")
    # a leading zero keeps a code text; an empty cell among numbers is a null
    assert store.fields == {"n": "int64?", "x": "float64", "code": "str", "text": "str"}
    assert [tuple(d)[1:] for d in store.values()] == [
        (1, 1.5, "007", "hi"),
        (None, 2000.0, "010", ""),
        (-3, 0.0, "1", "x"),
    ]


def test_a_csv_number_column_with_text_later_says_how_to_type_it(tmp_path):
    rows = "".join(f"{i},{i}\n" for i in range(1100)) + "1100,n/a\n"
    (tmp_path / "in.csv").write_text("doc_id,n\n" + rows)
    result = cli("build", str(tmp_path / "in.csv"), "-o", str(tmp_path / "s"))
    assert result.returncode == 1
    assert f"{tmp_path / 'in.csv'}:1102" in result.stderr and "pass --fields" in result.stderr
    assert not (tmp_path / "s").exists()
    result = cli("build", str(tmp_path / "in.csv"), "-o", str(tmp_path / "s"), "--fields", "n:str", "-q")
    assert result.returncode == 0 and docstore.open(tmp_path / "s")["1100"].n == "n/a"


def test_an_empty_directory_as_output_is_refused_without_suggesting_overwrite(tmp_path):
    (tmp_path / "in.jsonl").write_text('{"doc_id": "a", "text": "x"}\n')
    (tmp_path / "out").mkdir()
    for extra in ([], ["--overwrite"]):
        result = cli("build", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out"), *extra)
        assert result.returncode == 1 and "empty directory" in result.stderr
        assert "pass --overwrite" not in result.stderr
    assert (tmp_path / "out").is_dir() and not any((tmp_path / "out").iterdir())
