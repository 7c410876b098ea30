"""Settle the lease of an execution that ended without reaching the workflow's own failure path.

Idempotent by construction: only an ACTIVE lease whose execution is the one in the event is
released, so a late or duplicate event (or one for an attempt that was replaced) changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from functions.clock import Clock
from functions.execution import parse_execution_name
from functions.lease import LeaseStatus, LeaseStore
from functions.settle import describe_reason, release
from functions.visibility import VisibilityClient
from functions.watcher.models import ENDED_UNSUCCESSFULLY, ExecutionStatusChange


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


def on_status_change(watcher: Watcher, change: ExecutionStatusChange) -> WatchOutcome:
    """Release the message of an execution that FAILED, TIMED_OUT or was ABORTED, when the lease is ACTIVE
    and names that very execution (the attempt that owns it). A DynamoDB error raises: EventBridge
    retries the invocation, and reconciliation settles the lease if every retry fails."""
    if change.stateMachineArn != watcher.state_machine_arn or change.status not in ENDED_UNSUCCESSFULLY:
        return WatchOutcome.UNCHANGED
    parsed = parse_execution_name(change.name)
    if parsed is None:
        return WatchOutcome.UNCHANGED
    lease = watcher.store.get(parsed[0])
    if lease is None or not lease.active or lease.execution_arn != change.executionArn:
        return WatchOutcome.UNCHANGED
    reason = describe_reason(change.status, change.error, change.cause)
    settled = release(lease, store=watcher.store, visibility=watcher.visibility, clock=watcher.clock, reason=reason)
    if settled is None:
        return WatchOutcome.UNCHANGED
    return WatchOutcome.RELEASED if settled.status is LeaseStatus.RELEASED else WatchOutcome.LOST
