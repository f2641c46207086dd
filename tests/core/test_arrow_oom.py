"""The Arrow read path (``Reader._take_columns``: the engines' reads and both lookup joins) under a
memory limit (issue 36 §4): a batch whose columns do not fit raises ``MemoryError``, as
``store[id]`` does, and the process lives on. Before, the columns grew with infallible
allocations and the process died of SIGABRT (a 60M-item ``list[bytes]`` document under a 600 MB
limit); here the same, scaled down: 8M empty items (64 MB of item offsets) under 40 MB of
headroom, and a 64 MiB ``bytes`` value that decodes under the limit but whose column does not fit.

Reads run in a fresh interpreter under ``RLIMIT_AS`` (an abort there fails the test, not the run).
"""

from __future__ import annotations

import json
import signal
import sys

import pytest

import docstore

from ..conftest import run_python

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS and /proc are Linux's")

ITEMS = 8_000_000
BIG = 64 << 20

# Each read runs under an address space limit of the process's size then plus `headroom` bytes
# (lifted after), once the pool's threads and a first batch exist. Prints each outcome.
UNDER_LIMIT = """
import json, resource, docstore

store = docstore.open({path!r})
assert store._take_columns([0], ["items", "b"])[1][1][1].tobytes() == b"x"

def vm_size():
    for line in open("/proc/self/status"):
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024

outcomes = {{}}
for name, (positions, fields, headroom) in {reads!r}.items():
    resource.setrlimit(resource.RLIMIT_AS, (vm_size() + headroom, resource.RLIM_INFINITY))
    try:
        store._take_columns(positions, fields)
        outcomes[name] = "ok"
    except Exception as e:
        outcomes[name] = f"{{type(e).__name__}}: {{e}}"
    # The process goes on: a small batch still reads, under the limit too.
    (_, ids, _, _), [(_, data, _, _)] = store._take_columns([0], ["b"])
    assert ids.tobytes() == b"small" and data.tobytes() == b"x"
    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
print(json.dumps(outcomes))
"""


@pytest.fixture(scope="module")
def big_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("oom") / "big.docstore"
    with docstore.Writer(path, {"items": "list[bytes]", "b": "bytes"}) as w:
        w.add("small", items=[b"x"], b=b"x")
        w.add("many", items=[b""] * ITEMS, b=b"")
        w.add("long", items=[], b=b"0123456789abcdef" * (BIG // 16))
    assert path.stat().st_size < 4 << 20
    return path


def test_columns_too_large_for_the_memory_limit_raise_memory_error(big_store):
    reads = {
        # 8 MB decoded, then item offsets doubling towards 64 MB: past the limit.
        "list items": ([0, 1], ["items"], 40 << 20),
        # Decoding (64 MiB) and the batch's copy (64 MiB) fit; the column's copy does not.
        "bytes": ([2, 0], ["b"], 160 << 20),
    }
    proc = run_python(UNDER_LIMIT.format(path=str(big_store), reads=reads), timeout=300)
    assert proc.returncode == 0, (
        f"died of {signal.Signals(-proc.returncode).name}" if proc.returncode < 0 else proc.returncode,
        proc.stderr[-3000:],
    )
    outcomes = json.loads(proc.stdout)
    assert outcomes.keys() == reads.keys()
    for name, outcome in outcomes.items():
        assert outcome.startswith("MemoryError: out of memory"), (name, outcome)


def test_without_a_limit_the_same_columns_read(big_store):
    store = docstore.open(big_store)
    (_, ids, _, _), [(offsets, data, items, valid)] = store._take_columns([1, 0], ["items"])
    assert ids.tobytes() == b"manysmall" and valid is None
    assert offsets.tolist() == [0, ITEMS, ITEMS + 1]
    assert len(items) == ITEMS + 2 and items[-1] == 1 and data.tobytes() == b"x"
    (_, _, _, _), [(offsets, data, _, _)] = store._take_columns([2], ["b"])
    assert offsets.tolist() == [0, BIG] and data[:16].tobytes() == b"0123456789abcdef"
    # The arrays own their buffers (no copy): they stay valid once the store is gone.
    del store
    assert data.flags.owndata is False and data.base is not None and data[-1] == ord("f")
