"""Many documents: millions of tiny ones, and a build whose memory must not grow with the corpus."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import numpy as np

import docstore


def test_millions_of_tiny_documents(tmp_path):
    n = 2_000_000
    path = tmp_path / "tiny"
    with docstore.Writer(path, fields={"n": "int64", "t": "str"}, level=0) as w:
        for start in range(0, n, 200_000):
            ids = [f"t{i}" for i in range(start, start + 200_000)]
            w.add_many(ids, {"n": np.arange(start, start + 200_000), "t": ["x"] * 200_000})
    store = docstore.open(path)
    assert len(store) == n
    rng = random.Random(0)
    sample = rng.sample(range(n), 5000)
    got = store.get_many([f"t{i}" for i in sample], field="n")
    assert list(got.values()) == sample
    assert [d.n for d in store.take(sample[:100])] == sample[:100]
    assert store.at(-1).doc_id == f"t{n - 1}"
    assert "t2000000" not in store and "t1999999" in store
    store.verify()


BUILD = """
import json, resource, sys, docstore
n, path = int(sys.argv[1]), sys.argv[2]
with docstore.Writer(path, fields={"text": "str"}, level=0, key_buffer_bytes=8 << 20) as w:
    for start in range(0, n, 50_000):
        ids = [f"msmarco-passage-{i * 7 % (n * 7)}" for i in range(start, min(n, start + 50_000))]
        w.add_many(ids, {"text": [f"short passage {i}" for i in range(len(ids))]})
print(json.dumps({"peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def test_build_memory_does_not_grow_with_the_corpus(tmp_path):
    peaks = {}
    for n in (300_000, 2_400_000):
        proc = subprocess.run(
            [sys.executable, "-c", BUILD, str(n), str(tmp_path / f"s{n}")],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr
        peaks[n] = json.loads(proc.stdout)["peak_kb"] / 1024
        assert len(docstore.open(tmp_path / f"s{n}")) == n
    # 8x the documents (keys spilled in sorted runs, records streamed to disk): the peak RSS may
    # grow by buffers, not by the corpus (in memory, 2.1M more keys alone would be ~100 MB).
    assert peaks[2_400_000] - peaks[300_000] < 48, peaks
