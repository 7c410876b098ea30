"""Mutants of the protocol's conditional writes, and whether the default campaign reports each one.

A mutant removes one clause of one condition the processor's writes carry (the lease, the job lock, the
slots, the markers, the workflow's own), the top-level `AND` clauses in turn; a condition of one clause
is removed whole. The conditions are those the campaign's first seeds are seen to use: each distinct
expression text is a site, so a new condition is a new set of mutants without a list to keep.

The simulated DynamoDB evaluates every condition in one place (`FakeDynamoDb._check`); a mutant rewrites
the expression there, after the request's placeholders were validated as sent. Each mutant runs the
default campaign (the `mixed` profile) until its first failed seed, which kills it, or until `--seeds`
seeds passed, which leaves it standing: a weakening no seed notices is a gap of the harness, or an
equivalent mutant whose argument docs/simulation.md must give.

Generic mutation tools change operators in Python code; these mutants are the protocol's own clauses,
which live in expression strings no such tool reads.

Run from the repository root (not part of CI: each surviving mutant costs a whole campaign):
`python -m longjobs.sim.mutation [--seeds 1000] [--discover 40] [--only TEXT] [--json]`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from longjobs.sim.aws.dynamodb import FakeDynamoDb

__all__ = ["Mutant", "Verdict", "applied", "clauses", "discover", "judge", "main", "mutants"]

CHUNK = 10
"""Seeds a worker runs before the campaign looks for a failure (a killed mutant costs a chunk or two)."""


def clauses(condition: str) -> list[str]:
    """The top-level `AND` clauses of a condition expression (parentheses and `BETWEEN x AND y` kept whole)."""
    parts: list[str] = []
    depth, start, index, between = 0, 0, 0, False
    upper = condition.upper()
    while index < len(condition):
        char = condition[index]
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif depth == 0 and upper.startswith(" BETWEEN ", index):
            between = True
        elif depth == 0 and upper.startswith(" AND ", index):
            if between:
                between = False
            else:
                parts.append(condition[start:index].strip())
                start = index + len(" AND ")
                index = start
                continue
        index += 1
    parts.append(condition[start:].strip())
    return [part for part in parts if part]


@dataclass(frozen=True)
class Mutant:
    """One clause (`index`) removed from the condition `site` (its text, as the processor sends it)."""

    site: str
    index: int

    @property
    def name(self) -> str:
        digest = hashlib.sha256(self.site.encode()).hexdigest()[:8]
        return f"clause:{digest}:{self.index}"

    @property
    def removed(self) -> str:
        return clauses(self.site)[self.index]

    @property
    def condition(self) -> str | None:
        """The condition with the clause removed; None when it was the only one (the write is unconditional)."""
        kept = [clause for number, clause in enumerate(clauses(self.site)) if number != self.index]
        return " AND ".join(kept) if kept else None


@dataclass(frozen=True)
class Verdict:
    mutant: str
    site: str
    removed: str
    killed: bool
    seed: int | None
    property: str | None
    seeds_run: int
    wall_s: float


@contextmanager
def _checking(rewrite: Callable[[dict[str, Any]], dict[str, Any]]) -> Iterator[None]:
    """Every condition the simulated DynamoDB evaluates passes through `rewrite` first, until the block ends."""
    check = FakeDynamoDb._check

    def rewritten(self: FakeDynamoDb, operation: str, item: Any, request: Any) -> bool:
        return check(self, operation, item, rewrite(request))

    FakeDynamoDb._check = rewritten  # type: ignore[method-assign]
    try:
        yield
    finally:
        FakeDynamoDb._check = check  # type: ignore[method-assign]


@contextmanager
def applied(mutant: Mutant | None) -> Iterator[None]:
    """The mutant's condition in place of its site's, in this process, until the block ends."""
    if mutant is None:
        yield
        return

    def weakened(request: dict[str, Any]) -> dict[str, Any]:
        if request.get("ConditionExpression") != mutant.site:
            return request
        return {**request, "ConditionExpression": mutant.condition}

    with _checking(weakened):
        yield


def discover(seeds: int) -> list[str]:
    """The distinct conditions the first `seeds` seeds of the campaign evaluate, most used first."""
    from longjobs.sim.campaign import run_seed

    seen: dict[str, int] = {}

    def noted(request: dict[str, Any]) -> dict[str, Any]:
        condition = request.get("ConditionExpression")
        if condition:
            seen[condition] = seen.get(condition, 0) + 1
        return request

    with _checking(noted):
        for seed in range(seeds):
            run_seed(seed, keep_calls=False)
    return sorted(seen, key=lambda condition: (-seen[condition], condition))


def mutants(sites: list[str]) -> list[Mutant]:
    return [Mutant(site, index) for site in sites for index in range(len(clauses(site)))]


_MUTANT: Mutant | None = None


def _use(workflow: Any, mutant: Mutant) -> None:
    from longjobs.sim import campaign

    global _MUTANT
    _MUTANT = mutant
    campaign._use(workflow)


def _run(seeds: range) -> tuple[int, int | None, str | None]:
    """Seeds run under this worker's mutant, until the first failure: (seeds run, failed seed, property)."""
    from longjobs.sim.campaign import run_seed

    with applied(_MUTANT):
        for number, seed in enumerate(seeds, 1):
            result = run_seed(seed, keep_calls=False)
            if result.violation is not None:
                return number, seed, result.violation.property
    return len(seeds), None, None


def judge(mutant: Mutant, seeds: int, workers: int) -> Verdict:
    """Run the campaign under `mutant` until its first failed seed or `seeds` seeds."""
    from longjobs.sim.campaign import deployed_workflow

    began = time.monotonic()
    chunks = [range(start, min(start + CHUNK, seeds)) for start in range(0, seeds, CHUNK)]
    context = multiprocessing.get_context("spawn")  # no fork of a process that ran the CDK's node
    run, found = 0, None
    with ProcessPoolExecutor(
        workers, mp_context=context, initializer=_use, initargs=(deployed_workflow(), mutant)
    ) as pool:
        for start in range(0, len(chunks), workers):
            for done, seed, prop in pool.map(_run, chunks[start : start + workers]):
                run += done
                if seed is not None and (found is None or seed < found[0]):
                    found = (seed, prop)
            if found is not None:
                break
    return Verdict(
        mutant.name,
        mutant.site,
        mutant.removed,
        found is not None,
        found[0] if found else None,
        found[1] if found else None,
        run,
        round(time.monotonic() - began, 1),
    )


def _table(verdicts: list[Verdict], print_: Callable[[Any], None]) -> None:
    from rich.table import Table

    table = Table(title="Mutants of the conditional writes")
    for column in ("mutant", "clause removed", "verdict", "seeds", "wall s"):
        table.add_column(column)
    for verdict in verdicts:
        outcome = f"killed: {verdict.property} (seed {verdict.seed})" if verdict.killed else "survived"
        table.add_row(verdict.mutant, verdict.removed, outcome, str(verdict.seeds_run), f"{verdict.wall_s:g}")
    print_(table)
    killed = sum(1 for verdict in verdicts if verdict.killed)
    print_(f"killed {killed} of {len(verdicts)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m longjobs.sim.mutation", description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1000, help="seeds per mutant at most (default 1000)")
    parser.add_argument("--discover", type=int, default=40, help="seeds read for the conditions (default 40)")
    parser.add_argument("--only", help="only the sites whose text contains this")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.discover < 1 or args.workers < 1:
        parser.error("--seeds, --discover and --workers take a number of at least 1")
    began = time.monotonic()
    sites = [site for site in discover(args.discover) if args.only is None or args.only in site]
    if not sites:
        parser.error(f"no condition the first {args.discover} seeds evaluate contains {args.only!r}")
    verdicts = []
    for mutant in mutants(sites):
        verdicts.append(judge(mutant, args.seeds, args.workers))
        done = verdicts[-1]
        outcome = f"killed by {done.property} at seed {done.seed}" if done.killed else f"stood {done.seeds_run} seeds"
        print(f"{done.mutant} ({done.removed}): {outcome}", file=sys.stderr)  # progress: a run takes minutes
    wall_s = round(time.monotonic() - began, 1)
    if args.json:
        report = {"sites": len(sites), "verdicts": [asdict(v) for v in verdicts], "wall_s": wall_s}
        print(json.dumps(report, indent=1))
    else:
        from rich.console import Console

        console = Console()
        _table(verdicts, console.print)
        console.print(f"{len(sites)} conditions, {wall_s:g} s")
    return 0 if all(verdict.killed for verdict in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
