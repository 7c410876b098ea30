"""The workflow's close time (`workflow_closed_at`, an ISO string in the item) in the operator's tools."""

from __future__ import annotations

from longjobs.cli import render
from longjobs.cli.status import last_hour_from_table
from longjobs.engine.lease import LastError, Lease, LeaseStatus
from longjobs.engine.lease.codec import item_to_lease

NOW = 1_800_000_000.0


def _released_by_the_workflow() -> Lease:
    return Lease(
        message_id="m-1",
        queue_url="https://sqs/q",
        receipt_handle="h",
        receive_count=1,
        received_at=NOW - 600,
        visible_until=NOW - 300,
        renew_until=NOW + 3_600,
        status=LeaseStatus.RELEASED,
        execution_arn="arn:aws:states:us-east-1:1:execution:m:m-1-1",
        last_error=LastError("WaitJobFailed"),
        workflow_closed_at=NOW - 60,
        release_delay_s=30,
    )


def test_cli_lease_json_writes_the_workflows_close_time_as_iso_like_closed_at() -> None:
    """operate.md: "`--json` prints ... every field of the lease record. Times are ISO 8601 in UTC." The close
    time reads the same whoever closed the lease."""
    data = render.lease_json(_released_by_the_workflow())

    assert data["closed_at"] is None
    assert data["workflow_closed_at"] == render.iso(NOW - 60), data["workflow_closed_at"]


def test_cli_status_counts_a_lease_the_workflow_closed_lost_in_the_last_hour() -> None:
    """`status`'s "leases lost in the last hour" counts the workflow's MarkLost closes (a release whose handle
    SQS refused) by their `workflow_closed_at`, as it counts the processor's by `closed_at`."""
    entered = "2027-01-15T07:59:00.000Z"  # as `$$.State.EnteredTime` is written
    items = [{"pk": "m-1", "status": "LOST", "workflow_closed_at": entered}]
    moment = item_to_lease(
        {
            "pk": {"S": "m-1"},
            "status": {"S": "LOST"},
            "queue_url": {"S": "q"},
            "receipt_handle": {"S": "h"},
            "receive_count": {"N": "1"},
            "received_at": {"N": "0"},
            "visible_until": {"N": "0"},
            "renew_until": {"N": "0"},
            "workflow_closed_at": {"S": entered},
        }
    ).workflow_closed_at
    assert moment is not None

    assert last_hour_from_table(items, now=moment + 60).leases_lost == 1
