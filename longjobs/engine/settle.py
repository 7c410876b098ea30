"""Ending a lease: release the message (failure), delete it (success), or stop the execution of a lease
that can no longer be held.

The extender (renewal and reconciliation), the execution watcher and the receiver (on a redelivery)
all end leases through these functions, always with the lease's *current* receipt handle and always
fenced by the attempt that owns the lease: every write is conditional on the version that was read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from longjobs.engine.clock import Clock
from longjobs.engine.execution import NEVER_STARTED, RUNNING_STATUSES, stop_execution
from longjobs.engine.lease import LastError, Lease, LeaseStatus, LeaseStore, hold_keys
from longjobs.engine.observability import logger
from longjobs.engine.policies.base import whole_seconds
from longjobs.engine.visibility import FailureClass, VisibilityChange, VisibilityClient
from longjobs.engine.visibility.errors import classify_exception, describe_exception

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient

__all__ = [
    "NEVER_STARTED",
    "RUNNING_STATUSES",
    "SettleError",
    "complete",
    "describe_reason",
    "reassert_release",
    "release",
    "release_holds",
    "release_job_lock",
    "settle_ended",
    "stop_and_close",
]


class SettleError(Exception):
    """AWS refused for a reason that may pass (throttling, a fault): the lease is unchanged, try later."""


def release_holds(lease: Lease, *, store: LeaseStore, clock: Clock) -> bool:
    """Free what the attempt of a lease that has ended holds, where it still names its execution: its job
    lock, and its type's admission slot. Best effort: a lock or slot left held is freed once its execution
    is seen not running (the next message of the job id; the extender's slot sweep)."""
    if not lease.execution_arn:
        return False
    released = False
    for key in hold_keys(lease):
        try:
            released = store.locks.release(key, lease.execution_arn, now=clock.now()) or released
        except Exception as exc:
            logger.warning("could not release a lock", extra={"key": key, "error": str(exc)})
    return released


release_job_lock = release_holds
"""Another name of `release_holds`, exported for callers that name the job lock: the job lock and the
slot are freed together."""


def release(
    lease: Lease,
    *,
    store: LeaseStore,
    visibility: VisibilityClient,
    clock: Clock,
    reason: LastError,
    delay_s: int | None = None,
    never_started: bool = False,
) -> Lease | None:
    """Close the lease RELEASED (its execution's holds freed in the same transaction, `LeaseStore.close`),
    then make the message visible after the release delay (`never_started`: its execution does not exist,
    so the attempt is not counted).

    Closing first makes the release the last word on the message's visibility: a renewal or an
    adoption that read the lease before the close finds it closed afterwards and re-applies the release
    (`reassert_release`), so neither can hide a failed job's message for a whole chunk. Returns the
    closed lease (LOST when SQS no longer accepts the handle), or None when the lease changed
    meanwhile (a newer receive or another settlement got there first). If SQS refuses for a passing
    reason the lease stays RELEASED with the error noted: the message then returns when its current
    chunk ends.
    """
    delay = lease.release_delay_s if delay_s is None else delay_s
    now = clock.now()
    closed = store.close(
        lease, LeaseStatus.RELEASED, now=now, error=reason, visible_until=now + delay, never_started=never_started
    )
    if closed is None:
        return None
    outcome = visibility.change(VisibilityChange(lease.message_id, lease.queue_url, closed.receipt_handle, delay))
    if outcome.ok:
        return closed
    if outcome.failure is FailureClass.LOST:
        lost = LastError(reason.error, _joined(reason.cause, f"release: {outcome.error}"))
        return store.amend(closed, status=LeaseStatus.LOST, error=lost) or closed
    logger.warning(
        "release visibility change failed; the message returns when its current chunk ends",
        extra={"message_id": lease.message_id, "error": outcome.error},
    )
    note = f"release visibility change failed ({outcome.failure}): {outcome.error}"
    noted = LastError(reason.error, _joined(reason.cause, note))
    return store.amend(closed, status=LeaseStatus.RELEASED, error=noted) or closed


def _joined(cause: str | None, note: str) -> str:
    """A last error's cause with a note of what happened after it (a release SQS refused)."""
    return f"{cause}; {note}" if cause else note


def reassert_release(lease: Lease, *, visibility: VisibilityClient, clock: Clock) -> bool:
    """Re-apply the release of a lease that was released while the caller changed its visibility.

    The caller's change (a renewal, an adoption's first chunk) may have landed after the release's
    and hidden the message again. The message is made visible when the release said: the close's
    `visible_until` when this code released it, else (a release by the workflow, which records no
    time) the lease's release delay from now. Returns True when SQS accepted it.
    """
    if lease.status is not LeaseStatus.RELEASED:
        return False
    now = clock.now()
    target = lease.visible_until if lease.closed_at is not None else now + lease.release_delay_s
    delay = whole_seconds(max(0.0, target - now))
    outcome = visibility.change(VisibilityChange(lease.message_id, lease.queue_url, lease.receipt_handle, delay))
    if not outcome.ok:
        logger.warning("could not re-apply a release", extra={"message_id": lease.message_id, "error": outcome.error})
    return outcome.ok


def complete(
    lease: Lease,
    *,
    store: LeaseStore,
    sqs: SQSClient,
    clock: Clock,
    result: dict[str, Any] | None = None,
) -> Lease | None:
    """Delete the message of a job that succeeded and close the lease SUCCEEDED, its holds with it.

    If SQS no longer accepts the handle the lease still closes SUCCEEDED (the job did succeed), with
    the delete error noted: a redelivery then finds it SUCCEEDED and deletes without re-running.
    """
    error = None
    try:
        sqs.delete_message(QueueUrl=lease.queue_url, ReceiptHandle=lease.receipt_handle)
    except Exception as exc:
        if classify_exception(exc) is not FailureClass.LOST:
            raise SettleError(f"delete of {lease.message_id} failed: {describe_exception(exc)}") from exc
        error = LastError("delete refused", describe_exception(exc))
    return store.close(lease, LeaseStatus.SUCCEEDED, now=clock.now(), error=error, result=result)


def stop_and_close(
    lease: Lease,
    status: LeaseStatus,
    *,
    stepfunctions: SFNClient | None,
    store: LeaseStore,
    clock: Clock,
    reason: LastError,
) -> Lease | None:
    """End a lease that can no longer be held (the 12 h limit, the max renewal, a handle SQS refuses for
    good): stop its execution first, then close it, so the message is never handed out while the
    execution runs (invariant 8). Raises `SettleError` when the stop failed: the lease stays ACTIVE and
    the next pass tries again. Returns None when another writer changed the lease first. An execution
    that does not exist (its receive died between its holds and its start) spent no attempt: the lease
    closes `never_started`, counted as a refused start, as reconciliation counts it."""
    existed = True
    if lease.execution_arn:
        if stepfunctions is None:
            raise SettleError(f"cannot stop {lease.execution_arn}: no Step Functions client")
        try:
            existed = stop_execution(stepfunctions, lease.execution_arn, cause=str(reason))
        except Exception as exc:
            raise SettleError(f"stop of {lease.execution_arn} failed: {describe_exception(exc)}") from exc
        logger.warning(
            "execution stopped: its lease can no longer be held" if existed else "no execution to stop: never started",
            extra={"message_id": lease.message_id, "execution": lease.execution_arn, "reason": str(reason)},
        )
    closed = store.close(lease, status, now=clock.now(), error=reason, never_started=not existed)
    if closed is None and lease.execution_arn:
        _free_after_lost_close(lease, store=store, clock=clock)
    return closed


def _free_after_lost_close(lease: Lease, *, store: LeaseStore, clock: Clock) -> None:
    """The close lost its race after the stop: if the execution closed its own lease meanwhile (its job
    succeeded, or failed, while the stop was on its way), the stop cut it off before it freed its job lock
    and slot, so they are freed here (each conditional on that execution still holding it)."""
    try:
        current = store.get(lease.message_id)
    except Exception as exc:
        logger.warning(
            "could not re-read a lease after a lost close", extra={"message_id": lease.message_id, "error": str(exc)}
        )
        return
    if current is not None and not current.active and current.execution_arn == lease.execution_arn:
        release_holds(current, store=store, clock=clock)


def describe_reason(status: str, error: str | None = None, cause: str | None = None) -> LastError:
    """The lease's last error for an execution that ended in `status` (`execution aborted`), with the
    execution's own error and cause (Step Functions' `Operator: test`) as its cause."""
    reason = "execution never started" if status == NEVER_STARTED else f"execution {status.lower().replace('_', ' ')}"
    details = ": ".join(part for part in (error, cause) if part)
    return LastError(reason, details or None)


def settle_ended(
    lease: Lease,
    status: str,
    *,
    store: LeaseStore,
    visibility: VisibilityClient,
    sqs: SQSClient,
    clock: Clock,
    reason: LastError | None = None,
) -> Lease | None:
    """Settle a lease whose execution is over (`status` is not a running one).

    SUCCEEDED completes it: the workflow deletes and closes on success, so an ACTIVE lease here means
    that last step was lost. Any other end releases the message after the lease's release delay.
    """
    if status in RUNNING_STATUSES:
        raise ValueError(f"execution of {lease.message_id} is {status}: nothing to settle")
    if status == "SUCCEEDED":
        return complete(lease, store=store, sqs=sqs, clock=clock)
    return release(
        lease,
        store=store,
        visibility=visibility,
        clock=clock,
        reason=reason or describe_reason(status),
        never_started=status == NEVER_STARTED,
    )
