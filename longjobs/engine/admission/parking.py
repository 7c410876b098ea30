"""Parking: a message whose type is full beyond the horizon is copied to the type's waiting queue and
acknowledged, a PARKED marker on its lease written first, so a redelivery of it sends no second copy and
twin copies run once; unparking receives the copies back when the horizon can take them."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from longjobs.engine.lease import Lease, LeaseStatus
from longjobs.engine.lease.types import Attempt
from longjobs.engine.observability import logger
from longjobs.engine.receiver.attempt import closed_record
from longjobs.engine.receiver.models import Job
from longjobs.engine.receiver.types import (
    ADMISSION_ATTRIBUTE,
    MAX_MESSAGE_ATTRIBUTES,
    Carried,
    Delivery,
    Outcome,
    Receiver,
)
from longjobs.engine.settings import SQS_MAX_RETENTION_S

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

Handle = Callable[[Receiver, Delivery], Outcome]
"""How a message received from a waiting queue is handled: the receiver's `receive`, given by the caller
(admission sits below the receiver's entry point and never imports it)."""


UNPARK_CALLS = 10
"""Receive calls on a waiting queue per admission pass at most (100 messages)."""


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
    written on its lease, so a redelivery of this message (its deletion lost, a send retried after it
    landed) sends no second copy, and twin copies run once (`runs_this_copy`). False when the marker
    write lost its race (read again). Raises when SQS refuses: the record is reported failed and comes
    back to a marker without a copy, which sends it then (`park_again`)."""
    marker = closed_record(
        receiver,
        delivery,
        LeaseStatus.PARKED,
        kept_s=SQS_MAX_RETENTION_S,  # as long as a copy may be in the waiting queue
        job_type=job.type,
        job_id=job.job_id,
        history=history,
        waiting_since=since,
        waits=waits,
    )
    if not receiver.store.create(marker, replacing=replacing):
        return False
    _send_copy(receiver, delivery, queue_url, marker)
    logger.info("type full beyond the horizon: parked", extra={"message_id": delivery.message_id})
    return True


def send_parked_copy(receiver: Receiver, delivery: Delivery, marker: Lease) -> Outcome:
    """A parked message received again whose copy is not known to be sent (the earlier send failed, or
    landed unanswered: then two copies exist and one of them runs): the copy is sent now. Its type must
    still have a waiting queue (`is_live_marker`)."""
    queue_url = receiver.settings.waiting_queue_urls[marker.job_type or ""]
    _send_copy(receiver, delivery, queue_url, marker)
    logger.info("parked message received again: its copy is sent now", extra={"message_id": delivery.message_id})
    return Outcome.PARKED


def is_live_marker(receiver: Receiver, lease: Lease) -> bool:
    """Whether a lease is the PARKED marker of a type that still has a waiting queue (else the message
    is handled as any closed one: a new attempt)."""
    return lease.status is LeaseStatus.PARKED and lease.job_type in receiver.settings.waiting_queue_urls


def is_parked_copy(receiver: Receiver, delivery: Delivery) -> bool:
    """Whether a delivery is a parked copy received from a waiting queue that names its original (a copy
    sent back to wait for its job id keeps the attribute, on the jobs queue)."""
    return delivery.carried.parked_id is not None and receiver.queue_of(delivery) != receiver.queue_url


def claim_copy(receiver: Receiver, delivery: Delivery) -> tuple[bool, Lease | None]:
    """Whether a parked copy may run its original: when its marker names it (the first copy received
    claims the run), or when no marker names any (parked before markers existed, or expired). When it may
    not, the marker if an operator cancelled it (`longjobs.engine.cancel`: the copy goes to the DLQ)."""
    parked_id = delivery.carried.parked_id or ""
    claimed = receiver.store.claim_parked(parked_id, delivery.message_id)
    if claimed is not False:
        return True, None
    marker = receiver.store.get(parked_id)
    if marker is not None and marker.status is LeaseStatus.CANCELLED:
        logger.warning("copy of a cancelled parked message", extra={"message_id": delivery.message_id})
        return False, marker
    logger.warning(
        "twin copy of a parked message: acknowledged, the other copy runs",
        extra={"message_id": delivery.message_id, "parked_from": parked_id},
    )
    return False, None


def has_room(delivery: Delivery) -> bool:
    """Whether the copy has room for the admission attribute (else the message waits in flight)."""
    attributes = [name for name in delivery.message_attributes if name != ADMISSION_ATTRIBUTE]
    return len(attributes) < MAX_MESSAGE_ATTRIBUTES


def _send_copy(receiver: Receiver, delivery: Delivery, queue_url: str, marker: Lease) -> None:
    """Send the copy a PARKED marker describes, then note its id on the marker (best effort: without it a
    redelivery sends another copy, and the twins' claim runs one)."""
    carried = Carried(
        waiting_since=marker.waiting_since,
        original_id=delivery.original_id,
        waits=marker.waits,
        history=marker.history,
        parked_id=marker.message_id,
    )
    attributes = {k: v for k, v in delivery.message_attributes.items() if k != ADMISSION_ATTRIBUTE}
    attributes[ADMISSION_ATTRIBUTE] = {"DataType": "String", "StringValue": carried.encode()}
    sent = receiver.sqs.send_message(QueueUrl=queue_url, MessageBody=delivery.body, MessageAttributes=attributes)
    if not receiver.store.note_copy(marker, sent["MessageId"]):
        logger.info("parked marker changed meanwhile: copy id not noted", extra={"message_id": marker.message_id})


def unpark(receiver: Receiver, queue_url: str, want: int, *, handle: Handle, deadline: float = math.inf) -> int:
    """Receive up to `want` parked messages of a waiting queue and handle each as the receiver does (it
    starts if a slot is free for it, else waits in flight there); those done are deleted. No receive is
    made past `deadline`; what was received is still handled."""
    received = 0
    for _ in range(UNPARK_CALLS):
        if received >= want or receiver.clock.now() >= deadline:
            break
        messages = receiver.sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=min(10, want - received),
            AttributeNames=["ApproximateReceiveCount"],
            MessageAttributeNames=["All"],
        ).get("Messages", [])
        if not messages:
            break
        received += len(messages)
        deliveries = sorted(
            (waiting_delivery(message, queue_url) for message in messages),
            key=lambda d: d.carried.waiting_since or 0.0,
        )
        done: list[str] = []
        for delivery in deliveries:
            try:
                outcome = handle(receiver, delivery)
            except Exception as exc:  # it shows again after the waiting queue's VT
                logger.warning("unparked message failed", extra={"message_id": delivery.message_id, "error": str(exc)})
                continue
            if not outcome.deferred:
                done.append(delivery.receipt_handle)
        _delete(receiver.sqs, queue_url, done)
    return received


def waiting_delivery(message: Mapping[str, Any], queue_url: str) -> Delivery:
    """A message received from a waiting queue, as the receiver takes it."""
    return Delivery(
        message_id=message["MessageId"],
        receipt_handle=message["ReceiptHandle"],
        body=message["Body"],
        receive_count=int(message.get("Attributes", {}).get("ApproximateReceiveCount", "1")),
        source_arn=queue_url,
        message_attributes={
            name: {k: v for k, v in value.items() if k in ("DataType", "StringValue", "BinaryValue")}
            for name, value in message.get("MessageAttributes", {}).items()
        },
        queue_url=queue_url,
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
