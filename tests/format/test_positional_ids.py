"""Ids read by position are checked as documents are, a damaged shard is refused by seal(), and a
damaged global index never answers "absent" for an id the collection holds (issue 25, §3).

Every bit of the keys section is flipped in turn: each answer is the right one or a
CorruptStoreError, never another id and never a silent miss.
"""

from __future__ import annotations

import json
import shutil

import pytest

import docstore

from ..conftest import run_python, sections


def keys_section(path) -> tuple[int, int]:
    return sections(path)["keys"]


def flipped(good: bytes, start: int, length: int):
    """Every single-bit flip of ``good[start:start + length]``: (where, damaged bytes)."""
    for i in range(start, start + length):
        for bit in range(8):
            data = bytearray(good)
            data[i] ^= 1 << bit
            yield f"byte {i} bit {bit}", bytes(data)


def small_docs() -> dict[str, str]:
    # Ids of several lengths, past the common prefix plus 8 bytes too (the long-key search).
    return {f"doc-{i}" + "-long-suffix" * (i % 3): f"text number {i} " * (i % 4 + 1) for i in range(16)}


def write(path, docs: dict[str, str], **options) -> None:
    with docstore.Writer(path, {"text": "str"}, **options) as w:
        for doc_id, text in docs.items():
            w.add(doc_id, text=text)


def item_ids(store) -> list[str]:
    return [doc_id for doc_id, _ in store.items()]


def take_ids(store) -> list[str]:
    return [doc.doc_id for doc in store.take(range(len(store)))]


def id_and_text(read, *args) -> tuple[str, str]:
    doc = read(*args)
    return doc.doc_id, doc.text


class Sweep:
    """Answers of one damaged file: right, or CorruptStoreError; anything else is recorded."""

    def __init__(self) -> None:
        self.wrong: list[str] = []
        self.raised = 0

    def attempt(self, where: str, what: str, want, call, *args, **kwargs) -> None:
        """Records ``call(*args, **kwargs)`` unless it gives ``want`` or raises CorruptStoreError."""
        try:
            got = call(*args, **kwargs)
        except docstore.CorruptStoreError:
            self.raised += 1
            return
        except Exception as e:  # KeyError: "absent" for a present id; or an unexpected error type
            got = e
        if isinstance(got, Exception) or got != want:
            self.wrong.append(f"{where}: {what} gave {got!r:.120}")


@pytest.mark.parametrize("read", ["mmap", "pread"])
@pytest.mark.parametrize(
    ("version", "damaged"),
    [(2, "keys"), (3, "keys"), (3, "key offsets"), (3, "key ranks"), (3, "doc offsets"), (3, "data")],
)
def test_no_flipped_bit_on_the_way_of_a_read_by_position_gives_a_wrong_id(tmp_path, version, damaged, read):
    # The keys section, and the other sections a read by position goes through: every flip
    # there damages some id or document, which every read by position meets.
    from docstore.torch import DocDataset

    docs = small_docs()
    ids = list(docs)
    path = tmp_path / "good.docstore"
    write(path, docs, format_version=version)
    good = path.read_bytes()
    start, length = sections(path)[damaged]
    assert length > 60
    bad = tmp_path / "bad.docstore"
    sweep, cases = Sweep(), 0
    for where, data in flipped(good, start, length):
        bad.write_bytes(data)
        cases += 1
        try:
            store = docstore.open(bad, read=read)
        except docstore.CorruptStoreError:
            sweep.raised += 1
            continue
        dataset = DocDataset(store)
        n = len(ids)
        sweep.attempt(where, "list(store)", ids, list, store)
        sweep.attempt(where, "list(keys())", ids, list, store.keys())
        sweep.attempt(where, "reversed", ids[::-1], list, reversed(store))
        sweep.attempt(where, "keys_range", ids[3:11], store.keys_range, 3, 11)
        sweep.attempt(where, "items", ids, item_ids, store)
        sweep.attempt(where, "take doc_id", ids, store.take, range(n), field="doc_id")
        sweep.attempt(where, "take", ids, take_ids, store)
        for p, doc_id in enumerate(ids):
            sweep.attempt(where, f"doc_id({p})", doc_id, dataset.doc_id, p)
            sweep.attempt(where, f"at({p})", (doc_id, docs[doc_id]), id_and_text, store.at, p)
            sweep.attempt(where, f"store[{doc_id}]", docs[doc_id], store.get, doc_id, field="text")
            want = (doc_id, docs[doc_id])
            sweep.attempt(where, f"[{doc_id}]", want, id_and_text, store.__getitem__, doc_id)
        store.close()
    assert cases == 8 * length
    assert sweep.wrong == [], f"{len(sweep.wrong)} wrong answers: {sweep.wrong[:10]}"
    assert sweep.raised >= cases


def test_a_damaged_key_reads_as_an_error_naming_the_position(tmp_path):
    path = tmp_path / "s.docstore"
    write(path, {f"doc{i}": f"text {i}" for i in range(8)})
    start, _ = keys_section(path)
    data = bytearray(path.read_bytes())
    data[start + 3] ^= 0x01  # "doc0" reads "doc1", the next document's id
    path.write_bytes(bytes(data))
    store = docstore.open(path)
    with pytest.raises(docstore.CorruptStoreError, match="position 0"):
        list(store)
    with pytest.raises(docstore.CorruptStoreError, match="position 0"):
        store.keys_range(0, 1)
    assert store.keys_range(1, 8) == [f"doc{i}" for i in range(1, 8)]


@pytest.fixture(scope="module")
def shard_files(tmp_path_factory):
    """Two small shards of one corpus (ids of several lengths, interleaved between the shards)."""
    tmp = tmp_path_factory.mktemp("shards")
    docs = small_docs()
    parts = [tmp / "a.docstore", tmp / "b.docstore"]
    for i, part in enumerate(parts):
        write(part, {k: v for j, (k, v) in enumerate(docs.items()) if j % 2 == i})
    return parts, docs


def test_seal_refuses_a_shard_with_any_flipped_bit_in_its_keys(tmp_path, shard_files):
    (a, b), _ = shard_files
    good = b.read_bytes()
    start, length = keys_section(b)
    bad = tmp_path / "bad.docstore"
    accepted, cases = [], 0
    for where, data in flipped(good, start, length):
        bad.write_bytes(data)
        cases += 1
        try:
            docstore.seal(tmp_path / "c", [a, bad])
        except docstore.CorruptStoreError as e:
            assert str(bad) in str(e), f"{where}: the error does not name the shard: {e}"
            continue
        accepted.append(where)
        shutil.rmtree(tmp_path / "c")
    assert cases == 8 * length
    assert accepted == [], f"seal() accepted a damaged shard: {accepted[:10]}"
    assert not (tmp_path / "c").exists()


def test_no_flipped_bit_of_the_global_index_keys_hides_an_id(tmp_path, shard_files):
    parts, docs = shard_files
    ids = list(docs)
    collection = tmp_path / "c"
    docstore.seal(collection, parts)
    with docstore.open(collection) as store:
        positions = {doc_id: store.position(doc_id) for doc_id in ids}
    index = collection / "index.docstore"
    good = index.read_bytes()
    start, length = keys_section(index)
    absent = [i + "x" for i in ids] + ["doc-", "a", "zzz", "doc-99"]
    sweep, cases = Sweep(), 0
    for where, data in flipped(good, start, length):
        index.write_bytes(data)
        cases += 1
        store = docstore.open(collection)
        for doc_id in ids:
            want = (doc_id, docs[doc_id])
            sweep.attempt(where, f"[{doc_id}]", want, id_and_text, store.__getitem__, doc_id)
            sweep.attempt(where, f"get({doc_id})", docs[doc_id], store.get, doc_id, field="text")
            sweep.attempt(where, f"{doc_id} in", True, store.__contains__, doc_id)
            sweep.attempt(where, f"position({doc_id})", positions[doc_id], store.position, doc_id)
        sweep.attempt(where, "get_many", docs, store.get_many, ids, field="text")
        for doc_id in absent:
            sweep.attempt(where, f"get({doc_id})", None, store.get, doc_id)
        store.close()
    index.write_bytes(good)
    assert cases == 8 * length
    assert sweep.wrong == [], f"{len(sweep.wrong)} wrong answers: {sweep.wrong[:10]}"


def test_get_many_of_one_id_repeated_three_million_times_holds_memory_for_one(tmp_path):
    # In a fresh interpreter, its peak RSS (VmHWM: per address space, where ru_maxrss would
    # inherit the peak of the process that started it) reset just before the call: what the
    # peak grows over the RSS then is what get_many allocated (the list of ids is built before).
    path = tmp_path / "s.docstore"
    write(path, {f"doc{i}": f"text {i}" for i in range(100)})
    code = f"""
        import json, docstore

        def status(name):
            with open("/proc/self/status") as f:
                return next(int(line.split()[1]) for line in f if line.startswith(name + ":"))

        store = docstore.open({str(path)!r})
        ids = ["doc7"] * 3_000_000
        store.get_many(["doc1", "doc2"])
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
        before = status("VmRSS")
        got = store.get_many(ids, field="text")
        print(json.dumps({{"got": got, "grew_kb": status("VmHWM") - before}}))
    """
    proc = run_python(code, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["got"] == {"doc7": "text 7"}
    assert report["grew_kb"] < 20_000, f"peak RSS grew by {report['grew_kb'] / 1024:.0f} MB"


def test_ids_read_by_position_from_a_remote_store_are_checked(tmp_path):
    # A remote store fetches the blobs that prove the ids with them (the same rounds of
    # requests): the right ids from a sound store, CorruptStoreError from a damaged one.
    from ..support.remote_servers import RangeHTTPServer

    docs = small_docs()
    ids = list(docs)
    write(tmp_path / "good.docstore", docs)
    data = bytearray((tmp_path / "good.docstore").read_bytes())
    start, _ = keys_section(tmp_path / "good.docstore")
    data[start + 2] ^= 0x01  # "doc-0" reads "dnc-0"
    (tmp_path / "bad.docstore").write_bytes(bytes(data))
    server = RangeHTTPServer(str(tmp_path))
    try:
        for name in ("good", "bad"):
            store = docstore.open(f"{server.url}/{name}.docstore", cache_dir=str(tmp_path / f"cache-{name}"))
            if name == "good":
                assert list(store) == ids
                assert store.keys_range(5, 9) == ids[5:9]
                continue
            with pytest.raises(docstore.CorruptStoreError, match="position 0"):
                list(store)
            with pytest.raises(docstore.CorruptStoreError, match="position 0"):
                store.take([0], field="doc_id")
            assert store.keys_range(1, 16) == ids[1:]
    finally:
        server.stop()
