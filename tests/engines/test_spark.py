"""docstore.spark: collections written by PySpark 4's Python Data Source API, one shard per
partition, in local mode (one SparkSession per module: it takes 10-20 s to start). The master is
``local[2,3]``: two cores, and a failed task is tried up to 3 times, as on a cluster."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

import docstore

from ..conftest import assert_doc_equal, dictionaries, holds_lock, make_docs, named, only

pytest.importorskip("pyarrow")
pyspark_sql = pytest.importorskip("pyspark.sql")
docstore_spark = pytest.importorskip("docstore.spark")


def _java_ok() -> bool:
    """As PySpark finds Java: JAVA_HOME, else java on PATH; its version 17 or newer."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        return False
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    major = re.search(r'version "(\d+)', out)
    return major is not None and int(major.group(1)) >= 17


if not _java_ok():  # CI installs one (.ci/run); docs/engines.md says how
    pytest.skip("PySpark 4 needs Java 17 or newer", allow_module_level=True)

SCHEMA = "doc_id string, text string, label long, score double, tokens array<int>, raw binary"
FIELDS = {"text": "str", "label": "int64", "score": "float64", "tokens": "int32[]", "raw": "bytes"}


@pytest.fixture(scope="module")
def spark():
    session = (
        pyspark_sql.SparkSession.builder.master("local[2,3]")
        .appName("docstore-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "64")  # several batches a task
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("OFF")  # failed tasks are part of the tests
    yield session
    session.stop()


def frame(spark, docs: dict[str, dict], partitions: int = 4):
    """A DataFrame of ``docs`` in their order, in ``partitions`` contiguous slices."""
    rows = [
        (doc_id, d["text"], d["label"], d["score"], d["tokens"].tolist(), bytearray(d["raw"]))
        for doc_id, d in docs.items()
    ]
    return spark.createDataFrame(spark.sparkContext.parallelize(rows, partitions), SCHEMA)


def test_every_document_by_id_and_position(spark, tmp_path, oracle):
    docs = dict(list(oracle.items())[:1000])
    df = frame(spark, docs, partitions=5)
    store = docstore_spark.write(df, tmp_path / "c.docstore", level=0)
    only(tmp_path, "c.docstore")
    assert len(store) == len(docs) and store.fields == FIELDS
    shards = store.info()["shards"]
    assert [s["count"] for s in shards] == [200] * 5
    assert len(dictionaries(store)) == 1 and b"" not in dictionaries(store)  # one, trained on the driver
    assert [d.doc_id for d in store.take(range(len(store)))] == [r.doc_id for r in df.collect()]
    for i, (doc_id, expected) in enumerate(docs.items()):
        assert_doc_equal(store[doc_id], doc_id, expected)
        assert_doc_equal(store.at(i), doc_id, expected)
    store.verify()


def test_shards_share_a_dictionary_trained_on_the_driver(spark, tmp_path, oracle):
    docs = dict(list(oracle.items())[:600])
    df = frame(spark, docs, partitions=3)
    dictionary = docstore.train_dictionary([r.asDict() for r in df.limit(200).collect()], fields=FIELDS)
    metadata = {"source": "spark", "n": [1, 2]}  # every shard's, and so the collection's
    store = docstore_spark.write(df, tmp_path / "c.docstore", dictionary=dictionary, metadata=metadata)
    shards = [docstore.open(s["path"]) for s in store.info()["shards"]]
    assert len(shards) == 3 and all(s.dictionary == dictionary for s in shards)
    assert store.metadata == metadata and all(s.metadata == metadata for s in shards)
    for doc_id, expected in list(docs.items())[::13]:
        assert_doc_equal(store[doc_id], doc_id, expected)


def test_format_and_options(spark, tmp_path):
    """The data source alone, as ``df.write.format("docstore")`` (registered by write())."""
    docs = make_docs(100)
    docstore_spark.register(spark)
    df = frame(spark, docs).withColumnRenamed("doc_id", "pid")
    df.write.format("docstore").mode("append").option("id_field", "pid").option(
        "fields", "text:str,label:int64"
    ).option("level", "-1").option("metadata", '{"a": [1, "é"]}').save(str(tmp_path / "c"))
    store = docstore.open(tmp_path / "c")
    assert store.fields == {"text": "str", "label": "int64"} and store.info()["codec"] == "none"
    assert store.metadata == {"a": [1, "é"]}
    assert [d.text for d in store.take(range(100))] == [d["text"] for d in docs.values()]
    with pytest.raises(Exception, match="unknown docstore option"):
        df.write.format("docstore").mode("overwrite").option("levle", "3").save(str(tmp_path / "c"))
    only(tmp_path, "c")


def test_id_repeated_across_partitions(spark, tmp_path):
    docs = make_docs(100)
    df = frame(spark, docs)
    repeated = list(docs)[3]
    with pytest.raises(docstore.DuplicateKeyError) as error:
        docstore_spark.write(df.union(df.filter(df.doc_id == repeated)), tmp_path / "c")
    assert error.value.doc_id == repeated
    assert "partition 0" in str(error.value) and "partition 4" in str(error.value)
    only(tmp_path)


@pytest.mark.parametrize("how", ["raise", "crash"])
def test_task_that_fails_once_after_writing_part_of_its_shard(spark, tmp_path, how):
    """The first attempt of partition 1 hands the writer its first batches, then raises (or its
    Python worker dies); Spark retries it; every document is in the collection once, and
    nothing but the collection remains."""
    marker = str(tmp_path / "marker")
    (tmp_path / "out").mkdir()

    def fail_once(batches):
        from pyspark import TaskContext

        flaky = TaskContext.get().partitionId() == 1 and not os.path.exists(marker)
        for i, batch in enumerate(batches):
            if flaky and i == 2:
                open(marker, "x").close()
                if how == "crash":
                    os._exit(1)
                raise RuntimeError("injected failure")
            yield batch

    docs = make_docs(1000)
    df = frame(spark, docs)
    store = docstore_spark.write(df.mapInArrow(fail_once, df.schema), tmp_path / "out" / "c")
    assert os.path.exists(marker)
    assert list(store.keys()) == list(docs)
    only(tmp_path / "out", "c")


def test_failed_job_leaves_nothing(spark, tmp_path):
    def always_fail(batches):
        from pyspark import TaskContext

        for batch in batches:
            if TaskContext.get().partitionId() == 2:
                raise RuntimeError("injected failure")
            yield batch

    df = frame(spark, make_docs(400))
    with pytest.raises(Exception, match="injected failure"):
        docstore_spark.write(df.mapInArrow(always_fail, df.schema), tmp_path / "c")
    only(tmp_path)


def test_modes(spark, tmp_path):
    path = tmp_path / "c"
    a, b, c = named(30, "a-"), named(30, "b-"), named(30, "c-")
    docstore_spark.write(frame(spark, a, 2), path)
    with pytest.raises(docstore.StoreExistsError):
        docstore_spark.write(frame(spark, b, 2), path)
    assert docstore_spark.write(frame(spark, b, 2), path, mode="ignore") is None
    assert list(docstore.open(path).keys()) == list(a)
    store = docstore_spark.write(frame(spark, b, 2), path, mode="overwrite")
    assert list(store.keys()) == list(b)
    appended = docstore_spark.write(frame(spark, c, 3), path, mode="append")
    assert list(appended.keys()) == list(b) + list(c)
    assert len(appended.info()["shards"]) == 2 + 3
    assert dictionaries(appended) == dictionaries(store)  # the appended shards take the collection's
    assert list(store.keys()) == list(b)  # the replaced collection still reads
    with pytest.raises(docstore.DuplicateKeyError):
        docstore_spark.write(frame(spark, c, 1), path, mode="append")
    assert list(docstore.open(path).keys()) == list(b) + list(c)
    with pytest.raises(ValueError, match="mode must be one of"):
        docstore_spark.write(frame(spark, c, 1), path, mode="upsert")
    only(tmp_path, "c")


def test_append_matches_fields_by_name(spark, tmp_path):
    """An append whose columns come in another order than the collection's fields appends (it
    failed on the order alone); another type is still refused."""
    path = tmp_path / "c"
    docstore_spark.write(spark.createDataFrame([("a", "x", 1)], "doc_id string, text string, n long"), path)
    moved = spark.createDataFrame([(2, "b", "y")], "n long, doc_id string, text string")
    store = docstore_spark.write(moved, path, mode="append")
    assert list(store.fields) == ["text", "n"] and (store["b"].text, store["b"].n) == ("y", 2)
    wrong = spark.createDataFrame([("3", "c", "z")], "n string, doc_id string, text string")
    with pytest.raises(
        docstore.DocstoreError,
        match=r"has fields \{n: str, text: str\}, but shard .* has \{text: str, n: int64\}",
    ):
        docstore_spark.write(wrong, path, mode="append")
    assert list(docstore.open(path).keys()) == ["a", "b"]


def test_a_ragged_row_of_a_fixed_shape_is_refused_by_name(spark, tmp_path):
    """Never re-cut into the shape: rows [1, 2], [3, 4, 5], [6] into float32[2] are six
    elements, three rows' worth."""
    ragged = [("a", [1.0, 2.0]), ("b", [3.0, 4.0, 5.0]), ("c", [6.0])]
    df = spark.createDataFrame(ragged, "doc_id string, v array<float>")
    with pytest.raises(docstore.FieldTypeError, match=r"doc 'b': field 'v' is float32\[2\].*shape \(3,\)"):
        docstore_spark.write(df, tmp_path / "c", fields={"v": "float32[2]"})
    assert os.listdir(tmp_path) == []


def test_empty(spark, tmp_path):
    store = docstore_spark.write(frame(spark, {}, 2), tmp_path / "a")
    assert len(store) == 0 and store.fields == FIELDS
    no_partitions = spark.createDataFrame([], SCHEMA)
    store = docstore_spark.write(no_partitions, tmp_path / "b", fields={"text": "str"})
    assert len(store) == 0 and store.fields == {"text": "str"}
    only(tmp_path, "a", "b")


@pytest.mark.parametrize(
    ("select", "error", "message"),
    [
        (["cast(label as string) as key", "text"], docstore.SchemaError, "no id column 'doc_id'"),
        (["cast(label as double) as doc_id", "text"], docstore.InvalidKeyError, "must be strings"),
        (["if(label > 0, doc_id, null) as doc_id", "text"], docstore.InvalidKeyError, "null"),
        (["doc_id", "current_timestamp() as t"], docstore.SchemaError, "Arrow type timestamp"),
    ],
)
def test_bad_input(spark, tmp_path, select, error, message):
    df = frame(spark, make_docs(50)).selectExpr(*select)
    with pytest.raises(error, match=message):
        docstore_spark.write(df, tmp_path / "c")
    only(tmp_path)


# A process that makes and locks a staging directory of TARGET as docstore.spark.write does in
# the driver, puts a shard's scratch file in it, says where, and waits to be killed.
LOCKING_DRIVER = """
import os, sys
from docstore._docstore import Staging

target = sys.argv[1]
staging = Staging(target)
open(os.path.join(staging.path, "part-00000-0-x.docstore-tmp"), "w").close()
print(staging.path, flush=True)
sys.stdin.read()
"""


def test_write_removes_a_killed_drivers_staging_and_keeps_live_ones(spark, tmp_path):
    """A driver killed with SIGKILL leaves its staging directory, unlocked: the next write to the
    same path removes it. One that a live driver holds (this process), or that no process holds
    (a bare ``df.write.format("docstore")`` job's, whose planner cannot hold one), stays."""
    import signal
    import sys

    from docstore import _engines

    target = str(tmp_path / "c")
    driver = subprocess.Popen(
        [sys.executable, "-c", LOCKING_DRIVER, target],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        dead = driver.stdout.readline().strip()
        assert holds_lock(dead)
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert os.path.isdir(dead) and not holds_lock(dead)
    live = _engines.make_staging(target, None, {})
    unlocked = _engines.make_unlocked_staging(target)
    try:
        docs = named(40, "s-")
        store = docstore_spark.write(frame(spark, docs, 2), target)
        assert list(store.keys()) == list(docs)
        only(tmp_path, "c", os.path.basename(live.path), os.path.basename(unlocked))
    finally:
        live.release()
        _engines.remove_staging(target, unlocked)
    only(tmp_path, "c")


def _ids_frame(spark, ids: list[str], partitions: int):
    """Rows (doc_id, text=row number) in contiguous partitions, made in the JVM alone."""
    array = ",".join(f"'{i}'" for i in ids)
    return spark.range(0, len(ids), 1, numPartitions=partitions).selectExpr(
        f"element_at(array({array}), cast(id as int) + 1) as doc_id", "cast(id as string) as text"
    )


@pytest.mark.parametrize("policy", ["first", "last"])
def test_on_duplicate_within_and_across_partitions(spark, tmp_path, policy):
    df = _ids_frame(spark, ["a", "a", "b", "c", "b", "a"], partitions=3)
    store = docstore_spark.write(df, tmp_path / "c", on_duplicate=policy)
    got = [(d.doc_id, d.text) for d in store.values()]
    if policy == "first":
        assert got == [("a", "0"), ("b", "2"), ("c", "3")]
    else:
        assert got == [("c", "3"), ("b", "4"), ("a", "5")]
    with pytest.raises(docstore.DuplicateKeyError, match="partition 0: duplicate doc id"):
        docstore_spark.write(df, tmp_path / "e")  # "a" twice in the first partition
    with pytest.raises(docstore.InvalidArgumentError, match="append"):
        docstore_spark.write(df, tmp_path / "c", mode="append", on_duplicate="last")
    only(tmp_path, "c")


def test_tasks_run_the_drivers_python_unless_told(spark, tmp_path, monkeypatch):
    """Spark's default worker Python is python3 on the PATH: from a venv that is not activated,
    another interpreter, without docstore. The data source's tasks run the driver's."""
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.setattr(spark.sparkContext, "pythonExec", str(tmp_path / "no-such-python"))
    df = _ids_frame(spark, ["a", "b", "c"], partitions=2)
    assert len(docstore_spark.write(df, tmp_path / "c")) == 3
    assert spark.sparkContext.pythonExec == str(tmp_path / "no-such-python")  # the user's, as it was
    monkeypatch.setenv("PYSPARK_PYTHON", str(tmp_path / "no-such-python"))  # the user's choice wins
    with pytest.raises(Exception, match="no-such-python"):
        docstore_spark.write(df, tmp_path / "d")
