"""Real servers on 127.0.0.1 for the remote-store tests and benchmarks: moto's S3 server, a plain
HTTP server that answers byte ranges, and a proxy that injects faults (503s, dropped
connections, truncated bodies, delays) or latency in front of either. Nothing inside docstore is
mocked: docstore talks HTTP to these as it would to S3 or a web server.

A Python server must set ``disable_nagle_algorithm``: without it every response stalls ~40 ms
(Nagle's algorithm waiting on the client's delayed ACK).
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import os
import random
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

BUCKET = "docstore-test"
S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_REGION": "us-east-1",
    "AWS_ALLOW_HTTP": "true",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MotoS3:
    """moto's S3 server on a free port, with one bucket. ``env`` configures docstore (and any
    object_store client) through the standard AWS variables."""

    def __init__(self) -> None:
        import logging

        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self.port = free_port()
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.env = {**S3_ENV, "AWS_ENDPOINT_URL": self.endpoint}
        self.client = self._client(self.endpoint)
        self.client.create_bucket(Bucket=BUCKET)

    def _client(self, endpoint: str) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )

    def upload(self, local: str, key: str) -> str:
        """Uploads a store file, or a collection directory under ``key/``; returns its URL."""
        if os.path.isdir(local):
            for root, _, files in os.walk(local):
                for name in files:
                    path = os.path.join(root, name)
                    rel = os.path.relpath(path, local).replace(os.sep, "/")
                    self.client.upload_file(path, BUCKET, f"{key}/{rel}")
        else:
            self.client.upload_file(local, BUCKET, key)
        return f"s3://{BUCKET}/{key}"

    def stop(self) -> None:
        self.server.stop()


class _Server(http.server.ThreadingHTTPServer):
    # Hundreds of connections may arrive at once (docstore keeps up to 256 requests in flight).
    request_queue_size = 1024
    daemon_threads = True


class _Files(http.server.BaseHTTPRequestHandler):
    """GET and HEAD of files under the server's root, with single byte ranges (RFC 7233), the
    validators the server is configured to send (``RangeHTTPServer``), and ``If-Match``."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *args: Any) -> None:
        pass

    def _file(self) -> str | None:
        root = self.server.root  # type: ignore[attr-defined]
        path = os.path.normpath(os.path.join(root, self.path.split("?")[0].lstrip("/")))
        return path if path.startswith(root) and os.path.isfile(path) else None

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _serve(self, body: bool) -> None:
        self.server.requests += 1  # type: ignore[attr-defined]
        if self.server.latency:  # type: ignore[attr-defined]
            time.sleep(self.server.latency)  # type: ignore[attr-defined]
        path = self._file()
        if path is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        stat = os.stat(path)
        size = stat.st_size
        etag = {
            None: None,
            "strong": f'"{stat.st_mtime_ns:x}-{size:x}"',  # nginx's kind: changes with the file
            "weak": f'W/"{stat.st_mtime_ns:x}-{size:x}"',
            "reused": '"v1"',  # the same for every version of the file
        }[self.server.etag]  # type: ignore[attr-defined]
        wanted_tag = self.headers.get("If-Match")  # RFC 9110: compared strongly
        strong = etag if etag is not None and not etag.startswith("W/") else None
        if wanted_tag is not None and wanted_tag != "*" and wanted_tag != strong:
            self.send_response(412)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        start, end = 0, size - 1
        wanted = self.headers.get("Range")
        status = 200
        if wanted and wanted.startswith("bytes="):
            first, _, last = wanted[6:].partition("-")
            if first:
                start = int(first)
                end = min(int(last), size - 1) if last else size - 1
            else:  # a suffix
                start = max(0, size - int(last))
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        self.send_response(status)
        self.send_header("Content-Length", str(end - start + 1))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Accept-Ranges", "bytes")
        if self.server.last_modified:  # type: ignore[attr-defined]
            self.send_header("Last-Modified", self.date_time_string(int(stat.st_mtime)))
        if etag is not None:
            self.send_header("ETag", etag)
        self.end_headers()
        if body:
            with open(path, "rb") as f:
                f.seek(start)
                self.wfile.write(f.read(end - start + 1))


class RangeHTTPServer:
    """A plain HTTP file server with range support, in a thread; each request waits ``latency``
    seconds first (a far server, without a proxy's extra hop). It sends ``Last-Modified`` (the
    file's mtime, unless ``last_modified=False``) and, by ``etag``, no ETag (None, as Python's
    http.server), a ``"strong"`` one of the file's mtime and size (as nginx), a ``"weak"`` one,
    or one ``"reused"`` for every version of a file; ``If-Match`` is answered 412 unless it
    names the current strong ETag."""

    def __init__(
        self, root: str, latency: float = 0.0, *, etag: str | None = None, last_modified: bool = True
    ) -> None:
        self.server = _Server(("127.0.0.1", 0), _Files)
        self.server.root = os.path.realpath(root)  # type: ignore[attr-defined]
        self.server.requests = 0  # type: ignore[attr-defined]
        self.server.latency = latency  # type: ignore[attr-defined]
        self.server.etag = etag  # type: ignore[attr-defined]
        self.server.last_modified = last_modified  # type: ignore[attr-defined]
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def requests(self) -> int:
        return self.server.requests  # type: ignore[attr-defined]

    @property
    def latency(self) -> float:
        return self.server.latency  # type: ignore[attr-defined]

    @latency.setter
    def latency(self, seconds: float) -> None:
        self.server.latency = seconds  # type: ignore[attr-defined]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Proxy(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._forward()

    def do_HEAD(self) -> None:
        self._forward()

    def _forward(self) -> None:
        proxy: FaultProxy = self.server.proxy  # type: ignore[attr-defined]
        fault = proxy.next_fault()
        if proxy.latency:
            time.sleep(proxy.latency)
        if fault == "drop":  # the connection closes before any response
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        if fault == "503":
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if fault == "delay":  # longer than the client's timeout
            time.sleep(proxy.delay)
        upstream = http.client.HTTPConnection(proxy.host, proxy.port, timeout=30)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection",)}
        upstream.request(self.command, self.path, headers=headers)
        response = upstream.getresponse()
        body = response.read()
        upstream.close()
        self.send_response(response.status)
        for key, value in response.getheaders():
            if key.lower() not in ("connection", "transfer-encoding", "content-length", "date", "server"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command == "HEAD":
            return
        if fault == "garble":  # the right length, every byte wrong (a check can never pass)
            body = bytes(b ^ 0xFF for b in body)
        if fault == "truncate" and len(body) > 1:  # headers promise more than the body brings
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(body)


class FaultProxy:
    """An HTTP proxy to ``host:port`` that injects faults: each request draws one from ``faults``
    (a list consumed in order, then ``rate`` of the rest at random from ``kinds``), and every
    request waits ``latency`` seconds first. Kinds: ``503``, ``drop`` (no response), ``truncate``
    (a body cut short), ``delay`` and ``garble`` (a body of the right length, every byte
    inverted)."""

    def __init__(self, host: str, port: int, *, latency: float = 0.0, seed: int = 0) -> None:
        self.host, self.port = host, port
        self.latency = latency
        self.delay = 5.0
        self.faults: list[str | None] = []
        self.rate = 0.0
        self.kinds = ("503", "drop", "truncate")
        self.random = random.Random(seed)
        self.lock = threading.Lock()
        self.requests = 0
        self.injected: dict[str, int] = {}
        self.server = _Server(("127.0.0.1", 0), _Proxy)
        self.server.proxy = self  # type: ignore[attr-defined]
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def next_fault(self) -> str | None:
        with self.lock:
            self.requests += 1
            if self.faults:
                fault = self.faults.pop(0)
            elif self.rate and self.random.random() < self.rate:
                fault = self.random.choice(self.kinds)
            else:
                fault = None
            if fault:
                self.injected[fault] = self.injected.get(fault, 0) + 1
            return fault

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """Sets environment variables for the block, then restores them."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class _QuietServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that stops reading a body it does not need (docstore drops the rest of a
        # whole-object answer once it has what it wanted) is not an error of the test.
        import sys

        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


class PlainHTTPServer:
    """Python's own ``http.server`` (``SimpleHTTPRequestHandler``, what ``python -m http.server``
    runs) serving ``root`` on 127.0.0.1, in a thread. It ignores ``Range`` (a ranged GET gets the
    whole file, 200) and sends ``Last-Modified`` and no ETag; a missing file gets its HTML 404
    page. ``log`` records each request as ``(method, path, status, had_range)``; nothing else
    differs from the stock handler."""

    def __init__(self, root: str) -> None:
        import functools

        log: list[tuple[str, str, int, bool]] = []
        self.log = log

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_request(self, code: Any = "-", size: Any = "-") -> None:
                log.append((self.command, self.path, int(code), "Range" in self.headers))

            def log_message(self, *args: Any) -> None:
                pass

        handler = functools.partial(Handler, directory=os.path.realpath(root))
        self.server = _QuietServer(("127.0.0.1", 0), handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def gets(self) -> int:
        return sum(1 for method, *_ in self.log if method == "GET")

    def stop(self) -> None:
        """Stops serving and closes the listening socket: a connection is refused after."""
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)
