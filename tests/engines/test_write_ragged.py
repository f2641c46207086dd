"""Ragged rows into a fixed-shape field through the engines' writers (``docstore.ray.write``,
``docstore.spark.write``): refused by name in the write task, never re-cut into the shape."""

from __future__ import annotations

import os

import pytest

import docstore

pa = pytest.importorskip("pyarrow")

# Six elements: three rows of float32[2], if re-cut ([1, 2], [3, 4], [5, 6]).
IDS, RAGGED = ["a", "b", "c"], [[1.0, 2.0], [3.0, 4.0, 5.0], [6.0]]
NAMED = r"doc 'b': field 'v' is float32\[2\].*shape \(3,\)"  # the row, the field, its shape, the length


def test_ray_write_refuses_a_ragged_row(tmp_path):
    ray = pytest.importorskip("ray")
    docstore_ray = pytest.importorskip("docstore.ray")
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False
        table = pa.table({"doc_id": IDS, "v": pa.array(RAGGED, pa.list_(pa.float32()))})
        with pytest.raises(docstore.FieldTypeError, match=NAMED):
            docstore_ray.write(
                ray.data.from_arrow(table),
                tmp_path / "c",
                fields={"v": "float32[2]"},
                ray_remote_args={"max_retries": 0},
            )
    finally:
        ray.shutdown()
    assert os.listdir(tmp_path) == []


def test_spark_write_refuses_a_ragged_row(tmp_path):
    pyspark_sql = pytest.importorskip("pyspark.sql")
    docstore_spark = pytest.importorskip("docstore.spark")
    from .test_spark import _java_ok  # skips this test, as that module, without Java 17

    assert _java_ok()
    spark = (
        pyspark_sql.SparkSession.builder.master("local[1]")
        .appName("docstore-ragged")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("OFF")
    try:
        df = spark.createDataFrame(list(zip(IDS, RAGGED)), "doc_id string, v array<float>")
        with pytest.raises(docstore.FieldTypeError, match=NAMED):
            docstore_spark.write(df, tmp_path / "c", fields={"v": "float32[2]"})
    finally:
        spark.stop()
    assert os.listdir(tmp_path) == []
