"""Repeated ids (``--on-duplicate``), progress bars and the errors of the command line, run as
users run it: a separate process, its stderr a pipe or a terminal (a pty)."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import struct
import subprocess
import sys
import termios

import pytest

import docstore


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "docstore.cli", *args], capture_output=True, text=True, timeout=300
    )


def cli_on_a_terminal(*args: str) -> tuple[int, str]:
    """Runs the command with stderr a terminal (stdout a pipe, as ``> file`` leaves it)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 100 columns
    process = subprocess.Popen(
        [sys.executable, "-m", "docstore.cli", *args],
        stdout=subprocess.DEVNULL,
        stderr=follower,
    )
    os.close(follower)
    out = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    return process.wait(timeout=60), out.decode("utf-8", "replace")


RECORDS = [("a", "1"), ("b", "2"), ("a", "3"), ("c", "4"), ("b", "5"), ("a", "6")]


def write_jsonl(path, rows) -> None:
    path.write_text("".join(json.dumps({"doc_id": i, "text": t}) + "\n" for i, t in rows))


def texts(path) -> list[tuple[str, str]]:
    return [(d.doc_id, d.text) for d in docstore.open(path).values()]


def test_build_counts_every_repeat_and_says_where_the_first_few_are(tmp_path):
    write_jsonl(tmp_path / "in.jsonl", RECORDS)
    result = cli("build", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "s"))
    assert result.returncode == 1
    (err,) = result.stderr.splitlines()  # one line, as every mistake
    # The whole count, the first few with both places.
    path = tmp_path / "in.jsonl"
    assert "3 duplicate doc ids (a document with the id of an earlier one)" in err
    assert f"'a' at {path}:3 (first at {path}:1), 'b' at {path}:5 (first at {path}:2)" in err
    assert "--on-duplicate first" in err
    assert not (tmp_path / "s").exists()
    # On a terminal, the first repeat is said at once, before the ids are read again.
    rc, err = cli_on_a_terminal("build", str(path), "-o", str(tmp_path / "s"))
    assert rc == 1
    first = err.index(f"{path}:3: duplicate doc id 'a'; reading the ids again")
    assert first < err.index("3 duplicate doc ids")


@pytest.mark.parametrize(
    ("policy", "kept"),
    [("first", [("a", "1"), ("b", "2"), ("c", "4")]), ("last", [("c", "4"), ("b", "5"), ("a", "6")])],
)
def test_build_keeps_the_first_or_last_of_each_id(tmp_path, policy, kept):
    write_jsonl(tmp_path / "in.jsonl", RECORDS)
    result = cli("build", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "s"), "--on-duplicate", policy)
    assert result.returncode == 0, result.stderr
    assert texts(tmp_path / "s") == kept
    if policy == "first":  # the repeats, which were dropped
        assert "dropped 3 documents whose id came again (--on-duplicate first)" in result.stdout
    else:  # the repeats, which were kept: never said to be dropped
        assert "replaced 3 documents by a later one with the same id (--on-duplicate last)" in result.stdout
        assert "dropped" not in result.stdout
    assert f"'a' at {tmp_path / 'in.jsonl'}:3" in result.stdout


@pytest.mark.parametrize(
    ("policy", "kept"),
    [
        ("error", None),
        ("first", [("a", "1"), ("b", "2"), ("c", "4")]),
        ("last", [("c", "4"), ("b", "5"), ("a", "6")]),
    ],
)
def test_build_shards_applies_the_policy_within_and_across_shards(tmp_path, policy, kept):
    # TSV files go whole to one shard each: "a" repeats within the first and across all three.
    inputs = []
    for k, rows in enumerate([RECORDS[:3], RECORDS[3:5], RECORDS[5:]]):
        path = tmp_path / f"in{k}.tsv"
        path.write_text("doc_id\ttext\n" + "".join(f"{i}\t{t}\n" for i, t in rows))
        inputs.append(str(path))
    out = tmp_path / "c"
    result = cli(
        "build", *inputs, "-o", str(out), "--shards", "3", "--on-duplicate", policy, "--fields", "text:str"
    )
    if kept is None:
        assert result.returncode == 1
        assert "3 duplicate doc ids (a document with the id of an earlier one)" in result.stderr
        assert f"'b' at {inputs[1]}:3 (first at {inputs[0]}:3)" in result.stderr
        assert sorted(os.listdir(tmp_path)) == ["in0.tsv", "in1.tsv", "in2.tsv"]
        return
    assert result.returncode == 0, result.stderr
    assert texts(out) == kept
    assert ("dropped 3 documents" if policy == "first" else "replaced 3 documents") in result.stdout


def test_a_worker_that_builds_two_groups_counts_each_groups_repeats_once(tmp_path, monkeypatch):
    """The pool may hand one worker process a second group (a loaded machine did, and the build
    said "dropped 4 documents" for 3): each group returns its own shards' repeats only."""
    from docstore.cli import shards

    for name in ("_GROUP", "_DROPPED"):  # this process's, restored for the tests that follow
        monkeypatch.setattr(shards, name, getattr(shards, name))
    (tmp_path / "in0.tsv").write_text("doc_id\ttext\na\t1\nb\t2\na\t3\n")
    (tmp_path / "in1.tsv").write_text("doc_id\ttext\nc\t4\n")
    args = ({"text": "str"}, "doc_id", None, None, None, {"tsv": {}}, "first", None, None)
    pieces = [[(str(tmp_path / f"in{g}.tsv"), "tsv", None)] for g in (0, 1)]
    counts = [shards.build_shards(g, [(str(tmp_path / f"s{g}"), pieces[g])], *args) for g in (0, 1)]
    assert counts == [1, 0]


def test_seal_on_duplicate_and_its_advice(tmp_path):
    for name, rows in (("x", RECORDS[:2]), ("y", RECORDS[2:4])):
        docstore.build(tmp_path / name, [{"doc_id": i, "text": t} for i, t in rows])
    shards = [str(tmp_path / "x"), str(tmp_path / "y")]
    result = cli("seal", str(tmp_path / "c"), *shards)
    assert result.returncode == 1 and "--on-duplicate first or --on-duplicate last" in result.stderr
    result = cli("seal", str(tmp_path / "c"), *shards, "--on-duplicate", "last")
    assert result.returncode == 0 and "1 repeats dropped" in result.stdout
    assert texts(tmp_path / "c") == [("b", "2"), ("a", "3"), ("c", "4")]
    # The library's advice (overwrite=True) said as the command takes it.
    result = cli("seal", str(tmp_path / "c"), shards[0])
    assert result.returncode == 1
    assert "pass --overwrite" in result.stderr and "overwrite=True" not in result.stderr


def test_info_of_a_file_that_is_not_a_store(tmp_path):
    (tmp_path / "notes.txt").write_text("hello\n" * 100)
    result = cli("info", str(tmp_path / "notes.txt"))
    assert result.returncode == 1
    assert f"{tmp_path / 'notes.txt'} is not a docstore file" in result.stderr
    assert "corrupt" not in result.stderr


def sample(tmp_path, n: int = 30_000):
    path = tmp_path / "in.jsonl"
    write_jsonl(path, ((f"d{i}", f"text {i} " * 5) for i in range(n)))
    return path


def test_build_shows_a_bar_of_the_input_bytes_only_on_a_terminal(tmp_path):
    path = sample(tmp_path)
    size = os.path.getsize(path)
    rc, err = cli_on_a_terminal("build", str(path), "-o", str(tmp_path / "a"))
    assert rc == 0, err
    # The total (the input's bytes, in MB) and the end reached: tqdm's "100%|...| 1.1M/1.1M".
    total = f"{size / 2**20:.2f}M"
    assert "build: 100%" in err and f"/{total}" in err, err
    rc, err = cli_on_a_terminal("build", str(path), "-o", str(tmp_path / "b"), "--quiet")
    assert rc == 0 and "%|" not in err, err
    result = cli("build", str(path), "-o", str(tmp_path / "c"))  # stderr a pipe
    assert result.returncode == 0 and result.stderr == ""


@pytest.mark.parametrize("command", ["verify", "export", "upgrade", "seal", "shards"])
def test_long_commands_show_a_bar_on_a_terminal_and_not_when_quiet(tmp_path, command):
    path = sample(tmp_path, 20_000)
    store = str(tmp_path / "s")
    assert cli("build", str(path), "-o", store).returncode == 0
    args = {
        "verify": ["verify", store],
        "export": ["export", store, "-o", str(tmp_path / "out.jsonl")],
        "upgrade": ["upgrade", store, str(tmp_path / "u")],
        "seal": ["seal", str(tmp_path / "c"), store],
        "shards": ["build", str(path), "-o", str(tmp_path / "c"), "--shards", "2"],
    }[command]
    rc, err = cli_on_a_terminal(*args)
    assert rc == 0, err
    assert "100%|" in err, err
    for name in ("c", "u", "out.jsonl"):
        if (tmp_path / name).is_dir():
            import shutil

            shutil.rmtree(tmp_path / name)
        elif (tmp_path / name).exists():
            (tmp_path / name).unlink()
    rc, err = cli_on_a_terminal(*args, "--quiet")
    assert rc == 0 and "%|" not in err, err


def test_python_build_shows_a_bar_for_a_sized_input(tmp_path, capsys):
    rows = [{"doc_id": f"d{i}", "text": "x"} for i in range(20_000)]
    docstore.build(tmp_path / "a", rows, progress=True)
    err = capsys.readouterr().err
    assert "build: 100%" in err and "20.0k/20.0k" in err, err
    docstore.build(tmp_path / "b", rows)  # stderr is not a terminal here: quiet
    docstore.build(tmp_path / "c", iter(rows), progress=None)  # no length: no bar
    assert capsys.readouterr().err == ""


def test_seal_reports_its_steps_two_a_document(tmp_path, capsys):
    shards = []
    for k in range(3):
        shards.append(str(tmp_path / f"s{k}"))
        docstore.build(shards[-1], [{"doc_id": f"{k}-{i}", "text": "x"} for i in range(5_000)])
    calls = []
    assert docstore._docstore.seal(str(tmp_path / "c"), shards, progress=lambda *a: calls.append(a)) == 15_000
    assert calls[-1] == (30_000, 30_000)
    assert all(done <= total for done, total in calls) and calls == sorted(calls)
    docstore.seal(tmp_path / "d", shards, progress=True)
    err = capsys.readouterr().err
    assert "seal: 100%" in err and "30.0k/30.0k" in err, err
    docstore.seal(tmp_path / "e", shards)  # progress=False, the default: quiet
    assert capsys.readouterr().err == ""


def test_a_build_that_draws_no_bar_does_not_import_tqdm(tmp_path):
    # Importing tqdm costs ~55 ms, as long as building a 5 MB store: a build in a script or a
    # worker (stderr not a terminal) must not pay it; one that draws a bar does.
    code = (
        "import sys, docstore\n"
        "rows = [{'doc_id': f'd{i}', 'text': 'x'} for i in range(100)]\n"
        "docstore.build(sys.argv[1], rows)\n"
        "print('tqdm' in sys.modules)\n"
        "docstore.build(sys.argv[2], rows, progress=True)\n"
        "print('tqdm' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "a"), str(tmp_path / "b")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert out.stdout.split() == ["False", "True"], out.stderr


def test_progress_true_without_a_stderr_draws_nothing(tmp_path, monkeypatch):
    """``sys.stderr`` is None in a ``pythonw`` process or a daemon: ``progress=True`` then means
    no bar, not tqdm's AttributeError."""
    monkeypatch.setattr(sys, "stderr", None)
    rows = [{"doc_id": f"d{i}", "text": "x"} for i in range(100)]
    store = docstore.build(tmp_path / "a", rows, progress=True)
    docstore.build(tmp_path / "b", [{"doc_id": "e", "text": "y"}], progress=True)
    sealed = docstore.seal(tmp_path / "c", [tmp_path / "a", tmp_path / "b"], progress=True)
    assert len(store) == 100 and len(sealed) == 101
    assert len(docstore.upgrade(tmp_path / "a", tmp_path / "d", progress=True)) == 100
    docstore._progress.verify(sealed, progress=True)
    with docstore._progress.bar(10, "docs", progress=True) as shown:
        shown.update(10)
    assert shown.disable
