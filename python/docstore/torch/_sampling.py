"""Samplers and epochs: ``distributed_sampler`` for DDP or a single process, ``set_epoch``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch.distributed as dist
from torch.utils.data import Dataset, DistributedSampler


def distributed_sampler(
    dataset: Dataset, shuffle: bool = True, seed: int = 0, drop_last: bool = False
) -> DistributedSampler:
    """A ``DistributedSampler`` for the initialised process group, or a one-replica one.

    Under ``torch.distributed`` (initialised), rank and world size come from the default group;
    otherwise the sampler covers the whole dataset in this process. Either way the order depends
    on ``(seed, epoch)``: call ``set_epoch`` (or :func:`set_epoch` on the loader) every epoch.
    """
    if dist.is_available() and dist.is_initialized():
        return DistributedSampler(dataset, shuffle=shuffle, seed=seed, drop_last=drop_last)
    return DistributedSampler(
        dataset, num_replicas=1, rank=0, shuffle=shuffle, seed=seed, drop_last=drop_last
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
