"""Settling a lease whose job is over: release the message (failure) or delete it (success).

The extender's reconciliation, the execution watcher and the receiver (on a redelivery) all end leases
through these functions, always with the lease's *current* receipt handle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from functions.clock import Clock
from functions.lease import Lease, LeaseStatus, LeaseStore
from functions.visibility import FailureClass, VisibilityChange, VisibilityClient
from functions.visibility.errors import classify_exception, describe_exception

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient


class SettleError(Exception):
    """SQS refused for a reason that may pass (throttling, a fault): the lease stays ACTIVE, try later."""


def release(
    lease: Lease,
    *,
    store: LeaseStore,
    visibility: VisibilityClient,
    clock: Clock,
    reason: str,
    delay_s: int | None = None,
) -> Lease | None:
    """Make the message visible after its release delay and close the lease RELEASED.

    A handle SQS no longer accepts closes the lease LOST instead. Returns the closed lease, or None
    when the lease changed meanwhile (a newer receive owns it now). Raises `SettleError` otherwise.
    """
    delay = lease.release_delay_s if delay_s is None else delay_s
    outcome = visibility.change(VisibilityChange(lease.message_id, lease.queue_url, lease.receipt_handle, delay))
    now = clock.now()
    if outcome.ok:
        return store.close(lease, LeaseStatus.RELEASED, now=now, error=reason, visible_until=outcome.sent_at + delay)
    if outcome.failure is FailureClass.LOST:
        return store.close(lease, LeaseStatus.LOST, now=now, error=f"{reason}; release: {outcome.error}")
    raise SettleError(f"release of {lease.message_id} failed ({outcome.failure}): {outcome.error}")


def complete(
    lease: Lease,
    *,
    store: LeaseStore,
    sqs: SQSClient,
    clock: Clock,
    result: dict[str, Any] | None = None,
) -> Lease | None:
    """Delete the message of a job that succeeded and close the lease SUCCEEDED.

    If SQS no longer accepts the handle the lease still closes SUCCEEDED (the job did succeed), with
    the delete error noted: a redelivery then finds it SUCCEEDED and deletes without re-running.
    """
    error = None
    try:
        sqs.delete_message(QueueUrl=lease.queue_url, ReceiptHandle=lease.receipt_handle)
    except Exception as exc:
        if classify_exception(exc) is not FailureClass.LOST:
            raise SettleError(f"delete of {lease.message_id} failed: {describe_exception(exc)}") from exc
        error = f"delete: {describe_exception(exc)}"
    return store.close(lease, LeaseStatus.SUCCEEDED, now=clock.now(), error=error, result=result)


RUNNING_STATUSES = frozenset({"RUNNING", "PENDING_REDRIVE"})
NEVER_STARTED = "NEVER_STARTED"
"""Stands for an execution that does not exist: the receiver stopped between the lease and the start."""


def describe_reason(status: str, error: str | None = None, cause: str | None = None) -> str:
    """The lease's last error for an execution that ended in `status`."""
    reason = "execution never started" if status == NEVER_STARTED else f"execution {status.lower().replace('_', ' ')}"
    details = ": ".join(part for part in (error, cause) if part)
    return f"{reason}: {details}" if details else reason


def settle_ended(
    lease: Lease,
    status: str,
    *,
    store: LeaseStore,
    visibility: VisibilityClient,
    sqs: SQSClient,
    clock: Clock,
    reason: str | None = None,
) -> Lease | None:
    """Settle a lease whose execution is over (`status` is not a running one).

    SUCCEEDED completes it: the workflow deletes and closes on success, so an ACTIVE lease here means
    that last step was lost. Any other end releases the message after the lease's release delay.
    """
    if status in RUNNING_STATUSES:
        raise ValueError(f"execution of {lease.message_id} is {status}: nothing to settle")
    if status == "SUCCEEDED":
        return complete(lease, store=store, sqs=sqs, clock=clock)
    return release(lease, store=store, visibility=visibility, clock=clock, reason=reason or describe_reason(status))
