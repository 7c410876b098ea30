"""The mutants argued equivalent: a change no run can tell from the protocol, with the argument why.

Two facts carry most arguments, each held by a test:

- The version fences a lease: every write that changes a lease raises its version, but the two notes
  (`last_error`, `checked_at`), which change nothing any condition reads (tests/sim/test_version_fence.py).
  So a condition that pins the version read also pins every attribute read with it, and a clause that
  compares one of those to its value as read can refuse nothing the version clause let through.
- A receipt handle is one receive's, and an attempt's execution is named by its message and the receive
  count that began it (`execution_name`); a receive that adopts an execution keeps its name. So a lease
  that names a given handle names one execution, whenever it is read.
"""

from __future__ import annotations

from longjobs.sim.mutation.clauses import ClauseMutant
from longjobs.sim.mutation.guards import GuardMutant
from longjobs.sim.mutation.rows import RowMutant

__all__ = ["ARGUED", "argument", "key"]

_FENCED = "the version clause pins the lease as read, and this clause compares it to its value as read"
_HANDLED = (
    "the handle names one receive, and a lease that names that handle names one execution: its own "
    "attempt's, or the one its receive adopted"
)

_LOGGED = "the test chooses only what is logged: what the function writes, asks and returns is the same"

ARGUED: dict[str, str] = {
    # the renewal, and a marker or DLQ record written over a lease as read
    "version = :version AND #status = :status | without #status = :status": _FENCED,
    # a copy noted on its marker
    "version = :version AND #status = :marker | without #status = :marker": _FENCED,
    # a close, a note of an error, a belief made due now, a lease checked unchanged in a transaction: each
    # writes a lease its caller read ACTIVE
    "version = :version AND #status = :active | without #status = :active": _FENCED,
    # a WAITING lease admitted on its own receive (`admit_request` checks the count is the WAITING one's)
    "version = :version AND #status = :waiting AND receive_count = :rc | without #status = :waiting": _FENCED,
    "version = :version AND #status = :waiting AND receive_count = :rc | without receive_count = :rc": _FENCED,
    "version = :version AND #status = :waiting AND receive_count = :rc | without version = :version": (
        "a WAITING lease is written once for its receive: every later write of the message's lease changes its "
        "status (admitted ACTIVE, a cancel's mark) or its receive count (a newer receive's lease), and no write "
        "keeps a lease WAITING (the extender renews ACTIVE and CANCELLED leases), so the status and the count "
        "pin the version"
    ),
    # a closed lease's status amended, and a cancel's mark
    "version = :version AND #status = :old | without #status = :old": _FENCED,
    # a new attempt over a closed lease: the status is the one read, and the decision begins an attempt over
    # a lease only from a newer receive (an older one is STALE, the same count never begins one)
    "version = :version AND #status = :status AND receive_count < :rc | without #status = :status": _FENCED,
    "version = :version AND #status = :status AND receive_count < :rc | without receive_count < :rc": (
        _FENCED + "; the decision replaces a lease only from a newer receive than the one read"
    ),
    # a newer receive adopted: ACTIVE as read, and the decision adopts only a newer count, or the same count
    # with another handle
    "#status = :active AND version = :version AND (receive_count < :rc OR (receive_count = :rc AND "
    "receipt_handle <> :handle)) | without #status = :active": _FENCED,
    "#status = :active AND version = :version AND (receive_count < :rc OR (receive_count = :rc AND "
    "receipt_handle <> :handle)) | without (receive_count < :rc OR (receive_count = :rc AND receipt_handle "
    "<> :handle))": _FENCED + "; the decision adopts only a newer count, or the same count with another handle",
    # the workflow's success and failure closes, conditional on the handle it read
    "#execution = :self AND #handle = :handle AND #status <> :succeeded AND #status <> :cancelled | without "
    "#execution = :self": _HANDLED,
    "#execution = :self AND #handle = :handle AND #status = :active | without #execution = :self": _HANDLED,
    "#execution = :self AND #handle = :handle AND #status <> :succeeded AND #status <> :cancelled | without "
    "#status <> :succeeded": (
        "SUCCEEDED is final (`create_request` refuses to replace it, and every other write is conditional on "
        "another status), and only closes of this execution write it (reconciliation's, once the execution "
        "ended): the clause refuses only this close's own retry (its first write landed, its answer lost), "
        "which would write the same status and result again, and a version no writer of a SUCCEEDED lease holds"
    ),
    # reconciliation's note of a lease looked at
    "#status = :active AND attribute_exists(#shard) | without #status = :active": (
        "`checked_at` only orders reconciliation's index; a lease that is not ACTIVE yet has a shard is a "
        "cancelled one kept hidden, which reconciliation reads and passes over, so the note moves it in an "
        "order nothing else reads"
    ),
    "#status = :active AND attribute_exists(#shard) | without attribute_exists(#shard)": (
        "every ACTIVE lease has a shard (the codec writes one; only a close removes it), so the clause is "
        "implied by the status"
    ),
    # the extender's end of the leases it can no longer hold
    "longjobs.engine.extender.service:_end_unholdable #0: (not leases) -> False": (
        "with no leases, the pass maps its end over nothing and adds zero to each count: the early return "
        "only saves the calls"
    ),
    "longjobs.engine.extender.service:_end_unholdable #8: (status is LeaseStatus.LOST) -> True": (
        "every caller ends leases CAPPED or LOST (`renew_due`, `_renew`, `_capped`, `_lost`), and the test "
        "is reached only when the status is not CAPPED"
    ),
    "longjobs.engine.extender.service:_settle_ended_instead #0: (not lease.execution_arn or ext.stepfunctions "
    "is None) -> False": (
        "a lease without an execution is described as never started (`execution_status`), which returns None "
        "as the test does; with no client, the describe raises and the lease is left due, as the stop that "
        "the caller would try instead raises `SettleError` for want of a client and leaves it due"
    ),
    "longjobs.engine.settle:release_holds #0: (not lease.execution_arn) -> False": (
        "a lease's holds are taken in its execution's name (`take_holds`), and a lease without one has no "
        "execution to name: each release, conditional on its `:arn` being the holder, asks for a holder that "
        "is no string (`{'S': None}`), which boto3 refuses before sending and any holder fails; the release "
        "returns False, as the test does, having logged the refusal"
    ),
    # the settlement's tests that choose only a log line
    "longjobs.engine.settle:reassert_release #2: (not outcome.ok) -> True": _LOGGED,
    "longjobs.engine.settle:reassert_release #2: (not outcome.ok) -> False": _LOGGED,
    "longjobs.engine.settle:stop_and_close #2: (existed) -> True": _LOGGED,
    "longjobs.engine.settle:stop_and_close #2: (existed) -> False": _LOGGED,
    "longjobs.engine.settle:stop_and_close #1: (stepfunctions is None) -> False": (
        "with no client the stop's call raises, and the lines after it turn any exception of the stop into the "
        "same `SettleError`"
    ),
    "longjobs.engine.settle:stop_and_close #3: (closed is None and lease.execution_arn) -> True": (
        "after a close that landed, its transaction has freed the lock and slot; freeing them again is "
        "conditional on the execution still holding them, so it is refused and changes nothing"
    ),
}
"""The argument of each equivalent mutant, by `key`."""


def key(mutant: ClauseMutant | RowMutant | GuardMutant) -> str:
    """A mutant's name for its argument: the condition and its clause, the row's function, return and
    replacement, or the guard's function, test and value (stable while the code they name is)."""
    if isinstance(mutant, ClauseMutant):
        return f"{mutant.site} | without {mutant.removed}"
    if isinstance(mutant, GuardMutant):
        return f"{mutant.guard.target} #{mutant.guard.index}: ({mutant.guard.test}) -> {mutant.forced}"
    return f"{mutant.row.function} #{mutant.row.index}: {mutant.row.returns} -> {mutant.replacement}"


def argument(mutant: ClauseMutant | RowMutant | GuardMutant) -> str | None:
    return ARGUED.get(key(mutant))
