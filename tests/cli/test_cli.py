"""The docstore command line, run as users run it: a separate process."""

from __future__ import annotations

import csv
import gzip
import json
import re
import subprocess
import sys

import numpy as np
import pytest

import docstore
import docstore.cli


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "docstore.cli", *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=300,
    )


RECORDS = [
    {
        "doc_id": f"d{i}",
        "text": f'text {i} ünï "quoted", tabs\\t',
        "label": i % 3,
        "score": i / 4,
        "v": [i, i + 1],
    }
    for i in range(500)
]


def write_jsonl(path, records) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def test_build_export_round_trips_jsonl(tmp_path):
    src = tmp_path / "in.jsonl"
    write_jsonl(src, RECORDS)
    out = cli("build", str(src), "-o", str(tmp_path / "s"), "-q")
    assert out.returncode == 0, out.stderr
    assert "500 docs" in out.stdout and "docs/s" in out.stdout and "raw" in out.stdout
    exported = cli("export", str(tmp_path / "s"))
    assert exported.returncode == 0
    assert [json.loads(line) for line in exported.stdout.splitlines()] == RECORDS
    assert cli("export", str(tmp_path / "s"), "-o", str(tmp_path / "out.jsonl")).returncode == 0
    assert (tmp_path / "out.jsonl").read_text(encoding="utf-8") == exported.stdout


def test_build_uncompressed_with_level_minus_one(tmp_path):
    src = tmp_path / "in.jsonl"
    write_jsonl(src, RECORDS)
    out = cli("build", str(src), "-o", str(tmp_path / "s"), "--level", "-1", "-q")
    assert out.returncode == 0, out.stderr
    assert "codec           none" in cli("info", str(tmp_path / "s")).stdout
    exported = cli("export", str(tmp_path / "s"))
    assert [json.loads(line) for line in exported.stdout.splitlines()] == RECORDS
    bad = cli("build", str(src), "-o", str(tmp_path / "t"), "--level", "-2", "-q")
    assert bad.returncode != 0 and "compression level must be -1 (none)" in bad.stderr
    assert not (tmp_path / "t").exists()


def test_build_from_tsv_csv_gzip_parquet_and_stdin(tmp_path):
    rows = [(f"{i}", f'passage {i} with "quotes", commas') for i in range(100)]
    tsv = tmp_path / "collection.tsv"
    tsv.write_text("".join(f"{a}\t{b}\n" for a, b in rows), encoding="utf-8")
    assert (
        cli("build", str(tsv), "-o", str(tmp_path / "tsv"), "--columns", "doc_id,text", "-q").returncode == 0
    )
    with open(tmp_path / "c.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["pid", "text", "label"])
        w.writerows([(a, b, i) for i, (a, b) in enumerate(rows)])
    out = cli("build", str(tmp_path / "c.csv"), "-o", str(tmp_path / "csv"), "--id-field", "pid",
              "--fields", "text:str,label:int64", "-q")  # fmt: skip
    assert out.returncode == 0, out.stderr
    with gzip.open(tmp_path / "g.jsonl.gz", "wt", encoding="utf-8") as f:
        f.writelines(json.dumps({"doc_id": a, "text": b}) + "\n" for a, b in rows)
    assert cli("build", str(tmp_path / "g.jsonl.gz"), "-o", str(tmp_path / "gz"), "-q").returncode == 0
    stdin = "".join(json.dumps({"doc_id": a, "text": b}) + "\n" for a, b in rows)
    assert (
        cli("build", "-", "--format", "jsonl", "-o", str(tmp_path / "stdin"), "-q", stdin=stdin).returncode
        == 0
    )
    for name in ("tsv", "csv", "gz", "stdin"):
        store = docstore.open(tmp_path / name)
        assert [d.text for d in store.values()] == [b for _, b in rows], name
    assert docstore.open(tmp_path / "csv")["7"].label == 7

    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    pq.write_table(
        pa.table({"doc_id": [a for a, _ in rows], "text": [b for _, b in rows]}), tmp_path / "p.parquet"
    )
    assert cli("build", str(tmp_path / "p.parquet"), "-o", str(tmp_path / "pq"), "-q").returncode == 0
    assert docstore.open(tmp_path / "pq")["99"].text == rows[99][1]


def test_info_get_verify(tmp_path):
    write_jsonl(tmp_path / "in.jsonl", RECORDS)
    cli("build", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "s"), "-q")
    info = cli("info", str(tmp_path / "s"))
    assert info.returncode == 0 and "500" in info.stdout and "lz4" in info.stdout
    as_json = json.loads(cli("info", str(tmp_path / "s"), "--json").stdout)
    assert as_json["count"] == 500 and as_json["fields"]["v"] == "int64[]"
    got = cli("get", str(tmp_path / "s"), "d3", "d1")
    assert got.returncode == 0
    assert [json.loads(line)["doc_id"] for line in got.stdout.splitlines()] == ["d3", "d1"]
    missing = cli("get", str(tmp_path / "s"), "d3", "nope")
    assert (
        missing.returncode == 1 and "nope" in missing.stderr and json.loads(missing.stdout)["doc_id"] == "d3"
    )
    ok = cli("verify", str(tmp_path / "s"))
    assert ok.returncode == 0 and ok.stdout.startswith("OK")
    both = cli("info", str(tmp_path / "s"), "--json", "--fields")
    assert both.returncode == 2 and "not allowed with" in both.stderr


@pytest.mark.parametrize(
    ("setup", "args", "message"),
    [
        (None, ["info", "{tmp}/missing"], "No such file"),
        ("garbage", ["info", "{tmp}/garbage"], "not a docstore file"),
        ("garbage", ["verify", "{tmp}/garbage"], "not a docstore file"),
        ("dups", ["build", "{tmp}/dups.jsonl", "-o", "{tmp}/x"], "duplicate doc id"),
        ("bad", ["build", "{tmp}/bad.jsonl", "-o", "{tmp}/x"], "invalid JSON"),
        ("dups", ["build", "{tmp}/dups.jsonl", "-o", "{tmp}/x", "--id-field", "nope"], "no id field"),
        (None, ["build", "{tmp}/in.txt", "-o", "{tmp}/x"], "--format"),
        ("mixed", ["build", "{tmp}/mixed.jsonl", "-o", "{tmp}/x"], 'field "n" is int64, got str'),
        (
            "null",
            ["build", "{tmp}/null.jsonl", "-o", "{tmp}/x"],
            "null.jsonl:2: a record must be a JSON object",
        ),
        (
            "list",
            ["build", "{tmp}/list.jsonl", "-o", "{tmp}/x"],
            "list.jsonl:1: a record must be a JSON object",
        ),
        (
            "truncated",
            ["build", "{tmp}/cut.jsonl.gz", "-o", "{tmp}/x"],
            "cut.jsonl.gz: cannot read it as jsonl",
        ),
    ],
)
def test_user_mistakes_print_one_line_and_exit_nonzero(tmp_path, setup, args, message):
    if setup == "garbage":
        (tmp_path / "garbage").write_bytes(b"\x00" * 1000)
    elif setup == "dups":
        write_jsonl(tmp_path / "dups.jsonl", [{"doc_id": "a", "t": "x"}, {"doc_id": "a", "t": "y"}])
    elif setup == "bad":
        (tmp_path / "bad.jsonl").write_text('{"doc_id": "a", "t": "x"}\n{not json\n')
    elif setup == "mixed":
        write_jsonl(tmp_path / "mixed.jsonl", [{"doc_id": "a", "n": 1}, {"doc_id": "b", "n": "2"}])
    elif setup == "null":
        (tmp_path / "null.jsonl").write_text('{"doc_id": "a", "t": "x"}\nnull\n')
    elif setup == "list":
        (tmp_path / "list.jsonl").write_text("[1, 2]\n")
    elif setup == "truncated":
        whole = gzip.compress("".join(json.dumps(r) + "\n" for r in RECORDS).encode())
        (tmp_path / "cut.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    out = cli(*(a.format(tmp=tmp_path) for a in args))
    assert out.returncode == 1
    assert message in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert not (tmp_path / "x").exists()


def _damaged_gzip(damage: str) -> bytes:
    """RECORDS as gzipped JSON lines, damaged halfway through."""
    text = "".join(json.dumps(r) + "\n" for r in RECORDS).encode()
    if damage == "truncated":
        whole = gzip.compress(text, mtime=0)
        return whole[: len(whole) // 2]
    if damage == "flipped":  # one bit of the deflate stream: a CRC or a decompression error
        data = bytearray(gzip.compress(text, mtime=0))
        data[len(data) // 2] ^= 0x10
        return bytes(data)
    # "crc": uncompressed deflate blocks hold the text as it is; one digit changed keeps every
    # line valid JSON, so only the CRC at the end tells
    data = bytearray(gzip.compress(text, compresslevel=0, mtime=0))
    at = data.index(b'"text 250 ') + len(b'"text 25')
    data[at : at + 1] = b"1"
    return bytes(data)


@pytest.mark.parametrize("damage", ["crc", "truncated", "flipped"])
def test_build_names_the_gzip_input_that_breaks_off(tmp_path, damage):
    # A gzip error partway through a file must say which file (here the second input) and
    # about where, exit 1 and leave no store.
    write_jsonl(tmp_path / "first.jsonl", [{**r, "doc_id": f"x{i}"} for i, r in enumerate(RECORDS)])
    (tmp_path / "damaged.jsonl.gz").write_bytes(_damaged_gzip(damage))
    inputs = sorted(tmp_path.iterdir())
    out = cli(
        "build", str(tmp_path / "first.jsonl"), str(tmp_path / "damaged.jsonl.gz"), "-o", str(tmp_path / "s")
    )
    assert out.returncode == 1
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert f"{tmp_path / 'damaged.jsonl.gz'}" in out.stderr, out.stderr
    if damage == "crc":
        assert "jsonl after line 500: damaged gzip data: CRC check failed" in out.stderr
    elif damage == "truncated":
        after = re.search(
            r"damaged.jsonl.gz: cannot read it as jsonl after line (\d+): damaged gzip data: ", out.stderr
        )
        assert after and 0 < int(after[1]) < len(RECORDS), out.stderr
        assert "end-of-stream marker" in out.stderr
    assert not (tmp_path / "s").exists()
    assert sorted(tmp_path.iterdir()) == inputs  # nothing half-written beside it either


def test_build_keeps_an_existing_store_unless_told_to_overwrite(tmp_path):
    write_jsonl(tmp_path / "a.jsonl", [{"doc_id": "a", "t": "old"}])
    write_jsonl(tmp_path / "b.jsonl", [{"doc_id": "b", "t": "new"}])
    assert cli("build", str(tmp_path / "a.jsonl"), "-o", str(tmp_path / "s"), "-q").returncode == 0
    refused = cli("build", str(tmp_path / "b.jsonl"), "-o", str(tmp_path / "s"), "-q")
    assert refused.returncode == 1 and "already exists (pass --overwrite" in refused.stderr
    assert list(docstore.open(tmp_path / "s").keys()) == ["a"]
    clobber = cli("build", str(tmp_path / "b.jsonl"), "-o", str(tmp_path / "b.jsonl"), "--overwrite")
    assert clobber.returncode == 1 and "is also an input" in clobber.stderr
    assert (tmp_path / "b.jsonl").read_text().startswith('{"doc_id": "b"')
    replaced = cli("build", str(tmp_path / "b.jsonl"), "-o", str(tmp_path / "s"), "-q", "--overwrite")
    assert replaced.returncode == 0, replaced.stderr
    assert list(docstore.open(tmp_path / "s").keys()) == ["b"]


def test_export_never_truncates_the_store_or_an_output_it_refuses(tmp_path):
    write_jsonl(tmp_path / "a.jsonl", [{"doc_id": "a", "t": "x"}])
    assert cli("build", str(tmp_path / "a.jsonl"), "-o", str(tmp_path / "s"), "-q").returncode == 0
    (tmp_path / "link").symlink_to(tmp_path / "s")
    for target in ("s", "link"):
        out = cli("export", str(tmp_path / "s"), "-o", str(tmp_path / target))
        assert out.returncode == 1 and "is the store being exported" in out.stderr, out.stderr
        assert cli("verify", str(tmp_path / "s")).returncode == 0
    (tmp_path / "keep.txt").write_text("keep\n")
    out = cli("export", str(tmp_path / "s"), "-o", str(tmp_path / "keep.txt"), "--id-field", "t")
    assert out.returncode == 1 and "already a field" in out.stderr
    assert (tmp_path / "keep.txt").read_text() == "keep\n"


def test_stdin_is_json_lines_unless_told_otherwise_and_read_once(tmp_path):
    lines = '{"doc_id": "a", "text": "x"}\n{"doc_id": "b", "text": "y"}\n'
    out = cli("build", "-", "-o", str(tmp_path / "s"), "-q", stdin=lines)
    assert out.returncode == 0, out.stderr
    assert list(docstore.open(tmp_path / "s").keys()) == ["a", "b"]
    # Gzipped input is recognised by its first bytes, on stdin and whatever a file's name says.
    (tmp_path / "misnamed.jsonl").write_bytes(gzip.compress(lines.encode()))
    out = cli("build", str(tmp_path / "misnamed.jsonl"), "-o", str(tmp_path / "g"), "-q")
    assert out.returncode == 0, out.stderr
    assert list(docstore.open(tmp_path / "g").keys()) == ["a", "b"]
    gz = subprocess.run(
        [sys.executable, "-m", "docstore.cli", "build", "-", "-o", str(tmp_path / "h"), "-q"],
        input=gzip.compress(lines.encode()),
        capture_output=True,
        timeout=300,
    )
    assert gz.returncode == 0, gz.stderr
    assert list(docstore.open(tmp_path / "h").keys()) == ["a", "b"]
    twice = cli("build", "-", "-", "-o", str(tmp_path / "t"), stdin=lines)
    assert twice.returncode == 1 and "more than once" in twice.stderr
    odd = cli("build", "-", "-o", str(tmp_path / "u"), stdin='{"doc_id": "a", "v": {"x": 1}}\n')
    assert odd.returncode == 1 and "pass --fields" in odd.stderr and "fields={" not in odd.stderr
    assert not (tmp_path / "t").exists() and not (tmp_path / "u").exists()


def test_demo_runs_on_a_small_corpus(tmp_path):
    out = cli("demo", "--docs", "3000", "--dir", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "docstore" in out.stdout and "lookups/s" in out.stdout
    assert "docstore level=-1" in out.stdout  # the uncompressed trade-off, side by side


def test_export_then_build_with_the_stores_fields_round_trips_every_type(tmp_path):
    """`info --fields` gives `build --fields` what JSON cannot say (bytes, array dtypes); NaN and
    infinities go out as strings, so the export is strict JSON, and come back as floats."""
    import numpy as np

    records = [
        {
            "id": f"k{i}",
            "b": bytes([i, 0, 255]),
            "t": np.array([i, 65535], np.uint16),
            "f": np.array([0.1, float("nan") if i % 2 else float("-inf")], np.float32),
            "x": float("inf") if i == 3 else i / 3,
        }
        for i in range(50)
    ]
    docstore.build(tmp_path / "a", records, id_field="id")
    exported = cli("export", str(tmp_path / "a"), "--id-field", "id")
    assert exported.returncode == 0, exported.stderr
    lines = [
        json.loads(line, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
        for line in exported.stdout.splitlines()
    ]
    assert lines[3]["id"] == "k3" and lines[3]["x"] == "inf" and list(lines[0]) == ["id", "b", "t", "f", "x"]
    (tmp_path / "a.jsonl").write_text(exported.stdout, encoding="utf-8")
    spec = cli("info", str(tmp_path / "a"), "--fields")
    assert spec.stdout.strip() == "b:bytes,t:uint16[],f:float32[],x:float64"
    built = cli(
        "build",
        str(tmp_path / "a.jsonl"),
        "-o",
        str(tmp_path / "b"),
        "--id-field",
        "id",
        "--fields",
        spec.stdout.strip(),
    )
    assert built.returncode == 0, built.stderr
    a, b = docstore.open(tmp_path / "a"), docstore.open(tmp_path / "b")
    assert a.fields == b.fields and list(a.keys()) == list(b.keys())
    for x, y in zip(a.values(), b.values()):
        assert (x.b, x.t.tolist(), x.x) == (y.b, y.t.tolist(), y.x)
        np.testing.assert_array_equal(x.f, y.f)
    assert cli("export", str(tmp_path / "a"), "--id-field", "b").returncode == 1


def test_csv_with_a_byte_order_mark(tmp_path):
    (tmp_path / "bom.csv").write_bytes("\ufeffdoc_id,text\na,x\nb,y\n".encode())
    out = cli("build", str(tmp_path / "bom.csv"), "-o", str(tmp_path / "s"))
    assert out.returncode == 0, out.stderr
    assert docstore.open(tmp_path / "s")["b"].text == "y"


def test_demo_needs_at_least_one_document(tmp_path):
    out = cli("demo", "--docs", "0", "--dir", str(tmp_path))
    assert out.returncode == 2 and "must be at least 1" in out.stderr and "Traceback" not in out.stderr


def cli_here(capsys, *args: str) -> tuple[int, str]:
    """The CLI in this process (exit status, stderr): quicker than ``cli`` for many small cases."""
    status = docstore.cli.main(list(args))
    return status, capsys.readouterr().err


DEEP = "[" * 20_000 + "]" * 20_000  # deeper than json.loads can recurse


# (input file, its content, options, what the one-line error says)
BUILD_REFUSALS = [
    (
        "dup.csv",
        "doc_id,text,text\na,x,y\n",
        [],
        "dup.csv:1: the header names column 'text' more than once",
    ),
    ("dup.tsv", "a\t1\t2\n", ["--columns", "doc_id,doc_id,n"], "--columns names 'doc_id' more than once"),
    (
        "n.csv",
        "doc_id,n\na,1\nb,\n",
        ["--fields", "n:int64"],
        "n.csv:3: doc 'b': field 'n' is int64, got '' (not an integer)",
    ),
    (
        "n.tsv",
        "a\t1\n\nb\tseven\n",
        ["--columns", "doc_id,n", "--fields", "n:int64"],
        "n.tsv:3: doc 'b': field 'n' is int64, got 'seven' (not an integer)",
    ),
    (
        "f.csv",
        "doc_id,x\na," + "9" * 60 + "z\n",
        ["--fields", "x:float64"],
        "f.csv:2: doc 'a': field 'x' is float64, got '" + "9" * 36 + "... (not a number)",
    ),
    (
        "b.jsonl",
        '{"doc_id": "a", "b": "AAE="}\n{"doc_id": "b", "b": "not base64!"}\n',
        ["--fields", "b:bytes"],
        "b.jsonl:2: doc 'b': field 'b' is bytes, got 'not base64!' (not base64: ",
    ),
    (
        "v.csv",
        'doc_id,v\na,"[1, 2]"\nb,"[1, 2"\n',
        ["--fields", "v:int32[]"],
        "v.csv:3: doc 'b': field 'v' is int32[], got '[1, 2' (not a JSON array: ",
    ),
    (
        "v1.csv",
        "doc_id,v\na,7\n",
        ["--fields", "v:float32[]"],
        "v1.csv:2: doc 'a': field 'v' is float32[], got '7' (not a JSON array)",
    ),
    (
        "id.jsonl",
        '{"doc_id": 1.5, "t": "x"}\n',  # an integer id is its decimal text; a float is refused
        ["--fields", "t:str"],
        "id.jsonl:1: doc ids must be str, got float 1.5",
    ),
    (
        "empty.jsonl",
        '{"doc_id": "a", "t": "x"}\n\n{"doc_id": "", "t": "y"}\n',
        [],
        "empty.jsonl:3: doc ids must be non-empty strings",
    ),
    (
        "type.jsonl",
        '{"doc_id": "a", "t": "x"}\n{"doc_id": "b", "t": 3}\n',
        [],
        'type.jsonl:2: doc "b": field "t" is str, got int',
    ),
    (
        "extra.jsonl",
        '{"doc_id": "a", "t": "x"}\n{"doc_id": "b", "t": "y", "u": 1}\n',
        [],
        'extra.jsonl:2: doc "b": unknown field "u"',
    ),
    (
        "miss.csv",
        'doc_id,t,n\na,"two\nlines",1\n\nb,x,oops\n',
        ["--fields", "t:str,n:int64"],
        "miss.csv:5: doc 'b': field 'n' is int64, got 'oops'",
    ),
    (
        "span.csv",
        'doc_id,t,n\na,"two\nlines",oops\n',
        ["--fields", "t:str,n:int64"],
        "span.csv:2: doc 'a'",
    ),
    (
        "cut.csv",
        'doc_id,t\na,x\nb,"unterminated\nc,z\n',
        [],
        "cut.csv:3: cannot read it as csv: unexpected end",
    ),
    ("short.csv", "doc_id,t\na,x\nb\n", [], "short.csv:3: 1 columns where the header has 2"),
    (
        "deep.jsonl",
        '{"doc_id": "a"}\n{"doc_id": "b", "v": ' + DEEP + "}\n",
        [],
        "deep.jsonl:2: JSON nested too deeply to read",
    ),
    (
        "col.jsonl",
        '{"doc_id": "a"}\n',
        ["--columns", "doc_id,text"],
        "--columns names the columns of header-less csv/tsv input",
    ),
    (
        "key.jsonl",
        '{"doc_id": "a", "text": "x"}\n',
        ["--id-field", "text"],
        "the records have a 'doc_id' field beside the id field 'text'; 'doc_id' is the name",
    ),
    (
        "key2.jsonl",
        '{"doc_id": "a", "text": "x"}\n',
        ["--id-field", "text", "--fields", "t:str"],
        "rename or drop that field, or use it as the key: --id-field doc_id",
    ),
]


@pytest.mark.parametrize(
    ("name", "content", "options", "message"), BUILD_REFUSALS, ids=[case[0] for case in BUILD_REFUSALS]
)
def test_build_refusals_name_the_file_line_field_and_value(capsys, tmp_path, name, content, options, message):
    (tmp_path / name).write_text(content, encoding="utf-8")
    status, err = cli_here(capsys, "build", str(tmp_path / name), "-o", str(tmp_path / "x"), "-q", *options)
    assert status == 1 and message in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "x").exists()


def test_build_csv_skips_blank_lines_and_keeps_quoted_newlines(capsys, tmp_path):
    (tmp_path / "a.csv").write_text('\ndoc_id,t\na,x\n\nb,"two\n\nlines"\n\n\n', encoding="utf-8")
    (tmp_path / "b.tsv").write_text('c\t"q\n\nd\ty\n\n', encoding="utf-8")
    status, err = cli_here(capsys, "build", str(tmp_path / "a.csv"), "-o", str(tmp_path / "s"), "-q")
    assert status == 0, err
    assert [d.t for d in docstore.open(tmp_path / "s").values()] == ["x", "two\n\nlines"]
    status, err = cli_here(
        capsys, "build", str(tmp_path / "b.tsv"), "-o", str(tmp_path / "t"), "-q", "--columns", "doc_id,t"
    )
    assert status == 0, err
    assert docstore.open(tmp_path / "t")["c"].t == '"q'  # TSV has no quoting


def test_build_parquet_takes_field_types_from_the_arrow_schema(capsys, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import numpy as np
    import pyarrow as pa

    from docstore._docstore import ARRAY_DTYPES

    # every element type a field may have (float16 below; Arrow has no bfloat16)
    elements = [e for e in ARRAY_DTYPES if e not in ("float16", "bfloat16")]

    columns = {"doc_id": pa.array(["a", "b"])}
    for name in elements:
        arrow = getattr(pa, name)()
        columns[f"l_{name}"] = pa.array([[1, 2], []], pa.list_(arrow))
        columns[f"ll_{name}"] = pa.array([[3], [4]], pa.large_list(arrow))
        columns[f"fl_{name}"] = pa.array([[5, 6], [7, 8]], pa.list_(arrow, 2))
        columns[f"s_{name}"] = pa.array([1, 2], arrow)
    columns["s_float16"] = pa.array(np.array([0.5, 1], np.float16))
    columns["l_float16"] = pa.array([[0.25], []], pa.list_(pa.float16()))
    columns["big"] = pa.array([[2**64 - 1], []], pa.list_(pa.uint64()))
    columns["text"] = pa.array(["x", "y"], pa.large_string())
    columns["blob"] = pa.array([b"\x00", b""], pa.large_binary())
    columns["cat"] = pa.array(["p", "q"]).dictionary_encode()
    table = pa.table(columns)
    pq.write_table(table, tmp_path / "all.parquet")
    pq.write_table(table.slice(0, 0), tmp_path / "empty.parquet")

    status, err = cli_here(capsys, "build", str(tmp_path / "all.parquet"), "-o", str(tmp_path / "s"), "-q")
    assert status == 0, err
    store = docstore.open(tmp_path / "s")
    for name in elements:
        assert (
            store.fields[f"l_{name}"]
            == store.fields[f"ll_{name}"]
            == store.fields[f"fl_{name}"]
            == f"{name}[]"
        )
        assert store.fields[f"s_{name}"] == ("float64" if name.startswith("float") else "int64")
        b = store["b"]
        assert getattr(b, f"l_{name}").dtype == np.dtype(name) and len(getattr(b, f"l_{name}")) == 0
        assert getattr(b, f"fl_{name}").dtype == np.dtype(name) and getattr(b, f"fl_{name}").tolist() == [
            7,
            8,
        ]
    assert store.fields["s_float16"] == "float64" and store["a"].s_float16 == 0.5
    assert store.fields["l_float16"] == "float16[]" and store["a"].l_float16.tolist() == [0.25]
    assert store["a"].big.tolist() == [2**64 - 1]
    assert (store["a"].text, store["a"].blob, store["b"].cat) == ("x", b"\x00", "q")

    # No rows, but a schema: an empty store with the same fields.
    status, err = cli_here(capsys, "build", str(tmp_path / "empty.parquet"), "-o", str(tmp_path / "e"), "-q")
    assert status == 0, err
    empty = docstore.open(tmp_path / "e")
    assert len(empty) == 0 and empty.fields == store.fields


def test_build_parquet_refuses_columns_it_cannot_store_by_name(capsys, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    pq.write_table(pa.table({"doc_id": ["a"], "flag": [True]}), tmp_path / "bool.parquet")
    pq.write_table(
        pa.table({"doc_id": ["a"], "d": pa.array([1], pa.decimal128(3, 0))}), tmp_path / "decimal.parquet"
    )
    pq.write_table(pa.table({"doc_id": ["a"], "meta": [{"x": 1}], "t": ["y"]}), tmp_path / "struct.parquet")
    pq.write_table(pa.table({"doc_id": ["a"], "m": pa.array([[[1]]])}), tmp_path / "nested.parquet")
    pq.write_table(
        pa.table({"doc_id": ["a", "b"], "n": pa.array([1, 2**64 - 1], pa.uint64())}), tmp_path / "big.parquet"
    )
    pq.write_table(pa.table({"doc_id": ["a", None], "t": ["x", "y"]}), tmp_path / "null.parquet")
    for name, message in [
        (
            "decimal",
            "decimal.parquet: column 'd' has Arrow type decimal128(3, 0), which docstore has no field type",
        ),
        ("struct", "struct.parquet: column 'meta' has Arrow type struct<x: int64>"),
        ("nested", "nested.parquet: column 'm' has Arrow type list<element: list<"),
        ("big", 'big.parquet: row 2: doc "b": field "n" is int64, got 18446744073709551615'),
        ("null", "null.parquet: row 2: doc ids must be str, got NoneType"),
    ]:
        status, err = cli_here(capsys, "build", str(tmp_path / f"{name}.parquet"), "-o", str(tmp_path / "x"))
        assert status == 1 and message in err, err
        assert len(err.strip().splitlines()) == 1 and not (tmp_path / "x").exists(), err
    # --fields names the columns to keep, which leaves out the ones docstore cannot store
    for name, fields in [("bool", "flag:int64"), ("struct", "t:str")]:
        status, err = cli_here(capsys, "build", str(tmp_path / f"{name}.parquet"), "-o", str(tmp_path / name),
                               "-q", "--fields", fields)  # fmt: skip
        assert status == 0, err
    assert docstore.open(tmp_path / "bool")["a"].flag == 1
    status, err = cli_here(capsys, "build", str(tmp_path / "bool.parquet"), "-o", str(tmp_path / "b2"), "-q")
    assert status == 0 and docstore.open(tmp_path / "b2")["a"].flag is True, err  # bool is bool
    assert docstore.open(tmp_path / "struct").fields == {"t": "str"}
    status, err = cli_here(capsys, "build", str(tmp_path / "struct.parquet"), "-o", str(tmp_path / "x"),
                           "--fields", "t:str,nope:str")  # fmt: skip
    assert status == 1 and "struct.parquet has no column 'nope'" in err, err
    status, err = cli_here(capsys, "build", str(tmp_path / "struct.parquet"), "-o", str(tmp_path / "x"),
                           "--columns", "doc_id,t")  # fmt: skip
    assert status == 1 and "--columns names the columns of header-less csv/tsv input" in err, err


def test_version_4_types_from_json_lines_csv_and_parquet_and_back(capsys, tmp_path):
    """Nulls, bools, lists and half floats from every input, integer ids as their decimal text,
    and export's JSON built back into the same documents."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    fields = "title:str?,flag:bool,tags:list[str],raw:list[bytes]?,emb:float16[],n:int64?"
    records = [
        {
            "id": 7,
            "title": "a",
            "flag": True,
            "tags": ["x", "é"],
            "raw": ["aGk="],
            "emb": [1.5, "nan"],
            "n": None,
        },
        {"id": 10**15, "title": None, "flag": False, "tags": [], "raw": None, "emb": [], "n": -3},
    ]
    write_jsonl(tmp_path / "in.jsonl", records)
    args = ["-q", "--id-field", "id"]
    assert (
        cli_here(
            capsys, "build", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "j"), *args, "--fields", fields
        )[0]
        == 0
    )
    store = docstore.open(tmp_path / "j")
    assert list(store) == ["7", "1000000000000000"] and store.info()["format_version"] == 4
    a, b = store.values()
    assert (a.title, a.flag, a.tags, a.raw, a.n) == ("a", True, ["x", "é"], [b"hi"], None)
    assert a.emb.dtype == np.float16 and a.emb[0] == 1.5 and np.isnan(a.emb[1])
    assert (b.title, b.flag, b.tags, b.raw, b.emb.tolist(), b.n) == (None, False, [], None, [], -3)
    # export, then build back: the same documents
    assert cli_here(capsys, "export", str(tmp_path / "j"), "-o", str(tmp_path / "out.jsonl"))[0] == 0
    assert cli_here(capsys, "build", str(tmp_path / "out.jsonl"), "-o", str(tmp_path / "back"), "-q",
                    "--fields", fields)[0] == 0  # fmt: skip
    assert (tmp_path / "back").read_bytes() == (tmp_path / "j").read_bytes()
    # CSV: true/false, lists as JSON arrays, an empty cell of a nullable number is None
    (tmp_path / "in.csv").write_text('doc_id,flag,tags,n\na,true,"[""x""]",\nb,0,[],5\n', encoding="utf-8")
    assert cli_here(capsys, "build", str(tmp_path / "in.csv"), "-o", str(tmp_path / "c"), "-q",
                    "--fields", "flag:bool,tags:list[str],n:int64?")[0] == 0  # fmt: skip
    assert list(docstore.open(tmp_path / "c").values()) == [("a", True, ["x"], None), ("b", False, [], 5)]
    status, err = cli_here(capsys, "build", str(tmp_path / "in.csv"), "-o", str(tmp_path / "d"), "-q",
                           "--fields", "flag:bool,tags:list[str],n:int64")  # fmt: skip
    assert status == 1 and "in.csv:2: doc 'a': field 'n' is int64, got ''" in err, err
    # Parquet: a column holding a null is nullable, integer ids are decimal text
    table = pa.table({"id": [1, 2], "t": ["x", None], "f": [True, False], "l": [["p"], []]})
    pq.write_table(table, tmp_path / "in.parquet", row_group_size=1)
    assert cli_here(capsys, "build", str(tmp_path / "in.parquet"), "-o", str(tmp_path / "p"), *args)[0] == 0
    store = docstore.open(tmp_path / "p")
    assert store.fields == {"t": "str?", "f": "bool", "l": "list[str]"}
    assert list(store.values()) == [("1", "x", True, ["p"]), ("2", None, False, [])]


def test_json_lines_types_are_inferred_from_the_first_records_nulls_making_them_nullable(capsys, tmp_path):
    """Without --fields, a field null in any of the first 1,000 records is nullable, and one null
    in the first record takes its type from a later one; a null after those is refused with the
    --fields that takes it, and a field null throughout names --fields."""
    write_jsonl(
        tmp_path / "a.jsonl", [{"doc_id": "a", "t": None, "n": 1}, {"doc_id": "b", "t": "y", "n": None}]
    )
    assert cli_here(capsys, "build", str(tmp_path / "a.jsonl"), "-o", str(tmp_path / "a"), "-q")[0] == 0
    store = docstore.open(tmp_path / "a")
    assert store.fields == {"t": "str?", "n": "int64?"}
    assert list(store.values()) == [("a", None, 1), ("b", "y", None)]
    late = [{"doc_id": str(i), "t": "x", "n": i} for i in range(1000)] + [
        {"doc_id": "late", "t": None, "n": 1}
    ]
    write_jsonl(tmp_path / "late.jsonl", late)
    status, err = cli_here(capsys, "build", str(tmp_path / "late.jsonl"), "-o", str(tmp_path / "l"), "-q")
    assert status == 1 and "late.jsonl:1001:" in err and "(pass --fields t:str?,n:int64)" in err, err
    assert not (tmp_path / "l").exists()
    assert cli_here(capsys, "build", str(tmp_path / "late.jsonl"), "-o", str(tmp_path / "l"), "-q",
                    "--fields", "t:str?,n:int64")[0] == 0  # fmt: skip
    assert docstore.open(tmp_path / "l")["late"].t is None
    write_jsonl(tmp_path / "none.jsonl", [{"doc_id": "a", "t": None}, {"doc_id": "b", "t": None}])
    status, err = cli_here(capsys, "build", str(tmp_path / "none.jsonl"), "-o", str(tmp_path / "z"), "-q")
    assert status == 1 and "field 't' is null in all of the first 2 records" in err, err
    assert "--fields t:str?" in err
