"""``TokenDataset``: token-id arrays as tensors, whole or in training windows; ``pad_collate``."""

from __future__ import annotations

import bisect
import operator
import warnings
from collections.abc import Sequence
from typing import Any, Callable

import numpy as np
import torch

from ._base import (
    DAMAGED,
    NUMERIC_ARRAY,
    Positions,
    StoreDataset,
    as_positions,
    check_dtype_fits,
    numpy_dtype,
)
from ._shared import SharesArrays

# Rows decoded per ``take`` while scanning a whole store (the window index).
_SCAN_CHUNK = 8192


def _scan_lengths(take: Callable[..., list[Any]], n: int, field: str) -> np.ndarray:
    """Length of each of the ``n`` documents' arrays in ``field`` (decodes the whole store once,
    through ``take``); -1 for a damaged one that ``take`` left out (``on_corrupt="skip"``)."""
    lengths = np.empty(n, dtype=np.int64)
    for start in range(0, n, _SCAN_CHUNK):
        stop = min(start + _SCAN_CHUNK, n)
        arrays = take(np.arange(start, stop), field=field)
        lengths[start:stop] = [-1 if a is DAMAGED else len(a) for a in arrays]
    return lengths


def _window_count(length: np.ndarray | int, seq_len: int, stride: int, partial: bool) -> np.ndarray:
    """Windows over ``length`` tokens: full ones at 0, stride, ..., then the tail if ``partial``."""
    length = np.asarray(length, dtype=np.int64)
    full = np.where(length >= seq_len + 1, (length - seq_len - 1) // stride + 1, 0)
    if partial:
        # A tail window when some target token (1 .. length-1) lies past the last full window's
        # (whose targets end at (full-1)*stride + seq_len), and the tail has one to predict.
        reached = np.where(full > 0, (full - 1) * stride + seq_len, 0)
        full = full + ((reached < length - 1) & (full * stride < length - 1))
    return full


def _warn_no_window(path: str, seq_len: int, partial: bool, pack: bool) -> None:
    """An empty dataset would make a training loop end at once, without a word."""
    what = "the documents hold" if pack else "every document holds"
    options = (("partial=True keeps shorter ones", partial), ("pack=True joins them", pack))
    unused = [hint for hint, given in options if not given]
    warnings.warn(
        f"no window: {what} fewer than seq_len + 1 = {seq_len + 1} tokens in {path}"
        + (f" ({'; '.join(unused)})" if unused else ""),
        stacklevel=3,
    )


class TokenDataset(SharesArrays, StoreDataset):
    """Token-id arrays (an integer array field) as tensors, whole or in training windows.

    Without ``seq_len``, item ``i`` is document ``i``'s tokens as a 1-D tensor (use
    :func:`pad_collate` to batch them). With ``seq_len=k``, items are ``(x, y)`` with
    ``x = t[o:o+k]`` and ``y = t[o+1:o+k+1]``, windows at offsets ``o = 0, stride, 2*stride, ...``
    (``stride`` defaults to ``k``: non-overlapping windows).

    Window numbering, deterministic: documents in position order, and within a document windows
    in offset order; window ``w`` is window ``w - first[d]`` of the document ``d`` whose windows
    include it. Only full windows by default (fixed shapes, plain ``default_collate``); with
    ``partial=True`` a document's tail that no full window reaches is one more, shorter window
    (batch those with :func:`pad_collate`). Documents of fewer than ``k + 1`` tokens give no full
    window. With ``pack=True`` the documents are instead read as one stream, in position order,
    each followed by ``sep`` when given (an end-of-text id), and windows cross document
    boundaries (GPT-style packing): window ``w`` starts at stream offset ``w * stride``.

    Windowing needs every document's length: the constructor decodes the store once to count
    them, and keeps 8 bytes per document, which spawn and forkserver workers share with the
    process that starts them (shared memory) rather than copy.
    Tensors have ``dtype`` (int64 by default, what ``nn.Embedding`` and losses take; ``None``
    keeps the stored type). A ``dtype`` that cannot hold every value of the stored type (int64
    from ``uint64[]``, int32 from ``int64[]``, an integer from ``float32[]``) is refused with a
    ``TypeError``, rather than ids wrapped around (2**64-1 read as -1).
    """

    _shared_arrays = ("_starts",)

    def __init__(
        self,
        store_or_path: Any,
        field: str = "tokens",
        seq_len: int | None = None,
        *,
        stride: int | None = None,
        partial: bool = False,
        pack: bool = False,
        sep: int | None = None,
        dtype: torch.dtype | None = torch.long,
        on_corrupt: str = "raise",
    ) -> None:
        super().__init__(store_or_path, on_corrupt)
        self.field = self._check_field(field, NUMERIC_ARRAY)
        self._np_dtype = numpy_dtype(dtype)
        check_dtype_fits(type(self).__name__, self.field, self.store.fields[self.field], dtype)
        self.dtype = dtype
        # Checked here, not in a DataLoader worker at the first batch.
        seq_len = None if seq_len is None else operator.index(seq_len)
        stride = None if stride is None else operator.index(stride)
        if isinstance(sep, bool):
            raise TypeError("sep is a token id (an int), got a bool")
        sep = None if sep is None else operator.index(sep)
        self.seq_len = seq_len
        self.partial = partial
        self.pack = pack
        self.sep = sep
        self.stride = 0
        self._starts = np.zeros(1, dtype=np.int64)
        self._count = 0
        if seq_len is None:
            if stride is not None or pack or partial or sep is not None:
                raise ValueError("stride, partial, pack and sep need seq_len")
            return
        if seq_len < 1:
            raise ValueError(f"seq_len must be >= 1, got {seq_len}")
        self.stride = seq_len if stride is None else stride
        if self.stride < 1:
            raise ValueError(f"stride must be >= 1, got {self.stride}")
        if sep is not None:
            if not pack:
                raise ValueError("sep is for pack=True")
            stored = np.dtype(self.store.fields[self.field][:-2])
            if not np.can_cast(np.min_scalar_type(sep), stored):
                raise ValueError(f"sep={sep} does not fit the field's type {stored}")
        lengths = _scan_lengths(self._take, len(self.store), self.field)
        damaged = lengths < 0  # no window lies in a damaged document
        lengths[damaged] = 0
        if pack:
            if sep is not None:
                lengths += 1
                lengths[damaged] = 0
            # Stream offset of each document, and the end of the stream.
            self._starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            self._count = int(_window_count(int(self._starts[-1]), seq_len, self.stride, partial))
        else:
            # Index of each document's first window, and the number of windows.
            counts = _window_count(lengths, seq_len, self.stride, partial)
            self._starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
            self._count = int(self._starts[-1])
        if self._count == 0 and len(lengths):
            _warn_no_window(self.path, seq_len, partial, pack)

    def __len__(self) -> int:
        return len(self.store) if self.seq_len is None else self._count

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        if self._np_dtype is not None and array.dtype != self._np_dtype:
            array = array.astype(self._np_dtype)
        return torch.from_numpy(array)

    def window(self, index: int) -> tuple[int, int]:
        """``(document position, token offset)`` of window ``index`` (stream offset if ``pack``)."""
        if self.seq_len is None:
            raise ValueError("windows need seq_len")
        index = operator.index(index)
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"window {index} out of range for {len(self)} windows")
        if self.pack:
            offset = index * self.stride
            return bisect.bisect_right(self._starts, offset) - 1, offset
        doc = bisect.bisect_right(self._starts, index) - 1
        return doc, (index - int(self._starts[doc])) * self.stride

    def _windows(self, indices: Positions) -> np.ndarray:
        """Window indices, checked and made non-negative."""
        index = as_positions(indices)
        count = len(self)
        if index.size and (index.min() < -count or index.max() >= count):
            raise IndexError(f"index out of range for {count} windows")
        return np.where(index < 0, index + count, index)

    def store_positions(self, indices: Positions) -> np.ndarray:
        """The documents that windows ``indices`` lie in."""
        if self.seq_len is None:
            return as_positions(indices)
        index = self._windows(indices)
        if not index.size:
            return index
        if self.pack:
            return self._packed_documents(index)[0]
        return np.unique(np.searchsorted(self._starts, index, side="right") - 1)

    def __getitems__(self, indices: Positions) -> list[Any]:
        if self.seq_len is None:
            index = as_positions(indices)
            return [self._tensor(a) for a in self._kept(self._take(index, field=self.field))]
        index = self._windows(indices)
        if index.size == 0:
            return []
        if self.pack:
            return self._packed_windows(index)
        docs = np.searchsorted(self._starts, index, side="right") - 1
        offsets = ((index - self._starts[docs]) * self.stride).tolist()
        # Each document once, however many of the batch's windows lie in it.
        unique, which = np.unique(docs, return_inverse=True)
        arrays = self._take(unique, field=self.field)
        windows = self._kept([(arrays[w], o) for w, o in zip(which.tolist(), offsets)], lambda w: w[:1])
        return [self._pair(tokens, offset) for tokens, offset in windows]

    def _pair(self, tokens: np.ndarray, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(x, y)`` of the window at ``offset`` of ``tokens``: two tensors with their own memory
        (an in-place change to ``x``, such as masking, must not reach ``y`` or another window)."""
        k = int(self.seq_len)  # type: ignore[arg-type]
        dtype = tokens.dtype if self._np_dtype is None else self._np_dtype
        window = tokens[offset : offset + k + 1]
        x, y = np.array(window[:-1], dtype=dtype), np.array(window[1:], dtype=dtype)
        return torch.from_numpy(x), torch.from_numpy(y)

    def _packed_documents(self, index: np.ndarray) -> tuple[np.ndarray, ...]:
        """The documents packed windows ``index`` touch (sorted, each once), and each window's
        first and last document and its span ``[begin, end)`` of the packed stream."""
        k = int(self.seq_len)  # type: ignore[arg-type]
        starts = self._starts
        begin = index * self.stride
        end = np.minimum(begin + k + 1, int(starts[-1]))
        first = np.searchsorted(starts, begin, side="right") - 1
        last = np.searchsorted(starts, end - 1, side="right") - 1
        needed = np.unique(np.concatenate([np.arange(a, b + 1) for a, b in zip(first, last)]))
        return needed, first, last, begin, end

    def _packed_windows(self, index: np.ndarray) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Windows of the packed stream (documents in position order, each followed by ``sep``),
        from one ``take`` of every document that any of them touches."""
        needed, first, last, begin, end = self._packed_documents(index)
        starts = self._starts
        fetched = dict(zip(needed.tolist(), self._take(needed, field=self.field)))
        # A window that needs a damaged document is left out (on_corrupt="skip").
        spans = self._kept(
            list(zip(first.tolist(), last.tolist(), begin.tolist(), end.tolist())),
            lambda span: [fetched[d] for d in range(span[0], span[1] + 1)],
        )
        out = []
        for a, b, s, e in spans:
            parts = []  # only the pieces of each document that lie inside [s, e)
            for d in range(a, b + 1):
                tokens, at = fetched[d], int(starts[d])
                parts.append(tokens[max(s - at, 0) : max(min(e - at, len(tokens)), 0)])
                if self.sep is not None and s <= at + len(tokens) < e:
                    parts.append(np.array([self.sep], dtype=tokens.dtype))
            out.append(self._pair(np.concatenate(parts), 0))
        return out


def pad_collate(batch: Sequence[Any], pad_id: int = 0, label_pad_id: int = -100) -> dict[str, torch.Tensor]:
    """Pads a batch of 1-D tensors, or of ``(x, y)`` pairs, to the longest (right padding).

    Returns ``{"input_ids", "attention_mask"}`` (plus ``"labels"`` for pairs, padded with
    ``label_pad_id``, the value ``cross_entropy`` ignores); the mask is 1 on tokens, 0 on
    padding, int64 as Hugging Face models expect. Use ``functools.partial`` for other pad ids.
    """
    if not batch:
        raise ValueError("pad_collate got an empty batch")
    pad = torch.nn.utils.rnn.pad_sequence
    pairs = isinstance(batch[0], (tuple, list))
    inputs = [item[0] for item in batch] if pairs else list(batch)
    lengths = torch.tensor([len(t) for t in inputs])
    width = int(lengths.max()) if len(lengths) else 0
    mask = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).long()
    out = {"input_ids": pad(inputs, batch_first=True, padding_value=pad_id), "attention_mask": mask}
    if pairs:
        labels = [item[1] for item in batch]
        if label_pad_id < 0 and not labels[0].dtype.is_signed:  # uint16 tokens cannot hold -100
            if labels[0].dtype == torch.uint64 and any(bool((t.view(torch.int64) < 0).any()) for t in labels):
                raise ValueError(
                    f"a uint64 label above 2**63 - 1 does not fit the int64 labels that label_pad_id="
                    f"{label_pad_id} needs (it would wrap around to a negative id)"
                )
            labels = [t.long() for t in labels]
        out["labels"] = pad(labels, batch_first=True, padding_value=label_pad_id)
    return out
