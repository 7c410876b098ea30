"""Which closed leases count as a failed attempt of their message (`Lease.ended_attempt`)."""

from __future__ import annotations

import pytest

from longjobs.engine.lease import LastError, Lease, LeaseStatus

ARN = "arn:aws:states:us-east-1:123456789012:execution:long-jobs:m-1-1"


def lease(status: LeaseStatus, *, execution_arn: str | None = ARN, never_started: bool = False) -> Lease:
    return Lease(
        message_id="m-1",
        queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/jobs",
        receipt_handle="handle",
        receive_count=1,
        received_at=0.0,
        visible_until=0.0,
        renew_until=0.0,
        status=status,
        execution_arn=execution_arn,
        last_error=LastError("boom"),
        closed_at=5.0,
        never_started=never_started,
    )


@pytest.mark.parametrize(
    ("status", "execution_arn", "never_started", "counts"),
    [
        (LeaseStatus.RELEASED, ARN, False, True),  # its job failed
        (LeaseStatus.CAPPED, ARN, False, True),  # stopped at its max renewal
        (LeaseStatus.LOST, ARN, False, True),  # its handle went stale
        (LeaseStatus.RELEASED, ARN, True, False),  # StartExecution never took effect (a throttled burst)
        (LeaseStatus.LOST, ARN, True, False),
        (LeaseStatus.RELEASED, None, False, False),  # no execution named at all
        (LeaseStatus.SUCCEEDED, ARN, False, False),
        (LeaseStatus.ACTIVE, ARN, False, False),
        (LeaseStatus.WAITING, None, False, False),
        (LeaseStatus.PARKED, None, False, False),
        (LeaseStatus.REJECTED, None, False, False),
    ],
)
def test_lease_ended_attempt_counts_only_executions_that_ran(
    status: LeaseStatus, execution_arn: str | None, never_started: bool, counts: bool
) -> None:
    closed = lease(status, execution_arn=execution_arn, never_started=never_started)
    ended = closed.ended_attempt()
    assert (ended is not None) is counts
    assert len(closed.history_with_this()) == int(counts)
    if ended is not None:
        assert (ended.number, ended.execution, ended.outcome, ended.error) == (
            1,
            "m-1-1",
            status.value,
            LastError("boom"),
        )
