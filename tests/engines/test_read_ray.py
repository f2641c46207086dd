"""docstore.ray.read and docstore.ray.lookup on a local 2-CPU Ray cluster (one per module), and
the read planner they share with Spark (docstore._engine_read), checked against the store's
own iteration."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import docstore
from docstore import _arrow_read as arrow_read
from docstore import _engine_read as engine_read

from ..conftest import make_docs, sections, write_store
from ..support.remote_servers import RangeHTTPServer

ray = pytest.importorskip("ray")
pa = pytest.importorskip("pyarrow")
docstore_ray = pytest.importorskip("docstore.ray")

DOCS = make_docs(1200, seed=7)


@pytest.fixture(scope="module", autouse=True)
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    context = ray.data.DataContext.get_current()
    saved = context.execution_options.preserve_order, context.enable_progress_bars
    context.execution_options.preserve_order = True
    context.enable_progress_bars = False
    yield
    context.execution_options.preserve_order, context.enable_progress_bars = saved
    ray.shutdown()


def collection(directory, sizes: list[int], docs: dict = DOCS) -> docstore.DocStore:
    """A collection of ``len(sizes)`` shards of ``sizes`` documents (the first of ``docs``)."""
    os.makedirs(directory, exist_ok=True)
    items, paths, start = list(docs.items()), [], 0
    for i, n in enumerate(sizes):
        path = os.path.join(directory, f"part-{i}.docstore")
        write_store(path, dict(items[start : start + n]), level=0).close()
        paths.append(path)
        start += n
    target = os.path.join(directory, "c.docstore")
    return docstore.seal(target, paths)


def expected(store: docstore.DocStore, columns=None) -> dict[str, list]:
    """The store's own iteration, column by column, as Arrow's to_pylist gives it."""
    names = list(store.fields) if columns is None else columns
    out: dict[str, list] = {"doc_id": list(store)}
    for name in names:
        values = list(store.values(field=name))
        out[name] = [v.tolist() if isinstance(v, np.ndarray) else v for v in values]
    return out


def table_of(ds) -> pa.Table:
    return pa.concat_tables(ray.get(ds.to_arrow_refs()))


# -- the planner and one split's read, without Ray ---------------------------------------------


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 50), min_size=1, max_size=8), parallelism=st.integers(1, 40))
def test_plan_covers_every_position_once_within_shards(sizes, parallelism):
    bounds, start = [], 0
    for i, n in enumerate(sizes):
        bounds.append((f"s{i}", start, start + n))
        start += n
    splits = engine_read.plan(bounds, parallelism)
    covered = [p for s in splits for p in range(s.start, s.stop)]
    assert covered == list(range(start))  # every position once, in order
    for s in splits:
        name, a, b = bounds[s.shard]
        assert a <= s.start < s.stop <= b and s.shard_name == name  # never across a shard
    assert [s.index for s in splits] == list(range(len(splits)))
    assert len(splits) >= min(parallelism, start)  # every worker has a split
    assert len(splits) <= parallelism + len(sizes)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.integers(0, 150), min_size=1, max_size=5),
    parallelism=st.integers(1, 9),
    block_rows=st.integers(1, 200),
)
def test_splits_read_every_document_once(tmp_path_factory, sizes, parallelism, block_rows):
    store = collection(tmp_path_factory.mktemp("c"), sizes)
    spec = engine_read.StoreSpec.of(os.fspath(store.path))
    columns = list(store.fields)
    splits = engine_read.plan(engine_read.shards_of(store), parallelism)
    batches = [b for s in splits for b in engine_read.read_split(spec, s, columns, block_rows)]
    assert all(b.num_rows <= block_rows for b in batches)
    schema = arrow_read.arrow_schema(store.fields, columns)
    table = pa.Table.from_batches(batches, schema=schema)
    assert table.to_pydict() == expected(store)


# -- docstore.ray.read -------------------------------------------------------------------------


def test_single_file_every_document_once_in_order(tmp_path):
    store = write_store(tmp_path / "one.docstore", DOCS, batch_bytes=20_000)
    ds = docstore_ray.read(tmp_path / "one.docstore", parallelism=4, block_rows=100)
    table = table_of(ds)
    assert table.to_pydict() == expected(store)
    assert table.schema.field("tokens").type == pa.large_list(pa.int32())
    assert table.schema.field("text").type == pa.large_string()
    # Read tasks by position range: 4 of them, each its blocks of at most 100 rows.
    assert ds.count() == len(DOCS)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(0, 300), min_size=2, max_size=6), parallelism=st.integers(1, 7))
def test_collection_every_document_once(tmp_path_factory, sizes, parallelism):
    store = collection(tmp_path_factory.mktemp("c"), sizes)
    table = table_of(docstore_ray.read(store.path, parallelism=parallelism, block_rows=64))
    assert table.to_pydict() == expected(store)


def test_only_the_columns_asked_for(tmp_path):
    store = collection(tmp_path, [200, 300])
    table = table_of(docstore_ray.read(store.path, columns=["score", "text"]))
    assert table.column_names == ["doc_id", "score", "text"]
    assert table.to_pydict() == expected(store, ["score", "text"])
    ids = table_of(docstore_ray.read(store.path, columns=["doc_id"]))
    assert ids.column_names == ["doc_id"] and ids.column("doc_id").to_pylist() == list(store)


def test_remote_url_through_the_node_cache(tmp_path):
    store = collection(tmp_path / "c", [400, 0, 350])
    server = RangeHTTPServer(str(tmp_path / "c"))
    try:
        url = f"{server.url}/c.docstore"
        ds = docstore_ray.read(url, parallelism=3, cache_dir=str(tmp_path / "cache"))
        assert table_of(ds).to_pydict() == expected(store)
        assert server.requests > 0 and os.listdir(tmp_path / "cache")  # read through the cache
    finally:
        server.stop()


def test_a_failed_read_task_retried_gives_every_row_once(tmp_path):
    store = collection(tmp_path, [500, 500])
    marker = str(tmp_path / "failed-once")

    class Flaky(docstore_ray.DocstoreDatasource):
        """Split 1's first attempt fails after yielding its first block."""

        def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
            tasks = super().get_read_tasks(parallelism, per_task_row_limit, data_context)

            def flaky(read, index):
                def run():
                    for n, block in enumerate(read()):
                        yield block
                        if index == 1 and n == 0:
                            try:
                                os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
                            except FileExistsError:
                                continue  # the retry: no failure
                            raise RuntimeError("injected failure")

                return run

            for i, task in enumerate(tasks):
                task._read_fn = flaky(task.read_fn, i)
            return tasks

    ds = ray.data.read_datasource(
        Flaky(store.path, block_rows=50),
        override_num_blocks=4,
        ray_remote_args=docstore_ray.DEFAULT_READ_REMOTE_ARGS,
    )
    table = table_of(ds)
    assert os.path.exists(marker)  # the failure happened
    assert table.to_pydict() == expected(store)


def damage(shard_path: str) -> None:
    """Flips bytes in the middle of a shard's data section (its records)."""
    offset, length = sections(shard_path)["data"]
    with open(shard_path, "r+b") as f:
        f.seek(offset + length // 2)
        chunk = f.read(64)
        f.seek(offset + length // 2)
        f.write(bytes(b ^ 0xFF for b in chunk))


def test_a_damaged_shard_fails_the_job_naming_the_store_and_shard(tmp_path):
    store = collection(tmp_path, [300, 300, 300])
    shard = store.info()["shards"][1]["path"]
    damage(os.fspath(shard))
    ds = docstore_ray.read(
        store.path, parallelism=3, ray_remote_args={"max_retries": 1, "retry_exceptions": True}
    )
    with pytest.raises(docstore.CorruptStoreError) as info:
        ds.materialize()
    message = str(info.value)
    assert f"store {store.path}" in message and f"shard 1 ({shard})" in message


def test_bad_options_fail_before_the_job(tmp_path):
    store = collection(tmp_path, [10, 10])
    with pytest.raises(docstore.SchemaError, match=r"no field\(s\) \['txt'\].*'text'"):
        docstore_ray.read(store.path, columns=["txt"])
    for bad in (0, -2, 1.5):
        with pytest.raises(docstore.InvalidArgumentError, match="parallelism must be a whole number >= 1"):
            docstore_ray.read(store.path, parallelism=bad)
    with pytest.raises(docstore.InvalidArgumentError, match="block_rows"):
        docstore_ray.read(store.path, block_rows=0)
    with pytest.raises(docstore.InvalidArgumentError, match="one str"):
        docstore_ray.read(store.path, columns="text")
    with pytest.raises(docstore.StoreNotFoundError):
        docstore_ray.read(tmp_path / "nothing.docstore")


# -- docstore.ray.lookup -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def lookup_store(tmp_path_factory):
    return collection(tmp_path_factory.mktemp("lookup"), [600, 600])


def pairs(store, missing_ids=()) -> tuple[list[dict], list[str]]:
    ids = list(store)
    rows = [{"qid": q, "doc_id": ids[(q * 37) % len(ids)]} for q in range(700)]
    rows[5]["doc_id"] = rows[9]["doc_id"]  # an id asked twice
    for q, doc_id in missing_ids:
        rows[q]["doc_id"] = doc_id
    return rows, ids


def test_lookup_attaches_documents_in_row_order(lookup_store):
    rows, _ = pairs(lookup_store)
    ds = docstore_ray.lookup(
        ray.data.from_items(rows), lookup_store, columns=["text", "tokens"], batch_size=128
    )
    table = table_of(ds).to_pydict()
    assert table["qid"] == [r["qid"] for r in rows]
    assert table["text"] == [lookup_store[r["doc_id"]].text for r in rows]
    assert table["tokens"] == [lookup_store[r["doc_id"]].tokens.tolist() for r in rows]


def test_lookup_missing_ids_null_drop_error(lookup_store):
    rows, _ = pairs(lookup_store, missing_ids=[(3, "absent-a"), (400, "absent-b")])
    ds = ray.data.from_items(rows)
    nulls = table_of(
        docstore_ray.lookup(ds, lookup_store.path, columns=["label"], missing="null")
    ).to_pydict()
    assert nulls["qid"] == [r["qid"] for r in rows]
    assert nulls["label"] == [
        lookup_store[r["doc_id"]].label if r["doc_id"] in lookup_store else None for r in rows
    ]
    dropped = table_of(
        docstore_ray.lookup(ds, lookup_store.path, columns=["label"], missing="drop")
    ).to_pydict()
    assert dropped["qid"] == [r["qid"] for r in rows if r["doc_id"] in lookup_store]
    with pytest.raises(ray.exceptions.RayTaskError) as info:  # Ray's wrapper of a map's error
        docstore_ray.lookup(ds, lookup_store.path, columns=["label"]).materialize()
    message = str(info.value)
    assert f"KeyError: \"store {lookup_store.path}: 2 id(s) of column 'doc_id' not in the store" in message
    assert "['absent-a', 'absent-b']" in message


def test_lookup_bad_options_fail_before_the_job(lookup_store):
    ds = ray.data.from_items([{"qid": 1, "doc_id": "x", "text": "already"}])
    with pytest.raises(docstore.SchemaError, match=r"already has column\(s\) \['text'\]"):
        docstore_ray.lookup(ds, lookup_store, columns=["text"])
    with pytest.raises(docstore.SchemaError, match="no id column 'pid'"):
        docstore_ray.lookup(ds, lookup_store, id_column="pid", columns=["label"])
    with pytest.raises(docstore.SchemaError, match="no field"):
        docstore_ray.lookup(ds, lookup_store, columns=["nope"])
    with pytest.raises(docstore.InvalidArgumentError, match="missing must be one of"):
        docstore_ray.lookup(ds, lookup_store, columns=["label"], missing="skip")
    with pytest.raises(docstore.InvalidArgumentError, match="concurrency"):
        docstore_ray.lookup(ds, lookup_store, columns=["label"], concurrency=0)


def test_lookup_opens_the_store_once_per_worker(lookup_store, monkeypatch):
    opened = []
    real = engine_read.StoreSpec.open
    monkeypatch.setattr(engine_read.StoreSpec, "open", lambda self: opened.append(1) or real(self))
    spec = engine_read.StoreSpec.of(os.fspath(lookup_store.path))
    from docstore._ray_read import _Lookup

    worker = _Lookup(engine_read.EngineLookup.plan(spec, ["doc_id"], "doc_id", ["label"], "error", 64))
    ids = list(lookup_store)
    for i in range(3):
        out = worker(pa.table({"doc_id": ids[i * 10 : i * 10 + 10]}))
        assert out.column("label").to_pylist() == [lookup_store[d].label for d in ids[i * 10 : i * 10 + 10]]
    assert len(opened) == 1


# -- versions and damage (issue 36) --------------------------------------------------------------


def test_a_rebuilt_store_is_read_anew_by_read_and_lookup(tmp_path):
    """The driver and Ray's reused workers cache open stores: by version, not by path."""
    path = tmp_path / "s.docstore"
    for version in ("old", "new"):
        docstore.build(
            path, [{"doc_id": f"d{i}", "text": f"{version} {i}"} for i in range(300)], overwrite=True
        )
        texts = table_of(docstore_ray.read(path, parallelism=4)).column("text").to_pylist()
        assert texts == [f"{version} {i}" for i in range(300)]
        joined = docstore_ray.lookup(ray.data.from_items([{"doc_id": "d7"}, {"doc_id": "d9"}]), path)
        assert table_of(joined).column("text").to_pylist() == [f"{version} 7", f"{version} 9"]


def test_a_store_replaced_after_planning_fails_the_job_once(tmp_path):
    path = tmp_path / "s.docstore"
    build = lambda v: docstore.build(  # noqa: E731
        path, [{"doc_id": f"d{i}", "text": f"{v} {i}"} for i in range(100)], overwrite=True
    )
    build("old")
    ds = docstore_ray.read(path, parallelism=2)  # planned against the old store
    build("new")
    with pytest.raises(docstore.StoreChangedError, match=f"store {path}"):
        ds.materialize()
    assert table_of(docstore_ray.read(path)).column("text").to_pylist()[:2] == ["new 0", "new 1"]


def test_on_corrupt_skip_reads_every_undamaged_document_in_order(tmp_path):
    from ..support.damage import damaged_store, text_of

    damaged = [0, 150, 151, 299]
    store = damaged_store(tmp_path / "c", 300, damaged, shards=3)
    with pytest.raises(docstore.CorruptStoreError):
        docstore_ray.read(store.path, ray_remote_args={"max_retries": 0}).materialize()
    table = table_of(docstore_ray.read(store.path, parallelism=3, block_rows=32, on_corrupt="skip"))
    good = [i for i in range(300) if i not in damaged]
    assert table.column("doc_id").to_pylist() == [f"d{i}" for i in good]
    assert table.column("text").to_pylist() == [text_of(i) for i in good]
    # The lookup join: a damaged document reads as missing.
    ids = ray.data.from_items([{"doc_id": "d150"}, {"doc_id": "d1"}])
    joined = docstore_ray.lookup(ids, store.path, columns=["n"], missing="null", on_corrupt="skip")
    assert table_of(joined).column("n").to_pylist() == [None, 1]
    with pytest.raises(docstore.InvalidArgumentError, match="on_corrupt"):
        docstore_ray.read(store.path, on_corrupt="no")
