"""``PairDataset``: sentence pairs with labels, ready for Sentence Transformers."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any

from ._base import Positions, StoreDataset, as_positions


class PairDataset(StoreDataset):
    """Sentence pairs (with a label) for sentence-embedding training, indexed by position.

    Items are ``sentence_transformers.InputExample(guid=doc_id, texts=[...], label=...)`` when
    ``sentence_transformers`` is importable (``input_example=None``) or asked for
    (``input_example=True``), else tuples ``(*texts, label)``; without ``label_field``,
    ``(*texts,)`` and InputExample's default label. Labels are the stored values: use a float64
    field for similarity losses (``CosineSimilarityLoss``), an int64 one for classification.
    """

    def __init__(
        self,
        store_or_path: Any,
        fields: Sequence[str] = ("sentence1", "sentence2"),
        label_field: str | None = "label",
        *,
        input_example: bool | None = None,
        on_corrupt: str = "raise",
    ) -> None:
        super().__init__(store_or_path, on_corrupt)
        if isinstance(fields, str):
            raise TypeError("fields must be a sequence of names, e.g. ('sentence1', 'sentence2')")
        self.fields = tuple(self._text_field(f) for f in fields)
        if not self.fields:
            raise ValueError("fields must name at least one text field, e.g. ('sentence1', 'sentence2')")
        self.label_field = None if label_field is None else self._text_field(label_field)
        installed = importlib.util.find_spec("sentence_transformers") is not None
        if input_example and not installed:
            raise ImportError(
                "input_example=True needs sentence_transformers: pip install sentence-transformers"
            )
        self.input_example = installed if input_example is None else bool(input_example)

    def _text_field(self, name: str) -> str:
        return name if name == "doc_id" else self._check_field(name)

    def __getitems__(self, indices: Positions) -> list[Any]:
        # Only the fields asked for are decoded: (doc_id, *texts[, label]) per item.
        wanted = ("doc_id", *self.fields) + ((self.label_field,) if self.label_field else ())
        rows = self._kept(self._take(as_positions(indices), fields=wanted))
        n = len(self.fields)
        if self.input_example:
            from sentence_transformers import InputExample

            if self.label_field is None:
                return [InputExample(guid=row[0], texts=list(row[1:])) for row in rows]
            return [InputExample(guid=row[0], texts=list(row[1 : n + 1]), label=row[n + 1]) for row in rows]
        return [row[1:] for row in rows]
