"""Subprocess side of the comparison suite: each measurement that needs a fresh process.

    python -m benches.worker build  PEER CORPUS N OUT_DIR     # build, report time + peak RSS
    python -m benches.worker open   PEER FIELD ID DIR [DIR...] # open + first lookup, per dir
    python -m benches.worker cold   PEER FIELD DIR SPEC.json   # lookups after page-cache eviction
    python -m benches.worker loader PEER CORPUS N COUNT DIR WORKERS SAMPLES BATCH
                                                              # DataLoader samples/s + total PSS

Each prints one JSON object on its last stdout line. ``N`` is the corpus size ("-" for the
fixed-size ``english_news``). Run by ``compare.py``; usable by hand for debugging.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def rss_bytes(key: str = "VmRSS") -> int:
    """``VmRSS`` (now) or ``VmHWM`` (peak) of this process. The peak is ``VmHWM``, not
    ``ru_maxrss``: Linux carries ``ru_maxrss`` over ``execve`` from the forking parent (here the
    pytest process, holding a corpus), while ``VmHWM`` belongs to the new address space."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _reset_peak_rss() -> bool:
    """Reset ``VmHWM`` to the current RSS (Linux >= 4.0: ``echo 5 > /proc/self/clear_refs``)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def pss_bytes(pid: int) -> int | None:
    """Proportional set size of a process (shared pages divided among their users)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return None


def load_records(corpus: str, n: str) -> tuple[list[dict], str]:
    from . import corpora

    field = corpora.VALUE_FIELD[corpus]
    pairs = corpora.iter_corpus(corpus, None if n == "-" else int(n))
    return [{"doc_id": i, field: v} for i, v in pairs], field


def cmd_build(peer_name: str, corpus: str, n: str, out: str) -> dict:
    from .peers import COMPARE_PEERS

    peer = COMPARE_PEERS[peer_name]
    if peer.requires:
        __import__(peer.requires)  # import cost is not build cost
    records, field = load_records(corpus, n)
    gc.collect()
    base = rss_bytes()
    hwm_reset = _reset_peak_rss()  # the peak of loading the records is not the build's
    t = time.perf_counter()
    obj = peer.build(Path(out), records, field)
    if not peer.in_memory:
        peer.close(obj)
    dt = time.perf_counter() - t
    peak = rss_bytes("VmHWM")
    # processes the build started (litdata's optimize workers): their ru_maxrss, which starts
    # from ours at fork, so it is an upper bound of their own peak
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return {
        "build_s": dt,
        "docs": len(records),
        "rss_before": base,
        "peak_rss": peak,
        "peak_rss_children": children,
        "workers_peak_rss": children if children > 0 else None,
        "peak_reset": hwm_reset,
        "size_bytes": None if peer.in_memory else peer.size_on_disk(Path(out)),
    }


def cmd_open(peer_name: str, field: str, doc_id: str, dirs: list[str]) -> dict:
    """Open each store and look up one id; twice round, keeping the faster time per dir (the
    first open in a process pays one-off initialisation of the library)."""
    from .peers import COMPARE_PEERS

    peer = COMPARE_PEERS[peer_name]
    if peer.requires:
        __import__(peer.requires)
    best: dict[str, float] = {}
    for _ in range(2):
        for d in dirs:
            gc.collect()
            t = time.perf_counter()
            h = peer.open(Path(d))
            peer.ops(h, field).get(doc_id)
            dt = time.perf_counter() - t
            peer.close(h)
            best[d] = min(dt, best.get(d, float("inf")))
    return {"open_s": best}


def cmd_cold(peer_name: str, field: str, path: str, spec_file: str) -> dict:
    """Random lookups by id with the store's files dropped from the page cache before each round.

    A process of its own, so no other handle maps the files. SPEC holds, per workload
    (``get_id``: single lookups, ``batch1024_id``: one ``get_many``), the keys of each round and
    the expected values of round 0, which is checked and not timed. Before each round the store
    is closed, its files evicted (``posix_fadvise(DONTNEED)``, then ``fincore`` says what stayed)
    and it is reopened, keeping the in-memory maps a user keeps (``Peer.reopen``); the time runs
    from the eviction: open + lookups.
    """
    import numpy as np

    from . import compare
    from .peers import COMPARE_PEERS, batch_values

    spec = json.loads(Path(spec_file).read_text())
    peer = COMPARE_PEERS[peer_name]
    if peer.requires:
        __import__(peer.requires)
    if peer_name.startswith("docstore") and getattr(peer, "num_threads", None):
        import docstore

        docstore.set_num_threads(peer.num_threads)
    p = Path(path)
    files = peer.files(p)
    h = peer.open(p)
    peer.ops(h, field)  # the id -> row map a user keeps in memory (not timed)
    out: dict = {"files": len(files), "store_bytes": sum(f.stat().st_size for f in files)}
    resident: list = []

    evicted_at: list[float] = []

    def evict():
        gc.collect()
        compare.evict(files)
        resident.append(compare.resident_bytes(files))
        evicted_at.append(time.perf_counter())

    for workload, rounds in spec["rounds"].items():
        times = []
        resident.clear()
        ops = vals = None
        for r, keys in enumerate(rounds):
            ops = vals = None  # no reference into the old mapping may outlive the close
            # timed from the eviction on: the open (which may read, e.g. Arrow's batch headers)
            # plus the lookups; the id -> row map is kept from before, as a user's process would
            h = peer.reopen(h, p, between=evict)
            ops = peer.ops(h, field)
            vals = [ops.get(k) for k in keys] if workload == "get_id" else ops.get_many(keys)
            dt = time.perf_counter() - evicted_at[-1]
            if r == 0:  # checked, not timed (also warms the code paths, not the data)
                want = spec["expected"][workload]
                got = batch_values(vals, keys)
                for k, v in zip(keys, got):
                    w = want[k]
                    ok = v == w if isinstance(w, str) else np.array_equal(v, np.asarray(w, dtype=np.int32))
                    if not ok:
                        raise AssertionError(f"{peer_name}: wrong value for {k!r} after eviction")
            else:
                times.append(dt)
        med = sorted(times)[len(times) // 2]
        out[workload] = {
            "times": times,
            "ops": len(rounds[0]),
            "docs_per_s": len(rounds[0]) / med,
            "resident_after_evict": [x for x in resident if x is not None],
        }
    peer.close(h)
    return out


class _LocalDocDataset:
    """docstore as a map-style Dataset when ``docstore.torch`` is not importable: the path
    pickles, the store opens lazily in each worker."""

    def __init__(self, path: str, field: str) -> None:
        self.path, self.field, self._store, self._pid = path, field, None, None
        import docstore

        with docstore.open(path) as s:
            self._len = len(s)

    def _s(self):
        if self._store is None or self._pid != os.getpid():
            import docstore

            self._store, self._pid = docstore.open(self.path), os.getpid()
        return self._store

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, i: int):
        return self._s().at(i, field=self.field)

    def __getitems__(self, idx: list[int]):
        return self._s().take(idx, field=self.field)

    def __getstate__(self):
        return {"path": self.path, "field": self.field, "_len": self._len, "_store": None, "_pid": None}


class PeerDataset:
    """A minimal map-style Dataset over any peer: holds the path, opens in each worker on first
    use (pid check), item i = the document at position i; ``__getitems__`` fetches a batch with
    the peer's batch call (``take``) where it has one."""

    def __init__(self, peer_name: str, path: str, field: str, n: int) -> None:
        self.peer_name, self.path, self.field, self.n = peer_name, path, field, n
        self._ops = None
        self._pid = None
        self._h = None

    def _o(self):
        if self._ops is None or self._pid != os.getpid():
            from .peers import COMPARE_PEERS

            peer = COMPARE_PEERS[self.peer_name]
            self._h = peer.open(Path(self.path))
            self._ops, self._pid = peer.ops(self._h, self.field), os.getpid()
        return self._ops

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return self._o().at(i)

    def __getitems__(self, idx: list[int]):
        return self._o().take(idx)

    def __getstate__(self):
        d = dict(self.__dict__)
        d.update(_ops=None, _pid=None, _h=None)
        return d


class ConstDataset:
    """The baseline: the same DataLoader with no store at all (every item is an empty string),
    so the PSS of torch, Python and the worker processes themselves can be subtracted."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return ""

    def __getitems__(self, idx: list[int]):
        return [""] * len(idx)


class DictDataset:
    """The dict peer: the corpus in a Python dict (and the list of its values) in the main
    process; workers get it by fork (copy-on-write, which reference counting defeats)."""

    def __init__(self, values: list) -> None:
        self.values = values

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, i: int):
        return self.values[i]

    def __getitems__(self, idx: list[int]):
        v = self.values
        return [v[i] for i in idx]


def _identity(batch):
    return batch


def cmd_loader(
    peer_name: str, corpus: str, n: str, count: int, path: str, workers: int, samples: int, batch: int
) -> dict:
    import torch
    from torch.utils.data import DataLoader

    torch.set_num_threads(1)
    from . import corpora

    field = corpora.VALUE_FIELD[corpus]
    how = ""
    if peer_name == "baseline":
        dataset = ConstDataset(count)
        how = "no store: every item is an empty string"
    elif peer_name == "dict":
        from .peers import DictStore

        records, field = load_records(corpus, n)
        d = DictStore().build(None, records, field)
        del records
        dataset = DictDataset(d.by_pos)
        how = "dict in the main process, inherited by fork"
    elif peer_name.startswith("docstore"):
        import docstore

        if peer_name == "docstore:t1":
            os.environ["DOCSTORE_NUM_THREADS"] = "1"
            docstore.set_num_threads(1)
        file = str(Path(path) / "store.docstore")
        try:
            from docstore.torch import DocDataset

            dataset = DocDataset(file, field=field)
            how = "docstore.torch.DocDataset(path, field=...)"
        except ImportError:
            dataset = _LocalDocDataset(file, field)
            how = "local wrapper over docstore.open (docstore.torch not importable)"
    else:
        from .peers import COMPARE_PEERS

        peer = COMPARE_PEERS[peer_name]
        if peer.requires:
            __import__(peer.requires)  # imported before the workers fork, as a user's script would
        dataset = PeerDataset(peer_name, path, field, count)
        how = "PeerDataset: opens lazily per worker; __getitems__ -> the peer's batch take"
    gc.collect()
    g = torch.Generator()
    g.manual_seed(0)
    # The same batches (a seeded random order); "docstore:prefetch" loads the next ones ahead.
    order = torch.utils.data.RandomSampler(dataset, generator=g)
    batches = torch.utils.data.BatchSampler(order, batch, False)
    if peer_name == "docstore:prefetch":
        from docstore.torch import PrefetchSampler

        batches = PrefetchSampler(batches, dataset)
        how = "docstore.torch.DocDataset with a PrefetchSampler (8 batches ahead)"
    loader = DataLoader(
        dataset,
        batch_sampler=batches,
        num_workers=workers,
        collate_fn=_identity,
        multiprocessing_context="fork" if workers else None,
        prefetch_factor=2 if workers else None,
    )
    it = iter(loader)
    pids = [os.getpid()] + [w.pid for w in getattr(it, "_workers", [])]
    got = 0
    first = next(it)  # workers started and warmed up
    got_first = len(first)
    t = time.perf_counter()
    peak = 0
    per_proc: list[int] = []
    for checks, b in enumerate(it, 1):
        got += len(b)
        if checks % 4 == 0:
            pss = [pss_bytes(p) or 0 for p in pids]
            if sum(pss) > peak:
                peak, per_proc = sum(pss), pss
        if got >= samples:
            break
    dt = time.perf_counter() - t
    pss = [pss_bytes(p) or 0 for p in pids]
    if sum(pss) > peak:
        peak, per_proc = sum(pss), pss
    del it
    return {
        "samples": got,
        "first_batch": got_first,
        "seconds": dt,
        "samples_per_s": got / dt if dt > 0 else None,
        "pss_total": peak,
        "pss_main": per_proc[0] if per_proc else None,
        "pss_workers": per_proc[1:],
        "how": how,
        "dataset_len": len(dataset),
    }


def main(argv: list[str]) -> int:
    cmd, args = argv[0], argv[1:]
    if cmd == "build":
        res = cmd_build(args[0], args[1], args[2], args[3])
    elif cmd == "open":
        res = cmd_open(args[0], args[1], args[2], args[3:])
    elif cmd == "cold":
        res = cmd_cold(args[0], args[1], args[2], args[3])
    elif cmd == "loader":
        res = cmd_loader(
            args[0], args[1], args[2], int(args[3]), args[4], int(args[5]), int(args[6]), int(args[7])
        )
    else:
        raise SystemExit(f"unknown command {cmd!r}")
    sys.stdout.flush()
    print("\n" + json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
