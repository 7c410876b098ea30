"""Poison messages straight to the DLQ, with attributes that say what was wrong and where it came from."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from functions.settings import is_fifo_url

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

    from functions.receiver.models import BadInput
    from functions.receiver.service import Delivery

ERROR_MESSAGE_MAX = 1_024


def dlq_attributes(delivery: Delivery, bad: BadInput) -> dict[str, Any]:
    def text(value: str) -> dict[str, str]:
        return {"DataType": "String", "StringValue": value}

    return {
        "ErrorType": text(bad.error_type),
        "ErrorMessage": text(bad.message[:ERROR_MESSAGE_MAX]),
        "SourceQueue": text(delivery.source_arn),
        "OriginalMessageId": text(delivery.message_id),
        "ReceiveCount": {"DataType": "Number", "StringValue": str(delivery.receive_count)},
    }


def send_to_dlq(sqs: SQSClient, dlq_url: str, delivery: Delivery, bad: BadInput) -> None:
    """Copy the body unchanged to the DLQ. Raises if SQS refuses: the record then counts as failed and
    stays on the jobs queue, so nothing is lost.

    A FIFO DLQ (a FIFO queue's DLQ is FIFO) gets the record's group id, and the original message id as
    the deduplication id: a second copy of one poison message within SQS's 5 minutes is dropped."""
    attributes = dlq_attributes(delivery, bad)
    if is_fifo_url(dlq_url):
        sqs.send_message(
            QueueUrl=dlq_url,
            MessageBody=delivery.body,
            MessageAttributes=attributes,
            MessageGroupId=delivery.group_id or delivery.message_id,
            MessageDeduplicationId=delivery.message_id,
        )
    else:
        sqs.send_message(QueueUrl=dlq_url, MessageBody=delivery.body, MessageAttributes=attributes)
