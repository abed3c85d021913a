"""The client package's modules: the store is a facade over parts, and no part imports it or forms a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import lakesync.client

PACKAGE = Path(lakesync.client.__file__).parent
PREFIX = "lakesync.client"


def _imports() -> dict[str, set[str]]:
    """Each client module's imports of other client modules, those under ``TYPE_CHECKING`` included."""
    modules = {PREFIX if f.stem == "__init__" else f"{PREFIX}.{f.stem}": f for f in PACKAGE.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == PREFIX:
                found.update(f"{PREFIX}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle, or ``[]``."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(module: str) -> list[str]:
        state[module] = 1
        path.append(module)
        for dep in sorted(graph[module]):
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep not in state and (found := visit(dep)):
                return found
        state[module] = 2
        path.pop()
        return []

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return []


def test_the_client_modules_import_one_another_without_a_cycle() -> None:
    # Given the client package's import graph, type-only imports included
    graph = _imports()
    # Then it has no cycle, and only the package's lazy exports and the asyncio face import the facade
    assert _cycle(graph) == []
    assert {m for m, deps in graph.items() if f"{PREFIX}.store" in deps} == {PREFIX, f"{PREFIX}.aio"}
