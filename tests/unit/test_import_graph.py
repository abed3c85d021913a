"""The import graph of ``lakesync``: no cycles, and no arrow up the layers.

Every ``import`` in the source counts, at module level, under ``TYPE_CHECKING`` or inside a function: a lazy import
is still a dependency, and one that hides a cycle is the kind this test exists to catch. The graph is read from the
source (``ast``), so nothing is imported and the test is the same whatever other tests loaded.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("domain", ("lakesync.core",)),
    (
        "support",
        (
            "lakesync.lazy",
            "lakesync.collector",
            "lakesync.io_pool",
            "lakesync.wire",
            "lakesync.auth",
            "lakesync.api_routes",
            "lakesync.egress",
        ),
    ),
    ("ports", ("lakesync.ports",)),
    (
        "adapters",
        ("lakesync.aws", "lakesync.aws.settings.env", "lakesync.sql", "lakesync.connectors", "lakesync.adapters"),
    ),
    ("services", ("lakesync.gateway", "lakesync.lake")),
    ("lake jobs", ("lakesync.spark",)),
    (
        "entry points and composition",
        (
            "lakesync.aws.wiring",
            "lakesync.aws.log_stream",
            "lakesync.aws.ws_events",
            "lakesync.aws.lambda_runtime",
            "lakesync.aws.settings",
            "lakesync.aws.flush_function",
            "lakesync.edge",
            "lakesync.router",
            "lakesync.openapi",
            "lakesync.local",
            "lakesync.cli",
            "lakesync.client",
            "lakesync",
        ),
    ),
)
"""Bottom first: a module may import its own layer and those below. A module belongs to the layer of the longest
prefix naming it: ``lakesync.aws.wiring`` composes services from adapters, ``log_stream`` and ``ws_events`` turn
AWS events into service calls, ``lakesync.aws.settings`` reads the functions' configuration (its environment reader,
``settings.env``, needs nothing above the adapters); the rest of ``lakesync.aws`` adapts AWS to the ports."""


def _modules() -> dict[str, Path]:
    out = {}
    for path in (SRC / "lakesync").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _owner(name: str) -> str | None:
    """The module ``name`` loads: itself, or the package it names something in."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imported(module: str, path: Path) -> Iterator[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield full if full in MODULES else base


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        targets = {_owner(name) for name in _imported(module, path) if name.startswith("lakesync")}
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def _cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def layer_of(module: str) -> int:
    """The rank of ``module``'s layer (0 is the domain)."""
    best, rank = -1, -1
    for position, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), position
    assert rank >= 0, f"{module} is in no layer: add it to LAYERS"
    return rank


def test_the_graph_reader_sees_lazy_and_type_checking_imports() -> None:
    graph = _graph()
    # A module-level import, one under TYPE_CHECKING and one inside a function, as the modules have them today
    assert "lakesync.core.log" in graph["lakesync.gateway.push"]
    assert "lakesync.ports" in graph["lakesync.gateway.deps"]
    assert "lakesync.gateway.poller" in graph["lakesync.local.runner"]


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    assert _cycles(_graph()) == []


def test_every_module_is_in_a_layer() -> None:
    for module in MODULES:
        layer_of(module)


@pytest.mark.parametrize("layer", [name for name, _ in LAYERS])
def test_no_module_imports_a_layer_above_its_own(layer: str) -> None:
    rank = [name for name, _ in LAYERS].index(layer)
    upward = sorted(
        f"{module} -> {target} ({LAYERS[layer_of(target)][0]})"
        for module, targets in _graph().items()
        if layer_of(module) == rank
        for target in targets
        if layer_of(target) > rank
    )
    assert upward == []
