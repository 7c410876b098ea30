"""The project's own tests as a judge of rows and guards: the tests that reach a mutant, run under it.

Some mutants change what the processor costs or reports, not what it promises: a renewal sent before it is
due, a pass's report that counts a lease under another heading. The campaign judges promises, so it lets
them through; the extender's, the receiver's and the policies' own tests check those figures. This module
runs them as the campaign is run, in two passes of pytest in a process of its own:

- `reach` runs the tests once, unmutated, with every row and guard recorded (the same recorders as the
  campaign's reach pass), and lists for each mutant the tests where its change is taken.
- `judge` runs those tests under the mutant, stopping at the first failure, and names it.

A test that does not take a mutant's change runs as without it, so it cannot report it. Only what runs in
pytest's own process is recorded: a program a test starts runs the protocol unmutated. Clause mutants are
not judged here: they weaken the simulated table's conditions, and the tests' table is moto.

The module is also the pytest plugin both passes load (`-p longjobs.sim.mutation.named`); it acts only
when one of its environment variables is set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Generator, Sequence
from contextlib import ExitStack
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from longjobs.sim.mutation import guards, rows

__all__ = ["TESTS", "judge", "reach"]

TESTS = ("tests/unit", "tests/functional")
"""The tests that may judge a mutant: the pure ones and the moto ones (each runs the engine in its process).
The simulation's own tests are the campaign's seeds by another door; its mutation tests compare a run with
and without a mutant, which a mutant active around them would confuse."""

_REACH = "LONGJOBS_MUTATION_REACH"
"""A file: the reach pass writes `{mutant name: [test ids]}` to it."""
_MUTANT = "LONGJOBS_MUTATION_MUTANT"
"""A mutant's name: the judge pass runs its tests under it."""
_FAILED = "LONGJOBS_MUTATION_FAILED"
"""A file: the judge pass writes the id of the first test that failed under its mutant to it."""

Mutant = rows.RowMutant | guards.GuardMutant


def mutants() -> dict[str, Mutant]:
    """The row and guard mutants by name."""
    every: list[Mutant] = [*rows.mutants(), *guards.mutants()]
    return {mutant.name: mutant for mutant in every}


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


def reach(root: Path, paths: Sequence[str] = TESTS) -> dict[str, list[str]]:
    """For each row and guard mutant, the tests of `paths` (under the repository `root`) that take its change,
    in the order they ran."""
    with tempfile.TemporaryDirectory() as scratch:
        found = Path(scratch) / "reach.json"
        _pytest(list(paths), {_REACH: str(found)}, root)
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
            _pytest(["-x", *tests], {_MUTANT: mutant.name, _FAILED: str(failed)}, root, TIMEOUT_S)
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
    elif name := os.environ.get(_MUTANT):
        _STACK.enter_context(mutants()[name].active())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    """In the reach pass, the mutants whose change this test takes (its fixtures included)."""
    for seen in _SEEN.values():
        seen.clear()
    outcome = yield
    if _SEEN:
        hit: list[Mutant] = [mutant for row in _SEEN["rows"] for mutant in _of_row()[row]]
        # a guard forced to a value changes a test only where it had the other value
        hit += [guards.GuardMutant(guard, not value) for guard, value in _SEEN["guards"]]
        for mutant in hit:
            _REACHED.setdefault(mutant.name, []).append(item.nodeid)
    return outcome


@cache
def _of_row() -> dict[rows.Row, list[rows.RowMutant]]:
    found: dict[rows.Row, list[rows.RowMutant]] = {}
    for mutant in rows.mutants():
        found.setdefault(mutant.row, []).append(mutant)
    return found


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    failed = os.environ.get(_FAILED)
    if failed and report.failed and not Path(failed).exists():
        Path(failed).write_text(report.nodeid)


def pytest_unconfigure(config: pytest.Config) -> None:
    _STACK.close()
    if path := os.environ.get(_REACH):
        Path(path).write_text(json.dumps(_REACHED))
