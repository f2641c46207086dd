"""The modules of the docstore package import each other without circles (read from their
``import`` statements), so that each can be read, and loaded, after the ones it needs."""

from __future__ import annotations

import ast

from ..conftest import ROOT

PACKAGE = ROOT / "python" / "docstore"


def module_imports() -> dict[str, set[str]]:
    """Each module of the package (``docstore._writer``), mapped to the package's modules it
    imports. A package's ``__init__`` is left out: importing any submodule runs it first."""
    paths = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    packages = {name for name, path in paths.items() if path.name == "__init__.py"}
    imports: dict[str, set[str]] = {}
    for name, path in paths.items():
        here = name if name in packages else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
                module = (f"{base}.{node.module}" if node.module else base) if node.level else node.module
                found.add(module)
                found.update(f"{module}.{alias.name}" for alias in node.names)
        imports[name] = {m for m in found if m in paths and m not in packages and m != name}
    return imports


def circles(imports: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: each module that can reach itself, with the modules on its way."""
    found = []
    for start in sorted(imports):
        stack, seen = [(start, [start])], set()
        while stack:
            name, way = stack.pop()
            for target in sorted(imports[name]):
                if target == start:
                    found.append(way)
                elif target not in seen:
                    seen.add(target)
                    stack.append((target, [*way, target]))
    return found


def test_the_package_modules_import_each_other_without_circles():
    imports = module_imports()
    assert "docstore._writer" in imports and "docstore.cli.commands" in imports
    assert "docstore._writer" in imports["docstore._collection"]  # the checker sees imports
    assert circles(imports) == []


def test_the_circle_finder_finds_circles():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [
        ["a", "b", "c"],
        ["b", "c", "a"],
        ["c", "a", "b"],
    ]
    assert circles({"a": {"b"}, "b": set()}) == []
