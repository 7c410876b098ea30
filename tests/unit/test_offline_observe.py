"""Where the offline observer says a message ended (`longjobs.offline.observe`), from its lease as last seen,
when neither its queue nor the DLQ holds it any more."""

from __future__ import annotations

import pytest

from longjobs.engine.lease import LastError, LeaseStatus
from longjobs.offline.observe import Observer, Track
from tests.unit.test_cli_render import NOW
from tests.unit.test_cli_render import _closed as closed


def _gone(status: LeaseStatus, *, claimed_at: float | None) -> Track:
    lease = closed(
        status, last_error=LastError("AttemptsExhausted", "boom"), claimed_by="h#0000beef", claimed_at=claimed_at
    )
    return Track(job_id="a", message_id=lease.message_id, sent_at=NOW, lease=lease)


@pytest.mark.parametrize(
    ("status", "claimed_at", "deleted"),
    [
        pytest.param(LeaseStatus.REJECTED, NOW, True, id="rejected"),
        pytest.param(LeaseStatus.DEAD_LETTERING, NOW, True, id="claimed: sent, its note lost"),
        pytest.param(LeaseStatus.DEAD_LETTERING, None, False, id="given up: never sent"),
    ],
)
def test_offline_observe_a_message_gone_under_a_given_up_dlq_claim_is_not_deleted(
    status: LeaseStatus, claimed_at: float | None, deleted: bool
) -> None:
    """A DEAD_LETTERING record without `claimed_at` is a claim whose send failed and was given up
    (`dlq_claim`): its receive failed the record, so nothing deleted the message, and no DLQ copy was made.
    Gone from its queue with no DLQ copy, it was deleted by SQS at its retention ("Amazon SQS automatically
    deletes messages that have been in a queue for more than the maximum message retention period",
    SetQueueAttributes `MessageRetentionPeriod`): lost, never "deleted" as a job done with."""
    assert Observer._deleted_after_success(_gone(status, claimed_at=claimed_at)) is deleted
