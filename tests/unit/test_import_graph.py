"""The import graph has no cycle, among the modules of the whole package and among its packages: every
import counted, at module level, inside a function, or only for type checking, since each is a
dependency a reader follows and a change must respect."""

from __future__ import annotations

import ast
from pathlib import Path

import longjobs
import longjobs.engine
import longjobs.functions

PROJECT = Path(longjobs.__file__).parent
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


def package_of(module: str, depth: int = 3) -> str:
    """The package a module belongs to, `depth` names deep: at 3, `longjobs.engine.receiver` for its
    `service`, and a module directly in `longjobs.engine` (`settle`, `cancel`) or in `longjobs.functions` is
    a unit of its own; at 2, `longjobs.sim` for every module of the simulation."""
    parts = module.split(".")
    return ".".join(parts[:depth]) if len(parts) > depth else module


def package_graph(graph: dict[str, set[str]], depth: int = 3) -> dict[str, set[str]]:
    """The module graph with each package's modules merged into one node."""
    merged: dict[str, set[str]] = {package_of(name, depth): set() for name in graph}
    for name, imported in graph.items():
        merged[package_of(name, depth)].update(package_of(other, depth) for other in imported)
        merged[package_of(name, depth)].discard(package_of(name, depth))
    return merged


def project_graph() -> dict[str, set[str]]:
    """Every module of the package: the engine and the functions, the constructs, the offline runtime,
    the simulation, the history checker, the command line and the pipeline."""
    modules = {module_name(path): path for path in sorted(PROJECT.rglob("*.py"))}
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def is_front(module: str) -> bool:
    """A command's front (`__main__`): it composes the commands of packages on any floor (the offline
    runtime's offers the simulation's `sim`), and no module imports it."""
    return module.rpartition(".")[2] == "__main__"


def test_import_graph_of_the_engine_has_no_cycle() -> None:
    assert cycles(engine_graph()) == []


def test_import_graph_of_the_engine_packages_has_no_cycle() -> None:
    """The receiver, admission and cancel stand on the delivery floor; none imports another's caller."""
    packages = package_graph(engine_graph())
    assert cycles(packages) == []
    assert "longjobs.engine.delivery" in packages["longjobs.engine.admission"]
    for below in ("longjobs.engine.receiver", "longjobs.engine.admission", "longjobs.engine.cancel"):
        assert below not in packages["longjobs.engine.delivery"], below


def test_import_graph_of_the_whole_package_has_no_cycle() -> None:
    graph = project_graph()
    assert "longjobs.sim.world" in graph and "longjobs.offline.runtime" in graph
    assert cycles(graph) == []


def test_import_graph_of_the_top_packages_has_no_cycle() -> None:
    """The simulation stands above the offline runtime (it runs its scenario files), and both on the
    history checker, which the offline runtime judges its runs with; fronts stand above every package."""
    graph = project_graph()
    fronts = {name for name in graph if is_front(name)}
    assert "longjobs.offline.__main__" in fronts
    assert not any(fronts & imported for name, imported in graph.items() if not is_front(name))
    packages = package_graph({name: graph[name] for name in graph.keys() - fronts}, depth=2)
    assert cycles(packages) == []
    assert "longjobs.offline" in packages["longjobs.sim"]
    for runtime in ("longjobs.sim", "longjobs.offline"):
        assert "longjobs.history" in packages[runtime], runtime
    assert packages["longjobs.history"] == set()


def test_import_graph_package_merge_finds_a_cycle_between_packages() -> None:
    graph = {"p.q.a.x": {"p.q.b.y"}, "p.q.b.y": set(), "p.q.b.z": {"p.q.a.w"}, "p.q.a.w": set()}
    assert cycles(package_graph(graph)) == [["p.q.a", "p.q.b"]]


def test_import_graph_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
