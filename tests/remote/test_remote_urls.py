"""What a remote URL and a remote manifest may make docstore do (issue 25).

- Credentials in a URL (``user:pass@``, a presigned query string) are shown nowhere: not in error
  messages, ``repr``, ``.path``, ``.url``, ``info()``, the CLI's output, nor in a pickle (except
  to a process multiprocessing starts, as for ``storage_options``' secrets: docs/remote.md).
- A remote manifest cannot name a file outside its collection's prefix, however it spells it
  (``%2e%2e``, ``..\\``): refused as the local check refuses ``..``, before anything is fetched.

Real servers on 127.0.0.1 (tests/support/remote_servers.py); whatever runs in another process has a
timeout, so no test can hang.
"""

from __future__ import annotations

import importlib.util
import json
import multiprocessing
import os
import pickle
import shutil
import subprocess
import sys

import numpy as np
import pytest
import xxhash

import docstore

from ..conftest import assert_doc_equal, make_docs, write_store
from ..support.remote_servers import BUCKET, FaultProxy, MotoS3, RangeHTTPServer, _Files, environment

FAST = {"timeout": "5s", "connect_timeout": "2s", "init_backoff": "10ms", "max_backoff": "100ms"}
# What a URL may carry that must never be shown: a user, a password, presigned query values.
SECRETS = ["alice", "hunter2-PW", "SIGSECRET", "CREDSECRET", "SASSECRET", "FRAGSECRET"]
CREDENTIALS = "alice:hunter2-PW@"
QUERY = "?X-Amz-Signature=SIGSECRET&X-Amz-Credential=CREDSECRET&sv=2022-11-02&sig=SASSECRET"


class _Logged(_Files):
    """The range server's handler, recording every path asked for."""

    def _serve(self, body: bool) -> None:
        self.server.paths.append(self.path)  # type: ignore[attr-defined]
        super()._serve(body)


class LoggingServer(RangeHTTPServer):
    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.server.RequestHandlerClass = _Logged
        self.server.paths = []  # type: ignore[attr-defined]

    @property
    def paths(self) -> list[str]:
        return self.server.paths  # type: ignore[attr-defined]


def with_credentials(base_url: str, path: str) -> str:
    """``base_url`` (``http://127.0.0.1:port``) with userinfo, then ``path``, a query, a fragment."""
    scheme, rest = base_url.split("://", 1)
    return f"{scheme}://{CREDENTIALS}{rest}/{path}{QUERY}#FRAGSECRET"


def assert_no_secret(text: str | bytes, where: str = "") -> None:
    if isinstance(text, bytes):
        text = text.decode("latin-1")
    leaked = [s for s in SECRETS if s in text]
    assert not leaked, f"{where}: {leaked} in {text!r}"


@pytest.fixture(scope="module")
def docs():
    return make_docs(300, seed=5)


@pytest.fixture(scope="module")
def served(tmp_path_factory, docs):
    """A store and a collection of the same documents, under one logging HTTP server."""
    root = tmp_path_factory.mktemp("served")
    write_store(root / "corpus.docstore", docs).close()
    ids = list(docs)
    parts = []
    for i, chunk in enumerate(np.array_split(np.arange(len(ids)), 2)):
        part = tmp_path_factory.mktemp("parts") / f"part{i}.docstore"
        write_store(part, {ids[j]: docs[ids[j]] for j in chunk}).close()
        parts.append(str(part))
    docstore.seal(root / "coll.docstore", parts).close()
    # Past the first request of an open (128 KiB): what a lookup reads is fetched then.
    rng = np.random.default_rng(1)
    with docstore.Writer(root / "big.docstore", fields={"raw": "bytes"}, level=-1) as writer:
        for i in range(2000):
            writer.add(f"b{i}", {"raw": rng.bytes(200)})
    server = LoggingServer(str(root))
    yield server, root
    server.stop()


def open_remote(url, cache, **options):
    return docstore.open(url, cache_dir=str(cache), storage_options={**FAST, **options})


def test_credentials_in_a_url_are_shown_nowhere(served, docs, tmp_path):
    server, _ = served
    ids = list(docs)
    for name in ("corpus.docstore", "coll.docstore"):
        url = with_credentials(server.url, name)
        store = open_remote(url, tmp_path / "cache")
        assert_doc_equal(store[ids[5]], ids[5], docs[ids[5]])
        assert (
            store.path
            == store.url
            == f"http://***@127.0.0.1:{server.port}/{name}"
            + ("?X-Amz-Signature=***&X-Amz-Credential=***&sv=***&sig=***#***")
        )
        for what, text in [
            ("repr", repr(store)),
            ("path", os.fspath(store.path)),
            ("url", store.url),
            ("info", json.dumps(store.info())),
            ("pickle", pickle.dumps(store)),
        ]:
            assert_no_secret(text, f"{name} {what}")
        assert (name == "coll.docstore") == ("shards" in store.info())
        # The pickle reopens (docstore sends neither userinfo nor query: nothing is lost).
        again = pickle.loads(pickle.dumps(store))
        assert again.fingerprint == store.fingerprint
        assert_doc_equal(again[ids[9]], ids[9], docs[ids[9]])
        assert_no_secret(repr(again), "unpickled")
        store.close()
        assert_no_secret(repr(store), "closed repr")
        with pytest.raises(docstore.ClosedError) as closed:
            store[ids[0]]
        assert_no_secret(str(closed.value), "closed error")
    # Nothing the server was asked for carries them either.
    assert server.paths and all("SECRET" not in p for p in server.paths)


def test_credentials_travel_only_where_asked(served, docs, tmp_path):
    """As storage_options' secrets (docs/remote.md): pickle_credentials=True writes the URL as
    given into a pickle; a process multiprocessing starts (a spawned DataLoader worker) gets it
    through its pipe, and reads."""
    server, _ = served
    url = with_credentials(server.url, "corpus.docstore")
    store = docstore.open(url, cache_dir=str(tmp_path / "cache"), pickle_credentials=True)
    assert url.encode() in pickle.dumps(store)
    assert_no_secret(repr(store))
    plain = open_remote(url, tmp_path / "cache")
    # As a DataLoader starts its workers: the dataset is an argument of the process started.
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    worker = ctx.Process(target=_in_worker, args=(plain, list(docs)[7], results))
    worker.start()
    try:
        reopened, doc_id = results.get(timeout=120)
    finally:
        worker.join(timeout=60)
    assert reopened == url and doc_id == list(docs)[7]


def _in_worker(store: docstore.DocStore, doc_id: str, results: multiprocessing.Queue) -> None:
    results.put((store._reopen_url(True), store[doc_id].doc_id))


def test_failures_name_the_url_without_its_credentials(served, docs, tmp_path):
    server, root = served
    cache = tmp_path / "cache"
    errors = []
    # Missing object and collection.
    with pytest.raises(docstore.StoreNotFoundError) as missing:
        open_remote(with_credentials(server.url, "nothing-here.docstore"), cache)
    assert "nothing-here.docstore" in str(missing.value)
    errors.append(missing.value)
    # Nobody listening.
    closed = RangeHTTPServer(str(root))
    closed.stop()
    with pytest.raises(docstore.StoreIOError) as refused:
        open_remote(with_credentials(closed.url, "corpus.docstore"), cache, max_retries="0")
    errors.append(refused.value)
    # A server that answers 503 to everything, after object_store's retries.
    proxy = FaultProxy("127.0.0.1", server.port)
    proxy.rate, proxy.kinds = 1.0, ("503",)
    try:
        with pytest.raises(docstore.StoreIOError) as failing:
            open_remote(with_credentials(proxy.url, "corpus.docstore"), cache, max_retries="1")
        errors.append(failing.value)
        # One that fails after the open: a range request's error.
        proxy.rate = 0.0
        store = open_remote(with_credentials(proxy.url, "big.docstore"), tmp_path / "c2", max_retries="1")
        proxy.rate = 1.0
        with pytest.raises(docstore.StoreIOError) as later:
            store.get_many([f"b{i}" for i in range(0, 2000, 40)])
        errors.append(later.value)
    finally:
        proxy.stop()
    # Bad options, a bad port, a URL that is not one docstore reads.
    with pytest.raises(docstore.InvalidArgumentError) as option:
        open_remote(with_credentials(server.url, "corpus.docstore"), cache, no_such_option="1")
    assert "no_such_option" in str(option.value)
    errors.append(option.value)
    with pytest.raises(docstore.DocstoreError) as port:
        open_remote(f"http://{CREDENTIALS}127.0.0.1:99999999/x{QUERY}", cache)
    errors.append(port.value)
    for error in errors:
        assert "127.0.0.1" in str(error), error
        assert_no_secret(str(error), type(error).__name__)
        assert_no_secret(repr(error), type(error).__name__)


def test_the_cli_shows_no_credentials(served, docs, tmp_path):
    server, _ = served
    env = {**os.environ, "DOCSTORE_CACHE_DIR": str(tmp_path / "cache")}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "docstore.cli", *args],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )

    url = with_credentials(server.url, "coll.docstore")
    doc_id = list(docs)[3]
    for args in (["info", url], ["info", "--json", url], ["get", url, doc_id], ["verify", url]):
        proc = cli(*args)
        assert proc.returncode == 0, proc.stderr
        assert_no_secret(proc.stdout + proc.stderr, " ".join(args[:1]))
    proc = cli("get", url, "no-such-id")
    assert proc.returncode == 1
    assert_no_secret(proc.stdout + proc.stderr, "get missing")
    for args in (
        ["info", with_credentials(server.url, "nothing-here")],
        ["verify", f"http://{CREDENTIALS}127.0.0.1:99999999/x{QUERY}"],
    ):
        proc = cli(*args)
        assert proc.returncode == 1 and "error" in proc.stderr, proc.stderr
        assert_no_secret(proc.stdout + proc.stderr, "failing " + args[0])


def test_torch_datasets_show_and_pickle_no_credentials(served, docs, tmp_path):
    pytest.importorskip("torch")
    from docstore.torch import DocDataset

    server, _ = served
    url = with_credentials(server.url, "corpus.docstore")
    with environment({"DOCSTORE_CACHE_DIR": str(tmp_path / "cache")}):
        for source in (open_remote(url, tmp_path / "cache"), url):
            ds = DocDataset(source, field="text")
            assert_no_secret(repr(ds) + ds.path, "dataset")
            blob = pickle.dumps(ds)
            assert_no_secret(blob, "dataset pickle")
            again = pickle.loads(blob)
            assert again[3] == ds[3] == docs[list(docs)[3]]["text"]
            assert again._handle._url == ds._handle._url.split("?")[0].replace(CREDENTIALS, "")
        # A spawned DataLoader worker gets the URL as given, and reads (docs/remote.md).
        import torch

        loader = torch.utils.data.DataLoader(
            _HandleURL(source, field="text"), batch_size=None, num_workers=1,
            multiprocessing_context="spawn", timeout=120,
        )  # fmt: skip
        got = list(loader)
    assert [tuple(item) for item in got[:3]] == [(url, docs[doc_id]["text"]) for doc_id in list(docs)[:3]]


if importlib.util.find_spec("torch") is not None:
    from docstore.torch import DocDataset

    class _HandleURL(DocDataset):
        """Each item with the URL its worker's handle reopens the store from."""

        def __getitem__(self, index: int) -> tuple[str | None, str]:
            return self._handle._url, super().__getitem__(index)


# -- a remote manifest names files inside its collection only -------------------------------


def reseal(manifest: dict) -> str:
    """The manifest's JSON with its checksum made right again (a crafted manifest)."""
    manifest = {**manifest, "checksum": ""}
    body = json.dumps(manifest, separators=(",", ":"), ensure_ascii=False).encode()
    return json.dumps({**manifest, "checksum": f"{xxhash.xxh3_64_intdigest(body):016x}"})


ESCAPES = ["%2e%2e/outside.docstore", "..\\outside.docstore", "shards/%2E%2E/%2e%2e/outside.docstore"]


@pytest.fixture
def crafted(tmp_path, docs):
    """A collection under ``coll/``, and beside it (outside) a copy of its first shard, which the
    manifest may be made to name: it has the right fingerprint and count."""
    root = tmp_path / "served"
    root.mkdir()
    ids = list(docs)
    parts = []
    for i, chunk in enumerate(np.array_split(np.arange(len(ids)), 2)):
        part = tmp_path / f"part{i}.docstore"
        write_store(part, {ids[j]: docs[ids[j]] for j in chunk}).close()
        parts.append(str(part))
    coll = docstore.seal(root / "coll", parts).path
    manifest = json.loads((coll / "docstore-collection.json").read_text())
    shutil.copyfile(coll / manifest["shards"][0]["file"], root / "outside.docstore")
    return root, manifest


@pytest.mark.parametrize("escape", ESCAPES)
def test_a_remote_manifest_cannot_name_a_file_outside_its_prefix_http(crafted, escape, tmp_path):
    root, manifest = crafted
    manifest["shards"][0]["file"] = escape
    (root / "coll" / "docstore-collection.json").write_text(reseal(manifest))
    server = LoggingServer(str(root))
    try:
        with pytest.raises(docstore.CorruptStoreError, match="not a file inside the collection"):
            open_remote(f"{server.url}/coll/", tmp_path / "cache")
        assert server.paths == ["/coll/docstore-collection.json"]
    finally:
        server.stop()
    # And the same manifest, read where it lies.
    with pytest.raises(docstore.CorruptStoreError, match="not a file inside the collection"):
        docstore.open(root / "coll")


@pytest.mark.parametrize(
    "name", ["shards/a%2fb.docstore", "shards/%5c..%5cx", "./index.docstore", "shards//x", "/etc/x"]
)
def test_a_manifest_name_with_an_encoded_separator_or_odd_component_is_refused(crafted, name):
    root, manifest = crafted
    manifest["index"]["file"] = name
    (root / "coll" / "docstore-collection.json").write_text(reseal(manifest))
    with pytest.raises(docstore.CorruptStoreError, match="not a file inside the collection"):
        docstore.open(root / "coll")


def test_a_remote_manifest_cannot_name_a_file_outside_its_prefix_s3(crafted, tmp_path):
    root, manifest = crafted
    server = MotoS3()
    try:
        with environment(server.env):
            server.upload(str(root / "outside.docstore"), "outside.docstore")
            genuine = server.upload(str(root / "coll"), "genuine")
            manifest["shards"][0]["file"] = ESCAPES[0]
            (root / "coll" / "docstore-collection.json").write_text(reseal(manifest))
            url = server.upload(str(root / "coll"), "coll")
            assert url == f"s3://{BUCKET}/coll"
            with pytest.raises(docstore.CorruptStoreError, match="not a file inside the collection"):
                open_remote(url + "/", tmp_path / "cache")
            # The genuine manifest opens: the refusal is the name's, not the server's.
            assert len(open_remote(genuine + "/", tmp_path / "cache")) == sum(
                s["count"] for s in manifest["shards"]
            )
    finally:
        server.stop()


def test_an_http_endpoint_without_allow_http_says_what_to_set(tmp_path, monkeypatch):
    """Without it, the first request failed with only "HTTP error: builder error"."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ALLOW_HTTP", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    options = {"endpoint": "http://127.0.0.1:9"}  # nothing listens: the error comes first
    with pytest.raises(docstore.InvalidArgumentError, match="set AWS_ALLOW_HTTP=true") as error:
        docstore.open("s3://bucket/x.docstore", cache_dir=tmp_path, storage_options=options)
    assert "builder error" not in str(error.value)
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")  # then the request is made (and refused)
    with pytest.raises(docstore.DocstoreError) as error:
        docstore.open(
            "s3://bucket/x.docstore", cache_dir=tmp_path, storage_options={**options, "max_retries": "0"}
        )
    assert "AWS_ALLOW_HTTP" not in str(error.value)
