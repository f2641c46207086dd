"""The ```python blocks of README.md and docs/*.md run as tests.

Each doc's blocks run in order in one namespace (a later block uses an earlier one's names), in a
fresh interpreter (a crash or a hang there fails the test, with a timeout) whose working directory
is a fresh temporary directory. Tracebacks name the doc and its line (``README.md:80``).

Two marks steer a block, each an HTML comment (invisible once rendered) on the lines right before
its fence:

- ``<!-- not run: REASON -->``: the block cannot run here (S3 credentials, a GPU, a model or
  ir_datasets download, a file the reader brings): it is only compiled, and counted and reported
  with its reason at the end of the session. A block without this mark must run.
- ``<!-- setup: CODE -->`` (CODE may span lines): hidden code run right before the block, in the
  same namespace, to define what the reader is told to bring (``ids``, ``records``, shard files).

Any other ``<!-- ... -->`` comment right before a fence is refused, so that a misspelt mark does
not turn a block off in silence.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Docs whose blocks need a slow engine: their test carries that area's marker (tests/conftest.py).
AREAS = {"docs/engines.md": "engines"}
TIMEOUT = {"docs/engines.md": 400}

_MARK = re.compile(r"<!--\s*(not run|setup):(.*?)-->", re.S)


@dataclass
class Block:
    doc: str  # relative to the repository root
    line: int  # of the fence's first code line (1-based)
    source: str
    setup: str | None  # hidden code, run before the block
    setup_line: int
    not_run: str | None  # the reason, when the block is not run


def _blocks(path: Path) -> list[Block]:
    doc = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].strip() != "```python":
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
        # The HTML comments right before the fence (whitespace between them).
        before = "\n".join(lines[:i]) + "\n"
        trailing = re.search(r"(?:<!--(?:(?!-->|```).)*-->\s*)+$", before, re.S)
        offset = trailing.start() if trailing else len(before)
        setup = not_run = None
        setup_line = 0
        for found in re.finditer(r"<!--.*?-->", before[offset:], re.S):
            mark = _MARK.fullmatch(found.group())
            if not mark:
                raise AssertionError(f"{doc}:{i + 1}: unknown mark before a python block: {found.group()}")
            if mark.group(1) == "not run":
                not_run = " ".join(mark.group(2).split())
                assert not_run, f"{doc}:{i + 1}: a not-run mark needs its reason"
            else:
                # Compiled as the doc's lines from the one that holds "setup:" on.
                setup = mark.group(2).lstrip(" ")
                setup_line = before[: offset + found.start() + mark.start(2)].count("\n") + 1
        blocks.append(
            Block(
                doc, i + 2, textwrap.dedent("\n".join(lines[i + 1 : end]) + "\n"), setup, setup_line, not_run
            )
        )
        i = end + 1
    return blocks


BLOCKS = {path.relative_to(ROOT).as_posix(): _blocks(path) for path in DOCS}
NOT_RUN = [b for blocks in BLOCKS.values() for b in blocks if b.not_run]

# Runs the blocks given as JSON on stdin, each compiled as its doc's lines (so a traceback points
# at the doc), in one namespace.
RUNNER = """
import json, sys
ns = {"__name__": "__main__"}
for name, line, source in json.load(sys.stdin):
    exec(compile("\\n" * (line - 1) + source, name, "exec"), ns)
"""


def _program(blocks: list[Block]) -> list[tuple[str, int, str]]:
    program = []
    for b in blocks:
        if b.not_run:
            continue
        if b.setup is not None:
            program.append((f"{b.doc} (setup)", b.setup_line, b.setup))
        program.append((b.doc, b.line, b.source))
    return program


def _params():
    for doc, blocks in BLOCKS.items():
        if any(not b.not_run for b in blocks):
            marks = [getattr(pytest.mark, AREAS[doc])] if doc in AREAS else []
            yield pytest.param(doc, id=doc, marks=marks)


@pytest.mark.parametrize("doc", list(_params()))
def test_doc_blocks_run(doc, tmp_path):
    program = _program(BLOCKS[doc])
    result = subprocess.run(
        [sys.executable, "-c", RUNNER],
        input=json.dumps(program),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=TIMEOUT.get(doc, 120),
    )
    assert result.returncode == 0, f"{doc}: its python blocks failed:\n{result.stdout}\n{result.stderr}"


@pytest.mark.parametrize("doc", list(BLOCKS))
def test_doc_blocks_compile(doc):
    # Not-run blocks too: a block nobody runs still has to be valid Python.
    for b in BLOCKS[doc]:
        compile("\n" * (b.line - 1) + b.source, b.doc, "exec")
        if b.setup is not None:
            compile("\n" * (b.setup_line - 1) + b.setup, f"{b.doc} (setup)", "exec")


def test_marks_are_read(tmp_path):
    # The parser sees the marks it is meant to see: a mark it missed would run a block that
    # cannot run here (and fail), one it invented would hide a block.
    text = (
        "a\n\n<!-- not run: needs S3 -->\n```python\nx = 1\n```\n"
        "<!-- setup:\ny = 2\n-->\n```python\nz = y\n```\n"
    )
    path = tmp_path / "probe.md"
    path.write_text(text)
    first, second = _blocks(path)
    assert (first.not_run, first.setup, first.line) == ("needs S3", None, 5)
    assert (second.not_run, second.setup, second.setup_line, second.line) == (None, "\ny = 2\n", 7, 11)
    # A one-line setup, and a comment that is not right before the fence: not this block's.
    path.write_text("<!-- not run: x -->\ntext\n<!-- setup: y = 2 -->\n\n```python\nz = y\n```\n")
    (only,) = _blocks(path)
    assert (only.not_run, only.setup, only.setup_line) == (None, "y = 2 ", 3)
    # A misspelt mark is refused rather than ignored.
    path.write_text("<!-- notrun: needs S3 -->\n```python\nx = 1\n```\n")
    with pytest.raises(AssertionError, match="unknown mark"):
        _blocks(path)


@pytest.fixture(scope="module", autouse=True)
def _report_not_run(request):
    # At the end of the module, past pytest's capture (a plain print would be swallowed on success).
    yield
    total = sum(len(blocks) for blocks in BLOCKS.values())
    lines = [f"doc blocks: {total - len(NOT_RUN)} run, {len(NOT_RUN)} not run:"]
    lines += [f"  {b.doc}:{b.line}: {b.not_run}" for b in NOT_RUN]
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line("")
            for line in lines:
                reporter.write_line(line)
