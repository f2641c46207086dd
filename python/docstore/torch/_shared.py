"""Numpy attributes that spawn and forkserver workers share with the process that starts them.

A dataset's derived arrays (a TripletDataset's pairs and query texts, a TokenDataset's window
starts) would otherwise be pickled into every worker, each keeping its own copy. Pickled while a
worker is being started, they go instead as shared memory (multiprocessing's heap, the memory
behind ``multiprocessing.RawArray``): the worker maps the pages its parent filled, and neither
copies them. Forked workers share them already (numpy buffers are not touched by reference
counting); a plain ``pickle.dumps`` carries the arrays themselves, so that the pickle stands alone.
"""

from __future__ import annotations

import multiprocessing.context
import multiprocessing.heap
from typing import Any, ClassVar

import numpy as np


class _SharedArray:
    """An array's bytes in a block of shared memory, with its dtype and shape; pickles as the
    block (its file descriptor is passed to the process being started)."""

    def __init__(self, array: np.ndarray) -> None:
        self.dtype = array.dtype.str
        self.shape = array.shape
        self.buffer = multiprocessing.heap.BufferWrapper(array.nbytes)
        self._view().reshape(-1)[:] = array.reshape(-1)

    def _view(self) -> np.ndarray:
        return np.frombuffer(self.buffer.create_memoryview(), dtype=self.dtype).reshape(self.shape)

    def array(self) -> np.ndarray:
        """A read-only view of the block: the process that filled it and every worker read it,
        so none may write it."""
        view = self._view()
        view.flags.writeable = False
        return view


class SharesArrays:
    """Mixin for datasets: the attributes named in ``_shared_arrays`` go to the workers being
    started as shared memory, moved there once (the dataset then reads the shared copy too)."""

    _shared_arrays: ClassVar[tuple[str, ...]] = ()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_in_shared_memory", None)
        if multiprocessing.context.get_spawning_popen() is None:
            return state
        moved: dict[str, tuple[_SharedArray, np.ndarray]] = self.__dict__.setdefault("_in_shared_memory", {})
        for name in self._shared_arrays:
            array = state.get(name)
            if not isinstance(array, np.ndarray) or array.nbytes == 0:
                continue
            if name not in moved or moved[name][1] is not array:
                shared = _SharedArray(array)
                moved[name] = (shared, shared.array())  # the block lives as long as this dataset
                self.__dict__[name] = moved[name][1]  # and the private copy goes
            state[name] = moved[name][0]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            if isinstance(value, _SharedArray):
                state[name] = value.array()
        self.__dict__.update(state)
