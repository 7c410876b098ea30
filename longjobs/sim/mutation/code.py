"""Running a function of the engine with its source rewritten, in this process, while a block runs.

A target is named `module:function` or `module:Class.method`. Its source is parsed, rewritten, compiled
with the module's globals and swapped in as the function's code object (`__code__`), so every caller,
whatever name it imported, runs the rewrite; the original code is put back when the block ends. A target
must not use `super()` or a closure of its own (its code would need other cells).
"""

from __future__ import annotations

import ast
import copy
import importlib
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from types import CodeType, FunctionType, ModuleType

__all__ = ["NOTE", "function", "noting", "swapped", "tree"]

NOTE = "_mutation_noted"
"""The name under which a recorder's note is in a target module's globals while it records."""

Rewrite = Callable[[ast.FunctionDef], ast.FunctionDef]


def _module(target: str) -> ModuleType:
    return importlib.import_module(target.split(":")[0])


def function(target: str) -> FunctionType:
    found: object = _module(target)
    for part in target.split(":")[1].split("."):
        found = getattr(found, part)
    assert isinstance(found, FunctionType), target
    return found


@cache
def _source(module: str) -> ast.Module:
    return ast.parse(inspect.getsource(importlib.import_module(module)))


def tree(target: str) -> ast.FunctionDef:
    """A fresh parse of the target's definition (its own copy: a rewrite may change it)."""
    body: list[ast.stmt] = _source(target.split(":")[0]).body
    found: ast.stmt | None = None
    for part in target.split(":")[1].split("."):
        found = next(node for node in body if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == part)
        body = found.body
    assert isinstance(found, ast.FunctionDef), target
    return copy.deepcopy(found)


def _compiled(target: str, rewrite: Rewrite) -> CodeType:
    original = function(target)
    module = ast.fix_missing_locations(ast.Module(body=[rewrite(tree(target))], type_ignores=[]))
    scope = dict(original.__globals__)
    exec(compile(module, inspect.getfile(original), "exec"), scope)  # the engine's own source, rewritten
    code = scope[original.__name__].__code__
    assert isinstance(code, CodeType) and code.co_freevars == original.__code__.co_freevars, target
    return code


@contextmanager
def swapped(rewrites: dict[str, Rewrite]) -> Iterator[None]:
    """Each target runs its source as its rewrite makes it, until the block ends."""
    originals: dict[str, CodeType] = {}
    try:
        for target, rewrite in rewrites.items():
            originals[target] = function(target).__code__
            function(target).__code__ = _compiled(target, rewrite)
        yield
    finally:
        for target, code in originals.items():
            function(target).__code__ = code


@contextmanager
def noting(targets: set[str], note: Callable[..., object]) -> Iterator[None]:
    """`note` reachable as `NOTE` from the targets' code, until the block ends."""
    modules = {_module(target) for target in targets}
    for module in modules:
        vars(module)[NOTE] = note
    try:
        yield
    finally:
        for module in modules:
            vars(module).pop(NOTE, None)
