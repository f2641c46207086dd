"""What a path or URL names is decided once, in the core: ``_docstore.is_url`` (what ``Reader``
opens by) answers as the regex ``docstore._store.is_url`` used before it did, on every case."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from docstore import _docstore
from docstore._store import is_url

# The Python side's own answer before the core gave it (docstore/_store.py, until 2026-11).
_OLD = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")


def _old(path: object) -> bool:
    return isinstance(path, str) and _OLD.match(path) is not None


CASES = [
    "s3://bucket/corpus.docstore",
    "S3://bucket/key",
    "https://host/c/",
    "http://user:pass@host/x?sig=1",
    "gs://b/k",
    "az://container/blob",
    "file:///tmp/x.docstore",
    "file://relative",
    "git+ssh://host/x",
    "a.b-c+d://x",
    "x://",
    "corpus.docstore",
    "/abs/path/to/dir",
    "./rel://odd",
    "a/b://c",
    "1s3://b/k",
    "s 3://b/k",
    "://x",
    "s3:/b/k",
    "s3:b",
    "",
    "C:\\\\data\\\\corpus",
    "C://data",
    "é://x",
    "s3é://x",
    "s3://é",
    "\ud800://x",
    "s\ud800://x",
    " s3://x",
    "s3://x://y",
    "ab:/c://d",
]


@pytest.mark.parametrize("text", CASES)
def test_is_url_agrees_with_the_old_regex(text):
    assert _docstore.is_url(text) is _old(text)
    assert is_url(text) is _old(text)


@pytest.mark.parametrize("value", [None, 1, b"s3://b/k", Path("s3://b/k"), ["s3://x"]])
def test_what_is_not_a_str_is_not_a_url(value):
    assert _docstore.is_url(value) is False
    assert is_url(value) is False


def test_is_url_agrees_on_random_strings():
    rng = random.Random(37)
    alphabet = "aZ09+-.:/ _é\\"
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 9)))
        assert _docstore.is_url(text) is _old(text), repr(text)


def test_a_str_subclass_is_read_as_its_text():
    class Name(str):
        pass

    assert _docstore.is_url(Name("s3://b/k")) is True
    assert _docstore.is_url(Name("b/k")) is False
