"""docstore: an immutable, memory-mapped, lz4-compressed document store for ML training.

>>> import docstore
>>> store = docstore.build("corpus.docstore", [{"doc_id": "d1", "text": "hello"}])
>>> store["d1"].text
'hello'

See ``docstore.open``, ``docstore.Writer``, ``docstore.build`` and ``docstore.DocStore``.
"""

from __future__ import annotations

from . import errors
from ._build import build, train_dictionary
from ._collection import seal
from ._doc import Doc
from ._docstore import FORMAT_VERSION, get_num_threads, set_num_threads
from ._store import DocStore, open
from ._upgrade import upgrade
from ._writer import Writer
from .errors import *  # noqa: F403 - the exception classes, listed in errors.__all__

__version__ = "0.1.0"


def _check_thread_setting() -> None:
    """The core reads DOCSTORE_NUM_THREADS without a way to complain: a value it cannot use
    (it then takes all cores) is worth a warning here rather than silence."""
    import os
    import warnings

    value = os.environ.get("DOCSTORE_NUM_THREADS", "").strip()
    digits = value[1:] if value.startswith("+") else value  # as Rust reads a usize
    if value and not (digits.isascii() and digits.isdigit() and int(digits) < 2**64):
        warnings.warn(
            f"DOCSTORE_NUM_THREADS={value!r} is not a number of threads (0 = all cores); "
            "docstore uses all cores",
            stacklevel=3,
        )


_check_thread_setting()

__all__ = [
    "FORMAT_VERSION",
    "Doc",
    "DocStore",
    "Writer",
    "__version__",
    "build",
    "get_num_threads",
    "open",
    "seal",
    "set_num_threads",
    "train_dictionary",
    "upgrade",
]
__all__ += errors.__all__  # the form type checkers follow
