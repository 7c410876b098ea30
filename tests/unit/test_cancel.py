"""Whether a receive of a cancelled message sends its DLQ copy: `cancel.redelivery_needs_dead_letter` (the
decision's reading: is a copy still to be sent) and `cancel.receive_may_send` (may this receive claim the
send now), pure decisions on the lease's cancel record, its send claim and who holds it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from longjobs.engine.cancel import (
    SEND_CLAIM_S,
    CancelRecord,
    Outcome,
    receive_may_send,
    redelivery_needs_dead_letter,
    report_finished,
)
from longjobs.engine.lease import Lease, LeaseStatus

NOW = 1_000_000.0
ME, OTHER = "handle-of-this-receive", "handle-of-another-receive"
LIFE_S = 95.0  # how long a receive's claimant may still run (`dlq_claim.claim_life_s`)
FRESH, STALE = NOW - 1, NOW - SEND_CLAIM_S
RECORD = CancelRecord(reason="stop it", previous_status="ACTIVE", at=NOW - 600)


def lease(record: CancelRecord | None, status: LeaseStatus = LeaseStatus.CANCELLED) -> Lease:
    return Lease(
        message_id="message-1",
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
    ("record", "needs", "may_send", "why"),
    [
        (RECORD, True, True, "no copy, no claim: the cancel had no body, this receive has it"),
        (replace(RECORD, dead_letter_id="copy"), False, True, "a copy is noted: acknowledged"),
        (replace(RECORD, sending_at=FRESH), False, True, "a cancel's claim: it has the body"),
        (replace(RECORD, sending_at=STALE), False, True, "a cancel's old claim: the extender finishes it"),
        (replace(RECORD, sending_at=FRESH, sending_by=ME), True, True, "its own claim: its pass read again"),
        (replace(RECORD, sending_at=FRESH, sending_by=OTHER), True, False, "another receive's: come back later"),
        (replace(RECORD, sending_at=STALE, sending_by=OTHER), True, True, "another receive's old claim: take over"),
        (replace(RECORD, sending_at=NOW - LIFE_S, sending_by=OTHER), True, True, "its claimant's invocation ended"),
        (replace(RECORD, sending_at=NOW - LIFE_S + 1, sending_by=OTHER), True, False, "its claimant may still run"),
        (replace(RECORD, sending_at=FRESH, sending_by=OTHER, dead_letter_id="copy"), False, True, "sent, noted"),
        (None, True, True, "a CANCELLED lease without a readable record"),
    ],
)
def test_cancel_redelivery_sends_its_copy_when_no_other_carrier_does(
    record: CancelRecord | None, needs: bool, may_send: bool, why: str
) -> None:
    assert redelivery_needs_dead_letter(lease(record)) is needs, why
    assert receive_may_send(lease(record), ME, now=NOW, life_s=LIFE_S) is may_send, why


def test_cancel_redelivery_of_a_lease_not_cancelled_sends_nothing() -> None:
    assert not redelivery_needs_dead_letter(lease(None, LeaseStatus.ACTIVE))


def test_cancel_record_keeps_who_claimed_the_send() -> None:
    claimed = replace(RECORD, sending_at=FRESH, sending_by=ME)
    assert CancelRecord.of(lease(claimed)) == claimed


def test_cancel_report_of_a_rejected_poison_record_names_no_dlq_copy() -> None:
    """A poison message's REJECTED record is written after its DLQ send and notes no copy (the receiver's
    `reject`). Its cancel is `already_dead_lettered` with no `dead_letter_id`, as operate.md says: the copy
    is found in `dlq list` by its `OriginalMessageId`, not named by the report."""
    poison = replace(lease(None, LeaseStatus.REJECTED), job_id=None, job_type=None)

    report = report_finished(poison)

    assert (report.outcome, report.dead_letter_id) == (Outcome.ALREADY_DEAD_LETTERED, None)


def test_cancel_report_of_a_rejected_lease_names_its_dlq_copy() -> None:
    """A job whose attempts ran out keeps its DLQ copy's id on its lease. The cancel's report names that
    copy, as `longjobs lease` does, so the operator can follow it (a redrive may have moved it on)."""
    rejected = replace(lease(None, LeaseStatus.REJECTED), copy_id="dlq-copy-1", claimed_by="receive-1")

    report = report_finished(rejected)

    assert report.outcome is Outcome.ALREADY_DEAD_LETTERED
    assert report.dead_letter_id == "dlq-copy-1"
