"""Whether a receive sends a message its REJECTED record says is on its way to the DLQ (claimed, no copy
noted): `dlq_claim.may_send`, a pure decision on the record's claim (this receive's, old, or given up)."""

from __future__ import annotations

import pytest

from longjobs.engine.delivery import dlq_claim
from longjobs.engine.delivery.dlq_claim import CLOCK_SLACK_S, claim_life_s, may_send, outlives_message
from longjobs.engine.lease import Lease, LeaseStatus
from longjobs.engine.settings import EXTENDER_TIMEOUT_S, Settings

NOW = 1_000_000.0
LIFE_S = 95.0
ME, OTHER = "handle-1#0000beef", "handle-2#0000cafe"


def record(status: LeaseStatus = LeaseStatus.REJECTED, **fields: object) -> Lease:
    return Lease(
        message_id="message-1",
        queue_url="https://sqs/jobs",
        receipt_handle="handle",
        receive_count=3,
        received_at=NOW - 10,
        visible_until=NOW - 10,
        renew_until=NOW - 10,
        status=status,
        **fields,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("claimed_by", "claimed_at", "allowed", "why"),
    [
        (ME, NOW - 1, True, "its own claim: its pass read again after the claim's answer was lost"),
        (OTHER, NOW - 1, False, "another receive's fresh claim: it may be sending (come back later)"),
        (OTHER, NOW - LIFE_S + 1, False, "its claimant may still run a second before its life ends"),
        (OTHER, NOW - LIFE_S, True, "another receive's expired claim: its claimant died, take it over"),
        (OTHER, None, True, "given up (no claim time): its claimant's send failed, send at once"),
    ],
)
def test_dlq_claim_may_send_own_old_or_given_up(
    claimed_by: str, claimed_at: float | None, allowed: bool, why: str
) -> None:
    assert may_send(record(claimed_by=claimed_by, claimed_at=claimed_at), ME, now=NOW, life_s=LIFE_S) is allowed, why


@pytest.mark.parametrize(
    ("receiver_timeout_s", "life_s"),
    [(30.0, EXTENDER_TIMEOUT_S + CLOCK_SLACK_S), (900.0, 900.0 + CLOCK_SLACK_S)],
    ids=["the extender's timeout", "a longer receiver timeout"],
)
def test_dlq_claim_life_outlasts_the_invocation_that_claims(receiver_timeout_s: float, life_s: float) -> None:
    """A claim is made by a receiver's invocation, or an admission pass's in the extender's: it lives until
    the longer of their timeouts has surely passed."""
    settings = Settings(receiver_timeout_s=receiver_timeout_s, reconcile_grace_s=receiver_timeout_s + 1)
    assert claim_life_s(settings) == life_s


RETENTION_S = 1_209_600.0


@pytest.mark.parametrize(
    ("claimed_at", "deleted_in_s", "outlives", "why"),
    [
        (NOW - 1, 60.0, True, "SQS deletes the message 60 s from now, while the claim may still live"),
        (NOW - 1, LIFE_S + CLOCK_SLACK_S - 1, True, "deleted just as the claim ends (with the clocks' slack)"),
        (NOW - 1, LIFE_S + CLOCK_SLACK_S + 60, False, "deleted a minute after the claim ends: left to it"),
        (NOW - 1, RETENTION_S, False, "a fresh message: left to its claimant"),
    ],
)
def test_dlq_claim_outliving_its_message_is_taken_over(
    claimed_at: float, deleted_in_s: float, outlives: bool, why: str
) -> None:
    """A claim that would still live when SQS deletes its message, sent at `sent_at` and kept the retention,
    is taken over at once: a possible second copy rather than none."""
    sent_at = NOW + deleted_in_s - RETENTION_S
    lease = record(claimed_by=OTHER, claimed_at=claimed_at)
    assert outlives_message(lease, sent_at, retention_s=RETENTION_S, life_s=LIFE_S) is outlives, why
    assert not outlives_message(lease, None, retention_s=RETENTION_S, life_s=LIFE_S), "no send time: left"


@pytest.mark.parametrize(
    ("sent_at", "kept", "why"),
    [
        (NOW - 3_600, 14 * 86_400 - 3_600, "sent an hour ago: the rest of its retention"),
        (NOW - 14 * 86_400 - 1, 0.0, "past its retention: SQS has deleted it, the closed leases' TTL alone"),
        (None, 14 * 86_400, "no SentTimestamp: the whole retention from now"),
    ],
)
def test_dlq_claim_record_kept_while_its_message_may_be_on_its_queue(
    sent_at: float | None, kept: float, why: str
) -> None:
    assert dlq_claim.kept_s(Settings(), sent_at, now=NOW) == kept, why
