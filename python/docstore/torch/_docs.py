"""``DocDataset``: a store's documents (or some of their fields) by position."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, Callable

from ._base import Positions, StoreDataset, as_positions


class DocDataset(StoreDataset):
    """A map-style dataset of a store's documents, indexed by position (insertion order).

    Items are the :class:`docstore.Doc` (``field`` and ``fields`` unset), one field's value
    (``field="text"``) or a tuple of fields (``fields=("text", "label")``; ``"doc_id"`` may be
    one of them), passed through ``transform`` when given. ``dataset.doc_id(i)`` is the id at
    position ``i``. A batch is one ``store.take`` call (``__getitems__``).
    """

    def __init__(
        self,
        store_or_path: Any,
        field: str | None = None,
        fields: Sequence[str] | None = None,
        transform: Callable[[Any], Any] | None = None,
        *,
        on_corrupt: str = "raise",
    ) -> None:
        super().__init__(store_or_path, on_corrupt)
        if field is not None and fields is not None:
            raise ValueError("give field= or fields=, not both")
        if isinstance(fields, str):
            raise TypeError("fields must be a sequence of names; use field= for one field")
        self.field = field if field in (None, "doc_id") else self._check_field(field)
        if fields is not None:
            fields = tuple(f if f == "doc_id" else self._check_field(f) for f in fields)
        self.fields = fields
        self.transform = transform

    def doc_id(self, index: int) -> str:
        """The id of the document at position ``index``."""
        index = operator.index(index)
        n = len(self.store)
        if not -n <= index < n:
            raise IndexError(f"position {index} out of range for a store of {n} documents")
        return self.store.keys_range(index % n, index % n + 1)[0]

    def __getitems__(self, indices: Positions) -> list[Any]:
        values = self._kept(self._take(as_positions(indices), field=self.field, fields=self.fields))
        if self.transform is not None:
            values = [self.transform(value) for value in values]
        return values
