"""A cache directory that several users share (issue 36 §4, docs/remote.md "Who may share a
cache_dir"), read by two users in turn: root and a second uid that ``setpriv`` gives (no
account needed), each in a fresh interpreter, through one HTTP server on 127.0.0.1.

- A group's directory (setgid, writable by the group: ``2775 root:<group>``): the second user
  is a member (a supplementary group, its own primary group another), and each reads the bytes
  the other fetched: the second open sends one request, the open's own. Before, such a
  directory was refused ("writable by other users without the sticky bit").
- A sticky directory every user may write (``1777``, ``/tmp``-like): both read, each from
  entries of their own. Before, the second user failed with "usage: Operation not permitted"
  (the first user's ``usage`` file, which it could neither open nor replace).

Both orders are run (root first, the second user first). The test needs root and ``setpriv``
(util-linux) and says so where they are missing; the second user runs the interpreter and
imports the docstore under test in place (``PYTHONPATH``): where it cannot read them, it is
given ``CAP_DAC_READ_SEARCH`` alone (reading, never writing: the cache's modes are tested as
they are), else the test is skipped saying why.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile

import pytest

from ..conftest import make_docs, write_store
from ..support.remote_servers import RangeHTTPServer
from .conftest import FAST, PYTHONPATH

NAME = "corpus.docstore"
OTHER_UID = 54_322
GROUP = 54_322  # the shared group: the second user's supplementary group
OTHER_PRIMARY = 54_323  # its primary group: not the directory's

pytestmark = [
    pytest.mark.skipif(sys.platform != "linux", reason="setpriv and Unix modes are Linux's here"),
    pytest.mark.skipif(
        not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to run as a second uid"
    ),
    pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux) for a second uid"),
]

# Reads every document through the cache, prints what the read cost and a digest of the texts.
READER = """
import hashlib, json, os, docstore
os.umask(0o022)  # the usual umask: the group's modes must not depend on it
store = docstore.open({url!r}, cache_dir={cache!r}, storage_options={options!r})
ids = list(store)
got = store.get_many(ids)
digest = hashlib.sha256("\\0".join(got[i].text for i in ids).encode()).hexdigest()
print(json.dumps({{"uid": os.geteuid(), "digest": digest, "stats": store.remote_stats()}}))
"""

SETPRIV = ["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_PRIMARY}", f"--groups={GROUP}"]


def _env(home: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": PYTHONPATH, "HOME": home, "PYTHONDONTWRITEBYTECODE": "1"}


@pytest.fixture(scope="module")
def as_other(tmp_path_factory):
    """The command prefix that runs a program as the second user, able to import docstore."""
    home = tempfile.mkdtemp(prefix="docstore-other-home-")
    os.chmod(home, 0o755)
    probe = [sys.executable, "-c", "import docstore, numpy"]
    tries = [SETPRIV, [*SETPRIV, "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]]
    try:
        for prefix in tries:
            out = subprocess.run(
                [*prefix, *probe], env=_env(home), capture_output=True, text=True, timeout=60
            )
            if out.returncode == 0:
                yield prefix, home
                return
        pytest.skip(f"uid {OTHER_UID} cannot import docstore from {PYTHONPATH}: {out.stderr[-500:]}")
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def docs():
    return make_docs(2000, seed=36)


@pytest.fixture(scope="module")
def served(tmp_path_factory, docs):
    root = tmp_path_factory.mktemp("served")
    write_store(root / NAME, docs, level=-1).close()
    assert (root / NAME).stat().st_size > 4 * 128 << 10, "larger than what an open fetches"
    server = RangeHTTPServer(str(root))  # Last-Modified: a validator, so a shared cache
    yield f"{server.url}/{NAME}"
    server.stop()


@pytest.fixture
def shared_dir():
    """A directory both users can reach (pytest's own tmp_path is root's, 0700)."""
    base = tempfile.mkdtemp(prefix="docstore-shared-cache-")
    os.chmod(base, 0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def _run(prefix, home, url, cache) -> subprocess.CompletedProcess:
    code = READER.format(url=url, cache=cache, options=FAST)
    command = [*prefix, sys.executable, "-c", code]
    return subprocess.run(command, env=_env(home), capture_output=True, text=True, timeout=120)


def _read(prefix, home, url, cache) -> dict:
    out = _run(prefix, home, url, cache)
    assert out.returncode == 0, f"{prefix[:1]} failed: {out.stderr[-3000:]}"
    return json.loads(out.stdout)


def _expected(docs) -> str:
    return hashlib.sha256("\0".join(d["text"] for d in docs.values()).encode()).hexdigest()


@pytest.mark.parametrize("other_first", [False, True], ids=["root-first", "other-first"])
def test_a_groups_directory_is_shared_by_its_members(as_other, served, docs, shared_dir, other_first):
    prefix, home = as_other
    cache = os.path.join(shared_dir, "cache")
    os.mkdir(cache)
    os.chown(cache, 0, GROUP)
    os.chmod(cache, 0o2775)
    readers = [([], "root"), (prefix, "other")]
    if other_first:
        readers.reverse()
    (first_prefix, first), (second_prefix, second) = readers
    one = _read(first_prefix, home, served, cache)
    two = _read(second_prefix, home, served, cache)
    assert {one["uid"], two["uid"]} == {0, OTHER_UID}
    assert one["digest"] == two["digest"] == _expected(docs)
    assert one["stats"]["requests"] > 1, f"{first} fetched the documents"
    assert two["stats"]["requests"] == 1, f"{second} read {first}'s bytes: only its open was sent"
    # One entry, made for the group whatever the umask: 2770, its files and the counter 0660.
    (entry,) = [e for e in os.scandir(cache) if e.is_dir()]
    for path, mode in [(entry.path, 0o2770), (f"{entry.path}/data", 0o660), (f"{entry.path}/map", 0o660)]:
        st = os.lstat(path)
        assert (stat.S_IMODE(st.st_mode), st.st_gid) == (mode, GROUP), path
    usage = os.lstat(os.path.join(cache, "usage"))
    assert (stat.S_IMODE(usage.st_mode), usage.st_gid) == (0o660, GROUP)


@pytest.mark.parametrize("other_first", [False, True], ids=["root-first", "other-first"])
def test_a_sticky_directory_gives_each_user_their_own_entries(
    as_other, served, docs, shared_dir, other_first
):
    prefix, home = as_other
    cache = os.path.join(shared_dir, "cache")
    os.mkdir(cache)
    os.chmod(cache, 0o1777)
    readers = [[], prefix]
    if other_first:
        readers.reverse()
    for reader in readers:
        got = _read(reader, home, served, cache)
        assert got["digest"] == _expected(docs)
        assert got["stats"]["requests"] > 1, "another user's bytes are never read"
    entries = [e for e in os.scandir(cache) if e.is_dir() and not e.name.startswith(".")]
    owners = sorted(os.lstat(e.path).st_uid for e in entries)
    assert owners == [0, OTHER_UID]
    assert sorted(e.name for e in os.scandir(cache) if e.name.startswith("usage")) == [
        "usage.0",
        f"usage.{OTHER_UID}",
    ]
    # Each user's own read again: warm, from their own entry.
    for reader in readers:
        assert _read(reader, home, served, cache)["stats"]["requests"] == 1


def test_a_groups_directory_is_refused_to_a_user_outside_the_group(as_other, served, shared_dir):
    """The second user without the group may not write the directory: refused, saying so."""
    prefix, home = as_other
    outsider = [*(a for a in prefix if not a.startswith("--groups")), "--clear-groups"]
    cache = os.path.join(shared_dir, "cache")
    os.mkdir(cache)
    os.chown(cache, 0, GROUP)
    os.chmod(cache, 0o2775)
    _read([], home, served, cache)
    out = _run(outsider, home, served, cache)
    assert out.returncode != 0, out.stdout
    assert f"InvalidArgumentError: cache_dir {cache}: the directory of group {GROUP}" in out.stderr, (
        out.stderr
    )
