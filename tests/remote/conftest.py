"""What the remote tests share: short timeouts (a fault costs a test seconds, not minutes), the
moto S3 server each module starts on 127.0.0.1, and the PYTHONPATH their subprocesses import
docstore from."""

from __future__ import annotations

import os

import pytest

import docstore

from ..support.remote_servers import MotoS3, environment

FAST = {"timeout": "5s", "connect_timeout": "2s", "init_backoff": "10ms", "max_backoff": "200ms"}
# Subprocesses import the docstore this process tests (a worktree's, not an installed one): the
# repository root holds no docstore, so with it they imported whichever one was installed.
PYTHONPATH = os.path.dirname(os.path.dirname(os.path.abspath(docstore.__file__)))


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server for the module, its endpoint and credentials in the environment."""
    server = MotoS3()
    with environment(server.env):
        yield server
    server.stop()
