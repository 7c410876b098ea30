"""Mutants of the protocol, and whether the project's tests or the default campaign report each one.

Three kinds: a clause removed from a condition the processor's writes carry (`clauses`), a row of the
receiver's decision giving another action it could plausibly take (`rows`), and a renewal or release
guard forced true or false (`guards`). Two judges, each in two passes: the project's unit and moto tests
(`named`: the tests that take a mutant's change, run under it), then the default campaign for what the tests
let through (`run.reach` finds the seeds where each mutant's change is taken; `run.judge` runs them under the
mutant until its first failure), with a probe (`probes`) for a race the campaign does not make. A mutant no
judge reports is a gap of the harness, or an equivalent mutant, whose argument `equivalent.ARGUED` gives.

Run from the repository root (not part of CI: each reach pass runs every test, or a whole campaign):
`python -m longjobs.sim.mutation [--seeds 1000] [--kind clauses|rows|guards ...] [--judge tests|campaign ...]
[--only TEXT ...] [--json]`.
"""

from longjobs.sim.mutation import clauses, guards, rows
from longjobs.sim.mutation.clauses import ClauseMutant
from longjobs.sim.mutation.guards import GuardMutant
from longjobs.sim.mutation.rows import RowMutant
from longjobs.sim.mutation.run import Mutant, Verdict, judge, reach

__all__ = [
    "ClauseMutant",
    "GuardMutant",
    "Mutant",
    "RowMutant",
    "Verdict",
    "clauses",
    "guards",
    "judge",
    "reach",
    "rows",
]
