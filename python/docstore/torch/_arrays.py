"""``ArrayDataset``: numeric rows (bag-of-words counts, embeddings) as float tensors."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ._base import (
    NUMERIC_ARRAY_OR_SCALAR,
    Positions,
    StoreDataset,
    as_positions,
    bfloat16_tensor,
    check_dtype_fits,
    numpy_dtype,
)


class ArrayDataset(StoreDataset):
    """Numeric rows (bag-of-words counts, embeddings) as float tensors, indexed by position.

    ``field`` is an array field (one 1-D tensor per document; of a fixed shape such as
    ``float32[2,3]``, one tensor of that shape) or an int64/float64/bool one (a 0-d tensor).
    Items are tensors of ``dtype`` (float32 by default; ``None`` keeps the stored type,
    ``torch.bfloat16`` for a ``bfloat16[]`` field, whose bits are taken as they are),
    or ``(tensor, label)`` with ``label_field`` (the stored value; ``default_collate`` makes a
    tensor of a batch of them).
    A float ``dtype`` rounds what it cannot hold exactly (int64 counts beyond 2**24 in float32);
    an integer one must hold every value of the stored type (int32 from ``int64[]`` or an
    integer from ``float64[]`` is a ``TypeError``, not values wrapped around or truncated).
    """

    def __init__(
        self,
        store_or_path: Any,
        field: str,
        *,
        label_field: str | None = None,
        dtype: torch.dtype | None = torch.float32,
        on_corrupt: str = "raise",
    ) -> None:
        super().__init__(store_or_path, on_corrupt)
        self.field = self._check_field(field, NUMERIC_ARRAY_OR_SCALAR)
        self.label_field = None if label_field is None else self._check_field(label_field)
        self._np_dtype = None if dtype is torch.bfloat16 else numpy_dtype(dtype)
        check_dtype_fits(
            type(self).__name__, self.field, self.store.fields[self.field], dtype, float_rounds=True
        )
        self.dtype = dtype

    def _tensor(self, value: Any) -> torch.Tensor:
        if self.dtype is torch.bfloat16:
            return bfloat16_tensor(value)
        array = np.asarray(value, dtype=self._np_dtype)
        if array.dtype.name == "bfloat16":  # dtype=None of a bfloat16[] field: torch.bfloat16
            return bfloat16_tensor(array)
        return torch.from_numpy(array)

    def __getitems__(self, indices: Positions) -> list[Any]:
        positions = as_positions(indices)
        if self.label_field is None:
            return [self._tensor(v) for v in self._kept(self._take(positions, field=self.field))]
        rows = self._kept(self._take(positions, fields=(self.field, self.label_field)))
        return [(self._tensor(value), label) for value, label in rows]
