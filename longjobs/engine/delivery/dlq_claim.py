"""The receiver's DLQ send, claimed on the message's record before it is made.

A receive that sends a message to the DLQ (its attempts or its starts used up, a refused body with a
history, a job id busy too long, its retention running out, a copy whose claimant can no longer be told)
first writes the message's record DEAD_LETTERING, naming itself (`claimed_by`, `claimed_at`), conditional
on the lease it read. Then it sends, then it notes the copy's id on the record (`copy_id`), which turns it
REJECTED. So of two receives of one message at once, one writes and sends. The other reads again and finds
the message in the DLQ or on its way there, and never begins an attempt beside its DLQ copy. SQS hands a
message out at least once, the mapping handles a record at least once, and during a deploy the two
receives may be of receivers with different settings (`max_attempts` raised: one begins an attempt while
the other dead-letters).

A DEAD_LETTERING record means its claimant may still be sending. Another receive leaves it while the
claimant's invocation may still run (`claim_life_s`: STALE, the message comes back later), then takes the
claim over and sends. A claimant whose send failed gives its claim up at once. A claim that would still
live when SQS deletes the message is taken over at once (`outlives_message`): a possible second copy
rather than none. Only a send that landed with its answer lost, or a claimant that died between its send
and its note, makes a second copy. A release that does not know the status refuses the record and leaves
the message on its queue, rather than take it for sent: a rollback loses nothing.

| the record                                   | a receive of its message                     |
|----------------------------------------------|----------------------------------------------|
| REJECTED                                     | acknowledged: in the DLQ already             |
| DEAD_LETTERING, claimed by this receive      | claims again and sends (its answer was lost) |
| DEAD_LETTERING, claimed by another, live     | STALE: comes back later                      |
| DEAD_LETTERING, older, given up, or outliving the message | takes the claim over and sends  |
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from longjobs.engine.delivery.dlq import send_exhausted_to_dlq
from longjobs.engine.delivery.types import Delivery, Outcome, Receiver
from longjobs.engine.lease import Lease, LeaseStatus
from longjobs.engine.lease.codec import num
from longjobs.engine.lease.schema import PARTITION_KEY
from longjobs.engine.lease.writes import conditional, values_of
from longjobs.engine.observability import logger
from longjobs.engine.settings import EXTENDER_TIMEOUT_S, Settings

if TYPE_CHECKING:
    from longjobs.engine.lease import LeaseStore

__all__ = [
    "CLOCK_SLACK_S",
    "claim",
    "claim_life_s",
    "kept_s",
    "may_send",
    "outlives_message",
    "send_claimed",
]

CLOCK_SLACK_S = 5.0
"""What a claim's life allows for the clocks of two functions' hosts to differ."""
GIVEN_UP_AT = 0.0
"""The claim time of a claim its claimant gave up (its send failed; the record then keeps no `claimed_at`):
older than any, taken over at once."""


def claim_life_s(settings: Settings) -> float:
    """How long a claim keeps other receives from sending: until the invocation that made it has surely
    ended (the receiver's timeout, or the extender's for an admission pass's claim), with `CLOCK_SLACK_S`."""
    return max(settings.receiver_timeout_s, EXTENDER_TIMEOUT_S) + CLOCK_SLACK_S


def kept_s(settings: Settings, sent_at: float | None, *, now: float) -> float:
    """How long past `now` a DEAD_LETTERING record must outlast the closed leases' TTL: as long as its message
    may still be on its queue (sent at `sent_at`, kept the queue's retention; the whole retention when
    unknown). A record gone while its message waits for a send that keeps failing would let the next
    receive begin a new attempt with no history, after its attempts were used up."""
    if sent_at is None:
        return float(settings.queue_retention_s)
    return max(0.0, sent_at + settings.queue_retention_s - now)


def may_send(lease: Lease, claimant: str, *, now: float, life_s: float) -> bool:
    """Whether the receive named `claimant` may claim the unsent record's send now: the claim is its own
    (its claim's answer was lost, and its pass read again), older than `life_s`, or given up."""
    return lease.claimed_by == claimant or now - (lease.claimed_at or GIVEN_UP_AT) >= life_s


def outlives_message(lease: Lease, sent_at: float | None, *, retention_s: float, life_s: float) -> bool:
    """Whether the claim on `lease` is still live when SQS deletes its message (sent at `sent_at`, kept
    `retention_s`, received or not): a receive that left it to its claimant (STALE) would see the message
    deleted before any receive may take the claim over, and a claimant that died would lose it. Such a
    claim is taken over at once: a second copy (its claimant alive after all) rather than none."""
    if sent_at is None:
        return False
    return (lease.claimed_at or GIVEN_UP_AT) + life_s + CLOCK_SLACK_S >= sent_at + retention_s


def claim(store: LeaseStore, record: Lease, claimant: str, *, now: float) -> Lease | None:
    """Claim the send of a DEAD_LETTERING record for `claimant`: one write conditional on the version read.
    None when another writer changed it first (read again)."""
    claimed = replace(record, claimed_by=claimant, claimed_at=now, version=record.version + 1)
    if not _update(store, record, "claimed_by = :claimant, claimed_at = :at", claimant=claimant, at=num(now)):
        return None
    return claimed


def send_claimed(receiver: Receiver, delivery: Delivery, record: Lease) -> Outcome:
    """Send the message to the DLQ under `record`'s claim (this receive's), with the record's reason and
    history, then note the copy on the record (best effort: a lost note lets a later receive of the
    message send a second copy once the claim is old). A send that fails gives the claim up and raises:
    the record is reported failed, and the next receive sends at once."""
    assert record.claimed_by is not None and record.last_error is not None
    error = record.last_error
    try:
        copy_id = send_exhausted_to_dlq(
            receiver.sqs,
            receiver.settings.dlq_url or "",
            delivery,
            record.history,
            error_type=error.error,
            message=error.cause,
        )
    except Exception:
        _give_up(receiver.store, record)
        raise
    logger.warning(
        "sent to the DLQ",
        extra={
            "message_id": delivery.message_id,
            "reason": error.error,
            "attempts": len(record.history),
            "error": error.cause,
            "copy": copy_id,
        },
    )
    try:
        noted = "copy_id = :copy, #status = :rejected"
        rejected = LeaseStatus.REJECTED.value
        if not _update(receiver.store, record, noted, owner=record.claimed_by, copy=copy_id, rejected=rejected):
            logger.info("DLQ record changed meanwhile: copy not noted", extra={"message_id": delivery.message_id})
    except Exception as exc:
        logger.warning("could not note the DLQ copy", extra={"message_id": delivery.message_id, "error": str(exc)})
    return Outcome.REJECTED


def _give_up(store: LeaseStore, record: Lease) -> None:
    """Mark this claimant's claim given up (best effort: else it is taken over once old)."""
    try:
        _update(store, record, "", owner=record.claimed_by, remove="claimed_at")
    except Exception as exc:
        logger.warning("could not give the DLQ claim up", extra={"message_id": record.message_id, "error": str(exc)})


def _update(
    store: LeaseStore, record: Lease, sets: str, *, owner: str | None = None, remove: str = "", **values: object
) -> bool:
    """One update of a DEAD_LETTERING record as read: its version, and its claimant when `owner` is given."""
    update = "SET " + ", ".join([*([sets] if sets else []), "version = version + :one"])
    if remove:
        update += f" REMOVE {remove}"
    condition = "version = :version AND #status = :dead_lettering"
    if owner is not None:
        condition += " AND claimed_by = :owner"
        values["owner"] = owner
    return conditional(
        store.client.update_item,
        TableName=store.table_name,
        Key={PARTITION_KEY: {"S": record.message_id}},
        UpdateExpression=update,
        ConditionExpression=condition,
        ExpressionAttributeNames={"#status": "status"},
        ExpressionAttributeValues=values_of(
            version=record.version, dead_lettering=LeaseStatus.DEAD_LETTERING.value, one=1, **values
        ),
    )
