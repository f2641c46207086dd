"""Staging directories that a killed job does not leave behind forever.

A job that writes beside its target (``docstore build --shards``, a Ray or Spark write) makes a
directory there named ``PREFIX<suffix>`` and holds an exclusive ``flock`` on the file ``lock``
inside it for the job's life (in the process that made it, and the processes it forks). The lock
goes with the process: a job killed with ``kill -9`` leaves its directory unlocked, and the next
job with the same prefix (the same target) removes every such directory whose lock it can take.
A live job's lock cannot be taken, so a concurrent job keeps its own.

The lock file is locked under a temporary name and only then renamed to ``lock``: a directory
without ``lock`` is one being made right now, and is left alone.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import uuid
from typing import IO

LOCK = "lock"


class Staging:
    """A staging directory ``path``, locked by this process until :meth:`remove`."""

    def __init__(self, parent: str, prefix: str) -> None:
        sweep(parent, prefix)
        self.path = os.path.join(parent, f"{prefix}{uuid.uuid4().hex}")
        os.mkdir(self.path)
        self._lock: IO[str] | None = None
        try:
            temporary = os.path.join(self.path, f"{LOCK}.{os.getpid()}")
            lock = open(temporary, "w")  # noqa: SIM115 - held until remove()
            try:
                fcntl.flock(lock, fcntl.LOCK_EX)
                lock.write(f"{os.getpid()}\n")  # for whoever looks: which process holds it
                lock.flush()
                os.rename(temporary, os.path.join(self.path, LOCK))
            except BaseException:
                lock.close()
                raise
            self._lock = lock
        except BaseException:
            shutil.rmtree(self.path, ignore_errors=True)
            raise

    def remove(self) -> None:
        """Removes the directory, then lets its lock go (in that order: a directory whose lock is
        free is dead). Idempotent."""
        shutil.rmtree(self.path, ignore_errors=True)
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def sweep(parent: str, prefix: str) -> list[str]:
    """Removes the directories ``PREFIX<suffix>`` in ``parent`` (a suffix of letters, digits and
    ``_``) whose lock is free: left by killed jobs. Returns their paths."""
    pattern = re.compile(re.escape(prefix) + r"[0-9A-Za-z_]+")
    removed: list[str] = []
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    for name in names:
        if not pattern.fullmatch(name):
            continue
        path = os.path.join(parent, name)
        try:
            with open(os.path.join(path, LOCK)) as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # fails while a live job holds it
        except OSError:  # held, or no lock file (being made, or not a locked staging directory)
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def holds_lock(path: str) -> bool:
    """Whether some process holds the lock of the staging directory ``path`` (for tests)."""
    try:
        with open(os.path.join(path, LOCK)) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False
