"""Servers that feel their load, for the tests of the limit of requests in flight
(test_remote_limit.py) and benches/remote_limit.py: tests/support's range server and fault proxy,
counting the requests they work on at once (``peak``), and, by how they are made, slowing down
with their load (``workers``: at most that many requests worked on at once, the rest wait), or
refusing what comes past their ``capacity``: a 503 (S3's SlowDown) or a connection dropped
without an answer (a simple server out of threads or listen backlog)."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any

from ..support.remote_servers import FaultProxy, RangeHTTPServer, _Files, _Proxy


class Load:
    """What a server counts of its load, and how it answers past its capacity."""

    def __init__(self, capacity: int | None, refuse: str, workers: int | None) -> None:
        assert refuse in ("503", "drop")
        self.capacity, self.refuse = capacity, refuse
        self.workers = threading.Semaphore(workers) if workers else contextlib.nullcontext()
        self.lock = threading.Lock()
        self.in_flight = self.peak = self.requests = self.refused = 0

    def reset(self) -> None:
        with self.lock:
            self.peak = self.in_flight
            self.requests = self.refused = 0

    def serve(self, handler: Any, work: Any) -> None:
        """Counts the request ``handler`` holds, refuses it past the capacity, else ``work()``
        among the workers."""
        with self.lock:
            self.requests += 1
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            over = self.capacity is not None and self.in_flight > self.capacity
            self.refused += over
        try:
            if not over:
                with self.workers:
                    work()
            elif self.refuse == "503":
                handler.send_response(503)
                handler.send_header("Content-Length", "0")
                handler.end_headers()
            else:  # no answer: the connection closes
                handler.close_connection = True
                with contextlib.suppress(OSError):
                    handler.connection.shutdown(socket.SHUT_RDWR)
        finally:
            with self.lock:
                self.in_flight -= 1


class LoadedServer(RangeHTTPServer):
    """tests/support's range server (``latency`` per request) with a ``Load`` (``load``)."""

    def __init__(
        self,
        root: str,
        latency: float = 0.0,
        *,
        capacity: int | None = None,
        refuse: str = "503",
        workers: int | None = None,
        backlog: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(root, latency, **kwargs)
        self.load = load = Load(capacity, refuse, workers)
        if backlog is not None:  # as Python's servers listen by default (5)
            self.server.socket.listen(backlog)

        class Handler(_Files):
            def _serve(self, body: bool) -> None:
                load.serve(self, lambda: _Files._serve(self, body))

        self.server.RequestHandlerClass = Handler


class LoadedProxy(FaultProxy):
    """tests/support's fault proxy (``latency`` per request) with a ``Load`` (``load``): in
    front of moto, an S3 that answers 503 past its capacity."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        latency: float = 0.0,
        capacity: int | None = None,
        refuse: str = "503",
        workers: int | None = None,
    ) -> None:
        super().__init__(host, port, latency=latency)
        self.load = load = Load(capacity, refuse, workers)

        class Handler(_Proxy):
            def _forward(self) -> None:
                load.serve(self, lambda: _Proxy._forward(self))

        self.server.RequestHandlerClass = Handler
