"""Mutants of the renewal and release guards: one test of one guard forced true, or forced false.

A guard is the test of an `if`, a conditional expression or a `while`, or a predicate's returned
comparison, in the functions that decide a renewal, a release, a settlement or a lost handle (`GUARDED`).
Either direction is a plausible slip (a check skipped, or one that always refuses), so each guard has two
mutants. Deletes are the receiver's acknowledging ends (the decision's rows) and the workflow's, after its
conditional close (the clauses); they are not guards here.

A mutant runs its function with the test replaced by the constant (`longjobs.sim.mutation.code.swapped`).
A run reaches the `True` mutant where the test was false, and the `False` mutant where it was true.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from longjobs.sim.mutation.code import NOTE, noting, swapped, tree

__all__ = ["GUARDED", "Guard", "GuardMutant", "guards", "mutants", "reached", "recording"]

GUARDED = (
    "longjobs.engine.extender.service:_renew",
    "longjobs.engine.extender.service:_after_conflict",
    "longjobs.engine.extender.service:_capped",
    "longjobs.engine.extender.service:_renewal",
    "longjobs.engine.extender.service:_end_unholdable",
    "longjobs.engine.extender.service:_settle_ended_instead",
    "longjobs.engine.extender.service:still_as_read",
    "longjobs.engine.policies.adaptive:AdaptivePolicy.decide",
    "longjobs.engine.policies.threshold:ThresholdPolicy.decide",
    "longjobs.engine.policies.remaining_time:RemainingTimePolicy.decide",
    "longjobs.engine.settle:release_holds",
    "longjobs.engine.settle:release",
    "longjobs.engine.settle:reassert_release",
    "longjobs.engine.settle:complete",
    "longjobs.engine.settle:stop_and_close",
    "longjobs.engine.settle:settle_ended",
    "longjobs.engine.extender.reconcile:_settle",
    "longjobs.engine.visibility.errors:classify",
)
"""The functions whose guards are mutated: the extender's renewal and its ends, the renewal policies, the
settlement of an ended attempt (release, completion, stop), reconciliation's, and the class of a refusal."""


@dataclass(frozen=True)
class Guard:
    """One test: its function, its place (`index` among the function's tests, and its source line), its text."""

    target: str
    index: int
    line: int
    test: str


@dataclass(frozen=True)
class GuardMutant:
    guard: Guard
    forced: bool

    @property
    def name(self) -> str:
        return f"guard:{self.guard.target.split(':')[1]}:{self.guard.index}:{str(self.forced).lower()}"

    @property
    def change(self) -> str:
        short = self.guard.test if len(self.guard.test) <= 60 else self.guard.test[:57] + "..."
        return f"{self.guard.target.split(':')[1]} line {self.guard.line}: ({short}) -> {self.forced}"

    @contextmanager
    def active(self) -> Iterator[None]:
        """The guard's test replaced by the constant, in this process, until the block ends."""

        def rewrite(function: ast.FunctionDef) -> ast.FunctionDef:
            test = _tests(function)[self.guard.index]
            return _Replace({id(test): ast.Constant(value=self.forced)}).function(function)

        with swapped({self.guard.target: rewrite}):
            yield


def _tests(function: ast.FunctionDef) -> list[ast.expr]:
    """A function's guards, in source order: the tests of its `if`s, conditional expressions and `while`s, and
    the returned comparisons and boolean operations."""
    found: list[ast.expr] = []
    for node in ast.walk(function):
        if isinstance(node, ast.If | ast.IfExp | ast.While):
            found.append(node.test)
        elif isinstance(node, ast.Return) and isinstance(node.value, ast.BoolOp | ast.Compare):
            found.append(node.value)
    return sorted(found, key=lambda node: (node.lineno, node.col_offset))


class _Replace(ast.NodeTransformer):
    """Each node whose `id` is a key is replaced by its value (located where it was)."""

    def __init__(self, by_id: dict[int, ast.expr]) -> None:
        self.by_id = by_id

    def visit(self, node: ast.AST) -> ast.AST:
        replacement = self.by_id.get(id(node))
        visited: ast.AST = self.generic_visit(node)  # a test within a test is a guard too
        return visited if replacement is None else ast.copy_location(replacement, visited)

    def function(self, function: ast.FunctionDef) -> ast.FunctionDef:
        rewritten = self.visit(function)
        assert isinstance(rewritten, ast.FunctionDef)
        return rewritten


def guards() -> list[Guard]:
    return [
        Guard(target, index, test.lineno, ast.unparse(test))
        for target in GUARDED
        for index, test in enumerate(_tests(tree(target)))
    ]


def mutants() -> list[GuardMutant]:
    return [GuardMutant(guard, forced) for guard in guards() for forced in (True, False)]


def reached(values: set[tuple[Guard, bool | None]]) -> list[GuardMutant]:
    """The mutants whose change a run took, from the values its guards had (`recording`).

    A guard forced to a value changes a run only where it had the other value. A returned `or` or `and`
    is the exception: its value is an operand (`store.amend(...) or closed` gives a lease), which either
    constant replaces, so both of its mutants are reached (`None`)."""
    return [
        GuardMutant(guard, forced)
        for guard, value in values
        for forced in (True, False)
        if value is None or forced is not value
    ]


@contextmanager
def recording() -> Iterator[set[tuple[Guard, bool | None]]]:
    """Each guard's values while the block runs: (guard, value), the value None where a returned operation
    gave something other than a bool (the set fills as tests are evaluated; the caller may empty it between
    seeds)."""
    hit: set[tuple[Guard, bool | None]] = set()

    def noted(guard: tuple[str, int, int, str], value: object, returned: bool = False) -> object:
        hit.add((Guard(*guard), None if returned and not isinstance(value, bool) else bool(value)))
        return value

    def rewrite_of(target: str) -> Callable[[ast.FunctionDef], ast.FunctionDef]:
        def rewrite(function: ast.FunctionDef) -> ast.FunctionDef:
            returned = {id(node.value) for node in ast.walk(function) if isinstance(node, ast.Return)}
            by_id: dict[int, ast.expr] = {}
            for index, test in enumerate(_tests(function)):
                key = ast.Tuple(
                    elts=[ast.Constant(value=part) for part in (target, index, test.lineno, ast.unparse(test))],
                    ctx=ast.Load(),
                )
                flag = ast.Constant(value=id(test) in returned)
                by_id[id(test)] = ast.Call(func=ast.Name(id=NOTE, ctx=ast.Load()), args=[key, test, flag], keywords=[])
            return _Replace(by_id).function(function)

        return rewrite

    with noting(set(GUARDED), noted), swapped({target: rewrite_of(target) for target in GUARDED}):
        yield hit
