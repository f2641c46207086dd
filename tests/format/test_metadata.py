"""A store's user metadata (docs/format.md §4.10, format version 5): ``Writer(..., metadata=...)``,
``DocStore.metadata``, and every way a store is rewritten or gathered keeping it (``build``, a
widening ``build``, ``on_duplicate="last"``, ``upgrade``, ``seal`` and appends, ``export``)."""

from __future__ import annotations

import json
import math

import pytest

import docstore
import docstore.cli
from docstore.errors import InvalidArgumentError, SchemaError

METADATA = {"tokenizer": "bert-base-uncased", "nested": {"é": [1, 2.5, None, True, "x"]}, "empty": {}}


def nested(depth):
    """Lists nested ``depth`` deep."""
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def write(path, metadata=None, ids=range(5), **options):
    with docstore.Writer(path, {"text": "str"}, metadata=metadata, **options) as writer:
        for i in ids:
            writer.add(f"d{i}", text=f"text {i}")
    return path


def test_metadata_round_trips_and_none_keeps_the_store_as_before(tmp_path):
    store = docstore.open(write(tmp_path / "m", METADATA))
    assert store.metadata == METADATA and store.info()["format_version"] == 5
    assert list(store.metadata) == list(METADATA)  # its order kept
    store.metadata["tokenizer"] = "changed"  # a new dict each time
    assert store.metadata == METADATA
    store.verify()
    for none in (None, {}):
        plain = docstore.open(write(tmp_path / f"p{none}", none))
        assert plain.metadata == {} and plain.info()["format_version"] == docstore.FORMAT_VERSION
    # Without metadata, the same bytes as a store written without the argument.
    with docstore.Writer(tmp_path / "bare", {"text": "str"}) as writer:
        for i in range(5):
            writer.add(f"d{i}", text=f"text {i}")
    assert (tmp_path / "bare").read_bytes() == (tmp_path / "pNone").read_bytes()


@pytest.mark.parametrize(
    ("metadata", "error", "message"),
    [
        ([1, 2], TypeError, "metadata must be a dict"),
        ("{}", TypeError, "metadata must be a dict"),
        ({1: "a"}, TypeError, r"metadata has the key 1 \(int\)"),
        ({"a": {"b": {2, 3}}}, TypeError, r"metadata\['a'\]\['b'\] is a set"),
        ({"a": [1, math.nan]}, ValueError, r"metadata\['a'\]\[1\] is nan"),
        ({"a": b"x"}, TypeError, r"metadata\['a'\] is a bytes"),
        ({"a": "x" * (4 << 20)}, InvalidArgumentError, "more than a store holds"),
        ({"a": [], "b": nested(127)}, ValueError, r"metadata\['b'\](\[0\]){126} is nested 128 deep"),
    ],
)
def test_bad_metadata_is_refused_naming_what_is_wrong(tmp_path, metadata, error, message):
    with pytest.raises(error, match=message):
        write(tmp_path / "s", metadata)
    assert not (tmp_path / "s").exists()


def test_metadata_nests_127_deep(tmp_path):
    metadata = {"b": nested(126)}
    assert docstore.open(write(tmp_path / "s", metadata)).metadata == metadata


def test_metadata_needs_format_version_5(tmp_path):
    with pytest.raises(InvalidArgumentError, match="metadata needs format version 5"):
        write(tmp_path / "s", METADATA, format_version=4)
    assert docstore.open(write(tmp_path / "t", METADATA, format_version=5)).metadata == METADATA


def test_build_widening_and_on_duplicate_last_keep_it(tmp_path):
    records = [{"doc_id": f"d{i}", "t": "x" if i < 1500 else None} for i in range(1600)]
    with pytest.warns(UserWarning, match="widened"):
        store = docstore.build(tmp_path / "b", records, metadata=METADATA)
    assert store.fields == {"t": "str?"} and store.metadata == METADATA
    with docstore.Writer(tmp_path / "l", {"text": "str"}, on_duplicate="last", metadata=METADATA) as writer:
        for i in (1, 2, 1):
            writer.add(f"d{i}", text=f"v{i}")
    assert docstore.open(tmp_path / "l").metadata == METADATA and len(docstore.open(tmp_path / "l")) == 2


def test_upgrade_keeps_it(tmp_path):
    write(tmp_path / "s", METADATA)
    new = docstore.upgrade(tmp_path / "s", tmp_path / "u")
    assert new.metadata == METADATA and new.info()["format_version"] == 5


def test_a_collection_reads_as_its_shards_and_refuses_differing_ones(tmp_path):
    a = write(tmp_path / "a", METADATA, range(0, 5))
    b = write(tmp_path / "b", METADATA, range(5, 10))
    collection = docstore.seal(tmp_path / "c", [a, b])
    assert collection.metadata == METADATA and len(collection) == 10
    other = write(tmp_path / "o", {"tokenizer": "other"}, range(10, 15))
    with pytest.raises(SchemaError, match="has metadata .*other.*but shard .* has"):
        docstore.seal(tmp_path / "d", [a, other])
    with pytest.raises(SchemaError, match="none"):
        docstore.seal(tmp_path / "c", [write(tmp_path / "n", None, range(20, 25))], append=True)
    appended = docstore.seal(tmp_path / "c", [write(tmp_path / "m", METADATA, range(30, 35))], append=True)
    assert appended.metadata == METADATA and len(appended) == 15


def test_export_to_parquet_keeps_it(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    write(tmp_path / "s", METADATA)
    out = tmp_path / "s.parquet"
    assert docstore.cli.main(["export", str(tmp_path / "s"), "-o", str(out), "-q"]) == 0
    assert json.loads(pq.read_schema(out).metadata[b"docstore.metadata"]) == METADATA


def test_a_remote_store_reads_its_metadata_with_the_fences(tmp_path):
    """Over HTTP the metadata, at the end of the file, comes in the open's second round with the
    key fences (docs/format.md §14): opening still costs two round trips."""
    from ..support.remote_servers import RangeHTTPServer

    (tmp_path / "root").mkdir()
    ids = range(20_000)  # a file well past the open's first 128 KiB
    write(tmp_path / "root" / "m.docstore", METADATA, ids)
    write(tmp_path / "root" / "p.docstore", None, ids)
    server = RangeHTTPServer(str(tmp_path / "root"), etag="strong")
    try:
        options = {"timeout": "5s", "connect_timeout": "2s"}
        for name, metadata in (("m", METADATA), ("p", {})):
            cache = str(tmp_path / f"cache-{name}")
            store = docstore.open(f"{server.url}/{name}.docstore", cache_dir=cache, storage_options=options)
            stats = store.remote_stats()
            assert stats["round_trips"] == 2, stats
            assert store.metadata == metadata and store.get("d123").text == "text 123"
    finally:
        server.stop()
