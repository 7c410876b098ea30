"""`longjobs lease`: a retried message's failed attempts, in the table and in `--json`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from longjobs.cli import render
from longjobs.cli.leases import attempts
from longjobs.engine.execution import JOB_FAILED_CAUSE, execution_name
from longjobs.engine.lease import LastError, Lease, LeaseStatus
from longjobs.engine.lease.types import Attempt

NOW = 1_800_000_000.0
MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:long-jobs"


def _retried_lease() -> Lease:
    """A message whose first attempt failed, received again: its new lease is ACTIVE, its last_error
    cleared, and the failed attempt is in the history it carries."""
    first = Attempt(
        number=1,
        execution=execution_name("m", 1),
        outcome="RELEASED",
        error=LastError("WaitJobFailed", "the wait job was asked to fail"),
        ended_at=NOW - 30,
    )
    return Lease(
        message_id="m",
        queue_url="q",
        receipt_handle="h",
        receive_count=2,
        received_at=NOW - 5,
        visible_until=NOW + 60,
        renew_until=NOW + 3_600,
        status=LeaseStatus.ACTIVE,
        execution_arn=f"{MACHINE.replace('stateMachine', 'execution')}:{execution_name('m', 2)}",
        history=(first,),
    )


class _StepFunctions:
    def describe_execution(self, executionArn: str) -> dict[str, Any]:
        started = datetime.fromtimestamp(NOW - 40, UTC)
        if executionArn.endswith("-1"):
            return {
                "status": "FAILED",
                "startDate": started,
                "stopDate": datetime.fromtimestamp(NOW - 30, UTC),
                "error": "WaitJobFailed",
                "cause": JOB_FAILED_CAUSE,
            }
        return {"status": "RUNNING", "startDate": started}


def test_cli_lease_shows_a_retried_attempts_own_cause_not_a_pointer_to_a_cleared_last_error() -> None:
    lease = _retried_lease()
    assert lease.last_error is None  # what the pointer names is gone once the message is received again

    found = attempts(_StepFunctions(), MACHINE, lease, now=NOW)  # type: ignore[arg-type]

    assert [(e.status, e.error, e.cause) for e in found] == [
        ("FAILED", "WaitJobFailed", "the wait job was asked to fail"),
        ("RUNNING", None, None),
    ]


def test_cli_lease_json_gives_the_history_times_in_iso_8601_utc() -> None:
    data = render.lease_json(_retried_lease())

    assert data["history"][0]["ended_at"] == "2027-01-15T07:59:30.000Z"
    assert data["history"][0]["error"] == {"error": "WaitJobFailed", "cause": "the wait job was asked to fail"}
