"""The code blocks of README.md and docs/**/*.md run as tests, as a reader would paste them.

The rule, for every page:

- A ```` ```python ```` block and a ```` ```bash ```` (or ```` ```sh ````) block **runs**; any
  other fence (```` ```text ````, ```` ``` ```` with no language, ```` ```json ```` ...) is a
  display (a synopsis, a layout, some output) and never runs. A command a reader is meant to
  paste goes in a ```` ```bash ```` block, so it is tested.
- A page's blocks run **in order, as pasted**: in a fresh interpreter, whose working directory is
  a fresh, empty temporary directory; the python blocks in one namespace (a later block uses an
  earlier one's names and files), each bash block in a fresh ``bash -e -o pipefail`` in the same
  directory, between the python blocks around it. ``docstore`` and ``python`` on the bash
  blocks' ``PATH`` are this interpreter's. There is **no hidden setup**: a block makes the data
  it needs in plain sight (small: a few hundred documents), or uses what an earlier block of the
  same page made.
- A block that needs the outside world (S3 or another server, a download, a GPU, a cluster that
  is not local, a ``pip install``, a job that runs for minutes) carries the mark
  ``<!-- not run: REASON -->``, an HTML comment (invisible once rendered) on the lines right
  before its fence. It is only checked (python compiled, bash parsed by ``bash -n``), and listed
  with its reason at the end of the session. Every other runnable block must run.

Any other ``<!-- ... -->`` comment right before a runnable fence is refused (a misspelt mark must
not turn a block off in silence, and the old ``<!-- setup: ... -->`` hidden code is gone).
Tracebacks and failures name the page and its line (``README.md:80``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

# Pages whose blocks start a slow engine: their test carries that area's marker (tests/conftest.py).
AREAS = {"docs/engines.md": "engines"}
TIMEOUT = {"docs/engines.md": 400}

KINDS = {"python": "python", "bash": "bash", "sh": "bash"}
_NOT_RUN = re.compile(r"<!--\s*not run:(.*?)-->", re.S)


@dataclass
class Block:
    doc: str  # relative to the repository root
    line: int  # of the block's first code line (1-based)
    kind: str  # "python" or "bash"
    source: str
    not_run: str | None  # the reason, when the block is not run


def _blocks(path: Path) -> list[Block]:
    doc = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        stripped = lines[i].strip()
        if not stripped.startswith("```"):
            i += 1
            continue
        info = stripped[3:].strip().split(" ")[0].lower()
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
        assert end is not None, f"{doc}:{i + 1}: a fence that is never closed"
        kind = KINDS.get(info)
        if kind is not None:
            # The HTML comments right before the fence (whitespace between them).
            before = "\n".join(lines[:i]) + "\n"
            trailing = re.search(r"(?:<!--(?:(?!-->|```).)*-->\s*)+$", before, re.S)
            not_run = None
            for found in re.finditer(r"<!--.*?-->", before[trailing.start() :] if trailing else "", re.S):
                mark = _NOT_RUN.fullmatch(found.group())
                if not mark:
                    raise AssertionError(
                        f"{doc}:{i + 1}: unknown mark before a {kind} block (only "
                        f"'<!-- not run: REASON -->'; no hidden setup): {found.group()[:80]}"
                    )
                not_run = " ".join(mark.group(1).split())
                assert not_run, f"{doc}:{i + 1}: a not-run mark needs its reason"
            source = textwrap.dedent("\n".join(lines[i + 1 : end]) + "\n")
            blocks.append(Block(doc, i + 2, kind, source, not_run))
        i = end + 1
    return blocks


def _parsed(path: Path) -> tuple[list[Block], str | None]:
    # A page that cannot be read (a misspelt mark) fails its own tests, not the whole module.
    try:
        return _blocks(path), None
    except AssertionError as error:
        return [], str(error)


PARSED = {path.relative_to(ROOT).as_posix(): _parsed(path) for path in DOCS}
BLOCKS = {doc: blocks for doc, (blocks, _) in PARSED.items()}
NOT_RUN = [b for blocks in BLOCKS.values() for b in blocks if b.not_run]

# Runs the blocks given as JSON on stdin in order: python ones compiled as their page's lines (so
# a traceback points at the page) in one namespace, bash ones in a fresh bash each.
RUNNER = """
import json, subprocess, sys
ns = {"__name__": "__main__"}
for kind, name, line, source in json.load(sys.stdin):
    if kind == "python":
        exec(compile("\\n" * (line - 1) + source, name, "exec"), ns)
        continue
    sys.stdout.flush(); sys.stderr.flush()
    if subprocess.run(["bash", "-e", "-o", "pipefail", "-c", source]).returncode:
        sys.exit(f"{name}:{line}: this bash block failed (its output is above):\\n{source}")
"""


def _program(blocks: list[Block]) -> list[tuple[str, str, int, str]]:
    return [(b.kind, b.doc, b.line, b.source) for b in blocks if not b.not_run]


def _shims(folder: Path) -> dict[str, str]:
    # `docstore` and `python` in bash blocks: this interpreter's, whatever else is on the PATH.
    folder.mkdir()
    for name, command in (("python", ""), ("python3", ""), ("docstore", " -m docstore.cli")):
        shim = folder / name
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}"{command} "$@"\n')
        shim.chmod(0o755)
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"}


def _params():
    for doc, (blocks, error) in PARSED.items():
        if error or any(not b.not_run for b in blocks):
            marks = [getattr(pytest.mark, AREAS[doc])] if doc in AREAS else []
            yield pytest.param(doc, id=doc, marks=marks)


@pytest.mark.parametrize("doc", list(_params()))
def test_doc_blocks_run(doc, tmp_path):
    assert PARSED[doc][1] is None, PARSED[doc][1]
    work = tmp_path / "work"  # empty: the shims live beside it
    work.mkdir()
    result = subprocess.run(
        [sys.executable, "-c", RUNNER],
        input=json.dumps(_program(BLOCKS[doc])),
        capture_output=True,
        text=True,
        cwd=work,
        env=_shims(tmp_path / "bin"),
        timeout=TIMEOUT.get(doc, 120),
    )
    assert result.returncode == 0, f"{doc}: its blocks failed:\n{result.stdout}\n{result.stderr}"


@pytest.mark.parametrize("doc", list(BLOCKS))
def test_doc_blocks_compile(doc):
    # Not-run blocks too: a block nobody runs still has to be valid Python, or valid bash.
    assert PARSED[doc][1] is None, PARSED[doc][1]
    for b in BLOCKS[doc]:
        if b.kind == "python":
            compile("\n" * (b.line - 1) + b.source, b.doc, "exec")
        else:
            checked = subprocess.run(["bash", "-n"], input=b.source, capture_output=True, text=True)
            assert checked.returncode == 0, f"{b.doc}:{b.line}: not valid bash: {checked.stderr}"


def test_marks_are_read(tmp_path):
    # The parser sees the marks and fences it is meant to see: a mark it missed would run a block
    # that cannot run here (and fail), one it invented would hide a block.
    path = tmp_path / "probe.md"
    path.write_text(
        "a\n\n<!-- not run: needs S3 -->\n```python\nx = 1\n```\n"
        "```text\ndocstore build X\n```\n"
        "<!-- not run: installs -->\n\n```bash\npip install x\n```\n"
        "```sh\ndocstore info s\n```\n"
        "- item\n\n  ```python\n  y = 2\n  ```\n"
    )
    first, second, third, fourth = _blocks(path)
    assert (first.kind, first.not_run, first.line, first.source) == ("python", "needs S3", 5, "x = 1\n")
    assert (second.kind, second.not_run, second.line) == ("bash", "installs", 13)
    assert (third.kind, third.not_run) == ("bash", None)
    assert (fourth.kind, fourth.not_run, fourth.source) == ("python", None, "y = 2\n")
    # A comment that is not right before the fence is not this block's.
    path.write_text("<!-- not run: x -->\ntext\n\n```python\nz = 1\n```\n")
    (only,) = _blocks(path)
    assert only.not_run is None
    # Hidden setup and misspelt marks are refused rather than ignored.
    for mark in ("<!-- setup: y = 2 -->", "<!-- notrun: needs S3 -->", "<!-- not run: -->"):
        path.write_text(f"{mark}\n```python\nx = 1\n```\n")
        with pytest.raises(AssertionError, match="unknown mark|needs its reason"):
            _blocks(path)


def test_readme_keeps_the_quick_start_commands():
    # .ci/run and the users' first steps rely on these two lines, as written.
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert 'pip install ".[demo]" && docstore demo' in readme
    command = (
        'python -m pip install -e ".[test]" && cargo test --release -p docstore-core && python -m pytest'
    )
    assert command in readme
    assert len(readme.splitlines()) <= 250


@pytest.fixture(scope="module", autouse=True)
def _report_not_run(request):
    # At the end of the module, past pytest's capture (a plain print would be swallowed on success).
    yield
    total = sum(len(blocks) for blocks in BLOCKS.values())
    lines = [f"doc blocks: {total - len(NOT_RUN)} run, {len(NOT_RUN)} not run:"]
    lines += [f"  {b.doc}:{b.line} ({b.kind}): {b.not_run}" for b in NOT_RUN]
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line("")
            for line in lines:
                reporter.write_line(line)
