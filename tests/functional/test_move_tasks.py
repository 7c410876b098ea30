"""SQS's message move tasks in the offline runtime (`longjobs.offline.movetasks`), on moto in-process.

The semantics checked are AWS's: API reference pages StartMessageMoveTask, ListMessageMoveTasks and
CancelMessageMoveTask (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_StartMessageMoveTask.html),
the DLQ redrive guide (redriven messages are new messages: https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-configure-dead-letter-queue-redrive.html)
and its troubleshooting page (`CouldNotDetermineMessageSource` for messages sent straight to a DLQ:
https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/troubleshooting-dlq-redrive.html).
Each task's mover runs in place when the test says so (no thread, no real time).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest
from moto import mock_aws

from longjobs.offline.movetasks import MoveTaskError, MoveTasks, encode_handle, moto_backends

ACCOUNT, REGION = "123456789012", "us-east-1"


@dataclass
class Fixture:
    sqs: Any
    tasks: MoveTasks
    pending: list[Callable[[], None]]
    now: list[float]
    waits: list[float] = field(default_factory=list)

    def queue(self, name: str, *, dlq_arn: str | None = None) -> tuple[str, str]:
        attributes = (
            {"RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 1})} if dlq_arn else {}
        )
        url = self.sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        self.tasks.watch(moto_backends(ACCOUNT, REGION))  # as the gateway does after each CreateQueue
        return url, self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]

    def dead_letter_by_sqs(self, source_url: str, body: str) -> None:
        """Send to the source and receive twice: its redrive policy (1 receive) moves it to the DLQ."""
        self.sqs.send_message(
            QueueUrl=source_url,
            MessageBody=body,
            MessageAttributes={"Team": {"DataType": "String", "StringValue": "data"}},
        )
        self.sqs.receive_message(QueueUrl=source_url, VisibilityTimeout=0)
        assert "Messages" not in self.sqs.receive_message(QueueUrl=source_url, VisibilityTimeout=0)

    def run_pending(self) -> None:
        while self.pending:
            self.pending.pop(0)()

    def bodies(self, url: str) -> list[str]:
        messages = self.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0).get(
            "Messages", []
        )
        return sorted(m["Body"] for m in messages)


@pytest.fixture
def moves() -> Iterator[Fixture]:
    with mock_aws():
        pending: list[Callable[[], None]] = []
        now = [1000.0]
        fixture = Fixture(boto3.client("sqs", region_name=REGION), MoveTasks(), pending, now)

        def wait(event: Any, seconds: float) -> bool:
            fixture.waits.append(seconds)
            now[0] += seconds
            return bool(event.is_set())

        fixture.tasks = MoveTasks(
            spawn=pending.append, clock=lambda: now[0], wait=wait, now_ms=lambda: 1_700_000_000_000
        )
        yield fixture


def test_move_task_returns_messages_sqs_dead_lettered_to_their_source_queue(moves: Fixture) -> None:
    dlq_url, dlq_arn = moves.queue("dlq")
    source_url, _ = moves.queue("jobs", dlq_arn=dlq_arn)
    moves.dead_letter_by_sqs(source_url, "a")
    moves.dead_letter_by_sqs(source_url, "b")

    handle = moves.tasks.start({"SourceArn": dlq_arn})["TaskHandle"]
    [running] = moves.tasks.list_tasks({"SourceArn": dlq_arn})["Results"]
    moves.run_pending()

    assert (running["Status"], running["TaskHandle"], running["ApproximateNumberOfMessagesToMove"]) == (
        "RUNNING",
        handle,
        2,
    )
    [done] = moves.tasks.list_tasks({"SourceArn": dlq_arn})["Results"]
    assert done == {
        "SourceArn": dlq_arn,
        "Status": "COMPLETED",
        "ApproximateNumberOfMessagesMoved": 2,
        "ApproximateNumberOfMessagesToMove": 2,
        "StartedTimestamp": 1_700_000_000_000,
    }, "no TaskHandle once ended; no DestinationArn or rate where none was given"
    messages = moves.sqs.receive_message(
        QueueUrl=source_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"], MessageSystemAttributeNames=["All"]
    )["Messages"]
    assert sorted(m["Body"] for m in messages) == ["a", "b"]
    assert all(m["MessageAttributes"]["Team"]["StringValue"] == "data" for m in messages), "attributes kept"
    assert all(m["Attributes"]["ApproximateReceiveCount"] == "1" for m in messages), "a new message: only this receive"
    assert moves.bodies(dlq_url) == []


def test_move_task_fails_on_a_message_sent_straight_to_the_dlq_without_a_destination(moves: Fixture) -> None:
    dlq_url, dlq_arn = moves.queue("dlq")
    source_url, source_arn = moves.queue("jobs", dlq_arn=dlq_arn)
    moves.sqs.send_message(QueueUrl=dlq_url, MessageBody="sent by the receiver")

    moves.tasks.start({"SourceArn": dlq_arn})
    moves.run_pending()

    [failed] = moves.tasks.list_tasks({"SourceArn": dlq_arn})["Results"]
    assert (failed["Status"], failed["FailureReason"], failed["ApproximateNumberOfMessagesMoved"]) == (
        "FAILED",
        "CouldNotDetermineMessageSource",
        0,
    )
    assert moves.bodies(dlq_url) == ["sent by the receiver"], "left in the DLQ, visible"

    moves.tasks.start({"SourceArn": dlq_arn, "DestinationArn": source_arn})
    moves.run_pending()
    assert moves.bodies(source_url) == ["sent by the receiver"], "a named destination takes any message"


def test_move_task_refuses_a_source_that_is_no_dead_letter_queue(moves: Fixture) -> None:
    _, dlq_arn = moves.queue("dlq")
    _, source_arn = moves.queue("jobs", dlq_arn=dlq_arn)

    with pytest.raises(MoveTaskError) as refused:
        moves.tasks.start({"SourceArn": source_arn})
    with pytest.raises(MoveTaskError) as missing:
        moves.tasks.start({"SourceArn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:nowhere"})
    with pytest.raises(MoveTaskError) as no_destination:
        moves.tasks.start({"SourceArn": dlq_arn, "DestinationArn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:nowhere"})
    with pytest.raises(MoveTaskError) as too_fast:
        moves.tasks.start({"SourceArn": dlq_arn, "MaxNumberOfMessagesPerSecond": 501})

    assert (refused.value.code, refused.value.message) == (
        "InvalidParameterValue",
        "Source queue must be configured as a Dead Letter Queue.",
    )
    assert (missing.value.code, missing.value.status) == ("ResourceNotFoundException", 404)
    assert "DestinationArn" in no_destination.value.message
    assert (too_fast.value.code, "MaxNumberOfMessagesPerSecond" in too_fast.value.message) == (
        "InvalidParameterValue",
        True,
    )


def test_move_task_allows_one_active_task_per_source(moves: Fixture) -> None:
    _, dlq_arn = moves.queue("dlq")
    _, source_arn = moves.queue("jobs", dlq_arn=dlq_arn)
    moves.tasks.start({"SourceArn": dlq_arn, "DestinationArn": source_arn})

    with pytest.raises(MoveTaskError, match="There is already a task running"):
        moves.tasks.start({"SourceArn": dlq_arn, "DestinationArn": source_arn})
    moves.run_pending()
    moves.tasks.start({"SourceArn": dlq_arn, "DestinationArn": source_arn})

    listed = moves.tasks.list_tasks({"SourceArn": dlq_arn, "MaxResults": 10})["Results"]
    assert [t["Status"] for t in listed] == ["RUNNING", "COMPLETED"], "the most recent first"
    assert len(moves.tasks.list_tasks({"SourceArn": dlq_arn})["Results"]) == 1, "one by default"


def test_move_task_keeps_to_its_rate(moves: Fixture) -> None:
    dlq_url, dlq_arn = moves.queue("dlq")
    source_url, source_arn = moves.queue("jobs", dlq_arn=dlq_arn)
    for n in range(5):
        moves.sqs.send_message(QueueUrl=dlq_url, MessageBody=str(n))

    moves.tasks.start({"SourceArn": dlq_arn, "DestinationArn": source_arn, "MaxNumberOfMessagesPerSecond": 2})
    moves.run_pending()

    assert moves.waits == [0.5, 0.5, 0.5, 0.5], "the n-th message no earlier than n / 2 s after the start"
    [done] = moves.tasks.list_tasks({"SourceArn": dlq_arn})["Results"]
    assert (done["Status"], done["ApproximateNumberOfMessagesMoved"], done["MaxNumberOfMessagesPerSecond"]) == (
        "COMPLETED",
        5,
        2,
    )
    assert done["DestinationArn"] == source_arn
    assert moves.bodies(source_url) == ["0", "1", "2", "3", "4"]


def test_move_task_cancel_stops_a_running_task_and_refuses_an_ended_one(moves: Fixture) -> None:
    dlq_url, dlq_arn = moves.queue("dlq")
    _, source_arn = moves.queue("jobs", dlq_arn=dlq_arn)
    for n in range(3):
        moves.sqs.send_message(QueueUrl=dlq_url, MessageBody=str(n))
    handle = moves.tasks.start({"SourceArn": dlq_arn, "DestinationArn": source_arn})["TaskHandle"]

    assert moves.tasks.cancel({"TaskHandle": handle}) == {"ApproximateNumberOfMessagesMoved": 0}
    [cancelling] = moves.tasks.list_tasks({"SourceArn": dlq_arn})["Results"]
    moves.run_pending()
    [cancelled] = moves.tasks.list_tasks({"SourceArn": dlq_arn})["Results"]

    assert (cancelling["Status"], "TaskHandle" in cancelling) == ("CANCELLING", False)
    assert (cancelled["Status"], cancelled["ApproximateNumberOfMessagesMoved"]) == ("CANCELLED", 0)
    assert moves.bodies(dlq_url) == ["0", "1", "2"], "nothing moved after the cancel"
    with pytest.raises(MoveTaskError, match="RUNNING"):
        moves.tasks.cancel({"TaskHandle": handle})
    with pytest.raises(MoveTaskError, match=r"^Value for parameter TaskHandle is invalid\.$"):
        moves.tasks.cancel({"TaskHandle": "not-a-handle"})
    with pytest.raises(MoveTaskError, match=r"^Task does not exist\.$") as unknown:  # this source's, no such task
        moves.tasks.cancel({"TaskHandle": encode_handle("no-such-task", dlq_arn)})
    assert unknown.value.status == 404
