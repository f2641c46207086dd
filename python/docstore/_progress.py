"""Progress bars of long work (the CLI's commands, ``build()`` from a sized input, ``upgrade``,
``seal`` across shards): tqdm, already a dependency (pure Python, nothing of its own to
install; rich would bring pygments and markdown-it for one bar). A bar goes to stderr, shows its
total and an ETA, and is drawn only on a terminal: ``progress=None`` (the default) means "when
stderr is a TTY", ``False`` never, ``True`` always (where there is a stderr: none is drawn when
``sys.stderr`` is None, as in a ``pythonw`` process or a daemon).
"""

from __future__ import annotations

import sys
from typing import Any


def bar(total: int | None, unit: str, progress: bool | None = None, desc: str | None = None) -> Any:
    """A tqdm bar of ``total`` units (``"B"``: bytes, shown in KB/MB; else items); a `Hidden` one,
    without importing tqdm, when it would not be drawn."""
    if not drawn(progress):
        return Hidden(total)
    from tqdm import tqdm

    return tqdm(
        total=total,
        unit=unit if unit == "B" else f" {unit}",
        unit_scale=True,
        unit_divisor=1024 if unit == "B" else 1000,
        disable=None if progress is None else not progress,
        file=sys.stderr,
        desc=desc,
        mininterval=0.2,
        dynamic_ncols=True,
    )


def drawn(progress: bool | None) -> bool:
    """Whether a bar is drawn: ``progress``, or for None whether stderr is a terminal (as tqdm's
    ``disable=None`` decides); never without a stderr to draw it on."""
    if sys.stderr is None:  # tqdm would write to None and raise AttributeError
        return False
    if progress is not None:
        return progress
    isatty = getattr(sys.stderr, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


class Hidden:
    """A bar that is not drawn, with the part of tqdm's interface the callers use. Importing tqdm
    costs ~55 ms (it pulls in logging, email, csv, subprocess...), as long as building a 5 MB
    store: a `build()` in a script or a worker process, where no bar is drawn, does not pay it."""

    disable = True

    def __init__(self, total: int | None = None) -> None:
        self.total = total
        self.n = 0

    def update(self, n: int = 1) -> None:
        self.n += n

    def close(self) -> None:
        pass

    def __enter__(self) -> Hidden:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def verify(store: Any, progress: bool | None = None) -> None:
    """``store.verify()`` with a bar of its steps (each key, then each record, checked)."""
    with bar(None, "checks", progress, desc="verify") as shown:
        if shown.disable:
            store.verify()
            return

        def report(done: int, total: int) -> None:
            shown.total = total
            shown.update(done - shown.n)

        store.verify(report)


def seal(target: str, shards: list[str], progress: bool | None = None, **options: Any) -> int:
    """``_docstore.seal`` with a bar of its steps (each document's key read and checked, then
    merged into the global index: two a document); returns the number of documents."""
    from . import _docstore

    with bar(None, "steps", progress, desc="seal") as shown:
        if shown.disable:
            return _docstore.seal(target, shards, **options)

        def report(done: int, total: int) -> None:
            shown.total = total
            shown.update(done - shown.n)

        return _docstore.seal(target, shards, progress=report, **options)
