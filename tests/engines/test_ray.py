"""docstore.ray: collections written by Ray Data write tasks, on a local 2-CPU Ray cluster (one
per module: Ray takes ~5-10 s to start)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import docstore

from ..conftest import (
    FIELDS,
    assert_doc_equal,
    dictionaries,
    holds_lock,
    make_docs,
    named,
    only,
    scratch_dirs,
)

ray = pytest.importorskip("ray")
pa = pytest.importorskip("pyarrow")
docstore_ray = pytest.importorskip("docstore.ray")


@pytest.fixture(scope="module", autouse=True)
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    context = ray.data.DataContext.get_current()
    saved = context.execution_options.preserve_order, context.enable_progress_bars
    context.execution_options.preserve_order = True  # positions follow the dataset's order
    context.enable_progress_bars = False
    yield
    context.execution_options.preserve_order, context.enable_progress_bars = saved
    ray.shutdown()


def arrow_table(docs: dict[str, dict]) -> pa.Table:
    values = list(docs.values())
    return pa.table(
        {
            "doc_id": list(docs),
            "text": [d["text"] for d in values],
            "label": pa.array([d["label"] for d in values], pa.int64()),
            "score": pa.array([d["score"] for d in values], pa.float64()),
            "tokens": pa.array([d["tokens"] for d in values], pa.list_(pa.int32())),
            "raw": pa.array([d["raw"] for d in values], pa.binary()),
        }
    )


def dataset(docs: dict[str, dict], blocks: int = 4) -> ray.data.Dataset:
    """One Arrow block per slice, in order: one write task (one shard) per block."""
    table = arrow_table(docs)
    step = -(-len(docs) // blocks) if docs else 1
    return ray.data.from_arrow([table.slice(i, step) for i in range(0, max(len(docs), 1), step)])


def write_blocks(*args, **options):
    """``docstore.ray.write`` with one write task per block, as the datasets here are cut."""
    return docstore_ray.write(*args, shard_bytes=None, **options)


def test_every_document_by_id_and_position(tmp_path, oracle):
    docs = dict(list(oracle.items())[:1000])
    ds = dataset(docs, blocks=3).repartition(5, shuffle=False)  # more tasks than blocks, in order
    store = write_blocks(ds, tmp_path / "c.docstore", level=0)
    only(tmp_path, "c.docstore")
    assert len(store) == len(docs) and store.fields == FIELDS
    shards = store.info()["shards"]
    assert len(shards) >= 2 and sum(s["count"] for s in shards) == len(docs)
    assert len(dictionaries(store)) == 1 and b"" not in dictionaries(store)  # one, trained on the driver
    rows = ds.take_all()
    assert [d.doc_id for d in store.take(range(len(store)))] == [r["doc_id"] for r in rows]
    for i, (doc_id, expected) in enumerate(docs.items()):
        assert_doc_equal(store[doc_id], doc_id, expected)
        assert_doc_equal(store.at(i), doc_id, expected)
    store.verify()


def test_shards_share_a_dictionary_trained_on_the_driver(tmp_path, oracle):
    docs = dict(list(oracle.items())[:600])
    ds = dataset(docs, blocks=3)
    dictionary = docstore.train_dictionary(ds.take(200), fields=FIELDS)
    metadata = {"source": "ray", "n": [1, 2]}  # every shard's, and so the collection's
    store = write_blocks(ds, tmp_path / "c.docstore", dictionary=dictionary, metadata=metadata)
    shards = [docstore.open(s["path"]) for s in store.info()["shards"]]
    assert store.metadata == metadata and all(s.metadata == metadata for s in shards)
    uncompressed = write_blocks(ds, tmp_path / "none.docstore", level=-1)
    assert dictionaries(uncompressed) == {b""}
    assert len(shards) >= 2 and all(s.dictionary == dictionary for s in shards)
    for doc_id, expected in list(docs.items())[::13]:
        assert_doc_equal(store[doc_id], doc_id, expected)


@pytest.mark.parametrize("remote_args", [None, {}], ids=["retries", "fused"])
def test_read_parquet(tmp_path, remote_args):
    """With Ray's default remote arguments the write fuses with the read into one task, whose
    first input is a list of files: the fields come from the blocks the write gets."""
    import pyarrow.parquet as pq

    docs = make_docs(200)
    table = arrow_table(docs)
    (tmp_path / "in").mkdir()
    for i in range(4):
        pq.write_table(table.slice(i * 50, 50), tmp_path / "in" / f"{i}.parquet")
    ds = ray.data.read_parquet(str(tmp_path / "in"))
    store = write_blocks(ds, tmp_path / "c", ray_remote_args=remote_args)
    assert store.fields == FIELDS and sorted(store.keys()) == sorted(docs)
    for doc_id, expected in docs.items():
        assert_doc_equal(store[doc_id], doc_id, expected)
    only(tmp_path, "in", "c")


def test_datasink_with_write_datasink(tmp_path):
    docs = make_docs(50)
    sink = docstore_ray.DocstoreDatasink(
        tmp_path / "c", fields={"text": "str", "label": "int64"}, shard_bytes=None
    )
    dataset(docs, blocks=2).write_datasink(sink)
    assert sink.store is not None and sink.store.fields == {"text": "str", "label": "int64"}
    assert [d.text for d in sink.store.take(range(50))] == [d["text"] for d in docs.values()]
    only(tmp_path, "c")


def test_id_repeated_across_tasks(tmp_path):
    docs = make_docs(40)
    table = arrow_table(docs)
    repeated = table.slice(30, 1).to_pylist()[0]["doc_id"]
    ds = ray.data.from_arrow([table.slice(0, 20), table.slice(20, 20), table.slice(30, 1)])
    with pytest.raises(docstore.DuplicateKeyError) as error:
        write_blocks(ds, tmp_path / "c")
    assert error.value.doc_id == repeated and repeated in str(error.value)
    only(tmp_path)


@pytest.mark.parametrize("how", ["raise", "crash"])
def test_task_that_fails_once_after_writing_part_of_its_shard(tmp_path, how):
    """The first attempt of task 1 adds its first block to its shard, then raises (or its
    worker dies, leaving the attempt's scratch files); Ray retries it; the collection holds every
    document once, and nothing but it remains."""
    marker = tmp_path / "marker"
    (tmp_path / "out").mkdir()

    class FlakySink(docstore_ray.DocstoreDatasink):
        def write(self, blocks, ctx):
            if ctx.task_idx != 1 or marker.exists():
                return super().write(blocks, ctx)

            def failing():
                yield from blocks
                marker.touch()
                if how == "crash":
                    os._exit(1)
                raise RuntimeError("injected failure")

            return super().write(failing(), ctx)

    docs = make_docs(300)
    table = arrow_table(docs)
    ds = ray.data.from_arrow([table.slice(0, 100), table.slice(100, 100), table.slice(200, 100)])
    sink = FlakySink(tmp_path / "out" / "c", shard_bytes=None)
    ds.write_datasink(sink, ray_remote_args=docstore_ray.DEFAULT_RAY_REMOTE_ARGS)
    assert marker.exists()
    store = docstore.open(tmp_path / "out" / "c")
    assert list(store.keys()) == list(docs)
    only(tmp_path / "out", "c")


def test_udf_that_fails_once_is_retried(tmp_path):
    marker = tmp_path / "marker"
    (tmp_path / "out").mkdir()

    docs = make_docs(100)
    victim = list(docs)[60]

    def fail_once(batch):
        if not marker.exists() and victim in batch["doc_id"].to_pylist():
            marker.touch()
            raise RuntimeError("injected failure")
        return batch

    # The map's retry options are the write's: Ray fuses the two into one task, retried as one.
    retries = docstore_ray.DEFAULT_RAY_REMOTE_ARGS
    ds = dataset(docs).map_batches(fail_once, batch_format="pyarrow", batch_size=None, **retries)
    store = write_blocks(ds, tmp_path / "out" / "c")
    assert marker.exists() and list(store.keys()) == list(docs)
    only(tmp_path / "out", "c")


def test_failed_job_leaves_nothing(tmp_path):
    docs = make_docs(100)
    victim = list(docs)[60]

    def always_fail(batch):
        if victim in batch["doc_id"].to_pylist():
            raise RuntimeError("injected failure")
        return batch

    ds = dataset(docs).map_batches(always_fail, batch_format="pyarrow", batch_size=None)
    with pytest.raises(Exception, match="injected failure"):
        write_blocks(ds, tmp_path / "c", ray_remote_args={"max_retries": 0})
    only(tmp_path)


def test_overwrite_and_append(tmp_path):
    path = tmp_path / "c"
    a, b, c = named(30, "a-"), named(30, "b-"), named(30, "c-")
    write_blocks(dataset(a, 2), path)
    with pytest.raises(docstore.StoreExistsError):
        write_blocks(dataset(b, 2), path)
    store = write_blocks(dataset(b, 2), path, overwrite=True)
    assert list(store.keys()) == list(b)
    appended = write_blocks(dataset(c, 3), path, append=True)
    assert list(appended.keys()) == list(b) + list(c)
    assert len(appended.info()["shards"]) == len(store.info()["shards"]) + 3
    assert list(store.keys()) == list(b)  # the replaced collection still reads
    assert dictionaries(appended) == dictionaries(store)  # the appended shards take the collection's
    with pytest.raises(docstore.DuplicateKeyError):
        write_blocks(dataset(c, 1), path, append=True)
    assert list(docstore.open(path).keys()) == list(b) + list(c)
    only(tmp_path, "c")


def test_append_matches_fields_by_name(tmp_path):
    """Data whose columns come in another order appends (issue 39: a Spark append onto a
    collection Ray wrote failed on the order alone); another type is still refused."""
    path = tmp_path / "c"
    docstore_ray.write(ray.data.from_items([{"doc_id": "a", "text": "x", "n": 1}]), path)
    moved = ray.data.from_items([{"n": 2, "doc_id": "b", "text": "y"}])
    store = docstore_ray.write(moved, path, append=True)
    assert list(store.fields) == ["text", "n"] and (store["b"].text, store["b"].n) == ("y", 2)
    with pytest.raises(
        docstore.DocstoreError,
        match=r"has fields \{n: str, text: str\}, but shard .* has \{text: str, n: int64\}",
    ):
        docstore_ray.write(ray.data.from_items([{"doc_id": "c", "n": "3", "text": "z"}]), path, append=True)
    assert list(docstore.open(path).keys()) == ["a", "b"]


def test_a_ragged_row_of_a_fixed_shape_is_refused_by_name(tmp_path):
    """Never re-cut into the shape: rows [1, 2], [3, 4, 5], [6] into float32[2] are six
    elements, three rows' worth."""
    pa = pytest.importorskip("pyarrow")
    ragged = [[1.0, 2.0], [3.0, 4.0, 5.0], [6.0]]
    table = pa.table({"doc_id": ["a", "b", "c"], "v": pa.array(ragged, pa.list_(pa.float32()))})
    with pytest.raises(docstore.FieldTypeError, match=r"doc 'b': field 'v' is float32\[2\].*shape \(3,\)"):
        docstore_ray.write(
            ray.data.from_arrow(table),
            tmp_path / "c",
            fields={"v": "float32[2]"},
            ray_remote_args={"max_retries": 0},
        )
    assert os.listdir(tmp_path) == []


def test_empty_dataset(tmp_path):
    empty = ray.data.from_arrow(arrow_table(make_docs(5)).slice(0, 0))
    store = write_blocks(empty, tmp_path / "a")
    assert len(store) == 0 and store.fields == FIELDS
    filtered = dataset(make_docs(20)).filter(lambda row: False)
    store = write_blocks(filtered, tmp_path / "b", fields={"text": "str"})
    assert len(store) == 0 and store.fields == {"text": "str"}
    with pytest.raises(docstore.SchemaError, match="pass fields"):
        write_blocks(ray.data.from_items([]), tmp_path / "c")
    only(tmp_path, "a", "b")


@pytest.mark.parametrize(
    ("columns", "error", "message"),
    [
        ({"doc_id": pa.array([1.5, 2.5])}, docstore.InvalidKeyError, "must be strings"),
        ({"doc_id": ["a", None]}, docstore.InvalidKeyError, "null"),
        ({"key": ["a", "b"]}, docstore.SchemaError, "no id column 'doc_id'"),
        ({"doc_id": ["a", "b"], "m": [{"x": 1}, {"x": 2}]}, docstore.SchemaError, "Arrow type struct"),
    ],
)
def test_bad_input(tmp_path, columns, error, message):
    ds = ray.data.from_arrow(pa.table(columns))
    with pytest.raises(error, match=message):
        write_blocks(ds, tmp_path / "c", ray_remote_args={"max_retries": 0})
    only(tmp_path)


def test_bad_writer_option_fails_on_the_driver(tmp_path):
    with pytest.raises(docstore.InvalidArgumentError, match="compression level"):
        write_blocks(dataset(make_docs(10)), tmp_path / "c", level=99)
    with pytest.raises(TypeError, match="unknown writer option"):
        write_blocks(dataset(make_docs(10)), tmp_path / "c", levle=3)
    only(tmp_path)


def test_arrow_encodings(tmp_path):
    table = pa.table(
        {
            "doc_id": pa.array(["b", "a", "c"]).dictionary_encode(),
            "text": pa.array(["x", "y", "z"], pa.large_string()),
            "vec": pa.array([[1, 2], [3, 4], [5, 6]], pa.list_(pa.float16(), 2)),
        }
    )
    store = docstore_ray.write(ray.data.from_arrow(table), tmp_path / "c")
    assert store.fields == {"text": "str", "vec": "float16[]"}  # half floats stay half (format 4)
    assert store["a"].text == "y" and store.at(0).doc_id == "b"
    assert store["c"].vec.dtype == np.float16
    np.testing.assert_array_equal(store["c"].vec, np.array([5, 6], np.float16))


# A driver (a process of its own, connected to this module's cluster) whose write task 0 has put
# its blocks into its shard, then tells the test so over a socket and waits on it.
KILLED_DRIVER = """
import socket, sys
import ray, docstore.ray

address, target, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
ray.init(address=address, log_to_driver=False, configure_logging=False)
ray.data.DataContext.get_current().enable_progress_bars = False


class StalledSink(docstore.ray.DocstoreDatasink):
    def write(self, blocks, ctx):
        def stalled():
            yield from blocks
            if ctx.task_idx == 0:
                with socket.create_connection(("127.0.0.1", port)) as conn:
                    conn.sendall(b"writing")
                    conn.recv(1)  # until the test lets go (if Ray has not killed this worker)
            raise RuntimeError("the driver was killed")

        return super().write(stalled(), ctx)


rows = [{"doc_id": f"k{i}", "text": "killed"} for i in range(100)]
ray.data.from_items(rows, override_num_blocks=2).write_datasink(StalledSink(target, shard_bytes=None))
"""


def test_driver_killed_while_writing_leaves_staging_that_the_next_write_removes(tmp_path):
    """kill -9 of the driver mid-job: its staging directory stays, unlocked; the next write to
    the same path removes it, and leaves nothing but the collection."""
    import signal
    import socket
    import subprocess
    import sys

    out = tmp_path / "out"
    out.mkdir()
    address = ray.get_runtime_context().gcs_address
    with socket.create_server(("127.0.0.1", 0)) as server:
        # A bound, not a wait: the driver connects once its task writes. Starting a driver and its
        # job took over 120 s on a loaded machine once.
        server.settimeout(300)
        port = server.getsockname()[1]
        cmd = [sys.executable, "-c", KILLED_DRIVER, address, str(out / "c"), str(port)]
        driver = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            conn, _ = server.accept()  # task 0 is writing its shard
            with conn:
                assert conn.recv(7) == b"writing"
                (staging,) = scratch_dirs(out, "c")  # named as every writer's scratch directory
                assert any("part-00000-" in n for n in os.listdir(out / staging))  # its scratch file
                assert holds_lock(str(out / staging))
                driver.send_signal(signal.SIGKILL)
                driver.wait(timeout=60)
                # Ray ends the dead job's worker (which may remove its scratch file on the way)
                assert os.path.isdir(out / staging)
                assert not holds_lock(str(out / staging))  # went with the driver
                docs = make_docs(50)
                store = docstore_ray.write(dataset(docs, 2), out / "c")
                assert list(store.keys()) == list(docs)
                only(out, "c")
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.wait()


def test_write_keeps_a_live_jobs_staging(tmp_path):
    """A staging directory of the same path that a live driver holds (here, this process) is
    not removed; nor is one that no process holds (a bare Spark job's)."""
    from docstore import _engines

    target = str(tmp_path / "c")
    live = _engines.make_staging(target, None, {})
    unlocked = _engines.make_unlocked_staging(target)
    try:
        docs = make_docs(20)
        assert list(docstore_ray.write(dataset(docs, 2), target).keys()) == list(docs)
        only(tmp_path, "c", os.path.basename(live.path), os.path.basename(unlocked))
    finally:
        live.release()
        _engines.remove_staging(target, unlocked)
    only(tmp_path, "c")


def test_small_rows_are_gathered_into_few_shards(tmp_path):
    """5,000 rows of ray.data.from_items made 200 shards of 75 KB; by default a shard gathers up
    to DEFAULT_SHARD_BYTES, and shard_bytes sets the target."""
    items = [{"doc_id": f"d{i}", "text": "x" * 100} for i in range(5000)]
    ds = ray.data.from_items(items, override_num_blocks=200)
    store = docstore_ray.write(ds, tmp_path / "few")
    assert len(store) == 5000 and len(store.info()["shards"]) <= 2
    store = docstore_ray.write(ds, tmp_path / "many", shard_bytes=50_000)
    shards = len(store.info()["shards"])
    assert 5 <= shards < 200, shards
    store = docstore_ray.write(ds, tmp_path / "blocks", shard_bytes=None)
    assert len(store.info()["shards"]) == 200
    with pytest.raises(ValueError, match="shard_bytes"):
        docstore_ray.write(ds, tmp_path / "bad", shard_bytes=0)


@pytest.mark.parametrize("policy", ["first", "last"])
def test_on_duplicate_within_and_across_tasks(tmp_path, policy):
    rows = [("a", "1"), ("b", "1"), ("a", "2"), ("c", "2"), ("b", "3"), ("a", "3")]
    table = pa.table({"doc_id": [r[0] for r in rows], "text": [r[1] for r in rows]})
    # Three blocks, one task each: "a" repeats within the first and across all three.
    ds = ray.data.from_arrow([table.slice(0, 3), table.slice(3, 2), table.slice(5, 1)])
    store = docstore_ray.write(ds, tmp_path / "c", on_duplicate=policy, shard_bytes=None)
    got = [(d.doc_id, d.text) for d in store.values()]
    if policy == "first":
        assert got == [("a", "1"), ("b", "1"), ("c", "2")]
    else:
        assert got == [("c", "2"), ("b", "3"), ("a", "3")]
    only(tmp_path, "c")


def test_docstore_errors_reach_ray_as_user_errors(tmp_path):
    """Ray Data reports an exception that is not its UserCodeException as a bug of Ray's own."""
    from ray.exceptions import UserCodeException

    table = pa.table({"doc_id": ["a", "b", "a"], "text": ["1", "2", "3"]})
    within = ray.data.from_arrow([table])
    across = ray.data.from_arrow([table.slice(0, 2), table.slice(2, 1)])
    for ds, where in ((within, "task"), (across, "seal")):
        with pytest.raises(docstore.DuplicateKeyError) as error:
            docstore_ray.write(ds, tmp_path / where, shard_bytes=None)
        assert isinstance(error.value, UserCodeException), (where, type(error.value).__mro__)
        assert "'a'" in str(error.value) or '"a"' in str(error.value)
        assert "write task" in str(error.value)  # where: the task, or both tasks at the seal
    with pytest.raises(docstore.InvalidArgumentError, match="append"):
        docstore_ray.write(within, tmp_path / "x", append=True, on_duplicate="last")
    with pytest.raises(docstore.InvalidArgumentError, match="on_duplicate"):
        docstore_ray.write(within, tmp_path / "x", on_duplicate="keep")
    only(tmp_path)
