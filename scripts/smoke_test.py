"""Smoke test of an installed docstore wheel, run outside the source tree.

    python scripts/smoke_test.py [--require-torch]

Builds a store (text, numeric and array fields), opens it, and checks lookups by id and position,
batch lookups, a parallel decode, a collection of two shards, ``verify()``, the CLI entry point
and, where torch is installed, a ``docstore.torch`` DataLoader. It imports docstore from
site-packages, never from ``python/`` (run it from any directory but the repository root, or with
``python -I``); CI (.ci/run) and ``scripts/test_wheels.sh`` run it in a venv with no Rust.
Uses only the standard library, numpy and docstore (and torch when present).
"""

from __future__ import annotations

import os
import pickle
import platform
import subprocess
import sys
import sysconfig
import tempfile


def same(a, b) -> bool:
    """Two documents with the same fields (arrays compared by value)."""
    import numpy as np

    a, b = a._asdict(), b._asdict()
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def main() -> int:
    require_torch = "--require-torch" in sys.argv[1:]
    import numpy as np

    import docstore

    here = os.path.dirname(os.path.abspath(docstore.__file__))
    if "site-packages" not in here and "dist-packages" not in here:
        print(f"FAIL: docstore imported from {here}, not from an installed wheel")
        return 1
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    print(
        f"docstore from {here}\n"
        f"CPython {platform.python_version()} {platform.machine()}"
        f"{' free-threaded' if sysconfig.get_config_var('Py_GIL_DISABLED') else ''}"
        f" (GIL {'enabled' if gil else 'disabled'}), numpy {np.__version__}"
    )

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "smoke.docstore")
        n = 2000
        with docstore.Writer(
            path, fields={"text": "str", "label": "int64", "score": "float64", "tokens": "int32[]"}
        ) as w:
            for i in range(n):
                w.add(
                    f"doc{i}",
                    text=f"document {i}: the quick brown fox jumps over the lazy dog " * (1 + i % 5)
                    + "héllo wörld ✓ 𝄞",
                    label=i % 7,
                    score=i / 3,
                    tokens=np.arange(i % 50, dtype=np.int32) * 1000,
                )
        store = docstore.open(path)
        assert len(store) == n, len(store)
        doc = store["doc42"]
        assert doc.doc_id == "doc42" and doc.label == 42 % 7 and doc.score == 42 / 3, doc
        assert doc.text.startswith("document 42:") and doc.text.endswith("𝄞"), doc.text
        assert doc.tokens.dtype == np.int32 and doc.tokens.tolist() == [k * 1000 for k in range(42)]
        assert store.at(-1).doc_id == f"doc{n - 1}"
        assert store.get("nope") is None and "doc7" in store and "nope" not in store
        got = store.get_many(["doc5", "nope", "doc3"])
        assert list(got) == ["doc5", "doc3"], list(got)
        positions = np.random.default_rng(0).permutation(n)[:500]
        taken = store.take(positions)
        assert [d.doc_id for d in taken] == [f"doc{p}" for p in positions]
        assert store.positions(["doc9", "nope"]).tolist() == [9, -1]
        assert store.take([3, 1], field="label") == [3, 1]
        assert same(pickle.loads(pickle.dumps(store))["doc33"], store["doc33"])
        pread = docstore.open(path, read="pread")
        assert same(pread["doc1999"], store["doc1999"])
        store.verify()
        info = store.info()
        print(f"store: {n} documents, {info}")

        # A collection: two shards sealed into one directory that reads as one store.
        parts = []
        for s in range(2):
            parts.append(os.path.join(tmp, f"part-{s}.docstore"))
            docstore.build(
                parts[-1],
                [{"doc_id": f"s{s}-{i}", "text": f"shard {s} doc {i}"} for i in range(100)],
                id_field="doc_id",
            )
        coll = docstore.seal(os.path.join(tmp, "coll"), parts)
        assert len(coll) == 200 and coll["s1-5"].text == "shard 1 doc 5"

        # The console script the wheel installs.
        exe = os.path.join(os.path.dirname(sys.executable), "docstore")
        if os.path.exists(exe):
            out = subprocess.run([exe, "--help"], capture_output=True, text=True, check=True)
            assert "docstore" in out.stdout
            print("cli: docstore --help ok")

        try:
            import torch
        except ImportError:
            if require_torch:
                print("FAIL: torch is not installed (--require-torch)")
                return 1
            print("torch: not installed, docstore.torch skipped")
        else:
            from torch.utils.data import DataLoader

            from docstore.torch import DocDataset, distributed_sampler

            ds = DocDataset(path, field="label")
            loader = DataLoader(ds, batch_size=64, sampler=distributed_sampler(ds, shuffle=False))
            batches = list(loader)
            assert sum(len(b) for b in batches) == n
            assert torch.equal(batches[0], torch.arange(64) % 7), batches[0]
            print(f"torch {torch.__version__}: docstore.torch DataLoader ok")
        del store, pread, coll

    print("SMOKE TEST OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
