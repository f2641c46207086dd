"""Numbers a dataset's DataLoader workers share with the process that starts them, through
shared memory: the epoch they follow (``EpochCounter``) and the damaged documents they left out
(``DamageTally``)."""

from __future__ import annotations

import ctypes
import multiprocessing
import multiprocessing.context
import multiprocessing.reduction
import multiprocessing.sharedctypes
import operator
import os
import weakref
from collections.abc import Sequence
from typing import Any

import torch


def _new_block(values: list[int]) -> Any:
    # Its lock made by the spawn context: a lock of the fork context cannot be passed to a spawn
    # or forkserver worker, and one of the spawn context is also inherited by a fork.
    return multiprocessing.get_context("spawn").Array("q", values, lock=True)


class SharedInts:
    """A few int64s that the process writing them first shares with the DataLoader workers it
    starts, and that those workers may write too (under the block's lock).

    They live in a ``multiprocessing`` shared-memory block: forked workers inherit the mapping,
    and spawn/forkserver workers receive it while they are being started. A process owns the
    block its workers follow from the moment it writes (``_own(force=True)``) or starts workers
    (a fork, or a pickle for a spawn), whichever comes first; a copy (``copy.deepcopy``,
    ``pickle``, a DDP rank that received the dataset) makes its own then, so ranks never see each
    other's values and workers started before the first write still see every later one.
    DataLoader workers never make their own: they follow the process that started them.
    """

    def __init__(self, values: Sequence[int]) -> None:
        self._values = [operator.index(v) for v in values]
        self._shared: Any = None
        self._owner: int | None = None
        _SHARED.add(self)

    def values(self) -> list[int]:
        return list(self._shared[:]) if self._shared is not None else list(self._values)

    def _own(self, force: bool = False) -> None:
        """Makes the shared block this process's own, unless it is already, or this process is a
        DataLoader worker (which follows its parent) and ``force`` is not given."""
        if self._owner == os.getpid() and self._shared is not None:
            return
        if not force and torch.utils.data.get_worker_info() is not None:
            return
        self._shared = _new_block(self.values())
        self._owner = os.getpid()

    def __getstate__(self) -> dict[str, Any]:
        spawning = multiprocessing.context.get_spawning_popen() is not None
        if spawning:
            self._own()  # the workers being started follow this process from now on
        shared = self._shared if spawning else None
        return {"_values": self.values(), "_shared": shared, "_owner": self._owner if spawning else None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        _SHARED.add(self)


class EpochCounter(SharedInts):
    """An epoch number that the process calling ``set`` shares with the DataLoader workers it
    starts (see ``SharedInts``)."""

    def __init__(self, epoch: int = 0) -> None:
        super().__init__([epoch])

    def get(self) -> int:
        return int(self._shared[0]) if self._shared is not None else self._values[0]

    def set(self, epoch: int) -> None:
        epoch = operator.index(epoch)
        self._values = [epoch]
        self._own(force=True)
        self._shared[0] = epoch


class DamageTally(SharedInts):
    """The documents a dataset left out as damaged (``on_corrupt="skip"``), in this process and
    in the DataLoader workers it started: how many items were left out, and the distinct damaged
    positions met (the first ``KEPT``)."""

    KEPT = 256

    def __init__(self) -> None:
        # [items left out, positions kept, position 0, position 1, ...]
        super().__init__([0] * (2 + self.KEPT))

    def add(self, positions: Sequence[int], items: int) -> None:
        self._own()  # a worker writes its parent's block; any other process its own
        if self._shared is None:  # a worker whose parent shared nothing: its own values
            self._shared = _new_block(self._values)
        with self._shared.get_lock():
            values = self._shared
            values[0] += items
            known = set(values[2 : 2 + values[1]])
            for position in positions:
                if position not in known and values[1] < self.KEPT:
                    values[2 + values[1]] = position
                    values[1] += 1
                    known.add(position)

    @property
    def skipped(self) -> int:
        return self.values()[0]

    @property
    def positions(self) -> list[int]:
        values = self.values()
        return sorted(values[2 : 2 + values[1]])


# A shared block pickles as shared memory only once its ctypes type is registered with the
# pickler, which multiprocessing does when it makes the first one of that type. A block made
# while the first spawn worker is being pickled is made too late for that pickler: register the
# types now.
for _count in (1, 2 + DamageTally.KEPT):
    multiprocessing.reduction.ForkingPickler.register(
        ctypes.c_longlong * _count,
        multiprocessing.sharedctypes.reduce_ctype,  # type: ignore[attr-defined]  # not in typeshed
    )

# Every shared block of this process, so that a fork gives the children one their parent owns.
_SHARED: weakref.WeakSet[SharedInts] = weakref.WeakSet()


def _own_before_fork() -> None:
    for shared in list(_SHARED):
        shared._own()


os.register_at_fork(before=_own_before_fork)
