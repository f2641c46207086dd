"""``PrefetchSampler``: a batch sampler that loads the documents of its next batches while the
current ones are read, so that a loader over cold or remote documents does not wait on each batch.
"""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from collections import deque
from collections.abc import Iterable, Iterator, Sized
from typing import Any

import numpy as np
from torch.utils.data import Sampler

from ..errors import DocstoreError

log = logging.getLogger("docstore.torch")


class PrefetchSampler(Sampler[list[int]]):
    """Yields exactly the batches of ``batch_sampler``, and loads each batch's documents
    ``batches`` batches before it is yielded (by default 8, or 32 for a remote store).

    ``batch_sampler`` is any batch sampler: ``BatchSampler(sampler, batch_size, drop_last)``
    over torch's ``RandomSampler``, ``DistributedSampler`` or :func:`distributed_sampler`, or
    torchdata's stateful ``BatchSampler``. Pass the result as a DataLoader's ``batch_sampler``::

        batches = PrefetchSampler(BatchSampler(distributed_sampler(dataset), 256, False), dataset)
        loader = DataLoader(dataset, batch_sampler=batches, num_workers=2)

    The sampler runs in the process that iterates the DataLoader (each DDP rank's own): as it
    draws a batch ahead, background threads ask ``dataset.prefetch`` for it (documents the
    dataset will read: a triplet's positive and negative, a token window's documents), which
    loads them without decoding and with Python released: a local store's pages into the page
    cache, every range asked for at once so that the device reads them at depth; a remote
    store's bytes into the node cache, up to 8 waiting batches fetched in one round of
    concurrent requests, 4 such loads under way at once. DataLoader workers then find them
    there (both caches are shared by the processes of a node).

    **Bounds.** At most ``batches`` batches are drawn ahead, and no more is loaded while the
    batches loaded but not yet yielded hold ``max_bytes`` or more. Reads in flight are bounded
    by the store: the remote client's limit per host, the device's queue for local files.
    Loading stops when the epoch ends, when the iterator is dropped (a new epoch, a resumed
    state) or closed, and at interpreter exit.

    **Order.** A batch is yielded once its load has ended, so that no worker reads a batch that
    is still being fetched: a worker that did would fetch its documents a second time
    (measured: 1.4-1.6 requests a document from a remote store when batches did not wait,
    against 1.1). When the loads fall behind the loader, the loader waits for them, and
    ``stats["waited"]`` counts the batches it waited for: the first of an epoch among them.

    **Resume.** The state (``state_dict()`` of the iterator, which torchdata's
    ``StatefulDataLoader`` saves) is the wrapped sampler's as of the last batch *yielded*, not
    drawn ahead: resuming is as exact as the wrapped sampler's. A wrapped sampler without state
    is fast-forwarded by the batches yielded.

    A failed load is logged and left to the read, which reports it as it would without a
    prefetch. ``stats`` counts, over the sampler's iterations, the batches loaded and their
    ``bytes``, those whose load was not over when their turn came (``waited``), those left when
    loading stopped (``cancelled``), and the loads that failed (``errors``).
    """

    def __init__(
        self,
        batch_sampler: Iterable[list[int]],
        dataset: Any,
        *,
        batches: int | None = None,
        max_bytes: int = 256 << 20,
    ) -> None:
        if not callable(getattr(dataset, "prefetch", None)):
            raise TypeError(
                f"{type(dataset).__name__} has no prefetch(indices): pass a docstore.torch dataset"
            )
        if batches is None:  # far enough ahead to cover a remote store's round trips
            store = getattr(dataset, "store", None)
            batches = 32 if getattr(store, "url", None) is not None else 8
        if isinstance(batches, bool) or not isinstance(batches, int) or batches < 1:
            raise ValueError(f"batches must be an int >= 1, got {batches!r}")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValueError(f"max_bytes must be an int >= 1, got {max_bytes!r}")
        self.batch_sampler = batch_sampler
        self.dataset = dataset
        self.batches = batches
        self.max_bytes = max_bytes
        self.stats = {"batches": 0, "bytes": 0, "waited": 0, "cancelled": 0, "errors": 0}

    @property
    def sampler(self) -> Any:
        """The wrapped batch sampler's sampler (what ``set_epoch`` and DataLoader look for)."""
        return getattr(self.batch_sampler, "sampler", None)

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch of the wrapped batch sampler, or of its sampler."""
        for obj in (self.batch_sampler, self.sampler):
            method = getattr(obj, "set_epoch", None)
            if callable(method):
                method(epoch)
                return

    def __len__(self) -> int:
        if not isinstance(self.batch_sampler, Sized):
            raise TypeError(f"{type(self.batch_sampler).__name__} has no len()")
        return len(self.batch_sampler)

    def __iter__(self) -> _PrefetchIterator:
        return _PrefetchIterator(self)


class _Loads:
    """What the loading threads and the iterator share: the batches to load, the loads that
    have ended, the bytes loaded ahead, and the stop flag. Holds no reference to the iterator,
    so that dropping the iterator stops its threads."""

    def __init__(self, owner: PrefetchSampler) -> None:
        self.dataset = owner.dataset
        self.max_bytes = owner.max_bytes
        self.stats = owner.stats
        self.lock = threading.Condition()
        self.queue: deque[tuple[int, list[int]]] = deque()  # (ticket, indices), in order
        self.yielded = -1  # the ticket of the last batch yielded
        self.ahead: list[tuple[int, int]] = []  # (last ticket, bytes) of each load
        self.ended: set[int] = set()  # tickets whose load has ended, not yet yielded
        self.running = 0  # loading threads alive: the last one out stops loading
        self.first = True  # the first load takes one batch, so that it is ready soon
        self.stopped = False

    def submit(self, ticket: int, indices: list[int]) -> None:
        with self.lock:
            self.queue.append((ticket, indices))
            self.lock.notify_all()

    def wait_loaded(self, ticket: int) -> None:
        """Returns once the load of ``ticket`` has ended (or loading stopped)."""
        with self.lock:
            if ticket not in self.ended and not self.stopped:
                self.stats["waited"] += 1
                self.lock.wait_for(lambda: ticket in self.ended or self.stopped)
            self.ended.discard(ticket)

    def yielding(self, ticket: int) -> None:
        with self.lock:
            self.yielded = ticket
            self.ahead = [(last, held) for last, held in self.ahead if last > ticket]
            self.lock.notify_all()

    def stop(self) -> None:
        with self.lock:
            self.stopped = True
            self.stats["cancelled"] += len(self.queue)
            self.queue.clear()
            self.lock.notify_all()

    def ready(self) -> bool:
        """Whether a load may start: batches are queued, and the loads whose batches are not
        yielded yet hold less than ``max_bytes`` (or loading stopped)."""
        with self.lock:
            held = sum(bytes_ for _, bytes_ in self.ahead)
            return self.stopped or (bool(self.queue) and held < self.max_bytes)

    def _next_load(self) -> list[tuple[int, list[int]]] | None:
        """Waits until ``ready``; takes the next batches queued, up to ``CALL_BATCHES`` (one
        call: a remote store fetches them in one round), as (ticket, indices). ``None``: stop."""
        with self.lock:
            self.lock.wait_for(self.ready)
            if self.stopped:
                return None
            take = 1 if self.first else CALL_BATCHES
            self.first = False
            return [self.queue.popleft() for _ in range(min(len(self.queue), take))]

    def run(self) -> None:
        try:
            while (taken := self._next_load()) is not None:
                loaded = None
                try:
                    indices = np.concatenate([np.asarray(t, dtype=np.int64) for _, t in taken])
                    loaded = int(self.dataset.prefetch(indices))
                except Exception as e:
                    # Whatever failed (the store, or a dataset's own prefetch), the read of these
                    # batches reports it, as it would without a prefetch.
                    level = logging.DEBUG if isinstance(e, (DocstoreError, OSError)) else logging.WARNING
                    log.log(level, "docstore prefetch of %d batches failed: %r", len(taken), e)
                finally:
                    # Whatever happened, the batches' turn may come: the iterator waits for this.
                    self.ended_load([ticket for ticket, _ in taken], loaded)
        finally:
            with self.lock:
                self.running -= 1
                last = self.running == 0
            if last:  # no thread is left to load: the iterator must not wait for one
                self.stop()

    def ended_load(self, tickets: list[int], loaded: int | None) -> None:
        """Marks the load of ``tickets`` ended, having brought ``loaded`` bytes (``None``: it
        failed), held ahead until its last ticket is yielded."""
        with self.lock:
            if loaded is None:
                self.stats["errors"] += 1
            else:
                self.stats["batches"] += len(tickets)
                self.stats["bytes"] += loaded
                if tickets[-1] > self.yielded:
                    self.ahead.append((tickets[-1], loaded))
            self.ended.update(t for t in tickets if t > self.yielded)
            self.lock.notify_all()


# Batches a load takes at most, and loads under way at once (a thread each): a load of a remote
# store waits a few round trips whatever its size, so loads overlap. The first load of an epoch
# takes one batch (`_Loads.first`), which the loader waits for.
CALL_BATCHES = 8
THREADS = 4

# Live loading threads' shares, stopped at interpreter exit (a thread inside a load must not
# outlive the interpreter it would return to).
_LIVE: weakref.WeakSet[_Loads] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for loads in list(_LIVE):
        loads.stop()


class _PrefetchIterator(Iterator[list[int]]):
    """One pass of a ``PrefetchSampler``: draws ahead, loads in a thread, yields in order.

    Lazy: nothing is drawn before the first batch is asked for, so that a state can be loaded
    first (``StatefulDataLoader`` makes the iterator, then loads its state)."""

    def __init__(self, owner: PrefetchSampler) -> None:
        self._owner = owner
        self._inner: Iterator[list[int]] | None = None
        self._window: deque[tuple[int, list[int], Any]] = deque()  # (ticket, batch, state after)
        self._drawn = 0
        self._yielded = 0  # batches yielded, resumed ones included
        self._state: Any = None  # the wrapped sampler's state after the last batch yielded
        self._pending: dict[str, Any] | None = None
        self._exhausted = False
        self._loads: _Loads | None = None

    # -- state (torchdata's Stateful protocol) --

    def _snapshot(self, inner: Iterator[list[int]]) -> Any:
        """The wrapped sampler's state now (after the batches drawn so far)."""
        if callable(getattr(inner, "state_dict", None)):
            return {"iter": inner.state_dict()}  # type: ignore[attr-defined]
        sampler = self._owner.sampler
        if callable(getattr(sampler, "state_dict", None)):
            return {"sampler": sampler.state_dict()}
        return None

    def state_dict(self) -> dict[str, Any]:
        if self._pending is not None:
            return self._pending
        return {"batches_yielded": self._yielded, "inner": self._state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self._inner is not None:
            raise RuntimeError("load a PrefetchSampler iterator's state before drawing from it")
        self._pending = dict(state)

    # -- iteration --

    def _start(self) -> Iterator[list[int]]:
        owner, pending, self._pending = self._owner, self._pending, None
        inner_state = (pending or {}).get("inner")
        skip = 0
        if pending is not None and inner_state is not None and "sampler" in inner_state:
            owner.sampler.load_state_dict(inner_state["sampler"])
        inner = iter(owner.batch_sampler)
        if pending is not None:
            if inner_state is not None and "iter" in inner_state:
                inner.load_state_dict(inner_state["iter"])  # type: ignore[attr-defined]
            elif inner_state is None:
                skip = int(pending.get("batches_yielded", 0))  # no state: fast-forward
            self._yielded = int(pending.get("batches_yielded", 0))
            self._state = inner_state
        for _ in range(skip):
            if next(inner, None) is None:
                break
        self._loads = loads = _Loads(owner)
        _LIVE.add(loads)
        loads.running = THREADS
        for _ in range(THREADS):
            threading.Thread(target=loads.run, name="docstore-prefetch", daemon=True).start()
        return inner

    def __next__(self) -> list[int]:
        if self._inner is None:
            self._inner = self._start()
        inner, loads = self._inner, self._loads
        assert loads is not None
        while not self._exhausted and len(self._window) <= self._owner.batches:
            batch = next(inner, None)
            if batch is None:
                self._exhausted = True
                break
            ticket = self._drawn
            self._drawn += 1
            self._window.append((ticket, batch, self._snapshot(inner)))
            loads.submit(ticket, list(batch))
        if not self._window:
            self.close()
            raise StopIteration
        loads.wait_loaded(self._window[0][0])  # before taking it: an interrupted wait loses nothing
        ticket, batch, state = self._window.popleft()
        self._yielded += 1
        self._state = state
        loads.yielding(ticket)  # after the count: a load it lets start sees this batch yielded
        return batch

    def close(self) -> None:
        """Stops loading (what the end of the epoch and dropping the iterator do)."""
        if self._loads is not None:
            self._loads.stop()

    def __del__(self) -> None:
        self.close()
