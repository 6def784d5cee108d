"""The shape of ``src/compactlog``: dependencies point one way, no module over 500 lines, the cleaner never
names Spark.

Imports are read with :mod:`ast`, not by importing, so every import counts: module level, inside functions
(the lazy imports a cycle hides behind) and under ``if TYPE_CHECKING:``. A type-only cycle is not a runtime
cycle, but it is the same two-way dependency a reader has to hold in their head, and it becomes a runtime one
the day an annotation turns into a call; the rule is that dependencies point one way, so it counts.

A node is a module file (a package is its ``__init__.py``). ``import a.b`` depends on ``a.b``;
``from a import b`` depends on ``a.b`` when that is a module, else on ``a``. Importing ``a.b`` also runs
``a/__init__.py``, but that edge is not counted: ``compactlog/__init__.py`` is the public facade and
imports most modules, so counting it would put every module on one cycle through it (an explicit
``import compactlog``, as the CLI's, does count).
"""

from __future__ import annotations

import ast
from pathlib import Path

SOURCE_ROOT = Path(__file__).resolve().parents[2] / "src"
PACKAGE = "compactlog"
MAX_MODULE_LINES = 500

def module_name(path: Path) -> str:
    parts = list(path.relative_to(SOURCE_ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted((SOURCE_ROOT / PACKAGE).rglob("*.py"))}


def longest_module_prefix(dotted: str, modules: dict[str, Path]) -> str | None:
    while dotted and dotted not in modules:
        dotted = dotted.rpartition(".")[0]
    return dotted or None


def dependencies(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The compactlog modules that ``name`` imports anywhere in its file, relative imports resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str | None] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(longest_module_prefix(alias.name, modules) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in modules else longest_module_prefix(base, modules))
    return {module for module in found if module is not None and module != name}


def import_graph() -> dict[str, set[str]]:
    modules = source_modules()
    return {name: dependencies(name, path, modules) for name, path in modules.items()}


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan): the modules on some cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def shortest_path(graph: dict[str, set[str]], start: str, end: str, within: set[str]) -> list[str]:
    """Breadth first from ``start`` to ``end`` through the modules ``within`` (a component: ``end`` is reached)."""
    parents: dict[str, str] = {start: start}
    frontier = [start]
    while end not in parents:
        reached = []
        for node in frontier:
            for target in sorted(graph[node] & within):
                if target not in parents:
                    parents[target] = node
                    reached.append(target)
        frontier = reached
    path = [end]
    while path[-1] != start:
        path.append(parents[path[-1]])
    return path[::-1]


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """For every import edge on a cycle, the shortest cycle through it (each cycle once, written from its
    first module in sorted order back to it)."""
    cycles: set[tuple[str, ...]] = set()
    for component in strongly_connected(graph):
        for source in component:
            for target in graph[source] & component:
                cycle = [source, *shortest_path(graph, target, source, component)]
                first = cycle.index(min(cycle[:-1]))
                cycles.add(tuple(cycle[first:-1] + cycle[:first] + [cycle[first]]))
    return [list(cycle) for cycle in sorted(cycles)]


def render(cycle: list[str]) -> str:
    return " -> ".join(cycle)


def cleaner_imports_of_spark(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(name, target) for name, targets in graph.items() if name.startswith(f"{PACKAGE}.cleaner")
            for target in targets if target.startswith(f"{PACKAGE}.spark")}


def test_the_walk_sees_relative_imports_in_functions_and_under_type_checking(tmp_path: Path) -> None:
    files = {
        "pkg/__init__.py": "",
        "pkg/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sub import b\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/b.py": "def f():\n    from .. import c\n",
        "pkg/c.py": "import pkg.a\nfrom pkg.sub import *\n",
    }
    modules = {}
    for relative, text in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        modules[relative.removesuffix(".py").removesuffix("/__init__").replace("/", ".")] = path
    graph = {name: dependencies(name, path, modules) for name, path in modules.items()}
    assert graph["pkg.a"] == {"pkg.sub.b"} and graph["pkg.sub.b"] == {"pkg.c"}
    assert graph["pkg.c"] == {"pkg.a", "pkg.sub"}
    assert find_cycles(graph) == [["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]]


def test_no_import_cycle_among_compactlog_modules() -> None:
    cycles = [render(cycle) for cycle in find_cycles(import_graph())]
    assert cycles == [], "import cycles (module level, in functions and under TYPE_CHECKING):\n" + "\n".join(cycles)


def test_the_cleaner_imports_nothing_from_spark() -> None:
    assert cleaner_imports_of_spark(import_graph()) == set()


def test_no_module_is_over_500_lines() -> None:
    lines = {name: len(path.read_text().splitlines()) for name, path in source_modules().items()}
    too_long = {name: count for name, count in lines.items() if count > MAX_MODULE_LINES}
    assert too_long == {}
