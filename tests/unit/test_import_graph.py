"""The import graph of the engine and the functions has no cycle: every import counted, at module level,
inside a function, or only for type checking, since each is a dependency a reader follows and a change
must respect."""

from __future__ import annotations

import ast
from pathlib import Path

import longjobs.engine
import longjobs.functions

ENGINE = Path(longjobs.engine.__file__).parent
FUNCTIONS = Path(longjobs.functions.__file__).parent
PACKAGE = "longjobs.engine"


def module_name(path: Path) -> str:
    relative = path.relative_to(ENGINE.parent.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def engine_modules() -> dict[str, Path]:
    """The modules of the engine and of the functions above it."""
    paths = sorted([*ENGINE.rglob("*.py"), *FUNCTIONS.rglob("*.py")])
    return {module_name(path): path for path in paths}


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The engine modules `name` imports, anywhere in its file. `from a import b` is an import of `a.b`
    when that is a module, else of `a`."""
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([package.rsplit(".", node.level - 1)[0], *([base] if base else [])])
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {imported for imported in found if imported in modules and imported != name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for neighbour in sorted(graph[node]):
            if neighbour not in index:
                visit(neighbour)
                low[node] = min(low[node], low[neighbour])
            elif neighbour in on_stack:
                low[node] = min(low[node], index[neighbour])
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

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def engine_graph() -> dict[str, set[str]]:
    modules = engine_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def test_import_graph_reads_every_kind_of_import() -> None:
    graph = engine_graph()
    # a module-level import, and one inside a function (the handler builds its catalog on first use)
    assert "longjobs.engine.settings" in graph["longjobs.functions.receiver"]
    assert "longjobs.engine.jobs" in graph["longjobs.functions.receiver"]
    # the factory imports each core inside the builder that makes it
    assert "longjobs.engine.watcher.service" in graph["longjobs.engine.factory"]


def test_import_graph_of_the_engine_has_no_cycle() -> None:
    assert cycles(engine_graph()) == []


def test_import_graph_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
