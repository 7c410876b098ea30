"""The waiting queues' upkeep: the parked copies of a full type (made by `longjobs.engine.delivery.copies.park`)
kept inside their queue's retention (`refresh_parked`), and received back when the type's horizon can take
them (`unpark`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from longjobs.engine.admission.readings import longest_wait_s
from longjobs.engine.delivery import dlq_claim
from longjobs.engine.delivery.attempt import closed_record, same_write
from longjobs.engine.delivery.copies import CLAIM_STALE_S, claimant_state, message_to_send, send_parked
from longjobs.engine.delivery.dlq import RETENTION_RUNNING_OUT
from longjobs.engine.delivery.dlq_claim import kept_s, send_claimed
from longjobs.engine.delivery.read_ahead import forget_read_ahead, read_ahead
from longjobs.engine.delivery.types import ADMISSION_ATTRIBUTE, Carried, Delivery, Outcome, Receiver, copy_fits, sent_at
from longjobs.engine.execution import RUNNING_STATUSES, execution_status
from longjobs.engine.lease import Lease, LeaseStatus, successor_version
from longjobs.engine.lease.codec import in_parked_line
from longjobs.engine.lease.types import COPIED_STATUSES, DONE_STATUSES, Attempt, LastError
from longjobs.engine.observability import logger
from longjobs.engine.policies.base import SQS_MAX_VISIBILITY_S
from longjobs.engine.settings import LAMBDA_MAX_TIMEOUT_S, MESSAGE_MAX_BYTES, Settings
from longjobs.engine.settle import release_holds

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

Handle = Callable[[Receiver, Delivery], Outcome]
"""How a message received from a waiting queue is handled: the receiver's `receive`, given by the caller
(admission sits below the receiver's entry point and never imports it)."""


UNPARK_CALLS = 10
"""Receive calls on a waiting queue per admission pass at most (100 messages); as many pages of
markers whose copy is sent again."""
REFRESH_PAGE = 10
"""Markers read per query of a type's parked line."""


def refresh_parked(receiver: Receiver, job_type: str, *, deadline: float = math.inf) -> int:
    """Keep every parked message of `job_type` inside the waiting queue's retention (SQS deletes a message
    that long after its send, received or not): for each marker of the type's parked line whose copy was
    sent `resend_after_s` ago, oldest first, an unclaimed one gets a fresh copy,
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
    keep_s = settings.resend_after_s
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
        send_parked(receiver, queue_url, marker)
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
    recheck_at = now - settings.resend_after_s + settings.retention_margin_s / 4
    state = claimant_state(receiver, marker) if claimant is None else None
    if state == "taking":  # looked at again once its receive is surely over
        keep_s = settings.resend_after_s
        store.markers.move_in_parked_line(marker, sent_at=(marker.claimed_at or now) + CLAIM_STALE_S - keep_s)
        return False
    if claimant is not None and claimant.status is LeaseStatus.DEAD_LETTERING:
        return _send_claimant_dead_letter(receiver, queue_url, marker, claimant)
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
    send_parked(receiver, queue_url, parked)
    logger.info("claimed parked copy near its retention: parked again", extra={"message_id": claimant_id})
    return True


def _copy_would_fit(marker: Lease, history: Sequence[Attempt]) -> bool:
    """Whether a copy of the marker's stored message, carrying `history`, fits in one SQS message."""
    body, attributes, _ = message_to_send(marker.parked_message or "")
    return copy_fits(body, attributes, history)


def _claimant_delivery(queue_url: str, marker: Lease, claimant: Lease) -> Delivery:
    """The claimant as a delivery to send to the DLQ, from the marker's stored message: the claimant's copy
    itself may never be received again (its type full) before SQS deletes it."""
    body, attributes, original_id = message_to_send(marker.parked_message or "")
    carried = {ADMISSION_ATTRIBUTE: {"DataType": "String", "StringValue": Carried(original_id=original_id).encode()}}
    return Delivery(
        message_id=claimant.message_id,
        receipt_handle=claimant.receipt_handle,
        body=body,
        receive_count=claimant.receive_count,
        source_arn=queue_url,
        message_attributes={**attributes, **carried},
        queue_url=queue_url,
    )


def _send_claimant_dead_letter(receiver: Receiver, queue_url: str, marker: Lease, claimant: Lease) -> bool:
    """A claimant whose DLQ send was claimed and no copy noted (DEAD_LETTERING, `dlq_claim`): its claimant
    (this pass's or a receive's) gave the claim up after a failed send, or died. Its copy waits in a waiting
    queue that no receive reads while the type is full, and SQS deletes it a margin from now: no receive
    may come to take the claim over. So the claim is taken over here once it is no longer live, as a receive
    would (or at once when it would outlive the claimant's copy), and the message is sent from the marker's
    stored message; the marker then leaves the line. A live claim is looked at again once it has lapsed. A
    send that fails raises: the marker stays due, and the next pass sends. Never True: the copy sent goes
    to the DLQ, not to the waiting queue."""
    settings, now = receiver.settings, receiver.clock.now()
    delivery = _claimant_delivery(queue_url, marker, claimant)
    name, life_s = delivery.claimant(receiver.rng), dlq_claim.claim_life_s(settings)
    live = not dlq_claim.may_send(claimant, name, now=now, life_s=life_s)
    retention_s = settings.queue_retention_s
    if live and not dlq_claim.outlives_message(claimant, marker.copy_sent_at, retention_s=retention_s, life_s=life_s):
        keep_s = retention_s - settings.retention_margin_s
        receiver.store.markers.move_in_parked_line(marker, sent_at=(claimant.claimed_at or now) + life_s - keep_s)
        return False
    claimed = dlq_claim.claim(receiver.store, claimant, name, now=now)
    if claimed is None:
        return False  # the claimant's record changed meanwhile: the next pass looks again
    send_claimed(receiver, delivery, claimed)
    logger.warning("parked claimant's DLQ send taken over", extra={"message_id": claimant.message_id})
    receiver.store.markers.move_in_parked_line(marker, sent_at=None)
    return False


def _dead_letter_claimant(
    receiver: Receiver, queue_url: str, marker: Lease, claimant: Lease, history: Sequence[Attempt]
) -> None:
    """A claimant whose attempts no longer fit in a copy beside its message (checked when it was first
    parked, with the attempts it had then): to the DLQ from the marker's stored message, with the reason,
    its lease closed REJECTED; the marker leaves the line. Parked again, its copy would be refused and SQS
    would delete the claimant at its retention while its type stays full: lost."""
    delivery = _claimant_delivery(queue_url, marker, claimant)
    reason = f"its copy with {len(history)} attempts would not fit in one SQS message ({MESSAGE_MAX_BYTES} bytes)"
    release_holds(claimant, store=receiver.store, clock=receiver.clock)  # as `dead_letter`: it leaves for good
    record = closed_record(
        receiver,
        delivery,
        LeaseStatus.DEAD_LETTERING,
        kept_s=kept_s(receiver.settings, claimant.sent_at, now=receiver.clock.now()),
        version=successor_version(claimant),
        job_type=claimant.job_type,
        last_error=LastError(RETENTION_RUNNING_OUT, reason),
        history=tuple(history),
        claimed_by=delivery.claimant(receiver.rng),
        claimed_at=receiver.clock.now(),
    )
    # The send is claimed first, as the receiver's (`dlq_claim`): a receive of the claimant meanwhile wins,
    # and the next pass looks at the marker again.
    if not receiver.store.markers.replace_in_place(record, replacing=claimant):
        logger.info("parked claimant received meanwhile", extra={"message_id": claimant.message_id})
        return
    send_claimed(receiver, delivery, record)
    logger.warning("parked claimant sent to the DLQ", extra={"message_id": claimant.message_id, "reason": reason})
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
    again while the invocation that received it may still handle it (a short horizon alone would make it
    shorter than the receiver's timeout). A copy that then
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
