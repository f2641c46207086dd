"""The epoch a dataset's DataLoader workers follow, shared with them through shared memory."""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import multiprocessing.reduction
import multiprocessing.sharedctypes
import operator
import os
import weakref
from typing import Any

import torch


class EpochCounter:
    """An epoch number that the process calling ``set`` shares with the DataLoader workers it starts.

    It lives in a ``multiprocessing`` shared-memory value: forked workers inherit the mapping,
    and spawn/forkserver workers receive it while they are being started. A process owns the
    value its workers follow from the moment it sets an epoch or starts workers (a fork, or a
    pickle for a spawn), whichever comes first; a copy (``copy.deepcopy``, ``pickle``, a DDP rank
    that received the dataset) makes its own then, so ranks never see each other's epochs and
    workers started before the first ``set`` still see every later one. DataLoader workers never
    make their own: they follow the process that started them.
    """

    def __init__(self, epoch: int = 0) -> None:
        self._value = operator.index(epoch)
        self._shared: Any = None
        self._owner: int | None = None
        _COUNTERS.add(self)

    def get(self) -> int:
        return int(self._shared.value) if self._shared is not None else self._value

    def set(self, epoch: int) -> None:
        epoch = operator.index(epoch)
        self._value = epoch
        self._own(force=True)
        self._shared.value = epoch

    def _own(self, force: bool = False) -> None:
        """Makes the shared value this process's own, unless it is already, or this process is a
        DataLoader worker (which follows its parent) and ``force`` is not given."""
        if self._owner == os.getpid() and self._shared is not None:
            return
        if not force and torch.utils.data.get_worker_info() is not None:
            return
        self._shared = multiprocessing.RawValue("q", self.get())
        self._owner = os.getpid()

    def __getstate__(self) -> dict[str, Any]:
        spawning = multiprocessing.context.get_spawning_popen() is not None
        if spawning:
            self._own()  # the workers being started follow this process from now on
        shared = self._shared if spawning else None
        return {"_value": self.get(), "_shared": shared, "_owner": self._owner if spawning else None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        _COUNTERS.add(self)


# A shared value pickles as shared memory only once its ctypes type is registered with the
# pickler, which multiprocessing does when it makes the first one of that type. A counter makes
# its value while the first spawn worker is being pickled, too late for that pickler: register
# the type now.
multiprocessing.reduction.ForkingPickler.register(
    multiprocessing.sharedctypes.typecode_to_type["q"], multiprocessing.sharedctypes.reduce_ctype
)

# Every counter of this process, so that a fork gives the children one their parent owns.
_COUNTERS: weakref.WeakSet[EpochCounter] = weakref.WeakSet()


def _own_counters_before_fork() -> None:
    for counter in list(_COUNTERS):
        counter._own()


os.register_at_fork(before=_own_counters_before_fork)
