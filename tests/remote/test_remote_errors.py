"""Errors of a remote open a user can act on (issue 39 section 2), each against a server on
127.0.0.1, each keeping its class:

- a missing object: ``StoreNotFoundError("not found: URL")``, the URL as given (credentials
  redacted), without the server's HTML page or the collection manifest docstore probed for;
- a server that is not there: ``StoreIOError`` saying it cannot connect to host:port, and the URL;
- S3 without credentials: ``StoreIOError`` saying that none were found and how to give them
  (the variables, ``storage_options``, ``skip_signature`` for a public bucket), never the instance
  metadata service's own answer. The metadata endpoint is a server of the test on 127.0.0.1
  (``AWS_METADATA_ENDPOINT``), so no request leaves the machine.

Every subprocess has a timeout; requests have short timeouts and few retries.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import textwrap
import threading

import pytest

import docstore

from ..conftest import make_docs, write_store
from ..support.remote_servers import BUCKET, MotoS3, PlainHTTPServer, RangeHTTPServer, free_port
from .conftest import PYTHONPATH

QUICK = {
    "timeout": "5s",
    "connect_timeout": "2s",
    "max_retries": "1",
    "retry_timeout": "5s",
    "init_backoff": "10ms",
}
BIG = make_docs(2000, seed=3)  # past the open's first 128 KiB: a lookup fetches


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("errors")
    write_store(root / "corpus.docstore", make_docs(100, seed=3)).close()
    write_store(root / "big.docstore", BIG).close()
    return root


def open_remote(url, cache, **options):
    return docstore.open(url, cache_dir=str(cache), storage_options={**QUICK, **options})


@pytest.mark.parametrize("server_kind", ["http.server", "ranges"])
def test_a_missing_object_is_not_found_url(root, tmp_path, server_kind):
    server = PlainHTTPServer(str(root)) if server_kind == "http.server" else RangeHTTPServer(str(root))
    try:
        for path in ("missing.docstore", "missing/", "dir/missing.docstore"):
            url = f"{server.url}/{path}"
            with pytest.raises(docstore.StoreNotFoundError) as missing:
                open_remote(url, tmp_path / "cache")
            assert str(missing.value) == f"not found: {url}"
            assert isinstance(missing.value, FileNotFoundError)
        # Credentials in the URL stay hidden in this message too.
        host = server.url.split("://", 1)[1]
        with pytest.raises(docstore.StoreNotFoundError) as missing:
            open_remote(f"http://alice:hunter2@{host}/missing.docstore?sig=SECRET", tmp_path / "cache")
        assert str(missing.value) == f"not found: http://***@{host}/missing.docstore?sig=***"
    finally:
        server.stop()


def test_a_missing_shard_names_its_url(tmp_path):
    """A collection whose shard was not uploaded: the shard's URL, not the collection's."""
    part = tmp_path / "part.docstore"
    write_store(part, make_docs(20)).close()
    served = tmp_path / "served"
    served.mkdir()
    docstore.seal(served / "coll.docstore", [str(part)]).close()
    shard = next((served / "coll.docstore" / "shards").iterdir())
    shard.unlink()
    server = RangeHTTPServer(str(served))
    try:
        with pytest.raises(docstore.StoreNotFoundError) as missing:
            open_remote(f"{server.url}/coll.docstore", tmp_path / "cache")
        assert str(missing.value) == f"not found: {server.url}/coll.docstore/shards/{shard.name}"
    finally:
        server.stop()


def test_a_stopped_server_cannot_be_connected_to(root, tmp_path):
    server = PlainHTTPServer(str(root))
    port = server.port
    server.stop()
    url = f"http://127.0.0.1:{port}/corpus.docstore"
    with pytest.raises(docstore.StoreIOError) as refused:
        open_remote(url, tmp_path / "cache")
    message = str(refused.value)
    assert message.startswith(f"cannot connect to 127.0.0.1:{port} ({url}): "), message
    assert "error sending request" not in message


def test_a_server_stopped_after_open_cannot_be_connected_to(root, tmp_path):
    """A read that fetches, once the server is gone: the same message, with the bytes asked."""
    server = RangeHTTPServer(str(root))
    url = f"{server.url}/big.docstore"
    # No pooled connection: one kept alive would still be served by its handler's thread.
    store = open_remote(url, tmp_path / "cache", request_cost_bytes="0", pool_max_idle_per_host="0")
    server.stop()
    with pytest.raises(docstore.StoreIOError) as refused:
        store.get_many(list(BIG))
    message = str(refused.value)
    assert message.startswith(f"cannot connect to 127.0.0.1:{server.port} ({url} (bytes "), message


class _Metadata(http.server.BaseHTTPRequestHandler):
    """An instance metadata service that refuses every request (403), as one that is there but
    gives this machine nothing; it counts what it is asked."""

    def _refuse(self) -> None:
        self.server.asked += 1  # type: ignore[attr-defined]
        self.send_response(403)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_PUT = _refuse

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def s3_store(tmp_path_factory):
    """moto's S3 server with a store in a private bucket, and a copy readable by anyone."""
    server = MotoS3()
    path = tmp_path_factory.mktemp("s3") / "corpus.docstore"
    write_store(path, make_docs(50, seed=4)).close()
    url = server.upload(str(path), "corpus.docstore")
    server.client.put_object(Bucket=BUCKET, Key="public.docstore", Body=path.read_bytes(), ACL="public-read")
    yield server, url
    server.stop()


def run_without_credentials(endpoint: str, metadata: str, url: str, options: dict) -> dict:
    """Opens ``url`` in a process whose environment has no AWS credentials, only the endpoint;
    returns the error's class and message (or the store's length)."""
    code = f"""
        import json, docstore
        try:
            store = docstore.open({url!r}, cache_bytes=0, storage_options={options!r})
            print(json.dumps({{"len": len(store)}}))
        except Exception as e:
            print(json.dumps({{"class": type(e).__name__, "message": str(e)}}))
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        {
            "PYTHONPATH": PYTHONPATH,
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_REGION": "us-east-1",
            "AWS_METADATA_ENDPOINT": metadata,
        }
    )
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("metadata_kind", ["refuses", "absent"])
def test_s3_without_credentials_says_so_and_how_to_give_them(s3_store, metadata_kind):
    server, url = s3_store
    refusing = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metadata)
    refusing.asked = 0  # type: ignore[attr-defined]
    threading.Thread(target=refusing.serve_forever, daemon=True).start()
    try:
        metadata = (
            f"http://127.0.0.1:{refusing.server_address[1]}"
            if metadata_kind == "refuses"
            else f"http://127.0.0.1:{free_port()}"
        )
        got = run_without_credentials(server.endpoint, metadata, url, QUICK)
    finally:
        refusing.shutdown()
        refusing.server_close()
    assert got.get("class") == "StoreIOError", got
    message = got["message"]
    assert message.startswith(f"{url}: no AWS credentials found"), message
    for hint in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "storage_options",
        "aws_access_key_id",
        "skip_signature",
    ):
        assert hint in message, (hint, message)
    assert metadata in message
    if metadata_kind == "refuses":
        assert "it answered 403 Forbidden" in message
        assert refusing.asked >= 1, "object_store asked the metadata endpoint of the test"  # type: ignore[attr-defined]
    else:
        assert "it cannot be reached" in message


def test_s3_skip_signature_reads_a_public_object_without_credentials(s3_store):
    """The hint works: a public object opens with ``skip_signature`` and no credentials."""
    server, _ = s3_store
    metadata = f"http://127.0.0.1:{free_port()}"  # never asked: nothing is signed
    got = run_without_credentials(
        server.endpoint, metadata, f"s3://{BUCKET}/public.docstore", {**QUICK, "skip_signature": "true"}
    )
    assert got == {"len": 50}, got
