"""SQS's message size counts the body and every attribute's name, type and value, 256 KiB by default
(https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-messages.html, and
SendMessage's `MessageAttributes`: "All parts of the message attribute, including Name, Type, and Value,
are part of the message size restriction"). A copy the processor sends carries attributes of its own
(the DLQ's reason and attempts, a waiting copy's admission attribute), so a message near the limit must
still reach the DLQ with its reason, and wait where it is rather than have its copy refused on every
receive. On the simulated AWS and a fake clock."""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError

from longjobs.engine.lease.types import Attempt, LastError
from longjobs.engine.receiver.dlq import ATTEMPTS_MAX_BYTES, EXHAUSTED, send_exhausted_to_dlq
from longjobs.engine.receiver.types import MESSAGE_MAX_BYTES, Delivery, Outcome, message_bytes
from tests.sim.test_requeue import JOB
from tests.sim.test_retention import bench


def test_message_size_simulated_sqs_counts_attributes_as_aws_does() -> None:
    b = bench()
    b.aws.sqs.send_message(QueueUrl=b.jobs_url, MessageBody="x" * MESSAGE_MAX_BYTES)  # the limit itself: taken
    attribute = {"Team": {"DataType": "String", "StringValue": "data"}}  # 4 + 6 + 4 bytes

    with pytest.raises(ClientError) as refused:
        b.aws.sqs.send_message(
            QueueUrl=b.jobs_url, MessageBody="x" * (MESSAGE_MAX_BYTES - 13), MessageAttributes=attribute
        )

    assert refused.value.response["Error"]["Code"] == "InvalidParameterValue"
    assert "Message must be shorter than 262144 bytes" in refused.value.response["Error"]["Message"]
    b.aws.sqs.send_message(QueueUrl=b.jobs_url, MessageBody="x" * (MESSAGE_MAX_BYTES - 14), MessageAttributes=attribute)


def test_message_size_a_large_message_out_of_attempts_reaches_the_dlq_with_its_reason() -> None:
    b = bench()
    history = [
        Attempt(n, f"exec-{n}", "RELEASED", LastError("JobFailed", "c" * 1_000), ended_at=float(n))
        for n in range(1, 41)
    ]
    delivery = Delivery(
        message_id="m-1", receipt_handle="h", body="x" * 240_000, receive_count=41, source_arn="arn:aws:sqs:q"
    )

    send_exhausted_to_dlq(b.aws.sqs, b.dlq_url, delivery, history)  # before: refused, and on every receive after

    [copy] = b.aws.sqs.receive_message(QueueUrl=b.dlq_url, MessageAttributeNames=["All"])["Messages"]
    attributes = copy["MessageAttributes"]
    assert attributes["ErrorType"]["StringValue"] == EXHAUSTED
    assert attributes["ErrorMessage"]["StringValue"].startswith("JobFailed: ccc")
    attempts = json.loads(attributes["Attempts"]["StringValue"])
    assert attempts[0]["omitted"] > 0 and attempts[-1]["attempt"] == 40, (
        "the newest attempts kept, the count of the rest"
    )
    assert len(attributes["Attempts"]["StringValue"]) < ATTEMPTS_MAX_BYTES
    assert message_bytes(copy["Body"], attributes) <= MESSAGE_MAX_BYTES


def test_message_size_a_message_too_large_for_a_copy_waits_for_its_job_id_in_place() -> None:
    b = bench(limit=9, job_wait_base_s=10, job_wait_cap_s=20)
    first = b.send(JOB)
    assert b.deliver_jobs_queue() == {first: Outcome.STARTED}
    body = json.dumps({"job_id": JOB, "type": "wait", "params": {"seconds": 60}})
    large = {"Payload": {"DataType": "String", "StringValue": "p" * (MESSAGE_MAX_BYTES - 1_000)}}
    second = str(b.aws.sqs.send_message(QueueUrl=b.jobs_url, MessageBody=body, MessageAttributes=large)["MessageId"])

    assert b.deliver_jobs_queue() == {second: Outcome.HELD}, "before: its copy refused, the record failed"
    assert b.receiver.store.get(second) is None, "no marker: no copy was made"
    assert b.jobs_ids() == sorted([first, second]), "it waits hidden on its queue"
