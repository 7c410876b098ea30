"""Waiting for a job id: a message whose job id another execution runs goes back to its queue as a
delayed copy, carried on by a REQUEUED marker, so that it runs once however often its copy is sent.

SendMessage is not idempotent: an answer lost after the send landed (botocore sends it again), or a
crash between the send and the deletion of the message (SQS delivers it again, and it sends again),
leaves two copies, and each would run the job once the job id is free. So the copy is made the way
parking makes one (`longjobs.engine.admission.parking`):

1. the message's lease becomes a REQUEUED marker, written first (conditional on the lease as read);
2. the copy is sent with the delay, naming the marker's message (`Carried.requeued_from`), with its
   waits and the message's failed attempts, so its history goes on;
3. its id is noted on the marker (best effort), and the message is acknowledged.

A redelivery of the message finds its marker: acknowledged when a copy is known (noted or claimed),
else the copy is sent again. A copy received with no lease of its own first claims the run on its
marker (`Markers.claim_requeued`): the first copy to claim runs, any other is acknowledged once the
claimant has a lease (`claim_answer`: until then it comes back, and a claimant that never gets one has
its run taken over); a copy whose marker was cancelled goes to the DLQ. A copy that has to wait again
becomes the marker of the next copy, so each link of the chain runs at most one successor.

The copy carries all of this in one message attribute, as a parked copy does, so any message that could
be parked can be requeued. A message with ten attributes of its own (SQS's most) leaves no room: it is
held in place instead, hidden for the wait and reported not done, as on a FIFO queue; each wait then
uses one of its receives, and when its receives or its retention are nearly spent it goes to the DLQ
as `JobIdBusy` rather than to SQS's redrive (no reason) or past its retention (lost).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from longjobs.engine.delivery.attempt import closed_record, wait_delay_s
from longjobs.engine.delivery.models import Job
from longjobs.engine.delivery.types import (
    ADMISSION_ATTRIBUTE,
    MAX_MESSAGE_ATTRIBUTES,
    WAITS_ATTRIBUTE,
    Delivery,
    Outcome,
    Receiver,
    copy_attributes,
    copy_fits,
)
from longjobs.engine.lease import Lease, LeaseStatus, Lock, successor_version
from longjobs.engine.lease.types import Attempt
from longjobs.engine.observability import logger
from longjobs.engine.settings import LAMBDA_MAX_TIMEOUT_S, MAX_DELAY_S


def has_room(delivery: Delivery, history: Sequence[Attempt]) -> bool:
    """Whether a copy of the message has room for the attribute it carries on (`ADMISSION_ATTRIBUTE`, in
    place of its own, and of a `WAITS_ATTRIBUTE` of old), attempts `history` and all, within SQS's
    attribute count and message size; else it waits in place."""
    own = {
        name: value
        for name, value in delivery.message_attributes.items()
        if name not in (WAITS_ATTRIBUTE, ADMISSION_ATTRIBUTE)
    }
    return len(own) < MAX_MESSAGE_ATTRIBUTES and copy_fits(delivery.body, own, history)


def wait_for_job(
    receiver: Receiver,
    delivery: Delivery,
    job: Job,
    holder: Lock,
    *,
    replacing: Lease | None,
    history: tuple[Attempt, ...],
) -> Outcome | None:
    """Write the message's REQUEUED marker, then send its delayed copy (the module's steps): this receive
    is then acknowledged and deleted, and the copy tries again when its delay ends, without using up a
    receive. None when the marker's write lost its race (read again). Raises when DynamoDB or SQS
    refuses: the record is reported failed and comes back (to its marker, if that was written)."""
    marker = closed_record(
        receiver,
        delivery,
        LeaseStatus.REQUEUED,
        version=successor_version(replacing),
        kept_s=_kept_s(receiver),
        job_type=job.type,
        job_id=job.job_id,
        history=history,
        waits=delivery.waits,
        refused_starts=delivery.refused_starts(replacing),
    )
    if not receiver.store.create(marker, replacing=replacing):
        return None
    delay = _send_copy(receiver, delivery, marker)
    logger.info(
        "job id is running: the message waits",
        extra={
            "message_id": delivery.message_id,
            "job_id": job.job_id,
            "holder": holder.execution_arn.rpartition(":")[2],
            "waits": delivery.waits + 1,
            "delay_s": delay,
        },
    )
    return Outcome.WAITING


def send_requeued_copy(receiver: Receiver, delivery: Delivery, marker: Lease) -> Outcome:
    """A requeued message received again whose copy is not known to be sent (the send failed, or landed
    unanswered: then two copies exist, and their claims run one): the copy is sent now."""
    _send_copy(receiver, delivery, marker)
    logger.info("requeued message received again: its copy is sent now", extra={"message_id": delivery.message_id})
    return Outcome.WAITING


def is_requeued_copy(receiver: Receiver, delivery: Delivery) -> bool:
    """Whether a delivery is a copy of a message that waited for its job id (on the queue it came from)."""
    return delivery.carried.requeued_from is not None and receiver.queue_of(delivery) == receiver.queue_url


CLAIM_STALE_S = LAMBDA_MAX_TIMEOUT_S
"""Lambda's longest timeout: a claim this old, whose claimant has no lease, was made by a receive that is
over (each receive of the claimant claims again, `Markers.claim_requeued`)."""


def claimant_state(receiver: Receiver, marker: Lease) -> str:
    """What a marker's claimant (a copy with no lease) is, judged from its last claim: `taking` (its
    receive may be under way), `lost` (its receives are over and it never got a lease: any lease it wrote
    after the claim would still be kept, `claim_kept_until`) or `unknown` (a lease it had may have
    expired, or the claim was made before claims recorded how long: whether the job ran cannot be told)."""
    now = receiver.clock.now()
    if now - (marker.claimed_at or 0.0) < CLAIM_STALE_S:
        return "taking"
    return "unknown" if marker.claim_kept_until is None or now >= marker.claim_kept_until else "lost"


@dataclass(frozen=True)
class Claim:
    """A copy's claim on its marker, as the decision takes it."""

    runs: bool
    """This copy runs the message."""
    cancelled: Lease | None = None
    """When it may not: the marker, which an operator cancelled (the copy then goes to the DLQ)."""
    busy: bool = False
    """When it may not: another copy claimed the run and may still be taking it (this one comes back)."""
    unknown: bool = False
    """When it may not: the claimant has no lease, and its claim is so old that whether it ran cannot be
    told (the DLQ then keeps this copy, with the reason)."""


def claim_copy(receiver: Receiver, delivery: Delivery) -> Claim:
    """Whether a requeued copy may run its message: when the marker names it (the first copy received
    claims the run), or when no marker names any (expired): it then runs as it is."""
    marker_id = delivery.carried.requeued_from or ""
    now = receiver.clock.now()
    claimed = receiver.store.markers.claim_requeued(marker_id, delivery.message_id, now=now)
    return claim_answer(
        receiver,
        delivery,
        marker_id,
        claimed,
        take_over=lambda marker: receiver.store.markers.take_over_claim(marker, delivery.message_id, now=now),
    )


def claim_answer(
    receiver: Receiver,
    delivery: Delivery,
    marker_id: str,
    claimed: bool | None,
    *,
    take_over: Callable[[Lease], bool],
) -> Claim:
    """A copy's claim on its marker (`Markers.claim_parked`, `claim_requeued`) as the decision takes it.

    Refused, the copy is a twin to acknowledge only when the claimant carries the run: it has a lease (it
    runs, waits, was requeued, parked or dead-lettered). A claimant with no lease (`claimant_state`) may
    still be taking it: this copy comes back later. Once its receives are over it never got a lease: it
    went to the DLQ through SQS's redrive, and a redrive of the DLQ sends it back as a new message (new
    id, same attributes): this copy takes the run over (`take_over`), so the message is not
    acknowledged away unrun. Past the table's memory of closed leases it cannot be told whether the
    claimant ran: the copy goes to the DLQ with the reason, never run a second time nor dropped."""
    if claimed is not False:
        return Claim(runs=True)
    store = receiver.store
    marker = store.get(marker_id)
    if marker is not None and marker.status is LeaseStatus.CANCELLED:
        logger.warning("copy of a cancelled message", extra={"message_id": delivery.message_id, "of": marker_id})
        return Claim(runs=False, cancelled=marker)
    claimant = marker.claimed_by if marker is not None else None
    if marker is not None and claimant is not None and store.get(claimant) is None:
        state = claimant_state(receiver, marker)
        if state == "taking":
            logger.info("the claimant copy may still be taking the run", extra={"message_id": delivery.message_id})
            return Claim(runs=False, busy=True)
        if state == "unknown":
            return Claim(runs=False, unknown=True)
        if take_over(marker):
            logger.warning(
                "took the run over from a claimant copy that never got a lease",
                extra={"message_id": delivery.message_id, "of": marker_id, "claimant": claimant},
            )
            return Claim(runs=True)
        return Claim(runs=False, busy=True)  # the marker changed meanwhile: read again when it comes back
    logger.warning(
        "twin copy: acknowledged, the other copy runs", extra={"message_id": delivery.message_id, "of": marker_id}
    )
    return Claim(runs=False)


def _kept_s(receiver: Receiver) -> float:
    """How long a marker outlives its write: a copy may wait out its delay, then the queue's retention."""
    return MAX_DELAY_S + receiver.settings.queue_retention_s


def _send_copy(receiver: Receiver, delivery: Delivery, marker: Lease) -> int:
    """Send the marker's copy with its delay, then note its id on the marker (best effort: without it a
    redelivery sends another copy, and the twins' claim runs one); the delay sent."""
    delay = wait_delay_s(marker.waits, receiver.settings, receiver.rng)
    carried = replace(
        delivery.carried,
        original_id=delivery.original_id,
        history=marker.history,
        parked_id=None,  # claimed already, by this message: the copy claims from this marker
        requeued_from=marker.message_id,
        job_waits=marker.waits + 1,
        refused_starts=marker.refused_starts,
    )
    own = {name: value for name, value in delivery.message_attributes.items() if name != WAITS_ATTRIBUTE}
    attributes = copy_attributes(delivery.body, own, carried)
    sent_at = receiver.clock.now()
    sent = receiver.sqs.send_message(
        QueueUrl=receiver.queue_url, MessageBody=delivery.body, DelaySeconds=delay, MessageAttributes=attributes
    )
    kept_until = sent_at + _kept_s(receiver)
    if not receiver.store.markers.note_copy(marker, sent["MessageId"], sent_at=sent_at, kept_until=kept_until):
        logger.info("requeued marker changed meanwhile: copy not noted", extra={"message_id": marker.message_id})
    return delay
