"""``PairDataset``: sentence pairs with labels, ready for Sentence Transformers."""

from __future__ import annotations

import importlib.util
import operator
from collections.abc import Sequence
from typing import Any, Callable

from ._base import StoreDataset, as_positions


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
    ) -> None:
        super().__init__(store_or_path)
        if isinstance(fields, str):
            raise TypeError("fields must be a sequence of names, e.g. ('sentence1', 'sentence2')")
        self.fields = tuple(self._check_field(f) for f in fields)
        self.label_field = None if label_field is None else self._check_field(label_field)
        installed = importlib.util.find_spec("sentence_transformers") is not None
        if input_example and not installed:
            raise ImportError(
                "input_example=True needs sentence_transformers: pip install sentence-transformers"
            )
        self.input_example = installed if input_example is None else bool(input_example)

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        docs = self.store.take(as_positions(indices))
        get = operator.attrgetter(*self.fields)
        texts: Callable[[Any], tuple[Any, ...]] = get if len(self.fields) > 1 else lambda doc: (get(doc),)
        label = operator.attrgetter(self.label_field) if self.label_field else None
        if self.input_example:
            from sentence_transformers import InputExample

            if label is None:
                return [InputExample(guid=doc.doc_id, texts=list(texts(doc))) for doc in docs]
            return [InputExample(guid=doc.doc_id, texts=list(texts(doc)), label=label(doc)) for doc in docs]
        if label is None:
            return [tuple(texts(doc)) for doc in docs]
        return [(*texts(doc), label(doc)) for doc in docs]
