"""Mutants of the protocol's conditional writes: one clause of one condition removed.

A mutant removes one top-level `AND` clause of one condition the processor's writes carry (the lease, the
job lock, the slots, the markers, the workflow's own); a condition of one clause is removed whole. The
conditions are those the campaign's first seeds are seen to send: each distinct expression text is a site,
so a new condition brings its mutants without a list to keep.

The simulated DynamoDB evaluates every condition in one place (`FakeDynamoDb._check`); a mutant rewrites
the expression there, after the request's placeholders were validated as sent. Generic mutation tools
change operators in Python code; these clauses live in expression strings no such tool reads.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from longjobs.sim.aws.dynamodb import FakeDynamoDb

__all__ = ["ClauseMutant", "clauses", "discover", "mutants", "recording"]

Check = Callable[[dict[str, Any]], bool]
"""A condition check bound to one write's item: the request in, whether the write may land out."""


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
class ClauseMutant:
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
    def change(self) -> str:
        return f"without {self.removed}"

    @property
    def condition(self) -> str | None:
        """The condition with the clause removed; None when it was the only one (the write is unconditional)."""
        kept = [clause for number, clause in enumerate(clauses(self.site)) if number != self.index]
        return " AND ".join(kept) if kept else None

    @contextmanager
    def active(self) -> Iterator[None]:
        """The mutant's condition in place of its site's, in this process, until the block ends."""

        def weakened(check: Check, request: dict[str, Any]) -> bool:
            if request.get("ConditionExpression") != self.site:
                return check(request)
            return check({**request, "ConditionExpression": self.condition})

        with _checking(weakened):
            yield


@contextmanager
def _checking(decide: Callable[[Check, dict[str, Any]], bool]) -> Iterator[None]:
    """Every condition the simulated DynamoDB evaluates is decided by `decide` (given the real check, bound to
    the write's item, and the request), until the block ends."""
    check = FakeDynamoDb._check

    def rewritten(self: FakeDynamoDb, operation: str, item: Any, request: Any) -> bool:
        return decide(lambda sent: check(self, operation, item, sent), request)

    FakeDynamoDb._check = rewritten  # type: ignore[method-assign]
    try:
        yield
    finally:
        FakeDynamoDb._check = check  # type: ignore[method-assign]


def discover(seeds: int) -> list[str]:
    """The distinct conditions the first `seeds` seeds of the campaign evaluate, most used first."""
    from longjobs.sim.campaign import run_seed

    seen: dict[str, int] = {}

    def noted(check: Check, request: dict[str, Any]) -> bool:
        condition = request.get("ConditionExpression")
        if condition:
            seen[condition] = seen.get(condition, 0) + 1
        return check(request)

    with _checking(noted):
        for seed in range(seeds):
            run_seed(seed, keep_calls=False)
    return sorted(seen, key=lambda condition: (-seen[condition], condition))


def mutants(sites: list[str]) -> list[ClauseMutant]:
    return [ClauseMutant(site, index) for site in sites for index in range(len(clauses(site)))]


@contextmanager
def recording(chosen: list[ClauseMutant]) -> Iterator[set[ClauseMutant]]:
    """The mutants of `chosen` whose clause alone refused a write while the block runs (the set fills as
    writes are checked; the caller may empty it between seeds).

    Removing an `AND` clause only lets more writes land, so a run where the clause never refused a write
    the rest of its condition let land runs exactly as without the mutant."""
    by_site: dict[str, list[ClauseMutant]] = {}
    for mutant in chosen:
        by_site.setdefault(mutant.site, []).append(mutant)
    hit: set[ClauseMutant] = set()

    def compared(check: Check, request: dict[str, Any]) -> bool:
        landed = check(request)
        if not landed:
            for mutant in by_site.get(request.get("ConditionExpression") or "", ()):
                if mutant not in hit and check({**request, "ConditionExpression": mutant.condition}):
                    hit.add(mutant)
        return landed

    with _checking(compared):
        yield hit
