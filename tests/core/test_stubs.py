"""The type stubs of the extension module say what it really has (mypy's stubtest)."""

from __future__ import annotations

import subprocess
import sys


def test_extension_stubs_match_the_runtime():
    proc = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "docstore._docstore"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_package_is_typed():
    import docstore

    assert (__import__("pathlib").Path(docstore.__file__).parent / "py.typed").exists()


def test_the_bindings_raise_only_classes_of_docstore_errors():
    import docstore
    from docstore import _docstore

    assert set(_docstore.EXCEPTION_CLASSES) <= set(docstore.errors.__all__)
    assert all(
        issubclass(getattr(docstore, name), docstore.DocstoreError) for name in _docstore.EXCEPTION_CLASSES
    )
