"""Whether a receive of a cancelled message sends its DLQ copy (`cancel.redelivery_needs_dead_letter`): a
pure decision on the lease's cancel record, its send claim and who holds it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from longjobs.engine.cancel import SEND_CLAIM_S, CancelRecord, redelivery_needs_dead_letter
from longjobs.engine.lease import Lease, LeaseStatus

NOW = 1_000_000.0
ME, TWIN = "message-1", "message-2"
FRESH, STALE = NOW - 1, NOW - SEND_CLAIM_S
RECORD = CancelRecord(reason="stop it", previous_status="ACTIVE", at=NOW - 600)


def lease(record: CancelRecord | None, status: LeaseStatus = LeaseStatus.CANCELLED) -> Lease:
    return Lease(
        message_id=ME,
        queue_url="https://sqs/jobs",
        receipt_handle="handle",
        receive_count=2,
        received_at=NOW - 600,
        visible_until=NOW,
        renew_until=NOW,
        status=status,
        result=record.to_result() if record is not None else None,
    )


@pytest.mark.parametrize(
    ("record", "receiver", "sends", "why"),
    [
        (RECORD, ME, True, "no copy, no claim: the cancel had no body, this receive has it"),
        (replace(RECORD, dead_letter_id="copy"), ME, False, "a copy is noted"),
        (replace(RECORD, sending_at=FRESH), ME, False, "a cancel's claim: it has the body"),
        (replace(RECORD, sending_at=STALE), ME, False, "a cancel's stale claim: the extender finishes it"),
        (replace(RECORD, sending_at=FRESH, sending_by=ME), ME, True, "its own message's claim: that receive died"),
        (replace(RECORD, sending_at=FRESH, sending_by=TWIN), ME, False, "another copy's fresh claim"),
        (replace(RECORD, sending_at=STALE, sending_by=TWIN), ME, True, "another copy's stale claim"),
        (replace(RECORD, sending_at=FRESH, sending_by=ME, dead_letter_id="copy"), ME, False, "sent and noted"),
        (None, ME, True, "a CANCELLED lease without a readable record"),
    ],
)
def test_cancel_redelivery_sends_its_dlq_copy_when_no_other_carrier_does(
    record: CancelRecord | None, receiver: str, sends: bool, why: str
) -> None:
    assert redelivery_needs_dead_letter(lease(record), receiver, now=NOW) is sends, why


def test_cancel_redelivery_of_a_lease_not_cancelled_sends_nothing() -> None:
    assert not redelivery_needs_dead_letter(lease(None, LeaseStatus.ACTIVE), ME, now=NOW)


def test_cancel_record_keeps_who_claimed_the_send() -> None:
    claimed = replace(RECORD, sending_at=FRESH, sending_by=ME)
    assert CancelRecord.of(lease(claimed)) == claimed
