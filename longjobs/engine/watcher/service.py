"""Settle the lease of an execution that ended without reaching the workflow's own failure path, and
give the slot its end freed to the longest-waiting message of its type.

Idempotent by construction: only an ACTIVE lease whose execution is the one in the event is
released, so a late or duplicate event (or one for an attempt that was replaced) changes nothing.
Admission is a pass over the type's free slots (`longjobs.engine.admission.admit.admit_type`): a late or
duplicate event finds no free slot, or admits what the extender's next pass would have.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from longjobs.engine.clock import Clock
from longjobs.engine.execution import parse_execution_name
from longjobs.engine.lease import LeaseStatus, LeaseStore
from longjobs.engine.lease.lock import Hold
from longjobs.engine.observability import logger
from longjobs.engine.settle import describe_reason, release, release_holds
from longjobs.engine.visibility import VisibilityClient
from longjobs.engine.watcher.models import ENDED, ENDED_UNSUCCESSFULLY, ExecutionStatusChange


class WatchOutcome(StrEnum):
    RELEASED = "released"
    UNCHANGED = "unchanged"  # not ours, not an unsuccessful end, or the lease moved on
    LOST = "lost"  # SQS no longer accepts the lease's handle


@dataclass
class Watcher:
    store: LeaseStore
    visibility: VisibilityClient
    clock: Clock
    state_machine_arn: str
    admit: Callable[[str, Hold | None], object] | None = None
    """Admission's pass over one job type's free slots, given the slot the end freed when the event names
    it (else the pass reads them all); None where no type is limited."""


RELEASE_ATTEMPTS = 3
"""How many times the watcher reads the lease again when its release lost a race (an ordinary renewal
bumps the version): the lease still ACTIVE and naming the execution, it is released then."""


def on_status_change(watcher: Watcher, change: ExecutionStatusChange) -> WatchOutcome:
    """Release the message of an execution that FAILED, TIMED_OUT or was ABORTED, when the lease is ACTIVE
    and names that very execution (the attempt that owns it). A DynamoDB error raises: EventBridge
    retries the invocation, and reconciliation settles the lease if every retry fails. Then, for any end
    (SUCCEEDED too), admit waiting messages of the execution's type into the slots it freed: a success's
    type is taken from the event's input when it carries it, without reading the lease."""
    if change.stateMachineArn != watcher.state_machine_arn or change.status not in ENDED:
        return WatchOutcome.UNCHANGED
    parsed = parse_execution_name(change.name)
    if parsed is None:
        return WatchOutcome.UNCHANGED
    if change.status not in ENDED_UNSUCCESSFULLY and change.job_type() is not None:
        # A success releases nothing here (the workflow did): its type, for admission, is in the event.
        _admit(watcher, str(change.job_type()), change.freed_slot())
        return WatchOutcome.UNCHANGED
    outcome = WatchOutcome.UNCHANGED
    for _ in range(RELEASE_ATTEMPTS):  # a renewal that lands between the read and the release: read again
        lease = watcher.store.get(parsed[0])
        if not (
            change.status in ENDED_UNSUCCESSFULLY
            and lease is not None
            and lease.active
            and lease.execution_arn == change.executionArn
        ):
            break
        reason = describe_reason(change.status, change.error, change.cause)
        settled = release(lease, store=watcher.store, visibility=watcher.visibility, clock=watcher.clock, reason=reason)
        if settled is not None:
            outcome = WatchOutcome.RELEASED if settled.status is LeaseStatus.RELEASED else WatchOutcome.LOST
            break
    if lease is not None and not lease.active and lease.execution_arn == change.executionArn:
        # Closed, by this execution's own path, before it failed to free its holds (its MarkSucceeded
        # landed, then every read after it failed): no redelivery comes to free them, nor reconciliation
        # (a closed lease is not in its index). Each release is conditional on this execution.
        release_holds(lease, store=watcher.store, clock=watcher.clock)
    if lease is not None and lease.job_type:
        _admit(watcher, lease.job_type, change.freed_slot())
    return outcome


def _admit(watcher: Watcher, job_type: str, freed: Hold | None) -> None:
    """Admission's pass over the type whose slot an end freed (when the type is limited)."""
    if watcher.admit is None:
        return
    try:
        watcher.admit(job_type, freed)
    except Exception:  # the extender's next pass admits them
        logger.exception("admission after an execution's end failed", extra={"job_type": job_type})
