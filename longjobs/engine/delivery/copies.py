"""Copies of a message: how a message that cannot run now is sent again as a copy of itself, and how the
copy, once received, runs the message exactly once.

Two kinds, one mechanism. A message whose job id another execution runs waits for it: its copy goes back
to the jobs queue with a delay, under a REQUEUED marker (`wait_for_job`). A message whose type is full
beyond the admission horizon is parked: its copy goes to the type's waiting queue, under a PARKED marker
that also holds the message itself (`park`; the waiting queues' upkeep is `longjobs.engine.admission.parking`).

SendMessage is not idempotent: an answer lost after the send landed (botocore sends it again), or a crash
between the send and the deletion of the message (SQS delivers it again, and it sends again), leaves two
copies, and each would run the job. So every copy is made in the same three steps:

1. the message's lease becomes its marker, written first (conditional on the lease as read);
2. the copy is sent, naming the marker's message (`Carried.requeued_from` or `Carried.parked_id`), with
   its waits and the message's failed attempts, so its history goes on;
3. its id is noted on the marker (best effort), and the message is acknowledged.

A redelivery of the message finds its marker: acknowledged when a copy is known (noted or claimed), else
the copy is sent again (`send_copy_again`). A copy received with no lease of its own first claims the run
on its marker (`claim_copy`): the first copy to claim runs; any other, a twin, is acknowledged once the
claimant has a lease (`claim_answer`: until then it comes back, and a claimant that never gets one has its
run taken over); a copy whose marker was cancelled goes to the DLQ. A copy that has to wait again becomes
the marker of the next copy, so each link of the chain runs at most one successor.

A copy carries all of this in one message attribute, so any message that could be parked can be
requeued. A message with ten attributes of its own (SQS's most) leaves no room (`has_room`): it waits in
place instead, hidden for the wait and reported not done, as on a FIFO queue; each wait then uses one of
its receives, and when its receives or its retention are nearly spent it goes to the DLQ as `JobIdBusy`
rather than to SQS's redrive (no reason) or past its retention (lost).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from longjobs.engine.delivery.attempt import closed_record, wait_delay_s
from longjobs.engine.delivery.models import Job
from longjobs.engine.delivery.types import (
    ADMISSION_ATTRIBUTE,
    MAX_MESSAGE_ATTRIBUTES,
    WAITS_ATTRIBUTE,
    Carried,
    Delivery,
    Outcome,
    Receiver,
    copy_attributes,
    copy_fits,
    message_bytes,
)
from longjobs.engine.lease import Lease, LeaseStatus, Lock, successor_version
from longjobs.engine.lease.markers import CopyNote
from longjobs.engine.lease.types import Attempt
from longjobs.engine.observability import logger
from longjobs.engine.settings import LAMBDA_MAX_TIMEOUT_S, MAX_DELAY_S, MESSAGE_MAX_BYTES

__all__ = [
    "CLAIM_STALE_S",
    "PARKED_MESSAGE_MAX_BYTES",
    "Claim",
    "claim_answer",
    "claim_copy",
    "claimant_state",
    "has_room",
    "is_live_marker",
    "is_parked_copy",
    "is_requeued_copy",
    "message_to_send",
    "park",
    "parked_copy_of",
    "send_copy_again",
    "send_parked",
    "send_pending_copies",
    "stored_message",
    "wait_for_job",
]


# -- the copy and its claim, either kind ---------------------------------------------------------------

CLAIM_STALE_S = LAMBDA_MAX_TIMEOUT_S
"""Lambda's longest timeout: a claim this old, whose claimant has no lease, was made by a receive that is
over (each receive of the claimant claims again, `Markers.claim_requeued`)."""


def claimant_state(receiver: Receiver, marker: Lease) -> str:
    """What a marker's claimant (a copy with no lease) is, judged from its last claim: `taking` (its
    receive may be under way), `lost` (its receives are over and it never got a lease: any lease it wrote
    after the claim would still be kept, `claim_kept_until`) or `unknown` (a lease it had may have
    expired, or the claim records no `claim_kept_until`): whether the job ran cannot be told)."""
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
    """Whether a copy may run its message: when its marker names it (the first copy received claims the
    run), or when no marker names any (expired): it then runs as it is. When it may not, the marker if an
    operator cancelled it (`longjobs.engine.cancel`: the copy goes to the DLQ). A parked copy's claim also
    sets the marker's place in its parked line: the claimant's send time, or earlier (see below)."""
    now = receiver.clock.now()
    markers = receiver.store.markers
    if is_requeued_copy(receiver, delivery):
        marker_id = delivery.carried.requeued_from or ""
        claimed = markers.claim_requeued(marker_id, delivery.message_id, now=now)
        return claim_answer(
            receiver,
            delivery,
            marker_id,
            claimed,
            take_over=lambda marker: markers.take_over_claim(marker, delivery.message_id, now=now),
        )
    parked_id = delivery.carried.parked_id or ""
    sent_at = delivery.sent_at if delivery.sent_at is not None else now
    # The marker falls due by the claimant's retention, and by half the time a closed lease is kept:
    # the parked line's upkeep then still tells a claimant that never got a lease from one whose lease
    # expired (`longjobs.engine.admission.parking`).
    settings = receiver.settings
    keep_s = settings.resend_after_s
    order = min(sent_at, now + settings.closed_ttl_s / 2 - keep_s)
    claimed = markers.claim_parked(parked_id, delivery.message_id, sent_at=order, now=now)
    return claim_answer(
        receiver,
        delivery,
        parked_id,
        claimed,
        take_over=lambda marker: markers.take_over_claim(marker, delivery.message_id, now=now, order=order),
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


def is_requeued_copy(receiver: Receiver, delivery: Delivery) -> bool:
    """Whether a delivery is a copy of a message that waited for its job id (on the queue it came from)."""
    return delivery.carried.requeued_from is not None and receiver.queue_of(delivery) == receiver.queue_url


def is_parked_copy(receiver: Receiver, delivery: Delivery) -> bool:
    """Whether a delivery is a parked copy received from a waiting queue that names its original. A copy
    on the jobs queue may name one too (a requeued copy that kept the attribute): it is not a parked copy."""
    return delivery.carried.parked_id is not None and receiver.queue_of(delivery) != receiver.queue_url


def is_live_marker(receiver: Receiver, lease: Lease) -> bool:
    """Whether a lease is the PARKED marker of a type that still has a waiting queue (else the message
    is handled as any closed one: a new attempt)."""
    return lease.status is LeaseStatus.PARKED and lease.job_type in receiver.settings.waiting_queue_urls


def has_room(delivery: Delivery, history: Sequence[Attempt], *, parked: bool = False) -> bool:
    """Whether a copy of the message has room for the attribute it carries on (`ADMISSION_ATTRIBUTE`, in
    place of its own; a requeued copy drops a legacy `WAITS_ATTRIBUTE` too), attempts `history` and all,
    within SQS's attribute count and message size; and, to be `parked`, whether its marker has room for
    the message itself. Else it waits in place (in flight)."""
    dropped = (ADMISSION_ATTRIBUTE,) if parked else (WAITS_ATTRIBUTE, ADMISSION_ATTRIBUTE)
    own = {name: value for name, value in delivery.message_attributes.items() if name not in dropped}
    if len(own) >= MAX_MESSAGE_ATTRIBUTES or not copy_fits(delivery.body, own, history):
        return False
    return not parked or len(stored_message(delivery)) <= PARKED_MESSAGE_MAX_BYTES


def send_copy_again(receiver: Receiver, delivery: Delivery, marker: Lease) -> Outcome:
    """A copied message received again whose copy is not known to be sent (the send failed, or landed
    unanswered: then two copies exist, and their claims run one): the copy is sent now. A parked one's
    type must still have a waiting queue (`is_live_marker`)."""
    if marker.status is LeaseStatus.REQUEUED:
        _send_requeued(receiver, delivery, marker)
        logger.info("requeued message received again: its copy is sent now", extra={"message_id": delivery.message_id})
        return Outcome.WAITING
    queue_url = receiver.settings.waiting_queue_urls[marker.job_type or ""]
    if marker.parked_message is None:  # a marker that does not hold its message (an older release's)
        marker = replace(marker, parked_message=stored_message(delivery))
    send_parked(receiver, queue_url, marker)
    logger.info("parked message received again: its copy is sent now", extra={"message_id": delivery.message_id})
    return Outcome.PARKED


# -- waiting for a job id: a requeued copy -------------------------------------------------------------


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
        kept_s=_requeued_kept_s(receiver),
        job_type=job.type,
        job_id=job.job_id,
        history=history,
        waits=delivery.waits,
        refused_starts=delivery.refused_starts(replacing),
    )
    if not receiver.store.create(marker, replacing=replacing):
        return None
    delay = _send_requeued(receiver, delivery, marker)
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


def _requeued_kept_s(receiver: Receiver) -> float:
    """How long a marker outlives its write: a copy may wait out its delay, then the queue's retention."""
    return MAX_DELAY_S + receiver.settings.queue_retention_s


def _send_requeued(receiver: Receiver, delivery: Delivery, marker: Lease) -> int:
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
    kept_until = sent_at + _requeued_kept_s(receiver)
    if not receiver.store.markers.note_copy(marker, sent["MessageId"], sent_at=sent_at, kept_until=kept_until):
        logger.info("requeued marker changed meanwhile: copy not noted", extra={"message_id": marker.message_id})
    return delay


# -- a full type: a parked copy ----------------------------------------------------------------------

PARKED_MESSAGE_MAX_BYTES = 300_000
"""The largest message a PARKED marker keeps (its JSON): DynamoDB's items hold 400 KB, and the marker
keeps the message's attempts besides. A larger message waits in flight instead."""

_Pending = tuple[Lease, tuple[str, dict[str, Any]]]
"""A copy to send: its marker, and its body and attributes."""


def park(
    receiver: Receiver,
    delivery: Delivery,
    job: Job,
    queue_url: str,
    *,
    replacing: Lease | None,
    history: tuple[Attempt, ...],
    since: float,
    waits: int,
) -> bool:
    """Copy the message to its type's waiting queue, with what it carries. First a PARKED marker is
    written on its lease, holding the message itself, so a redelivery of this message (its deletion
    lost, a send retried after it landed) sends no second copy, twin copies run once
    (`runs_this_copy`), and a fresh copy can be sent before this one's retention runs out
    (`refresh_parked`). False when the marker write lost its race (read again). Raises when SQS refuses:
    the record is reported failed and comes back to a marker without a copy, which sends it then
    (`send_copy_again`). A record of a batch of the jobs queue leaves its copy to the batch's end, when
    the batch's copies are sent together (`send_pending_copies`), as if it had died after the marker."""
    now = receiver.clock.now()
    marker = closed_record(
        receiver,
        delivery,
        LeaseStatus.PARKED,
        version=successor_version(replacing),
        kept_s=receiver.settings.queue_retention_s,  # as long as a copy may be in the waiting queue
        job_type=job.type,
        job_id=job.job_id,
        history=history,
        waiting_since=since,
        waits=waits,
        refused_starts=delivery.refused_starts(replacing),
        copy_sent_at=now,  # before the send: never later than the copy's own send time
        parked_message=stored_message(delivery),
    )
    if not receiver.store.create(marker, replacing=replacing):
        return False
    batch = receiver.state.pending_copies.get(delivery.message_id)
    if batch is not None:
        batch.append((queue_url, marker))  # a record of a batch: sent with the batch's others at its end
    else:
        send_parked(receiver, queue_url, marker)
    logger.info("type full beyond the horizon: parked", extra={"message_id": delivery.message_id})
    return True


def stored_message(delivery: Delivery) -> str:
    """The message as a PARKED marker keeps it (JSON of its body, its attributes with binary values in
    base64, and its producer's message id), to send its copy from."""
    attributes = {}
    for name, value in delivery.message_attributes.items():
        if name == ADMISSION_ATTRIBUTE:
            continue
        if "BinaryValue" in value:
            encoded = base64.b64encode(value["BinaryValue"]).decode()
            attributes[name] = {"DataType": value["DataType"], "Base64": encoded}
        else:
            attributes[name] = {"DataType": value["DataType"], "StringValue": value["StringValue"]}
    stored = {"body": delivery.body, "attributes": attributes, "original": delivery.original_id}
    return json.dumps(stored, separators=(",", ":"))


def message_to_send(stored: str) -> tuple[str, dict[str, Any], str]:
    """A stored message's body, its attributes as `SendMessage` takes them, and its original's id."""
    data = json.loads(stored)
    attributes: dict[str, Any] = {}
    for name, value in data["attributes"].items():
        if "Base64" in value:
            attributes[name] = {"DataType": value["DataType"], "BinaryValue": base64.b64decode(value["Base64"])}
        else:
            attributes[name] = value
    return str(data["body"]), attributes, str(data["original"])


def parked_copy_of(marker: Lease) -> tuple[str, dict[str, Any]]:
    """The body and attributes of the copy a PARKED marker describes: its stored message, carrying the
    marker's place and history."""
    body, attributes, original_id = message_to_send(marker.parked_message or "")
    carried = Carried(
        waiting_since=marker.waiting_since,
        original_id=original_id,
        waits=marker.waits,
        history=marker.history,
        parked_id=marker.message_id,
        refused_starts=marker.refused_starts,
    )
    return body, copy_attributes(body, attributes, carried)


def send_parked(receiver: Receiver, queue_url: str, marker: Lease) -> None:
    """Send the copy a PARKED marker describes, then note its id and send time on the marker (best
    effort: without it a redelivery sends another copy, or the copy is sent again early, and the twins'
    claim runs one)."""
    body, attributes = parked_copy_of(marker)
    sent_at = receiver.clock.now()  # before the send: never later than SQS's own send time
    sent = receiver.sqs.send_message(QueueUrl=queue_url, MessageBody=body, MessageAttributes=attributes)
    kept_until = sent_at + receiver.settings.queue_retention_s
    if not receiver.store.markers.note_copy(marker, sent["MessageId"], sent_at=sent_at, kept_until=kept_until):
        logger.info("parked marker changed meanwhile: copy not noted", extra={"message_id": marker.message_id})


def send_pending_copies(receiver: Receiver, pending: Sequence[tuple[str, Lease]]) -> set[str]:
    """Send the copies a batch's parkings left to its end (`pending`, see `park`): up to ten a
    `SendMessageBatch`, and `MESSAGE_MAX_BYTES` in all (SQS's limit on a batch's sum), then note them on
    their markers together (`Markers.note_copies`; best effort, as `send_parked`'s note). Returns the
    ids of the messages whose copy was not sent (refused, or its request failed): their records are
    reported failed, and each one's redelivery finds its marker without a copy and sends it then
    (`send_copy_again`). A request that failed after it landed leaves twin copies, and the first
    received claims the run."""
    unsent: set[str] = set()
    notes: list[CopyNote] = []
    by_queue: dict[str, list[_Pending]] = {}
    for queue_url, marker in pending:
        try:
            by_queue.setdefault(queue_url, []).append((marker, parked_copy_of(marker)))
        except Exception as exc:  # a copy SQS would refuse (`has_room` said it fits): its record fails
            logger.warning("parked copy not built", extra={"message_id": marker.message_id, "error": str(exc)})
            unsent.add(marker.message_id)
    for queue_url, copies in by_queue.items():
        for chunk in _send_batches(copies):
            sent_at = receiver.clock.now()  # before the send: never later than SQS's own send time
            entries: list[Any] = [
                {"Id": str(index), "MessageBody": body, "MessageAttributes": attributes}
                for index, (_, (body, attributes)) in enumerate(chunk)
            ]
            try:
                response = receiver.sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
            except Exception as exc:
                logger.warning("parked copies not sent; their records fail", extra={"error": str(exc)})
                unsent.update(marker.message_id for marker, _ in chunk)
                continue
            for failed in response.get("Failed", []):
                marker = chunk[int(failed["Id"])][0]
                logger.warning("parked copy refused", extra={"message_id": marker.message_id, "error": failed})
                unsent.add(marker.message_id)
            kept_until = sent_at + receiver.settings.queue_retention_s
            notes += [
                CopyNote(chunk[int(sent["Id"])][0], sent["MessageId"], sent_at, kept_until)
                for sent in response.get("Successful", [])
            ]
    if notes:
        try:
            noted = receiver.store.markers.note_copies(notes)
        except Exception as exc:  # sent all the same: a redelivery would send a twin, and one runs
            logger.warning("parked copies not noted", extra={"error": str(exc)})
        else:
            for note, landed in zip(notes, noted, strict=True):
                if not landed:
                    extra = {"message_id": note.marker.message_id}
                    logger.info("parked marker changed meanwhile: copy not noted", extra=extra)
    return unsent


def _send_batches(copies: Sequence[_Pending]) -> list[list[_Pending]]:
    """`copies` in batches SQS takes: at most ten messages, and `MESSAGE_MAX_BYTES` in all."""
    batches: list[list[_Pending]] = []
    size = 0
    for copy in copies:
        body, attributes = copy[1]
        length = message_bytes(body, attributes)
        if not batches or len(batches[-1]) == 10 or size + length > MESSAGE_MAX_BYTES:
            batches.append([])
            size = 0
        batches[-1].append(copy)
        size += length
    return batches
