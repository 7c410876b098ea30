"""Where each mutant can be seen (`reach`), and whether the default campaign reports it there (`judge`).

A mutant changes a run only where its change is taken: a clause that alone refused a write, a row the
decision returned, a guard that had the other value. `reach` runs the campaign's seeds once, unmutated,
and records for each mutant the seeds where that happens; every other seed runs exactly as without the
mutant, so it passes. `judge` then runs only those seeds under the mutant, in order, on a pool of
processes, until the first failure: a killed mutant costs a chunk or two, and one no seed reaches
costs nothing.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from longjobs.sim.mutation import clauses, guards, rows

__all__ = ["CHUNK", "Mutant", "Verdict", "judge", "reach"]

Mutant = clauses.ClauseMutant | rows.RowMutant | guards.GuardMutant

CHUNK = 10
"""Seeds a worker runs before the campaign looks for a failure (a killed mutant costs a chunk or two)."""


@dataclass(frozen=True)
class Verdict:
    mutant: str
    change: str
    reached: int
    """Seeds where the change was taken: the only ones that can report the mutant."""
    killed: bool
    seed: int | None
    property: str | None
    seeds_run: int
    wall_s: float
    tests_reached: int = 0
    """The project's tests that take the change (`named.reach`): 0 when they were not asked."""


def _pool(workers: int, mutant: Mutant | None) -> ProcessPoolExecutor:
    from longjobs.sim.campaign import deployed_workflow

    context = multiprocessing.get_context("spawn")  # no fork of a process that ran the CDK's node
    return ProcessPoolExecutor(workers, mp_context=context, initializer=_use, initargs=(deployed_workflow(), mutant))


_MUTANT: Mutant | None = None


def _use(workflow: Any, mutant: Mutant | None) -> None:
    from longjobs.sim import campaign

    global _MUTANT
    _MUTANT = mutant
    campaign._use(workflow)


def reach(conditions: Sequence[clauses.ClauseMutant], seeds: int, workers: int) -> dict[Mutant, list[int]]:
    """For each clause mutant of `conditions` and each row and guard mutant, the seeds (of the first `seeds`)
    where its change is taken, in order."""
    chunks = [range(start, min(start + CHUNK, seeds)) for start in range(0, seeds, CHUNK)]
    every: list[Mutant] = [*conditions, *rows.mutants(), *guards.mutants()]
    found: dict[Mutant, list[int]] = {mutant: [] for mutant in every}
    with _pool(workers, None) as pool:
        for chunk in pool.map(_reached, [(list(conditions), chunk) for chunk in chunks]):
            for mutant, seed_list in chunk.items():
                found[mutant].extend(seed_list)
    return found


def _reached(job: tuple[list[clauses.ClauseMutant], range]) -> dict[Mutant, list[int]]:
    from longjobs.sim.campaign import run_seed

    conditions, seeds = job
    found: dict[Mutant, list[int]] = {}
    with ExitStack() as stack:
        refused = stack.enter_context(clauses.recording(conditions))
        taken = stack.enter_context(rows.recording())
        tested = stack.enter_context(guards.recording())
        for seed in seeds:
            run_seed(seed, keep_calls=False)
            hit: list[Mutant] = [
                *refused,
                *rows.reached(taken),
                *guards.reached(tested),
            ]
            for mutant in hit:
                found.setdefault(mutant, []).append(seed)
            for seen in (refused, taken, tested):
                seen.clear()
    return found


def _run(seeds: list[int]) -> tuple[int, int | None, str | None]:
    """Seeds run under this worker's mutant, until the first failure: (seeds run, failed seed, property)."""
    from longjobs.sim.campaign import run_seed

    assert _MUTANT is not None
    with _MUTANT.active():
        for number, seed in enumerate(seeds, 1):
            result = run_seed(seed, keep_calls=False)
            if result.violation is not None:
                return number, seed, result.violation.property
    return len(seeds), None, None


def judge(mutant: Mutant, seeds: list[int], workers: int) -> Verdict:
    """Run the campaign's `seeds` under `mutant`, in order, until its first failed seed."""
    began = time.monotonic()
    chunks = [seeds[start : start + CHUNK] for start in range(0, len(seeds), CHUNK)]
    run, found = 0, None
    if chunks:
        with _pool(workers, mutant) as pool:
            for start in range(0, len(chunks), workers):
                for done, seed, prop in pool.map(_run, chunks[start : start + workers]):
                    run += done
                    if seed is not None and (found is None or seed < found[0]):
                        found = (seed, prop)
                if found is not None:
                    break
    return Verdict(
        mutant.name,
        mutant.change,
        len(seeds),
        found is not None,
        found[0] if found else None,
        found[1] if found else None,
        run,
        round(time.monotonic() - began, 1),
    )
