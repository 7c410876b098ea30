"""Mutants of the protocol, and whether the default campaign reports each one.

Three kinds: a clause removed from a condition the processor's writes carry (`clauses`), a row of the
receiver's decision giving another action it could plausibly take (`rows`), and a renewal or release
guard forced true or false (`guards`). `run.reach` finds the seeds
where each mutant's change is taken; `run.judge` runs the campaign there under the mutant until its first
failure. A mutant no seed reports is a gap of the harness, or an equivalent mutant, whose argument
`equivalent.ARGUED` gives.

Run from the repository root (not part of CI: the reach pass is a whole campaign):
`python -m longjobs.sim.mutation [--seeds 1000] [--kind clauses|rows|guards ...] [--only TEXT] [--json]`.
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
