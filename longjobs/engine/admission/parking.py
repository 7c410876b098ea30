"""Parking: a message whose type is full beyond the horizon is copied to the type's waiting queue and
acknowledged, a PARKED marker on its lease written first, so a redelivery of it sends no second copy and
twin copies run once; unparking receives the copies back when the horizon can take them."""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from longjobs.engine.admission.readings import longest_wait_s
from longjobs.engine.delivery.attempt import closed_record, same_write
from longjobs.engine.delivery.dlq import RETENTION_RUNNING_OUT, send_exhausted_to_dlq
from longjobs.engine.delivery.models import Job
from longjobs.engine.delivery.read_ahead import forget_read_ahead, read_ahead
from longjobs.engine.delivery.requeue import CLAIM_STALE_S, Claim, claim_answer, claimant_state
from longjobs.engine.delivery.types import (
    ADMISSION_ATTRIBUTE,
    MAX_MESSAGE_ATTRIBUTES,
    Carried,
    Delivery,
    Outcome,
    Receiver,
    copy_attributes,
    copy_fits,
    message_bytes,
    sent_at,
)
from longjobs.engine.execution import RUNNING_STATUSES, execution_status
from longjobs.engine.lease import Lease, LeaseStatus, successor_version
from longjobs.engine.lease.codec import in_parked_line
from longjobs.engine.lease.markers import CopyNote
from longjobs.engine.lease.types import COPIED_STATUSES, DONE_STATUSES, Attempt, LastError
from longjobs.engine.observability import logger
from longjobs.engine.policies.base import SQS_MAX_VISIBILITY_S
from longjobs.engine.settings import LAMBDA_MAX_TIMEOUT_S, MESSAGE_MAX_BYTES, Settings
from longjobs.engine.settle import release_holds

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

_Pending = tuple[Lease, tuple[str, dict[str, Any]]]
"""A copy to send: its marker, and its body and attributes."""
Handle = Callable[[Receiver, Delivery], Outcome]
"""How a message received from a waiting queue is handled: the receiver's `receive`, given by the caller
(admission sits below the receiver's entry point and never imports it)."""


UNPARK_CALLS = 10
"""Receive calls on a waiting queue per admission pass at most (100 messages); as many pages of
markers whose copy is sent again."""
REFRESH_PAGE = 10
"""Markers read per query of a type's parked line."""
PARKED_MESSAGE_MAX_BYTES = 300_000
"""The largest message a PARKED marker keeps (its JSON): DynamoDB's items hold 400 KB, and the marker
keeps the message's attempts besides. A larger message waits in flight instead."""


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
    (`send_parked_copy`). A record of a batch of the jobs queue leaves its copy to the batch's end, when
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
        _send_copy(receiver, queue_url, marker)
    logger.info("type full beyond the horizon: parked", extra={"message_id": delivery.message_id})
    return True


def send_parked_copy(receiver: Receiver, delivery: Delivery, marker: Lease) -> Outcome:
    """A parked message received again whose copy is not known to be sent (the earlier send failed, or
    landed unanswered: then two copies exist and one of them runs): the copy is sent now. Its type must
    still have a waiting queue (`is_live_marker`)."""
    queue_url = receiver.settings.waiting_queue_urls[marker.job_type or ""]
    if marker.parked_message is None:  # a marker written before markers held their message
        marker = replace(marker, parked_message=stored_message(delivery))
    _send_copy(receiver, queue_url, marker)
    logger.info("parked message received again: its copy is sent now", extra={"message_id": delivery.message_id})
    return Outcome.PARKED


def refresh_parked(receiver: Receiver, job_type: str, *, deadline: float = math.inf) -> int:
    """Keep every parked message of `job_type` inside the waiting queue's retention (SQS deletes a message
    that long after its send, received or not): for each marker of the type's parked line whose copy was
    sent `queue_retention_s - retention_margin_s` ago, oldest first, an unclaimed one gets a fresh copy,
    and a claimed one whose claimant does not run has its claimant parked in turn (`_park_claimant`);
    how many copies were sent. The old copy may still be received before it expires: the first copy
    received claims the run and any other is acknowledged (`claim_copy`), and a parked claimant's
    redelivery finds its own marker, so a copy sent twice (a crash before its note) runs once.

    The time the line's oldest marker falls due is kept per container, so a pass with nothing due makes
    no request."""
    settings, clock = receiver.settings, receiver.clock
    queue_url = settings.waiting_queue_urls.get(job_type)
    if queue_url is None or clock.now() < receiver.state.next_refresh.get(job_type, -math.inf):
        return 0
    keep_s = settings.queue_retention_s - settings.retention_margin_s
    sent = 0
    failed: Exception | None = None
    tried: set[str] = set()  # each marker once a pass: one that failed stays at the head of the line
    failures = 0
    for _ in range(UNPARK_CALLS):
        if clock.now() >= deadline:
            break  # the rest next pass: `next_refresh` is not moved
        limit = REFRESH_PAGE + failures  # past the markers that failed, still listed first
        due = receiver.store.markers.parked_due(job_type, sent_before=clock.now() - keep_s, limit=limit)
        fresh = [listed for listed in due if listed.message_id not in tried]
        for listed in fresh:
            tried.add(listed.message_id)
            try:
                sent += _refresh(receiver, queue_url, listed.message_id, keep_s)
            except Exception as exc:  # the markers behind it are still refreshed; the pass counts as failed
                extra = {"message_id": listed.message_id, "error": str(exc)}
                logger.warning("parked marker not refreshed", extra=extra)
                failed = failed or exc
                failures += 1
        if not fresh or len(due) < limit:
            break
    if failed is not None:
        raise failed  # `next_refresh` is not moved: the marker is tried again next pass
    if clock.now() >= deadline:
        return sent
    oldest = receiver.store.markers.parked_due(job_type, sent_before=None, limit=1)
    oldest_sent = (oldest[0].copy_sent_at or 0.0) if oldest else clock.now()  # a later copy is due later
    receiver.state.next_refresh[job_type] = oldest_sent + keep_s
    return sent


def _refresh(receiver: Receiver, queue_url: str, message_id: str, keep_s: float) -> int:
    """One marker of the parked line that fell due: its copy sent again, or its claimant parked in turn;
    how many copies were sent."""
    marker = receiver.store.get(message_id)  # the index lags: act on the table's version
    if marker is None or not in_parked_line(marker) or _sent_since(marker, receiver.clock.now() - keep_s):
        return 0
    if marker.claimed_by is None:
        _send_copy(receiver, queue_url, marker)
        logger.info("parked copy near its retention: sent again", extra={"message_id": marker.message_id})
        return 1
    return 1 if _park_claimant(receiver, queue_url, marker) else 0


def _park_claimant(receiver: Receiver, queue_url: str, marker: Lease) -> bool:
    """A claimed marker whose claimant (the copy that may run it) was sent long enough ago that SQS may
    delete it: when the claimant waits or was released and does not run, it is parked in turn, as its
    receive now would do (a marker of its own, replacing its lease on condition of its version, then a
    fresh copy); while it runs, the marker is looked at again a margin later; once it is done or parked,
    the marker leaves the line. So does a REQUEUED claimant: it went back to the jobs queue to wait for
    its job id, and its own copy runs the job. A claimant with no lease (`claimant_state`) may still be
    taking the run (looked at again later); else its receives are over and it never got one (its claim
    falls due while any lease it had would still be kept, `claim_copy`): it is parked in place, as one
    that waits, so its copy is sent afresh before SQS deletes it, and the claimant itself, if it is ever
    received, finds its own marker and is acknowledged. A claimant looked at too late to tell leaves the
    line. True when a copy was sent."""
    store, clock, settings = receiver.store, receiver.clock, receiver.settings
    claimant_id = marker.claimed_by or ""
    claimant = store.get(claimant_id)
    now = clock.now()
    recheck_at = now - (settings.queue_retention_s - settings.retention_margin_s) + settings.retention_margin_s / 4
    state = claimant_state(receiver, marker) if claimant is None else None
    if state == "taking":  # looked at again once its receive is surely over
        keep_s = settings.queue_retention_s - settings.retention_margin_s
        store.markers.move_in_parked_line(marker, sent_at=(marker.claimed_at or now) + CLAIM_STALE_S - keep_s)
        return False
    if state == "unknown" or (claimant is not None and claimant.status in (*COPIED_STATUSES, *DONE_STATUSES)):
        store.markers.move_in_parked_line(marker, sent_at=None)
        return False
    if claimant is not None and (claimant.active or _may_run(receiver, claimant)):
        store.markers.move_in_parked_line(marker, sent_at=recheck_at)
        return False
    parked = Lease(
        message_id=claimant_id,
        queue_url=queue_url,
        receipt_handle=claimant.receipt_handle if claimant is not None else "",
        receive_count=claimant.receive_count if claimant is not None else 0,
        received_at=now,
        visible_until=now,
        renew_until=now + settings.queue_retention_s,
        status=LeaseStatus.PARKED,
        version=claimant.version + 1 if claimant is not None else 0,
        closed_at=now,
        job_type=marker.job_type,
        job_id=marker.job_id,
        history=claimant.history_with_this() if claimant is not None else marker.history,
        waiting_since=marker.waiting_since,
        waits=claimant.waits if claimant is not None else marker.waits,
        refused_starts=claimant.refused_starts_with_this() if claimant is not None else marker.refused_starts,
        copy_sent_at=now,
        parked_message=marker.parked_message,
    )
    if claimant is None and not store.markers.take_over_claim(marker, claimant_id, now=now):
        return False  # a fence: the marker changed meanwhile (a twin took the run over, a cancel): look again
    if claimant is not None and not _copy_would_fit(marker, parked.history):
        _dead_letter_claimant(receiver, queue_url, marker, claimant, parked.history)
        return False
    if not _parked_in_place(receiver, parked, replacing=claimant):
        return False  # the claimant was received, admitted or closed meanwhile: the next pass looks again
    _send_copy(receiver, queue_url, parked)
    logger.info("claimed parked copy near its retention: parked again", extra={"message_id": claimant_id})
    return True


def _copy_would_fit(marker: Lease, history: Sequence[Attempt]) -> bool:
    """Whether a copy of the marker's stored message, carrying `history`, fits in one SQS message."""
    body, attributes, _ = message_to_send(marker.parked_message or "")
    return copy_fits(body, attributes, history)


def _dead_letter_claimant(
    receiver: Receiver, queue_url: str, marker: Lease, claimant: Lease, history: Sequence[Attempt]
) -> None:
    """A claimant whose attempts no longer fit in a copy beside its message (checked when it was first
    parked, with the attempts it had then): to the DLQ from the marker's stored message, with the reason,
    its lease closed REJECTED; the marker leaves the line. Parked again, its copy would be refused and SQS
    would delete the claimant at its retention while its type stays full: lost."""
    body, attributes, original_id = message_to_send(marker.parked_message or "")
    carried = {ADMISSION_ATTRIBUTE: {"DataType": "String", "StringValue": Carried(original_id=original_id).encode()}}
    delivery = Delivery(
        message_id=claimant.message_id,
        receipt_handle=claimant.receipt_handle,
        body=body,
        receive_count=claimant.receive_count,
        source_arn=queue_url,
        message_attributes={**attributes, **carried},
        queue_url=queue_url,
    )
    reason = f"its copy with {len(history)} attempts would not fit in one SQS message ({MESSAGE_MAX_BYTES} bytes)"
    release_holds(claimant, store=receiver.store, clock=receiver.clock)  # as `dead_letter`: it leaves for good
    dlq_url = receiver.settings.dlq_url or ""
    send_exhausted_to_dlq(receiver.sqs, dlq_url, delivery, history, error_type=RETENTION_RUNNING_OUT, message=reason)
    logger.warning("parked claimant sent to the DLQ", extra={"message_id": claimant.message_id, "reason": reason})
    record = closed_record(
        receiver,
        delivery,
        LeaseStatus.REJECTED,
        version=successor_version(claimant),
        job_type=claimant.job_type,
        last_error=LastError(RETENTION_RUNNING_OUT, reason),
        history=tuple(history),
    )
    if not receiver.store.markers.replace_in_place(record, replacing=claimant):  # received meanwhile: a record only
        logger.warning("could not record the DLQ send", extra={"message_id": claimant.message_id})
    receiver.store.markers.move_in_parked_line(marker, sent_at=None)


def _parked_in_place(receiver: Receiver, marker: Lease, *, replacing: Lease | None) -> bool:
    """Write the marker (`Markers.park_in_place`); when the write fails or loses its condition, read
    it back: a write that landed but whose answer was lost (a 5xx, a timeout, then a retry refused by
    the condition it had just met) is ours, and its copy must be sent now, or no copy of the message
    would exist until the marker fell due again."""
    try:
        if receiver.store.markers.park_in_place(marker, replacing=replacing):
            return True
    except Exception as exc:
        logger.warning("parking in place failed; reading whether it landed", extra={"error": str(exc)})
    stored = receiver.store.get(marker.message_id)
    return stored is not None and same_write(stored, marker)


def _sent_since(marker: Lease, moment: float) -> bool:
    """Whether a marker's copy (or claimant) was sent after `moment`: sent again since it was listed."""
    return (marker.copy_sent_at or 0.0) > moment


def _may_run(receiver: Receiver, claimant: Lease) -> bool:
    """Whether a closed claimant's execution may still run (a stop that has not taken effect yet)."""
    if not claimant.execution_arn or claimant.never_started:
        return False
    try:
        return execution_status(receiver.stepfunctions, claimant.execution_arn) in RUNNING_STATUSES
    except Exception as exc:  # unknown: counted as running, looked at again later
        logger.warning("claimant's execution status unknown", extra={"error": str(exc)})
        return True


def is_live_marker(receiver: Receiver, lease: Lease) -> bool:
    """Whether a lease is the PARKED marker of a type that still has a waiting queue (else the message
    is handled as any closed one: a new attempt)."""
    return lease.status is LeaseStatus.PARKED and lease.job_type in receiver.settings.waiting_queue_urls


def is_parked_copy(receiver: Receiver, delivery: Delivery) -> bool:
    """Whether a delivery is a parked copy received from a waiting queue that names its original (on the
    jobs queue, a copy requeued before requeued copies cleared the attribute may still name one)."""
    return delivery.carried.parked_id is not None and receiver.queue_of(delivery) != receiver.queue_url


def claim_copy(receiver: Receiver, delivery: Delivery) -> Claim:
    """Whether a parked copy may run its original: when its marker names it (the first copy received
    claims the run), or when no marker names any (parked before markers existed, or expired). When it may
    not, the marker if an operator cancelled it (`longjobs.engine.cancel`: the copy goes to the DLQ).
    The marker's place in its parked line becomes the claimant's send time, or earlier (see below)."""
    parked_id = delivery.carried.parked_id or ""
    now = receiver.clock.now()
    sent_at = delivery.sent_at if delivery.sent_at is not None else now
    # The marker falls due by the claimant's retention, and by half the time a closed lease is kept:
    # `_park_claimant` then still tells a claimant that never got a lease from one whose lease expired.
    settings = receiver.settings
    keep_s = settings.queue_retention_s - settings.retention_margin_s
    order = min(sent_at, now + settings.closed_ttl_s / 2 - keep_s)
    claimed = receiver.store.markers.claim_parked(parked_id, delivery.message_id, sent_at=order, now=now)
    return claim_answer(
        receiver,
        delivery,
        parked_id,
        claimed,
        take_over=lambda marker: receiver.store.markers.take_over_claim(
            marker, delivery.message_id, now=now, order=order
        ),
    )


def has_room(delivery: Delivery, history: Sequence[Attempt]) -> bool:
    """Whether the message can be parked: its copy has room for the admission attribute with `history`
    (SQS's attribute count and message size), and its marker for the message itself (else it waits in
    flight)."""
    attributes = {name: value for name, value in delivery.message_attributes.items() if name != ADMISSION_ATTRIBUTE}
    return (
        len(attributes) < MAX_MESSAGE_ATTRIBUTES
        and copy_fits(delivery.body, attributes, history)
        and len(stored_message(delivery)) <= PARKED_MESSAGE_MAX_BYTES
    )


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


def _copy_of(marker: Lease) -> tuple[str, dict[str, Any]]:
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


def _send_copy(receiver: Receiver, queue_url: str, marker: Lease) -> None:
    """Send the copy a PARKED marker describes, then note its id and send time on the marker (best
    effort: without it a redelivery sends another copy, or the copy is sent again early, and the twins'
    claim runs one)."""
    body, attributes = _copy_of(marker)
    sent_at = receiver.clock.now()  # before the send: never later than SQS's own send time
    sent = receiver.sqs.send_message(QueueUrl=queue_url, MessageBody=body, MessageAttributes=attributes)
    kept_until = sent_at + receiver.settings.queue_retention_s
    if not receiver.store.markers.note_copy(marker, sent["MessageId"], sent_at=sent_at, kept_until=kept_until):
        logger.info("parked marker changed meanwhile: copy not noted", extra={"message_id": marker.message_id})


def send_pending_copies(receiver: Receiver, pending: Sequence[tuple[str, Lease]]) -> set[str]:
    """Send the copies a batch's parkings left to its end (`pending`, see `park`): up to ten a
    `SendMessageBatch`, and `MESSAGE_MAX_BYTES` in all (SQS's limit on a batch's sum), then note them on
    their markers together (`Markers.note_copies`; best effort, as `_send_copy`'s note). Returns the
    ids of the messages whose copy was not sent (refused, or its request failed): their records are
    reported failed, and each one's redelivery finds its marker without a copy and sends it then
    (`send_parked_copy`). A request that failed after it landed leaves twin copies, and the first
    received claims the run."""
    unsent: set[str] = set()
    notes: list[CopyNote] = []
    by_queue: dict[str, list[_Pending]] = {}
    for queue_url, marker in pending:
        try:
            by_queue.setdefault(queue_url, []).append((marker, _copy_of(marker)))
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


def unpark(receiver: Receiver, queue_url: str, want: int, *, handle: Handle, deadline: float = math.inf) -> int:
    """Receive up to `want` parked messages of a waiting queue and handle each as the receiver does (it
    starts if a slot is free for it, else waits in flight there); those done are deleted. No receive is
    made past `deadline`; what was received is still handled."""
    received = 0
    hide_s = unparked_visibility_s(receiver.settings)
    for _ in range(UNPARK_CALLS):
        if received >= want or receiver.clock.now() >= deadline:
            break
        asked_at = receiver.clock.now()  # before the receive: never later than SQS's own hiding
        messages = receiver.sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=min(10, want - received),
            VisibilityTimeout=hide_s,
            AttributeNames=["ApproximateReceiveCount", "SentTimestamp"],
            MessageAttributeNames=["All"],
        ).get("Messages", [])
        if not messages:
            break
        received += len(messages)
        deliveries = sorted(
            (waiting_delivery(message, queue_url, hidden_until=asked_at + hide_s) for message in messages),
            key=lambda d: d.carried.waiting_since or 0.0,
        )
        read_ahead(receiver, deliveries)
        done: list[str] = []
        try:
            for delivery in deliveries:
                try:
                    outcome = handle(receiver, delivery)
                except Exception as exc:  # it shows again after the waiting queue's VT
                    logger.warning(
                        "unparked message failed", extra={"message_id": delivery.message_id, "error": str(exc)}
                    )
                    continue
                if not outcome.deferred:
                    done.append(delivery.receipt_handle)
        finally:
            forget_read_ahead(receiver, deliveries)  # the admitters' receivers begin no batch to forget them
        _delete(receiver.sqs, queue_url, done)
    return received


def unparked_visibility_s(settings: Settings) -> int:
    """How long an unparking's receive hides its copies: the longest a message waits hidden on one receive
    (`longest_wait_s`; within SQS's 12 h), and at least Lambda's longest timeout, so no copy is handed out
    again while the invocation that received it may still handle it (a review: a short horizon made it
    shorter than the receiver's timeout, which the queue's own timeout used to cover). A copy that then
    waits for a slot is already hidden at least as long as its estimate (`line.wait_or_park`), so its wait
    needs no visibility change of its own (one request a copy less); an admission in place sets its first
    chunk anyway. A copy whose receive fails comes back after that long rather than the queue's timeout:
    it keeps its place in its parked line."""
    return int(min(max(longest_wait_s(settings), LAMBDA_MAX_TIMEOUT_S), SQS_MAX_VISIBILITY_S))


def waiting_delivery(message: Mapping[str, Any], queue_url: str, *, hidden_until: float | None = None) -> Delivery:
    """A message received from a waiting queue, as the receiver takes it (`hidden_until`: see `Delivery`)."""
    return Delivery(
        message_id=message["MessageId"],
        receipt_handle=message["ReceiptHandle"],
        body=message["Body"],
        receive_count=int(message.get("Attributes", {}).get("ApproximateReceiveCount", "1")),
        sent_at=sent_at(message.get("Attributes", {}).get("SentTimestamp")),
        source_arn=queue_url,
        message_attributes={
            name: {k: v for k, v in value.items() if k in ("DataType", "StringValue", "BinaryValue")}
            for name, value in message.get("MessageAttributes", {}).items()
        },
        queue_url=queue_url,
        hidden_until=hidden_until,
    )


def _delete(sqs: SQSClient, queue_url: str, handles: Sequence[str]) -> None:
    for start in range(0, len(handles), 10):
        chunk = handles[start : start + 10]
        try:
            response = sqs.delete_message_batch(
                QueueUrl=queue_url, Entries=[{"Id": str(i), "ReceiptHandle": h} for i, h in enumerate(chunk)]
            )
        except Exception as exc:  # they show again; their lease says they were handled (no double effect)
            logger.warning("could not delete handled waiting messages", extra={"error": str(exc)})
            continue
        if response.get("Failed"):
            logger.warning("some handled waiting messages not deleted", extra={"failed": response["Failed"]})
