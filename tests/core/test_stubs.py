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


def test_reads_are_typed_by_what_they_return(tmp_path):
    """``take``, ``at``, ``get`` and ``get_many`` give ``Doc`` objects, one field's values or tuples
    of fields, and say so to a type checker; ``read`` and ``on_duplicate`` are literals; ``build``
    names the Writer's options."""
    (tmp_path / "use.py").write_text(
        "import docstore\n"
        "store = docstore.open('s.docstore', read='pread')\n"
        "reveal_type(store.take([1]))\n"
        "reveal_type(store.take([1], field='text'))\n"
        "reveal_type(store.take([1], fields=['text']))\n"
        "reveal_type(store.at(0))\n"
        "reveal_type(store.get('a'))\n"
        "reveal_type(store.get_many(['a']))\n"
        "reveal_type(store['a'])\n"
        "docstore.open('s.docstore', read='nmap')\n"
        "docstore.build('s.docstore', [], levle=3)\n"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--no-incremental",
            "--ignore-missing-imports",
            str(tmp_path / "use.py"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = proc.stdout
    revealed = [
        line.split('Revealed type is "', 1)[1].rstrip('"') for line in out.splitlines() if "Revealed" in line
    ]
    # (mypy 2 writes builtins without their module)
    revealed = [r.replace("builtins.", "") for r in revealed]
    assert revealed == [
        "list[docstore._doc.Doc]",
        "list[Any]",
        "list[tuple[Any, ...]]",
        "docstore._doc.Doc",
        "docstore._doc.Doc | None",
        "dict[str, docstore._doc.Doc]",
        "docstore._doc.Doc",
    ], out
    assert "use.py:10: error" in out and "nmap" in out  # not a read mode
    assert "use.py:11: error" in out and "levle" in out  # not a Writer option
