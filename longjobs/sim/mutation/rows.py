"""Mutants of the receiver's decision: one row's action changed to another it could plausibly take.

A row is one `return` of an action in `longjobs.engine.delivery.decision` (`decide`, `_new_attempt`), or of a
lock state in `lock_state`; a conditional return has a row per branch. `PLAUSIBLE` says what each action
could be mistaken for: an acknowledgement for another, a wait for a run, the DLQ for a retry, a read
skipped. Replacements are always ends, never reads: the receiver asks the decision again after each read,
so a row that kept asking for a read would loop.

A mutant runs its function with the row rewritten (`longjobs.sim.mutation.code.swapped`). Recording which
rows a run takes rewrites the same functions with each row wrapped in a call that notes it.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache

from longjobs.engine.delivery import decision
from longjobs.sim.mutation.code import NOTE, noting, swapped, tree

__all__ = ["PLAUSIBLE", "RowMutant", "mutants", "reached", "recording", "rows"]

FUNCTIONS = ("decide", "_new_attempt", "lock_state")
"""The decision's functions whose returns are its rows."""

PLAUSIBLE: dict[str, tuple[str, ...]] = {
    # a read skipped: the receive ends as if the answer were the usual one
    "Action.CLAIM_COPY": ("Action.DUPLICATE", "Action.START"),
    "Action.READ_EXECUTION": ("Action.ADOPT_RUNNING", "Action.START"),
    "Action.READ_JOB_LOCK": ("Action.START", "Action.WAIT_FOR_JOB"),
    "Action.FIND_SLOT": ("Action.START", "Action.WAIT_FOR_SLOT"),
    # an acknowledgement taken for another, for nothing done, or for a new run
    "Action.DUPLICATE": ("Action.STALE", "Action.SEND_COPY"),
    "Action.SEND_COPY": ("Action.DUPLICATE", "Action.STALE"),
    "Action.ALREADY_SUCCEEDED": ("Action.STALE", "Action.START"),
    "Action.ALREADY_DEAD_LETTERED": ("Action.STALE", "Action.START"),
    "Action.SEND_DEAD_LETTER": ("Action.ALREADY_DEAD_LETTERED", "Action.START"),
    "Action.ALREADY_CANCELLED": ("Action.STALE", "Action.DEAD_LETTER_CANCELLED", "Action.START"),
    "Action.DEAD_LETTER_CANCELLED": ("Action.ALREADY_CANCELLED", "Action.STALE"),
    "Action.DEAD_LETTER_UNKNOWN": ("Action.DUPLICATE", "Action.STALE", "Action.START"),
    "Action.STALE": ("Action.DUPLICATE", "Action.RESUME"),
    "Action.STILL_WAITING": ("Action.STALE", "Action.RESUME"),
    # a receive of a held lease: resumed, adopted, or left
    "Action.RESUME": ("Action.STALE", "Action.ADOPT"),
    "Action.ADOPT_SAME_COUNT": ("Action.ADOPT", "Action.STALE"),
    "Action.ADOPT": ("Action.ADOPT_SAME_COUNT", "Action.STALE", "Action.START"),
    "Action.ADOPT_RUNNING": ("Action.START", "Action.STALE"),
    # the DLQ taken for a retry, or for another reason
    "Action.DEAD_LETTER": ("Action.START", "Action.DEAD_LETTER_REFUSED"),
    "Action.DEAD_LETTER_INVALID": ("Action.START", "Action.DEAD_LETTER", "Action.STALE"),
    "Action.DEAD_LETTER_REFUSED": ("Action.START", "Action.DEAD_LETTER"),
    # a wait taken for another wait, or for a run
    "Action.WAIT_FOR_JOB": ("Action.HOLD_FOR_JOB", "Action.START", "Action.STALE"),
    "Action.HOLD_FOR_JOB": ("Action.WAIT_FOR_JOB", "Action.DEAD_LETTER_BUSY", "Action.START"),
    "Action.DEAD_LETTER_BUSY": ("Action.HOLD_FOR_JOB", "Action.WAIT_FOR_JOB"),
    "Action.WAIT_FOR_SLOT": ("Action.START", "Action.WAIT_FOR_JOB"),
    "Action.START": ("Action.WAIT_FOR_SLOT", "Action.STALE"),
    # the job lock's holder judged otherwise
    "LockState.STALE": ("LockState.HELD", "LockState.FREE"),
    "LockState.HELD": ("LockState.STALE", "LockState.HELD_BY_THIS_MESSAGE"),
    "LockState.HELD_BY_THIS_MESSAGE": ("LockState.HELD", "LockState.STALE"),
}
"""For each action (and lock state) a row returns, what a plausible bug would return instead."""


@dataclass(frozen=True)
class Row:
    """One returned constant of the decision: its function, its place (`index` among the function's rows,
    and its source line) and what it returns."""

    function: str
    index: int
    line: int
    returns: str


@dataclass(frozen=True)
class RowMutant:
    """`row` returning `replacement` instead."""

    row: Row
    replacement: str

    @property
    def name(self) -> str:
        was, now = (constant.split(".")[1].lower() for constant in (self.row.returns, self.replacement))
        return f"row:{self.row.function}:{self.row.index}:{was}>{now}"

    @property
    def change(self) -> str:
        return f"{self.row.function} line {self.row.line}: {self.row.returns} -> {self.replacement}"

    @contextmanager
    def active(self) -> Iterator[None]:
        """The mutant's row in place of the original, in this process, until the block ends."""

        def swap(node: ast.expr, row: Row) -> ast.expr:
            return ast.parse(self.replacement, mode="eval").body if row == self.row else node

        with swapped({_target(self.row.function): _rewrite(self.row.function, swap)}):
            yield


def _target(function: str) -> str:
    return f"{decision.__name__}:{function}"


def _returned(function: ast.FunctionDef) -> list[ast.Attribute]:
    """The constants a function's returns give, in source order: `Enum.MEMBER` as a return's value or as a
    branch of a conditional return (never a condition's operand)."""

    def branches(node: ast.expr) -> list[ast.expr]:
        if isinstance(node, ast.IfExp):
            return [*branches(node.body), *branches(node.orelse)]
        return [node]

    found = [
        branch
        for node in ast.walk(function)
        if isinstance(node, ast.Return) and node.value is not None
        for branch in branches(node.value)
        if isinstance(branch, ast.Attribute) and isinstance(branch.value, ast.Name)
    ]
    return sorted(found, key=lambda node: (node.lineno, node.col_offset))


def rows() -> list[Row]:
    """Every row of the decision, in source order per function."""
    return [
        Row(name, index, node.lineno, ast.unparse(node))
        for name in FUNCTIONS
        for index, node in enumerate(_returned(tree(_target(name))))
    ]


def mutants() -> list[RowMutant]:
    return [RowMutant(row, replacement) for row in rows() for replacement in PLAUSIBLE[row.returns]]


def reached(taken: set[Row]) -> list[RowMutant]:
    """The mutants whose change a run took: each replacement of each row it returned (`recording`)."""
    return [mutant for row in taken for mutant in _of_row()[row]]


@cache
def _of_row() -> dict[Row, list[RowMutant]]:
    found: dict[Row, list[RowMutant]] = {}
    for mutant in mutants():
        found.setdefault(mutant.row, []).append(mutant)
    return found


def _rewrite(name: str, swap: Callable[[ast.expr, Row], ast.expr]) -> Callable[[ast.FunctionDef], ast.FunctionDef]:
    """A rewrite of the function `name` that gives each of its rows to `swap`."""

    def rewrite(function: ast.FunctionDef) -> ast.FunctionDef:
        places = {(node.lineno, node.col_offset): index for index, node in enumerate(_returned(function))}

        class Rows(ast.NodeTransformer):
            def visit_Attribute(self, node: ast.Attribute) -> ast.expr:
                index = places.get((node.lineno, node.col_offset))
                if index is None:
                    return node
                return ast.copy_location(swap(node, Row(name, index, node.lineno, ast.unparse(node))), node)

        rewritten = Rows().visit(function)
        assert isinstance(rewritten, ast.FunctionDef)
        return rewritten

    return rewrite


@contextmanager
def recording() -> Iterator[set[Row]]:
    """The rows the decision returns while the block runs (the set fills as it decides; the caller may
    empty it between seeds)."""
    hit: set[Row] = set()

    def noted(row: tuple[str, int, int, str], value: object) -> object:
        hit.add(Row(*row))
        return value

    def swap(node: ast.expr, row: Row) -> ast.expr:
        key = ast.Tuple(
            elts=[ast.Constant(value=part) for part in (row.function, row.index, row.line, row.returns)], ctx=ast.Load()
        )
        return ast.Call(func=ast.Name(id=NOTE, ctx=ast.Load()), args=[key, node], keywords=[])

    with (
        noting({_target(name) for name in FUNCTIONS}, noted),
        swapped({_target(name): _rewrite(name, swap) for name in FUNCTIONS}),
    ):
        yield hit
