"""The event source mapping's Lambda semantics, on a recording stand-in for SQS (no network)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from longjobs.offline.esm import EventSourceMapping, MappingConfig, failed_ids
from longjobs.offline.lambdas import InvocationCrashed, LambdaContext

ARN = "arn:aws:sqs:us-east-1:123456789012:jobs"


class RecordingSqs:
    def __init__(self) -> None:
        self.deleted: list[str] = []

    def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, str]]) -> dict[str, Any]:
        self.deleted += [entry["ReceiptHandle"] for entry in Entries]
        return {"Successful": [{"Id": entry["Id"]} for entry in Entries], "Failed": []}


def message(n: int) -> dict[str, Any]:
    return {
        "MessageId": f"m{n}",
        "ReceiptHandle": f"h{n}",
        "Body": "{}",
        "Attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1700000000000"},
        "MessageAttributes": {"ScenarioJobId": {"DataType": "String", "StringValue": f"job{n}"}},
        "MD5OfBody": "99914b932bd37a50b983c5e7c90ae93b",
    }


def invoke(handler: Any, *, timeout_s: float = 30) -> tuple[RecordingSqs, list[dict[str, Any]]]:
    sqs = RecordingSqs()
    events: list[dict[str, Any]] = []

    def recording_handler(event: dict[str, Any], context: LambdaContext) -> Any:
        events.append(event)
        assert context.function_name == "receiver" and context.get_remaining_time_in_millis() > 0
        return handler(event, context)

    mapping = EventSourceMapping(
        sqs,  # type: ignore[arg-type]
        MappingConfig(queue_url="q", queue_arn=ARN, region="us-east-1", function_timeout_s=timeout_s),
        recording_handler,
    )
    mapping.invoke([message(1), message(2), message(3)])
    return sqs, events


def test_mapping_deletes_records_not_reported_failed() -> None:
    sqs, [event] = invoke(lambda event, context: {"batchItemFailures": [{"itemIdentifier": "m2"}]})

    assert sqs.deleted == ["h1", "h3"], "the reported record is left alone"
    first = event["Records"][0]
    assert (first["messageId"], first["receiptHandle"], first["eventSource"], first["eventSourceARN"]) == (
        "m1",
        "h1",
        "aws:sqs",
        ARN,
    )
    assert first["attributes"]["ApproximateReceiveCount"] == "1"
    assert first["messageAttributes"]["ScenarioJobId"]["stringValue"] == "job1"


def test_mapping_deletes_the_whole_batch_when_nothing_failed() -> None:
    sqs, _ = invoke(lambda event, context: {"batchItemFailures": []})

    assert sqs.deleted == ["h1", "h2", "h3"]


def crash(event: dict[str, Any], context: LambdaContext) -> Any:
    raise RuntimeError("out of memory")


def die(event: dict[str, Any], context: LambdaContext) -> Any:
    raise InvocationCrashed("killed at StartExecution")


def overrun(event: dict[str, Any], context: LambdaContext) -> Any:
    time.sleep(0.2)  # past the 0.1 s timeout of these invocations
    return {"batchItemFailures": []}


@pytest.mark.parametrize(
    "handler",
    [
        crash,
        die,
        overrun,
        lambda event, context: {"batchItemFailures": [{"itemIdentifier": "not-in-batch"}]},
        lambda event, context: {"batchItemFailures": [{"id": "m1"}]},
        lambda event, context: "ok",
    ],
    ids=["crash", "died", "timeout", "unknown-id", "malformed-item", "not-a-dict"],
)
def test_mapping_fails_the_whole_batch_on_a_bad_invocation(handler: Any) -> None:
    sqs, _ = invoke(handler, timeout_s=0.1)

    assert sqs.deleted == [], "every record stays for SQS to deliver again"


def test_offline_esm_partial_batch_response_parsing() -> None:
    batch = {"a", "b"}
    assert failed_ids(None, batch) == set()
    assert failed_ids({}, batch) == set()
    assert failed_ids({"batchItemFailures": [{"itemIdentifier": "b"}]}, batch) == {"b"}
    assert failed_ids({"batchItemFailures": "b"}, batch) is None


class PollingSqs(RecordingSqs):
    """Receives hand out `batches` in turn; every call is logged in order."""

    def __init__(self, batches: list[list[dict[str, Any]]]) -> None:
        super().__init__()
        self.batches = batches
        self.calls: list[str] = []

    def receive_message(self, **_: Any) -> dict[str, Any]:
        self.calls.append("receive")
        return {"Messages": self.batches.pop(0) if self.batches else []}

    def change_message_visibility(self, **_: Any) -> dict[str, Any]:
        self.calls.append("visible")
        return {}


def test_mapping_runs_an_action_right_before_its_next_receive() -> None:
    sqs = PollingSqs([[message(1)]])
    seen: list[str] = []

    def handler(event: dict[str, Any], context: LambdaContext) -> Any:
        assert received.is_set(), "the action's receive is reported before the handler runs"
        return {"batchItemFailures": []}

    mapping = EventSourceMapping(
        sqs,  # type: ignore[arg-type]
        MappingConfig(queue_url="q", queue_arn=ARN, region="us-east-1"),
        handler,
        on_batch=lambda messages: seen.extend(m["MessageId"] for m in messages),
    )
    received = mapping.before_next_poll(lambda: sqs.change_message_visibility())
    assert not received.is_set()

    mapping.poll()
    again = mapping.before_next_poll(lambda: sqs.change_message_visibility())
    mapping.poll()

    assert sqs.calls == ["visible", "receive", "visible", "receive"]
    assert seen == ["m1"]
    assert again.is_set(), "set after an empty receive too"


def test_mapping_event_carries_binary_attributes_in_base64_as_lambda_does() -> None:
    """Lambda's SQS event carries a binary message attribute's value base64-encoded
    (https://docs.aws.amazon.com/lambda/latest/dg/with-sqs.html, "Example standard queue message event"):
    the receiver decodes it back to the bytes the producer sent."""
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

    from longjobs.engine.delivery.types import Delivery
    from longjobs.offline.lambdas import sqs_event

    sent = {
        **message(1),
        "MessageAttributes": {
            "blob": {"DataType": "Binary", "BinaryValue": b"\x00\xffraw"},
            "kind": {"DataType": "String", "StringValue": "nightly"},
        },
    }
    [record] = sqs_event([sent], source_arn=ARN, region="us-east-1")["Records"]
    assert record["messageAttributes"]["blob"]["binaryValue"] == "AP9yYXc="

    delivery = Delivery.from_record(SQSRecord(record))
    assert delivery.message_attributes == sent["MessageAttributes"]
