"""spark.read.format("docstore"), docstore.spark.read and docstore.spark.lookup in local mode
(one SparkSession per module), checked against the store's own iteration. The master is
``local[2,3]``: two cores, and a failed task is tried up to 3 times, as on a cluster."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import docstore

from ..support.remote_servers import RangeHTTPServer
from .test_read_ray import collection, damage, expected
from .test_spark import _java_ok

pytest.importorskip("pyarrow")
pyspark_sql = pytest.importorskip("pyspark.sql")
docstore_spark = pytest.importorskip("docstore.spark")

if not _java_ok():
    pytest.skip("PySpark 4 needs Java 17 or newer", allow_module_level=True)


@pytest.fixture(scope="module")
def spark():
    session = (
        pyspark_sql.SparkSession.builder.master("local[2,3]")
        .appName("docstore-read-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("OFF")  # failed tasks are part of the tests
    docstore_spark.register(session)
    yield session
    session.stop()


def rows_of(df) -> dict[str, list]:
    """The DataFrame's rows in partition order, column by column, as Arrow's to_pylist gives."""
    rows = df.collect()
    out: dict[str, list] = {name: [] for name in df.columns}
    for row in rows:
        for name in df.columns:
            value = row[name]
            out[name].append(bytes(value) if isinstance(value, bytearray) else value)
    return out


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(0, 300), min_size=2, max_size=5), parallelism=st.integers(1, 6))
def test_collection_every_document_once(spark, tmp_path_factory, sizes, parallelism):
    store = collection(tmp_path_factory.mktemp("c"), sizes)
    df = spark.read.format("docstore").option("parallelism", str(parallelism)).load(os.fspath(store.path))
    assert df.schema.simpleString() == (
        "struct<doc_id:string,text:string,label:bigint,score:double,tokens:array<int>,raw:binary>"
    )
    assert df.rdd.getNumPartitions() >= min(parallelism, len(store))
    assert rows_of(df) == expected(store)


def test_single_file_and_remote_url(spark, tmp_path):
    store = collection(tmp_path / "c", [500])
    single = os.fspath(store.info()["shards"][0]["path"])
    assert rows_of(docstore_spark.read(spark, single, parallelism=3)) == expected(docstore.open(single))
    server = RangeHTTPServer(str(tmp_path / "c"))
    try:
        df = docstore_spark.read(
            spark, f"{server.url}/c.docstore", parallelism=2, cache_dir=str(tmp_path / "cache")
        )
        assert rows_of(df) == expected(store)
        assert os.listdir(tmp_path / "cache")  # through the node's cache
    finally:
        server.stop()


def test_columns_option_and_a_given_schema_read_only_their_fields(spark, tmp_path):
    store = collection(tmp_path, [200, 100])
    df = docstore_spark.read(spark, store.path, columns=["label", "text"])
    assert df.columns == ["doc_id", "label", "text"]
    assert rows_of(df) == expected(store, ["label", "text"])
    given_schema = (
        spark.read.schema("doc_id string, score double").format("docstore").load(os.fspath(store.path))
    )
    assert rows_of(given_schema) == expected(store, ["score"])
    with pytest.raises(Exception, match="column 'score' is int in the schema given"):
        spark.read.schema("doc_id string, score int").format("docstore").load(os.fspath(store.path)).collect()


def test_a_failed_task_retried_gives_every_row_once(spark, tmp_path):
    store = collection(tmp_path, [400, 400])
    marker = str(tmp_path / "failed-once")

    class FlakyReader(docstore_spark.DocstoreReader):
        def read(self, partition):
            for n, batch in enumerate(super().read(partition)):
                yield batch
                if partition.split.index == 1 and n == 0:
                    try:
                        os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
                    except FileExistsError:
                        continue  # the retry: no failure
                    raise RuntimeError("injected failure")

    class Flaky(docstore_spark.DocstoreDataSource):
        @classmethod
        def name(cls):
            return "docstore_flaky"

        def reader(self, schema):
            return FlakyReader(dict(self.options), schema)

    spark.dataSource.register(Flaky)
    df = spark.read.format("docstore_flaky").option("parallelism", "3").option("block_rows", "50")
    assert rows_of(df.load(os.fspath(store.path))) == expected(store)
    assert os.path.exists(marker)  # the failure happened


def test_a_damaged_shard_fails_the_job_naming_the_store_and_shard(spark, tmp_path):
    store = collection(tmp_path, [300, 300])
    shard = os.fspath(store.info()["shards"][1]["path"])
    damage(shard)
    df = docstore_spark.read(spark, store.path, parallelism=2)
    with pytest.raises(Exception) as info:
        df.collect()
    message = str(info.value)
    assert "CorruptStoreError" in message
    assert f"store {store.path}, shard 1 ({shard})" in message


def test_bad_options_fail_before_the_job(spark, tmp_path):
    store = collection(tmp_path, [10])
    path = os.fspath(store.path)
    with pytest.raises(docstore.SchemaError, match=r"no field\(s\) \['txt'\]"):
        docstore_spark.read(spark, path, columns=["txt"])
    with pytest.raises(docstore.InvalidArgumentError, match="parallelism must be a whole number >= 1"):
        docstore_spark.read(spark, path, parallelism=-1)
    with pytest.raises(docstore.InvalidArgumentError, match="unknown docstore read option"):
        docstore_spark.read(spark, path, paralelism=2)
    # The bare API fails at load(), when Spark asks for the schema: before any job.
    with pytest.raises(Exception, match="parallelism must be a whole number >= 1"):
        spark.read.format("docstore").option("parallelism", "-1").load(path)
    with pytest.raises(Exception, match=r"no field\(s\) \['txt'\]"):
        spark.read.format("docstore").option("columns", "txt").load(path)


def test_lookup_with_map_in_arrow(spark, tmp_path):
    store = collection(tmp_path, [300, 300])
    ids = list(store)
    rows = [(q, ids[(q * 13) % len(ids)]) for q in range(200)] + [(200, "absent")]
    df = spark.createDataFrame(spark.sparkContext.parallelize(rows, 3), "qid long, doc_id string")
    nulls = docstore_spark.lookup(df, store.path, columns=["text", "tokens"], missing="null").orderBy("qid")
    got = rows_of(nulls)
    assert got["qid"] == list(range(201))
    assert got["text"] == [store[d].text for _, d in rows[:-1]] + [None]
    assert got["tokens"] == [store[d].tokens.tolist() for _, d in rows[:-1]] + [None]
    dropped = docstore_spark.lookup(df, store.path, columns=["label"], missing="drop")
    assert sorted(rows_of(dropped)["qid"]) == list(range(200))
    with pytest.raises(
        Exception, match="1 id\\(s\\) of column 'doc_id' not in the store, first \\['absent'\\]"
    ):
        docstore_spark.lookup(df, store.path, columns=["label"]).collect()
    with pytest.raises(docstore.SchemaError, match="already has column"):
        docstore_spark.lookup(df.withColumnRenamed("qid", "label"), store.path, columns=["label"])


def test_a_rebuilt_store_is_read_anew_by_read_and_lookup(spark, tmp_path):
    """Spark's reused Python workers cache open stores: by version, not by path."""
    path = tmp_path / "s.docstore"
    ids = spark.createDataFrame([("d3",), ("d5",)], "doc_id string")
    for version in ("old", "new"):
        docstore.build(
            path, [{"doc_id": f"d{i}", "text": f"{version} {i}"} for i in range(200)], overwrite=True
        )
        texts = rows_of(docstore_spark.read(spark, path, parallelism=2))["text"]
        assert sorted(texts) == sorted(f"{version} {i}" for i in range(200))
        joined = rows_of(docstore_spark.lookup(ids, path, columns=["text"]))
        assert joined["text"] == [f"{version} 3", f"{version} 5"]


def test_on_corrupt_skip_reads_every_undamaged_document(spark, tmp_path):
    from ..support.damage import damaged_store, text_of

    damaged = [2, 99, 100]
    store = damaged_store(tmp_path / "c", 200, damaged, shards=2)
    with pytest.raises(Exception, match="CorruptStoreError"):
        docstore_spark.read(spark, store.path).collect()
    got = rows_of(docstore_spark.read(spark, store.path, parallelism=2, on_corrupt="skip"))
    good = [i for i in range(200) if i not in damaged]
    assert got["doc_id"] == [f"d{i}" for i in good]
    assert got["text"] == [text_of(i) for i in good]
    ids = spark.createDataFrame([("d99",), ("d7",)], "doc_id string")
    joined = rows_of(docstore_spark.lookup(ids, store.path, columns=["n"], missing="null", on_corrupt="skip"))
    assert joined["n"] == [None, 7]
