"""No class of the engine or the simulation is 400 lines or longer: a class that grows past it holds more
than one concern (the lease store, the simulation's world and its monitor were split for this)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[2]
LIMIT = 400


def test_class_sizes_of_the_engine_and_the_simulation_stay_below_the_limit() -> None:
    sizes = {
        f"{path.relative_to(ROOT)}::{node.name}": node.end_lineno - node.lineno + 1
        for folder in ("longjobs/engine", "longjobs/sim")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef) and node.end_lineno is not None
    }
    assert sizes, "no class found: the folders moved?"
    assert {name: size for name, size in sizes.items() if size >= LIMIT} == {}
