"""The loader study: a ranker-training data pipeline (query, positive, random negative triples,
batch 16, WordPiece-tokenised in the collate function) fed by four loaders -- an in-memory dict, an
indexed TSV, ir_datasets' lz4 docstore and docstore -- under DDP (gloo, CPU) with 1, 2 and 4 ranks
and 0, 1, 2 and 4 DataLoader workers per rank. It reproduces the shape of the published study's
Tables 1-2: samples/s at the consumer and total memory (sum of PSS over every process of a run).

    python -m benches.loader_study --quick        # small corpus, a few configurations (< 5 min)
    python -m benches.loader_study                # 8.84M passages, MS MARCO's count (~2.8 GB of text)

Each configuration runs in its own subprocess, placed in a memory cgroup (``--mem-limit``; no swap)
before it spawns its ranks, with a wall-clock timeout: a run that exceeds the limit is OOM-killed
inside its cgroup and reported as OOM instead of taking the machine down. The report goes to
``docs/loader_study.md`` and the plot to ``docs/img/loader_study.png``; raw results to
``benches/.data/loader_study/results-<mode>.json``.

Helpers: ``loader_datasets.py`` (the datasets and the collate function).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pickle
import platform
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402  (after the thread settings above)

from .loader_datasets import EXTRA, LOADERS  # noqa: E402

DATA = HERE / ".data" / "loader_study"
ROOT = HERE.parent
DOC = ROOT / "docs" / "loader_study.md"
PLOT = ROOT / "docs" / "img" / "loader_study.png"
BATCH = 16
LOADER_LABEL = {
    "dict": "in-memory dict",
    "indexed": "indexed TSV",
    "ir_datasets": "ir_datasets lz4",
    "docstore": "docstore",
    "baseline": "baseline (no corpus)",
}
EXTRA_CONFIGS = [(1, 0), (1, 2), (4, 2)]
NOTES = [
    "`TripletDataset.positions()` tests each random negative against the query's positives with a "
    "binary search in the sorted positive keys (`_in_sorted`: O(batch log pairs) per batch); an "
    "earlier version used `np.isin`, which re-sorted all 200k keys on every batch.",
    "A batch here is 32 short passages (16 positives, 16 negatives) in one `store.take`. The "
    "bindings decode batches of fewer than 256 items on the calling thread (`PARALLEL_MIN` in "
    "`rust/python/chunks.rs`), so docstore's thread pool plays no part in these fetches, with or "
    "without DataLoader workers (an earlier run of this study found the pool path ~10x slower than "
    "one thread for such batches on this 2-core machine under load). The pool is used once per rank, when "
    "`TripletDataset` resolves the 200k positive ids (`store.positions`).",
    "PSS counts the pages of a memory-mapped file that a process has touched (each shared page split "
    "between the processes mapping it) but not the page cache behind `read()`/`pread()`. "
    '`docstore.torch` datasets open the store with `docstore.open(path, read="pread")`: documents '
    "are read with one `pread` each through the shared page cache, as ir_datasets and the indexed "
    "loader read theirs through file objects, and only the store's index is memory-mapped. "
    "`TripletDataset` resolves the 200k positive ids when it is created, which touches index pages "
    "all over the file, then closes its store handle (`release()`) so that those pages are unmapped; "
    "the store is reopened lazily on the first batch. What docstore then adds to a process's PSS is "
    "the index pages its batches touch, not the documents it reads: checked separately in one "
    "process (`/proc/self/smaps`, batches of 16 items), the store's mapping held 0 MB after "
    "construction, 51 MB after 110 batches and 52 MB after 1,000 (of a 1.43 GiB file); processes "
    "that map the same pages share them in PSS.",
    "Before each configuration the loader's files are read once from the parent process (outside "
    "the run's cgroup), so every configuration runs with a warm page cache.",
]


# --------------------------------------------------------------------------------------------
# Data: corpus, stores, pairs, tokenizer (each built once, cached under benches/.data/)


def log(*a: Any) -> None:
    print(time.strftime("%H:%M:%S"), *a, flush=True)


def _arrow_batches(n: int):
    import pyarrow as pa

    from . import corpora

    path = corpora.msmarco_path(n)
    with pa.memory_map(str(path), "r") as source:
        reader = pa.ipc.open_file(source)
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i)


def prepare(n: int, n_pairs: int) -> Path:
    """Builds (once) everything the runs read; returns the data directory."""
    d = DATA / f"n{n}"
    d.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if not (d / "docs.tsv").exists() or not (d / "ids.npy").exists():
        log(f"corpus: {n:,} passages -> TSV + ids")
        ids = []
        tmp = d / "docs.tsv.tmp"
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            for b in _arrow_batches(n):
                bid, btext = b.column(0).to_pylist(), b.column(1).to_pylist()
                ids.extend(int(i) for i in bid)
                f.write("".join(f"{i}\t{t}\n" for i, t in zip(bid, btext)))
        np.save(d / "ids.npy", np.asarray(ids, dtype=np.int64))
        os.replace(tmp, d / "docs.tsv")
    if not (d / "offsets.pkl").exists():
        log("indexed: offsets dict")
        from .peers import IndexedStore

        offsets = IndexedStore.index_tsv(d / "docs.tsv")
        with open(d / "offsets.tmp", "wb") as f:
            pickle.dump(offsets, f, protocol=pickle.HIGHEST_PROTOCOL)
        del offsets
        os.replace(d / "offsets.tmp", d / "offsets.pkl")
    import docstore

    if (d / "store.docstore").exists():
        try:  # a store cached by a docstore with another on-disk format is rebuilt
            docstore.open(d / "store.docstore").close()
        except docstore.DocstoreError as e:
            log(f"docstore: cached store unreadable ({e}), rebuilding")
            (d / "store.docstore").unlink()
    if not (d / "store.docstore").exists():
        log("docstore: build")

        tmp = d / "store.docstore.tmp"
        with docstore.Writer(tmp, fields={"text": "str"}, overwrite=True) as w:
            for b in _arrow_batches(n):
                w.add_many(b)
        os.replace(tmp, d / "store.docstore")
    if not (d / "irds.done").exists():
        log("ir_datasets: build PickleLz4FullStore")
        import shutil

        from ir_datasets.formats import GenericDoc

        from .peers import IrDatasetsStore

        shutil.rmtree(d / "irds", ignore_errors=True)

        def records():
            for b in _arrow_batches(n):
                for i, t in zip(b.column(0).to_pylist(), b.column(1).to_pylist()):
                    yield GenericDoc(i, t)

        peer = IrDatasetsStore()
        peer._store(d / "irds", records, n).build()
        (d / "irds.done").write_text("ok")
    if not (d / "pairs.pkl").exists():
        log(f"pairs: {n_pairs:,} synthetic queries")
        ids = np.load(d / "ids.npy", mmap_mode="r")
        rng = np.random.default_rng(1234)
        pos = np.sort(rng.choice(len(ids), size=min(n_pairs, len(ids)), replace=False))
        texts: dict[int, str] = {}
        at = 0
        for b in _arrow_batches(n):
            m = b.num_rows
            col = b.column(1)
            for p in pos[(pos >= at) & (pos < at + m)].tolist():
                texts[p] = col[p - at].as_py()
            at += m
        queries, pos_ids = [], []
        order = rng.permutation(len(pos))
        for k in order.tolist():
            p = int(pos[k])
            words = texts[p].split()
            w = int(rng.integers(3, 7))
            s = int(rng.integers(0, max(1, len(words) - w)))
            queries.append(" ".join(words[s : s + w]).strip(",.") + "?")
            pos_ids.append(str(int(ids[p])))
        with open(d / "pairs.tmp", "wb") as f:
            pickle.dump({"queries": queries, "pos_ids": pos_ids}, f)
        os.replace(d / "pairs.tmp", d / "pairs.pkl")
    tokenizer_json()
    if time.perf_counter() - t0 > 1:
        log(f"prepared in {time.perf_counter() - t0:.0f} s")
    return d


def tokenizer_json() -> Path:
    """A WordPiece vocabulary (30k) trained offline on 200k generated passages (BERT-style)."""
    path = DATA / "wordpiece-30k.json"
    if path.exists():
        return path
    log("tokenizer: training WordPiece (30k) on 200k passages")
    from tokenizers import BertWordPieceTokenizer

    from . import corpora

    def texts():
        for k, (_, t) in enumerate(corpora.msmarco_like(1_000_000)):
            if k == 200_000:
                break
            yield t

    tok = BertWordPieceTokenizer(lowercase=True)
    tok.train_from_iterator(texts(), vocab_size=30_000, min_frequency=2)
    DATA.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    return path


# --------------------------------------------------------------------------------------------
# One configuration: ranks (spawned) x DataLoader workers, measured at the consumer


def _rank_main(rank: int, cfg: dict[str, Any], flag: Any) -> None:
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    from .loader_datasets import TokenizeCollate, make_dataset

    torch.set_num_threads(1)
    world = cfg["ranks"]
    dist.init_process_group("gloo", rank=rank, world_size=world)
    t0 = time.perf_counter()
    dataset = make_dataset(cfg["loader"], cfg["data_dir"])
    load_s = time.perf_counter() - t0
    if cfg["loader"] == "docstore":
        from docstore.torch import distributed_sampler

        sampler = distributed_sampler(dataset, seed=0)
    else:
        sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=0)
    sampler.set_epoch(0)
    loader = DataLoader(
        dataset,
        batch_size=BATCH,
        sampler=sampler,
        num_workers=cfg["workers"],
        collate_fn=TokenizeCollate(cfg["tokenizer"]),
        drop_last=True,
    )
    it = iter(loader)
    for _ in range(cfg["warmup"]):
        next(it)
    dist.barrier()
    if rank == 0:
        flag.value = 1  # steady state: the parent samples memory from now on
    samples = tokens = 0
    t0 = time.perf_counter()
    for _ in range(cfg["batches"]):
        batch = next(it)
        samples += batch["input_ids"].shape[0] // 2
        tokens += int(batch["attention_mask"].sum())
    seconds = time.perf_counter() - t0
    dist.barrier()
    if rank == 0:
        flag.value = 2  # done: the parent takes a last sample (workers still alive), then says 3
        deadline = time.time() + 20
        while flag.value != 3 and time.time() < deadline:
            time.sleep(0.05)
    dist.barrier()
    out = {"rank": rank, "samples": samples, "seconds": seconds, "load_s": load_s, "tokens": tokens}
    Path(cfg["result_dir"], f"rank{rank}.json").write_text(json.dumps(out))
    del it
    dist.destroy_process_group()


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return 0


def _tree(pids: list[int]) -> list[int]:
    import psutil

    out = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            out.append(pid)
            out.extend(c.pid for c in p.children(recursive=True))
        except psutil.NoSuchProcess:
            pass
    return out


def run_one(cfg: dict[str, Any]) -> None:
    """Runs one configuration (called in the cgroup'd subprocess); writes result.json."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    flag = ctx.Value("i", 0)
    result_dir = Path(cfg["result_dir"])
    samples: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    pc = mp.start_processes(
        _rank_main, args=(cfg, flag), nprocs=cfg["ranks"], join=False, start_method="spawn"
    )
    stop = threading.Event()

    def sample_memory() -> None:
        while not stop.is_set():
            state = flag.value
            if state in (1, 2):
                pids = _tree(pc.pids())
                samples.append(
                    {"t": time.perf_counter() - t0, "pss_kb": sum(map(_pss_kb, pids)), "procs": len(pids)}
                )
                if state == 2:
                    flag.value = 3
            time.sleep(0.25)

    th = threading.Thread(target=sample_memory, daemon=True)
    th.start()
    error = None
    try:
        while not pc.join(timeout=1):
            pass
    except Exception as e:  # a rank died (OOM-killed, or failed)
        error = f"{type(e).__name__}: {e}".splitlines()[0][:300]
    stop.set()
    th.join(timeout=5)
    ranks = [json.loads(p.read_text()) for p in sorted(result_dir.glob("rank*.json"))]
    out: dict[str, Any] = {
        "error": error,
        "memory": samples,
        "per_rank": ranks,
        "wall_s": time.perf_counter() - t0,
    }
    if ranks and len(ranks) == cfg["ranks"] and error is None:
        total = sum(r["samples"] for r in ranks)
        out["samples_per_s"] = total / max(r["seconds"] for r in ranks)
        out["load_s"] = max(r["load_s"] for r in ranks)
        out["pss_bytes"] = max(s["pss_kb"] for s in samples) * 1024 if samples else None
        out["procs"] = max(s["procs"] for s in samples) if samples else None
    (result_dir / "result.json").write_text(json.dumps(out))


# --------------------------------------------------------------------------------------------
# cgroup (v1 memory controller or v2) around a configuration's subprocess


class MemCgroup:
    def __init__(self, name: str, limit: int) -> None:
        v1 = Path("/sys/fs/cgroup/memory")
        v2 = Path("/sys/fs/cgroup")
        if (v1 / "memory.limit_in_bytes").exists():
            self.v = 1
            self.path = v1 / name
        elif (v2 / "cgroup.controllers").exists() and "memory" in (v2 / "cgroup.controllers").read_text():
            self.v = 2
            self.path = v2 / name
        else:
            raise RuntimeError("no memory cgroup controller: refusing to run without a memory limit")
        self.path.mkdir(exist_ok=True)
        if self.v == 1:
            (self.path / "memory.limit_in_bytes").write_text(str(limit))
            memsw = self.path / "memory.memsw.limit_in_bytes"
            if memsw.exists():
                memsw.write_text(str(limit))  # memory + swap = memory: no swap
        else:
            (self.path / "memory.max").write_text(str(limit))
            (self.path / "memory.swap.max").write_text("0")

    def add_self(self) -> None:
        """In the child before exec: joins the cgroup (so every process it starts is in it)."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def oom_kills(self) -> int:
        if self.v == 1:
            for line in (self.path / "memory.oom_control").read_text().splitlines():
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
            return 0
        for line in (self.path / "memory.events").read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return 0

    def peak(self) -> int | None:
        f = self.path / ("memory.max_usage_in_bytes" if self.v == 1 else "memory.peak")
        return int(f.read_text()) if f.exists() else None

    def kill_all(self) -> None:
        for _ in range(20):
            pids = [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
            if not pids:
                return
            for pid in pids:  # only processes of this configuration live here
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)

    def remove(self) -> None:
        self.kill_all()
        for _ in range(20):
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.25)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


LOADER_FILES = {
    "dict": ["docs.tsv"],
    "indexed": ["docs.tsv", "offsets.pkl"],
    "ir_datasets": ["irds"],
    "docstore": ["store.docstore"],
    "baseline": [],
}


def warm_page_cache(data_dir: Path, loader: str) -> None:
    """Reads the loader's files once (from this process, outside the run's cgroup), so that every
    configuration is measured with a warm page cache: the steady state of a training run."""
    for name in ["ids.npy", "pairs.pkl", *LOADER_FILES.get(loader, [])]:
        p = data_dir / name
        for f in [p] if p.is_file() else sorted(q for q in p.rglob("*") if q.is_file()):
            with open(f, "rb", buffering=0) as fh:
                while fh.read(16 << 20):
                    pass


def _cpu_busy_s() -> float:
    """Seconds of CPU the whole machine has spent busy (user, nice, system, irq, softirq)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def _children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_config(cfg: dict[str, Any], mem_limit: int, timeout: float) -> dict[str, Any]:
    warm_page_cache(Path(cfg["data_dir"]), cfg["loader"])
    tag = f"{cfg['loader']}-r{cfg['ranks']}-w{cfg['workers']}"
    result_dir = DATA / "runs" / tag
    if result_dir.exists():
        for p in result_dir.iterdir():
            p.unlink()
    result_dir.mkdir(parents=True, exist_ok=True)
    cfg = {**cfg, "result_dir": str(result_dir)}
    cg = MemCgroup(f"loader_study_{os.getpid()}_{tag}", mem_limit)
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    log_path = result_dir / "log.txt"
    busy0, own0 = _cpu_busy_s(), _children_cpu_s()
    t0 = time.perf_counter()
    with open(log_path, "w") as logf:
        proc = subprocess.Popen(
            [sys.executable, "-m", "benches.loader_study", "--one", json.dumps(cfg)],
            env=env,
            stdout=logf,
            stderr=subprocess.STDOUT,
            preexec_fn=cg.add_self,
            start_new_session=True,
        )
        status = "ok"
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            status = "timeout"
            cg.kill_all()
            proc.wait()
    wall = time.perf_counter() - t0
    # CPU that processes outside this configuration used meanwhile: the machine's busy time minus
    # the configuration's own (its subprocess and the descendants it waited for)
    other_cores = max(0.0, (_cpu_busy_s() - busy0) - (_children_cpu_s() - own0)) / max(wall, 1e-9)
    ooms = cg.oom_kills()
    peak = cg.peak()
    cg.remove()
    res: dict[str, Any] = {**{k: cfg[k] for k in ("loader", "ranks", "workers")}, "wall_s": wall}
    res["cgroup_peak_bytes"] = peak
    res["other_cpu_cores"] = other_cores
    rfile = result_dir / "result.json"
    inner = json.loads(rfile.read_text()) if rfile.exists() else {}
    res.update({k: v for k, v in inner.items() if k not in ("wall_s",)})
    if ooms:
        status = "OOM"
    elif status == "ok" and (proc.returncode != 0 or inner.get("error") or "samples_per_s" not in inner):
        status = "error"
    res["status"] = status
    res["oom_kills"] = ooms
    res["returncode"] = proc.returncode
    if status != "ok":
        res["log_tail"] = log_path.read_text()[-1500:]
    return res


# --------------------------------------------------------------------------------------------
# Fetch-only comparison: one rank, batch sampler, no workers, no tokenisation


def fetch_only(data_dir: Path, loaders: list[str], batches: int, rounds: int) -> dict[str, float]:
    """samples/s of the bare fetch path (``DataLoader(batch_sampler=...)``, num_workers=0): the
    median of ``rounds`` timings per loader, the loaders taking turns so drift hits them alike."""
    import torch
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler

    from .loader_datasets import list_collate, make_dataset

    torch.set_num_threads(1)
    # the dict's memory cost is the point, not its speed; it is in the main table
    names = [x for x in loaders if x != "dict"]
    iters = {}
    for name in names:
        ds = make_dataset(name, data_dir)
        sampler = RandomSampler(
            ds, replacement=True, num_samples=2**62, generator=torch.Generator().manual_seed(0)
        )
        loader = DataLoader(
            ds,
            batch_sampler=BatchSampler(sampler, BATCH, drop_last=True),
            num_workers=0,
            collate_fn=list_collate,
        )
        iters[name] = it = iter(loader)
        for _ in range(20):
            next(it)
    runs: dict[str, list[float]] = {name: [] for name in names}
    for k in range(rounds):
        for name in names[k % len(names) :] + names[: k % len(names)]:
            it = iters[name]
            t0 = time.perf_counter()
            for _ in range(batches):
                next(it)
            runs[name].append(batches * BATCH / (time.perf_counter() - t0))
    out = {name: float(np.median(v)) for name, v in runs.items()}
    for name, v in runs.items():
        log(f"fetch-only {name}: {out[name]:,.0f} samples/s (runs: {', '.join(f'{x:,.0f}' for x in v)})")
    return out


def combine(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (loader, ranks, workers) from the rounds' runs: the median samples/s and load
    time of the runs that finished (each run's figures kept in ``runs``), the largest PSS and
    process count; a configuration no run of which finished keeps its first run's status."""
    groups: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["loader"], r["ranks"], r["workers"]), []).append(r)
    out = []
    for rows in groups.values():
        ok = [r for r in rows if r["status"] == "ok"]
        if not ok:
            out.append(rows[0])
            continue
        row = dict(ok[0])
        row["runs"] = sorted(r["samples_per_s"] for r in ok)
        row["failed_runs"] = len(rows) - len(ok)
        row["samples_per_s"] = float(np.median(row["runs"]))
        row["load_s"] = float(np.median([r.get("load_s", 0.0) for r in ok]))
        for k in ("pss_bytes", "procs", "other_cpu_cores"):
            values = [r[k] for r in ok if r.get(k) is not None]
            row[k] = max(values) if values else None
        out.append(row)
    return out


# --------------------------------------------------------------------------------------------
# Report


def _gb(b: float | None) -> str:
    return "-" if b is None else f"{b / 2**30:.2f}"


def machine() -> str:
    mem = f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB"
    cpu = platform.processor() or "?"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        cpu = next((x.split(":", 1)[1].strip() for x in f if x.startswith("model name")), cpu)
    import torch

    import docstore

    versions = f"Python {platform.python_version()}, torch {torch.__version__}"
    for mod in ("ir_datasets", "tokenizers"):
        with contextlib.suppress(Exception):
            versions += f", {mod} {__import__(mod).__version__}"
    versions += f", docstore {getattr(docstore, '__version__', '?')}"
    return f"{os.cpu_count()} CPU cores ({cpu}), {mem} RAM, Linux {platform.release()}; {versions}"


def targets(results: list[dict[str, Any]], fetch: dict[str, float]) -> list[tuple[str, bool | None, str]]:
    by = {(r["loader"], r["ranks"], r["workers"]): r for r in results}
    out: list[tuple[str, bool | None, str]] = []

    # 1. docstore fastest in every configuration
    configs = sorted({(r["ranks"], r["workers"]) for r in results})
    lost = []
    compared = 0
    for rk, w in configs:
        ds = by.get(("docstore", rk, w))
        if not ds or ds["status"] != "ok":
            lost.append(f"{rk}x{w}: docstore did not finish ({ds and ds['status']})")
            continue
        for name in LOADERS:
            o = by.get((name, rk, w))
            if name == "docstore" or not o or o["status"] != "ok":
                continue
            compared += 1
            if o["samples_per_s"] >= ds["samples_per_s"]:
                overlap = min(o.get("runs") or [0]) <= max(ds.get("runs") or [0])
                lost.append(
                    f"{rk} ranks x {w} workers: {name} {o['samples_per_s']:,.0f} >= "
                    f"docstore {ds['samples_per_s']:,.0f}" + (" (their runs overlap)" if overlap else "")
                )
    out.append(
        (
            "docstore delivers the highest samples/s in every configuration",
            not lost,
            f"{len(configs)} configurations, {compared} comparisons with loaders that finished"
            + ("; exceptions: " + "; ".join(lost) if lost else ""),
        )
    )

    # 2. memory at 4 ranks x 2 workers
    key = (4, 2)
    ds = by.get(("docstore", *key))
    dct = by.get(("dict", *key))
    irds = by.get(("ir_datasets", *key))
    if not ds or ds["status"] != "ok" or not ds.get("pss_bytes"):
        out.append(
            ("memory at 4 ranks x 2 workers <= 10% of the in-memory loader", None, "docstore 4x2 missing")
        )
        out.append(("memory at 4 ranks x 2 workers below ir_datasets", None, "docstore 4x2 missing"))
        return [*out, _target_fetch(fetch)]
    ref = None
    how = ""
    if dct and dct["status"] == "ok" and dct.get("pss_bytes"):
        ref, how = dct["pss_bytes"], "measured"
    else:
        one = [r for r in results if r["loader"] == "dict" and (r["ranks"], r["workers"]) == (1, 0)]
        if one and one[0]["status"] == "ok" and one[0].get("pss_bytes"):
            procs = key[0] * (1 + key[1])
            ref = one[0]["pss_bytes"] * procs
            why = dct["status"] if dct else "not run"
            how = (
                f"dict 4x2 {why}: extrapolated as its 1 rank x 0 workers figure ({_gb(one[0]['pss_bytes'])} "
                f"GiB, one process) x {procs} processes, each of which holds the whole dict"
            )
    if ref is None:
        out.append(("memory at 4x2 <= 10% of the in-memory loader", None, "no dict figure to compare with"))
    else:
        ratio = ds["pss_bytes"] / ref
        detail = f"docstore {_gb(ds['pss_bytes'])} GiB vs dict {_gb(ref)} GiB ({how}): {100 * ratio:.1f}%"
        base = by.get(("baseline", *key))
        if base and base["status"] == "ok" and base.get("pss_bytes"):
            b = base["pss_bytes"]
            extra = ds["pss_bytes"] - b
            detail += f". The no-corpus baseline of the same pipeline takes {_gb(b)} GiB (12 processes "
            if extra >= 0:
                detail += (
                    f"of torch + tokenizer): docstore adds {_gb(extra)} GiB to it and dict "
                    f"{_gb(ref - b)} GiB ({100 * extra / max(ref - b, 1):.1f}%)"
                )
            else:
                detail += (
                    f"of torch + tokenizer), {_gb(-extra)} GiB more than docstore: it is the "
                    "benchmark's own dataset class (as for the dict, indexed and ir_datasets "
                    "loaders), not docstore's; dict adds "
                    f"{_gb(ref - b)} GiB to the baseline"
                )
        out.append(
            (
                "total memory at 4 ranks x 2 workers: docstore <= 10% of the in-memory dict loader",
                ratio <= 0.10,
                detail,
            )
        )
    if irds and irds["status"] == "ok" and irds.get("pss_bytes"):
        out.append(
            (
                "total memory at 4 ranks x 2 workers: docstore below ir_datasets",
                ds["pss_bytes"] < irds["pss_bytes"],
                f"docstore {_gb(ds['pss_bytes'])} GiB vs ir_datasets {_gb(irds['pss_bytes'])} GiB",
            )
        )
    else:
        out.append(
            ("total memory at 4x2: docstore below ir_datasets", None, "ir_datasets 4x2 did not finish")
        )
    # the same two with tokenised pipeline at 1 rank x 0 workers, for context
    out.append(_target_fetch(fetch, by))
    return out


def _target_fetch(fetch: dict[str, float], by: dict | None = None) -> tuple[str, bool | None, str]:
    name = "one rank, batch sampler: docstore `__getitems__` >= 5x ir_datasets per-item `__getitem__`"
    if "docstore" not in fetch or "ir_datasets" not in fetch:
        return name, None, "fetch-only measurement missing"
    ratio = fetch["docstore"] / fetch["ir_datasets"]
    detail = (
        f"fetch path (no tokenisation, num_workers=0): docstore {fetch['docstore']:,.0f} vs "
        f"ir_datasets {fetch['ir_datasets']:,.0f} samples/s = {ratio:.1f}x"
    )
    if by:
        a, b = by.get(("docstore", 1, 0)), by.get(("ir_datasets", 1, 0))
        if a and b and a["status"] == b["status"] == "ok":
            detail += (
                f"; with the tokenising collate (1 rank x 0 workers, table): "
                f"{a['samples_per_s'] / b['samples_per_s']:.1f}x"
            )
    return name, ratio >= 5, detail


def write_report(meta: dict[str, Any], results: list[dict[str, Any]], fetch: dict[str, float]) -> None:
    by = {(r["loader"], r["ranks"], r["workers"]): r for r in results}
    lines = [
        "# Loader study: ranker-training triples under DDP",
        "",
        "The shape of the published loader study's Tables 1-2, reproduced on this machine: a "
        "ranker-training pipeline whose in-memory dict loader copied the corpus into every process "
        "(there: a 22 GB corpus, 40 GB per process, OOM at 4 ranks).",
        "",
        f"Regenerate: `{meta['command']}` ({meta['mode']} mode; this run took "
        f"{meta['total_s'] / 60:.1f} min, data preparation excluded).",
        "",
        "## Set-up",
        "",
        f"* Machine: {meta['machine']}.",
        f"* Corpus: {meta['n']:,} generated MS MARCO-like passages (`corpora.msmarco_like`), "
        f"{meta['text_bytes'] / 1e9:.2f} GB of text; TSV {_gb(meta['tsv_bytes'])} GiB, "
        f"ir_datasets store {_gb(meta['irds_bytes'])} GiB, docstore file {_gb(meta['docstore_bytes'])} GiB.",
        f"* Training items: {meta['pairs']:,} (synthetic query, positive passage) pairs (the query is "
        "3-6 consecutive words of its passage); the negative is a uniformly random passage, drawn per "
        "item and epoch.",
        f"* Pipeline: `DataLoader(batch_size={BATCH}, sampler=DistributedSampler, num_workers=w, "
        "collate_fn=tokenise)`; the collate function tokenises (query, positive) and (query, negative) "
        "with a WordPiece fast tokenizer (30k vocabulary trained offline with `tokenizers` on 200k "
        "passages; truncation 256, padding to the longest) into `input_ids`/`token_type_ids`/"
        "`attention_mask` tensors. No model.",
        "* Ranks: `torch.multiprocessing.start_processes(..., start_method='spawn')`, "
        "`init_process_group('gloo')`, MASTER_ADDR=127.0.0.1. DataLoader workers use the default "
        "start method, which in a rank started by spawn is spawn too (as under `mp.spawn` DDP "
        "training): each worker receives the dataset pickled -- the dict loader's whole corpus, the "
        "indexed loader's offsets dict, only paths and the pairs for ir_datasets and docstore (the "
        "array of doc ids by position that the negatives are drawn from is mapped again from its "
        "`.npy` in each worker, not pickled).",
        "* Loaders: **in-memory dict** -- each rank reads the TSV into a `dict` doc_id -> text when it "
        "creates its dataset (the published loader); **indexed TSV** -- each rank loads a pickled "
        "doc_id -> byte offset dict (built once by one scan) and does `seek`+`readline`; "
        "**ir_datasets lz4** -- `PickleLz4FullStore` (as `msmarco_passage` sets it up), "
        "`docs_store.get(doc_id).text` for the positive and the negative in a map-style "
        "`__getitem__`; **docstore** -- `docstore.torch.TripletDataset` (random negatives), fetched "
        "a batch at a time by the DataLoader through `__getitems__` (one `store.take`).",
        f"* Measurement: per rank, {meta['warmup']} warm-up batches, then {meta['batches']} batches "
        "timed at the consumer (the training-loop side, waiting included); samples/s = all ranks' "
        "samples / the slowest rank's time. Memory = sum of `Pss:` (`/proc/<pid>/smaps_rollup`) over "
        "every rank and DataLoader worker, sampled every 0.25 s during the timed window and once more "
        "at its end (workers alive); the max is reported. Never RSS.",
        f"* Rounds: every configuration runs {meta.get('rounds', 1)} time(s), in rounds over all "
        "configurations; within a configuration the loaders run back to back, in an order rotated "
        "every round. samples/s = the median of the runs (each listed); PSS and processes = the "
        "largest of the runs; a configuration that was OOM-killed once is not run again.",
        f"* Each configuration runs in its own memory cgroup ({_gb(meta['mem_limit'])} GiB, no swap) with "
        f"a {meta['timeout']:.0f} s timeout: **OOM** = the kernel OOM-killed a process of the run "
        "in its cgroup (`oom_kill` count), **timeout** = killed at the timeout.",
        "",
        "## Results",
        "",
        "| loader | ranks | workers | samples/s | runs (samples/s) | total PSS (GiB) | processes "
        "| load (s) | status |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name in LOADERS + EXTRA:
        for rk in meta["ranks"]:
            for w in meta["workers"]:
                r = by.get((name, rk, w))
                if r is None:
                    continue
                if r["status"] == "ok":
                    cells = [
                        f"{r['samples_per_s']:,.0f}",
                        _runs(r),
                        _gb(r.get("pss_bytes")),
                        str(r.get("procs", "-")),
                        f"{r.get('load_s', 0):.1f}",
                        "ok",
                    ]
                else:
                    st = r["status"]
                    cells = [f"**{st}**", "-", f"**{st}**", "-", "-", _status_note(r)]
                lines.append(f"| {LOADER_LABEL[name]} | {rk} | {w} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "`load` = the slowest rank's time to create its dataset (reading the corpus into a dict, "
        "unpickling the offsets, opening a store). `processes` = ranks + DataLoader workers sampled.",
        "",
        "![samples/s and memory per configuration](img/loader_study.png)",
        "",
        "## Targets",
        "",
    ]
    for name, ok, detail in targets(results, fetch):
        mark = "PASS" if ok else ("FAIL" if ok is False else "N/A")
        lines.append(f"* **{mark}** -- {name}: {detail}.")
    if fetch:
        lines += [
            "",
            "Fetch-only path (1 rank, `BatchSampler(RandomSampler, 16)`, num_workers=0, no collate):",
            "",
        ]
        lines += [f"* {LOADER_LABEL[k]}: {v:,.0f} samples/s" for k, v in fetch.items()]
    notes = list(meta.get("notes") or [])
    # runs that finished only: a killed process's CPU time is not accounted to the configuration
    other = [
        (r["other_cpu_cores"], r)
        for r in results
        if r["status"] == "ok" and r.get("other_cpu_cores") is not None
    ]
    if other:
        mean = sum(c for c, _ in other) / len(other)
        busy = [
            f"{LOADER_LABEL[r['loader']]} {r['ranks']}x{r['workers']} ({c:.2f})" for c, r in other if c > 0.25
        ]
        notes.insert(
            3,
            f"Other processes on this {os.cpu_count()}-core machine used {mean:.2f} cores on average "
            f"while the {len(other)} configurations that finished ran, measured as the machine's busy "
            "CPU time (`/proc/stat`) minus the configuration's own; "
            + (
                f"above 0.25 cores (ranks x workers, cores): {', '.join(busy)}: compare those rows "
                "with care; "
                if busy
                else "none above 0.25 cores; "
            )
            + "samples/s of neighbouring rows also vary with the scheduling of up to 20 processes on "
            f"{os.cpu_count()} cores.",
        )
    spreads = [
        (max(r["runs"]) - min(r["runs"])) / r["samples_per_s"]
        for r in results
        if len(r.get("runs") or []) > 1
    ]
    if spreads:
        notes.append(
            f"samples/s are not stable from run to run on this {os.cpu_count()}-core machine: the runs "
            f"of one configuration spread (fastest - slowest, over the median) by a median "
            f"{100 * float(np.median(spreads)):.0f}% and up to {100 * max(spreads):.0f}% across the "
            f"{len(spreads)} configurations that finished more than once; differences between "
            "loaders smaller than that are noise, which is why every configuration is run several "
            "times and reported as a median. The fetch-only figures are medians too, of "
            f"{meta.get('rounds', 1)} timings of {meta.get('fetch_batches', 1000):,} batches per loader, "
            "the loaders taking turns."
        )
    b1, b4 = by.get(("baseline", 1, 0)), by.get(("baseline", 4, 2))
    if b1 and b4 and b1["status"] == b4["status"] == "ok" and b1.get("pss_bytes") and b4.get("pss_bytes"):
        notes.append(
            "Each rank and worker is a torch process: the no-corpus baseline rows show that fixed cost "
            f"({_gb(b1['pss_bytes'])} GiB PSS for one rank alone, {_gb(b4['pss_bytes'] / b4['procs'])} "
            f"GiB per process at 4 ranks x 2 workers), which every loader pays and which dominates at "
            "this corpus size (2 GB of text here vs 22 GB in the published study)."
        )
    if notes:
        lines += ["", "## Notes", ""] + [f"* {n}" for n in notes]
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text("\n".join(lines) + "\n")
    log(f"wrote {DOC}")


def _runs(r: dict[str, Any]) -> str:
    runs = r.get("runs") or [r["samples_per_s"]]
    text = " / ".join(f"{x:,.0f}" for x in runs)
    return text + (f" ({r['failed_runs']} failed)" if r.get("failed_runs") else "")


def _status_note(r: dict[str, Any]) -> str:
    st = r["status"]
    if st == "OOM" and r.get("implied"):
        return f"not run: OOM already at {r['implied_by']}"
    if st == "OOM":
        return f"OOM-killed in its cgroup (peak {_gb(r.get('cgroup_peak_bytes'))} GiB)"
    if st == "timeout":
        return f"killed after {r['wall_s']:.0f} s"
    tail = (r.get("log_tail") or "").strip().splitlines()
    return "error: " + (tail[-1][:120].replace("|", "/") if tail else f"rc {r.get('returncode')}")


def plot(meta: dict[str, Any], results: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = {(r["loader"], r["ranks"], r["workers"]): r for r in results}
    present = {(r["ranks"], r["workers"]) for r in results}
    configs = [(rk, w) for rk in meta["ranks"] for w in meta["workers"] if (rk, w) in present]
    x = np.arange(len(configs))
    width = 0.8 / len(LOADERS)
    fig, axes = plt.subplots(2, 1, figsize=(max(8, 0.75 * len(configs) + 3), 8), sharex=True)
    colors = {"dict": "#999999", "indexed": "#e6a23c", "ir_datasets": "#d9534f", "docstore": "#2b7bba"}
    shown = [x for x in LOADERS + EXTRA if any(r["loader"] == x for r in results)]
    colors["baseline"] = "#5cb85c"
    width = 0.8 / len(shown)
    for k, name in enumerate(shown):
        sps, mem, fail = [], [], []
        for c in configs:
            r = by.get((name, *c))
            ok = r is not None and r["status"] == "ok"
            sps.append(r["samples_per_s"] if ok else 0)
            mem.append(r["pss_bytes"] / 2**30 if ok and r.get("pss_bytes") else 0)
            fail.append(None if r is None or ok else r["status"])
        xs = x + (k - (len(shown) - 1) / 2) * width
        axes[0].bar(xs, sps, width, label=LOADER_LABEL[name], color=colors[name])
        axes[1].bar(xs, mem, width, label=LOADER_LABEL[name], color=colors[name])
        for xi, f in zip(xs, fail):
            if f:
                for ax in axes:
                    ax.text(xi, 0, f, rotation=90, ha="center", va="bottom", fontsize=7, color="#b00000")
    axes[0].set_ylabel("samples/s (all ranks)")
    axes[1].set_ylabel("total PSS (GiB)")
    axes[1].axhline(meta["mem_limit"] / 2**30, color="#b00000", lw=0.8, ls="--", label="cgroup limit")
    axes[1].set_xticks(x, [f"{rk}r x {w}w" for rk, w in configs], rotation=45, ha="right")
    axes[1].set_xlabel("DDP ranks x DataLoader workers per rank")
    axes[0].legend(ncol=3, fontsize=8)
    axes[1].legend(ncol=3, fontsize=8)
    axes[0].set_title(
        f"Ranker triples, batch {BATCH}, tokenised; {meta['n']:,} passages ({meta['mode']} run)"
    )
    fig.tight_layout()
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(PLOT, dpi=110)
    plt.close(fig)
    log(f"wrote {PLOT}")


# --------------------------------------------------------------------------------------------


def _size(n: str) -> int:
    n = n.strip().upper()
    mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(n[-1], 1)
    return int(float(n[:-1] if n[-1] in "KMG" else n) * mult)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small corpus, few configurations (< 5 min)")
    ap.add_argument("--n", type=int, help="passages (default: 8,841,823 as in MS MARCO, --quick: 200k)")
    ap.add_argument("--pairs", type=int, help="(query, positive) pairs (default 200k, --quick 20k)")
    ap.add_argument("--loaders", default=",".join(LOADERS))
    ap.add_argument("--ranks", help="comma list (default 1,2,4; --quick: 1x0, 1x2, 4x2)")
    ap.add_argument("--workers", help="comma list (default 0,1,2,4; --quick 0,2)")
    ap.add_argument("--batches", type=int, help="timed batches per rank (default 200, --quick 40)")
    ap.add_argument("--warmup", type=int, help="warm-up batches per rank (default 10, --quick 5)")
    ap.add_argument(
        "--rounds",
        type=int,
        help="runs of every configuration, reported as their median (default 3, --quick 1)",
    )
    ap.add_argument("--mem-limit", default="12G", help="memory cgroup limit per configuration")
    ap.add_argument("--timeout", type=float, help="seconds per configuration (default 240, --quick 90)")
    ap.add_argument("--extra", default=",".join(EXTRA), help=f"also run at {EXTRA_CONFIGS}")
    ap.add_argument("--run-implied", action="store_true", help="run configurations implied OOM")
    ap.add_argument("--no-report", action="store_true", help="do not write docs/")
    ap.add_argument(
        "--report-only", action="store_true", help="rewrite the report from the saved results (+ fetch-only)"
    )
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        run_one(json.loads(args.one))
        return

    q = args.quick
    n = args.n or (200_000 if q else 8_841_823)  # MS MARCO's passage count, as the published study
    n_pairs = args.pairs or (20_000 if q else 200_000)
    ranks = [int(x) for x in (args.ranks or ("1,4" if q else "1,2,4")).split(",")]
    workers = [int(x) for x in (args.workers or ("0,2" if q else "0,1,2,4")).split(",")]
    loaders = [x for x in args.loaders.split(",") if x]
    extra = [x for x in args.extra.split(",") if x]
    batches = args.batches or (40 if q else 200)
    warmup = args.warmup or (5 if q else 10)
    rounds = args.rounds or (1 if q else 3)
    timeout = args.timeout or (90 if q else 240)
    mem_limit = _size(args.mem_limit)
    mode = "quick" if q else "full"

    data_dir = prepare(n, n_pairs)
    tok = tokenizer_json()
    import pyarrow as pa
    import pyarrow.compute

    from . import corpora

    text_bytes = 0
    with pa.memory_map(str(corpora.msmarco_path(n)), "r") as src:
        reader = pa.ipc.open_file(src)
        for i in range(reader.num_record_batches):
            col = reader.get_batch(i).column(1)
            text_bytes += pa.compute.sum(pa.compute.binary_length(col)).as_py()
    from .peers import dir_size

    meta = {
        "mode": mode,
        "command": "python -m benches.loader_study" + (" --quick" if q else ""),
        "n": n,
        "pairs": n_pairs,
        "ranks": ranks,
        "workers": workers,
        "batches": batches,
        "warmup": warmup,
        "rounds": rounds,
        "fetch_batches": 100 if q else 1000,
        "timeout": timeout,
        "mem_limit": mem_limit,
        "machine": machine(),
        "total_s": 0.0,
        "text_bytes": text_bytes,
        "tsv_bytes": (data_dir / "docs.tsv").stat().st_size,
        "irds_bytes": dir_size(data_dir / "irds"),
        "docstore_bytes": (data_dir / "store.docstore").stat().st_size,
        "notes": NOTES,
    }
    t_start = time.perf_counter()
    results: list[dict[str, Any]] = []
    fetch: dict[str, float] = {}
    res_file = DATA / f"results-{mode}.json"
    if args.report_only:
        saved = json.loads(res_file.read_text())
        meta, results = saved["meta"], saved["results"]
        fetch = saved.get("fetch") or fetch_only(data_dir, loaders, 100 if q else 1000, rounds)
        meta["notes"] = NOTES
        res_file.write_text(json.dumps({"meta": meta, "results": results, "fetch": fetch}, indent=1))
        write_report(meta, combine(results), fetch)
        plot(meta, combine(results))
        return
    configs = [(rk, w) for rk in ranks for w in workers]
    if q and not (args.ranks or args.workers):
        configs = [(1, 0), (4, 2)]  # enough for every target
        ranks, workers = [1, 4], [0, 2]
    # Round after round, each configuration's loaders back to back (the no-corpus baseline among
    # them), their order rotated every round: drift on this shared machine hits them alike.
    plan = []
    for k in range(rounds):
        for c in configs:
            names = loaders + [x for x in extra if c in EXTRA_CONFIGS]
            plan += [(k, c, x) for x in names[k % len(names) :] + names[: k % len(names)]]
    for k, (rk, w), name in plan:
        cfg = {
            "loader": name,
            "ranks": rk,
            "workers": w,
            "data_dir": str(data_dir),
            "tokenizer": str(tok),
            "batches": batches,
            "warmup": warmup,
        }
        if any(
            x["loader"] == name and (x["ranks"], x["workers"]) == (rk, w)
            for x in results
            if x["status"] == "OOM"
        ):
            continue  # OOM in an earlier round: it would only be again
        prior = [
            x
            for x in results
            if x["loader"] == name and x["ranks"] == rk and x["workers"] < w and x["status"] == "OOM"
        ]
        if prior and not args.run_implied:
            # more workers only add processes (and memory) to a run that already OOMed
            r = {**{k: cfg[k] for k in ("loader", "ranks", "workers")}, "status": "OOM", "implied": True}
            r["implied_by"] = f"{rk} ranks x {prior[0]['workers']} workers"
        else:
            r = run_config(cfg, mem_limit, timeout)
        r["round"] = k
        results.append(r)
        if r["status"] == "ok":
            log(
                f"round {k + 1}: {name:12s} {rk} ranks x {w} workers: {r['samples_per_s']:8,.0f} samples/s, "
                f"PSS {_gb(r.get('pss_bytes'))} GiB ({r.get('procs')} procs), load {r['load_s']:.1f} s, "
                f"wall {r['wall_s']:.0f} s"
            )
        else:
            log(f"round {k + 1}: {name:12s} {rk} ranks x {w} workers: {r['status']} ({_status_note(r)})")
        meta["total_s"] = time.perf_counter() - t_start
        res_file.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
        if not args.no_report:  # a report at every step: it exists whatever happens later
            write_report(meta, combine(results), fetch)
            plot(meta, combine(results))
    fetch = fetch_only(data_dir, loaders, meta["fetch_batches"], rounds)
    total = meta["total_s"] = time.perf_counter() - t_start

    res_file.write_text(json.dumps({"meta": meta, "results": results, "fetch": fetch}, indent=1))
    if not args.no_report:
        write_report(meta, combine(results), fetch)
        plot(meta, combine(results))
    for name, ok, detail in targets(combine(results), fetch):
        print(("PASS" if ok else "FAIL" if ok is False else "N/A ") + f"  {name}: {detail}")
    log(f"total {total / 60:.1f} min")


if __name__ == "__main__":
    main()
