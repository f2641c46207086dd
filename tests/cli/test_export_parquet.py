"""``docstore export -o FILE.parquet`` and back with ``docstore build FILE.parquet``: the
documents, their ids, order and types come back (``bfloat16[]`` as float32, its values exact)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import docstore

pq = pytest.importorskip("pyarrow.parquet")

FIELDS = {
    "text": "str",
    "raw": "bytes?",
    "n": "int64",
    "x": "float64?",
    "ok": "bool",
    "tags": "list[str]",
    "ids": "int32[]",
    "half": "float16[]",
    "grid": "float32[2,3]",
}


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "docstore.cli", *args], capture_output=True, text=True, timeout=300
    )


def same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.asarray(a).shape == np.asarray(b).shape and np.array_equal(
            np.asarray(a), np.asarray(b), equal_nan=True
        )
    return a == b


def test_export_parquet_then_build_gives_the_store_back(tmp_path):
    rng = np.random.default_rng(1)
    with docstore.Writer(tmp_path / "s", fields=FIELDS) as writer:
        for i in range(300):
            writer.add(
                f"d{i}",
                text=f"text {i}",
                raw=None if i % 7 == 0 else rng.bytes(i % 11),
                n=i * 3 - 100,
                x=None if i % 5 == 0 else float(rng.standard_normal()),
                ok=bool(i % 2),
                tags=[f"t{j}" for j in range(i % 4)],
                ids=np.arange(i % 9, dtype=np.int32),
                half=rng.standard_normal(i % 6).astype(np.float16),
                grid=rng.standard_normal((2, 3)).astype(np.float32),
            )
    original = docstore.open(tmp_path / "s")
    out = tmp_path / "s.parquet"
    result = cli("export", str(tmp_path / "s"), "-o", str(out), "-q")
    assert result.returncode == 0, result.stderr
    assert pq.ParquetFile(out).metadata.num_rows == 300
    rebuilt = cli("build", str(out), "-o", str(tmp_path / "t"), "--fields", _fields_arg(), "-q")
    assert rebuilt.returncode == 0, rebuilt.stderr
    again = docstore.open(tmp_path / "t")
    assert again.fields == original.fields and list(again) == list(original)
    for a, b in zip(original.values(), again.values()):
        assert all(same(getattr(a, f), getattr(b, f)) for f in FIELDS), (a, b)
    # without --fields, the types come from the file's Arrow schema
    inferred = cli("build", str(out), "-o", str(tmp_path / "u"), "-q")
    assert inferred.returncode == 0, inferred.stderr
    assert docstore.open(tmp_path / "u").fields["grid"] == "float32[2,3]"


def _fields_arg() -> str:
    return ",".join(f"{name}:{kind}" for name, kind in FIELDS.items())


def test_parquet_needs_an_output_and_keeps_a_failed_export_from_replacing_it(tmp_path):
    docstore.build(tmp_path / "s", [{"doc_id": "a", "text": "x"}])
    result = cli("export", str(tmp_path / "s"), "--format", "parquet")
    assert result.returncode == 1 and "give it with -o OUTPUT" in result.stderr
    (tmp_path / "old.parquet").write_bytes(b"keep me")
    result = cli("export", str(tmp_path / "s"), "-o", str(tmp_path / "old.parquet"), "--id-field", "text")
    assert result.returncode == 1 and (tmp_path / "old.parquet").read_bytes() == b"keep me"
