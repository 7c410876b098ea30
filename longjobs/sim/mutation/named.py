"""The project's own tests as a judge of the mutants: the tests that take a mutant's change, run under it.

Some mutants change what the processor costs or reports, not what it promises: a renewal sent before it is
due, a pass's report that counts a lease under another heading. The campaign judges promises, so it lets
them through; the extender's, the receiver's and the policies' own tests check those figures. This module
runs them as the campaign is run, in two passes of pytest in a process of its own:

- `reach` runs the tests once, unmutated, with every row and guard recorded (the same recorders as the
  campaign's reach pass), and lists for each mutant the tests where its change is taken.
- `judge` runs those tests under the mutant, stopping at the first failure, and names it.

A test that does not take a mutant's change runs as without it, so it cannot report it. Only what runs in
pytest's own process is recorded: a program a test starts runs the protocol unmutated. A clause is removed
where moto evaluates a condition (`_moto_conditions`), so the workflow's own writes, which moto's Step
Functions sends to its DynamoDB, meet it too.

The module is also the pytest plugin both passes load (`-p longjobs.sim.mutation.named`); it acts only
when one of its environment variables is set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from longjobs.sim.mutation import clauses, guards, rows

__all__ = ["TESTS", "judge", "mutants", "reach"]

TESTS = ("tests/unit", "tests/functional")
"""The tests that may judge a mutant: the pure ones and the moto ones (each runs the engine in its process).
The simulation's own tests are the campaign's seeds by another door; its mutation tests compare a run with
and without a mutant, which a mutant active around them would confuse."""

_REACH = "LONGJOBS_MUTATION_REACH"
"""A file: the reach pass writes `{mutant name: [test ids]}` to it."""
_SITES = "LONGJOBS_MUTATION_SITES"
"""The conditions whose clauses the reach pass records, as a JSON list."""
_MUTANT = "LONGJOBS_MUTATION_MUTANT"
"""The judge pass's mutant, as JSON: a row's or guard's name, or a clause's condition and index."""
_FAILED = "LONGJOBS_MUTATION_FAILED"
"""A file: the judge pass writes the id of the first test that failed under its mutant to it."""

Mutant = rows.RowMutant | guards.GuardMutant | clauses.ClauseMutant


def mutants() -> dict[str, rows.RowMutant | guards.GuardMutant]:
    """The row and guard mutants by name (a clause mutant's name is its condition's digest)."""
    every: list[rows.RowMutant | guards.GuardMutant] = [*rows.mutants(), *guards.mutants()]
    return {mutant.name: mutant for mutant in every}


def _encoded(mutant: Mutant) -> str:
    if isinstance(mutant, clauses.ClauseMutant):
        return json.dumps({"site": mutant.site, "index": mutant.index})
    return json.dumps({"name": mutant.name})


def _decoded(text: str) -> Mutant:
    fields = json.loads(text)
    return clauses.ClauseMutant(**fields) if "site" in fields else mutants()[fields["name"]]


Parse = Callable[[Any], Any]


@contextmanager
def _moto_conditions(evaluated: Callable[[Any, Parse], Any]) -> Iterator[None]:
    """Every condition moto parses is given to `evaluated` (with the parser and moto's own parse), which
    returns what moto evaluates, until the block ends. The request's own parse stays moto's, so moto's check
    that each attribute name is used still reads the condition as sent."""
    from moto.dynamodb.comparisons import ConditionExpressionParser

    parse = ConditionExpressionParser.parse
    ConditionExpressionParser.parse = lambda parser: evaluated(parser, parse)  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        ConditionExpressionParser.parse = parse  # type: ignore[method-assign]


def _reparsed(parser: Any, condition: str | None, parse: Parse) -> Any:
    from moto.dynamodb.comparisons import ConditionExpressionParser

    parse(parser)  # the names and values as sent, which moto checks
    other = ConditionExpressionParser(condition, parser.expression_attribute_names, parser.expression_attribute_values)
    return parse(other)


@contextmanager
def _clause_removed(mutant: clauses.ClauseMutant) -> Iterator[None]:
    def evaluated(parser: Any, parse: Parse) -> Any:
        if parser.condition_expression != mutant.site:
            return parse(parser)
        return _reparsed(parser, mutant.condition, parse)

    with _moto_conditions(evaluated):
        yield


class _Compared:
    """A condition moto evaluates, noting each clause mutant that would have let a refused write land."""

    def __init__(self, op: Any, weakened: list[tuple[clauses.ClauseMutant, Any]], hit: set[Any]) -> None:
        self.op, self.weakened, self.hit = op, weakened, hit

    def expr(self, item: Any) -> bool:
        landed: bool = self.op.expr(item)
        if not landed:
            self.hit.update(mutant for mutant, op in self.weakened if op.expr(item))
        return landed


@contextmanager
def _clauses_recorded(sites: list[str]) -> Iterator[set[Any]]:
    hit: set[Any] = set()
    chosen = clauses.mutants(sites)

    def evaluated(parser: Any, parse: Parse) -> Any:
        op = parse(parser)
        of_site = [mutant for mutant in chosen if mutant.site == parser.condition_expression]
        if not of_site:
            return op
        weakened = [(mutant, _reparsed(parser, mutant.condition, parse)) for mutant in of_site]
        return _Compared(op, weakened, hit)

    with _moto_conditions(evaluated):
        yield hit


TIMEOUT_S = 1800
"""A judge pass still running after this long is ended, and its mutant reported: its tests do not finish."""


def _pytest(arguments: Sequence[str], environment: dict[str, str], root: Path, timeout_s: float | None = None) -> int:
    """pytest's exit code (0: every test passed)."""
    command = [sys.executable, "-m", "pytest", "-p", __name__, "-p", "no:cacheprovider", "-q", "-o", "addopts="]
    return subprocess.run(  # this interpreter's pytest, on the repository's own tests
        [*command, *arguments],
        cwd=root,
        env={**os.environ, **environment},
        capture_output=True,
        check=False,
        timeout=timeout_s,
    ).returncode


def reach(root: Path, paths: Sequence[str] = TESTS, sites: Sequence[str] = ()) -> dict[str, list[str]]:
    """For each row and guard mutant, and each clause mutant of `sites`, the tests of `paths` (under the
    repository `root`) that take its change, in the order they ran."""
    with tempfile.TemporaryDirectory() as scratch:
        found = Path(scratch) / "reach.json"
        _pytest(list(paths), {_REACH: str(found), _SITES: json.dumps(list(sites))}, root)
        if not found.exists():
            raise RuntimeError(f"the tests' reach pass under {root} wrote nothing: run pytest {' '.join(paths)}")
        reached: dict[str, list[str]] = json.loads(found.read_text())
        return reached


def judge(mutant: Mutant, tests: Sequence[str], root: Path) -> str | None:
    """The first of `tests` that fails under `mutant` and passes without it, or None.

    Some of the moto tests wait on real time, so a failure is run again unmutated: a test that fails either
    way reports nothing about the mutant."""
    if not tests:
        return None
    with tempfile.TemporaryDirectory() as scratch:
        failed = Path(scratch) / "failed"
        try:
            _pytest(["-x", *tests], {_MUTANT: _encoded(mutant), _FAILED: str(failed)}, root, TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return f"{len(tests)} tests, not finished within {TIMEOUT_S} s"
        if not failed.exists():
            return None
        test = failed.read_text()
        return test if _pytest([test], {}, root) == 0 else None


# The plugin: each pass's half, in the pytest process.

_STACK = ExitStack()
_SEEN: dict[str, set[Any]] = {}
_REACHED: dict[str, list[str]] = {}


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get(_REACH):
        _SEEN["rows"] = _STACK.enter_context(rows.recording())
        _SEEN["guards"] = _STACK.enter_context(guards.recording())
        _SEEN["clauses"] = _STACK.enter_context(_clauses_recorded(json.loads(os.environ.get(_SITES) or "[]")))
    elif encoded := os.environ.get(_MUTANT):
        mutant = _decoded(encoded)
        if isinstance(mutant, clauses.ClauseMutant):
            _STACK.enter_context(_clause_removed(mutant))
        else:
            _STACK.enter_context(mutant.active())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    """In the reach pass, the mutants whose change this test takes (its fixtures included)."""
    for seen in _SEEN.values():
        seen.clear()
    outcome = yield
    if _SEEN:
        hit: list[Mutant] = [*rows.reached(_SEEN["rows"])]
        hit += guards.reached(_SEEN["guards"])
        hit += _SEEN["clauses"]
        for mutant in hit:
            _REACHED.setdefault(mutant.name, []).append(item.nodeid)
    return outcome


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    failed = os.environ.get(_FAILED)
    if failed and report.failed and not Path(failed).exists():
        Path(failed).write_text(report.nodeid)


def pytest_unconfigure(config: pytest.Config) -> None:
    _STACK.close()
    if path := os.environ.get(_REACH):
        Path(path).write_text(json.dumps(_REACHED))
