"""Poison messages straight to the DLQ, with attributes that say what was wrong and where it came from."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from longjobs.engine.delivery.types import message_bytes
from longjobs.engine.settings import MESSAGE_MAX_BYTES, is_fifo_url

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

    from longjobs.engine.delivery.models import BadInput
    from longjobs.engine.delivery.types import Delivery
    from longjobs.engine.lease.types import Attempt

ERROR_MESSAGE_MAX = 1_024
ORIGINAL_MESSAGE_ID = "OriginalMessageId"
"""The DLQ copy's attribute that names the message it copies."""
LEFT_OUT_LAST_FIRST = ("Attempts", "ReceiveCount", ORIGINAL_MESSAGE_ID, "SourceQueue")
"""The DLQ copy's attributes left out, in this order, when even a cut reason leaves the copy too large
(`fitted`): `ErrorType` and `ErrorMessage` are kept."""
ATTEMPTS_MAX_BYTES = 32_768
"""The `Attempts` attribute's JSON at most: far inside SQS's message size (attributes count toward it)."""
ATTEMPT_ERROR_MAX = 1_024
EXHAUSTED = "AttemptsExhausted"
STARTS_REFUSED = "StartsRefused"
"""DLQ reason of a message whose executions Step Functions kept refusing to start (`max_refused_starts`)."""
CLAIM_UNKNOWN = "ClaimUnknown"
"""DLQ reason of a parked or requeued copy whose run another copy claimed so long ago that whether it ran
can no longer be told (`longjobs.engine.delivery.copies.claim_answer`): kept for an operator, never run
twice."""
JOB_ID_BUSY = "JobIdBusy"
"""DLQ reason of a message that waited in place for its job id (FIFO, or no room for a copy's attribute)
until its receives or its queue's retention were nearly spent: the DLQ keeps it, the redrive would not
say why."""
RETENTION_RUNNING_OUT = "RetentionRunningOut"
"""DLQ reason of a message still waiting for a slot near its queue's retention that cannot be parked
(its type has no waiting queue, or it is too large for a marker): the DLQ keeps it, SQS would not."""


def _text(value: str) -> dict[str, str]:
    return {"DataType": "String", "StringValue": value}


def attempts_json(history: Sequence[Attempt], limit: int = ATTEMPTS_MAX_BYTES) -> str:
    """The attempts' history as JSON within `limit` bytes, each error as its sentence (`<Error>: <Cause>`)
    cut short first, then the oldest attempts left out (the count of those left out is kept as
    `{"omitted": n}` first)."""
    entries = [{**a.to_data(), "error": str(a.error)[:ATTEMPT_ERROR_MAX] if a.error else None} for a in history]
    omitted = 0
    while True:
        data: list[dict[str, Any]] = ([{"omitted": omitted}] if omitted else []) + entries
        text = json.dumps(data, separators=(",", ":"))
        if len(text.encode()) <= limit or not entries:
            return text
        entries = entries[1:]
        omitted += 1


def exhausted_attributes(
    delivery: Delivery, history: Sequence[Attempt], *, error_type: str = EXHAUSTED, message: str | None = None
) -> dict[str, Any]:
    """The DLQ attributes of a message sent there after its attempts: `ErrorMessage` is the reason (the
    last attempt's error and its cause, `<Error>: <Cause>`) cut to `ERROR_MESSAGE_MAX` characters; the
    REJECTED lease the receiver keeps holds it whole."""
    if message:
        last = message
    elif history:
        last = str(history[-1].error or "no error recorded")
    else:
        last = "no attempt recorded"
    attributes = {
        "ErrorType": _text(error_type),
        "ErrorMessage": _text(last[:ERROR_MESSAGE_MAX]),
        "SourceQueue": _text(delivery.source_arn),
        ORIGINAL_MESSAGE_ID: _text(delivery.original_id),
        "ReceiveCount": {"DataType": "Number", "StringValue": str(delivery.receive_count)},
    }
    return fitted(delivery.body, attributes, history)


def fitted(body: str, attributes: dict[str, Any], history: Sequence[Attempt] | None = None) -> dict[str, Any]:
    """`attributes` (with `Attempts`, the history's JSON, when `history` is given) within SQS's message
    size beside `body`: the attempts cut to the room left (oldest first, `attempts_json`), then the
    reason's text. A body near SQS's limit would otherwise have its DLQ copy refused on every receive and
    reach the DLQ only through the queue's redrive, with no reason."""
    sized = dict(attributes)
    if history is not None:
        room = MESSAGE_MAX_BYTES - message_bytes(body, sized) - len("Attempts") - len("String")
        sized["Attempts"] = _text(attempts_json(history, limit=max(0, min(ATTEMPTS_MAX_BYTES, room))))
    reason = sized.pop("ErrorMessage", None)
    kept_for_reason = (
        0 if reason is None else _REASON_BYTES + min(REASON_KEPT_BYTES, len(reason["StringValue"].encode()))
    )
    for name in LEFT_OUT_LAST_FIRST:  # a body within a few hundred bytes of the limit: the reason stays
        if message_bytes(body, sized) + kept_for_reason <= MESSAGE_MAX_BYTES:
            break
        sized.pop(name, None)
    if reason is not None:  # the reason's text, cut to the room left
        room = MESSAGE_MAX_BYTES - message_bytes(body, sized) - len("ErrorMessage") - len("String")
        text = reason["StringValue"].encode()[: max(1, room)].decode(errors="ignore") or "-"
        sized["ErrorMessage"] = _text(text)
    return sized


_REASON_BYTES = len("ErrorMessage") + len("String")
REASON_KEPT_BYTES = 64
"""What of the reason's text (`ErrorMessage`) a DLQ copy keeps before anything but its type is left out."""


def send_exhausted_to_dlq(
    sqs: SQSClient,
    dlq_url: str,
    delivery: Delivery,
    history: Sequence[Attempt],
    *,
    error_type: str = EXHAUSTED,
    message: str | None = None,
) -> str:
    """Copy the body unchanged to the DLQ with the attempts' history (`error_type`: its attempts used
    up, or its starts refused); returns the copy's message id. Raises if SQS refuses: the record then
    counts as failed and stays on its queue (it is deleted only after this send succeeded)."""
    return send_copy(
        sqs, dlq_url, delivery, exhausted_attributes(delivery, history, error_type=error_type, message=message)
    )


def dlq_attributes(delivery: Delivery, bad: BadInput) -> dict[str, Any]:
    def text(value: str) -> dict[str, str]:
        return {"DataType": "String", "StringValue": value}

    attributes = {
        "ErrorType": text(bad.error_type),
        "ErrorMessage": text(bad.message[:ERROR_MESSAGE_MAX]),
        "SourceQueue": text(delivery.source_arn),
        ORIGINAL_MESSAGE_ID: text(delivery.message_id),
        "ReceiveCount": {"DataType": "Number", "StringValue": str(delivery.receive_count)},
    }
    return fitted(delivery.body, attributes)


def send_to_dlq(sqs: SQSClient, dlq_url: str, delivery: Delivery, bad: BadInput) -> None:
    """Copy the body unchanged to the DLQ. Raises if SQS refuses: the record then counts as failed and
    stays on the jobs queue, so nothing is lost.

    A FIFO DLQ (a FIFO queue's DLQ is FIFO) gets the record's group id, and the original message id as
    the deduplication id: a second copy of one poison message within SQS's 5 minutes is dropped."""
    send_copy(sqs, dlq_url, delivery, dlq_attributes(delivery, bad))


def send_copy(sqs: SQSClient, dlq_url: str, delivery: Delivery, attributes: dict[str, Any]) -> str:
    """The body unchanged, with `attributes`; on a FIFO DLQ with the record's group and its message id as
    the deduplication id. Returns the DLQ copy's message id."""
    if is_fifo_url(dlq_url):
        sent = sqs.send_message(
            QueueUrl=dlq_url,
            MessageBody=delivery.body,
            MessageAttributes=attributes,
            MessageGroupId=delivery.group_id or delivery.message_id,
            MessageDeduplicationId=delivery.message_id,
        )
    else:
        sent = sqs.send_message(QueueUrl=dlq_url, MessageBody=delivery.body, MessageAttributes=attributes)
    return sent["MessageId"]
