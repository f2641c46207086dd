"""PyTorch datasets over docstore stores: ``DocDataset``, ``TripletDataset``, ``PairDataset``,
``TokenDataset``, ``ArrayDataset``, plus ``pad_collate``, ``distributed_sampler`` and ``set_epoch``.

>>> from torch.utils.data import DataLoader
>>> from docstore.torch import DocDataset, distributed_sampler
>>> dataset = DocDataset("corpus.docstore", field="text")
>>> loader = DataLoader(dataset, batch_size=256, num_workers=4, sampler=distributed_sampler(dataset))

Importing ``docstore`` never imports torch; this module does.

**Batch fetches.** Every dataset implements ``__getitems__``: a DataLoader (or worker) fetches a
whole batch with one ``store.take`` call, which decodes the documents in parallel with the GIL
released, instead of one Python call per sample.

**Workers and pickling.** A dataset holds the store's path and its options, never documents. It
opens the store on first use in each process and notices a pid change (lance's torch Dataset
style), so it works under the fork, spawn and forkserver start methods and with
``persistent_workers``; workers map the same file, so its pages live once in the page cache, shared
by every worker, instead of once per worker. In a DataLoader worker, docstore's decoding threads
are set to ``max(1, cpus // num_workers)`` so that workers do not oversubscribe the cores (as
torch sets its own threads to 1 there); set ``DOCSTORE_NUM_THREADS`` to choose another number.

**Distributed training.** Sharding is the sampler's job, not the dataset's: ``distributed_sampler``
returns a ``DistributedSampler`` (an :class:`ElasticSampler`) that takes rank and world size as
given, or from the initialised process group (or a single-replica one when ``torch.distributed``
is not initialised, so the same code runs alone and under DDP, and shuffles by ``(seed, epoch)``
either way). A dataset stays a view of the
whole store: the same object and ``len`` on every rank, random access that reshuffles globally each
epoch, nothing to decide when the dataset is pickled, and the usual ``set_epoch`` contract. A
dataset that sharded itself would have to know its rank when created or unpickled and could only
shuffle within its shard. ``DistributedSampler`` pads the last round with repeated samples unless
``len(dataset)`` divides by the world size (or ``drop_last=True``).

**Resuming.** Torchdata's ``StatefulDataLoader`` resumes every dataset here exactly (same
batches, same random negatives and windows: they depend on ``(seed, epoch, index)`` only), with
``shuffle=True`` or with ``distributed_sampler``, whose state (the epoch and the samples the
whole job consumed) also resumes on another number of ranks or workers without reading the
skipped samples (see :class:`ElasticSampler` and docs/training.md).

**Epochs.** ``set_epoch(loader, epoch)`` calls ``set_epoch`` on the loader's sampler and dataset.
A ``TripletDataset``'s epoch lives in a small shared-memory counter that its DataLoader workers
read on every batch, so ``set_epoch`` reaches ``persistent_workers`` too (call it before iterating
the epoch, as ``DistributedSampler`` requires).
"""

from __future__ import annotations

from ._arrays import ArrayDataset
from ._docs import DocDataset
from ._pairs import PairDataset
from ._prefetch import PrefetchSampler
from ._sampling import ElasticSampler, distributed_sampler, set_epoch
from ._tokens import TokenDataset, pad_collate
from ._triplets import TripletDataset

__all__ = [
    "ArrayDataset",
    "DocDataset",
    "ElasticSampler",
    "PairDataset",
    "PrefetchSampler",
    "TokenDataset",
    "TripletDataset",
    "distributed_sampler",
    "pad_collate",
    "set_epoch",
]
