"""Run the core benchmarks (or read their JSON) and print a Markdown report with targets.

Usage (from the repository root)::

    python benches/report.py                      # full run: 1M passages, 3 runs (~8 min)
    python benches/report.py --quick --runs 1     # 100k passages, one run
    python benches/report.py --docs 50000         # any size
    python benches/report.py --json a.json b.json # only report on earlier runs of
                                                  #   pytest benches --benchmark-json=a.json
    python benches/report.py --quick --save-json out.json --out report.md -- -k "not build"

Arguments after ``--`` go to pytest. pytest's own output goes to stderr; the Markdown
report goes to stdout (and to ``--out`` if given). ``--strict`` exits 1 if a target FAILs.

Throughput = operations per round / median round time (lookups/s for ``get``, docs/s
for ``get_many``, ``build`` and ``threads``). "docstore x" = docstore's throughput divided
by the system's (>1: docstore is faster).

The machine these run on is shared, and one run's ratios move by up to 2x (other work, and
ir_datasets' own speed, drift during a run). So the suite runs ``--runs`` times (3 by default):
tables show each system's median over the runs, and a target's ratio is the median of the
ratios measured side by side within each run, with every run's ratio listed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPORA = ("msmarco_like", "english_news")
SYSTEM_ORDER = [
    "docstore",
    "docstore:field",
    "docstore:docs",
    "docstore:t1",
    "docstore:level0",
    "docstore:level-1",
    "docstore:arrow",
    "docstore:columns",
    "ir_datasets",
    "indexed-tsv",
    "dict",
]
SYSTEM_NOTES = {
    "docstore": "docstore (`store[id].text`, `get_many(ids, field='text')`, `build(records)`)",
    "docstore:field": "docstore `store.get(id, field='text')`",
    "docstore:docs": "docstore `store.get_many(ids)` (Doc objects)",
    "docstore:arrow": "docstore `Writer.add_many(pyarrow batch)`",
    "docstore:columns": "docstore `Writer.add_many(ids, {'text': [...]})`",
    "docstore:t1": "docstore, `set_num_threads(1)`: each batch decodes in its calling thread",
    "docstore:level0": "docstore `build(records, level=0)` (lz4 fast mode: faster build, larger file)",
    "docstore:level-1": "docstore `build(records, level=-1)` (uncompressed: nothing to decode, largest file)",
    "ir_datasets": "ir_datasets `PickleLz4FullStore` (`docs_store.get`, `get_many`)",
    "indexed-tsv": "TSV + dict of byte offsets (seek + readline)",
    "dict": "Python dict in memory",
}


def run_benchmarks(json_path: Path, docs: int | None, quick: bool, pytest_args: list[str]) -> int:
    env = dict(os.environ)
    # OpenBLAS threads spin on the cores after numpy work: measured at 5-20% of a lookup profile.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(var, "1")
    if docs is not None:
        env["DOCSTORE_BENCH_DOCS"] = str(docs)
    if quick:
        env["DOCSTORE_BENCH_QUICK"] = "1"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(HERE / "test_core.py"),
        "-p",
        "no:cacheprovider",
        f"--benchmark-json={json_path}",
        "--benchmark-sort=name",
        *pytest_args,
    ]
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    # pytest's report to stderr: stdout is the Markdown
    return subprocess.call(cmd, env=env, stdout=sys.stderr, cwd=HERE.parent)


def load(json_path: Path) -> tuple[dict, dict]:
    """-> (results[group][corpus][system(/threads)] = bench, meta)."""
    data = json.loads(json_path.read_text())
    res: dict = defaultdict(lambda: defaultdict(dict))
    for b in data.get("benchmarks", []):
        info = b.get("extra_info", {})
        if "system" not in info:
            continue
        key = info["system"]
        if b["group"] == "threads":
            key = (info["system"], info["threads"])
        res[b["group"]][info["corpus"]][key] = b
    return res, data


def merge(runs: list[dict], extra: tuple[str, ...] = ()) -> dict:
    """One result set (``res[group][corpus][key] = bench``) whose rounds' median is, per benchmark,
    the median over the ``runs`` that measured it; so are the ``extra`` figures of ``extra_info``."""
    merged: dict = defaultdict(lambda: defaultdict(dict))
    for group in {g for res in runs for g in res}:
        for corpus in {c for res in runs for c in res.get(group, {})}:
            keys = {k for res in runs for k in res.get(group, {}).get(corpus, {})}
            for key in keys:
                benches = [b for res in runs if (b := res.get(group, {}).get(corpus, {}).get(key))]
                first = benches[0]
                stats = dict(first["stats"], median=statistics.median(b["stats"]["median"] for b in benches))
                info = dict(first.get("extra_info", {}))
                for name in extra:
                    values = [v for b in benches if (v := b.get("extra_info", {}).get(name)) is not None]
                    if values:
                        info[name] = statistics.median(values)
                merged[group][corpus][key] = dict(first, stats=stats, extra_info=info, runs=len(benches))
    return merged


def thr(b: dict | None) -> float | None:
    """Operations per second, from the median round."""
    if not b:
        return None
    med = b["stats"]["median"]
    return b["extra_info"]["ops"] / med if med > 0 else None


def fmt_rate(x: float | None, unit: str = "/s") -> str:
    if x is None:
        return "-"
    for div, suf in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= div:
            return f"{x / div:.2f}{suf}{unit}"
    return f"{x:.1f}{unit}"


def fmt_ratio(x: float | None) -> str:
    return "-" if x is None else (f"{x:.1f}x" if x >= 10 else f"{x:.2f}x")


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n:,} ({n / 2**20:.1f} MiB)"


def ordered(systems) -> list:
    return sorted(systems, key=lambda s: (SYSTEM_ORDER.index(s) if s in SYSTEM_ORDER else 99, s))


def corpora_in(res) -> list[str]:
    seen = {c for g in res.values() for c in g}
    return [c for c in CORPORA if c in seen] + sorted(seen - set(CORPORA))


def table(headers: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def throughput_table(res, group: str, unit: str, corpora: list[str]) -> str:
    systems = ordered({s for c in corpora for s in res[group].get(c, {})})
    headers = ["system"]
    for c in corpora:
        headers += [f"{c} {unit}", "docstore x"]
    rows = []
    for s in systems:
        row = [SYSTEM_NOTES.get(s, s)]
        for c in corpora:
            g = res[group].get(c, {})
            t, d = thr(g.get(s)), thr(g.get("docstore"))
            row += [fmt_rate(t), fmt_ratio(d / t if (t and d) else None)]
        rows.append(row)
    return table(headers, rows)


def size_table(res, corpora: list[str]) -> str:
    g = res["size"]
    systems = ordered({s for c in corpora for s in g.get(c, {})})
    headers = ["system"]
    for c in corpora:
        headers += [f"{c} bytes on disk", "x raw text"]
    raw_row = ["raw text (UTF-8)"]
    for c in corpora:
        any_b = next(iter(g.get(c, {}).values()), None)
        raw_row += [
            fmt_bytes(any_b["extra_info"]["raw_text_bytes"]) if any_b else "-",
            "1.00x" if any_b else "-",
        ]
    rows = [raw_row]
    for s in systems:
        row = [SYSTEM_NOTES.get(s, s)]
        for c in corpora:
            b = g.get(c, {}).get(s)
            row += (
                [fmt_bytes(b["extra_info"]["size_bytes"]), f"{b['extra_info']['x_raw']:.3f}x"]
                if b
                else ["-", "-"]
            )
        rows.append(row)
    return table(headers, rows)


def threads_table(res, corpora: list[str]) -> str:
    g = res["threads"]
    systems = ordered({k[0] for c in corpora for k in g.get(c, {})})
    headers = ["system"]
    for c in corpora:
        headers += [f"{c} 1 thread", "2 threads", "2t / 1t"]
    rows = []
    for s in systems:
        row = [SYSTEM_NOTES.get(s, s)]
        for c in corpora:
            t1, t2 = thr(g.get(c, {}).get((s, 1))), thr(g.get(c, {}).get((s, 2)))
            row += [
                fmt_rate(t1, " docs/s"),
                fmt_rate(t2, " docs/s"),
                fmt_ratio(t2 / t1 if (t1 and t2) else None),
            ]
        rows.append(row)
    return table(headers, rows)


def targets(runs: list[dict], corpora: list[str]) -> list[tuple[str, str, str]]:
    """-> [(target, corpus, 'PASS'|'FAIL'|'N/A' + detail)]: each ratio is the median of the ratios
    measured within each run."""
    out = []
    res = runs[0]  # sizes: the same in every run

    def per_run(group, a, b, c):
        values = []
        for run in runs:
            ta, tb = thr(run[group].get(c, {}).get(a)), thr(run[group].get(c, {}).get(b))
            if ta and tb:
                values.append(ta / tb)
        return values

    def ratio(group, a, b, c):
        return per_run(group, a, b, c) or None

    def add(name, c, value, ok, detail=None):
        runs_note = ""
        if isinstance(value, list):
            if len(value) > 1:
                runs_note = "; runs " + " / ".join(fmt_ratio(v) for v in value)
            value = statistics.median(value)
        word = "N/A" if value is None else ("INFO" if ok is None else ("PASS" if ok(value) else "FAIL"))
        out.append((name, c, f"{word} ({detail if detail is not None else fmt_ratio(value)}{runs_note})"))

    for c in corpora:
        add(
            "get: `store[doc_id]` >= 30x ir_datasets `docs_store.get`",
            c,
            ratio("get", "docstore", "ir_datasets", c),
            lambda r: r >= 30,
        )
        add(
            "get: faster than the indexed TSV loader",
            c,
            ratio("get", "docstore", "indexed-tsv", c),
            lambda r: r > 1,
        )
        add(
            "get_many(1000 random ids) >= 10x ir_datasets",
            c,
            ratio("get_many", "docstore", "ir_datasets", c),
            lambda r: r >= 10,
        )
        add(
            "build from the same iterable >= 3x ir_datasets",
            c,
            ratio("build", "docstore", "ir_datasets", c),
            lambda r: r >= 3,
        )
        add(
            "(reference, not a target) build at `level=0` vs ir_datasets",
            c,
            ratio("build", "docstore:level0", "ir_datasets", c),
            None,
        )
        for group, what in (("get", "`store[doc_id]`"), ("get_many", "get_many"), ("build", "build")):
            add(
                f"(reference, not a target) {what} at `level=-1` (uncompressed) vs ir_datasets",
                c,
                ratio(group, "docstore:level-1", "ir_datasets", c),
                None,
            )
        add(
            "build from pyarrow faster than from the iterable (>= 1.05x: beyond noise)",
            c,
            ratio("build", "docstore:arrow", "docstore", c),
            lambda r: r >= 1.05,
        )
        sd = res["size"].get(c, {}).get("docstore")
        si = res["size"].get(c, {}).get("ir_datasets")
        rel = sd["extra_info"]["size_bytes"] / si["extra_info"]["size_bytes"] if (sd and si) else None
        add(
            "size on disk smaller than ir_datasets",
            c,
            rel,
            lambda r: r < 1,
            "missing" if rel is None else f"{rel:.3f}x of ir_datasets",
        )
        if c == "english_news":
            x = sd["extra_info"]["x_raw"] if sd else None
            add(
                "size on disk <= 0.5x raw text (real English)",
                c,
                x,
                lambda r: r <= 0.5,
                "missing" if x is None else f"{x:.3f}x raw",
            )
        # docstore:t1 decodes in each calling thread: one thread uses one core, as the target
        # means. With the default pool one calling thread already uses every core.
        add(
            "two threads of batch lookups >= 1.6x one thread (`set_num_threads(1)`)",
            c,
            ratio("threads", ("docstore:t1", 2), ("docstore:t1", 1), c),
            lambda r: r >= 1.6,
        )
    return out


def render(runs: list[dict], datas: list[dict]) -> tuple[str, bool]:
    res = merge(runs)
    data = datas[0]
    corpora = corpora_in(res)
    mi = data.get("machine_info", {})
    ci = data.get("commit_info", {})
    cpu = mi.get("cpu", {})
    n_docs = {c: next(iter(g[c].values()))["extra_info"]["n_docs"] for g in res.values() for c in g}
    lines = ["# docstore core benchmarks", ""]
    lines.append(
        "- corpora: "
        + ", ".join(f"{c} ({n_docs.get(c, 0):,} docs)" for c in corpora)
        + f"\n- machine: {cpu.get('brand_raw', '?')}, {cpu.get('count', '?')} cores, "
        f"Python {mi.get('python_version', '?')}; commit {str(ci.get('id', '?'))[:10]}"
        f"{' (dirty)' if ci.get('dirty') else ''}; {data.get('datetime', '')}"
    )
    lines.append(
        f"- {len(runs)} run(s) of the suite; throughput from the median round, then the median over the "
        "runs; target ratios are the median of each run's side-by-side ratio; page cache warm "
        "(stores were just built)"
    )
    db = mi.get("docstore_bench", {})
    if db.get("docstore_num_threads"):
        lines.append(
            f"- docstore decodes batches (`get_many`) and compresses builds on its own pool of "
            f"{db['docstore_num_threads']} threads; the other systems run on one"
        )
    busy = False
    for i, d in enumerate(datas, 1):
        info = d.get("machine_info", {}).get("docstore_bench", {})
        load, end = info.get("loadavg_at_start"), info.get("loadavg_at_end") or [0]
        if load:
            ncpu = info.get("cpu_count") or 1
            run = f"run {i}: " if len(datas) > 1 else ""
            lines.append(
                f"- {run}1-min load average {load[0]:.2f} at start, {end[0]:.2f} at end ({ncpu} CPUs)"
            )
            # The suite itself adds ~1-2, so only the first run's start says what else ran.
            busy |= (i == 1 and load[0] > 0.5 * ncpu) or end[0] > ncpu + 0.75
    if busy:
        lines.append(
            "- **warning: the machine was busy with other work; timings, and the threads "
            "ratio most of all, are not reliable**"
        )
    sections = [
        ("Single lookup by id (`get`, 1000 random ids per round)", "get", "lookups/s"),
        ("Batch lookup (`get_many` of 1000 random distinct ids)", "get_many", "docs/s"),
        ("Build from the same records (`build`)", "build", "docs/s"),
    ]
    for title, group, unit in sections:
        if res.get(group):
            lines += ["", f"## {title}", "", throughput_table(res, group, unit, corpora)]
    if res.get("size"):
        lines += ["", "## Size on disk", "", size_table(res, corpora)]
    if res.get("threads"):
        lines += ["", "## Threads: batch lookups, one thread vs two", "", threads_table(res, corpora)]
    tg = targets(runs, corpora)
    lines += ["", "## Targets", "", table(["target", "corpus", "result"], [list(t) for t in tg])]
    ok = all(not v.startswith("FAIL") for _, _, v in tg)
    n_pass = sum(v.startswith("PASS") for _, _, v in tg)
    n_fail = sum(v.startswith("FAIL") for _, _, v in tg)
    n_na = sum(v.startswith("N/A") for _, _, v in tg)
    lines += ["", f"**{n_pass} PASS, {n_fail} FAIL, {n_na} N/A**", ""]
    return "\n".join(lines), ok


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1 :]
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--json", type=Path, nargs="+", help="report on these pytest-benchmark JSONs instead of running"
    )
    ap.add_argument("--docs", type=int, help="msmarco_like size (DOCSTORE_BENCH_DOCS)")
    ap.add_argument("--quick", action="store_true", help="100k passages (DOCSTORE_BENCH_QUICK=1)")
    ap.add_argument("--runs", type=int, default=3, help="runs of the suite (default 3); medians are reported")
    ap.add_argument("--save-json", type=Path, help="keep the benchmark JSON here (run i > 1: NAME.i.json)")
    ap.add_argument("--out", type=Path, help="also write the Markdown here")
    ap.add_argument("--strict", action="store_true", help="exit 1 if any target FAILs")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs must be at least 1")

    if args.json:
        json_paths = args.json
    else:
        base = args.save_json or Path(tempfile.mkstemp(prefix="docstore-bench-", suffix=".json")[1])
        json_paths = []
        for i in range(1, args.runs + 1):
            path = base if i == 1 else base.with_name(f"{base.stem}.{i}{base.suffix}")
            print(f"run {i} of {args.runs}", file=sys.stderr, flush=True)
            rc = run_benchmarks(path, args.docs, args.quick, extra)
            if rc not in (0,) and (not path.exists() or path.stat().st_size == 0):
                print(f"pytest failed (exit {rc}) and wrote no results", file=sys.stderr)
                return rc or 1
            if rc != 0:
                print(f"warning: pytest exited {rc}; reporting what was measured", file=sys.stderr)
            json_paths.append(path)
    loaded = [load(p) for p in json_paths]
    md, ok = render([r for r, _ in loaded], [d for _, d in loaded])
    print(md)
    if args.out:
        args.out.write_text(md)
    return 1 if (args.strict and not ok) else 0


if __name__ == "__main__":
    sys.exit(main())
