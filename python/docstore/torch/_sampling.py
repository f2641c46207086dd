"""Samplers and epochs: ``distributed_sampler`` (an elastic, stateful ``DistributedSampler``)
for DDP or a single process, ``set_epoch``."""

from __future__ import annotations

import math
import operator
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import Dataset, DistributedSampler

# Positions turned into Python ints at a time while a sampler is iterated.
_CHUNK = 4096


class ElasticSampler(DistributedSampler[int]):
    """A ``DistributedSampler`` that saves and restores its place in the epoch, also across a
    change of world size (what :func:`distributed_sampler` returns).

    Uninterrupted, it yields exactly what ``torch.utils.data.DistributedSampler`` yields: the
    epoch's order is ``torch.randperm(len(dataset))`` seeded with ``seed + epoch`` (a pure
    function of both; ``range(len(dataset))`` without ``shuffle``), padded to a multiple of the
    world size with its first samples (or cut to one with ``drop_last``), and rank ``r`` takes
    every ``num_replicas``-th sample of it from ``r`` on.

    **State.** Ranks take turns through the order, so after every rank has yielded ``y``
    samples the whole job has consumed exactly the order's first ``y * num_replicas``: the
    state (``state_dict()``) is that count and the epoch, the same on every rank whose steps
    are in lockstep (DDP). ``load_state_dict(state)`` makes the next iteration of that epoch
    start after the consumed samples: the rest of the order is split between *this* sampler's
    ``num_replicas`` as above, so a state saved by 2 ranks resumes on 1, 2 or 4 ranks, each
    remaining sample read once across them (padding, as ever, repeats a few first samples when
    the rest does not divide by the world size; ``drop_last`` drops them instead). Nothing is
    replayed: the skipped samples are never handed to the dataset. Torchdata's
    ``StatefulDataLoader`` saves this state with its own (``loader.state_dict()``) and restores
    it (``loader.load_state_dict(...)``) at the next ``iter(loader)``.

    The state carries its epoch, and resumes only that epoch: call ``set_epoch`` with it (as
    every epoch) before iterating; a state saved at the end of an epoch resumes nothing of it,
    and the next epoch starts whole. ``len(sampler)`` is the count of a whole epoch, as
    ``DistributedSampler``'s.
    """

    def __init__(
        self,
        dataset: Dataset[Any],
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        grouped = dist.is_available() and dist.is_initialized()
        if num_replicas is None:
            num_replicas = dist.get_world_size() if grouped else 1
        if rank is None:
            rank = dist.get_rank() if grouped else 0
        num_replicas, rank = operator.index(num_replicas), operator.index(rank)
        if num_replicas < 1:
            raise ValueError(f"num_replicas must be >= 1, got {num_replicas}")
        super().__init__(
            dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop_last
        )
        self._pending: dict[str, Any] | None = None  # a loaded state, for the next iteration
        self._start = 0  # samples of the epoch the job had consumed when this iteration began
        self._yielded = 0  # samples this rank has yielded in this iteration
        self._active = False  # an iteration of self.epoch began (and progress counts)
        self._done = False  # ... and ended

    def _order(self) -> torch.Tensor:
        """The epoch's order of the whole dataset (every rank computes the same)."""
        n = len(self.dataset)  # type: ignore[arg-type]
        if not self.shuffle:
            return torch.arange(n)
        generator = torch.Generator()
        generator.manual_seed(self.seed + self.epoch)
        return torch.randperm(n, generator=generator)

    def _mine(self, start: int) -> torch.Tensor:
        """This rank's share of the order after its first ``start`` samples."""
        order = self._order()
        n, world = len(order), self.num_replicas
        rest = order[start:]
        if self.drop_last:
            rest = rest[: len(rest) // world * world]
        else:
            padding = math.ceil(len(rest) / world) * world - len(rest)
            if padding and n:  # the epoch's first samples, cyclically, as DistributedSampler pads
                rest = torch.cat([rest, order[torch.arange(padding) % n]])
        return rest[self.rank :: world]

    def __iter__(self) -> Iterator[int]:
        # A generator: nothing here runs until the first sample is asked for, so an iterator
        # made and dropped (StatefulDataLoader makes one before loading a state) changes nothing.
        start, pending, self._pending = 0, self._pending, None
        if pending is not None and pending["epoch"] == self.epoch:
            start = pending["consumed"]
        elif pending is not None and not (
            pending["consumed"] == len(self.dataset) and pending["epoch"] + 1 == self.epoch  # type: ignore[arg-type]
        ):
            warnings.warn(
                f"ignoring the loaded state of epoch {pending['epoch']}: the sampler is at epoch "
                f"{self.epoch}; call set_epoch(loader, {pending['epoch']}) before iterating to resume it",
                stacklevel=2,
            )
        self._start, self._yielded, self._active, self._done = start, 0, True, False
        mine = self._mine(start)
        for begin in range(0, len(mine), _CHUNK):
            for index in mine[begin : begin + _CHUNK].tolist():
                self._yielded += 1
                yield index
        self._done = True

    def set_epoch(self, epoch: int) -> None:
        epoch = operator.index(epoch)
        if epoch != self.epoch:
            self._active = False  # a new epoch: nothing of it consumed yet
        super().set_epoch(epoch)

    def _consumed(self) -> int:
        n = len(self.dataset)  # type: ignore[arg-type]
        if not self._active:
            return 0
        if self._done:
            return n
        return min(n, self._start + self._yielded * self.num_replicas)

    def state_dict(self) -> dict[str, Any]:
        """``{"epoch", "consumed", ...}``: the samples of the epoch the whole job has consumed
        (this rank's yielded samples times the world size, plus where this iteration began)."""
        if self._pending is not None:  # loaded, and not iterated yet
            return {**self._pending, **self._settings()}
        return {"epoch": self.epoch, "consumed": self._consumed(), **self._settings()}

    def _settings(self) -> dict[str, Any]:
        return {
            "num_samples": len(self.dataset),  # type: ignore[arg-type]
            "shuffle": self.shuffle,
            "seed": self.seed,
            "num_replicas": self.num_replicas,  # for information: any world size may resume
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resumes the epoch of ``state`` after its consumed samples, at the next iteration.

        ``state`` is this sampler's ``state_dict()``, or a whole ``StatefulDataLoader`` state
        that holds one (the loader's snapshot, taken as it yielded its last batch): loading
        that into the sampler of a fresh loader resumes with another number of DataLoader
        workers too, which ``StatefulDataLoader.load_state_dict`` refuses.
        """
        state = _find_state(state)
        n = len(self.dataset)  # type: ignore[arg-type]
        if state.get("num_samples", n) != n:
            raise ValueError(
                f"the state is of a dataset of {state['num_samples']} samples, this sampler's has {n}"
            )
        for name in ("shuffle", "seed"):
            if name in state and state[name] != getattr(self, name):
                raise ValueError(
                    f"the state was saved with {name}={state[name]!r}, this sampler has "
                    f"{name}={getattr(self, name)!r}: its order would be another"
                )
        consumed = operator.index(state["consumed"])
        if not 0 <= consumed <= n:
            raise ValueError(f"consumed must be in [0, {n}], got {consumed}")
        self._pending = {"epoch": operator.index(state["epoch"]), "consumed": consumed}


_STATE_KEYS = frozenset(("epoch", "consumed", "num_samples"))


def _find_state(state: Any) -> dict[str, Any]:
    """An ElasticSampler's state: ``state`` itself, or the one inside a loader's state."""
    found: list[dict[str, Any]] = []

    def walk(value: Any, depth: int) -> None:
        if isinstance(value, dict) and depth < 16:
            if value.keys() >= _STATE_KEYS:
                found.append(value)
                return
            for inner in value.values():
                walk(inner, depth + 1)

    walk(state, 0)
    if len(found) != 1:
        what = "no" if not found else f"{len(found)}"
        raise ValueError(
            f"{what} distributed_sampler state found (a dict with {sorted(_STATE_KEYS)}): pass the "
            "sampler's state_dict() or the state of the StatefulDataLoader that iterated it"
        )
    return found[0]


def distributed_sampler(
    dataset: Dataset[Any],
    num_replicas: int | None = None,
    rank: int | None = None,
    shuffle: bool = True,
    seed: int = 0,
    drop_last: bool = False,
) -> ElasticSampler:
    """A stateful ``DistributedSampler`` (:class:`ElasticSampler`) for DDP or a single process.

    ``num_replicas`` and ``rank`` are taken as ``DistributedSampler`` takes them; when not
    given, from the default process group if ``torch.distributed`` is initialised, else one
    replica of rank 0, so that the same code runs alone and under DDP. The order depends on
    ``(seed, epoch)``: call ``set_epoch`` (or :func:`set_epoch` on the loader) every epoch. Its
    ``state_dict()`` / ``load_state_dict()`` resume an epoch where it stopped, on the same or
    another number of ranks (see :class:`ElasticSampler`).
    """
    return ElasticSampler(
        dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop_last
    )


def set_epoch(loader: Any, epoch: int) -> None:
    """Calls ``set_epoch(epoch)`` on a DataLoader's sampler, batch sampler and dataset that have it.

    Call it before iterating the epoch. Accepts a DataLoader, a sampler or a dataset.
    """
    seen: list[Any] = []
    candidates = [
        loader,
        getattr(loader, "sampler", None),
        getattr(loader, "batch_sampler", None),
        getattr(getattr(loader, "batch_sampler", None), "sampler", None),
        *_wrapped(getattr(loader, "dataset", None)),
    ]
    for obj in candidates:
        if obj is None or any(obj is s for s in seen):
            continue
        seen.append(obj)
        method = getattr(obj, "set_epoch", None)
        if callable(method):
            method(epoch)


def _wrapped(dataset: Any, depth: int = 0) -> Iterable[Any]:
    """``dataset`` and the datasets it wraps (``Subset``, ``random_split``, ``ConcatDataset``)."""
    if dataset is None or depth > 16:
        return
    yield dataset
    yield from _wrapped(getattr(dataset, "dataset", None), depth + 1)
    for inner in getattr(dataset, "datasets", None) or ():
        yield from _wrapped(inner, depth + 1)
